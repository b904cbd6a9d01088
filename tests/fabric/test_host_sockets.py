"""Rings through host memory that cross CPU sockets: NCCL's socket link in its ring search.

NCCL's topology joins two CPU sockets by a LINK_SYS each way whose bandwidth depends on the CPU
(``ncclTopoGetInterCpuBw``, src/graph/topo.cc; topo.h BDW_QPI_BW 6, SKL_QPI_BW 10, SRP_QPI_BW 22,
ERP_QPI_BW 40, AMD_BW 16 GB/s; NVIDIA/nccl v2.27.3-1). Without P2P between the sockets' GPUs (SHM), and
between nodes without GPUDirect RDMA, a ring channel leaves the first socket once and comes back once;
search.cc ``followPath`` charges a path's links forward only (the reverse link only for paths into a
GPU older than SM80 from a NIC or CPU, and POWER NVLink), so one channel at ``s`` takes ``s`` of each
direction: ``n * s <= QPI``.

Closed forms, one L40S (PCIe Gen4 x16: NCCL's 24 GB/s) per socket. Every GPU->GPU hop then crosses the
sockets (PATH_SYS), which followPath does not charge Intel's 6/5 (it charges PATH_PHB paths only):

* Sapphire Rapids (22 GB/s): min(24, 22) = 22 -> 1 channel at 20 GB/s, the fastest speed of the search's
  array at or below it (speedArrayInter: ..., 24, 20, ...).
* Emerald Rapids (40 GB/s): min(24, 40) = 24 GB/s (2 x 12 from the intra-node speed array, 1 x 24 from the
  inter-node one): the GPU's PCIe holds it.
* Skylake class (10 GB/s, NCCL's class for Skylake, Cascade Lake and Ice Lake; NCCL before 2.26 also
  reads Sapphire Rapids as Skylake): 1 channel at 10 GB/s; Broadwell (6 GB/s): 6.
* With two GPUs on one socket (a PATH_PHB hop) the 6/5 stays: 24 / (6/5) = 20.

The SHM figures are what NVIDIA gives for the same path: "using NICs instead of SHM you would always stay
within the PCI switch and achieve 12GB/s instead of 9 or 6" (S. Jeaugey, NVIDIA/nccl#406, Gen3 era).

Scored on the L40S RoCE table (tests/nccltests/data/reference/l40s-roce-2node-4gpu-all_reduce-ring.log,
R760xa, NCCL 2.27.3): the R760xa takes Sapphire or Emerald Rapids only. What sets that table's 9.6 GB/s
plateau in the model is each GPU sending and receiving through host memory at once (every GPU of that ring
reads and writes host memory: the SHM hop and the network staged without GPUDirect), which keeps
3.9 / 10.31 of the GPU's PCI path each way (NVIDIA/nccl#384): NCCL's 24 GB/s for Gen4 x16 (no 6/5 on the
SYS path) x 0.378 = 9.1 GB/s, 5.5 % under the table; the socket link (22 or 40 GB/s each way) does not bind.
Before, the model charged the search's planning speed (20 GB/s, 6/5 included) and read 7.6 GB/s.
"""

from __future__ import annotations

from pathlib import Path

import pydantic
import pytest

from gpuwait.collectives.tuning import host_path_ring_graph, host_pci_path_GBps, inter_cpu_bw_GBps, pci_bw_GBps
from gpuwait.errors import SpecError
from gpuwait.fabric.perf import SHM_BIDIRECTIONAL_SHARE
from gpuwait.runner.perf import make_predictor
from gpuwait.spec import ClusterSpec

R760XA = str(Path(__file__).resolve().parents[1] / "nccltests" / "data" / "reference" / "clusters"
             / "r760xa-l40s-2x400g.yaml")
GiB = 2**30


@pytest.mark.parametrize(("generation", "speed"), [("broadwell", 6.0), ("skylake", 10.0),
                                                   ("sapphire-rapids", 20.0), ("emerald-rapids", 24.0)])
def test_one_gpu_per_socket_closed_form(generation, speed):
    """The search's total (channels x speed); at 24 GB/s the intra-node speed array (no 24) gives 2 x 12."""
    graph = host_path_ring_graph(pci_bw_GBps(4), 1, 89, intel_cpu=True,
                                 inter_cpu_GBps=inter_cpu_bw_GBps("intel", generation), same_socket_hops=False)
    assert graph.n_channels * graph.bw_intra_GBps == speed


def test_intel_overhead_on_same_socket_hops_only():
    """search.cc followPath (v2.27.3-1): INTEL_P2P_OVERHEAD only on a PATH_PHB path from a GPU."""
    assert host_pci_path_GBps(pci_bw_GBps(4), 1, intel_cpu=True) == pytest.approx(20.0)
    assert host_pci_path_GBps(pci_bw_GBps(4), 1, intel_cpu=True, same_socket_hops=False) == 24.0
    assert host_pci_path_GBps(pci_bw_GBps(3), 2, intel_cpu=False) == 6.0
    graph = host_path_ring_graph(pci_bw_GBps(4), 1, 89, intel_cpu=True, inter_cpu_GBps=40.0)
    assert graph.bw_intra_GBps == 20.0  # two GPUs on a socket: the PHB hop keeps the 6/5


def test_release_before_2_26_reads_sapphire_rapids_as_skylake():
    from gpuwait.collectives.nccl_versions import nccl_release

    assert inter_cpu_bw_GBps("intel", "sapphire-rapids", nccl_release("2.25.1")) == 10.0
    assert inter_cpu_bw_GBps("intel", "emerald-rapids", nccl_release("2.26.2")) == 40.0
    assert inter_cpu_bw_GBps("amd", None) == 16.0 and inter_cpu_bw_GBps("intel", None) is None


def test_the_specs_generations_are_the_tables():
    """server.cpu_generation takes exactly the Intel generations NCCL's table has (spec sits below collectives)."""
    import typing

    from gpuwait.collectives.tuning import INTEL_GENERATIONS
    from gpuwait.spec.cluster import ServerSpec

    allowed = typing.get_args(typing.get_args(ServerSpec.model_fields["cpu_generation"].annotation)[0])
    assert allowed == INTEL_GENERATIONS


def test_unknown_generation_is_refused():
    with pytest.raises(SpecError, match="cpu_generation"):
        inter_cpu_bw_GBps("intel", "amd")
    with pytest.raises(pydantic.ValidationError, match="cpu_generation"):
        ClusterSpec.model_validate({"preset": "dgx-h100", "server": {"cpu_generation": "haswell"}})


def _r760(tmp_path: Path, generation: str | None, version: str = "2.27.3"):
    """The R760xa cluster file with ``cpu_generation`` replaced (None: left out)."""
    text = Path(R760XA).read_text().replace("  cpu_generation: sapphire-rapids\n",
                                             f"  cpu_generation: {generation}\n" if generation else "")
    path = tmp_path / f"r760xa-{generation}.yaml"
    path.write_text(text)
    return make_predictor(str(path), 2, 2, {"NCCL_ALGO": "Ring"}, nccl_version=version)


@pytest.mark.parametrize(("generation", "version", "bw"), [("sapphire-rapids", "2.27.3", 20.0),
                                                           ("emerald-rapids", "2.27.3", 24.0),
                                                           ("sapphire-rapids", "2.25.1", 10.0),
                                                           ("skylake", "2.27.3", 10.0),
                                                           (None, "2.27.3", 24.0)])
def test_r760xa_ring_search(tmp_path, generation, version, bw):
    ring = _r760(tmp_path, generation, version).tuning_inputs("all_reduce").graph("ring")
    # the search's 1 channel, which the kernels run on 2 (connect.cc ncclTopoPostset)
    assert (ring.n_channels, ring.bw_intra_GBps, ring.channels_run) == (1, bw, 2)


def test_r760xa_broadwell_ring_runs_at_the_socket_link(tmp_path):
    """The same box with a Broadwell CPU: NCCL's socket link (6 GB/s, charged each direction: followPath
    charges a path forward only) is below the GPU's PCI path with SHM_BIDIRECTIONAL_SHARE (24 x 0.378 = 9.1),
    so it holds the ring; a Skylake-class link (10 GB/s) does not."""
    spr, bdw, skl = (_r760(tmp_path, g) for g in ("sapphire-rapids", "broadwell", "skylake"))
    t_spr, t_bdw, t_skl = (p.estimate("all_reduce", GiB).time_s for p in (spr, bdw, skl))
    assert t_bdw > 1.4 * t_spr
    assert 1.5 * GiB / t_bdw / 1e9 == pytest.approx(6.0, rel=0.03)
    assert t_skl == pytest.approx(t_spr, rel=1e-9)


def test_one_socket_is_not_charged():
    """Two RTX 2080 Ti behind one switch (one socket): the socket link never enters the graph."""
    spec = {"preset": "dgx-h100", "servers": 1,
            "server": {"template": "rtx2080ti-pcie-2gpu", "gpu_p2p": False, "cpu_generation": "broadwell"}}
    from gpuwait.collectives.communicator import Communicator
    from gpuwait.collectives.ncclenv import NcclEnv
    from gpuwait.fabric.perf import CollectivePredictor
    from gpuwait.spec import RoutingSpec
    from gpuwait.topology.presets import build_cluster
    from gpuwait.transport import TRANSPORTS

    topo = build_cluster(ClusterSpec.model_validate(spec))
    predictor = CollectivePredictor.create(Communicator.world(topo), NcclEnv(), RoutingSpec(), TRANSPORTS["rocev2"])
    inputs = predictor.tuning_inputs("all_reduce")
    assert (inputs.ring.n_channels, inputs.ring.bw_intra_GBps) == (1, 5.0)


def test_r760xa_plateau_against_the_published_table(tmp_path):
    """l40s-roce-2node-4gpu-all_reduce-ring.log (schmaustech/nvidia-tools-image README, "NCCL Test Example",
    second run): 9.6 GB/s busbw from 16 MiB to 8 GiB. The model: one GPU's PCI path at NCCL's 24 GB/s for Gen4
    x16 (topo.cc: width x 16 GT/s / 80; a cross-socket SYS path, no Intel 6/5) x the bidirectional share of
    NVIDIA/nccl#384 = 9.1 GB/s, 5.5 % low; the search's planning speed (20 GB/s) read 7.6, 21 % low."""
    pred = _r760(tmp_path, "sapphire-rapids")
    busbw_GBps = 1.5 * 2**33 / pred.estimate("all_reduce", 2**33).time_s / 1e9
    assert busbw_GBps == pytest.approx(24.0 * SHM_BIDIRECTIONAL_SHARE, rel=0.02)
    assert 0.9 < busbw_GBps / 9.6 < 1.0


def test_lone_gpu_staged_both_ways_keeps_the_share():
    """One L40S per node, network staged through host memory (no GPUDirect at NCCL's default GDR level: GPU
    and NIC on different host bridges of one CPU, PATH_PHB): the GPU receives the ring from its NIC and sends
    it back through host memory at once, NVIDIA/nccl#384's condition, so its PCI path keeps the share each
    way: NCCL's 24 GB/s for Gen4 x16 over Intel's 6/5 (a PHB path from the GPU) x 0.378 = 7.6 GB/s busbw.
    The published L40S socket table (l40s-tcp-2node-2gpu-all_reduce-ring.log, schmaustech/nvidia-tools-image
    README.md, NCCL 2.27.3; 2 ranks, so busbw = algbw) shows 8.1 GB/s at 8 GiB: 7 % under it (the socket
    model alone read 9.1 GB/s, 13 % over). RoCE without GPUDirect takes the same host path."""
    for env in (["NCCL_IB_DISABLE=1", "NCCL_IBEXT_DISABLE=1", "NCCL_ALGO=Ring"], ["NCCL_ALGO=Ring"]):
        pred = make_predictor(R760XA, 2, 1, env, "2.27.3")
        busbw_GBps = 2**33 / pred.estimate("all_reduce", 2**33).time_s / 1e9
        assert busbw_GBps == pytest.approx(20.0 * SHM_BIDIRECTIONAL_SHARE, rel=0.02)
    assert 0.9 < busbw_GBps / (2**33 / 1058307e-6 / 1e9) < 1.0


def test_share_not_charged_where_the_host_path_runs_one_way():
    """Several NVLink GPUs per node: a channel's entry GPU only receives from host memory and its exit GPU
    only sends, so the bidirectional share is not charged; a GPU reaching its CPU over NVLink-C2C has no
    PCIe path to charge."""
    dgx = make_predictor("dgx-h100", 2, 8, ["NCCL_IB_DISABLE=1"], "2.27.3")
    assert dgx.p2p and dgx.host_staged_network and dgx._shm_time_s("all_reduce", 2**30, "ring") == 0.0
    gh200 = str(Path(R760XA).parent / "alps-gh200-nocxi.yaml")
    lone = make_predictor(gh200, 2, 1, [], None)
    assert lone._shm_time_s("all_reduce", 2**30, "ring") == 0.0
