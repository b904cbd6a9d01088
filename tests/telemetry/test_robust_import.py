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
