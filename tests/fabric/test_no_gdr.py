"""GPUDirect RDMA off (``NCCL_NET_GDR_LEVEL=LOC``) on two DGX H100: NCCL's inter-node ring through the CPU.

Without GPUDirect RDMA NCCL routes every GPU<->NIC path through the CPU (NVIDIA/nccl v2.30.7-1
src/graph/paths.cc ``addInterStep``), and its search charges those paths on the PCIe switch's uplink:
a channel's path in from the NIC at its speed ``s``, its path out from the GPU at ``6/5 s`` on an Intel
CPU (src/graph/search.cc ``followPath``, ``INTEL_P2P_OVERHEAD``). The ``dgx-h100`` preset has 4 PCIe Gen5
switches, each with 2 GPUs and 2 NICs; NCCL reads a Gen5 x16 link
as 48 GB/s (topo.cc): per switch 48 / 2.2 = 21.8 GB/s holds 1 channel at 20 GB/s (the SM90 search
speeds), 4 channels on the node: NCCL's ring ceiling 4 x 20 = 80 GB/s busbw, against 16 x 25 with
GPUDirect. The kernels run twice the search's channels (src/graph/connect.cc ``ncclTopoPostset``): 8.
NVIDIA's direction: "The one case where GPU Direct RDMA is needed is when the NIC and GPU are
on the same PCI switch" (S. Jeaugey, NVIDIA/nccl#465); NCCL's environment documentation describes
NCCL_NET_GDR_LEVEL as the switch for using GPUDirect RDMA between a NIC and a GPU.

Before, the model fitted these channels to the SHM graph (GPU->GPU through the CPU, 2 GPUs per switch):
1 channel, 20 GB/s busbw for a 1 GiB ring all-reduce.
"""

from __future__ import annotations

from pathlib import Path

from gpuwait.collectives.tuning import host_staged_net_ring_graph, pci_bw_GBps
from gpuwait.runner.perf import make_predictor

GiB = 2**30


def _busbw_GBps(env: list[str]) -> tuple[float, int]:
    predictor = make_predictor("dgx-h100", 2, None, env)
    est = predictor.estimate("all_reduce", GiB)
    n = predictor.comm.n_ranks
    return 2 * (n - 1) / n * GiB / est.time_s / 1e9, est.n_channels


def test_search_through_the_cpu_closed_form():
    graph = host_staged_net_ring_graph(pci_bw_GBps(5), 4, 90, intel_cpu=True)
    assert (graph.n_channels, graph.bw_intra_GBps) == (4, 20.0)
    # AMD: no 6/5 overhead, 48 / 2 = 24 GB/s per switch: one channel at 24
    amd = host_staged_net_ring_graph(pci_bw_GBps(5), 4, 90, intel_cpu=False)
    assert (amd.n_channels, amd.bw_intra_GBps) == (4, 24.0)


def test_dgx_h100_ring_without_gdr_runs_eight_channels_and_is_slower():
    with_gdr, gdr_channels = _busbw_GBps(["NCCL_ALGO=Ring"])
    without, channels = _busbw_GBps(["NCCL_ALGO=Ring", "NCCL_NET_GDR_LEVEL=LOC"])
    # 4 search channels (one per switch), which ncclTopoPostset doubles for the kernels (connect.cc)
    assert (gdr_channels, channels) == (16, 8)
    assert without <= 80.0 * 1.001  # NCCL's own ring ceiling through the CPU
    assert without > 20.0  # not the SHM graph's single channel
    assert without < with_gdr / 2


def test_nccls_choice_without_gdr_is_slower_too():
    with_gdr, _ = _busbw_GBps([])
    without, _ = _busbw_GBps(["NCCL_NET_GDR_LEVEL=LOC"])
    assert without < with_gdr * 0.8


def test_gpu_and_nic_on_separate_root_ports_closed_form():
    """No switch holds both: the GPU's own link carries the path out at 6/5 s up and the path in at s down
    (search.cc ``followPath`` charges each path on its own direction), so a Gen4 x16 GPU (24 GB/s in NCCL's
    topo.cc) fits one channel at 20 GB/s, not 24 / 2.2 = 10.9 -> 10 as when GPU and NIC share an uplink."""
    shared = host_staged_net_ring_graph(pci_bw_GBps(4), 1, 89, intel_cpu=True)
    apart = host_staged_net_ring_graph(pci_bw_GBps(4), 1, 89, intel_cpu=True, nic_beside_gpu=False)
    assert (shared.n_channels, shared.bw_intra_GBps) == (1, 10.0)
    assert (apart.n_channels, apart.bw_intra_GBps) == (1, 20.0)


def test_l40s_one_gpu_per_node_over_roce_without_gdr():
    """Dell R760xa, L40S and ConnectX-7 on different host bridges of one CPU (nvidia-smi NODE in
    schmaustech/nvidia-tools-image README.md): NCCL's default NCCL_NET_GDR_LEVEL (PXB) turns GPUDirect RDMA
    off (paths.cc ``ncclTopoCheckGdr``), and the ring graph is NCCL's 1 channel at 20 GB/s."""
    cluster = str(Path(__file__).parents[1] / "nccltests/data/reference/clusters/r760xa-l40s-2x400g.yaml")
    predictor = make_predictor(cluster, 2, 1, [], "2.27.3")
    ring = predictor.tuning_inputs("all_reduce").graph("ring")
    assert not predictor.gdr
    assert (ring.n_channels, ring.bw_intra_GBps, ring.channels_run) == (1, 20.0, 2)


def test_socket_transport_stages_through_the_cpu_as_nccl_searches_it():
    """NCCL's socket transport takes host memory only (net_socket.cc ``NCCL_PTR_HOST``), so ncclTopoCheckGdr
    turns GPUDirect off and the ring graph is the staged one: on the L40S servers (GPU and NIC on separate
    root ports, Gen4 x16 GPU) 1 search channel at 20 GB/s, run on 2 (connect.cc ``ncclTopoPostset`` doubles
    ring channels, NVIDIA/nccl v2.27.3-1), not 2 x 25 GB/s from the 400 GbE port. NCCL's model then switches
    Ring LL -> Simple between 512 KiB and 1 MiB, where the published L40S socket table
    (schmaustech/nvidia-tools-image README.md, NCCL 2.27.3) changes slope: 159.9 us at 512 KiB, 166.4 us at
    1 MiB, 297.6 us at 2 MiB."""
    cluster = str(Path(__file__).parents[1] / "nccltests/data/reference/clusters/r760xa-l40s-2x400g.yaml")
    predictor = make_predictor(cluster, 2, 1, ["NCCL_IB_DISABLE=1", "NCCL_IBEXT_DISABLE=1", "NCCL_ALGO=Ring"], "2.27.3")
    ring = predictor.tuning_inputs("all_reduce").graph("ring")
    assert (ring.n_channels, ring.bw_intra_GBps, ring.channels_run) == (1, 20.0, 2)
    protocols = [predictor.estimate("all_reduce", n).protocol for n in (2**19, 2**20)]
    assert protocols == ["LL", "Simple"]
