"""The route walk's shortcuts (issue 16) against their definitions.

* ``_unique_pairs`` numbers (a, b) pairs through a dense table of the values present: it must give
  exactly ``np.unique(a * n_b + b, return_inverse=True)``, on the dense path and the sorting fallback.
* ``adaptive_split`` water-fills once per candidate set: each state's split must satisfy the
  water-filling conditions (the fluid limit of least-utilized next hop): the demand is all placed, every
  link that gets traffic ends at one common utilization level, and no link left out is below it.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from gpuwait.routing.paths import _unique_pairs
from gpuwait.routing.routers import Hop, adaptive_split


@pytest.mark.parametrize("n, n_a, n_b", [(1, 1, 1), (1000, 50, 70), (200_000, 1000, 3000), (10, 10**6, 10**5)])
def test_unique_pairs_is_numpy_unique(n: int, n_a: int, n_b: int) -> None:
    rng = np.random.default_rng(n)
    a, b = rng.integers(0, n_a, n), rng.integers(0, n_b, n)
    uniq, inverse = _unique_pairs(a, b, n_b)
    ref_uniq, ref_inverse = np.unique(a.astype(np.int64) * n_b + b, return_inverse=True)
    assert np.array_equal(uniq, ref_uniq)
    assert np.array_equal(inverse, ref_inverse.ravel())


def _hop(rng: np.random.Generator, n_links: int = 40, n_sets: int = 6, n_states: int = 50) -> Hop:
    """States over candidate sets of random links, capacities and background loads."""
    capacity_Bps = rng.choice([25e9, 50e9, 50e9, 50e9], n_links)
    set_links = [np.sort(rng.choice(n_links, int(rng.integers(1, 9)), replace=False)) for _ in range(n_sets)]
    links = np.concatenate(set_links)
    link_set = np.repeat(np.arange(n_sets), [len(x) for x in set_links])
    count = np.bincount(link_set)
    set_start = np.cumsum(count) - count
    state_set = rng.integers(0, n_sets, n_states)
    zeros = np.zeros(n_states, np.int64)
    return Hop(topo=SimpleNamespace(link_capacity_Bps=capacity_Bps), spec=None, row=np.arange(n_states),
               node=zeros, frac=rng.uniform(0.1, 1.0, n_states), stride=zeros + 1, first=set_start[state_set],
               count=count[state_set], links=links, link_set=link_set, set_node=np.zeros(n_sets, np.int64),
               state_set=state_set, key_bytes=np.zeros((n_states, 0), np.uint8), qp=zeros, dest_index=zeros,
               demand_Bps=rng.uniform(1e9, 80e9, n_states), background_Bps=rng.uniform(0, 40e9, n_links))


@pytest.mark.parametrize("seed", range(5))
def test_adaptive_split_is_water_filling(seed: int) -> None:
    hop = _hop(np.random.default_rng(seed))
    demand_Bps = hop.demand_Bps * hop.frac
    split = adaptive_split(hop, demand_Bps)
    start = 0
    for i in range(len(hop.node)):
        k = int(hop.count[i])
        links = hop.links[hop.first[i]:hop.first[i] + k]
        share = split[start:start + k]
        start += k
        assert share.sum() == pytest.approx(1.0, rel=1e-12)
        cap = hop.topo.link_capacity_Bps[links]
        base = hop.background_Bps[links]
        level = (base + share * demand_Bps[i]) / cap
        used = share > 1e-12
        assert np.allclose(level[used], level[used].max(), rtol=1e-9)  # one common water level
        assert (base[~used] / cap[~used] >= level[used].max() * (1 - 1e-9)).all()  # the rest sit above it
    assert start == len(split)


def test_adaptive_split_without_background_is_by_capacity() -> None:
    hop = _hop(np.random.default_rng(7))
    hop = Hop(**{**hop.__dict__, "background_Bps": None})
    split = adaptive_split(hop, hop.demand_Bps * hop.frac)
    owner = np.repeat(np.arange(len(hop.node)), hop.count)
    offsets = np.arange(len(owner)) - np.repeat(np.cumsum(hop.count) - hop.count, hop.count)
    cap = hop.topo.link_capacity_Bps[hop.links[hop.first[owner] + offsets]]
    assert np.allclose(split, cap / np.bincount(owner, weights=cap)[owner], rtol=1e-12)


def test_walk_memo_gives_the_walk_of_each_round() -> None:
    """A splitting router's rounds keep the walk's structure (``_walk_fabric(memo=...)``): each round must
    give exactly what a fresh walk gives with that round's load, also where the load makes the adaptive
    router drop a branch (a link loaded far past the others: no traffic on it) and where the next
    round keeps it again (the kept structure is refused and rebuilt)."""
    from gpuwait.routing import paths
    from gpuwait.spec import RoutingSpec
    from tests.routing.patterns import all_to_all, three_tier

    topo = three_tier()
    src, dst = all_to_all(topo)
    qp = np.zeros(len(src), np.int64)
    start, target = paths._network_endpoint(topo, src, dst, qp), paths._network_endpoint(topo, dst, src, qp)
    off = topo.node_server[src] != topo.node_server[dst]
    start, target = start[off][:300], target[off][:300]
    n = len(start)
    fabric_up = np.flatnonzero(topo.fabric_links & (topo.node_tier[topo.link_dst] > topo.node_tier[topo.link_src]))
    even = np.full(topo.n_links, 1e9)
    full = even.copy()
    full[fabric_up[::7]] = 1e15  # far past what the demand fills: those branches get nothing
    memo: dict = {}
    router = paths.get_router("adaptive")
    for background in (None, even, full, full, even, None):
        per_row = dict(key_bytes=np.zeros((n, 0), np.uint8), qp=np.zeros(n, np.int64),
                       dest_index=np.zeros(n, np.int64), demand_Bps=np.full(n, 50e9), background_Bps=background)
        spec = RoutingSpec(kind="adaptive")
        kept = paths._walk_fabric(topo, spec, router, start, target, per_row, memo=memo)
        fresh = paths._walk_fabric(topo, spec, router, start, target, per_row)
        for a, b in zip(kept, fresh, strict=True):
            assert np.array_equal(a, b)
        if background is full:
            assert not np.isin(fabric_up[::7], kept[1]).any()  # the branches were dropped
