"""The Topology: node and link tables as numpy arrays, with readable names.

A 16,384-GPU fabric has a few hundred thousand links, so nothing here is a Python object per
node or link. Names are stable and readable — ``s12.gpu3``, ``s12.nic3``, ``leaf7``,
``p1.spine0``, ``core5``, ``stor2`` — and a link is ``SRC->DST`` (``#k`` is appended for the
k-th parallel link between the same two nodes). Names are accepted wherever ids are.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import IntEnum
from functools import cached_property
from typing import Self

import numpy as np

from gpuwait.arrays import rank_within_groups
from gpuwait.errors import UnknownNameError
from gpuwait.spec.cluster import ClusterSpec


class _Labelled(IntEnum):
    """An integer code stored in the topology's int8 tables, with a lower-case name for printing."""

    @property
    def label(self) -> str:
        """The name people read: ``NodeKind.STORAGE_SERVER.label == "storage_server"``."""
        return self.name.lower()

    @classmethod
    def of(cls, label: str) -> Self:
        """The member named ``label`` (lower case, as printed)."""
        return cls[label.upper()]


class NodeKind(_Labelled):
    """Code of a node kind in ``Topology.node_kind``."""

    GPU = 0
    NVSWITCH = 1
    PCIE_SWITCH = 2
    CPU = 3
    NIC = 4
    STORAGE_NIC = 5
    MGMT_NIC = 6
    SWITCH = 7
    STORAGE_SERVER = 8


class LinkKind(_Labelled):
    """Code of a link kind in ``Topology.link_kind``."""

    NVLINK = 0
    PCIE = 1
    CPU = 2
    HOST = 3  # endpoint (NIC, storage server) to its switch
    FABRIC = 4  # switch to switch


class Network(_Labelled):
    """Code of a network in ``Topology.node_network`` / ``link_network``."""

    SERVER = 0
    COMPUTE = 1
    STORAGE = 2
    MANAGEMENT = 3


class Tier(_Labelled):
    """``Topology.node_tier``: 0 for everything in a server, then the switch tiers."""

    HOST = 0
    LEAF = 1
    SPINE = 2
    CORE = 3


# the labels in code order, for listings and tables indexed by code
NODE_KINDS: tuple[str, ...] = tuple(k.label for k in NodeKind)
LINK_KINDS: tuple[str, ...] = tuple(k.label for k in LinkKind)
NETWORKS: tuple[str, ...] = tuple(n.label for n in Network)
TIER_NAMES: tuple[str, ...] = tuple(t.label for t in Tier)
# link lookup keys are (src, dst, k-th parallel cable); room for this many parallel cables per node pair
_MAX_PARALLEL = 1 << 16


def _read_only(mask: np.ndarray) -> np.ndarray:
    mask.flags.writeable = False  # cached and shared: a caller must copy before changing it
    return mask


@dataclass(frozen=True, eq=False)
class Topology:
    """Nodes and directional links of a cluster.

    Links are directional: a cable is two links, ``A->B`` and ``B->A``. Capacities are bytes/s
    per direction, latencies are seconds (a link into a switch includes that switch's hop).

    Per-server lookup tables give the ids of GPUs (``gpu_node[server, gpu]``), compute NICs
    (``nic_node[server, nic]``) and each NIC port's uplink (``nic_uplink[server, nic, port]``,
    -1 where the port is not cabled).
    """

    name: str
    spec: ClusterSpec
    node_name: np.ndarray
    node_kind: np.ndarray
    node_server: np.ndarray
    node_tier: np.ndarray
    node_plane: np.ndarray
    node_network: np.ndarray
    link_src: np.ndarray
    link_dst: np.ndarray
    link_capacity_Bps: np.ndarray
    link_latency_s: np.ndarray
    link_kind: np.ndarray
    link_network: np.ndarray
    link_plane: np.ndarray
    gpu_node: np.ndarray
    nic_node: np.ndarray
    nic_uplink: np.ndarray
    gpu_nic: np.ndarray  # (G,) the first NIC of each GPU (local index)
    gpu_nics: np.ndarray  # (G, k) every NIC of each GPU, -1 padded; QPs are spread over them
    storage_server_node: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    #: NVLink domains spanning servers (``cluster.nvlink_domain``): the domain index of every server,
    #: and the NVSwitch node of every domain (``nvl{d}.nvsw``, outside any server). Both empty when
    #: every server is its own NVLink domain.
    server_nvlink_domain: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    nvlink_domain_switch: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    #: per GPU node id, the NIC node carrying its traffic instead of its own (-1: its own); empty = none.
    #: Set by faults (a NIC down moves its GPU to the neighbour NIC), never by the builder.
    gpu_nic_override: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    #: other names a node answers to (gpuwait's own names under real ones, GUIDs, ``lidN``) -> node id;
    #: and ``SWITCH[PORT]`` -> the link leaving that port. Set from ``cluster.inventory``; empty otherwise.
    node_alias: dict = field(default_factory=dict)
    link_alias: dict = field(default_factory=dict)

    # ----------------------------------------------------------------- sizes
    @property
    def n_nodes(self) -> int:
        return len(self.node_kind)

    @property
    def n_links(self) -> int:
        return len(self.link_src)

    @property
    def n_servers(self) -> int:
        return self.gpu_node.shape[0]

    @property
    def gpus_per_server(self) -> int:
        return self.gpu_node.shape[1]

    @property
    def n_gpus(self) -> int:
        return self.gpu_node.size

    @property
    def servers_per_nvlink_domain(self) -> int:
        """Servers joined in one NVLink domain (1: every server is its own)."""
        return self.n_servers // max(len(self.nvlink_domain_switch), 1) if len(self.nvlink_domain_switch) else 1

    def nvlink_domain_of(self, nodes: np.ndarray) -> np.ndarray:
        """NVLink domain of each node: its server's domain (the server itself when domains are single
        servers); a domain NVSwitch is in its own domain; -1 outside servers.

        >>> from gpuwait.topology import build_preset
        >>> topo = build_preset("gb200-nvl72", servers=36)
        >>> topo.nvlink_domain_of(topo.node_ids(["s0.gpu0", "s17.gpu3", "s18.gpu0", "nvl1.nvsw"])).tolist()
        [0, 0, 1, 1]
        """
        nodes = np.asarray(nodes, np.int64)
        server = self.node_server[nodes].astype(np.int64)
        if not len(self.nvlink_domain_switch):
            return server
        domain = np.where(server >= 0, self.server_nvlink_domain[np.maximum(server, 0)], -1)
        switch_domain = np.full(self.n_nodes, -1, np.int64)
        switch_domain[self.nvlink_domain_switch] = np.arange(len(self.nvlink_domain_switch))
        return np.where(switch_domain[nodes] >= 0, switch_domain[nodes], domain)

    def nvswitch_of_server(self, server: int) -> int:
        """Node id of the NVSwitch the server's GPUs link to (its domain's, or its own ``sN.nvsw``); -1 if none."""
        if len(self.nvlink_domain_switch):
            return int(self.nvlink_domain_switch[self.server_nvlink_domain[server]])
        return self._node_index.get(f"s{server}.nvsw", -1)

    # ----------------------------------------------------------------- names
    @cached_property
    def _node_index(self) -> dict[str, int]:
        return self.node_alias | {name: i for i, name in enumerate(self.node_name.tolist())}

    def server_name(self, server: int) -> str:
        """The name of server ``server``: its host name from ``cluster.inventory``, else ``s{server}``."""
        inventory = self.spec.inventory
        return inventory.hosts[server] if inventory is not None else f"s{server}"

    @cached_property
    def _server_index(self) -> dict[str, int]:
        hosts = self.spec.inventory.hosts if self.spec.inventory is not None else []
        return {f"s{i}": i for i in range(self.n_servers)} | {host: i for i, host in enumerate(hosts)}

    def server_id(self, name: str | int) -> int:
        """Index of a server given its host name, ``s3``, or the name of any node inside it.

        >>> from gpuwait.topology import build_preset
        >>> topo = build_preset("dgx-h100", servers=4)
        >>> topo.server_id("s2"), topo.server_id("s3.nic1")
        (2, 3)
        """
        if isinstance(name, (int, np.integer)):
            return int(name)
        if name in self._server_index:
            return self._server_index[name]
        server = int(self.node_server[self.node_id(name)])
        if server < 0:
            raise UnknownNameError(f"{name!r} is a {self.kind_of(self.node_id(name))} outside any server; expected a host "
                                   f"(e.g. {self.server_name(0)}) or a node inside one")
        return server

    @cached_property
    def _parallel_rank(self) -> np.ndarray:
        # k-th link between the same (src, dst): 0 for most links, 1.. for parallel cables
        return rank_within_groups(self.link_src.astype(np.int64) * self.n_nodes + self.link_dst).astype(np.int32)

    @cached_property
    def _link_key_order(self) -> tuple[np.ndarray, np.ndarray]:
        key = (self.link_src.astype(np.int64) * self.n_nodes + self.link_dst) * _MAX_PARALLEL + self._parallel_rank
        order = np.argsort(key, kind="stable")
        return key[order], order

    def node_id(self, name: str | int) -> int:
        """Id of a node given its name (or an id, returned as is).

        >>> from gpuwait.topology import build_preset
        >>> topo = build_preset("dgx-h100")
        >>> topo.node_name[topo.node_id("s0.gpu3")]
        's0.gpu3'
        """
        if isinstance(name, (int, np.integer)):
            if not 0 <= int(name) < self.n_nodes:
                raise UnknownNameError(f"node id {name} out of range 0..{self.n_nodes - 1}")
            return int(name)
        try:
            return self._node_index[name]
        except KeyError:
            near = difflib.get_close_matches(name, self.node_name.tolist() + list(self.node_alias), n=3, cutoff=0.6)
            raise UnknownNameError(
                f"node {name!r} does not exist in {self.name}" + (f" (close: {', '.join(near)})" if near else ""),
                hint=self._name_hint(name),
            ) from None

    def node_ids(self, names: Iterable[str | int]) -> np.ndarray:
        return np.array([self.node_id(n) for n in names], dtype=np.int32)

    def _name_hint(self, name: str) -> str:
        examples = ", ".join(self.node_name[[int(self.gpu_node[0, 0]), int(self.nic_node[0, 0]) if self.nic_node.size else 0,
                                             self.n_nodes - 1]].tolist())
        return f"names look like {examples}; `gpuwait topo ... --json` lists the counts"

    def link_name(self, link: int) -> str:
        """Readable name of a link: ``SRC->DST`` (``#k`` for the k-th parallel link)."""
        src = self.node_name[self.link_src[link]]
        dst = self.node_name[self.link_dst[link]]
        rank = int(self._parallel_rank[link])
        return f"{src}->{dst}" + (f"#{rank}" if rank else "")

    def link_names(self, links: Iterable[int] | None = None) -> list[str]:
        ids = range(self.n_links) if links is None else links
        return [self.link_name(int(i)) for i in ids]

    def link_id(self, name: str | int) -> int:
        """Id of a link given ``SRC->DST`` (or ``SRC->DST#k``), or an id.

        >>> from gpuwait.topology import build_preset
        >>> topo = build_preset("dgx-h100")
        >>> topo.link_name(topo.link_id("s0.gpu0->s0.nvsw"))
        's0.gpu0->s0.nvsw'
        """
        if isinstance(name, (int, np.integer)):
            if not 0 <= int(name) < self.n_links:
                raise UnknownNameError(f"link id {name} out of range 0..{self.n_links - 1}")
            return int(name)
        if name in self.link_alias:
            return int(self.link_alias[name])
        text, _, rank_text = name.partition("#")
        src_name, arrow, dst_name = text.partition("->")
        if not arrow:
            near = difflib.get_close_matches(name, list(self.link_alias), n=3, cutoff=0.6)
            raise UnknownNameError(f"link {name!r}: expected SRC->DST, e.g. {self.link_name(0) if self.n_links else 's0.nic0->leaf0'}"
                                   + (f", or a switch port SWITCH[PORT] (close: {', '.join(near)})" if near else ""))
        src, dst = self.node_id(src_name.strip()), self.node_id(dst_name.strip())
        link = self._parallel_link(src, dst, int(rank_text) if rank_text.isdigit() else 0)
        if link is None:
            raise UnknownNameError(f"link {name!r} does not exist: {src_name} and {dst_name} are not cabled together",
                                   hint="`gpuwait route` shows the links a flow crosses")
        return link

    def _parallel_link(self, src: int, dst: int, rank: int) -> int | None:
        """The ``rank``-th link from ``src`` to ``dst`` (``SRC->DST#rank``), or None."""
        keys, order = self._link_key_order
        key = (src * self.n_nodes + dst) * _MAX_PARALLEL + rank
        pos = int(np.searchsorted(keys, key))
        return int(order[pos]) if pos < len(keys) and keys[pos] == key else None

    def links_between(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Vectorised: the first link id from each ``src[i]`` to ``dst[i]``; -1 where none."""
        keys, order = self._link_key_order
        key = (np.asarray(src, np.int64) * self.n_nodes + np.asarray(dst, np.int64)) * _MAX_PARALLEL
        pos = np.searchsorted(keys, key)
        pos_clip = np.minimum(pos, len(keys) - 1)
        found = keys[pos_clip] == key
        return np.where(found, order[pos_clip], -1)

    def parallel_links(self, src: np.ndarray, dst: np.ndarray, k: np.ndarray) -> np.ndarray:
        """Vectorised: of the n links from ``src[i]`` to ``dst[i]`` (``SRC->DST#0`` .. ``#n-1``), the
        ``k[i] mod n``-th; -1 where there is none.

        >>> from gpuwait.topology import build_preset
        >>> topo = build_preset("dgx-h100")
        >>> a, b = topo.node_id("s0.gpu0"), topo.node_id("s0.nvsw")
        >>> topo.link_name(int(topo.parallel_links(np.array([a]), np.array([b]), np.array([3]))[0]))
        's0.gpu0->s0.nvsw'
        """
        keys, order = self._link_key_order
        base = (np.asarray(src, np.int64) * self.n_nodes + np.asarray(dst, np.int64)) * _MAX_PARALLEL
        lo, hi = np.searchsorted(keys, base), np.searchsorted(keys, base + _MAX_PARALLEL)
        n = hi - lo
        pos = np.minimum(lo + np.asarray(k, np.int64) % np.maximum(n, 1), len(keys) - 1)
        return np.where(n > 0, order[pos], -1)

    def reverse_link(self, link: int) -> int | None:
        """The same cable in the other direction: ``DST->SRC#k`` for ``SRC->DST#k``; None where there is none.

        A cable's two links are made together (``a->b`` then ``b->a``), so the k-th of parallel links one
        way and the k-th the other way are one cable.

        >>> from gpuwait.topology import build_preset
        >>> topo = build_preset("dgx-h100")
        >>> topo.link_name(topo.reverse_link(topo.link_id("s0.gpu0->s0.nvsw")))
        's0.nvsw->s0.gpu0'
        """
        return self._parallel_link(int(self.link_dst[link]), int(self.link_src[link]), int(self._parallel_rank[link]))

    # ----------------------------------------------------------------- structure
    @cached_property
    def out_links(self) -> tuple[np.ndarray, np.ndarray]:
        """CSR of outgoing links: links of node ``n`` are ``order[indptr[n]:indptr[n+1]]`` (in id order)."""
        order = np.argsort(self.link_src, kind="stable").astype(np.int32)
        indptr = np.zeros(self.n_nodes + 1, np.int64)
        np.cumsum(np.bincount(self.link_src, minlength=self.n_nodes), out=indptr[1:])
        return indptr, order

    @cached_property
    def switch_nodes(self) -> np.ndarray:
        """Mask over nodes: switches of any network (read-only)."""
        return _read_only(self.node_kind == NodeKind.SWITCH)

    @cached_property
    def host_links(self) -> np.ndarray:
        """Mask over links: endpoint <-> switch links (read-only)."""
        return _read_only(self.link_kind == LinkKind.HOST)

    @cached_property
    def fabric_links(self) -> np.ndarray:
        """Mask over links: switch <-> switch links (read-only)."""
        return _read_only(self.link_kind == LinkKind.FABRIC)

    @cached_property
    def network_links(self) -> np.ndarray:
        """Mask over links: every link outside the servers' NVLink/PCIe/CPU fabric, host and fabric links (read-only)."""
        return _read_only(self.host_links | self.fabric_links)

    def server_of(self, node: int) -> int:
        return int(self.node_server[node])

    def kind_of(self, node: int | np.integer) -> str:
        return NodeKind(int(self.node_kind[node])).label

    def nodes_of_kind(self, kind: str) -> np.ndarray:
        return np.flatnonzero(self.node_kind == NodeKind.of(kind))

    def switches(self, network: str = "compute") -> np.ndarray:
        """Ids of the switches of a network (``compute``, ``storage`` or ``management``)."""
        return np.flatnonzero(self.switch_nodes & (self.node_network == Network.of(network)))

    def uplinks(self, tier: int = 1) -> np.ndarray:
        """Ids of the links from switches of ``tier`` (1 = leaf) up to the next tier."""
        return np.flatnonzero((self.node_tier[self.link_src] == tier) & (self.node_tier[self.link_dst] == tier + 1))

    def to_networkx(self, network: str | None = None):
        """A ``networkx.MultiDiGraph`` view (for analysis and export, never in a hot path)."""
        import networkx as nx

        graph = nx.MultiDiGraph()
        nodes = range(self.n_nodes) if network is None else np.flatnonzero(self.node_network == Network.of(network))
        for n in nodes:
            graph.add_node(self.node_name[n], kind=self.kind_of(n), tier=Tier(int(self.node_tier[n])).label)
        keep = np.ones(self.n_links, bool) if network is None else self.link_network == Network.of(network)
        for link in np.flatnonzero(keep):
            graph.add_edge(self.node_name[self.link_src[link]], self.node_name[self.link_dst[link]],
                           capacity_Bps=float(self.link_capacity_Bps[link]), latency_s=float(self.link_latency_s[link]),
                           kind=LinkKind(int(self.link_kind[link])).label)
        return graph
