"""Communication of a parallel job on the fabric: collectives run by whole families of groups at
once (every DP group reduces its gradients together), and storage traffic beside them.

A training step's collectives are issued by many identical groups at the same moment, so their
flows share uplinks: a family is predicted with :class:`~gpuwait.fabric.perf.CollectivePredictor`
on its first group with every other group as a peer, so the time includes the contention between
groups. A family whose groups each sit inside one server shares no link between groups, and one
group stands for all. Storage reads are a steady load that keeps its rate (it is paced by the
reader); the collectives get what it leaves.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpuwait.collectives.communicator import Communicator
from gpuwait.collectives.ncclenv import NcclEnv
from gpuwait.engine.base import effective_capacity_Bps
from gpuwait.engine.flow import max_min_rates
from gpuwait.fabric.perf import CollectiveEstimate, CollectivePredictor
from gpuwait.routing.paths import route_flows
from gpuwait.spec.cluster import RoutingSpec
from gpuwait.topology.model import NodeKind, Topology
from gpuwait.transport.profiles import TransportProfile


@dataclass(frozen=True, eq=False)
class FamilyRun:
    """One call of a collective by every group of a family."""

    estimate: CollectiveEstimate
    link_bytes: np.ndarray       # bytes per link during one call, all groups
    link_peak_Bps: np.ndarray    # rate per link while the call's busiest phase runs

    @property
    def time_s(self) -> float:
        return self.estimate.time_s


@dataclass(frozen=True, eq=False)
class StorageRun:
    """Storage traffic between the job's GPUs and the storage servers in its steady state."""

    rate_per_gpu_Bps: np.ndarray  # achieved rate of each GPU's flow
    link_load_Bps: np.ndarray     # per link


@dataclass(eq=False)
class FabricModel:
    """The job's cluster, routing, transport and NCCL settings; caches every family it predicts.
    ``max_memory_bytes``: the caller's memory limit (``max_memory``; None: half the machine's memory),
    passed to every predictor (:class:`~gpuwait.fabric.perf.CollectivePredictor`)."""

    topo: Topology
    routing: RoutingSpec
    transport: TransportProfile
    env: NcclEnv
    background_Bps: np.ndarray | None = None
    max_memory_bytes: float | None = None
    _cache: dict = field(default_factory=dict)

    def with_background(self, extra_Bps: np.ndarray) -> FabricModel:
        """The same fabric with ``extra_Bps`` more steady load on its links (a fresh cache)."""
        base = self.background_Bps if self.background_Bps is not None else 0.0
        return FabricModel(self.topo, self.routing, self.transport, self.env, base + extra_Bps, self.max_memory_bytes)

    def collective(self, groups_gpu: np.ndarray, collective: str, n_bytes: float) -> FamilyRun:
        """Predict ``collective`` of ``n_bytes`` run at once by every row of ``groups_gpu``
        (GPU node ids, one row per group)."""
        groups_gpu = np.asarray(groups_gpu, np.int64)
        key = (groups_gpu.tobytes(), groups_gpu.shape, collective, float(n_bytes))
        if key not in self._cache:
            self._cache[key] = self._predict(groups_gpu, collective, n_bytes)
        return self._cache[key]

    def _predictor(self, groups_gpu: np.ndarray) -> CollectivePredictor:
        key = ("predictor", groups_gpu.tobytes(), groups_gpu.shape)
        if key not in self._cache:
            servers = self.topo.node_server[groups_gpu]
            private = bool((servers == servers[:, :1]).all())  # every group inside one server
            # a private family is simulated on its first server (all the groups there) and copied
            rows = groups_gpu[servers[:, 0] == servers[0, 0]] if private else groups_gpu
            comms = [Communicator(self.topo, row) for row in rows]
            self._cache[key] = CollectivePredictor.create(comms[0], self.env, self.routing, self.transport,
                                                          peers=tuple(comms[1:]), background_Bps=self.background_Bps,
                                                          max_memory_bytes=self.max_memory_bytes)
        return self._cache[key]

    def _predict(self, groups_gpu: np.ndarray, collective: str, n_bytes: float) -> FamilyRun:
        n_links = self.topo.n_links
        if groups_gpu.shape[1] < 2 or n_bytes <= 0:
            empty = CollectiveEstimate(collective, int(n_bytes), "none", "none", 0, 0.0, 0.0, 0.0, None)
            return FamilyRun(empty, np.zeros(n_links), np.zeros(n_links))
        predictor = self._predictor(groups_gpu)
        estimate = predictor.estimate(collective, int(n_bytes))
        link_bytes = predictor.link_bytes(estimate)
        busy = max(estimate.time_s - estimate.latency_s, 1e-12)
        # the busiest phase's rates: bytes over the time the bandwidth part takes, per phase
        peak = predictor.link_peak_Bps(estimate)
        if peak is None:
            peak = link_bytes / busy
        servers = self.topo.node_server[groups_gpu]
        if (servers == servers[:, :1]).all() and len(np.unique(servers)) > 1:
            # one server's groups stood for all: the other servers' links carry the same load
            link_bytes = _replicate_private(self.topo, groups_gpu, link_bytes)
            peak = _replicate_private(self.topo, groups_gpu, peak)
        return FamilyRun(estimate, link_bytes, peak)

    def storage(self, gpus: np.ndarray, rate_per_gpu_Bps: float, write: bool = False) -> StorageRun:
        """Each GPU reads (or writes) at up to ``rate_per_gpu_Bps`` from (to) a storage server,
        GPU i paired with storage server i mod count; the fabric decides what each gets."""
        storage = np.flatnonzero(self.topo.node_kind == NodeKind.STORAGE_SERVER)
        if len(storage) == 0 or rate_per_gpu_Bps <= 0:
            return StorageRun(np.zeros(len(gpus)), np.zeros(self.topo.n_links))
        servers = storage[np.arange(len(gpus)) % len(storage)]
        src, dst = (gpus, servers) if write else (servers, gpus)
        routes = route_flows(self.topo, self.routing, src, dst, transport=self.transport.name, qps_per_connection=1)
        capacity = effective_capacity_Bps(self.topo, self.transport)
        rate, _ = max_min_rates(routes.link_weights.tocsr(), capacity, np.full(routes.n_rows, float(rate_per_gpu_Bps)))
        per_gpu = np.bincount(routes.flow_index, weights=rate, minlength=len(gpus))
        return StorageRun(per_gpu, routes.link_weights.T @ rate)


def _replicate_private(topo: Topology, groups_gpu: np.ndarray, first_group_links: np.ndarray) -> np.ndarray:
    """Copy the first group's per-link values to the same links of every other group's server.

    Servers are built alike, so the k-th link leaving a node of server 0 matches the k-th of
    server s (same names but for the ``sN.`` prefix).
    """
    server_of_link = topo.node_server[topo.link_src]
    inside = np.flatnonzero(server_of_link >= 0)
    order = inside[np.argsort(server_of_link[inside], kind="stable")]
    per_server = order.reshape(topo.n_servers, -1)  # (servers, links of one server), in build order
    first = int(topo.node_server[groups_gpu[0, 0]])
    values = first_group_links[per_server[first]]
    out = np.zeros_like(first_group_links)
    for server in np.unique(topo.node_server[groups_gpu].ravel()):
        out[per_server[server]] += values
    return out
