"""The misses of the 11,000,000 fresh score (issue 14): each fix on a small case the old rule got wrong."""

from __future__ import annotations

import numpy as np
import pytest

from gpuwait.diagnosis import run
from gpuwait.diagnosis.observe import Observation
from gpuwait.diagnosis.rules import Candidate, RuleOutput
from gpuwait.spec import ClusterSpec
from gpuwait.topology.presets import build_cluster

TOPO = build_cluster(ClusterSpec.model_validate({
    "servers": 4, "server": {"gpus": 4, "nics": 4, "nic_speed": "100Gbps", "pcie_switches": 2, "cpus": 2},
    "fabric": {"tiers": 2, "switch_radix": 8}}))


def _ranked(monkeypatch, *candidates: Candidate) -> list[str]:
    monkeypatch.setattr(run, "evaluate", lambda obs: RuleOutput(list(candidates)))
    diagnosis = run.diagnose_observation(Observation(TOPO, step_time_s=1.0, baseline_step_time_s=1.0))
    return [f.kind for f in diagnosis.findings]


def test_direct_evidence_margin_is_relative(monkeypatch):
    """A direct 0.3 % cause no longer ranks above an inferred 2 % one (an absolute 2 % of the step
    did), while a direct cause still wins a near tie of large costs."""
    small_direct = Candidate("link-loss", "leaf0->spine0", 1.0, {}, "", "", direct=True, lost_s=0.003)
    inferred = Candidate("ecmp-collision", "leaf1->spine1", 1.0, {}, "", "", lost_s=0.02)
    assert _ranked(monkeypatch, small_direct, inferred) == ["ecmp-collision", "link-loss"]
    near_tie = Candidate("link-loss", "leaf0->spine0", 1.0, {}, "", "", direct=True, lost_s=0.09)
    larger = Candidate("ecmp-collision", "leaf1->spine1", 1.0, {}, "", "", lost_s=0.10)
    assert _ranked(monkeypatch, near_tie, larger) == ["link-loss", "ecmp-collision"]


def test_reads_from_saturated_storage_hold_the_collectives_links():
    """Storage servers sending at their ports' rate while the GPUs do not wait for data: the job
    waits on the reads in the links it shares (seed 11,000,227: an 18.7 % loss on a 3-tier fabric
    was silent here, the storage servers read as the bottleneck, and named an ECMP collision)."""
    from gpuwait.diagnosis.rules import RULES
    from gpuwait.topology.model import LinkKind

    n = TOPO.gpu_node.size
    link = int(next(iter(np.flatnonzero(TOPO.link_kind == LinkKind.FABRIC))))
    rate = TOPO.link_capacity_Bps.astype(float)
    carried = np.zeros(TOPO.n_links)
    carried[link] = 2.0 * rate[link] * 0.1  # 0.2 s of bytes on a 1 s step: half the job's, half reads
    collectives = np.zeros(TOPO.n_links)
    collectives[link] = rate[link] * 0.1
    per_gpu = {"compute": np.full(n, 0.7), "straggler_wait": np.zeros(n), "data_wait": np.zeros(n),
               "exposed_comm": np.full(n, 0.3)}
    obs = Observation(TOPO, step_time_s=1.0, per_gpu_s=per_gpu, storage_read=True, storage_busy=("stor0",),
                      link_bytes=carried, link_rate_Bps=rate, link_nominal_Bps=rate,
                      link_phase_bytes={"dp all_gather": collectives},
                      link_users={link: ["dp all_gather", "storage read"]})
    out = RuleOutput()
    RULES["storage-contention"].check(obs, out)
    assert [c.kind for c in out.candidates] == ["storage-contention"]
    # reads a tenth of the link all step leave the collectives 9/10 of it (max-min): their 0.1 s takes 0.1 / 0.9
    assert out.candidates[0].lost_s == pytest.approx(0.1 * 0.1 / 0.9)
    heavy = carried.copy()
    heavy[link] = rate[link] * (0.1 + 0.8)  # reads 0.8 of the link: late by 0.1 x 0.8 / 0.2, capped at the exposed 0.3 s
    out = RuleOutput()
    RULES["storage-contention"].check(Observation(
        TOPO, step_time_s=1.0, per_gpu_s=per_gpu, storage_read=True, storage_busy=("stor0",), link_bytes=heavy,
        link_rate_Bps=rate, link_nominal_Bps=rate, link_phase_bytes={"dp all_gather": collectives},
        link_users={link: ["dp all_gather", "storage read"]}), out)
    assert out.candidates[0].lost_s == pytest.approx(0.3)
    waiting = dict(per_gpu, data_wait=np.full(n, 0.2))  # GPUs waiting on busy storage: storage-slow's, not this
    out = RuleOutput()
    RULES["storage-contention"].check(Observation(TOPO, step_time_s=1.0, per_gpu_s=waiting, storage_read=True,
                                                  storage_busy=("stor0",)), out)
    assert out.candidates == []


def _bundle(samples):
    from pathlib import Path

    from gpuwait.telemetry.bundle import TelemetryBundle
    from gpuwait.telemetry.metricset import MetricSet

    return TelemetryBundle(root=Path("."), metric_files={"export.prom": MetricSet.from_samples(samples)})


def _ports(name: str, value: float) -> list:
    return [(name, {"instance": f"s{s}", "device": f"mlx5_{k}", "port": "1"}, value)
            for s in range(TOPO.n_servers) for k in range(TOPO.nic_node.shape[1])]


def test_sockets_read_off_the_kernel_counters_without_nccl_lines():
    """NCCL's transport lines missing: the kernel's netdev counters carrying the NIC ports' bytes say
    the job runs on sockets (RDMA bypasses the kernel). Seed 11,000,170: a 21 % tcp-fallback on an
    8-server rail-optimized fabric with the transport lines dropped found nothing."""
    from gpuwait.diagnosis.rules import RULES
    from gpuwait.diagnosis.telemetry import observe_telemetry

    sockets = observe_telemetry(_bundle(_ports("node_network_transmit_bytes_total", 1e9)), TOPO)
    assert sockets.socket_transport is True and sockets.socket_from_counters
    assert "NCCL_DEBUG=INFO transport lines" not in sockets.missing
    rdma = _ports("node_infiniband_port_data_transmitted_bytes_total", 1e9) + _ports("node_network_transmit_bytes_total", 1e6)
    unknown = observe_telemetry(_bundle(rdma), TOPO)  # the kernel saw a thousandth: RDMA, or nothing said
    assert unknown.socket_transport is None and "NCCL_DEBUG=INFO transport lines" in unknown.missing
    out = RuleOutput()
    RULES["tcp-fallback"].check(Observation(TOPO, socket_transport=True, socket_from_counters=True), out)
    assert [c.kind for c in out.candidates] == ["tcp-fallback"] and "netdev" in out.candidates[0].evidence["transport"]
