"""The report of a multi-job run: its conclusion held to the shared run's figures, the recorded phase
timeline consistent with the step times, the Perfetto trace (a process per job, slices that nest),
and `gpuwait run SCENARIO_WITH_JOBS --report DIR`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gpuwait.cli.main import main
from gpuwait.report.jobs import common_bytes, jobs_conclusion, jobs_perfetto_trace, shared_link_rows
from gpuwait.runner.jobs import run_jobs
from gpuwait.spec import Scenario, load_model

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "two-jobs-shared-uplinks.yaml"


@pytest.fixture(scope="module")
def shared():
    return run_jobs(load_model(Scenario, EXAMPLE), steps=2)


def test_conclusion_names_the_most_slowed_job_and_the_co_tenant(shared):
    worst = max(shared.jobs, key=lambda j: j.slowdown)
    other = next(j for j in shared.jobs if j is not worst)
    c = jobs_conclusion(shared)
    assert c.numbers["job"] == worst.name and c.numbers["by"] == other.name
    assert c.numbers["slowdown"] == pytest.approx(worst.slowdown)
    assert c.sentences[0].startswith(f"{worst.name} is slowed most") and f"{100 * worst.slowdown:+.1f} %" in c.text
    assert f"shares {len(worst.shares[other.name])} network links" in c.text
    # the bytes both put on the common links are the same whichever job is asked
    common = common_bytes(shared)
    assert common[("a", "b")] == pytest.approx(common[("b", "a")]) and common[("a", "b")] > 0


def test_jobs_on_disjoint_leaves_are_not_slowed():
    def job(name, servers):
        return {"name": name, "servers": len(servers), "placement": servers,
                "workload": {"model": {"preset": "llama-8b"}, "compute": {"gpu": "H100-SXM", "jitter_cv": 0},
                             "parallel": {"tp": 1, "zero": 1, "micro_batch": 1, "global_batch": 8 * len(servers)}}}
    scenario = Scenario.model_validate({"cluster": {"preset": "rocev2-400g-2tier", "servers": 16},
                                        "jobs": [job("x", [0, 1]), job("y", [4, 5])]})
    run = run_jobs(scenario, steps=1)
    assert all(not j.shares for j in run.jobs) and shared_link_rows(run) == []
    assert jobs_conclusion(run).sentences == ("No job is slowed by its co-tenants: none of them shares a network link "
                                              "with another.",)


def test_recorded_phases_tile_each_step(shared):
    for j in shared.jobs:
        seg = j.segments
        n = len(j.program.duration_s)
        # the program is the job's alone run of the run's steps, each step's segments in turn
        assert j.program.steps == shared.steps and j.program.ends_step[-1]
        assert len(seg) == n
        assert np.allclose(seg[1:, 1], seg[:-1, 2])  # back to back, no gap
        assert np.array_equal(seg[:, 0], np.arange(n))
        # a phase never runs faster than alone, and the steps' mean is the shared step time
        assert (seg[:, 2] - seg[:, 1] >= j.program.duration_s * (1 - 1e-9)).all()
        assert (seg[-1, 2] - seg[0, 1]) / shared.steps == pytest.approx(j.shared_step_s)


def test_perfetto_trace_has_a_process_per_job_and_nesting_slices(shared):
    trace = jobs_perfetto_trace(shared)
    events = trace["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert names == {1: "job a", 2: "job b"}
    slices = [e for e in events if e["ph"] == "X"]
    for pid in names:
        steps = [e for e in slices if e["pid"] == pid and e["tid"] == 0]
        assert [e["name"] for e in steps] == [f"step {k}" for k in range(shared.steps)]
        for tid in (0, 1, 2):
            mine = sorted((e["ts"], e["ts"] + e["dur"]) for e in slices if e["pid"] == pid and e["tid"] == tid)
            assert all(b0 <= a1 + 1e-3 for (_, b0), (a1, _) in zip(mine, mine[1:]))  # one lane: no overlap
    json.dumps(trace, allow_nan=False)


def test_run_with_jobs_writes_the_report(tmp_path, capsys):
    out = tmp_path / "rep"
    assert main(["run", str(EXAMPLE), "--steps", "1", "--report", str(out), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["report"] == [str(out / "report.html"), str(out / "trace-jobs.json")]
    assert data["conclusion"][0].split()[0] in ("a", "b")
    page = (out / "report.html").read_text()
    assert page.index('id="conclusion"') < page.index('id="jobs"') < page.index('id="links"')
    assert "leaf" in page and json.loads((out / "trace-jobs.json").read_text())["otherData"]["jobs"] == ["a", "b"]


def test_run_with_jobs_refuses_the_packet_engine(capsys):
    assert main(["run", str(EXAMPLE), "--engine", "packet"]) == 2
    assert capsys.readouterr().err.startswith("error: --engine: got 'packet'; a scenario with `jobs:` runs on the flow engine")
