"""Run a flow table on a cluster: route it, apply the transport, and simulate with the flow engine.

This is the glue between the model (topology, routing, transport) and the fluid engine, which
itself knows only links and weighted flows.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import scipy.sparse as sp

from gpuwait.engine.base import PerFlowResults, effective_capacity_Bps, message_overhead_s, per_flow_top
from gpuwait.engine.flow import FlowEngine, FlowResult, FlowSet, LinkTable, SharedWeights
from gpuwait.routing.paths import Routes, route_flows
from gpuwait.spec.cluster import RoutingSpec
from gpuwait.topology.model import Network, Topology
from gpuwait.transport.profiles import TransportProfile
from gpuwait.workload.traffic import FlowTable

_SERVER = Network.SERVER


@dataclass(frozen=True, eq=False)
class FlowRun(PerFlowResults):
    """A routed and simulated flow table. Rows are QPs; flows are the table's entries."""

    result: FlowResult

    @cached_property
    def flow_start_s(self) -> np.ndarray:  # declared by PerFlowResults, provided here
        out = np.full(len(self.flows), np.inf)
        np.minimum.at(out, self.routes.flow_index, self.result.start_s)
        return out

    @property
    def qp_finish_s(self) -> np.ndarray:  # declared by PerFlowResults, provided here
        return self.result.finish_s

    @cached_property
    def flow_bottleneck_link(self) -> np.ndarray:
        """The bottleneck of each flow's slowest QP (-1 = a rate cap, -2 = nothing to send)."""
        return per_flow_top(len(self.flows), self.routes.flow_index, self.result.finish_s, self.result.bottleneck_link)


    @property
    def link_bytes(self) -> np.ndarray:
        return self.result.link_bytes

    def link_peak_utilization(self) -> np.ndarray:
        return self.result.link_peak_utilization(self.capacity_Bps)

    def link_mean_utilization(self) -> np.ndarray:
        """Mean utilization over the run (from first start to last end of transmission)."""
        return self.result.link_mean_utilization(self.capacity_Bps)


def _row_dependencies(flows: FlowTable, routes: Routes) -> sp.csr_matrix | None:
    if not any(flows.after):
        return None
    rows_of: list[list[int]] = [[] for _ in range(len(flows))]
    for row, f in enumerate(routes.flow_index.tolist()):
        rows_of[f].append(row)
    r_idx, c_idx = [], []
    for f, deps in enumerate(flows.after):
        for d in deps:
            for row in rows_of[f]:
                r_idx.extend([row] * len(rows_of[d]))
                c_idx.extend(rows_of[d])
    n = routes.n_rows
    return sp.csr_matrix((np.ones(len(r_idx), bool), (r_idx, c_idx)), shape=(n, n))


def _row_link_sum(routes: Routes, per_link: np.ndarray) -> np.ndarray:
    """``(R,)`` sum over each row's links of ``weight x per_link``, from the parts (never joined)."""
    total = np.asarray(routes.own_weights @ per_link).ravel()
    if routes.class_weights is not None and routes.row_class is not None:
        member = routes.row_class >= 0
        per_class = np.asarray(routes.class_weights @ per_link).ravel()
        total = total + np.where(member, per_class[np.where(member, routes.row_class, 0)], 0.0)
    return total


def simulate_flows(topo: Topology, flows: FlowTable, routing: RoutingSpec, transport: TransportProfile,
                   *, capacity_Bps: np.ndarray | None = None) -> FlowRun:
    """Route and simulate ``flows`` on ``topo``.

    Each flow becomes ``routing.qps_per_connection`` QP rows with an equal share of its bytes
    (NCCL stripes a connection's data over its QPs). The cluster's per-message overhead
    (:func:`~gpuwait.engine.base.message_overhead_s`, as ``gpuwait perf`` reads it) is added to the path
    latency of flows between servers; the transport's header bytes reduce the payload capacity of network links.

    Examples
    --------
    >>> from gpuwait.topology import build_preset
    >>> from gpuwait.spec import PatternSpec, RoutingSpec
    >>> from gpuwait.transport import TRANSPORTS
    >>> from gpuwait.workload.traffic import pattern_flows
    >>> topo = build_preset("rocev2-400g-2tier", servers=4)
    >>> flows = pattern_flows(topo, PatternSpec(kind="rail-ring", size="100MB"))
    >>> run = simulate_flows(topo, flows, RoutingSpec(kind="spray"), TRANSPORTS["rocev2"])
    >>> round(float(run.flow_mean_rate_Bps.min()) / 1e9, 1)  # 400G less RoCE headers, less latency
    49.0
    """
    # the engine knows one shared part per row: more (Routes.side_classes) join each row's own links
    routes = route_flows(topo, routing, flows.src, flows.dst, transport=transport.name).sides_joined()
    size = routes.per_qp(flows.size_bytes)
    cap = routes.per_qp(flows.rate_cap_Bps)
    capacity = effective_capacity_Bps(topo, transport) if capacity_Bps is None else capacity_Bps
    crosses_network = _row_link_sum(routes, (topo.link_network != _SERVER).astype(float)) > 0
    if transport.rate_cap_Bps:
        # the transport's per-connection ceiling (a TCP stream's) binds only flows that use the transport
        cap = np.where(crosses_network, np.minimum(cap, transport.rate_cap_Bps), cap)
    latency = routes.path_latency_s + np.where(crosses_network, message_overhead_s(topo, transport), 0.0)
    # A splitting router's middle hops stay one row per (source leaf, destination leaf) class: the
    # engine solves and logs them per class, never joining them into a row per QP.
    shared = (SharedWeights(routes.row_class, np.ones(routes.n_rows), routes.class_weights)
              if routes.class_weights is not None and routes.row_class is not None else None)
    flowset = FlowSet(size_bytes=size, link_weights=routes.own_weights if shared is not None else routes.link_weights,
                      release_time_s=flows.start_s[routes.flow_index], rate_cap_Bps=cap, path_latency_s=latency,
                      depends_on=_row_dependencies(flows, routes), shared=shared)
    result = FlowEngine(LinkTable(capacity, topo.link_latency_s)).run(flowset)
    return FlowRun(topo, flows, routes, capacity, routing, transport, result)
