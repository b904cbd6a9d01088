"""What a topology amounts to: counts, bisection bandwidth, oversubscription, diameter.

Everything is computed from the node and link tables with numpy (and one scipy BFS over the
switch graph), so a 16,384-GPU fabric with 250k links summarises in well under a second.

Conventions
-----------
* Bandwidths are bytes/s **per direction** (a 400 Gb/s port is ``50e9``).
* Link counts are directional links; ``cables`` is half of that.
* "Host injection" is the capacity of the GPU servers' compute NIC ports into the fabric.
  Storage servers hanging off a converged compute fabric are not hosts here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import shortest_path

from gpuwait.topology.model import (
    LINK_KINDS,
    NETWORKS,
    NODE_KINDS,
    TIER_NAMES,
    LinkKind,
    Network,
    NodeKind,
    Tier,
    Topology,
)

_SWITCH_TIERS = TIER_NAMES[1:]  # leaf, spine, core


@dataclass(frozen=True)
class TopologySummary:
    """The headline numbers of a topology; see :func:`summarize`.

    Attributes
    ----------
    name, preset : str, str or None
        Cluster name and the preset it came from.
    servers, gpus, gpus_per_server : int
        GPU servers, GPUs in total and per server.
    gpu_model : str
        GPU model name of the servers.
    nodes_by_kind : dict[str, int]
        Node count per kind (every kind of ``NODE_KINDS``, zeros included).
    switches_by_tier : dict[str, int]
        Compute-fabric switches per tier: ``leaf``, ``spine``, ``core``.
    switches_by_network : dict[str, int]
        Switches per network: ``compute``, ``storage``, ``management``.
    links_by_kind : dict[str, int]
        Directional links per kind (``nvlink``, ``pcie``, ``cpu``, ``host``, ``fabric``).
    links, cables : int
        Directional links, and physical cables (two links each).
    tiers : int
        Switch tiers of the compute fabric (0 without a fabric).
    planes : int
        Independent compute-fabric planes (0 without a fabric).
    nic_ports_per_server, nic_ports : int
        Compute NIC ports per server and in the whole cluster.
    nic_port_speed_Bps : float or None
        Line rate of one compute NIC port; None for a server with no compute NIC (no port has a rate).
    host_injection_Bps : float
        Sum of the cabled compute NIC port capacities (one direction).
    bisection_Bps : float or None
        Bisection bandwidth of the compute fabric (one direction, see :func:`bisection_bandwidth_Bps`);
        None with fewer than two servers or no fabric.
    oversubscription_by_tier : dict[str, float]
        Per switch tier with uplinks: downward capacity / upward capacity summed over the tier's
        compute switches, as cabled (the top tier has no uplinks and is left out).
    diameter_link_hops, diameter_switch_hops : int or None
        Longest shortest path between NICs of two different servers, in links (NIC to NIC) and in
        switches crossed; None with fewer than two servers or no fabric.
    nvlink_per_gpu_Bps : float
        NVLink bandwidth out of one GPU (sum over its NVLink links; 0 without NVLink).
    scale_out_per_gpu_Bps : float
        Compute NIC bandwidth per GPU: NICs x ports x port speed / GPUs per server.
    """

    name: str
    preset: str | None
    servers: int
    gpus: int
    gpus_per_server: int
    gpu_model: str
    nodes_by_kind: dict[str, int] = field(default_factory=dict)
    switches_by_tier: dict[str, int] = field(default_factory=dict)
    switches_by_network: dict[str, int] = field(default_factory=dict)
    links_by_kind: dict[str, int] = field(default_factory=dict)
    links: int = 0
    cables: int = 0
    tiers: int = 0
    planes: int = 0
    nic_ports_per_server: int = 0
    nic_ports: int = 0
    nic_port_speed_Bps: float | None = None
    host_injection_Bps: float = 0.0
    bisection_Bps: float | None = None
    oversubscription_by_tier: dict[str, float] = field(default_factory=dict)
    diameter_link_hops: int | None = None
    diameter_switch_hops: int | None = None
    nvlink_per_gpu_Bps: float = 0.0
    scale_out_per_gpu_Bps: float = 0.0

    def to_dict(self) -> dict:
        """Plain ``dict``/``int``/``float``/``str``/``None`` values, ready for ``json.dumps``.

        >>> import json
        >>> from gpuwait.topology import build_preset
        >>> json.loads(json.dumps(summarize(build_preset("dgx-h100")).to_dict()))["gpus"]
        8
        """
        return asdict(self)


# ---------------------------------------------------------------------------------------------- pieces
def _compute_masks(topo: Topology) -> dict[str, np.ndarray]:
    """Boolean masks shared by the summary functions (nodes and links of the compute fabric)."""
    compute = Network.COMPUTE
    is_switch = (topo.node_kind == NodeKind.SWITCH) & (topo.node_network == compute)
    link_compute = topo.link_network == compute
    host_up = link_compute & (topo.link_kind == LinkKind.HOST) & (topo.node_kind[topo.link_src] == NodeKind.NIC)
    fabric = link_compute & is_switch[topo.link_src] & is_switch[topo.link_dst]
    return {"switch": is_switch, "host_up": host_up, "fabric": fabric, "link_compute": link_compute}


def _tier_capacity_Bps(topo: Topology, fabric: np.ndarray, lower: int) -> float:
    """Total capacity of the compute links from tier ``lower`` up to tier ``lower + 1``."""
    up = fabric & (topo.node_tier[topo.link_src] == lower) & (topo.node_tier[topo.link_dst] == lower + 1)
    return float(topo.link_capacity_Bps[up].sum())


def bisection_bandwidth_Bps(topo: Topology) -> float | None:
    """Bisection bandwidth of the compute fabric, one direction, in bytes/s.

    Assumes a **symmetric folded Clos**: servers spread evenly over leaves, leaves over pods, every
    switch of a tier cabled alike. Cutting the servers into two equal halves along leaf (and pod)
    boundaries, the traffic from one half to the other must cross, in the half it starts from,
    its NIC ports, then its leaf->spine links, then (3 tiers) its spine->core links. The narrowest
    of these is the bisection::

        min(host injection, leaf->spine capacity, spine->core capacity) / 2

    summed over all planes. It equals the minimum cut between the two halves (see
    :func:`cut_capacity_Bps`) for a symmetric fabric; a partially filled one (a leaf with few
    servers) can have a somewhat different true minimum.

    Returns None with fewer than two servers or no compute fabric.

    Examples
    --------
    >>> from gpuwait.topology import build_preset
    >>> topo = build_preset("rocev2-400g-2tier", 8)      # 64 x 400G ports, non-blocking
    >>> bisection_bandwidth_Bps(topo) / 1e12                # half of 64 x 50 GB/s
    1.6
    """
    masks = _compute_masks(topo)
    return _bisection(topo, masks)


def _bisection(topo: Topology, masks: dict[str, np.ndarray]) -> float | None:
    if topo.n_servers < 2 or not masks["host_up"].any():
        return None
    cuts = [float(topo.link_capacity_Bps[masks["host_up"]].sum())]
    top = int(topo.node_tier[masks["switch"]].max())
    for lower in range(1, top):
        cuts.append(_tier_capacity_Bps(topo, masks["fabric"], lower))
    return min(cuts) / 2


def oversubscription_by_tier(topo: Topology) -> dict[str, float]:
    """Per compute switch tier: summed downward capacity / summed upward capacity, as cabled.

    Read from the link tables (not from the spec), so a partly filled leaf tier reads below 1.
    Each tier's figure is its worst switch: downward over upward capacity as cabled. A switch
    whose downlinks are not all used reads below its design ratio. Tiers without uplinks (the top
    tier) are left out.

    Examples
    --------
    >>> from gpuwait.spec import ClusterSpec
    >>> from gpuwait.topology import build_cluster
    >>> topo = build_cluster(ClusterSpec(preset="rocev2-400g-2tier", servers=8, fabric={"oversubscription": 2}))
    >>> oversubscription_by_tier(topo)
    {'leaf': 2.0}
    """
    return _oversubscription(topo, _compute_masks(topo))


def _oversubscription(topo: Topology, masks: dict[str, np.ndarray]) -> dict[str, float]:
    from_switch = masks["link_compute"] & masks["switch"][topo.link_src]
    src_tier = topo.node_tier[topo.link_src]
    dst_tier = topo.node_tier[topo.link_dst]
    cap = topo.link_capacity_Bps
    # per switch: capacity cabled down and up; a tier's figure is its worst (most oversubscribed) switch,
    # so a half-filled leaf does not dilute a fully cabled one
    down_mask = from_switch & (dst_tier < src_tier)
    up_mask = from_switch & (dst_tier > src_tier)
    down = np.bincount(topo.link_src[down_mask], cap[down_mask], minlength=topo.n_nodes)
    up = np.bincount(topo.link_src[up_mask], cap[up_mask], minlength=topo.n_nodes)
    out = {}
    for t in range(1, len(TIER_NAMES)):
        switches = np.flatnonzero((topo.node_tier == t) & masks["switch"] & (up > 0))
        if len(switches):
            out[TIER_NAMES[t]] = float((down[switches] / up[switches]).max())
    return out


def diameter_link_hops(topo: Topology) -> int | None:
    """Most links between NICs of two different servers on a shortest path (NIC to NIC).

    The longest shortest path between two leaves that hold NIC ports (a BFS over the compute
    switch graph), plus the two NIC-leaf links. Leaves of different planes are not connected
    and are not compared. None with fewer than two servers or no compute fabric.

    Examples
    --------
    >>> from gpuwait.topology import build_preset
    >>> diameter_link_hops(build_preset("rocev2-400g-2tier", 8))   # NIC-leaf-spine-leaf-NIC
    4
    """
    return _diameter(topo, _compute_masks(topo))


def _diameter(topo: Topology, masks: dict[str, np.ndarray]) -> int | None:
    if topo.n_servers < 2 or not masks["host_up"].any():
        return None
    switches = np.flatnonzero(masks["switch"])
    local = np.full(topo.n_nodes, -1, np.int64)
    local[switches] = np.arange(len(switches))
    fab = masks["fabric"]
    n = len(switches)
    graph = sp.csr_matrix((np.ones(int(fab.sum())), (local[topo.link_src[fab]], local[topo.link_dst[fab]])), shape=(n, n))
    graph.sum_duplicates()  # also sorts each row's neighbours
    host_leaves = local[np.unique(topo.link_dst[masks["host_up"]])]
    # Leaves with the same neighbours (every leaf of a pod, in a Clos) are equally far from any
    # other switch, and 2 apart, so one BFS per neighbour set gives the same maximum.
    sources: dict[tuple, int] = {}
    for leaf in host_leaves.tolist():
        sources.setdefault(tuple(graph.indices[graph.indptr[leaf]:graph.indptr[leaf + 1]].tolist()), leaf)
    reps = np.fromiter(sources.values(), np.int64)
    longest = 0
    for chunk in np.array_split(reps, max(1, len(reps) // 256)):  # bounded memory on huge fabrics
        dist = shortest_path(graph, method="D", directed=True, unweighted=True, indices=chunk)[:, host_leaves]
        finite = dist[np.isfinite(dist)]
        longest = max(longest, int(finite.max()))
    return longest + 2


def cut_capacity_Bps(topo: Topology, servers_a: Iterable[int], servers_b: Iterable[int] | None = None) -> float:
    """Maximum rate from the servers in ``servers_a`` to those in ``servers_b`` (a minimum cut).

    Uses the compute network only (NIC ports and switches) and networkx's ``minimum_cut``; it
    is for checking and exploring small fabrics, not for a hot path.

    Parameters
    ----------
    topo : Topology
    servers_a : iterable of int
        Server indices on the sending side.
    servers_b : iterable of int, optional
        Server indices on the receiving side; default: every other server.

    Examples
    --------
    >>> from gpuwait.topology import build_preset
    >>> topo = build_preset("rocev2-400g-2tier", 8)            # leaf0: servers 0-3, leaf1: 4-7
    >>> cut_capacity_Bps(topo, range(4)) == bisection_bandwidth_Bps(topo)
    True
    """
    import networkx as nx

    a = np.unique(np.fromiter(servers_a, int))
    b = np.setdiff1d(np.arange(topo.n_servers), a) if servers_b is None else np.unique(np.fromiter(servers_b, int))
    keep = topo.link_network == Network.COMPUTE
    src, dst = topo.link_src[keep].astype(np.int64), topo.link_dst[keep].astype(np.int64)
    pair, inverse = np.unique(src * topo.n_nodes + dst, return_inverse=True)
    capacity = np.bincount(inverse.ravel(), topo.link_capacity_Bps[keep])  # parallel links add up
    graph = nx.DiGraph()
    graph.add_weighted_edges_from(zip((pair // topo.n_nodes).tolist(), (pair % topo.n_nodes).tolist(), capacity.tolist()),
                                  weight="capacity")
    # edges without a capacity attribute are unbounded in networkx's flow functions
    graph.add_edges_from(("source", int(nic)) for nic in topo.nic_node[a].ravel())
    graph.add_edges_from((int(nic), "sink") for nic in topo.nic_node[b].ravel())
    value, _ = nx.minimum_cut(graph, "source", "sink", capacity="capacity")
    return float(value)


# ---------------------------------------------------------------------------------------------- summary
def summarize(topo: Topology) -> TopologySummary:
    """Counts, bandwidths, oversubscription and diameter of a topology.

    Parameters
    ----------
    topo : Topology

    Returns
    -------
    TopologySummary

    Examples
    --------
    >>> from gpuwait.topology import build_preset
    >>> s = summarize(build_preset("dgx-h100-superpod", 64))
    >>> s.gpus, s.switches_by_tier, s.bisection_Bps / 1e12, s.diameter_link_hops
    (512, {'leaf': 16, 'spine': 32, 'core': 0}, 12.8, 4)
    """
    server = topo.spec.server
    masks = _compute_masks(topo)
    is_switch_any = topo.node_kind == NodeKind.SWITCH
    compute_switch_tiers = topo.node_tier[masks["switch"]]
    tier_counts = np.bincount(compute_switch_tiers, minlength=len(TIER_NAMES))
    kind_counts = np.bincount(topo.node_kind, minlength=len(NODE_KINDS))
    network_counts = np.bincount(topo.node_network[is_switch_any], minlength=len(NETWORKS))
    link_counts = np.bincount(topo.link_kind, minlength=len(LINK_KINDS))
    has_fabric = bool(masks["switch"].any())
    nvlink_out = (topo.link_kind == LinkKind.NVLINK) & (topo.node_kind[topo.link_src] == NodeKind.GPU)
    ports_per_server = server.nics * server.nic_ports
    return TopologySummary(
        name=topo.name,
        preset=topo.spec.preset,
        servers=topo.n_servers,
        gpus=topo.n_gpus,
        gpus_per_server=topo.gpus_per_server,
        gpu_model=server.gpu_model,
        nodes_by_kind={k: int(kind_counts[i]) for i, k in enumerate(NODE_KINDS)},
        switches_by_tier={t: int(tier_counts[Tier.of(t)]) for t in _SWITCH_TIERS},
        switches_by_network={n: int(network_counts[Network.of(n)]) for n in NETWORKS[1:]},
        links_by_kind={k: int(link_counts[i]) for i, k in enumerate(LINK_KINDS)},
        links=topo.n_links,
        cables=topo.n_links // 2,
        tiers=int(compute_switch_tiers.max()) if has_fabric else 0,
        planes=len(np.unique(topo.node_plane[masks["switch"]])) if has_fabric else 0,
        nic_ports_per_server=ports_per_server,
        nic_ports=ports_per_server * topo.n_servers,
        nic_port_speed_Bps=float(server.nic_speed) if ports_per_server else None,
        host_injection_Bps=float(topo.link_capacity_Bps[masks["host_up"]].sum()),
        bisection_Bps=_bisection(topo, masks),
        oversubscription_by_tier=_oversubscription(topo, masks),
        diameter_link_hops=(d := _diameter(topo, masks)),
        diameter_switch_hops=None if d is None else d - 1,
        nvlink_per_gpu_Bps=float(topo.link_capacity_Bps[nvlink_out].sum()) / topo.n_gpus,
        scale_out_per_gpu_Bps=ports_per_server * float(server.nic_speed) / topo.gpus_per_server,
    )
