"""The packet engine's event loop, compiled with numba (``cache=True``).

Time is an integer number of picoseconds. State lives in numpy arrays indexed by link, node,
QP or packet slot; a packet is a row of ``pkt``, an event a slot of the event queue (:mod:`.events`).

Components, each doing one thing:

* a **queue** (one per directional link, at its source node) serializes packets at the link's
  rate, FIFO; it may be held by PFC pause or by missing credits;
* a **pipe** (the same link) delays a packet by the link's latency (which includes the switch hop);
* a **route** is the QP's list of links, looked up at each node: one link (ECMP, static), or a
  choice per packet among the row's links leaving that node (spray: random; adaptive: the
  shortest queue);
* a **switch** is queues plus a shared buffer: admission (lossy drop, PFC ingress accounting
  with XOFF/XON and headroom, or credits), RED-style ECN marking at dequeue (:func:`_red_mark`);
* a **sender** (QP) injects MTU packets into its first link, paced by DCQCN when it runs and
  held back when its host queue is full; a **receiver** accepts in order (go-back-N) or out of
  order (spray, adaptive), sends CNPs (at most one per interval) and, in lossy mode, ACKs/NACKs.

ACKs, NACKs and CNPs are not queued hop by hop: they reach the sender after the reverse
path's latency (they are a few bytes next to MTU-sized data; see the package doc).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from gpuwait.engine.packet.events import (
    _BITS,
    _MASK,
    B_HEAD,
    B_TAIL,
    BIN_KIND,
    CACHE_BITS,
    CHUNK_SHIFT,
    DATA,
    LINK,
    Q_BINS,
    Q_CHUNKS,
    Q_FREE_BIN,
    Q_FREE_CHUNK,
    Q_SEQ,
    Q_SIZE,
    SEQ,
    TIME,
    grow_queue,
    grow_rows,
    hash_slot,
    new_queue,
    pack,
    prefetch,
    push,
)

# ---------------------------------------------------------------- column layouts (shared with run.py)
# link integer table
# one int64 row per link holds its counters (C_*), its constants (L_*) and its state (T_*), so an
# event touches a few adjacent cache lines, not one line in each of thirty arrays. The columns are
# ordered by use: what every packet hop reads and writes fills the first 24 (three 64-byte lines),
# PFC and ECN the fourth line, the rest after. The queue's byte count lives apart (``qbytes`` in
# :func:`simulate`), contiguous, so a queue-depth sample is a cheap gather.
C_FIRST = 0
C_TX_BYTES, C_TX_PKTS, C_QMAX, C_ECN, C_DROPS, C_PAUSE_FRAMES, C_PAUSED_PS, C_WAIT_PS = range(C_FIRST, C_FIRST + 8)
C_COLS = 8
L_LAT, L_HDR, L_FC, L_PPB_FX, L_DST, L_INTO_SW, L_SRC_SW, L_NET = range(8, 16)
T_BUSY, T_HEAD, T_TAIL, T_QPKTS, T_QLAST, T_PAUSED, T_BLOCK_T0, T_CREDITS = range(16, 24)
T_IN_BYTES, T_PAUSE_SENT, L_XOFF, L_KMIN, L_KMAX, L_PMAX_FX, T_PAUSE_LEVEL, L_HDRM = range(24, 32)
L_SRC, L_XON, L_CREDIT, T_PAUSE_T0, T_WAIT_HEAD, T_WAIT_TAIL, L_REFRESH = range(32, 39)
LINK_COLS = 40  # padded to five 64-byte lines
# the state and counter columns: simulate() starts them from zero
_FRESH_COLS = (C_TX_BYTES, C_TX_PKTS, C_QMAX, C_ECN, C_DROPS, C_PAUSE_FRAMES, C_PAUSED_PS, C_WAIT_PS, T_BUSY,
               T_HEAD, T_TAIL, T_QPKTS, T_QLAST, T_PAUSED, T_BLOCK_T0, T_CREDITS, T_IN_BYTES, T_PAUSE_SENT,
               T_PAUSE_LEVEL, T_PAUSE_T0, T_WAIT_HEAD, T_WAIT_TAIL)
FX_SHIFT = 16  # L_PPB_FX: picoseconds per byte x 2**16; L_PMAX_FX: probability x 2**32
# flow control of a link's receiving side
FC_NONE, FC_PFC, FC_CREDIT = 0, 1, 2
# QP integer table
Q_SRC, Q_DST, Q_FIRST, Q_NPKTS, Q_LAST_LEN, Q_MTU, Q_FLOW, Q_RELEASE, Q_DELAY, Q_CTRL_LAT, Q_RECV_OFF = range(11)
Q_INT_COLS = 11
# QP float table
QF_LINE_Bps, QF_AI_Bps, QF_HAI_Bps = range(3)
# global integer parameters
(G_ROUTE, G_CC, G_ECN, G_RELIABLE, G_HOST_LIMIT, G_ACK_EVERY, G_RTO, G_CNP_INT, G_ALPHA_INT, G_DEC_INT, G_RP_TIMER,
 G_FAST, G_SAMPLE, G_T_LIMIT, G_SEED, G_OOO, G_XON_OFFSET, G_MAX_SAMPLES, G_CLAMP) = range(19)
G_INT_COLS = 19
# global float parameters
GF_LOSS, GF_BUF_ALPHA, GF_PFC_ALPHA, GF_G, GF_BYTE_COUNTER, GF_MIN_RATE = range(6)
GF_COLS = 6
ROUTE_SINGLE, ROUTE_SPRAY, ROUTE_ADAPTIVE = 0, 1, 2
# QP outputs
(O_FIRST_TX, O_FINISH, O_CNP_SENT, O_CNP_HANDLED, O_ECN_RX, O_OOS, O_SEQ_ERR, O_RETX, O_TIMEOUTS, O_DUP, O_REORDERED,
 O_DELIVERED, O_DELAY_SUM) = range(13)
O_COLS = 13
# run statistics
S_EVENTS, S_PACKETS, S_END_PS, S_SAMPLES, S_TIMED_OUT = range(5)
# the event loop's scalar state between _run calls
(RUN_FINISHED, RUN_EVENTS, RUN_PACKETS, RUN_NOW, RUN_TIMED_OUT, RUN_FREE_HEAD, RUN_N_FREE, RUN_N_SAMPLES, RUN_SAMPLE_PS,
 RUN_LOG) = range(10)
RUN_COLS = 10
LOG_PUSH, LOG_POP = 0, 1  # the third column of the queue log
DELAY_BINS = 256  # per-packet one-way delay histogram: bin = floor(8 * log2(1 + delay_ns))

# events
EV_START, EV_SEND, EV_TXDONE, EV_ARRIVE, EV_PAUSE, EV_CREDIT, EV_ACK, EV_NACK, EV_CNP, EV_RPTIMER, EV_RTO, EV_SAMPLE = range(12)
EV_RESUME = 12  # not an event: the event loop resuming a sender's send loop (never in the queue)
# packet slot columns (one 64-byte line per packet; the link a packet is on travels in its events)
P_QP, P_SEQ, P_LEN, P_IN, P_NEXT, P_ECN, P_T0 = range(7)
P_COLS = 8
# QP run states
ST_WAIT, ST_ACTIVE, ST_DONE = 0, 1, 2
_NONE = -1


@njit(cache=True, inline="always")
def _xs(x):
    """xorshift64: the generator state after ``x`` (a uint64, never 0)."""
    x ^= x >> np.uint64(12)
    x ^= x << np.uint64(25)
    x ^= x >> np.uint64(27)
    return x


@njit(cache=True, inline="always")
def _u01(x):
    """xorshift64*: the uniform float in [0, 1) drawn from state ``x``."""
    return float((x * np.uint64(2685821657736338717)) >> np.uint64(11)) / 9007199254740992.0


@njit(cache=True, inline="always")
def _red_mark(rs, queue_bytes, kmin_bytes, kmax_bytes, pmax_fx):
    """RED's marking law at a switch egress queue of ``queue_bytes``: never at or below Kmin, always
    above Kmax, in between with probability Pmax x (queue - Kmin) / (Kmax - Kmin) (``pmax_fx``:
    Pmax x 2**32), drawing from the generator (state ``rs``) only then. Returns (state, marked).

    The queue is the one a packet leaves behind as it starts to serialize: the HPCC simulator
    marks there (github alibaba-edu/High-Precision-Congestion-Control, ``switch-node.cc``
    ``SwitchNode::SwitchNotifyDequeue``, called from ``QbbNetDevice::DequeueAndTransmit`` before
    ``TransmitStart``; it removes the packet from the egress bytes, then ``switch-mmu.cc``
    ``SwitchMmu::ShouldSendCN`` applies this law): the signal reaches the receiver a queue's drain
    time fresher than a mark made at enqueue.
    At one queue that starts and ends empty, with one packet size and Kmin = Kmax = K, as many
    departures leave more than K behind as arrivals find more than K ahead (each rise of the queue
    through a level is matched by a fall through it): the move changes which packets carry the
    marks, and their count only through what the senders do with them (tests/engine/packet/test_ecn_marking.py).

    >>> rs = np.uint64(88172645463325252)
    >>> _red_mark(rs, 201, 100, 200, 0), _red_mark(rs, 100, 100, 200, 1 << 32)  # no draw: the state stays
    ((88172645463325252, True), (88172645463325252, False))
    """
    if queue_bytes > kmax_bytes:
        return rs, True
    if queue_bytes > kmin_bytes:
        rs = _xs(rs)
        return rs, _u01(rs) * 4294967296.0 < pmax_fx * (queue_bytes - kmin_bytes) / max(kmax_bytes - kmin_bytes, 1)
    return rs, False


@njit(cache=True, inline="always")
def _inc(t, bc, line, target, rate, fast, hai, ai):
    """DCQCN rate increase (Zhu et al. 2015) on scalars: fast recovery, then additive, then hyper
    increase; returns the new (target, rate)."""
    if max(t, bc) <= fast:
        pass
    elif min(t, bc) > fast:
        target = min(line, target + (min(t, bc) - fast) * hai)
    else:
        target = min(line, target + ai)
    return target, min(line, 0.5 * (rate + target))


class Inputs(NamedTuple):
    """What :func:`simulate` reads (int64 arrays unless said; columns are the constants above).

    Built by :func:`gpuwait.engine.packet.run.engine_inputs`; never mutated.
    """

    links: np.ndarray  # (L, LINK_COLS) the L_* constants; simulate() adds fresh T_* state and C_* counters
    node_buffer_bytes: np.ndarray  # (N,) shared packet buffer of each node (switches; 2**60 elsewhere)
    node_headroom_bytes: np.ndarray  # (N,) PFC headroom each node reserves for its lossless ingress ports
    qp_int: np.ndarray  # (R, Q_INT_COLS) per QP: endpoints, first link, packets, flow, release time, ...
    qp_float: np.ndarray  # (R, QF_*) float64: line rate and DCQCN increases (bytes/s)
    route_ptr: np.ndarray  # (R + 1,) QP r's route entries are route_ptr[r]:route_ptr[r + 1]
    route_src: np.ndarray  # per entry the link's source node, sorted within each QP
    route_link: np.ndarray  # per entry the link
    flow_qp_ptr: np.ndarray  # (F + 1,) flow f's QPs are flow_qp_list[flow_qp_ptr[f]:flow_qp_ptr[f + 1]]
    flow_qp_list: np.ndarray
    flow_dep_ptr: np.ndarray  # (F + 1,) the flows that wait for flow f (same layout)
    flow_dep_list: np.ndarray
    flow_ndeps: np.ndarray  # (F,) how many flows each flow waits for
    gint: np.ndarray  # (G_INT_COLS,) integer run parameters (times in ps)
    gfloat: np.ndarray  # (GF_COLS,) float64 run parameters
    sample_links: np.ndarray  # (K,) the links whose queue depth is sampled


class Senders(NamedTuple):
    """Per-QP sender state (all (R,)): send loop, DCQCN reaction point, retransmission timer."""

    state: np.ndarray  # ST_*
    next_seq: np.ndarray
    acked: np.ndarray
    max_sent: np.ndarray
    send_sched: np.ndarray  # an EV_SEND is pending
    waiting: np.ndarray  # in its first link's wait list (host queue full)
    wait_next: np.ndarray  # the next QP in that list
    next_t: np.ndarray  # DCQCN pacing: earliest time of the next packet (ps)
    rate: np.ndarray  # bytes/s
    target: np.ndarray  # bytes/s
    alpha: np.ndarray
    alpha_t: np.ndarray  # ps
    last_dec: np.ndarray  # ps
    timer_stages: np.ndarray  # DCQCN T
    byte_stages: np.ndarray  # DCQCN BC
    bytes_sent: np.ndarray  # toward the next byte-counter stage
    timer_dl: np.ndarray  # ps
    timer_pend: np.ndarray
    rto_dl: np.ndarray  # ps
    rto_pend: np.ndarray


class Receivers(NamedTuple):
    """Per-QP receiver state, the QP outputs and per-flow dependency counts."""

    expected: np.ndarray  # (R,) next in-order sequence number
    last_cnp: np.ndarray  # (R,) ps
    nack_sent: np.ndarray  # (R,)
    accepted: np.ndarray  # (R,) packets accepted (out-of-order receivers)
    max_seq: np.ndarray  # (R,)
    flags: np.ndarray  # (packets,) accepted, per QP from Q_RECV_OFF (out-of-order receivers; else (1,))
    out: np.ndarray  # (R, O_COLS) the QP outputs
    delay_hist: np.ndarray  # (DELAY_BINS,)
    flow_left: np.ndarray  # (F,) QPs of each flow not finished
    flow_deps: np.ndarray  # (F,) flows each flow still waits for


class Outputs(NamedTuple):
    """What :func:`simulate` returns."""

    link_counters: np.ndarray  # (L, C_COLS)
    queue_integral: np.ndarray  # (L,) float64 bytes x ps
    qp_out: np.ndarray  # (R, O_COLS)
    queue_samples: np.ndarray  # (S, K) bytes queued at each sampled link
    qp_samples: np.ndarray  # (S, R) packets each QP delivered in order
    sample_ps: np.ndarray  # (S,)
    delay_hist: np.ndarray  # (DELAY_BINS,)
    stats: np.ndarray  # (S_*,)
    queue_log: np.ndarray  # (n, 3) the queue's pushes and pops, (time_ps, payload, LOG_PUSH or LOG_POP)
    pause_samples: np.ndarray  # (S, K) ps each sampled link's sending port had been paused by each sample time


class Loop(NamedTuple):
    """The event loop's whole state between two calls of :func:`advance`: the arrays it works on
    (``st`` holds its scalars, ``RUN_*`` columns). Built by :func:`start`, consumed by :func:`finish`."""

    links: np.ndarray  # (L, LINK_COLS) constants, state and counters
    qbytes: np.ndarray  # (L,) bytes queued at each link
    queue_integral: np.ndarray  # (L,) float64 bytes x ps
    node_used: np.ndarray  # (N,) buffer bytes in use at each node
    senders: Senders
    receivers: Receivers
    samples: np.ndarray  # (rows, 2K) queue bytes, then paused ps, per sample
    qp_samples: np.ndarray  # (rows, R)
    sample_t: np.ndarray  # (rows,)
    pkt: np.ndarray  # (pool, P_COLS) packet slots
    qheap: np.ndarray  # the event queue (events.new_queue)
    qchunk: np.ndarray
    qbin: np.ndarray
    qcache: np.ndarray
    qctr: np.ndarray
    rng: np.ndarray  # (1,) uint64 xorshift state
    st: np.ndarray  # (RUN_COLS,) the loop's scalars: events so far, simulated time, ...


UNLIMITED_EVENTS = 1 << 62  # advance()'s max_events for "to the end"


def simulate(inp, recv_total, pool_rows, queue_rows, qlog=None):
    """Run to completion (or the time limit): :func:`start`, one :func:`advance` without a limit, :func:`finish`.

    ``recv_total`` sizes the out-of-order receivers' flags (0: in-order receivers), ``pool_rows``
    and ``queue_rows`` the first packet pool and event queue (both grow). ``qlog``, an int64
    ``(n, 3)`` array, receives the event queue's first ``n`` pushes and pops (a test replays them
    against ``heapq``); runs pass None, and numba then compiles the logging out of the loop.
    """
    loop = start(inp, recv_total, pool_rows, queue_rows, qlog)
    loop, _ = advance(loop, inp, UNLIMITED_EVENTS, qlog)
    return finish(loop, inp, qlog)


@njit(cache=True)
def start(inp, recv_total, pool_rows, queue_rows, qlog=None):
    """The loop's state before its first event: fresh links, senders and receivers, the first
    QPs' starts and the first sample queued (arguments as for :func:`simulate`)."""
    R = inp.qp_int.shape[0]
    lt = _fresh_links(inp.links)
    L = lt.shape[0]
    qbytes = np.zeros(L, np.int64)
    qint = np.zeros(L, np.float64)
    n_used = np.zeros(inp.node_buffer_bytes.shape[0], np.int64)
    senders = _new_senders(inp.qp_float[:, QF_LINE_Bps])
    receivers = _new_receivers(inp, recv_total)
    # a sample row holds the sampled queues' bytes, then the same ports' paused time so far
    samples = np.zeros((64, 2 * inp.sample_links.shape[0]), np.int64)
    qp_samples = np.zeros((64, R), np.int64)
    sample_t = np.zeros(64, np.int64)
    pkt = _free_rows(np.zeros((pool_rows, P_COLS), np.int64), 0, -1)
    rng = np.empty(1, np.uint64)
    rng[0] = _rng_seed(inp.gint[G_SEED])
    # room for every QP's start and the sample before the loop first checks
    qheap, qchunk, qbin, qcache, qctr = new_queue(max(queue_rows, 2 * R + 64))
    st = np.zeros(RUN_COLS, np.int64)
    st[RUN_LOG] = _schedule_starts(inp, receivers.flow_deps, qheap, qchunk, qbin, qcache, qctr, qlog)
    st[RUN_N_FREE] = pool_rows
    st[RUN_SAMPLE_PS] = inp.gint[G_SAMPLE]
    return Loop(lt, qbytes, qint, n_used, senders, receivers, samples, qp_samples, sample_t, pkt, qheap, qchunk, qbin,
                qcache, qctr, rng, st)


@njit(cache=True)
def advance(loop, inp, max_events, qlog=None):
    """Handle up to ``max_events`` more events; returns (the loop's state, whether the run ended).

    The loop stops only between two events, with every push of the last one in the queue, so a
    run cut into any number of calls handles the same events in the same order as one call: the
    results are the same bit for bit (a test compares them field by field). The caller reads
    progress from ``st`` (events, simulated time) and ``receivers.out`` between calls.
    """
    (lt, qbytes, qint, n_used, senders, receivers, samples, qp_samples, sample_t, pkt, qheap, qchunk, qbin, qcache,
     qctr, rng, st) = loop
    R = inp.qp_int.shape[0]
    host_limit = inp.gint[G_HOST_LIMIT]
    reserve = _push_reserve(R, host_limit)
    stop = st[RUN_EVENTS] + min(max(max_events, 1), UNLIMITED_EVENTS)
    ended = False
    while True:
        if not _run(lt, qbytes, qint, n_used, inp, senders, receivers, samples, qp_samples, sample_t, pkt, qheap,
                    qchunk, qbin, qcache, qctr, rng, st, qlog, stop):
            ended = True
            break
        if st[RUN_EVENTS] >= stop:
            break  # what is short (if anything) grows on the next call, before its first event
        # _run stopped before an event for want of room: grow what is short and go on
        if max(qctr[Q_SIZE], qctr[Q_CHUNKS], qctr[Q_BINS]) + reserve > qbin.shape[0]:
            qheap, qchunk, qbin, qcache, qctr = grow_queue(qheap, qchunk, qbin, qcache, qctr, 2 * qbin.shape[0] + reserve)
        if st[RUN_N_FREE] < host_limit + 2:
            old = pkt.shape[0]
            pkt = _free_rows(grow_rows(pkt, 2 * old), old, st[RUN_FREE_HEAD])
            st[RUN_FREE_HEAD] = old
            st[RUN_N_FREE] += old
        if st[RUN_N_SAMPLES] >= samples.shape[0]:
            samples = grow_rows(samples, 2 * samples.shape[0])
            qp_samples = grow_rows(qp_samples, 2 * qp_samples.shape[0])
            sample_t = _grow_1d(sample_t, 2 * sample_t.shape[0])
    return Loop(lt, qbytes, qint, n_used, senders, receivers, samples, qp_samples, sample_t, pkt, qheap, qchunk, qbin,
                qcache, qctr, rng, st), ended


@njit(cache=True)
def finish(loop, inp, qlog=None):
    """The run's :class:`Outputs` from the loop's state after its last :func:`advance` (which it
    changes: open pauses, waits and queue integrals are closed at the end time)."""
    lt, qbytes, qint, receivers, st = loop.links, loop.qbytes, loop.queue_integral, loop.receivers, loop.st
    samples, qp_samples, sample_t = loop.samples, loop.qp_samples, loop.sample_t
    now = st[RUN_NOW]
    # one last sample at the end (_run leaves room: it stops short right after a sample that fills
    # the rows); control events still in flight change nothing measured
    n = st[RUN_N_SAMPLES]
    _take_sample(samples, qp_samples, sample_t, n, now, qbytes, inp.sample_links, receivers.out, lt)
    n += 1
    _close_intervals(lt, qbytes, qint, now)
    stats = np.zeros(5, np.int64)
    stats[S_EVENTS] = st[RUN_EVENTS]
    stats[S_PACKETS] = st[RUN_PACKETS]
    stats[S_END_PS] = now
    stats[S_SAMPLES] = n
    stats[S_TIMED_OUT] = st[RUN_TIMED_OUT]
    K = inp.sample_links.shape[0]
    return Outputs(lt[:, C_FIRST:C_FIRST + C_COLS].copy(), qint, receivers.out, samples[:n, :K].copy(), qp_samples[:n],
                   sample_t[:n], receivers.delay_hist, stats, _logged(qlog, st[RUN_LOG]), samples[:n, K:].copy())


@njit(cache=True)
def _logged(qlog, n):
    """The rows of the queue log that were written (none without a log)."""
    if qlog is None:
        return np.zeros((0, 3), np.int64)
    return qlog[:n].copy()


@njit(cache=True)
def _rng_seed(seed):
    """The xorshift state of ``seed`` (never 0)."""
    x = np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(0x2545F4914F6CDD1D)
    return np.uint64(88172645463325252) if x == 0 else x


@njit(cache=True)
def _fresh_links(links):
    """A copy of the link table with its state and counters at their start (the input stays as it is)."""
    lt = links.copy()
    for col in _FRESH_COLS:
        lt[:, col] = 0
    for col in (T_HEAD, T_TAIL, T_BLOCK_T0, T_WAIT_HEAD, T_WAIT_TAIL):
        lt[:, col] = -1
    lt[:, T_CREDITS] = lt[:, L_CREDIT]
    return lt


@njit(cache=True)
def _new_senders(line_Bps):
    """Every QP waiting to start, at line rate."""
    R = line_Bps.shape[0]
    return Senders(np.full(R, ST_WAIT, np.int64), np.zeros(R, np.int64), np.zeros(R, np.int64), np.zeros(R, np.int64),
                   np.zeros(R, np.bool_), np.zeros(R, np.bool_), np.full(R, -1, np.int64), np.zeros(R, np.int64),
                   line_Bps.copy(), line_Bps.copy(), np.ones(R, np.float64), np.zeros(R, np.int64),
                   np.full(R, -(1 << 62), np.int64), np.zeros(R, np.int64), np.zeros(R, np.int64),
                   np.zeros(R, np.float64), np.zeros(R, np.int64), np.zeros(R, np.bool_), np.zeros(R, np.int64),
                   np.zeros(R, np.bool_))


@njit(cache=True)
def _new_receivers(inp, recv_total):
    """Receivers expecting packet 0, no outputs yet, every flow waiting for all its QPs and dependencies."""
    R = inp.qp_int.shape[0]
    out = np.zeros((R, O_COLS), np.int64)
    out[:, O_FIRST_TX] = -1
    out[:, O_FINISH] = -1
    ooo = inp.gint[G_OOO] != 0
    return Receivers(np.zeros(R, np.int64), np.full(R, -(1 << 62), np.int64), np.zeros(R, np.bool_),
                     np.zeros(R, np.int64), np.full(R, -1, np.int64), np.zeros(recv_total if ooo else 1, np.bool_),
                     out, np.zeros(DELAY_BINS, np.int64), inp.flow_qp_ptr[1:] - inp.flow_qp_ptr[:-1],
                     inp.flow_ndeps.copy())


@njit(cache=True)
def _free_rows(pkt, first, head):
    """``pkt`` with rows ``first:`` linked through P_NEXT into a free list ending in ``head``."""
    n = pkt.shape[0]
    for i in range(first, n - 1):
        pkt[i, P_NEXT] = i + 1
    pkt[n - 1, P_NEXT] = head
    return pkt


@njit(cache=True)
def _schedule_starts(inp, flow_deps, qheap, qchunk, qbin, qcache, qctr, qlog):
    """Push the start of every QP of the flows that wait for none, and the first sample; returns
    how many of these pushes went into the log ``qlog``."""
    qpi = inp.qp_int
    n_log = 0
    for f in range(flow_deps.shape[0]):
        if flow_deps[f] == 0:
            for k in range(inp.flow_qp_ptr[f], inp.flow_qp_ptr[f + 1]):
                qp = inp.flow_qp_list[k]
                n_log = _push_logged(qheap, qchunk, qbin, qcache, qctr, qpi[qp, Q_RELEASE] + qpi[qp, Q_DELAY],
                                     pack(EV_START, qp, 0), qlog, n_log)
    if inp.sample_links.shape[0] > 0 or qpi.shape[0] > 0:
        n_log = _push_logged(qheap, qchunk, qbin, qcache, qctr, 0, pack(EV_SAMPLE, 0, 0), qlog, n_log)
    return n_log


@njit(cache=True)
def _push_logged(qheap, qchunk, qbin, qcache, qctr, time_ps, data, qlog, n_log):
    push(qheap, qchunk, qbin, qcache, qctr, time_ps, data)
    if qlog is not None:
        n_log = _log_op(qlog, n_log, time_ps, data, LOG_PUSH)
    return n_log


@njit(cache=True)
def _log_op(qlog, n_log, time_ps, data, op):
    """Write one push or pop (``op``: LOG_PUSH or LOG_POP) into the queue log while it has room;
    returns the new count. Callers guard the call with ``qlog is not None``, so numba prunes it
    (and its reference-count calls) from a run that logs nothing."""
    if n_log < qlog.shape[0]:
        qlog[n_log, 0] = time_ps
        qlog[n_log, 1] = data
        qlog[n_log, 2] = op
        n_log += 1
    return n_log


@njit(cache=True)
def _take_sample(samples, qp_samples, sample_t, row, now, qbytes, sample_links, out, lt):
    """Record row ``row`` of the samples: the sampled queues' bytes, the time their sending ports
    have been paused so far (a pause still open counts up to ``now``) and every QP's delivered packets."""
    K = sample_links.shape[0]
    for j in range(K):
        link = sample_links[j]
        samples[row, j] = qbytes[link]
        paused = lt[link, C_PAUSED_PS]
        if lt[link, T_PAUSED]:
            paused += now - lt[link, T_PAUSE_T0]
        samples[row, K + j] = paused
    for qp in range(out.shape[0]):
        qp_samples[row, qp] = out[qp, O_DELIVERED]
    sample_t[row] = now


@njit(cache=True)
def _close_intervals(lt, qbytes, qint, now):
    """Count the pauses, waits and queue integrals still open at the end of the run (a pause's
    refresh frames too, as if it ended now: the port is left paused)."""
    for link in range(lt.shape[0]):
        if lt[link, T_PAUSED]:
            _count_pause(lt, link, now)
        if lt[link, T_BLOCK_T0] >= 0:
            lt[link, C_WAIT_PS] += now - lt[link, T_BLOCK_T0]
        qint[link] += qbytes[link] * float(now - lt[link, T_QLAST])


@njit(cache=True)
def _push_reserve(R, host_limit):
    """The most pushes one event can make: a transmission's two, control events, and the start
    of every QP of the flows a finishing flow releases."""
    return R + 4 * host_limit + 16


@njit(cache=True)
def _grow_1d(arr, n):
    out = np.zeros(n, arr.dtype)
    out[: arr.shape[0]] = arr
    return out


# ------------------------------------------------------------------ the rarer events' handlers
# Called from the event loop for events that are a small share of a run (control packets,
# timers, samples): a call that takes arrays costs reference counting, which only the hot
# handlers (departure, arrival, send) cannot afford; they stay written out in _run.
@njit(cache=True, inline="always")
def _schedule(pend_t, pend_d, npend, time_ps, data):
    """Queue a push (inserted at the top of the loop's next iteration); returns the new count."""
    pend_t[npend] = time_ps
    pend_d[npend] = data
    return npend + 1


@njit(cache=True, error_model="numpy")
def _on_pause(lt, link, xoff, now):
    """A pause (``xoff``) or resume frame reached the sending port of ``link``; returns whether the
    port was released (and may send)."""
    if xoff:
        if not lt[link, T_PAUSED]:
            lt[link, T_PAUSED] = True
            lt[link, T_PAUSE_T0] = now
            lt[link, C_PAUSE_FRAMES] += 1
        return False
    if not lt[link, T_PAUSED]:
        return False
    lt[link, T_PAUSED] = False
    _count_pause(lt, link, now)
    return True


@njit(cache=True, error_model="numpy")
def _count_pause(lt, link, now):
    """Count the pause of ``link``'s sending port that began at T_PAUSE_T0 and ends (or is cut by the
    run's end) at ``now``: its time, and the refresh frames the congested side sent while it held the
    port, one every half quanta (L_REFRESH) after the XOFF frame that opened it."""
    dur = now - lt[link, T_PAUSE_T0]
    lt[link, C_PAUSED_PS] += dur
    lt[link, C_PAUSE_FRAMES] += dur // lt[link, L_REFRESH]


@njit(cache=True, error_model="numpy")
def _on_ack(snd, out, qp, seq, nack, now, rto, pend_t, pend_d, npend):
    """An ACK (or a NACK: go back N) of every packet before ``seq``."""
    if nack:
        out[qp, O_SEQ_ERR] += 1
    if seq > snd.acked[qp]:
        snd.acked[qp] = seq
        snd.rto_dl[qp] = now + rto
    if nack and snd.next_seq[qp] > seq and snd.state[qp] == ST_ACTIVE:
        snd.next_seq[qp] = seq  # go back N
        if not snd.send_sched[qp] and not snd.waiting[qp]:
            snd.send_sched[qp] = True
            npend = _schedule(pend_t, pend_d, npend, now, pack(EV_SEND, qp, 0))
    return npend


@njit(cache=True, error_model="numpy")
def _on_rto(snd, out, qpi, qp, now, rto, pend_t, pend_d, npend):
    """The retransmission timer: re-armed while ACKs move its deadline, else go back to the last ACK."""
    snd.rto_pend[qp] = False
    if snd.state[qp] != ST_ACTIVE or snd.acked[qp] >= qpi[qp, Q_NPKTS]:
        return npend
    if now < snd.rto_dl[qp]:
        snd.rto_pend[qp] = True
        return _schedule(pend_t, pend_d, npend, snd.rto_dl[qp], pack(EV_RTO, qp, 0))
    out[qp, O_TIMEOUTS] += 1
    snd.next_seq[qp] = snd.acked[qp]
    snd.rto_pend[qp] = True
    snd.rto_dl[qp] = now + rto
    npend = _schedule(pend_t, pend_d, npend, now + rto, pack(EV_RTO, qp, 0))
    if not snd.send_sched[qp] and not snd.waiting[qp]:
        snd.send_sched[qp] = True
        npend = _schedule(pend_t, pend_d, npend, now, pack(EV_SEND, qp, 0))
    return npend


@njit(cache=True, error_model="numpy")
def _on_cnp(snd, qp, now, gi, gf, pend_t, pend_d, npend):
    """DCQCN's reaction to a CNP (Zhu et al. 2015): alpha up, at most one rate cut per interval. The
    target rate drops to the current rate at a cut only after an increase stage (or at every cut with
    ``G_CLAMP``): a burst of cuts keeps the target it had before the burst."""
    if snd.state[qp] != ST_ACTIVE:
        return npend
    g = gf[GF_G]
    # alpha: decays by (1-g) per quiet interval, then rises by g for this congestion window
    quiet = (now - snd.alpha_t[qp]) // gi[G_ALPHA_INT]
    if quiet > 0:
        snd.alpha[qp] *= (1.0 - g) ** quiet
    snd.alpha[qp] = (1.0 - g) * snd.alpha[qp] + g
    snd.alpha_t[qp] = now
    if now - snd.last_dec[qp] >= gi[G_DEC_INT]:
        snd.last_dec[qp] = now
        if gi[G_CLAMP] or snd.timer_stages[qp] + snd.byte_stages[qp] > 0:
            snd.target[qp] = snd.rate[qp]
        snd.rate[qp] = max(gf[GF_MIN_RATE], snd.rate[qp] * (1.0 - 0.5 * snd.alpha[qp]))
        snd.timer_stages[qp] = 0
        snd.byte_stages[qp] = 0
        snd.bytes_sent[qp] = 0.0
        snd.timer_dl[qp] = now + gi[G_RP_TIMER]
        if not snd.timer_pend[qp]:
            snd.timer_pend[qp] = True
            npend = _schedule(pend_t, pend_d, npend, snd.timer_dl[qp], pack(EV_RPTIMER, qp, 0))
    return npend


@njit(cache=True, error_model="numpy")
def _on_rp_timer(snd, qpi, qpf, qp, now, gi, pend_t, pend_d, npend):
    """DCQCN's rate-increase timer: one stage up, re-armed until the QP is back at line rate."""
    snd.timer_pend[qp] = False
    if snd.state[qp] != ST_ACTIVE:
        return npend
    if now < snd.timer_dl[qp]:
        snd.timer_pend[qp] = True
        return _schedule(pend_t, pend_d, npend, snd.timer_dl[qp], pack(EV_RPTIMER, qp, 0))
    snd.timer_stages[qp] += 1
    snd.target[qp], snd.rate[qp] = _inc(snd.timer_stages[qp], snd.byte_stages[qp], qpf[qp, QF_LINE_Bps],
                                        snd.target[qp], snd.rate[qp], gi[G_FAST], qpf[qp, QF_HAI_Bps],
                                        qpf[qp, QF_AI_Bps])
    if snd.rate[qp] < qpf[qp, QF_LINE_Bps]:
        snd.timer_pend[qp] = True
        snd.timer_dl[qp] = now + gi[G_RP_TIMER]
        npend = _schedule(pend_t, pend_d, npend, snd.timer_dl[qp], pack(EV_RPTIMER, qp, 0))
    return npend


@njit(cache=True)
def _halve_samples(samples, qp_samples, sample_t, n_samples):
    """Keep every other sample (a long run: memory stays bounded); returns how many are left."""
    half = (n_samples + 1) // 2
    for k in range(half):
        samples[k] = samples[2 * k]
        qp_samples[k] = qp_samples[2 * k]
        sample_t[k] = sample_t[2 * k]
    return half


@njit(cache=True, error_model="numpy")
def _run(lt, qbytes, qint, n_used, inp, senders, receivers, samples, qp_samples, sample_t, pkt, qheap, qchunk, qbin,
         qcache, qctr, rng, st, qlog, stop_events):
    """The event loop: handle events until the run ends (returns False), an array is short of room
    or ``stop_events`` events have been handled in all (True; :func:`advance` tells which).

    No array is rebound here: an array variable that is reassigned inside a loop costs numba two
    reference-count calls per iteration, so :func:`simulate` grows the arrays between calls instead.
    The scalar loop state travels in ``st`` (``RUN_*`` columns). The first ``len(qlog)`` pushes and
    pops of the event queue are logged in ``qlog`` (a test checks their order against ``heapq``);
    with ``qlog`` None the ``qlog is not None`` branches are pruned when numba compiles, so a run
    pays nothing for the log.
    """
    n_buf = inp.node_buffer_bytes
    n_hdrm = inp.node_headroom_bytes
    qpi = inp.qp_int
    qpf = inp.qp_float
    r_ptr = inp.route_ptr
    r_src = inp.route_src
    r_link = inp.route_link
    f_qp_ptr = inp.flow_qp_ptr
    f_qp_list = inp.flow_qp_list
    f_dep_ptr = inp.flow_dep_ptr
    f_dep_list = inp.flow_dep_list
    gi = inp.gint
    gf = inp.gfloat
    sample_links = inp.sample_links
    (s_state, s_next, s_acked, s_max_sent, s_send_sched, s_waiting, s_wait_next, s_next_t, s_rate, s_target,
     s_alpha, s_alpha_t, s_last_dec, s_T, s_BC, s_bytes, s_timer_dl, s_timer_pend, s_rto_dl, s_rto_pend) = senders
    r_expected, r_last_cnp, r_nack, r_count, r_max, r_flag, out, hist, f_left, f_deps = receivers
    R = qpi.shape[0]
    route_kind = gi[G_ROUTE]
    cc_on = gi[G_CC] != 0
    ecn_on = gi[G_ECN] != 0
    reliable = gi[G_RELIABLE] != 0
    ooo = gi[G_OOO] != 0
    host_limit = gi[G_HOST_LIMIT]
    ack_every = gi[G_ACK_EVERY]
    rto = gi[G_RTO]
    t_limit = gi[G_T_LIMIT]
    loss = gf[GF_LOSS]
    max_samples = max(gi[G_MAX_SAMPLES], 4)
    queue_cap = qbin.shape[0]  # heap entries, bins and chunks alike
    reserve = _push_reserve(R, host_limit)
    sample_cap = samples.shape[0]
    finished = st[RUN_FINISHED]
    events = st[RUN_EVENTS]
    packets = st[RUN_PACKETS]
    now = st[RUN_NOW]
    timed_out = st[RUN_TIMED_OUT]
    free_head = st[RUN_FREE_HEAD]
    n_free = st[RUN_N_FREE]
    n_samples = st[RUN_N_SAMPLES]
    sample_ps = st[RUN_SAMPLE_PS]
    n_log = st[RUN_LOG]
    short = False
    # Every hot operation (queue push and pop, departure, arrival, send, start of transmission) is
    # written out once, here: numba wraps each call of a helper taking arrays in reference-count
    # calls, affordable only for the rarer events (the _on_* handlers, samples). An event's
    # pushes are queued (pend_t, pend_d) and inserted into the queue at the top of the next iteration,
    # in the order they were queued, so the pop order is what immediate pushes give.
    # A handler that starts a transmission sets start_link (and enq_p to enqueue a packet first); the
    # one start block after the handlers does it. The sender's loop sends one packet per pass and
    # resumes (resume_qp) through that block without popping an event.
    hn = qctr[Q_SIZE]
    seqc = qctr[Q_SEQ]
    n_chunks = qctr[Q_CHUNKS]
    free_chunk = qctr[Q_FREE_CHUNK]
    n_bins = qctr[Q_BINS]
    free_bin = qctr[Q_FREE_BIN]
    rs = rng[0]
    pend_t = np.empty(reserve, np.int64)
    pend_d = np.empty(reserve, np.int64)
    npend = 0
    resume_qp = -1
    while True:
        # ---------------------------------------------------------------- queue the pushes (events.push)
        for j in range(npend):
            et = pend_t[j]
            ed = pend_d[j]
            if qlog is not None:
                n_log = _log_op(qlog, n_log, et, ed, LOG_PUSH)
            slot = hash_slot(et, CACHE_BITS)
            to_heap = True
            if qcache[slot, 0] != et:  # a time not remembered: a plain heap entry, and remember it
                qcache[slot, 0] = et
                qcache[slot, 1] = -1
            elif qcache[slot, 1] < 0:
                # pushed once before: open a bin, one heap entry for all its events
                c = free_chunk
                free_chunk = qchunk[c, LINK]
                n_chunks += 1
                bn = free_bin
                free_bin = qbin[bn, B_HEAD]
                n_bins += 1
                qbin[bn, B_HEAD] = c << CHUNK_SHIFT
                qbin[bn, B_TAIL] = (c << CHUNK_SHIFT) + 1
                qchunk[c, 0] = ed
                qcache[slot, 1] = bn
                ed = pack(BIN_KIND, bn, 0)
            else:
                bn = qcache[slot, 1]
                f = qbin[bn, B_TAIL]
                if f & LINK == LINK:  # the tail chunk is full: chain a fresh one
                    c = free_chunk
                    free_chunk = qchunk[c, LINK]
                    n_chunks += 1
                    qchunk[f >> CHUNK_SHIFT, LINK] = c
                    f = c << CHUNK_SHIFT
                qchunk[f >> CHUNK_SHIFT, f & LINK] = ed
                qbin[bn, B_TAIL] = f + 1
                to_heap = False
            if to_heap:
                es = seqc
                seqc += 1
                i = hn
                hn += 1
                while i > 0:
                    parent = (i - 1) >> 2
                    pt = qheap[TIME, parent]
                    if pt < et or (pt == et and qheap[SEQ, parent] < es):
                        break
                    qheap[TIME, i] = pt
                    qheap[SEQ, i] = qheap[SEQ, parent]
                    qheap[DATA, i] = qheap[DATA, parent]
                    i = parent
                qheap[TIME, i] = et
                qheap[SEQ, i] = es
                qheap[DATA, i] = ed
        npend = 0
        start_link = -1
        enq_p = -1
        if resume_qp >= 0:
            kind = EV_RESUME
            a = resume_qp
            b = 0
            resume_qp = -1
        else:
            if hn <= 0 or finished >= R:
                break
            # room for the pushes, packets and sample one event can need
            if max(hn, n_chunks, n_bins) + reserve > queue_cap or n_free < host_limit + 2 or n_samples >= sample_cap:
                short = True
                break
            if events >= stop_events:  # a chunk's end: the caller reports progress and calls again
                short = True
                break
            # ------------------------------------------------------------ pop the earliest event (events.pop)
            now = qheap[TIME, 0]
            data = qheap[DATA, 0]
            # the next two events' payloads, to prefetch for (-1: not known yet)
            nd1 = np.int64(-1)
            nd2 = np.int64(-1)
            top_stays = False
            if data >> (2 * _BITS) == BIN_KIND:
                bn = (data >> _BITS) & _MASK
                f = qbin[bn, B_HEAD]
                data = qchunk[f >> CHUNK_SHIFT, f & LINK]
                f += 1
                tail = qbin[bn, B_TAIL]
                if f != tail:
                    if f & LINK == LINK:  # the head chunk is spent: on to the next, this one to the free list
                        c = f >> CHUNK_SHIFT
                        f = qchunk[c, LINK] << CHUNK_SHIFT
                        qchunk[c, LINK] = free_chunk
                        free_chunk = c
                        n_chunks -= 1
                    qbin[bn, B_HEAD] = f
                    top_stays = True  # the bin's next event is the next in order
                    nd1 = qchunk[f >> CHUNK_SHIFT, f & LINK]
                    if f + 1 != tail and (f + 1) & LINK != LINK:
                        nd2 = qchunk[f >> CHUNK_SHIFT, (f + 1) & LINK]
                else:
                    # the bin is empty: its chunk and itself to the free lists, forgotten by the cache
                    c = (f - 1) >> CHUNK_SHIFT
                    qchunk[c, LINK] = free_chunk
                    free_chunk = c
                    n_chunks -= 1
                    qbin[bn, B_HEAD] = free_bin
                    free_bin = bn
                    n_bins -= 1
                    slot = hash_slot(now, CACHE_BITS)
                    if qcache[slot, 0] == now:
                        qcache[slot, 0] = -1
            if not top_stays:
                hn -= 1
                if hn > 0:
                    hl = hn
                    et = qheap[TIME, hl]
                    es = qheap[SEQ, hl]
                    i = 0
                    while True:
                        c = 4 * i + 1
                        if c + 3 < hl:
                            # four children: the earliest time without branches (selects), the sequence
                            # numbers only when times tie; the grandchildren's times start loading meanwhile
                            g0 = 4 * c + 1
                            prefetch(qheap, TIME, g0)
                            prefetch(qheap, TIME, g0 + 8)
                            prefetch(qheap, TIME, g0 + 15)
                            t0 = qheap[TIME, c]
                            t1 = qheap[TIME, c + 1]
                            t2 = qheap[TIME, c + 2]
                            t3 = qheap[TIME, c + 3]
                            ia = c + 1 if t1 < t0 else c
                            ta = min(t0, t1)
                            ib = c + 3 if t3 < t2 else c + 2
                            tb = min(t2, t3)
                            best = ib if tb < ta else ia
                            bt = min(ta, tb)
                            if int(t0 == bt) + int(t1 == bt) + int(t2 == bt) + int(t3 == bt) > 1:
                                bs = qheap[SEQ, best]
                                for k in range(c, c + 4):
                                    if qheap[TIME, k] == bt and qheap[SEQ, k] < bs:
                                        best = k
                                        bs = qheap[SEQ, k]
                            else:
                                bs = qheap[SEQ, best]
                        elif c < hl:
                            best = c
                            bt = qheap[TIME, c]
                            bs = qheap[SEQ, c]
                            for k in range(c + 1, hl):
                                tk = qheap[TIME, k]
                                if tk < bt or (tk == bt and qheap[SEQ, k] < bs):
                                    best = k
                                    bt = tk
                                    bs = qheap[SEQ, k]
                        else:
                            break
                        if bt > et or (bt == et and bs > es):
                            break
                        qheap[TIME, i] = bt
                        qheap[SEQ, i] = bs
                        qheap[DATA, i] = qheap[DATA, best]
                        i = best
                    qheap[TIME, i] = et
                    qheap[SEQ, i] = es
                    qheap[DATA, i] = qheap[DATA, hl]
            if qlog is not None:
                n_log = _log_op(qlog, n_log, now, data, LOG_POP)
            kind = data >> (2 * _BITS)
            a = (data >> _BITS) & _MASK
            b = data & _MASK
            if now > t_limit:
                timed_out = 1
                now = t_limit
                break
            events += 1
            # start loading what the next events touch now, so this event's work hides the misses:
            # the packet row two events ahead, the link rows (and a departing packet's ingress row,
            # whose packet row came in during the last event) one ahead
            if nd1 < 0 and hn > 0:
                nd1 = qheap[DATA, 0]
                if nd1 >> (2 * _BITS) == BIN_KIND:
                    f = qbin[(nd1 >> _BITS) & _MASK, B_HEAD]
                    nd1 = qchunk[f >> CHUNK_SHIFT, f & LINK]
            if nd2 >= 0:
                nkind = nd2 >> (2 * _BITS)
                if nkind == EV_ARRIVE:
                    prefetch(pkt, (nd2 >> _BITS) & _MASK, 0)
                    prefetch(lt, nd2 & _MASK, 8)
                    prefetch(lt, nd2 & _MASK, 24)
                elif nkind == EV_TXDONE:
                    prefetch(lt, (nd2 >> _BITS) & _MASK, 16)
            if nd1 >= 0:
                nkind = nd1 >> (2 * _BITS)
                na = (nd1 >> _BITS) & _MASK
                if nkind == EV_ARRIVE:
                    prefetch(pkt, na, 0)
                    prefetch(lt, nd1 & _MASK, 8)
                    prefetch(lt, nd1 & _MASK, 24)
                elif nkind == EV_TXDONE:
                    # its link's state line came in during the last event: the ingress rows it
                    # releases and the packet it serializes next
                    prefetch(lt, na, 0)
                    prefetch(lt, na, 8)
                    n_in = (lt[na, T_BUSY] & 0xFFFFFFFF) - 2
                    if n_in >= 0:
                        prefetch(lt, n_in, 8)
                        prefetch(lt, n_in, 24)
                    n_head = lt[na, T_HEAD]
                    if n_head >= 0:
                        prefetch(pkt, n_head, 0)

        if kind == EV_TXDONE:
            link = a
            # what the packet's switch must release is in the link's row (see the start block), so a
            # departure reads no packet row
            busy = lt[link, T_BUSY]
            lt[link, T_BUSY] = 0
            i = (busy & 0xFFFFFFFF) - 2
            if i >= 0:
                b_in = (busy >> 32) + lt[i, L_HDR]
                if lt[i, L_INTO_SW] != 0:
                    n_used[lt[i, L_DST]] -= b_in
                fc = lt[i, L_FC]
                if fc == FC_PFC:
                    lt[i, T_IN_BYTES] -= b_in
                    if lt[i, T_PAUSE_SENT]:
                        node = lt[i, L_DST]
                        if lt[i, L_XOFF] >= 0:
                            xon = lt[i, L_XON]
                        else:
                            xon = np.int64(gf[GF_PFC_ALPHA] * (n_buf[node] - n_hdrm[node] - n_used[node])) - gi[G_XON_OFFSET]
                        # an emptied ingress resumes whatever the shared buffer holds: the dynamic
                        # level can sit below zero, and nothing of this ingress is left to re-check it
                        if lt[i, T_IN_BYTES] <= xon or lt[i, T_IN_BYTES] == 0:
                            lt[i, T_PAUSE_SENT] = False
                            pend_t[npend] = now + lt[i, L_LAT]
                            pend_d[npend] = pack(EV_PAUSE, i, 0)
                            npend += 1
                elif fc == FC_CREDIT:
                    pend_t[npend] = now + lt[i, L_LAT]
                    pend_d[npend] = pack(EV_CREDIT, i, b_in)
                    npend += 1
            elif lt[link, T_WAIT_HEAD] >= 0 and lt[link, T_QPKTS] < host_limit:
                qp = lt[link, T_WAIT_HEAD]
                lt[link, T_WAIT_HEAD] = s_wait_next[qp]
                if lt[link, T_WAIT_HEAD] < 0:
                    lt[link, T_WAIT_TAIL] = -1
                s_waiting[qp] = False
                if not s_send_sched[qp]:
                    s_send_sched[qp] = True
                    pend_t[npend] = now
                    pend_d[npend] = pack(EV_SEND, qp, 0)
                    npend += 1
            start_link = link

        elif kind == EV_ARRIVE:
            p = a
            link = b
            node = lt[link, L_DST]
            qp = pkt[p, P_QP]
            wire_in = pkt[p, P_LEN] + lt[link, L_HDR]
            if loss > 0.0 and lt[link, L_NET] != 0:
                rs = _xs(rs)
                if _u01(rs) < loss:
                    lt[link, C_DROPS] += 1
                    if lt[link, L_FC] == FC_CREDIT:
                        pend_t[npend] = now + lt[link, L_LAT]
                        pend_d[npend] = pack(EV_CREDIT, link, wire_in)
                        npend += 1
                    pkt[p, P_NEXT] = free_head
                    free_head = p
                    n_free += 1
                    continue
            if node == qpi[qp, Q_DST]:
                # ---------------------------------------------------------------- receiver
                if lt[link, L_FC] == FC_CREDIT:
                    pend_t[npend] = now + lt[link, L_LAT]
                    pend_d[npend] = pack(EV_CREDIT, link, wire_in)
                    npend += 1
                seq = pkt[p, P_SEQ]
                npk = qpi[qp, Q_NPKTS]
                delay = now - pkt[p, P_T0]
                marked = pkt[p, P_ECN] != 0
                pkt[p, P_NEXT] = free_head
                free_head = p
                n_free += 1
                if s_state[qp] == ST_DONE and out[qp, O_FINISH] >= 0:
                    out[qp, O_DUP] += 1
                    continue
                accepted = False
                if ooo:
                    idx = qpi[qp, Q_RECV_OFF] + seq
                    if r_flag[idx]:
                        out[qp, O_DUP] += 1
                    else:
                        accepted = True
                        r_flag[idx] = True
                        r_count[qp] += 1
                        if seq < r_max[qp]:
                            out[qp, O_REORDERED] += 1
                        else:
                            r_max[qp] = seq
                        e = r_expected[qp]
                        off = qpi[qp, Q_RECV_OFF]
                        while e < npk and r_flag[off + e]:
                            e += 1
                        r_expected[qp] = e
                    done = r_count[qp] == npk
                else:
                    e = r_expected[qp]
                    if seq == e:
                        accepted = True
                        r_expected[qp] = e + 1
                        r_nack[qp] = False
                    elif seq > e:
                        out[qp, O_OOS] += 1
                        if reliable and not r_nack[qp]:
                            r_nack[qp] = True
                            pend_t[npend] = now + qpi[qp, Q_CTRL_LAT]
                            pend_d[npend] = pack(EV_NACK, qp, e)
                            npend += 1
                    else:
                        out[qp, O_DUP] += 1
                    done = r_expected[qp] == npk
                if marked:
                    out[qp, O_ECN_RX] += 1
                    if cc_on and now - r_last_cnp[qp] >= gi[G_CNP_INT]:
                        r_last_cnp[qp] = now
                        out[qp, O_CNP_SENT] += 1
                        pend_t[npend] = now + qpi[qp, Q_CTRL_LAT]
                        pend_d[npend] = pack(EV_CNP, qp, 0)
                        npend += 1
                if accepted:
                    out[qp, O_DELIVERED] += 1
                    out[qp, O_DELAY_SUM] += delay
                    d_ns = delay / 1000.0
                    bin_ = int(8.0 * np.log2(1.0 + d_ns))
                    hist[min(bin_, DELAY_BINS - 1)] += 1
                    e = r_expected[qp]
                    if reliable and (e % ack_every == 0 or e == npk or ooo):
                        pend_t[npend] = now + qpi[qp, Q_CTRL_LAT]
                        pend_d[npend] = pack(EV_ACK, qp, e)
                        npend += 1
                if done and out[qp, O_FINISH] < 0:
                    out[qp, O_FINISH] = now
                    s_state[qp] = ST_DONE
                    finished += 1
                    f = qpi[qp, Q_FLOW]
                    f_left[f] -= 1
                    if f_left[f] == 0:
                        for k in range(f_dep_ptr[f], f_dep_ptr[f + 1]):
                            d = f_dep_list[k]
                            f_deps[d] -= 1
                            if f_deps[d] == 0:
                                for k2 in range(f_qp_ptr[d], f_qp_ptr[d + 1]):
                                    q2 = f_qp_list[k2]
                                    pend_t[npend] = max(now, qpi[q2, Q_RELEASE]) + qpi[q2, Q_DELAY]
                                    pend_d[npend] = pack(EV_START, q2, 0)
                                    npend += 1
                continue
            # -------------------------------------------------------------------- forwarding
            # the link out of node: the row's entries leaving it (one, or a choice per packet)
            lo = r_ptr[qp]
            hi = r_ptr[qp + 1]
            ra = lo
            rb = hi
            while ra < rb:
                mid = (ra + rb) >> 1
                if r_src[mid] < node:
                    ra = mid + 1
                else:
                    rb = mid
            c = ra
            while c < hi and r_src[c] == node:
                c += 1
            nr = c - ra
            if nr <= 1:
                m = r_link[ra] if nr == 1 else -1
            else:
                rs = _xs(rs)
                rstart = int(_u01(rs) * nr)
                m = r_link[ra + rstart]
                if route_kind == ROUTE_ADAPTIVE:
                    for k in range(1, nr):
                        cand = r_link[ra + (rstart + k) % nr]
                        if qbytes[cand] < qbytes[m]:
                            m = cand
            if lt[link, L_INTO_SW] != 0:
                fc = lt[link, L_FC]
                if fc == FC_NONE:
                    free_buf = n_buf[node] - n_used[node]
                    if wire_in > free_buf or qbytes[m] + wire_in > gf[GF_BUF_ALPHA] * free_buf:
                        lt[m, C_DROPS] += 1
                        pkt[p, P_NEXT] = free_head
                        free_head = p
                        n_free += 1
                        continue
                elif fc == FC_PFC:
                    if (lt[link, T_PAUSE_SENT] and lt[link, T_IN_BYTES] + wire_in > lt[link, T_PAUSE_LEVEL] + lt[link, L_HDRM]) \
                            or n_used[node] + wire_in > n_buf[node]:
                        lt[m, C_DROPS] += 1  # headroom overrun: the headroom was too small
                        pkt[p, P_NEXT] = free_head
                        free_head = p
                        n_free += 1
                        continue
                    lt[link, T_IN_BYTES] += wire_in
                    if not lt[link, T_PAUSE_SENT]:
                        if lt[link, L_XOFF] >= 0:
                            xoff = lt[link, L_XOFF]
                        else:
                            xoff = np.int64(gf[GF_PFC_ALPHA] * (n_buf[node] - n_hdrm[node] - n_used[node]))
                        if lt[link, T_IN_BYTES] > xoff:
                            lt[link, T_PAUSE_SENT] = True
                            lt[link, T_PAUSE_LEVEL] = lt[link, T_IN_BYTES]
                            pend_t[npend] = now + lt[link, L_LAT]
                            pend_d[npend] = pack(EV_PAUSE, link, 1)
                            npend += 1
                n_used[node] += wire_in
            pkt[p, P_IN] = link
            enq_p = p
            start_link = m

        elif kind == EV_SEND or kind == EV_START or kind == EV_RESUME:
            qp = a
            if kind == EV_START:
                if s_state[qp] != ST_WAIT:
                    continue
                s_state[qp] = ST_ACTIVE
                s_alpha_t[qp] = now
                if qpi[qp, Q_NPKTS] == 0:
                    out[qp, O_FINISH] = now
                    out[qp, O_FIRST_TX] = now
                    s_state[qp] = ST_DONE
                    finished += 1
                    f = qpi[qp, Q_FLOW]
                    f_left[f] -= 1
                    continue
            elif kind == EV_SEND:
                s_send_sched[qp] = False
            if s_state[qp] != ST_ACTIVE:
                continue
            first = qpi[qp, Q_FIRST]
            npk = qpi[qp, Q_NPKTS]
            # one pass of the send loop: a packet sent resumes it after the start block
            if s_next[qp] < npk:
                if lt[first, T_QPKTS] >= host_limit:
                    if not s_waiting[qp]:
                        s_waiting[qp] = True
                        s_wait_next[qp] = -1
                        if lt[first, T_WAIT_TAIL] >= 0:
                            s_wait_next[lt[first, T_WAIT_TAIL]] = qp
                        else:
                            lt[first, T_WAIT_HEAD] = qp
                        lt[first, T_WAIT_TAIL] = qp
                    continue
                if cc_on and now < s_next_t[qp]:
                    if not s_send_sched[qp]:
                        s_send_sched[qp] = True
                        pend_t[npend] = s_next_t[qp]
                        pend_d[npend] = pack(EV_SEND, qp, 0)
                        npend += 1
                    continue
                if n_free == 0:
                    if not s_send_sched[qp]:
                        s_send_sched[qp] = True
                        pend_t[npend] = now
                        pend_d[npend] = pack(EV_SEND, qp, 0)
                        npend += 1
                    continue
                seq = s_next[qp]
                s_next[qp] = seq + 1
                if seq < s_max_sent[qp]:
                    out[qp, O_RETX] += 1
                else:
                    s_max_sent[qp] = seq + 1
                p = free_head
                free_head = pkt[p, P_NEXT]
                n_free -= 1
                packets += 1
                length = qpi[qp, Q_LAST_LEN] if seq == npk - 1 else qpi[qp, Q_MTU]
                pkt[p, P_QP] = qp
                pkt[p, P_SEQ] = seq
                pkt[p, P_LEN] = length
                pkt[p, P_IN] = -1
                pkt[p, P_ECN] = 0
                pkt[p, P_T0] = now
                if out[qp, O_FIRST_TX] < 0:
                    out[qp, O_FIRST_TX] = now
                wire = length + lt[first, L_HDR]
                if cc_on:
                    s_next_t[qp] = max(s_next_t[qp], now) + np.int64(wire * 1e12 / s_rate[qp] + 0.5)
                    s_bytes[qp] += wire
                    if s_bytes[qp] >= gf[GF_BYTE_COUNTER]:
                        s_bytes[qp] -= gf[GF_BYTE_COUNTER]
                        s_BC[qp] += 1
                        s_target[qp], s_rate[qp] = _inc(s_T[qp], s_BC[qp], qpf[qp, QF_LINE_Bps], s_target[qp], s_rate[qp],
                                                        gi[G_FAST], qpf[qp, QF_HAI_Bps], qpf[qp, QF_AI_Bps])
                if reliable and not s_rto_pend[qp]:
                    s_rto_pend[qp] = True
                    s_rto_dl[qp] = now + rto
                    pend_t[npend] = now + rto
                    pend_d[npend] = pack(EV_RTO, qp, 0)
                    npend += 1
                enq_p = p
                start_link = first
                resume_qp = qp

        elif kind == EV_PAUSE:
            if _on_pause(lt, a, b == 1, now):
                start_link = a

        elif kind == EV_CREDIT:
            lt[a, T_CREDITS] += b
            start_link = a

        elif kind == EV_ACK or kind == EV_NACK:
            npend = _on_ack(senders, out, a, b, kind == EV_NACK, now, rto, pend_t, pend_d, npend)

        elif kind == EV_RTO:
            npend = _on_rto(senders, out, qpi, a, now, rto, pend_t, pend_d, npend)

        elif kind == EV_CNP:
            out[a, O_CNP_HANDLED] += 1
            if cc_on:
                npend = _on_cnp(senders, a, now, gi, gf, pend_t, pend_d, npend)

        elif kind == EV_RPTIMER:
            npend = _on_rp_timer(senders, qpi, qpf, a, now, gi, pend_t, pend_d, npend)

        elif kind == EV_SAMPLE:
            if n_samples >= max_samples - 1:  # a long run: sample half as often, memory stays bounded
                n_samples = _halve_samples(samples, qp_samples, sample_t, n_samples)
                sample_ps *= 2
            _take_sample(samples, qp_samples, sample_t, n_samples, now, qbytes, sample_links, out, lt)
            n_samples += 1
            if finished < R:
                pend_t[npend] = now + sample_ps
                pend_d[npend] = pack(EV_SAMPLE, 0, 0)
                npend += 1

        # -------------------------------------------------------------------- start transmission
        if start_link >= 0:
            link = start_link
            if enq_p >= 0:
                # enqueue packet enq_p at the tail of link's queue
                p = enq_p
                pkt[p, P_NEXT] = -1
                tail = lt[link, T_TAIL]
                if tail >= 0:
                    pkt[tail, P_NEXT] = p
                else:
                    lt[link, T_HEAD] = p
                lt[link, T_TAIL] = p
                lt[link, T_QPKTS] += 1
                qint[link] += qbytes[link] * float(now - lt[link, T_QLAST])
                lt[link, T_QLAST] = now
                q = qbytes[link] + (pkt[p, P_LEN] + lt[link, L_HDR])
                qbytes[link] = q
                if q > lt[link, C_QMAX]:
                    lt[link, C_QMAX] = q
            # serialize the head packet if the port is free, unpaused and has credits
            if lt[link, T_BUSY] == 0 and lt[link, T_HEAD] >= 0:
                p = lt[link, T_HEAD]
                wire = pkt[p, P_LEN] + lt[link, L_HDR]
                fc = lt[link, L_FC]
                if lt[link, T_PAUSED] != 0 or (fc == FC_CREDIT and lt[link, T_CREDITS] < wire):
                    if lt[link, T_BLOCK_T0] < 0:
                        lt[link, T_BLOCK_T0] = now
                else:
                    if lt[link, T_BLOCK_T0] >= 0:
                        lt[link, C_WAIT_PS] += now - lt[link, T_BLOCK_T0]
                        lt[link, T_BLOCK_T0] = -1
                    nxt = pkt[p, P_NEXT]
                    lt[link, T_HEAD] = nxt
                    if nxt < 0:
                        lt[link, T_TAIL] = -1
                    lt[link, T_QPKTS] -= 1
                    qint[link] += qbytes[link] * float(now - lt[link, T_QLAST])
                    lt[link, T_QLAST] = now
                    # no C_QMAX check: a dequeue only shrinks the queue, and every enqueue updated the maximum
                    q = qbytes[link] - wire
                    qbytes[link] = q
                    if ecn_on and lt[link, L_SRC_SW] != 0:
                        # marked as it leaves, from the bytes queued behind it (see _red_mark)
                        rs, marked = _red_mark(rs, q, lt[link, L_KMIN], lt[link, L_KMAX], lt[link, L_PMAX_FX])
                        if marked:
                            # a switch counts the marks its own WRED makes, not the CE packets it forwards
                            pkt[p, P_ECN] = 1
                            lt[link, C_ECN] += 1
                    if fc == FC_CREDIT:
                        lt[link, T_CREDITS] -= wire
                    # busy, with the packet's length and ingress link (+2, so idle is 0) for its departure
                    lt[link, T_BUSY] = (pkt[p, P_LEN] << 32) | (pkt[p, P_IN] + 2)
                    t_end = now + ((wire * lt[link, L_PPB_FX] + (1 << (FX_SHIFT - 1))) >> FX_SHIFT)
                    lt[link, C_TX_BYTES] += pkt[p, P_LEN]
                    lt[link, C_TX_PKTS] += 1
                    pend_t[npend] = t_end
                    pend_d[npend] = pack(EV_TXDONE, link, p)
                    pend_t[npend + 1] = t_end + lt[link, L_LAT]
                    pend_d[npend + 1] = pack(EV_ARRIVE, p, link)
                    npend += 2
    qctr[Q_SIZE] = hn
    qctr[Q_SEQ] = seqc
    qctr[Q_CHUNKS] = n_chunks
    qctr[Q_FREE_CHUNK] = free_chunk
    qctr[Q_BINS] = n_bins
    qctr[Q_FREE_BIN] = free_bin
    rng[0] = rs
    st[RUN_FINISHED] = finished
    st[RUN_EVENTS] = events
    st[RUN_PACKETS] = packets
    st[RUN_NOW] = now
    st[RUN_TIMED_OUT] = timed_out
    st[RUN_FREE_HEAD] = free_head
    st[RUN_N_FREE] = n_free
    st[RUN_N_SAMPLES] = n_samples
    st[RUN_SAMPLE_PS] = sample_ps
    st[RUN_LOG] = n_log
    return short
