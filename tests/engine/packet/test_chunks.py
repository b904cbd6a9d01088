"""The event loop cut into chunks gives the results of one uninterrupted call, bit for bit.

A packet run with a progress display runs its event loop in chunks (:func:`~gpuwait.engine.packet.core.advance`
stops after N events and returns the loop's whole state; Python reports progress and calls again).
A chunk ends only between events, so any chunking must handle the same events in the same order:
every output field is compared with one call's, for chunks of 1 event (the harshest cut: a stop
after every event, including right after each sample and before each array growth), 1,000 events,
and no limit, on an incast (PFC pauses, ECN marks, DCQCN) and a sprayed permutation over
InfiniBand credits (out-of-order receivers).
"""

from __future__ import annotations

import numpy as np
import pytest

from gpuwait.engine.packet import core as C
from gpuwait.engine.packet import simulate_packets
from gpuwait.engine.packet.params import PacketParams
from gpuwait.engine.packet.run import PacketProgress, engine_inputs, resolve
from gpuwait.routing.paths import route_flows
from gpuwait.spec import RoutingSpec
from gpuwait.spec.cluster import ClusterSpec
from gpuwait.topology.presets import build_cluster
from gpuwait.transport import TRANSPORTS
from gpuwait.workload.traffic import FlowTable


def _case(kind: str):
    topo = build_cluster(ClusterSpec.model_validate({
        "servers": 16, "server": {"gpus": 1, "nics": 1, "nic_speed": "100Gbps", "pcie_switches": 1, "cpus": 1},
        "fabric": {"tiers": 2, "switch_radix": 8}}))
    nics = topo.nic_node[:, 0].astype(np.int64)
    if kind == "incast":  # seven senders into one receiver: its port queues, pauses and marks
        src, dst, size, routing, transport = nics[1:8], np.full(7, nics[0]), 4e5, "ecmp", "rocev2"
    else:  # every server to the one four further on, sprayed over the spines
        src, dst, size, routing, transport = nics, nics[np.roll(np.arange(len(nics)), 4)], 1e5, "spray", "infiniband"
    n = len(src)
    flows = FlowTable([f"f{i}" for i in range(n)], src, dst, np.full(n, size), np.linspace(0, 2e-6, n),
                      np.full(n, np.inf), [[] for _ in range(n)])
    return topo, flows, RoutingSpec(kind=routing), TRANSPORTS[transport]


def _inputs(kind: str):
    topo, flows, spec, tp = _case(kind)
    routes = route_flows(topo, spec, flows.src, flows.dst, transport=tp.name)
    params = PacketParams(queue_sample_interval_s=2e-7)  # many samples: chunks also cut around them
    if kind == "incast":  # an XOFF low enough that PFC pauses while DCQCN also marks and cuts
        params = PacketParams(queue_sample_interval_s=2e-7, pfc_xoff_bytes=100_000, pfc_xon_bytes=50_000)
    res = resolve(params, tp, spec)
    inp = engine_inputs(topo, flows, routes, spec, tp, params, res, seed=5)
    total = int(inp.qp_int[:, C.Q_NPKTS].sum())
    return inp, total if res.out_of_order else 0


def _chunked(inp, recv_total, chunk_events):
    # a small pool and queue (64, 16): the arrays grow between chunks too
    loop = C.start(inp, recv_total, 64, 16, None)
    calls, ended = 0, False
    while not ended:
        loop, ended = C.advance(loop, inp, chunk_events, None)
        calls += 1
    return C.finish(loop, inp, None), calls


@pytest.mark.parametrize("kind", ["incast", "permutation"])
def test_chunks_change_no_result(kind):
    inp, recv_total = _inputs(kind)
    whole = C.simulate(inp, recv_total, 64, 16, None)
    events = int(whole.stats[C.S_EVENTS])
    assert events > 2_000
    if kind == "incast":  # the case exercises what it is for
        assert whole.link_counters[:, C.C_PAUSE_FRAMES - C.C_FIRST].sum() > 0
        assert whole.link_counters[:, C.C_ECN - C.C_FIRST].sum() > 0
    else:
        assert whole.qp_out[:, C.O_REORDERED].sum() > 0
    for chunk in (1, 1000, C.UNLIMITED_EVENTS):
        got, calls = _chunked(inp, recv_total, chunk)
        assert -(-events // chunk) <= calls <= events // chunk + 1  # each call but the last stops at its limit
        for field in whole._fields:
            np.testing.assert_array_equal(getattr(got, field), getattr(whole, field), err_msg=f"{field}, chunk {chunk}")


def test_progress_callback_sees_the_run_advance():
    topo, flows, spec, tp = _case("incast")
    seen: list[PacketProgress] = []
    plain = simulate_packets(topo, flows, spec, tp, seed=2)
    watched = simulate_packets(topo, flows, spec, tp, seed=2, progress=seen.append, chunk_events=500)
    assert len(seen) >= plain.events // 500
    assert [p.events for p in seen] == sorted(p.events for p in seen)
    assert seen[-1].events == plain.events and seen[-1].delivered_packets == seen[-1].packets == plain.packets
    assert seen[-1].simulated_s == pytest.approx(plain.end_s)
    assert 0 < seen[0].fraction < 1 and seen[-1].fraction == 1.0
    assert all(p.events_per_s > 0 for p in seen) and seen[-1].elapsed_s >= seen[0].elapsed_s
    # the fluid bound: the receiver's link carries all 7 x 400 kB at 100 Gb/s (less headers) at the least
    assert seen[-1].min_end_s >= 7 * 4e5 / 12.5e9
    assert "100% delivered" in seen[-1].describe() and "M events/s" in seen[-1].describe()
    for name in ("qp_finish_s", "link_counters", "queue_bytes", "qp_delivered_packets", "pause_samples_s"):
        np.testing.assert_array_equal(getattr(watched, name), getattr(plain, name), err_msg=name)
