"""Real exporters' output as they emit it (tests/data/telemetry/real/README.md cites each sample), read
and placed on the components of an imported cluster (examples/inventory/x5-cluster.yaml)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from gpuwait.runner.inputs import load_cluster
from gpuwait.telemetry.bundle import load_telemetry_dir
from gpuwait.telemetry.errors import TelemetryFormatError
from gpuwait.telemetry.kineto import parse_kineto_trace
from gpuwait.telemetry.mapping import counter_window, ib_data_rate_Bps, map_series, nic_port_link
from gpuwait.telemetry.nccl_debug import parse_nccl_debug
from gpuwait.telemetry.nccl_graph import parse_nccl_graph
from gpuwait.telemetry.prometheus import parse_prometheus_text
from gpuwait.telemetry.promjson import parse_prometheus_json
from gpuwait.topology.build import build_topology
from tests.cli.test_cli import run_cli

REAL = Path(__file__).parents[1] / "data" / "telemetry" / "real"
X5 = "examples/inventory/x5-cluster.yaml"


@pytest.fixture(scope="module")
def x5():
    return build_topology(load_cluster(X5))


def test_node_exporter_infiniband_lands_on_the_hosts_cable(tmp_path, x5):
    """node_exporter names only the device and port; the host comes from the folder the scrape is in."""
    (tmp_path / "sl390lin101").mkdir()
    shutil.copy(REAL / "node-exporter-infiniband.prom", tmp_path / "sl390lin101" / "node.prom")
    real = map_series(load_telemetry_dir(tmp_path), x5)
    up = x5.link_id("sl390lin101.hca->hoibp0013")
    down = x5.link_id("hoibp0013->sl390lin101.hca")
    # 5e9 B/s is sysfs's "40 Gb/sec (4X QDR)": 32 Gb/s of data after 8b/10b, the cable's nominal rate
    assert real.link_rate_Bps[up] == real.link_rate_Bps[down] == pytest.approx(32e9 / 8) == x5.link_capacity_Bps[up]
    assert real.link_tx_bytes[up] == 1.493376e7 and real.link_tx_bytes[down] == 1.8527668e7
    assert real.counters["link_downed"][up] == 0 and real.counters["xmit_wait"][up] == 4.294967295e9
    # mlx4_0 port 2 and the i40iw0 iWARP device are not cabled in the inventory: named, not guessed
    assert any('device=mlx4_0' in u and 'port=2' in u for u in real.unmatched)


def test_device_names_map_by_inventory_name_or_number(x5):
    s = x5.server_id("sl390lin101")
    up = x5.link_id("sl390lin101.hca->hoibp0013")
    assert nic_port_link(x5, s, "hca") == nic_port_link(x5, s, "mlx5_0") == nic_port_link(x5, s, "mlx4_0", "1") == up
    assert nic_port_link(x5, s, "mlx5_1") is None and nic_port_link(x5, s, "ens1f0np0") is None


@pytest.mark.parametrize("signal_gbps, data_gbps", [(10, 8), (40, 32), (20, 16), (56, 56 * 64 / 66), (100, 100), (400, 400)])
def test_ib_sysfs_rate_is_turned_into_the_data_rate(signal_gbps, data_gbps):
    """IBTA line coding: 8b/10b up to QDR, 64b/66b for FDR; EDR and later report data rates."""
    assert ib_data_rate_Bps(signal_gbps * 1e9 / 8) * 8 / 1e9 == pytest.approx(data_gbps)


def test_node_exporter_ethtool_names_are_read():
    m = parse_prometheus_text((REAL / "node-exporter-ethtool.prom").read_text())
    assert m.value_of("node_ethtool_received_packets_total", device="eth0") == 1260062
    assert m.value_of("node_ethtool_port_received_dropped", device="eth0") == 12028


def test_dcgm_exporter_labels_and_unknown_hosts_are_named(tmp_path, x5):
    m = parse_prometheus_text((REAL / "dcgm-exporter-issues.prom").read_text())
    assert m.value_of("DCGM_FI_DEV_SM_CLOCK", Hostname="sheryb", gpu=0) == 300
    assert m.label_values("modelName") == ["Quadro T2000", "NVIDIA A30", "NVIDIA H100 80GB HBM3"]
    shutil.copy(REAL / "dcgm-exporter-issues.prom", tmp_path)
    real = map_series(load_telemetry_dir(tmp_path), x5)
    assert not real.gpu_busy and any("gsrh100-074" in u for u in real.unmatched)


def test_diagnose_lists_the_series_it_left_out(capsys, tmp_path, x5):
    """docs/telemetry.md: what names nothing in the cluster is left out and listed. The mapping kept the
    list, but diagnose printed only "no findings", as if the hosts had reported nothing."""
    shutil.copy(REAL / "dcgm-exporter-issues.prom", tmp_path)
    code, out, _ = run_cli(capsys, "diagnose", "--telemetry", str(tmp_path), "--cluster", X5, "--json")
    assert code == 0
    left_out = [m for m in json.loads(out)["missing"] if m.startswith("series naming nothing in the cluster, left out: ")]
    assert len(left_out) == 1 and "Hostname=gsrh100-074" in left_out[0]


def test_prometheus_range_query_json():
    m = parse_prometheus_json((REAL / "prometheus-range-query.json").read_text())
    node = m.select("up", job="node")
    assert len(m) == 6 and node.value.tolist() == [0, 0, 1]
    assert node.timestamp_s.tolist() == [1435781430.781, 1435781445.781, 1435781460.781]
    increase, rate = counter_window(node.value, node.timestamp_s)
    assert increase == 1 and rate == pytest.approx(1 / 30)


def test_counter_reset_counts_from_zero():
    increase, rate = counter_window(np.array([100.0, 160.0, 20.0, 50.0]), np.array([0.0, 10.0, 20.0, 30.0]))
    assert increase == 60 + 20 + 30 and rate == pytest.approx(110 / 30)
    assert counter_window(np.array([7.0]), np.array([math.nan])) == (7.0, None)


@pytest.mark.parametrize("text, message", [
    ("{", "not JSON"),
    ('{"status": "error", "errorType": "bad_data"}', "status 'error'"),
    ('{"status": "success", "data": {"resultType": "scalar", "result": [1, "2"]}}', "resultType is 'scalar'"),
    ('{"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1, "2"]}]}}',
     "has no __name__"),
    ('{"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {"__name__": "up"}, "values": [[1]]}]}}',
     "point 0"),
    # an integer too large for a float (no such counter exists: a broken exporter or a hand-edited file)
    ('{"status": "success", "data": {"resultType": "vector", "result": [{"metric": {"__name__": "up"}, "value": [1, '
     + str(10**400) + ']}]}}', r"data.result\[0\] \(up\) point 0: an integer of 401 digits, beyond a float's range"),
])
def test_bad_prometheus_json_is_named(text, message):
    with pytest.raises(TelemetryFormatError, match=message):
        parse_prometheus_json(text, source="q.json")


def test_openmetrics_timestamps_are_seconds_and_exemplars_dropped():
    m = parse_prometheus_text((REAL / "openmetrics-spec.txt").read_text())
    foo = m.select("foo_total")
    assert foo.value.tolist() == [17.0] and foo.timestamp_s.tolist() == [1520879607.789]
    assert m.info["q"].type == "histogram" and m.info["cpu"].type == "gauge"
    assert m.value_of("door", door="open") == 1


def test_nccl_rings_trees_and_nics():
    text = (REAL / "nccl-debug-rings-trees.log").read_text()
    g = parse_nccl_graph(text)
    assert g.n_channels == 8 and g.rings[0][:4] == (0, 7, 6, 5) and len(g.rings[1]) == 20
    assert g.trees[(0, 0)] == (-1, (3,)) and g.trees[(0, 1)] == (3, ()) and g.hosts[0] == "como"
    assert (0, 7) in g.ring_neighbours()
    sends = [(c.rank, c.peer_rank, c.net_device) for c in parse_nccl_debug(text).connections]
    assert sends == [(3, 2, 2), (0, 2, 5), (3, 0, 0)]


def test_nccl_2_4_trees_parent_first():
    """NCCL 2.4 printed a tree node parent first, 'Trees [0] 22->23->-1/-1/-1' (up->rank->children,
    src/init.cc of that release). Before: no tree read from such a log."""
    g = parse_nccl_graph((Path(__file__).parent / "data" / "nccl-debug-2.4-old-trees.log").read_text())
    assert g.trees == {(23, 0): (22, ()), (27, 0): (26, ())} and g.hosts == {23: "ip-172-31-5-237", 27: "ip-172-31-5-41"}
    g = parse_nccl_graph("h:1:2 [0] NCCL INFO Trees [0] 1->2->3/4/-1|5->2->-1/-1/-1 [1] -1->2->3/-1/-1|-1->2->-1/-1/-1")
    assert g.trees == {(2, 0): (1, (3, 4)), (2, 1): (-1, (3,))}  # 2.5's up|down trees: the up tree


def test_kineto_trace_of_a_real_step():
    t = parse_kineto_trace((REAL / "kineto-hta-backward-thread.json").read_text())
    assert t.rank == 0 and [s.number for s in t.steps] == [552]
    assert t.step_time_s == 0.413451 and t.compute_s == 45e-6 and t.comm_s == 0


def test_the_gpu_side_copy_of_a_step_is_not_a_step():
    """PyTorch also writes each ProfilerStep#N on the GPU timeline (cat gpu_user_annotation), which may cover only
    the step's first kernel (pytorch/kineto#1022). The real trace with such a copy (the event built here, on its
    GPU stream over its one kernel). Before: two steps 552, and a step time of 0.2 s instead of 0.41 s."""
    doc = json.loads((REAL / "kineto-hta-backward-thread.json").read_text())
    doc["traceEvents"].append({"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#552", "pid": 0, "tid": 7,
                               "ts": 1666149715428509, "dur": 45})
    t = parse_kineto_trace(json.dumps(doc))
    assert [s.number for s in t.steps] == [552] and t.step_time_s == 0.413451 and t.compute_s == 45e-6
    # a trace with the GPU side only still has its steps
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e["cat"] != "user_annotation"]
    assert [s.dur_us for s in parse_kineto_trace(json.dumps(doc)).steps] == [45]


def test_bundle_reads_json_kinds_and_gzip(tmp_path):
    import gzip

    shutil.copy(REAL / "prometheus-range-query.json", tmp_path / "q.json")
    (tmp_path / "rank0.pt.trace.json.gz").write_bytes(gzip.compress((REAL / "kineto-hta-backward-thread.json").read_bytes()))
    shutil.copy(REAL / "nccl-debug-rings-trees.log", tmp_path / "nccl.log")
    b = load_telemetry_dir(tmp_path)
    assert b.kinds == {"q.json": ("prometheus_json",), "rank0.pt.trace.json.gz": ("kineto",), "nccl.log": ("nccl_debug",)}
    assert b.kineto["rank0.pt.trace.json.gz"].rank == 0 and b.nccl_graph["nccl.log"].n_channels == 8
    assert len(b.metrics.select("up")) == 6


# ---------------------------------------------------------------------------------- issue 14 item 2

def _stripped_export(capsys, tmp_path, *inject: str) -> Path:
    """A simulated scrape with gpuwait's own series removed: what real exporters alone would give."""
    full = tmp_path / "full.prom"
    args = [a for spec in inject for a in ("--inject", spec)]
    code, _, _ = run_cli(capsys, "telemetry", "export", "examples/dp-only.yaml", *args, "--out", str(full))
    assert code == 0
    keep = [ln for ln in full.read_text().splitlines() if "gpuwait_" not in ln
            and not ln.startswith(("SymbolErrorCounter", "LinkDownedCounter", "out_of_sequence"))]
    scrape = tmp_path / "scrape"
    scrape.mkdir()
    (scrape / "metrics.prom").write_text("\n".join(keep) + "\n")
    return scrape


def test_dcgm_and_mlx5_counters_alone_find_the_slow_gpu(capsys, tmp_path):
    """Before: 'no findings', and DCGM utilization listed as missing although it is there."""
    scrape = _stripped_export(capsys, tmp_path, "slow-gpu:s3.gpu2:factor=1.3")
    text = (scrape / "metrics.prom").read_text()
    assert "gpuwait_" not in text and "DCGM_FI_DEV_GPU_UTIL{" in text and "tx_bytes_phy{" in text
    code, out, _ = run_cli(capsys, "diagnose", "--telemetry", str(scrape), "--cluster", "rocev2-400g-2tier",
                           "--servers", "16", "--json")
    doc = json.loads(out)
    assert code == 0 and (doc["findings"][0]["kind"], doc["findings"][0]["component"]) == ("slow-gpu", "s3.gpu2")
    assert not any("DCGM" in m or "step phases" in m for m in doc["missing"])


def test_the_same_from_a_range_query_of_dcgm_util(capsys, tmp_path):
    """DCGM_FI_DEV_GPU_UTIL alone, as a Prometheus range query answer over two scrapes."""
    scrape = _stripped_export(capsys, tmp_path, "slow-gpu:s3.gpu2:factor=1.3")
    util = parse_prometheus_text((scrape / "metrics.prom").read_text()).select("DCGM_FI_DEV_GPU_UTIL")
    result = [{"metric": {"__name__": "DCGM_FI_DEV_GPU_UTIL", **dict(lab)},
               "values": [[1700000000 + 15 * k, str(v)] for k in range(2)]} for lab, v in zip(util.labels, util.value)]
    (scrape / "metrics.prom").unlink()
    (scrape / "dcgm.json").write_text(json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}))
    code, out, _ = run_cli(capsys, "diagnose", "--telemetry", str(scrape), "--cluster", "rocev2-400g-2tier",
                           "--servers", "16", "--json")
    doc = json.loads(out)
    assert (doc["findings"][0]["kind"], doc["findings"][0]["component"]) == ("slow-gpu", "s3.gpu2")


def test_ethtool_dump_named_by_host_folder_and_device(tmp_path, roce_topo):
    (tmp_path / "s1").mkdir()
    shutil.copy(Path(__file__).parent / "data" / "ethtool-mlx5-constructed.txt", tmp_path / "s1" / "ethtool-mlx5_2.txt")
    real = map_series(load_telemetry_dir(tmp_path), roce_topo)
    up = int(roce_topo.nic_uplink[1, 2, 0])
    assert real.unmatched == [] and real.counters["pause_received"][up] == 1523


def _trace(rank: int, compute_us: int, step_us: int = 100_000) -> str:
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#7", "ts": 0, "dur": step_us},
              {"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm", "ts": 0, "dur": compute_us},
              {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
               "ts": compute_us, "dur": step_us - compute_us}]
    return json.dumps({"traceEvents": events, "distributedInfo": {"rank": rank}})


def test_kineto_traces_of_every_rank_find_the_slow_one(tmp_path, roce_topo):
    from gpuwait.diagnosis.run import diagnose_observation
    from gpuwait.diagnosis.telemetry import observe_telemetry

    for rank in range(16):
        (tmp_path / f"rank{rank}.pt.trace.json").write_text(_trace(rank, 78_000 if rank == 11 else 60_000))
    obs = observe_telemetry(load_telemetry_dir(tmp_path), roce_topo)
    assert obs.step_time_s == 0.1 and obs.per_gpu_s["straggler_wait"][0] == pytest.approx(0.018)
    top = diagnose_observation(obs).findings[0]
    assert (top.kind, top.component) == ("slow-gpu", roce_topo.node_name[roce_topo.gpu_node.ravel()[11]])


def test_dcgm_exporter_readme_scrape_keeps_its_labels_and_blank():
    """dcgm-exporter's own README scrape: a space after a label's comma, and a field DCGM could not read
    printed as DCGM_INT64_NOT_SUPPORTED."""
    m = parse_prometheus_text((REAL / "dcgm-exporter-readme.prom").read_text())
    assert m.value_of("DCGM_FI_DEV_SM_CLOCK", gpu=0, UUID="GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52") == 139
    assert m.value_of("DCGM_FI_DEV_MEM_CLOCK", gpu=0, pod="") == 405
    assert m.value_of("DCGM_FI_DEV_MEMORY_TEMP", gpu=0) == float(0x7FFFFFFFFFFFFFF2)


def test_dcgm_blank_readings_are_no_reading(capsys, tmp_path, x5):
    """The README's blank on the fields the diagnosis reads (the sentinel as dcgm-exporter prints it; the
    lines are built here). Before: GPU 1's utilization read as 9.2e16 % (clipped to 100 % busy) and its
    throttle reasons as every bit set (thermal and power throttling)."""
    blank_int64, blank_fp64 = "9223372036854775794", "140737488355330"  # DCGM_INT64/FP64_NOT_SUPPORTED
    lines = []
    for name, values in (("DCGM_FI_DEV_GPU_UTIL", ("61", blank_int64)),
                         ("DCGM_FI_PROF_SM_ACTIVE", ("0.5", blank_fp64)),
                         ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", ("0", blank_int64)),
                         ("DCGM_FI_DEV_PCIE_LINK_GEN", ("4", blank_int64))):
        lines += [f'{name}{{gpu="{gpu}", UUID="GPU-{gpu}",Hostname="sl390lin101"}} {value}' for gpu, value in enumerate(values)]
    (tmp_path / "dcgm.prom").write_text("\n".join(lines) + "\n")
    real = map_series(load_telemetry_dir(tmp_path), x5)
    s = x5.server_id("sl390lin101")
    gpu0 = int(x5.gpu_node[s, 0])
    assert real.gpu_busy == {gpu0: pytest.approx(0.5 / 0.9)} and real.gpu_busy_metric == "DCGM_FI_PROF_SM_ACTIVE"
    assert real.gpu_throttle == {gpu0: 0} and set(real.gpu_pcie) == {gpu0}
    assert len(real.blank) == 4 and all("sl390lin101.gpu1" in b for b in real.blank)
    code, out, _ = run_cli(capsys, "diagnose", "--telemetry", str(tmp_path), "--cluster", X5, "--json")
    listed = [m for m in json.loads(out)["missing"] if m.startswith("DCGM fields with no reading")]
    assert code == 0 and len(listed) == 1 and "DCGM_FI_DEV_GPU_UTIL{sl390lin101.gpu1} 9.2233720368547758e+18" in listed[0]


@pytest.mark.parametrize("name, lid_port", [("perfquery-rcv-error-details.txt", "LID 1719 port 2"),
                                            ("perfquery-extended-lid2052.txt", "LID 2052 port 1"),
                                            ("perfquery-classic.txt", "LID 7 port 1")])
def test_perfquery_dumps_name_their_switch_port(tmp_path, x5, name, lid_port):
    """Every perfquery header (`# Port counters`, `# Port extended counters`, `-E`'s `# PortRcvErrorDetails
    counters`) names LID and port; X5 has none of these LIDs, so each is listed by them. Before: the -E dump
    was "an unnamed port"."""
    shutil.copy(Path(__file__).parent / "data" / name, tmp_path)
    real = map_series(load_telemetry_dir(tmp_path), x5)
    assert real.unmatched == [f"{name}: perfquery of {lid_port} names no switch port of the cluster"]


def test_node_exporter_roce_hw_counters_land_on_the_port(tmp_path, x5):
    """node_exporter's names for the RoCE hw_counters (np_cnp_packets_sent_total, np_ecn_marked_roce_packets_received_total,
    rp_cnp_packets_handled_total, out_of_sequence_packets_received_total). Before: gpuwait looked for other names
    (node_infiniband_np_cnp_sent_total ...) and the ECN marks and CNPs of a node_exporter scrape were never read."""
    (tmp_path / "sl390lin101").mkdir()
    shutil.copy(REAL / "node-exporter-infiniband-hw-counters.prom", tmp_path / "sl390lin101" / "node.prom")
    real = map_series(load_telemetry_dir(tmp_path), x5)
    up = x5.link_id("sl390lin101.hca->hoibp0013")
    down = x5.link_id("hoibp0013->sl390lin101.hca")
    assert real.counters["ecn_marked"] == {down: 41000} and real.counters["cnp_sent"] == {down: 5200}
    assert real.counters["cnp_handled"] == {up: 3100} and real.counters["out_of_sequence"] == {down: 17}
