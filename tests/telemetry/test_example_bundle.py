"""The walkthrough of docs/telemetry.md: import the X5 inventory, diagnose examples/telemetry on it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

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
    code, _, err = run_cli(capsys, *IMPORT, "--output", str(cluster))
    assert code == 0, err
    doc = _diagnose(capsys, BUNDLE, cluster)
    top = doc["findings"][0]
    assert (top["kind"], top["component"]) == ("link-degrade", "sl390lin105.hca->hoibp0013")
    # 2X of a 4X QDR cable: 16 of 32 Gb/s
    assert (top["evidence"]["negotiated"], top["evidence"]["nominal"]) == ("16 Gb/s", "32 Gb/s")
    assert len(doc["findings"]) == 1 and doc["missing"] == []
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
