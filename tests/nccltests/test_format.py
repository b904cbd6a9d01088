"""nccl-tests output reproduced byte for byte: factors, sizes, numbers, lines, whole real logs.

Fixtures in data/ are copied verbatim from published logs (docs/sources.md):
  oci-a100-2node-16gpu-all_reduce.log        oracle-quickstart/oci-hpc-oke README.md
  nccl-tests-2.18-mpi-socket-all_reduce.log  eunomia-bpf/nccl-eBPF docs/tmp/socket-thread-validation.md @b2873942
  h100-dgx-1node-8gpu-all_reduce.table       NVIDIA/dgxc-benchmarking nccl/README.md @46e42015
Busbw factors: NVIDIA/nccl-tests doc/PERFORMANCE.md.
Number formats: NVIDIA/nccl-tests src/util.cu getFloatStr (current) and src/common.cu (legacy).
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from gpuwait.collectives.nccltests import (
    COLLECTIVES,
    DTYPES,
    BuildInfo,
    Device,
    Row,
    RunConfig,
    average_busbw_GBps,
    bandwidths_GBps,
    busbw_factor,
    get_collective,
    make_row,
    parse_size_arg,
    size_and_count,
    size_sweep,
)
from gpuwait.errors import SpecError, UnknownNameError
from gpuwait.report.nccltests import (
    format_column_header,
    format_config_line,
    format_device_line,
    format_footer,
    format_header,
    format_row,
    format_table,
    get_float_str,
    legacy_time_str,
)
from gpuwait.telemetry.nccltests_log import parse_nccl_tests_log

DATA = Path(__file__).parent / "data"
MPI_TAG = re.compile(r"(?m)^\[1,0\]<stdout>:")


def _data(name: str) -> str:
    return (DATA / name).read_text()


# ---- registry and busbw factors (README-busbw.md "Summary list of correction factors") ----

@pytest.mark.parametrize("n", [2, 4, 8, 16, 64])
@pytest.mark.parametrize("collective, factor", [
    ("all_reduce", lambda n: 2 * (n - 1) / n), ("reduce_scatter", lambda n: (n - 1) / n),
    ("all_gather", lambda n: (n - 1) / n), ("alltoall", lambda n: (n - 1) / n),
    ("broadcast", lambda n: 1.0), ("reduce", lambda n: 1.0), ("sendrecv", lambda n: 1.0),
])
def test_busbw_factors_match_performance_md(collective, factor, n):
    assert busbw_factor(collective, n) == factor(n)


def test_registry_describes_the_seven_programs():
    assert set(COLLECTIVES) == {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "alltoall",
                                "sendrecv"}
    assert [c.name for c in COLLECTIVES.values() if c.has_root] == ["broadcast", "reduce"]
    assert {c.name for c in COLLECTIVES.values() if c.has_redop} == {"all_reduce", "reduce_scatter", "reduce"}
    assert {c.name for c in COLLECTIVES.values() if c.size_is_total} == {"all_gather", "reduce_scatter", "alltoall"}
    assert get_collective("all_reduce_perf_mpi") is COLLECTIVES["all_reduce"]
    assert get_collective("./build/alltoall_perf") is COLLECTIVES["alltoall"]
    with pytest.raises(UnknownNameError, match="unknown nccl-tests collective 'allreduce'"):
        get_collective("allreduce")


def test_dtype_sizes():
    assert DTYPES == {"int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8, "half": 2,
                      "float": 4, "double": 8, "bfloat16": 2, "f8e4m3": 1, "f8e5m2": 1}


def test_real_rows_obey_the_factor():
    # H100 (n=8) and OCI A100 (n=16) largest rows: busbw = algbw x factor within print rounding
    assert 274.38 * busbw_factor("all_reduce", 8) == pytest.approx(480.16, abs=0.01)
    assert 126.90 * busbw_factor("all_reduce", 16) == pytest.approx(237.94, abs=0.01)


# ---- sizes ----

def test_sweep_8_to_8G_by_2_has_31_sizes():
    sizes = size_sweep(parse_size_arg("8"), parse_size_arg("8G"), step_factor=2)
    assert len(sizes) == 31
    assert sizes[0] == 8 and sizes[-1] == 8 * 2**30
    assert sizes == [8 * 2**i for i in range(31)]


def test_sweep_with_fixed_step_and_defaults():
    assert size_sweep(2**20, 4 * 2**20) == [2**20, 2 * 2**20, 3 * 2**20, 4 * 2**20]  # -i defaults to 1M
    assert size_sweep(100, 350, step_bytes=100) == [100, 200, 300]
    assert size_sweep(64, 64, step_factor=2) == [64]
    assert size_sweep(8, 32, step_factor=1, step_bytes=8) == [8, 16, 24, 32]  # -f 1 falls back to -i


@pytest.mark.parametrize("kwargs, message", [
    (dict(min_bytes=64, max_bytes=8, step_factor=2), "64 > 8"),
    (dict(min_bytes=0, max_bytes=8, step_factor=2), "cannot start at 0"),
    (dict(min_bytes=8, max_bytes=64, step_bytes=0), "more than zero"),
    (dict(min_bytes=8, max_bytes=64, step_factor=1.5), "whole number"),
    (dict(min_bytes=8, max_bytes=64, step_factor="2"), "whole number"),
    (dict(min_bytes=1, max_bytes=2**33, step_bytes=1), "expected at most"),
    (dict(min_bytes=-1, max_bytes=8, step_factor=2), "min_bytes"),
])
def test_sweep_refuses_what_nccl_tests_would_loop_on(kwargs, message):
    with pytest.raises(SpecError, match=message):
        size_sweep(**kwargs)


@pytest.mark.parametrize("text, expected", [
    ("8", 8), ("8G", 8 * 2**30), ("8g", 8 * 2**30), ("128M", 128 * 2**20), ("1K", 1024), ("0.5k", 512),
    ("8GB", 8 * 2**30), ("8 G", 8 * 2**30), ("1e3", 1000), ("1.5", 1), (17179869184, 17179869184),
])
def test_parse_size_arg_like_parsesize(text, expected):
    assert parse_size_arg(text) == expected


@pytest.mark.parametrize("text, message", [("8T", "unknown suffix 'T'"), ("abc", "cannot read"), ("", "cannot read"),
                                           ("-1", "zero or more")])
def test_parse_size_arg_errors(text, message):
    with pytest.raises(SpecError, match=message):
        parse_size_arg(text)


@pytest.mark.parametrize("collective, size, dtype, n, expected", [
    ("all_reduce", 10, "float", 8, (8, 2, True)),
    ("all_reduce", 1024, "float", 8, (1024, 256, False)),
    ("broadcast", 7, "half", 8, (6, 3, True)),
    ("all_gather", 2**20, "float", 8, (2**20, 2**15, False)),
    ("all_gather", 1000, "float", 8, (896, 28, True)),     # 250/8 = 31 -> 28 (16-byte multiple)
    ("reduce_scatter", 64, "float", 8, (0, 0, True)),        # small sizes vanish upstream
    ("alltoall", 2**20 + 12, "bfloat16", 16, (2**20, 2**15, True)),
    ("sendrecv", 9, "double", 2, (8, 1, True)),
])
def test_size_and_count_round_down_like_setupargs(collective, size, dtype, n, expected):
    sc = size_and_count(collective, size, dtype, n)
    assert (sc.size_bytes, sc.count, sc.rounded) == expected
    assert sc.requested_bytes == size


def test_older_builds_without_16_byte_alignment():
    sc = size_and_count("reduce_scatter", 64, "float", 8, align_bytes=1)
    assert (sc.size_bytes, sc.count, sc.rounded) == (64, 2, False)


def test_size_and_count_matches_the_real_oci_table():
    log = parse_nccl_tests_log(_data("oci-a100-2node-16gpu-all_reduce.log"))
    for row in log.rows:
        sc = size_and_count("all_reduce", row.size_bytes, row.dtype, 16)
        assert (sc.size_bytes, sc.count) == (row.size_bytes, row.count)


# ---- numbers ----

@pytest.mark.parametrize("value, width, current, legacy", [
    (36.47, 7, "  36.47", "  36.47"),
    (100.1, 7, " 100.10", "  100.1"),
    (18289, 7, "18289.0", "  18289"),
    (4366.46, 7, "4366.46", " 4366.5"),
    (58479.5, 7, "58479.5", "  58480"),
    (123456, 7, " 123456", " 123456"),
    (1.2e6, 7, "1200000", "1200000"),
])
def test_time_strings_current_and_legacy(value, width, current, legacy):
    assert get_float_str(value, width) == current
    assert legacy_time_str(value) == legacy


def test_get_float_str_falls_back_to_exponent():
    # published logs show "1.2e+06"; %.0f of 1.2e6 still fits 7 columns, so the exponent starts at 1e7 for time
    assert get_float_str(1.2e7, 7) == "1.2e+07"
    assert get_float_str(1.2e6, 6) == " 1e+06"   # bandwidth columns are 6 wide: %.0e
    assert get_float_str(1e100, 7) == "1.0e+10"  # snprintf(width+1) truncates, as in C
    assert get_float_str(9999.996, 7) == "10000.0"  # %.2f would round up to 8 characters
    assert get_float_str(0.001, 6) == "  0.00"


# ---- lines ----

def test_config_and_device_lines_of_every_vintage():
    # nccl-tests src/util.cu vs src/common.cu: old builds (nccl-tests#107) and 2022-2025 builds
    old = RunConfig(min_bytes=1310720000, max_bytes=1310720000, step_bytes=1048576, warmup_iters=5,
                    agg_iters=None, graph=None, unalign=None)
    assert format_config_line(old) == ("# nThread 1 nGpus 1 minBytes 1310720000 maxBytes 1310720000 "
                                       "step: 1048576(bytes) warmup iters: 5 iters: 20 validation: 1")
    assert format_device_line(Device(0, "ip-172-31-20-228", 0, "Tesla V100-SXM2-16GB", group=None, pid=1320,
                                     pci="0x00")) == \
        "#   Rank  0 Pid   1320 on ip-172-31-20-228 device  0 [0x00] Tesla V100-SXM2-16GB"
    fork = RunConfig(extra=(("single_test", 0), ("test_buffer_kind", 2)), unalign=None, graph=None)
    assert format_config_line(fork).endswith("validation: 1 single_test: 0 test_buffer_kind: 2")
    assert format_config_line(RunConfig()).endswith("agg iters: 1 validation: 1 graph: 0 unalign: 0")


def test_blocking_line_and_version_line():
    lines = format_header(RunConfig(blocking=1), [], program="all_reduce_perf",
                          build=BuildInfo("2.19.6", 22907, 22907))
    assert lines[0] == "# nccl-tests version 2.19.6 nccl-headers=22907 nccl-library=22907"
    assert lines[1] == "# Collective test starting: all_reduce_perf"
    assert lines[3] == "# Blocking Enabled: wait for completion and barrier after each collective "
    assert lines[-2:] == ["#", "# Using devices"]


def test_column_headers_current_legacy_cputime_timestamps():
    legacy = format_column_header(style="legacy")
    assert legacy[1] == ("#       size         count      type   redop    root     time   algbw   busbw #wrong"
                         "     time   algbw   busbw #wrong")
    assert legacy[2].rstrip() == ("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
                                  "            (us)  (GB/s)  (GB/s)")
    assert "cputime" in format_column_header(report_cputime=True)[1]
    ts = format_column_header(report_timestamps=True)
    assert ts[1].endswith("#wrong           timestamp") and ts[2].endswith("%Y-%m-%d %H:%M:%S")


def test_footer_with_min_bw_check_and_concluded_line():
    assert format_footer(190.0, min_bw_GBps=200.0)[1] == "# Avg bus bandwidth    : 190 OK"
    assert format_footer(170.0, min_bw_GBps=200.0)[1] == "# Avg bus bandwidth    : 170 FAILED"
    assert format_footer(1.5, out_of_bounds=3, program="all_gather_perf") == [
        "# Out of bounds values : 3 FAILED", "# Avg bus bandwidth    : 1.5 ", "#",
        "# Collective test concluded: all_gather_perf", "#"]


def test_validation_off_prints_na_and_timestamps_append():
    row = make_row("alltoall", 2**20, "float", 8, oop_time_s=1e-4, ip_time_s=1e-4, wrong=None)
    text = format_row(row)
    assert text.endswith("    N/A") and text.count("N/A") == 2
    validated = format_row(make_row("alltoall", 2**20, "float", 8, oop_time_s=1e-4, ip_time_s=1e-4))
    assert validated.count("N/A") == 1  # alltoall never validates in place
    stamped = replace(row, timestamp="2025-10-01 12:00:00")
    assert format_row(stamped).endswith("    N/A  2025-10-01 12:00:00")


def test_bad_style_is_refused():
    row = make_row("all_reduce", 8, "float", 2, oop_time_s=1e-5, ip_time_s=1e-5)
    with pytest.raises(SpecError, match="style: got 'fancy'"):
        format_row(row, style="fancy")
    with pytest.raises(SpecError, match="more than zero seconds"):
        bandwidths_GBps("all_reduce", 2, "float", 0.0, 2)


# ---- real tables regenerated ----

def test_h100_row_regenerated_from_its_numbers():
    # NVIDIA/dgxc-benchmarking nccl/README.md (the summary drops the #wrong columns)
    published = "   134217728 33554432  float  sum   -1     586.4   228.88  400.53     586.0  229.05  400.84"
    row = Row(134217728, 33554432, "float", "sum", -1, 586.4, 228.88, 400.53, 0, 586.0, 229.05, 400.84, 0)
    tokens = format_row(row, style="legacy").split()
    assert tokens[:8] + tokens[9:12] == published.split()
    # The current getFloatStr would have printed two decimals: this table came from an older build.
    assert format_row(row).split()[5] == "586.40"


def test_every_h100_row_regenerates_in_legacy_style():
    table = _data("h100-dgx-1node-8gpu-all_reduce.table")
    published = [line for line in table.splitlines() if not line.startswith("#")]
    log = parse_nccl_tests_log(table)
    for line, row in zip(published, log.rows, strict=True):
        full = replace(row, oop_wrong=0, ip_wrong=0)
        tokens = format_row(full, style="legacy").split()
        assert tokens[:8] + tokens[9:12] == line.split()


def test_h100_times_explain_the_bandwidths():
    # algbw recomputed from the printed (rounded) time agrees within that rounding
    log = parse_nccl_tests_log(_data("h100-dgx-1node-8gpu-all_reduce.table"))
    for row in log.rows[20:]:
        algbw, busbw = bandwidths_GBps("all_reduce", row.count, "float", row.oop_time_us * 1e-6, 8)
        slack = algbw * (0.5 / row.oop_time_us if row.oop_time_us >= 10000 else 0.05 / row.oop_time_us) + 0.005
        assert algbw == pytest.approx(row.oop_algbw_GBps, abs=slack)
        assert busbw == pytest.approx(row.oop_busbw_GBps, abs=1.75 * slack + 0.005)


def test_nccl_tests_2_18_log_regenerates_byte_for_byte():
    text = _data("nccl-tests-2.18-mpi-socket-all_reduce.log")
    log = parse_nccl_tests_log(text)
    out = format_table(log.rows, config=log.config, devices=log.devices, program=log.program, build=log.build,
                       avg_busbw_GBps=log.avg_busbw_GBps)
    assert out == MPI_TAG.sub("", text)


def test_oci_log_regenerates_in_legacy_style():
    # The README copy lost trailing spaces; everything else matches exactly.
    text = _data("oci-a100-2node-16gpu-all_reduce.log")
    log = parse_nccl_tests_log(text)
    out = format_table(log.rows, config=log.config, devices=log.devices, style="legacy",
                       avg_busbw_GBps=log.avg_busbw_GBps)
    assert [line.rstrip() for line in out.splitlines()] == [line.rstrip() for line in text.splitlines()]


def test_h100_average_recomputed_from_rows():
    # 64 values printed to 0.01 each: their mean is within 0.005 of the unrounded mean nccl-tests printed
    log = parse_nccl_tests_log(_data("h100-dgx-1node-8gpu-all_reduce.table"))
    assert log.avg_busbw_GBps == 159.151
    assert average_busbw_GBps(log.rows) == pytest.approx(159.151, abs=0.0055)


# ---- round trip ----

@pytest.mark.parametrize("style", ["current", "legacy"])
@pytest.mark.parametrize("collective", sorted(COLLECTIVES))
def test_format_then_parse_gives_the_printed_numbers(collective, style):
    n = 16
    sizes = size_sweep(8, 2**34, step_factor=8)
    times_s = [3e-6 * 1.7**i + s / 90e9 for i, s in enumerate(sizes)]
    times_s[-1] *= 200  # 19 s: the time column switches to an exponent
    rows = [make_row(collective, s, "bfloat16", n, oop_time_s=t, ip_time_s=t * 0.97) for s, t in zip(sizes, times_s)]
    devices = [Device(r, f"node{r // 8}", r % 8, "NVIDIA H100 80GB HBM3", pid=1000 + r, pci=f"0000:{r:02x}:00")
               for r in range(n)]
    config = RunConfig(min_bytes=8, max_bytes=2**34, step_factor=8)
    text = format_table(rows, config=config, devices=devices, program=get_collective(collective).program,
                        style=style)
    log = parse_nccl_tests_log(text)
    assert log.collective == collective and log.n_ranks == n and log.devices == tuple(devices)
    assert log.config == replace(config, step_bytes=None)  # "step: 8(factor)" does not print -i
    assert log.avg_busbw_GBps == float("%g" % average_busbw_GBps(rows))
    if style == "legacy":
        time_str, bw_str = legacy_time_str, (lambda v: "%6.2f" % v)
    else:
        time_str, bw_str = (lambda v: get_float_str(v, 7)), (lambda v: get_float_str(v, 6))
    for want, got in zip(rows, log.rows, strict=True):
        assert (got.size_bytes, got.count, got.dtype, got.redop, got.root) == \
            (want.size_bytes, want.count, want.dtype, want.redop, want.root)
        assert (got.oop_time_us, got.ip_time_us) == (float(time_str(want.oop_time_us)), float(time_str(want.ip_time_us)))
        assert got.oop_algbw_GBps == float(bw_str(want.oop_algbw_GBps))
        assert got.ip_busbw_GBps == float(bw_str(want.ip_busbw_GBps))
        assert (got.oop_wrong, got.ip_wrong) == (want.oop_wrong, want.ip_wrong)
    if style == "current":  # printing what was read prints the same text again
        again = format_table(log.rows, config=log.config, devices=log.devices, program=log.program,
                             avg_busbw_GBps=log.avg_busbw_GBps)
        assert again == text
