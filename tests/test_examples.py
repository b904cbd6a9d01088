"""Every example scenario runs, and its results match the stored expected output.

Expected output lives in tests/golden/<example>.json. Refresh it only on purpose:

    GPUWAIT_UPDATE_GOLDEN=1 python -m pytest tests/test_examples.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gpuwait.cli.output import _plain
from gpuwait.report.flows import run_summary
from gpuwait.runner.traffic import run_traffic
from gpuwait.runner.workload import run_workload
from gpuwait.spec import Scenario, load_model

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
GOLDEN = Path(__file__).resolve().parent / "golden"


def _workload_digest(scenario: Scenario) -> dict:
    cases = []
    for result in run_workload(scenario):
        b = result.breakdown
        cases.append({"case": result.case, "workload": result.workload, "step_times_s": result.step_times_s,
                      "breakdown_s": b.job_mean_s(), "exposed_comm_s": b.exposed_comm_s,
                      "ideal_step_time_s": b.ideal_step_time_s, "mfu": b.mfu, "notes": list(result.notes),
                      "collectives": [{"label": c.label, "time_s": c.time_s, "algorithm": c.algorithm,
                                       "protocol": c.protocol} for c in result.collectives],
                      "hottest_links": [result.links.name[i] for i in result.links.hottest(5)]})
    return _plain({"scenario": scenario.name, "cases": cases})


def _digest(scenario: Scenario) -> dict:
    if scenario.jobs:
        from gpuwait.cli.place import jobs_dict
        from gpuwait.runner.jobs import run_jobs

        return _plain(jobs_dict(run_jobs(scenario)))
    if scenario.workload is not None:
        return _workload_digest(scenario)
    runs = run_traffic(scenario)
    out = []
    for run in runs:
        summary = run_summary(run)
        summary.pop("routing")
        out.append({"summary": summary, "flow_finish_s": run.flow_finish_s.tolist()})
    return _plain({"scenario": scenario.name, "runs": out})


def _close(got, want, path="") -> None:
    if isinstance(want, dict):
        assert set(got) == set(want), path
        for key in want:
            _close(got[key], want[key], f"{path}.{key}")
    elif isinstance(want, list):
        assert len(got) == len(want), path
        for i, (g, w) in enumerate(zip(got, want)):
            _close(g, w, f"{path}[{i}]")
    elif isinstance(want, float):
        assert got == pytest.approx(want, rel=1e-9, abs=1e-15), path
    else:
        assert got == want, path


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_example_matches_golden(example: Path):
    digest = _digest(load_model(Scenario, example))
    golden = GOLDEN / f"{example.stem}.json"
    if os.environ.get("GPUWAIT_UPDATE_GOLDEN") == "1":
        golden.write_text(json.dumps(digest, indent=1) + "\n")
    assert golden.exists(), f"no expected output for {example.name}: run with GPUWAIT_UPDATE_GOLDEN=1 once"
    _close(digest, json.loads(golden.read_text()))


def test_embedded_demo_is_the_demo_example():
    from importlib import resources

    embedded = resources.files("gpuwait.data").joinpath("demo-training.yaml").read_text()
    assert embedded == (ROOT / "examples" / "demo-llama-70b.yaml").read_text()
