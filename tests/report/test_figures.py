"""Plotly figures: what each one draws from a RunResult."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gpuwait.report.figures import breakdown_figure, busbw_figure, link_heatmap_figure, timeline_figure
from gpuwait.steps.result import LinkStats

from .conftest import make_result


def test_breakdown_bars_stack_to_the_step(two_cases):
    fig = breakdown_figure(two_cases)
    bars = [t for t in fig.data if t.type == "bar"]
    totals = np.sum([np.asarray(t.y) for t in bars], axis=0)
    np.testing.assert_allclose(totals, [r.breakdown.step_time_s * 1e3 for r in two_cases])
    assert {t.name for t in bars} >= {"compute", "exposed comm", "data wait", "straggler wait"}
    ideal = next(t for t in fig.data if t.type == "scatter")
    np.testing.assert_allclose(ideal.y, [r.breakdown.ideal_step_time_s * 1e3 for r in two_cases])


def test_repeated_case_names_stay_apart():
    fig = breakdown_figure([make_result("same"), make_result("same")])
    assert list(fig.data[0].x) == ["same", "same (2)"]


def test_busbw_one_bar_per_collective_and_case(two_cases):
    fig = busbw_figure(two_cases)
    assert len(fig.data) == 2 and list(fig.data[0].y) == [25.6, 12.0]


def test_heatmap_bins_wide_tiers_by_their_busiest_link():
    n = 1000
    util = np.zeros(n + 2)
    util[737] = 0.9
    links = LinkStats(name=[f"l{i}" for i in range(n + 2)], tier=np.array(["leaf-spine"] * n + ["nvlink"] * 2),
                      utilization=util, bytes_per_step=util * 1e9)
    result = dataclasses.replace(make_result(), links=links)
    heat = link_heatmap_figure(result, max_columns=100).data[0]
    assert list(heat.y) == ["nvlink", "leaf-spine"]  # fixed tier order, inside the server first
    assert len(heat.z[1]) == 100 and list(heat.z[0][2:]) == [None] * 98  # short rows padded, not stretched
    assert max(heat.z[1]) == pytest.approx(0.9) and "busiest l737" in heat.text[1][73]


def test_timeline_lanes_and_bounds():
    result = make_result(n_gpus=4, steps=3)
    fig, shown = timeline_figure(result)
    assert shown.startswith("4 GPUs in 1 group") and list(fig.layout.yaxis.ticktext) == ["group 1: 4 GPUs (0-3)"]
    comm = [t for t in fig.data if t.type == "bar" and t.name.startswith("comm")]
    other = [t for t in fig.data if t.type == "bar" and not t.name.startswith("comm")]
    assert {t.name for t in comm} == {"comm dp", "comm tp"}
    assert all(t.offset > 0 for t in comm) and all(t.offset < 0 for t in other)  # comm in the lower half
    # the row is the median member's tasks (rank 0 here: ranks 0, 2, 3 tie on own time)
    median = result.tasks.rank == 0
    n_bars = sum(len(t.x) for t in fig.data if t.type == "bar")
    assert n_bars <= median.sum()
    slowest = [t for t in fig.data if t.type == "scatter"][0]
    assert len(slowest.x) == 3 and "rank 1" in slowest.text[0]  # one diamond per step, at the slow rank
    fig, shown = timeline_figure(result, max_tasks=14)  # 6 tasks per step on the median rank
    assert shown.endswith("first 2 of 3 steps")


def test_dense_calls_merge_into_bands_wider_than_a_pixel():
    from gpuwait.report.figures import BAND_FRACTION, merge_bands

    # 2,560 calls of 1 us with 1 us gaps in 2 s of row 0, one lone call in row 1: row 0 is one band
    start = np.concatenate([np.arange(2560) * 2e-3, [1.0]])
    end = start + 1e-3
    row = np.array([0] * 2560 + [1])
    first, band_row, lo, hi, count = merge_bands(row, start, end, gap=2.0 * BAND_FRACTION)
    assert band_row.tolist() == [0, 1] and count.tolist() == [2560, 1]
    assert lo[0] == 0.0 and hi[0] == pytest.approx(end[2559]) and first.tolist() == [0, 2560]
    # calls far apart stay apart
    _, _, _, _, count = merge_bands(np.zeros(3, int), np.array([0.0, 1.0, 2.0]), np.array([0.5, 1.5, 2.5]), gap=0.1)
    assert count.tolist() == [1, 1, 1]


def test_utilization_distribution_tells_idle_from_saturated():
    from gpuwait.report.figures import esc, utilization_bin_labels, utilization_distribution_figure

    from .conftest import make_result

    r = make_result()
    fig = utilization_distribution_figure(r, highlight=[r.links.name[-1]])
    bars = {t.name: list(t.y) for t in fig.data if t.type == "bar"}
    assert "nvlink" not in bars and sum(sum(v) for v in bars.values()) == int((~np.isin(r.links.tier, ("nvlink", "pcie"))).sum())
    assert list(fig.data[0].x) == utilization_bin_labels() and utilization_bin_labels()[0] == "idle"
    marked = [t for t in fig.data if t.name == "named in findings"]
    assert marked and list(marked[0].text) == [esc(r.links.name[-1])]  # escaped for plotly
