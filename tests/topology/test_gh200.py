"""The quad GH200 node (``gh200-quad``): 4 Grace-Hopper superchips, NVLink4 mesh, one NIC per superchip.

Sources of the expectations:

* NVIDIA GH200 Grace Hopper Superchip datasheet: NVLink-C2C 900 GB/s between Grace and Hopper
  (450 GB/s per direction); 18 NVLink4 links, 900 GB/s per GPU.
* Juelich Supercomputing Centre, JUPITER configuration page (apps.fz-juelich.de/jsc/hps/jupiter/
  configuration.html), the same 4-superchip board: "NVLink 4 GPU-to-GPU links, 300 GB/s between pairs of
  GPUs (150 GB/s per direction)" -- 6 of the 18 links per peer; no NVSwitch (CSCS docs, docs/alps/hardware.md).
* CSCS docs docs/alps/hardware.md: "four Grace-Hopper modules and four corresponding network interface cards".
* All-reduce busbw bounds (nccl-tests doc/PERFORMANCE.md): a ring's busbw is at most the per-node network
  bandwidth when it crosses nodes; a 2-node tree sends each byte across once each way, so its busbw can reach
  2(n-1)/n x the node's network bandwidth.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gpuwait.collectives.communicator import Communicator
from gpuwait.collectives.ncclenv import parse_env_pairs
from gpuwait.fabric.perf import CollectivePredictor
from gpuwait.spec import ClusterSpec
from gpuwait.spec.cluster import ServerSpec
from gpuwait.spec.load import load_model
from gpuwait.topology import build_cluster
from gpuwait.topology.build import gpu_nic_affinity
from gpuwait.topology.model import LinkKind
from gpuwait.topology.servers import resolve_server
from gpuwait.transport.profiles import TRANSPORTS

ALPS = Path(__file__).resolve().parents[1] / "nccltests" / "data" / "reference" / "clusters" / "alps-gh200-slingshot.yaml"
MiB = 2**20


def _topo(servers=1):
    return build_cluster(ClusterSpec.model_validate({"servers": servers, "server": {"template": "gh200-quad"},
                                                     "fabric": {"kind": "clos" if servers > 1 else "none"}}))


def test_four_gpus_in_a_mesh_of_six_nvlink4_links_per_pair():
    topo = _topo()
    nvlink = topo.link_kind == LinkKind.NVLINK
    assert topo.gpus_per_server == 4 and not any("nvsw" in name for name in topo.node_name)
    # 6 pairs x 2 directions, each 150 GB/s per direction = 6 links x 25 GB/s
    assert nvlink.sum() == 12 and np.allclose(topo.link_capacity_Bps[nvlink], 150e9)


def test_each_superchip_has_its_own_nic_and_c2c_to_its_grace():
    server = resolve_server(ServerSpec(template="gh200-quad"))
    assert gpu_nic_affinity(server)[:, 0].tolist() == [0, 1, 2, 3]
    assert server.cpus == 4 and server.cpu_vendor == "arm" and server.nic_speed * 8 == 200e9
    topo = _topo()
    gpu_up = (topo.link_kind == LinkKind.PCIE) & np.isin(topo.link_src, topo.gpu_node.ravel())
    assert np.allclose(topo.link_capacity_Bps[gpu_up], 450e9)  # NVLink-C2C, not PCIe
    nic_up = (topo.link_kind == LinkKind.PCIE) & np.isin(topo.link_src, topo.nic_node.ravel())
    assert np.allclose(topo.link_capacity_Bps[nic_up], 31.5e9)  # the Cassini NIC's PCIe Gen4 x16


def test_a_server_without_the_field_keeps_its_pcie_uplink():
    topo = build_cluster(ClusterSpec.model_validate({"server": {"template": "dgx-h100"}, "fabric": {"kind": "none"}}))
    gpu_up = (topo.link_kind == LinkKind.PCIE) & np.isin(topo.link_src, topo.gpu_node.ravel())
    assert np.allclose(topo.link_capacity_Bps[gpu_up], 63e9)


def _busbw(spec, n_bytes, env=()):
    topo = build_cluster(spec)
    comm = Communicator.world(topo)
    predictor = CollectivePredictor.create(comm, parse_env_pairs(env), topo.spec.routing,
                                           TRANSPORTS[topo.spec.transport.name])
    estimate = predictor.estimate("all_reduce", n_bytes)
    n = comm.n_ranks
    return n_bytes / estimate.time_s * 2 * (n - 1) / n, estimate


def test_two_alps_nodes_stay_under_the_tree_bound_of_their_slingshot_nics():
    spec = load_model(ClusterSpec, ALPS)
    busbw_Bps, estimate = _busbw(spec, 1024 * MiB, ("NCCL_PROTO=^LL128",))
    nics_Bps = 4 * 25e9
    assert busbw_Bps <= 2 * 7 / 8 * nics_Bps
    assert estimate.protocol != "LL128"


def test_single_node_ring_runs_on_the_mesh_not_an_nvswitch():
    # no NVSwitch: NCCL has no NVLS on the mesh (it needs NVSwitch). A ring hop is one GPU pair's 6 links,
    # 150 GB/s per direction, but NCCL's graph search puts each channel on links with bandwidth left
    # (src/graph/search.cc), so the channels' rings cover all three of a GPU's pairs: more than one pair's
    # 150 GB/s, at most the GPU's 3 x 150
    busbw_Bps, estimate = _busbw(ClusterSpec.model_validate({"server": {"template": "gh200-quad"},
                                                             "fabric": {"kind": "none"}}), 1024 * MiB)
    assert estimate.algorithm not in ("nvls", "nvls_tree")
    assert 150e9 < busbw_Bps <= 3 * 150e9
