"""NCCL's socket transport and the transport profiles (issue 12, item 3).

Closed forms from the model's parts (NCCL net_socket.cc v2.30.7-1 defaults; Cai et al., SIGCOMM 2021
for one TCP stream), the published L40S socket table (schmaustech/nvidia-tools-image README, NCCL
2.27.3, 400GbE ConnectX-7 VF), and perf against diagnose on the same cluster.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpuwait.collectives.ncclenv import parse_env
from gpuwait.errors import SpecError, UnknownNameError
from gpuwait.runner.perf import make_predictor
from gpuwait.spec.cluster import TransportSpec
from gpuwait.telemetry.nccltests_log import parse_nccl_tests_log
from gpuwait.transport import TRANSPORTS, resolve_transport
from gpuwait.transport.socket import (
    NCCL_SIMPLE_STEP_BYTES,
    SOCKET_STEP_ROUND_TRIP_S,
    PROXY_COPY_Bps,
    TCP_STREAM_CEILING_Bps,
    socket_connection_Bps,
    socket_threads_and_sockets,
    socket_transport,
)

REFERENCE = Path(__file__).resolve().parents[2] / "tests" / "nccltests" / "data" / "reference"


def test_socket_defaults_follow_net_socket_cc():
    # ncclNetSocketGetNsockNthread: 0 threads (proxy thread, control socket) unless AWS (2 x 8) or GCP (4 x 1)
    assert socket_threads_and_sockets() == (0, 0)
    assert socket_threads_and_sockets(platform="aws") == (2, 16)
    assert socket_threads_and_sockets(platform="gcp") == (4, 4)
    assert socket_threads_and_sockets(2, None) == (2, 2)
    assert socket_threads_and_sockets(32, 1) == (16, 16)  # MAX_THREADS
    assert socket_threads_and_sockets(8, 16) == (8, 64)  # product capped at MAX_SOCKETS: 64 // 8 per thread


def test_connection_rate_closed_form():
    # M / (overhead + M / (n * stream)): one stream, 512 KiB steps, 15 us
    m, ovh = NCCL_SIMPLE_STEP_BYTES, 15e-6
    expected = m / (ovh + m / TCP_STREAM_CEILING_Bps)
    assert socket_connection_Bps(1, ovh) == pytest.approx(expected)
    assert socket_connection_Bps(1, 0.0) == pytest.approx(42e9 / 8)  # no message cost: the stream's ceiling
    assert socket_connection_Bps(4, 0.0) == pytest.approx(4 * 42e9 / 8)
    # the message cost matters more as streams multiply (it is not split across them)
    assert socket_connection_Bps(4, ovh) / (4 * socket_connection_Bps(1, ovh)) < 1.0


def test_socket_profile_from_env_and_platform():
    default = socket_transport(TRANSPORTS["infiniband"])
    assert default.name == "tcp" and default.host_ceiling_Bps == PROXY_COPY_Bps / 2
    threaded = socket_transport(TRANSPORTS["infiniband"], nthreads=4, nsocks_perthread=2)
    assert threaded.host_ceiling_Bps is None  # helper threads: no single proxy core
    assert threaded.rate_cap_Bps == pytest.approx(socket_connection_Bps(8, SOCKET_STEP_ROUND_TRIP_S))
    aws = socket_transport(TRANSPORTS["efa"])  # an EFA instance falling back: AWS's 2 x 8 sockets
    assert aws.rate_cap_Bps == pytest.approx(socket_connection_Bps(16, SOCKET_STEP_ROUND_TRIP_S))
    # a cluster file's own rate cap on the tcp profile wins
    capped = resolve_transport(TransportSpec(name="tcp", rate_cap=1e9))
    assert socket_transport(capped).rate_cap_Bps == 1e9


@pytest.mark.parametrize("name, value", [("NCCL_SOCKET_NTHREADS", "0"), ("NCCL_SOCKET_NTHREADS", "two"),
                                         ("NCCL_NSOCKS_PERTHREAD", "1.5"), ("NCCL_SOCKET_NTHREADS", "17")])
def test_bad_socket_variables_are_one_error(name, value):
    with pytest.raises(SpecError, match=name):
        parse_env({name: value})
    with pytest.raises(SpecError, match="NCCL_SOCKET_NTHREADS"):
        socket_threads_and_sockets(0, 1)


def test_unknown_transport_is_one_error():
    with pytest.raises(UnknownNameError, match="transport.name"):
        resolve_transport(TransportSpec.model_construct(name="carrier-pigeon"))
    with pytest.raises(SpecError, match="platform"):
        socket_threads_and_sockets(platform="azure")


def test_new_profiles_goodput_closed_form():
    # payload per wire byte: MTU / (MTU + header); Slingshot's 200 Gbit/s port, TCPX's 200 Gbit/s NICs
    for name, mtu, header in (("slingshot", 4096, 82), ("tcpx", 8192, 90), ("tcpxo", 8192, 90)):
        profile = TRANSPORTS[name]
        assert profile.goodput_Bps(25e9) == pytest.approx(25e9 * mtu / (mtu + header))
        assert resolve_transport(TransportSpec(name=name)).name == name


def test_socket_on_one_400g_nic_within_25pct_of_the_l40s_table():
    """The published NCCL_IB_DISABLE=1 run (2 x 1 L40S, one 400GbE port each) reaches ~8 GB/s; the model's
    ceiling comes from streams, message cost and the proxy core, not from this table. (That run may have
    gone over RDMA: the image's nccl-rdma-sharp-plugins ignores NCCL_IB_DISABLE and reads NCCL_IBEXT_DISABLE,
    NVIDIA/nccl-tests#227; so the table is kept out of the fits, bench/reference_tables.py.)"""
    log = parse_nccl_tests_log((REFERENCE / "l40s-tcp-2node-2gpu-all_reduce-ring.log").read_text())
    rows = [r for r in log.rows if r.size_bytes >= 2**20]
    predictor = make_predictor(str(REFERENCE / "clusters" / "r760xa-l40s-2x400g.yaml"), 2, 1,
                               ["NCCL_IB_DISABLE=1", "NCCL_IBEXT_DISABLE=1", "NCCL_ALGO=Ring"])
    assert predictor.transport.name == "tcp"
    errors = []
    for row in rows:
        estimate = predictor.estimate("all_reduce", row.size_bytes)
        busbw = row.size_bytes / estimate.time_s / 1e9  # 2 ranks: busbw = algbw
        errors.append(abs(busbw - row.oop_busbw_GBps) / row.oop_busbw_GBps)
    assert np.median(errors) <= 0.25 and max(errors[2:]) <= 0.25


def test_perf_and_diagnose_agree_on_tcp_fallback():
    """16 DGX H100: `perf --env NCCL_IB_DISABLE=1` and `diagnose --inject tcp-fallback:all` read one
    socket model: each collective diagnose reports is predicted by perf within 20 %."""
    from gpuwait.diagnosis.run import diagnose_scenario
    from gpuwait.faults import parse_inject
    from gpuwait.spec import Scenario, validate_data

    scenario = validate_data(Scenario, {
        "cluster": {"preset": "dgx-h100", "servers": 16},
        "workload": {"model": {"preset": "llama-8b", "seq_len": 4096}, "steps": 1,
                     "parallel": {"tp": 1, "pp": 1, "zero": 1, "micro_batch": 1, "global_batch": 512}}},
        source="test", require_units=False)
    diagnosis = diagnose_scenario(scenario, [parse_inject("tcp-fallback")], measure_gain=False)
    assert diagnosis.findings[0].kind == "tcp-fallback"
    predictor = make_predictor("dgx-h100", 16, None, ["NCCL_IB_DISABLE=1"])
    stats = [c for c in diagnosis.observation.collectives if c.group == "dp"]
    assert stats
    for stat in stats:
        perf_s = predictor.estimate(stat.collective, int(stat.size_bytes)).time_s
        assert perf_s == pytest.approx(stat.time_s, rel=0.20), stat.label


def test_socket_variables_move_a_cluster_that_names_tcp(tmp_path):
    """NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD set the streams of a cluster file naming ``tcp`` (the
    rocev2 preset with its transport replaced), as they do under NCCL_IB_DISABLE=1: 16 streams per
    connection instead of the proxy thread's one lift the per-connection ceiling (net_socket.cc v2.30.7-1,
    ncclNetSocketGetNsockNthread), so the 1 GiB all_reduce gets faster, and both paths give one number."""
    cluster = tmp_path / "tcp.yaml"
    cluster.write_text("preset: rocev2-400g-2tier\nservers: 2\ntransport:\n  name: tcp\n")
    size = 2**30
    default = make_predictor(str(cluster), 2, None).estimate("all_reduce", size).time_s
    threaded_env = ["NCCL_SOCKET_NTHREADS=4", "NCCL_NSOCKS_PERTHREAD=4"]
    threaded = make_predictor(str(cluster), 2, None, threaded_env).estimate("all_reduce", size).time_s
    assert threaded < 0.8 * default
    # the same streams reached through NCCL_IB_DISABLE=1 on the RoCE preset
    fallback = make_predictor("rocev2-400g-2tier", 2, None, ["NCCL_IB_DISABLE=1", *threaded_env])
    assert fallback.estimate("all_reduce", size).time_s == pytest.approx(threaded, rel=1e-6)


def test_gh200_fallback_runs_on_the_socket_model():
    """NCCL_NET=Socket on the Alps GH200 nodes (NCCL_IB_DISABLE=1 would leave aws-ofi-nccl in charge): with no NCCL_SOCKET_IFNAME NCCL takes every interface but
    docker and lo (ncclFindInterfaces, src/misc/socket.cc v2.18.3-1 to v2.30.7-1), so the four Slingshot NICs'
    IP interfaces are four network devices; the socket model is applied (per-connection ceiling, the proxy
    thread's copy budget per NIC, host-staged paths), and a tree all_reduce's bytes between the two nodes (the
    whole buffer each way, spread over 4 NICs) run at 4 x PROXY_COPY_Bps / 2, ~66 GB/s busbw. The published
    no-CXI table (6 GB/s) ran on a slower fallback path: see the next test."""
    predictor = make_predictor(str(REFERENCE / "clusters" / "alps-gh200-slingshot.yaml"), 2, 4,
                               ["NCCL_NET=Socket", "NCCL_ALGO=Tree", "NCCL_PROTO=Simple"])
    assert predictor.transport.name == "tcp" and predictor.host_staged_network
    assert predictor.transport.host_ceiling_Bps == PROXY_COPY_Bps / 2
    size = 2**27
    estimate = predictor.estimate("all_reduce", size)
    assert estimate.fabric_time_s == pytest.approx(size / (4 * PROXY_COPY_Bps / 2), rel=0.01)


def test_gh200_no_cxi_fallback_is_held_to_the_rate_cscs_measured_per_node():
    """CSCS measured the same GH200 nodes with the CXI hook disabled (eth-cscs/cscs-docs
    docs/software/communication/openmpi.md @a186743f, the "(*)" runs): osu_bw with one rank per node reaches
    3121.42 MB/s at 4 MiB, and osu_alltoall with 4 ranks per node moves 1 MiB per peer in 5688.27 us, i.e.
    16 MiB per node and direction at 2.95 GB/s: four ranks per node move what one pair did. alps-gh200-nocxi.yaml
    describes the four hsn interfaces NCCL's socket transport reads (200 Gbit/s each) held to a quarter of the
    pair's rate each (``transport.host_ceiling``); the node's four ports together are within 6 % of both
    figures, and perf on it predicts the published NCCL no-CXI all_reduce (eth-cscs/cscs-docs nccl.md,
    "All-reduce latency (*)": 21253 us at 64 MiB, 43293 us at 128 MiB) within 10 %. Nothing is fitted to the
    NCCL table."""
    cluster = str(REFERENCE / "clusters" / "alps-gh200-nocxi.yaml")
    predictor = make_predictor(cluster, 2, 4, [])
    assert predictor.transport.name == "tcp" and predictor._node_nics() == 4
    node_Bps = 4 * predictor.transport.host_ceiling_Bps
    pair_Bps, alltoall_node_Bps = 3121.42e6, 4 * 4 * 2**20 / 5688.27e-6
    assert node_Bps == pytest.approx(pair_Bps, rel=0.06)
    assert node_Bps == pytest.approx(alltoall_node_Bps, rel=0.06)
    for size, measured_us in ((2**26, 21253.0), (2**27, 43293.0)):
        assert predictor.estimate("all_reduce", size).time_s * 1e6 == pytest.approx(measured_us, rel=0.10)


def test_a_cluster_files_host_ceiling_binds_the_socket_path_below_the_proxy_thread():
    """``transport.host_ceiling`` is what one NIC port's host path moves per direction: on the tcp profile it
    replaces the proxy thread's copy budget when lower, and a higher one leaves that budget in place."""
    low = resolve_transport(TransportSpec(name="tcp", host_ceiling=1e9))
    assert low.host_ceiling_Bps == 1e9 and socket_transport(low).host_ceiling_Bps == 1e9
    high = resolve_transport(TransportSpec(name="tcp", host_ceiling=1e12))
    assert socket_transport(high).host_ceiling_Bps == PROXY_COPY_Bps / 2
    threaded = socket_transport(low, nthreads=2)  # helper threads: no proxy budget, the measured ceiling stays
    assert threaded.host_ceiling_Bps == 1e9


def test_socket_floor_of_two_ranks_matches_a_published_socket_run():
    """A genuine socket floor: NVIDIA/nccl-tests#82 (NCCL 2.9.6, 2 x 1 V100 PCIe over eth0, libibverbs absent so
    neither NCCL's IB transport nor an RDMA plugin can run; NCCL_ALGO=Ring, NCCL_PROTO=Simple, 4 socket threads x 8
    sockets, 2 channels) prints broadcast_perf 8 B at 45.82 us out of place, 38.17 us in place. At 8 B the time is
    NCCL's ring latency (the socket net reports latency 0, net_socket.cc, so the tuning adds nothing for sockets),
    the launch and the socket's per-message cost; on a 2 x 1 PCIe-GPU cluster the model gives within 25 % of both.
    The socket terms are not what puts the L40S NCCL_IB_DISABLE=1 table's 12 us floor (most likely an RDMA run:
    bench/reference_tables.py) well below the model's socket floor."""
    cluster = str(REFERENCE / "clusters" / "r760xa-l40s-2x400g.yaml")
    env = ["NCCL_IB_DISABLE=1", "NCCL_IBEXT_DISABLE=1", "NCCL_ALGO=Ring", "NCCL_PROTO=Simple", "NCCL_SOCKET_NTHREADS=4",
           "NCCL_NSOCKS_PERTHREAD=8", "NCCL_MIN_NCHANNELS=2", "NCCL_MAX_NCHANNELS=2"]
    predictor = make_predictor(cluster, 2, 1, env)
    assert predictor.transport.name == "tcp"
    floor_us = predictor.estimate("broadcast", 8).time_s * 1e6
    for measured_us in (45.82, 38.17):
        assert floor_us == pytest.approx(measured_us, rel=0.25)


def test_small_socket_calls_pay_a_send_and_a_recv_per_network_crossing():
    """LogGP's one-way time of a message is o + L + o (Alexandrov et al., SPAA 1995): each network step of
    NCCL's latency chain on the socket transport is a ``send`` by one proxy and a ``recv`` by the other
    (net_socket.cc v2.27.3-1). A 2-node tree all_reduce of 8 B crosses the network twice (up, down), so it pays
    4 socket calls however few bytes its NICs carry; an RDMA transport pays none beyond NCCL's hop latency
    (NCCL's table is its IB transport's, verbs post and poll included)."""
    cluster = str(REFERENCE / "clusters" / "alps-gh200-nocxi.yaml")
    tree = make_predictor(cluster, 2, 4, ["NCCL_ALGO=Tree", "NCCL_PROTO=LL"]).estimate("all_reduce", 8)
    # the cluster file's curve prices a message at its bytes: 16 B of LL lines cost o + 15 x G, 1.0008 o
    assert tree.costs.inter_steps == 2 and tree.costs.nic_messages == pytest.approx(4, rel=1e-3)
    rdma = make_predictor(str(REFERENCE / "clusters" / "alps-gh200-slingshot.yaml"), 2, 4,
                          ["NCCL_ALGO=Tree", "NCCL_PROTO=LL"]).estimate("all_reduce", 8)
    # RDMA counts the busiest NIC's share of the call's bytes in chunk-sized messages (fabric.perf
    # _chain_messages: a tree's 8 B call is half a message on each NIC), where the socket path charges its 4 calls
    assert rdma.costs.inter_steps == 2 and rdma.costs.nic_messages == pytest.approx(0.5)


def test_gh200_no_cxi_floor_from_the_per_message_cost_cscs_measured():
    """The same CSCS page's osu_bw "(*)" run (CXI hook disabled, CPU buffers, one rank per node) moves 0.16 MB/s
    at 1 B with 64 messages in flight: one message every 6.25 us on the nodes' IP path (1.05 us with CXI), the
    cluster file's ``transport.message_overhead``. With a send and a receive at each of the tree's two network
    crossings, perf gives the published NCCL no-CXI all_reduce floor (eth-cscs/cscs-docs nccl.md, "All-reduce
    latency (*)", in place: 53.44, 50.40, 50.77, 52.58, 56.63, 58.62 us at 8 B, 32 B, 128 B, 2, 4, 8 KiB) within
    15 % at 8-128 B and 25 % at 2-8 KiB, where the curve's per-byte cost (G, tests/transport/test_socket_curve.py)
    makes each call of 8 KiB of LL lines about 3 us dearer than the table shows; with the generic socket call cost (1.5 us)
    it would be 40 % low."""
    cluster = str(REFERENCE / "clusters" / "alps-gh200-nocxi.yaml")
    predictor = make_predictor(cluster, 2, 4, [])
    assert predictor.transport.message_overhead_s == pytest.approx(1 / 0.16e6)
    for size, measured_us in ((8, 53.44), (32, 50.40), (128, 50.77), (2048, 52.58), (4096, 56.63), (8192, 58.62)):
        rel = 0.15 if size < 1024 else 0.25
        assert predictor.estimate("all_reduce", size).time_s * 1e6 == pytest.approx(measured_us, rel=rel)


def test_one_rank_per_node_keeps_rings_network_latency_as_a_time():
    """NCCL 2.23.4-1+ prices a network step at one rank per node at Tree's latency (ring LL 2.7 -> 5.0 us,
    src/graph/tuning.cc "With ppn=1 latencies are fully exposed"), a rule that came with PAT (one rank per node
    only) and decides NCCL's choice; the time keeps ring's own figure: on 2 x 1 L40S (NCCL 2.27.3) NCCL's
    latency is 6.6 + 2 x 5.0 us, the time's 6.6 + 2 x 2.7 us."""
    cluster = str(REFERENCE / "clusters" / "r760xa-l40s-2x400g.yaml")
    predictor = make_predictor(cluster, 2, 1, ["NCCL_ALGO=Ring"], nccl_version="2.27.3")
    inputs, algorithm, protocol, prediction = predictor._choice("all_reduce", 8)
    assert (algorithm, protocol) == ("ring", "LL") and prediction.latency_us == pytest.approx(6.6 + 2 * 5.0)
    assert predictor.estimate("all_reduce", 8).costs.latency_s * 1e6 == pytest.approx(6.6 + 2 * 2.7)
    two_per_node = make_predictor(cluster, 2, 2, ["NCCL_ALGO=Ring"], nccl_version="2.27.3")
    costs = two_per_node.estimate("all_reduce", 8).costs
    assert costs.latency_s * 1e6 == pytest.approx(two_per_node._choice("all_reduce", 8)[3].latency_us)


def test_the_l40s_roce_floor_prices_a_network_hop_at_rings_figure():
    """The evidence that a network hop costs ring's figure, not Tree's: the same L40S hosts and NIC at two ranks
    per node, where NCCL's ppn=1 rule is off (schmaustech/nvidia-tools-image README, RoCE, NCCL 2.27.3, 2 x 2 GPUs).
    Its latency-bound ring/LL rows (8-64 B; the model's wire time there is under 0.1 us) take 16.8-19.4 us: at or
    above NCCL's ring/LL latency with ring's network figure, 6.6 + 4 x 1.0 (PCI) + 2 x 2.7 = 16.0 us, and below it
    with Tree's, 6.6 + 4 x 1.0 + 2 x 5.0 = 20.6 us (baseLat, hwLat, src/graph/tuning.cc v2.27.3-1). The model's
    time there, which adds the NIC's per-message and the pipeline's terms, is 20.4 us: 5-21 % above the rows,
    within issue 12's 25 % floor (not within 1 %, as this claim once read)."""
    log_text = (REFERENCE / "l40s-roce-2node-4gpu-all_reduce-ring.log").read_text()
    rows = {r.size_bytes: r.steady_time_us for r in parse_nccl_tests_log(log_text).rows if 8 <= r.size_bytes <= 64}
    assert sorted(rows) == [8, 16, 32, 64] and "NCCL version 2.27.3" in log_text
    cluster = str(REFERENCE / "clusters" / "r760xa-l40s-2x400g.yaml")
    predictor = make_predictor(cluster, 2, 2, ["NCCL_ALGO=Ring"], nccl_version="2.27.3", gpus_per_thread=2)
    for size, measured_us in rows.items():
        inputs, algorithm, protocol, prediction = predictor._choice("all_reduce", size)
        assert (algorithm, protocol) == ("ring", "LL")
        net_us = inputs.release.hw_latency_us["net"]
        rings_us = prediction.latency_us
        trees_us = rings_us + 2 * (net_us["tree"][0] - net_us["ring"][0])
        assert (rings_us, trees_us) == (pytest.approx(6.6 + 4 * 1.0 + 2 * 2.7), pytest.approx(6.6 + 4 * 1.0 + 2 * 5.0))
        assert prediction.own_net_latency_us == rings_us  # two ranks per node: NCCL's rule is off
        assert rings_us <= measured_us < trees_us, size
        model_us = predictor.estimate("all_reduce", size).time_s * 1e6
        assert measured_us < model_us < 1.25 * measured_us, size


def test_the_l40s_ib_disable_table_floor_is_an_rdma_floor():
    """The published NCCL_IB_DISABLE=1 L40S run (schmaustech/nvidia-tools-image README, NCCL 2.27.3, 2 x 1 GPU)
    takes 12.2-15.4 us from 8 B to 8 KiB. Two socket crossings cannot: a genuine socket run's 8 B floor is
    38-46 us (NVIDIA/nccl-tests#82, test above), and the model's socket floor here is ~21 us. The image installs
    nccl-rdma-sharp-plugins, which NCCL loads first (src/plugin/net.cc) and whose IBext reads NCCL_IBEXT_DISABLE,
    not NCCL_IB_DISABLE (NVIDIA/nccl-tests#227, #373): the cluster file says so (``transport.net_plugin: ibext``),
    the job stays on RoCE and the floor is within 25 % at every size to 8 KiB; with NCCL_IBEXT_DISABLE=1 too
    the job is on sockets and 30 % or more above it."""
    log = parse_nccl_tests_log((REFERENCE / "l40s-tcp-2node-2gpu-all_reduce-ring.log").read_text())
    cluster = str(REFERENCE / "clusters" / "r760xa-l40s-2x400g.yaml")
    table = make_predictor(cluster, 2, 1, ["NCCL_IB_DISABLE=1", "NCCL_ALGO=Ring"], nccl_version="2.27.3")
    assert table.transport.name == "rocev2" and table.transport.net_plugin == "ibext"
    socket = make_predictor(cluster, 2, 1, ["NCCL_IB_DISABLE=1", "NCCL_IBEXT_DISABLE=1", "NCCL_ALGO=Ring"],
                            nccl_version="2.27.3")
    assert socket.transport.name == "tcp"
    for row in log.rows:
        if 8 <= row.size_bytes <= 8192:
            assert table.estimate("all_reduce", row.size_bytes).time_s * 1e6 == pytest.approx(row.oop_time_us, rel=0.25)
            assert socket.estimate("all_reduce", row.size_bytes).time_s * 1e6 > 1.3 * row.oop_time_us


def test_ibext_belongs_to_rdma_transports():
    """nccl-rdma-sharp-plugins' IBext is an IB/RoCE transport: one clear error on any other."""
    with pytest.raises(SpecError, match="transport.net_plugin"):
        resolve_transport(TransportSpec(name="efa", net_plugin="ibext"))
    assert resolve_transport(TransportSpec(name="infiniband", net_plugin="ibext")).net_plugin == "ibext"


def test_nccl_ib_disable_leaves_a_plugin_transport_and_nccl_net_socket_reaches_sockets():
    """NCCL loads an external net plugin before its own IB and socket transports (NVIDIA/nccl v2.27.3-1
    src/plugin/net.cc), and NCCL_IB_DISABLE turns off only NCCL's own IB (src/transport/net_ib.cc): an EFA
    cluster (aws-ofi-nccl) stays on EFA; NCCL_NET=Socket, matched by name case-insensitively, reaches sockets;
    NCCL_NET=IB where NCCL has no IB transport is one clear error."""
    p5 = str(Path(__file__).parents[1] / "nccltests" / "data" / "reference" / "clusters" / "aws-p5-efa.yaml")
    efa = make_predictor(p5, 2, 8, ["NCCL_IB_DISABLE=1"])
    assert efa.transport.name == "efa"
    assert any("ignores NCCL_IB_DISABLE" in s.source for s in efa.settings() if s.name == "transport")
    assert make_predictor(p5, 2, 8, ["NCCL_NET=socket"]).transport.name == "tcp"
    assert make_predictor("dgx-h100", 2, 8, ["NCCL_NET=IB"]).transport.name == "infiniband"
    with pytest.raises(SpecError, match="NCCL_NET: got IB.*expected Socket"):
        make_predictor(p5, 2, 8, ["NCCL_NET=IB"])
    assert make_predictor(p5, 2, 8, ["NCCL_NET=AWS Libfabric"]).transport.name == "efa"  # the plugin's own name
    with pytest.raises(SpecError, match="NCCL_NET: got 'RDMA', a net plugin's name.*expected IB, Socket"):
        make_predictor("dgx-h100", 2, 8, ["NCCL_NET=RDMA"])
