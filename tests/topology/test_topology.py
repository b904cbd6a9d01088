"""Tests for gpuwait.topology's builder and presets: counts, invariants, errors.

Expected counts follow from the presets' documented shapes (gpuwait.topology.presets): a leaf
has ``switch_radix / 2`` downlinks; top-of-rack puts all of a server's NIC ports on one leaf;
rail-optimized puts NIC i of every server of a scalable unit on leaf i of that unit.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import pytest

from gpuwait.errors import GpuwaitError, SpecError, TopologyError, UnknownNameError
from gpuwait.spec import ClusterSpec, validate_data
from gpuwait.topology import PRESETS, build_cluster, build_preset, preset_spec, resolve_cluster, resolve_server
from gpuwait.topology.build import clos_shape
from gpuwait.topology.model import LinkKind, Network, NodeKind

SINGLE_SERVER_PRESETS = ("dgx-a100", "dgx-h100")

# preset -> (compute leaves, spines, cores) with 4 servers (8 GPUs each; gb200-nvl72 trays have 4)
COUNTS_4_SERVERS = {
    "dgx-a100": (8, 20, 0),           # radix 40: 20 down / 20 up; one SU of 8 rails
    "dgx-h100": (8, 32, 0),           # radix 64, rail-optimized: 8 rail leaves, 32 spines
    "dgx-h100-superpod": (8, 32, 0),  # one (partly filled) SU
    "rocev2-400g-2tier": (1, 32, 0),  # 4 servers x 8 NICs = 32 downlinks = one leaf
    "dual-plane-2x200g": (2, 64, 0),  # one leaf and 32 spines per plane
    "oci-a100-roce": (16, 32, 0),     # 16 rails of 100G
    "gb200-nvl72": (4, 32, 0),        # 4 trays of 4 GPUs, one leaf per rail (4 NICs)
    "gb300-nvl72": (4, 32, 0),        # the same racks and leaf-spine with GB300 trays
}


def switch_counts(topo) -> tuple[int, int, int]:
    tiers = topo.node_tier[topo.switches("compute")]
    return tuple(int((tiers == t).sum()) for t in (1, 2, 3))


def cables_per_node(topo, network: str = "compute") -> np.ndarray:
    keep = topo.link_network == Network.of(network)
    return np.bincount(topo.link_src[keep], minlength=topo.n_nodes)


# ------------------------------------------------------------------------------------------- presets
def test_count_table_covers_every_preset():
    assert set(COUNTS_4_SERVERS) == set(PRESETS)


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_preset_with_4_servers_has_the_expected_counts(preset):
    topo = build_preset(preset, 4)
    spec = topo.spec
    assert switch_counts(topo) == COUNTS_4_SERVERS[preset]
    per = topo.spec.server.gpus  # 8, or 4 on a GB200 tray
    assert topo.n_servers == 4 and topo.n_gpus == 4 * per and topo.gpus_per_server == per
    assert len(topo.nodes_of_kind("gpu")) == 4 * per
    assert len(topo.nodes_of_kind("nic")) == 4 * spec.server.nics
    # every NIC port is cabled once, to a compute leaf
    host = (topo.link_kind == LinkKind.HOST) & (topo.node_kind[topo.link_src] == NodeKind.NIC)
    assert host.sum() == 4 * spec.server.nics * spec.server.nic_ports
    assert (topo.node_tier[topo.link_dst[host]] == 1).all()
    assert (topo.nic_uplink >= 0).all()
    # no compute switch uses more ports than it has
    degree = cables_per_node(topo)[topo.switches("compute")]
    assert degree.max() <= spec.fabric.switch_radix


@pytest.mark.parametrize("preset", SINGLE_SERVER_PRESETS)
def test_single_server_preset_has_no_fabric(preset):
    topo = build_preset(preset)
    assert preset_spec(preset).servers == 1
    assert topo.n_gpus == 8 and switch_counts(topo) == (0, 0, 0)
    assert (topo.nic_uplink == -1).all()
    assert not (topo.link_network == Network.COMPUTE).any()


@pytest.mark.parametrize("preset", sorted(set(PRESETS) - set(SINGLE_SERVER_PRESETS)))
def test_fabric_preset_builds_with_one_server(preset):
    topo = build_preset(preset, 1)
    assert topo.n_gpus == topo.spec.server.gpus and (topo.nic_uplink >= 0).all()


def test_superpod_64_servers():
    topo = build_preset("dgx-h100-superpod", 64)
    assert switch_counts(topo) == (16, 32, 0)  # 2 SUs x 8 rails, 32 spines
    assert topo.n_gpus == 512
    # rail-optimized: NIC r of a server of SU u is on leaf 8u + r
    leaf_of = lambda s, n: topo.node_name[topo.link_dst[topo.nic_uplink[s, n, 0]]]  # noqa: E731
    assert leaf_of(0, 3) == "leaf3" and leaf_of(31, 3) == "leaf3" and leaf_of(32, 3) == "leaf11"
    down = cables_per_node(topo)
    leaves = topo.switches("compute")[topo.node_tier[topo.switches("compute")] == 1]
    assert (down[leaves] == 64).all()  # 32 servers + 32 spines


def test_rocev2_8_servers_two_leaves_of_32_downlinks():
    topo = build_preset("rocev2-400g-2tier", 8)
    assert switch_counts(topo) == (2, 32, 0)
    host = (topo.link_kind == LinkKind.HOST) & (topo.node_kind[topo.link_src] == NodeKind.NIC)
    per_leaf = np.bincount(topo.link_dst[host], minlength=topo.n_nodes)
    assert per_leaf[topo.node_id("leaf0")] == 32 and per_leaf[topo.node_id("leaf1")] == 32
    fabric = topo.link_kind == LinkKind.FABRIC
    assert np.bincount(topo.link_src[fabric], minlength=topo.n_nodes)[topo.node_id("leaf0")] == 32


# ------------------------------------------------------------------------------------------- invariants
@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_link_has_a_reverse_twin_with_the_same_capacity(preset):
    topo = build_preset(preset, 4)
    forward = np.stack([topo.link_src, topo.link_dst, topo.link_capacity_Bps])
    backward = np.stack([topo.link_dst, topo.link_src, topo.link_capacity_Bps])
    sort = lambda a: a[:, np.lexsort(a[::-1])]  # noqa: E731 — sort the columns
    np.testing.assert_array_equal(sort(forward), sort(backward))


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_names_are_unique_and_round_trip(preset):
    topo = build_preset(preset, 4)
    names = topo.node_name.tolist()
    assert len(set(names)) == topo.n_nodes
    assert all(topo.node_id(name) == i for i, name in enumerate(names))
    sample = np.random.default_rng(0).choice(topo.n_links, size=min(300, topo.n_links), replace=False)
    assert all(topo.link_id(topo.link_name(int(link))) == link for link in sample)


def test_parallel_links_get_numbered_names():
    # top-of-rack with 2 ports per NIC and one plane: both ports of a NIC land on the same leaf
    topo = build_cluster(ClusterSpec(servers=2, server={"template": "dgx-h100", "nic_ports": 2}))
    nic_to_leaf = [topo.link_name(link) for link in np.flatnonzero(topo.link_src == topo.node_id("s0.nic0"))
                   if topo.link_kind[link] == LinkKind.HOST]
    assert sorted(nic_to_leaf) == ["s0.nic0->leaf0", "s0.nic0->leaf0#1"]
    assert all(topo.link_name(topo.link_id(name)) == name for name in nic_to_leaf)


def test_reverse_link_is_the_same_cable_of_parallel_ones():
    # both ports of a NIC on one leaf: two cables between the same nodes, each its own way back
    topo = build_cluster(ClusterSpec(servers=2, server={"template": "dgx-h100", "nic_ports": 2}))
    for name, back in (("s0.nic0->leaf0", "leaf0->s0.nic0"), ("s0.nic0->leaf0#1", "leaf0->s0.nic0#1")):
        assert topo.link_name(topo.reverse_link(topo.link_id(name))) == back
        assert topo.reverse_link(topo.link_id(back)) == topo.link_id(name)


def test_reverse_link_is_none_for_a_one_way_link():
    topo = build_preset("dgx-h100", 2)
    one_way = topo.link_id("s0.nic0->leaf0")
    cut = replace(topo, link_dst=topo.link_dst.copy())
    cut.link_dst[topo.reverse_link(one_way)] = topo.node_id("s1.nic0")  # the way back now goes elsewhere
    assert cut.reverse_link(one_way) is None


def test_nic_uplink_of_two_ports_on_one_leaf_are_distinct_links():
    topo = build_cluster(ClusterSpec(servers=2, server={"template": "dgx-h100", "nic_ports": 2}))
    assert topo.nic_uplink[0, 0, 0] != topo.nic_uplink[0, 0, 1]


@pytest.mark.parametrize("preset", sorted(set(PRESETS) - set(SINGLE_SERVER_PRESETS)))
def test_every_gpu_of_a_multi_server_cluster_has_a_cabled_nic(preset):
    topo = build_preset(preset, 4)
    nics = topo.gpu_nic
    assert nics.shape == (topo.gpus_per_server,) and (nics >= 0).all()
    assert (topo.nic_uplink[:, nics, :] >= 0).all()
    uplinks = topo.nic_uplink[:, nics, 0]
    assert (topo.link_src[uplinks] == topo.nic_node[:, nics]).all()


def test_dual_plane_port_p_is_in_plane_p_and_planes_share_no_switch():
    topo = build_preset("dual-plane-2x200g", 8)
    ports = topo.spec.server.nic_ports
    assert ports == 2
    for p in range(ports):
        leaves = topo.link_dst[topo.nic_uplink[:, :, p]]
        assert (topo.node_plane[leaves] == p).all()
        assert all(name.startswith(f"p{p}.") for name in topo.node_name[leaves.ravel()].tolist())
    # no compute link joins the planes
    fabric = (topo.link_network == Network.COMPUTE) & (topo.link_kind == LinkKind.FABRIC)
    assert (topo.node_plane[topo.link_src[fabric]] == topo.node_plane[topo.link_dst[fabric]]).all()
    planes = topo.node_plane[topo.switches("compute")]
    assert sorted(np.unique(planes).tolist()) == [0, 1]
    assert (planes == 0).sum() == (planes == 1).sum()


def test_dual_tor_ports_of_a_nic_go_to_two_leaves():
    spec = ClusterSpec(servers=8, server={"template": "dgx-h100", "nic_ports": 2}, fabric={"dual_tor": True})
    topo = build_cluster(spec)
    leaves = topo.link_dst[topo.nic_uplink]  # (server, nic, port)
    assert (leaves[:, :, 0] != leaves[:, :, 1]).all()
    assert (topo.node_tier[leaves] == 1).all()
    # 32 downlinks per leaf: 4 servers x 8 NICs, one port each, on each leaf of the pair
    assert switch_counts(topo)[0] == 4


def test_superpod_2048_servers_three_tiers():
    start = time.perf_counter()
    topo = build_preset("dgx-h100-superpod", 2048)
    elapsed_s = time.perf_counter() - start
    print(f"dgx-h100-superpod 2048 servers: built in {elapsed_s:.3f} s, {topo.n_links} links")
    assert topo.spec.fabric.tiers == 3
    assert switch_counts(topo) == (512, 512, 1024)
    assert topo.n_gpus == 16_384
    assert (topo.nic_uplink >= 0).all()


# ------------------------------------------------------------------------------------------- errors
def _error(fn) -> GpuwaitError:
    with pytest.raises(GpuwaitError) as info:
        fn()
    return info.value


def test_unknown_preset():
    err = _error(lambda: build_preset("dgx-z9000", 4))
    assert isinstance(err, UnknownNameError) and "preset" in str(err) and "dgx-h100" in str(err)
    err = _error(lambda: build_cluster(ClusterSpec(preset="dgx-z9000")))
    assert isinstance(err, UnknownNameError)


def test_unknown_server_template():
    err = _error(lambda: build_cluster(ClusterSpec(server={"template": "dgx-z9000"}, fabric={"kind": "none"})))
    assert isinstance(err, UnknownNameError) and "server.template" in str(err)


def test_oversubscription_below_one_is_a_spec_error():
    err = _error(lambda: validate_data(ClusterSpec, {"fabric": {"oversubscription": 0.5}}))
    assert isinstance(err, SpecError) and "fabric.oversubscription" in str(err)


def test_oversubscription_giving_fractional_uplinks():
    spec = ClusterSpec(preset="rocev2-400g-2tier", servers=8, fabric={"oversubscription": 3})  # 32 / 3 uplinks
    err = _error(lambda: build_cluster(spec))
    assert isinstance(err, TopologyError) and "fabric.oversubscription" in str(err)


def test_more_servers_than_a_two_tier_fabric_holds():
    spec = ClusterSpec(preset="rocev2-400g-2tier", servers=1000, fabric={"tiers": 2})
    err = _error(lambda: build_cluster(spec))
    assert isinstance(err, TopologyError) and "cluster.servers" in str(err)
    assert "tiers: 3" in f"{err} {err.hint}"


def test_presets_take_a_third_tier_when_two_do_not_hold_the_servers():
    assert build_preset("rocev2-400g-2tier", 1000).spec.fabric.tiers == 3
    err = _error(lambda: build_preset("rocev2-400g-2tier", 10000))  # 79 pods > radix 64 cores
    assert isinstance(err, TopologyError) and "cluster.servers" in str(err)


def test_a_larger_radix_override_rechooses_the_tiers():
    # 512 SuperPOD servers need 128 rail leaves: 3 tiers at the preset's radix 64, 2 at radix 128
    resolve = lambda **fabric: resolve_cluster(ClusterSpec(preset="dgx-h100-superpod", servers=512, fabric=fabric))  # noqa: E731
    assert resolve_cluster(ClusterSpec(preset="dgx-h100-superpod", servers=512)).fabric.tiers == 3
    assert resolve(switch_radix=128).fabric.tiers == 2
    assert resolve(switch_radix=128, tiers=3).fabric.tiers == 3  # given tiers are kept


def test_131072_gpus_fit_a_three_tier_fabric_of_radix_128():
    # 16,384 DGX H100 servers: 4,096 rail leaves in 64 pods, 4,096 spines, 4,096 cores (k^3/4 ports)
    spec = resolve_cluster(ClusterSpec(preset="dgx-h100-superpod", servers=16_384, fabric={"switch_radix": 128}))
    shape = clos_shape(spec.fabric, resolve_server(spec.server), spec.servers)
    assert spec.fabric.tiers == 3
    assert (shape.leaves_per_plane, shape.pods, shape.cores) == (4096, 64, 4096)


def test_several_servers_without_a_fabric():
    err = _error(lambda: build_cluster(ClusterSpec(servers=2, fabric={"kind": "none"})))
    assert isinstance(err, TopologyError) and "cluster.servers" in str(err) and "fabric.kind" in str(err)


def test_planes_must_divide_nic_ports():
    err = _error(lambda: build_cluster(ClusterSpec(servers=2, server={"nic_ports": 3}, fabric={"planes": 2})))
    assert isinstance(err, TopologyError) and "fabric.planes" in str(err)


def test_kind_codes_are_the_table_codes():
    """The int8 tables hold these codes: renumbering a kind would change every stored topology."""
    from gpuwait.topology.model import LINK_KINDS, NODE_KINDS, Tier

    assert NODE_KINDS == ("gpu", "nvswitch", "pcie_switch", "cpu", "nic", "storage_nic", "mgmt_nic", "switch",
                          "storage_server")
    assert LINK_KINDS == ("nvlink", "pcie", "cpu", "host", "fabric")
    assert [NodeKind.of(k) for k in NODE_KINDS] == list(range(len(NODE_KINDS)))
    assert Network.of("storage") == 2 and Tier.CORE.label == "core" and LinkKind.FABRIC == 4


def test_masks_are_cached_and_read_only():
    topo = build_preset("rocev2-400g-2tier", servers=4)
    assert topo.network_links is topo.network_links
    np.testing.assert_array_equal(topo.network_links, np.isin(topo.link_kind, [LinkKind.HOST, LinkKind.FABRIC]))
    np.testing.assert_array_equal(topo.switch_nodes, topo.node_kind == NodeKind.SWITCH)
    with pytest.raises(ValueError):
        topo.host_links[0] = True
