"""NVLink domains that span servers (GB200 NVL72), NCCL's MNNVL view of them, and NVLink-bridged pairs.

Sources of the expectations:

* GB200 NVL72: 72 GPUs in 18 compute trays of 4, one NVLink domain through 9 NVLink Switch trays,
  1.8 TB/s per GPU (900 GB/s each way) — NVIDIA GB200 NVL72 product page.
* MNNVL: NCCL >= 2.20 treats the ranks of one NVLink clique as one node (src/graph/topo.cc and
  src/init.cc, NVIDIA/nccl v2.30.7-1); ``NCCL_MNNVL_ENABLE=0`` returns to one node per host.
* All-reduce bus bandwidth bounds (nccl-tests doc/PERFORMANCE.md): a ring moves 2(n-1)/n x S through
  each GPU's link each way, so its busbw is at most the per-GPU link bandwidth; NVLS moves about S each
  way, so busbw <= 2(n-1)/n x the per-GPU NVLink bandwidth.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpuwait.collectives.communicator import Communicator
from gpuwait.collectives.ncclenv import parse_env_pairs
from gpuwait.errors import SpecError, TopologyError
from gpuwait.fabric.perf import CollectivePredictor
from gpuwait.routing.paths import route_flows
from gpuwait.spec import ClusterSpec, RoutingSpec
from gpuwait.topology import build_cluster, build_preset
from gpuwait.topology.model import LinkKind
from gpuwait.transport.profiles import TRANSPORTS

GiB = 2**30
NVL72_GPU_Bps = 900e9  # per GPU per direction (NVIDIA GB200 NVL72 product page: 1.8 TB/s bidirectional)


def _predict(topo, collective="all_reduce", n_bytes=GiB, env=()):
    comm = Communicator.world(topo)
    predictor = CollectivePredictor.create(comm, parse_env_pairs(env), topo.spec.routing,
                                           TRANSPORTS[topo.spec.transport.name])
    estimate = predictor.estimate(collective, n_bytes)
    n = comm.n_ranks
    busbw_Bps = n_bytes / estimate.time_s * 2 * (n - 1) / n
    return estimate, busbw_Bps, predictor


def _path(topo, src, dst, **kw):
    routes = route_flows(topo, RoutingSpec(kind="static"), [src], [dst], transport="infiniband", **kw)
    return [topo.link_name(link) for link in routes.ordered_links(0, topo)[0]]


# ------------------------------------------------------------------------------------ topology
def test_nvl72_rack_is_one_nvswitch_domain_of_72_gpus():
    topo = build_preset("gb200-nvl72")
    assert topo.n_servers == 18 and topo.gpus_per_server == 4 and topo.n_gpus == 72
    assert topo.servers_per_nvlink_domain == 18
    assert topo.node_name[topo.nvlink_domain_switch].tolist() == ["nvl0.nvsw"]
    nvlink = (topo.link_kind == LinkKind.NVLINK) & np.isin(topo.link_src, topo.gpu_node.ravel())
    assert nvlink.sum() == 72 and np.allclose(topo.link_capacity_Bps[nvlink], NVL72_GPU_Bps)
    assert not any(name.endswith(".nvsw") and name.startswith("s") for name in topo.node_name)


@pytest.mark.parametrize(("servers", "domain"), [(1, 1), (2, 2), (16, 16), (18, 18), (36, 18)])
def test_gb300_rack_is_gb200_rack_with_gb300_trays(servers, domain):
    # GB300 NVL72: the same 18-tray NVLink domain per rack (NVIDIA GB300 NVL72 product page: 72 Blackwell Ultra GPUs,
    # 130 TB/s NVLink per rack), trays with 4 x 800 Gb/s ConnectX-8; a run on fewer trays is one domain of them all, as
    # OCI's 2- and 16-tray runs of one rack (oracle-quickstart/oci-gpu-quickstarts nvidia/GB300/README-GB300.md @96ac1ec4)
    topo = build_preset("gb300-nvl72", servers=servers)
    assert topo.servers_per_nvlink_domain == domain and topo.n_gpus == 4 * servers
    assert topo.spec.server.gpu_model == "GB300" and topo.spec.server.nic_speed == 100e9
    nvlink = (topo.link_kind == LinkKind.NVLINK) & np.isin(topo.link_src, topo.gpu_node.ravel())
    assert np.allclose(topo.link_capacity_Bps[nvlink], NVL72_GPU_Bps)


def test_intra_domain_traffic_takes_nvlink_and_inter_domain_the_nics():
    topo = build_preset("gb200-nvl72", servers=36)
    assert _path(topo, "s0.gpu0", "s17.gpu3") == ["s0.gpu0->nvl0.nvsw", "nvl0.nvsw->s17.gpu3"]
    assert _path(topo, "s0.gpu0", "s0.gpu1") == ["s0.gpu0->nvl0.nvsw", "nvl0.nvsw->s0.gpu1"]
    across = _path(topo, "s0.gpu0", "s18.gpu0")
    assert across[1] == "s0.pcie0->s0.nic0" and "nvl0.nvsw" not in " ".join(across)
    # NCCL_MNNVL_ENABLE=0: trays of one rack talk over the network, a tray's own GPUs still over NVLink
    assert "s0.nic0" in " ".join(_path(topo, "s0.gpu0", "s5.gpu0", nvlink_domains=False))
    assert _path(topo, "s0.gpu0", "s0.gpu1", nvlink_domains=False) == ["s0.gpu0->nvl0.nvsw", "nvl0.nvsw->s0.gpu1"]


@pytest.mark.parametrize(("fields", "message"), [
    ({"servers": 20, "nvlink_domain": 18}, "nvlink_domain.servers: got 18; expected a divisor of cluster.servers (20)"),
    ({"servers": 4, "nvlink_domain": 2, "server": {"template": "pcie-8gpu"}}, "nvlink_domain.servers: got 2; a domain spanning servers needs"),
    ({"servers": 4, "nvlink_domain": 2, "server": {"template": "dgx-h100", "nvlink_topology": "mesh"}}, "server.nvlink_topology: nvswitch"),
    ({"servers": 72, "nvlink_domain": 72, "server": {"template": "dgx-b200", "gpus": 16}}, "expected at most 576"),
    ({"server": {"template": "dgx-h100", "gpus": 3, "nvlink_topology": "pairs"}}, "server.nvlink_topology: pairs joins GPUs two by two"),
])
def test_bad_nvlink_domains_are_one_clear_error(fields, message):
    with pytest.raises(TopologyError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build_cluster(ClusterSpec.model_validate({"fabric": {"kind": "clos"}} | fields))


def test_nvlink_domain_field_is_checked_when_the_file_loads():
    assert ClusterSpec.model_validate({"nvlink_domain": 18}).nvlink_domain.servers == 18
    with pytest.raises(ValueError, match="nvlink_domain.servers"):
        ClusterSpec.model_validate({"nvlink_domain": {"servers": 0}})
    with pytest.raises(ValueError, match="nvlink_domain.gpus"):
        ClusterSpec.model_validate({"nvlink_domain": {"gpus": 72}})


# ------------------------------------------------------------------------------------ NCCL's view
def test_mnnvl_makes_a_rack_one_nccl_node_and_mnnvl_0_one_node_per_tray():
    topo = build_preset("gb200-nvl72", servers=36)
    comm = Communicator.world(topo)
    assert (comm.n_nodes, comm.ppn) == (2, 72)
    assert (comm.with_mnnvl(False).n_nodes, comm.with_mnnvl(False).ppn) == (36, 4)
    _, _, predictor = _predict(build_preset("gb200-nvl72"), env=["NCCL_MNNVL_ENABLE=0"])
    assert predictor.comm.n_nodes == 18 and predictor.tuning_inputs("all_reduce").n_nodes == 18
    with pytest.raises(SpecError, match="NCCL_MNNVL_ENABLE: got '3'"):
        parse_env_pairs(["NCCL_MNNVL_ENABLE=3"])


def test_nvl72_all_reduce_picks_nvls_within_the_physical_bound():
    estimate, busbw_Bps, _ = _predict(build_preset("gb200-nvl72"))
    assert estimate.algorithm == "nvls"  # NVLS across the whole domain, as one node
    assert busbw_Bps <= 2 * 71 / 72 * NVL72_GPU_Bps
    assert busbw_Bps >= 0.5 * NVL72_GPU_Bps  # NVLink-class, not NIC-class (4 x 50 GB/s per tray)
    ring, ring_busbw_Bps, _ = _predict(build_preset("gb200-nvl72"), env=["NCCL_ALGO=Ring"])
    assert ring.algorithm == "ring" and 0.4 * NVL72_GPU_Bps <= ring_busbw_Bps <= NVL72_GPU_Bps


def test_nvl72_is_much_faster_than_its_trays_over_infiniband():
    rack = _predict(build_preset("gb200-nvl72"))[1]
    separate = build_cluster(ClusterSpec.model_validate({"preset": "gb200-nvl72", "nvlink_domain": 1}))
    assert separate.servers_per_nvlink_domain == 1 and separate.node_id("s3.nvsw") >= 0
    trays_over_ib = _predict(separate)[1]
    mnnvl_off = _predict(build_preset("gb200-nvl72"), env=["NCCL_MNNVL_ENABLE=0"])[1]
    assert rack > 3 * trays_over_ib
    assert mnnvl_off == pytest.approx(trays_over_ib, rel=0.1)  # MNNVL off = the trays as separate servers


def test_two_racks_cross_the_nics_only_between_racks():
    estimate, busbw_Bps, predictor = _predict(build_cluster(ClusterSpec.model_validate(
        {"preset": "gb200-nvl72", "servers": 36, "transport": {"name": "rocev2"}, "routing": {"kind": "ecmp"}})))
    assert predictor.comm.n_nodes == 2 and busbw_Bps <= 2 * NVL72_GPU_Bps
    load = predictor.link_bytes(estimate)
    topo = predictor.comm.topo
    assert load[topo.network_links].sum() > 0
    assert load[topo.link_kind == LinkKind.NVLINK].sum() > load[topo.network_links].sum()


# ------------------------------------------------------------------------------------ NVLink bridges
def test_bridged_pairs_use_nvlink_inside_a_pair_only():
    topo = build_cluster(ClusterSpec(server={"template": "a100-pcie-nvlink-pairs"}, fabric={"kind": "none"}))
    assert _path(topo, "s0.gpu0", "s0.gpu1") == ["s0.gpu0->s0.gpu1"]
    between = _path(topo, "s0.gpu1", "s0.gpu2")
    assert all("pcie" in hop or "cpu" in hop for hop in between), between
    assert (topo.link_kind == LinkKind.NVLINK).sum() == 8  # 4 bridges, both directions


def test_nccl_sees_nvlink_in_a_pair_and_pcie_across_pairs():
    topo = build_cluster(ClusterSpec(server={"template": "a100-pcie-nvlink-pairs"}, fabric={"kind": "none"}))
    pair = CollectivePredictor.create(Communicator.from_names(topo, ["s0.gpu0", "s0.gpu1"]), parse_env_pairs([]),
                                      topo.spec.routing, TRANSPORTS["infiniband"])
    whole = CollectivePredictor.create(Communicator.world(topo), parse_env_pairs([]), topo.spec.routing,
                                       TRANSPORTS["infiniband"])
    assert pair.tuning_inputs("all_reduce").ring.intra_link == "nvlink"
    assert whole.tuning_inputs("all_reduce").ring.intra_link == "pci"
    assert pair.estimate("all_reduce", GiB).time_s < whole.estimate("all_reduce", GiB).time_s
