"""An all-to-all's flows between servers as weighted groups, one per (source leaf, destination leaf):
routed and solved without listing its n(n-1) flows.

Under a router that splits per leaf pair (spray, adaptive: ``Router.per_leaf_pair``), a flow from GPU
s to GPU d on another server crosses three parts: its source side S(s) (the GPU's PCIe path to its
NIC and the NIC's one uplink), the split between the two leaves M(leaf s, leaf d, demand), and its
destination side T(d). Every member of a group (sources A on one leaf with one demand, destinations
B on another leaf, all pairs on different servers) crosses the same M, so the group is one row of
multiplicity m whose own weights are the members' average ``(sum_s c_s S(s) + sum_d c_d T(d)) / m``
(c_s: members leaving s). With every member at the group's rate r, each link carries exactly what
the listed flows would carry: the per-link bytes are exact.

The rates are exact when the members' rate is the max-min fair one for each of them, which
:func:`verify` checks on the solution with the bottleneck characterization of max-min fairness
(Bertsekas and Gallager, *Data Networks*, 2nd ed., section 6.5.2): an allocation is the max-min
fair one iff every flow is at its cap or crosses a saturated link on which no flow is faster. A
member's links are S(s), M and T(d); so a group passes if its M has such a link, or every source's
S(s) does, or every destination's T(d) does. A group that fails (asymmetric capacities, a faulty
NIC) sends the phase back to the per-flow solve.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from gpuwait.collectives.algorithms import Phase, all_pairs
from gpuwait.routing.paths import Routes, port_capacity_Bps, route_flows
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
    members_dst: sp.csr_matrix  # (G, N) members of each group arriving at each GPU of ``gpus``
    side_src: tuple[sp.csr_matrix, ...]  # per QP: (N, L) S(s) of each GPU
    side_dst: tuple[sp.csr_matrix, ...]  # per QP: (N, L) T(d) of each GPU
    middle_links: np.ndarray    # (L,) switch-to-switch links: a group row's own ones are part of its M


def local_pairs(topo: Topology, phase: Phase) -> Phase:
    """The phase's listed flows and its pair sets' flows inside one server (few: k(k-1) per server)."""
    src, dst, size = [phase.src], [phase.dst], [phase.bytes_per_flow]
    for gpus, n_bytes in phase.pair_sets:
        gpus = np.asarray(gpus, np.int64)
        server = topo.node_server[gpus]
        order = np.argsort(server, kind="stable")
        starts = np.flatnonzero(np.r_[True, np.diff(server[order]) != 0])
        for members in np.split(order, starts[1:]):
            a, b = all_pairs(len(members))
            src.append(gpus[members[a]])
            dst.append(gpus[members[b]])
            size.append(np.full(len(a), float(n_bytes)))
    return Phase(phase.name, np.concatenate(src).astype(np.int64), np.concatenate(dst).astype(np.int64),
                 np.concatenate(size), phase.repeat)


def _nic_uplinks(topo: Topology, gpus: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(NIC, its one uplink) of each GPU, or None if some GPU has several NICs or a NIC several uplinks."""
    if topo.nic_node.shape[1] == 0 or len(topo.gpu_nic_override) or not (topo.node_kind[gpus] == NodeKind.GPU).all():
        return None
    server = topo.node_server[gpus]
    local = gpus - topo.gpu_node[server, 0]
    if ((topo.gpu_nics[local] >= 0).sum(axis=1) != 1).any():
        return None
    nic = topo.nic_node[server, topo.gpu_nic[local]]
    up = np.flatnonzero(topo.host_links & topo.switch_nodes[topo.link_dst])
    count = np.bincount(topo.link_src[up], minlength=topo.n_nodes)
    only = np.full(topo.n_nodes, -1, np.int64)
    only[topo.link_src[up]] = up
    uplink = np.where(count[nic] == 1, only[nic], -1)
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
    if len(np.unique(gpus)) != len(gpus) or len(np.unique(topo.node_server[gpus])) < 2:
        return False
    return _nic_uplinks(topo, gpus) is not None


def _sides(topo: Topology, routing: RoutingSpec, transport: str, gpus: np.ndarray
           ) -> tuple[tuple[sp.csr_matrix, ...], tuple[sp.csr_matrix, ...]] | None:
    """Per QP, each GPU's source side S (rows: GPUs) and destination side T, from one probe flow per
    GPU to a GPU of another server (ordered by server, shifted by the largest server's count, so every
    GPU is once a source and once a destination). A link belongs to the side whose server it touches."""
    server = topo.node_server[gpus]
    order = np.argsort(server, kind="stable")
    shift = int(np.bincount(np.unique(server, return_inverse=True)[1]).max())
    partner = np.empty(len(gpus), np.int64)
    partner[order] = order[(np.arange(len(gpus)) + shift) % len(gpus)]
    if (server[partner] == server).any():
        return None
    routes = route_flows(topo, routing, gpus, gpus[partner], transport=transport)
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


def _members(server: np.ndarray, src_class: np.ndarray, dst_leaf: np.ndarray
             ) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """(members leaving each source, members arriving at each destination) of each group ``class * L + leaf``:
    every pair of a source of the class and a destination on the leaf, on different servers."""
    n = len(server)
    _, srv = np.unique(server, return_inverse=True)
    n_classes, n_leaves, n_servers = int(src_class.max()) + 1, int(dst_leaf.max()) + 1, int(srv.max()) + 1
    on_leaf = np.bincount(dst_leaf, minlength=n_leaves)
    on_leaf_server = np.zeros((n_servers, n_leaves))
    np.add.at(on_leaf_server, (srv, dst_leaf), 1.0)
    in_class = np.bincount(src_class, minlength=n_classes)
    in_class_server = np.zeros((n_servers, n_classes))
    np.add.at(in_class_server, (srv, src_class), 1.0)
    shape = (n_classes * n_leaves, n)
    # source s of class c sends to every destination of leaf l but those on its own server
    per_src = on_leaf[None, :] - on_leaf_server[srv]  # (n, L)
    rows = src_class[:, None] * n_leaves + np.arange(n_leaves)[None, :]
    cols = np.broadcast_to(np.arange(n)[:, None], per_src.shape)
    keep = per_src > 0
    members_src = sp.csr_matrix((per_src[keep], (rows[keep], cols[keep])), shape=shape)
    per_dst = in_class[None, :] - in_class_server[srv]  # (n, C)
    rows = np.arange(n_classes)[None, :] * n_leaves + dst_leaf[:, None]
    cols = np.broadcast_to(np.arange(n)[:, None], per_dst.shape)
    keep = per_dst > 0
    members_dst = sp.csr_matrix((per_dst[keep], (rows[keep], cols[keep])), shape=shape)
    return members_src, members_dst


def _representatives(members_src: sp.csr_matrix, members_dst: sp.csr_matrix, server: np.ndarray) -> np.ndarray:
    """(G, 2) one member (source index, destination index) of each group: two sources of distinct
    servers and two destinations of distinct servers always hold a pair on different servers."""
    def two(members: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray]:
        coo = members.tocoo()
        first = np.full(members.shape[0], -1, np.int64)
        first[coo.row[::-1]] = coo.col[::-1]  # the last write wins: each row's first entry
        other = coo.col[server[coo.col] != server[first[coo.row]]]
        second = first.copy()
        second[coo.row[server[coo.col] != server[first[coo.row]]][::-1]] = other[::-1]
        return first, second

    s1, s2 = two(members_src)
    d1, d2 = two(members_dst)
    src = np.where(server[s1] != server[d1], s1, np.where(server[s1] != server[d2], s1, s2))
    dst = np.where(server[s1] != server[d1], d1, np.where(server[s1] != server[d2], d2, d1))
    return np.c_[src, dst]


def group_pairs(topo: Topology, phase: Phase, routing: RoutingSpec, transport: str) -> PairGroups | None:
    """The between-server flows of ``phase.pair_sets`` as weighted groups (see the module), or None
    where the S + M + T shape does not hold (then the caller lists the flows)."""
    gpus = np.concatenate([np.asarray(g, np.int64) for g, _ in phase.pair_sets])
    size = np.concatenate([np.full(len(g), float(b)) for g, b in phase.pair_sets])
    set_of = np.repeat(np.arange(len(phase.pair_sets)), [len(g) for g, _ in phase.pair_sets])
    server = topo.node_server[gpus]
    nic, uplink = _nic_uplinks(topo, gpus)  # type: ignore[misc]  # groupable() checked it
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
    members_src, members_dst = _members(set_of * topo.n_servers + server, src_class, dst_leaf)
    # pairs of different sets are not flows: drop groups whose class and leaf are of two sets
    class_set = np.zeros(int(src_class.max()) + 1, np.int64)
    class_set[src_class] = set_of
    leaf_set = np.zeros(int(dst_leaf.max()) + 1, np.int64)
    leaf_set[dst_leaf] = set_of
    n_leaves = len(leaf_set)
    group_ids = np.arange(members_src.shape[0])
    same_set = class_set[group_ids // n_leaves] == leaf_set[group_ids % n_leaves]
    multiplicity = np.asarray(members_src.sum(axis=1)).ravel()
    keep = np.flatnonzero(same_set & (multiplicity > 0))
    members_src, members_dst, multiplicity = members_src[keep], members_dst[keep], multiplicity[keep]
    sides = _sides(topo, routing, transport, gpus)
    if sides is None:
        return None
    rep = _representatives(members_src, members_dst, set_of * topo.n_servers + server)
    routes = route_flows(topo, routing, gpus[rep[:, 0]], gpus[rep[:, 1]], transport=transport,
                         multiplicity=multiplicity, demand_Bps=demand_Bps[rep[:, 0]])
    if routes.class_weights is None or routes.row_class is None or (routes.row_class < 0).any():
        return None
    # a staged route (routing.stages) keeps the last stage of M, down to the destination leaf, with the
    # row's own links: every member crosses it, as the class's part
    middle = topo.fabric_links
    own = (_average_sides(routes, members_src, members_dst, multiplicity, sides)
           + routes.own_weights @ sp.diags(middle.astype(float))).tocsr()
    own.eliminate_zeros()
    own.sort_indices()
    grouped = Routes(flow_index=routes.flow_index, qp_index=routes.qp_index, own_weights=own,
                     path_latency_s=routes.path_latency_s, udp_sport=routes.udp_sport,
                     row_class=routes.row_class, class_weights=routes.class_weights)
    return PairGroups(grouped, multiplicity, size[rep[:, 0]], members_src, members_dst, *sides, middle_links=middle)


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
    shared = None
    if routes.class_weights is not None and routes.row_class is not None:
        has = routes.row_class >= 0
        class_fastest = np.zeros(routes.class_weights.shape[0])
        np.maximum.at(class_fastest, routes.row_class[has], rate_Bps[has])
        shared = routes.class_weights.tocoo()
        np.maximum.at(fastest, shared.col, class_fastest[shared.row])
    # a flow at rate r is bottlenecked on link l iff l is saturated and nobody on l is faster than r
    level = np.where(saturated, fastest, np.inf)
    ok = np.zeros(len(rate_Bps), bool) if rate_cap_Bps is None else rate_Bps >= rate_cap_Bps * (1 - _RELATIVE_TOL)
    if shared is not None and routes.row_class is not None:
        class_level = np.full(routes.class_weights.shape[0], np.inf)  # type: ignore[union-attr]
        np.minimum.at(class_level, shared.row, level[shared.col])
        has = routes.row_class >= 0
        ok[has] |= rate_Bps[has] >= class_level[routes.row_class[has]] * (1 - _RELATIVE_TOL)
    n_listed = routes.n_rows - groups.routes.n_rows
    # a group row's own middle links (its route's last stage) are M too: every member crosses them
    mid = (own.row >= n_listed) & groups.middle_links[own.col]
    mid_level = np.full(routes.n_rows, np.inf)
    np.minimum.at(mid_level, own.row[mid], level[own.col[mid]])
    ok |= rate_Bps >= mid_level * (1 - _RELATIVE_TOL)
    own_level = np.full(n_listed, np.inf)  # listed rows: their own links
    listed = own.row < n_listed
    np.minimum.at(own_level, own.row[listed], level[own.col[listed]])
    ok[:n_listed] |= rate_Bps[:n_listed] >= own_level * (1 - _RELATIVE_TOL)
    group_rate = rate_Bps[n_listed:]
    for q, (s_side, t_side) in enumerate(zip(groups.side_src, groups.side_dst, strict=True)):
        rows = np.flatnonzero(groups.routes.qp_index == q)
        every = []
        for side, members in ((s_side, groups.members_src), (t_side, groups.members_dst)):
            coo = side.tocoo()
            gpu_level = np.full(side.shape[0], np.inf)  # each GPU's side: its lowest bottleneck level
            np.minimum.at(gpu_level, coo.row, level[coo.col])
            m = members.tocoo()
            worst = np.zeros(members.shape[0])  # the group's member whose side needs the highest rate
            np.maximum.at(worst, m.row, gpu_level[m.col])
            every.append(worst[groups.routes.flow_index[rows]])
        need = np.minimum(every[0], every[1])
        ok[n_listed + rows] |= group_rate[rows] >= need * (1 - _RELATIVE_TOL)
    return bool(ok.all())
