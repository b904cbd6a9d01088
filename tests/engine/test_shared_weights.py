"""Max-min solves with weights shared by classes of flows equal the solve on the expanded matrix.

A class's middle part (a sprayed or adaptively split route between two leaves) is stored once
and every flow of the class points at it, scaled by the flow's multiplicity. The reference is
the same flows with every class row copied into its flows' rows, multiplied out: the weighted
max-min fair allocation is unique, so the two solves agree to rounding, including with rate caps,
multiplicities and links shared between the own and the class parts.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from gpuwait.engine.flow import SharedWeights, max_min_rates
from gpuwait.errors import SimulationError


def _expanded(own: sp.csr_matrix, shared: SharedWeights) -> sp.csr_matrix:
    has = np.flatnonzero(shared.row_class >= 0)
    rows = shared.class_weights[shared.row_class[has]].tocoo()
    middle = sp.csr_matrix((rows.data * shared.row_scale[has][rows.row], (has[rows.row], rows.col)), shape=own.shape)
    return (own + middle).tocsr()


def _random_case(seed: int):
    rng = np.random.default_rng(seed)
    n_links, n_flows, n_classes = int(rng.integers(3, 20)), int(rng.integers(1, 40)), int(rng.integers(1, 6))
    own = sp.random(n_flows, n_links, density=0.15, random_state=seed, format="csr")
    own.data = rng.choice([1.0, 0.5, 2.0], size=own.nnz)
    classes = sp.random(n_classes, n_links, density=0.3, random_state=seed + 1, format="csr")
    classes.data = rng.choice([1.0, 0.25, 0.125, 0.5], size=classes.nnz)
    row_class = rng.integers(-1, n_classes, size=n_flows)
    scale = rng.choice([1.0, 2.0, 7.0], size=n_flows)
    scaled_own = own.copy()
    scaled_own.data *= np.repeat(scale, np.diff(own.indptr))
    shared = SharedWeights(row_class, scale, classes)
    capacity_Bps = rng.choice([10.0, 25.0, 50.0, 100.0], size=n_links)
    cap_Bps = np.where(rng.random(n_flows) < 0.2, rng.uniform(1.0, 20.0, n_flows), np.inf)
    # a flow with no link anywhere needs a finite cap
    crosses = (np.diff(_expanded(scaled_own, shared).indptr) > 0)
    cap_Bps = np.where(crosses, cap_Bps, 5.0)
    return scaled_own, shared, capacity_Bps, cap_Bps


@pytest.mark.parametrize("seed", range(60))
def test_shared_solve_equals_expanded_solve(seed):
    own, shared, capacity_Bps, cap_Bps = _random_case(seed)
    rate_Bps, bottleneck = max_min_rates(own, capacity_Bps, cap_Bps, shared=shared)
    ref_rate_Bps, ref_bottleneck = max_min_rates(_expanded(own, shared), capacity_Bps, cap_Bps)
    np.testing.assert_allclose(rate_Bps, ref_rate_Bps, rtol=1e-9)
    assert (bottleneck == ref_bottleneck).all()


def test_a_class_of_four_flows_shares_a_sprayed_middle():
    """Four flows, each on its own 10 B/s uplink, sprayed over two 8 B/s spine links: 4 each."""
    own = sp.csr_matrix((np.ones(4), (np.arange(4), np.arange(4))), shape=(4, 6))
    middle = sp.csr_matrix(np.array([[0, 0, 0, 0, 0.5, 0.5]]))
    shared = SharedWeights(np.zeros(4, np.int64), np.ones(4), middle)
    rate_Bps, bottleneck = max_min_rates(own, np.array([10.0] * 4 + [8.0, 8.0]), shared=shared)
    assert rate_Bps.tolist() == [4.0] * 4
    assert bottleneck.tolist() == [4] * 4


def test_bad_shared_shapes_name_the_field():
    with pytest.raises(SimulationError, match="shared"):
        max_min_rates(sp.csr_matrix((2, 3)), np.ones(3), shared=SharedWeights(np.zeros(3, np.int64), np.ones(3),
                                                                               sp.csr_matrix((1, 3))))


@pytest.mark.parametrize("seed", range(40))
def test_several_shared_parts_equal_the_expanded_solve(seed):
    """A flow in one class of each of several parts (an all-to-all group: its leaves' split, its
    sources' and its destinations' averaged sides), each part with its own scale per flow."""
    own, first, capacity_Bps, cap_Bps = _random_case(seed)
    rng = np.random.default_rng(seed + 1000)
    n_flows, n_links = own.shape
    parts = [first]
    for k in range(int(rng.integers(1, 3))):
        classes = sp.random(int(rng.integers(1, 5)), n_links, density=0.3, random_state=seed + 7 + k, format="csr")
        classes.data = rng.choice([1.0, 0.25, 0.5], size=classes.nnz)
        parts.append(SharedWeights(rng.integers(-1, classes.shape[0], size=n_flows),
                                   rng.choice([1.0, 3.0, 0.5], size=n_flows), classes))
    expanded = own
    for part in parts:
        expanded = _expanded(expanded, part)
    cap_Bps = np.where(np.diff(expanded.indptr) > 0, cap_Bps, 5.0)
    rate_Bps, bottleneck = max_min_rates(own, capacity_Bps, cap_Bps, shared=parts)
    ref_rate_Bps, ref_bottleneck = max_min_rates(expanded, capacity_Bps, cap_Bps)
    np.testing.assert_allclose(rate_Bps, ref_rate_Bps, rtol=1e-9)
    assert (bottleneck == ref_bottleneck).all()


@pytest.mark.parametrize("seed", range(40))
def test_a_flow_in_several_classes_of_one_part_equals_the_expanded_solve(seed):
    """A part whose flows cross several of its classes, each with its own scale (an all-to-all
    group's last hops: one class per switch above the pod, scaled by the fraction reaching it),
    beside a part of one class per flow."""
    own, first, capacity_Bps, cap_Bps = _random_case(seed)
    rng = np.random.default_rng(seed + 2000)
    n_flows, n_links = own.shape
    classes = sp.random(int(rng.integers(1, 6)), n_links, density=0.3, random_state=seed + 11, format="csr")
    classes.data = rng.choice([1.0, 0.25, 0.5], size=classes.nnz)
    members = sp.random(n_flows, classes.shape[0], density=0.5, random_state=seed + 13, format="csr")
    members.data = rng.choice([1.0, 0.5, 0.125, 3.0], size=members.nnz)
    part = SharedWeights.of_members(members, classes)
    expanded = (_expanded(own, first) + members @ classes).tocsr()
    cap_Bps = np.where(np.diff(expanded.indptr) > 0, cap_Bps, 5.0)
    rate_Bps, bottleneck = max_min_rates(own, capacity_Bps, cap_Bps, shared=[first, part])
    ref_rate_Bps, ref_bottleneck = max_min_rates(expanded, capacity_Bps, cap_Bps)
    np.testing.assert_allclose(rate_Bps, ref_rate_Bps, rtol=1e-9)
    assert (bottleneck == ref_bottleneck).all()
    alone, _ = max_min_rates(own, capacity_Bps, np.where(np.diff((own + members @ classes).tocsr().indptr) > 0,
                                                           cap_Bps, 5.0), shared=part)
    assert np.isfinite(alone).all()


def test_bad_members_shape_names_the_field():
    with pytest.raises(SimulationError, match="members"):
        max_min_rates(sp.csr_matrix((2, 3)), np.ones(3),
                      shared=SharedWeights.of_members(sp.csr_matrix((2, 4)), sp.csr_matrix((1, 3))))


def test_the_event_engine_refuses_several_classes_per_flow():
    """The event engine logs and re-solves one class per flow: a part with several is refused by name,
    not silently read as its (empty) row_class."""
    from gpuwait.engine.flow import FlowSet
    members = SharedWeights.of_members(sp.csr_matrix(np.ones((2, 1))), sp.csr_matrix(np.ones((1, 3))))
    with pytest.raises(SimulationError, match="shared.members"):
        FlowSet(size_bytes=np.ones(2), link_weights=sp.csr_matrix((2, 3)), shared=members)
