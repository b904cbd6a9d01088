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
* an all-to-all grouped per (source class, destination key) (:mod:`gpuwait.fabric.alltoall`): the
  membership tables, (GPUs x destination leaves) and (GPUs x source classes) cells; rows = source classes
  x keys (the pods and the class's own leaf) x QPs, own entries = rows x (the probe's own path + a key's
  leaves x a leaf's uplinks: the last hops into the destination leaves); a class per group, each at most
  the probe's largest.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from gpuwait.collectives.algorithms import Phase, Plan
from gpuwait.fabric.alltoall import _nic_uplinks, groupable
from gpuwait.routing.paths import _network_endpoint, _single_uplinks, port_capacity_Bps, route_flows
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
#: Bytes per row: about 30 vectors of 8-byte values per row alive at the solve (the routes' flow, QP,
#: latency, source port, class and indptr; the solve's bytes, multiplicity, cap, rate, level, bottleneck,
#: lowest-final and run vectors; the phase run's copies; the walk's endpoints, five-tuples and hashes).
ROW_BYTES = 30 * 8
#: Bytes per flow of the compiled plan: source, destination (int64) and bytes (float64), and the local-flow
#: merge's copies of the three with its multiplicity (float64).
FLOW_BYTES = 3 * 8 + 4 * 8
#: Bytes per membership cell of a grouped all-to-all (alltoall._members): the dense (GPU, leaf) count
#: (float64), its row key (int64) and mask (bool), the masked copies of count, row and column (3 x 8), the
#: COO -> CSR conversion's copies (24) and the CSR kept (12).
CELL_BYTES = 8 + 8 + 1 + 24 + 24 + 12
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


@dataclass(frozen=True)
class PhaseCount:
    """What one phase of a fabric run allocates: its counts and the bytes at its peak and held after."""

    rows: int
    entries: int  # the rows' own link entries
    class_entries: int  # the classes' shared link entries
    cells: int
    flows: int
    links: int = 0

    @property
    def peak_bytes(self) -> float:
        return (float(ENTRY_BYTES) * self.entries + float(CLASS_ENTRY_BYTES) * self.class_entries
                + float(ROW_BYTES) * self.rows + float(CELL_BYTES) * self.cells + float(FLOW_BYTES) * self.flows
                + float(LINK_BYTES) * self.links)

    @property
    def held_bytes(self) -> float:
        return float(HELD_ENTRY_BYTES) * (self.entries + self.class_entries) + float(HELD_ROW_BYTES) * self.rows


def _probe(topo: Topology, src: np.ndarray, dst: np.ndarray, routing: RoutingSpec, transport: str,
           flags: dict) -> tuple[int, int]:
    """(longest own path in entries per row, largest class in entries) of a few of the flows routed,
    evenly spread and with the pair of farthest servers, which meets the most tiers."""
    pick = np.unique(np.r_[np.linspace(0, len(src) - 1, min(PROBE_FLOWS, len(src))).astype(np.int64),
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
    return s[keep], d[keep], remote


def _leaves(topo: Topology, nodes: np.ndarray, peers: np.ndarray, qps: int) -> np.ndarray | None:
    """The leaf each (node, QP) leaves from towards a peer on another server; None when an endpoint has
    several uplinks (no leaf-pair classes: routing.paths._leaf_pair_classes)."""
    qp = np.repeat(np.arange(qps), len(nodes))
    uplink = _single_uplinks(topo)[_network_endpoint(topo, np.tile(nodes, qps), np.tile(peers, qps), qp)]
    return None if (uplink < 0).any() else topo.link_dst[uplink].astype(np.int64)


def _classes(topo: Topology, phase: Phase, src: np.ndarray, dst: np.ndarray, qps: int) -> int:
    """A splitting router's classes: distinct (source leaf, destination leaf) pairs of the listed rows
    between servers, and every pair of the leaves of each pair set (an all-to-all meets them all); the
    demand splits them further only where NICs carry different row counts. Every row its own class
    when an endpoint has several uplinks."""
    up, down = _leaves(topo, src, dst, qps), _leaves(topo, dst, src, qps)
    if up is None or down is None:
        return len(src) * qps + sum(len(g) * (len(g) - 1) * qps for g, _ in phase.pair_sets)
    classes = len(np.unique(up * topo.n_nodes + down))
    for gpus, _ in phase.pair_sets:
        gpus = np.asarray(gpus, np.int64)
        leaves = _leaves(topo, gpus, np.roll(gpus, len(gpus) // 2), qps)
        classes += len(gpus) * len(gpus) * qps if leaves is None else len(np.unique(leaves)) ** 2
    return classes


def _listed(topo: Topology, phase: Phase, routing: RoutingSpec, transport: str, flags: dict) -> PhaseCount:
    n_flows = phase.n_flows
    if not n_flows:
        return PhaseCount(0, 0, 0, 0, 0)
    src, dst = phase.src.astype(np.int64), phase.dst.astype(np.int64)
    remote = topo.node_server[src] != topo.node_server[dst]
    qps = routing.qps_per_connection
    p_src, p_dst, p_remote = _pair_set_sample(topo, phase)
    between = int(remote.sum()) + p_remote
    # flows inside a server with the same ends and bytes are one row (collective._merge_local_flows); the
    # pair sets' ones are distinct pairs already
    sizes, size_id = np.unique(phase.bytes_per_flow[~remote], return_inverse=True)
    local_key = (src[~remote] * topo.n_nodes + dst[~remote]) * len(sizes) + size_id.ravel()
    rows = between * qps + len(np.unique(local_key)) + (n_flows - len(src) - p_remote)
    own, largest = _probe(topo, np.r_[src, p_src], np.r_[dst, p_dst], routing, transport, flags)
    classes = _classes(topo, phase, src[remote], dst[remote], qps) if largest else 0
    return PhaseCount(rows, rows * own, classes * largest, 0, n_flows)


def _pods(topo: Topology, leaves: np.ndarray) -> int:
    """Leaves with the same switches above them (alltoall._keys' pods)."""
    up = np.flatnonzero(np.isin(topo.link_src, leaves) & topo.switch_nodes[topo.link_dst])
    above: dict[int, set] = {}
    for s, d in zip(topo.link_src[up].tolist(), topo.link_dst[up].tolist(), strict=True):
        above.setdefault(s, set()).add(d)
    return len({tuple(sorted(v)) for v in above.values()}) or 1


def _parallel_cables(topo: Topology) -> bool:
    """Whether two compute-network switches are joined by more than one link (alltoall._split_at_pod then
    groups per leaf)."""
    compute = topo.switch_nodes & (topo.node_network == Network.COMPUTE)
    between = np.flatnonzero(compute[topo.link_src] & compute[topo.link_dst])
    pairs = topo.link_src[between].astype(np.int64) * topo.n_nodes + topo.link_dst[between]
    return len(np.unique(pairs)) < len(pairs)


def _grouped(topo: Topology, phase: Phase, routing: RoutingSpec, transport: str) -> PhaseCount:
    gpus = np.concatenate([np.asarray(g, np.int64) for g, _ in phase.pair_sets])
    set_of = np.repeat(np.arange(len(phase.pair_sets)), [len(g) for g, _ in phase.pair_sets])
    nic, uplink = _nic_uplinks(topo, gpus)  # type: ignore[misc]  # groupable() checked it
    server = topo.node_server[gpus]
    # each source's demand as alltoall.group_pairs sets it: a source class is (set, leaf, demand)
    _, in_set = np.unique(set_of * topo.n_servers + server, return_inverse=True)
    remote = np.bincount(set_of)[set_of] - np.bincount(in_set.ravel())[in_set.ravel()]
    qps = routing.qps_per_connection
    demand = port_capacity_Bps(topo)[nic] / np.maximum(np.bincount(nic, weights=remote * qps)[nic], 1)
    leaf = topo.link_dst[uplink]
    n_classes = len(np.unique(np.c_[set_of, leaf, demand], axis=0))
    leaves = np.unique(leaf)
    pods = _pods(topo, leaves)
    leaf_uplinks = int(((topo.link_src == leaves[0]) & topo.switch_nodes[topo.link_dst]).sum())
    p_src, p_dst, _ = _pair_set_sample(topo, phase)
    own, largest = _probe(topo, p_src, p_dst, routing, transport, {})
    # groups: each source class to every pod and to its own leaf (alltoall._keys), or to every leaf where
    # parallel cables send the grouping back per leaf; each group row's own entries are its members' sides
    # and its last hops into the destination leaves (a key's leaves x a leaf's uplinks)
    per_pod = pods < len(leaves) and not _parallel_cables(topo)
    keys, leaves_per_key = (pods + 1, -(-len(leaves) // pods)) if per_pod else (len(leaves), 1)
    rows = n_classes * keys * qps
    entries = rows * (own + leaves_per_key * max(leaf_uplinks, 1))
    sides = PhaseCount(len(gpus) * qps, len(gpus) * qps * own, 0, 0, len(gpus))  # alltoall._sides' probe routes
    per_server = np.unique(set_of * topo.n_servers + server, return_counts=True)[1]
    local = int((per_server * (per_server - 1)).sum())  # the pair sets' flows inside a server, listed
    own_flows = Phase(phase.name, phase.src, phase.dst, phase.bytes_per_flow, phase.repeat)
    listed = _listed(topo, own_flows, routing, transport, {})  # the phase's own flows (inside servers)
    cells = len(gpus) * (len(leaves) + n_classes)
    return PhaseCount(rows + sides.rows + listed.rows + local, entries + sides.entries + listed.entries + local * own,
                      n_classes * keys * largest + listed.class_entries, cells, len(gpus) + listed.flows + local)


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
