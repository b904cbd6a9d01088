"""The compiled progressive filling (engine/maxmin_fill.py) against the array one, bit for bit.

The claim (maxmin_fill's docstring): the same iterations, every sum over the same terms in the same
order, so rates, bottlenecks and iteration counts are equal to the last bit — not merely close. The
filling itself is checked against the textbook one (Bertsekas & Gallager, *Data Networks*, 2nd ed.,
section 6.5.2) in test_flow.py.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuwait.engine import maxmin_fill
from gpuwait.engine.flow import (
    _LEVEL_RTOL,
    CAP_LIMITED,
    NOT_TRANSMITTING,
    _progressive_fill,
    _progressive_fill_arrays,
    max_min_rates,
)


def _both(weights: sp.csr_matrix, capacity_Bps: np.ndarray, cap_Bps: np.ndarray, active: np.ndarray):
    flow_of = np.repeat(np.arange(weights.shape[0], dtype=np.intp), np.diff(weights.indptr))
    link_of = weights.indices.astype(np.intp)
    compiled = _progressive_fill(flow_of, link_of, weights.data, capacity_Bps, cap_Bps, active.copy())
    arrays = _progressive_fill_arrays(flow_of, link_of, weights.data, capacity_Bps, cap_Bps, active.copy())
    return compiled, arrays


@st.composite
def problems(draw):
    """Random weighted incidences (some weights fractional, as a splitting router's), capacities (some
    0: a residual problem's saturated link), caps and active flows; every active flow has a link or a cap."""
    n_flows, n_links = draw(st.integers(1, 40)), draw(st.integers(1, 12))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    dense = (rng.random((n_flows, n_links)) < draw(st.sampled_from([0.1, 0.3, 0.7])))
    weights = np.where(dense, rng.choice([1.0, 1.0, 0.5, 1 / 3, 2.0], size=dense.shape), 0.0)
    capacity_Bps = rng.choice([0.0, 1e9, 25e9, 50e9, 50e9, 400e9 / 3], size=n_links)
    capacity_Bps = np.where(capacity_Bps == 0.0, 0.0, capacity_Bps * rng.uniform(0.5, 1.5, n_links))
    if draw(st.booleans()):
        capacity_Bps[capacity_Bps == 0.0] = 1e9
    cap_Bps = np.where(rng.random(n_flows) < 0.3, rng.uniform(1e8, 60e9, n_flows), np.inf)
    no_links = ~dense.any(axis=1)
    cap_Bps[no_links & np.isinf(cap_Bps)] = 5e9
    active = rng.random(n_flows) < draw(st.sampled_from([0.5, 1.0]))
    return sp.csr_matrix(weights), capacity_Bps, cap_Bps, active


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems())
def test_compiled_filling_is_the_array_filling_bit_for_bit(problem):
    compiled, arrays = _both(*problem)
    np.testing.assert_array_equal(compiled.rate_Bps, arrays.rate_Bps)
    np.testing.assert_array_equal(compiled.bottleneck_link, arrays.bottleneck_link)
    assert compiled.iterations == arrays.iterations


def test_many_levels_on_shared_links_bit_for_bit():
    # A larger case in the shape of a fabric: flows of 6-10 links over a few hundred links with
    # equal and unequal capacities, so ties, near-ties and many iterations occur.
    rng = np.random.default_rng(7)
    n_flows, n_links = 3000, 400
    rows = [rng.choice(n_links, size=rng.integers(6, 11), replace=False) for _ in range(n_flows)]
    indptr = np.r_[0, np.cumsum([len(r) for r in rows])]
    weights = sp.csr_matrix((np.ones(indptr[-1]), np.concatenate(rows), indptr), shape=(n_flows, n_links))
    weights.sort_indices()
    capacity_Bps = rng.choice([50e9, 50e9, 100e9, 400e9 / 3 * 0.97], size=n_links)
    compiled, arrays = _both(weights, capacity_Bps, np.full(n_flows, np.inf), np.ones(n_flows, bool))
    assert compiled.iterations > 5
    np.testing.assert_array_equal(compiled.rate_Bps, arrays.rate_Bps)
    np.testing.assert_array_equal(compiled.bottleneck_link, arrays.bottleneck_link)


def test_inputs_are_read_only_and_inactive_flows_stay_idle():
    weights = sp.csr_matrix(np.array([[1.0, 1.0], [1.0, 0.0], [0.0, 1.0]]))
    active = np.array([True, False, True])
    flow_of = np.repeat(np.arange(3, dtype=np.intp), np.diff(weights.indptr))
    link_of = weights.indices.astype(np.intp)
    before = (flow_of.copy(), link_of.copy(), weights.data.copy(), active.copy())
    solution = _progressive_fill(flow_of, link_of, weights.data, np.array([10.0, 4.0]), np.full(3, np.inf), active)
    assert solution.rate_Bps.tolist() == [2.0, 0.0, 2.0]
    assert solution.bottleneck_link.tolist() == [1, NOT_TRANSMITTING, 1]
    for array, copy in zip((flow_of, link_of, weights.data, active), before, strict=True):
        np.testing.assert_array_equal(array, copy)
    rate_Bps, bottleneck = max_min_rates(weights, np.array([10.0, 4.0]), np.array([1.0, np.inf, np.inf]))
    assert rate_Bps.tolist() == [1.0, 9.0, 3.0] and bottleneck.tolist() == [CAP_LIMITED, 0, 1]


def test_compiled_codes_are_the_engines():
    assert maxmin_fill._CAP_LIMITED == CAP_LIMITED
    assert _LEVEL_RTOL > 0
