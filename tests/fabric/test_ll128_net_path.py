"""LL128 and GPUDirect RDMA by default only on a network path NCCL admits for them.

Sources of the expectations (NVIDIA/nccl, src/graph/tuning.cc ``ncclTopoTuneModel``, the ``pEnable == 2``
branch for LL128, and src/graph/topo.h's path types):

* v2.25.1-1 and v2.26.2-1: LL128 is on by default when the graph's ``typeInter`` is at most PXB, or on Hopper
  (compute capability >= 90) at most PXN ("Other cases are not tested and may cause silent data corruption").
  There is no P2C type: a GH200 GPU reaches a NIC on its own Grace CPU's PCIe through the CPU's host bridge,
  PHB, beyond PXN.
* v2.27.3-1: ``NCCL_LL128_C2C`` (default 1) also admits P2C, the superchip GPU's own NIC behind its CPU; v2.28.3-1 to
  v2.30.7-1 order P2C below PXN and admit everything up to PXN on Hopper and later.
* An explicit ``NCCL_PROTO`` that enables LL128 (pEnable 1, not the default 2) skips the check.
* Without GPUDirect RDMA NCCL diverts the GPU<->NIC path through the GPU's CPU (src/graph/paths.cc
  ``addInterStep``, v2.25.1-1): its type is at least PHB.
* CSCS, whose GH200 nodes hang one Slingshot NIC off each Grace (eth-cscs/cscs-docs docs/alps/hardware.md),
  disables LL128 with the comment "Starting with nccl 2.27 a new protocol (LL128) was enabled by default"
  (docs/software/communication/nccl_env_vars): before 2.27 NCCL left it off there.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwait.runner.perf import make_predictor

CLUSTERS = Path(__file__).resolve().parents[1] / "nccltests" / "data" / "reference" / "clusters"
SIZES = [2**k for k in range(13, 28, 2)]


@pytest.fixture
def gh200_without_platform(tmp_path) -> str:
    """The Alps GH200 cluster without CSCS's hook settings (no NCCL_PROTO=^LL128, no NCCL_NET_GDR_LEVEL)."""
    cluster = tmp_path / "gh200.yaml"
    text = (CLUSTERS / "alps-gh200-slingshot.yaml").read_text()
    cluster.write_text(text.replace("name: slingshot", "name: slingshot\n  platform: none"))
    return str(cluster)


def _protocols(cluster: str, version: str, env=()) -> set[str]:
    predictor = make_predictor(cluster, 2, 4, env, version)
    return {predictor.estimate("all_reduce", size).protocol for size in SIZES}


@pytest.mark.parametrize("version", ["2.25.1", "2.26.2"])
def test_gh200_nic_behind_grace_runs_without_ll128_before_2_27(gh200_without_platform, version):
    assert "LL128" not in _protocols(gh200_without_platform, version)


@pytest.mark.parametrize("version", ["2.27.3", "2.30.7"])
def test_gh200_gets_ll128_from_2_27(gh200_without_platform, version):
    assert "LL128" in _protocols(gh200_without_platform, version)


def test_an_explicit_nccl_proto_still_enables_it(gh200_without_platform):
    assert _protocols(gh200_without_platform, "2.25.1", {"NCCL_PROTO": "LL128"}) == {"LL128"}


def test_pcie_switch_nic_keeps_ll128():
    """DGX H100: each GPU shares a PCIe switch with its NIC (PIX), within every release's limit."""
    predictor = make_predictor("dgx-h100", 2, 8, {}, "2.25.1")
    assert "LL128" in {predictor.estimate("all_reduce", size).protocol for size in SIZES}


def test_network_staged_through_the_cpu_has_no_ll128():
    """GPUDirect RDMA off: the path crosses the CPU (PHB), beyond every release's limit."""
    predictor = make_predictor("dgx-h100", 2, 8, {"NCCL_NET_GDR_LEVEL": "LOC"}, "2.30.7")
    assert not predictor.gdr
    assert "LL128" not in {predictor.estimate("all_reduce", size).protocol for size in SIZES}


@pytest.mark.parametrize(("version", "level", "gdr"), [("2.25.1", None, False), ("2.26.2", None, False),
                                                        ("2.25.1", "PHB", True), ("2.27.3", None, True)])
def test_gh200_gpudirect_needs_phb_before_2_27(gh200_without_platform, version, level, gdr):
    """``ncclTopoCheckGdr`` (src/graph/paths.cc): v2.25.1-1 reads a GH200's NIC on its Grace as PHB, beyond the
    default level PXB; v2.26.2-1 counts it as C2C only with ``NCCL_NET_GDR_C2C=1`` (default 0); from v2.27.3-1
    the P2C path counts as C2C by default. CSCS sets ``NCCL_NET_GDR_LEVEL=PHB`` on Alps ("Use GPU Direct RDMA
    when GPU and NIC are on the same NUMA node", cscs-docs nccl_env_vars)."""
    env = {"NCCL_NET_GDR_LEVEL": level} if level else {}
    assert make_predictor(gh200_without_platform, 2, 4, env, version).gdr is gdr
