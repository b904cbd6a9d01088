"""What a collective's fabric run allocates, counted before it runs (issue 16, item 4).

``gpuwait perf`` routes each compiled phase and solves its max-min rates (:mod:`gpuwait.fabric.collective`).
The memory that grows with the cluster is a few arrays per *row* (one QP of a flow, or of an all-to-all
group) and per *link entry* (a row's or a class's weight on one link). This module counts both from the
compiled plan and the topology, with one probe route of a few of the phase's flows for the path
lengths, and turns them into bytes with the per-entry sizes below, each the dtype sizes of the arrays the
code holds at once (not fitted to a benchmark; tests/fabric/test_memory.py checks the sum is an upper
bound of tracemalloc's peak and within 3x of it).

Counts per phase:

* every phase: the topology's links (the solve's per-link vectors);
* listed flows (ring, tree, NVLS, ECMP all-to-all): rows = flows between servers x QPs + distinct flows
  inside a server (identical ones merge); own entries = rows x the longest own path of the probe; a splitting router (adaptive, spray)
  adds one class per (source leaf, destination leaf) pair, each at most the probe's largest class;
* an all-to-all grouped per (source class, destination key) (:mod:`gpuwait.fabric.alltoall`): rows =
  source classes x keys (the other pods, the own pod's other leaves, the own leaf) x QPs; its shared parts
  as the code holds them, their link counts cut from one probe flow to a leaf of the pod and one to another
  pod: a middle class per row (the way down; the way up too below routing.paths' staging threshold), the
  way up once per (source class, distance) when staged (Routes.class_sides), the mean S and T (every GPU's
  side once), the last hops one class per (switch, shares) of each pod with a membership per (row,
  switch); own entries = the uneven destination sides (a pod without the own leaf, a leaf without the own
  server: each member GPU's T, their members listed); the membership tables' (source class, destination leaf)
  cells and (GPU, destination key) entries.

The limit every estimate is held to lives here too (:func:`memory_limit`), below both its users: the
runner's estimates before a run (:mod:`gpuwait.runner.cost`) and the refusal of an all-to-all too large to
list flow by flow (:func:`gpuwait.fabric.collective.run_phase`), so a caller's ``max_memory`` governs both.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

import numpy as np

from gpuwait.arrays import unique_sorted
from gpuwait.collectives.algorithms import Phase, Plan
from gpuwait.fabric.alltoall import groupable, nic_uplinks
from gpuwait.routing.paths import (
    _network_endpoint,
    _stages_min_classes,
    connection_rows,
    port_capacity_Bps,
    route_flows,
    single_uplinks,
)
from gpuwait.routing.routers import get_router
from gpuwait.spec.cluster import RoutingSpec
from gpuwait.topology.model import Network, Topology

#: Bytes per link entry at the peak of a phase. Held at the solve: the routes' CSR (float64 weight + int32
#: column, 12) and _solve's copy scaled by multiplicity (12); max_min_rates' (flow, link, weight) triplets
#: (intp + intp + float64, 24) and the first iteration's filtered copies (24); one iteration's temporaries
#: over the triplets (the link level gathered, the flow level gathered, the comparison as bincount's float
#: weights, the final-link gather as int64: 4 x 8 + 2 bools, 40). Before the solve the route walk built the
#: CSR from COO triplets (int64 row + int64 column + float64, 24, and the CSR 12): counted on top, 36.
ENTRY_BYTES = 12 + 12 + 24 + 24 + 40 + 36
#: Bytes per entry of a class's shared part (Routes.class_weights, side_classes): its CSR (12); the solve's
#: class triplets (24; not scaled, and the first iteration keeps them whole: no copies); one iteration's
#: temporaries over them (the level gathered, the weight x class scale, the comparison as float weights, the
#: final-link gather: 40); the walk's COO triplets and CSR before (36).
CLASS_ENTRY_BYTES = 12 + 24 + 40 + 36
#: Bytes per membership of a row in a class of a part it crosses several classes of (an all-to-all group's
#: last hops, alltoall._split_at_pod): the routes' (rows, classes) CSR (float64 + int32, 12) and the solve's
#: copy scaled by multiplicity (12); SharedWeights.memberships' (row, class, scale) (intp + intp + float64, 24)
#: and _memberships' parts with their offset classes, each one's place and the merged copies (24 + 8 + 24);
#: one iteration's gathers over them (the rows' level, the classes' level, scale x rate: 24).
MEMBER_BYTES = 12 + 12 + 24 + 24 + 8 + 24 + 24
#: Bytes per row: about 30 vectors of 8-byte values per row alive at the solve (the routes' flow, QP,
#: latency, source port, class and indptr; the solve's bytes, multiplicity, cap, rate, level, bottleneck,
#: lowest-final and run vectors; the phase run's copies; the walk's endpoints, five-tuples and hashes).
ROW_BYTES = 30 * 8
#: Bytes per flow of the compiled plan: source, destination (int64) and bytes (float64), and the local-flow
#: merge's copies of the three with its multiplicity (float64).
FLOW_BYTES = 3 * 8 + 4 * 8
#: Bytes per (source class, destination leaf) cell of a grouped all-to-all (alltoall._members' destination
#: counts, kept per (group, leaf): alltoall.DestinationMembers): the dense (leaf, class) sums to subtract and
#: the leaf's GPUs on the class's server (2 float64), the cell's class, leaf, count, sum and row key (4 x 8 +
#: int64), the mask (bool), and the pairs' and sums' COO -> CSR copies (2 x 24) and CSRs kept (2 x 12).
CELL_BYTES = 2 * 8 + 4 * 8 + 8 + 1 + 2 * 24 + 2 * 12
#: Bytes per (GPU, destination key) entry of a grouped all-to-all's source table (alltoall._members'
#: members_src): the entry's value, source and key (3 x 8), its position temporaries (3 x 8), the COO -> CSR
#: copies (24), the CSR and the CSR less each source's server's own GPUs (2 x 12).
LEAF_CELL_BYTES = 3 * 8 + 3 * 8 + 24 + 2 * 12
#: Bytes per (group, GPU) member listed for the groups with an uneven destination side (DestinationMembers.
#: listed, for their averaged sides): its group, GPU, class, value and mask temporaries (4 x 8 + 1) and the
#: COO -> CSR copies and CSR (24 + 12).
LISTED_MEMBER_BYTES = 4 * 8 + 1 + 24 + 12
#: Bytes per link of the topology at a phase's solve: about 12 float64 vectors over the links (the capacity,
#: its effective and protocol-scaled copies, the unfrozen weight, crossed mask, link level, frozen load, the
#: below count, final mask and their temporaries), whatever the flows.
LINK_BYTES = 12 * 8
#: Bytes held per entry and per row once a phase is solved (the predictor caches every run): the routes'
#: CSRs (12), and per row the routes' five vectors, the run's rate, multiplicity and bytes (8 x 8).
HELD_ENTRY_BYTES = 12
HELD_ROW_BYTES = 8 * 8
#: Not derived yet: a transient of the route walk that does not follow the rows or entries (found by
#: tests/fabric/test_memory.py: ECMP ring all_gather on the SuperPOD preset peaks at 1.6 / 5.3 / 19.5 /
#: 6.0 MB at 256 / 512 / 1,024 / 2,048 GPUs against 1.5 / 3.4 / 6.7 / 13.4 MB counted). Added once per
#: estimate as an allowance until its arrays are identified; it is not scaled by any count.
WALK_ALLOWANCE_BYTES = 32 * 2**20
#: Flows routed by the probe per phase: enough to meet the phase's longest path (the farthest pair is added)
PROBE_FLOWS = 64


def default_memory_limit_bytes() -> int:
    """Half the machine's physical memory (the rest for the system and the other processes)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    except (ValueError, OSError, AttributeError):
        return 8 * 2**30


def memory_limit(max_memory_bytes: float | None) -> tuple[float, str]:
    """(the limit a run is held to, where it comes from, for a message): the caller's ``max_memory`` in
    bytes, named as the Python API's argument (the command line renames it ``--max-memory``:
    :func:`gpuwait.cli.common.options_named`), or None for :func:`default_memory_limit_bytes`.

    >>> memory_limit(2e9)
    (2000000000.0, '`max_memory`')
    """
    if max_memory_bytes is None:
        return float(default_memory_limit_bytes()), "half this machine's memory"
    return float(max_memory_bytes), "`max_memory`"


@dataclass(frozen=True)
class PhaseCount:
    """What one phase of a fabric run allocates: its counts and the bytes at its peak and held after."""

    rows: int
    entries: int  # the rows' own link entries
    class_entries: int  # the classes' shared link entries
    cells: int
    flows: int
    links: int = 0
    leaf_cells: int = 0  # a grouped all-to-all's (GPU, destination key) source table entries
    listed_members: int = 0  # a grouped all-to-all's (group, GPU) members of its uneven destination sides
    memberships: int = 0  # (row, class) scales of a part a row crosses several classes of (an all-to-all's last hops)

    @property
    def peak_bytes(self) -> float:
        return (float(ENTRY_BYTES) * self.entries + float(CLASS_ENTRY_BYTES) * self.class_entries
                + float(ROW_BYTES) * self.rows + float(CELL_BYTES) * self.cells + float(FLOW_BYTES) * self.flows
                + float(LINK_BYTES) * self.links + float(MEMBER_BYTES) * self.memberships
                + float(LEAF_CELL_BYTES) * self.leaf_cells + float(LISTED_MEMBER_BYTES) * self.listed_members)

    @property
    def held_bytes(self) -> float:
        return (float(HELD_ENTRY_BYTES) * (self.entries + self.class_entries + self.memberships)
                + float(HELD_ROW_BYTES) * self.rows)


def _probe(topo: Topology, src: np.ndarray, dst: np.ndarray, routing: RoutingSpec, transport: str,
           flags: dict) -> tuple[int, int]:
    """(longest own path in entries per row, largest class in entries) of a few of the flows routed,
    evenly spread and with the pair of farthest servers, which meets the most tiers."""
    pick = unique_sorted(np.r_[np.linspace(0, len(src) - 1, min(PROBE_FLOWS, len(src))).astype(np.int64),
                           np.argmax(np.abs(topo.node_server[src] - topo.node_server[dst]))])
    routes = route_flows(topo, routing, src[pick], dst[pick], transport=transport, **flags)
    own = int(np.diff(routes.own_weights.indptr).max(initial=0))
    largest = 0
    parts = [(routes.row_class, routes.class_weights), *routes.side_classes]
    for row_class, weights in parts:
        if row_class is not None and weights is not None and weights.shape[0]:
            largest += int(np.diff(weights.indptr).max(initial=0))
    return own, largest


def _pair_set_sample(topo: Topology, phase: Phase) -> tuple[np.ndarray, np.ndarray, int]:
    """(sources, destinations, flows between servers) of the pair sets without listing their n(n-1)
    flows: each GPU to the GPU one, half and all but one of the set away (the probe picks among them, and
    the farthest servers), and the count from the per-server sizes."""
    src, dst, remote = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], 0
    for gpus, _ in phase.pair_sets:
        gpus = np.asarray(gpus, np.int64)
        per_server = np.unique(topo.node_server[gpus], return_counts=True)[1]
        remote += len(gpus) * (len(gpus) - 1) - int((per_server * (per_server - 1)).sum())
        for shift in {1, len(gpus) // 2, len(gpus) - 1} - {0, len(gpus)}:
            src.append(gpus)
            dst.append(np.roll(gpus, shift))
    s, d = np.concatenate(src), np.concatenate(dst)
    keep = topo.node_server[s] != topo.node_server[d]
    # pair sets inside one server (an all-to-all on one server) have no flow between servers: the probe
    # routes their in-server pairs instead, which have rows too (and an empty probe has no farthest pair)
    return (s[keep], d[keep], remote) if keep.any() else (s, d, remote)


def _leaves(topo: Topology, nodes: np.ndarray, peers: np.ndarray, qps: int) -> np.ndarray | None:
    """The leaf each (node, QP) leaves from towards a peer on another server; None when an endpoint has
    several uplinks (no leaf-pair classes: routing.paths._leaf_pair_classes)."""
    qp = np.repeat(np.arange(qps), len(nodes))
    uplink = single_uplinks(topo)[_network_endpoint(topo, np.tile(nodes, qps), np.tile(peers, qps), qp)]
    return None if (uplink < 0).any() else topo.link_dst[uplink].astype(np.int64)


def _classes(topo: Topology, phase: Phase, src: np.ndarray, dst: np.ndarray, qps: int) -> int:
    """A splitting router's classes: distinct (source leaf, destination leaf) pairs of the listed rows
    between servers, and every pair of the leaves of each pair set (an all-to-all meets them all); the
    demand splits them further only where NICs carry different row counts. Every row its own class
    when an endpoint has several uplinks."""
    up, down = _leaves(topo, src, dst, qps), _leaves(topo, dst, src, qps)
    if up is None or down is None:
        return len(src) * qps + sum(len(g) * (len(g) - 1) * qps for g, _ in phase.pair_sets)
    classes = len(unique_sorted(up * topo.n_nodes + down))
    for gpus, _ in phase.pair_sets:
        gpus = np.asarray(gpus, np.int64)
        leaves = _leaves(topo, gpus, np.roll(gpus, len(gpus) // 2), qps)
        classes += len(gpus) * len(gpus) * qps if leaves is None else len(unique_sorted(leaves)) ** 2
    return classes


def _listed(topo: Topology, phase: Phase, routing: RoutingSpec, transport: str, flags: dict) -> PhaseCount:
    n_flows = phase.n_flows
    if not n_flows:
        return PhaseCount(0, 0, 0, 0, 0)
    src, dst = phase.src.astype(np.int64), phase.dst.astype(np.int64)
    remote = topo.node_server[src] != topo.node_server[dst]
    qps = connection_rows(topo, routing.qps_per_connection)  # as route_flows expands a connection
    p_src, p_dst, p_remote = _pair_set_sample(topo, phase)
    between = int(remote.sum()) + p_remote
    # flows inside a server with the same ends and bytes are one row (collective._merge_local_flows); the
    # pair sets' ones are distinct pairs already
    sizes, size_id = np.unique(phase.bytes_per_flow[~remote], return_inverse=True)
    local_key = (src[~remote] * topo.n_nodes + dst[~remote]) * len(sizes) + size_id.ravel()
    rows = between * qps + len(unique_sorted(local_key)) + (n_flows - len(src) - p_remote)
    own, largest = _probe(topo, np.r_[src, p_src], np.r_[dst, p_dst], routing, transport, flags)
    classes = _classes(topo, phase, src[remote], dst[remote], qps) if largest else 0
    return PhaseCount(rows, rows * own, classes * largest, 0, n_flows)


def _pod_of_leaf(topo: Topology, leaves: np.ndarray) -> np.ndarray:
    """(len(leaves),) a pod id of each leaf: leaves with the same switches above them (alltoall._keys' pods)."""
    up = np.flatnonzero(np.isin(topo.link_src, leaves) & topo.switch_nodes[topo.link_dst])
    above: dict[int, set] = {}
    for s, d in zip(topo.link_src[up].tolist(), topo.link_dst[up].tolist(), strict=True):
        above.setdefault(s, set()).add(d)
    pods: dict = {}
    return np.array([pods.setdefault(tuple(sorted(above.get(int(leaf), ()))), len(pods)) for leaf in leaves], np.int64)


def _parallel_cables(topo: Topology) -> bool:
    """Whether two compute-network switches are joined by more than one link (alltoall._split_at_pod then
    groups per leaf)."""
    compute = topo.switch_nodes & (topo.node_network == Network.COMPUTE)
    between = np.flatnonzero(compute[topo.link_src] & compute[topo.link_dst])
    pairs = topo.link_src[between].astype(np.int64) * topo.n_nodes + topo.link_dst[between]
    return len(unique_sorted(pairs)) < len(pairs)


@dataclass(frozen=True)
class _Split:
    """One probe flow's route cut as an all-to-all group holds it: links up (the way up, a side part per
    source group when staged), down but not into a leaf (the group's middle class), into the destination
    leaf (the last hops), and its own links at the source and at the destination server (the sides S, T)."""

    up: int = 0
    down: int = 0
    last: int = 0
    src_side: int = 0
    dst_side: int = 0


def _split(topo: Topology, routing: RoutingSpec, transport: str, src: int | None, dst: int | None) -> _Split:
    if src is None or dst is None:
        return _Split()
    routes = route_flows(topo, routing, np.array([src]), np.array([dst]), transport=transport)
    routes = routes.sides_joined()
    links = routes.own_weights.indices
    if routes.class_weights is not None:
        links = np.r_[links, routes.class_weights.indices]
    links = unique_sorted(links)
    tier_src, tier_dst = topo.node_tier[topo.link_src[links]], topo.node_tier[topo.link_dst[links]]
    fabric = topo.fabric_links[links]
    link_server = topo.node_server[topo.link_src[links]]
    link_server = np.where(link_server >= 0, link_server, topo.node_server[topo.link_dst[links]])
    into_leaf = fabric & (tier_dst == 1)
    return _Split(up=int((fabric & (tier_dst > tier_src)).sum()), down=int((fabric & (tier_dst < tier_src) & ~into_leaf).sum()),
                  last=int(into_leaf.sum()), src_side=int((~fabric & (link_server == topo.node_server[src])).sum()),
                  dst_side=int((~fabric & (link_server == topo.node_server[dst])).sum()))


def _grouped(topo: Topology, phase: Phase, routing: RoutingSpec, transport: str) -> PhaseCount:
    """The arrays alltoall.group_pairs holds, counted per part (see the module); the parts' link counts
    from one probe flow to a leaf of the source's pod and one to another pod (:func:`_split`)."""
    gpus = np.concatenate([np.asarray(g, np.int64) for g, _ in phase.pair_sets])
    set_of = np.repeat(np.arange(len(phase.pair_sets)), [len(g) for g, _ in phase.pair_sets])
    nic, uplink = nic_uplinks(topo, gpus)  # type: ignore[misc]  # groupable() checked it
    server = topo.node_server[gpus]
    # each source's demand as alltoall.group_pairs sets it: a source class is (set, leaf, demand)
    _, in_set = np.unique(set_of * topo.n_servers + server, return_inverse=True)
    remote = np.bincount(set_of)[set_of] - np.bincount(in_set.ravel())[in_set.ravel()]
    qps = routing.qps_per_connection
    demand = port_capacity_Bps(topo)[nic] / np.maximum(np.bincount(nic, weights=remote * qps)[nic], 1)
    leaf = topo.link_dst[uplink]
    n, n_classes = len(gpus), len(np.unique(np.c_[set_of, leaf, demand], axis=0))
    leaves, leaf_idx = np.unique(leaf, return_inverse=True)
    pod_of_leaf = _pod_of_leaf(topo, leaves)
    pod = pod_of_leaf[leaf_idx.ravel()]
    pods = int(pod_of_leaf.max()) + 1
    leaves_per_pod = -(-len(leaves) // pods)
    per_pod = pods < len(leaves) and not _parallel_cables(topo)
    # one probe flow from the first GPU to a leaf of its pod (near) and to another pod (far)
    near = np.flatnonzero((pod == pod[0]) & (leaf != leaf[0]) & (server != server[0]))
    far = np.flatnonzero(pod != pod[0])
    s_near = _split(topo, routing, transport, int(gpus[0]), int(gpus[near[0]]) if len(near) else None)
    s_far = _split(topo, routing, transport, int(gpus[0]), int(gpus[far[0]]) if len(far) else None)
    own_side = _split(topo, routing, transport, int(gpus[0]), int(gpus[np.flatnonzero(server != server[0])[0]]))
    s_len, t_len = own_side.src_side, own_side.dst_side
    # group rows per source class: to each other pod (far), to its own pod's other leaves (near), to its
    # own leaf; per leaf (parallel cables down) one per leaf of each kind
    far_keys, near_keys = (pods - 1, int(leaves_per_pod > 1)) if per_pod else (len(leaves) - leaves_per_pod,
                                                                               leaves_per_pod - 1)
    far_rows, near_rows, leaf_rows = (n_classes * k * qps for k in (far_keys, near_keys, 1))
    rows = far_rows + near_rows + leaf_rows
    staged = far_rows + near_rows >= _stages_min_classes(topo)  # routing.paths._route_classes' choice
    # the middle class of each row (routes.class_weights): the way down; the way up too unless staged,
    # where it is a side part per (source class, distance) (Routes.class_sides)
    middle = far_rows * (s_far.down + (0 if staged else s_far.up)) + near_rows * (s_near.down + (0 if staged else s_near.up))
    way_up = n_classes * (s_far.up * (far_keys > 0) + s_near.up * (near_keys > 0)) if staged else 0
    # the averaged sides: the mean S per (source class, QP), the mean T per (pod or leaf, QP): every GPU's once
    mean_sides = n * qps * (s_len + t_len)
    # uneven destination sides stay the row's own links: a pod without the source's own leaf, a leaf without
    # the source's own server (their members' T averaged: one entry per member GPU's T link)
    uneven_members = n_classes * ((n // max(pods, 1) if per_pod and near_keys else 0) + n // len(leaves))
    uneven = uneven_members * qps * t_len
    switches = max(s_far.last, s_near.last, 1)
    if per_pod:
        # last hops (alltoall._split_at_pod): a class per (switch, shares), shares one per pod and one per
        # leaf of a pod (a pod without that leaf), each with the pod's leaves; a membership per (row, switch)
        last_classes = pods * switches * (1 + leaves_per_pod) * leaves_per_pod
        memberships = (far_rows + near_rows) * switches
    else:  # the last stage joined into each row's own links
        last_classes, memberships = 0, 0
        uneven += (far_rows + near_rows) * switches
    sides = PhaseCount(n * qps, n * qps * (s_len + t_len), 0, 0, n)  # alltoall._sides' probe routes
    per_server = np.unique(set_of * topo.n_servers + server, return_counts=True)[1]
    local = int((per_server * (per_server - 1)).sum())  # the pair sets' flows inside a server, listed
    own_flows = Phase(phase.name, phase.src, phase.dst, phase.bytes_per_flow, phase.repeat)
    listed = _listed(topo, own_flows, routing, transport, {})  # the phase's own flows (inside servers)
    return PhaseCount(rows + sides.rows + listed.rows + local,
                      uneven + sides.entries + listed.entries + local * max(s_len + t_len, 1),
                      middle + way_up + mean_sides + last_classes + listed.class_entries, n_classes * len(leaves),
                      n + listed.flows + local, leaf_cells=n * (far_keys + near_keys + 1), memberships=memberships,
                      listed_members=uneven_members)


def phase_count(topo: Topology, phase: Phase, routing: RoutingSpec, transport: str, flags: dict) -> PhaseCount:
    """The counts of one phase as :func:`gpuwait.fabric.collective.run_phase` would run it."""
    if (phase.pair_sets and not flags.get("stage_network") and get_router(routing.kind).per_leaf_pair
            and groupable(topo, phase, routing, flags.get("nvlink_domains", True))):
        count = _grouped(topo, phase, routing, transport)
    else:
        count = _listed(topo, phase, routing, transport, flags)
    return dataclasses.replace(count, links=topo.n_links)


def plan_counts(topo: Topology, plan: Plan, routing: RoutingSpec, transport: str, flags: dict) -> list[PhaseCount]:
    """Per phase that runs on the fabric (as :func:`gpuwait.fabric.collective.run_plan` picks them)."""
    return [phase_count(topo, p, routing, transport, flags) for p in plan.phases if p.n_flows and p.max_bytes > 0.0]


def run_bytes(counts: list[PhaseCount]) -> tuple[float, float]:
    """(peak, held after) of a fabric run's phases: they run one after the other and each keeps its routes,
    so the held bytes add up and the largest phase's working set comes on top."""
    held = sum(c.held_bytes for c in counts)
    return held + max((c.peak_bytes - c.held_bytes for c in counts), default=0.0), held
