"""`gpuwait perf`: nccl-tests tables predicted for a cluster, and compared with a real log.

Reference: the DGX H100 all_reduce table of NVIDIA/dgxc-benchmarking nccl/README.md (one node, NVLS):
busbw about 480 GB/s at 8 GiB; the maintainers' ~370 GB/s with NCCL_ALGO=Ring (NVIDIA/nccl-tests#212).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from gpuwait.cli.main import main
from gpuwait.telemetry.nccltests_log import parse_nccl_tests_log
from tests.cli.test_cli import run_cli

DATA = Path(__file__).resolve().parent.parent / "nccltests" / "data"


def test_perf_prints_an_nccl_tests_table_that_parses_back(capsys):
    code, out, _ = run_cli(capsys, "perf", "all_reduce", "-b", "8", "-e", "8G", "-f", "2", "--cluster", "dgx-h100")
    assert code == 0
    log = parse_nccl_tests_log(out)
    assert log.collective == "all_reduce" and log.n_ranks == 8 and len(log.rows) == 31
    big = log.rows[-1]
    assert big.size_bytes == 8 * 2**30 and big.oop_busbw_GBps == pytest.approx(480.16, rel=0.10)


def test_nccl_algo_ring_on_one_dgx_h100(capsys):
    code, out, _ = run_cli(capsys, "perf", "all_reduce", "-b", "8G", "-e", "8G", "--cluster", "dgx-h100",
                           "--env", "NCCL_ALGO=Ring", "--json")
    row = json.loads(out)["rows"][0]
    assert json.loads(out)["choices"][0]["algorithm"] == "ring"
    assert row["oop_busbw_GBps"] == pytest.approx(370, rel=0.05)


def test_compare_with_the_h100_table(capsys):
    code, out, _ = run_cli(capsys, "perf", "all_reduce", "--compare", str(DATA / "h100-dgx-1node-8gpu-all_reduce.table"),
                           "--cluster", "dgx-h100", "--json")
    rows = json.loads(out)["rows"]
    large = [r for r in rows if r["size_bytes"] >= 64 * 2**20]
    assert len(large) == 9 and all(abs(r["predicted_busbw_GBps"] / r["measured_busbw_GBps"] - 1) < 0.10 for r in large)
    # NVLS's mid-size ramp (2-8 MiB), where its two stages do not yet overlap
    ramp = [r for r in rows if 2 * 2**20 <= r["size_bytes"] <= 8 * 2**20]
    assert len(ramp) == 3 and all(abs(r["predicted_busbw_GBps"] / r["measured_busbw_GBps"] - 1) < 0.10 for r in ramp)
    # each size is measured by its faster column, as calibrate and docs/validation-reference.md score it: 32 B
    # and 4 KiB are outliers of that run's out-of-place column (68.14 and 23.59 us against 13.52 and 16.46 in-place)
    by_size = {r["size_bytes"]: r for r in rows}
    assert [(by_size[s]["measured_time_us"], by_size[s]["measured_column"]) for s in (32, 4096)] == [
        (13.52, "in-place"), (16.46, "in-place")]
    # The floor as docs/validation-reference.md scores it: the median time error of sizes <= 64 KiB within 25 %
    # (issue 12's target); every size within 40 % (8-16 B run 13-14 us, 2-3 us under 1 KiB's 17 us: the
    # model's floor is one value per protocol, and its launch cost is fitted across all 18 tables)
    small = [r for r in rows if r["size_bytes"] <= 64 * 1024]
    assert abs(np.median([r["time_error_pct"] for r in small])) < 25
    assert all(abs(r["time_error_pct"]) < 40 for r in small)


def test_congestion_changes_the_answer(capsys, tmp_path):
    """The same all_reduce on a fabric whose ECMP collides is slower; more QPs or adaptive routing recover it."""
    fabric = tmp_path / "c.yaml"
    fabric.write_text("cluster:\n  servers: 4\n  server: dgx-h100\n"
                      "  fabric: {kind: clos, switch_radix: 16, leaf_downlinks: 8}\n"
                      "  transport: {name: rocev2}\n  routing: {kind: ecmp, seed: 3}\n")
    busbw = {}
    adaptive = tmp_path / "a.yaml"
    adaptive.write_text(fabric.read_text().replace("{kind: ecmp, seed: 3}", "{kind: adaptive}"))
    oversubscribed = tmp_path / "o.yaml"
    oversubscribed.write_text(adaptive.read_text().replace("leaf_downlinks: 8}", "leaf_downlinks: 8, oversubscription: 4}"))
    for name, cluster, extra in (("ecmp", fabric, []), ("qps", fabric, ["--env", "NCCL_IB_QPS_PER_CONNECTION=8"]),
                                 ("adaptive", adaptive, []), ("oversubscribed", oversubscribed, [])):
        code, out, _ = run_cli(capsys, "perf", "all_reduce", "-b", "1G", "-e", "1G", "--cluster", str(cluster),
                               "--env", "NCCL_ALGO=Ring", *extra, "--json")
        busbw[name] = json.loads(out)["rows"][0]["oop_busbw_GBps"]
    assert busbw["qps"] > 1.05 * busbw["ecmp"]
    assert busbw["adaptive"] > 1.05 * busbw["ecmp"] and busbw["adaptive"] >= busbw["qps"]
    assert busbw["oversubscribed"] < 0.8 * busbw["adaptive"]


@pytest.mark.parametrize("args, message", [
    (["perf", "allreduce"], "allreduce"),
    (["perf", "all_reduce", "-b", "1G", "-e", "1M"], "-b / --minbytes: got 1073741824 bytes, more than the largest size (1048576 bytes)"),
    # a bad size names the option it came from, not a bare "size"
    (["perf", "all_reduce", "-b", "-8"], "-b / --minbytes: got '-8'; expected zero or more bytes"),
    (["perf", "all_reduce", "-e", "foo"], "-e / --maxbytes: cannot read 'foo'"),
    (["perf", "all_reduce", "-i", "3X"], "-i / --stepbytes: unknown suffix 'X'"),
    (["perf", "all_reduce", "-g", "9"], "gpus per server: got 9"),
    (["perf", "all_reduce", "--env", "NCCL_ALGO=Bogus"], "NCCL_ALGO"),
    # NCCL reads only NCCL_* names: another one was ignored in silence
    (["perf", "all_reduce", "--env", "FOO=1"], "--env: got 'FOO=1'; expected an NCCL_* variable"),
    (["perf", "all_reduce", "-d", "float7"], "-d / --datatype: got 'float7'; expected one of int8, uint8"),
    # printed in every row as given ('foo', 'all'): nccl-tests' names only (test_opnames, src/common.cu)
    (["perf", "all_reduce", "-o", "foo"], "-o / --op: got 'foo'; expected one of sum, prod, max, min, avg, mulsum"),
    (["perf", "all_reduce", "-o", "all"], "-o / --op: got 'all'; expected one of sum, prod"),
    (["perf", "all_reduce", "--nccl-version", "2.17.1"], "--nccl-version: got '2.17.1'; expected NCCL 2.18 or later"),
    (["perf", "all_reduce", "--nccl-version", "latest"], "--nccl-version: got 'latest'; expected a release such as"),
])
def test_perf_bad_input(capsys, args, message):
    code, _, err = run_cli(capsys, *args)
    assert code == 2 and message in err.splitlines()[0]


def test_dgx_a100_four_gpus_large_sizes(capsys):
    """eugenesiow/LLM-Insights infrastructure/hardware/README.md: 4 GPUs of a DGX A100, busbw 225-235 GB/s."""
    code, out, _ = run_cli(capsys, "perf", "all_reduce", "--compare", str(DATA / "a100-dgx-4gpu-all_reduce.table"),
                           "--cluster", "dgx-a100", "-g", "4", "--json")
    rows = json.loads(out)["rows"]
    assert len(rows) == 4 and json.loads(out)["n_ranks"] == 4
    assert all(abs(r["predicted_busbw_GBps"] / r["measured_busbw_GBps"] - 1) < 0.10 for r in rows)


def test_one_gpu_per_server_over_one_ndr_nic(capsys):
    """NVIDIA/nccl-tests#267 and #290 (maintainers): one NDR 400G NIC gives NCCL 46-49 GB/s; the model's IB payload rate is 49.7."""
    code, out, _ = run_cli(capsys, "perf", "sendrecv", "-b", "4G", "-e", "4G", "--cluster", "dgx-h100", "--servers", "2",
                           "-g", "1", "--json")
    busbw = json.loads(out)["rows"][0]["oop_busbw_GBps"]
    assert 46 <= busbw <= 50


def test_compare_states_its_errors_and_what_differs(capsys, tmp_path):
    """--compare ends with its summary (median/worst busbw error >= 1 MiB, the floor <= 64 KiB, the predicted
    switch points) and warns when the log ran other GPUs; it predicts the NCCL release the log prints, and says
    so, unless --nccl-version names another (then it warns)."""
    log = DATA / "h100-2node-16gpu-large-sizes.log"
    code, out, _ = run_cli(capsys, "perf", "all_reduce", "--compare", str(log), "--cluster", "dgx-h100", "--servers", "2",
                           "--json")
    doc = json.loads(out)
    judged = [abs(r["predicted_busbw_GBps"] / r["measured_busbw_GBps"] - 1) * 100 for r in doc["rows"]
              if r["size_bytes"] >= 2**20]
    assert doc["summary"]["busbw_sizes"] == len(judged) > 0
    assert doc["summary"]["busbw_worst_error_pct"] == pytest.approx(max(judged))
    assert doc["warnings"] == []  # H100s in the log, H100s in the cluster, no NCCL version printed
    # the same run said to be NCCL 2.26.2 (the release line nccl-tests prints), on an A100 cluster
    text = log.read_text()
    other = tmp_path / "other.log"
    other.write_text(text.replace("#  Rank", "NCCL version 2.26.2+cuda12.8\n#  Rank", 1))
    code, out, _ = run_cli(capsys, "perf", "all_reduce", "--compare", str(other), "--cluster", "oci-a100-roce",
                           "--servers", "2")
    assert code == 0
    assert "busbw error over" in out and "median" in out
    assert "measured: each size's faster column, out-of-place or in-place (in-place at " in out and "(each size's faster column)" in out
    assert "warning: the log ran on H100 GPUs; the cluster has A100" in out
    assert "predicted as NCCL 2.26.2 (the log's version)" in out and "warning: the log ran NCCL" not in out
    code, out, _ = run_cli(capsys, "perf", "all_reduce", "--compare", str(other), "--cluster", "oci-a100-roce",
                           "--servers", "2", "--nccl-version", "2.19.3", "--json")
    doc = json.loads(out)
    assert doc["nccl"] == {"version": "2.19.3", "model_release": "2.19.1", "source": "--nccl-version"}
    assert any(w.startswith("the log ran NCCL 2.26.2; gpuwait predicted NCCL 2.19.3's") for w in doc["warnings"])


def test_nccl_version_changes_the_choice_and_rides_on_the_cluster_file(capsys, tmp_path):
    """Two DGX H100 at 2 MiB: NCCL 2.21's model picks NVLSTree where 2.30's keeps Tree/LL128 (tuning.cc
    v2.21.5-1 vs v2.30.7-1: NVLSTree bandwidth x5/6 of min(bwIntra, bwInter) vs nvlsEfficiency); the same
    release named in a cluster file's ``nccl: {version: ...}`` gives the same answer, and a bad one is one error."""
    def choice(*extra):
        code, out, _ = run_cli(capsys, "perf", "all_reduce", "-b", "2M", "-e", "2M", "--servers", "2", *extra, "--json")
        assert code == 0
        return json.loads(out)["choices"][0]["algorithm"]

    assert choice() == "tree"
    assert choice("--nccl-version", "2.21.5") == "nvls_tree"
    cluster = tmp_path / "c.yaml"
    cluster.write_text("preset: dgx-h100\nnccl: {version: '2.21.5'}\n")
    assert choice("--cluster", str(cluster)) == "nvls_tree"
    assert choice("--cluster", str(cluster), "--nccl-version", "2.30.7") == "tree"
    cluster.write_text("preset: dgx-h100\nnccl: {version: '2.16.2'}\n")
    code, _, err = run_cli(capsys, "perf", "all_reduce", "--cluster", str(cluster))
    assert code == 2 and "nccl.version" in err.splitlines()[0] and "2.18 or later" in err.splitlines()[0]


def test_compare_reads_what_nccl_said_beside_the_table(capsys, tmp_path):
    """NCCL_DEBUG=INFO lines in the same log (NCCL's own wording: 'Using network Socket', the TUNING
    subsystem's 'AllReduce: N Bytes -> Algo RING proto LL128') give the network and the choices NCCL made."""
    info = ["h:1:2 [0] NCCL INFO NCCL version 2.21.5+cuda12.4", "h:1:2 [0] NCCL INFO Using network Socket"]
    info += [f"h:1:2 [0] NCCL INFO AllReduce: {size} Bytes -> Algo {algo} proto {proto} channel{{Lo..Hi}}={{0..1}}"
             for size, algo, proto in ((2**20, "TREE", "LL128"), (2**28, "RING", "SIMPLE"))]
    log = tmp_path / "with-info.log"
    log.write_text("\n".join(info) + "\n" + (DATA / "h100-2node-16gpu-large-sizes.log").read_text())
    code, out, _ = run_cli(capsys, "perf", "all_reduce", "--compare", str(log), "--cluster", "dgx-h100", "--servers", "2",
                           "--json")
    doc = json.loads(out)
    assert doc["summary"]["seen_switches"] == [{"size_bytes": 2**28, "from": "tree/LL128", "to": "ring/Simple"}]
    assert any("network Socket" in w and "infiniband" in w for w in doc["warnings"])
    # the INFO line's release is the one predicted (no longer a warning)
    assert doc["nccl"] == {"version": "2.21.5", "model_release": "2.21.5", "source": "the log's version"}
    assert not any("NCCL 2.21.5" in w for w in doc["warnings"])


def test_compare_predicts_the_library_the_nccl_tests_header_names(capsys):
    """nccl-tests 2.17.4 on print the NCCL library that ran in their first line (src/util.cu, NVIDIA/nccl-tests
    commit 9641693: ``# nccl-tests version 2.18.0 nccl-headers=22907 nccl-library=22907``, the code of
    NCCL_VERSION(2,29,7), src/nccl.h.in): a log without NCCL's own version line is predicted as that release,
    by --compare and by calibrate alike, not as gpuwait's default."""
    from gpuwait.report.calibrate import read_log

    log = DATA / "nccl-tests-2.18-mpi-socket-all_reduce.log"
    assert "NCCL version" not in log.read_text()
    assert read_log(log).nccl_version == "2.29.7"
    cluster = DATA / "reference" / "clusters" / "rtx2080ti-pcie-2gpu.yaml"
    code, out, _ = run_cli(capsys, "perf", "all_reduce", "--compare", str(log), "--cluster", str(cluster), "--json")
    doc = json.loads(out)
    assert code == 0 and doc["nccl"]["version"] == "2.29.7" and doc["nccl"]["source"] == "the log's version"
    # asked for another release, the comparison warns that the log ran 2.29.7
    code, out, _ = run_cli(capsys, "perf", "all_reduce", "--compare", str(log), "--cluster", str(cluster),
                           "--nccl-version", "2.19.3", "--json")
    assert any(w.startswith("the log ran NCCL 2.29.7; gpuwait predicted NCCL 2.19.3's") for w in json.loads(out)["warnings"])


@pytest.mark.parametrize("network, transport, warned", [
    ("IB", "rocev2", False),
    # nccl-rdma-sharp-plugins (HPC-X) names its verbs transport IBext, IBext_v8 ... (src/ib_plugin.c): still IB
    ("IBext", "infiniband", False), ("IBext_v8", "rocev2", False), ("IBext_v11", "infiniband", False),
    ("Socket", "rocev2", True), ("IBext_v8", "tcp", True), ("AWS Libfabric", "efa", False), ("IB", "efa", True),
    # Slingshot's CXI through aws-ofi-nccl (eth-cscs/cscs-docs nccl.md: NCCL_NET="AWS Libfabric"), Google's TCPX
    # plugin (google/nccl-plugin-gpudirecttcpx src/nccl_plugin.cc: "GPUDirectTCPX_v7"); TCPXO's plugin name is not
    # published: only a network another transport names is told apart from it
    ("AWS Libfabric", "slingshot", False), ("OFI", "slingshot", False), ("IB", "slingshot", True),
    ("Socket", "slingshot", True), ("GPUDirectTCPX_v7", "tcpx", False), ("Socket", "tcpx", True),
    ("Socket", "tcpxo", True), ("IB", "tcpxo", True), ("FasTrak", "tcpxo", False),
])
def test_the_network_warning_knows_the_ib_plugin(network, transport, warned):
    from gpuwait.report.perf import comparison_warnings
    from gpuwait.telemetry.nccl_debug import parse_nccl_debug

    # NCCL's "Using network X", or with only the connection lines (src/transport/net.cc: "via NET/%s/%d")
    for line in (f"Using network {network}", f"Channel 00/0 : 0[0] -> 8[0] [send] via NET/{network}/0"):
        debug = parse_nccl_debug(f"node1:1234:1240 [0] NCCL INFO {line}")
        warnings = comparison_warnings(None, [], "H100-SXM5-80GB", transport, debug)
        assert bool(warnings) == warned and all(f"network {network}" in w for w in warnings)


@pytest.mark.parametrize("network, env, warned", [
    ("Socket", [], True), ("IB", [], False),
    # NCCL_IB_DISABLE=1 puts the prediction on NCCL's socket transport: a log that says Socket ran what was
    # predicted, one that says IB did not (the warning named the cluster's transport, not the predicted one)
    ("Socket", ["--env", "NCCL_IB_DISABLE=1"], False), ("IB", ["--env", "NCCL_IB_DISABLE=1"], True),
])
def test_the_network_warning_reads_the_transport_predicted(capsys, tmp_path, network, env, warned):
    log = tmp_path / "with-network.log"
    log.write_text(f"h:1:2 [0] NCCL INFO Using network {network}\n"
                   + (DATA / "h100-2node-16gpu-large-sizes.log").read_text())
    code, out, _ = run_cli(capsys, "perf", "all_reduce", "--compare", str(log), "--cluster", "dgx-h100", "--servers", "2",
                           *env, "--json")
    found = [w for w in json.loads(out)["warnings"] if "network" in w]
    assert code == 0 and bool(found) == warned, found
    if found and env:
        assert "the prediction ran on tcp (Socket), the cluster's infiniband turned off" in found[0]


def _rows_of(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()[:1].isdigit()]


def _cut_last_row(text: str) -> str:
    last = _rows_of(text)[-1]
    return text[:text.index(last)] + last[:60]  # the job killed while printing its last size


def _glue_info(text: str) -> str:
    row = _rows_of(text)[2]  # another rank's NCCL INFO line written into the middle of a row
    return text.replace(row, row[:50] + "nccl-tests-h100-worker-1:23:40 [7] NCCL INFO comm 0x1 rank 15 - Destroy COMPLETE")


def _retyped(text: str, dtype: str) -> str:
    out = []
    for line in text.splitlines():
        if line.strip()[:1].isdigit():
            tokens = line.split()
            tokens[1], tokens[2] = str(int(tokens[0]) // 2), dtype
            line = "  ".join(tokens)
        out.append(line)
    return "\n".join(out) + "\n"


# The variants real logs take (nccl-tests src/util.cu and src/common.cu, NVIDIA/nccl-tests a0b82b2): each is read
# to the same measured rows, or its unreadable rows are left out with a warning that names the line.
LOG_VARIANTS = {
    "windows line endings": (lambda t: t.replace("\n", "\r\n"), 5),
    "mpirun --tag-output": (lambda t: "".join(f"[1,0]<stdout>:{line}" for line in t.splitlines(keepends=True)), 5),
    "2.17.4+ header lines": (lambda t: "# nccl-tests version 2.19.6 nccl-headers=23007 nccl-library=23007\n"
                             "# Collective test starting: all_reduce_perf\n" + t.replace("graph: 0", "graph: 1 unalign: 0")
                             + "# Collective test concluded: all_reduce_perf\n", 5),
    "-c 0": (lambda t: re.sub(r"(\d)      0(\s)", r"\1    N/A\2", t).replace("validation: 1", "validation: 0"), 5),
    "-d bfloat16": (lambda t: _retyped(t, "bfloat16"), 5),
    "-d half": (lambda t: _retyped(t, "half"), 5),
    "-o max": (lambda t: t.replace("  sum  ", "  max  "), 5),
    "NCCL INFO lines between rows": (lambda t: t.replace("\n  2147483648", "\nnccl-tests-h100-worker-0:20:30 [0] NCCL "
                                                         "INFO Using network IB\n  2147483648"), 5),
    "truncated": (_cut_last_row, 4),
    "NCCL INFO line inside a row": (_glue_info, 4),
}


@pytest.mark.parametrize("variant", sorted(LOG_VARIANTS))
def test_compare_reads_the_variants_real_logs_take(tmp_path, variant):
    from gpuwait.report.perf import compare_log

    original = DATA / "h100-2node-16gpu-large-sizes.log"
    edit, n_rows = LOG_VARIANTS[variant]
    path = tmp_path / "variant.log"
    path.write_bytes(edit(original.read_text()).encode())
    base = {r["size_bytes"]: r for r in compare_log("all_reduce", original, "dgx-h100", 2).rows}
    comparison = compare_log("all_reduce", path, "dgx-h100", 2)
    assert len(comparison.rows) == n_rows
    for row in comparison.rows:
        assert {k: row[k] for k in ("measured_time_us", "measured_busbw_GBps", "predicted_time_us")} == \
            {k: base[row["size_bytes"]][k] for k in ("measured_time_us", "measured_busbw_GBps", "predicted_time_us")}
    unreadable = [w for w in comparison.warnings if "unreadable result row" in w]
    assert len(unreadable) == (n_rows < 5) and all(str(path) in w and "line " in w for w in unreadable)


def test_a_truncated_log_is_compared_and_calibrated_with_a_warning(capsys, tmp_path):
    path = tmp_path / "killed.log"
    path.write_text(_cut_last_row((DATA / "h100-2node-16gpu-large-sizes.log").read_text()))
    code, out, _ = run_cli(capsys, "perf", "all_reduce", "--compare", str(path), "--cluster", "dgx-h100", "--servers", "2")
    assert code == 0 and "warning: " + str(path) + ": 1 unreadable result row(s) skipped, the first line 12" in out
    code, out, _ = run_cli(capsys, "calibrate", str(path), "--cluster", "dgx-h100", "--servers", "2", "--json",
                           "--params", "nic_efficiency")
    doc = json.loads(out)
    assert code == 0 and len(doc["logs"][0]["shipped"]) == 4 and "1 unreadable result row(s)" in doc["warnings"][0]


@pytest.mark.parametrize("kept", [1, 2])
def test_a_log_cut_after_its_size_or_count_warns_as_any_row_cut_short(capsys, tmp_path, kept):
    """Was silent: a last row cut after its size (or size and count) did not look like a row (two whole
    numbers and a third field), so it was passed over and the log read as a shorter sweep, while a row
    cut one field later was named in a warning."""
    text = (DATA / "h100-2node-16gpu-large-sizes.log").read_text()
    last = _rows_of(text)[-1]
    path = tmp_path / "killed.log"
    path.write_text(text[:text.index(last)] + "   ".join(last.split()[:kept]))
    code, out, _ = run_cli(capsys, "perf", "all_reduce", "--compare", str(path), "--cluster", "dgx-h100", "--servers", "2")
    assert code == 0 and f"warning: {path}: 1 unreadable result row(s) skipped, the first line 12" in out
    assert f"({kept} fields)" in out


def test_compare_places_the_ranks_as_the_logs_rank_lines_do(capsys):
    """The L40S socket run (schmaustech/nvidia-tools-image README, tests/nccltests/data/reference): its two '# Rank'
    lines name two hosts, one GPU each (mpirun -H a:1,b:1). Unasked, --compare predicts that run, not the two
    GPUs of one server the cluster file holds; given another layout with the same rank count, it warns."""
    log = DATA / "reference" / "l40s-tcp-2node-2gpu-all_reduce-ring.log"
    cluster = DATA / "reference" / "clusters" / "r760xa-l40s-2x400g.yaml"
    env = ["--env", "NCCL_IB_DISABLE=1", "--env", "NCCL_ALGO=Ring", "--env", "NCCL_NET_GDR_READ=1"]  # its mpirun -x

    def compare(*extra):
        code, out, _ = run_cli(capsys, "perf", "all_reduce", "--compare", str(log), "--cluster", str(cluster), *env,
                               *extra, "--json")
        assert code == 0
        return json.loads(out)

    unasked, stated = compare(), compare("--servers", "2", "-g", "1")
    assert unasked["rows"] == stated["rows"] and unasked["warnings"] == stated["warnings"] == []
    one_server = compare("--servers", "1", "-g", "2")
    assert one_server["rows"] != stated["rows"]
    assert one_server["warnings"] == ["the log ran 1 rank(s) on each of 2 host(s) (its '# Rank' lines); the cluster "
                                      "gives 2 GPU(s) on each of 1 server(s)"]
    # --servers alone that disagrees with the lines fills its servers with the cluster's GPUs (as calibrate does),
    # not the lines' one rank per host, which left one rank for a 2-rank log: an error
    assert compare("--servers", "1") == one_server


def test_rank_lines_that_name_one_host_for_more_ranks_than_a_server_holds_are_a_warning(tmp_path):
    """Two 8-GPU A100 servers whose 16 '# Rank' lines print one host name (containers given one hostname): the
    lines cannot place the ranks on one server of 8 GPUs, so the run is predicted as the cluster's 2 x 8, as it
    was before the lines were read, with a warning, not the error 'gpus per server: got 16' naming a -g never given."""
    from gpuwait.report.perf import compare_log

    original = DATA / "oci-a100-2node-16gpu-all_reduce.log"
    path = tmp_path / "one-name.log"
    path.write_text(re.sub(r"( on +)\S+( +device)", r"\1worker\2", original.read_text()))
    assert path.read_text().count(" on worker ") == 16
    comparison = compare_log("all_reduce", path, "dgx-a100")
    assert comparison.rows == compare_log("all_reduce", original, "dgx-a100").rows
    assert "the log ran 16 rank(s) on each of 1 host(s) (its '# Rank' lines); the cluster gives 8 GPU(s) on each of " \
           "2 server(s)" in comparison.warnings


def test_switch_points_of_a_log_with_several_tables(capsys, tmp_path):
    """nccl-tests -d all (or -o all) prints the sizes again for each datatype (src/common.cu: a table per type):
    the predicted switch points are those of the sizes, not a switch back at the second table's first size."""
    one = DATA / "reference" / "h100-ib-2node-16gpu-all_reduce.log"  # 8 B to 16 GiB: tree/LL ... nvls_tree/Simple
    text = one.read_text()
    table = "\n".join(_rows_of(text)) + "\n"
    two = tmp_path / "two-tables.log"
    two.write_text(text.replace(table, table + _retyped(table, "half"), 1))
    from gpuwait.report.perf import compare_log

    single, double = compare_log("all_reduce", one, "dgx-h100", 2), compare_log("all_reduce", two, "dgx-h100", 2)
    assert len(double.rows) == 2 * len(single.rows)
    assert double.summary["predicted_switches"] == single.summary["predicted_switches"]


def test_a_cputime_log_is_refused_by_compare_and_calibrate(capsys, tmp_path):
    """nccl-tests -C 1 prints the host's enqueue time in a 'cputime' column (src/common.cu), busbw still from the
    completed time: set beside a prediction, every time error would be wrong without a word."""
    text = (DATA / "h100-2node-16gpu-large-sizes.log").read_text().replace("     time   algbw", "  cputime   algbw")
    path = tmp_path / "cputime.log"
    path.write_text(text)
    for args in (["perf", "all_reduce", "--compare", str(path)], ["calibrate", str(path)]):
        code, _, err = run_cli(capsys, *args, "--cluster", "dgx-h100", "--servers", "2")
        lines = err.splitlines()
        assert code == 2 and f"{path}: its time column is cputime (nccl-tests -C 1" in lines[0] and len(lines) == 2


def test_compare_reads_a_log_saved_by_windows_powershell(tmp_path):
    """Windows PowerShell 5.1 writes `>` and Out-File as UTF-16LE with a byte-order mark ("Unicode", its default:
    Microsoft's Out-File and about_Character_Encoding pages) and CRLF line ends: the same rows as the original."""
    from gpuwait.report.perf import compare_log

    original = DATA / "h100-2node-16gpu-large-sizes.log"
    path = tmp_path / "from-powershell.log"
    path.write_bytes(original.read_text().replace("\n", "\r\n").encode("utf-16"))
    assert compare_log("all_reduce", path, "dgx-h100", 2).rows == compare_log("all_reduce", original, "dgx-h100", 2).rows


def test_compare_and_calibrate_read_the_json_file_of_nccl_tests_j(capsys, tmp_path):
    """nccl-tests -J FILE (src/util.cu, builds from late 2025) writes the run as JSON: its results, '# Rank'
    devices and the NCCL library code ("nccl_version": 22907). --compare and calibrate read it as they read
    the stdout; before, it was 'no result rows found'."""
    from gpuwait.report.calibrate import read_log
    from tests.nccltests.test_parse import _json_doc

    path = tmp_path / "all_gather.json"
    path.write_text(json.dumps(_json_doc()))
    code, out, _ = run_cli(capsys, "perf", "all_gather", "--compare", str(path), "--cluster", "dgx-h100", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["n_ranks"] == 4 and doc["nccl"]["version"] == "2.29.7"
    assert [r["measured_time_us"] for r in doc["rows"]] == [19.5, 30.0]  # the 2 MiB in-place column is NaN
    assert read_log(path).nccl_version == "2.29.7" and read_log(path).layout == (1, 4)


def test_a_json_file_without_results_is_one_error_whose_hint_fits_the_command_line(capsys, tmp_path):
    path = tmp_path / "run.json"
    path.write_text('{"nccl_version": 22907}')
    for args in (["perf", "all_reduce", "--compare", str(path)], ["calibrate", str(path)]):
        code, _, err = run_cli(capsys, *args, "--cluster", "dgx-h100", "--servers", "2")
        lines = err.splitlines()
        assert code == 2 and "nccl-tests JSON: no 'results' list" in lines[0], args
        assert lines[1] == "hint: pass the JSON file nccl-tests -J wrote, unedited, or the run's stdout", args


def test_the_printed_summary_is_the_median_of_the_printed_table(capsys):
    """What a reader checks by hand: the summary's median and worst busbw error over sizes >= 1 MiB and the
    floor's median |time error| recomputed from the table's printed columns (2-decimal busbw, 1-decimal
    errors: within their rounding)."""
    log = DATA / "reference" / "h100-ib-2node-16gpu-all_reduce.log"
    code, out, _ = run_cli(capsys, "perf", "all_reduce", "--compare", str(log), "--cluster", "dgx-h100", "--servers", "2")
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in out.splitlines() if line.startswith("│")]
    rows = [(int(c[0]), float(c[3].removesuffix(" %")), float(c[4]), float(c[5])) for c in cells]
    bw = [abs(pred / meas - 1) * 100 for size, _, meas, pred in rows if size >= 2**20]
    floor = [abs(err) for size, err, _, _ in rows if size <= 64 * 2**10]
    summary = re.search(r"busbw error over (\d+) sizes >= 1 MiB: median ([\d.]+) %, worst ([\d.]+) %; time error over "
                        r"(\d+) sizes <= 64 KiB: median ([\d.]+) %", " ".join(out.split()))
    assert code == 0 and summary and (int(summary[1]), int(summary[4])) == (len(bw), len(floor)) == (15, 14)
    assert float(summary[2]) == pytest.approx(np.median(bw), abs=0.06)
    assert float(summary[3]) == pytest.approx(max(bw), abs=0.06)
    assert float(summary[5]) == pytest.approx(np.median(floor), abs=0.06)


def test_an_unreadable_log_is_named_by_perf_compare_and_calibrate_alike(capsys, tmp_path):
    """Both commands read logs through one reader, and its error starts with the file it could not read (several
    logs may be given to calibrate; a compare of a log by a script that loops over them needs it as much)."""
    text_log, json_log = tmp_path / "cut.log", tmp_path / "run.json"
    text_log.write_text("# nccl-tests output lost\n")
    json_log.write_text('{"nccl_version": 22907}')
    for path in (text_log, json_log):
        for args in (["perf", "all_reduce", "--compare", str(path)], ["calibrate", str(path)]):
            code, _, err = run_cli(capsys, *args, "--cluster", "dgx-h100", "--servers", "2")
            assert code == 2 and err.splitlines()[0].startswith(f"error: {path}: nccl-tests "), (args, err)


@pytest.mark.parametrize("version, noted", [("3.0", True), ("2.31.0", True), ("2.30.8", True), ("2.30.7", False),
                                            ("2.18.1", False)])
def test_a_release_newer_than_the_last_checked_is_said_not_predicted_silently(capsys, version, noted):
    """--nccl-version 3.0 was predicted as 2.30's choices with nothing said outside --report-algo (whose line read
    '2.30.3 to 2.30.7 (from: --nccl-version)'): a note now says the release is newer than the last one checked."""
    code, out, _ = run_cli(capsys, "perf", "all_reduce", "--nccl-version", version, "-b", "1M", "-e", "1M")
    assert code == 0 and ("is newer than the last release gpuwait checked (2.30.7)" in out) == noted
    code, out, _ = run_cli(capsys, "perf", "all_reduce", "--nccl-version", version, "-b", "1M", "-e", "1M", "--json")
    notes = json.loads(out)["notes"]
    assert code == 0 and (notes == [f"NCCL {version} is newer than the last release gpuwait checked (2.30.7): predicted "
                                    "as 2.30.3 to 2.30.7's algorithm and protocol choices, which a later release may "
                                    "have changed"] if noted else notes == [])
    log = str(DATA / "h100-2node-16gpu-large-sizes.log")
    code, out, _ = run_cli(capsys, "perf", "all_reduce", "--compare", log, "--servers", "2", "--nccl-version", version,
                           "--json")
    assert code == 0 and any("newer than the last release" in w for w in json.loads(out)["warnings"]) == noted


def test_a_gpu_name_the_driver_did_not_know_is_not_called_a_mismatch(capsys):
    """The published GB200 NVL72 table (18 trays) lists its GPUs as 'NVIDIA Graphics Device' (a driver that does
    not know the board): compared against its own GB200 cluster it was warned 'the log ran on NVIDIA Graphics Device
    GPUs; the cluster has GB200', a mismatch the log does not show. It is now said to be unchecked."""
    log = DATA / "reference" / "gb200-nvl72-18node-72gpu-all_reduce.log"
    code, out, _ = run_cli(capsys, "perf", "all_reduce", "--compare", str(log), "--cluster", "gb200-nvl72", "--json")
    warnings = json.loads(out)["warnings"]
    assert code == 0 and not any("the log ran on" in w for w in warnings)
    assert ("the log names its GPUs 'NVIDIA Graphics Device', which gpuwait cannot read as a GPU model: not checked "
            "against the cluster's GB200") in warnings


def test_an_empty_cluster_name_is_an_unknown_preset_not_the_working_directory(capsys):
    code, _, err = run_cli(capsys, "perf", "all_reduce", "--cluster", "")
    assert code == 2 and err.splitlines()[0].startswith("error: --cluster: unknown preset ''; expected one of dgx-a100")
    code, _, err = run_cli(capsys, "run", "")  # a file argument: the empty path, not the working directory
    assert code == 2 and err.splitlines()[0] == "error: got an empty path; expected a YAML file"


def test_compare_says_which_of_the_logs_nccl_variables_the_prediction_did_not_use(capsys):
    """The forced-Ring 2-node H100 table ran 'mpirun ... -x NCCL_ALGO=Ring -x NCCL_MIN_CTAS=24
    -x NCCL_IB_QPS_PER_CONNECTION=2' (NVIDIA/nccl-tests#309): compared without them it was predicted as NVLSTree
    (busbw median error 16 %) and nothing said the prediction ran another configuration. Given with --env, nothing
    is said; a value NCCL's default has (NCCL_IB_DISABLE=0) or a name gpuwait does not model (NCCL_IB_HCA) never is."""
    log = DATA / "reference" / "h100-ib-2node-16gpu-all_reduce-ring-forced.log"
    args = ["perf", "all_reduce", "--compare", str(log), "--cluster", "dgx-h100", "--json"]
    code, out, _ = run_cli(capsys, *args)
    assert code == 0 and ("the log's run set NCCL_ALGO=Ring, NCCL_MIN_CTAS=24, NCCL_IB_QPS_PER_CONNECTION=2, which this "
                          "prediction did not: pass them with --env to predict that run") in json.loads(out)["warnings"]
    given = ["--env", "NCCL_ALGO=Ring", "--env", "NCCL_MIN_CTAS=24", "--env", "NCCL_IB_QPS_PER_CONNECTION=2"]
    code, out, _ = run_cli(capsys, *args, *given)
    assert code == 0 and not any("the log's run set" in w for w in json.loads(out)["warnings"])
    other = DATA / "reference" / "h100-ib-2node-16gpu-all_reduce.log"  # NCCL_IB_DISABLE=0, NCCL_IB_HCA=... as well
    code, out, _ = run_cli(capsys, "perf", "all_reduce", "--compare", str(other), "--cluster", "dgx-h100", "--json")
    set_ = [w for w in json.loads(out)["warnings"] if "the log's run set" in w]
    assert code == 0 and set_ == ["the log's run set NCCL_NET_GDR_LEVEL=1, NCCL_P2P_LEVEL=NVL, which this prediction "
                                  "did not: pass them with --env to predict that run"]


def test_two_runs_in_one_log_file_are_a_warning(capsys, tmp_path):
    """Two runs appended to one file (two '# nThread' headers, another host's '# Rank' lines) were read as one
    sweep with nothing said: their rows mixed, the second run's hosts dropped. Both commands now say so."""
    one = (DATA / "oci-a100-2node-16gpu-all_reduce.log").read_text()
    path = tmp_path / "two-runs.log"
    path.write_text(one + one.replace("nccl-allreduce-job0", "nccl-allreduce-job1"))
    expected = (f"{path}: the log holds 2 runs (2 '# nThread' lines), read as one sweep: split it into one log per run "
                "to compare or calibrate each")
    code, out, _ = run_cli(capsys, "perf", "all_reduce", "--compare", str(path), "--cluster", "oci-a100-roce", "--json")
    assert code == 0 and expected in json.loads(out)["warnings"]
    code, out, _ = run_cli(capsys, "calibrate", str(path), "--cluster", "oci-a100-roce", "--json",
                           "--params", "nic_efficiency")
    assert code == 0 and expected in json.loads(out)["warnings"]
    # its summary counted every row as a size ("over 28 sizes" for 14): rows and sizes are told apart
    code, out, _ = run_cli(capsys, "perf", "all_reduce", "--compare", str(path), "--cluster", "oci-a100-roce")
    assert code == 0 and "busbw error over 28 rows (14 sizes) >= 1 MiB" in out.replace("\n", " ")
    assert "time error over 28 rows (14 sizes) <= 64 KiB" in out.replace("\n", " ")
    assert "in-place at 48 of 62 rows" in out.replace("\n", " ")


def test_json_carries_the_tables_average_bus_bandwidth(capsys):
    """The text ends with '# Avg bus bandwidth : X' (nccl-tests' mean over both columns); --json had no such
    figure, so a script reading the document could not get the table's summary (audit36)."""
    argv = ["perf", "all_gather", "-b", "1M", "-e", "64M", "-f", "8", "--cluster", "oci-a100-roce", "--servers", "2"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    printed = float(re.search(r"# Avg bus bandwidth\s*:\s*(\S+)", text)[1])
    assert main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["avg_busbw_GBps"] == pytest.approx(printed, rel=1e-5)
    busbw = [r[k] for r in doc["rows"] for k in ("oop_busbw_GBps", "ip_busbw_GBps")]
    assert doc["avg_busbw_GBps"] == pytest.approx(sum(busbw) / len(busbw))
