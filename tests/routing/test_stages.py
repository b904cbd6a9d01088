"""Splitting routers' leaf-pair classes routed by stages (gpuwait.routing.stages) equal one walk per class.

The reference is the walk of one representative per (source leaf, destination leaf, demand) class
(``paths._LEAF_PAIR_STAGES = False``), itself tested against walking every row
(tests/routing/test_leaf_pairs.py). The stages must give the same links with the same fractions,
to rounding (fractions are summed in another order), on 2- and 3-tier fabrics, for all-to-all,
permutations and rings, with spraying and adaptive routing, and with a degraded link that makes
the adaptive split load-dependent. Where a stage after the shared one would split by load the
stages refuse (NotStaged) and the per-class walk runs.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import gpuwait.routing.paths as paths
from gpuwait.routing import route_flows
from gpuwait.routing.routers import Hop, get_router
from gpuwait.routing.stages import NotStaged, _linear
from gpuwait.spec import RoutingSpec
from gpuwait.topology import build_preset
from tests.routing.patterns import all_to_all, permutation, ring, three_tier


def _routes(topo, kind, src, dst, staged):
    saved = paths._LEAF_PAIR_STAGES, paths._STAGES_MIN_CLASSES
    paths._LEAF_PAIR_STAGES, paths._STAGES_MIN_CLASSES = staged, 0  # stages however few the classes
    try:
        return route_flows(topo, RoutingSpec(kind=kind), src, dst, transport="infiniband")
    finally:
        paths._LEAF_PAIR_STAGES, paths._STAGES_MIN_CLASSES = saved


_three_tier, _all_to_all, _ring = three_tier, all_to_all, ring


def _permutation(topo):
    return permutation(topo, seed=3)


def _degraded(topo):
    """One spine -> core link at a quarter of its capacity: the adaptive split is no longer even."""
    capacity = topo.link_capacity_Bps.copy()
    up = np.flatnonzero(topo.fabric_links & (topo.node_tier[topo.link_dst] > topo.node_tier[topo.link_src])
                        & (topo.node_tier[topo.link_src] > 1))
    capacity[up[len(up) // 3]] *= 0.25
    return dataclasses.replace(topo, link_capacity_Bps=capacity)


def _assert_same(staged, reference):
    a, b = reference.link_weights, staged.link_weights
    assert a.shape == b.shape
    diff = abs(a - b)
    assert diff.max() <= 1e-12 * max(1.0, abs(a).max())
    np.testing.assert_allclose(staged.path_latency_s, reference.path_latency_s, rtol=1e-12)
    size = np.linspace(1.0, 2.0, int(reference.flow_index.max()) + 1)
    np.testing.assert_allclose(staged.bytes_per_link(size), reference.bytes_per_link(size), rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("kind", ["spray", "adaptive"])
@pytest.mark.parametrize("pattern", [_all_to_all, _permutation, _ring])
@pytest.mark.parametrize("fabric", ["superpod-2tier", "clos-3tier", "clos-3tier-degraded"])
def test_stages_route_like_one_walk_per_class(kind, pattern, fabric):
    topo = build_preset("dgx-h100-superpod", servers=8) if fabric == "superpod-2tier" else _three_tier()
    if fabric.endswith("degraded"):
        topo = _degraded(topo)
    src, dst = pattern(topo)
    staged, reference = _routes(topo, kind, src, dst, True), _routes(topo, kind, src, dst, False)
    _assert_same(staged, reference)
    if fabric.startswith("clos") and pattern is _all_to_all:  # the stages ran (no fallback): fewer middle parts
        assert staged.class_weights.shape[0] < reference.class_weights.shape[0]


def test_middle_parts_are_kept_per_source_leaf_and_destination_pod():
    """3-tier, 32 servers of 8 GPUs, radix 16: 32 leaves in 4 pods. One walk per leaf pair keeps
    992 middle parts; the stages keep one per (source leaf, destination pod): 32 x 4."""
    topo = _three_tier()
    src, dst = _all_to_all(topo)
    staged, per_class = _routes(topo, "spray", src, dst, True), _routes(topo, "spray", src, dst, False)
    assert per_class.class_weights.shape[0] == 32 * 31
    assert staged.class_weights.shape[0] == 32 * 4
    # the leaf-specific last stage (a spine's link down to the leaf) joins the rows' own links: 8 spines
    fabric_own = staged.own_weights[:, np.flatnonzero(topo.fabric_links)]
    assert np.diff(fabric_own.indptr).max() <= 8


def test_a_load_dependent_split_after_the_shared_stage_is_refused():
    """Adaptive routing with several next hops in a later stage would split by the arriving fraction:
    the stages' router refuses it (the per-class walk runs instead); spraying splits alike at any fraction."""
    adaptive = _linear(get_router("adaptive"))
    hop = Hop(topo=None, spec=None, row=np.zeros(1, np.int64), node=np.zeros(1, np.int64), frac=np.ones(1),
              stride=np.ones(1, np.int64), first=np.zeros(1, np.int64), count=np.array([2]),
              links=np.array([0, 1]), link_set=np.zeros(2, np.int64), set_node=np.zeros(1, np.int64),
              state_set=np.zeros(1, np.int64), key_bytes=np.zeros((1, 0), np.uint8), qp=np.zeros(1, np.int64),
              dest_index=np.zeros(1, np.int64), demand_Bps=np.ones(1), background_Bps=None)
    with pytest.raises(NotStaged):
        adaptive.choose(hop)
    assert _linear(get_router("spray")) is get_router("spray")
