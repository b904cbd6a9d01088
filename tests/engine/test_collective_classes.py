"""Collectives solved per leaf-pair class equal the per-flow solve.

Spraying and adaptive routing split every flow over the equal-cost paths between its two leaves;
the aggregated run stores that split once per (leaf pair, demand) class and solves per class
(:class:`~gpuwait.engine.flow.SharedWeights`). The per-flow reference walks and solves every
row (``paths._LEAF_PAIR_CLASSES = False``). Done when (issue 16): busbw within 1 % — here to
rounding — and per-link bytes equal, on 2- and 3-tier fabrics, for all_reduce and alltoall;
ECMP has no classes and must be untouched.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import gpuwait.routing.paths as paths
from gpuwait.collectives.algorithms import compile_collective
from gpuwait.collectives.communicator import Communicator
from gpuwait.engine.base import effective_capacity_Bps
from gpuwait.fabric.collective import run_plan
from gpuwait.spec import ClusterSpec, RoutingSpec
from gpuwait.topology import build_preset, build_topology
from gpuwait.transport import TRANSPORTS


def _run(topo, plan, kind, classes):
    saved = paths._LEAF_PAIR_CLASSES
    paths._LEAF_PAIR_CLASSES = classes
    try:
        transport = TRANSPORTS["infiniband"]
        return run_plan(topo, plan, RoutingSpec(kind=kind), transport, effective_capacity_Bps(topo, transport))
    finally:
        paths._LEAF_PAIR_CLASSES = saved


def _topo(fabric):
    if fabric == "superpod-2tier":
        return build_preset("dgx-h100-superpod", servers=8)
    return build_topology(ClusterSpec(servers=32, server={"template": "dgx-h100"},
                                      fabric={"kind": "clos", "tiers": 3, "switch_radix": 16, "rail_optimized": False}))


@pytest.mark.parametrize("kind", ["spray", "adaptive", "ecmp"])
@pytest.mark.parametrize(("collective", "algorithm"), [("all_reduce", "ring"), ("all_reduce", "tree"),
                                                        ("alltoall", "direct")])
@pytest.mark.parametrize("fabric", ["superpod-2tier", "clos-3tier"])
def test_class_solve_equals_per_flow_solve(kind, collective, algorithm, fabric):
    topo = _topo(fabric)
    plan = compile_collective(Communicator.world(topo), collective, 2**30, algorithm, n_channels=4)
    # every flow listed, so rows compare one by one (the all-to-all's groups: tests/fabric/test_alltoall_groups.py)
    plan = replace(plan, phases=tuple(p.expanded() for p in plan.phases))
    per_flow = _run(topo, plan, kind, classes=False)
    by_class = _run(topo, plan, kind, classes=True)
    assert by_class.bandwidth_time_s == pytest.approx(per_flow.bandwidth_time_s, rel=1e-9)
    for a, b in zip(per_flow.phases, by_class.phases, strict=True):
        assert (a.routes.class_weights is None) and ((b.routes.class_weights is None) == (kind == "ecmp"))
        link_bytes_a, link_bytes_b = a.link_load_Bps() * a.time_s, b.link_load_Bps() * b.time_s
        np.testing.assert_allclose(link_bytes_b, link_bytes_a, rtol=1e-9, atol=1e-6 * link_bytes_a.max())
        assert (b.routes.link_weights != a.routes.link_weights).nnz == 0 or kind == "adaptive"
