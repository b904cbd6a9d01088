"""The walkthrough of docs/telemetry.md: import the X5 inventory, diagnose examples/telemetry on it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gpuwait.diagnosis.rules import same_cable
from tests.cli.test_cli import run_cli

BUNDLE = Path("examples/telemetry")
IMPORT = ["inventory", "import", "--ibnetdiscover", "tests/data/inventory/x5.ibnetdiscover",
          "--node-name-map", "tests/data/inventory/x5.map", "--hosts", "sl390lin10?", "--hosts", "r815lin11?",
          "--server-template", "dgx-h100", "--name", "x5-part"]


def _diagnose(capsys, bundle: Path, cluster: Path) -> dict:
    code, out, err = run_cli(capsys, "diagnose", "--telemetry", str(bundle), "--cluster", str(cluster), "--json")
    assert code == 0, err
    return json.loads(out)


def test_walkthrough_names_the_degraded_port_by_its_real_names(capsys, tmp_path):
    cluster = tmp_path / "x5-cluster.yaml"
    code, _, err = run_cli(capsys, *IMPORT, "--out", str(cluster))
    assert code == 0, err
    doc = _diagnose(capsys, BUNDLE, cluster)
    top = doc["findings"][0]
    assert top["kind"] == "link-degrade" and same_cable(top["component"], "sl390lin105.hca->hoibp0013")
    # 2X of a 4X QDR cable: 16 of 32 Gb/s
    assert (top["evidence"]["negotiated"], top["evidence"]["nominal"]) == ("16 Gb/s", "32 Gb/s")
    # DCGM's busiest GPU has SM_ACTIVE 0.526, computing 0.526 / 0.9 = 58.5 % of the time: at most
    # 41.5 % of the step (504 ms) is exposed communication; the port's bytes at 16 instead of 32 Gb/s
    # take twice as long, and the exposed part would shrink by half (less the 1 % readings' noise
    # band): about 0.23 s, 19 % of the step, a warning (rules._held_up_s)
    assert top["severity"] == "warning"
    # the switch's side of the same cable waited for credits 21 % of its busy time (perfquery's
    # PortXmitWait): the HCA behind it is named second, costed at its bytes at 1 - 0.21 of the rate
    second = doc["findings"][1]
    assert (second["kind"], second["component"]) == ("ib-xmit-wait", "sl390lin105.hca")
    assert second["evidence"]["stalled_share"] == pytest.approx(0.2088, abs=1e-4)
    # the bundle has per-step counters only: ECMP collisions within one collective cannot be read
    assert len(doc["findings"]) == 2 and [m.split(" (")[0] for m in doc["missing"]] == ["per-collective port bytes"]
    assert abs(doc["step_time_s"] - 1.2135) < 1e-9  # the two ProfilerStep events of rank 0's trace
    # the same as the cluster file kept in the repository
    assert _diagnose(capsys, BUNDLE, Path("examples/inventory/x5-cluster.yaml"))["findings"] == doc["findings"]


def test_the_bundle_with_the_port_retrained_has_no_finding(capsys, tmp_path):
    healthy = tmp_path / "telemetry"
    shutil.copytree(BUNDLE, healthy)
    path = healthy / "node-exporter" / "query_range.json"
    doc = json.loads(path.read_text())
    for series in doc["data"]["result"]:
        m = series["metric"]
        if m["instance"].startswith("sl390lin105") and m["__name__"] == "node_infiniband_rate_bytes_per_second":
            series["values"] = [[t, "5e+09"] for t, _ in series["values"]]
    path.write_text(json.dumps(doc))
    # and its switch port waits for credits no more than its neighbour on port 18 does
    port25 = healthy / "switches" / "hoibp0013-port25.txt"
    port25.write_text(port25.read_text().replace("PortXmitWait:.....................3912874410",
                                                 "PortXmitWait:.....................61234"))
    assert _diagnose(capsys, healthy, Path("examples/inventory/x5-cluster.yaml"))["findings"] == []


def test_every_file_of_the_bundle_lands_on_a_component():
    from gpuwait.runner.inputs import load_cluster
    from gpuwait.telemetry.bundle import load_telemetry_dir
    from gpuwait.telemetry.mapping import map_series
    from gpuwait.topology.build import build_topology

    topo = build_topology(load_cluster("examples/inventory/x5-cluster.yaml"))
    real = map_series(load_telemetry_dir(BUNDLE), topo)
    assert real.unmatched == [] and real.gpu_busy_metric == "DCGM_FI_PROF_SM_ACTIVE" and len(real.gpu_busy) == 112
    # perfquery of LID 10 port 25: the inventory's lid10 is hoibp0013, its port 25 faces sl390lin105
    port25 = topo.link_alias["hoibp0013[25]"]
    assert topo.link_name(port25) == "hoibp0013->sl390lin105.hca"
    assert real.counters["xmit_wait"][port25] == 3912874410
    # NCCL's "[send] via NET/IB/0" on sl390lin105, device 0 = mlx4_0 = the host's one HCA
    assert real.link_users[topo.link_id("sl390lin105.hca->hoibp0013")] == ["rank79"]
    assert set(real.gpu_pcie.values()) == {(5.0, 16.0)} and set(real.gpu_throttle.values()) == {0}


def test_dcgm_only_exposed_communication_is_the_step_the_busiest_gpu_does_not_compute():
    """A DCGM-only bundle has no communication phase: the step minus the busiest GPU's compute (its
    SM_ACTIVE over the 0.9 of cycles SMs hold a warp while GEMMs run) bounds it, on every GPU alike."""
    from gpuwait.diagnosis.telemetry import observe_telemetry
    from gpuwait.runner.inputs import load_cluster
    from gpuwait.telemetry.bundle import load_telemetry_dir
    from gpuwait.topology.build import build_topology

    topo = build_topology(load_cluster("examples/inventory/x5-cluster.yaml"))
    obs = observe_telemetry(load_telemetry_dir(BUNDLE), topo)
    busy_max = max(float(line.split()[-1]) for path in (BUNDLE / "dcgm").glob("*.prom")
                   for line in path.read_text().splitlines() if line.startswith("DCGM_FI_PROF_SM_ACTIVE{")) / 0.9
    exposed = obs.per_gpu_s["exposed_comm"]
    assert len(exposed) == 112 and exposed.min() == exposed.max()
    # the busiest GPU's mean over its samples is a little below its largest sample
    assert exposed[0] == pytest.approx(1.2135 * (1 - busy_max), rel=2e-3)
    compute_plus_wait = obs.per_gpu_s["compute"] + obs.per_gpu_s["straggler_wait"] + exposed
    assert compute_plus_wait == pytest.approx(1.2135)
