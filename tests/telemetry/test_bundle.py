"""load_telemetry_dir on a directory of the real examples (plus a simulated scrape)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpuwait.telemetry.bundle import load_telemetry_dir
from gpuwait.telemetry.errors import TelemetryFormatError
from gpuwait.telemetry.metrics import metrics_from_result
from gpuwait.telemetry.parquet import write_metrics_parquet
from tests.telemetry.conftest import make_result

DATA = Path(__file__).parent / "data"
NCCL_TESTS = Path(__file__).parents[1] / "nccltests" / "data"  # published logs, see tests/nccltests/test_parse.py


def test_a_directory_of_everything(tmp_path, roce_topo):
    for f in DATA.iterdir():
        shutil.copy(f, tmp_path / f.name)
    host = tmp_path / "host1"
    host.mkdir()
    shutil.copy(NCCL_TESTS / "oci-a100-2node-16gpu-all_reduce.log", host / "allreduce.out")
    # nccl-tests with NCCL_DEBUG=INFO: one file, two readers
    debug = (DATA / "nccl-debug-socket-shm.log").read_text()
    mixed = debug + (NCCL_TESTS / "nccl-tests-2.18-mpi-socket-all_reduce.log").read_text()
    (host / "mixed.log").write_text(mixed)
    write_metrics_parquet(metrics_from_result(make_result(roce_topo), roce_topo), tmp_path / "sim.parquet")
    (tmp_path / ".hidden").write_text("ignored")

    b = load_telemetry_dir(tmp_path)
    assert b.kinds["host1/mixed.log"] == ("nccl_tests", "nccl_debug")
    assert b.kinds["host1/allreduce.out"] == ("nccl_tests",)
    assert b.kinds["perfquery-classic.txt"] == ("perfquery",) and b.kinds["sim.parquet"] == ("parquet",)
    assert b.kinds["ethtool-mlx5-constructed.txt"] == ("ethtool",)
    assert b.nccl_tests["host1/allreduce.out"].avg_busbw_GBps == 66.4834
    assert b.nccl_tests["host1/mixed.log"].collective == "all_reduce"
    assert b.nccl_debug["host1/mixed.log"].socket_fallback
    assert b.nccl_debug["nccl-debug-roce.log"].network == "IB"
    assert b.perfquery["perfquery-extended.txt"]["PortXmitWait"] == 22730501
    assert b.ethtool["ethtool-mlx5-constructed.txt"]["rx_prio3_pause"] == 1523
    assert b.metrics.value_of("node_network_speed_bytes", device="eth0") == 1.25e8
    assert b.metrics.value_of("DCGM_FI_DEV_GPU_UTIL", Hostname="s0", gpu=0) == 60
    assert ".hidden" not in b.kinds


def test_unrecognized_file_is_named(tmp_path):
    shutil.copy(DATA / "node-exporter.prom", tmp_path)
    (tmp_path / "notes.md").write_text("# My notes\nthe cluster was slow on tuesday\n")
    with pytest.raises(TelemetryFormatError, match=r"notes.md: not a telemetry file .*expected Prometheus text"):
        load_telemetry_dir(tmp_path)


def test_broken_file_is_named(tmp_path):
    (tmp_path / "bad.prom").write_text('up{job="x} 1\n')
    with pytest.raises(TelemetryFormatError, match="bad.prom line 1"):
        load_telemetry_dir(tmp_path)
    (tmp_path / "bad.prom").unlink()
    (tmp_path / "table.log").write_text("# nThread 1 nGpus 1 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 "
                                        "iters: 20 agg iters: 1 validation: 1 graph: 0\n  8  2  float  sum  -1  x\n")
    with pytest.raises(TelemetryFormatError, match="table.log: nccl-tests log line 2"):
        load_telemetry_dir(tmp_path)
    (tmp_path / "table.log").write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(TelemetryFormatError, match="table.log: cannot read as text"):
        load_telemetry_dir(tmp_path)


def test_missing_or_empty_directory(tmp_path):
    with pytest.raises(TelemetryFormatError, match="no files"):
        load_telemetry_dir(tmp_path)
    with pytest.raises(TelemetryFormatError, match="not a directory"):
        load_telemetry_dir(tmp_path / "nope")
