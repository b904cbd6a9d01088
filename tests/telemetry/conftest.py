"""A small hand-made RunResult on a real topology (2 servers of 8 GPUs, RoCEv2 leaf-spine), with
round numbers on chosen links so the metrics can be checked by hand."""

from __future__ import annotations

import numpy as np
import pytest

from gpuwait.steps.result import (
    BREAKDOWN_CATEGORIES,
    CollectiveStat,
    LinkStats,
    RunResult,
    StepBreakdown,
    TaskTable,
)
from gpuwait.topology.model import LINK_KINDS
from gpuwait.topology.presets import build_preset

STEP_S = 0.1
STEPS = 5
COMPUTE_S = 0.06         # every GPU computes 60 % of the step
NIC_BYTES = 4096 * 1000  # per step on s0.nic0 -> leaf0: exactly 1000 full 4 KiB packets
NVLINK_BYTES = 2e9       # per step on s0.gpu1 -> s0.nvsw
PCIE_BYTES = 5e8         # per step on s0.gpu0 -> s0.pcie0


def _topology(transport: str):
    topo = build_preset("rocev2-400g-2tier", servers=2)
    if transport == "rocev2":
        return topo
    from dataclasses import replace

    spec = topo.spec.model_copy(update={"transport": topo.spec.transport.model_copy(update={"name": transport})})
    return replace(topo, spec=spec)


def make_result(topo, n_gpus: int = 16) -> RunResult:
    links = np.zeros(topo.n_links)
    links[topo.link_id("s0.nic0->leaf0")] = NIC_BYTES
    links[topo.link_id("leaf0->s1.nic0")] = NIC_BYTES
    links[topo.link_id("s0.gpu1->s0.nvsw")] = NVLINK_BYTES
    links[topo.link_id("s0.nvsw->s0.gpu2")] = NVLINK_BYTES
    links[topo.link_id("s0.gpu0->s0.pcie0")] = PCIE_BYTES
    util = links / topo.link_capacity_Bps / STEP_S
    per_gpu = {c: np.zeros(n_gpus) for c in BREAKDOWN_CATEGORIES}
    per_gpu["compute"][:] = COMPUTE_S
    per_gpu["exposed_comm"][:] = 0.03
    per_gpu["data_wait"][:] = 0.01
    breakdown = StepBreakdown(step_time_s=STEP_S, per_gpu_s=per_gpu, exposed_comm_s={"dp all_reduce": 0.03},
                              ideal_step_time_s=0.07, mfu=0.4, model_flops_per_step=1e15, tokens_per_step=4096)
    empty = np.zeros(0)
    tasks = TaskTable(rank=empty.astype(np.int32), step=empty.astype(np.int32), kind=empty.astype(str),
                      name=empty.astype(str), group=empty.astype(str), start_s=empty, end_s=empty, exposed_s=empty)
    tiers = np.asarray(LINK_KINDS)[topo.link_kind]  # the engine's tier labels are finer; any label will do
    stats = LinkStats(topo.link_names(), tiers, util, links)
    collectives = (CollectiveStat("dp all_reduce bucket", "dp", "all_reduce", n_gpus, 256e6, 1, 0.02, 12.8, 24.0,
                                  "ring", "Simple"),)
    return RunResult(case="toy", workload="toy", cluster=topo.name, steps=STEPS, breakdown=breakdown,
                     collectives=collectives, links=stats, tasks=tasks, step_times_s=np.full(STEPS, STEP_S))


@pytest.fixture(scope="module")
def roce_topo():
    return _topology("rocev2")


@pytest.fixture(scope="module")
def ib_topo():
    return _topology("infiniband")


@pytest.fixture(scope="module")
def tcp_topo():
    return _topology("tcp")
