"""The published nccl-tests tables of data/reference/ (scored by bench/reference_tables.py).

Each file holds one published table, unchanged, under a ``#`` header naming its public source. These
tests check the copies, not the model: every file parses (the header does not change what is read),
names its source, has the rank count its name says, and prints busbw = algbw x nccl-tests' bus factor
for that rank count (nccl-tests doc/PERFORMANCE.md) within print rounding.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuwait.collectives.nccltests import busbw_factor
from gpuwait.telemetry.nccltests_log import parse_nccl_tests_log
from tests.conftest import load_bench

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = Path(__file__).parent / "data" / "reference"
MARK = "\n# ---- table as published"  # a line of its own (the header quotes it too)
LOGS = sorted(REFERENCE.glob("*.log"))
BUSBW_ONLY = sorted(REFERENCE.glob("*.txt"))
SUMMARIES = sorted(REFERENCE.glob("*.md"))  # markdown summaries of a run: size, time, algbw, busbw


def split(path: Path) -> tuple[str, str]:
    """The file's header and the published text after the marker line."""
    text = path.read_text()
    head, marker, rest = text.partition(MARK)
    assert marker, f"{path.name}: no '{MARK}' line"
    return head, rest.split("\n", 1)[1]


def ranks_in_name(path: Path) -> int:
    return int(re.search(r"-(\d+)gpu-", path.name)[1])


def print_step(value: float) -> float:
    # nccl-tests prints bandwidths with %.2f, then %.1f and %.0f as they widen
    return 0.01 if value < 1000 else 0.1 if value < 10000 else 1.0


def test_every_table_is_here():
    assert len(LOGS) + len(BUSBW_ONLY) + len(SUMMARIES) == 59


@pytest.mark.parametrize("path", LOGS + BUSBW_ONLY + SUMMARIES, ids=lambda p: p.stem)
def test_header_names_a_public_source(path):
    head, table = split(path)
    assert all(line.startswith("#") for line in head.splitlines()), "every header line is a comment"
    assert re.search(r"source", head, re.IGNORECASE) and re.search(r"github|https?://", head)
    assert "../shared" not in path.read_text() and "/work/" not in path.read_text()
    assert table.strip()


def parsed(path: Path):
    """The log as the bench reads it: a log that names no collective, and whose columns do not tell it, as its
    Reference's ``collective``."""
    bench = load_bench("reference_tables")
    return bench.parsed_log(next(r for r in bench.REFERENCES if r.stem == path.stem))


@pytest.mark.parametrize("path", LOGS, ids=lambda p: p.stem)
def test_log_parses_and_the_header_changes_nothing(path):
    _, table = split(path)
    assert parse_nccl_tests_log(path.read_text()) == parse_nccl_tests_log(table)
    log = parsed(path)  # the bench's reading: Reference.collective and Reference.n_ranks where the log misstates them
    assert log.collective in ("all_reduce", "alltoall", "all_gather", "reduce_scatter", "sendrecv")
    assert log.n_ranks == ranks_in_name(path)
    assert len(log.rows) >= 4


#: logs whose one device line misstates the rank count (bench/reference_tables.py Reference.n_ranks gives it)
EDITED_DEVICE_LINE = {"gb200-nvl72-32node-128gpu-all_reduce-2racks": 144}


def test_an_edited_device_line_gives_way_to_the_bus_factor():
    """CoreWeave's "2 Racks" excerpt prints one device line, rank 143 (144 ranks), with the host, Pid and device of
    its "Single Rack" excerpt's (rank 71); every row's busbw / algbw is nccl-tests' 2 x 127/128
    (test_busbw_is_algbw_times_the_bus_factor reads the name's 128), which 144 ranks miss beyond print rounding
    (2 x 143/144 x 248.92 = 494.38, printed 493.94). The bench reads the table as 128 ranks."""
    bench = load_bench("reference_tables")
    assert {r.stem: r.n_ranks for r in bench.REFERENCES if r.n_ranks} == {
        stem: ranks_in_name(REFERENCE / f"{stem}.log") for stem in EDITED_DEVICE_LINE}
    for stem, printed in EDITED_DEVICE_LINE.items():
        path = REFERENCE / f"{stem}.log"
        log = parse_nccl_tests_log(path.read_text())
        assert log.n_ranks == printed and log.n_ranks_from == "devices"
        wrong = busbw_factor(log.collective, printed)
        assert all(abs(row.oop_algbw_GBps * wrong - row.oop_busbw_GBps) > 0.1 for row in log.rows)
        ref = next(r for r in bench.REFERENCES if r.stem == stem)
        assert bench.measured(ref).n_ranks == ranks_in_name(path)


@pytest.mark.parametrize("path", LOGS, ids=lambda p: p.stem)
def test_busbw_is_algbw_times_the_bus_factor(path):
    log = parsed(path)
    factor = busbw_factor(log.collective, ranks_in_name(path))
    for row in log.rows:
        for algbw, busbw in ((row.oop_algbw_GBps, row.oop_busbw_GBps), (row.ip_algbw_GBps, row.ip_busbw_GBps)):
            tolerance = 0.5 * (print_step(busbw) + factor * print_step(algbw)) + 1e-9
            assert abs(algbw * factor - busbw) <= tolerance, (row.size_bytes, algbw, busbw)


@pytest.mark.parametrize("path", BUSBW_ONLY, ids=lambda p: p.stem)
def test_busbw_only_table_is_the_doubling_sweep(path):
    _, table = split(path)
    rows = [line for line in table.splitlines() if re.match(r"^\|\s*\d+[KMG]\s*\|", line)]
    labels = [re.match(r"^\|\s*(\d+)([KMG])", line).groups() for line in rows]
    sizes = [int(n) * {"K": 10**3, "M": 10**6, "G": 10**9}[u] for n, u in labels]
    # labels are the sizes rounded to decimal units (65K = 65536): each is 1 KiB x 2**i to 8 % (8G is 7 % below 8 GiB)
    for i, size in enumerate(sizes):
        assert abs(size / (1024 * 2**i) - 1) < 0.08, (i, size)
    assert len(rows) == 24


@pytest.mark.parametrize("path", SUMMARIES, ids=lambda p: p.stem)
def test_summary_sizes_are_the_binary_sweep_its_algbw_and_busbw_confirm(path):
    """A summary labels sizes "64KB", "8GB": read as powers of two, each row's printed algbw is size / time and its
    busbw algbw x the bus factor (nccl-tests doc/PERFORMANCE.md) within print rounding; decimal sizes would miss
    by 5-7 %."""
    bench = load_bench("reference_tables")
    ref = next(r for r in bench.REFERENCES if r.stem == path.stem)
    curve = bench.measured(ref)
    assert curve.n_ranks == ranks_in_name(path) and len(curve.sizes) >= 7
    assert all(size & (size - 1) == 0 for size in curve.sizes.tolist())
    factor = busbw_factor(ref.collective, curve.n_ranks)
    _, table = split(path)
    header = [cell.strip() for cell in table.splitlines()[0].strip("|").split("|")]
    algbw_column = header.index("Algorithm BW (GB/s)")
    rows = [line for line in table.splitlines() if re.match(r"^\|\s*\**\d+[KMG]B", line)]
    for line, size, time_us, busbw in zip(rows, curve.sizes, curve.time_us, curve.busbw, strict=True):
        algbw = float(line.strip("|").split("|")[algbw_column].strip().strip("*"))
        assert size / (time_us * 1e3) == pytest.approx(algbw, abs=0.006 + 0.001 * algbw), (size, time_us, algbw)
        assert algbw * factor == pytest.approx(busbw, abs=0.5 * (print_step(busbw) + factor * print_step(algbw))
                                               + 1e-9), (size, algbw, busbw)


def test_the_bench_describes_or_excuses_every_table():
    bench = load_bench("reference_tables")
    stems = [r.stem for r in bench.REFERENCES]
    assert sorted(stems) == sorted(p.stem for p in LOGS + BUSBW_ONLY + SUMMARIES)
    for ref in bench.REFERENCES:
        assert bool(ref.cluster) != bool(ref.not_describable), ref.stem
        assert ref.hw_class in bench.CLASSES


def test_switch_evidence_reads_the_published_rows():
    """The switches a table shows: the 8-node table's 8 MiB one-off cost (out-of-place 1272 us, in-place 321 us:
    the first timed loop after NVLSTree's connection, NVIDIA/nccl-tests#309) and the GH200 no-CXI table's fall from 1479 us at
    1 MiB to 900 us at 2 MiB (LL to Simple, eth-cscs/cscs-docs nccl.md); the 4-node table's 8 B row is the
    warm-up's size, not evidence."""
    bench = load_bench("reference_tables")
    refs = {r.stem: r for r in bench.REFERENCES}
    eight = dict(bench.seen_switches(refs["h100-ib-8node-64gpu-all_reduce"]))
    assert 8 * 2**20 in eight and eight[8 * 2**20].startswith("one-off")
    nocxi = dict(bench.seen_switches(refs["gh200-nooptnet-2node-8gpu-all_reduce"]))
    assert nocxi[2 * 2**20].startswith("time falls: 1478.9 -> 899.8")
    assert 8 not in dict(bench.seen_switches(refs["h100-ib-4node-32gpu-all_reduce"]))
    assert bench.seen_switches(refs["h200-nvswitch-1node-8gpu-all_reduce-nvls-busbw-only"]) == []
    choices = [{"size_bytes": s, "algorithm": a, "protocol": p}
               for s, a, p in ((1, "tree", "LL"), (2, "tree", "LL"), (4, "ring", "LL"), (8, "ring", "Simple"))]
    assert bench.predicted_switches(choices) == [(4, "ring/LL"), (8, "ring/Simple")]


def test_a_one_off_cost_is_set_beside_an_algorithms_first_use():
    """nccl-tests times a size after one untimed call at it (NVIDIA/nccl-tests src/common.cu BenchTime); NCCL >= 2.22
    connects an algorithm on its first use (src/enqueue.cc initAlgoChannels, v2.22.3-1). So the loop a connection
    slows is the first timed one at a size whose algorithm neither warm-up size ran (the smallest and largest before
    nccl-tests v2.16.8, every size from it), and there is none before NCCL 2.22 (every algorithm connected at init)."""
    bench = load_bench("reference_tables")
    choices = [{"size_bytes": s, "algorithm": a, "protocol": p}
               for s, a, p in ((8, "tree", "LL"), (2**20, "tree", "LL128"), (2**21, "nvls_tree", "Simple"),
                               (2**28, "ring", "Simple"), (2**34, "ring", "Simple"))]
    assert bench.first_uses(choices, (2, 26), False) == [(2**21, "nvls_tree connected")]
    assert bench.first_uses(choices, (2, 21), False) == []
    assert bench.first_uses(choices, (2, 27), True) == []


def test_signals_no_nccl_choice_can_make_are_not_counted():
    """Two signals NCCL's own mechanisms rule out. Polaris's 32 KiB one-off cost (out-of-place 131.6 us, in-place
    79.81 us) ran NCCL 2.18.3, which connects every algorithm at init (runtime connection came in v2.22.3-1,
    src/enqueue.cc), so no timed loop follows a connection. Polaris's alltoall falls from 100 to 57 us at 2 KiB, 256 B
    per peer: NCCL's p2p path splits a peer's bytes in parts of at least p2pChunkSize/8 (16 KiB, src/enqueue.cc
    calcP2pChunkSize v2.18.3-1) and runs LL up to NCCL_P2P_LL_THRESHOLD (16384): one channel in LL at 128 B and
    256 B alike, so the fall is the transport's, not NCCL's choice. Above 16 KiB per peer nothing is ruled out."""
    bench = load_bench("reference_tables")
    refs = {r.stem: r for r in bench.REFERENCES}
    lines, hits, total = bench.switch_lines([refs["polaris-slingshot-2node-8gpu-all_gather"],
                                             refs["polaris-slingshot-2node-8gpu-alltoall"]])
    rows = {tuple(c.strip() for c in line.split("|")[1:3]): line for line in lines if line.startswith("| polaris")}
    assert "NCCL 2.18.3 connects every algorithm at init" in rows["polaris-slingshot-2node-8gpu-all_gather", "32K"]
    assert "256 B per peer: NCCL's p2p path runs one channel in LL" in rows["polaris-slingshot-2node-8gpu-alltoall", "2K"]
    assert (hits, total) == (0, 0)
    predictor = bench.make_predictor("dgx-h100", 1, 8)
    assert bench.formula_holds(predictor, "alltoall", 8 * 16384, None).startswith("not a switch")
    assert bench.formula_holds(predictor, "alltoall", 16 * 16384, None) == ""
    assert bench.formula_holds(predictor, "sendrecv", 32768, None) == ""


def test_signals_that_are_not_nccl_switches_say_why():
    """The published rows that cannot mark a switch: the H100 EFA 32 B row falls in-place only (72.64 -> 74.06 us
    out-of-place; NCCL's choice does not depend on the buffers), the GH200 no-CXI 2 KiB row falls from 1 KiB's
    one-off cost (256 B ran 50.76 us), and the H100 2-node 256 B one-off cost sits where NCCL 2.26.2's formula keeps
    tree/LL 14.8 us ahead of ring/LL (src/graph/tuning.cc latencies) against a bytes term under 0.1 us. The GH200
    no-CXI 2 MiB fall (LL to Simple) and the 4-node table's 2 MiB one-off (NVLSTree's first use) remain switches."""
    bench = load_bench("reference_tables")
    refs = {r.stem: r for r in bench.REFERENCES}
    assert "out-of-place column does not fall" in bench.drop_not_a_switch(refs["h100-efa-2node-16gpu-all_reduce"], 32)
    nocxi = refs["gh200-nooptnet-2node-8gpu-all_reduce"]
    assert "1K's one-off cost" in bench.drop_not_a_switch(nocxi, 2048)
    assert bench.drop_not_a_switch(nocxi, 2 * 2**20) == ""
    lines, hits, total = bench.switch_lines([refs["h100-ib-2node-16gpu-all_reduce"],
                                             refs["h100-ib-4node-32gpu-all_reduce"]])
    rows = {tuple(c.strip() for c in line.split("|")[1:3]): line for line in lines if line.startswith("| h100")}
    assert "not a switch: NCCL 2.26.2: its formula keeps tree/LL" in rows["h100-ib-2node-16gpu-all_reduce", "256"]
    assert rows["h100-ib-4node-32gpu-all_reduce", "2M"].endswith("| 2M (nvls_tree connected) | yes |")
    assert (hits, total) == (1, 1)
    # the candidates the verdict weighs are those NCCL's choice (tuning.choose) takes the cheapest of
    two = refs["h100-ib-2node-16gpu-all_reduce"]
    predictor = bench.make_predictor(two.cluster_arg(), two.servers, two.gpus, two.env, two.version())
    _, choices = bench.predicted(two, bench.measured(two))
    for choice in choices:
        table = bench._candidates_us(predictor, "all_reduce", choice["size_bytes"])
        assert min(table, key=lambda k: table[k][0]) == (choice["algorithm"], choice["protocol"])


def _sweep_at(bench, ref, version: str | None) -> tuple:
    """The table's sweep (``gpuwait perf``'s per-size times and NCCL choices) predicted as NCCL ``version``."""
    meas = bench.measured(ref)
    sweep = bench.perf_sweep(meas.collective, bench.SweepArgs(min_bytes=int(meas.sizes[0]),
                                                              max_bytes=int(meas.sizes[-1]), step_factor=2),
                             ref.cluster_arg(), ref.servers, ref.gpus, ref.env, version,
                             gpus_per_thread=ref.threads_gpus())
    return [r.oop_time_us for r in sweep.rows], sweep.choices


def test_a_tables_possible_nccl_releases_predict_it_identically():
    """Where the public sources leave a table's NCCL release a range (``nccl_range``: the AWS p5 image's buildspec
    built 2.21.5, 2.22.3 and 2.23.4 before the table's commit; the p5 EFA README's container 2.19.4 or 2.20.3; the NeMo
    25.09 container a release from 2.27.3 to 2.27.5), every modelled release in it gives the same times and choices
    as the release predicted, so pinning one is exact for gpuwait. The DGX A100 table ran NCCL 2.16.2, older than
    any modelled release: the oldest (2.18.1) and the default predict it identically."""
    from gpuwait.collectives.nccl_versions import RELEASES, nccl_release, parse_nccl_version

    bench = load_bench("reference_tables")
    ranged = [r for r in bench.REFERENCES if r.nccl_range]
    assert {r.stem for r in ranged} >= {"h100-dgx-1node-8gpu-all_reduce", "h100-efa-2node-16gpu-all_reduce",
                                        "h100-nvswitch-1node-8gpu-all_reduce-awsbatch-p5"}
    for ref in ranged:
        low, high = (parse_nccl_version(v) for v in ref.nccl_range)
        assert low <= parse_nccl_version(ref.version()) <= high, ref.stem
        releases = {nccl_release(v).version for v in ref.nccl_range}
        releases |= {r.version for r in RELEASES if low <= r.version_key <= high}
        predicted = _sweep_at(bench, ref, ref.version())
        for version in sorted(releases):
            assert _sweep_at(bench, ref, version) == predicted, (ref.stem, version)
    a100 = next(r for r in bench.REFERENCES if r.stem == "a100-dgx-4gpu-all_reduce")
    assert a100.version() is None and _sweep_at(bench, a100, "2.18.1") == _sweep_at(bench, a100, None)


def test_rows_todays_nccl_tests_cannot_print_are_not_scored():
    """The Polaris alltoall run (argonne-lcf/alcf-nccl-tests, an nccl-tests from before the 16-byte per-rank alignment)
    printed 32 and 64 B rows at 8 ranks (1 and 2 floats per rank), sizes today's nccl-tests, which the predicted
    sweep follows, never runs: they are left out of the scores, every other row of the table is kept."""
    bench = load_bench("reference_tables")
    ref = next(r for r in bench.REFERENCES if r.stem == "polaris-slingshot-2node-8gpu-alltoall")
    printed = [r.size_bytes for r in bench.parsed_log(ref).rows if r.size_bytes > 0]
    assert printed[:3] == [32, 64, 128]
    assert bench.measured(ref).sizes.tolist() == printed[2:]


def test_published_tuning_on_one_h100_node_rules_out_a_signal_and_is_the_models_choice():
    """NVIDIA/nccl-tests#309 (https://github.com/NVIDIA/nccl-tests/issues/309): on one HGX H100 node (Dell XE9680, NVLS
    on, NCCL 2.26.2) NCCL_DEBUG_SUBSYS=TUNING chose ring/LL from 8 B to 1 MB and NVLS/Simple from 2 MB to 16 GB
    (qoofyk, 2025-05-23; NVIDIA's kiskra-nvidia: "Yes"). The model, as NCCL 2.26.2 on a DGX H100, makes those choices at
    every size of that sweep; and the DGX H100 table's 4 KiB one-off (23.59 us out-of-place, 16.46 in-place) lies
    inside the ring/LL span, so it is no switch. A forced NCCL_ALGO or another collective is not covered."""
    bench = load_bench("reference_tables")
    dgx = next(r for r in bench.REFERENCES if r.stem == "h100-dgx-1node-8gpu-all_reduce")
    assert bench.published_choice(dgx, 4096, "all_reduce").startswith("not a switch: NCCL_DEBUG_SUBSYS=TUNING")
    assert bench.published_choice(dgx, 2**21, "all_reduce") == ""  # 1 MiB and 2 MiB lie in different spans
    assert bench.published_choice(dgx, 4096, "all_gather") == ""
    forced = bench.Reference(dgx.stem, dgx.hw_class, dgx.cluster, 1, 8, {"NCCL_ALGO": "Ring"})
    assert bench.published_choice(forced, 4096, "all_reduce") == ""
    spans, release, _ = bench.PUBLISHED_CHOICES[("dgx-h100", 1, 8, "all_reduce")]
    sweep = bench.perf_sweep("all_reduce", bench.SweepArgs(min_bytes=8, max_bytes=16 * 2**30, step_factor=2),
                             "dgx-h100", 1, 8, {}, release, gpus_per_thread=1)
    for choice in sweep.choices:
        published = next(s[2] for s in spans if s[0] <= choice["size_bytes"] <= s[1])
        assert f"{choice['algorithm']}/{choice['protocol']}" == published
