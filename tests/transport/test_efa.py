"""The EFA transport profile and the AWS server templates: cited values, and a 2-server perf on each."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwait.runner.perf import SweepArgs, perf_sweep
from gpuwait.topology.servers import SERVER_TEMPLATES
from gpuwait.transport.profiles import TRANSPORTS

CLUSTERS = Path(__file__).resolve().parents[1] / "nccltests" / "data" / "reference" / "clusters"


def test_efa_profile_is_reliable_without_pfc():
    efa = TRANSPORTS["efa"]
    # SRD (Shalev et al., IEEE Micro 2020): retransmits in the NIC, no PFC
    assert efa.lossless and efa.flow_control == "none" and efa.rdma
    # aws-ofi-nccl v1.8.1 platform-aws.c: latency 75.0 us on p4d/p4de/p5
    assert efa.nccl_net_latency_s == pytest.approx(75e-6)
    # existing transports report no plugin latency, so their predictions do not move
    assert all(TRANSPORTS[n].nccl_net_latency_s == 0.0 for n in ("infiniband", "rocev2", "tcp"))


@pytest.mark.parametrize("name, gpu, nics, gbps", [
    ("p4d-24xlarge", "A100-SXM4-40GB", 4, 100), ("p4de-24xlarge", "A100-SXM4-80GB", 4, 100),
    ("p5-48xlarge", "H100-SXM5-80GB", 8, 400)])
def test_aws_templates(name, gpu, nics, gbps):
    t = SERVER_TEMPLATES[name]
    assert (t.gpu_model, t.gpus, t.nics, t.nic_speed * 8 / 1e9) == (gpu, 8, nics, gbps)
    # 400 Gb/s of EFA on p4d/p4de, 3200 Gb/s on p5 (AWS instance pages)
    assert t.nics * t.nic_ports * t.nic_speed * 8 / 1e9 == (400 if nics == 4 else 3200)


@pytest.mark.parametrize("cluster", ["aws-p4de-efa", "aws-p5-efa"])
def test_two_server_perf_runs(cluster):
    sweep = perf_sweep("all_reduce", SweepArgs(min_bytes=1 << 20, max_bytes=1 << 30, step_factor=32),
                       str(CLUSTERS / f"{cluster}.yaml"), 2, 8, {})
    assert sweep.n_ranks == 16
    assert all(r.oop_busbw_GBps > 0 for r in sweep.rows)
