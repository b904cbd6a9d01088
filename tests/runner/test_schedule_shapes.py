"""Solo runs reused across placements of one shape (runner.schedule.shape_key / relabel_links).

The rule: on a Clos whose leaves are alike, under routing that does not depend on which servers a
flow joins (per-packet spraying, load-adaptive), a job's step alone depends only on how many of its
servers sit under each leaf in rank order and which leaves share a pod; its per-link loads are the
same loads moved with the servers. Checked here by running the second placement for real and
comparing with the reused result. Under ECMP (each flow's 5-tuple hashed: Hopps, RFC 2992) two
placements of one shape collide differently, so no reuse."""

from __future__ import annotations

import numpy as np
import pytest

from gpuwait.runner.schedule import _Cluster, shape_key
from gpuwait.spec import Scenario
from gpuwait.workload.traces import trace_workload


def _cluster(kind: str, tiers: int = 2) -> tuple[_Cluster, object]:
    fabric = {"oversubscription": 2} if tiers == 2 else {"tiers": 3, "switch_radix": 16}
    job = {"name": "x", "gpus": 32, "workload": trace_workload(32)}
    scenario = Scenario.model_validate({"cluster": {"preset": "rocev2-400g-2tier", "servers": 64 if tiers == 2 else 32,
                                                    "fabric": fabric, "routing": {"kind": kind}}, "jobs": [job]})
    return _Cluster(scenario), scenario.jobs[0]


@pytest.mark.parametrize("kind,tiers", [("spray", 2), ("adaptive", 2), ("spray", 3)])
def test_a_placement_of_the_same_shape_reuses_the_solo_run_exactly(kind, tiers):
    reuse, spec = _cluster(kind, tiers)
    fresh, _ = _cluster(kind, tiers)
    first, second = (np.array([0, 1, 4, 8]), np.array([20, 21, 12, 28])) if tiers == 2 else \
        (np.array([0, 2, 4, 6]), np.array([7, 1, 3, 5]))
    assert shape_key(reuse.tree, first) == shape_key(reuse.tree, second)
    reuse.alone(spec, first, 32)
    program, link_bytes = reuse.alone(spec, second, 32)
    assert reuse.shape_hits == 1
    want_program, want_bytes = fresh.alone(spec, second, 32)
    assert program.step_s == pytest.approx(want_program.step_s, rel=1e-12)
    np.testing.assert_allclose(program.peak_Bps, want_program.peak_Bps, rtol=1e-9, atol=1e-3)
    np.testing.assert_allclose(link_bytes, want_bytes, rtol=1e-9, atol=1e-3)


def test_shapes_differ_by_per_leaf_counts_and_ecmp_never_reuses():
    cl, spec = _cluster("ecmp")
    tree = cl.tree
    assert shape_key(tree, np.array([0, 1, 4, 8])) != shape_key(tree, np.array([0, 4, 8, 12]))
    assert not cl.shape_symmetric
    cl.alone(spec, np.array([0, 4, 8, 12]), 32)
    cl.alone(spec, np.array([16, 20, 24, 28]), 32)
    assert cl.shape_hits == 0
