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
from gpuwait.engine.scenario import run_scenario_traffic
from gpuwait.report.flows import run_summary
from gpuwait.spec import Scenario, load_model

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
GOLDEN = Path(__file__).resolve().parent / "golden"


def _digest(scenario: Scenario) -> dict:
    runs = run_scenario_traffic(scenario)
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


def test_embedded_demo_is_the_ecmp_example():
    from importlib import resources

    embedded = resources.files("gpuwait.data").joinpath("demo-ecmp.yaml").read_text()
    assert embedded == (ROOT / "examples" / "ecmp-collision.yaml").read_text()
