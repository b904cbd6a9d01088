"""Run a flow table on a cluster with the packet engine; the result has the flow engine's schema.

:func:`simulate_packets` routes the flows as the flow engine does (the same :class:`Routes`),
turns topology, routes, transport and :class:`PacketParams` into the arrays of
:func:`gpuwait.engine.packet.core.simulate`, refuses runs that would not fit (estimating first),
and wraps the counters in a :class:`PacketRun`: per-flow start/finish/rate/bottleneck and
per-link bytes like :class:`~gpuwait.engine.flow_run.FlowRun`, plus queue depth over time,
PFC pause frames and paused time per port and priority, ECN marks, CNPs, drops,
retransmissions, ``out_of_sequence``/``packet_seq_err`` and FCT percentiles.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from gpuwait.engine.base import PerFlowResults, effective_capacity_Bps, message_overhead_s, per_flow_top
from gpuwait.engine.packet import core as C
from gpuwait.engine.packet.params import PacketParams
from gpuwait.errors import SimulationError, SpecError
from gpuwait.routing.paths import Routes, route_flows
from gpuwait.spec.cluster import RoutingSpec
from gpuwait.topology.model import Network, NodeKind, Topology
from gpuwait.transport.profiles import TransportProfile, pfc_xoff_bytes
from gpuwait.units import format_size, format_time
from gpuwait.workload.traffic import FlowTable

_SWITCH = int(NodeKind.SWITCH)
_SINKS = (int(NodeKind.GPU), int(NodeKind.STORAGE_SERVER))
_SERVER = int(Network.SERVER)
_PS = 1e12
_BYTES_PER_PACKET_STATE = 8 * C.P_COLS + 5 * 8 * 2  # a pool row and its events
_FIXED_RUN_BYTES = 64 * 2**20


@dataclass(frozen=True)
class Resolved:
    """What ``auto`` settings became for one run."""

    flow_control: str
    congestion_control: str
    ecn: bool
    reliable: bool
    out_of_order: bool


@dataclass(frozen=True, eq=False)
class PacketRun(PerFlowResults):
    """A routed flow table simulated packet by packet. Rows are QPs; flows are the table's entries.

    Per-flow and per-link attributes match :class:`~gpuwait.engine.flow_run.FlowRun`; the
    packet-level telemetry is added (times in seconds, sizes in bytes, per link = per egress port).
    """

    params: PacketParams
    resolved: Resolved
    qp_first_tx_s: np.ndarray  # (R,) first packet injected
    qp_finish_s: np.ndarray  # (R,) last packet delivered (inf: not finished by max_time_s)
    link_counters: np.ndarray  # (L, C_COLS) raw counters: column core.C_X - core.C_FIRST
    link_queue_integral: np.ndarray  # (L,) bytes x ps
    qp_counters: np.ndarray  # (R, O_COLS)
    queue_links: np.ndarray  # (K,) link ids sampled
    queue_time_s: np.ndarray  # (S,)
    queue_bytes: np.ndarray  # (S, K)
    qp_delivered_packets: np.ndarray  # (S, R) packets delivered in order by each sample time
    delay_histogram: np.ndarray  # per-packet one-way delay, bin = floor(8 log2(1 + ns))
    end_s: float
    events: int
    packets: int
    timed_out: bool
    wall_s: float
    pause_samples_s: np.ndarray | None = None  # (S, K) time each sampled port had been paused by each sample time

    # ------------------------------------------------------------------ the flow engine's schema
    @cached_property
    def flow_start_s(self) -> np.ndarray:  # declared by PerFlowResults, provided here
        return self.flows.start_s.astype(float).copy()

    @cached_property
    def flow_bottleneck_link(self) -> np.ndarray:
        """The link on each flow's path with the deepest mean queue (its slowest link when no queue built)."""
        lw = self.routes.link_weights.tocoo()
        mean_q = self.link_mean_queue_bytes
        # score: mean queue first, then slowness (1/capacity) to break ties among empty queues
        score = mean_q[lw.col] * 1e6 + 1e12 / self.capacity_Bps[lw.col]
        return per_flow_top(len(self.flows), self.routes.flow_index[lw.row], score, lw.col)


    @property
    def link_bytes(self) -> np.ndarray:
        """Payload bytes each link carried (retransmissions included)."""
        return self._counter(C.C_TX_BYTES).astype(float)

    def link_mean_utilization(self) -> np.ndarray:
        """Payload bytes over (payload capacity x the time from the first start to the end)."""
        span = max(self.end_s - float(self.flows.start_s.min()), 1e-300) if len(self.flows) else 1.0
        return self.link_bytes / (self.capacity_Bps * span)

    def link_peak_utilization(self) -> np.ndarray:
        """Each link's payload rate over capacity in its busiest sampling window (at least its mean).

        The run samples every QP's in-order delivered packets each ``queue_sample_interval_s``; a
        window's bytes on a link are the bytes its QPs delivered in the window times their share of
        the link (``routes.link_weights``). Packets count when they are delivered, so a link's window
        is seen at the receivers, one path latency later; retransmitted bytes are in the mean only.
        Only full windows count (not the short last one), and a window counts whole packets, so a
        full link can show one packet more than fits: the peak is capped at 1.
        """
        mean = self.link_mean_utilization()
        t = self.queue_time_s
        if len(t) < 2 or not self.routes.n_rows:
            return mean
        size = self.routes.per_qp(self.flows.size_bytes)
        delivered = np.minimum(self.qp_delivered_packets * float(self.transport.mtu_bytes), size)  # (S, R) bytes
        window_bytes = np.diff(delivered, axis=0)
        dt = np.diff(t)
        keep = np.flatnonzero(dt >= self.params.queue_sample_interval_s * (1 - 1e-9))
        peak = np.zeros(self.topo.n_links)
        weights_t = self.routes.link_weights.T.tocsr()  # (L, R)
        for lo in range(0, len(keep), 256):  # windows in blocks: (L, block) stays small on large fabrics
            rows = keep[lo:lo + 256]
            rate = np.asarray(weights_t @ window_bytes[rows].T) / dt[rows]
            peak = np.maximum(peak, rate.max(axis=1))
        return np.maximum(np.minimum(peak / self.capacity_Bps, 1.0), mean)

    # ------------------------------------------------------------------ packet-level telemetry
    def _counter(self, column: int) -> np.ndarray:
        return self.link_counters[:, column - C.C_FIRST]

    @property
    def link_mean_queue_bytes(self) -> np.ndarray:
        return self.link_queue_integral / max(self.end_s * _PS, 1.0)

    @property
    def link_max_queue_bytes(self) -> np.ndarray:
        return self._counter(C.C_QMAX).astype(float)

    def queue_depth(self, link: int | str) -> tuple[np.ndarray, np.ndarray]:
        """(time_s, bytes queued) of one sampled egress port."""
        link = self.topo.link_id(link)
        where = np.flatnonzero(self.queue_links == link)
        if not len(where):
            raise SpecError(f"queue_depth: link {self.topo.link_name(link)} carries none of the run's packets; "
                            "expected a sampled network link", hint="queue_links lists the sampled ones")
        return self.queue_time_s, self.queue_bytes[:, where[0]].astype(float)

    def pause_series(self, min_paused_s: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Pause time per port per sample interval, for the sampled ports that were paused more than
        ``min_paused_s`` in all: (link ids, interval ends in s (S-1,), fraction of each interval the
        port's sender was paused (S-1, n)). The intervals are the queue samples' (bounded: a long run
        samples half as often), so memory is fixed per port; ports that never paused are left out."""
        samples = self.pause_samples_s if self.pause_samples_s is not None else np.zeros((0, len(self.queue_links)))
        if samples.shape[0] < 2:
            return np.zeros(0, int), np.zeros(0), np.zeros((0, 0))
        paused = np.flatnonzero(samples[-1] > min_paused_s)
        dt_s = np.diff(self.queue_time_s)
        frac = np.divide(np.diff(samples[:, paused], axis=0), dt_s[:, None], out=np.zeros((len(dt_s), len(paused))),
                         where=dt_s[:, None] > 0)
        return self.queue_links[paused], self.queue_time_s[1:], np.clip(frac, 0.0, 1.0)

    def _per_priority(self, column: int, scale: float = 1.0) -> np.ndarray:
        out = np.zeros((self.topo.n_links, 8))
        out[:, self.params.data_priority] = self._counter(column) * scale
        return out

    @property
    def pause_frames(self) -> np.ndarray:
        """(L, 8) PFC pause frames received by each link's sending port, per priority."""
        return self._per_priority(C.C_PAUSE_FRAMES)

    @property
    def paused_s(self) -> np.ndarray:
        """(L, 8) time each link's sending port was paused, per priority."""
        return self._per_priority(C.C_PAUSED_PS, 1 / _PS)

    @property
    def xmit_wait_s(self) -> np.ndarray:
        """(L,) time each port had a packet to send but was paused or out of credits (``PortXmitWait``)."""
        return self._counter(C.C_WAIT_PS) / _PS

    @property
    def ecn_marked_packets(self) -> np.ndarray:
        """(L,) data packets each switch port marked (at dequeue), as a switch counts them: SAI's
        ``SAI_QUEUE_STAT_WRED_ECN_MARKED_PACKETS`` (opencomputeproject/SAI ``inc/saiqueue.h``; SONiC's
        ``show queue wredcounters``) counts the marks the queue's WRED made, not the packets it forwards
        already marked upstream (those reach the receiver's ``np_ecn_marked_roce_packets``)."""
        return self._counter(C.C_ECN).copy()

    @property
    def drops(self) -> np.ndarray:
        """(L,) packets discarded at each egress port (full buffer, headroom overrun) or lost on the link."""
        return self._counter(C.C_DROPS).copy()

    def port_counters(self) -> dict[str, np.ndarray]:
        """Per-link counters under the names real exporters use: mlx5 ``ethtool -S`` (Linux
        ``Documentation/networking/device_drivers/ethernet/mellanox/mlx5/counters.rst``) and the
        InfiniBand PMA port counters ``perfquery`` prints (IBTA spec vol. 1, PortCounters).

        ``rx_prio{p}_pause`` / ``_duration`` (µs, as mlx5 reports it) belong to the port that
        sends on the link; ``tx_prio{p}_pause`` to the port at its far end, which sent them.
        """
        p = self.params.data_priority
        return {
            f"rx_prio{p}_pause": self._counter(C.C_PAUSE_FRAMES).copy(),
            f"tx_prio{p}_pause": self._counter(C.C_PAUSE_FRAMES).copy(),
            f"rx_prio{p}_pause_duration": self._counter(C.C_PAUSED_PS) / 1e6,
            "PortXmitWait": self._counter(C.C_WAIT_PS) / 1e3,  # ns of credit or pause starvation
            "PortXmitDiscards": self.drops,
            "PortXmitPkts": self._counter(C.C_TX_PKTS).copy(),
            "ecn_marked_packets": self.ecn_marked_packets,
        }

    def qp_counter_table(self) -> dict[str, np.ndarray]:
        """Per-QP counters under the mlx5 RDMA ``hw_counters`` names (NVIDIA, "Understanding mlx5
        Linux Counters and Status Parameters")."""
        q = self.qp_counters
        return {
            "np_ecn_marked_roce_packets": q[:, C.O_ECN_RX].copy(),
            "np_cnp_sent": q[:, C.O_CNP_SENT].copy(),
            "rp_cnp_handled": q[:, C.O_CNP_HANDLED].copy(),
            "out_of_sequence": q[:, C.O_OOS].copy(),
            "packet_seq_err": q[:, C.O_SEQ_ERR].copy(),
            "local_ack_timeout_err": q[:, C.O_TIMEOUTS].copy(),
            "duplicate_request": q[:, C.O_DUP].copy(),
            "retransmitted_packets": q[:, C.O_RETX].copy(),
            "reordered_packets": q[:, C.O_REORDERED].copy(),
        }

    def totals(self) -> dict[str, float]:
        """Every counter summed over ports and QPs, plus the run's size."""
        out = {name: float(v.sum()) for name, v in self.port_counters().items()}
        out.update({name: float(v.sum()) for name, v in self.qp_counter_table().items()})
        out.update(paused_s=float(self.paused_s.sum()), xmit_wait_s=float(self.xmit_wait_s.sum()),
                   events=float(self.events), packets=float(self.packets))
        return out

    def fct_percentiles_s(self) -> dict[str, float]:
        """Flow completion time p50, p99 and p99.9 (seconds), over finished flows."""
        fct = self.flow_time_s[np.isfinite(self.flow_time_s)]
        if not len(fct):
            return {"p50": float("nan"), "p99": float("nan"), "p99.9": float("nan")}
        return {k: float(np.percentile(fct, q)) for k, q in (("p50", 50), ("p99", 99), ("p99.9", 99.9))}

    def packet_delay_percentile_s(self, q: float) -> float:
        """A percentile of the one-way delay of delivered packets (from the histogram, about 9 % bins)."""
        hist = self.delay_histogram
        total = hist.sum()
        if total == 0:
            return float("nan")
        k = int(np.searchsorted(np.cumsum(hist), q / 100 * total))
        return float((2 ** ((k + 1) / 8) - 1) * 1e-9)

    def qp_rate_Bps(self, t0_s: float, t1_s: float) -> np.ndarray:
        """Mean payload delivery rate of each QP between two sample times."""
        i0, i1 = np.searchsorted(self.queue_time_s, [t0_s, t1_s])
        i1 = min(i1, len(self.queue_time_s) - 1)
        if i1 <= i0:
            raise SpecError(f"qp_rate_Bps: no samples between {t0_s} and {t1_s} s; expected a window inside the run")
        pkts = self.qp_delivered_packets[i1] - self.qp_delivered_packets[i0]
        return pkts * self.transport.mtu_bytes / (self.queue_time_s[i1] - self.queue_time_s[i0])

    @property
    def events_per_s(self) -> float:
        return self.events / max(self.wall_s, 1e-9)


# ---------------------------------------------------------------------------------------- inputs
def resolve(params: PacketParams, transport: TransportProfile, routing: RoutingSpec) -> Resolved:
    fc = transport.flow_control if params.flow_control == "auto" else params.flow_control
    cc = ("dcqcn" if transport.congestion_control == "dcqcn" else "none") if params.congestion_control == "auto" \
        else params.congestion_control
    ecn = (cc == "dcqcn") if params.ecn is None else params.ecn
    return Resolved(fc, cc, ecn, fc == "none" or params.loss_rate > 0, routing.kind in ("spray", "adaptive"))


def _qp_sizes(routes: Routes, flows: FlowTable, mtu: int) -> tuple[np.ndarray, np.ndarray]:
    size = np.rint(routes.per_qp(flows.size_bytes)).astype(np.int64)
    npkts = -(-size // mtu)
    last = size - np.maximum(npkts - 1, 0) * mtu
    return npkts, last


def estimate(topo: Topology, flows: FlowTable, routes: Routes, transport: TransportProfile,
             params: PacketParams) -> dict:
    """What a run will need, before running it: packets, a lower bound on simulated time, memory.

    The time bound is the fluid one (the busiest link's bytes at its capacity, plus the latest
    start and the longest path); congestion control and pauses only lengthen a run.
    """
    mtu = int(transport.mtu_bytes)
    npkts, _ = _qp_sizes(routes, flows, mtu)
    packets = int(npkts.sum())
    capacity = effective_capacity_Bps(topo, transport)
    busiest_s = float((routes.bytes_per_link(flows.size_bytes) / capacity).max()) if routes.n_rows else 0.0
    time_s = busiest_s + float(flows.start_s.max() if len(flows) else 0) + float(routes.path_latency_s.max(initial=0))
    sampled = int((np.asarray(routes.link_weights.sum(axis=0)).ravel() > 0).sum())
    sample_rows = min(2 * time_s / params.queue_sample_interval_s + 2, _max_sample_rows(params, sampled, routes.n_rows))
    hops = routes.link_weights.nnz / max(routes.n_rows, 1)
    memory = (_FIXED_RUN_BYTES + sample_rows * (sampled + routes.n_rows + 1) * 8
              + routes.link_weights.nnz * 24 + topo.n_links * 200 + routes.n_rows * 400
              + min(packets, _in_flight_bound(topo, params, routes.n_rows, mtu)) * _BYTES_PER_PACKET_STATE
              + (packets if routes.n_rows and _out_of_order(routes) else 0))
    return {"packets": packets, "min_time_s": time_s, "memory_bytes": float(memory),
            "events": float(packets * (2 * hops + 1))}


def _out_of_order(routes: Routes) -> bool:
    return routes.link_weights.nnz > 0 and bool((routes.link_weights.data < 1.0).any())


def _max_sample_rows(params: PacketParams, sampled_links: int, rows: int) -> int:
    # a quarter of the memory budget for samples; the core halves the sampling rate beyond it
    return int(max(64, params.max_memory_bytes / 4 / (8 * (sampled_links + rows + 1))))


def _in_flight_bound(topo: Topology, params: PacketParams, rows: int, mtu: int) -> int:
    switches = int((topo.node_kind == _SWITCH).sum())
    return int(switches * params.switch_buffer_bytes / mtu + rows * (params.host_queue_packets + 8) + topo.n_links * 4)


def check_run(topo: Topology, flows: FlowTable, routes: Routes, transport: TransportProfile, params: PacketParams) -> dict:
    """Refuse a run beyond the packet, time or memory limits, saying by how much."""
    est = estimate(topo, flows, routes, transport, params)
    if est["packets"] > params.max_packets:
        raise SimulationError(f"packet engine: the flows make {est['packets']:,} packets of {int(transport.mtu_bytes)} B; "
                              f"expected at most max_packets = {params.max_packets:,.0f}",
                              hint="use fewer or smaller flows, or the flow engine (engine='flow')")
    if est["min_time_s"] > params.max_time_s:
        raise SimulationError(f"packet engine: the run needs at least {format_time(est['min_time_s'])} of simulated "
                              f"time (the busiest link at full rate); expected at most max_time_s = "
                              f"{format_time(params.max_time_s)}", hint="raise max_time_s or shrink the flows")
    if est["memory_bytes"] > params.max_memory_bytes:
        raise SimulationError(f"packet engine: the run needs about {format_size(est['memory_bytes'])} of memory; "
                              f"expected at most max_memory_bytes = {format_size(params.max_memory_bytes)}",
                              hint="sample queues less often (queue_sample_interval_s) or simulate fewer flows")
    return est


def _link_tables(topo: Topology, transport: TransportProfile, params: PacketParams, res: Resolved,
                 used: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    L = topo.n_links
    cap = topo.link_capacity_Bps.astype(float)
    network = topo.link_network != _SERVER
    mtu = int(transport.mtu_bytes)
    hdr = np.where(network, int(transport.header_bytes), 0).astype(np.int64)
    lat_ps = np.rint(topo.link_latency_s * _PS).astype(np.int64)
    into_sw = topo.node_kind[topo.link_dst] == _SWITCH
    src_sw = topo.node_kind[topo.link_src] == _SWITCH
    sink = np.isin(topo.node_kind[topo.link_dst], _SINKS)
    fc_code = {"pfc": C.FC_PFC, "credit": C.FC_CREDIT, "none": C.FC_NONE}[res.flow_control]
    fc = np.where(into_sw, fc_code, np.where(sink, C.FC_NONE, C.FC_CREDIT)).astype(np.int64)

    lk = np.zeros((L, C.LINK_COLS), np.int64)
    lk[:, C.L_SRC] = topo.link_src
    lk[:, C.L_DST] = topo.link_dst
    lk[:, C.L_LAT] = lat_ps
    lk[:, C.L_HDR] = hdr
    lk[:, C.L_FC] = fc
    lk[:, C.L_INTO_SW] = into_sw
    lk[:, C.L_SRC_SW] = src_sw
    kmin, kmax = transport.ecn.thresholds_bytes(cap)  # type: ignore[arg-type]  # arithmetic only: an array works
    lk[:, C.L_KMIN] = np.rint(kmin if params.ecn_kmin_bytes is None else np.full(L, params.ecn_kmin_bytes))
    lk[:, C.L_KMAX] = np.rint(kmax if params.ecn_kmax_bytes is None else np.full(L, params.ecn_kmax_bytes))
    bad = used & src_sw & (lk[:, C.L_KMIN] > lk[:, C.L_KMAX])
    if res.ecn and bad.any():
        link = int(np.flatnonzero(bad)[0])
        raise SpecError(f"packet.ecn_kmin_bytes: {lk[link, C.L_KMIN]:,} B > Kmax {lk[link, C.L_KMAX]:,} B on "
                        f"{topo.link_name(link)}; expected Kmin <= Kmax", hint="set both ecn_kmin_bytes and ecn_kmax_bytes")
    lk[:, C.L_XOFF] = -1 if params.pfc_xoff_bytes is None else int(params.pfc_xoff_bytes)
    xon = params.pfc_xon_bytes if params.pfc_xon_bytes is not None else \
        (params.pfc_xoff_bytes - params.pfc_xon_offset_bytes if params.pfc_xoff_bytes is not None else -1)
    lk[:, C.L_XON] = int(xon)
    wire_mtu = mtu + int(transport.header_bytes)
    if params.pfc_headroom_bytes is not None:
        hdrm = np.full(L, int(params.pfc_headroom_bytes), np.int64)
    else:
        speeds = cap * 8 / 1e9
        hdrm = np.array([pfc_xoff_bytes(s, wire_mtu, params.cable_length_m) for s in speeds], np.int64)
    lk[:, C.L_HDRM] = hdrm
    lk[:, C.L_NET] = network
    if params.credit_buffer_bytes is not None:
        credit = np.full(L, int(params.credit_buffer_bytes), np.int64)
    else:  # enough to keep the link busy over a credit round trip, and two packets
        credit = np.rint(cap * 2 * topo.link_latency_s * 2).astype(np.int64) + 2 * wire_mtu
    lk[:, C.L_CREDIT] = np.where(fc == C.FC_CREDIT, np.maximum(credit, wire_mtu), 0)

    lk[:, C.L_PPB_FX] = np.rint(_PS / cap * (1 << C.FX_SHIFT)).astype(np.int64)
    # a pause quantum is 512 bit times of the link the frame arrives on (IEEE 802.1Qbb), so each port's
    # pause lasts, and its peer refreshes it every half of it, at that port's own speed
    lk[:, C.L_REFRESH] = np.maximum(1, np.rint(params.pause_quanta * 512 / (cap * 8) / 2 * _PS)).astype(np.int64)
    pmax = transport.ecn.pmax if params.ecn_pmax is None else params.ecn_pmax
    lk[:, C.L_PMAX_FX] = round(pmax * 2.0**32)

    n_buf = np.full(topo.n_nodes, 1 << 60, np.int64)
    switches = topo.node_kind == _SWITCH
    n_buf[switches] = int(params.switch_buffer_bytes)
    n_hdrm = np.zeros(topo.n_nodes, np.int64)
    if res.flow_control == "pfc":
        np.add.at(n_hdrm, topo.link_dst[into_sw], hdrm[into_sw])
        ports = np.bincount(topo.link_dst[into_sw], minlength=topo.n_nodes)
        need = n_hdrm + ports * wire_mtu
        short = switches & (n_buf < need)
        if short.any():
            node = int(np.flatnonzero(short)[0])
            raise SpecError(
                f"packet.switch_buffer_bytes: {format_size(float(n_buf[node]))} is too small for {topo.node_name[node]}: "
                f"its {ports[node]} lossless ingress ports need {format_size(float(n_hdrm[node]))} of PFC headroom plus "
                f"one {wire_mtu} B packet each = {format_size(float(need[node]))}; short by "
                f"{format_size(float(need[node] - n_buf[node]))}",
                hint="raise switch_buffer_bytes, or lower pfc_headroom_bytes / cable_length_m")
    return lk, n_buf, n_hdrm


def _route_tables(topo: Topology, routes: Routes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    lw = routes.link_weights
    rows = np.repeat(np.arange(routes.n_rows), np.diff(lw.indptr))
    links = lw.indices.astype(np.int64)
    src = topo.link_src[links].astype(np.int64)
    order = np.lexsort((links, src, rows))
    return lw.indptr.astype(np.int64), src[order], links[order]


@dataclass(frozen=True)
class PacketProgress:
    """Where a packet run stands between two chunks of its event loop (for a progress display)."""

    simulated_s: float  # the simulated time reached
    min_end_s: float  # the fluid lower bound on the run's end (:func:`estimate`)
    delivered_packets: int  # data packets delivered (in order, or accepted out of order)
    packets: int  # data packets the run sends (retransmissions apart)
    events: int  # events handled so far
    elapsed_s: float  # wall time since the run started
    events_per_s: float  # over the last chunk (the first call's also loads or compiles the loop)

    @property
    def fraction(self) -> float:
        """Share of the run's packets delivered (0..1)."""
        return self.delivered_packets / self.packets if self.packets else 1.0

    def describe(self) -> str:
        """One line: packets delivered, simulated time against the fluid bound, events per second."""
        return (f"{self.fraction:.0%} delivered, {format_time(self.simulated_s)} simulated "
                f"(fluid bound {format_time(self.min_end_s)}), {self.events_per_s / 1e6:.1f} M events/s")


_CHUNK_WALL_S = 0.25  # wall time per chunk: a progress display redraws about four times a second
_FIRST_CHUNK_EVENTS = 200_000  # a few tens of ms at the loop's usual 5-20 M events/s


def _run_in_chunks(inp: C.Inputs, recv_total: int, pool: int, min_end_s: float,
                   progress: Callable[[PacketProgress], None], chunk_events: int | None) -> C.Outputs:
    """The event loop in chunks of events, ``progress`` told after each; the same outputs as one call."""
    t0 = time.perf_counter()
    packets = int(inp.qp_int[:, C.Q_NPKTS].sum())
    loop = C.start(inp, recv_total, pool, 4096, None)
    chunk = chunk_events or _FIRST_CHUNK_EVENTS
    ended = False
    while not ended:
        t_chunk = time.perf_counter()
        before = int(loop.st[C.RUN_EVENTS])
        loop, ended = C.advance(loop, inp, chunk, None)
        now = time.perf_counter()
        done = int(loop.st[C.RUN_EVENTS])
        rate = (done - before) / max(now - t_chunk, 1e-6)
        progress(PacketProgress(float(loop.st[C.RUN_NOW]) / _PS, min_end_s,
                                int(loop.receivers.out[:, C.O_DELIVERED].sum()), packets, done, now - t0, rate))
        if chunk_events is None and done > before:  # aim the next chunk at _CHUNK_WALL_S of wall time
            chunk = int(min(max(rate * _CHUNK_WALL_S, 10_000), 1 << 40))
    return C.finish(loop, inp, None)


def simulate_packets(topo: Topology, flows: FlowTable, routing: RoutingSpec, transport: TransportProfile,
                     params: PacketParams | None = None, seed: int = 0, *, routes: Routes | None = None,
                     progress: Callable[[PacketProgress], None] | None = None,
                     chunk_events: int | None = None) -> PacketRun:
    """Route and simulate ``flows`` packet by packet.

    Parameters
    ----------
    topo, flows, routing, transport
        As for :func:`gpuwait.engine.flow_run.simulate_flows`.
    params : PacketParams, optional
        Buffers, ECN, PFC, credits, DCQCN, loss and limits; defaults follow the transport.
    seed : int
        Seeds ECN marking, injected loss and per-packet path choices; the same seed gives the
        same run bit for bit.
    routes : Routes, optional
        Precomputed routes of ``flows`` (else :func:`route_flows` is called).
    progress : callable, optional
        Called with a :class:`PacketProgress` between chunks of the event loop (about four times
        a second), for a progress display; the results are the same bit for bit with or without it.
    chunk_events : int, optional
        Events per chunk when ``progress`` is given (default: sized to about 0.25 s of wall time).

    Raises
    ------
    SpecError
        A buffer too small for the PFC headroom it must hold, thresholds in the wrong order.
    SimulationError
        A run beyond ``max_packets``, ``max_time_s`` or ``max_memory_bytes`` (refused before running).

    Examples
    --------
    >>> from gpuwait.topology import build_preset
    >>> from gpuwait.spec import RoutingSpec
    >>> from gpuwait.transport import TRANSPORTS
    >>> from gpuwait.workload.traffic import FlowTable
    >>> topo = build_preset("rocev2-400g-2tier", servers=2)
    >>> a, b = topo.node_id("s0.nic0"), topo.node_id("s1.nic0")
    >>> flows = FlowTable(["f"], np.array([a]), np.array([b]), np.array([1e6]), np.zeros(1), np.full(1, np.inf), [[]])
    >>> run = simulate_packets(topo, flows, RoutingSpec(), TRANSPORTS["rocev2"])
    >>> run.packets, bool(run.drops.sum() == 0)
    (245, True)
    """
    params = params or PacketParams()
    res = resolve(params, transport, routing)
    if routes is None:
        routes = route_flows(topo, routing, flows.src, flows.dst, transport=transport.name)
    est = check_run(topo, flows, routes, transport, params)
    inp = engine_inputs(topo, flows, routes, routing, transport, params, res, seed)
    total = int(inp.qp_int[:, C.Q_NPKTS].sum())
    pool = int(min(max(total, 64), 1 << 16))
    t0 = time.perf_counter()
    if progress is None:
        got = C.simulate(inp, total if res.out_of_order else 0, pool, 4096, None)
    else:
        got = _run_in_chunks(inp, total if res.out_of_order else 0, pool, est["min_time_s"], progress, chunk_events)
    wall = time.perf_counter() - t0
    out = got.qp_out
    finish = np.where(out[:, C.O_FINISH] >= 0, out[:, C.O_FINISH] / _PS, np.inf)
    first_tx = np.where(out[:, C.O_FIRST_TX] >= 0, out[:, C.O_FIRST_TX] / _PS, np.nan)
    stats = got.stats
    return PacketRun(topo=topo, flows=flows, routes=routes, capacity_Bps=effective_capacity_Bps(topo, transport),
                     routing=routing, transport=transport, params=params, resolved=res, qp_first_tx_s=first_tx,
                     qp_finish_s=finish, link_counters=got.link_counters, link_queue_integral=got.queue_integral,
                     qp_counters=out, queue_links=inp.sample_links, queue_time_s=got.sample_ps / _PS,
                     queue_bytes=got.queue_samples, qp_delivered_packets=got.qp_samples, delay_histogram=got.delay_hist,
                     pause_samples_s=got.pause_samples / _PS,
                     end_s=float(stats[C.S_END_PS]) / _PS, events=int(stats[C.S_EVENTS]),
                     packets=int(stats[C.S_PACKETS]), timed_out=bool(stats[C.S_TIMED_OUT]), wall_s=wall)


def engine_inputs(topo: Topology, flows: FlowTable, routes: Routes, routing: RoutingSpec, transport: TransportProfile,
                  params: PacketParams, res: Resolved, seed: int = 0) -> C.Inputs:
    """The tables :func:`gpuwait.engine.packet.core.simulate` reads, for one routed flow table."""
    used = np.asarray(routes.link_weights.sum(axis=0)).ravel() > 0
    lk, n_buf, n_hdrm = _link_tables(topo, transport, params, res, used)
    r_ptr, r_src, r_link = _route_tables(topo, routes)
    qpi, qpf = _qp_tables(topo, flows, routes, transport, params, res, (r_ptr, r_src, r_link))
    f_qp_ptr, f_qp_list, f_dep_ptr, f_dep_list, f_ndeps = _flow_tables(flows, routes)
    sample_links = np.flatnonzero(used & (topo.link_network != _SERVER)).astype(np.int64)
    gi, gf = _run_parameters(topo, routing, params, res, transport, seed, len(sample_links), routes.n_rows)
    return C.Inputs(lk, n_buf, n_hdrm, qpi, qpf, r_ptr, r_src, r_link, f_qp_ptr, f_qp_list, f_dep_ptr, f_dep_list,
                    f_ndeps, gi, gf, sample_links)


def _first_links(topo: Topology, flows: FlowTable, routes: Routes, route_tables: tuple) -> tuple[np.ndarray, np.ndarray]:
    """Each QP's first link and its line rate (Bytes/s: its slowest host NIC link, else its slowest link)."""
    r_ptr, r_src, r_link = route_tables
    R = routes.n_rows
    qsrc = flows.src[routes.flow_index].astype(np.int64)
    first = np.full(R, -1, np.int64)
    line = np.zeros(R)
    host_net = (topo.link_network != _SERVER) & (topo.node_kind[topo.link_src] != _SWITCH)
    for r in range(R):  # per QP, over its own few links; routing already walked every hop
        lo, hi = r_ptr[r], r_ptr[r + 1]
        at = lo + int(np.searchsorted(r_src[lo:hi], qsrc[r]))
        if at >= hi or r_src[at] != qsrc[r]:
            raise SimulationError(f"flow {flows.name[routes.flow_index[r]]}: its route has no link out of its source")
        first[r] = r_link[at]
        links = r_link[lo:hi]
        nic = links[host_net[links]]
        line[r] = topo.link_capacity_Bps[nic].min() if len(nic) else topo.link_capacity_Bps[links].min()
    return first, line


def _qp_tables(topo: Topology, flows: FlowTable, routes: Routes, transport: TransportProfile, params: PacketParams,
               res: Resolved, route_tables: tuple) -> tuple[np.ndarray, np.ndarray]:
    """The QP integer table (Q_* columns) and float table (QF_* columns)."""
    R = routes.n_rows
    mtu = int(transport.mtu_bytes)
    npkts, last = _qp_sizes(routes, flows, mtu)
    first, line = _first_links(topo, flows, routes, route_tables)
    crosses = np.asarray(routes.link_weights @ (topo.link_network != _SERVER).astype(float)).ravel() > 0
    recv_off = np.zeros(R, np.int64)
    if res.out_of_order:
        recv_off[1:] = np.cumsum(npkts)[:-1]
    qpi = np.zeros((R, C.Q_INT_COLS), np.int64)
    qpi[:, C.Q_SRC] = flows.src[routes.flow_index].astype(np.int64)
    qpi[:, C.Q_DST] = flows.dst[routes.flow_index].astype(np.int64)
    qpi[:, C.Q_FIRST] = first
    qpi[:, C.Q_NPKTS] = npkts
    qpi[:, C.Q_LAST_LEN] = last
    qpi[:, C.Q_MTU] = mtu
    qpi[:, C.Q_FLOW] = routes.flow_index
    qpi[:, C.Q_RELEASE] = np.rint(flows.start_s[routes.flow_index] * _PS).astype(np.int64)
    qpi[:, C.Q_DELAY] = np.where(crosses, np.int64(round(message_overhead_s(topo, transport) * _PS)), 0)
    qpi[:, C.Q_CTRL_LAT] = np.rint(routes.path_latency_s * _PS).astype(np.int64) + 1
    qpi[:, C.Q_RECV_OFF] = recv_off
    dc = params.dcqcn or transport.dcqcn
    qpf = np.zeros((R, 3))
    qpf[:, C.QF_LINE_Bps] = line
    qpf[:, C.QF_AI_Bps] = dc.rate_ai_bps_per_25gbps * (line * 8 / 25e9) / 8
    qpf[:, C.QF_HAI_Bps] = dc.rate_hai_bps_per_25gbps * (line * 8 / 25e9) / 8
    return qpi, qpf


def _flow_tables(flows: FlowTable, routes: Routes) -> tuple[np.ndarray, ...]:
    """Each flow's QPs and the flows waiting for it (both CSR: pointers, list), and its dependency count."""
    F = len(flows)
    f_qp_ptr = np.zeros(F + 1, np.int64)
    np.cumsum(np.bincount(routes.flow_index, minlength=F), out=f_qp_ptr[1:])
    f_qp_list = np.argsort(routes.flow_index, kind="stable").astype(np.int64)
    dependents: list[list[int]] = [[] for _ in range(F)]
    for f, deps in enumerate(flows.after):
        for d in deps:
            dependents[d].append(f)
    f_dep_ptr = np.zeros(F + 1, np.int64)
    np.cumsum([len(d) for d in dependents], out=f_dep_ptr[1:])
    f_dep_list = np.array([f for d in dependents for f in d], np.int64)
    f_ndeps = np.array([len(a) for a in flows.after], np.int64)
    return f_qp_ptr, f_qp_list, f_dep_ptr, f_dep_list, f_ndeps


def _run_parameters(topo: Topology, routing: RoutingSpec, params: PacketParams, res: Resolved,
                    transport: TransportProfile, seed: int, n_sampled: int, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """The run's integer (G_*, times in ps) and float (GF_*) parameters."""
    dc = params.dcqcn or transport.dcqcn
    gi = np.zeros(C.G_INT_COLS, np.int64)
    gi[C.G_ROUTE] = {"spray": C.ROUTE_SPRAY, "adaptive": C.ROUTE_ADAPTIVE}.get(routing.kind, C.ROUTE_SINGLE)
    gi[C.G_CC] = res.congestion_control == "dcqcn"
    gi[C.G_ECN] = res.ecn
    gi[C.G_RELIABLE] = res.reliable
    gi[C.G_HOST_LIMIT] = params.host_queue_packets
    gi[C.G_ACK_EVERY] = params.ack_every_packets
    gi[C.G_RTO] = round(params.retransmit_timeout_s * _PS)
    gi[C.G_CNP_INT] = round(dc.cnp_interval_s * _PS)
    gi[C.G_ALPHA_INT] = max(1, round(dc.alpha_resume_interval_s * _PS))
    gi[C.G_DEC_INT] = round(dc.rate_decrease_interval_s * _PS)
    gi[C.G_RP_TIMER] = max(1, round(dc.rp_timer_s * _PS))
    gi[C.G_FAST] = dc.fast_recovery_steps
    gi[C.G_CLAMP] = dc.clamp_target_rate
    gi[C.G_SAMPLE] = max(1, round(params.queue_sample_interval_s * _PS))
    gi[C.G_T_LIMIT] = round(params.max_time_s * _PS)
    gi[C.G_SEED] = int(seed) & ((1 << 62) - 1)
    gi[C.G_OOO] = res.out_of_order
    gi[C.G_XON_OFFSET] = int(params.pfc_xon_offset_bytes)
    gi[C.G_MAX_SAMPLES] = _max_sample_rows(params, n_sampled, rows)
    gf = np.zeros(C.GF_COLS)
    gf[C.GF_LOSS] = params.loss_rate
    gf[C.GF_BUF_ALPHA] = params.buffer_alpha
    gf[C.GF_PFC_ALPHA] = params.pfc_dynamic_alpha
    gf[C.GF_G] = dc.g
    gf[C.GF_BYTE_COUNTER] = dc.byte_counter_bytes
    gf[C.GF_MIN_RATE] = dc.min_rate_bps / 8
    return gi, gf
