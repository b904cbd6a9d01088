"""ECN marking at a switch egress: RED's law, applied as a packet leaves its queue.

The packet is marked from the bytes it leaves queued behind it as it starts to serialize, as the
HPCC simulator's ``SwitchNode::SwitchNotifyDequeue`` does (see
:func:`gpuwait.engine.packet.core._red_mark`), not from the bytes it found ahead on arrival.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpuwait.engine.packet import PacketParams, simulate_packets
from gpuwait.engine.packet import core as C
from gpuwait.spec import ClusterSpec, RoutingSpec
from gpuwait.topology import build_cluster
from gpuwait.transport import TRANSPORTS
from gpuwait.workload.traffic import FlowTable
from tests.engine.packet.test_packet_engine import fabric

KMIN_BYTES, KMAX_BYTES = 100_000, 400_000
SEED = np.uint64(88172645463325252)


@pytest.mark.parametrize("queue_bytes", [0, KMIN_BYTES, KMAX_BYTES + 1, 10 * KMAX_BYTES])
def test_red_outside_kmin_kmax_is_certain_and_draws_nothing(queue_bytes):
    rs, marked = C._red_mark(SEED, queue_bytes, KMIN_BYTES, KMAX_BYTES, 1 << 32)
    assert rs == SEED  # no draw: the generator's sequence is the same whatever these queues are
    assert marked == (queue_bytes > KMAX_BYTES)


def test_red_between_kmin_and_kmax_marks_with_pmax_times_the_excess():
    # midway between Kmin and Kmax with Pmax 0.2: p = 0.1; one draw per packet
    n, rs, marks = 20_000, SEED, 0
    pmax_fx = round(0.2 * 2.0**32)
    for _ in range(n):
        rs_next, marked = C._red_mark(rs, (KMIN_BYTES + KMAX_BYTES) // 2, KMIN_BYTES, KMAX_BYTES, pmax_fx)
        assert rs_next == C._xs(rs)
        # numba hands a uint64 back as a Python int: typed int64 on the next call unless rewrapped
        rs, marks = np.uint64(rs_next), marks + marked
    assert abs(marks - 0.1 * n) < 4 * np.sqrt(n * 0.1 * 0.9)


def _late_flow_behind_a_queue(k_packets: float):
    """a, b (s1, s2 -> s0) send 200 packets each from t = 0: two arrive at leaf0->s0.nic0 for every
    one that leaves, so its queue grows to 199 packets by ~67 us, then drains; c (s3 -> s0) sends 4
    packets from 80 us, which arrive behind ~160 packets and are the queue's last. One packet size,
    Kmin = Kmax = K (no random draw) and no congestion control (marks change no sending)."""
    topo = fabric()
    nics = topo.nic_node[:, 0].astype(np.int64)
    tp = TRANSPORTS["rocev2"]
    wire = tp.mtu_bytes + int(tp.header_bytes)
    flows = FlowTable(["a", "b", "c"], nics[1:4], np.full(3, nics[0]), np.array([200, 200, 4]) * float(tp.mtu_bytes),
                      np.array([0, 0, 80e-6]), np.full(3, np.inf), [[], [], []])
    k_bytes = k_packets * wire
    params = PacketParams(congestion_control="none", ecn=True, ecn_kmin_bytes=k_bytes, ecn_kmax_bytes=k_bytes,
                          queue_sample_interval_s=1e-6)
    run = simulate_packets(topo, flows, RoutingSpec(), tp, params)
    port = topo.link_id("leaf0->s0.nic0")
    assert run.packets == 404 and run.drops.sum() == 0 and run.pause_frames.sum() == 0
    t_s, q_bytes = run.queue_depth(port)
    return run, port, run.qp_counter_table()["np_ecn_marked_roce_packets"], t_s, q_bytes / wire


def test_a_queue_above_kmax_marks_every_packet_that_leaves_one_behind():
    # K half a packet: a departure is marked when a packet stays queued behind it. The queue is busy
    # from the first packet to the last, so only those two leave it empty: 404 - 2 marks; c's last
    # packet is the queue's last, its first three each leave c's next ones behind.
    run, port, per_qp, _, _ = _late_flow_behind_a_queue(0.5)
    assert run.ecn_marked_packets[port] == run.ecn_marked_packets.sum() == per_qp.sum() == 402
    assert per_qp[2] == 3


def test_a_queue_below_kmin_marks_nothing():
    run, _, per_qp, _, q_packets = _late_flow_behind_a_queue(200.5)
    assert q_packets.max() == 199
    assert run.ecn_marked_packets.sum() == per_qp.sum() == 0


def test_marks_follow_the_queue_at_departure_not_at_arrival():
    # K = 20.5 packets: a departure is marked when it leaves 21 or more behind. c's packets arrive
    # behind 140+ packets (a mark at enqueue marked all four: the engine did before) but leave at
    # most three behind: none is marked. The unmarked departures are those leaving 0..20 behind:
    # 21 as the queue drains (c's four among them) and 20 as it grows (0, then 2..20: two packets
    # arrive in lockstep before each departure). A mark at enqueue gave the same 363 at this port
    # (every rise of the queue through a level is matched by a fall through it), so only who is marked moves.
    run, port, per_qp, t_s, q_packets = _late_flow_behind_a_queue(20.5)
    arriving = (t_s >= 80e-6) & (t_s <= 84e-6)
    assert q_packets[arriving].min() > 140
    assert per_qp[2] == 0
    assert run.ecn_marked_packets[port] == per_qp.sum() == 404 - 21 - 20


def test_a_port_counts_the_marks_it_made_not_those_it_forwards():
    """A switch's ECN counter is its WRED's (SAI_QUEUE_STAT_WRED_ECN_MARKED_PACKETS, opencomputeproject/SAI
    inc/saiqueue.h; SONiC's `show queue wredcounters`): a packet marked upstream and forwarded is not counted
    again. One flow from a 100 Gb/s NIC into 50 Gb/s switch links queues only at its leaf's uplink; the ports
    after it forward the marked packets and count none, so the ports' marks add up to the receiver's."""
    topo = build_cluster(ClusterSpec.model_validate({
        "servers": 8, "server": {"gpus": 1, "nics": 1, "nic_speed": "100Gbps", "pcie_switches": 1, "cpus": 1},
        "fabric": {"tiers": 2, "switch_radix": 8, "switch_speed": "50Gbps", "oversubscription": 2}}))
    nics = topo.nic_node[:, 0].astype(np.int64)
    tp = TRANSPORTS["rocev2"]
    wire = tp.mtu_bytes + int(tp.header_bytes)
    flows = FlowTable(["a"], nics[4:5], nics[0:1], np.array([200.0 * tp.mtu_bytes]), np.zeros(1), np.full(1, np.inf),
                      [[]])
    params = PacketParams(congestion_control="none", ecn=True, ecn_kmin_bytes=0.5 * wire, ecn_kmax_bytes=0.5 * wire)
    run = simulate_packets(topo, flows, RoutingSpec(), tp, params)
    received = int(run.qp_counter_table()["np_ecn_marked_roce_packets"].sum())
    marking = np.flatnonzero(run.ecn_marked_packets)
    assert received > 100
    assert [topo.link_name(int(link)).startswith("leaf") for link in marking] == [True]
    assert run.ecn_marked_packets.sum() == received
