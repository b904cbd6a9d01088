"""The diagnosis accuracy suite (gpuwait.diagnosis.accuracy): faults of every kind injected on four
fabrics and two workloads, plus the healthy fabrics' own ECMP collisions and oversubscription.
Targets: the top finding's kind right in >= 95 % of cases, its component in >= 90 %, and healthy
runs with nothing above `info` (issue 5). docs/diagnosis.md prints the confusion table."""

from __future__ import annotations

import pytest

from gpuwait.diagnosis.accuracy import CASES, FABRICS, WORKLOADS, run_case
from gpuwait.faults import FAULT_KINDS


@pytest.fixture(scope="module", params=[0, 1], ids=["seed0", "seed1"])
def outcomes(request):
    return [run_case(case, seed=request.param, measure_gain=True) for case in CASES]


def test_the_suite_covers_every_kind_on_several_fabrics():
    injected = {c.inject.split(":")[0] for c in CASES if c.inject}
    assert injected == set(FAULT_KINDS)
    assert len([c for c in CASES if c.inject]) >= 30
    assert len({c.fabric for c in CASES}) >= 3 and len({c.workload for c in CASES}) == len(WORKLOADS) >= 2
    assert len(FABRICS) >= 3


def test_top_finding_kind_and_component(outcomes):
    judged = [o for o in outcomes if o.case.expect_kind is not None]
    kind_rate = sum(o.kind_ok for o in judged) / len(judged)
    component_rate = sum(o.component_ok for o in judged) / len(judged)
    wrong = [(o.injected, o.top_kind, o.top_component) for o in judged if not o.component_ok]
    assert kind_rate >= 0.95, wrong
    assert component_rate >= 0.90, wrong


def test_healthy_runs_have_nothing_above_info(outcomes):
    healthy = [o for o in outcomes if o.case.expect_kind is None]
    assert healthy and all(o.kind_ok for o in healthy), [(o.case, o.top_kind, o.top_severity) for o in healthy]
