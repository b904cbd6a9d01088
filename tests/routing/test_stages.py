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
import scipy.sparse as sp

import gpuwait.routing.paths as paths
import gpuwait.routing.stages as stages
from gpuwait.routing import route_flows
from gpuwait.routing.routers import Hop, get_router
from gpuwait.routing.stages import NotStaged, _column_sums, _linear
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


def _column_sums_reference(f1, of_up, up_demand):
    return f1[of_up].T @ up_demand  # every (group, destination class) pair's row built, summed by scipy


@pytest.mark.parametrize("shared_columns", [False, True])
def test_column_sums_equal_scipy_bit_for_bit(shared_columns):
    """The stage-2 load from the distinct pairs' rows equals scipy's sum over every pair's row, bit for
    bit: demands of many magnitudes, so another order of summation would show in the last bits."""
    rng = np.random.default_rng(5)
    n_rows, n_cols = 6, 40
    rows, cols = [], []
    for r in range(n_rows):
        own = rng.choice(n_cols, 12, replace=False) if shared_columns else np.arange(r * 6, r * 6 + 6)
        rows.append(np.full(len(own), r))
        cols.append(np.sort(own))
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    values = rng.choice([1 / 3, 1 / 7, 0.1], len(rows))  # repeated values, as a fabric's even splits
    f1 = sp.csr_matrix((values, (rows, cols)), shape=(n_rows, n_cols))
    of_up = rng.integers(0, n_rows, 500)
    up_demand = rng.lognormal(20.0, 3.0, len(of_up))
    got = _column_sums(f1, of_up, up_demand)
    assert np.array_equal(got, _column_sums_reference(f1, of_up, up_demand))
    assert _column_sums(sp.csr_matrix((1, 0)), np.zeros(3, np.int64), np.ones(3)).shape == (0,)


@pytest.mark.parametrize("kind", ["spray", "adaptive"])
@pytest.mark.parametrize("fabric", ["clos-3tier", "clos-3tier-degraded"])
def test_distinct_pairs_give_the_routes_of_every_pair_bit_for_bit(kind, fabric, monkeypatch):
    """Stage 2 on from one row per distinct (stopped states, destination class) gives what every
    (group, destination class) pair's own row gave (the stages before the sharing): the same routes
    bit for bit, with the adaptive rounds' loads and a degraded link that makes the splits uneven."""
    topo = _three_tier()
    if fabric.endswith("degraded"):
        topo = _degraded(topo)
    src, dst = _all_to_all(topo)
    shared = _routes(topo, kind, src, dst, True)

    def every_pair(stops, plan):
        n_up = len(plan.group_of_up)
        return stages._Distinct(np.arange(n_up), np.arange(n_up))

    seen = []
    monkeypatch.setattr(stages, "_distinct_ups", lambda stops, plan: seen.append(1) or every_pair(stops, plan))
    monkeypatch.setattr(stages, "_column_sums", _column_sums_reference)
    each = _routes(topo, kind, src, dst, True)
    assert seen  # the stages ran
    for a, b in ((shared.link_weights, each.link_weights), (shared.class_weights, each.class_weights)):
        assert a.shape == b.shape and np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices)
        assert np.array_equal(a.data, b.data)
    assert np.array_equal(shared.path_latency_s, each.path_latency_s)
    assert np.array_equal(shared.row_class, each.row_class)


@pytest.mark.parametrize("collide", [False, True])
def test_row_ids_number_equal_rows_alike(collide, monkeypatch):
    """The next-hop signatures' row ids: equal ids exactly where the rows are equal, as np.unique's inverse,
    also where two different rows hash alike (every multiplier 0: every row one hash)."""
    if collide:
        monkeypatch.setattr(stages, "_ROW_HASH", np.zeros(4096, np.uint64))
    rng = np.random.default_rng(7)
    table = rng.integers(-1, 3, (400, 5))
    table[200:] = table[rng.integers(0, 200, 200)]  # repeated rows
    ids = stages._row_ids(table)
    reference = np.unique(table, axis=0, return_inverse=True)[1].ravel()
    assert np.array_equal(ids[:, None] == ids[None, :], reference[:, None] == reference[None, :])
