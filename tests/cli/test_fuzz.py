"""Fuzzing in the suite: hypothesis mutates the example scenarios, command lines, telemetry files,
sweep files, cluster inventories and multi-job inputs (the generators of bench/fuzz.py) and every
case, run in a forked child under a memory limit and a timeout, must end in a one-line error or a
valid run: no traceback, no hang, no memory blow-up, no invalid input accepted. bench/fuzz.py runs the same cases by the thousand (docs/reliability.md)."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

_spec = importlib.util.spec_from_file_location("gpuwait_fuzz", Path(__file__).parents[2] / "bench" / "fuzz.py")
fuzz = importlib.util.module_from_spec(_spec)
sys.modules["gpuwait_fuzz"] = fuzz
_spec.loader.exec_module(fuzz)

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="forks under RLIMIT_AS (Linux)")

EXAMPLES = {p.name: p.read_bytes() for p in sorted(fuzz.EXAMPLES.glob("*.yaml"))}
TELEMETRY = {p.name: p.read_bytes() for p in sorted(fuzz.TELEMETRY_DATA.iterdir())}
LOGS = {p.name: p.read_bytes() for p in sorted(fuzz.NCCL_LOGS.glob("*.log"))}
INVENTORY = {p.relative_to(fuzz.INVENTORY_DATA).as_posix(): p.read_bytes()
             for p in sorted(fuzz.INVENTORY_DATA.rglob("*")) if p.is_file()}
TRACES = {p.relative_to(fuzz.TRACES).as_posix(): p.read_bytes() for p in sorted(fuzz.TRACES.rglob("*.csv"))}
JOBS = (fuzz.EXAMPLES / "two-jobs-shared-uplinks.yaml").read_bytes()


@st.composite
def cases(draw):
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    group = draw(st.sampled_from(["scenario", "scenario", "cli", "telemetry", "sweep", "inventory", "jobs"]))
    if group == "scenario":
        case = fuzz.scenario_case(rng, EXAMPLES)
        if case.argv[0] == "run" or case.argv[0] == "telemetry":  # keep the suite fast: validate only
            case.argv = ["validate", "s.yaml"]
        return case
    if group == "cli":
        return fuzz.cli_case(rng)
    if group == "sweep":
        return fuzz.sweep_case(rng)
    if group == "inventory":
        return fuzz.inventory_case(rng, INVENTORY)
    if group == "jobs":
        return fuzz.jobs_case(rng, JOBS, TRACES)
    return fuzz.telemetry_case(rng, TELEMETRY, LOGS)


@settings(max_examples=20, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cases())
def test_mutated_inputs_end_in_one_line(case):
    outcome = fuzz.run_case(case, timeout_s=20.0, extra_mem_bytes=2 << 30)
    assert outcome.kind == "ok", f"{outcome.kind}: {case.label} ({' '.join(a[:40] for a in case.argv)}): " \
                                 f"{outcome.stderr.strip()[-400:]}"


def test_a_case_past_the_timeout_is_a_hang(monkeypatch):
    """A child still running at the timeout was killed and counted `ok`: the last WNOHANG poll's status 0
    read as a clean exit, so the table showed no hang where cases had run 20 s."""
    import time

    monkeypatch.setattr(fuzz, "_child", lambda case, workdir, mem: time.sleep(5))
    outcome = fuzz.run_case(fuzz.Case("cli", "sleeps", ["validate", "s.yaml"]), timeout_s=0.3)
    assert outcome.kind == "hang" and outcome.seconds < 2
