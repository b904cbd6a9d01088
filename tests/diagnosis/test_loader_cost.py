"""What a data-loader finding says the step loses, in a pipeline (fresh base 27,000,000, seed 27,000,003)."""

from __future__ import annotations

import numpy as np
import pytest

from gpuwait.diagnosis import rules
from gpuwait.diagnosis.observe import Observation
from gpuwait.spec import ClusterSpec
from gpuwait.topology.presets import build_cluster

TOPO = build_cluster(ClusterSpec.model_validate({
    "servers": 4, "server": {"gpus": 4, "nics": 4, "nic_speed": "100Gbps", "pcie_switches": 2, "cpus": 2},
    "fabric": {"tiers": 2, "switch_radix": 8}}))
N_GPUS = TOPO.gpu_node.size


def _pipeline_obs(first_stage_wait_s: float) -> Observation:
    """A 4-stage pipeline, one stage per server: only the first stage's GPUs wait for data; the later
    stages wait the same time in their bubble (they take their input from the stage before)."""
    first = np.arange(N_GPUS) < N_GPUS // 4
    zeros = np.zeros(N_GPUS)
    data = np.where(first, first_stage_wait_s, 0.0)
    phases = {"compute": zeros + 1.0, "straggler_wait": zeros, "data_wait": data, "exposed_comm": zeros,
              "bubble": np.where(first, 0.0, first_stage_wait_s)}
    return Observation(TOPO, step_time_s=1.0 + first_stage_wait_s, per_gpu_s=phases, storage_read=False,
                       gpu_names=[TOPO.node_name[g] for g in TOPO.gpu_node.ravel()])


def test_a_pipelines_starved_loader_costs_the_first_stages_wait_not_the_mean_over_every_gpu():
    # seed 27,000,003 reported 12.7 s lost where the step lost 50.7 s: the mean over four stages of which one loads
    out = rules.RuleOutput()
    rules.dataloader(_pipeline_obs(2.0), out)
    [found] = out.candidates
    assert (found.kind, found.component) == ("dataloader-starvation", "all")
    assert found.lost_s == pytest.approx(2.0)
    assert found.evidence["data_wait_ms"] == pytest.approx(2000.0)
