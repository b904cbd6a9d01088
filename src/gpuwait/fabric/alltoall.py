"""An all-to-all's flows between servers as weighted groups, one per (source leaf, destination pod):
routed and solved without listing its n(n-1) flows.

Under a router that splits per leaf pair (spray, adaptive: ``Router.per_leaf_pair``), a flow from GPU
s to GPU d on another server crosses three parts: its source side S(s) (the GPU's PCIe path to its
NIC and the NIC's one uplink), the split between the two leaves M(leaf s, leaf d, demand), and its
destination side T(d). Every member of a group (sources A on one leaf with one demand, destinations
B on another leaf, all pairs on different servers) crosses the same M, so the group is one row of
multiplicity m whose own weights are the members' average ``(sum_s c_s S(s) + sum_d c_d T(d)) / m``
(c_s: members leaving s). With every member at the group's rate r, each link carries exactly what
the listed flows would carry: the per-link bytes are exact.

Three factorings keep the groups few and their rows and tables short:

* Per destination pod. Leaves with the same switches above them (a pod of a 3-tier fabric, every
  leaf of a 2-tier one) are reached the same way up to those switches; only the last hop s -> b
  differs. So the destinations of a pod (but the source's own leaf) are one group, routed once to a
  leaf b0 of the pod: its M is the route without the hops into b0, and the fraction f(s) that
  reaches each switch s goes down s -> b for the n(b) members on each leaf b, weight f(s) n(b) / m
  (:func:`_split_at_pod`). (leaves x pods) routes instead of (leaves)^2. Where a route does not end
  in one hop per switch into b0 (parallel cables down, a walk that enters b0 earlier) the groups are
  per destination leaf, as before.
* Averaged sides shared. When every source of a group's class sends as many flows into the group
  (the usual case: no server holds more of the destinations than another), the average of the
  sources' sides is the class's mean S whatever the destinations, so it is one shared class per
  (source class, QP) (``Routes.side_classes``), and likewise the destinations' mean T per pod. A
  group with an uneven side keeps that side's exact average with its own links.
* Members per leaf. A group reaches every GPU of its key's leaves, each as often as its class has
  sources on other servers, so its destinations are kept per (group, leaf) with per-(server, class)
  counts (:class:`DestinationMembers`), not per (group, GPU): 262 k pairs instead of 8.4 M at 16,384 GPUs.

The rates are exact when the members' rate is the max-min fair one for each of them, which
:func:`verify` checks on the solution with the bottleneck characterization of max-min fairness
(Bertsekas and Gallager, *Data Networks*, 2nd ed., section 6.5.2): an allocation is the max-min
fair one iff every flow is at its cap or crosses a saturated link on which no flow is faster. A
member's links are S(s), M and T(d) (with its last hop into d's leaf when grouped per pod); so a
group passes if its M has such a link, or every source's S(s) does, or every destination's T(d)
does. A group that fails (asymmetric capacities, a faulty NIC) sends the phase back to the
per-flow solve.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from gpuwait.arrays import unique_sorted
from gpuwait.collectives.algorithms import Phase, all_pairs
from gpuwait.routing.paths import Routes, port_capacity_Bps, route_flows, single_uplinks
from gpuwait.routing.routers import get_router
from gpuwait.spec.cluster import RoutingSpec
from gpuwait.topology.model import NodeKind, Topology

#: Relative slack when comparing a solved rate or load with a level (the solve's sums are rounded).
_RELATIVE_TOL = 1e-7


@dataclass(frozen=True, eq=False)
class PairGroups:
    """The between-server flows of a phase's pair sets as weighted groups (rows of ``routes``)."""

    routes: Routes              # one row per (group, QP); own weights are the members' average
    multiplicity: np.ndarray    # (G,) members per group
    bytes_per_flow: np.ndarray  # (G,) bytes of each member
    members_src: sp.csr_matrix  # (G, N) members of each group leaving each GPU of ``gpus``
    members_dst: DestinationMembers  # each group's members arriving at each GPU of ``gpus``, per leaf
    side_src: tuple[sp.csr_matrix, ...]  # per QP: (N, L) S(s) of each GPU
    side_dst: tuple[sp.csr_matrix, ...]  # per QP: (N, L) T(d) of each GPU
    middle_links: np.ndarray    # (L,) switch-to-switch links: a group row's own ones are part of its M
    # per destination pod: each row's last hops into its destinations' leaves (part of their destination
    # sides, not of M) as a shared part, (rows, classes) each row's fraction f(s) in the class of each
    # switch s and (classes, L) the class's links s -> b weighted n(b) / m; and (N,) the leaf node of
    # each GPU; None when grouped per leaf
    last_members: sp.csr_matrix | None = None
    last_classes: sp.csr_matrix | None = None
    leaf_of_gpu: np.ndarray | None = None
    link_dst: np.ndarray | None = None  # (L,) the node each link enters, when grouped per pod


def local_pairs(topo: Topology, phase: Phase) -> Phase:
    """The phase's listed flows and its pair sets' flows inside one server (few: k(k-1) per server)."""
    src, dst, size = [phase.src], [phase.dst], [phase.bytes_per_flow]
    for gpus, n_bytes in phase.pair_sets:
        gpus = np.asarray(gpus, np.int64)
        server = topo.node_server[gpus]
        order = np.argsort(server, kind="stable")
        starts = np.flatnonzero(np.r_[True, np.diff(server[order]) != 0])
        count = np.diff(np.r_[starts, len(order)])
        offset = np.r_[0, np.cumsum(count * (count - 1))]
        pair_src, pair_dst = np.empty(offset[-1], np.int64), np.empty(offset[-1], np.int64)
        for k in np.unique(count):  # the servers with k GPUs of the set at once, each server's pairs in its place
            a, b = all_pairs(int(k))
            of_k = np.flatnonzero(count == k)
            at = (offset[of_k][:, None] + np.arange(len(a))[None, :]).ravel()
            pair_src[at] = gpus[order[(starts[of_k][:, None] + a[None, :]).ravel()]]
            pair_dst[at] = gpus[order[(starts[of_k][:, None] + b[None, :]).ravel()]]
        src.append(pair_src)
        dst.append(pair_dst)
        size.append(np.full(len(pair_src), float(n_bytes)))
    return Phase(phase.name, np.concatenate(src).astype(np.int64), np.concatenate(dst).astype(np.int64),
                 np.concatenate(size), phase.repeat)


def nic_uplinks(topo: Topology, gpus: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(NIC, its one uplink) of each GPU, or None if some GPU has several NICs or a NIC several uplinks."""
    if topo.nic_node.shape[1] == 0 or len(topo.gpu_nic_override) or not (topo.node_kind[gpus] == NodeKind.GPU).all():
        return None
    server = topo.node_server[gpus]
    local = gpus - topo.gpu_node[server, 0]
    if ((topo.gpu_nics[local] >= 0).sum(axis=1) != 1).any():
        return None
    nic = topo.nic_node[server, topo.gpu_nic[local]]
    uplink = single_uplinks(topo)[nic]
    return None if (uplink < 0).any() else (nic, uplink)


def groupable(topo: Topology, phase: Phase, routing: RoutingSpec, nvlink_domains: bool) -> bool:
    """Whether the phase's pair sets can be grouped exactly: a per-leaf-pair router, GPUs with one NIC
    of one uplink each, no NVLink domain across servers, and every listed flow inside a server."""
    if not phase.pair_sets or not get_router(routing.kind).per_leaf_pair:
        return False
    if nvlink_domains and len(topo.nvlink_domain_switch):
        return False
    if (topo.node_server[phase.src] != topo.node_server[phase.dst]).any():
        return False
    gpus = np.concatenate([np.asarray(g, np.int64) for g, _ in phase.pair_sets])
    if len(unique_sorted(gpus)) != len(gpus) or len(unique_sorted(topo.node_server[gpus])) < 2:
        return False
    return nic_uplinks(topo, gpus) is not None


def _partners(server: np.ndarray, block: np.ndarray) -> np.ndarray:
    """A partner of each GPU on another server within its block (ordered by server, shifted by the block's
    largest server count: every GPU once a source and once a destination); a GPU's own index where its
    block has none."""
    order = np.lexsort((server, block))
    starts = np.flatnonzero(np.r_[True, block[order][1:] != block[order][:-1]])
    size = np.diff(np.r_[starts, len(order)])
    _, cell_count = np.unique(np.c_[block, server], axis=0, return_inverse=True)
    per_cell = np.bincount(cell_count.ravel())[cell_count.ravel()]
    shift = np.maximum.reduceat(per_cell[order], starts)
    of_block = np.repeat(np.arange(len(starts)), size)
    position = np.arange(len(order)) - starts[of_block]
    partner = np.empty(len(order), np.int64)
    partner[order] = order[starts[of_block] + (position + shift[of_block]) % size[of_block]]
    return partner


def _sides(topo: Topology, routing: RoutingSpec, transport: str, gpus: np.ndarray, leaf: np.ndarray | None = None
           ) -> tuple[tuple[sp.csr_matrix, ...], tuple[sp.csr_matrix, ...]] | None:
    """Per QP, each GPU's source side S (rows: GPUs) and destination side T, from one probe flow per
    GPU to a GPU of another server, every GPU once a source and once a destination: on its own leaf
    where every leaf has GPUs of two servers (the probe then never walks the fabric), else anywhere.
    A link belongs to the side whose server it touches."""
    server = topo.node_server[gpus]
    partner = _partners(server, np.zeros(len(gpus), np.int64) if leaf is None else leaf)
    if (server[partner] == server).any():
        partner = _partners(server, np.zeros(len(gpus), np.int64))
    if (server[partner] == server).any():
        return None
    # a GPU's side (its PCIe path to its one NIC, the NIC's one uplink) is the same under every splitting
    # router: the probes are sprayed (one walk, where the adaptive router takes several rounds)
    probe = routing.model_copy(update={"kind": "spray"}) if get_router(routing.kind).per_leaf_pair else routing
    routes = route_flows(topo, probe, gpus, gpus[partner], transport=transport)
    own = routes.own_weights.tocoo()
    side = ~topo.fabric_links[own.col]  # switch-to-switch links a staged route keeps with its own are M's
    own = sp.coo_matrix((own.data[side], (own.row[side], own.col[side])), shape=own.shape)
    link_server = topo.node_server[topo.link_src]
    link_server = np.where(link_server >= 0, link_server, topo.node_server[topo.link_dst])[own.col]
    flow = routes.flow_index[own.row]
    qp = routes.qp_index[own.row]
    at_src = link_server == server[flow]
    at_dst = link_server == server[partner[flow]]
    if not (at_src | at_dst).all():
        return None  # a row's own hop outside both servers: not the S + M + T shape
    shape = (len(gpus), topo.n_links)
    n_qps = int(routes.qp_index.max(initial=0)) + 1
    src_side = tuple(sp.csr_matrix((own.data[at_src & (qp == q)], (flow[at_src & (qp == q)], own.col[at_src & (qp == q)])),
                                   shape=shape) for q in range(n_qps))
    dst_side = tuple(sp.csr_matrix((own.data[at_dst & (qp == q)], (partner[flow[at_dst & (qp == q)]],
                                                                   own.col[at_dst & (qp == q)])), shape=shape)
                     for q in range(n_qps))
    return src_side, dst_side


@dataclass(frozen=True, eq=False)
class DestinationMembers:
    """Each group's destination members, stored per (group, destination leaf) instead of per (group, GPU).

    A group ``(class c, key k)`` reaches every GPU d on a leaf l with ``key_of[c, l] == k``, as often as
    c has sources on other servers than d's: ``v(d) = |c| - |c on d's server|`` (none when the whole class
    sits on d's server). So a leaf's member count and sum follow from per-leaf and per-(server, class)
    counts, and every per-member question the callers ask (first members, lowest levels, evenness) from
    per-leaf tables: (groups x leaves of their keys) entries, where the (group, GPU) table had (source
    classes x GPUs), 8.4 M at 16,384 GPUs."""

    group_class: np.ndarray    # (G,) source class of each group
    pairs: sp.csr_matrix       # (G, leaf ids) members of each group on each leaf of its key (stored: > 0)
    sums: sp.csr_matrix        # (G, leaf ids) the members' v(d) summed per leaf (same pattern as pairs)
    class_server: np.ndarray   # (C,) the one server all of a class's sources sit on, or -1
    class_size: np.ndarray     # (C,) sources of each class
    in_class_server: sp.csr_matrix  # (servers, C) sources of each class on each server
    server: np.ndarray         # (N,) server of each GPU (numbered per set)
    dst_leaf: np.ndarray       # (N,) leaf id of each GPU
    leaf_gpus: sp.csr_matrix   # (leaf ids, N) the GPUs of each leaf, in index order

    @property
    def shape(self) -> tuple[int, int]:
        return (self.pairs.shape[0], len(self.server))

    def take(self, rows: np.ndarray) -> DestinationMembers:
        return dataclasses.replace(self, group_class=self.group_class[rows], pairs=self.pairs[rows],
                                   sums=self.sums[rows])

    def count(self) -> np.ndarray:
        """(G,) members of each group."""
        return np.asarray(self.pairs.sum(axis=1)).ravel()

    def listed(self, rows: np.ndarray | None = None) -> sp.csr_matrix:
        """(G, N) the (group, GPU) table of members ``v(d)``, for the groups ``rows`` only (others empty)."""
        pairs = self.pairs.tocoo()
        if rows is not None:
            keep = np.isin(pairs.row, rows)
            pairs = sp.coo_matrix((pairs.data[keep], (pairs.row[keep], pairs.col[keep])), shape=pairs.shape)
        count = np.diff(self.leaf_gpus.indptr)[pairs.col]
        group = np.repeat(pairs.row, count)
        position = np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count)
        gpu = self.leaf_gpus.indices[np.repeat(self.leaf_gpus.indptr[pairs.col], count) + position].astype(np.int64)
        c = self.group_class[group]
        value = self.class_size[c] - _lookup(self.in_class_server, self.server[gpu], c)
        keep = value > 0
        return sp.csr_matrix((value[keep].astype(float), (group[keep], gpu[keep])), shape=self.shape)

    def _leaf_servers(self, n_first: int) -> np.ndarray:
        """(leaf ids, n_first) the first GPU of each of the first distinct servers of each leaf, -1 padded."""
        gpus = self.leaf_gpus
        leaf = np.repeat(np.arange(gpus.shape[0]), np.diff(gpus.indptr))
        server = self.server[gpus.indices]
        _, first = np.unique(leaf * (int(self.server.max()) + 1) + server, return_index=True)
        first = np.sort(first)  # in index order within each leaf (leaf_gpus' columns are sorted)
        rank = np.arange(len(first)) - np.searchsorted(leaf[first], leaf[first])
        out = np.full((gpus.shape[0], n_first), -1, np.int64)
        keep = rank < n_first
        out[leaf[first][keep], rank[keep]] = gpus.indices[first][keep]
        return out

    def first_two(self) -> tuple[np.ndarray, np.ndarray]:
        """(G,) each group's first member (lowest index) and its first member on another server (the
        first again where there is none): the first GPU not on excluded servers is the first GPU of the
        first of a leaf's servers (in order of their first GPU) that is not excluded."""
        table = self._leaf_servers(3)
        pairs = self.pairs.tocoo()
        excluded = self.class_server[self.group_class[pairs.row]]

        def first_not(servers: list[np.ndarray]) -> np.ndarray:
            candidates = table[pairs.col]  # (pairs, 3)
            ok = candidates >= 0
            for s in servers:
                ok &= self.server[np.maximum(candidates, 0)] != s[:, None]
            pick = np.where(ok.any(axis=1), candidates[np.arange(len(candidates)), ok.argmax(axis=1)], -1)
            out = np.full(self.pairs.shape[0], np.iinfo(np.int64).max)
            np.minimum.at(out, pairs.row[pick >= 0], pick[pick >= 0])
            return out

        first = first_not([excluded])
        other = first_not([excluded, self.server[first[pairs.row].clip(0, len(self.server) - 1)]])
        second = np.where(other < np.iinfo(np.int64).max, other, first)
        return first, second

    def even(self, n_of_group: np.ndarray) -> np.ndarray:
        """(G,) whether a group reaches all ``n_of_group`` GPUs of its side class, each as often: its
        members' v(d) differ only through |c on d's server|, nonzero on the servers holding c."""
        ics = self.in_class_server.tocoo()  # (server, class, sources)
        srv_gpus = sp.csr_matrix((np.ones(len(self.server)), (self.server, np.arange(len(self.server)))),
                                 shape=(self.in_class_server.shape[0], len(self.server)))
        srv_gpus.sort_indices()
        count = np.diff(srv_gpus.indptr)[ics.row]
        c = np.repeat(ics.col, count)
        corr = np.repeat(ics.data, count)
        gpu = srv_gpus.indices[np.repeat(srv_gpus.indptr[ics.row], count)
                               + np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count)]
        # the group of class c reaching d: (c, d's leaf) is a stored pair of one group of c
        pairs = self.pairs.tocoo()
        key = self.group_class[pairs.row].astype(np.int64) * self.pairs.shape[1] + pairs.col
        order = np.argsort(key)
        at = np.searchsorted(key[order], c * self.pairs.shape[1] + self.dst_leaf[gpu])
        found = at < len(key)
        found[found] = key[order][at[found]] == (c * self.pairs.shape[1] + self.dst_leaf[gpu])[found]
        found &= corr < self.class_size[c]  # v(d) = 0: not a member
        group = pairs.row[order][at[found]]
        n_groups = self.pairs.shape[0]
        n_corr = np.bincount(group, minlength=n_groups)
        high, low = np.zeros(n_groups), np.full(n_groups, np.inf)
        np.maximum.at(high, group, corr[found])
        np.minimum.at(low, group, corr[found])
        total = self.count()
        same = (n_corr == 0) | ((n_corr == total) & (high == low))
        return (total == n_of_group) & same

    def leaf_max(self, gpu_value: np.ndarray) -> np.ndarray:
        """(stored pairs,) the highest ``gpu_value`` over each (group, leaf) pair's members: the leaf's
        highest, or its highest off the server the group's class sits on."""
        gpus = self.leaf_gpus
        leaf = np.repeat(np.arange(gpus.shape[0]), np.diff(gpus.indptr))
        server = self.server[gpus.indices]
        value = gpu_value[gpus.indices]
        n_srv = int(self.server.max()) + 1
        # per (leaf, server) the highest, then per leaf the two highest of distinct servers
        cell, inverse = np.unique(leaf * n_srv + server, return_inverse=True)
        best = np.full(len(cell), -np.inf)
        np.maximum.at(best, inverse.ravel(), value)
        cell_leaf, cell_server = np.divmod(cell, n_srv)
        order = np.lexsort((-best, cell_leaf))
        rank = np.arange(len(order)) - np.searchsorted(cell_leaf[order], cell_leaf[order])
        top = np.full((gpus.shape[0], 2), -np.inf)
        top_server = np.full((gpus.shape[0], 2), -1, np.int64)
        keep = rank < 2
        top[cell_leaf[order][keep], rank[keep]] = best[order][keep]
        top_server[cell_leaf[order][keep], rank[keep]] = cell_server[order][keep]
        pairs = self.pairs.tocsr()
        row = np.repeat(np.arange(pairs.shape[0]), np.diff(pairs.indptr))
        excluded = self.class_server[self.group_class[row]]
        col = pairs.indices
        return np.where(top_server[col, 0] == excluded, top[col, 1], top[col, 0])


def _lookup(matrix: sp.csr_matrix, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """``matrix[rows[i], cols[i]]`` for every i."""
    if not len(rows):
        return np.zeros(0)
    return np.asarray(matrix[rows, cols]).ravel()


def _members(server: np.ndarray, src_class: np.ndarray, dst_leaf: np.ndarray, key_of: np.ndarray | None = None
             ) -> tuple[sp.csr_matrix, DestinationMembers]:
    """(members leaving each source, members arriving at each destination) of each group ``class * K + key``:
    every pair of a source of the class and a destination on a leaf of the key, on different servers.
    ``key_of[c, l]``: the key of leaf l for sources of class c (default: the leaf itself, K = L).
    Counted per (server, leaf) and (server, class), never per (GPU, leaf) or (GPU, class)."""
    n = len(server)
    _, srv = np.unique(server, return_inverse=True)
    srv = srv.ravel()
    n_classes, n_leaves, n_servers = int(src_class.max()) + 1, int(dst_leaf.max()) + 1, int(srv.max()) + 1
    if key_of is None:
        key_of = np.broadcast_to(np.arange(n_leaves)[None, :], (n_classes, n_leaves))
    n_keys = int(key_of.max()) + 1
    on_leaf = np.bincount(dst_leaf, minlength=n_leaves).astype(float)
    ones = np.ones(n)
    on_leaf_server = sp.csr_matrix((ones, (srv, dst_leaf)), shape=(n_servers, n_leaves))  # sums duplicates
    in_class = np.bincount(src_class, minlength=n_classes).astype(float)
    in_class_server = sp.csr_matrix((ones, (srv, src_class)), shape=(n_servers, n_classes))
    shape = (n_classes * n_keys, n)
    # source s of class c sends to every destination of a key's leaves but those on its own server:
    # on_key[c, k] - (s's server's GPUs on the key's leaves)
    on_key = np.zeros((n_classes, n_keys))
    np.add.at(on_key, (np.repeat(np.arange(n_classes), n_leaves), key_of.ravel()), np.tile(on_leaf, n_classes))
    key_rows = sp.csr_matrix(on_key > 0)
    count = np.diff(key_rows.indptr)[src_class]
    src = np.repeat(np.arange(n), count)
    key = key_rows.indices[np.repeat(key_rows.indptr[src_class], count) + np.arange(count.sum())
                           - np.repeat(np.cumsum(count) - count, count)].astype(np.int64)
    value = on_key[src_class[src], key]
    # each source's server's GPUs on each leaf: subtracted from that leaf's key
    per_srv = np.diff(on_leaf_server.indptr)[srv]
    s_of = np.repeat(np.arange(n), per_srv)
    at = np.repeat(on_leaf_server.indptr[srv], per_srv) + np.arange(per_srv.sum()) - np.repeat(np.cumsum(per_srv) - per_srv, per_srv)
    own = sp.csr_matrix((on_leaf_server.data[at],
                         (src_class[s_of] * n_keys + key_of[src_class[s_of], on_leaf_server.indices[at]], s_of)),
                        shape=shape)
    members_src = (sp.csr_matrix((value, (src_class[src] * n_keys + key, src)), shape=shape) - own).tocsr()
    members_src.eliminate_zeros()
    members_src.sort_indices()
    # destinations: per (group, leaf) the leaf's GPUs and their counts, minus the class's sources on each
    # GPU's server (summed over the leaf)
    leaf_gpus = sp.csr_matrix((ones, (dst_leaf, np.arange(n))), shape=(n_leaves, n))
    leaf_gpus.sort_indices()
    subtract = (sp.csr_matrix((ones, (dst_leaf, srv)), shape=(n_leaves, n_servers)) @ in_class_server).toarray()  # (L, C)
    whole = in_class_server.max(axis=0).toarray().ravel() == in_class  # a class on one server
    class_server = np.full(n_classes, -1, np.int64)
    ics = in_class_server.tocoo()
    on_one = whole[ics.col]
    class_server[ics.col[on_one]] = ics.row[on_one]
    on_class_server = (sp.csr_matrix((ones, (dst_leaf, srv)), shape=(n_leaves, n_servers))
                       .toarray()[:, np.maximum(class_server, 0)])  # (L, C) a leaf's GPUs on the class's server
    c_of, l_of = np.divmod(np.arange(n_classes * n_leaves), n_leaves)
    pair_count = on_leaf[l_of] - np.where(class_server[c_of] >= 0, on_class_server[l_of, c_of], 0.0)
    pair_sum = on_leaf[l_of] * in_class[c_of] - subtract[l_of, c_of]
    keep = pair_count > 0
    rows = c_of[keep] * n_keys + key_of[c_of[keep], l_of[keep]]
    pairs = sp.csr_matrix((pair_count[keep], (rows, l_of[keep])), shape=(shape[0], n_leaves))
    sums = sp.csr_matrix((pair_sum[keep], (rows, l_of[keep])), shape=(shape[0], n_leaves))
    members_dst = DestinationMembers(np.arange(shape[0]) // n_keys, pairs, sums, class_server, in_class,
                                     in_class_server, srv, dst_leaf, leaf_gpus)
    return members_src, members_dst


def _representatives(members_src: sp.csr_matrix, members_dst: DestinationMembers, server: np.ndarray) -> np.ndarray:
    """(G, 2) one member (source index, destination index) of each group: two sources of distinct
    servers and two destinations of distinct servers always hold a pair on different servers."""
    coo = members_src.tocoo()
    s1 = np.full(members_src.shape[0], -1, np.int64)
    s1[coo.row[::-1]] = coo.col[::-1]  # the last write wins: each row's first entry
    other = coo.col[server[coo.col] != server[s1[coo.row]]]
    s2 = s1.copy()
    s2[coo.row[server[coo.col] != server[s1[coo.row]]][::-1]] = other[::-1]
    d1, d2 = members_dst.first_two()
    src = np.where(server[s1] != server[d1], s1, np.where(server[s1] != server[d2], s1, s2))
    dst = np.where(server[s1] != server[d1], d1, np.where(server[s1] != server[d2], d2, d1))
    return np.c_[src, dst]


def group_pairs(topo: Topology, phase: Phase, routing: RoutingSpec, transport: str) -> PairGroups | None:
    """The between-server flows of ``phase.pair_sets`` as weighted groups (see the module), or None
    where the S + M + T shape does not hold, e.g. a GPU without exactly one NIC of one uplink (then the
    caller lists the flows). Groups per (source class, destination pod) where the routes allow
    (:func:`_split_at_pod`), else per destination leaf. Callers check :func:`groupable` first (the
    router, NVLink domains, every listed flow inside a server)."""
    gpus = np.concatenate([np.asarray(g, np.int64) for g, _ in phase.pair_sets])
    size = np.concatenate([np.full(len(g), float(b)) for g, b in phase.pair_sets])
    set_of = np.repeat(np.arange(len(phase.pair_sets)), [len(g) for g, _ in phase.pair_sets])
    server = topo.node_server[gpus]
    uplinks = nic_uplinks(topo, gpus)
    if uplinks is None:
        return None
    nic, uplink = uplinks
    # each source's demand, as route_flows sets it: its port over the rows leaving it
    _, srv_in_set = np.unique(set_of * topo.n_servers + server, return_inverse=True)
    remote = np.bincount(set_of, minlength=len(phase.pair_sets))[set_of] - np.bincount(srv_in_set)[srv_in_set]
    qps = routing.qps_per_connection
    rows_per_nic = np.bincount(nic, weights=remote * qps, minlength=topo.n_nodes)
    demand_Bps = port_capacity_Bps(topo)[nic] / np.maximum(rows_per_nic[nic], 1)
    leaf = topo.link_dst[uplink]
    # a group never mixes sets (another size, another set's peers), sources' demands, or leaves
    _, src_class = np.unique(np.c_[set_of, leaf, demand_Bps], axis=0, return_inverse=True)
    _, dst_leaf = np.unique(np.c_[set_of, leaf], axis=0, return_inverse=True)
    src_class, dst_leaf = src_class.ravel(), dst_leaf.ravel()
    sides = _sides(topo, routing, transport, gpus, leaf)
    if sides is None:
        return None
    prep = _Prepared(gpus, size, set_of, set_of * topo.n_servers + server, leaf, demand_Bps, src_class, dst_leaf, sides)
    return _grouped(topo, routing, transport, prep, by_pod=True) or _grouped(topo, routing, transport, prep, by_pod=False)


@dataclass(frozen=True, eq=False)
class _Prepared:
    gpus: np.ndarray
    size: np.ndarray
    set_of: np.ndarray
    server: np.ndarray  # (N,) server, numbered per set
    leaf: np.ndarray  # (N,) leaf node
    demand_Bps: np.ndarray
    src_class: np.ndarray  # (N,) (set, leaf, demand) class
    dst_leaf: np.ndarray  # (N,) (set, leaf) id
    sides: tuple[tuple[sp.csr_matrix, ...], tuple[sp.csr_matrix, ...]]


def _keys(topo: Topology, prep: _Prepared, by_pod: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(key_of (C, L): the destination key of leaf l for sources of class c, the set of each key, the
    destination-side class of each key (-1: none), the destination-side class of each leaf). Per pod:
    leaves with the same switches above them share a key, but for sources on that very leaf (their
    flows do not go up), whose key is the leaf's own."""
    n_classes, n_leaves = int(prep.src_class.max()) + 1, int(prep.dst_leaf.max()) + 1
    leaf_set, leaf_node = np.zeros(n_leaves, np.int64), np.zeros(n_leaves, np.int64)
    leaf_set[prep.dst_leaf], leaf_node[prep.dst_leaf] = prep.set_of, prep.leaf
    if not by_pod:
        leaves = np.arange(n_leaves)
        return np.broadcast_to(leaves[None, :], (n_classes, n_leaves)), leaf_set, leaves, leaves
    class_leaf = np.zeros(n_classes, np.int64)
    class_leaf[prep.src_class] = prep.dst_leaf
    up = np.flatnonzero(np.isin(topo.link_src, leaf_node) & topo.switch_nodes[topo.link_dst])
    above: dict[int, set] = {}
    for src, dst in zip(topo.link_src[up].tolist(), topo.link_dst[up].tolist(), strict=True):
        above.setdefault(src, set()).add(dst)
    pods: dict = {}
    pod = np.array([pods.setdefault((int(leaf_set[i]), tuple(sorted(above.get(int(leaf_node[i]), ())))), len(pods))
                    for i in range(n_leaves)], np.int64)
    n_pods = len(pods)
    leaves = np.arange(n_leaves)
    key_of = np.where(class_leaf[:, None] == leaves[None, :], n_pods + leaves[None, :], pod[None, :])
    pod_set = np.zeros(n_pods, np.int64)
    pod_set[pod] = leaf_set
    return key_of, np.r_[pod_set, leaf_set], np.r_[np.arange(n_pods), np.full(n_leaves, -1)], pod


def _grouped(topo: Topology, routing: RoutingSpec, transport: str, prep: _Prepared, by_pod: bool) -> PairGroups | None:
    key_of, key_set, key_side, leaf_side = _keys(topo, prep, by_pod)
    members_src, members_dst = _members(prep.server, prep.src_class, prep.dst_leaf, key_of)
    n_keys = len(key_set)
    # pairs of different sets are not flows: drop groups whose class and key are of two sets
    class_set = np.zeros(int(prep.src_class.max()) + 1, np.int64)
    class_set[prep.src_class] = prep.set_of
    group_ids = np.arange(members_src.shape[0])
    same_set = class_set[group_ids // n_keys] == key_set[group_ids % n_keys]
    multiplicity = np.asarray(members_src.sum(axis=1)).ravel()
    keep = np.flatnonzero(same_set & (multiplicity > 0))
    members_src, members_dst, multiplicity = members_src[keep], members_dst.take(keep), multiplicity[keep]
    gpus = prep.gpus
    rep = _representatives(members_src, members_dst, prep.server)
    routes = route_flows(topo, routing, gpus[rep[:, 0]], gpus[rep[:, 1]], transport=transport,
                         multiplicity=multiplicity, demand_Bps=prep.demand_Bps[rep[:, 0]])
    routes = routes.sides_joined(keep_class_sides=True)
    if routes.class_weights is None or routes.row_class is None or (routes.row_class < 0).any():
        return None
    leaves = np.zeros(topo.n_nodes, bool)
    leaves[prep.leaf] = True
    if any(leaves[topo.link_dst[w.indices]].any() for _, w in routes.side_classes):
        routes = routes.sides_joined()  # a walk that reached its leaf in the stage kept apart: one part
    middle = topo.fabric_links
    # a staged route (routing.stages) keeps the last stage of M, down to the destination leaf, as a side
    # part per leaf-pair class: joined into the row's own links (every member crosses it, as the class's part)
    class_weights, last = routes.class_weights, None
    if by_pod:  # the row's own links are all last hops, now in the shared part
        split = _split_at_pod(topo, routes, prep.leaf[rep[:, 1]], members_dst, prep.leaf, multiplicity)
        if split is None:
            return None
        class_weights, last = split[0], split[1:]
        own = sp.csr_matrix(routes.own_weights.shape)
    else:
        own = routes.own_weights @ sp.diags(middle.astype(float))
    group_side = key_side[keep % n_keys]
    side_key = leaf_side[prep.dst_leaf]
    side_classes, uneven = _side_classes(routes, keep // n_keys, group_side, prep.src_class, side_key,
                                         members_src, members_dst, prep.sides)
    # the route's middle parts kept apart (routing.stages' way up per source leaf) first: Routes.class_sides
    side_classes = (*routes.side_classes, *side_classes, *(() if last is None else (last,)))
    if uneven[0].any() or uneven[1].any():
        own = own + _average_sides(routes, sp.diags(uneven[0].astype(float)) @ members_src,
                                   members_dst.listed(np.flatnonzero(uneven[1])), multiplicity, prep.sides)
    own = own.tocsr()
    own.eliminate_zeros()
    own.sort_indices()
    grouped = Routes(flow_index=routes.flow_index, qp_index=routes.qp_index, own_weights=own,
                     path_latency_s=routes.path_latency_s, udp_sport=routes.udp_sport,
                     row_class=routes.row_class, class_weights=class_weights, side_classes=side_classes,
                     class_sides=routes.class_sides)
    return PairGroups(grouped, multiplicity, prep.size[rep[:, 0]], members_src, members_dst, *prep.sides,
                      middle_links=middle, last_members=None if last is None else last[0],
                      last_classes=None if last is None else last[1], leaf_of_gpu=prep.leaf if by_pod else None,
                      link_dst=topo.link_dst if by_pod else None)


def _split_entries(weights: sp.csr_matrix, into_leaf: np.ndarray) -> tuple[sp.csr_matrix, sp.coo_matrix]:
    """(the classes' weights without their entries into a leaf, those entries as triplets): the few
    last hops taken out without rebuilding the rest (8.9 M entries at 16,384 GPUs) from triplets."""
    weights = weights.tocsr()
    into = into_leaf[weights.indices]
    row = np.repeat(np.arange(weights.shape[0]), np.diff(weights.indptr))
    last = sp.coo_matrix((weights.data[into], (row[into], weights.indices[into])), shape=weights.shape)
    rest = sp.csr_matrix((np.where(into, 0.0, weights.data), weights.indices.copy(), weights.indptr.copy()),
                         shape=weights.shape)
    rest.eliminate_zeros()  # class weights are > 0: drops exactly the entries into a leaf
    rest.sort_indices()
    return rest, last


def _split_at_pod(topo: Topology, routes: Routes, rep_leaf: np.ndarray, members_dst: DestinationMembers,
                  leaf_of_gpu: np.ndarray, multiplicity: np.ndarray
                  ) -> tuple[sp.csr_matrix, sp.csr_matrix, sp.csr_matrix] | None:
    """(the classes' weights without their last hops into a leaf, (rows, K) each row's fraction f(s)
    in each last-hop class, (K, L) the last-hop classes' links), or None where a route's split does
    not end in one hop per switch into the representative's leaf (then the groups are per
    destination leaf).

    The representative of a (source class, pod) group runs to one leaf b0 of the pod. Every leaf of
    the pod has the same switches above it, so the way to any of them is the representative's but
    the last hop: from each switch s the fraction f(s) that reaches s goes down s -> b. With n(b) of
    the group's m members on leaf b, the row crosses s -> b with weight f(s) n(b) / m. The shares
    n(b) / m are the same for every group of a pod (but those from a leaf of the pod, without their
    own leaf), so the links s -> b weighted n(b) / m are one class per (switch, shares) and the row is
    in the class of each of its switches with scale f(s): (leaves x pods x switches) memberships and
    (pods x switches x leaves per pod) class links instead of (leaves x pods x switches x leaves per
    pod) row links."""
    n_rows, n_links = routes.own_weights.shape
    leaves = np.zeros(topo.n_nodes, bool)
    leaves[leaf_of_gpu] = True
    hops = _last_hops(topo, routes, rep_leaf[routes.flow_index], leaves)
    if hops is None:
        return None
    shared, last = hops
    switch = topo.link_src[last.col]
    if len(unique_sorted(last.row.astype(np.int64) * topo.n_nodes + switch)) != last.nnz:
        return None  # parallel cables from one switch into the leaf: the split over them is the leaf's own
    leaf_nodes, per_leaf = _members_on_leaves(members_dst, leaf_of_gpu)
    share, rep_group, share_of_group = _shares(per_leaf, multiplicity)
    switches, switch_pos = np.unique(switch, return_inverse=True)
    n_shares = len(rep_group)
    # each last-hop entry's class: its switch and its group's shares
    code_of_entry = switch_pos.ravel() * n_shares + share_of_group[routes.flow_index[last.row]]
    codes, members = _last_hop_memberships(last, code_of_entry, n_rows)
    class_switch, class_share = np.divmod(codes, n_shares)
    down_link = _down_links(topo, switches, leaf_nodes, leaves)
    last_classes = _last_class_links(class_switch, rep_group[class_share], per_leaf, share, down_link, n_links)
    return None if last_classes is None else (shared, members, last_classes)


def _last_hops(topo: Topology, routes: Routes, row_leaf: np.ndarray, leaves: np.ndarray
               ) -> tuple[sp.csr_matrix, sp.coo_matrix] | None:
    """(the classes' weights without their hops into a leaf, (rows, L) each row's hops into its
    representative's leaf ``row_leaf``, its own and its class's, with their fractions f(s)), or None
    where a route enters a leaf other than that one. ``leaves``: per node, whether it is a leaf."""
    own = _own_last_hops(topo, routes.own_weights, row_leaf)
    if own is None:
        return None
    split = _class_last_hops(topo, routes, row_leaf, leaves)
    if split is None:
        return None
    shared, class_last = split
    return shared, (sp.csr_matrix(class_last)[routes.row_class] + own).tocoo()


def _own_last_hops(topo: Topology, own_weights: sp.csr_matrix, row_leaf: np.ndarray) -> sp.csr_matrix | None:
    """(rows, L) the rows' own fabric links, or None unless every one is a last hop into the row's
    representative's leaf (the rest of a row's own links are its sides, not split at the pod)."""
    own = own_weights.tocoo()
    fab = topo.fabric_links[own.col]
    own_row, own_link, own_w = own.row[fab], own.col[fab], own.data[fab]
    if (topo.link_dst[own_link] != row_leaf[own_row]).any():
        return None  # an own fabric link that is not a last hop into the representative's leaf
    return sp.csr_matrix((own_w, (own_row, own_link)), shape=own.shape)


def _class_last_hops(topo: Topology, routes: Routes, row_leaf: np.ndarray, leaves: np.ndarray
                     ) -> tuple[sp.csr_matrix, sp.coo_matrix] | None:
    """(the classes' weights without their hops into a leaf, (classes, L) those hops), or None where a
    class enters two leaves, or a leaf other than its rows' representative's."""
    shared, last = _split_entries(routes.class_weights, leaves[topo.link_dst])
    class_leaf = np.full(last.shape[0], -1, np.int64)
    class_leaf[last.row] = topo.link_dst[last.col]
    if (topo.link_dst[last.col] != class_leaf[last.row]).any():
        return None  # a class entering two leaves
    row_class = routes.row_class
    has_last = class_leaf[row_class] >= 0
    if (class_leaf[row_class][has_last] != row_leaf[has_last]).any():
        return None  # a class entering another leaf than its rows' representative's
    return shared, last


def _members_on_leaves(members_dst: DestinationMembers, leaf_of_gpu: np.ndarray) -> tuple[np.ndarray, sp.csr_matrix]:
    """(the leaf nodes, sorted; (G, leaf nodes) n(b): each group's members on each leaf b, indices sorted).
    ``members_dst`` numbers leaves per set of GPUs; here they are numbered by node, as the links are."""
    leaf_nodes, leaf_idx = np.unique(leaf_of_gpu, return_inverse=True)
    position_of_id = np.zeros(members_dst.pairs.shape[1], np.int64)  # leaf id -> position of its node
    position_of_id[members_dst.dst_leaf] = leaf_idx.ravel()
    sums = members_dst.sums
    per_leaf = sp.csr_matrix((sums.data, position_of_id[sums.indices], sums.indptr),
                             shape=(sums.shape[0], len(leaf_nodes)))
    per_leaf.sort_indices()
    return leaf_nodes, per_leaf


def _shares(per_leaf: sp.csr_matrix, multiplicity: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(per entry of ``per_leaf``, its group's share n(b) / m on its leaf; a group holding each distinct
    set of shares; the number of each group's set). The sets are numbered by their value: few, one per
    pod and one per leaf of a pod (the groups from that leaf, without their own)."""
    share = per_leaf.data / np.repeat(multiplicity, np.diff(per_leaf.indptr))
    ids: dict = {}
    first_alike = np.array([ids.setdefault((per_leaf.indices[a:b].tobytes(), share[a:b].tobytes()), g)
                            for g, (a, b) in enumerate(zip(per_leaf.indptr[:-1], per_leaf.indptr[1:], strict=True))],
                           np.int64)
    rep_group, share_of_group = np.unique(first_alike, return_inverse=True)
    return share, rep_group, share_of_group.ravel()


def _last_hop_memberships(last: sp.coo_matrix, code_of_entry: np.ndarray, n_rows: int) -> tuple[np.ndarray, sp.csr_matrix]:
    """(the (switch, shares) codes present, sorted: a last-hop class each; (rows, K) each row's membership of
    them): each last-hop entry ``code_of_entry`` makes its row a member of its class, scaled f(s)."""
    codes, class_of_entry = np.unique(code_of_entry, return_inverse=True)
    return codes, sp.csr_matrix((last.data, (last.row, class_of_entry.ravel())), shape=(n_rows, len(codes)))


def _down_links(topo: Topology, switches: np.ndarray, leaf_nodes: np.ndarray, leaves: np.ndarray) -> np.ndarray:
    """(switches, leaf nodes) the one link from each switch into each leaf: -1 where none, -2 where
    parallel cables. A table of the few (switch, leaf) pairs instead of a lookup per entry."""
    down = np.flatnonzero(np.isin(topo.link_src, switches) & leaves[topo.link_dst])
    down_leaf = np.searchsorted(leaf_nodes, topo.link_dst[down])
    down_leaf_ok = down_leaf < len(leaf_nodes)
    down, down_leaf = down[down_leaf_ok], down_leaf[down_leaf_ok]
    table = np.full((len(switches), len(leaf_nodes)), -1, np.int64)
    cell = (np.searchsorted(switches, topo.link_src[down]), down_leaf)
    cables = np.zeros(table.shape, np.int64)
    np.add.at(cables, cell, 1)
    table[cell] = down
    table[cables > 1] = -2
    return table


def _last_class_links(class_switch: np.ndarray, class_group: np.ndarray, per_leaf: sp.csr_matrix, share: np.ndarray,
                      down_link: np.ndarray, n_links: int) -> sp.csr_matrix | None:
    """(K, L) each last-hop class's links s -> b with weight n(b) / m, for every leaf b of its shares (those
    of ``class_group``, a group with them), or None where a switch has no single link into such a leaf."""
    count = np.diff(per_leaf.indptr)[class_group]
    entry = np.repeat(np.arange(len(class_switch)), count)
    # the class's k-th leaf is entry indptr[group] + k of per_leaf
    position = (np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count)
                + np.repeat(per_leaf.indptr[class_group], count))
    link = down_link[class_switch[entry], per_leaf.indices[position]]
    if (link < 0).any():
        return None
    return sp.csr_matrix((share[position], (entry, link)), shape=(len(class_switch), n_links))


def _even(members: sp.csr_matrix, n_of_group: np.ndarray) -> np.ndarray:
    """(G,) whether a group's members leave (or reach) every GPU of its class (or leaf) alike."""
    members = members.tocsr()
    count = np.diff(members.indptr)
    start = members.indptr[:-1][count > 0]
    high, low = np.zeros(members.shape[0]), np.zeros(members.shape[0])
    high[count > 0] = np.maximum.reduceat(members.data, start)
    low[count > 0] = np.minimum.reduceat(members.data, start)
    return (count == n_of_group) & (high == low)


def _side_classes(routes: Routes, group_class: np.ndarray, group_leaf: np.ndarray, src_class: np.ndarray,
                  dst_leaf: np.ndarray, members_src: sp.csr_matrix, members_dst: DestinationMembers,
                  sides: tuple[tuple[sp.csr_matrix, ...], tuple[sp.csr_matrix, ...]]
                  ) -> tuple[tuple[tuple[np.ndarray, sp.csr_matrix], ...], tuple[np.ndarray, np.ndarray]]:
    """The groups' averaged sides as shared parts, and the groups whose side is uneven (source, destination).

    When every GPU of a group's source class sends the same count c to the destination leaf (no
    server of the class holds more of the leaf's GPUs than another), the members' source sides
    average to ``sum_s c S(s) / (c |class|)``: the class's mean S, whatever the leaf. So one class
    per (source class, QP) holds it, and likewise one per (destination leaf, QP) the mean T. A group
    with an uneven side keeps that side's exact average with its own links."""
    n_qps = len(sides[0])
    out, uneven = [], []
    for key, group_key, members in ((src_class, group_class, members_src), (dst_leaf, group_leaf, members_dst)):
        n_keys = int(key.max()) + 1
        size = np.bincount(key, minlength=n_keys)
        n_of_group = np.where(group_key >= 0, size[group_key], -1)
        even = (group_key >= 0) & (members.even(n_of_group) if isinstance(members, DestinationMembers)
                                   else _even(members, n_of_group))
        mean = sp.csr_matrix((1.0 / size[key], (key, np.arange(len(key)))), shape=(n_keys, len(key)))
        uneven.append(~even)
        out.append((routes.qp_index * n_keys + group_key[routes.flow_index], even[routes.flow_index], mean))
    weights = []
    for (row_class, even, mean), side in zip(out, sides, strict=True):
        matrix = sp.vstack([mean @ side[q] for q in range(n_qps)]).tocsr()  # QP-major: row q * K + key
        matrix.eliminate_zeros()
        matrix.sort_indices()
        weights.append((np.where(even, row_class, -1).astype(np.int64), matrix))
    return tuple(weights), (uneven[0], uneven[1])


def _average_sides(routes: Routes, members_src: sp.csr_matrix, members_dst: sp.csr_matrix, multiplicity: np.ndarray,
                   sides: tuple[tuple[sp.csr_matrix, ...], tuple[sp.csr_matrix, ...]]) -> sp.csr_matrix:
    """Each (group, QP) row's own weights: its members' S and T averaged with their counts."""
    inv = sp.diags(1.0 / multiplicity)
    per_qp = [(inv @ (members_src @ s_side + members_dst @ t_side)).tocsr() for s_side, t_side in zip(*sides, strict=True)]
    stacked = sp.vstack(per_qp).tocsr()  # QP-major: row q * G + g
    out = stacked[routes.qp_index * len(multiplicity) + routes.flow_index].tocsr()
    out.sum_duplicates()
    out.sort_indices()
    return out


def _row_reduce(ufunc: np.ufunc, matrix: sp.csr_matrix, values: np.ndarray, empty: float) -> np.ndarray:
    """``ufunc`` of ``values[column]`` over each row's stored columns (``empty`` for a row without any)."""
    count = np.diff(matrix.indptr)
    out = np.full(matrix.shape[0], empty)
    if matrix.nnz:
        out[count > 0] = ufunc.reduceat(values[matrix.indices], matrix.indptr[:-1][count > 0])
    return out


def _last_hop_levels(members: sp.csr_matrix, classes: sp.csr_matrix, leaf_of_gpu: np.ndarray, link_dst: np.ndarray,
                     level: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """((rows, leaves) each row's lowest level on its last hops into each leaf, (N,) each GPU's leaf
    position). Rows in the same last-hop classes share it: computed once per such set."""
    leaf_ids, leaf_idx = np.unique(leaf_of_gpu, return_inverse=True)
    position = np.full(int(leaf_ids.max()) + 1, -1, np.int64)
    position[leaf_ids] = np.arange(len(leaf_ids))
    members = members.tocsr()
    members.sort_indices()
    ids: dict = {}
    set_of_row = np.array([ids.setdefault(members.indices[a:b].tobytes(), r)
                           for r, (a, b) in enumerate(zip(members.indptr[:-1], members.indptr[1:], strict=True))],
                          np.int64)
    rep_row, set_of_row = np.unique(set_of_row, return_inverse=True)
    of_set = members[rep_row]
    pair = (of_set.astype(bool).astype(float) @ classes.astype(bool).astype(float)).tocoo()  # (sets, L): links crossed
    set_level = np.full((len(rep_row), len(leaf_ids)), np.inf)
    np.minimum.at(set_level, (pair.row, position[link_dst[pair.col]]), level[pair.col])
    return set_level[set_of_row.ravel()], leaf_idx.ravel()


def _sides_bottlenecked(groups: PairGroups, group_rate_Bps: np.ndarray, level: np.ndarray) -> np.ndarray:
    """Per group row: every source's side, or every destination's (with its last hop into the leaf
    when grouped per pod), has a link where the row is bottlenecked."""
    ok = np.zeros(len(group_rate_Bps), bool)
    qp_index, flow_index = groups.routes.qp_index, groups.routes.flow_index
    last_level = None
    if groups.last_members is not None and groups.last_classes is not None and groups.leaf_of_gpu is not None:
        last_level, leaf_idx = _last_hop_levels(groups.last_members, groups.last_classes, groups.leaf_of_gpu,
                                                groups.link_dst, level)  # type: ignore[arg-type]
    for q, (s_side, t_side) in enumerate(zip(groups.side_src, groups.side_dst, strict=True)):
        rows = np.flatnonzero(qp_index == q)
        row_of_group = np.full(groups.members_src.shape[0], -1, np.int64)
        row_of_group[flow_index[rows]] = rows
        every = []
        # the group's member whose side needs the highest rate: sources one by one, destinations per leaf
        # (a leaf's highest level, with the row's lowest on its last hops into that leaf when grouped per pod)
        src_level = _row_reduce(np.minimum, s_side.tocsr(), level, np.inf)  # each GPU's side: its lowest level
        every.append(_row_reduce(np.maximum, groups.members_src.tocsr(), src_level, 0.0)[flow_index[rows]])
        dst = groups.members_dst
        per_pair = dst.leaf_max(_row_reduce(np.minimum, t_side.tocsr(), level, np.inf))
        pairs = dst.pairs
        if last_level is not None:
            pair_group = np.repeat(np.arange(pairs.shape[0]), np.diff(pairs.indptr))
            position_of_id = np.zeros(pairs.shape[1], np.int64)
            position_of_id[dst.dst_leaf] = leaf_idx
            per_pair = np.minimum(per_pair, last_level[row_of_group[pair_group], position_of_id[pairs.indices]])
        count = np.diff(pairs.indptr)
        worst = np.zeros(pairs.shape[0])
        worst[count > 0] = np.maximum.reduceat(per_pair, pairs.indptr[:-1][count > 0])
        every.append(worst[flow_index[rows]])
        need = np.minimum(every[0], every[1])
        ok[rows] |= group_rate_Bps[rows] >= need * (1 - _RELATIVE_TOL)
    return ok


def _max_on_saturated(fastest: np.ndarray, class_weights: sp.spmatrix, class_rate: np.ndarray,
                      saturated: np.ndarray) -> None:
    """``fastest[l] = max(fastest[l], class_rate[c])`` for every class c on every saturated link l (the
    fastest flow is read only there: the class parts' millions of entries on other links are skipped)."""
    weights = sp.csr_matrix(class_weights)
    on = saturated[weights.indices]
    row = np.repeat(np.arange(weights.shape[0]), np.diff(weights.indptr))[on]
    np.maximum.at(fastest, weights.indices[on], class_rate[row])


def verify(routes: Routes, rate_Bps: np.ndarray, row_multiplicity: np.ndarray, capacity_Bps: np.ndarray,
           rate_cap_Bps: np.ndarray | None, groups: PairGroups) -> bool:
    """Whether the solved rates are the max-min fair rates of the listed flows (see the module):
    ``routes`` holds the listed rows first and the groups' rows (``groups.routes``) last."""
    n_links = len(capacity_Bps)
    load = routes.link_load(rate_Bps * row_multiplicity)
    saturated = load >= capacity_Bps * (1 - _RELATIVE_TOL)
    fastest = np.zeros(n_links)  # the fastest flow on each link
    own = routes.own_weights.tocoo()
    np.maximum.at(fastest, own.col, rate_Bps[own.row])
    for row_class, class_weights in routes.side_classes:  # the groups' averaged sides and last hops
        side_fastest = np.zeros(class_weights.shape[0])
        if isinstance(row_class, np.ndarray):
            side_has = row_class >= 0
            np.maximum.at(side_fastest, row_class[side_has], rate_Bps[side_has])
        else:  # several classes per row (the last hops)
            member = row_class.tocoo()
            np.maximum.at(side_fastest, member.col, rate_Bps[member.row])
        _max_on_saturated(fastest, class_weights, side_fastest, saturated)
    shared = None
    if routes.class_weights is not None and routes.row_class is not None:
        has = routes.row_class >= 0
        class_fastest = np.zeros(routes.class_weights.shape[0])
        np.maximum.at(class_fastest, routes.row_class[has], rate_Bps[has])
        shared = routes.class_weights
        _max_on_saturated(fastest, shared, class_fastest, saturated)
    # a flow at rate r is bottlenecked on link l iff l is saturated and nobody on l is faster than r
    level = np.where(saturated, fastest, np.inf)
    ok = np.zeros(len(rate_Bps), bool) if rate_cap_Bps is None else rate_Bps >= rate_cap_Bps * (1 - _RELATIVE_TOL)
    if shared is not None and routes.row_class is not None:
        # a row's M: its class's part and the side parts that follow its class (routing.stages' way up)
        middle_level = np.full(routes.n_rows, np.inf)
        for i, (row_class, weights) in enumerate(((routes.row_class, routes.class_weights), *routes.side_classes)):
            if i and i - 1 not in routes.class_sides:
                continue
            class_level = _row_reduce(np.minimum, weights.tocsr(), level, np.inf)  # each class's lowest level
            has = row_class >= 0
            middle_level[has] = np.minimum(middle_level[has], class_level[row_class[has]])
        ok |= rate_Bps >= middle_level * (1 - _RELATIVE_TOL)
    n_listed = routes.n_rows - groups.routes.n_rows
    if groups.last_members is None:
        # a group row's own middle links (its route's last stage) are M too: every member crosses them
        mid = (own.row >= n_listed) & groups.middle_links[own.col]
        mid_level = np.full(routes.n_rows, np.inf)
        np.minimum.at(mid_level, own.row[mid], level[own.col[mid]])
        ok |= rate_Bps >= mid_level * (1 - _RELATIVE_TOL)
    own_level = np.full(n_listed, np.inf)  # listed rows: their own links
    listed = own.row < n_listed
    np.minimum.at(own_level, own.row[listed], level[own.col[listed]])
    ok[:n_listed] |= rate_Bps[:n_listed] >= own_level * (1 - _RELATIVE_TOL)
    ok[n_listed:] |= _sides_bottlenecked(groups, rate_Bps[n_listed:], level)
    return bool(ok.all())
