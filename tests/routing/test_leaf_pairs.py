"""Splitting routers walk one row per (source leaf, destination leaf, demand) class.

The reference is the same walk over every row (``paths._LEAF_PAIR_CLASSES = False``): the routes
must carry the same links with the same fractions (spraying: bit for bit; adaptive routing: to
rounding, because its load is summed per class instead of per row), on 2- and 3-tier fabrics,
for all-to-all, permutations and rings.
"""

from __future__ import annotations

import numpy as np
import pytest

import gpuwait.routing.paths as paths
from gpuwait.routing import route_flows
from gpuwait.spec import RoutingSpec
from gpuwait.topology import build_preset
from tests.routing.patterns import all_to_all, permutation, ring, three_tier


def _routes(topo, kind, src, dst, classes):
    saved = paths._LEAF_PAIR_CLASSES
    paths._LEAF_PAIR_CLASSES = classes
    try:
        return route_flows(topo, RoutingSpec(kind=kind), src, dst, transport="infiniband")
    finally:
        paths._LEAF_PAIR_CLASSES = saved


_three_tier, _all_to_all, _ring = three_tier, all_to_all, ring
_permutation = permutation


@pytest.mark.parametrize("kind", ["spray", "adaptive"])
@pytest.mark.parametrize("pattern", [_all_to_all, _permutation, _ring])
@pytest.mark.parametrize("fabric", ["superpod-2tier", "clos-3tier"])
def test_classes_route_like_every_row(kind, pattern, fabric):
    topo = build_preset("dgx-h100-superpod", servers=8) if fabric == "superpod-2tier" else _three_tier()
    src, dst = pattern(topo)
    every_row = _routes(topo, kind, src, dst, classes=False)
    by_class = _routes(topo, kind, src, dst, classes=True)
    a, b = every_row.link_weights, by_class.link_weights
    assert (a.indptr == b.indptr).all() and (a.indices == b.indices).all()
    if kind == "spray":
        assert (a.data == b.data).all()
    else:
        np.testing.assert_allclose(b.data, a.data, rtol=1e-12, atol=0)
    np.testing.assert_allclose(by_class.path_latency_s, every_row.path_latency_s, rtol=1e-12)


def test_multi_port_nics_walk_every_row():
    """A NIC with two ports spreads QPs over them: no class, the walk falls back to every row."""
    topo = build_preset("dual-plane-2x200g", servers=4)
    src, dst = _permutation(topo)
    every_row = _routes(topo, "spray", src, dst, classes=False)
    by_class = _routes(topo, "spray", src, dst, classes=True)
    assert (every_row.link_weights != by_class.link_weights).nnz == 0
