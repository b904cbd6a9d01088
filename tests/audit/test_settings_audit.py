"""Every setting gpuwait accepts either changes the result or is refused (issue 20).

Walks ``gpuwait schema`` (every field of every scenario model) and the NCCL variables gpuwait accepts
(:data:`gpuwait.collectives.ncclenv.VARIABLES`), and fails on any without an entry in
``tests/audit/registry.py``. Then each entry is checked: an Effect moves its measured number in the
documented direction, a Refused call raises one line naming what is not modelled, a Covered test exists
and names the field.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from gpuwait.collectives.ncclenv import VARIABLES
from gpuwait.errors import GpuwaitError
from tests.audit.registry import REGISTRY, Covered, Effect, Gap, Label, Refused, Section

ROOT = Path(__file__).resolve().parents[2]


def schema_settings() -> list[str]:
    """``Model.field`` for every field ``gpuwait schema`` prints (``Scenario.`` for the top level)."""
    from typer.testing import CliRunner

    from gpuwait.cli.main import app

    result = CliRunner().invoke(app, ["schema"])
    assert result.exit_code == 0, result.output
    schema = json.loads(result.output)
    names = [f"Scenario.{f}" for f in schema["properties"]]
    for model, body in schema["$defs"].items():
        props = body.get("properties", {})
        names += [f"{model}.{f}" for f in props] if props else [model]
    return names


def env_settings() -> list[str]:
    return [f"env:{name}" for name in VARIABLES]


def test_every_setting_has_an_effect_test_or_a_refusal():
    missing = sorted(set(schema_settings() + env_settings()) - set(REGISTRY))
    assert missing == [], f"settings with no effect test or refusal in tests/audit/registry.py: {missing}"


def test_the_registry_names_only_real_settings():
    stale = sorted(set(REGISTRY) - set(schema_settings() + env_settings()) - {"env:UNKNOWN"})
    assert stale == []


def _entries(kind):
    return [pytest.param(name, entry, id=name) for name, entry in REGISTRY.items() if isinstance(entry, kind)]


_MEASURED: dict[tuple, float] = {}


def _measure(entry: Effect, kwargs: dict) -> float:
    """One measurement, shared by the entries that measure the same input (most share their base case:
    every measure is deterministic, so this only saves the repeated runs)."""
    key = (entry.measure, json.dumps(kwargs, sort_keys=True, default=repr))
    if key not in _MEASURED:
        _MEASURED[key] = entry.measure(**kwargs)
    return _MEASURED[key]


@pytest.mark.parametrize("name, entry", _entries(Effect))
def test_changing_a_setting_moves_the_result_in_its_direction(name, entry):
    a, b = _measure(entry, entry.a), _measure(entry, entry.b)
    if entry.direction == "up":
        assert b > a * (1 + 1e-9), f"{name}: {a} -> {b}, expected up ({entry.why})"
    elif entry.direction == "down":
        assert b < a * (1 - 1e-9), f"{name}: {a} -> {b}, expected down ({entry.why})"
    else:
        assert b != pytest.approx(a, rel=1e-9), f"{name}: {a} -> {b}, expected a change"


@pytest.mark.parametrize("name, entry", _entries(Refused))
def test_a_value_gpuwait_does_not_model_is_refused_in_one_line(name, entry):
    with pytest.raises(GpuwaitError) as err:
        entry.call()
    assert entry.message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("name, entry", _entries(Covered))
def test_a_covering_test_exists_and_names_the_setting(name, entry):
    path, _, function = entry.test.partition("::")
    source = (ROOT / path).read_text()
    bodies = {n.name: ast.get_source_segment(source, n) for n in ast.walk(ast.parse(source))
              if isinstance(n, ast.FunctionDef)}
    assert function in bodies, f"{entry.test} does not exist"
    setting = name.split(".")[-1].split(":")[-1]
    module_text = source if setting in source else ""
    assert re.search(rf"\b{re.escape(setting)}\b", bodies[function] + module_text), \
        f"{entry.test} never names {setting}"


@pytest.mark.parametrize("name, entry", _entries(Label) + _entries(Section))
def test_labels_and_sections_say_why(name, entry):
    assert entry.why.strip()


@pytest.mark.parametrize("name, entry", _entries(Gap))
def test_known_gaps_stay_visible(name, entry):
    # a setting whose effect the audit could not yet show: listed, never silent
    pytest.xfail(f"{name}: {entry.why}")
