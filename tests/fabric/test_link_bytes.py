"""Bytes per link of a ring all-reduce against its closed form, with and without GPUDirect RDMA.

A ring all-reduce of S bytes over n ranks and C channels sends, on every hop of every channel's ring,
2 (n-1) steps of S/(n C) bytes: 2 (n-1)/n x S/C per hop (Patarasuk and Yuan, "Bandwidth optimal
all-reduce algorithms for clusters of workstations", JPDC 2009; NCCL's ring: ``busbw = algbw x
2 (n-1)/n``, nccl-tests doc/PERFORMANCE.md). On two DGX H100 servers each channel's ring visits the 8
GPUs of a server over NVLink, its last GPU hands the chunk over NVLink to the GPU on the next server's
rail (PXN), and that GPU's NIC sends it: every GPU sends and receives one NVLink hop per channel, and
each channel crosses the network twice (once each way between the two servers), on the rail of its
first GPU. So per GPU: NVLink 2 (n-1)/n x S each way, whatever the network path; per NIC: C/8 channels
x 2 (n-1)/n x S/C each way. Without GPUDirect RDMA (``NCCL_NET_GDR_LEVEL=LOC``) the same network bytes
stop in host memory: each crosses the sending GPU's PCIe switch up to its CPU, and back down to the NIC.

Before this test a link's bytes were its steady rate times the phase's whole time, so NVLink hops that
finish long before the network hop of the same phase were counted as sending to the end (22 GiB on
``gpu0->nvsw`` for a 1 GiB all-reduce without GDR).
"""

from __future__ import annotations

import numpy as np
import pytest

from gpuwait.fabric.perf import _REF_BYTES
from gpuwait.runner.perf import make_predictor
from gpuwait.topology.model import LinkKind, NodeKind

GiB = 2**30


def _predictor(gdr: bool):
    return make_predictor("dgx-h100", 2, None, [] if gdr else ["NCCL_NET_GDR_LEVEL=LOC"])


def _bytes(predictor, channels: int) -> np.ndarray:
    """Bytes per link of a 1 GiB ring all-reduce on ``channels`` channels."""
    return predictor._link_bytes_per_ref("all_reduce", "ring", "Simple", channels) * (GiB / _REF_BYTES)


def _link(topo, src: str, dst: str) -> int:
    return int(np.flatnonzero((topo.link_src == topo.node_id(src)) & (topo.link_dst == topo.node_id(dst)))[0])


@pytest.mark.parametrize("gdr", [True, False])
def test_ring_all_reduce_bytes_per_link_closed_form(gdr):
    predictor = _predictor(gdr)
    assert predictor.gdr is gdr
    topo, n, channels = predictor.comm.topo, predictor.comm.n_ranks, 16
    per_rank = 2 * (n - 1) / n * GiB
    link_bytes = _bytes(predictor, channels)
    for server in range(2):
        for gpu in range(8):
            name = f"s{server}.gpu{gpu}"
            assert link_bytes[_link(topo, name, f"s{server}.nvsw")] == pytest.approx(per_rank)
            assert link_bytes[_link(topo, f"s{server}.nvsw", name)] == pytest.approx(per_rank)
    # every NIC sends and receives C/8 channels' hops
    nic_up = (topo.link_kind == LinkKind.HOST) & (topo.node_kind[topo.link_src] == NodeKind.NIC)
    nic_down = (topo.link_kind == LinkKind.HOST) & (topo.node_kind[topo.link_dst] == NodeKind.NIC)
    assert link_bytes[nic_up] == pytest.approx(np.full(nic_up.sum(), per_rank / 8))
    assert link_bytes[nic_down] == pytest.approx(np.full(nic_down.sum(), per_rank / 8))
    # the sending GPU's PCIe carries its network bytes once either way
    up = _link(topo, "s0.gpu0", "s0.pcie0")
    assert link_bytes[up] == pytest.approx(per_rank / 8)
    # the host-staged path: a PCIe switch holds 2 GPUs and their 2 NICs; up to the CPU go the GPUs'
    # sent bytes and the NICs' received ones, down the reverse
    switch_up = link_bytes[_link(topo, "s0.pcie0", "s0.cpu0")]
    switch_down = link_bytes[_link(topo, "s0.cpu0", "s0.pcie0")]
    if gdr:
        assert switch_up == switch_down == 0.0
    else:
        assert switch_up == pytest.approx(4 * per_rank / 8)
        assert switch_down == pytest.approx(4 * per_rank / 8)


def test_link_bytes_scale_with_the_call():
    """``link_bytes`` of an estimate is the reference run scaled to the call's size, for any size."""
    predictor = make_predictor("dgx-h100", 2, None, ["NCCL_NET_GDR_LEVEL=LOC", "NCCL_ALGO=Ring"])
    topo = predictor.comm.topo
    est = predictor.estimate("all_reduce", GiB)
    assert est.algorithm == "ring"
    per_rank = 2 * (predictor.comm.n_ranks - 1) / predictor.comm.n_ranks * GiB
    link_bytes = predictor.link_bytes(est)
    assert link_bytes[_link(topo, "s0.gpu0", "s0.nvsw")] == pytest.approx(per_rank)
