"""The event engine on routes whose middle hops are shared by classes (``FlowSet.shared``) equals the
engine on the same routes joined into one row per flow.

A sprayed or adaptive route between two leaves is stored once per (source leaf, destination leaf)
class; the engine solves and logs link rates per class. The weighted max-min allocation between two
events is unique, and a flow's finish follows from its rates, so the two runs agree to rounding:
finish times within 1e-9 relative, per-link bytes within 1e-9 relative of each other and of the
closed form (every byte of a flow crosses each of its links once per unit of weight).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwait.engine.base import effective_capacity_Bps
from gpuwait.engine.flow import FlowEngine, FlowSet, LinkTable, SharedWeights
from gpuwait.engine.flow_run import simulate_flows
from gpuwait.errors import SimulationError
from gpuwait.routing import route_flows
from gpuwait.spec import PatternSpec, RoutingSpec
from gpuwait.topology import build_preset
from gpuwait.transport import TRANSPORTS
from gpuwait.workload.traffic import pattern_flows


def _joined(flows: FlowSet) -> FlowSet:
    shared = flows.shared
    has = np.flatnonzero(shared.row_class >= 0)
    rows = shared.class_weights[shared.row_class[has]].tocoo()
    middle = sp.csr_matrix((rows.data * shared.row_scale[has][rows.row], (has[rows.row], rows.col)),
                           shape=flows.link_weights.shape)
    return FlowSet(size_bytes=flows.size_bytes, link_weights=(flows.link_weights + middle).tocsr(),
                   release_time_s=flows.release_time_s, rate_cap_Bps=flows.rate_cap_Bps,
                   path_latency_s=flows.path_latency_s, depends_on=flows.depends_on)


def _assert_same(links: LinkTable, flows: FlowSet) -> None:
    joined = _joined(flows)
    a, b = FlowEngine(links).run(flows), FlowEngine(links).run(joined)
    np.testing.assert_allclose(a.finish_s, b.finish_s, rtol=1e-9, atol=0)
    np.testing.assert_allclose(a.start_s, b.start_s, rtol=1e-9, atol=0)
    np.testing.assert_allclose(a.link_bytes, b.link_bytes, rtol=1e-9, atol=1e-6)
    expected_bytes = np.asarray(joined.link_weights.T @ flows.size_bytes).ravel()
    np.testing.assert_allclose(a.link_bytes, expected_bytes, rtol=1e-9, atol=1e-6)
    np.testing.assert_allclose(a.link_peak_utilization(links.capacity_Bps), b.link_peak_utilization(links.capacity_Bps),
                               rtol=1e-9, atol=1e-12)
    assert a.link_peak_utilization(links.capacity_Bps).max() <= 1 + 1e-9


@pytest.mark.parametrize("kind", ["spray", "adaptive"])
@pytest.mark.parametrize("preset,servers", [("rocev2-400g-2tier", 8), ("dgx-h100-superpod", 8)])
def test_routed_permutation_with_varied_sizes_and_starts_matches_joined_rows(kind, preset, servers):
    topo = build_preset(preset, servers=servers)
    table = pattern_flows(topo, PatternSpec(kind="permutation", size="64MiB", seed=3))
    routes = route_flows(topo, RoutingSpec(kind=kind, qps_per_connection=2), table.src, table.dst,
                         transport="infiniband")
    assert routes.class_weights is not None
    rng = np.random.default_rng(0)
    flows = FlowSet(size_bytes=routes.per_qp(table.size_bytes) * rng.uniform(0.2, 1.0, routes.n_rows),
                    link_weights=routes.own_weights, release_time_s=rng.choice([0.0, 1e-4, 3e-4], routes.n_rows),
                    path_latency_s=routes.path_latency_s,
                    shared=SharedWeights(routes.row_class, np.ones(routes.n_rows), routes.class_weights))
    _assert_same(LinkTable(effective_capacity_Bps(topo, TRANSPORTS["infiniband"]), topo.link_latency_s), flows)


def test_simulate_flows_keeps_classes_and_matches_the_joined_routes():
    topo = build_preset("rocev2-400g-2tier", servers=8)
    table = pattern_flows(topo, PatternSpec(kind="all-to-all", size="8MB"))
    run = simulate_flows(topo, table, RoutingSpec(kind="spray"), TRANSPORTS["rocev2"])
    routes = run.routes
    flows = FlowSet(size_bytes=routes.per_qp(table.size_bytes), link_weights=routes.link_weights,
                    rate_cap_Bps=np.full(routes.n_rows, np.inf), path_latency_s=run.result.finish_s - run.result.tx_end_s)
    joined = FlowEngine(LinkTable(run.capacity_Bps, topo.link_latency_s)).run(flows)
    np.testing.assert_allclose(run.result.finish_s, joined.finish_s, rtol=1e-9)
    np.testing.assert_allclose(run.link_bytes, routes.bytes_per_link(table.size_bytes), rtol=1e-9, atol=1e-6)
    assert run.result.counters["local_rounds"] == 0 and run.result.counters["full_solves"] >= 1  # the class path ran


@st.composite
def _cases(draw):
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    n_links, n_flows, n_classes = int(rng.integers(2, 12)), int(rng.integers(1, 25)), int(rng.integers(1, 5))
    own = sp.random(n_flows, n_links, density=0.2, random_state=seed % 2**32, format="csr")
    own.data = rng.choice([1.0, 0.5, 2.0], size=own.nnz)
    classes = sp.random(n_classes, n_links, density=0.4, random_state=(seed + 1) % 2**32, format="csr")
    classes.data = rng.choice([1.0, 0.25, 0.5], size=classes.nnz)
    row_class = rng.integers(-1, n_classes, size=n_flows)
    has_links = (np.diff(own.indptr) > 0) | ((row_class >= 0) & (np.diff(classes.indptr) > 0)[np.maximum(row_class, 0)])
    cap_Bps = np.where(~has_links | (rng.random(n_flows) < 0.2), rng.uniform(1.0, 20.0, n_flows), np.inf)
    after = sp.random(n_flows, n_flows, density=0.1, random_state=(seed + 2) % 2**32, format="csr")
    depends_on = sp.triu(after, k=1).astype(bool).tocsr()  # f waits only for later ids: acyclic
    flows = FlowSet(size_bytes=rng.choice([0.0, 5.0, 40.0, 100.0], size=n_flows), link_weights=own,
                    release_time_s=rng.choice([0.0, 0.5, 2.0], size=n_flows), rate_cap_Bps=cap_Bps,
                    path_latency_s=rng.choice([0.0, 0.1], size=n_flows), depends_on=depends_on,
                    shared=SharedWeights(row_class, rng.choice([1.0, 2.0], size=n_flows), classes))
    links = LinkTable(rng.choice([10.0, 25.0, 50.0], size=n_links), np.zeros(n_links))
    return links, flows


@settings(max_examples=60, deadline=None)
@given(_cases())
def test_random_event_sequences_match_the_joined_rows(case):
    _assert_same(*case)


def test_bad_shared_weights_name_the_field():
    own = sp.csr_matrix(np.ones((2, 1)))
    with pytest.raises(SimulationError, match=r"shared.row_class\[1\] = 3: expected a class id in \[0, 1\)"):
        FlowSet(size_bytes=np.ones(2), link_weights=own,
                shared=SharedWeights(np.array([0, 3]), np.ones(2), sp.csr_matrix(np.ones((1, 1)))))
    with pytest.raises(SimulationError, match="shared.class_weights: got shape"):
        FlowSet(size_bytes=np.ones(2), link_weights=own,
                shared=SharedWeights(np.array([0, 0]), np.ones(2), sp.csr_matrix(np.ones((1, 3)))))
