"""Paths of flows through a topology: ECMP, InfiniBand static routes, adaptive routing, spraying.

Pure functions over a :class:`~gpuwait.topology.Topology`. A route is the set of links a flow
crosses with the fraction of its bytes on each (1.0 on every link of a single path; fractions
that add up per hop for a flow split over equal-cost paths). All flows advance together hop by
hop, so routing 16,384 flows costs a few numpy passes, not a Python loop per flow.

How each router picks among the equal-cost next hops at a switch:

* ``ecmp``: the switch hashes the flow's 5-tuple with its own seed (or the same seed everywhere,
  which reproduces polarization) and takes ``hash % n``. RoCEv2 QPs differ in UDP source port,
  so several QPs per connection (``qps_per_connection``) are several differently hashed flows.
* ``static``: an InfiniBand subnet manager's D-mod-k fat-tree routes: going up, the k-th choice
  is ``(destination index / product of earlier up-choices) mod k``; destination-based, so
  every QP of a connection takes the same path.
* ``spray``: even split over every equal-cost next hop (per-packet spraying).
* ``adaptive``: per-packet least-loaded choice, in its fluid limit: the flow is split over the
  next hops in proportion to their capacity left after the other flows' expected load
  (a few Jacobi rounds), so a degraded or busy link gets less.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import shortest_path

from gpuwait.arrays import rank_within_groups
from gpuwait.errors import RoutingError, UnknownNameError
from gpuwait.routing.hashing import (
    IPPROTO_TCP,
    IPPROTO_UDP,
    ROCEV2_UDP_DPORT,
    FiveTuple,
    get_hash,
    rocev2_udp_sport,
)
from gpuwait.spec.cluster import RoutingSpec
from gpuwait.topology.model import LINK_KINDS, NETWORKS, NODE_KINDS, Topology

_GPU = NODE_KINDS.index("gpu")
_NIC = NODE_KINDS.index("nic")
_SNIC = NODE_KINDS.index("storage_nic")
_SWITCH = NODE_KINDS.index("switch")
_HOST_LINK = LINK_KINDS.index("host")
_FABRIC_LINK = LINK_KINDS.index("fabric")
_ADAPTIVE_ROUNDS = 4
_SPLIT_CHUNK_ROWS = 1024
_CANDIDATE_BLOCK = 1 << 22  # candidate next hops weighed per numpy pass


@dataclass(frozen=True)
class Routes:
    """Routes of a set of flows, one row per QP (sub-flow).

    ``link_weights[r, l]`` is the fraction of row r's bytes that crosses link l.
    """

    flow_index: np.ndarray  # (R,) index of the requested flow each row belongs to
    qp_index: np.ndarray  # (R,) QP number within the connection, 0..qps-1
    link_weights: sp.csr_matrix  # (R, L)
    path_latency_s: np.ndarray  # (R,) weight-averaged latency of the row's links
    udp_sport: np.ndarray  # (R,) RoCEv2/TCP source port used for hashing, -1 where none

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
        return self.link_weights.T @ self.per_qp(flow_size_bytes)



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
    server_links = np.flatnonzero((topo.link_network == NETWORKS.index("server")) & (topo.node_server[topo.link_src] == 0))
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
    for key in np.unique(pair_key):
        rows = np.flatnonzero(pair_key == key)
        a, b = divmod(int(key), ctx.blocks.shape[1])
        path = ctx.local_paths.get((a, b))
        if path is None:
            raise RoutingError(f"no path inside server from {topo.node_name[src[rows[0]]]} to {topo.node_name[dst[rows[0]]]}")
        nodes = ctx.blocks[servers[rows]][:, path]  # (rows, hops+1)
        for h in range(len(path) - 1):
            rows_out.append(rows)
            links_out.append(topo.links_between(nodes[:, h], nodes[:, h + 1]))
    return list(zip(rows_out, links_out))


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
            switches = np.flatnonzero(topo.node_kind == _SWITCH)
            switch_index = np.full(topo.n_nodes, -1, np.int64)
            switch_index[switches] = np.arange(len(switches))
            fabric = (topo.link_kind == _FABRIC_LINK)
            # reversed edges: BFS from a leaf gives every switch's distance *to* that leaf
            graph = sp.csr_matrix((np.ones(int(fabric.sum())), (switch_index[topo.link_dst[fabric]],
                                                                 switch_index[topo.link_src[fabric]])),
                                  shape=(len(switches), len(switches)))
            uplink = (topo.link_kind == _HOST_LINK) & (topo.node_kind[topo.link_dst] == _SWITCH)
            src, dst = topo.link_src[uplink], switch_index[topo.link_dst[uplink]]
            order = np.lexsort((dst, src))
            src, dst = src[order], dst[order]
            rank = rank_within_groups(src)
            up_leaf = np.full((topo.n_nodes, int(rank.max()) + 1 if len(rank) else 1), -1, np.int64)
            up_leaf[src, rank] = dst
            # every node's links to switches, in id order, with the switch index of their far end
            to_switch = np.flatnonzero(topo.node_kind[topo.link_dst] == _SWITCH)
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
        rows = self.class_rows[slot]
        return (self.matrix[rows, switch[:, None]] == 1.0).any(axis=1) if len(slot) else np.zeros(0, bool)

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
        d = self.matrix[self.target_rows[slot], switch[:, None]] if len(slot) else np.zeros((0, 1))
        return d.min(axis=1).astype(float) + 1.0

    def __call__(self, slot: np.ndarray, nodes: np.ndarray) -> np.ndarray:
        """Distance from ``nodes[i]`` to target ``slot[i]``."""
        out = np.full(len(nodes), np.inf)
        at_target = nodes == self.targets[slot]
        out[at_target] = 0.0
        sw = self.switch_index[nodes]
        is_switch = sw >= 0
        out[is_switch] = self._to_switch(slot[is_switch], sw[is_switch])
        other = ~is_switch & ~at_target
        if other.any():
            # an endpoint: one hop to the best of its own leaves
            leaves = self.up_leaf[nodes[other]]
            best = np.full(other.sum(), np.inf)
            for k in range(leaves.shape[1]):
                ok = leaves[:, k] >= 0
                d = np.full(other.sum(), np.inf)
                d[ok] = self._to_switch(slot[other][ok], leaves[ok, k])
                best = np.minimum(best, d)
            out[other] = best + 1.0
        return out


# ------------------------------------------------------------------------------------ the hop-by-hop walk
def _switch_seeds(spec: RoutingSpec, nodes: np.ndarray) -> np.ndarray:
    if not spec.per_switch_seed:
        return np.full(len(nodes), spec.seed, np.uint32)
    mixed = (np.uint64(spec.seed) * np.uint64(0x9E3779B1) + nodes.astype(np.uint64) * np.uint64(0x85EBCA77)
             + np.uint64(0x165667B1))
    return (mixed & np.uint64(0xFFFFFFFF)).astype(np.uint32)


def _groups(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group targets with equal distance rows: (group of each target, one target of each group)."""
    _, group_of = np.unique(rows, axis=0, return_inverse=True)
    group_of = group_of.ravel()
    first = np.zeros(int(group_of.max(initial=-1)) + 1, np.int64)
    first[group_of] = np.arange(len(group_of))  # any member stands for its group
    return group_of, first


def _walk_fabric(topo: Topology, spec: RoutingSpec, start: np.ndarray, target: np.ndarray, key_bytes: np.ndarray,
                 qp: np.ndarray, dest_index: np.ndarray, background_Bps: np.ndarray | None,
                 demand_Bps: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Walk rows from their source NIC/endpoint to the target endpoint. Returns (row, link, weight) triplets."""
    R = len(start)
    uniq_targets, target_slot = np.unique(target, return_inverse=True)
    dist = _Distances(topo, uniq_targets)
    unreachable = ~np.isfinite(dist(target_slot, start))
    if unreachable.any():
        r = int(np.flatnonzero(unreachable)[0])
        err = RoutingError(f"no path from {topo.node_name[start[r]]} to {topo.node_name[target[r]]}: no network connects them",
                           hint="check the endpoints' names and the fabric (`gpuwait topo`)")
        err.row = r
        raise err
    kind = spec.kind
    hasher = get_hash(spec.hash) if kind == "ecmp" else None

    # Destinations hanging off the same leaves share every hop but the last; away from those
    # leaves' neighbours, destinations under the same class of leaves (a pod) do too (see _leaf_rows).
    # Next hops are found once per (node, key): keys are leaf sets, then endpoints one by one (an
    # endpoint may itself be one of its group's destinations), then leaf-class sets.
    n_targets = len(uniq_targets)
    group_of_slot, group_slot = _groups(dist.target_rows.reshape(n_targets, -1))
    class_of_slot, class_slot = _groups(dist.class_rows.reshape(n_targets, -1))
    n_groups = len(group_slot)
    key_slot = np.r_[group_slot, np.arange(n_targets), class_slot]
    key_rows = np.r_[dist.target_rows[group_slot], dist.target_rows, dist.class_rows[class_slot]].reshape(len(key_slot), -1)
    n_keys = len(key_slot)
    state_row = np.arange(R)
    state_node = start.astype(np.int64)
    state_frac = np.ones(R)
    state_stride = np.ones(R, np.int64)  # D-mod-k: product of earlier up-choices
    rows_out, links_out, w_out = [], [], []
    for _hop in range(32):
        live = state_node != target[state_row]
        if not live.any():
            break
        state_row, state_node, state_frac, state_stride = (a[live] for a in (state_row, state_node, state_frac, state_stride))
        # Away from the destination's leaf, the equal-cost next hops depend only on the node and the
        # set of leaves the destination hangs off: find them once per such pair, then let every state
        # pick among its pair's candidates. On the destination's leaf the only hop is the last one.
        d_state = dist(target_slot[state_row], state_node)
        last = d_state == 1
        far = np.flatnonzero(~last)
        slot_far, node_far = target_slot[state_row[far]], state_node[far]
        gid = n_groups + slot_far
        at_switch = np.flatnonzero(topo.node_kind[node_far] == _SWITCH)
        by_class = ~dist.adjacent_to_class(slot_far[at_switch], dist.switch_index[node_far[at_switch]])
        gid[at_switch] = np.where(by_class, n_groups + n_targets + class_of_slot[slot_far[at_switch]],
                                  group_of_slot[slot_far[at_switch]])
        pairs, far_pair = np.unique(node_far * n_keys + gid, return_inverse=True)
        p_node, p_key = pairs // n_keys, pairs % n_keys
        p_slot = key_slot[p_key]
        p_distance = np.empty(len(pairs))
        p_distance[far_pair] = d_state[far]  # the same for every state of a pair
        p_owner, p_links = dist.next_hops(key_rows[p_key], p_node, p_distance)
        p_count = np.bincount(p_owner, minlength=len(pairs))
        if (p_count == 0).any():
            stuck = int(np.flatnonzero(p_count == 0)[0])
            raise RoutingError(f"routing stuck at {topo.node_name[p_node[stuck]]} on the way to "
                               f"{topo.node_name[uniq_targets[p_slot[stuck]]]}")
        # the last hop of every state on its destination's leaf is a pair of its own
        last_idx = np.flatnonzero(last)
        last_links = topo.links_between(state_node[last_idx], target[state_row[last_idx]])
        pair_of_state = np.empty(len(state_node), np.int64)
        pair_of_state[far] = far_pair
        pair_of_state[last_idx] = len(pairs) + np.arange(len(last_idx))
        p_links = np.r_[p_links, last_links]
        p_owner = np.r_[p_owner, len(pairs) + np.arange(len(last_idx))]
        p_node = np.r_[p_node, state_node[last_idx]]
        p_count = np.r_[p_count, np.ones(len(last_idx), np.int64)]
        pairs = np.r_[pairs, np.zeros(len(last_idx), pairs.dtype)]
        p_start = np.cumsum(p_count) - p_count
        count = p_count[pair_of_state]
        first = p_start[pair_of_state]
        if kind in ("ecmp", "static"):
            if kind == "ecmp":
                seeds = _switch_seeds(spec, state_node)
                # a NIC with several ports spreads QPs round-robin over them; switches hash
                is_switch = topo.node_kind[state_node] == _SWITCH
                h = hasher(key_bytes[state_row], seeds).astype(np.int64)
                if spec.per_switch_seed:
                    # A CRC is affine: XOR-ing a seed into its state only relabels the 2^k next hops, so
                    # seeds alone never break polarization. Switches also pick a seed-dependent slice
                    # of the hash bits (the "hash offset" of merchant ASICs), which does.
                    h = h >> (seeds.astype(np.int64) % 8)
                choice = np.where(is_switch, h % count, qp[state_row] % count)
            else:
                p_up = np.bincount(p_owner, weights=topo.node_tier[topo.link_dst[p_links]] > topo.node_tier[p_node[p_owner]],
                                   minlength=len(pairs)) > 0
                up_state = p_up[pair_of_state]
                choice = np.where(up_state, (dest_index[state_row] // state_stride) % count, qp[state_row] % count)
                state_stride = np.where(up_state, state_stride * count, state_stride)
            owner = np.arange(len(state_node))
            links = p_links[first + choice]
            weight = state_frac
        else:
            owner = np.repeat(np.arange(len(state_node)), count)
            offsets = np.arange(len(owner)) - np.repeat(np.cumsum(count) - count, count)
            links = p_links[first[owner] + offsets]
            if kind == "spray":
                split = 1.0 / count[owner]
            else:  # adaptive
                split = _adaptive_split(topo, owner, links, len(state_node), background_Bps,
                                        demand_Bps[state_row][owner] * state_frac[owner])
            weight = state_frac[owner] * split
        rows = state_row[owner]
        nxt = topo.link_dst[links]
        keep = weight > 0
        rows_out.append(rows[keep])
        links_out.append(links[keep])
        w_out.append(weight[keep])
        if kind in ("ecmp", "static"):
            # one path per row: nothing to merge
            state_row, state_node, state_frac = rows, nxt.astype(np.int64), weight
            continue
        # merge branches that reach the same node
        key = rows[keep].astype(np.int64) * topo.n_nodes + nxt[keep]
        uniq, inv = np.unique(key, return_inverse=True)
        state_frac = np.bincount(inv, weights=weight[keep])
        state_stride = np.ones(len(uniq), np.int64)  # strides only matter on single paths (static)
        state_row = uniq // topo.n_nodes
        state_node = uniq % topo.n_nodes
    else:
        raise RoutingError("routing did not converge in 32 hops (a loop in the fabric?)")
    return np.concatenate(rows_out), np.concatenate(links_out), np.concatenate(w_out)


def _adaptive_split(topo: Topology, owner: np.ndarray, links: np.ndarray, n_states: int,
                    background_Bps: np.ndarray | None, own_Bps: np.ndarray) -> np.ndarray:
    """Split each state's traffic over its candidate links by water-filling on their utilization.

    The fluid limit of "send each packet to the least-utilized next hop": the state's demand
    ``D`` fills the candidates to a common level ``lam`` of (load / capacity), giving link l
    ``max(0, lam * c_l - b_l)`` where ``b_l`` is the other flows' load. With no background load this
    is a split in proportion to capacity, so a degraded link gets its share and no more.
    """
    capacity_Bps = topo.link_capacity_Bps[links]
    # the previous round's load includes this flow's own share; in the fixed point every flow
    # sees the same levels, so keeping it only shifts the water level, not the split
    load_Bps = np.zeros(len(links)) if background_Bps is None else background_Bps[links]
    demand_Bps = np.bincount(owner, weights=own_Bps, minlength=n_states) / np.maximum(np.bincount(owner, minlength=n_states), 1)
    level = load_Bps / capacity_Bps
    order = np.lexsort((level, owner))
    o_owner, o_cap, o_bg, o_level = owner[order], capacity_Bps[order], load_Bps[order], level[order]
    group_start = np.searchsorted(o_owner, o_owner, "left")
    csum_cap, csum_bg = np.cumsum(o_cap), np.cumsum(o_bg)
    base_cap = np.where(group_start > 0, csum_cap[group_start - 1], 0.0)
    base_bg = np.where(group_start > 0, csum_bg[group_start - 1], 0.0)
    # the level reached if the demand_Bps fills candidates 0..k of the group (in order of utilization)
    lam = (demand_Bps[o_owner] + (csum_bg - base_bg)) / (csum_cap - base_cap)
    valid = lam >= o_level
    # the water level is that of the last candidate the water reaches
    last_valid = np.zeros(n_states, np.int64)
    np.maximum.at(last_valid, o_owner[valid], np.flatnonzero(valid))
    final_lam = lam[last_valid][o_owner]
    fill = np.maximum(final_lam * o_cap - o_bg, 0.0)
    total = np.bincount(o_owner, weights=fill, minlength=n_states)
    split_sorted = np.where(total[o_owner] > 0, fill / np.where(total[o_owner] > 0, total[o_owner], 1.0),
                            o_cap / np.bincount(o_owner, weights=o_cap, minlength=n_states)[o_owner])
    split = np.empty(len(links))
    split[order] = split_sorted
    return split


# ------------------------------------------------------------------------------------ public API
# an NVSwitch is an endpoint only for in-switch reduction (NVLS) by GPUs of its own server
_ENDPOINT_KINDS = ("gpu", "nic", "storage_server", "storage_nic", "nvswitch")


def _endpoints(topo: Topology, nodes) -> np.ndarray:
    ids = np.array([topo.node_id(n) for n in nodes], dtype=np.int64) if not isinstance(nodes, np.ndarray) else nodes.astype(np.int64)
    kinds = topo.node_kind[ids]
    bad = ~np.isin(kinds, [NODE_KINDS.index(k) for k in _ENDPOINT_KINDS])
    if bad.any():
        node = int(ids[np.flatnonzero(bad)[0]])
        raise RoutingError(f"endpoint {topo.node_name[node]!r} is a {topo.kind_of(node)}; expected a GPU, NIC or storage server",
                           hint="flows start and end at GPUs (s0.gpu3), NICs (s0.nic3) or storage servers (stor0)")
    return ids


def _network_endpoint(topo: Topology, node: np.ndarray, peer: np.ndarray, qp: np.ndarray) -> np.ndarray:
    """The NIC (or storage server) that carries traffic between node and a peer on another server.

    A GPU with several NICs of its own spreads its QPs over them round-robin, as NCCL spreads
    channels over a GPU's NICs."""
    out = node.copy()
    gpu = topo.node_kind[node] == _GPU
    if gpu.any():
        server = topo.node_server[node[gpu]]
        local = node[gpu] - topo.gpu_node[server, 0]
        to_storage_net = topo.node_network[peer[gpu]] == NETWORKS.index("storage")
        if topo.nic_node.shape[1] == 0 and not to_storage_net.all():
            raise RoutingError(f"{topo.node_name[node[gpu][0]]} has no compute NIC to reach another server")
        if topo.nic_node.shape[1]:
            choices = topo.gpu_nics[local]
            n_choices = (choices >= 0).sum(axis=1)
            nic = topo.nic_node[server, choices[np.arange(len(local)), qp[gpu] % n_choices]]
            if len(topo.gpu_nic_override):
                moved = topo.gpu_nic_override[node[gpu]]
                nic = np.where(moved >= 0, moved, nic)
        else:
            nic = np.full(len(server), -1)
        if to_storage_net.any():
            snics = np.flatnonzero(topo.node_kind == _SNIC)
            per_server = len(snics) // max(topo.n_servers, 1)
            if per_server == 0:
                raise RoutingError("the storage network is separate but the servers have no storage NICs")
            first = snics.reshape(topo.n_servers, per_server)[server, (local * per_server) // topo.gpus_per_server]
            nic = np.where(to_storage_net, first, nic)
        out[gpu] = nic
    return out


def _five_tuples(topo: Topology, transport: str, src_ep: np.ndarray, dst_ep: np.ndarray, qp: np.ndarray,
                 seed: int) -> tuple[FiveTuple, np.ndarray]:
    rng = np.random.default_rng(seed)
    base = rng.integers(2, (1 << 24) - (1 << 16), size=topo.n_nodes)
    # consecutive QPNs per NIC: the k-th QP a NIC opens gets base + k
    rank = rank_within_groups(src_ep)
    rank_d = rank_within_groups(dst_ep)
    local_qpn = (base[src_ep] + rank) & 0xFFFFFF
    remote_qpn = (base[dst_ep] + rank_d + 7) & 0xFFFFFF
    if transport == "tcp":
        sport = 32768 + rng.integers(0, 28232, size=len(src_ep))
        proto, dport = IPPROTO_TCP, 43000 + qp
    else:
        sport = rocev2_udp_sport(local_qpn, remote_qpn).astype(np.int64)
        proto, dport = IPPROTO_UDP, ROCEV2_UDP_DPORT
    tuples = FiveTuple(src_ip=0x0A000000 + src_ep, dst_ip=0x0A000000 + dst_ep, src_port=sport, dst_port=dport,
                       protocol=proto)
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


def route_flows(topo: Topology, spec: RoutingSpec, src, dst, *, transport: str = "rocev2",
                qps_per_connection: int | None = None) -> Routes:
    """Route flows ``src[i] -> dst[i]`` (node names or ids) through the topology.

    Parameters
    ----------
    topo : Topology
    spec : RoutingSpec
        Router kind, hash, seed, per-switch seeding and QPs per connection.
    src, dst : sequence of str or int, or ndarray of node ids
        GPUs, NICs or storage servers. A GPU reaches another server through the NIC on its PCIe
        switch (``topo.gpu_nic``), rail-aligned as NCCL does; GPUs of one server talk over NVLink.
    transport : str
        ``rocev2``/``infiniband`` hash UDP source ports derived from QP numbers; ``tcp`` hashes
        ephemeral ports.
    qps_per_connection : int, optional
        Overrides ``spec.qps_per_connection``; each QP becomes one row carrying 1/qps of the bytes.

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
    src_ids, dst_ids = _endpoints(topo, src), _endpoints(topo, dst)
    if len(src_ids) != len(dst_ids):
        raise RoutingError(f"src and dst: got {len(src_ids)} sources and {len(dst_ids)} destinations; expected the same number")
    same = src_ids == dst_ids
    if same.any():
        raise RoutingError(f"flow {int(np.flatnonzero(same)[0])}: source and destination are both {topo.node_name[src_ids[same][0]]}")
    if spec.kind == "ecmp":
        try:
            get_hash(spec.hash)
        except UnknownNameError as err:
            raise UnknownNameError(f"routing.hash: {err}", hint=err.hint) from None
    qps = qps_per_connection or spec.qps_per_connection
    F = len(src_ids)
    flow_index = np.repeat(np.arange(F), qps)
    qp = np.tile(np.arange(qps), F)
    src_r, dst_r = src_ids[flow_index], dst_ids[flow_index]
    R = len(flow_index)
    ctx = _context(topo)

    srv_s, srv_d = topo.node_server[src_r], topo.node_server[dst_r]
    local = (srv_s == srv_d) & (srv_s >= 0)
    pieces_rows, pieces_links, pieces_w = [], [], []

    def add_segments(rows_sel: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
        need = a != b
        for rows, links in _local_segments(ctx, a[need], b[need]):
            pieces_rows.append(rows_sel[need][rows])
            pieces_links.append(links)
            pieces_w.append(np.ones(len(rows)))

    if local.any():
        rows_l = np.flatnonzero(local)
        add_segments(rows_l, src_r[rows_l], dst_r[rows_l])
    sport = np.full(R, -1, np.int64)
    remote = np.flatnonzero(~local)
    if len(remote):
        s_ep = _network_endpoint(topo, src_r[remote], dst_r[remote], qp[remote])
        d_ep = _network_endpoint(topo, dst_r[remote], src_r[remote], qp[remote])
        add_segments(remote, src_r[remote], s_ep)
        add_segments(remote, d_ep, dst_r[remote])
        tuples, sport_remote = _five_tuples(topo, transport, s_ep, d_ep, qp[remote], spec.seed)
        sport[remote] = sport_remote
        dest_index = _fat_tree_order(topo)[d_ep]
        port_capacity_Bps = np.bincount(topo.link_src[topo.link_kind == _HOST_LINK],
                                    weights=topo.link_capacity_Bps[topo.link_kind == _HOST_LINK], minlength=topo.n_nodes)
        rows_per_ep = np.bincount(s_ep, minlength=topo.n_nodes)
        demand_Bps = port_capacity_Bps[s_ep] / np.maximum(rows_per_ep[s_ep], 1)
        background_Bps = None
        rounds = _ADAPTIVE_ROUNDS if spec.kind == "adaptive" else 1
        key_bytes = tuples.key_bytes()
        # a split flow fans out over every equal-cost path (1,024 core paths per flow in a 3-tier fabric
        # of radix 64): walk such flows in chunks so the fan-out stays bounded in memory
        chunk = len(remote) if spec.kind in ("ecmp", "static") else _SPLIT_CHUNK_ROWS
        for _ in range(rounds):
            parts = []
            for lo in range(0, len(remote), chunk):
                sl = slice(lo, lo + chunk)
                try:
                    c_rows, c_links, c_w = _walk_fabric(topo, spec, s_ep[sl], d_ep[sl], key_bytes[sl], qp[remote][sl],
                                                        dest_index[sl], background_Bps, demand_Bps[sl])
                except RoutingError as err:
                    if not hasattr(err, "row"):
                        raise
                    row = remote[lo + err.row]
                    raise RoutingError(f"no path from {topo.node_name[src_r[row]]} to {topo.node_name[dst_r[row]]}: "
                                       f"{topo.node_name[s_ep[lo + err.row]]} and {topo.node_name[d_ep[lo + err.row]]} "
                                       "share no network", hint=err.hint) from None
                parts.append((c_rows + lo, c_links, c_w))
            r_rows, r_links, r_w = (np.concatenate(x) for x in zip(*parts))
            load = np.bincount(r_links, weights=r_w * demand_Bps[r_rows], minlength=topo.n_links)
            # damped (Jacobi) rounds: every flow reacts to the others' last split, halfway, so they settle
            background_Bps = load if background_Bps is None else 0.5 * (background_Bps + load)
        pieces_rows.append(remote[r_rows])
        pieces_links.append(r_links)
        pieces_w.append(r_w)

    rows = np.concatenate(pieces_rows) if pieces_rows else np.zeros(0, np.int64)
    links = np.concatenate(pieces_links) if pieces_links else np.zeros(0, np.int64)
    weights = np.concatenate(pieces_w) if pieces_w else np.zeros(0)
    matrix = sp.csr_matrix((weights, (rows, links)), shape=(R, topo.n_links))
    matrix.sum_duplicates()
    matrix.sort_indices()
    latency = matrix @ topo.link_latency_s
    return Routes(flow_index=flow_index, qp_index=qp, link_weights=matrix, path_latency_s=np.asarray(latency).ravel(),
                  udp_sport=sport)
