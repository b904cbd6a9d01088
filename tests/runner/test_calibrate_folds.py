"""`gpuwait calibrate`'s folds on one log (gpuwait.runner.calibrate._folds): split by distinct size.

Reference: nccl-tests' all_reduce_perf with ``-o all`` (or ``-d all``) times the whole size sweep once per
reduction (and datatype) under one header (src/all_reduce.cu, AllReduceRunTest's loop over types and ops
calling TimeTest, NVIDIA/nccl-tests v2.19.6), so one log repeats every size. The sweep here is the published
2-node H100 InfiniBand table of NVIDIA/nccl-tests issue #309, cut to 8 B .. 8 GiB (31 sizes, as ``-e 8G``
prints): an odd count, with which alternating rows would put each size of the second table on the other
side from the first's.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from gpuwait.collectives.fit import SHIPPED, Observation
from gpuwait.collectives.physical import adjust, physical_defaults, pipelined_time_s
from gpuwait.errors import SpecError
from gpuwait.report.calibrate import read_log
from gpuwait.runner.calibrate import ALTERNATE_SIZES, MeasuredLog, _folds, calibrate
from gpuwait.runner.perf import make_predictor

ROOT = Path(__file__).resolve().parents[2]
TWO_NODE = ROOT / "tests" / "nccltests" / "data" / "reference" / "h100-ib-2node-16gpu-all_reduce.log"
LAST_ROW = " 17179869184    4294967296     float     sum"


def _sum_and_prod_log(tmp_path: Path) -> Path:
    """The 2-node table cut at 8 GiB, then the same rows again as the 'prod' reduction's table (-o all)."""
    lines = TWO_NODE.read_text().splitlines(keepends=True)
    rows = [line for line in lines if line.strip()[:1].isdigit()]
    assert rows[-1].startswith(LAST_ROW)
    kept = rows[:-1]
    prod = [row.replace("     sum  ", "    prod  ", 1) for row in kept]
    at = lines.index(rows[-1])
    text = "".join(lines[:at] + prod + lines[at + 1:]).replace("maxBytes 17179869184", "maxBytes 8589934592")
    path = tmp_path / "sum-and-prod.log"
    path.write_text(text.replace("-e 16g", "-e 8g"))
    return path


@pytest.fixture
def two_tables(tmp_path) -> MeasuredLog:
    return read_log(_sum_and_prod_log(tmp_path))


def _observations(log: MeasuredLog) -> list[Observation]:
    predictor = make_predictor("dgx-h100", 2, None)
    costs = {size: predictor.estimate(log.collective, size).costs for size in set(log.sizes_bytes)}
    return [Observation(costs[size], predictor.params, t, log.name, size)
            for size, t in zip(log.sizes_bytes, log.time_s, strict=True)]


def test_the_log_repeats_every_size(two_tables):
    sizes = two_tables.sizes_bytes
    assert len(sizes) == 62 and sizes[:31] == sizes[31:] == tuple(8 * 2**k for k in range(31))


def test_no_size_is_on_both_sides_of_a_fold(two_tables):
    """Each size's two rows are trained on together and scored together; the sorted distinct sizes
    alternate (8 B, 32 B, ... 8 GiB scored in one fold, 16 B ... 4 GiB in the other); every row scored once."""
    sizes = np.array(two_tables.sizes_bytes)
    validation, folds = _folds([_observations(two_tables)])
    assert validation == ALTERNATE_SIZES and len(folds) == 2
    for (train,), (test,) in folds:
        assert not set(sizes[train]) & set(sizes[test])
        assert not (train & test).any() and (train | test).all()
    scored = sum(test.astype(int) for _, (test,) in folds)
    assert (scored == 1).all()
    assert sorted(set(sizes[folds[1][1][0]])) == [8 * 2**k for k in range(0, 31, 2)]
    # the split this replaces: alternating rows, which with 31 rows per table puts every size on both sides
    rows = np.arange(len(sizes)) % 2 == 0
    assert set(sizes[rows]) == set(sizes[~rows]) == set(sizes)


def test_a_log_of_one_row_per_size_still_splits_into_even_and_odd_rows():
    """The reference tables' split is unchanged (docs/validation-calibrate.md regenerates as it was)."""
    log = read_log(TWO_NODE)
    _, folds = _folds([_observations(log)])
    even = np.arange(len(log.sizes_bytes)) % 2 == 0
    assert [(train.tolist(), test.tolist()) for (train,), (test,) in folds] == [
        (even.tolist(), (~even).tolist()), ((~even).tolist(), even.tolist())]


def test_one_size_in_several_tables_is_still_one_size(two_tables):
    one = replace(two_tables, sizes_bytes=(1048576,) * 2, time_s=two_tables.time_s[:2],
                  busbw_GBps=two_tables.busbw_GBps[:2])
    with pytest.raises(SpecError, match="one size is too few to fit and score on different sizes"):
        calibrate([one], "dgx-h100", 2, names=["nic_efficiency"])


def test_a_calibration_on_two_tables_scores_each_size_by_a_fit_that_did_not_see_it(two_tables):
    """Closed form on the two tables' sizes: times the model gives for the shipped parameters with a slower NIC
    and a costlier launch, the 'prod' table 2 % slower than the 'sum' one. The calibration runs, cross-validated
    by alternate sizes, each fold freeing what it fits; both rows of a size are predicted by the one fold that
    held the size out (the same prediction, though their measured times differ), within 2.5 % of the true times
    (measured: 1.5 %, the fit between the two tables)."""
    predictor = make_predictor("dgx-h100", 2, None)
    truth = replace(adjust(physical_defaults(predictor.transport), SHIPPED), launch_latency_s=4e-6, nic_efficiency=0.85)
    sizes = two_tables.sizes_bytes
    true_s = np.array([pipelined_time_s(predictor.estimate("all_reduce", s).costs, truth) for s in sizes])
    measured_s = true_s * np.repeat([1.0, 1.02], 31)
    log = replace(two_tables, time_s=tuple(measured_s), busbw_GBps=tuple(np.array(sizes) / measured_s * 1.875e-9),
                  nccl_version=None)
    cal = calibrate([log], "dgx-h100", 2, names=["launch_latency_s", "nic_efficiency"])
    assert cal.validation == ALTERNATE_SIZES and len(cal.fold_freed) == 2 and all(cal.fold_freed)
    predicted_s = np.array([r["predicted_time_us"] for r in cal.logs[0].calibrated]) * 1e-6
    assert len(predicted_s) == 62 and (predicted_s[:31] == predicted_s[31:]).all()
    assert np.abs(predicted_s / true_s - 1).max() < 0.025


def test_a_table_repeated_adds_no_evidence(two_tables):
    """The 'prod' table repeating the 'sum' table's times row for row tells nothing new: the selection is the
    one table's (31 sizes), every candidate's held-out error, drop and standard error alike (within 1e-12), and
    so are the predictions. Measured before the standard error counted a size once (fit._size_units): the
    repeats shrank it by sqrt(2) (nvlink_efficiency's first drop 0.47 % against 0.35 % instead of 0.50 %) and
    three parameters were freed (nvlink_efficiency, launch_latency_s, intra_step_latency_s) where the one
    table frees none."""
    one = replace(two_tables, sizes_bytes=two_tables.sizes_bytes[:31], time_s=two_tables.time_s[:31],
                  busbw_GBps=two_tables.busbw_GBps[:31])
    assert two_tables.time_s[31:] == one.time_s
    single, repeated = calibrate([one], "dgx-h100", 2), calibrate([two_tables], "dgx-h100", 2)
    assert repeated.freed == single.freed and repeated.fold_freed == single.fold_freed
    for a, b in zip(single.selection.candidates, repeated.selection.candidates, strict=True):
        assert a.freed == b.freed
        assert (a.held_out_error, a.gain, a.gain_se) == pytest.approx((b.held_out_error, b.gain, b.gain_se), abs=1e-12)
    predicted = [r["predicted_time_us"] for r in repeated.logs[0].calibrated]
    assert predicted[:31] == predicted[31:] == pytest.approx([r["predicted_time_us"] for r in single.logs[0].calibrated],
                                                             rel=1e-12)
