"""Telemetry-only misses of the 26,000,000 score: what the export and its reader must not hide."""

from __future__ import annotations

from pathlib import Path

from gpuwait.diagnosis.accuracy import CASES, scenario_for
from gpuwait.diagnosis.run import diagnose_observation
from gpuwait.diagnosis.telemetry import export_metrics, observe_telemetry
from gpuwait.faults import parse_inject
from gpuwait.runner.workload import simulate_workload
from gpuwait.telemetry.bundle import TelemetryBundle
from gpuwait.telemetry.metricset import MetricSet

PLACEMENT = "NCCL topology / NIC NUMA placement"


def _observed(metrics: MetricSet, topo, drop: str | None = None, scale: float = 1.0):
    kept = [(n, dict(lab), float(v) * scale) for n, lab, v in zip(metrics.name, metrics.labels, metrics.value) if n != drop]
    bundle = TelemetryBundle(root=Path("."), metric_files={"export.prom": MetricSet.from_samples(kept, info=metrics.info)})
    return observe_telemetry(bundle, topo)


def test_a_lost_nic_placement_series_is_missing_not_every_nic_local():
    """Seeds 26,000,158 and 26,000,179: a GPU's NIC behind the other socket (2.2 %, 1.6 %), its
    placement series dropped from the export, found nothing and listed nothing missing: the series was
    written for remote NICs only, so its absence read as every NIC local. The export now places every
    GPU (0 local, 1 remote), and without the series the placement is unknown and listed as missing."""
    scenario = scenario_for(next(c for c in CASES if c.fabric == "roce-ecmp" and c.workload == "dp-8b"))
    run = simulate_workload(scenario, faults=[parse_inject("nic-affinity:s1.gpu2")])
    metrics = export_metrics(run)
    placed = metrics.select(name="gpuwait_nic_numa_remote")
    assert len(placed) == run.topo.gpu_node.size  # every GPU, local ones at 0
    gpu = run.topo.node_id("s1.gpu2")
    assert observe_telemetry(TelemetryBundle(root=Path("."), metric_files={"export.prom": metrics}),
                             run.topo).remote_nic_gpus == (gpu,)
    assert _observed(metrics, run.topo, scale=1.02).remote_nic_gpus == (gpu,)  # a noisy 1 is still remote
    lost = _observed(metrics, run.topo, drop="gpuwait_nic_numa_remote")
    assert lost.remote_nic_gpus is None
    assert PLACEMENT in diagnose_observation(lost).missing
    healthy = export_metrics(simulate_workload(scenario))
    seen = _observed(healthy, run.topo)
    assert seen.remote_nic_gpus == () and PLACEMENT not in diagnose_observation(seen).missing


def test_reads_at_line_rate_with_no_link_placed_are_named_at_info():
    """Seed 26,000,096: storage servers sending at their ports' rate over the compute network while
    the GPUs did not wait for data cost 1.1 % of contention, and telemetry (port bytes, no link
    saying what it carries) named nothing. The reads are named at info, their cost unmeasured; where
    links say what they carry and no collective shares the reads' links, nothing is named."""
    import numpy as np

    from gpuwait.diagnosis.observe import Observation
    from gpuwait.diagnosis.rules import RULES, RuleOutput
    from gpuwait.spec import ClusterSpec
    from gpuwait.topology.presets import build_cluster

    topo = build_cluster(ClusterSpec.model_validate({"preset": "rocev2-400g-2tier", "servers": 2,
                                                     "storage": {"mode": "converged"}}))
    ports = np.flatnonzero(np.isin(topo.link_src, topo.storage_server_node))
    assert len(ports)
    rate = topo.link_capacity_Bps.astype(float)
    carried = np.zeros(topo.n_links)
    carried[ports] = 0.98 * rate[ports]  # a 1 s step: every storage port at 98 % of its rate
    n = topo.gpu_node.size
    per_gpu = {"compute": np.full(n, 0.8), "straggler_wait": np.zeros(n), "data_wait": np.zeros(n),
               "exposed_comm": np.full(n, 0.2)}

    def check(users):
        out = RuleOutput()
        RULES["storage-contention"].check(Observation(
            topo, step_time_s=1.0, per_gpu_s=per_gpu, storage_read=True, storage_busy=(), link_bytes=carried,
            link_rate_Bps=rate, link_nominal_Bps=rate, link_users=users), out)
        return out.candidates

    named = check({})
    assert [(c.kind, c.component, c.lost_s) for c in named] == [("storage-contention", "all", 0.0)]
    assert check({int(ports[0]): ["storage read"]}) == []  # the reads' links are known: none shared
    half = carried.copy()
    half[ports] = 0.5 * rate[ports]
    out = RuleOutput()
    RULES["storage-contention"].check(Observation(
        topo, step_time_s=1.0, per_gpu_s=per_gpu, storage_read=True, storage_busy=(), link_bytes=half,
        link_rate_Bps=rate, link_nominal_Bps=rate), out)
    assert out.candidates == []  # reads under the ports' rate: nothing says they hold the links
