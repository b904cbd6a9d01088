"""Issue 14's diagnosis bugs, one test each (the rules' thresholds are tested in test_rules.py)."""

from __future__ import annotations

import numpy as np

from gpuwait.diagnosis.accuracy import CASES, scenario_for
from gpuwait.diagnosis.run import diagnose_scenario
from gpuwait.faults import parse_inject
from gpuwait.runner.workload import simulate_workload
from gpuwait.topology.model import LinkKind


def _roce_dp():
    return scenario_for(next(c for c in CASES if c.fabric == "roce-ecmp" and c.workload == "dp-8b"))


def test_a_lossy_link_the_job_does_not_use_is_not_named_link_degrade():
    """Losses cost goodput, not negotiated rate: a lossy cable no flow crosses shows no symbol errors
    (nothing crossed it) and its port still reports the full rate, so nothing names it degraded."""
    scenario = _roce_dp()
    healthy = simulate_workload(scenario)
    topo, used = healthy.topo, healthy.results[0].links.bytes_per_step
    idle = np.flatnonzero((used == 0) & (topo.link_kind == LinkKind.FABRIC))
    assert len(idle)
    name = topo.link_name(int(idle[0]))
    diagnosis = diagnose_scenario(scenario, [parse_inject(f"link-loss:{name}:loss_rate=0.01")], max_fixes=2)
    assert not [f for f in diagnosis.findings if f.kind == "link-degrade"]
    assert all(f.severity == "info" for f in diagnosis.findings if f.component == name)
