"""Issue 14's diagnosis bugs, one test each (the rules' thresholds are tested in test_rules.py)."""

from __future__ import annotations

import numpy as np

from gpuwait.diagnosis.accuracy import CASES, scenario_for
from gpuwait.diagnosis.run import diagnose_scenario
from gpuwait.faults import parse_inject
from gpuwait.runner.workload import simulate_workload
from gpuwait.topology.model import LinkKind


def _roce_dp():
    return scenario_for(next(c for c in CASES if c.fabric == "roce-ecmp" and c.workload == "dp-8b"))


def test_a_lossy_link_the_job_does_not_use_is_not_named_link_degrade():
    """Losses cost goodput, not negotiated rate: a lossy cable no flow crosses shows no symbol errors
    (nothing crossed it) and its port still reports the full rate, so nothing names it degraded."""
    scenario = _roce_dp()
    healthy = simulate_workload(scenario)
    topo, used = healthy.topo, healthy.results[0].links.bytes_per_step
    idle = np.flatnonzero((used == 0) & (topo.link_kind == LinkKind.FABRIC))
    assert len(idle)
    name = topo.link_name(int(idle[0]))
    diagnosis = diagnose_scenario(scenario, [parse_inject(f"link-loss:{name}:loss_rate=0.01")], max_fixes=2)
    assert not [f for f in diagnosis.findings if f.kind == "link-degrade"]
    assert all(f.severity == "info" for f in diagnosis.findings if f.component == name)


def test_telemetry_severity_comes_from_the_time_lost():
    """Issue 14: from telemetry alone a slow GPU costing 15 % was rated info while a harmless flap was
    critical. Now each rule estimates the time its cause costs: the GPU the others wait 150 ms of a
    1 s step for is a warning and ranks first; a flap on a link that carries nothing is info."""
    from gpuwait.diagnosis.observe import Observation
    from gpuwait.diagnosis.run import diagnose_observation

    scenario = _roce_dp()
    healthy = simulate_workload(scenario)
    topo = healthy.topo
    n = topo.gpu_node.size
    compute = 0.5 * np.random.default_rng(3).normal(1.0, 0.005, n)
    compute[9] = compute.max() + 0.15
    zeros = np.zeros(n)
    phases = {"compute": compute, "straggler_wait": zeros, "data_wait": zeros, "exposed_comm": zeros + 0.05}
    idle = int(np.flatnonzero((healthy.results[0].links.bytes_per_step == 0) & (topo.link_kind == LinkKind.FABRIC))[0])
    downed = np.zeros(topo.n_links)
    downed[idle] = 1
    obs = Observation(topo, step_time_s=1.0, baseline_step_time_s=0.8, per_gpu_s=phases,
                      gpu_names=[topo.node_name[g] for g in topo.gpu_node.ravel()],
                      link_bytes=np.where(np.arange(topo.n_links) == idle, 0.0, 1e9), counters={"link_downed": downed})
    findings = {f.kind: f for f in diagnose_observation(obs).findings}
    assert diagnose_observation(obs).top.kind == "slow-gpu"
    assert findings["slow-gpu"].severity == "warning" and findings["link-flap"].severity == "info"


def test_dataloader_starvation_on_one_server_is_honoured():
    """Issue 14: ``dataloader-starvation:s3`` was accepted and silently applied to every server. The
    step is the same (synchronous training runs at the slowest loader's pace), but the telemetry
    shows s3's GPUs waiting for data and the others waiting for s3, and the diagnosis names s3."""
    scenario = _roce_dp()
    need = scenario.workload.parallel.global_batch / scenario.cluster.servers / 1.84
    fault = parse_inject(f"dataloader-starvation:s3:samples_per_s_per_server={0.5 * need:.3g}")
    diagnosis = diagnose_scenario(scenario, [fault], max_fixes=2)
    assert diagnosis.top.kind == "dataloader-starvation" and diagnosis.top.component == "s3"


def test_a_slow_storage_backend_needs_a_job_that_reads():
    import pytest

    from gpuwait.errors import SpecError

    with pytest.raises(SpecError, match="reads no dataset"):
        simulate_workload(_roce_dp(), faults=[parse_inject("storage-slow:all:throughput_fraction=0.2")])


def test_dcgm_throttle_reasons_and_pcie_width_name_the_gpu_by_its_real_name(capsys, tmp_path):
    """Issue 14: GPU clock throttling and a downtrained PCIe link, read from dcgm-exporter's own series
    (DCGM_FI_DEV_CLOCK_THROTTLE_REASONS, DCGM_FI_DEV_PCIE_LINK_GEN / _WIDTH) on the example bundle:
    sl390lin103's GPU 2 runs thermally throttled and computes 15 % longer than its peers; r815lin111's
    GPU 6 trained at Gen1 x4 (1 GB/s, under its 32 Gb/s HCA)."""
    import json
    import re
    import shutil
    from pathlib import Path

    from tests.cli.test_cli import run_cli

    bundle = tmp_path / "telemetry"
    shutil.copytree("examples/telemetry", bundle)

    def edit(host: str, metric: str, gpu: str, value: str) -> None:
        path = bundle / "dcgm" / f"{host}.prom"
        text, n = re.subn(rf'^({metric}{{gpu="{gpu}",.*}}) \S+$', rf"\g<1> {value}", path.read_text(), flags=re.M)
        assert n == 1
        path.write_text(text)

    edit("sl390lin103", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "2", "64")  # HW thermal slowdown
    edit("sl390lin103", "DCGM_FI_PROF_SM_ACTIVE", "2", "0.60")
    edit("r815lin111", "DCGM_FI_DEV_PCIE_LINK_GEN", "6", "1")
    edit("r815lin111", "DCGM_FI_DEV_PCIE_LINK_WIDTH", "6", "4")
    code, out, err = run_cli(capsys, "diagnose", "--telemetry", str(bundle), "--cluster",
                             str(Path("examples/inventory/x5-cluster.yaml")), "--json")
    assert code == 0, err
    found = {f["kind"]: f for f in json.loads(out)["findings"]}
    throttle = found["gpu-throttle"]
    assert throttle["component"].startswith("sl390lin103") and throttle["component"].endswith("gpu2")
    assert "thermal" in throttle["evidence"]["throttle_reasons"] and throttle["severity"] != "info"
    pcie = found["pcie-downtrained"]
    assert pcie["component"].startswith("r815lin111") and pcie["evidence"]["pcie_link"] == "Gen1 x4"


def test_telemetry_link_bytes_are_per_step_whatever_the_window():
    """Exported counters cover the whole run (here 2 steps); the rules weigh one step's bytes at a
    port's rate, so reading them back divides by the steps counted (gpuwait_steps_total). Before,
    a collision read from a scrape was estimated on twice its bytes."""
    from pathlib import Path

    from gpuwait.diagnosis.telemetry import export_metrics, observe_telemetry
    from gpuwait.telemetry.bundle import TelemetryBundle

    run = simulate_workload(_roce_dp())
    assert run.results[0].steps == 2
    bundle = TelemetryBundle(root=Path("."), metric_files={"export.prom": export_metrics(run)})
    obs = observe_telemetry(bundle, run.topo)
    assert np.allclose(obs.link_bytes, run.results[0].links.bytes_per_step)
