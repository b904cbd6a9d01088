"""Communicators: which GPU each rank is, and NCCL's intra-node / inter-node view of them."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from gpuwait.errors import SpecError
from gpuwait.topology.model import NodeKind, Topology

_GPU = NodeKind.GPU


@dataclass(frozen=True, eq=False)
class Communicator:
    """Ranks mapped to GPUs of a topology, in rank order.

    NCCL groups ranks by node: ``nodes`` lists the nodes in order of their first rank, ``ppn`` is the
    ranks per node (NCCL's model assumes every node has the same count). A node is a server, or, when
    the cluster joins servers in NVLink domains (``cluster.nvlink_domain``) and ``mnnvl`` is on, a whole
    domain: with MNNVL NCCL fuses the topologies of the ranks of one clique into one system
    (src/graph/topo.cc, v2.30.7-1: ``nLocalRanks = comm->clique.size``) and counts a node per ring
    graph head (src/init.cc ``nodesFirstRank``), so nNodes is the number of domains spanned and the
    local ranks are the domain's. ``mnnvl`` false (``NCCL_MNNVL_ENABLE=0``) keeps a node per server
    (per host), as every NCCL before 2.20 does.

    Examples
    --------
    >>> from gpuwait.topology import build_preset
    >>> comm = Communicator.world(build_preset("rocev2-400g-2tier", servers=4), servers=2)
    >>> comm.n_ranks, comm.n_nodes, comm.ppn
    (16, 2, 8)
    >>> rack = Communicator.world(build_preset("gb200-nvl72"))  # 18 trays in one NVLink domain
    >>> rack.n_nodes, rack.ppn, rack.with_mnnvl(False).n_nodes
    (1, 72, 18)
    """

    topo: Topology
    rank_gpu: np.ndarray
    mnnvl: bool = True

    def __post_init__(self) -> None:
        gpus = np.asarray(self.rank_gpu, np.int64)
        if gpus.ndim != 1 or len(gpus) < 1:
            raise SpecError("communicator: expected at least one rank")
        if (self.topo.node_kind[gpus] != _GPU).any():
            bad = gpus[self.topo.node_kind[gpus] != _GPU][0]
            raise SpecError(f"communicator: {self.topo.node_name[bad]} is not a GPU; expected GPU names like s0.gpu0")
        if len(np.unique(gpus)) != len(gpus):
            raise SpecError("communicator: a GPU appears twice; expected one rank per GPU")
        object.__setattr__(self, "rank_gpu", gpus)
        counts = np.bincount(self.rank_node)
        if len(set(counts[counts > 0].tolist())) > 1:
            unit = "NVLink domains" if self.spans_servers else "servers"
            raise SpecError(f"communicator: {unit} hold {sorted(set(counts[counts > 0].tolist()))} ranks; "
                            f"expected the same number of ranks on every one of them, as NCCL's model assumes")

    @classmethod
    def world(cls, topo: Topology, servers: int | None = None, gpus_per_server: int | None = None) -> Communicator:
        """All (or the first ``gpus_per_server``) GPUs of the first ``servers`` servers, rank = s*G + g."""
        servers = topo.n_servers if servers is None else servers
        per = topo.gpus_per_server if gpus_per_server is None else gpus_per_server
        if not 1 <= servers <= topo.n_servers:
            raise SpecError(f"servers: got {servers}; the cluster has {topo.n_servers}")
        if not 1 <= per <= topo.gpus_per_server:
            raise SpecError(f"-g / gpus per server: got {per}; the servers have {topo.gpus_per_server} GPUs",
                            hint="use -g with at most the GPUs of one server")
        return cls(topo, topo.gpu_node[:servers, :per].ravel())

    @classmethod
    def from_names(cls, topo: Topology, names: list[str]) -> Communicator:
        return cls(topo, topo.node_ids(names))

    @property
    def n_ranks(self) -> int:
        return len(self.rank_gpu)

    @cached_property
    def rank_server(self) -> np.ndarray:
        return self.topo.node_server[self.rank_gpu].astype(np.int64)

    @property
    def spans_servers(self) -> bool:
        """Whether NCCL's nodes are NVLink domains of several servers (MNNVL) rather than servers."""
        return self.mnnvl and self.topo.servers_per_nvlink_domain > 1

    @cached_property
    def rank_node(self) -> np.ndarray:
        """NCCL's node of each rank: its NVLink domain with MNNVL across servers, else its server."""
        if self.spans_servers:
            return self.topo.nvlink_domain_of(self.rank_gpu)
        return self.rank_server

    @cached_property
    def nodes(self) -> np.ndarray:
        """NCCL's nodes (server or NVLink domain indices) in order of their first rank."""
        _, first = np.unique(self.rank_node, return_index=True)
        return self.rank_node[np.sort(first)]

    def node_nvswitch(self, node: int) -> int:
        """Node id of the NVSwitch joining the GPUs of NCCL node ``node`` (-1 if none)."""
        if self.spans_servers:
            return int(self.topo.nvlink_domain_switch[node])
        return self.topo.nvswitch_of_server(int(node))

    def with_mnnvl(self, mnnvl: bool) -> Communicator:
        """The same ranks with NCCL's MNNVL on or off (``NCCL_MNNVL_ENABLE``)."""
        return self if mnnvl == self.mnnvl else Communicator(self.topo, self.rank_gpu, mnnvl)

    @property
    def n_nodes(self) -> int:
        return len(self.nodes)

    @property
    def ppn(self) -> int:
        return self.n_ranks // self.n_nodes

    @cached_property
    def node_ranks(self) -> np.ndarray:
        """(n_nodes, ppn) ranks of each node, nodes in order, ranks in rank order."""
        node_position = np.zeros(int(self.rank_node.max()) + 1, np.int64)
        node_position[self.nodes] = np.arange(self.n_nodes)
        order = np.argsort(node_position[self.rank_node], kind="stable")
        return order.reshape(self.n_nodes, self.ppn)

    def local_gpu_index(self, ranks: np.ndarray) -> np.ndarray:
        """GPU index within its server of each rank (selects its NIC rail)."""
        gpus = self.rank_gpu[ranks]
        return gpus - self.topo.gpu_node[self.topo.node_server[gpus], 0]
