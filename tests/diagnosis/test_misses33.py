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
