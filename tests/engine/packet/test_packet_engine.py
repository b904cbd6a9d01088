"""The packet engine: what it must show (issue 6) on small fabrics, and the inputs it refuses.

Small on purpose: every run here takes milliseconds once numba's compiled loop is cached
(the first test of a fresh checkout pays the compile, about 25 s).
"""

from __future__ import annotations

import numpy as np
import pytest

from gpuwait.engine.base import message_overhead_s
from gpuwait.engine.flow_run import simulate_flows
from gpuwait.engine.packet import PacketParams, packet_params, simulate_packets
from gpuwait.engine.packet import core as C
from gpuwait.engine.packet.run import engine_inputs, resolve
from gpuwait.errors import SimulationError, SpecError
from gpuwait.routing.paths import route_flows
from gpuwait.spec import PatternSpec, RoutingSpec
from gpuwait.spec.cluster import ClusterSpec
from gpuwait.topology.presets import build_cluster
from gpuwait.transport import TRANSPORTS
from gpuwait.workload.traffic import FlowTable, pattern_flows

# DCQCN that converges within a few ms of simulated time: §5.1a's structure, faster increase
FAST_DCQCN = dict(rate_ai_bps_per_25gbps=100e6, fast_recovery_steps=5, rp_timer_s=20e-6)


def fabric(servers: int = 8, radix: int = 8, tiers: int = 2, switch_speed: str | None = None):
    """Servers with one GPU and one 100 Gb/s NIC; radix 8 puts 4 servers on a leaf."""
    return build_cluster(ClusterSpec.model_validate({
        "servers": servers, "server": {"gpus": 1, "nics": 1, "nic_speed": "100Gbps", "pcie_switches": 1, "cpus": 1},
        "fabric": {"tiers": tiers, "switch_radix": radix, "switch_speed": switch_speed}}))


def table(src, dst, size_bytes) -> FlowTable:
    n = len(src)
    return FlowTable([f"f{i}" for i in range(n)], np.asarray(src, np.int64), np.asarray(dst, np.int64),
                     np.broadcast_to(np.asarray(size_bytes, float), (n,)).copy(), np.zeros(n), np.full(n, np.inf),
                     [[] for _ in range(n)])


@pytest.fixture(scope="module")
def topo():
    return fabric()


@pytest.fixture(scope="module")
def nics(topo):
    return topo.nic_node[:, 0].astype(np.int64)


def jain(x: np.ndarray) -> float:
    return float(x.sum() ** 2 / (len(x) * (x ** 2).sum()))


# ------------------------------------------------------------------------------------------ results
def test_one_long_flow_matches_the_closed_form(topo, nics):
    transport = TRANSPORTS["rocev2"]
    size = 8e6
    run = simulate_packets(topo, table(nics[:1], nics[4:5], size), RoutingSpec(), transport)
    rate = 100e9 / 8
    overhead = transport.header_bytes / transport.mtu_bytes
    expected = size * (1 + overhead) / rate + float(run.routes.path_latency_s[0]) + message_overhead_s(topo, transport)
    assert run.flow_time_s[0] == pytest.approx(expected, rel=0.01)
    assert run.packets == int(np.ceil(size / transport.mtu_bytes))
    assert run.link_bytes[run.routes.links_of_row(0)[0]] == pytest.approx(size)


def test_permutation_mean_fct_within_5_percent_of_the_flow_engine():
    topo = fabric(servers=16, radix=8, tiers=3)
    flows = pattern_flows(topo, PatternSpec(kind="permutation", size="4MB", seed=2))
    transport = TRANSPORTS["infiniband"]
    packet = simulate_packets(topo, flows, RoutingSpec(kind="ecmp"), transport)
    flow = simulate_flows(topo, flows, RoutingSpec(kind="ecmp"), transport)
    assert packet.flow_time_s.mean() == pytest.approx(flow.flow_time_s.mean(), rel=0.05)
    # the same per-link schema: bytes per link agree too (no loss, no retransmission)
    assert np.allclose(packet.link_bytes, flow.link_bytes, rtol=1e-6, atol=1.0)
    assert set(packet.fct_percentiles_s()) == {"p50", "p99", "p99.9"}


def test_dcqcn_converges_to_a_fair_share_with_the_queue_between_kmin_and_kmax(topo, nics):
    flows = table(nics[1:5], np.full(4, nics[0]), 20e6)
    params = PacketParams(dcqcn=FAST_DCQCN, queue_sample_interval_s=10e-6)
    run = simulate_packets(topo, flows, RoutingSpec(), TRANSPORTS["rocev2"], params)
    end = run.flow_finish_s.min()
    assert jain(run.qp_rate_Bps(0.5 * end, 0.95 * end)) >= 0.95
    t, q = run.queue_depth("leaf0->s0.nic0")
    kmin, kmax = TRANSPORTS["rocev2"].ecn.thresholds_bytes(100e9 / 8)
    assert kmin <= np.median(q[(t > 0.5 * end) & (t < 0.95 * end)]) <= kmax
    assert run.qp_counter_table()["np_cnp_sent"].sum() == run.qp_counter_table()["rp_cnp_handled"].sum() > 0


def test_dcqcn_keeps_its_target_through_a_burst_of_cuts(topo, nics):
    # The HPCC simulator's DCQCN (CLAMP_TARGET_RATE 0 in simulation/run.py; CheckRateDecreaseMlx in
    # rdma-hw.cc), whose dcqcn_paper settings are the defaults: a cut lowers the target rate only when
    # a rate-increase stage ran since the previous cut, so fast recovery climbs back towards the rate
    # before the burst. Clamping at every cut (the paper's rule, an option) leaves a 3:1 incast crawling
    # long after its queue drained: 1.9 ms against 1.15 ms (7.0 ms while marks were made at enqueue,
    # whose stale signal went on cutting, 7 times per QP instead of 4-5, for a drain time after the
    # queue had fallen).
    flows = table(nics[1:4], np.full(3, nics[0]), 4e6)
    fluid = simulate_flows(topo, flows, RoutingSpec(), TRANSPORTS["rocev2"]).makespan_s
    runs = [simulate_packets(topo, flows, RoutingSpec(), TRANSPORTS["rocev2"], PacketParams(dcqcn={"clamp_target_rate": clamp}))
            for clamp in (False, True)]
    assert runs[0].qp_counter_table()["rp_cnp_handled"].min() > 1  # a burst of cuts
    assert runs[0].makespan_s < 1.3 * fluid
    assert runs[1].makespan_s > 1.5 * fluid


def test_an_emptied_ingress_resumes_even_when_the_shared_buffer_is_busy():
    # The dynamic XON level (alpha x free shared buffer - offset) falls below zero while other ingresses
    # hold the buffer; an ingress whose last packet leaves then must still resume (the HPCC simulator's
    # switch-mmu.cc CheckShouldResume: ingress bytes 0), or it stays paused when the buffer frees up and
    # the lossless fabric deadlocks. A 15:1 incast across leaves behind 400 Gb/s switch links, whose
    # headroom leaves a 0.6 MB buffer little to share, must finish, without a drop.
    topo = fabric(servers=16, switch_speed="400Gbps")
    nics = topo.nic_node[:, 0].astype(np.int64)
    flows = table(nics[1:16], np.full(15, nics[0]), 1e6)
    run = simulate_packets(topo, flows, RoutingSpec(), TRANSPORTS["rocev2"],
                           PacketParams(switch_buffer_bytes=0.6e6, congestion_control="none", max_time_s=5e-3))
    assert not run.timed_out and np.isfinite(run.flow_finish_s).all()
    assert run.drops.sum() == 0 and run.pause_frames.sum() > 0
    assert run.makespan_s == pytest.approx(15e6 * (1 + 82 / 4096) / 12.5e9, rel=0.05)  # the receiver's port stays busy


def incast(topo, nics, transport: str, **params):
    """s1, s2, s3 -> s0 on one leaf, and an innocent s1 -> s4 that shares s1's NIC port but not s0's."""
    src = np.r_[nics[1:4], nics[1]]
    dst = np.r_[np.full(3, nics[0]), nics[4]]
    flows = table(src, dst, 4e6)
    run = simulate_packets(topo, flows, RoutingSpec(), TRANSPORTS[transport],
                           PacketParams(switch_buffer_bytes=2 * 2**20, **params))
    return run, simulate_flows(topo, flows, RoutingSpec(), TRANSPORTS[transport])


def test_incast_with_pfc_pauses_upstream_and_blocks_an_innocent_flow(topo, nics):
    run, fluid = incast(topo, nics, "rocev2", congestion_control="none")
    assert run.drops.sum() == 0
    upstream = topo.link_id("s1.nic0->leaf0")
    assert run.pause_frames[upstream, 3] > 0 and run.paused_s[upstream, 3] > 0
    assert run.port_counters()["rx_prio3_pause"][upstream] > 0
    # max-min would give the innocent flow 2/3 of s1's port; PFC's head-of-line blocking gives it far less
    assert run.flow_time_s[3] > 1.5 * fluid.flow_time_s[3]
    # the pause time series: only ports that paused, and per port its intervals add up to its total
    links, t_s, frac = run.pause_series()
    assert upstream in links.tolist() and len(t_s) == frac.shape[0] and np.all((frac >= 0) & (frac <= 1))
    dt_s = np.diff(run.queue_time_s)
    for j, link in enumerate(links):
        assert (frac[:, j] * dt_s).sum() == pytest.approx(run.paused_s[link, 3], rel=1e-9)
    assert set(links.tolist()) == set(np.flatnonzero(run.paused_s[:, 3] > 0).tolist()) & set(run.queue_links.tolist())


def test_pause_frames_refresh_at_the_quanta_of_their_own_port_speed():
    # IEEE 802.1Qbb: a pause quantum is 512 bit times of the port that receives the frame, so a
    # 100 Gb/s port's pause lasts (and is refreshed) 4x longer than a 400 Gb/s port's. An incast
    # inside one leaf (s1, s2, s3 -> s0) never touches the switch-to-switch links: making those 400 Gb/s must not
    # change how many pause frames the 100 Gb/s host ports receive (static thresholds and headroom:
    # the same buffer sharing in both fabrics, whatever the headroom a faster port would reserve).
    counts = []
    for speed in (None, "400Gbps"):
        topo = fabric(switch_speed=speed)
        nics = topo.nic_node[:, 0].astype(np.int64)
        params = PacketParams(switch_buffer_bytes=2 * 2**20, congestion_control="none", pause_quanta=1000,
                              pfc_xoff_bytes=200e3, pfc_headroom_bytes=100e3)
        run = simulate_packets(topo, table(nics[1:4], np.full(3, nics[0]), 4e6), RoutingSpec(), TRANSPORTS["rocev2"], params)
        upstream = topo.link_id("s1.nic0->leaf0")
        assert run.paused_s[upstream, 3] > 0
        counts.append((run.pause_frames[upstream, 3], run.paused_s[upstream, 3]))
    assert counts[1] == counts[0]
    frames, paused_s = counts[0]
    refresh_s = 1000 * 512 / 100e9 / 2  # the peer refreshes every half quanta
    assert frames >= paused_s // refresh_s  # one frame per refresh while paused, plus one per XOFF


def test_a_pause_open_when_the_run_ends_counts_its_refresh_frames(topo, nics):
    # A port still paused at the run's end has had its pause refreshed every half quanta since the XOFF,
    # as one that resumed: 1 + floor(paused / refresh) frames. An incast s1, s2, s3 -> s0 with XON at 0
    # pauses s1's port for ~50 us from ~24 us; the event loop cut at 50 us (the engine's own time limit,
    # below the bound simulate_packets asks of a whole run) ends inside that first pause.
    params = PacketParams(switch_buffer_bytes=2 * 2**20, congestion_control="none", pause_quanta=100,
                          pfc_xoff_bytes=200e3, pfc_xon_bytes=0, pfc_headroom_bytes=100e3)
    flows = table(nics[1:4], np.full(3, nics[0]), 1e6)
    routes = route_flows(topo, RoutingSpec(), flows.src, flows.dst, transport="rocev2")
    res = resolve(params, TRANSPORTS["rocev2"], RoutingSpec())
    inp = engine_inputs(topo, flows, routes, RoutingSpec(), TRANSPORTS["rocev2"], params, res)
    gint = inp.gint.copy()
    gint[C.G_T_LIMIT] = 50_000_000  # ps
    got = C.simulate(inp._replace(gint=gint), 0, 1024, 4096)
    assert got.stats[C.S_TIMED_OUT] == 1 and got.stats[C.S_END_PS] == 50_000_000
    up = topo.link_id("s1.nic0->leaf0")
    paused_ps = got.link_counters[up, C.C_PAUSED_PS - C.C_FIRST]
    frames = got.link_counters[up, C.C_PAUSE_FRAMES - C.C_FIRST]
    refresh_ps = inp.links[up, C.L_REFRESH]
    assert refresh_ps == round(100 * 512 / 100e9 / 2 * 1e12)
    # one pause, open since its XOFF: the sampled paused time grows by the whole interval from then on
    j = int(np.flatnonzero(inp.sample_links == up)[0])
    pause_t = got.pause_samples[:, j]
    onset = int(np.flatnonzero(pause_t > 0)[0])
    assert np.array_equal(np.diff(pause_t[onset:]), np.diff(got.sample_ps[onset:]))
    assert 20e6 < paused_ps < 30e6
    assert frames == 1 + paused_ps // refresh_ps  # before, the open pause counted only its XOFF frame


def test_incast_without_pfc_drops_and_retransmits(topo, nics):
    run, _ = incast(topo, nics, "rocev2", congestion_control="none", flow_control="none")
    counters = run.qp_counter_table()
    assert run.drops[topo.link_id("leaf0->s0.nic0")] > 0
    assert counters["retransmitted_packets"].sum() > 0
    assert counters["out_of_sequence"].sum() > 0 and counters["packet_seq_err"].sum() > 0
    assert np.isfinite(run.flow_finish_s).all()  # go-back-N delivers everything in the end
    assert run.pause_frames.sum() == 0


def test_infiniband_credits_never_drop_and_show_backpressure(topo, nics):
    run, _ = incast(topo, nics, "infiniband")
    assert run.resolved.flow_control == "credit"
    assert run.drops.sum() == 0 and run.pause_frames.sum() == 0
    assert run.xmit_wait_s[topo.link_id("s1.nic0->leaf0")] > 0
    assert run.port_counters()["PortXmitWait"].sum() > 0


def test_a_tighter_kmax_lowers_queue_and_tail_latency_at_some_throughput_cost(topo, nics):
    flows = table(nics[1:5], np.full(4, nics[0]), 10e6)
    bottleneck = topo.link_id("leaf0->s0.nic0")
    runs = [simulate_packets(topo, flows, RoutingSpec(), TRANSPORTS["rocev2"], PacketParams(dcqcn=FAST_DCQCN, **ecn))
            for ecn in ({}, {"ecn_kmin_bytes": 5e3, "ecn_kmax_bytes": 10e3})]
    default, tight = runs
    assert tight.link_mean_queue_bytes[bottleneck] < default.link_mean_queue_bytes[bottleneck]
    assert tight.packet_delay_percentile_s(99) < default.packet_delay_percentile_s(99)
    assert tight.makespan_s > default.makespan_s  # less throughput through the bottleneck


def test_spraying_reorders_and_still_delivers(topo, nics):
    flows = table(nics[:4], nics[4:8], 2e6)
    run = simulate_packets(topo, flows, RoutingSpec(kind="spray"), TRANSPORTS["rocev2"])
    assert run.qp_counter_table()["reordered_packets"].sum() > 0
    assert np.isfinite(run.flow_finish_s).all()


def test_same_seed_same_run(topo, nics):
    args = (topo, table(nics[1:4], np.full(3, nics[0]), 1e6), RoutingSpec(kind="spray"), TRANSPORTS["rocev2"])
    a, b = simulate_packets(*args, seed=5), simulate_packets(*args, seed=5)
    assert np.array_equal(a.qp_finish_s, b.qp_finish_s) and np.array_equal(a.link_counters, b.link_counters)
    assert a.events == b.events


# ------------------------------------------------------------------------------------------ bad input
def test_thresholds_in_the_wrong_order_are_refused():
    with pytest.raises(SpecError, match="Kmin <= Kmax"):
        packet_params(ecn_kmin_bytes=500e3, ecn_kmax_bytes=100e3)
    with pytest.raises(SpecError, match="XON <= XOFF"):
        packet_params(pfc_xoff_bytes=10e3, pfc_xon_bytes=20e3)


def test_a_buffer_too_small_for_its_headroom_says_by_how_much(topo, nics):
    with pytest.raises(SpecError, match="short by") as err:
        simulate_packets(topo, table(nics[:1], nics[4:5], 1e5), RoutingSpec(), TRANSPORTS["rocev2"],
                         PacketParams(switch_buffer_bytes=100e3))
    assert "headroom" in str(err.value)


def test_runs_beyond_the_limits_are_refused_with_the_estimate(topo, nics):
    flows = table(nics[:1], nics[4:5], 1e9)
    with pytest.raises(SimulationError, match="244,141 packets"):
        simulate_packets(topo, flows, RoutingSpec(), TRANSPORTS["rocev2"], PacketParams(max_packets=1e5))
    with pytest.raises(SimulationError, match="simulated time"):
        simulate_packets(topo, flows, RoutingSpec(), TRANSPORTS["rocev2"], PacketParams(max_time_s=1e-3))
    with pytest.raises(SimulationError, match="memory"):
        simulate_packets(topo, flows, RoutingSpec(), TRANSPORTS["rocev2"], PacketParams(max_memory_bytes=1e6))


# ------------------------------------------------------------------------------------------ CLI
def test_cli_runs_a_traffic_scenario_on_the_packet_engine(capsys, tmp_path):
    import json

    from gpuwait.cli.main import main

    path = tmp_path / "incast.yaml"
    path.write_text("""name: tiny-incast
cluster:
  servers: 4
  server: {gpus: 1, nics: 1, nic_speed: 100Gbps, pcie_switches: 1, cpus: 1}
  fabric: {tiers: 2, switch_radix: 8}
  transport: {name: rocev2}
traffic:
  patterns:
    - {kind: incast, size: 1MB}
variants:
  - {name: infiniband, transport: {name: infiniband}}
""")
    try:
        main(["run", str(path), "--engine", "packet", "--json"])
    except SystemExit as exit_:
        assert exit_.code in (0, None)
    doc = json.loads(capsys.readouterr().out)
    assert doc["engine"] == "packet" and len(doc["runs"]) == 2
    assert doc["runs"][0]["counters"]["PortXmitDiscards"] == 0
    assert doc["runs"][0]["summary"]["flows"] == 3 and "p99" in doc["runs"][0]["fct_s"]


def test_peak_utilization_is_the_busiest_window_not_the_mean():
    # two senders to one receiver, the second joining halfway: each sender's port runs at line rate
    # while it sends (peak ~1) but is idle for part of the run (mean ~0.5)
    topo = fabric(servers=4)
    a, b, c = (topo.node_id(f"s{i}.nic0") for i in (0, 1, 2))
    flows = FlowTable(["f", "g"], np.array([a, c]), np.array([b, b]), np.array([2e6, 2e6]), np.array([0.0, 150e-6]),
                      np.full(2, np.inf), [[], []])
    run = simulate_packets(topo, flows, RoutingSpec(), TRANSPORTS["rocev2"])
    peak, mean = run.link_peak_utilization(), run.link_mean_utilization()
    out_of_a = np.flatnonzero(topo.link_src == a)
    first = int(out_of_a[np.argmax(run.link_bytes[out_of_a])])  # s0.nic0 -> its leaf
    assert peak[first] > 0.95 and mean[first] < 0.8
    assert (peak >= mean).all() and (peak <= 1.0 + 1e-12).all()
