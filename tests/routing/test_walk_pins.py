"""The route walk's speed-ups (issue 16) change no bit of a result: pinned digests.

Each case routes flows with a splitting router (spray, adaptive) on a small 2-tier SuperPOD and a
3-tier Clos (intact, and with one spine -> core link at a quarter of its capacity, where the adaptive
split is uneven), one walk per leaf-pair class and by stages (:mod:`gpuwait.routing.stages`), and
hashes the routes' parts (own and class weights, row classes, latencies), the max-min rates
(:func:`~gpuwait.engine.flow.max_min_rates` on the shared classes) and the bytes per link. The pins were
computed with the walk before the speed-ups (commit 320a13b: copies of every state at every hop, a
dict lookup per stage pair, first and last hops found by comparing each triplet's ends); a change to
the walk that moves any bit of these must say why and re-pin (``python tests/routing/test_walk_pins.py``
prints the table). Bit-for-bit pins hold on one platform's numpy: a different numpy may round sums
differently, which is a reason to re-pin, not a model change.

Also checked against their definitions: the per-link host-end code that tells a representative's first
and last hop, and the stage pairs' lookup of the pairs walked before.
"""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import pytest

import gpuwait.routing.paths as paths
from gpuwait.engine.flow import SharedWeights, max_min_rates
from gpuwait.spec import ClusterSpec, RoutingSpec
from gpuwait.topology import build_preset, build_topology

FABRICS = ("superpod-2tier", "clos-3tier", "clos-3tier-degraded")
PATTERNS = ("ring", "permutation", "alltoall")
# computed at commit 320a13b, before the speed-ups; the staged cases (True) re-pinned when the stages' last
# stage became a side part per leaf-pair class: with their latencies summed as before (own links with the
# last stage, then the class's) all 18 gave the old pins; only the latencies' order of summation moved a bit.
# The 12 staged 3-tier cases re-pinned again when the stages' way up became a side part per source group
# (Routes.class_sides): with their latencies summed as before (own, the joined class, the last stage) all
# 18 give the old pins (weights, rates and bytes per link bit-identical); only the latency's order moved
PINS = {
    ('superpod-2tier', 'spray', 'ring', False): "4430bf9320fce0df",
    ('superpod-2tier', 'spray', 'ring', True): "4430bf9320fce0df",
    ('superpod-2tier', 'spray', 'permutation', False): "a76a7be272917c06",
    ('superpod-2tier', 'spray', 'permutation', True): "29f3ed5406fd10ab",
    ('superpod-2tier', 'spray', 'alltoall', False): "6b442881f19493fe",
    ('superpod-2tier', 'spray', 'alltoall', True): "4b305eb6b67b0eef",
    ('superpod-2tier', 'adaptive', 'ring', False): "4430bf9320fce0df",
    ('superpod-2tier', 'adaptive', 'ring', True): "4430bf9320fce0df",
    ('superpod-2tier', 'adaptive', 'permutation', False): "a76a7be272917c06",
    ('superpod-2tier', 'adaptive', 'permutation', True): "29f3ed5406fd10ab",
    ('superpod-2tier', 'adaptive', 'alltoall', False): "6b442881f19493fe",
    ('superpod-2tier', 'adaptive', 'alltoall', True): "4b305eb6b67b0eef",
    ('clos-3tier', 'spray', 'ring', False): "4d0f1ba40810a01d",
    ('clos-3tier', 'spray', 'ring', True): "936cd13c1c43180f",
    ('clos-3tier', 'spray', 'permutation', False): "072cf23a016f0fb7",
    ('clos-3tier', 'spray', 'permutation', True): "da51ae4f47d72b6c",
    ('clos-3tier', 'spray', 'alltoall', False): "de3e8fbba099d967",
    ('clos-3tier', 'spray', 'alltoall', True): "4acee7d539280d6e",
    ('clos-3tier', 'adaptive', 'ring', False): "4d0f1ba40810a01d",
    ('clos-3tier', 'adaptive', 'ring', True): "936cd13c1c43180f",
    ('clos-3tier', 'adaptive', 'permutation', False): "072cf23a016f0fb7",
    ('clos-3tier', 'adaptive', 'permutation', True): "da51ae4f47d72b6c",
    ('clos-3tier', 'adaptive', 'alltoall', False): "de3e8fbba099d967",
    ('clos-3tier', 'adaptive', 'alltoall', True): "4acee7d539280d6e",
    ('clos-3tier-degraded', 'spray', 'ring', False): "4d0f1ba40810a01d",
    ('clos-3tier-degraded', 'spray', 'ring', True): "936cd13c1c43180f",
    ('clos-3tier-degraded', 'spray', 'permutation', False): "969f2f85e999e471",
    ('clos-3tier-degraded', 'spray', 'permutation', True): "2b862928cd0c6608",
    ('clos-3tier-degraded', 'spray', 'alltoall', False): "de3e8fbba099d967",
    ('clos-3tier-degraded', 'spray', 'alltoall', True): "4acee7d539280d6e",
    ('clos-3tier-degraded', 'adaptive', 'ring', False): "80ef3416009c75f8",
    ('clos-3tier-degraded', 'adaptive', 'ring', True): "bb4125cb49c18f87",
    ('clos-3tier-degraded', 'adaptive', 'permutation', False): "0afb01c48ccaca2b",
    ('clos-3tier-degraded', 'adaptive', 'permutation', True): "390caef2c8e0b2fa",
    ('clos-3tier-degraded', 'adaptive', 'alltoall', False): "17010400b61b1ff8",
    ('clos-3tier-degraded', 'adaptive', 'alltoall', True): "d7e65a9c9641ddf0",
}


def _topo(fabric: str):
    if fabric == "superpod-2tier":
        return build_preset("dgx-h100-superpod", servers=32)
    topo = build_topology(ClusterSpec(servers=32, server={"template": "dgx-h100"},
                                      fabric={"kind": "clos", "tiers": 3, "switch_radix": 16, "rail_optimized": False}))
    if fabric.endswith("degraded"):
        capacity = topo.link_capacity_Bps.copy()
        up = np.flatnonzero(topo.fabric_links & (topo.node_tier[topo.link_dst] > topo.node_tier[topo.link_src])
                            & (topo.node_tier[topo.link_src] > 1))
        capacity[up[len(up) // 3]] *= 0.25
        topo = dataclasses.replace(topo, link_capacity_Bps=capacity)
    return topo


def _flows(topo, pattern: str) -> tuple[np.ndarray, np.ndarray]:
    gpus = topo.gpu_node.ravel()
    if pattern == "ring":  # each GPU to its rail peer on the next server
        return gpus, np.roll(gpus, -topo.gpu_node.shape[1])
    if pattern == "permutation":
        dst = np.random.default_rng(3).permutation(gpus)
        return gpus[gpus != dst], dst[gpus != dst]
    ends = topo.gpu_node[:, [0, 3]].ravel()  # all-to-all between GPUs 0 and 3 of every server
    src, dst = np.repeat(ends, len(ends)), np.tile(ends, len(ends))
    return src[src != dst], dst[src != dst]


def _digest(fabric: str, kind: str, pattern: str, staged: bool) -> str:
    topo = _topo(fabric)
    src, dst = _flows(topo, pattern)
    old = paths._STAGES_MIN_CLASSES
    paths._STAGES_MIN_CLASSES = 0 if staged else 1 << 60
    try:
        staged_routes = paths.route_flows(topo, RoutingSpec(kind=kind), src, dst)
    finally:
        paths._STAGES_MIN_CLASSES = old
    # the stages' last stage is a side part per leaf-pair class since the pins; joined, the own weights are
    # the ones pinned (the latencies and bytes per link the same sums in another order: equal to rounding)
    routes = staged_routes.sides_joined()
    shared = SharedWeights(routes.row_class, np.ones(routes.n_rows), routes.class_weights)
    rate, _ = max_min_rates(routes.own_weights, topo.link_capacity_Bps, None, shared=shared)
    digest = hashlib.sha256()
    for matrix in (routes.own_weights, routes.class_weights):
        for array in (matrix.data, matrix.indices, matrix.indptr):
            digest.update(np.ascontiguousarray(array).tobytes())
    size_bytes = np.linspace(1.0, 2.0, len(src)) * 2**20
    for array in (routes.row_class, routes.path_latency_s, rate, routes.bytes_per_link(size_bytes)):
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()[:16]


CASES = [(f, k, p, s) for f in FABRICS for k in ("spray", "adaptive") for p in PATTERNS for s in (False, True)]


@pytest.mark.parametrize("fabric, kind, pattern, staged", CASES)
def test_walk_bit_identical_to_before(fabric: str, kind: str, pattern: str, staged: bool) -> None:
    assert _digest(fabric, kind, pattern, staged) == PINS[(fabric, kind, pattern, staged)]


def test_host_end_code_finds_first_and_last_hops() -> None:
    """The code equals its definition on walked triplets: a walk's first link leaves its start,
    its last enters its target, and every other link joins two switches."""
    topo = _topo("clos-3tier")
    src, dst = _flows(topo, "permutation")
    start = paths._network_endpoint(topo, src, dst, np.zeros(len(src), np.int64))
    target = paths._network_endpoint(topo, dst, src, np.zeros(len(src), np.int64))
    keep = topo.node_server[src] != topo.node_server[dst]
    start, target = start[keep], target[keep]
    n = len(start)
    per_row = dict(key_bytes=np.zeros((n, 0), np.uint8), qp=np.zeros(n, np.int64), dest_index=np.zeros(n, np.int64),
                   demand_Bps=np.ones(n), background_Bps=None)
    for kind in ("spray", "adaptive"):
        rows, links, _ = paths._walk_all(topo, RoutingSpec(kind=kind), paths.get_router(kind), start, target, per_row,
                                         lambda i, err: err)
        end = paths._link_host_ends(topo)[links]
        assert np.array_equal((end & 1) > 0, topo.link_src[links] == start[rows])
        assert np.array_equal((end & 2) > 0, topo.link_dst[links] == target[rows])
        assert ((end & 1) > 0).sum() == n and ((end & 2) > 0).sum() == n


def test_stage_pairs_keep_their_ids() -> None:
    """Pairs met again (the next round) get the ids they got when first walked; new ones are
    numbered after them in code order, as the dict the lookup replaced numbered them."""
    from gpuwait.routing.stages import _PairStage

    topo = _topo("clos-3tier")
    stage = _PairStage(topo, RoutingSpec(kind="spray"), paths.get_router("spray"), stop_at_class=False)
    leaves = np.flatnonzero(topo.switch_nodes & (topo.node_tier == 1))
    nics = topo.nic_node[:, 0]
    leaf_of_nic = topo.link_dst[paths.single_uplinks(topo)[nics]]
    rng = np.random.default_rng(5)
    seen: dict[int, int] = {}
    for _ in range(3):
        i = rng.integers(0, len(nics), 40)
        a, b = leaves[rng.integers(0, len(leaves), 40)], nics[i]
        ok = leaf_of_nic[i] != a
        a, b = a[ok], b[ok]
        ids = stage.ids(a, b, topo.n_nodes, a, b, lambda j, err: err)
        for code in np.unique(a * topo.n_nodes + b):  # the reference numbering: new codes in sorted order
            seen.setdefault(int(code), len(seen))
        assert ids.tolist() == [seen[int(x)] for x in a * topo.n_nodes + b]
    assert len(stage.start) == len(seen)


if __name__ == "__main__":
    for case in CASES:
        print(f"    {case!r}: \"{_digest(*case)}\",")
