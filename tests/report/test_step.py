"""Terminal tables and the --json summary of a run."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from rich.console import Console

from gpuwait.report.step import breakdown_table, collectives_table, hot_link_rows, hot_links_table, step_summary_dict
from gpuwait.steps.result import BREAKDOWN_CATEGORIES, TaskTable

from .conftest import HOSTILE, make_result


def render(*tables) -> str:
    console = Console(record=True, width=250, color_system=None)
    for table in tables:
        console.print(table)
    return console.export_text()


def test_summary_is_json_and_adds_up(result):
    summary = json.loads(json.dumps(step_summary_dict(result)))
    assert set(summary["breakdown_s"]) == set(BREAKDOWN_CATEGORIES)
    # per GPU the categories add up to the step, so their job means do too
    assert sum(summary["breakdown_s"].values()) == pytest.approx(summary["step_time_s"])
    assert sum(summary["breakdown_fraction"].values()) == pytest.approx(1.0)
    assert summary["network_cost_s"] == pytest.approx(summary["step_time_s"] - summary["ideal_step_time_s"])
    assert summary["wait_fraction"] == pytest.approx(result.breakdown.wait_fraction)
    assert set(summary["exposed_comm_s"]) == {"dp all_reduce", "tp all_reduce"}  # JSON keeps machine keys
    assert [c["label"] for c in summary["collectives"]] == ["dp all_reduce bucket", "tp all_reduce"]
    assert summary["hottest_links"][0] == {"link_id": 8, "link": "leaf0->spine0", "tier": "leaf-spine",
                                           "peak_utilization": pytest.approx(0.95), "bytes_per_step": pytest.approx(0.95e9),
                                           "busy_s": 0.0, "waiting_s": 0.0,  # no capacities in this toy: ranked by utilization
                                           "users": ["dp all_reduce", "storage read"]}


def test_hot_links_skip_idle_and_intra_server_links(result):
    rows = hot_link_rows(result, n=20)
    assert [r["tier"] for r in rows if r["tier"] in ("nvlink", "pcie")] == []
    assert "leaf0->spine2" not in [r["link"] for r in rows]  # utilization 0
    assert [r["peak_utilization"] for r in rows] == sorted((r["peak_utilization"] for r in rows), reverse=True)


def test_breakdown_table_puts_cases_side_by_side(two_cases):
    text = render(breakdown_table(two_cases))
    assert "RoCEv2, ECMP" in text and "InfiniBand, adaptive routing" in text
    line = next(row for row in text.splitlines() if "step time (ms)" in row)
    assert "41.00" in line and "35.50" in line
    # communication rows read as words with the group's size (the toy's groups are all 4 GPUs)
    for label in ("exposed comm", "straggler wait", "DP all-reduce (4 GPUs)", "TP all-reduce (4 GPUs)", "ideal-network step",
                  "network cost", "wait fraction", "MFU"):
        assert label in text
    assert "dp all_reduce" not in text
    assert "14.6%" in next(row for row in text.splitlines() if row.strip("│ ").startswith("exposed comm "))


def test_link_and_collective_tables(result):
    text = render(hot_links_table(result), collectives_table(result))
    assert "leaf0->spine0" in text and "dp all_reduce, storage read" in text and "95%" in text
    assert "256MB" in text and "25.60" in text and "ring/Simple" in text and "nvls/LL128" in text


def test_names_are_not_rich_markup():
    hostile = make_result(case=HOSTILE)
    text = render(breakdown_table([hostile]), hot_links_table(hostile), collectives_table(hostile))
    assert "[bold]" in text  # printed as itself, not eaten as a style


def test_rank_groups_follow_the_phase_pattern():
    # ranks 0-1 run a pipeline stage's schedule (fwd, bwd), ranks 2-3 another (fwd, fwd, bwd):
    # two groups, whatever their timing; the slow rank is named as its group's slowest
    from gpuwait.report.ranks import rank_groups, rank_ranges

    result = make_result(n_gpus=4, steps=1, slow_rank=1)
    t = result.tasks
    extra = (t.rank >= 2) & (t.name == "fwd")
    tasks = TaskTable(**{k: np.concatenate([v, v[extra]]) for k, v in t.columns().items()})
    tasks.name[len(t):] = "fwd again"
    groups, how = rank_groups(dataclasses.replace(result, tasks=tasks))
    assert [g.ranks.tolist() for g in groups] == [[0, 1], [2, 3]] and how.startswith("4 GPUs in 2 groups")
    assert groups[0].slowest_rank == 1 and groups[0].label == "group 1: 2 GPUs (0-1)"
    assert rank_ranges(np.array([0, 1, 2, 5, 7, 8])) == "0-2, 5, 7-8"
    assert rank_ranges(np.arange(0, 20, 2)) == "0, 2, 4, ... (10 runs)"


def test_rank_groups_are_bounded():
    # every rank its own compute order: too many groups, so consecutive blocks
    from gpuwait.report.ranks import rank_groups

    result = make_result(n_gpus=40, steps=1, slow_rank=37)
    tasks = result.tasks
    names = np.array([f"{n} r{r}" if k == "compute" else n for n, k, r in zip(tasks.name, tasks.kind, tasks.rank)])
    groups, how = rank_groups(dataclasses.replace(result, tasks=dataclasses.replace(tasks, name=names)), max_groups=8)
    assert len(groups) == 8 and "consecutive ranks" in how
    assert sorted(r for g in groups for r in g.ranks.tolist()) == list(range(40))
    assert any(g.slowest_rank == 37 for g in groups)


def test_alike_links_share_a_row_and_the_finding_link_is_shown():
    from gpuwait.report.step import grouped_hot_link_rows

    from .conftest import make_result

    r = make_result()
    rows = grouped_hot_link_rows(r, 10)
    names = [n for row in rows for n in (row["link"], *row["alike"])]
    assert len(names) == len(set(names))
    for row in rows:  # everything in one row carries the same load
        for other in row["alike"]:
            i = r.links.name.index(other)
            assert r.links.utilization[i] == pytest.approx(row["peak_utilization"], abs=1e-3)
    # a link named in a finding appears, marked, even when it is not among the hottest
    coldest = r.links.name[int(np.argmin(r.links.utilization))]
    rows = grouped_hot_link_rows(r, 1, highlight=[coldest])
    assert rows[-1]["link"] == coldest and rows[-1]["named_in_findings"]


def _uplinks(bytes_per_step, capacity_Bps):
    from gpuwait.steps.result import LinkStats

    n = len(bytes_per_step)
    return LinkStats(name=[f"leaf0->spine{i}" for i in range(n)], tier=np.array(["leaf-spine"] * n),
                     utilization=np.full(n, 0.9), bytes_per_step=np.asarray(bytes_per_step, dtype=float),
                     capacity_Bps=np.asarray(capacity_Bps, dtype=float))


def test_links_are_ranked_by_the_time_their_bytes_wait():
    # fluid model: B bytes through C B/s take B/C; a balanced tier would take sum(B)/sum(C) on every link
    gb = 1e9
    ecmp = _uplinks([2 * gb, 0, 1 * gb, 1 * gb], [50 * gb] * 4)  # two flows hashed onto spine0, none on spine1
    np.testing.assert_allclose(ecmp.busy_s(), [0.040, 0.0, 0.020, 0.020])
    np.testing.assert_allclose(ecmp.waiting_s(), [0.020, 0.0, 0.0, 0.0], atol=1e-15)
    assert ecmp.costliest(10).tolist() == [0, 2, 3]  # idle spine1 left out; the tie broken by name
    degraded = _uplinks([gb] * 4, [50 * gb, 50 * gb, 12.5 * gb, 50 * gb])  # spine2 at a quarter of its rate
    assert degraded.waiting_s()[2] == pytest.approx(gb / 12.5e9 - 4 * gb / 162.5e9)
    assert degraded.costliest(1).tolist() == [2]
    # an evenly loaded tier costs nothing, however busy: no routing does better with those links
    assert _uplinks([gb] * 4, [50 * gb] * 4).waiting_s().tolist() == [0.0] * 4


def test_costliest_rows_group_ties_and_say_the_waiting_time():
    import dataclasses

    from gpuwait.report.step import grouped_hot_link_rows

    gb = 1e9
    links = _uplinks([2 * gb] * 2 + [gb] * 20 + [0] * 2, [50 * gb] * 24)
    r = dataclasses.replace(make_result(), links=links)
    rows = grouped_hot_link_rows(r, 10, highlight=["leaf0->spine22"])
    assert [row["link"] for row in rows] == ["leaf0->spine0", "leaf0->spine2", "leaf0->spine22"]
    assert rows[0]["alike"] == ["leaf0->spine1"] and len(rows[1]["alike"]) == 19
    assert rows[0]["waiting_s"] == pytest.approx(0.04 - 24 * gb / (24 * 50 * gb)) and rows[2]["named_in_findings"]
    text = render(hot_links_table(r, 10, highlight=["leaf0->spine22"]))
    assert "waiting/step" in text and "+19 alike" in text and "* leaf0->spine22" in text


def test_peak_utilization_is_one_name_and_one_definition_in_every_output():
    """The links table's "utilization" was the link's rate while its busiest communication runs over its line rate
    (steps/stats.py link_stats: the families' peak rate / capacity), not a share of the step: a leaf-spine link
    read "100 %" beside "waiting 0 s, busy 85 ms" of a 557 ms step. Text, --json, HTML and Parquet now call it
    peak utilization and say what it is; the value is LinkStats.utilization, the peak rate over capacity."""
    from gpuwait.report.html import render_html_report
    from gpuwait.report.parquet import link_table
    from gpuwait.report.step import PEAK_UTILIZATION

    result = make_result()
    text = render(hot_links_table(result))
    assert "peak utilization" in text.splitlines()[2] and " utilization " not in text.splitlines()[2].replace(
        "peak utilization", "")
    assert "not a share of the step" in text and PEAK_UTILIZATION.startswith("peak utilization: the share of its line rate")
    row = step_summary_dict(result)["hottest_links"][0]
    assert "utilization" not in row and row["peak_utilization"] == result.links.utilization[row["link_id"]]
    html = render_html_report([result])
    assert "<th>peak utilization</th>" in html and "<th>utilization</th>" not in html
    assert "not a share of the step" in html
    assert "peak_utilization" in link_table(result).column_names and "utilization" not in link_table(result).column_names


def test_the_waiting_column_is_a_bound_on_the_step_not_a_share_of_it():
    """A link's waiting/step adds up the time its communication waits, also where compute hides it:
    on examples/dp-only.yaml the busiest uplink waits more a step than the whole step's exposed
    communication (audit: 101.6 ms beside 92.3 ms), so the table may not call it the time the link
    costs the job. Its caption says what the column bounds."""
    from pathlib import Path

    from gpuwait.runner.workload import run_workload
    from gpuwait.spec import Scenario, load_model

    root = Path(__file__).resolve().parents[2]
    result = run_workload(load_model(Scenario, root / "examples" / "dp-only.yaml"))[0]
    assert result.links.waiting_s().max() > sum(result.breakdown.exposed_comm_s.values())
    text = render(hot_links_table(result))
    assert "costing" not in text and "links the most traffic waits behind" in text
    assert "the step loses that much where the communication is exposed, less where compute hides it" in text
    # the HTML report's note on the same table says the same
    from gpuwait.report.html import render_html_report

    page = render_html_report([result])
    assert "cost the job" not in page and "less where compute hides it" in page
