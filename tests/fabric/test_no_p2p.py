"""GPUs of a server without P2P (``server.gpu_p2p: false`` or ``NCCL_P2P_DISABLE=1``): NCCL's SHM
transport through host memory.

Closed forms, for 2 GPUs behind one PCIe switch of bandwidth B per direction (the switch's uplink to
the CPU also B), S bytes all-reduced (ring: each GPU sends S and receives S in 2 (n-1) steps of S/n):

* P2P on: each GPU's bytes cross its own PCIe up and the peer's PCIe down, switch to switch, so the
  fabric moves S per GPU at B: busbw = B (NCCL's PCI ring ceiling 2 x 12 GB/s is above Gen3's 15.75).
* P2P off: both GPUs' bytes go up the one switch->CPU uplink and down CPU->switch, so each gets B/2
  from the fabric; NCCL's own graph through the CPU is 1 channel at 5 GB/s on an Intel host
  (12 GB/s / (2 GPUs x 6/5), search speed 5) or 6 GB/s on AMD, which caps busbw below B/2.
  All-to-all over SHM takes the same path, so the same budget bounds each GPU's bytes.
* One GPU's path through the CPU has NCCL's one-GPU budget one way (12 GB/s / (6/5) = 10 GB/s on Intel,
  12 on AMD); a GPU sending and receiving at once keeps SHM_BIDIRECTIONAL_SHARE = 3.9 / 10.31 of it each
  way: NVIDIA/nccl issue #384 measured 3.9 GB/s all_reduce busbw and 10.31 GB/s broadcast on 2 GPUs over
  SHM (PCIe Gen3 x16). A two-rank broadcast flows one way and keeps the whole budget (10 against #384's
  10.31). Two GPUs behind one switch get 2 x 3.8 GB/s through the uplink, below its line rate. Scored outside that source: two
  RTX 2080 Ti without P2P (tests/nccltests/data/reference/rtx2080ti-pcie-1node-2gpu-*.log) measured
  4.0 GB/s all_reduce and 4.6 GB/s all-to-all busbw at 1 GiB.
* LL and LL128 cross host memory in their lines (LL 16 bytes per 8 of payload), so their SHM budget is
  the payload share of Simple's.
"""

from __future__ import annotations

import pytest

from gpuwait.collectives.communicator import Communicator
from gpuwait.collectives.ncclenv import NcclEnv, parse_env
from gpuwait.fabric.perf import SHM_BIDIRECTIONAL_SHARE, CollectivePredictor, pcie_generation
from gpuwait.routing.paths import route_flows
from gpuwait.spec import ClusterSpec, RoutingSpec
from gpuwait.topology.presets import build_cluster
from gpuwait.transport import TRANSPORTS

GEN3_X16_Bps = 15.75e9
GiB = 2**30


def _predictor(p2p: bool, env: NcclEnv | None = None, cpu_vendor: str = "intel") -> CollectivePredictor:
    spec = ClusterSpec.model_validate({
        "preset": "dgx-h100", "servers": 1,
        "server": {"template": "rtx2080ti-pcie-2gpu", "gpu_p2p": p2p, "cpu_vendor": cpu_vendor},
    })
    topo = build_cluster(spec)
    return CollectivePredictor.create(Communicator.world(topo), env or NcclEnv(), RoutingSpec(), TRANSPORTS["rocev2"])


def _busbw_GBps(pred: CollectivePredictor, collective: str = "all_reduce", n_bytes: int = GiB) -> float:
    est = pred.estimate(collective, n_bytes)
    algbw = n_bytes / (est.time_s - est.latency_s - est.pipeline_fill_s) / 1e9
    n = pred.comm.n_ranks
    factor = {"all_reduce": 2 * (n - 1) / n, "broadcast": 1.0}.get(collective, (n - 1) / n)
    return algbw * factor


def test_template_is_gen3_without_p2p():
    pred = _predictor(p2p=False)
    server = pred.comm.topo.spec.server
    assert (server.gpus, server.nvlink_bandwidth, server.pcie_bandwidth, server.gpu_p2p) == (2, 0.0, GEN3_X16_Bps, False)
    assert pcie_generation(server.pcie_bandwidth) == 3
    assert not pred.p2p


def test_p2p_off_routes_through_the_receivers_cpu():
    topo = _predictor(p2p=False).comm.topo
    routes = route_flows(topo, RoutingSpec(), ["s0.gpu0"], ["s0.gpu1"], via_host=True)
    names = {topo.link_name(link) for link in routes.links_of_row(0)[0]}
    assert names == {"s0.gpu0->s0.pcie0", "s0.pcie0->s0.cpu0", "s0.cpu0->s0.pcie0", "s0.pcie0->s0.gpu1"}
    direct = route_flows(topo, RoutingSpec(), ["s0.gpu0"], ["s0.gpu1"])
    assert {topo.link_name(link) for link in direct.links_of_row(0)[0]} == {"s0.gpu0->s0.pcie0", "s0.pcie0->s0.gpu1"}


def test_all_reduce_with_p2p_is_the_pcie_peer_path():
    pred = _predictor(p2p=True)
    est = pred.estimate("all_reduce", GiB)
    assert est.limited_by == "fabric"
    assert _busbw_GBps(pred) == pytest.approx(GEN3_X16_Bps / 1e9, rel=1e-6)


@pytest.mark.parametrize(("cpu_vendor", "nccl_GBps"), [("intel", 5.0), ("amd", 6.0)])
def test_all_reduce_without_p2p_is_bounded_by_the_host_path(cpu_vendor, nccl_GBps):
    one_gpu_GBps = 2 * nccl_GBps  # NCCL's budget with the switch's 2 GPUs is half of one GPU's path
    pred = _predictor(p2p=False, cpu_vendor=cpu_vendor)
    inputs = pred.tuning_inputs("all_reduce")
    assert (inputs.ring.n_channels, inputs.ring.bw_intra_GBps, inputs.ring.intra_link) == (1, nccl_GBps, "pci")
    est = pred.estimate("all_reduce", GiB)
    links_busbw = GiB / pred.fabric_time_s("all_reduce", GiB, "ring", est.protocol, est.n_channels) / 1e9  # 2 ranks
    assert links_busbw == pytest.approx(GEN3_X16_Bps / 2 / 1e9, rel=1e-6)  # both GPUs share the uplink
    # each GPU sends and receives through host memory: its path keeps the bidirectional share each way
    shm_GBps = one_gpu_GBps * SHM_BIDIRECTIONAL_SHARE
    assert GiB / est.fabric_time_s / 1e9 == pytest.approx(shm_GBps, rel=1e-6)
    assert _busbw_GBps(pred) == pytest.approx(min(shm_GBps, GEN3_X16_Bps / 2 / 1e9), rel=1e-6)


@pytest.mark.parametrize(("cpu_vendor", "nccl_GBps"), [("intel", 5.0), ("amd", 6.0)])
def test_alltoall_without_p2p_is_bounded_by_the_host_path(cpu_vendor, nccl_GBps):
    on, off = _predictor(p2p=True), _predictor(p2p=False, cpu_vendor=cpu_vendor)
    # each GPU sends S/2 to its peer: time S / (2 rate), algbw 2 x rate, busbw (n-1)/n x algbw = rate
    assert _busbw_GBps(on, "alltoall") == pytest.approx(GEN3_X16_Bps / 1e9, rel=1e-6)
    # through the CPU each GPU gets its path's budget (12 GB/s / (6/5) on Intel, 12 on AMD: twice NCCL's
    # ring budget for the switch's 2 GPUs), both ways at once, below the uplink's B/2
    assert _busbw_GBps(off, "alltoall") == pytest.approx(2 * nccl_GBps * SHM_BIDIRECTIONAL_SHARE, rel=1e-6)
    assert off.estimate("alltoall", GiB).fabric_time_s > _predictor(p2p=False).fabric_time_s("alltoall", GiB, "direct",
                                                                                             "Simple", 1) * 0.99


def test_nccl_p2p_disable_changes_the_prediction_on_a_pcie_server():
    on = _predictor(p2p=True)
    off = _predictor(p2p=True, env=parse_env({"NCCL_P2P_DISABLE": "1"}))
    assert not off.p2p
    assert off.estimate("all_reduce", GiB).time_s > 2 * on.estimate("all_reduce", GiB).time_s
    assert _busbw_GBps(off) == pytest.approx(_busbw_GBps(_predictor(p2p=False)), rel=1e-12)


def test_shm_bidirectional_share_is_the_published_ratio():
    # NVIDIA/nccl#384: 2 GPUs over SHM on PCIe Gen3 x16, all_reduce 3.9 GB/s (both ways) vs broadcast 10.31 GB/s
    assert SHM_BIDIRECTIONAL_SHARE == pytest.approx(3.9 / 10.31)
    assert 0.25 < SHM_BIDIRECTIONAL_SHARE < 0.5  # both ways together move less than one way alone


def test_two_rank_broadcast_flows_one_way_and_keeps_the_whole_budget():
    pred = _predictor(p2p=False)
    one_way = pred._shm_time_s("broadcast", GiB, "ring")
    both_ways = pred._shm_time_s("all_gather", 2 * GiB, "ring")  # 2 ranks: each GPU sends and receives S/2 = 1 GiB
    assert GiB / one_way / 1e9 == pytest.approx(10.0, rel=1e-9)  # one GPU's Gen3 path through an Intel CPU
    assert GiB / one_way / 1e9 == pytest.approx(10.31, rel=0.05)  # NVIDIA/nccl#384's broadcast, one way
    assert both_ways == pytest.approx(one_way / SHM_BIDIRECTIONAL_SHARE, rel=1e-9)
    assert pred._shm_time_s("all_reduce", GiB, "tree") == 0.0  # only ring and the p2p path are charged here
    assert _predictor(p2p=True)._shm_time_s("all_reduce", GiB, "ring") == 0.0


def test_shm_carries_the_protocols_flags_through_host_memory():
    # SHM's LL and LL128 buffers are in host memory like Simple's (src/transport/shm.cc v2.27.3-1), so each
    # byte of payload costs the protocol's line: LL 16 bytes per 8, LL128 128 per 120 (NCCL device.h).
    # Published: on the L40S RoCE table (tests/nccltests/data/reference/l40s-roce-2node-4gpu-all_reduce-ring.log,
    # schmaustech/nvidia-tools-image README, GPUs through host memory) LL's plateau (4.45-4.70 GB/s busbw,
    # 256 KiB-1 MiB) is 0.46-0.49 of Simple's (9.6 GB/s): half, as the lines say.
    pred = _predictor(p2p=False)
    simple = pred._shm_time_s("all_reduce", GiB, "ring")
    assert pred._shm_time_s("all_reduce", GiB, "ring", "LL") == pytest.approx(2 * simple, rel=1e-12)
    assert pred._shm_time_s("all_reduce", GiB, "ring", "LL128") == pytest.approx(simple * 128 / 120, rel=1e-12)
    assert 0.46 <= simple / pred._shm_time_s("all_reduce", GiB, "ring", "LL") <= 0.5 + 1e-12


@pytest.mark.parametrize(("collective", "measured_GBps"), [("all_reduce", 4.00), ("alltoall", 4.60)])
def test_two_rtx2080ti_without_p2p_match_the_published_table(collective, measured_GBps):
    # Anthony-Hoo/Anthony-Hoo.github.io, AutoDL_Multi-GPU_Interconnection_Test.md: 2x RTX 2080 Ti, PCIe Gen3
    # x16 switch, P2P not supported; busbw at 1 GiB (the share comes from another machine: NVIDIA/nccl#384)
    assert _busbw_GBps(_predictor(p2p=False), collective) == pytest.approx(measured_GBps, rel=0.2)


def test_sendrecv_between_servers_keeps_the_local_pairs_host_path():
    """nccl-tests sendrecv sends rank r's bytes to r + 1: on 2 servers of 2 GPUs without P2P between them (the
    Dell R760xa L40S description, one GPU per CPU socket), ranks 0 -> 1 and 2 -> 3 are pairs inside a server,
    through host memory as on one server. The SHM bound was applied on one node only, so the 4-rank run came out
    3.5x faster than the 2-rank run it contains (31.5 against 9.1 GB/s busbw at 1 GiB, the 31.5 the PCIe
    link's line rate)."""
    from pathlib import Path

    from gpuwait.runner.perf import make_predictor

    cluster = str(Path(__file__).resolve().parents[1] / "nccltests" / "data" / "reference" / "clusters"
                  / "r760xa-l40s-2x400g.yaml")
    one, two = make_predictor(cluster, 1, None), make_predictor(cluster, 2, None)
    assert (one.comm.n_ranks, two.comm.n_ranks) == (2, 4) and not two.p2p
    assert two.estimate("sendrecv", GiB).time_s >= one.estimate("sendrecv", GiB).time_s * 0.999
