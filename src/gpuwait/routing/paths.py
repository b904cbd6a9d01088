"""Paths of flows through a topology: ECMP, InfiniBand static routes, adaptive routing, spraying.

Pure functions over a :class:`~gpuwait.topology.Topology`. A route is the set of links a flow
crosses with the fraction of its bytes on each (1.0 on every link of a single path; fractions
that add up per hop for a flow split over equal-cost paths). All flows advance together hop by
hop, so routing 16,384 flows costs a few numpy passes, not a Python loop per flow.

How each router picks among the equal-cost next hops is in :mod:`gpuwait.routing.routers`:
the walk here finds the candidates at every hop and calls the chooser the routing kind registered.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from functools import cached_property, partial

import networkx as nx
import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import shortest_path

from gpuwait.arrays import rank_within_groups
from gpuwait.errors import RoutingError
from gpuwait.routing.hashing import IPPROTO_TCP, IPPROTO_UDP, ROCEV2_UDP_DPORT, FiveTuple, qp_numbers, rocev2_udp_sport
from gpuwait.routing.routers import Hop, Router, get_router
from gpuwait.spec.cluster import RoutingSpec
from gpuwait.topology.model import LinkKind, Network, NodeKind, Topology

_SPLIT_CHUNK_ROWS = 1024
# A single-path walk of more rows than this walks them this many at a time: each hop's temporaries (a dozen
# or so per state) then stay below glibc's largest mmap threshold (32 MB) and are reused from the heap, not
# mapped and paged in afresh (8.1 M rows at 131,072 GPUs: 65 MB each)
_SINGLE_PATH_CHUNK_ROWS = 1 << 20
_MAX_HOPS = 32
_CANDIDATE_BLOCK = 1 << 22  # candidate next hops weighed per numpy pass


def _part_weights(row_class: np.ndarray | sp.csr_matrix, class_weights: sp.csr_matrix, shape: tuple[int, int]
                  ) -> sp.csr_matrix:
    """(R, L) a shared part's weights copied into its rows (``row_class``: a class per row, or an (R, C)
    matrix of each row's scale in its classes)."""
    if sp.issparse(row_class):
        return sp.csr_matrix(row_class @ class_weights)
    has = np.flatnonzero(row_class >= 0)
    shared = class_weights[row_class[has]].tocoo()
    return sp.csr_matrix((shared.data, (has[shared.row], shared.col)), shape=shape)


def _join_class_side(row_class: np.ndarray | None, class_weights: sp.csr_matrix | None, side_of: np.ndarray,
                     side_weights: sp.csr_matrix) -> sp.csr_matrix:
    """``class_weights`` with the side part each class's rows cross added (the side's class follows the row's)."""
    assert row_class is not None and class_weights is not None
    has = row_class >= 0
    side_of_class = np.full(class_weights.shape[0], -1, np.int64)
    side_of_class[row_class[has]] = side_of[has]
    if (side_of_class[row_class[has]] != side_of[has]).any() or (side_of[~has] >= 0).any():
        raise ValueError("Routes.class_sides: a side part whose class does not follow the row's class")
    joined = (class_weights + _part_weights(side_of_class, side_weights, class_weights.shape)).tocsr()
    joined.sort_indices()
    return joined


@dataclass(frozen=True)
class Routes:
    """Routes of a set of flows, one row per QP (sub-flow).

    ``link_weights[r, l]`` is the fraction of row r's bytes that crosses link l. It is stored in two
    parts: each row's own links (``own_weights``), and a middle part shared by a class of rows
    (``class_weights[row_class[r]]``; ``row_class`` -1: none). A splitting router fans a row out over
    every equal-cost path between two leaves (1,600 links per row in a 3-tier fabric of radix 64),
    and every row between the same two leaves splits alike: stored once per class, not per row.
    ``link_weights`` joins the parts (built on first use; the max-min solve of a collective works
    on the parts, see :func:`gpuwait.engine.flow.max_min_rates`).
    """

    flow_index: np.ndarray  # (R,) index of the requested flow each row belongs to
    qp_index: np.ndarray  # (R,) QP number within the connection, 0..qps-1
    own_weights: sp.csr_matrix  # (R, L) links of each row's own
    path_latency_s: np.ndarray  # (R,) weight-averaged latency of the row's links
    udp_sport: np.ndarray  # (R,) RoCEv2/TCP source port used for hashing, -1 where none
    row_class: np.ndarray | None = None  # (R,) class of each row's shared middle part, -1 for none
    class_weights: sp.csr_matrix | None = None  # (C, L) the shared middle part of each class
    # more shared parts, (row_class, class_weights) each: a row may be in one class of each (the stages'
    # last stage per leaf-pair class, gpuwait.routing.stages; an all-to-all group's averaged source and
    # destination sides, gpuwait.fabric.alltoall). A part's row_class may instead be an (R, C) sparse
    # matrix of each row's scale in every class it crosses (an all-to-all group's last hops: one class
    # per switch above the destination pod). A consumer of one shared part joins them: sides_joined()
    side_classes: tuple[tuple[np.ndarray | sp.csr_matrix, sp.csr_matrix], ...] = ()
    # the side parts (indices) whose class follows the row's class: part of its middle, kept apart because
    # many classes share them (the stages' way up, one per source leaf's group for every destination pod)
    class_sides: tuple[int, ...] = ()

    @cached_property
    def link_weights(self) -> sp.csr_matrix:
        """``(R, L)`` every row's links: its own and its class's."""
        parts = list(self.side_classes)
        if self.class_weights is not None and self.row_class is not None:
            parts.insert(0, (self.row_class, self.class_weights))
        if not parts:
            return self.own_weights
        matrix = self.own_weights
        for row_class, class_weights in parts:
            matrix = matrix + _part_weights(row_class, class_weights, self.own_weights.shape)
        matrix = matrix.tocsr()
        matrix.sort_indices()
        return matrix

    def link_load(self, per_row: np.ndarray) -> np.ndarray:
        """``(L,)`` sum over rows of ``per_row[r] x link_weights[r]`` (a rate or bytes per link), from the parts."""
        per_row = np.asarray(per_row, float)
        load = self.own_weights.T @ per_row
        parts = list(self.side_classes)
        if self.class_weights is not None and self.row_class is not None:
            parts.insert(0, (self.row_class, self.class_weights))
        for row_class, class_weights in parts:
            if sp.issparse(row_class):
                per_class = np.asarray(row_class.T @ per_row).ravel()
            else:
                has = row_class >= 0
                per_class = np.bincount(row_class[has], weights=per_row[has], minlength=class_weights.shape[0])
            load = load + class_weights.T @ per_class
        return np.asarray(load).ravel()

    def sides_joined(self, keep_class_sides: bool = False) -> Routes:
        """These routes with the side parts (:attr:`side_classes`) copied into each row's own weights,
        those that follow the row's class (:attr:`class_sides`) into the class's part: for a consumer
        that knows only the one shared part (``row_class``, ``class_weights``). ``keep_class_sides``:
        those stay side parts (a consumer that solves several parts but wants the others joined)."""
        if not self.side_classes:
            return self
        matrix, class_weights, kept = self.own_weights, self.class_weights, []
        for i, (row_class, weights) in enumerate(self.side_classes):
            if i not in self.class_sides:
                matrix = matrix + _part_weights(row_class, weights, matrix.shape)
            elif keep_class_sides:
                kept.append((row_class, weights))
            else:
                class_weights = _join_class_side(self.row_class, class_weights, row_class, weights)
        matrix = matrix.tocsr()
        matrix.sort_indices()
        return replace(self, own_weights=matrix, class_weights=class_weights, side_classes=tuple(kept),
                       class_sides=tuple(range(len(kept))))

    @property
    def n_rows(self) -> int:
        return len(self.flow_index)

    def links_of_row(self, row: int) -> tuple[np.ndarray, np.ndarray]:
        """(link ids, weights) of one row."""
        start, end = self.link_weights.indptr[row], self.link_weights.indptr[row + 1]
        return self.link_weights.indices[start:end], self.link_weights.data[start:end]

    def ordered_links(self, row: int, topo: Topology) -> tuple[np.ndarray, np.ndarray]:
        """(link ids, weights) of one row in path order, from the source; links of a split share a hop."""
        links, weights = self.links_of_row(row)
        order = np.argsort(hop_depth(topo, links), kind="stable")
        return links[order], weights[order]

    def flows_per_link(self, n_links: int) -> np.ndarray:
        """Number of distinct flows (not QPs) with any bytes on each link."""
        rows, links = self.link_weights.nonzero()
        pairs = np.unique(self.flow_index[rows].astype(np.int64) * n_links + links)
        return np.bincount(pairs % n_links, minlength=n_links)

    def per_qp(self, per_flow: np.ndarray) -> np.ndarray:
        """A per-flow quantity (bytes, a rate cap) split evenly over each flow's QP rows, as NCCL
        stripes a connection over its QPs."""
        qps = np.bincount(self.flow_index)[self.flow_index]
        return np.asarray(per_flow, float)[self.flow_index] / qps

    def bytes_per_link(self, flow_size_bytes: np.ndarray) -> np.ndarray:
        """Bytes each link carries when flow f sends ``flow_size_bytes[f]`` split evenly over its QPs."""
        return self.link_load(self.per_qp(flow_size_bytes))



def hop_depth(topo: Topology, links: np.ndarray) -> np.ndarray:
    """Hop number of each link of one route, walking from the node that no link enters."""
    src, dst = topo.link_src[links], topo.link_dst[links]
    depth = np.full(len(links), len(links), np.int64)
    frontier = np.setdiff1d(src, dst)
    for hop in range(len(links)):
        here = np.isin(src, frontier) & (depth == len(links))
        if not here.any():
            break
        depth[here] = hop
        frontier = np.unique(dst[here])
    return depth


# ------------------------------------------------------------------------------------ server-local paths
def _server_blocks(topo: Topology) -> np.ndarray:
    """(S, K) global node ids of every server in a common local order."""
    in_server = np.flatnonzero(topo.node_server >= 0)
    order = in_server[np.argsort(topo.node_server[in_server], kind="stable")]
    return order.reshape(topo.n_servers, -1)


def _local_path_table(topo: Topology, blocks: np.ndarray) -> dict[tuple[int, int], list[int]]:
    """Shortest hop paths between local nodes of server 0, as local indices (same for all servers)."""
    local_of = {int(g): i for i, g in enumerate(blocks[0])}
    graph = nx.Graph()
    graph.add_nodes_from(range(blocks.shape[1]))
    # links into an NVLink domain's switch leave the server (nvlD.nvsw): route_flows takes those paths itself
    server_links = np.flatnonzero((topo.link_network == Network.SERVER) & (topo.node_server[topo.link_src] == 0)
                                  & (topo.node_server[topo.link_dst] == 0))
    for link in server_links:
        graph.add_edge(local_of[int(topo.link_src[link])], local_of[int(topo.link_dst[link])])
    # NVLink first: with an NVSwitch the GPU-GPU path is gpu->nvsw->gpu, not over PCIe
    return {(a, b): path for a, paths in nx.all_pairs_shortest_path(graph) for b, path in paths.items()}


@dataclass(frozen=True)
class _Context:
    topo: Topology
    blocks: np.ndarray
    local_index: np.ndarray  # node id -> local index within its server (-1 outside servers)
    local_paths: dict
    # (a, b) local indices -> (S,) the link a -> b in every server (-1 where none): found once per topology,
    # so a hop of a million server-local path rows is one gather, not a search of every link per row
    hop_links: dict = field(default_factory=dict)


def _context(topo: Topology) -> _Context:
    cache = topo.__dict__.setdefault("_routing_cache", {})
    if "context" not in cache:
        blocks = _server_blocks(topo)
        local_index = np.full(topo.n_nodes, -1, np.int64)
        local_index[blocks.ravel()] = np.tile(np.arange(blocks.shape[1]), topo.n_servers)
        cache["context"] = _Context(topo, blocks, local_index, _local_path_table(topo, blocks))
    return cache["context"]


def _local_segments(ctx: _Context, src: np.ndarray, dst: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Links of server-internal paths src[i] -> dst[i] (same server): list of (row, link) arrays per hop."""
    topo = ctx.topo
    rows_out, links_out = [], []
    a_local, b_local = ctx.local_index[src], ctx.local_index[dst]
    servers = topo.node_server[src]
    pair_key = a_local * ctx.blocks.shape[1] + b_local
    for key, rows in _rows_by_key(pair_key):
        a, b = divmod(int(key), ctx.blocks.shape[1])
        path = ctx.local_paths.get((a, b))
        if path is None:
            raise RoutingError(f"no path inside server from {topo.node_name[src[rows[0]]]} to {topo.node_name[dst[rows[0]]]}")
        server_of_row = servers[rows]
        for h in range(len(path) - 1):
            rows_out.append(rows)
            links_out.append(_hop_links(ctx, path[h], path[h + 1])[server_of_row])
    return list(zip(rows_out, links_out))


def _rows_by_key(key: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """Each distinct key (in increasing order) and its rows (in increasing order), from one stable sort:
    a server's local pairs are a few hundred keys at most, so the sort runs on 16-bit keys, which numpy
    sorts by radix in linear time, instead of one pass over every row per key."""
    if not len(key):
        return
    small = key.min() >= 0 and key.max() < 1 << 16
    order = np.argsort(key.astype(np.uint16) if small else key, kind="stable")
    sorted_key = key[order]
    starts = np.flatnonzero(np.r_[True, sorted_key[1:] != sorted_key[:-1]])
    ends = np.r_[starts[1:], len(key)]
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        yield int(sorted_key[start]), order[start:end]


def _hop_links(ctx: _Context, a: int, b: int) -> np.ndarray:
    """(S,) the link from local node ``a`` to local node ``b`` in every server (-1 where none)."""
    links = ctx.hop_links.get((a, b))
    if links is None:
        links = ctx.topo.links_between(ctx.blocks[:, a], ctx.blocks[:, b])
        ctx.hop_links[(a, b)] = links
    return links


# ------------------------------------------------------------------------------------ fabric distances
def _leaf_rows(graph: sp.csr_matrix, leaves: list[int]) -> tuple[dict[int, np.ndarray], dict[int, int]]:
    """Every switch's hop distance to each of ``leaves`` (``graph`` holds reversed fabric links),
    and each leaf's class representative.

    Leaves cabled to the same set of switches (every leaf of a pod in a fat tree, of a whole
    leaf-spine) are at the same distance from every other switch: a path to a leaf ends with one
    hop from one of those switches. So one BFS serves them all, and only the two leaves' own
    entries differ: 0 at itself, and the leaf-to-leaf distance, which on cables (links both
    ways) is the same either way round. One BFS per pod instead of per leaf: 64 BFS instead of
    4,096 in a 131,072-GPU fabric of radix 128. The first leaf of each such class represents it.
    """
    graph = graph.copy()
    graph.sum_duplicates()  # sorted, duplicate-free neighbour lists (parallel cables are one edge)
    symmetric = (graph.astype(bool) != graph.T.astype(bool)).nnz == 0
    first_of_class: dict[tuple, int] = {}
    representative = {}
    for leaf in leaves:
        neighbours = tuple(graph.indices[graph.indptr[leaf]:graph.indptr[leaf + 1]].tolist())
        # without cables both ways the leaf-to-leaf entries differ, so each leaf gets its own BFS
        key = neighbours if symmetric else (leaf,)
        representative[leaf] = first_of_class.setdefault(key, leaf)
    reps = list(first_of_class.values())
    rep_rows = dict(zip(reps, shortest_path(graph, unweighted=True, indices=reps).astype(np.float32)))
    out = {}
    for leaf, rep in representative.items():
        row = rep_rows[rep]
        if leaf != rep:
            row = row.copy()
            row[rep], row[leaf] = row[leaf], 0.0
        out[leaf] = row
    return out, representative


class _Distances:
    """Hop distances to target endpoints, computed from leaf-to-switch BFS rows only.

    A target's distance from a switch is 1 + the switch's distance to the nearest leaf the target
    hangs off. Rows are computed for the leaves that are needed, over switches only, so a
    16,384-endpoint fabric needs a few MB, not an endpoint x node matrix (131,072 endpoints:
    4,096 leaves x 12,288 switches, 200 MB of float32).
    """

    def __init__(self, topo: Topology, targets: np.ndarray) -> None:
        cache = topo.__dict__.setdefault("_routing_cache", {})
        if "switch_index" not in cache:
            switches = np.flatnonzero(topo.switch_nodes)
            switch_index = np.full(topo.n_nodes, -1, np.int64)
            switch_index[switches] = np.arange(len(switches))
            fabric = topo.fabric_links
            # reversed edges: BFS from a leaf gives every switch's distance *to* that leaf
            graph = sp.csr_matrix((np.ones(int(fabric.sum())), (switch_index[topo.link_dst[fabric]],
                                                                 switch_index[topo.link_src[fabric]])),
                                  shape=(len(switches), len(switches)))
            uplink = topo.host_links & topo.switch_nodes[topo.link_dst]
            src, dst = topo.link_src[uplink], switch_index[topo.link_dst[uplink]]
            order = np.lexsort((dst, src))
            src, dst = src[order], dst[order]
            rank = rank_within_groups(src)
            up_leaf = np.full((topo.n_nodes, int(rank.max()) + 1 if len(rank) else 1), -1, np.int64)
            up_leaf[src, rank] = dst
            # every node's links to switches, in id order, with the switch index of their far end
            to_switch = np.flatnonzero(topo.switch_nodes[topo.link_dst])
            to_switch = to_switch[np.argsort(topo.link_src[to_switch], kind="stable")]
            out_indptr = np.zeros(topo.n_nodes + 1, np.int64)
            np.cumsum(np.bincount(topo.link_src[to_switch], minlength=topo.n_nodes), out=out_indptr[1:])
            switch_out_links = (out_indptr, to_switch.astype(np.int64), switch_index[topo.link_dst[to_switch]])
            cache.update(switch_index=switch_index, switch_graph=graph, up_leaf=up_leaf, leaf_rows={}, leaf_class={},
                         switch_out_links=switch_out_links)
        self.topo = topo
        self.switch_index = cache["switch_index"]
        self.up_leaf = cache["up_leaf"]
        self._switch_out_links = cache["switch_out_links"]
        rows: dict = cache["leaf_rows"]
        leaf_class: dict = cache["leaf_class"]
        needed = np.unique(self.up_leaf[targets])
        missing = [int(x) for x in needed if x >= 0 and int(x) not in rows]
        if missing:
            new_rows, new_class = _leaf_rows(cache["switch_graph"], missing)
            rows.update(new_rows)
            leaf_class.update(new_class)
        n_switches = cache["switch_graph"].shape[0]
        needed = needed[needed >= 0]
        class_of = np.arange(n_switches + 1)  # switch index -> its class representative (n_switches: no leaf)
        class_of[needed] = [leaf_class[int(x)] for x in needed]
        leaves = np.union1d(needed, class_of[needed])
        self.matrix = np.vstack([rows[int(leaf)] for leaf in leaves] + [np.full(n_switches, np.inf, np.float32)])
        row_of = np.full(n_switches + 1, len(leaves), np.int64)  # the last row is all inf
        row_of[leaves] = np.arange(len(leaves))
        target_leaves = np.where(self.up_leaf[targets] >= 0, self.up_leaf[targets], n_switches)
        # matrix rows of each target's leaves, and of their class representatives
        self.target_rows = row_of[target_leaves]
        self.class_rows = row_of[class_of[target_leaves]]
        self.targets = targets

    def adjacent_to_class(self, slot: np.ndarray, switch: np.ndarray) -> np.ndarray:
        """Whether each switch is cabled to the class of one of target ``slot[i]``'s leaves.

        A switch that is not weighs its next hops by the class representatives' rows: those
        differ from the target's own leaves' rows only at the class's leaves, none of which is
        its neighbour, so every target under the class gets the same next hops from it.
        """
        if self.class_rows.shape[1] == 1:  # targets under one leaf each: one flat gather, no 2-D fancy index
            at = self._class_starts[slot]
            at += switch
            return self.matrix.ravel()[at] == 1.0
        rows = self.class_rows[slot]
        return (self.matrix[rows, switch[:, None]] == 1.0).any(axis=1) if len(slot) else np.zeros(0, bool)

    @cached_property
    def _target_starts(self) -> np.ndarray:
        """Where each target's (one) row of :attr:`target_rows` starts in the flattened matrix, found once: a hop
        then gathers and adds only (8.4 M states at 131,072 GPUs)."""
        return self.target_rows[:, 0] * self.matrix.shape[1]

    @cached_property
    def _class_starts(self) -> np.ndarray:
        """:attr:`_target_starts` of :attr:`class_rows`."""
        return self.class_rows[:, 0] * self.matrix.shape[1]

    def next_hops(self, rows: np.ndarray, nodes: np.ndarray, distance: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The equal-cost next hops from ``nodes[i]`` (at ``distance[i]``) to a target whose leaves
        have the distance rows ``rows[i]`` (a row of :attr:`target_rows` or :attr:`class_rows`):
        the links to switches one hop nearer (a path never passes through an endpoint).

        Returns (i, link) pairs, grouped by i in increasing order, links of one i in id order.
        A spine of a 131,072-GPU fabric has 128 links to weigh for each destination pod, so the
        candidates are weighed in blocks to bound the memory of the intermediate arrays.
        """
        indptr, links, next_switch = self._switch_out_links
        # a switch one hop nearer is at distance - 1, i.e. its row entry is distance - 2
        want = (distance - 2.0).astype(np.float32)
        degree = indptr[nodes + 1] - indptr[nodes]
        ends = np.cumsum(degree)
        owners_out, links_out = [], []
        lo = 0
        while lo < len(nodes):
            hi = max(int(np.searchsorted(ends, ends[lo] - degree[lo] + _CANDIDATE_BLOCK, "right")), lo + 1)
            owner = np.repeat(np.arange(lo, hi), degree[lo:hi])
            block_start = ends[lo] - degree[lo]
            position = np.arange(block_start, block_start + len(owner)) \
                + np.repeat(indptr[nodes[lo:hi]] - (ends[lo:hi] - degree[lo:hi]), degree[lo:hi])
            sw = next_switch[position]
            row_distance = self.matrix[rows[owner, 0], sw]
            for k in range(1, rows.shape[1]):
                np.minimum(row_distance, self.matrix[rows[owner, k], sw], out=row_distance)
            ok = row_distance == want[owner]
            owners_out.append(owner[ok])
            links_out.append(links[position[ok]])
            lo = hi
        if not owners_out:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return np.concatenate(owners_out), np.concatenate(links_out)

    def _to_switch(self, slot: np.ndarray, switch: np.ndarray) -> np.ndarray:
        if self.target_rows.shape[1] == 1:  # a target under one leaf: one gather of its row, flat, no 2-D fancy index
            at = self._target_starts[slot]
            at += switch
            d = self.matrix.ravel()[at]
        else:
            rows = self.target_rows[slot]
            d = self.matrix[rows, switch[:, None]].min(axis=1) if len(slot) else np.zeros(0, np.float32)
        out = d.astype(float)
        out += 1.0
        return out

    def __call__(self, slot: np.ndarray, nodes: np.ndarray) -> np.ndarray:
        """Distance from ``nodes[i]`` to target ``slot[i]``."""
        out = np.full(len(nodes), np.inf)
        at_target = nodes == self.targets[slot]
        out[at_target] = 0.0
        sw = self.switch_index[nodes]
        is_switch = sw >= 0
        out[is_switch] = self._to_switch(slot[is_switch], sw[is_switch])
        other = ~is_switch & ~at_target
        if other.all():  # every row starts at an endpoint (a walk's first hop): no masked copies
            return self._from_endpoints(slot, nodes)
        if other.any():
            out[other] = self._from_endpoints(slot[other], nodes[other])
        return out

    def _from_endpoints(self, slot: np.ndarray, nodes: np.ndarray) -> np.ndarray:
        """Distance from endpoints ``nodes[i]`` (none a target) to target ``slot[i]``: one hop to the best of
        its own leaves."""
        leaves = self.up_leaf[nodes]
        best = np.full(len(nodes), np.inf)
        for k in range(leaves.shape[1]):
            ok = leaves[:, k] >= 0
            if ok.all():  # every endpoint has a k-th leaf (one each on a rail-optimized fabric)
                np.minimum(best, self._to_switch(slot, leaves[:, k]), out=best)
                continue
            d = np.full(len(nodes), np.inf)
            d[ok] = self._to_switch(slot[ok], leaves[ok, k])
            np.minimum(best, d, out=best)
        best += 1.0
        return best


# ------------------------------------------------------------------------------------ the hop-by-hop walk
# a dense table of (a, b) cells is used while it has at most this many cells per pair, plus a floor
_DENSE_CELLS_PER_PAIR, _DENSE_CELLS_MIN = 8, 1 << 20


def _unique_pairs(a: np.ndarray, b: np.ndarray, n_b: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(a * n_b + b, return_inverse=True)`` for non-negative ``a`` and ``0 <= b < n_b``.

    A hop's states take few distinct values of each (a chunk's rows, one tier's nodes, a few keys)
    but there are millions of pairs: numbering the values present and marking the pairs in a dense
    table of those is a few linear passes instead of a sort. Numbering is monotone, so the result
    (sorted unique pairs, inverse) is np.unique's.
    """
    if len(a) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    a_table, a_ids = _present_table(a)
    b_table, b_ids = _present_table(b)
    n_cells = len(a_ids) * len(b_ids)
    if n_cells > max(_DENSE_CELLS_PER_PAIR * len(a), _DENSE_CELLS_MIN):
        uniq, inv = np.unique(a.astype(np.int64) * n_b + b, return_inverse=True)
        return uniq, inv.ravel()
    cell = _index_in(a_table, a_ids, a)  # a new array: the cell numbers are made in it
    cell *= len(b_ids)
    cell += _index_in(b_table, b_ids, b)
    mark = np.zeros(n_cells, bool)
    mark[cell] = True
    used = np.flatnonzero(mark)
    rank = np.cumsum(mark) - 1
    return a_ids[used // len(b_ids)] * n_b + b_ids[used % len(b_ids)], rank[cell]


def _present(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values, sorted, and each element's index among them (by a table over 0..max)."""
    table, ids = _present_table(values)
    return ids, _index_in(table, ids, values)


def _present_table(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A table over 0..max marking the values present, and the distinct values, sorted (:func:`_present`'s
    first half: a caller that may not need each element's index does not gather it)."""
    table = np.zeros(int(values.max()) + 1, np.int64)
    table[values] = 1
    return table, np.flatnonzero(table).astype(np.int64)


def _index_in(table: np.ndarray, ids: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Each element's index among the distinct values ``ids`` (:func:`_present`'s second half; fills ``table``)."""
    table[ids] = np.arange(len(ids))
    return table[values]


def _groups(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group targets with equal distance rows: (group of each target, one target of each group)."""
    _, group_of = np.unique(rows, axis=0, return_inverse=True)
    group_of = group_of.ravel()
    first = np.zeros(int(group_of.max(initial=-1)) + 1, np.int64)
    first[group_of] = np.arange(len(group_of))  # any member stands for its group
    return group_of, first


@dataclass(frozen=True, eq=False)
class _Keys:
    """The targets of a walk and the keys their candidate next hops are found once per.

    Destinations hanging off the same leaves share every hop but the last; away from those
    leaves' neighbours, destinations under the same class of leaves (a pod) do too (see
    :func:`_leaf_rows`). Next hops are found once per (node, key): keys are leaf sets
    (``0..n_groups-1``), then endpoints one by one (an endpoint may itself be one of its
    group's destinations), then leaf-class sets.
    """

    dist: _Distances
    targets: np.ndarray  # the distinct target endpoints
    slot: np.ndarray  # (R,) each row's target, as an index into ``targets``
    group_of_slot: np.ndarray
    class_of_slot: np.ndarray
    key_slot: np.ndarray  # a target standing for each key
    key_rows: np.ndarray  # distance rows of each key
    n_groups: int  # keys 0..n_groups-1 are leaf sets
    start_distance: np.ndarray  # (R,) hops from each row's start to its target

    @classmethod
    def build(cls, topo: Topology, start: np.ndarray, target: np.ndarray) -> _Keys:
        targets, slot = _present(target)  # np.unique's values and inverse, by a table over the node ids
        dist = _Distances(topo, targets)
        start_distance = dist(slot, start)
        unreachable = ~np.isfinite(start_distance)
        if unreachable.any():
            r = int(np.flatnonzero(unreachable)[0])
            err = RoutingError(f"no path from {topo.node_name[start[r]]} to {topo.node_name[target[r]]}: "
                               "no network connects them", hint="check the endpoints' names and the fabric (`gpuwait topo`)")
            err.row = r  # type: ignore[attr-defined]  # route_flows names the flow of this row
            raise err
        n_targets = len(targets)
        group_of_slot, group_slot = _groups(dist.target_rows.reshape(n_targets, -1))
        class_of_slot, class_slot = _groups(dist.class_rows.reshape(n_targets, -1))
        key_slot = np.r_[group_slot, np.arange(n_targets), class_slot]
        key_rows = np.r_[dist.target_rows[group_slot], dist.target_rows,
                         dist.class_rows[class_slot]].reshape(len(key_slot), -1)
        return cls(dist, targets, slot, group_of_slot, class_of_slot, key_slot, key_rows, len(group_slot),
                   start_distance)

    @cached_property
    def _class_key_of_slot(self) -> np.ndarray:
        """Each target's leaf-class key (per target: one gather per hop, not an addition over every state)."""
        return self.n_groups + len(self.targets) + self.class_of_slot

    def of(self, topo: Topology, slot: np.ndarray, node: np.ndarray) -> np.ndarray:
        """Key of each (target slot, node) away from the target's leaf."""
        n_groups, n_targets = self.n_groups, len(self.targets)
        is_switch = topo.switch_nodes[node]
        if is_switch.all():  # every hop but the first: no endpoint keys, no copies
            by_class = self.dist.adjacent_to_class(slot, self.dist.switch_index[node])
            return np.where(by_class, self.group_of_slot[slot], self._class_key_of_slot[slot])
        key = n_groups + slot
        at_switch = np.flatnonzero(is_switch)
        by_class = ~self.dist.adjacent_to_class(slot[at_switch], self.dist.switch_index[node[at_switch]])
        key[at_switch] = np.where(by_class, n_groups + n_targets + self.class_of_slot[slot[at_switch]],
                                  self.group_of_slot[slot[at_switch]])
        return key


def _candidates(topo: Topology, keys: _Keys, target: np.ndarray, row: np.ndarray, node: np.ndarray,
                hops_done: int, qp: np.ndarray | None = None) -> dict:
    """The equal-cost next hops of every state, as the candidate fields of a :class:`Hop`, after
    ``hops_done`` hops of the walk.

    Away from the destination's leaf, the equal-cost next hops depend only on the node and the
    key of the destination: they are found once per such pair (a candidate set), and every
    state picks among its pair's. On the destination's leaf the only hop is the last one: a
    candidate set of its own per state: the link into the target, or, where parallel cables join the
    leaf to a multi-port NIC, the one of the port the row's QP left by (``qp`` per row; the
    receiver's port pairs with the sender's, each port its own address).
    """
    # every hop goes one nearer (the candidates are the next hops on shortest paths), so a state's
    # distance is its row's start distance less the hops done: no distance lookup per state
    d_state = keys.start_distance[row]  # a gather: a new array, changed in place
    d_state -= hops_done
    is_last = d_state == 1
    last = np.flatnonzero(is_last)
    n_keys = len(keys.key_slot)
    far: np.ndarray | slice
    if len(last):
        far = np.flatnonzero(~is_last)
        far_node, far_row, far_d = node[far], row[far], d_state[far]
    else:  # every hop but the last: all states are far, no copies
        far, far_node, far_row, far_d = slice(None), node, row, d_state
    pairs, far_pair = _unique_pairs(far_node, keys.of(topo, keys.slot[far_row], far_node), n_keys)
    set_node, set_key = pairs // n_keys, pairs % n_keys
    distance = np.empty(len(pairs))
    distance[far_pair] = far_d  # the same for every state of a pair
    link_set, links = keys.dist.next_hops(keys.key_rows[set_key], set_node, distance)
    count = np.bincount(link_set, minlength=len(pairs))
    if (count == 0).any():
        stuck = int(np.flatnonzero(count == 0)[0])
        raise RoutingError(f"routing stuck at {topo.node_name[set_node[stuck]]} on the way to "
                           f"{topo.node_name[keys.targets[keys.key_slot[set_key[stuck]]]]}")
    own_sets = len(pairs) + np.arange(len(last))
    state_set = np.empty(len(node), np.int64)
    state_set[far] = far_pair
    state_set[last] = own_sets
    count = np.r_[count, np.ones(len(last), np.int64)]
    set_start = np.cumsum(count) - count
    return dict(first=set_start[state_set], count=count[state_set],
                links=np.r_[links, _last_links(topo, node[last], target[row[last]], None if qp is None else qp[row[last]])],
                link_set=np.r_[link_set, own_sets], set_node=np.r_[set_node, node[last]], state_set=state_set)


# Above this many links into one endpoint, _links_into searches every link instead. Its loop (numpy when this was
# measured, compiled since) made one vectorized pass per incoming link of the batch's busiest destination; the search
# (Topology.links_between) one binary search per row, about log2(links) = 17-19 probes into a large fabric's sorted
# keys. On 2 M rows of rocev2-400g-2tier (1,024 and 4,096 servers: 113 k and 451 k links) the loop took 0.3-0.9 of the
# search's time up to 8 incoming links and 3.2-3.6 times it at 32 and 64: they cross between, near 16. A walk's
# endpoints have 1-5 incoming links in every preset (GPU 2, NIC 2, CPU 3-4, PCIe switch 5; an NVSwitch 8-16 on
# gb200-nvl72), so they take the loop; a fabric switch (24-64 in the presets) takes the search.
_MAX_IN_DEGREE = 16


def _last_links(topo: Topology, src: np.ndarray, dst: np.ndarray, qp: np.ndarray | None) -> np.ndarray:
    """The last hop's link from each ``src`` (a leaf) into ``dst``: the first, or with parallel cables into
    ``dst`` (a multi-port NIC's ports on one leaf) the one of port ``qp mod ports``, as the first hop chose
    (:mod:`gpuwait.routing.routers`)."""
    # one lane per GPU: no multi-port NIC, so the first link is the only one (and the in-degree search is faster)
    if qp is None or connection_lanes(topo) == 1:
        return _links_into(topo, src, dst)
    return topo.parallel_links(src, dst, qp)


def _links_into(topo: Topology, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """``topo.links_between(src, dst)`` for endpoints ``dst`` (a walk's last hop): the lowest-id link from
    ``src[i]`` into ``dst[i]`` (-1 where none), found among ``dst[i]``'s few incoming links rather than by
    a search of every link per row (8.4 M rows at 131,072 GPUs)."""
    cache = topo.__dict__.setdefault("_routing_cache", {})
    if "in_links" not in cache:
        indptr = np.zeros(topo.n_nodes + 1, np.int64)
        np.cumsum(np.bincount(topo.link_dst, minlength=topo.n_nodes), out=indptr[1:])
        cache["in_links"] = (indptr, np.argsort(topo.link_dst, kind="stable"))  # by node, then link id
    indptr, order = cache["in_links"]
    first = indptr[dst]
    degree = indptr[dst + 1] - first
    if not len(dst) or degree.max() > _MAX_IN_DEGREE:
        return topo.links_between(src, dst)
    from gpuwait.routing.kernels import first_link_from  # numba, loaded on first use

    return first_link_from(indptr, order, topo.link_src, src, dst)


@dataclass(frozen=True, eq=False)
class _Step:
    """A hop's structure, the same in every round of a splitting router's walk of the same rows:
    which states stop, which walk on (their rows and nodes) and their candidates; ``merge`` is filled
    after the router's choice: (the branches kept, their merge's unique (row, node) pairs and inverse)."""

    here: np.ndarray | None  # states that stop here (``stop``), None without a stop
    live: np.ndarray | None  # states that walk on, None for all (no copies); unused where ``row`` is None
    row: np.ndarray | None  # the walking states' rows, None where none walks on
    node: np.ndarray | None
    candidates: dict
    merge: list


def _step(topo: Topology, keys: _Keys, target: np.ndarray, row: np.ndarray, node: np.ndarray, hops_done: int,
          stop, qp: np.ndarray | None = None) -> _Step:
    live = node != target[row]
    here = None
    if stop is not None:
        here = live & stop[0](keys, row, node, hops_done)
        live &= ~here
    if not live.any():
        return _Step(here, None, None, None, {}, [])
    if live.all():  # a row reaches its target at the last hop only: skip the copies before that
        return _Step(here, None, row, node, _candidates(topo, keys, target, row, node, hops_done, qp), [])
    row, node = row[live], node[live]
    return _Step(here, live, row, node, _candidates(topo, keys, target, row, node, hops_done, qp), [])


def _same_branches(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    """Whether two rounds kept the same branches (a mask each, None: every branch)."""
    return (a is None and b is None) or (a is not None and b is not None and np.array_equal(a, b))


def _walk_fabric(topo: Topology, spec: RoutingSpec, router: Router, start: np.ndarray, target: np.ndarray,
                 per_row: dict, stop=None, memo: dict | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_walk_hops`' (row, link, weight) triplets, every hop's joined."""
    hops = _walk_hops(topo, spec, router, start, target, per_row, stop, memo)
    if not hops:  # every row stopped where it started (``stop``)
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    rows, links, w = (np.concatenate(x) for x in zip(*hops, strict=True))
    return rows, links, w


def _walk_hops(topo: Topology, spec: RoutingSpec, router: Router, start: np.ndarray, target: np.ndarray,
               per_row: dict, stop=None, memo: dict | None = None) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Walk rows from their source NIC/endpoint to the target endpoint, letting ``router`` choose
    at every hop. ``per_row`` holds the :class:`Hop` fields given per route row. Returns
    (row, link, weight) triplets, one per hop. ``stop``: None, or ``(keys, row, node) -> mask, stopped list``:
    states the mask marks leave the walk where they are, appended to the list as (row, node, fraction).
    ``memo``: None, or a dict a splitting router's rounds over the same rows (and ``stop``) keep: each
    hop's structure (:class:`_Step`) is the same every round but where the router drops a branch (a
    full link), so a round reuses the steps while the branches kept are those of the round before and
    walks only the fractions (16,384-GPU all-to-all: 3 of 4 adaptive rounds)."""
    if router.single_path:
        memo = None  # one round, and single paths keep no merges
    reuse = memo is not None and "start" in memo and np.array_equal(memo["start"], start) \
        and np.array_equal(memo["target"], target)
    if memo is not None and not reuse:
        memo.clear()
        memo.update(start=start.copy(), target=target.copy(), keys=_Keys.build(topo, start, target), steps=[])
    keys = _Keys.build(topo, start, target) if memo is None else memo["keys"]
    steps: list[_Step] = [] if memo is None else memo["steps"]
    R = len(start)
    if router.single_path and stop is None and R > _SINGLE_PATH_CHUNK_ROWS:
        # a row's path depends on its own state only: the chunks' hops, chunk after chunk, hold every row's
        # hops in the same order (as _assemble reads them)
        return [hop for lo in range(0, R, _SINGLE_PATH_CHUNK_ROWS)
                for hop in _walk_states(topo, spec, router, keys, target, per_row,
                                        np.arange(lo, min(lo + _SINGLE_PATH_CHUNK_ROWS, R)),
                                        start[lo:lo + _SINGLE_PATH_CHUNK_ROWS].astype(np.int64), None, [], False)]
    return _walk_states(topo, spec, router, keys, target, per_row, np.arange(R), start.astype(np.int64), stop,
                        steps, reuse)


def _walk_states(topo: Topology, spec: RoutingSpec, router: Router, keys: _Keys, target: np.ndarray, per_row: dict,
                 row: np.ndarray, node: np.ndarray, stop, steps: list[_Step], reuse: bool
                 ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """:func:`_walk_hops` of the rows ``row`` (starting at ``node``), with the walk's keys and its ``steps``
    (kept between a splitting router's rounds; ``reuse``: whether those steps are this round's)."""
    frac = np.ones(len(row))
    stride = np.ones(len(row), np.int64)  # D-mod-k: product of earlier up-choices
    rows_out, links_out, w_out = [], [], []
    for hops_done in range(_MAX_HOPS):
        if not (reuse and hops_done < len(steps)):
            reuse = False
            del steps[hops_done:]
            steps.append(_step(topo, keys, target, row, node, hops_done, stop, per_row.get("qp")))
        step = steps[hops_done]
        if step.here is not None:
            stop[1].append((row[step.here], node[step.here], frac[step.here]))
        if step.row is None or step.node is None:
            break
        if step.live is not None:
            frac, stride = frac[step.live], stride[step.live]
        row, node = step.row, step.node
        hop = Hop(topo, spec, row, node, frac, stride, **step.candidates, **per_row)
        chosen = router.choose(hop)
        weight = chosen.weight
        nxt = topo.link_dst[chosen.links]
        if router.single_path:
            # one path per row: nothing to merge (and nothing to drop but zero weights: no copies without any).
            # One next hop per state, in state order (Router.single_path): the states' rows, not a gather of them
            rows = row
            keep = weight > 0
            kept_all = bool(keep.all())
            rows_out.append(rows if kept_all else rows[keep])
            links_out.append(chosen.links if kept_all else chosen.links[keep])
            w_out.append(weight if kept_all else weight[keep])
            row, node, frac = rows, nxt.astype(np.int64, copy=False), weight
            stride = stride if chosen.stride is None else chosen.stride
            continue
        rows, links = row[chosen.owner], chosen.links
        keep = weight > 0
        kept_all = bool(keep.all())
        if not kept_all:  # spraying never drops a branch; adaptive routing only where a link is full
            rows, links, weight, nxt = rows[keep], links[keep], weight[keep], nxt[keep]
        rows_out.append(rows)
        links_out.append(links)
        w_out.append(weight)
        # merge branches that reach the same node
        kept = None if kept_all else keep
        if reuse and step.merge and _same_branches(step.merge[0], kept):
            uniq, inv = step.merge[1], step.merge[2]
        else:
            uniq, inv = _unique_pairs(rows, nxt, topo.n_nodes)
            step.merge[:] = [kept, uniq, inv]
            reuse = False  # the next hop's states may differ from the round before's
        frac = np.bincount(inv, weights=weight).astype(float)
        stride = np.ones(len(uniq), np.int64)  # strides only matter on single paths (static)
        row, node = uniq // topo.n_nodes, uniq % topo.n_nodes
    else:
        raise RoutingError(f"routing did not converge in {_MAX_HOPS} hops (a loop in the fabric?)")
    return list(zip(rows_out, links_out, w_out, strict=True))


# ------------------------------------------------------------------------------------ public API
# an NVSwitch is an endpoint only for in-switch reduction (NVLS) by GPUs of its own server
_ENDPOINT_KINDS = (NodeKind.GPU, NodeKind.NIC, NodeKind.STORAGE_SERVER, NodeKind.STORAGE_NIC, NodeKind.NVSWITCH)


def _endpoints(topo: Topology, nodes) -> np.ndarray:
    ids = np.array([topo.node_id(n) for n in nodes], dtype=np.int64) if not isinstance(nodes, np.ndarray) else nodes.astype(np.int64)
    kinds = topo.node_kind[ids]
    bad = ~np.isin(kinds, _ENDPOINT_KINDS)
    if bad.any():
        node = int(ids[np.flatnonzero(bad)[0]])
        raise RoutingError(f"endpoint {topo.node_name[node]!r} is a {topo.kind_of(node)}; expected a GPU, NIC or storage server",
                           hint="flows start and end at GPUs (s0.gpu3), NICs (s0.nic3) or storage servers (stor0)")
    return ids


def _network_endpoint(topo: Topology, node: np.ndarray, peer: np.ndarray, qp: np.ndarray) -> np.ndarray:
    """The NIC (or storage server) that carries traffic between node and a peer on another server.

    A GPU with several NICs of its own spreads its QPs over them round-robin, as NCCL spreads
    channels over a GPU's NICs; a connection has at least one QP row per NIC lane
    (:func:`connection_rows`). With multi-port NICs QP q leaves by port q mod ports, and its NIC is
    (q div ports) mod NICs, so that every (NIC, port) lane gets a QP."""
    gpu = topo.node_kind[node] == NodeKind.GPU
    if not gpu.any():
        return node.copy()
    out = None
    if not gpu.all():  # every row a GPU (a collective's): no masked copies, and the NICs are the answer
        out = node.copy()
        node, peer, qp = node[gpu], peer[gpu], qp[gpu]
    server = topo.node_server[node]
    local = node - topo.gpu_node[server, 0]
    to_storage_net = topo.node_network[peer] == Network.STORAGE
    if topo.nic_node.shape[1] == 0 and not to_storage_net.all():
        raise RoutingError(f"{topo.node_name[node[0]]} has no compute NIC to reach another server")
    if topo.nic_node.shape[1]:
        n_choices = (topo.gpu_nics >= 0).sum(axis=1)  # per local GPU
        if (n_choices == 1).all():  # one NIC per GPU, whatever the QP: one flat gather of nic_node[server, it]
            nic = topo.nic_node.ravel()[server * topo.nic_node.shape[1] + topo.gpu_nics[:, 0][local]]
        else:
            # the port is q mod ports (first and last hops), so the NIC takes the next digit of q: QPs
            # 0..NICs x ports - 1 then reach every (NIC, port) lane, not only the pairs of equal parity
            ports = np.maximum(nic_ports(topo)[topo.nic_node[server, topo.gpu_nics[local, 0]]], 1)
            nic = topo.nic_node[server, topo.gpu_nics[local, (qp // ports) % n_choices[local]]]
        if len(topo.gpu_nic_override):
            moved = topo.gpu_nic_override[node]
            nic = np.where(moved >= 0, moved, nic)
    else:
        nic = np.full(len(server), -1)
    if to_storage_net.any():
        snics = np.flatnonzero(topo.node_kind == NodeKind.STORAGE_NIC)
        per_server = len(snics) // max(topo.n_servers, 1)
        if per_server == 0:
            raise RoutingError("the storage network is separate but the servers have no storage NICs")
        first = snics.reshape(topo.n_servers, per_server)[server, (local * per_server) // topo.gpus_per_server]
        nic = np.where(to_storage_net, first, nic)
    if out is None:
        return nic.astype(node.dtype, copy=False)
    out[gpu] = nic
    return out


# 10.0.0.0/8 (RFC 1918 private addresses): endpoint node n has the IPv4 address 10.0.0.0 + n
_IPV4_BASE = 0x0A000000
# Linux's default ephemeral port range, net.ipv4.ip_local_port_range = 32768..60999
# (Documentation/networking/ip-sysctl.rst): 28,232 ports a TCP connection's source port is drawn from
_EPHEMERAL_PORT_FIRST, _EPHEMERAL_PORTS = 32768, 28232
#: transports whose rows hash kernel TCP's ephemeral source port; every other transport's rows hash RoCEv2's
#: UDP source port from the QP numbers (:func:`_five_tuples`)
EPHEMERAL_PORT_TRANSPORTS = frozenset({"tcp"})
# TCP destination port of socket q of a connection: 43000 + q. No source: an arbitrary fixed port per
# socket, kept because routes depend on it
_TCP_DPORT_BASE = 43000


def _five_tuples(topo: Topology, transport: str, src_ep: np.ndarray, dst_ep: np.ndarray, qp: np.ndarray,
                 seed: int) -> tuple[FiveTuple, np.ndarray]:
    """The 5-tuple switches hash for each QP row, and its L4 source port.

    RoCEv2 (and every transport but TCP, hashed the same way here): UDP to port 4791, the source port Linux
    derives from the QP numbers of the two ends (``rdma_get_udp_sport``): NCCL leaves the GRH
    flow label 0 (``qpAttr.ah_attr.grh.flow_label = 0`` in ``ncclIbQpRtr``,
    src/transport/net_ib/connect.cc, NCCL master at commit 0456df2; ``ncclIbRtrQp`` in
    src/transport/net_ib.cc before the file was split), so the kernel computes it from the QPN pair.
    The k-th row a NIC opens is its k-th QP (:func:`~gpuwait.routing.hashing.qp_numbers`).
    TCP: an ephemeral source port per row.
    """
    rng = np.random.default_rng(seed)
    # drawn for TCP too: its ephemeral ports come after the QPN bases in the same stream
    local_qpn, remote_qpn = qp_numbers(src_ep, dst_ep, topo.n_nodes, rng)
    dport: np.ndarray | int
    if transport in EPHEMERAL_PORT_TRANSPORTS:
        sport = _EPHEMERAL_PORT_FIRST + rng.integers(0, _EPHEMERAL_PORTS, size=len(src_ep))
        proto, dport = IPPROTO_TCP, _TCP_DPORT_BASE + qp
    else:
        sport = rocev2_udp_sport(local_qpn, remote_qpn).astype(np.int64)
        proto, dport = IPPROTO_UDP, ROCEV2_UDP_DPORT
    # FiveTuple range-checks, casts and broadcasts its fields in __post_init__; the field types are the results
    tuples = FiveTuple(src_ip=_IPV4_BASE + src_ep, dst_ip=_IPV4_BASE + dst_ep, src_port=sport,  # type: ignore[arg-type]
                       dst_port=dport, protocol=proto)  # type: ignore[arg-type]
    return tuples, sport


def _fat_tree_order(topo: Topology) -> np.ndarray:
    """Index of every endpoint in fat-tree order (by leaf, then by port), as a subnet manager's
    ftree routing numbers destinations for D-mod-k; consecutive endpoints of a leaf then take
    distinct up ports. Endpoints with no leaf keep their node id."""
    order_index = np.arange(topo.n_nodes, dtype=np.int64)
    cabled = topo.nic_uplink[:, :, 0].ravel() if topo.nic_uplink.size else np.zeros(0, np.int64)
    nics = topo.nic_node.ravel()[cabled >= 0]
    if len(nics):
        leaves = topo.link_dst[cabled[cabled >= 0]]
        order = np.lexsort((nics, leaves))
        order_index[nics[order]] = np.arange(len(nics))
    return order_index


def _check_flows(topo: Topology, src, dst) -> tuple[np.ndarray, np.ndarray]:
    src_ids, dst_ids = _endpoints(topo, src), _endpoints(topo, dst)
    if len(src_ids) != len(dst_ids):
        raise RoutingError(f"src and dst: got {len(src_ids)} sources and {len(dst_ids)} destinations; expected the same number")
    same = src_ids == dst_ids
    if same.any():
        raise RoutingError(f"flow {int(np.flatnonzero(same)[0])}: source and destination are both {topo.node_name[src_ids[same][0]]}")
    return src_ids, dst_ids


def _walk_chunks(topo: Topology, spec: RoutingSpec, router: Router, s_ep: np.ndarray, d_ep: np.ndarray,
                 per_row: dict, name_row, stop=None, memo: dict | None = None
                 ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Walk every row, in chunks for a splitting router: a split flow fans out over every
    equal-cost path (1,024 core paths per flow in a 3-tier fabric of radix 64), so such flows
    are walked a chunk at a time to bound the memory. Yields each chunk's (row, link, weight)
    triplets (a caller that only sums them never holds every chunk's at once).
    ``name_row(i, err)`` rewords an error of row i; ``stop``: see :func:`_walk_fabric` (its mask
    function also gets the chunk's first row, to number rows over all chunks); ``memo``: a dict the rounds of
    one walk keep (a :func:`_walk_fabric` memo per chunk)."""
    chunk = len(s_ep) if router.single_path else _SPLIT_CHUNK_ROWS
    for lo in range(0, len(s_ep), chunk):
        sl = slice(lo, lo + chunk)
        chunk_rows = {k: v if k == "background_Bps" else v[sl] for k, v in per_row.items()}
        stopped: list = []
        chunk_stop = None if stop is None else (lambda keys, row, node, hops, lo=lo: stop[0](keys, row, node, hops, lo),
                                               stopped)
        try:
            rows, links, w = _walk_fabric(topo, spec, router, s_ep[sl], d_ep[sl], chunk_rows, chunk_stop,
                                          None if memo is None else memo.setdefault(lo, {}))
        except RoutingError as err:
            if not hasattr(err, "row"):
                raise
            raise name_row(lo + err.row, err) from None
        if stop is not None:
            stop[1].extend((r + lo, n, f) for r, n, f in stopped)
        yield rows + lo, links, w


def _walk_all(topo: Topology, spec: RoutingSpec, router: Router, s_ep: np.ndarray, d_ep: np.ndarray,
              per_row: dict, name_row, memo: dict | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every row's (row, link, weight) triplets (:func:`_walk_chunks`, joined)."""
    parts = list(_walk_chunks(topo, spec, router, s_ep, d_ep, per_row, name_row, memo=memo))
    rows, links, w = (np.concatenate(x) for x in zip(*parts, strict=True))
    return rows, links, w


def port_capacity_Bps(topo: Topology) -> np.ndarray:
    """Per node: the capacity of its links with a host end (a NIC's ports), what its rows share."""
    host = topo.host_links
    return np.bincount(topo.link_src[host], weights=topo.link_capacity_Bps[host], minlength=topo.n_nodes)


def _route_network(topo: Topology, spec: RoutingSpec, router: Router, transport: str, s_ep: np.ndarray,
                   d_ep: np.ndarray, qp: np.ndarray, name_row, multiplicity: np.ndarray | None = None,
                   demand_Bps: np.ndarray | None = None) -> tuple:
    """Route QP rows between network endpoints: (a list of (row, link, weight) triplets, UDP/TCP source ports,
    and None or the shared middle parts of row classes: ((class, link, weight) triplets or a CSR matrix, class
    of each row, side parts)).
    ``multiplicity``/``demand_Bps`` per row: see :func:`route_flows`."""
    tuples, sport = _five_tuples(topo, transport, s_ep, d_ep, qp, spec.seed)
    weight = np.ones(len(s_ep)) if multiplicity is None else multiplicity
    if demand_Bps is None:
        rows_per_ep = np.bincount(s_ep, weights=weight, minlength=topo.n_nodes)
        demand_Bps = port_capacity_Bps(topo)[s_ep] / np.maximum(rows_per_ep[s_ep], 1)
    # a per-leaf-pair router never reads the 5-tuple (Router.per_leaf_pair): its rows get none serialized
    key_bytes = np.zeros((len(s_ep), 0), np.uint8) if router.per_leaf_pair else tuples.key_bytes()
    per_row = dict(key_bytes=key_bytes, qp=qp, dest_index=_fat_tree_order(topo)[d_ep],
                   demand_Bps=demand_Bps, background_Bps=None)
    if router.per_leaf_pair and _LEAF_PAIR_CLASSES:
        classes = _leaf_pair_classes(topo, s_ep, d_ep, demand_Bps, weight)
        if classes is not None:
            own, shared = _route_classes(topo, spec, router, s_ep, d_ep, per_row, classes, name_row)
            return [own], sport, shared
    if router.single_path and router.rounds == 1:
        # one walk of every row at once (_walk_chunks' one chunk), no load to weigh: its hops are the pieces,
        # not joined here (_assemble joins every piece once)
        try:
            return _walk_hops(topo, spec, router, s_ep, d_ep, per_row), sport, None
        except RoutingError as err:
            if not hasattr(err, "row"):
                raise
            raise name_row(err.row, err) from None
    memo: dict = {}  # the walk's structure, kept between the rounds
    for _ in range(router.rounds):
        rows, links, w = _walk_all(topo, spec, router, s_ep, d_ep, per_row, name_row, memo)
        load = np.bincount(links, weights=w * (demand_Bps * weight)[rows], minlength=topo.n_links)
        # damped (Jacobi) rounds: every flow reacts to the others' last split, halfway, so they settle
        background = per_row["background_Bps"]
        per_row["background_Bps"] = load if background is None else 0.5 * (background + load)
    return [(rows, links, w)], sport, None


# Route splitting routers one row per leaf-pair class (False: every row, the reference the tests compare with).
_LEAF_PAIR_CLASSES = True
# ... and those classes by stages where exact (False: one walk per class, the reference of tests/routing/test_stages.py).
_LEAF_PAIR_STAGES = True
# Below this many classes one walk per class is cheaper than the stages, on a fabric of two switch tiers
# (an all-to-all has n_leaves^2 classes, a ring a few per leaf). A class's walk costs about the links of
# its split, which the stages walk once per source leaf instead of once per class, for a planning cost
# (every switch's next hops towards every destination class). With two tiers the split is a leaf's
# uplinks and their way down (128 links on a DGX SuperPOD): little to share. With three it crosses the
# cores (about 2,100 links, 16x), so the stages pay from a quarter of the classes (_stages_min_classes).
# Measured (CPU seconds of routing the classes, DGX SuperPOD all_reduce 1 GiB, spray / adaptive): 2
# tiers, 368 classes: per class 0.02 / 0.07, by stages 0.05 / 0.09; 3 tiers, 736 classes: 0.27 / 1.14
# per class, 0.23 / 0.60 by stages; 1,504 classes: adaptive 2.33 per class, 1.23 by stages.
_STAGES_MIN_CLASSES = 2048


def _stages_min_classes(topo: Topology) -> int:
    """Leaf-pair classes from which routing them by stages is cheaper (see _STAGES_MIN_CLASSES)."""
    tiers = int(topo.node_tier[topo.switch_nodes].max(initial=0))
    return _STAGES_MIN_CLASSES if tiers <= 2 else _STAGES_MIN_CLASSES // 4


def _route_classes(topo: Topology, spec: RoutingSpec, router: Router, s_ep: np.ndarray, d_ep: np.ndarray,
                   per_row: dict, classes: _LeafPairClasses, name_row) -> tuple:
    """(own triplets, (shared triplets or matrix, class of each row, side parts: (class of each row, weights, whether
    it follows the row's class) each)) of leaf-pair classes: by stages
    (:mod:`gpuwait.routing.stages`) where they compose exactly, else one walk per class."""
    if _LEAF_PAIR_STAGES and len(classes.rep) >= _stages_min_classes(topo):
        from gpuwait.routing.stages import NotStaged, route_leaf_pairs_staged  # stages builds on this module
        try:
            own, shared, of_row, sides = route_leaf_pairs_staged(topo, spec, router, s_ep, d_ep, per_row, classes,
                                                                 name_row)
            return own, (shared, of_row, sides)
        except NotStaged:
            pass
    own, shared, of_row = _route_leaf_pairs(topo, spec, router, s_ep, d_ep, per_row, classes, name_row)
    return own, (shared, of_row, ())


@dataclass(frozen=True, eq=False)
class _LeafPairClasses:
    """Rows grouped by (source leaf, destination leaf, demand): one representative row walks for each."""

    of_row: np.ndarray  # (R,) class of each row
    rep: np.ndarray  # (C,) a row standing for each class
    count: np.ndarray  # (C,) rows per class (each counted with its multiplicity)
    up_link: np.ndarray  # (R,) each row's endpoint -> leaf link
    down_link: np.ndarray  # (R,) each row's leaf -> endpoint link
    multiplicity: np.ndarray  # (R,) how many identical rows each row stands for


def connection_lanes(topo: Topology) -> int:
    """The most network lanes one GPU's connection can spread over: its own compute NICs times the ports of
    its NICs (at least 1). NCCL spreads a GPU's channels over its NICs (each channel's connection on one
    NIC, the graph search's nets) and, from 2.20, stripes a connection over the ports of a multi-port NIC,
    which it merges into one device (``NCCL_IB_MERGE_NICS``, default 1, src/transport/net_ib.cc v2.20.3-1
    to v2.30.7-1); the fabric engine gives each QP one NIC and one port (:func:`_network_endpoint`,
    :mod:`gpuwait.routing.routers`), so a connection needs as many rows to reach every lane.
    Cached on the topology.

    >>> from gpuwait.topology import build_preset
    >>> connection_lanes(build_preset("dgx-h100", servers=2)), connection_lanes(build_preset("oci-a100-roce", servers=2))
    (1, 2)
    """
    cache = topo.__dict__.setdefault("_routing_cache", {})
    if "connection_lanes" not in cache:
        nics = (topo.gpu_nics >= 0).sum(axis=1) if topo.gpu_nics.size else np.zeros(1, np.int64)
        ports = nic_ports(topo)[topo.nic_node].max() if topo.nic_node.size else 1
        cache["connection_lanes"] = int(max(1, int(nics.max(initial=1)) * max(1, int(ports))))
    return cache["connection_lanes"]


def nic_ports(topo: Topology) -> np.ndarray:
    """Per node: how many links it has to a switch (a NIC's ports; 0 for a node with none).
    Cached on the topology and shared by every caller: index it, never write to it."""
    cache = topo.__dict__.setdefault("_routing_cache", {})
    if "nic_ports" not in cache:
        cache["nic_ports"] = _uplinks(topo)[1]
    return cache["nic_ports"]


def connection_rows(topo: Topology, qps_per_connection: int) -> int:
    """Rows a connection between servers becomes: its QPs, or every lane of :func:`connection_lanes` when
    they are more (NCCL uses them all whatever NCCL_IB_QPS_PER_CONNECTION is)."""
    return max(qps_per_connection, connection_lanes(topo))


def single_uplinks(topo: Topology) -> np.ndarray:
    """Per node: its only link to a switch, -1 for none or several (a multi-port NIC spreads QPs over ports).
    Cached on the topology and shared by every caller: index it, never write to it."""
    cache = topo.__dict__.setdefault("_routing_cache", {})
    if "single_uplink" not in cache:
        up, count = _uplinks(topo)
        only = np.full(topo.n_nodes, -1, np.int64)
        only[topo.link_src[up]] = up
        only[count != 1] = -1
        cache["single_uplink"] = only
    return cache["single_uplink"]


def _uplinks(topo: Topology) -> tuple[np.ndarray, np.ndarray]:
    """(every link from an endpoint to a switch, how many each node has): a NIC's ports. Not cached: its two
    users cache what they derive from it."""
    up = np.flatnonzero(topo.host_links & topo.switch_nodes[topo.link_dst])
    return up, np.bincount(topo.link_src[up], minlength=topo.n_nodes)


def _leaf_pair_classes(topo: Topology, s_ep: np.ndarray, d_ep: np.ndarray,
                       demand_Bps: np.ndarray, multiplicity: np.ndarray) -> _LeafPairClasses | None:
    """Classes of rows a per-leaf-pair router splits identically, or None when some endpoint has
    several uplinks (its first or last hop would depend on the row).

    Every row leaves its endpoint on its one uplink, and from the leaf on its walk depends only on
    the leaves, the demand and the load (:attr:`Router.per_leaf_pair`): the equal-cost next hops
    towards every endpoint of one leaf are the same until that leaf, which the last hop leaves.
    """
    uplink = single_uplinks(topo)
    up, down_from = uplink[s_ep], uplink[d_ep]
    if (up < 0).any() or (down_from < 0).any():
        return None
    leaf_s, leaf_d = topo.link_dst[up], topo.link_dst[down_from]
    down = topo.links_between(leaf_d, d_ep)
    if (down < 0).any():
        return None
    demands, demand_id = np.unique(demand_Bps, return_inverse=True)  # a few distinct values
    # one int64 per row (a 1-D unique is far cheaper than one over stacked columns)
    key = (leaf_s.astype(np.int64) * topo.n_nodes + leaf_d) * len(demands) + demand_id.ravel()
    _, first, of_row = np.unique(key, return_index=True, return_inverse=True)
    of_row = of_row.ravel()
    return _LeafPairClasses(of_row, first, np.bincount(of_row, weights=multiplicity, minlength=len(first)), up, down, multiplicity)


def _link_host_ends(topo: Topology) -> np.ndarray:
    """Per link: bit 0 set where it leaves a node that is not a switch, bit 1 where it enters one."""
    cache = topo.__dict__.setdefault("_routing_cache", {})
    if "host_ends" not in cache:
        not_switch = ~topo.switch_nodes
        cache["host_ends"] = (not_switch[topo.link_src].astype(np.int8)
                              | (not_switch[topo.link_dst].astype(np.int8) << 1))
    return cache["host_ends"]


class _RoundSums:
    """One round's walk of the class representatives, summed chunk by chunk: the middle parts'
    load (each class's weights times its rows' demand), each representative's first and last hop
    weight, and in the last round the middle parts' (representative, link, weight) triplets."""

    def __init__(self, topo: Topology, s_rep: np.ndarray, d_rep: np.ndarray, class_demand_Bps: np.ndarray,
                 keep: bool) -> None:
        self.topo, self.s_rep, self.d_rep, self.class_demand_Bps, self.keep = topo, s_rep, d_rep, class_demand_Bps, keep
        self.middle_load = np.zeros(topo.n_links)
        self.first_w, self.last_w = np.zeros(len(s_rep)), np.zeros(len(s_rep))
        self.kept: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def take(self, rows: np.ndarray, links: np.ndarray, w: np.ndarray) -> None:
        topo = self.topo
        # the representative's first hop leaves its endpoint, its last enters the destination: a walk
        # passes only through switches, so those are its links with an end that is not a switch
        end = _link_host_ends(topo)[links]
        first, last, middle = (end & 1) > 0, (end & 2) > 0, end == 0
        self.first_w[rows[first]] = w[first]
        self.last_w[rows[last]] = w[last]
        self.middle_load += np.bincount(links[middle], weights=w[middle] * self.class_demand_Bps[rows[middle]],
                                        minlength=topo.n_links)
        if self.keep:
            self.kept.append((rows[middle], links[middle], w[middle]))


def _route_leaf_pairs(topo: Topology, spec: RoutingSpec, router: Router, s_ep: np.ndarray, d_ep: np.ndarray,
                      per_row: dict, classes: _LeafPairClasses, name_row) -> tuple:
    """Walk one representative row per class: every row gets its own first and last hop, and its
    class's middle part, the same links and fractions as walking every row, for a fraction of the work.
    Each round's load (the adaptive router's background) counts each class's middle part once per row.

    Returns ((row, link, weight) of the rows' own hops, (class, link, weight) of the middle parts,
    the class of each row)."""
    rep = classes.rep
    rep_rows = {k: v if k == "background_Bps" else v[rep] for k, v in per_row.items()}
    demand_Bps = per_row["demand_Bps"]
    class_demand_Bps = demand_Bps[rep] * classes.count
    s_rep, d_rep = s_ep[rep], d_ep[rep]
    memo: dict = {}  # the walk's structure, kept between the rounds
    for round_ in range(router.rounds):
        sums = _RoundSums(topo, s_rep, d_rep, class_demand_Bps, keep=round_ == router.rounds - 1)
        for part in _walk_chunks(topo, spec, router, s_rep, d_rep, rep_rows, lambda i, err: name_row(int(rep[i]), err),
                                 memo=memo):
            sums.take(*part)
        first_w, last_w = sums.first_w, sums.last_w
        load = sums.middle_load
        for hop_w, end_link in ((first_w, classes.up_link), (last_w, classes.down_link)):
            load += np.bincount(end_link, weights=hop_w[classes.of_row] * demand_Bps * classes.multiplicity,
                                minlength=topo.n_links)
        background = rep_rows["background_Bps"]
        rep_rows["background_Bps"] = load if background is None else 0.5 * (background + load)
    n = len(s_ep)
    own = (np.r_[np.arange(n), np.arange(n)], np.r_[classes.up_link, classes.down_link],
           np.r_[first_w[classes.of_row], last_w[classes.of_row]])
    shared = tuple(np.concatenate(x) for x in zip(*sums.kept, strict=True)) if sums.kept else \
        (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0))
    return own, shared, classes.of_row


def _host_hop(topo: Topology, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Where a flow inside a server turns when GPUs cannot use P2P: a GPU->GPU flow goes through the
    CPU of the receiving GPU (its PCIe switch's CPU, as NCCL's paths.cc ``addInterStep``); other flows
    go straight (their own destination)."""
    parent = np.full(topo.n_nodes, -1, np.int64)
    kind_src, kind_dst = topo.node_kind[topo.link_src], topo.node_kind[topo.link_dst]
    for child, up in ((NodeKind.GPU, NodeKind.PCIE_SWITCH), (NodeKind.PCIE_SWITCH, NodeKind.CPU)):
        hop = (topo.link_kind == LinkKind.PCIE) & (kind_src == child) & (kind_dst == up)
        parent[topo.link_src[hop]] = topo.link_dst[hop]
    gpu_pair = (topo.node_kind[src] == NodeKind.GPU) & (topo.node_kind[dst] == NodeKind.GPU)
    cpu = parent[np.maximum(parent[dst], 0)]
    return np.where(gpu_pair & (parent[dst] >= 0) & (cpu >= 0), cpu, dst)


def _host_cpu(topo: Topology, nodes: np.ndarray) -> np.ndarray:
    """The CPU above each GPU's PCIe switch (where NCCL stages a GPU's traffic in host memory); any
    other node, or a GPU not under a PCIe switch (a C2C superchip), is its own stop."""
    stop = _host_hop(topo, nodes, nodes)  # a GPU -> GPU "flow" to itself turns at its own CPU
    return np.where(topo.node_kind[nodes] == NodeKind.GPU, stop, nodes)


def _nvlink_domain_rows(topo: Topology, src: np.ndarray, dst: np.ndarray, across_servers: bool) -> np.ndarray:
    """Rows whose two ends (GPUs, or a domain's NVSwitch) meet through an NVLink domain's switch
    (``cluster.nvlink_domain``): the same domain, and the same server unless ``across_servers``."""
    if not len(topo.nvlink_domain_switch):
        return np.zeros(len(src), bool)
    ends = (NodeKind.GPU, NodeKind.NVSWITCH)
    kinds_ok = np.isin(topo.node_kind[src], ends) & np.isin(topo.node_kind[dst], ends)
    domain_s, domain_d = topo.nvlink_domain_of(src), topo.nvlink_domain_of(dst)
    same = kinds_ok & (domain_s == domain_d) & (domain_s >= 0)
    if not across_servers:
        to_switch = (topo.node_kind[src] == NodeKind.NVSWITCH) | (topo.node_kind[dst] == NodeKind.NVSWITCH)
        same &= (topo.node_server[src] == topo.node_server[dst]) | to_switch
    return same


def _nvlink_domain_links(topo: Topology, src: np.ndarray, dst: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """(row, link) hops of src -> domain NVSwitch -> dst (one hop where an end is the switch)."""
    switch = topo.nvlink_domain_switch[topo.nvlink_domain_of(src)]
    rows = np.arange(len(src))
    hops = []
    for a, b in ((src, switch), (switch, dst)):
        keep = a != b
        hops.append((rows[keep], topo.links_between(a[keep], b[keep])))
    return hops


def route_flows(topo: Topology, spec: RoutingSpec, src, dst, *, transport: str = "rocev2",
                qps_per_connection: int | None = None, via_host: bool = False,
                nvlink_domains: bool = True, stage_network: bool = False, multiplicity: np.ndarray | None = None,
                demand_Bps: np.ndarray | None = None) -> Routes:
    """Route flows ``src[i] -> dst[i]`` (node names or ids) through the topology.

    Parameters
    ----------
    topo : Topology
    spec : RoutingSpec
        Router kind (a key of :data:`gpuwait.routing.routers.ROUTERS`), hash, seed, per-switch
        seeding and QPs per connection.
    src, dst : sequence of str or int, or ndarray of node ids
        GPUs, NICs or storage servers. A GPU reaches another server through the NIC on its PCIe
        switch (``topo.gpu_nic``), rail-aligned as NCCL does; GPUs of one server talk over NVLink.
    transport : str
        ``rocev2``/``infiniband`` hash UDP source ports derived from QP numbers; ``tcp`` hashes
        ephemeral ports.
    qps_per_connection : int, optional
        Overrides ``spec.qps_per_connection``; each QP becomes one row carrying 1/qps of the bytes, and a
        flow becomes at least as many rows as a GPU has NIC lanes (:func:`connection_rows`).
    via_host : bool
        GPUs of one server without P2P: their flows cross the sender's PCIe up to the receiver's CPU
        and down the receiver's PCIe (NCCL's SHM path through host memory) instead of NVLink or a PCIe switch.
    nvlink_domains : bool
        GPUs of different servers in one NVLink domain (``cluster.nvlink_domain``) talk over NVLink
        through the domain's switch, as NCCL does with MNNVL; ``False`` sends them over the NICs
        (``NCCL_MNNVL_ENABLE=0``). GPUs of one server use the switch either way.
    stage_network : bool
        No GPUDirect RDMA (or NCCL's socket transport): a GPU's flows to another server go up to its own
        CPU (host memory) and from there to the NIC, and arrive the same way, as NCCL's paths.cc diverts
        them (``addInterStep(..., CPU, localCpu, ...)``, v2.27.3-1) and net.cc keeps the buffers in host
        memory; a GPU sharing a PCIe switch with its NIC then loads the switch's uplink twice.
    multiplicity, demand_Bps : numpy.ndarray, optional
        Per flow: how many identical flows it stands for, and the rate each would ask of its port
        (default: the port's capacity over the rows leaving it). A group of flows routed by one
        representative (``fabric.collective``) loads the adaptive router's view of the fabric
        ``multiplicity`` times and asks what each of its members asks.

    Returns
    -------
    Routes

    Examples
    --------
    >>> from gpuwait.topology import build_preset
    >>> from gpuwait.spec import RoutingSpec
    >>> topo = build_preset("rocev2-400g-2tier", servers=8)
    >>> routes = route_flows(topo, RoutingSpec(kind="ecmp"), ["s0.gpu0"], ["s4.gpu0"])
    >>> [topo.link_name(l) for l in routes.ordered_links(0, topo)[0]][:4]
    ['s0.gpu0->s0.pcie0', 's0.pcie0->s0.nic0', 's0.nic0->leaf0', 'leaf0->spine...']
    """
    src_ids, dst_ids = _check_flows(topo, src, dst)
    router = get_router(spec.kind)
    if router.validate is not None:
        router.validate(spec)
    flow_index, qp = _qp_rows(len(src_ids), connection_rows(topo, qps_per_connection or spec.qps_per_connection))
    src_r, dst_r = src_ids[flow_index], dst_ids[flow_index]
    ctx = _context(topo)
    domain, local = _rows_off_network(topo, src_r, dst_r, nvlink_domains, via_host)
    # the pieces keep this order (domain, server-local, network ends, the walk): _assemble sums a row's
    # repeated links in it, and another order may round the sums differently
    pieces = _nvlink_domain_pieces(topo, src_r, dst_r, domain)
    if local.any():
        pieces += _server_local_pieces(topo, ctx, np.flatnonzero(local), src_r, dst_r, via_host)
    sport = np.full(len(flow_index), -1, np.int64)  # no L4 source port on a row that never reaches the network
    remote = np.flatnonzero(~local & ~domain)
    if not len(remote):
        return _assemble(topo, flow_index, qp, pieces, sport)
    # the network rows' ends and QPs gathered once (8.1 M rows at 131,072 GPUs), the ends freed before the walk
    src_remote, dst_remote, qp_remote = src_r[remote], dst_r[remote], qp[remote]
    s_ep = _network_endpoint(topo, src_remote, dst_remote, qp_remote)
    d_ep = _network_endpoint(topo, dst_remote, src_remote, qp_remote)
    pieces += _network_end_pieces(topo, ctx, remote, src_remote, dst_remote, s_ep, d_ep, stage_network)
    del src_remote, dst_remote
    name_row = partial(_no_path_error, topo, remote, src_r, dst_r, s_ep, d_ep)
    walked, sport[remote], shared = _route_network(topo, spec, router, transport, s_ep, d_ep, qp_remote, name_row,
                                                   _per_row(multiplicity, flow_index[remote]),
                                                   _per_row(demand_Bps, flow_index[remote]))
    pieces += _on_route_rows(remote, walked)
    del walked  # held by the pieces alone, which _assemble frees once it has joined them
    if shared is None:
        return _assemble(topo, flow_index, qp, pieces, sport)
    return _assemble(topo, flow_index, qp, pieces, sport, *_shared_on_rows(len(flow_index), remote, shared))


# (row, link, weight) arrays: the rows crossing one hop each, the link each crosses and the fraction of its bytes
_Piece = tuple[np.ndarray, np.ndarray, np.ndarray]


def _qp_rows(n_flows: int, qps: int) -> tuple[np.ndarray, np.ndarray]:
    """(flow of each row, QP of each row): a flow's ``qps`` QPs are consecutive rows, each its own flow key."""
    return np.repeat(np.arange(n_flows), qps), np.tile(np.arange(qps), n_flows)


def _rows_off_network(topo: Topology, src: np.ndarray, dst: np.ndarray, nvlink_domains: bool, via_host: bool
                      ) -> tuple[np.ndarray, np.ndarray]:
    """(rows that meet through an NVLink domain's switch, rows inside one server): the other rows cross the
    network. Options as :func:`route_flows`'."""
    server_s, server_d = topo.node_server[src], topo.node_server[dst]
    domain = _nvlink_domain_rows(topo, src, dst, nvlink_domains)
    if via_host:
        domain &= server_s != server_d  # without P2P a server's GPUs stage through host memory
    local = (server_s == server_d) & (server_s >= 0) & ~domain
    return domain, local


def _nvlink_domain_pieces(topo: Topology, src: np.ndarray, dst: np.ndarray, domain: np.ndarray) -> list[_Piece]:
    """Pieces of the ``domain`` rows: all of a row's bytes on each hop through its domain's switch."""
    if not domain.any():
        return []
    rows_d = np.flatnonzero(domain)
    return [(rows_d[rows], links, np.ones(len(rows)))
            for rows, links in _nvlink_domain_links(topo, src[rows_d], dst[rows_d])]


def _segment_pieces(ctx: _Context, rows: np.ndarray, a: np.ndarray, b: np.ndarray) -> list[_Piece]:
    """Pieces of the server-internal paths ``a[i] -> b[i]`` of ``rows``; a row already at its stop has none."""
    need = a != b
    if not need.all():  # masked once, not per hop: each copy is a pass over (up to) every row
        rows, a, b = rows[need], a[need], b[need]
    # weights of one: a read-only view of one value, which _assemble's concatenation copies once
    return [(rows[hop_rows], links, np.broadcast_to(1.0, len(hop_rows))) for hop_rows, links in _local_segments(ctx, a, b)]


def _server_local_pieces(topo: Topology, ctx: _Context, rows: np.ndarray, src: np.ndarray, dst: np.ndarray,
                         via_host: bool) -> list[_Piece]:
    """Pieces of ``rows``, whose two ends sit in one server: over NVLink or PCIe, or without P2P
    (``via_host``) through the receiving GPU's CPU (:func:`_host_hop`)."""
    if not via_host:
        return _segment_pieces(ctx, rows, src[rows], dst[rows])
    hop = _host_hop(topo, src[rows], dst[rows])
    return _segment_pieces(ctx, rows, src[rows], hop) + _segment_pieces(ctx, rows, hop, dst[rows])


def _network_end_pieces(topo: Topology, ctx: _Context, rows: np.ndarray, src: np.ndarray, dst: np.ndarray,
                        s_ep: np.ndarray, d_ep: np.ndarray, stage_network: bool) -> list[_Piece]:
    """Pieces of the network ``rows`` inside their two servers: source -> its network endpoint ``s_ep`` and
    ``d_ep`` -> destination, or without GPUDirect RDMA (``stage_network``) through each GPU's CPU (host
    memory) on both sides. ``src``, ``dst``, ``s_ep`` and ``d_ep`` are per row of ``rows``."""
    stops: tuple[tuple[np.ndarray, np.ndarray], ...] = ((src, s_ep), (d_ep, dst))
    if stage_network:
        s_cpu, d_cpu = _host_cpu(topo, src), _host_cpu(topo, dst)
        stops = ((src, s_cpu), (s_cpu, s_ep), (d_ep, d_cpu), (d_cpu, dst))
    return [piece for a, b in stops for piece in _segment_pieces(ctx, rows, a, b)]


def _no_path_error(topo: Topology, remote: np.ndarray, src: np.ndarray, dst: np.ndarray, s_ep: np.ndarray,
                   d_ep: np.ndarray, i: int, err: RoutingError) -> RoutingError:
    """The walk's error of network row ``i`` (row ``remote[i]`` of ``src``/``dst``) reworded with its flow's
    ends: the walk knows only the two network endpoints, which share no network."""
    row = remote[i]
    return RoutingError(f"no path from {topo.node_name[src[row]]} to {topo.node_name[dst[row]]}: "
                        f"{topo.node_name[s_ep[i]]} and {topo.node_name[d_ep[i]]} share no network", hint=err.hint)


def _per_row(per_flow: np.ndarray | None, flow_of_row: np.ndarray) -> np.ndarray | None:
    """A per-flow option of :func:`route_flows` (``multiplicity``, ``demand_Bps``) per row, as floats."""
    return None if per_flow is None else np.asarray(per_flow, float)[flow_of_row]


def _shared_on_rows(n_rows: int, remote: np.ndarray, shared: tuple) -> tuple[tuple, tuple, tuple[int, ...]]:
    """:func:`_assemble`'s ``shared``, ``sides`` and ``class_sides`` from :func:`_route_network`'s shared parts,
    whose classes it gives per network row (``remote``): here per row of all ``n_rows`` (-1 off the network)."""
    middle, of_row, sides = shared
    return ((_on_rows(n_rows, remote, of_row), middle),
            tuple((_on_rows(n_rows, remote, side_of), weights) for side_of, weights, _ in sides),
            tuple(i for i, (_, _, follows_class) in enumerate(sides) if follows_class))


def _on_route_rows(remote: np.ndarray, walked: list) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The walk's (row, link, weight) pieces with their rows numbered among every route row (``remote[row]``);
    hops of the same states share one rows array (a single-path walk's), mapped once."""
    on_rows: dict[int, np.ndarray] = {}
    pieces = []
    for rows, links, w in walked:
        mapped = on_rows.get(id(rows))
        if mapped is None:
            mapped = on_rows[id(rows)] = remote[rows]
        pieces.append((mapped, links, w))
    return pieces


def _on_rows(n_rows: int, rows: np.ndarray, class_of: np.ndarray) -> np.ndarray:
    """(n_rows,) ``class_of[i]`` at ``rows[i]``, -1 elsewhere."""
    out = np.full(n_rows, -1, np.int64)
    out[rows] = class_of
    return out


# From this many (row, link, weight) entries _assemble places the pieces into the matrix one by one (compiled)
_PLACED_MIN_ENTRIES = 1 << 20


def _placed_matrix(pieces: list, n_entries: int, shape: tuple[int, int]) -> sp.csr_matrix:
    """The CSR matrix of the pieces' entries, duplicates and unsorted rows kept: scipy's COO-to-CSR result
    (entries placed in input order, piece after piece), without joining the pieces into COO arrays first
    (1.3 GB of them at 131,072 GPUs). Frees the pieces (the caller's list) as it places them."""
    from gpuwait.routing.kernels import place_entries, place_entries_of  # numba, loaded on first use

    index = np.int32 if max(n_entries, *shape) < 2**31 else np.int64  # scipy's index type for the result
    count = np.zeros(shape[0], np.int64)
    # hops of the same states share their rows array: counted once, over the span of rows it holds (a chunk
    # of a walk's rows, _SINGLE_PATH_CHUNK_ROWS, spans an eighth of them at 131,072 GPUs)
    counted: dict[int, tuple[int, np.ndarray]] = {}
    for rows, _, _ in pieces:
        if id(rows) not in counted:
            first = int(rows.min()) if len(rows) else 0
            counted[id(rows)] = first, np.bincount(rows - first if first else rows)
        first, rows_count = counted[id(rows)]
        count[first:first + len(rows_count)] += rows_count
    del counted
    indptr = np.zeros(shape[0] + 1, index)
    np.cumsum(count, out=indptr[1:])
    del count
    cursor = indptr[:-1].astype(np.int64)
    indices, data = np.empty(n_entries, index), np.empty(n_entries)
    pieces.reverse()  # popped from the end: placed in the pieces' order
    while pieces:
        rows, links, weights = pieces.pop()
        rows, links = np.asarray(rows, np.int64), np.asarray(links, np.int64)
        if weights.ndim == 1 and len(weights) and weights.strides[0] == 0:  # one weight (a broadcast view)
            place_entries_of(cursor, rows, links, float(weights[0]), indices, data)
        else:
            place_entries(cursor, rows, links, np.ascontiguousarray(weights, np.float64), indices, data)
    return sp.csr_matrix((data, indices, indptr), shape=shape)


def _assemble(topo: Topology, flow_index: np.ndarray, qp: np.ndarray, pieces: list, sport: np.ndarray,
              shared: tuple | None = None, sides: tuple = (), class_sides: tuple[int, ...] = ()) -> Routes:
    """Routes from (row, link, weight) pieces, ``shared``: None or (class of each row, and the
    classes' middle parts as (class, link, weight) triplets or a (classes, links) CSR matrix), and
    ``sides``: more shared parts ((class of each row, (classes, links) weights) each,
    :attr:`Routes.side_classes`), of which ``class_sides`` follow the row's class (:attr:`Routes.class_sides`)."""
    n_entries = sum(len(rows) for rows, _, _ in pieces)
    if n_entries >= _PLACED_MIN_ENTRIES:
        matrix = _placed_matrix(pieces, n_entries, (len(flow_index), topo.n_links))
    else:
        # joined straight into the matrix's index type (scipy's for this shape: 4 bytes below 2^31 rows and
        # links), so scipy keeps them and the pieces (the caller's list) are freed before the matrix is built
        index = np.int32 if max(len(flow_index), topo.n_links) < 2**31 else np.int64
        rows, links, weights = ((np.concatenate(x, dtype=dtype) for x, dtype in zip(zip(*pieces, strict=True),
                                                                                   (index, index, np.float64)))
                                if pieces else (np.zeros(0, index), np.zeros(0, index), np.zeros(0)))
        pieces.clear()
        matrix = sp.csr_matrix((weights, (rows, links)), shape=(len(flow_index), topo.n_links))
        del rows, links, weights
    matrix.sum_duplicates()
    matrix.sort_indices()
    latency = np.asarray(matrix @ topo.link_latency_s).ravel()
    row_class = class_weights = None
    if shared is not None:
        row_class, middle = shared
        n_classes = int(row_class.max(initial=-1)) + 1
        # the stages give a matrix (8.9 M entries at 16,384 GPUs: no triplets to convert); the walk triplets
        class_weights = middle if sp.issparse(middle) else sp.csr_matrix((middle[2], (middle[0], middle[1])),
                                                                           shape=(n_classes, topo.n_links))
        if class_weights.shape != (n_classes, topo.n_links):
            raise ValueError(f"middle parts of shape {class_weights.shape}; expected {(n_classes, topo.n_links)}")
        class_weights.sum_duplicates()
        class_weights.sort_indices()
        has = row_class >= 0
        latency[has] += np.asarray(class_weights @ topo.link_latency_s).ravel()[row_class[has]]
    for side_of, side_weights in sides:
        has = side_of >= 0
        latency[has] += np.asarray(side_weights @ topo.link_latency_s).ravel()[side_of[has]]
    return Routes(flow_index=flow_index, qp_index=qp, own_weights=matrix, path_latency_s=latency,
                  udp_sport=sport, row_class=row_class, class_weights=class_weights, side_classes=sides,
                  class_sides=class_sides)
