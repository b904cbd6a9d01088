"""Build a :class:`Topology` from a :class:`ClusterSpec`, vectorised over servers and switches.

Server internals (per server, ``sN.`` prefix): GPUs ``gpuI``, one NVSwitch domain ``nvsw`` (or, when
``cluster.nvlink_domain`` joins servers, one switch ``nvlD.nvsw`` per domain outside the servers),
PCIe switches ``pcieI``, CPU sockets ``cpuI``, compute NICs ``nicI``, storage NICs ``snicI``
and a management NIC ``mnic``. Compute fabric switches are ``leafI``, ``spineI``, ``coreI``
(``pK.`` in front on a multi-plane fabric); the storage network is ``stor.leafI``,
``stor.spineI`` with storage servers ``storI``; management switches are ``mgmt.swI``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from gpuwait.arrays import rank_within_groups
from gpuwait.errors import TopologyError
from gpuwait.spec.cluster import ClusterSpec, FabricSpec, ServerSpec
from gpuwait.topology.inventory import build_inventory_fabric, with_real_names
from gpuwait.topology.model import LinkKind, Network, NodeKind, Topology
from gpuwait.topology.servers import resolve_server


@dataclass
class _Tables:
    """Growing node and link columns; concatenated once at the end."""

    names: list = field(default_factory=list)
    node_cols: dict = field(default_factory=lambda: {k: [] for k in ("kind", "server", "tier", "plane", "network")})
    link_cols: dict = field(default_factory=lambda: {k: [] for k in ("src", "dst", "cap", "lat", "kind", "network", "plane")})
    n_nodes: int = 0

    def add_nodes(self, names: list[str], kind: str, *, server=-1, tier=0, plane=-1, network="server") -> np.ndarray:
        count = len(names)
        ids = np.arange(self.n_nodes, self.n_nodes + count, dtype=np.int32)
        self.names.extend(names)
        self.node_cols["kind"].append(np.full(count, NodeKind.of(kind), np.int8))
        self.node_cols["server"].append(np.broadcast_to(np.asarray(server, np.int32), (count,)).copy())
        self.node_cols["tier"].append(np.full(count, tier, np.int8))
        self.node_cols["plane"].append(np.broadcast_to(np.asarray(plane, np.int16), (count,)).copy())
        self.node_cols["network"].append(np.full(count, Network.of(network), np.int8))
        self.n_nodes += count
        return ids

    def add_cables(self, a, b, capacity_Bps, latency_ab_s, latency_ba_s, kind: str, network: str, plane=-1) -> None:
        """Two directional links per cable: a->b then b->a."""
        a = np.asarray(a, np.int32).ravel()
        b = np.asarray(b, np.int32).ravel()
        count = len(a)
        for src, dst, lat in ((a, b, latency_ab_s), (b, a, latency_ba_s)):
            self.link_cols["src"].append(src)
            self.link_cols["dst"].append(dst)
            self.link_cols["cap"].append(np.broadcast_to(np.asarray(capacity_Bps, float), (count,)).astype(float))
            self.link_cols["lat"].append(np.broadcast_to(np.asarray(lat, float), (count,)).astype(float))
            self.link_cols["kind"].append(np.full(count, LinkKind.of(kind), np.int8))
            self.link_cols["network"].append(np.full(count, Network.of(network), np.int8))
            self.link_cols["plane"].append(np.broadcast_to(np.asarray(plane, np.int16), (count,)).copy())


def _names(prefixes: list[str], stem: str, count: int) -> list[str]:
    return [f"{p}{stem}{i}" for p in prefixes for i in range(count)]


def _spread(count: int, over: int) -> np.ndarray:
    """Spread ``count`` items evenly over ``over`` bins (item i -> bin i*over//count)."""
    return (np.arange(count) * over) // max(count, 1)


def _local_map(explicit: list[int] | None, count: int, switches: int, field_name: str) -> np.ndarray:
    if explicit is None:
        return _spread(count, switches)
    if len(explicit) != count or min(explicit, default=0) < 0 or max(explicit, default=0) >= switches:
        raise TopologyError(f"server.{field_name}: got {explicit}; expected {count} PCIe switch indices in 0..{switches - 1}")
    return np.asarray(explicit)


def gpu_nic_affinity(server: ServerSpec) -> np.ndarray:
    """The compute NICs each GPU uses: those on its own PCIe switch, split evenly among its GPUs.

    Returns a (gpus, k) array of local NIC indices, padded with -1: with more NICs than GPUs on a
    switch each GPU gets its own share (OCI BM.GPU4.8: 2 x 100G per A100); with fewer, GPUs share
    one (HGX with 4 NICs). A GPU with no NIC on its switch uses one spread evenly over the server.

    >>> gpu_nic_affinity(ServerSpec(gpus=8, nics=4, pcie_switches=4))[:, 0].tolist()
    [0, 0, 1, 1, 2, 2, 3, 3]
    >>> gpu_nic_affinity(ServerSpec(gpus=8, nics=16, pcie_switches=4))[:2].tolist()
    [[0, 1], [2, 3]]
    """
    if server.nics == 0:
        return np.full((server.gpus, 1), -1)
    gpu_sw = _local_map(server.gpu_pcie_switch, server.gpus, server.pcie_switches, "gpu_pcie_switch")
    nic_sw = _local_map(server.nic_pcie_switch, server.nics, server.pcie_switches, "nic_pcie_switch")
    shares: list[list[int]] = [[] for _ in range(server.gpus)]
    for sw in range(server.pcie_switches):
        gpus = np.flatnonzero(gpu_sw == sw)
        nics = np.flatnonzero(nic_sw == sw)
        for i, gpu in enumerate(gpus):
            if len(nics) >= len(gpus):
                shares[gpu] = nics[i * len(nics) // len(gpus):(i + 1) * len(nics) // len(gpus)].tolist()
            elif len(nics):
                shares[gpu] = [int(nics[i * len(nics) // len(gpus)])]
            else:
                shares[gpu] = [int(gpu * server.nics // server.gpus)]
    width = max(len(share) for share in shares)
    out = np.full((server.gpus, width), -1)
    for row, share in enumerate(shares):
        out[row, :len(share)] = share
    return out


def _build_servers(t: _Tables, server: ServerSpec, n_servers: int, management: bool, spans_servers: bool = False) -> dict:
    S, G = n_servers, server.gpus
    prefixes = [f"s{s}." for s in range(S)]
    per_server = lambda k: np.repeat(np.arange(S), k)  # noqa: E731 — server index of each local node

    gpu = t.add_nodes(_names(prefixes, "gpu", G), "gpu", server=per_server(G)).reshape(S, G)
    pcie = t.add_nodes(_names(prefixes, "pcie", server.pcie_switches), "pcie_switch",
                       server=per_server(server.pcie_switches)).reshape(S, -1)
    cpu = t.add_nodes(_names(prefixes, "cpu", server.cpus), "cpu", server=per_server(server.cpus)).reshape(S, -1)
    nic = t.add_nodes(_names(prefixes, "nic", server.nics), "nic", server=per_server(server.nics)).reshape(S, server.nics)
    snic = t.add_nodes(_names(prefixes, "snic", server.storage_nics), "storage_nic",
                       server=per_server(server.storage_nics)).reshape(S, server.storage_nics)
    mnic = t.add_nodes([f"{p}mnic" for p in prefixes], "mgmt_nic", server=np.arange(S)) if management else None

    pcie_Bps, pcie_latency_s = server.pcie_bandwidth, server.pcie_latency
    if server.nvlink_bandwidth > 0 and G > 1 and not spans_servers:
        if server.nvlink_topology == "nvswitch":
            nvsw = t.add_nodes([f"{p}nvsw" for p in prefixes], "nvswitch", server=np.arange(S))
            t.add_cables(gpu, np.repeat(nvsw, G), server.nvlink_bandwidth, server.nvlink_latency,
                         server.nvlink_latency, "nvlink", "server")
        elif server.nvlink_topology == "pairs":
            # an NVLink bridge per pair carries all of each GPU's links (A100 PCIe: 3 bridges, NV12)
            t.add_cables(gpu[:, 0::2], gpu[:, 1::2], server.nvlink_bandwidth, server.nvlink_latency,
                         server.nvlink_latency, "nvlink", "server")
        else:
            i, j = np.triu_indices(G, k=1)
            t.add_cables(gpu[:, i], gpu[:, j], server.nvlink_bandwidth / (G - 1), server.nvlink_latency,
                         server.nvlink_latency, "nvlink", "server")
    gpu_sw = _local_map(server.gpu_pcie_switch, G, server.pcie_switches, "gpu_pcie_switch")
    nic_sw = _local_map(server.nic_pcie_switch, server.nics, server.pcie_switches, "nic_pcie_switch")
    # a superchip's GPU reaches its CPU over NVLink-C2C, not PCIe (server.gpu_host_bandwidth)
    host_Bps = server.gpu_host_bandwidth or pcie_Bps
    t.add_cables(gpu, pcie[:, gpu_sw], host_Bps, pcie_latency_s, pcie_latency_s, "pcie", "server")
    if server.nics:
        t.add_cables(nic, pcie[:, nic_sw], pcie_Bps, pcie_latency_s, pcie_latency_s, "pcie", "server")
    sw_cpu = _spread(server.pcie_switches, server.cpus)
    t.add_cables(pcie, cpu[:, sw_cpu], max(host_Bps, pcie_Bps), pcie_latency_s, pcie_latency_s, "pcie", "server")
    if server.storage_nics:
        t.add_cables(snic, cpu[:, _spread(server.storage_nics, server.cpus)], pcie_Bps, pcie_latency_s, pcie_latency_s, "pcie", "server")
    if server.cpus > 1:
        i, j = np.triu_indices(server.cpus, k=1)
        t.add_cables(cpu[:, i], cpu[:, j], server.cpu_interconnect_bandwidth, 0.1e-6, 0.1e-6, "cpu", "server")
    if mnic is not None:
        t.add_cables(mnic, cpu[:, 0], pcie_Bps, pcie_latency_s, pcie_latency_s, "pcie", "server")
    return {"gpu": gpu, "nic": nic, "snic": snic, "mnic": mnic, "affinity": gpu_nic_affinity(server)}


#: Largest NVLink domain of NVLink5 NVSwitches: 576 GPUs (NVIDIA, "NVLink and NVLink Switch",
#: nvidia.com/en-us/data-center/nvlink: "connect up to 576 GPUs in a non-blocking compute fabric").
MAX_NVLINK_DOMAIN_GPUS = 576


def _domain_hint(servers: int, per_domain: int) -> str:
    """What to change when NVLink domains of ``per_domain`` servers do not tile ``servers``: the server count, or
    the domain size to the largest that tiles it (racks partly filled), where one above 1 exists.

    >>> _domain_hint(32, 18)
    'set servers to a multiple of 18, or nvlink_domain.servers to 16 (racks partly filled)'
    >>> _domain_hint(7, 4)
    'set servers to a multiple of 4'
    """
    hint = f"set servers to a multiple of {per_domain}"
    fits = max(d for d in range(1, min(servers, per_domain) + 1) if servers % d == 0)
    return hint + (f", or nvlink_domain.servers to {fits} (racks partly filled)" if fits > 1 else "")


def check_nvlink_domain(spec: ClusterSpec, server: ServerSpec) -> int:
    """Servers per NVLink domain, or one :class:`TopologyError` naming the field that cannot hold it.

    >>> check_nvlink_domain(ClusterSpec(servers=36, nvlink_domain=18, server={"template": "gb200-nvl72"}),
    ...                     resolve_server(ServerSpec(template="gb200-nvl72")))
    18
    """
    per = spec.nvlink_domain.servers
    if per == 1:
        return 1
    if spec.servers % per:
        raise TopologyError(f"nvlink_domain.servers: got {per}; expected a divisor of cluster.servers ({spec.servers}): "
                            "every NVLink domain holds the same number of servers",
                            hint=_domain_hint(spec.servers, per))
    if server.nvlink_bandwidth <= 0 or server.nvlink_topology != "nvswitch":
        raise TopologyError(f"nvlink_domain.servers: got {per}; a domain spanning servers needs server.nvlink_topology: "
                            f"nvswitch and nvlink_bandwidth > 0 (got {server.nvlink_topology}, "
                            f"{server.nvlink_bandwidth / 1e9:g} GB/s)")
    if per * server.gpus > MAX_NVLINK_DOMAIN_GPUS:
        raise TopologyError(f"nvlink_domain.servers: {per} servers x {server.gpus} GPUs = {per * server.gpus} GPUs; "
                            f"expected at most {MAX_NVLINK_DOMAIN_GPUS}, the largest NVLink5 NVSwitch domain")
    return per


def _build_nvlink_domains(t: _Tables, spec: ClusterSpec, server: ServerSpec, gpu: np.ndarray, per: int) -> np.ndarray:
    """One NVSwitch node per domain (``nvl{d}.nvsw``): the NVSwitch trays of a rack as one non-blocking
    switch, every GPU of the domain's servers cabled to it at its full NVLink bandwidth."""
    n_domains = spec.servers // per
    switch = t.add_nodes([f"nvl{d}.nvsw" for d in range(n_domains)], "nvswitch", server=-1)
    latency_s = server.nvlink_latency + spec.nvlink_domain.switch_latency
    domain_of_gpu = np.repeat(np.arange(spec.servers) // per, server.gpus).reshape(gpu.shape)
    t.add_cables(gpu, switch[domain_of_gpu], server.nvlink_bandwidth, latency_s, latency_s, "nvlink", "server")
    return switch


@dataclass(frozen=True)
class ClosShape:
    """Counts of a folded Clos derived from a FabricSpec and the server; no ids."""

    leaf_downlinks: int
    leaf_uplinks: int
    leaves_per_plane: int
    servers_per_leaf_group: int
    leaves_per_group: int
    spines_per_pod: int
    leaves_per_pod: int
    pods: int
    spine_uplinks: int
    cores: int
    ports_per_plane: int


def _integral(value: float, field_name: str, detail: str) -> int:
    rounded = round(value)
    if rounded < 1 or abs(value - rounded) > 1e-9:
        raise TopologyError(f"{field_name}: {detail} gives {value:.3g} ports; expected a whole number of at least 1",
                            hint="pick an oversubscription that divides the downlink count, or set leaf_downlinks")
    return int(rounded)


def clos_shape(fabric: FabricSpec, server: ServerSpec, n_servers: int, extra_endpoints: int = 0) -> ClosShape:
    """Compute leaf/spine/core counts, or explain why the fabric cannot hold the servers."""
    radix, planes = fabric.switch_radix, fabric.planes
    if server.nics == 0:
        raise TopologyError("server.nics: got 0; expected at least one compute NIC to connect servers to a fabric",
                            hint="set fabric.kind: none for servers with no scale-out network")
    if server.nic_ports % planes:
        raise TopologyError(f"fabric.planes: got {planes}; expected a divisor of server.nic_ports ({server.nic_ports}) — port p joins plane p")
    ports_per_plane = server.nic_ports // planes
    if fabric.dual_tor and ports_per_plane != 2:
        raise TopologyError(f"fabric.dual_tor: needs 2 ports per NIC per plane; got {ports_per_plane}",
                            hint="set server.nic_ports: 2 (and planes: 1)")
    if fabric.dual_tor and fabric.rail_optimized:
        raise TopologyError("fabric.dual_tor: not supported together with rail_optimized; expected one of them")
    down = fabric.leaf_downlinks or radix // 2
    switch_Bps = fabric.switch_speed or server.nic_speed
    up = _integral(down * server.nic_speed / (switch_Bps * fabric.oversubscription), "fabric.oversubscription",
                   f"{down} downlinks at {fabric.oversubscription}:1")
    if down + up > radix:
        raise TopologyError(f"fabric.leaf_downlinks: {down} down + {up} up = {down + up} ports; expected at most switch_radix {radix}")

    endpoints = server.nics * ports_per_plane
    if fabric.rail_optimized:
        unit = fabric.servers_per_unit or down // ports_per_plane
        if unit * ports_per_plane > down:
            raise TopologyError(f"fabric.servers_per_unit: {unit} servers x {ports_per_plane} ports exceed {down} leaf downlinks")
        group_servers, group_leaves = unit, server.nics
    elif fabric.dual_tor:
        group_servers, group_leaves = down // server.nics, 2
    else:
        group_servers, group_leaves = down // endpoints, 1
    if group_servers < 1:
        raise TopologyError(f"fabric.leaf_downlinks: a server brings {endpoints} ports per plane but a leaf has {down}",
                            hint="use rail_optimized: true or a larger switch_radix")
    groups = math.ceil(n_servers / group_servers)
    storage_leaves = math.ceil(extra_endpoints / down) if extra_endpoints else 0
    leaves = groups * group_leaves + storage_leaves

    if fabric.tiers == 2:
        spine_down = leaves
        if spine_down > radix:
            max_servers = (radix // group_leaves) * group_servers
            raise TopologyError(
                f"cluster.servers: {n_servers} servers need {leaves} leaves but a 2-tier fabric of radix {radix} holds at most "
                f"{radix} leaves ({max_servers} servers)", hint="set fabric.tiers: 3 or a larger switch_radix")
        return ClosShape(down, up, leaves, group_servers, group_leaves, up, leaves, 1, 0, 0, ports_per_plane)

    leaves_per_pod = radix // 2
    if fabric.rail_optimized or fabric.dual_tor:
        leaves_per_pod = (leaves_per_pod // group_leaves) * group_leaves
    if leaves_per_pod < 1:
        raise TopologyError(f"fabric.switch_radix: {radix} ports cannot hold one leaf group of {group_leaves} leaves per pod")
    spine_up = _integral(leaves_per_pod / fabric.spine_oversubscription, "fabric.spine_oversubscription",
                         f"{leaves_per_pod} spine downlinks at {fabric.spine_oversubscription}:1")
    pods = math.ceil(leaves / leaves_per_pod)
    if pods > radix:
        raise TopologyError(f"cluster.servers: {n_servers} servers need {pods} pods; a core switch of radix {radix} reaches at most {radix}",
                            hint="use a larger switch_radix or more oversubscription")
    return ClosShape(down, up, leaves, group_servers, group_leaves, up, leaves_per_pod, pods, spine_up, up * spine_up,
                     ports_per_plane)


def _build_clos(t: _Tables, spec: ClusterSpec, server: ServerSpec, nodes: dict, storage_servers: np.ndarray | None):
    fabric = spec.fabric
    S = spec.servers
    n_storage = 0 if storage_servers is None else len(storage_servers)
    shape = clos_shape(fabric, server, S, extra_endpoints=n_storage)
    port_Bps = server.nic_speed
    switch_Bps = fabric.switch_speed or port_Bps
    latency_to_switch_s = fabric.cable_latency + fabric.switch_latency
    latency_to_host_s = fabric.cable_latency
    nic_leaf = np.full((S, server.nics, server.nic_ports), -1, np.int64)

    for plane in range(fabric.planes):
        prefix = f"p{plane}." if fabric.planes > 1 else ""
        leaves = t.add_nodes([f"{prefix}leaf{i}" for i in range(shape.leaves_per_plane)], "switch", tier=1, plane=plane,
                             network="compute")
        # which leaf each (server, nic, port-in-plane) lands on
        s_idx, n_idx, q_idx = np.meshgrid(np.arange(S), np.arange(server.nics), np.arange(shape.ports_per_plane), indexing="ij")
        group = s_idx // shape.servers_per_leaf_group
        if fabric.rail_optimized:
            leaf_local = group * server.nics + n_idx
        elif fabric.dual_tor:
            leaf_local = group * 2 + q_idx
        else:
            leaf_local = group
        ports = plane * shape.ports_per_plane + q_idx
        nic_leaf[s_idx, n_idx, ports] = leaves[leaf_local]
        t.add_cables(nodes["nic"][s_idx, n_idx].ravel(), leaves[leaf_local].ravel(), port_Bps, latency_to_switch_s, latency_to_host_s,
                     "host", "compute", plane)
        if n_storage:
            first = shape.leaves_per_plane - math.ceil(n_storage / shape.leaf_downlinks)
            leaf_of_storage = leaves[first + np.arange(n_storage) // shape.leaf_downlinks]
            t.add_cables(storage_servers, leaf_of_storage, spec.storage.storage_server_speed, latency_to_switch_s, latency_to_host_s, "host",
                         "compute", plane)

        if fabric.tiers == 2:
            spines = t.add_nodes([f"{prefix}spine{i}" for i in range(shape.spines_per_pod)], "switch", tier=2, plane=plane,
                                 network="compute")
            a, b = np.meshgrid(leaves, spines, indexing="ij")
            t.add_cables(a, b, switch_Bps, latency_to_switch_s, latency_to_switch_s, "fabric", "compute", plane)
            continue
        n_spines = shape.pods * shape.spines_per_pod
        spines = t.add_nodes([f"{prefix}spine{i}" for i in range(n_spines)], "switch", tier=2, plane=plane,
                             network="compute").reshape(shape.pods, shape.spines_per_pod)
        cores = t.add_nodes([f"{prefix}core{i}" for i in range(shape.cores)], "switch", tier=3, plane=plane,
                            network="compute").reshape(shape.spines_per_pod, shape.spine_uplinks)
        leaf_pod = np.arange(shape.leaves_per_plane) // shape.leaves_per_pod
        a, j = np.meshgrid(np.arange(shape.leaves_per_plane), np.arange(shape.spines_per_pod), indexing="ij")
        t.add_cables(leaves[a], spines[leaf_pod[a], j], switch_Bps, latency_to_switch_s, latency_to_switch_s, "fabric", "compute", plane)
        # spine j of every pod connects to every core of core group j
        pod, spine, up = np.meshgrid(np.arange(shape.pods), np.arange(shape.spines_per_pod),
                                     np.arange(shape.spine_uplinks), indexing="ij")
        t.add_cables(spines[pod, spine], cores[spine, up], switch_Bps, latency_to_switch_s, latency_to_switch_s, "fabric", "compute", plane)
    return nic_leaf, shape


def _build_storage(t: _Tables, spec: ClusterSpec, server: ServerSpec, nodes: dict) -> np.ndarray | None:
    storage = spec.storage
    if storage.mode == "none":
        return None
    stor = t.add_nodes([f"stor{i}" for i in range(storage.storage_servers)], "storage_server",
                       network="storage" if storage.mode == "separate" else "compute")
    if storage.mode == "converged":
        return stor
    if server.storage_nics == 0:
        raise TopologyError("server.storage_nics: got 0; a separate storage network needs storage NICs on the servers",
                            hint="set server.storage_nics, or storage.mode: converged")
    down = storage.switch_radix // 2
    up = _integral(down / storage.oversubscription, "storage.oversubscription", f"{down} downlinks at {storage.oversubscription}:1")
    endpoints = np.r_[nodes["snic"].ravel(), stor]
    speeds = np.r_[np.full(nodes["snic"].size, server.storage_nic_speed), np.full(len(stor), storage.storage_server_speed)]
    n_leaves = math.ceil(len(endpoints) / down)
    if n_leaves > storage.switch_radix:
        raise TopologyError(f"storage: {len(endpoints)} endpoints need {n_leaves} leaves; a 2-tier storage network of radix "
                            f"{storage.switch_radix} holds {storage.switch_radix}", hint="raise storage.switch_radix")
    leaves = t.add_nodes([f"stor.leaf{i}" for i in range(n_leaves)], "switch", tier=1, network="storage")
    latency_to_switch_s = spec.fabric.cable_latency + spec.fabric.switch_latency
    t.add_cables(endpoints, leaves[np.arange(len(endpoints)) // down], speeds, latency_to_switch_s, spec.fabric.cable_latency, "host", "storage")
    if n_leaves > 1:
        # as few spines as hold every leaf's uplinks, each leaf cabled to each spine up/n_spines times
        n_spines = next(k for k in range(1, up + 1) if up % k == 0 and n_leaves * up // k <= storage.switch_radix)
        spines = t.add_nodes([f"stor.spine{i}" for i in range(n_spines)], "switch", tier=2, network="storage")
        a, b, _ = np.meshgrid(leaves, spines, np.arange(up // n_spines), indexing="ij")
        t.add_cables(a, b, float(speeds.max()), latency_to_switch_s, latency_to_switch_s, "fabric", "storage")
    return stor


def _build_management(t: _Tables, spec: ClusterSpec, server: ServerSpec, nodes: dict) -> None:
    mgmt = spec.management
    n_switches = math.ceil(spec.servers / mgmt.switch_radix)
    switches = t.add_nodes([f"mgmt.sw{i}" for i in range(n_switches)], "switch", tier=1, network="management")
    latency_to_switch_s = spec.fabric.cable_latency + spec.fabric.switch_latency
    t.add_cables(nodes["mnic"], switches[np.arange(spec.servers) // mgmt.switch_radix], server.mgmt_nic_speed, latency_to_switch_s,
                 spec.fabric.cable_latency, "host", "management")
    if n_switches > 1:
        core = t.add_nodes(["mgmt.core"], "switch", tier=2, network="management")
        t.add_cables(switches, np.repeat(core, n_switches), mgmt.uplink_speed, latency_to_switch_s, latency_to_switch_s, "fabric", "management")


def build_topology(spec: ClusterSpec) -> Topology:
    """Build the cluster's node and link tables.

    Parameters
    ----------
    spec : ClusterSpec
        A cluster description (use :func:`gpuwait.topology.presets.resolve_cluster` first when it names a preset).

    Examples
    --------
    >>> from gpuwait.spec import ClusterSpec
    >>> topo = build_topology(ClusterSpec(servers=4, server={"template": "dgx-h100"}))
    >>> topo.n_gpus, int((topo.node_tier == 1).sum()), int((topo.node_tier == 2).sum())
    (32, 1, 32)
    """
    server = resolve_server(spec.server)
    if spec.servers > 1 and spec.fabric.kind == "none":
        raise TopologyError(f"cluster.servers: got {spec.servers} with fabric.kind: none; expected 1 server, or a fabric",
                            hint="set fabric.kind: clos")
    if server.nvlink_topology == "pairs" and server.nvlink_bandwidth > 0 and server.gpus % 2:
        raise TopologyError(f"server.nvlink_topology: pairs joins GPUs two by two; got {server.gpus} GPUs, expected an even number",
                            hint="use nvlink_topology: mesh, or an even gpus")
    per_domain = check_nvlink_domain(spec, server)
    t = _Tables()
    nodes = _build_servers(t, server, spec.servers, spec.management.enabled, spans_servers=per_domain > 1)
    domain_switch = _build_nvlink_domains(t, spec, server, nodes["gpu"], per_domain) if per_domain > 1 else np.zeros(0, np.int64)
    storage_servers = _build_storage(t, spec, server, nodes)
    S = spec.servers
    nic_leaf = np.full((S, server.nics, server.nic_ports), -1, np.int64)
    if spec.fabric.kind == "clos":
        converged = storage_servers if spec.storage.mode == "converged" else None
        nic_leaf, _ = _build_clos(t, spec, server, nodes, converged)
    elif spec.fabric.kind == "inventory":
        nic_leaf = build_inventory_fabric(t, spec, server, nodes)
    elif spec.storage.mode == "converged":
        raise TopologyError("storage.mode: converged needs a compute fabric; got fabric.kind: none")
    if spec.management.enabled:
        _build_management(t, spec, server, nodes)

    cols = {k: np.concatenate(v) if v else np.zeros(0) for k, v in t.node_cols.items()}
    links = {k: np.concatenate(v) if v else np.zeros(0) for k, v in t.link_cols.items()}
    topo = Topology(
        name=spec.name, spec=spec.model_copy(update={"server": server}),
        node_name=np.array(t.names, dtype=object),
        node_kind=cols["kind"].astype(np.int8), node_server=cols["server"].astype(np.int32),
        node_tier=cols["tier"].astype(np.int8), node_plane=cols["plane"].astype(np.int16),
        node_network=cols["network"].astype(np.int8),
        link_src=links["src"].astype(np.int32), link_dst=links["dst"].astype(np.int32),
        link_capacity_Bps=links["cap"].astype(float), link_latency_s=links["lat"].astype(float),
        link_kind=links["kind"].astype(np.int8), link_network=links["network"].astype(np.int8),
        link_plane=links["plane"].astype(np.int16),
        gpu_node=nodes["gpu"], nic_node=nodes["nic"], nic_uplink=np.full((S, server.nics, server.nic_ports), -1, np.int64),
        gpu_nic=nodes["affinity"][:, 0], gpu_nics=nodes["affinity"],
        storage_server_node=storage_servers if storage_servers is not None else np.zeros(0, np.int32),
        server_nvlink_domain=np.arange(S) // per_domain if per_domain > 1 else np.zeros(0, np.int64),
        nvlink_domain_switch=np.asarray(domain_switch, np.int64),
    )
    if spec.fabric.kind != "none":
        # cables were added port by port (plane-major), so a NIC's uplinks in id order are its ports in order;
        # parallel cables to one leaf stay distinct links (A->B and A->B#1)
        nic_kind = NodeKind.NIC
        up = np.flatnonzero((topo.link_kind == LinkKind.HOST) & (topo.node_kind[topo.link_src] == nic_kind)
                            & (topo.node_kind[topo.link_dst] == NodeKind.SWITCH))
        src = topo.link_src[up]
        port = rank_within_groups(src)
        nic_local = np.empty(topo.n_nodes, np.int64)
        nic_local[nodes["nic"].ravel()] = np.arange(nodes["nic"].size)
        uplink = np.full(nic_leaf.shape, -1, np.int64)
        server_of, nic_of = np.divmod(nic_local[src], server.nics)
        uplink[server_of, nic_of, port] = up
        object.__setattr__(topo, "nic_uplink", uplink)
    return with_real_names(topo)
