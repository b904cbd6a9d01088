"""Importers tolerate what real files contain: bad rows are skipped and counted (the first few named),
a wrong column type is one error naming the column, and every regex stays linear on long lines."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpuwait.cli.main import main
from gpuwait.telemetry.bundle import load_telemetry_dir, sniff_kinds
from gpuwait.telemetry.errors import TelemetryFormatError
from gpuwait.telemetry.nccl_debug import parse_nccl_debug
from gpuwait.telemetry.nccl_graph import parse_nccl_graph
from gpuwait.telemetry.parquet import read_metrics_parquet

DATA = Path(__file__).parent / "data"
LOGS = Path(__file__).parents[1] / "nccltests" / "data" / "reference"
LABELS = pa.map_(pa.string(), pa.string())


def _write(path, columns, metadata=None):
    table = pa.table(columns)
    if metadata is not None:
        table = table.replace_schema_metadata(metadata)
    pq.write_table(table, path)
    return path


def test_parquet_nulls_are_skipped_and_named(tmp_path):
    path = _write(tmp_path / "m.parquet", {
        "name": pa.array(["a", None, "b"], pa.string()),
        "labels": pa.array([[("h", "x")], None, [("h", None)]], LABELS),
        "value": pa.array([1.0, 2.0, None]), "timestamp_s": pa.array([None, None, 3.0], pa.float64())})
    skipped = []
    metrics = read_metrics_parquet(path, skipped=skipped)
    assert len(metrics) == 1 and skipped == [f"{path} row 1: no name", f"{path} row 2: no value"]


def test_parquet_wrong_column_type_is_one_error(tmp_path):
    path = _write(tmp_path / "m.parquet", {"name": ["a"], "labels": ["h=x"], "value": ["fast"], "timestamp_s": [1.0]})
    with pytest.raises(TelemetryFormatError, match="column 'labels' is string; expected map<string, string>"):
        read_metrics_parquet(path)


def test_parquet_bad_metadata_is_skipped_and_counted(tmp_path):
    (tmp_path / "t").mkdir()
    _write(tmp_path / "t" / "m.parquet", {"name": ["a"], "labels": pa.array([[("h", "x")]], LABELS), "value": [1.0],
                                          "timestamp_s": [1.0]}, {b"gpuwait.metric_info": b"{not json"})
    bundle = load_telemetry_dir(tmp_path / "t")
    assert len(bundle.metrics) == 1 and "not the JSON gpuwait writes" in bundle.skipped[0]


@pytest.mark.parametrize("line", ["x" * 200_000, "1" * 200_000, "a" + "." * 200_000, 'a{b="c",' * 25_000])
def test_long_lines_parse_in_linear_time(line):
    text = line + "\n" + (DATA / "nccl-debug-roce.log").read_text()
    start = time.perf_counter()
    parse_nccl_debug(text)
    parse_nccl_graph(text)  # searched for its host from every character: 200 KB of x took minutes (fuzz seed 3036)
    sniff_kinds(Path("x.log"), text)
    assert time.perf_counter() - start < 1.0


def test_compare_skips_rows_timed_zero(tmp_path, capsys):
    text = (LOGS / "l40s-roce-2node-4gpu-all_reduce-ring.log").read_text()
    lines = text.splitlines(keepends=True)
    first_row = next(i for i, ln in enumerate(lines) if re.match(r"^\s+\d+\s+\d+\s+\S", ln))
    lines[first_row] = re.sub(r"(\s)\d+\.\d+(\s)", r"\g<1>0.00\g<2>", lines[first_row])
    (tmp_path / "log.txt").write_text("".join(lines))
    assert main(["perf", "all_reduce", "--cluster", "dgx-h100", "--compare", str(tmp_path / "log.txt")]) == 0
    assert "1 row(s) skipped, their measured time is 0.00 us (sizes 8)" in capsys.readouterr().out


# ------------------------------------------------------------------ dumps with a bad line (issue 14)

def _corrupt(text: str, pick, replace) -> tuple[str, int]:
    """``text`` with the first line ``pick`` accepts replaced by ``replace(line)``; its line number."""
    lines = text.splitlines()
    i = next(k for k, ln in enumerate(lines) if pick(ln))
    lines[i] = replace(lines[i])
    return "\n".join(lines) + "\n", i + 1


def test_a_real_ethtool_dump_with_mangled_lines_keeps_the_rest():
    """A real mlx5 dump (bpf@vger.kernel.org, 2024) with one line that lost its colon and one cut off
    mid-value: the other 99 counters are read and one warning names the file, the count and the first."""
    from gpuwait.telemetry.nic_counters import parse_ethtool_stats

    text = (DATA / "ethtool-mlx5-bpf-list-2024.txt").read_text()
    text, first = _corrupt(text, lambda ln: "rx_discards_phy:" in ln, lambda ln: ln.replace(":", ""))
    text, _ = _corrupt(text, lambda ln: "tx_prio0_bytes:" in ln, lambda ln: ln[:-4] + "\x1b[0")
    skipped: list[str] = []
    counters = parse_ethtool_stats(text, source="host1/ethtool-mlx5_0.txt", skipped=skipped)
    assert len(counters) == 101 - 2 and counters["tx_bytes_phy"] == 357657403514
    assert "rx_discards_phy" not in counters and "tx_prio0_bytes" not in counters
    assert skipped == [f"host1/ethtool-mlx5_0.txt: 2 unreadable line(s) skipped, the first line {first}: "
                       "'rx_discards_phy 58591428329' (expected 'NIC statistics:' and lines '     <counter>: "
                       "<integer>' (e.g. '     rx_prio3_pause: 1523'))"]
    with pytest.raises(TelemetryFormatError, match=f"line {first}: cannot read"):
        parse_ethtool_stats(text)  # without a list to report in, the strict reader still names the line


def test_a_real_perfquery_dump_with_a_bad_line_keeps_the_rest():
    """perfquery -x output (treydock/infiniband_exporter's test data) with a counter whose value is cut
    off: the other 24 counters are read and one warning names the line."""
    from gpuwait.telemetry.nic_counters import parse_perfquery

    text = (DATA / "perfquery-extended.txt").read_text()
    text, first = _corrupt(text, lambda ln: ln.startswith("PortRcvData:"), lambda ln: "PortRcvData:.........")
    skipped: list[str] = []
    counters = parse_perfquery(text, source="sw1/perfquery-lid1719-1.txt", skipped=skipped)
    assert len(counters) == 24 and counters["PortXmitData"] == 36298026860928 and "PortRcvData" not in counters
    assert len(skipped) == 1 and skipped[0].startswith(
        f"sw1/perfquery-lid1719-1.txt: 1 unreadable line(s) skipped, the first line {first}: 'PortRcvData:.........'")


@pytest.mark.parametrize("name, text", [
    ("ethtool.txt", "NIC statistics:\n     rx_bytes: lots\n     tx_bytes: ???\n"),
    ("perfquery.txt", "# Port counters: Lid 7 port 1\nPortXmitData:....xyz\nPortRcvData:....\n"),
])
def test_a_dump_with_nothing_readable_is_one_clear_error(tmp_path, name, text):
    (tmp_path / name).write_text(text)
    with pytest.raises(TelemetryFormatError) as err:
        load_telemetry_dir(tmp_path)
    message = str(err.value)
    assert message.startswith(f"{name} line 2: cannot read") and "2 unreadable lines, no counter read" in message


def test_a_bundle_reports_one_warning_per_damaged_file(tmp_path):
    """Through the directory reader: a dump with bad lines is read, and the bundle carries one
    warning for it, which the diagnosis lists among what it could not read."""
    text = (DATA / "ethtool-mlx5-bpf-list-2024.txt").read_text()
    text, first = _corrupt(text, lambda ln: "ch_poll:" in ln, lambda ln: ln.replace("151091830", "151O91830"))
    (tmp_path / "node01").mkdir()
    (tmp_path / "node01" / "ethtool-mlx5_0.txt").write_text(text)
    bundle = load_telemetry_dir(tmp_path)
    assert len(bundle.ethtool["node01/ethtool-mlx5_0.txt"]) == 100
    assert len(bundle.skipped) == 1 and f"the first line {first}: 'ch_poll: 151O91830'" in bundle.skipped[0]


def test_a_real_nccl_tests_log_with_a_row_cut_short_keeps_the_rest(tmp_path):
    """A published nccl-tests log whose job was killed mid-row (the row stops after its first
    half): the other rows are read, one warning names the row."""
    from gpuwait.telemetry.nccltests_log import parse_nccl_tests_log

    text = (LOGS / "l40s-roce-2node-4gpu-all_reduce-ring.log").read_text()
    full = parse_nccl_tests_log(text)
    pick = re.compile(r"^\s+\d+\s+\d+\s+\S")
    text, first = _corrupt(text, lambda ln: bool(pick.match(ln)), lambda ln: " ".join(ln.split()[:8]))
    skipped: list[str] = []
    log = parse_nccl_tests_log(text, source="nccl.log", skipped=skipped)
    assert len(log.rows) == len(full.rows) - 1
    assert len(skipped) == 1 and skipped[0].startswith(f"nccl.log: 1 unreadable result row(s) skipped, the first line {first}:")
    (tmp_path / "nccl.log").write_text(text)
    bundle = load_telemetry_dir(tmp_path)
    assert len(bundle.nccl_tests["nccl.log"].rows) == len(full.rows) - 1 and len(bundle.skipped) == 1
