"""`gpuwait validate` on a sweep file: expanded as `gpuwait sweep run` expands it, every case's scenario
checked. Before, a sweep file was read as a scenario and refused for its four top-level keys (`base`,
`steps`, `axes`, `exclude`: "no such field"), so a user could not check one before running it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuwait.cli.main import main

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sweeps" / "ib-vs-roce.yaml"

SWEEP = """
name: pp-sweep
base:
  cluster: {preset: rocev2-400g-2tier, servers: 4}
  workload:
    model: {preset: llama-8b, seq_len: 2048}
    parallel: {tp: 8, micro_batch: 1, global_batch: 32}
axes:
  - {path: workload.parallel.pp, values: [1, 2, PP], name: pp}
"""


def _validate(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["validate", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_example_sweep_validates_case_by_case(capsys):
    code, out, _ = _validate(capsys, str(EXAMPLE), "--json")
    doc = json.loads(out)
    assert code == 0 and doc["valid"] and doc["cases"] == 32 and doc["refused"] == []
    assert doc["axes"] == ["transport", "routing", "qps", "oversubscription"]


@pytest.mark.parametrize("bad", ["0", "true"])
def test_a_refused_case_is_named_with_its_axis_values(tmp_path, capsys, bad):
    path = tmp_path / "sweep.yaml"
    path.write_text(SWEEP.replace("PP", bad))
    code, _, err = _validate(capsys, str(path))
    assert code != 0  # as a refused scenario: the one error path's code in text, 1 with --json
    assert "1 of 3 cases refused" in err and "{'pp': " in err and "workload.parallel.pp" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 2
    code, out, _ = _validate(capsys, str(path), "--json")
    doc = json.loads(out)
    assert code == 1 and not doc["valid"] and len(doc["refused"]) == 1


def test_a_malformed_sweep_is_one_error_naming_the_field(tmp_path, capsys):
    path = tmp_path / "sweep.yaml"
    path.write_text(SWEEP.replace("values: [1, 2, PP]", "valuez: [1, 2]"))
    code, _, err = _validate(capsys, str(path))
    assert code != 0 and "axes" in err and "Traceback" not in err
