"""Where host-staged network bytes run (issue 12): NCCL without GPUDirect RDMA, and its socket transport.

NCCL's source (NVIDIA/nccl v2.27.3-1): ``src/graph/paths.cc`` ``ncclTopoComputePaths`` diverts the GPU<->NIC
path through the CPU local to the GPU when ``ncclTopoCheckGdr`` says no (``addInterStep(system, CPU,
localCpu, NET, n, GPU, g)`` and back); ``src/transport/net.cc`` then maps the connection's buffers in host
memory (``NCCL_NET_MAP_ADD_POINTER(map, 0, ... useGdr ? 1 : 0, ...)``) and NCCL's kernel writes (send) and
reads (receive) them itself, with no further copy; ``src/transport/net_socket.cc`` declares
``NCCL_PTR_HOST`` only, so sockets always stage. So each network byte crosses the GPU's PCIe link once and the
NIC's once; a PCIe switch that holds both carries it twice on its uplink (once GPU<->host, once host<->NIC).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpuwait.runner.perf import make_predictor

REFERENCE = Path(__file__).resolve().parents[2] / "tests" / "nccltests" / "data" / "reference"
SIZE = 2**30


def _link_bytes(predictor, collective: str = "sendrecv") -> dict[str, float]:
    estimate = predictor.estimate(collective, SIZE)
    topo = predictor.comm.topo
    loads = predictor.link_bytes(estimate)
    return {topo.link_name(i): float(loads[i]) for i in range(topo.n_links) if topo.link_name(i).startswith("s0.")}


def test_no_gdr_sends_the_network_through_the_switch_uplink_twice():
    # one GPU per DGX H100 (GPU and NIC on one PCIe switch); sendrecv is nccl-tests' ring shift: each GPU
    # sends SIZE and receives SIZE over the network
    staged = make_predictor("dgx-h100", 2, 1, ["NCCL_NET_GDR_LEVEL=LOC"])
    assert not staged.gdr and staged.host_staged_network
    links = _link_bytes(staged)
    assert links["s0.gpu0->s0.pcie0"] == pytest.approx(SIZE, rel=1e-6)  # the GPU's link: once
    assert links["s0.pcie0->s0.nic0"] == pytest.approx(SIZE, rel=1e-6)  # the NIC's link: once
    # the uplink: the GPU's send to host memory and the NIC's receive into it (and both back down)
    assert links["s0.pcie0->s0.cpu0"] == pytest.approx(2 * SIZE, rel=1e-6)
    assert links["s0.cpu0->s0.pcie0"] == pytest.approx(2 * SIZE, rel=1e-6)
    # with GPUDirect RDMA (the default PXB level: GPU and NIC behind one switch) the uplink stays idle
    direct = make_predictor("dgx-h100", 2, 1)
    assert direct.gdr and not direct.host_staged_network
    assert _link_bytes(direct)["s0.pcie0->s0.cpu0"] == 0.0


def test_sockets_stage_and_gpudirect_tcpx_does_not():
    sockets = make_predictor("dgx-h100", 2, 1, ["NCCL_IB_DISABLE=1"])
    assert sockets.host_staged_network
    assert _link_bytes(sockets)["s0.pcie0->s0.cpu0"] == pytest.approx(2 * SIZE, rel=1e-6)


def test_l40s_host_staging_crosses_each_link_once():
    """The published L40S RoCE table (schmaustech/nvidia-tools-image README, NCCL 2.27.3): GPU0 and the NIC
    hang off different root ports of CPU0 (NODE), GPU1 off CPU1. Without GPUDirect, NCCL's path already runs
    through the CPU, so staging adds no crossing: every byte a rank sends crosses its GPU's PCIe link once
    (ring all_reduce: 2 (n - 1) / n of the size per rank), and the plateau gap to the table (9.6 GB/s measured,
    NCCL's own ring graph says 20) is not a double crossing."""
    predictor = make_predictor(str(REFERENCE / "clusters" / "r760xa-l40s-2x400g.yaml"), 2, 2, ["NCCL_ALGO=Ring"])
    assert predictor.host_staged_network and not predictor.p2p
    links = _link_bytes(predictor, "all_reduce")
    n = predictor.comm.n_ranks
    per_rank = 2 * (n - 1) / n * SIZE
    for gpu in ("gpu0", "gpu1"):
        assert links[f"s0.{gpu}->s0.pcie{0 if gpu == 'gpu0' else 2}"] == pytest.approx(per_rank, rel=1e-6)
    assert np.isclose(links["s0.nic0->s0.pcie1"], links["s0.pcie1->s0.nic0"])
