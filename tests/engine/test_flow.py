"""Tests of the flow-level engine: closed-form cases, then invariants over random small networks."""

from __future__ import annotations

import math
from unittest import mock

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuwait.engine import flow as flow_module
from gpuwait.engine.flow import (
    FlowEngine,
    FlowResult,
    FlowSet,
    LinkTable,
    MaxMinSolver,
    StepLog,
    max_min_rates,
)
from gpuwait.errors import SimulationError

INF = math.inf


def incidence(paths: list[dict[int, float] | list[int]], n_links: int) -> sp.csr_matrix:
    """``(F, L)`` weights from one entry per flow: a list of links (weight 1) or ``{link: weight}``."""
    rows, cols, vals = [], [], []
    for f, path in enumerate(paths):
        items = path.items() if isinstance(path, dict) else ((link, 1.0) for link in path)
        for link, weight in items:
            rows.append(f)
            cols.append(link)
            vals.append(weight)
    return sp.csr_matrix((vals, (rows, cols)), shape=(len(paths), n_links))


def links_table(capacity_Bps: list[float]) -> LinkTable:
    return LinkTable(capacity_Bps=np.array(capacity_Bps, dtype=float), latency_s=np.zeros(len(capacity_Bps)))


def run(capacity_Bps: list[float], paths: list, size_bytes: list[float], **fields) -> FlowResult:
    arrays = {k: (v if isinstance(v, sp.spmatrix) else np.array(v, dtype=float)) for k, v in fields.items()}
    flows = FlowSet(size_bytes=np.array(size_bytes, dtype=float),
                    link_weights=incidence(paths, len(capacity_Bps)), **arrays)
    return FlowEngine(links_table(capacity_Bps)).run(flows)


# ---------------------------------------------------------------------------------------------
# closed forms


def test_one_flow_one_link_finishes_at_size_over_capacity_plus_latency():
    result = run([10.0], [[0]], [25.0], path_latency_s=[0.5])
    assert result.start_s.tolist() == [0.0]
    assert result.tx_end_s.tolist() == [2.5]
    assert result.finish_s.tolist() == [3.0]
    assert result.mean_rate_Bps.tolist() == [10.0]
    assert result.bottleneck_link.tolist() == [0]
    assert result.link_bytes.tolist() == [25.0]
    assert result.makespan_s == 3.0


def test_one_flow_is_limited_by_its_cap_when_below_capacity():
    result = run([10.0], [[0]], [8.0], rate_cap_Bps=[4.0], path_latency_s=[0.25])
    assert result.finish_s.tolist() == [2.25]
    assert result.bottleneck_link.tolist() == [-1]


def test_two_flows_sharing_a_link_get_half_each():
    rate_Bps, bottleneck = max_min_rates(incidence([[0], [0]], 1), np.array([10.0]))
    assert rate_Bps.tolist() == [5.0, 5.0]
    assert bottleneck.tolist() == [0, 0]
    # The short one ends at 2 s; the long one then gets the whole link.
    result = run([10.0], [[0], [0]], [10.0, 30.0])
    assert result.tx_end_s.tolist() == [2.0, 4.0]
    assert result.timeline_s.tolist() == [0.0, 2.0, 4.0]
    assert result.link_rate_Bps.toarray().tolist() == [[10.0], [10.0]]
    assert result.flow_rate_Bps.toarray().tolist() == [[5.0, 5.0], [0.0, 10.0]]


def test_classic_three_link_max_min_example():
    # A crosses l0 and l1, B only l0, C only l1; c0 = 10, c1 = 4.
    # l1 is the tighter link: A = C = 4 / 2 = 2. B takes the rest of l0: 10 - 2 = 8.
    weights = incidence([[0, 1], [0], [1]], 2)
    rate_Bps, bottleneck = max_min_rates(weights, np.array([10.0, 4.0]))
    np.testing.assert_allclose(rate_Bps, [2.0, 8.0, 2.0], rtol=1e-15)
    assert bottleneck.tolist() == [1, 0, 1]
    # Over time: A (4 B) ends at 2 s; B (24 B) sent 16, the other 8 B at 10 B/s end at 2.8 s;
    # C (8 B) sent 4, the other 4 B at 4 B/s end at 3 s.
    result = run([10.0, 4.0], [[0, 1], [0], [1]], [4.0, 24.0, 8.0])
    np.testing.assert_allclose(result.tx_end_s, [2.0, 2.8, 3.0], rtol=1e-12)
    assert result.bottleneck_link.tolist() == [1, 0, 1]


def test_capped_flow_frees_capacity_for_the_others():
    weights = incidence([[0], [0], [0]], 1)
    rate_Bps, bottleneck = max_min_rates(weights, np.array([12.0]), rate_cap_Bps=np.array([2.0, INF, INF]))
    np.testing.assert_allclose(rate_Bps, [2.0, 5.0, 5.0], rtol=1e-15)
    assert bottleneck.tolist() == [-1, 0, 0]


def test_split_flow_gets_twice_one_links_capacity_when_alone():
    weights = incidence([{0: 0.5, 1: 0.5}], 2)
    rate_Bps, _ = max_min_rates(weights, np.array([10.0, 10.0]))
    assert rate_Bps.tolist() == [20.0]
    result = run([10.0, 10.0], [{0: 0.5, 1: 0.5}], [40.0])
    assert result.tx_end_s.tolist() == [2.0]
    assert result.link_bytes.tolist() == [20.0, 20.0]


def test_split_flow_is_held_back_by_its_most_loaded_path():
    # 0.5 on l0 and l1; a second flow on l1 only. l1 holds 0.5 r0 + r1 <= 10, l0 0.5 r0 <= 10.
    # Filling: both rise to 10 / 1.5 = 6.67 when l1 saturates.
    rate_Bps, bottleneck = max_min_rates(incidence([{0: 0.5, 1: 0.5}, [1]], 2), np.array([10.0, 10.0]))
    np.testing.assert_allclose(rate_Bps, [20.0 / 3, 20.0 / 3], rtol=1e-14)
    assert bottleneck.tolist() == [1, 1]


def test_inactive_flows_get_nothing_and_are_marked_minus_two():
    rate_Bps, bottleneck = max_min_rates(incidence([[0], [0]], 1), np.array([10.0]), active=np.array([True, False]))
    assert rate_Bps.tolist() == [10.0, 0.0]
    assert bottleneck.tolist() == [0, -2]


def test_independent_bottlenecks_are_filled_in_one_iteration():
    # Four disjoint links with different levels: classic filling needs 4 iterations.
    weights = incidence([[0], [1], [1], [2], [3]], 4)
    solution = MaxMinSolver(weights, np.array([1.0, 4.0, 3.0, 7.0])).solve()
    np.testing.assert_allclose(solution.rate_Bps, [1.0, 2.0, 2.0, 3.0, 7.0])
    assert solution.iterations == 1


def test_dependent_flow_starts_at_its_predecessors_finish():
    deps = sp.csr_matrix(np.array([[False, False], [True, False]]))
    result = run([10.0], [[0], [0]], [10.0, 10.0], path_latency_s=[0.25, 0.25], depends_on=deps)
    assert result.finish_s[0] == 1.25
    assert result.start_s[1] == 1.25
    assert result.finish_s[1] == 2.5
    # The link idles during the latency gap.
    assert result.timeline_s.tolist() == [0.0, 1.0, 1.25, 2.25]
    assert result.link_rate_Bps.toarray().ravel().tolist() == [10.0, 0.0, 10.0]


def test_dependent_flow_waits_for_its_release_time_too():
    deps = sp.csr_matrix(np.array([[False, False], [True, False]]))
    result = run([10.0], [[0], [0]], [10.0, 10.0], release_time_s=[0.0, 3.0], depends_on=deps)
    assert result.start_s.tolist() == [0.0, 3.0]


def test_flow_waits_for_the_last_of_several_predecessors():
    deps = sp.csr_matrix(np.array([[0, 0, 0], [0, 0, 0], [1, 1, 0]], dtype=bool))
    result = run([10.0, 10.0], [[0], [1], [0]], [10.0, 20.0, 5.0], path_latency_s=[0.0, 0.5, 0.0], depends_on=deps)
    assert result.finish_s[:2].tolist() == [1.0, 2.5]
    assert result.start_s[2] == 2.5


def test_dependency_cycle_raises_naming_a_flow_on_it():
    deps = sp.csr_matrix(np.array([[0, 1, 0], [0, 0, 1], [0, 1, 0]], dtype=bool))  # 1 <-> 2, 0 waits for 1
    with pytest.raises(SimulationError, match=r"flow [12] is on a dependency cycle"):
        run([10.0], [[0], [0], [0]], [1.0, 1.0, 1.0], depends_on=deps)


def test_self_dependency_raises():
    deps = sp.csr_matrix(np.array([[0, 0], [0, 1]], dtype=bool))
    with pytest.raises(SimulationError, match="flow 1 depends on itself"):
        run([10.0], [[0], [0]], [1.0, 1.0], depends_on=deps)


def test_zero_size_flow_finishes_at_release_plus_latency():
    result = run([10.0], [[0]], [0.0], release_time_s=[3.0], path_latency_s=[0.5])
    assert result.start_s.tolist() == [3.0]
    assert result.tx_end_s.tolist() == [3.0]
    assert result.finish_s.tolist() == [3.5]
    assert result.bottleneck_link.tolist() == [-2]
    assert result.n_intervals == 0


def test_zero_size_flow_without_links_is_allowed_and_chains():
    # A zero-size, zero-latency barrier between two transfers.
    deps = sp.csr_matrix(np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0]], dtype=bool))
    result = run([10.0], [[0], [], [0]], [10.0, 0.0, 10.0], path_latency_s=[0.5, 0.0, 0.0], depends_on=deps)
    assert result.start_s.tolist() == [0.0, 1.5, 1.5]
    assert result.finish_s.tolist() == [1.5, 1.5, 2.5]


def test_flow_without_links_or_cap_raises_naming_it():
    with pytest.raises(SimulationError, match="flow 1 crosses no link and has no rate cap"):
        run([10.0], [[0], []], [1.0, 1.0])
    with pytest.raises(SimulationError, match="flow 0 crosses no link"):
        max_min_rates(incidence([[]], 1), np.array([1.0]))


def test_flow_without_links_but_with_a_cap_runs_at_its_cap():
    result = run([10.0], [[]], [10.0], rate_cap_Bps=[5.0])
    assert result.tx_end_s.tolist() == [2.0]
    assert result.bottleneck_link.tolist() == [-1]


@pytest.mark.parametrize(("size_bytes", "cap_Bps", "expected"), [(26.0, INF, 0), (10.0, INF, 1), (30.0, 8.0, -1)])
def test_bottleneck_is_what_limited_the_largest_share_of_bytes(size_bytes, cap_Bps, expected):
    # Flow 0 crosses l0 (10 B/s) and l1 (12 B/s). For the first second flow 1 (6 B) shares l1
    # and holds flow 0 to 6 B/s: 6 B under l1. Alone, flow 0 runs at 10 B/s under l0 (20 B of
    # 26, but only 4 B of 10), or at its 8 B/s cap (24 B of 30).
    result = run([10.0, 12.0], [[0, 1], [1]], [size_bytes, 6.0], rate_cap_Bps=[cap_Bps, INF])
    assert result.bottleneck_link.tolist() == [expected, 1]


def test_simultaneous_events_are_processed_together():
    result = run([10.0, 10.0], [[0], [1], [0, 1]], [10.0, 10.0, 10.0])
    # All three end together at 2 s: one interval, not three.
    np.testing.assert_allclose(result.tx_end_s, [2.0, 2.0, 2.0], rtol=1e-12)
    assert result.n_intervals == 1


def test_nearly_simultaneous_ends_merge_at_the_later_time():
    result = run([10.0], [[0], [0]], [10.0, 10.0 * (1 + 1e-14)])
    assert result.n_intervals == 1
    assert result.tx_end_s[0] == result.tx_end_s[1] >= 2.0
    np.testing.assert_allclose(result.flow_bytes, [10.0, 10.0 * (1 + 1e-14)], rtol=1e-15)


def test_utilization_helpers():
    result = run([10.0, 20.0], [[0], [0, 1]], [10.0, 30.0])
    capacity_Bps = np.array([10.0, 20.0])
    # 0..2 s: 5 + 5 on l0, 5 on l1; 2..4 s: flow 1 alone at 10 on both.
    assert result.timeline_s.tolist() == [0.0, 2.0, 4.0]
    assert result.link_utilization(capacity_Bps).toarray().tolist() == [[1.0, 0.25], [1.0, 0.5]]
    assert result.link_peak_utilization(capacity_Bps).tolist() == [1.0, 0.5]
    np.testing.assert_allclose(result.link_mean_utilization(capacity_Bps), [1.0, 0.375])
    np.testing.assert_allclose(result.link_mean_utilization(capacity_Bps, 1.0, 3.0), [1.0, 0.375])
    np.testing.assert_allclose(result.link_mean_utilization(capacity_Bps, 3.0, 8.0), [0.2, 0.1])
    assert result.link_bytes.tolist() == [40.0, 30.0]


def test_step_log_round_trip():
    log = StepLog(interval=np.array([0, 0, 2, 3]), index=np.array([1, 0, 1, 0]),
                  rate_Bps=np.array([2.0, 1.0, 0.0, 4.0]))
    dense = log.to_csr(4, 2).toarray()
    assert dense.tolist() == [[1.0, 2.0], [1.0, 2.0], [1.0, 0.0], [4.0, 0.0]]
    timeline_s = np.array([0.0, 1.0, 2.0, 4.0, 5.0])
    np.testing.assert_allclose(log.integral_bytes(timeline_s, 2), [1 + 1 + 2 + 4, 2 + 2])
    assert log.peak_Bps(2).tolist() == [4.0, 2.0]


def test_empty_flow_set():
    result = run([10.0], [], [])
    assert result.n_flows == 0
    assert result.makespan_s == 0.0
    assert result.link_rate_Bps.shape == (0, 1)


def test_inputs_are_not_mutated_and_are_copied():
    size_bytes = np.array([10.0, 20.0])
    weights = incidence([[0], [0]], 1)
    before = (size_bytes.copy(), weights.toarray().copy())
    flows = FlowSet(size_bytes=size_bytes, link_weights=weights)
    size_bytes[0] = 99.0  # a later change by the caller does not reach the flow set
    result = FlowEngine(links_table([10.0])).run(flows)
    assert flows.size_bytes.tolist() == [10.0, 20.0]
    assert weights.toarray().tolist() == before[1].tolist()
    assert result.tx_end_s.tolist() == [2.0, 3.0]
    with pytest.raises(ValueError):
        flows.size_bytes[0] = 1.0


# ---------------------------------------------------------------------------------------------
# bad input


@pytest.mark.parametrize(
    ("fields", "field_name"),
    [
        ({"size_bytes": [-1.0, 1.0]}, "size_bytes"),
        ({"size_bytes": [np.nan, 1.0]}, "size_bytes"),
        ({"release_time_s": [0.0]}, "release_time_s"),
        ({"release_time_s": [0.0, -1.0]}, "release_time_s"),
        ({"rate_cap_Bps": [1.0, 0.0]}, "rate_cap_Bps"),
        ({"path_latency_s": [0.0, 0.0, 0.0]}, "path_latency_s"),
        ({"path_latency_s": [0.0, np.inf]}, "path_latency_s"),
        ({"link_weights": incidence([[0]], 1)}, "link_weights"),
        ({"link_weights": sp.csr_matrix(np.array([[1.0], [-0.5]]))}, "link_weights"),
        ({"depends_on": sp.csr_matrix((3, 3), dtype=bool)}, "depends_on"),
    ],
)
def test_bad_flow_set_raises_naming_the_field(fields, field_name):
    base = {"size_bytes": [1.0, 1.0], "link_weights": incidence([[0], [0]], 1)}
    base.update(fields)
    kwargs = {k: (v if isinstance(v, sp.spmatrix) else np.array(v, dtype=float)) for k, v in base.items()}
    with pytest.raises(SimulationError, match=field_name):
        FlowSet(**kwargs)


def test_explicit_zero_weight_is_rejected_with_a_hint():
    weights = sp.csr_matrix((np.array([1.0, 0.0]), np.array([0, 0]), np.array([0, 1, 2])), shape=(2, 1))
    with pytest.raises(SimulationError, match=r"link_weights\[1, 0\]") as err:
        FlowSet(size_bytes=np.ones(2), link_weights=weights)
    assert err.value.hint


@pytest.mark.parametrize(
    ("capacity_Bps", "latency_s", "field_name"),
    [([10.0, 0.0], [0.0, 0.0], "capacity_Bps"), ([10.0, np.inf], [0.0, 0.0], "capacity_Bps"),
     ([10.0], [0.0, 0.0], "latency_s"), ([10.0], [-1.0], "latency_s")],
)
def test_bad_link_table_raises_naming_the_field(capacity_Bps, latency_s, field_name):
    with pytest.raises(SimulationError, match=field_name):
        LinkTable(capacity_Bps=np.array(capacity_Bps), latency_s=np.array(latency_s))


def test_link_count_mismatch_raises():
    flows = FlowSet(size_bytes=np.ones(1), link_weights=incidence([[0]], 2))
    with pytest.raises(SimulationError, match="link_weights"):
        FlowEngine(links_table([10.0])).run(flows)


def test_max_min_rates_checks_its_inputs():
    with pytest.raises(SimulationError, match="capacity_Bps"):
        max_min_rates(incidence([[0]], 1), np.array([0.0]))
    with pytest.raises(SimulationError, match="link_weights"):
        max_min_rates(incidence([[0]], 1), np.array([1.0, 1.0]))
    with pytest.raises(SimulationError, match="rate_cap_Bps"):
        max_min_rates(incidence([[0]], 1), np.array([1.0]), rate_cap_Bps=np.array([-1.0]))
    with pytest.raises(SimulationError, match="active"):
        max_min_rates(incidence([[0]], 1), np.array([1.0]), active=np.array([True, True]))


# ---------------------------------------------------------------------------------------------
# invariants over random small networks

REL = 1e-9

weights_st = st.one_of(st.sampled_from([1.0, 0.5, 0.25]), st.floats(0.05, 1.0))
capacity_st = st.one_of(st.sampled_from([10.0, 25.0, 100.0]), st.floats(1.0, 1000.0))


@st.composite
def networks(draw, max_flows: int = 12) -> tuple[np.ndarray, sp.csr_matrix, np.ndarray]:
    """Capacities, weights and rate caps of up to ``max_flows`` flows on 1-8 links."""
    n_links = draw(st.integers(1, 8))
    capacity_Bps = np.array(draw(st.lists(capacity_st, min_size=n_links, max_size=n_links)))
    n_flows = draw(st.integers(1, max_flows))
    paths, caps = [], []
    for _ in range(n_flows):
        links = draw(st.lists(st.integers(0, n_links - 1), unique=True, max_size=min(4, n_links)))
        capped = draw(st.booleans())
        if not links and not capped:
            links = [draw(st.integers(0, n_links - 1))]
        paths.append({link: draw(weights_st) for link in links})
        caps.append(draw(st.one_of(st.sampled_from([5.0, 50.0]), st.floats(0.5, 500.0))) if capped else INF)
    return capacity_Bps, incidence(paths, n_links), np.array(caps)


@st.composite
def scenarios(draw) -> tuple[LinkTable, FlowSet]:
    capacity_Bps, weights, caps = draw(networks())
    n_flows = weights.shape[0]

    def column(values):
        return np.array(draw(st.lists(values, min_size=n_flows, max_size=n_flows)))

    size_bytes = column(st.one_of(st.sampled_from([0.0, 10.0, 100.0]), st.floats(1.0, 1e4)))
    release_time_s = column(st.one_of(st.sampled_from([0.0, 0.0, 1.0]), st.floats(0.0, 20.0)))
    path_latency_s = column(st.one_of(st.sampled_from([0.0, 0.5]), st.floats(0.0, 2.0)))
    deps = np.zeros((n_flows, n_flows), dtype=bool)
    if draw(st.booleans()):
        for f in range(1, n_flows):  # only on lower-numbered flows: acyclic by construction
            for g in draw(st.lists(st.integers(0, f - 1), unique=True, max_size=3)):
                deps[f, g] = True
    links = LinkTable(capacity_Bps=capacity_Bps, latency_s=np.zeros_like(capacity_Bps))
    flows = FlowSet(size_bytes=size_bytes, link_weights=weights, release_time_s=release_time_s,
                    rate_cap_Bps=caps, path_latency_s=path_latency_s, depends_on=sp.csr_matrix(deps))
    return links, flows


invariant_settings = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@invariant_settings
@given(scenarios())
def test_no_link_above_capacity_in_any_interval(scenario):
    links, flows = scenario
    result = FlowEngine(links).run(flows)
    link_rate_Bps = result.link_rate_Bps.toarray()
    assert np.all(link_rate_Bps <= links.capacity_Bps * (1 + REL))
    assert np.all(result.link_peak_utilization(links.capacity_Bps) <= 1 + REL)
    # Link rates are the weighted sums of the flow rates.
    np.testing.assert_allclose(link_rate_Bps, (result.flow_rate_Bps @ flows.link_weights).toarray(),
                               rtol=REL, atol=REL * links.capacity_Bps.max())


@invariant_settings
@given(scenarios())
def test_bytes_are_conserved(scenario):
    links, flows = scenario
    result = FlowEngine(links).run(flows)
    np.testing.assert_allclose(result.flow_bytes, flows.size_bytes, rtol=REL, atol=0)
    np.testing.assert_allclose(result.link_bytes, flows.link_weights.T @ flows.size_bytes,
                               rtol=REL, atol=REL * flows.size_bytes.sum())
    # A flow's bytes occupy links only between its start and its end of transmission.
    flow_rate = result.flow_rate_Bps.tocoo()
    lo_s = result.timeline_s[flow_rate.row]
    hi_s = result.timeline_s[flow_rate.row + 1]
    assert np.all(lo_s >= result.start_s[flow_rate.col])
    assert np.all(hi_s <= result.tx_end_s[flow_rate.col])


@invariant_settings
@given(scenarios())
def test_no_flow_finishes_before_size_over_best_rate_plus_latency(scenario):
    links, flows = scenario
    result = FlowEngine(links).run(flows)
    weights = flows.link_weights.tocoo()
    best_Bps = flows.rate_cap_Bps.copy()
    np.minimum.at(best_Bps, weights.row, links.capacity_Bps[weights.col] / weights.data)
    lower_bound_s = result.start_s + flows.size_bytes / best_Bps + flows.path_latency_s
    assert np.all(result.finish_s >= lower_bound_s - REL * np.maximum(lower_bound_s, 1.0))
    assert np.all(result.finish_s == result.tx_end_s + flows.path_latency_s)
    assert np.all(np.diff(result.timeline_s) > 0)


@invariant_settings
@given(scenarios())
def test_runs_are_deterministic(scenario):
    links, flows = scenario
    engine = FlowEngine(links)
    first, second, third = engine.run(flows), engine.run(flows), FlowEngine(links).run(flows)
    for other in (second, third):
        for name in ("start_s", "tx_end_s", "finish_s", "mean_rate_Bps", "bottleneck_link", "link_bytes",
                     "timeline_s"):
            np.testing.assert_array_equal(getattr(first, name), getattr(other, name))
        for log in ("link_rate_log", "flow_rate_log"):
            for name in ("interval", "index", "rate_Bps"):
                np.testing.assert_array_equal(getattr(getattr(first, log), name), getattr(getattr(other, log), name))


@invariant_settings
@given(scenarios())
def test_dependencies_are_respected(scenario):
    links, flows = scenario
    result = FlowEngine(links).run(flows)
    deps = flows.depends_on.tocoo()
    ready_s = flows.release_time_s.copy()
    np.maximum.at(ready_s, deps.row, result.finish_s[deps.col])
    assert np.all(result.start_s >= ready_s)
    # ... and no flow waits longer than it has to.
    np.testing.assert_allclose(result.start_s, ready_s, rtol=REL, atol=0)


def assert_max_min_fair(weights: sp.csr_matrix, capacity_Bps, caps, active, rate_Bps, bottleneck) -> None:
    """The standard characterisation: feasible, and every flow below its cap crosses a saturated
    link on which no flow has a higher rate. The returned bottleneck must be such a link."""
    weights = sp.csr_matrix(weights)
    load_Bps = weights.T @ rate_Bps
    assert np.all(load_Bps <= capacity_Bps * (1 + REL))
    assert np.all(rate_Bps <= caps * (1 + REL))
    assert np.all(rate_Bps[~active] == 0) and np.all(bottleneck[~active] == -2)
    saturated = load_Bps >= capacity_Bps * (1 - REL)
    top_Bps = np.zeros(capacity_Bps.shape)
    coo = weights.tocoo()
    np.maximum.at(top_Bps, coo.col, rate_Bps[coo.row])
    for f in np.flatnonzero(active):
        if bottleneck[f] == -1:
            assert rate_Bps[f] >= caps[f] * (1 - REL)
            continue
        link = bottleneck[f]
        assert weights[f, link] > 0, f"flow {f}: bottleneck {link} not on its path"
        assert saturated[link], f"flow {f}: bottleneck {link} not saturated"
        assert rate_Bps[f] >= top_Bps[link] * (1 - REL), f"flow {f}: not the largest rate on {link}"


def reference_max_min(weights: sp.csr_matrix, capacity_Bps, caps, active) -> np.ndarray:
    """Classic progressive filling, one level at a time, with plain Python loops."""
    dense = weights.toarray()
    n_flows, n_links = dense.shape
    rate = [0.0] * n_flows
    unfrozen = {f for f in range(n_flows) if active[f]}
    while unfrozen:
        best = min(caps[f] for f in unfrozen)
        for link in range(n_links):
            users = [f for f in unfrozen if dense[f, link] > 0]
            if users:
                frozen_load = sum(dense[f, link] * rate[f] for f in range(n_flows) if f not in unfrozen)
                best = min(best, (capacity_Bps[link] - frozen_load) / sum(dense[f, link] for f in users))
        for f in unfrozen:
            rate[f] = best
        done = set()
        for f in unfrozen:
            if caps[f] <= best * (1 + 1e-12):
                done.add(f)
            for link in range(n_links):
                if dense[f, link] > 0:
                    load = sum(dense[g, link] * rate[g] for g in range(n_flows))
                    if load >= capacity_Bps[link] * (1 - 1e-12):
                        done.add(f)
        unfrozen -= done
    return np.array(rate)


@settings(max_examples=120, deadline=None)
@given(networks(), st.data())
def test_max_min_rates_is_max_min_fair(network, data):
    capacity_Bps, weights, caps = network
    active = np.array(data.draw(st.lists(st.booleans(), min_size=weights.shape[0], max_size=weights.shape[0])))
    rate_Bps, bottleneck = max_min_rates(weights, capacity_Bps, caps, active)
    assert_max_min_fair(weights, capacity_Bps, caps, active, rate_Bps, bottleneck)
    np.testing.assert_allclose(rate_Bps, reference_max_min(weights, capacity_Bps, caps, active), rtol=1e-9)


def assert_intervals_hold_full_solves(links: LinkTable, flows: FlowSet, result: FlowResult) -> None:
    """Every interval's rates are the max-min allocation of the flows transmitting in it."""
    flow_rate_Bps = result.flow_rate_Bps.toarray()
    for k in range(result.n_intervals):
        t0_s, t1_s = result.timeline_s[k], result.timeline_s[k + 1]
        transmitting = (result.start_s <= t0_s) & (result.tx_end_s >= t1_s) & (flows.size_bytes > 0)
        expected_Bps, _ = max_min_rates(flows.link_weights, links.capacity_Bps, flows.rate_cap_Bps, transmitting)
        # A flow ending in the interval runs at exactly what sends its last bytes, at most its share.
        ending = result.tx_end_s == t1_s
        steady = transmitting & ~ending
        np.testing.assert_allclose(flow_rate_Bps[k, steady], expected_Bps[steady], rtol=REL)
        assert np.all(flow_rate_Bps[k, ending] <= expected_Bps[ending] * (1 + REL))
        assert np.all(flow_rate_Bps[k, ~transmitting] == 0)


@invariant_settings
@given(scenarios())
def test_engine_rates_are_max_min_fair_in_every_interval(scenario):
    links, flows = scenario
    assert_intervals_hold_full_solves(links, flows, FlowEngine(links).run(flows))


@invariant_settings
@given(scenarios())
def test_incremental_updates_hold_full_solves(scenario):
    # Small flow sets mostly fall back to full solves; force the local re-solve path.
    links, flows = scenario
    with mock.patch.object(flow_module, "_LOCAL_MAX_SHARE", 1.0):
        result = FlowEngine(links, reallocation="local").run(flows)
    assert result.counters["full_solves"] <= result.counters["rate_updates"]
    assert_intervals_hold_full_solves(links, flows, result)


def random_fabric(seed: int, n_flows: int = 300, n_links: int = 120) -> tuple[LinkTable, FlowSet]:
    """Flows over 3 random links each, some split, capped, delayed or waiting for another."""
    rng = np.random.default_rng(seed)
    rows = np.repeat(np.arange(n_flows), 3)
    cols = rng.integers(0, n_links, rows.size)
    weights = sp.csr_matrix((rng.choice([1.0, 0.5], rows.size), (rows, cols)), shape=(n_flows, n_links))
    capacity_Bps = rng.choice([10.0, 40.0, 100.0], n_links)
    waiting = np.flatnonzero(rng.random(n_flows) < 0.3)
    waiting = waiting[waiting > 0]
    deps = sp.csr_matrix((np.ones(waiting.size, dtype=bool), (waiting, rng.integers(0, waiting))),
                         shape=(n_flows, n_flows))
    flows = FlowSet(size_bytes=rng.uniform(1, 100, n_flows), link_weights=weights,
                    release_time_s=rng.choice([0.0, 0.0, 1.0, 2.0], n_flows),
                    rate_cap_Bps=np.where(rng.random(n_flows) < 0.2, rng.uniform(1, 20, n_flows), INF),
                    path_latency_s=rng.choice([0.0, 0.1], n_flows), depends_on=deps)
    return LinkTable(capacity_Bps, np.zeros(n_links)), flows


@pytest.mark.parametrize("seed", [7, 8])
@pytest.mark.parametrize("reallocation", ["levels", "local"])
def test_engine_matches_full_solves_on_a_larger_random_fabric(seed, reallocation):
    # Big enough that the local path and its fall-back to a full solve both run.
    links, flows = random_fabric(seed)
    result = FlowEngine(links, reallocation=reallocation).run(flows)
    if reallocation == "local":
        assert result.counters["local_updates"] > 0 and result.counters["full_solves"] > 0
    else:  # the level path never solves in full, and re-solves fewer flows than there are active ones
        assert result.counters["full_solves"] == 0 and result.counters["level_updates"] > 0
    assert_intervals_hold_full_solves(links, flows, result)
    np.testing.assert_allclose(result.flow_bytes, flows.size_bytes, rtol=REL)


def test_link_rates_do_not_depend_on_how_their_derivation_is_chunked():
    links, flows = random_fabric(9, n_flows=120, n_links=40)
    whole = FlowEngine(links).run(flows)
    with mock.patch.object(flow_module, "_LINK_LOG_CHUNK", 5):
        chunked = FlowEngine(links).run(flows)
    for name in ("interval", "index", "rate_Bps"):
        np.testing.assert_array_equal(getattr(whole.link_rate_log, name), getattr(chunked.link_rate_log, name))
    assert whole.link_rate_log.index.size > 100
