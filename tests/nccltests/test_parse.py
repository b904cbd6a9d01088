"""Reading real nccl-tests logs of every vintage, and refusing what is not one.

Fixtures in data/ are copied verbatim from published logs (docs/sources.md):
  oci-a100-2node-16gpu-all_reduce.log          oracle-quickstart/oci-hpc-oke README.md
  nccl-tests-2.18-mpi-socket-all_reduce.log    eunomia-bpf/nccl-eBPF docs/tmp/socket-thread-validation.md @b2873942
  h100-2node-16gpu-large-sizes.log             a Kubernetes nccl-test README on GitHub (repository not identified)
  h100-dgx-1node-8gpu-all_reduce.table         NVIDIA/dgxc-benchmarking nccl/README.md @46e42015
  a100-oci-2node-16gpu-roce-all_reduce.table   oracle-quickstart/oci-hpc-oke README.md (earlier revisions)
  a100-dgx-4gpu-all_reduce.table               eugenesiow/LLM-Insights infrastructure/hardware/README.md
Older layouts (no root, `error` column, no Group), -I and -S columns and the -J JSON are built below from
the printf formats of nccl-tests src/util.cu and src/common.cu; their numbers are synthetic.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from gpuwait.collectives.nccltests import COLLECTIVES, BuildInfo, Device, make_row
from gpuwait.errors import SpecError
from gpuwait.report.nccltests import format_row
from gpuwait.telemetry.nccltests_log import from_json, guess_collective, parse_nccl_tests_log

DATA = Path(__file__).parent / "data"


def _parse(name: str, **kwargs):
    return parse_nccl_tests_log((DATA / name).read_text(), **kwargs)


@pytest.mark.parametrize("name, n_rows, n_ranks, ranks_from, avg", [
    ("oci-a100-2node-16gpu-all_reduce.log", 31, 16, "devices", 66.4834),
    ("nccl-tests-2.18-mpi-socket-all_reduce.log", 8, 2, "devices", 1.57614),
    ("h100-2node-16gpu-large-sizes.log", 5, 16, "devices", 194.675),
    ("h100-dgx-1node-8gpu-all_reduce.table", 32, 8, "busbw/algbw", 159.151),
    ("a100-oci-2node-16gpu-roce-all_reduce.table", 31, 16, "busbw/algbw", 66.4834),
    ("a100-dgx-4gpu-all_reduce.table", 4, 4, "busbw/algbw", 222.066),
])
def test_every_real_log_reads(name, n_rows, n_ranks, ranks_from, avg):
    log = _parse(name)
    assert len(log.rows) == n_rows
    assert log.collective == "all_reduce"
    assert (log.n_ranks, log.n_ranks_from) == (n_ranks, ranks_from)
    assert log.avg_busbw_GBps == avg
    # the printed average is the mean of all out-of-place and in-place busbw (each printed to 0.01)
    assert log.mean_busbw_GBps() == pytest.approx(avg, abs=0.0055)
    assert all(r.dtype == "float" and r.redop == "sum" and r.root == -1 for r in log.rows)
    assert all(r.size_bytes == 4 * r.count for r in log.rows)


def test_oci_log_details():
    log = _parse("oci-a100-2node-16gpu-all_reduce.log")
    assert log.collective_from == "rows" and log.program is None and log.build is None
    c = log.config
    assert (c.n_threads, c.n_gpus, c.min_bytes, c.max_bytes, c.step_factor, c.step_bytes) == (1, 1, 8, 2**33, 2, None)
    assert (c.warmup_iters, c.iters, c.agg_iters, c.validation, c.graph, c.unalign) == (5, 20, 1, 1, 0, None)
    assert log.devices[9] == Device(9, "nccl-allreduce-job0-mpiworker-1", 1, "NVIDIA A100-SXM4-40GB", group=0, pid=44,
                                    pci="0x15")
    assert log.out_of_bounds == 0 and log.wrong_column == "#wrong" and log.time_column == "time"
    first, big = log.rows[0], log.rows[28]
    assert (first.size_bytes, first.count, first.oop_time_us, first.oop_wrong, first.ip_time_us) == (8, 2, 36.47, 0, 34.74)
    assert (big.size_bytes, big.oop_time_us, big.oop_algbw_GBps, big.oop_busbw_GBps, big.ip_time_us) == \
        (2**31, 18289.0, 117.42, 220.16, 17557.0)


def test_mpi_tagged_2_18_log_details():
    log = _parse("nccl-tests-2.18-mpi-socket-all_reduce.log")
    assert log.build == BuildInfo("2.18.0", 22907, 22907)
    assert (log.program, log.collective_from) == ("all_reduce_perf_mpi", "program")
    assert (log.config.warmup_iters, log.config.iters, log.config.unalign) == (10, 50, None)
    assert log.devices[1] == Device(1, "lab", 0, "NVIDIA GeForce RTX 5090", group=0, pid=2994448, pci="0000:02:00")
    assert log.rows[5].oop_time_us == 14977.1


def test_summary_tables_equal_the_full_log():
    # The reference summary of the OCI run has the same numbers, without #wrong and with other spacing.
    full, summary = _parse("oci-a100-2node-16gpu-all_reduce.log"), _parse("a100-oci-2node-16gpu-roce-all_reduce.table")
    assert summary.wrong_column is None and all(r.oop_wrong is None and r.ip_wrong is None for r in summary.rows)
    assert summary.rows == tuple(replace(r, oop_wrong=None, ip_wrong=None) for r in full.rows)


def test_trimmed_device_list_still_gives_the_rank_count():
    # the published excerpt shows only "Rank 15" and a "..." line: n = highest rank + 1, cross-checked by busbw
    log = _parse("h100-2node-16gpu-large-sizes.log")
    assert [d.rank for d in log.devices] == [15]
    assert _parse("h100-2node-16gpu-large-sizes.log", n_ranks=16).n_ranks_from == "parameter"
    no_devices = "\n".join(line for line in (DATA / "h100-2node-16gpu-large-sizes.log").read_text().splitlines()
                           if "Rank" not in line)
    assert parse_nccl_tests_log(no_devices).n_ranks == 16


OLD_LOG = """\
# nThread 1 nGpus 1 minBytes 1310720000 maxBytes 1310720000 step: 1048576(bytes) warmup iters: 5 iters: 20 validation: 1
#
# Using devices
#   Rank  0 Pid   1320 on ip-172-31-20-228 device  0 [0x00] Tesla V100-SXM2-16GB
#   Rank  1 Pid   1321 on ip-172-31-20-229 device  0 [0x00] Tesla V100-SXM2-16GB
#
#                                                     out-of-place                       in-place
#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
  1310720000     327680000   float     sum  1146362    1.14    1.14  0e+00  1146340    1.14    1.14  0e+00
 Out of bounds values : 0 OK
 Avg bus bandwidth    : 1.14
"""


def test_old_layout_without_root_group_agg_iters():
    log = parse_nccl_tests_log(OLD_LOG)
    c = log.config
    assert (c.step_factor, c.step_bytes, c.agg_iters, c.graph, c.unalign) == (1, 1048576, None, None, None)
    assert [d.group for d in log.devices] == [None, None] and log.n_ranks == 2
    row = log.rows[0]
    assert (row.redop, row.root, row.oop_time_us, row.oop_wrong) == ("sum", None, 1146362.0, 0.0)
    assert log.wrong_column == "error" and (log.avg_busbw_GBps, log.out_of_bounds) == (1.14, 0)
    # 2 ranks: all_reduce (busbw = algbw) cannot be told from reduce without a root column
    assert log.collective is None
    assert parse_nccl_tests_log(OLD_LOG, collective="all_reduce_perf").collective_from == "parameter"


def test_validation_off_blank_root_blocking_and_noise_lines():
    rows = [make_row("all_gather", s, "half", 4, oop_time_s=1e-5 * i, ip_time_s=1e-5 * i, wrong=None)
            for i, s in enumerate((2**16, 2**20), start=1)]
    text = "\n".join([
        "node1:1234:1234 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
        "# nThread 1 nGpus 4 minBytes 65536 maxBytes 1048576 step: 16(factor) warmup iters: 5 iters: 20 agg iters: 1"
        " validation: 0 graph: 0",
        "# Blocking Enabled: wait for completion and barrier after each collective ",
        "...",
        *(format_row(replace(r, root=None)) for r in rows),  # 2020-era builds printed a blank root
        "node1:1234:1240 [0] NCCL INFO comm 0x55d5 rank 0 nranks 4 - Destroy COMPLETE",
    ])
    log = parse_nccl_tests_log(text)
    assert log.config.blocking == 1 and log.config.validation == 0
    assert [(r.root, r.oop_wrong, r.ip_wrong) for r in log.rows] == [(None, None, None)] * 2
    assert log.collective is None  # all_gather and alltoall look alike with validation off
    assert log.n_ranks is None
    assert parse_nccl_tests_log(text, collective="all_gather").n_ranks == 4  # size = count x 2 B x 4 ranks


def test_per_iteration_and_timestamp_columns():
    # header layout of util.cu writeResultHeader with -I 1 -S 1
    names = ("# %10s  %12s  %8s  %6s  %6s" + "  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s" * 2 + " %*s") % (
        "size", "count", "type", "redop", "root",
        "time", "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99", "i_cv%",
        "time", "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99", "i_cv%", 19, "timestamp")
    row = ("     1048576        262144     float     sum      -1    27.37   38.31   67.04       0    26.90    28.10"
           "    28.00     1.20    26.93   38.94   68.14       0    26.50    27.70    27.60     1.10  2025-10-01 12:00:00")
    log = parse_nccl_tests_log("#\n" + names + "\n" + row + "\n")
    r = log.rows[0]
    assert (r.oop_busbw_GBps, r.ip_time_us, r.ip_wrong, r.timestamp) == (67.04, 26.93, 0, "2025-10-01 12:00:00")
    assert dict(r.extra)["oop i_p99"] == "28.00" and dict(r.extra)["ip i_cv%"] == "1.10"
    assert log.n_ranks == 8 and log.n_ranks_from == "busbw/algbw"


def test_cputime_column():
    log = parse_nccl_tests_log(
        "#       size         count      type   redop    root  cputime   algbw   busbw  #wrong  cputime   algbw"
        "   busbw  #wrong \n"
        "     1048576        262144     float     sum      -1     5.10   38.31   67.04       0     5.00   38.94"
        "   68.14       0\n")
    assert log.time_column == "cputime" and log.rows[0].oop_time_us == 5.1


@pytest.mark.parametrize("collective", sorted(COLLECTIVES))
def test_collective_is_guessed_from_the_columns(collective):
    rows = [make_row(collective, 2**20, "float", 8, oop_time_s=1e-4, ip_time_s=1e-4)]
    assert guess_collective(rows) == collective
    text = "\n".join(format_row(r) for r in rows)
    log = parse_nccl_tests_log(text)
    assert (log.collective, log.collective_from) == (collective, "rows")
    if COLLECTIVES[collective].size_is_total:
        assert (log.n_ranks, log.n_ranks_from) == (8, "size/count")
    elif collective == "all_reduce":
        assert (log.n_ranks, log.n_ranks_from) == (8, "busbw/algbw")
    else:
        assert log.n_ranks is None  # busbw = algbw whatever the rank count


def test_sendrecv_printing_its_reduction_is_not_read_as_all_reduce():
    # nccl-tests' sendrecv (src/sendrecv.cu @29f4114f) prints the -o op ("sum") and root -1 like all_reduce, but never
    # checks in-place (#wrong N/A there, a number out-of-place); busbw = algbw on 16 ranks, which no all_reduce has.
    # Published log: togethercomputer/together-nccl-tests (source in the file's header).
    text = (DATA / "reference" / "b200-ib-2node-16gpu-sendrecv-together.log").read_text()
    log = parse_nccl_tests_log(text)
    assert (log.collective, log.collective_from, log.n_ranks) == ("sendrecv", "rows", 16)
    assert all(r.redop == "sum" and r.root == -1 and r.ip_wrong is None and r.oop_wrong == 0 for r in log.rows)
    assert all(r.oop_busbw_GBps == r.oop_algbw_GBps for r in log.rows)
    # an all_reduce that validates both columns stays all_reduce
    row = make_row("all_reduce", 2**20, "float", 16, oop_time_s=1e-4, ip_time_s=1e-4)
    assert guess_collective([row]) == "all_reduce"


def test_rank_count_is_not_invented_when_ill_conditioned():
    # 2(n-1)/n barely moves for large n: 0.01 GB/s of print rounding cannot tell 1000 from 1024 ranks
    row = make_row("all_reduce", 2**30, "float", 1024, oop_time_s=0.01, ip_time_s=0.01)
    log = parse_nccl_tests_log(format_row(row))
    assert log.collective == "all_reduce" and log.n_ranks is None


@pytest.mark.parametrize("text, message", [
    ("", "no result rows found"),
    ("hello\nworld\n# just a comment\n", "no result rows found"),
    ("# nThread 1 nGpus 8 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 20\n"
     "misc/nccl-tests/src/all_reduce.cu:44 NCCL failure 'unhandled system error'\n", "no result rows found"),
    ("#\n  1048576  262144  float  sum  -1  abc  1.0  2.0  0  3.0  1.0  2.0  0\n", "line 2: .* 'abc' is not a number"),
    ("  8  2  float  sum  -1  N/A  1.0  2.0  0  3.0  1.0  2.0  0\n", "'N/A' is not a number"),
    ("     1048576        262144     float     sum      -1    27.37   38.31\n", "line 1: .*: 7 fields"),
    ("  8  2  float  sum  x  1.0  1.0  1.0  0  1.0  1.0  1.0  0\n", "root 'x' is not a whole number"),
    ("  8  2  float  sum  -1  1.0  1.0  1.0  0  1.0  1.0  1.0  0  9\n", "negative time '-1'"),
    ("#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong\n"
     "  8  2  float  sum  -1  1.0  1.0  1.0  1.0  1.0  1.0\n", "3 result fields per half where the column header names 4"),
    # a row cut short by a killed job keeps an even count, so its root reads as the first time: said as what it is
    ("#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong\n"
     "   268435456      67108864     float     sum      -1   3042.7   88.22  165.42      0   3065.9   87.55  164.16\n",
     "12 fields where the column header names 13: the row is cut short"),
])
def test_unreadable_logs_say_where_in_one_line(text, message):
    with pytest.raises(SpecError, match=message) as err:
        parse_nccl_tests_log(text)
    assert "\n" not in str(err.value) and err.value.hint


# nccl-tests before 2019 (common.cu and all_reduce.cu at NVIDIA/nccl-tests b188a15, until the NCCL 2.4 resync
# cbe7f65): the header "bytes N type op", rows of today's shape, the time printed as deltaSec * 1.0E3 (ms)
OLD_MS_LOG = """\
# Using devices
#   Rank  0 on      node1 device  0 [0x06] Tesla P100-SXM2-16GB
#   Rank  1 on      node1 device  1 [0x07] Tesla P100-SXM2-16GB
#                                                  out-of-place                    in-place
#       bytes             N    type      op     time  algbw  busbw      res     time  algbw  busbw      res
     1048576        262144   float     sum    0.078  13.44  13.44    0e+00    0.077  13.62  13.62    0e+00
 Out of bounds values : 0 OK
"""


def test_the_layout_before_2019_is_refused_not_read_in_the_wrong_unit():
    # read as today's layout its 0.078 ms would be 0.078 us, 1000 times too fast, with no error
    with pytest.raises(SpecError, match=r"^nccl-tests log line 5: the column header 'bytes +N +type +op .*before 2019, "
                                        r"whose times are in ms") as err:
        parse_nccl_tests_log(OLD_MS_LOG, n_ranks=2, collective="all_reduce")
    assert "\n" not in str(err.value) and err.value.hint


def test_rows_in_ms_without_their_header_are_refused_by_their_own_numbers():
    # the same log trimmed to its rows: 13.44 GB/s x 0.078 x 1e3 / 1048576 B = 0.001, a time 1000x the
    # microseconds that size and algbw give (algbw = size / time, nccl-tests src/common.cu); today's rows give 1
    rows_only = "\n".join(line for line in OLD_MS_LOG.splitlines() if not line.lstrip().startswith("#"))
    with pytest.raises(SpecError, match=r"^nccl-tests log: the times are 1000x what size / algbw gives") as err:
        parse_nccl_tests_log(rows_only, n_ranks=2, collective="all_reduce")
    assert "\n" not in str(err.value) and err.value.hint
    today = rows_only.replace("0.078  13.44", "78.00  13.44").replace("0.077  13.62", "77.00  13.62")
    assert parse_nccl_tests_log(today, n_ranks=2, collective="all_reduce").rows[0].oop_time_us == 78.0


# ---- -J JSON (structure of util.cu: devices nested in config, root as printed text, bools as strings) ----

def _json_doc():
    return {
        "version": 2, "start_time": "2025-10-01 12:00:00", "args": ["/opt/nccl-tests/build/all_gather_perf", "-g", "4"],
        "env": [], "nccl_version": 22907,
        "config": {"nthreads": 1, "ngpus": 4, "minimum_bytes": 1048576, "maximum_bytes": 2097152, "step_factor": 2,
                   "warmup_iters": 1, "iterations": 20, "aggregated_iterations": 1, "validation": 1, "graph": 0,
                   "blocking_collectives": "false", "per_iter_timing": "false", "parallel_init": "false",
                   "devices": [{"rank": r, "group": 0, "pid": 100 + r, "hostname": "node1", "device": r,
                                "device_hex": f"0000:{r:02x}:00", "device_info": "NVIDIA H100 80GB HBM3"}
                               for r in range(4)]},
        "results": [
            {"size": 1048576, "count": 65536, "type": "float", "redop": "none", "root": "    -1",
             "out_of_place": {"time": 20.5, "alg_bw": 51.150, "bus_bw": 38.362, "nwrong": 0.0},
             "in_place": {"time": 19.5, "alg_bw": 53.773, "bus_bw": 40.330, "nwrong": 0.0},
             "actual_iterations": 20, "experiment_name": ""},
            {"size": 2097152, "count": 131072, "type": "float", "redop": "none", "root": "    -1",
             "out_of_place": {"time": 30.0, "alg_bw": 69.905, "bus_bw": 52.429, "nwrong": None},
             "in_place": {"time": "nan", "alg_bw": "nan", "bus_bw": "nan", "nwrong": None},
             "actual_iterations": 20, "experiment_name": ""}],
        "out_of_bounds": {"count": 0, "okay": "true"},
        "average_bus_bandwidth": {"bandwidth": 43.7073, "okay": "unchecked"},
        "errors": [], "end_time": "2025-10-01 12:00:05",
    }


def test_json_output_reads():
    log = from_json(json.dumps(_json_doc()))
    assert (log.program, log.collective, log.collective_from) == ("all_gather_perf", "all_gather", "program")
    assert (log.n_ranks, log.n_ranks_from) == (4, "devices")
    assert log.devices[2] == Device(2, "node1", 2, "NVIDIA H100 80GB HBM3", group=0, pid=102, pci="0000:02:00")
    assert (log.config.n_gpus, log.config.step_factor, log.config.step_bytes, log.config.iters) == (4, 2, None, 20)
    first, second = log.rows
    assert (first.root, first.oop_time_us, first.ip_busbw_GBps, first.oop_wrong) == (-1, 20.5, 40.330, 0.0)
    assert second.oop_wrong is None and second.ip_time_us != second.ip_time_us  # "nan" stays NaN
    assert (log.avg_busbw_GBps, log.out_of_bounds) == (43.7073, 0)


def test_json_variants_and_errors():
    doc = _json_doc()
    doc["devices"] = doc["config"].pop("devices")  # nccl-tests -J lists devices at the top level
    doc["results"][0]["in_place"] = {"cpu_time": 5.0, "alg_bw": 1.0, "bus_bw": 0.75, "nwrong": 0}
    log = from_json(doc)
    assert len(log.devices) == 4 and log.time_column == "cputime"
    with pytest.raises(SpecError, match="not valid JSON at line 1"):
        from_json("{results: ")
    with pytest.raises(SpecError, match="no 'results' list"):
        from_json({"config": {}})
    doc["results"][1]["out_of_place"]["alg_bw"] = "fast"
    with pytest.raises(SpecError, match=r"results\[1\].out_of_place.alg_bw: got 'fast'"):
        from_json(doc)


def _json_edited(path: str, value):
    doc = _json_doc()
    *parents, last = path.split(".")
    target = doc
    for key in parents:
        target = target[int(key)] if isinstance(target, list) else target[key]
    if isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value
    return doc


@pytest.mark.parametrize("path, value, message", [
    ("config.ngpus", "x", "config.ngpus: got 'x'; expected a whole number"),
    ("config.devices.0.rank", "x", r"devices\[0\].rank: got 'x'; expected a whole number"),
    ("config.devices.1", "x", r"devices\[1\]: got 'x'; expected an object"),
    ("config.devices", "node1", "devices: got 'node1'; expected a list of objects"),
    ("config", "x", "config: got 'x'; expected an object"),
    ("results.0.size", "1M", r"results\[0\].size: got '1M'; expected a whole number"),
    ("out_of_bounds", {"count": "none"}, "out_of_bounds.count: got 'none'; expected a whole number"),
    # NCCL_VERSION(X,Y,Z) codes (src/nccl.h.in): 2.0.0 is 2000; a fraction or a negative number is no release
    ("nccl_version", 3.5, "nccl_version: got 3.5; expected NCCL's version code"),
    ("nccl_version", -1, "nccl_version: got -1; expected NCCL's version code"),
    ("nccl_version", 10**12, "nccl_version: got 1000000000000; expected NCCL's version code"),
    ("nccl_version", "2.29.7", "nccl_version: got '2.29.7'; expected a whole number"),
])
def test_a_bad_json_field_is_one_error_naming_it(path, value, message):
    # the file reaches perf --compare and calibrate: a wrong field is one line naming it, not a traceback
    with pytest.raises(SpecError, match=r"^nccl-tests JSON: " + message) as err:
        from_json(_json_edited(path, value))
    assert "\n" not in str(err.value)


def test_the_json_files_nccl_code_is_the_library_that_ran():
    assert from_json(_json_doc()).build.library_version == "2.29.7"
    assert from_json(_json_edited("nccl_version", 2708)).build.library_version == "2.7.8"  # NCCL_VERSION up to 2.8


def test_two_tables_in_one_text_each_read_with_its_own_header():
    text = (DATA / "oci-a100-2node-16gpu-all_reduce.log").read_text() + \
        (DATA / "h100-dgx-1node-8gpu-all_reduce.table").read_text()
    log = parse_nccl_tests_log(text)
    assert len(log.rows) == 63
    assert log.rows[0].oop_wrong == 0 and log.rows[-1].oop_wrong is None


def test_a_json_args_that_is_not_a_list_is_one_error():
    # as a string its first character was read as the program's name
    doc = _json_doc() | {"args": "/opt/nccl-tests/build/all_gather_perf -g 4"}
    with pytest.raises(SpecError, match=r"^nccl-tests JSON: args is str; expected the command line as a list"):
        from_json(json.dumps(doc))
