"""NCCL's PCI path types and its P2P / GPUDirect RDMA decisions (gpuwait.topology.pcipath).

Published behaviour the tests check (NVIDIA/nccl v2.27.3-1, src/graph/paths.cc and topo.h; NCCL env.rst):

* ``ncclTopoCheckGdr``: GDR when the GPU-NIC path is at most NCCL_NET_GDR_LEVEL, default PXB; a C2C GPU's
  NIC on its CPU (P2C) counts as C2C while NCCL_NET_GDR_C2C=1 (default); reads are off with
  NCCL_NET_GDR_READ=0, and by default before SM80 when the GPU has no NVLink peer.
* ``ncclTopoCheckP2p``: P2P when the GPU-GPU path is at most PXB ("don't use P2P across CPU Host Bridges"),
  SYS on AMD x86 hosts with at most 2 GPUs; NCCL_P2P_LEVEL overrides.
* A GPU whose NIC is on another host bridge of its CPU shows as NODE in ``nvidia-smi topo -m`` (NCCL's PHB):
  the Dell R760xa of github schmaustech/nvidia-tools-image README.md ("a non optimal setup of NODE").
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwait.collectives.communicator import Communicator
from gpuwait.collectives.ncclenv import parse_env_pairs
from gpuwait.errors import SpecError
from gpuwait.fabric.perf import CollectivePredictor
from gpuwait.spec import ClusterSpec
from gpuwait.spec.cluster import ServerSpec
from gpuwait.spec.load import load_model
from gpuwait.topology import build_cluster
from gpuwait.topology.pcipath import gdr_enabled, gpu_gpu_path, gpu_nic_path, node_uses_gdr, parse_level, uses_p2p
from gpuwait.topology.servers import resolve_server
from gpuwait.transport.profiles import TRANSPORTS

CLUSTERS = Path(__file__).resolve().parents[1] / "nccltests" / "data" / "reference" / "clusters"
R760 = resolve_server(ServerSpec(template="pcie-8gpu", gpus=2, nics=1, nic_speed=50e9, pcie_switches=3,
                                 gpu_pcie_switch=[0, 2], nic_pcie_switch=[1]))


def test_path_types_follow_the_pcie_layout():
    assert gpu_nic_path(R760, 0, 0) == "PHB" and gpu_nic_path(R760, 1, 0) == "SYS"
    assert gpu_gpu_path(R760, 0, 1) == "SYS"
    dgx = resolve_server(ServerSpec(template="dgx-h100"))
    assert gpu_nic_path(dgx, 0, 0) == "PIX" and gpu_gpu_path(dgx, 0, 5) == "NVL"
    pairs = resolve_server(ServerSpec(template="a100-pcie-nvlink-pairs"))
    # 8 GPUs on 4 switches, 2 switches per socket
    assert [gpu_gpu_path(pairs, 0, g) for g in (1, 2, 4)] == ["NVL", "PHB", "SYS"]
    assert gpu_nic_path(resolve_server(ServerSpec(template="gh200-quad")), 1, 1) == "P2C"


def test_gdr_follows_nccl_net_gdr_level():
    assert not gdr_enabled(R760, 0, 0, read=False)                      # PHB > PXB
    assert gdr_enabled(R760, 0, 0, read=False, user_level="PHB")
    assert not gdr_enabled(R760, 1, 0, read=False, user_level="PHB")    # SYS > PHB
    assert gdr_enabled(R760, 1, 0, read=True, user_level="SYS")
    assert not gdr_enabled(resolve_server(ServerSpec(template="dgx-h100")), 0, 0, read=False, user_level="LOC")


def test_gdr_on_a_superchip_counts_its_cpu_nic_as_c2c():
    gh200 = resolve_server(ServerSpec(template="gh200-quad"))
    assert gdr_enabled(gh200, 0, 0, read=True) and gdr_enabled(gh200, 0, 0, read=False)
    assert not gdr_enabled(gh200, 0, 0, read=False, gdr_c2c=False)  # P2C > PXB


def test_gdr_reads_before_ampere_need_an_nvlink_peer_or_the_variable():
    rtx = resolve_server(ServerSpec(template="rtx2080ti-pcie-2gpu", nics=1, nic_pcie_switch=[0]))
    assert gdr_enabled(rtx, 0, 0, read=False, node_gpus=[0, 1])
    assert not gdr_enabled(rtx, 0, 0, read=True, node_gpus=[0, 1])
    assert gdr_enabled(rtx, 0, 0, read=True, node_gpus=[0])             # a lone GPU keeps it
    assert gdr_enabled(rtx, 0, 0, read=True, gdr_read=True, node_gpus=[0, 1])
    assert not gdr_enabled(resolve_server(ServerSpec(template="dgx-h100")), 0, 0, read=True, gdr_read=False)


def test_p2p_level_default_intel_amd_and_override():
    assert not uses_p2p(R760, [0, 1])                                   # SYS on an Intel host
    assert uses_p2p(R760, [0, 1], "SYS")
    assert uses_p2p(R760.model_copy(update={"cpu_vendor": "amd"}), [0, 1])  # AMD, 2 GPUs
    eight = resolve_server(ServerSpec(template="pcie-8gpu", cpu_vendor="amd"))
    assert not uses_p2p(eight, range(8)) and uses_p2p(eight, [0, 1])    # same switch: PIX


def test_levels_parse_names_and_old_integers_or_fail_clearly():
    assert [parse_level(v, "NCCL_P2P_LEVEL") for v in ("LOC", "0", "1", "3", "4", "9", None)] == [
        "LOC", "LOC", "PIX", "PHB", "SYS", "SYS", None]
    with pytest.raises(SpecError, match="NCCL_P2P_LEVEL: got 'NEAR'; expected one of"):
        parse_level("NEAR", "NCCL_P2P_LEVEL")


def test_node_gdr_on_every_template_with_a_nic_per_switch():
    for name in ("dgx-h100", "dgx-a100", "p5-48xlarge", "gb200-nvl72", "gh200-quad"):
        server = resolve_server(ServerSpec(template=name))
        assert node_uses_gdr(server, range(server.gpus)), name


def _plateau_busbw(env=()):
    spec = load_model(ClusterSpec, CLUSTERS / "r760xa-l40s-2x400g.yaml")
    topo = build_cluster(spec.model_copy(update={"server": spec.server.model_copy(update={"template": "pcie-8gpu"})}))
    comm = Communicator.world(topo)
    predictor = CollectivePredictor.create(comm, parse_env_pairs(("NCCL_ALGO=Ring", *env)), topo.spec.routing,
                                           TRANSPORTS[topo.spec.transport.name])
    n_bytes = 2**30
    return n_bytes / predictor.estimate("all_reduce", n_bytes).time_s * 2 * (comm.n_ranks - 1) / comm.n_ranks


def test_host_staging_slows_the_l40s_roce_cluster_and_the_variables_restore_it():
    staged = _plateau_busbw()
    direct = _plateau_busbw(("NCCL_NET_GDR_LEVEL=SYS", "NCCL_P2P_LEVEL=SYS"))
    assert staged < direct
