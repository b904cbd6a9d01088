"""Running a sweep: every case stored once, a rerun does nothing, queries count cases, compaction
keeps them, the report names the best cases."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from gpuwait.cli.main import main
from gpuwait.errors import SpecError
from gpuwait.report.sweep import best_per_axis_value, compact, heatmap_figure, pareto_front, query, render_sweep_report
from gpuwait.runner.sweep import load_sweep, plan_sweep
from gpuwait.runner.sweep_exec import ResultStore, run_sweep

from .conftest import N_CASES, N_INVALID


@pytest.fixture(scope="module")
def done(tmp_path_factory):
    """The tiny sweep run once on two local workers: (plan, directory, summary)."""
    from .conftest import SWEEP

    root = tmp_path_factory.mktemp("sweep")
    (root / "tiny.yaml").write_text(SWEEP)
    plan = plan_sweep(*load_sweep(root / "tiny.yaml"))
    summary = run_sweep(plan, root / "out", workers=2)
    return plan, root / "out", summary


def test_every_case_is_one_file_and_one_row(done):
    plan, out, summary = done
    assert summary.ran == N_CASES and summary.by_status == {"ok": N_CASES - N_INVALID, "invalid": N_INVALID}
    files = sorted(p.stem for p in (out / "cases").glob("*.parquet"))
    assert files == sorted(c.case_id for c in plan.cases)
    assert list((out / "cases").glob(".*")) == []  # no temporary file left behind
    _, rows = query(out, "select count(*), count(distinct case_id) from results")
    assert rows == [(N_CASES, N_CASES)]


def test_rows_carry_axes_results_time_and_memory(done):
    _, out, _ = done
    row = pq.read_table(next((out / "cases").glob("*.parquet"))).to_pylist()[0]
    for column in ("case_id", "cluster_servers", "cluster_routing_kind", "perf_env_NCCL_ALGO", "status",
                   "wall_s", "peak_rss_bytes", "gpuwait_version", "case_json"):
        assert column in row
    _, ok = query(out, "select busbw_GBps, algorithm, perf_env_NCCL_ALGO, n_switches from results where status = 'ok'")
    assert all(bw > 0 and sw > 0 for bw, _, _, sw in ok)
    # NCCL_ALGO reaches the model: every Tree case chose tree, every Ring case ring
    assert {(algo, env) for _, algo, env, _ in ok} == {("ring", "Ring"), ("tree", "Tree")}


def test_rerun_does_no_work_and_retry_failed_redoes_failures(done):
    plan, out, _ = done
    again = run_sweep(plan, out, workers=2)
    assert again.ran == 0 and again.skipped == N_CASES
    retried = run_sweep(plan, out, workers=1, retry_failed=True)
    assert retried.ran == N_INVALID and retried.by_status == {"invalid": N_INVALID}
    assert query(out, "select count(*) from results")[1] == [(N_CASES,)]


def test_query_errors_are_one_line(done, tmp_path):
    with pytest.raises(SpecError, match="Referenced column"):
        query(done[1], "select no_such_column from results")
    with pytest.raises(SpecError, match="no sweep results"):
        query(tmp_path, "select 1")


def test_compact_merges_and_keeps_every_case(done, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(done[1], copy)
    merged, target = compact(copy)
    assert merged == N_CASES and target is not None and ResultStore(copy).files() == [target]
    assert query(copy, "select count(*), count(distinct case_id) from results")[1] == [(N_CASES, N_CASES)]
    rerun = run_sweep(done[0], copy, workers=1)
    assert rerun.ran == 0  # merged cases count as done


def test_best_per_axis_value_and_pareto_front():
    rows = [{"case_id": "a", "x": 1, "t": 3.0, "c": 10}, {"case_id": "b", "x": 1, "t": 2.0, "c": 20},
            {"case_id": "c", "x": 2, "t": 2.5, "c": 10}, {"case_id": "d", "x": 2, "t": 4.0, "c": 30}]
    best = best_per_axis_value(rows, ["x"], "t")
    assert [(b["value"], b["case_id"]) for b in best] == [(1, "b"), (2, "c")]
    # a (10, 3.0) is beaten by c (10, 2.5); d by everything
    assert [r["case_id"] for r in pareto_front(rows, "t", "c")] == ["c", "b"]


def test_a_best_case_tied_with_others_says_so():
    """Was 'oversubscription=2: infiniband, static, qps=4' as the best of 8 cases with exactly its step time
    (examples/sweeps/ib-vs-roce.yaml): the others axes read as a choice that mattered."""
    rows = [{"case_id": "a", "x": 1, "y": 1, "t": 2.0}, {"case_id": "b", "x": 1, "y": 2, "t": 2.0},
            {"case_id": "c", "x": 1, "y": 3, "t": 3.0}, {"case_id": "d", "x": 2, "y": 1, "t": 2.5}]
    best = {b["value"]: b for b in best_per_axis_value(rows, ["x", "y"], "t") if b["axis"] == "x"}
    assert (best[1]["case_id"], best[1]["ties"], best[1]["others"]) == ("a", 2, "y=1 (one of 2 cases with this t)")
    assert (best[2]["ties"], best[2]["others"]) == (1, "y=1")


def test_report_page_names_the_best_case(done):
    page = render_sweep_report(done[1])
    assert "busbw_GBps" in page and "Pareto front" in page and "bogus" in page
    with pytest.raises(SpecError, match="--x: got 'nope'"):
        render_sweep_report(done[1], x="nope")


def test_report_of_an_unfinished_sweep_says_what_is_missing(done, tmp_path, capsys):
    # a sweep stopped by Ctrl-C: the page ranked the stored cases as if they were the whole sweep
    import shutil

    plan, directory, _ = done
    partial = tmp_path / "partial"
    shutil.copytree(directory, partial)
    assert "not stored yet" not in render_sweep_report(partial)
    ids = sorted({c.case_id for c in plan.cases})
    stored = [p for p in (partial / "cases").glob("*.parquet") if p.stem in ids]
    stored[0].unlink()
    stored[1].unlink()
    page = render_sweep_report(partial)
    assert f"2 of the sweep's {len(ids)} cases are not stored yet" in page
    # and so does the command's text and --json, not the page alone
    from gpuwait.report.sweep import sweep_report

    assert {k: sweep_report(partial).to_dict()[k] for k in ("planned_cases", "not_stored")} == {
        "planned_cases": len(ids), "not_stored": 2}
    from gpuwait.cli.main import main

    capsys.readouterr()
    assert main(["sweep", "report", str(partial)]) == 0
    assert f"note: 2 of the sweep's {len(ids)} cases are not stored yet" in capsys.readouterr().out


def test_report_of_a_directory_that_lists_no_plan_says_its_size_is_unknown(done, tmp_path):
    # a sweep.json written before it listed the plan's case ids: how many cases the plan has is not known,
    # so --json says null, not 0 planned cases beside the stored ones
    import shutil

    from gpuwait.report.sweep import sweep_report

    _, directory, _ = done
    old = tmp_path / "old"
    shutil.copytree(directory, old)
    plan = json.loads((old / "sweep.json").read_text())
    del plan["case_ids"]
    (old / "sweep.json").write_text(json.dumps(plan))
    doc = sweep_report(old).to_dict()
    assert doc["cases"] > 0 and (doc["planned_cases"], doc["not_stored"]) == (None, None)
    assert "not stored yet" not in render_sweep_report(old)


def test_cli_run_query_report_compact(tmp_path, tiny_sweep, capsys):
    out = tmp_path / "out"
    assert main(["sweep", str(tiny_sweep), "--out", str(out), "--workers", "2", "--json"]) == 0
    assert '"ran": 9' in capsys.readouterr().out
    assert main(["sweep", "run", str(tiny_sweep), "--out", str(out), "--json"]) == 0
    assert '"ran": 0' in capsys.readouterr().out
    assert main(["sweep", "query", str(out), "select count(*) as n from results", "--json"]) == 0
    assert '"rows": [\n    [\n      9' in capsys.readouterr().out
    assert main(["sweep", "report", str(out)]) == 0 and (out / "report.html").exists()
    assert capsys.readouterr().out == f"{out / 'report.html'}\n"
    # --json: the page and the report's tables (sweep report and compact took no --json)
    page = (out / "report.html").read_text()
    assert main(["sweep", "report", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["page"] == str(out / "report.html") and (out / "report.html").read_text() == page
    assert doc["cases"] == 9 and doc["by_status"]["ok"] + doc["by_status"]["invalid"] + doc["by_status"]["failed"] == 9
    assert doc["best"] and all({"axis", "value", doc["metric"], "case_id"} <= set(b) for b in doc["best"])
    files = len(list(out.rglob("*.parquet")))
    assert main(["sweep", "compact", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["files"] == files and Path(doc["merged_into"]).exists()
    assert main(["sweep", "compact", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"files": 1, "merged_into": None}
    assert main(["sweep", "compact", str(out)]) == 0
    assert capsys.readouterr().out == "1 file(s): nothing to merge\n"
    assert main(["sweep", "run", str(tiny_sweep), "--out", str(out), "--executor", "slurm"]) == 2
    assert "--executor: got 'slurm'" in capsys.readouterr().err


def test_a_nan_metric_is_no_score_in_the_heatmap_and_the_pareto_front():
    # a mean over no flows is NaN (fct_mean_s): it neither holds a heatmap cell against a real value
    # nor beats every costlier case on the Pareto front (NaN compares false both ways)
    rows = [{"case_id": "a", "x": 1, "y": 1, "t": math.nan, "c": 5}, {"case_id": "b", "x": 1, "y": 1, "t": 2.0, "c": 10}]
    assert heatmap_figure(rows, "x", "y", "t").data[0].z[0][0] == 2.0
    assert [r["case_id"] for r in pareto_front(rows, "t", "c")] == ["b"]
    assert [b["case_id"] for b in best_per_axis_value(rows, ["x"], "t")] == ["b"]


SERVING_SWEEP = {"name": "serve", "steps": 1,
                 "base": {"name": "s", "cluster": {"preset": "dgx-h100", "servers": 1},
                          "workload": {"mode": "inference", "model": {"preset": "llama-8b"},
                                       "inference": {"tp": 8, "batch": 4, "prompt_tokens": 512, "output_tokens": 16},
                                       "compute": {"gpu": "H100-SXM"}}},
                 "axes": [{"path": "workload.inference.output_tokens", "values": [1, 16], "name": "out"}]}


def test_a_serving_case_stores_the_latencies_run_prints(tmp_path, capsys):
    """Was a row with the batch's time and tokens/s but neither TTFT nor TPOT, the numbers `run` leads with
    for serving, so a serving sweep could not be ranked (--metric) by them."""
    import yaml

    (tmp_path / "serve.yaml").write_text(yaml.safe_dump(SERVING_SWEEP))
    assert main(["sweep", "run", str(tmp_path / "serve.yaml"), "--out", str(tmp_path / "out"), "--workers", "1"]) == 0
    _, rows = query(tmp_path / "out", "select out, ttft_s, tpot_s, ideal_ttft_s, ideal_tpot_s, case_json from results order by out")
    for out, ttft, tpot, ideal_ttft, ideal_tpot, case in rows:
        (tmp_path / "case.yaml").write_text(yaml.safe_dump(json.loads(case)["scenario"]))
        capsys.readouterr()
        assert main(["run", str(tmp_path / "case.yaml"), "--json"]) == 0
        serving = json.loads(capsys.readouterr().out)["cases"][0]["serving"]
        assert (ttft, ideal_ttft) == (serving["ttft_s"], serving["ideal_ttft_s"])
        if out == 1:  # no decode pass: no TPOT, as run says
            assert serving["tpot_s"] is None and math.isnan(tpot) and math.isnan(ideal_tpot)
        else:
            assert (tpot, ideal_tpot) == (serving["tpot_s"], serving["ideal_tpot_s"]) and tpot > 0
    capsys.readouterr()
    assert main(["sweep", "report", str(tmp_path / "out"), "--metric", "tpot_s", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["best"][0]["tpot_s"] == rows[1][2]
