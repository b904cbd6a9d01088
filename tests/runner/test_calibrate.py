"""`gpuwait calibrate`'s fit, cross-validation and overlay (gpuwait.runner.calibrate, gpuwait.report.calibrate).

References: a closed form (times the model itself computes with known parameters are fitted back), and
the published H100 InfiniBand tables of NVIDIA/nccl-tests issue #309 (https://github.com/NVIDIA/nccl-tests/issues/309:
the same poster's HGX H100 cluster with 8x 400 Gb/s InfiniBand, on 2 and on 4 nodes), whose transfer issue 12 asks for.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from gpuwait.collectives.fit import FIT_NAMES, MIN_GAIN, SHIPPED
from gpuwait.collectives.physical import adjust, physical_defaults, pipelined_time_s
from gpuwait.errors import SpecError
from gpuwait.report.calibrate import read_log, run_calibrate
from gpuwait.runner.calibrate import (
    ALTERNATE_SIZES,
    LEAVE_ONE_LOG_OUT,
    MeasuredLog,
    calibrate,
    fit_names,
    overlay,
)
from gpuwait.runner.inputs import load_cluster, load_scenario
from gpuwait.runner.perf import make_predictor
from tests.conftest import load_bench

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "tests" / "nccltests" / "data" / "reference"
TWO_NODE = REFERENCE / "h100-ib-2node-16gpu-all_reduce.log"


@pytest.fixture(scope="module")
def two_node() -> MeasuredLog:
    return read_log(TWO_NODE)


def _synthetic(log: MeasuredLog, name: str, params) -> MeasuredLog:
    """``log``'s sizes with the times the model gives for ``params`` on 2 DGX H100 (busbw from the time), as
    gpuwait's default NCCL release (the synthetic log prints no version)."""
    predictor = make_predictor("dgx-h100", 2, None)
    times = [float(pipelined_time_s(predictor.estimate(log.collective, s).costs, params)) for s in log.sizes_bytes]
    busbw = [s / t * 2 * 15 / 16 / 1e9 for s, t in zip(log.sizes_bytes, times, strict=True)]
    return replace(log, name=name, time_s=tuple(times), busbw_GBps=tuple(busbw), nccl_version=None)


def test_each_log_is_predicted_as_the_release_it_prints(two_node):
    """As `perf --compare` does: the 2-node table prints 'NCCL version 2.26.2+cuda12.8', so calibrate predicts
    it as 2.26.2 (NVLSTree plateau from the fabric: 2.26's tuning has no nvlsEfficiency), and --nccl-version
    overrides it (2.30.7's 0.85 NVLS efficiency, src/graph/tuning.cc v2.28.3-1 on, lowers the plateau)."""
    assert two_node.nccl_version == "2.26.2"
    printed = calibrate([two_node], "dgx-h100", 2, names=["launch_latency_s"])
    asked = calibrate([two_node], "dgx-h100", 2, names=["launch_latency_s"], nccl_version="2.30.7")
    assert (printed.logs[0].nccl_version, printed.logs[0].nccl_source) == ("2.26.2", "the log's version")
    # the library names its argument; the command line its option (tests/cli/test_calibrate.py)
    assert (asked.logs[0].nccl_version, asked.logs[0].nccl_source) == ("2.30.7", "nccl_version")
    assert printed.logs[0].shipped[-1]["predicted_time_us"] < asked.logs[0].shipped[-1]["predicted_time_us"]
    unversioned = calibrate([replace(two_node, nccl_version="2.4.8")], "dgx-h100", 2, names=["launch_latency_s"])
    assert unversioned.logs[0].nccl_version == "2.30.7"  # older than modelled: the cluster's release, as --compare
    with pytest.raises(SpecError, match="^nccl_version: got '1.0'"):  # the CLI names --nccl-version (tests/cli)
        calibrate([two_node], "dgx-h100", 2, nccl_version="1.0")


def _shipped(servers: int = 2):
    """The parameters the model ships with on ``servers`` DGX H100: the start and prior of every calibration."""
    return adjust(physical_defaults(make_predictor("dgx-h100", servers, None).transport), SHIPPED)


def test_known_parameters_are_fitted_back(two_node):
    """Closed form: times computed with the shipped parameters moved by known amounts are predicted back to
    within 1 % at every held-out size, and the well-determined parameters are recovered (the shipped
    prior does not swamp a real move: the held-out error frees each moved parameter)."""
    truth = replace(_shipped(), launch_latency_s=4e-6, nic_efficiency=0.85, nvlink_efficiency=0.9)
    log = _synthetic(two_node, "synthetic", truth)
    cal = calibrate([log], "dgx-h100", 2, names=["launch_latency_s", "nic_efficiency", "nvlink_efficiency"])
    assert cal.validation == ALTERNATE_SIZES
    assert set(cal.freed) == {"launch_latency_s", "nic_efficiency", "nvlink_efficiency"}
    errors = [abs(r["time_error_pct"]) for r in cal.logs[0].calibrated]
    assert max(errors) < 1.0
    assert cal.params.launch_latency_s == pytest.approx(4e-6, rel=0.05)
    assert cal.params.nic_efficiency == pytest.approx(0.85, rel=0.02)


def _times_s(servers: int, sizes: list[int], params) -> np.ndarray:
    predictor = make_predictor("dgx-h100", servers, None)
    return np.array([pipelined_time_s(predictor.estimate("all_reduce", s).costs, params) for s in sizes])


def _moves(params) -> dict[str, float]:
    """The PhysicalParams fields a calibration writes, to carry one cluster's fit to another node count."""
    return {name: getattr(params, name) for name in FIT_NAMES}


def test_selection_recovers_the_times_and_keeps_the_rest_shipped(two_node):
    """Closed form, every parameter a candidate: a slower NIC and a costlier launch on 2 nodes. What the
    log identifies is asserted, not which of two look-alike parameters carries a latency:

    * on one node count every call crosses the network the same number of times, so a launch latency and
      a per-step latency move every time alike (cosine > 0.99): calibrate reports them as not separable;
    * the times are recovered: sizes the log does not hold (1.5x each logged size) within 0.5 % on the
      2 nodes, and every size on 4 nodes (a node count the log never saw) within 12 %: 0 % when the launch
      latency carries the extra 4.4 us, 10.7 % at the floor when the per-step latency does (measured: then
      the 4-node floor pays it on more network steps; 6.9 % with the shipped launch latency before the
      transports' per-message figures were sourced, when the look-alike tie went to the launch latency);
    * the NIC's efficiency (the plateau pins it) is fitted back within 2 %;
    * a parameter neither moved by the truth nor alike to a moved one keeps its shipped value exactly,
      and the report lists every candidate's held-out error, the shipped model's first."""
    shipped = _shipped()
    truth = replace(shipped, launch_latency_s=6e-6, nic_efficiency=0.8)
    cal = calibrate([_synthetic(two_node, "synthetic", truth)], "dgx-h100", 2)
    latencies = next(g for g in cal.not_separable if "launch_latency_s" in g)
    assert "net_step_latency_s" in latencies
    assert "nic_efficiency" in cal.freed and set(cal.freed) & set(latencies)
    assert cal.params.nic_efficiency == pytest.approx(0.8, rel=0.02)
    unseen = [int(s * 1.5) for s in two_node.sizes_bytes[:-1]]
    assert np.abs(_times_s(2, unseen, cal.params) / _times_s(2, unseen, truth) - 1).max() < 0.005
    four_truth = replace(_shipped(4), launch_latency_s=6e-6, nic_efficiency=0.8)
    four_calibrated = replace(_shipped(4), **_moves(cal.params))
    assert np.abs(_times_s(4, unseen, four_calibrated) / _times_s(4, unseen, four_truth) - 1).max() < 0.12
    for name in set(FIT_NAMES) - {"launch_latency_s", "nic_efficiency", *latencies}:
        assert getattr(cal.params, name) == getattr(shipped, name), name
    first = cal.selection.candidates[0]
    assert first.freed == () and cal.selection.error < first.held_out_error - MIN_GAIN


def test_calibrate_says_which_parameters_the_logs_cannot_separate(two_node):
    """The report names the look-alike latencies of a one-node-count log (in the text and the JSON)."""
    from gpuwait.report.calibrate import CalibrateReport, separability_lines

    cal = calibrate([two_node], "dgx-h100", 2, names=["launch_latency_s", "net_step_latency_s", "nic_efficiency"])
    assert cal.not_separable == (("launch_latency_s", "net_step_latency_s"),)
    report = CalibrateReport(cal, {}, None)
    assert separability_lines(report)[0].startswith("launch_latency_s and net_step_latency_s are not separable")
    assert report.to_dict()["not_separable"] == [["launch_latency_s", "net_step_latency_s"]]


@pytest.mark.parametrize("seed", [0, 3])
def test_noise_around_the_shipped_model_moves_the_overlay_little(two_node, seed):
    """Closed form plus noise: the shipped model's times with 5 % log-normal noise per size (about what
    repeated nccl-tests runs spread by at the floor) are calibrated back to within 1.5 % of the noise-free
    times at every size: a drop smaller than its standard error frees nothing, so noise moves little."""
    clean = _synthetic(two_node, "noisy", _shipped())
    noise = np.exp(np.random.default_rng(seed).normal(0.0, 0.05, len(clean.time_s)))
    cal = calibrate([replace(clean, time_s=tuple(np.array(clean.time_s) * noise))], "dgx-h100", 2)
    predictor = make_predictor("dgx-h100", 2, None)
    predicted = [pipelined_time_s(predictor.estimate("all_reduce", s).costs, cal.params) for s in clean.sizes_bytes]
    assert np.max(np.abs(np.log(np.array(predicted) / np.array(clean.time_s)))) < 0.015


def test_a_log_frees_only_what_its_sizes_show():
    """A published DGX A100 table of 1-8 GiB alone (4 sizes, no latency floor) once freed a launch latency to
    its 30 us bound, nearly tripling the predicted 8 B time (16 -> 44 us) on no evidence; the latencies are
    not candidates without a size <= 64 KiB, and keep their shipped values (the floor is predicted as shipped).
    Symmetrically, a log of sizes <= 64 KiB alone cannot free an efficiency."""
    log = read_log(REFERENCE / "a100-dgx-4gpu-all_reduce.log")
    assert min(log.sizes_bytes) == 2**30
    cal = calibrate([log], "dgx-a100", None, 4)
    latencies = ("launch_latency_s", "net_step_latency_s", "intra_step_latency_s")
    assert cal.unshown == latencies and not set(latencies) & set(cal.names)
    assert all(not set(latencies) & set(freed) for freed in (cal.freed, *cal.fold_freed))
    assert all(getattr(cal.params, n) == getattr(cal.shipped, n) for n in latencies)
    lines = run_calibrate([REFERENCE / "a100-dgx-4gpu-all_reduce.log"], "dgx-a100", gpus=4).to_dict()
    assert lines["not_shown"] == list(latencies)
    small = replace(log, sizes_bytes=(8, 1024, 65536), time_s=(20e-6, 21e-6, 30e-6), busbw_GBps=(0.0, 0.1, 3.3))
    assert calibrate([small], "dgx-a100", None, 4).unshown == ("nic_efficiency", "nvlink_efficiency")


def test_leave_one_log_out_scores_each_log_with_the_others_fit(two_node):
    """With two logs, log A's calibrated prediction is the fit on log B alone (it never sees A's sizes)."""
    half = len(two_node.sizes_bytes) // 2
    a = replace(two_node, name="a", sizes_bytes=two_node.sizes_bytes[:half], time_s=two_node.time_s[:half],
                busbw_GBps=two_node.busbw_GBps[:half])
    b = replace(two_node, name="b", sizes_bytes=two_node.sizes_bytes[half:], time_s=two_node.time_s[half:],
                busbw_GBps=two_node.busbw_GBps[half:])
    names = ["launch_latency_s", "nic_efficiency"]
    both = calibrate([a, b], "dgx-h100", 2, names=names)
    only_b = calibrate([b], "dgx-h100", 2, names=names)
    assert both.validation == LEAVE_ONE_LOG_OUT
    predictor = make_predictor("dgx-h100", 2, None)
    expected = [pipelined_time_s(predictor.estimate("all_reduce", s).costs, only_b.params) * 1e6 for s in a.sizes_bytes]
    assert np.allclose([r["predicted_time_us"] for r in both.logs[0].calibrated], expected, rtol=1e-6)


def test_a_rank_mismatch_names_the_log_and_both_counts(two_node):
    with pytest.raises(SpecError, match=r"h100-ib-2node-16gpu-all_reduce.log: the log has 16 ranks but the cluster gives 32"):
        calibrate([two_node], "dgx-h100", 4)


@pytest.mark.parametrize(("given", "expected"), [(["nic_efficiency", "launch_latency"], ("nic_efficiency", "launch_latency_s")),
                                                 (None, None)])
def test_params_take_either_spelling(given, expected):
    names = fit_names(given)
    assert names == expected or (expected is None and len(names) == 7)


def test_an_unknown_parameter_is_one_error():
    with pytest.raises(SpecError, match=r"--params: unknown parameter 'nic_eff'; expected some of launch_latency_s"):
        fit_names(["nic_eff"])


def test_the_overlay_is_a_cluster_that_carries_the_fit(tmp_path, two_node):
    """perf reads the overlay back with the fitted parameters (to the 6 digits written)."""
    out = tmp_path / "cal.yaml"
    report = run_calibrate([TWO_NODE], "dgx-h100", 2, names=["nic_efficiency", "launch_latency_s"], out=out)
    spec = load_cluster(str(out))
    assert spec.servers == 2 and spec.calibration.fitted_on == [str(TWO_NODE)]
    fitted = report.calibration.params
    read_back = make_predictor(str(out), None, None).params
    for name in ("launch_latency_s", "nic_efficiency", "net_message_overhead_s"):
        assert getattr(read_back, name) == pytest.approx(getattr(fitted, name), rel=1e-5)


def test_a_scenario_stays_a_scenario(tmp_path, two_node):
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: two\ncluster: {preset: dgx-h100, servers: 2}\n"
                        "traffic:\n  patterns:\n    - {kind: leaf-to-leaf, src_leaf: 0, dst_leaf: 1, count: 8, size: 1GB}\n")
    cal = calibrate([two_node], str(scenario), names=["nic_efficiency"])
    data = overlay(str(scenario), None, cal)
    assert data["name"] == "two" and data["traffic"] and data["cluster"]["calibration"]["nic_efficiency"] > 0
    out = tmp_path / "cal.yaml"
    out.write_text(yaml.safe_dump(data))
    assert load_scenario(out).cluster.calibration.nic_efficiency == pytest.approx(cal.params.nic_efficiency, rel=1e-5)


@pytest.fixture(scope="module")
def transfer():
    return load_bench("calibrate_transfer").run()


#: why calibrating on the 2-node table of nccl-tests#309 leaves the shipped model as it is (measured, see below)
_NOTHING_TO_FREE = ("with NVLSTree held to its kernel's rate under every release (tuning.nvls_kernel_alg_GBps), the "
                    "2-node table (NCCL 2.26.2) is predicted within its noise: forward selection frees nothing (best "
                    "drop nvlink_efficiency +0.45 % against a standard error of 0.48 %, launch_latency_s +0.26 % against "
                    "0.40 %: docs/validation-calibrate.md), so the calibrated model is the "
                    "shipped one. Before, the table's NVLSTree plateau ran 6 % below the model and the selection "
                    "freed nic_efficiency 0.933 for it, which NVLSTree's 2-node bound (the kernel, not the NICs) "
                    "does not share with the larger tables")


@pytest.mark.xfail(reason=_NOTHING_TO_FREE, strict=True)
def test_calibrating_on_2_nodes_improves_another_h100_cluster(transfer):
    """Issue 12's transfer, on the tables of nccl-tests#309 (https://github.com/NVIDIA/nccl-tests/issues/309):
    calibrated on the 2-node table (each log predicted as the NCCL release it prints, as `perf --compare`
    does), the 8-node table of another H100 InfiniBand cluster (predicted as NCCL 2.27.3,
    bench/reference_tables.py) beats both the model as shipped and the uncalibrated model (the physical
    defaults) on busbw median (sizes >= 1 MiB). Measured: 5.2 % (nothing freed) against 5.2 % shipped and 10.1 %
    defaults (3.6 % before NVLSTree's kernel rate, from the NIC efficiency freed for the 2-node NVLSTree plateau); the
    selection's held-out error never exceeds the shipped model's."""
    eight = transfer.scores["h100-ib-8node-64gpu-all_reduce.log"]
    assert eight["calibrated"]["busbw_median_error_pct"] < eight["as shipped"]["busbw_median_error_pct"]
    assert eight["calibrated"]["busbw_median_error_pct"] < eight["physical defaults"]["busbw_median_error_pct"]
    selection = transfer.calibration.calibration.selection
    assert selection.error <= selection.candidates[0].held_out_error


def test_calibrating_on_2_nodes_never_worsens_the_same_cluster(transfer):
    """Calibrated on the 2-node table, the 4-node table of the same cluster is predicted no worse than by
    the model as shipped, busbw median (sizes >= 1 MiB) and time floor (<= 64 KiB). Measured: 3.1 -> 3.1 %,
    floor 5.8 -> 5.8 % (nothing freed; before NVLSTree's kernel rate, the freed NIC efficiency gave 8.7 %)."""
    four = transfer.scores["h100-ib-4node-32gpu-all_reduce.log"]
    assert four["calibrated"]["busbw_median_error_pct"] <= four["as shipped"]["busbw_median_error_pct"] + 1e-9
    assert four["calibrated"]["floor_median_error_pct"] <= four["as shipped"]["floor_median_error_pct"] + 1e-9


@pytest.mark.xfail(reason=_NOTHING_TO_FREE + "; the shipped model's 4-node busbw median is 3.1 % against the "
                   "physical defaults' 2.8 % (worst 12.6 against 13.2 %), 0.6 GB/s apart at the median size (64 MiB)",
                   strict=True)
def test_calibrating_on_2_nodes_improves_the_4_node_table_over_the_uncalibrated_model(transfer):
    """Issue 12's done-when: `gpuwait calibrate` on the 2-node table of nccl-tests#309, then `perf` on the same
    cluster's 4 nodes, should beat the uncalibrated model (the physical defaults: datasheets and NCCL's source,
    nothing fitted) on busbw median (sizes >= 1 MiB), with the time floor (<= 64 KiB) within issue 12's 25 %."""
    four = transfer.scores["h100-ib-4node-32gpu-all_reduce.log"]
    calibrated, uncalibrated = four["calibrated"], four["physical defaults"]
    assert calibrated["busbw_median_error_pct"] < uncalibrated["busbw_median_error_pct"]
    assert calibrated["floor_median_error_pct"] < 25


def test_calibrating_a_cluster_the_public_fit_never_saw_never_worsens_it(transfer):
    """The transfer free of the shipped fit having seen the targets: the public fit redone without any H100
    InfiniBand table (bench/reference_tables.py's tables), then `gpuwait calibrate` from it on the 2-node
    table: the 4-node table is predicted no worse on busbw median and time floor (measured: 3.1 -> 3.1 %,
    floor 6.6 -> 6.6 %: nothing freed; before NVLSTree's kernel rate, 3.0 -> 7.6 %)."""
    four = transfer.held_out_scores["h100-ib-4node-32gpu-all_reduce.log"]
    prior, calibrated = four["public fit without H100 IB"], four["calibrated from it"]
    assert calibrated["busbw_median_error_pct"] <= prior["busbw_median_error_pct"] + 1e-9
    assert calibrated["floor_median_error_pct"] <= prior["floor_median_error_pct"] + 1e-9


@pytest.mark.xfail(reason=_NOTHING_TO_FREE, strict=True)
def test_calibrating_without_h100_ib_beats_the_uncalibrated_model_on_another_h100_cluster(transfer):
    """The 8-node table (another H100 InfiniBand cluster) from a public fit that saw no H100 InfiniBand table,
    calibrated on the 2-node table, beats that prior and the uncalibrated model (the physical defaults).
    Measured: 7.3 -> 7.3 % against 10.1 % defaults (nothing freed; 7.9 -> 4.8 % before NVLSTree's kernel rate)."""
    eight = transfer.held_out_scores["h100-ib-8node-64gpu-all_reduce.log"]
    assert eight["calibrated from it"]["busbw_median_error_pct"] < eight["public fit without H100 IB"][
        "busbw_median_error_pct"]
    assert eight["calibrated from it"]["busbw_median_error_pct"] < transfer.scores[
        "h100-ib-8node-64gpu-all_reduce.log"]["physical defaults"]["busbw_median_error_pct"]


def test_calibrating_on_2_nodes_improves_the_4_node_table_of_a_cluster_no_fit_has_seen(transfer):
    """Issue 12's done-when on a second cluster, whose tables are in no fit (so the shipped model is its uncalibrated
    one): one B200 InfiniBand cluster's sendrecv at 2 and 4 nodes, one NCCL build (2.29.7, printed) and one job script
    (github togethercomputer/together-nccl-tests, benchmarks/B200/sendrecv-p2p-scaling/run2; copies and sources in
    tests/nccltests/data/reference/b200-ib-*-sendrecv-together.log). Calibrated on the 2-node table, the 4-node table
    beats the model as shipped on busbw median (sizes >= 1 MiB), with the time floor (<= 64 KiB) within issue 12's
    25 %. Measured: 11.6 -> 1.8 %, floor 65.9 -> 9.8 % (freed: net_step_latency_s 17.6 us, nic_efficiency 0.898)."""
    four = transfer.second.scores["b200-ib-4node-32gpu-sendrecv-together.log"]
    calibrated, uncalibrated = four["calibrated"], four["as shipped"]
    assert calibrated["busbw_median_error_pct"] < uncalibrated["busbw_median_error_pct"]
    assert calibrated["floor_median_error_pct"] < 25 < uncalibrated["floor_median_error_pct"]


@pytest.mark.xfail(reason=_NOTHING_TO_FREE + "; from the public fit without any h100-ib table the 2-node table frees "
                   "nothing either (best drop nvlink_efficiency +0.25 % against a standard error of 0.41 %), so the "
                   "4-node busbw median stays 3.1 %", strict=True)
def test_calibrating_a_cluster_the_public_fit_never_saw_improves_its_4_node_table(transfer):
    """Issue 12's done-when read out of sample: the uncalibrated model a user of an unseen H100 InfiniBand
    cluster gets is the public fit without any table of that cluster family (every h100-ib table: both posters'
    HGX H100 8 x 400 Gb/s InfiniBand clusters of nccl-tests#309, https://github.com/NVIDIA/nccl-tests/issues/309);
    `gpuwait calibrate` from it on the 2-node table, then `perf` on 4 nodes, should beat it on busbw median
    (sizes >= 1 MiB) with the time floor within issue 12's 25 %."""
    reading = next(r for r in load_bench("calibrate_transfer").criterion(
        transfer, "h100-ib-4node-32gpu-all_reduce.log") if r[0].startswith("cluster held out"))
    assert reading[3]


def test_the_criterion_is_reported_in_both_readings(transfer):
    """The bench reports issue 12's criterion on both targets in three readings, each comparing the two scores it
    names: in-sample against the physical defaults and against the model as shipped (both with the calibrated
    model), and with the cluster held out (the public fit without any h100-ib table, and the calibration from it).
    The scores are read here by model name from the transfer's own tables, not through the bench's READINGS, and
    each reading's row of docs/validation-calibrate.md prints its two busbw medians (sizes >= 1 MiB) and its
    verdict (met: the calibrated median lower, the time floor within 25 %), so a reading whose scores were swapped,
    dropped or taken from the wrong model fails."""
    bench = load_bench("calibrate_transfer")
    lines = bench._criterion_lines(transfer)
    for log, servers, _ in bench.TARGETS:
        scores, held = transfer.scores[log], transfer.held_out_scores[log]
        expected = [("in-sample, against the physical defaults", scores["physical defaults"], scores["calibrated"]),
                    ("in-sample, against the shipped model", scores["as shipped"], scores["calibrated"]),
                    ("cluster held out", held["public fit without H100 IB"], held["calibrated from it"])]
        rows = bench.criterion(transfer, log)
        assert len(rows) == len(expected)
        for (reading, uncalibrated, calibrated, met), (name, want_u, want_c) in zip(rows, expected, strict=True):
            assert reading.startswith(name)
            # the very tables named (equal numbers would hide a wiring slip: nothing freed, calibrated == shipped)
            assert uncalibrated is want_u and calibrated is want_c, reading
            floor = want_c["floor_median_error_pct"]
            want_met = want_c["busbw_median_error_pct"] < want_u["busbw_median_error_pct"] and (
                floor is None or floor < 25)
            assert met == want_met, reading
            row = (f"| {servers} nodes | {reading} | {want_u['busbw_median_error_pct']:.1f} % | "
                   f"{want_c['busbw_median_error_pct']:.1f} % | {'yes' if want_met else 'no'} |")
            assert row in lines, row
    if not transfer.calibration.calibration.freed:
        # the report's closing sentence: with nothing freed, the calibrated model is the shipped one
        assert any("freed nothing" in line for line in lines)
        for log, _, _ in bench.TARGETS:
            assert transfer.scores[log]["calibrated"] == transfer.scores[log]["as shipped"]


def test_the_nvls_tree_decomposition_reads_the_kernel_rate_on_2_nodes(transfer):
    """The bench's NVLSTree decomposition (time = offset + rounds x round time) against NCCL's own figure: on
    2 nodes with 128 KiB chunks a round (16 channels x 8 heads x 128 KiB = 16 MiB) runs at the NVLSTree
    kernel's rate, perChMaxNVLSTreeBws 57.7 GB/s busbw per channel on Hopper at 2 nodes x 8 channels
    (src/graph/tuning.cc, NVIDIA/nccl v2.28.3-1), i.e. 16 MiB / (8 x 57.7 / (2 x 15/16)) GB/s = 68.1 us: the
    model's round within 1 %, the measured round of nccl-tests#309's 2-node table within 3 % (66.8 us)."""
    two = next(k for k in transfer.shape if k.table == "h100-ib-2node-16gpu-all_reduce" and k.chunk_bytes == 131072)
    kernel_round_us = 16 * 8 * 131072 / (8 * 57.7e9 / (2 * 15 / 16)) * 1e6
    assert two.model_us[1] == pytest.approx(kernel_round_us, rel=0.01)
    assert two.measured_us[1] == pytest.approx(kernel_round_us, rel=0.03)


def test_each_parameter_freed_alone_goes_through_the_overlay_a_user_writes(transfer):
    """The bench's "each parameter freed alone" section (docs/validation-calibrate.md): a parameter whose fit
    stays where the shipped model has it (net_step_latency_s and intra_step_latency_s at 0, their lower bound and
    the public fit's value) predicts every target exactly as the model as shipped does, through the cluster file
    that section writes; every fitted value lies within the parameter's bounds (the per-message factor aside: it is
    shown in seconds); and the drops beside them are the
    selection's own first-round candidates."""
    from gpuwait.collectives.fit import BOUNDS, SHIPPED

    bench = load_bench("calibrate_transfer")
    first_round = {k.freed[0]: k for k in transfer.calibration.calibration.selection.candidates if len(k.freed) == 1}
    assert {a.name for a in transfer.alone} == set(first_round)
    for a in transfer.alone:
        assert (a.gain, a.gain_se) == (first_round[a.name].gain, first_round[a.name].gain_se)
        if a.name != "net_message_overhead_s":  # shown in seconds, bounded as a factor on the transport's
            assert BOUNDS[a.name][0] <= a.value <= BOUNDS[a.name][1], a.name
    unmoved = [a for a in transfer.alone if a.name in ("net_step_latency_s", "intra_step_latency_s")]
    assert unmoved and all(SHIPPED[a.name] == a.value == 0.0 for a in unmoved)
    for a in unmoved:
        for log, _, _ in bench.TARGETS:
            assert a.scores[log]["busbw_median_error_pct"] == transfer.scores[log]["as shipped"]["busbw_median_error_pct"]
