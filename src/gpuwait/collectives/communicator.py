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

    NCCL groups ranks by node (server): ``nodes`` lists the servers in order of their first rank,
    ``ppn`` is the ranks per node (NCCL's model assumes every node has the same count).

    Examples
    --------
    >>> from gpuwait.topology import build_preset
    >>> comm = Communicator.world(build_preset("rocev2-400g-2tier", servers=4), servers=2)
    >>> comm.n_ranks, comm.n_nodes, comm.ppn
    (16, 2, 8)
    """

    topo: Topology
    rank_gpu: np.ndarray

    def __post_init__(self) -> None:
        gpus = np.asarray(self.rank_gpu, np.int64)
        if gpus.ndim != 1 or len(gpus) < 1:
            raise SpecError("communicator: expected at least one rank")
        if (self.topo.node_kind[gpus] != _GPU).any():
            bad = gpus[self.topo.node_kind[gpus] != _GPU][0]
            raise SpecError(f"communicator: {self.topo.node_name[bad]} is not a GPU; expected GPU names like s0.gpu0")
        if len(np.unique(gpus)) != len(gpus):
            raise SpecError("communicator: a GPU appears twice; expected one rank per GPU")
        counts = np.bincount(self.topo.node_server[gpus])
        if len(set(counts[counts > 0].tolist())) > 1:
            raise SpecError(f"communicator: servers hold {sorted(set(counts[counts > 0].tolist()))} ranks; "
                            "expected the same number of ranks on every server, as NCCL's model assumes")
        object.__setattr__(self, "rank_gpu", gpus)

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

    @cached_property
    def nodes(self) -> np.ndarray:
        _, first = np.unique(self.rank_server, return_index=True)
        return self.rank_server[np.sort(first)]

    @property
    def n_nodes(self) -> int:
        return len(self.nodes)

    @property
    def ppn(self) -> int:
        return self.n_ranks // self.n_nodes

    @cached_property
    def node_ranks(self) -> np.ndarray:
        """(n_nodes, ppn) ranks of each node, nodes in order, ranks in rank order."""
        node_position = np.zeros(int(self.rank_server.max()) + 1, np.int64)
        node_position[self.nodes] = np.arange(self.n_nodes)
        order = np.argsort(node_position[self.rank_server], kind="stable")
        return order.reshape(self.n_nodes, self.ppn)

    def local_gpu_index(self, ranks: np.ndarray) -> np.ndarray:
        """GPU index within its server of each rank (selects its NIC rail)."""
        gpus = self.rank_gpu[ranks]
        return gpus - self.topo.gpu_node[self.topo.node_server[gpus], 0]
