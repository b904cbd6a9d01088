"""Run a compiled collective's phases on the fabric: the bandwidth part of its time.

NCCL pipelines every collective in chunks, so while a phase runs each of its flows always has
data to send: the phase's steady state is the max-min fair allocation with all its flows active,
and one repetition takes as long as its slowest flow, ``max(bytes / rate)``. A phase repeated k
times takes k times as long (its steps are identical and run back to back). So each distinct
phase costs one routing pass and one max-min solve on the real topology, with its routing, QPs
and link capacities — cheap enough for 100k-rank collectives. Latency terms come from NCCL's
model, not from here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from gpuwait.collectives.algorithms import Phase, Plan
from gpuwait.engine.flow import SharedWeights, max_min_rates
from gpuwait.errors import SimulationError
from gpuwait.fabric.alltoall import PairGroups, group_pairs, groupable, local_pairs, verify
from gpuwait.fabric.memory import memory_limit
from gpuwait.routing.paths import Routes, connection_rows, route_flows
from gpuwait.spec.cluster import RoutingSpec
from gpuwait.topology.model import Topology
from gpuwait.transport.profiles import TransportProfile
from gpuwait.units import format_size

#: Peak bytes per QP row of an all-to-all listed flow by flow (ECMP hashes each flow on its own): its
#: links in the route and in the solve's triplets, with the walk's intermediates. Measured on this
#: code: ECMP alltoall on the DGX SuperPOD preset, 256 -> 512 GPUs (65,280 -> 261,632 rows) took
#: peak RSS 0.160 -> 0.366 GB, 1,047 B per added row; rounded up.
LISTED_FLOW_BYTES = 1100


@dataclass(frozen=True, eq=False)
class PhaseRun:
    """One phase in steady state: its routes, every QP's rate, and the time of one repetition."""

    phase: Phase
    routes: Routes
    rate_Bps: np.ndarray  # per QP row
    step_time_s: float
    multiplicity: np.ndarray  # per QP row: how many identical flows the row stands for
    bytes_per_row: np.ndarray  # per QP row: bytes one of its flows sends in one repetition
    # wall-clock and CPU (this process) seconds spent routing and solving: profiling figures, not part of the model
    route_wall_s: float = 0.0
    solve_wall_s: float = 0.0
    route_cpu_s: float = 0.0
    solve_cpu_s: float = 0.0

    @property
    def time_s(self) -> float:
        return self.step_time_s * self.phase.repeat

    def link_load_Bps(self) -> np.ndarray:
        """Rate each link carries in the steady state."""
        return self.routes.link_load(self.rate_Bps * self.multiplicity)

    def link_bytes(self) -> np.ndarray:
        """Bytes each link carries over all repetitions: every flow's own bytes. Not the steady rate
        times the phase's time: a flow that finishes before the phase's slowest one (an NVLink hop beside
        a network hop) stops sending, and rate x time would count it sending to the end."""
        return self.routes.link_load(self.bytes_per_row * self.multiplicity) * self.phase.repeat


@dataclass(frozen=True, eq=False)
class PlanRun:
    plan: Plan
    phases: tuple[PhaseRun, ...]

    @property
    def bandwidth_time_s(self) -> float:
        return float(sum(p.time_s for p in self.phases))


def _merge_local_flows(topo: Topology, phase: Phase) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Flows inside one server take a fixed path, so identical ones (same ends and bytes, e.g. the
    same NVLink hop in several channels) are one flow of multiplicity k: k flows at rate r load every
    link of the path with k*r. Returns (src, dst, bytes, multiplicity); flows between servers are
    kept one by one, because each hashes on its own."""
    # read only: no copies of the phase's ends where they are node ids already (8.4 M flows at 131,072 GPUs)
    src, dst, size = phase.src.astype(np.int64, copy=False), phase.dst.astype(np.int64, copy=False), phase.bytes_per_flow
    local = topo.node_server[src] == topo.node_server[dst]
    if not local.any():
        return src, dst, size, np.ones(len(src))
    sizes, size_id = np.unique(size[local], return_inverse=True)
    key = (src[local] * topo.n_nodes + dst[local]) * len(sizes) + size_id  # one int64 per (src, dst, bytes)
    unique, count = np.unique(key, return_counts=True)
    pair, size_of = np.divmod(unique, len(sizes))
    u_src, u_dst = np.divmod(pair, topo.n_nodes)
    apart = ~local
    return (np.concatenate([src[apart], u_src]), np.concatenate([dst[apart], u_dst]),
            np.concatenate([size[apart], sizes[size_of]]), np.concatenate([np.ones(int(apart.sum())), count]))


def run_phase(topo: Topology, phase: Phase, routing: RoutingSpec, transport: TransportProfile,
              capacity_Bps: np.ndarray, via_host: bool = False, nvlink_domains: bool = True,
              stage_network: bool = False, max_memory_bytes: float | None = None) -> PhaseRun:
    """Route a phase and solve its steady-state max-min rates (``via_host``, ``nvlink_domains``,
    ``stage_network``, ``max_memory_bytes``: see :func:`run_plan`).

    A phase's all-to-alls (``Phase.pair_sets``) run as weighted groups (:mod:`gpuwait.fabric.alltoall`)
    where their shape allows and the solution passes the max-min check; otherwise every flow is listed."""
    # host-staged bytes take each GPU's own way through its CPU, which the groups' probe routes do not
    if phase.pair_sets and not stage_network and groupable(topo, phase, routing, nvlink_domains):
        start_s = time.perf_counter()
        groups = group_pairs(topo, phase, routing, transport.name)
        if groups is not None:
            run = _run_grouped(topo, phase, groups, routing, transport, capacity_Bps, via_host, nvlink_domains, start_s)
            if run is not None:
                return run
    if phase.pair_sets:
        _check_listed_memory(topo, phase, routing, max_memory_bytes)
    return _run_listed(topo, phase.expanded(), routing, transport, capacity_Bps, via_host, nvlink_domains,
                       stage_network)


def _check_listed_memory(topo: Topology, phase: Phase, routing: RoutingSpec, max_memory_bytes: float | None) -> None:
    """Refuse, before allocating, an all-to-all whose flows must be listed one by one and would not fit
    the caller's ``max_memory`` (default half the machine's memory), naming which limit it was."""
    n_flows = phase.n_flows
    need_bytes = n_flows * connection_rows(topo, routing.qps_per_connection) * LISTED_FLOW_BYTES
    limit_bytes, origin = memory_limit(max_memory_bytes)
    if need_bytes > limit_bytes:
        raise SimulationError(
            f"{phase.name}: {n_flows:,} flows listed one by one need about {format_size(need_bytes)}; "
            f"expected at most {format_size(limit_bytes)} ({origin})",
            hint=f"routing.kind {routing.kind!r} routes each flow on its own; spray and adaptive group an "
                 "all-to-all per leaf pair, or run fewer GPUs")


def _run_listed(topo: Topology, phase: Phase, routing: RoutingSpec, transport: TransportProfile,
                capacity_Bps: np.ndarray, via_host: bool, nvlink_domains: bool, stage_network: bool) -> PhaseRun:
    """Every flow of the phase routed and solved (identical flows inside a server merged)."""
    src, dst, size, multiplicity = _merge_local_flows(topo, phase)
    start_s, start_cpu_s = time.perf_counter(), time.process_time()
    routes = route_flows(topo, routing, src, dst, transport=transport.name, via_host=via_host,
                         nvlink_domains=nvlink_domains, stage_network=stage_network)
    routed_s, routed_cpu_s = time.perf_counter(), time.process_time()
    remote = topo.node_server[src] != topo.node_server[dst]
    rate, step, _ = _solve(routes, size, multiplicity, remote, transport, capacity_Bps)
    return PhaseRun(phase, routes, rate, step, multiplicity[routes.flow_index], routes.per_qp(size),
                    route_wall_s=routed_s - start_s, solve_wall_s=time.perf_counter() - routed_s,
                    route_cpu_s=routed_cpu_s - start_cpu_s, solve_cpu_s=time.process_time() - routed_cpu_s)


def _run_grouped(topo: Topology, phase: Phase, groups: PairGroups, routing: RoutingSpec, transport: TransportProfile,
                 capacity_Bps: np.ndarray, via_host: bool, nvlink_domains: bool, start_s: float) -> PhaseRun | None:
    """The phase's flows inside servers listed, its all-to-all flows between servers as groups;
    None when the solution fails the max-min check (the caller then lists every flow)."""
    src, dst, size, multiplicity = _merge_local_flows(topo, local_pairs(topo, phase))
    listed = route_flows(topo, routing, src, dst, transport=transport.name, via_host=via_host,
                         nvlink_domains=nvlink_domains)
    routes = _join(listed, groups.routes, len(src))
    routed_s = time.perf_counter()
    size = np.r_[size, groups.bytes_per_flow]
    multiplicity = np.r_[multiplicity, groups.multiplicity]
    remote = np.r_[np.zeros(len(src), bool), np.ones(len(groups.multiplicity), bool)]
    rate, step, cap = _solve(routes, size, multiplicity, remote, transport, capacity_Bps)
    if not verify(routes, rate, multiplicity[routes.flow_index], capacity_Bps, cap, groups):
        return None
    return PhaseRun(phase, routes, rate, step, multiplicity[routes.flow_index], routes.per_qp(size),
                    route_wall_s=routed_s - start_s, solve_wall_s=time.perf_counter() - routed_s)


def _join(listed: Routes, grouped: Routes, n_listed_flows: int) -> Routes:
    """One Routes of the listed rows (no classes: inside servers) then the groups' rows."""
    assert listed.class_weights is None and grouped.row_class is not None
    return Routes(flow_index=np.r_[listed.flow_index, grouped.flow_index + n_listed_flows],
                  qp_index=np.r_[listed.qp_index, grouped.qp_index],
                  own_weights=sp.vstack([listed.own_weights, grouped.own_weights]).tocsr(),
                  path_latency_s=np.r_[listed.path_latency_s, grouped.path_latency_s],
                  udp_sport=np.r_[listed.udp_sport, grouped.udp_sport],
                  row_class=_after_rows(listed.n_rows, grouped.row_class),
                  class_weights=grouped.class_weights,
                  side_classes=tuple((_after_rows(listed.n_rows, row_class), weights)
                                     for row_class, weights in grouped.side_classes),
                  class_sides=grouped.class_sides)


def _after_rows(n_rows: int, row_class: np.ndarray | sp.csr_matrix) -> np.ndarray | sp.csr_matrix:
    """A shared part's row classes (a class per row, -1 for none, or a sparse (rows, classes) matrix of
    each row's scale in its classes) behind ``n_rows`` rows in no class."""
    if sp.issparse(row_class):
        return sp.vstack([sp.csr_matrix((n_rows, row_class.shape[1])), row_class]).tocsr()
    return np.r_[np.full(n_rows, -1, np.int64), row_class]


def _shared_part(row_class: np.ndarray | sp.csr_matrix, row_multiplicity: np.ndarray, class_weights: sp.csr_matrix
                 ) -> SharedWeights:
    """The solver's shared part of a routes' part, each row scaled by its multiplicity (a sparse
    ``row_class``: a row may cross several of the part's classes, each at its own scale)."""
    if sp.issparse(row_class):
        return SharedWeights.of_members(sp.diags(row_multiplicity) @ row_class, class_weights)
    return SharedWeights(row_class, row_multiplicity, class_weights)


def _scaled_rows(weights: sp.csr_matrix, row_scale: np.ndarray) -> sp.csr_matrix:
    """``diag(row_scale) @ weights``, bit for bit: x 1.0 changes no bit, so only the rows scaled by another
    factor (a server's merged flows) are multiplied, in a copy of the data that shares the (canonical)
    matrix's indices (84 M entries at 131,072 GPUs: no copy of them, no per-entry scale array)."""
    scaled = np.flatnonzero(row_scale != 1.0)
    if not len(scaled):
        return weights
    lengths = weights.indptr[scaled + 1] - weights.indptr[scaled]
    positions = np.repeat(weights.indptr[scaled] - np.cumsum(lengths) + lengths, lengths) + np.arange(lengths.sum())
    data = weights.data.copy()
    data[positions] *= np.repeat(row_scale[scaled], lengths)
    out = sp.csr_matrix((data, weights.indices, weights.indptr), shape=weights.shape, copy=False)
    out.has_canonical_format = weights.has_canonical_format  # the same indices: sorted, no duplicates, or not
    return out


def _solve(routes: Routes, size: np.ndarray, multiplicity: np.ndarray, remote: np.ndarray, transport: TransportProfile,
           capacity_Bps: np.ndarray) -> tuple[np.ndarray, float, np.ndarray | None]:
    """(rate per row, time of the slowest flow, the rows' rate caps) of routed flows of ``size`` bytes,
    each row standing for ``multiplicity`` identical flows."""
    bytes_per_row = routes.per_qp(size)
    row_multiplicity = multiplicity[routes.flow_index]
    weights = _scaled_rows(routes.own_weights, row_multiplicity)  # row r scaled by its multiplicity
    # a splitting router's rows share their middle parts per leaf pair: solved per class, never expanded
    shared = [_shared_part(row_class, row_multiplicity, class_weights) for row_class, class_weights in
              ((routes.row_class, routes.class_weights), *routes.side_classes)
              if row_class is not None and class_weights is not None]
    cap = None
    if transport.rate_cap_Bps is not None:
        # the transport's per-connection ceiling binds flows between servers only (NVLink/PCIe ones do not use it)
        cap = routes.per_qp(np.where(remote, transport.rate_cap_Bps, np.inf))
    rate, _ = max_min_rates(weights, capacity_Bps, cap, shared=shared or None)
    busy = bytes_per_row > 0
    step = float((bytes_per_row[busy] / rate[busy]).max()) if busy.any() else 0.0
    return rate, step, cap


def run_plan(topo: Topology, plan: Plan, routing: RoutingSpec, transport: TransportProfile,
             capacity_Bps: np.ndarray, via_host: bool = False, nvlink_domains: bool = True,
             stage_network: bool = False, max_memory_bytes: float | None = None) -> PlanRun:
    """Steady-state time of every phase of a plan.

    ``capacity_Bps`` is the payload capacity per link the collective can use (wire efficiency and
    protocol efficiency already applied by the caller). ``via_host``: the GPUs of a server have no
    P2P, so NCCL's SHM transport stages their traffic through host memory: every byte between two
    GPUs of one server crosses the sender's PCIe up to the receiver's CPU and that GPU's PCIe down
    (host memory bandwidth itself is not a link of the topology: not modelled). ``nvlink_domains``:
    GPUs of different servers in one NVLink domain talk over NVLink (NCCL's MNNVL); false sends them
    over the NICs (``NCCL_MNNVL_ENABLE=0``). ``stage_network``: no GPUDirect RDMA, or NCCL's socket
    transport: network bytes go through the GPU's CPU (host memory) on both ends
    (:func:`gpuwait.routing.paths.route_flows`). ``max_memory_bytes``: the caller's memory limit
    (``max_memory``; None: half the machine's memory, :func:`gpuwait.fabric.memory.memory_limit`), which an
    all-to-all that must be listed flow by flow is refused over before it allocates.
    """
    runs = tuple(run_phase(topo, phase, routing, transport, capacity_Bps, via_host, nvlink_domains, stage_network,
                           max_memory_bytes)
                 for phase in plan.phases if phase.n_flows and phase.max_bytes > 0.0)
    return PlanRun(plan, runs)
