"""Routing over real topologies: ECMP collisions, QP entropy, D-mod-k, spraying, adaptive routing.

External references: the balls-into-bins expectation (n balls into n bins leave n(1-1/n)^n bins
empty in expectation); InfiniBand D-mod-k static routing spreads destinations evenly over the up
ports of a fat tree (Zahavi, "D-Mod-K Routing Providing Non-Blocking Traffic for Shift
Permutations on Real Life Fat Trees", 2010).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gpuwait.engine.flow_run import simulate_flows
from gpuwait.errors import RoutingError
from gpuwait.routing import route_flows
from gpuwait.spec import ClusterSpec, PatternSpec, RoutingSpec
from gpuwait.topology import build_preset, build_topology
from gpuwait.transport import TRANSPORTS
from gpuwait.workload.traffic import pattern_flows
from tests.conftest import leaf_spine


def _uplinks(topo, leaf="leaf0"):
    node = topo.node_id(leaf)
    return np.flatnonzero((topo.link_src == node) & (topo.node_tier[topo.link_dst] == 2))


def _leaf_to_leaf(topo, count=8):
    return pattern_flows(topo, PatternSpec(kind="leaf-to-leaf", size="1GB", count=count))


def test_single_path_is_connected_hop_by_hop(two_leaf_cluster):
    topo = two_leaf_cluster
    routes = route_flows(topo, RoutingSpec(kind="ecmp"), ["s0.gpu3"], ["s1.gpu5"])
    links, weights = routes.links_of_row(0)
    assert np.all(weights == 1.0)
    src, dst = topo.link_src[links], topo.link_dst[links]
    # a simple path: every node except the ends is entered once and left once
    assert sorted(set(src) - set(dst)) == [topo.node_id("s0.gpu3")]
    assert sorted(set(dst) - set(src)) == [topo.node_id("s1.gpu5")]
    assert routes.path_latency_s[0] == pytest.approx(topo.link_latency_s[links].sum())


def test_gpus_of_one_server_talk_over_nvlink(two_leaf_cluster):
    topo = two_leaf_cluster
    routes = route_flows(topo, RoutingSpec(), ["s0.gpu0"], ["s0.gpu7"])
    assert topo.link_names(routes.links_of_row(0)[0]) == ["s0.gpu0->s0.nvsw", "s0.nvsw->s0.gpu7"]


def test_ecmp_balls_into_bins_over_many_seeds(two_leaf_cluster):
    """8 flows hashed onto 8 uplinks: empty uplinks average 8*(7/8)^8 = 2.749 (balls into bins)."""
    topo = two_leaf_cluster
    flows = _leaf_to_leaf(topo)
    up = _uplinks(topo)
    empty, max_load = [], []
    for seed in range(400):
        routes = route_flows(topo, RoutingSpec(kind="ecmp", seed=seed), flows.src, flows.dst)
        load = np.asarray(routes.link_weights[:, up].sum(axis=0)).ravel()
        empty.append(int((load == 0).sum()))
        max_load.append(int(load.max()))
    expected_empty = 8 * (7 / 8) ** 8
    assert np.mean(empty) == pytest.approx(expected_empty, rel=0.08)
    # reference: uniform random choices
    rng = np.random.default_rng(1)
    ref = rng.integers(0, 8, size=(20000, 8))
    ref_max = np.array([np.bincount(r, minlength=8).max() for r in ref])
    assert np.mean(max_load) == pytest.approx(ref_max.mean(), rel=0.06)
    assert 1 - np.mean(np.array(max_load) == 1) > 0.99  # a collision-free hash of 8 flows is rare: 8!/8^8 = 0.24 %


def test_ecmp_collision_is_slower_than_spray_and_adaptive(two_leaf_cluster):
    topo = two_leaf_cluster
    flows = _leaf_to_leaf(topo)
    rocev2 = TRANSPORTS["rocev2"]
    ecmp = simulate_flows(topo, flows, RoutingSpec(kind="ecmp", seed=7), rocev2)
    spray = simulate_flows(topo, flows, RoutingSpec(kind="spray"), rocev2)
    adaptive = simulate_flows(topo, flows, RoutingSpec(kind="adaptive"), rocev2)
    line_rate_s = 1e9 / (50e9 * rocev2.wire_efficiency)
    # spraying and adaptive routing reach line rate (plus a few microseconds of latency)
    assert spray.makespan_s == pytest.approx(line_rate_s, rel=1e-3)
    assert adaptive.makespan_s == pytest.approx(line_rate_s, rel=1e-3)
    load = ecmp.link_flow_count()[_uplinks(topo)]
    assert load.max() >= 2 and (load == 0).sum() >= 1
    # the most loaded uplink sets the pace: k flows on it take k times as long
    assert ecmp.makespan_s == pytest.approx(load.max() * line_rate_s, rel=1e-3)


def test_more_qps_narrow_the_gap_on_average(two_leaf_cluster):
    topo = two_leaf_cluster
    flows = _leaf_to_leaf(topo)
    rocev2 = TRANSPORTS["rocev2"]
    ideal = 1e9 / (50e9 * rocev2.wire_efficiency)
    mean = {}
    for qps in (1, 4, 16):
        times = [simulate_flows(topo, flows, RoutingSpec(kind="ecmp", seed=s, qps_per_connection=qps), rocev2).makespan_s
                 for s in range(30)]
        mean[qps] = np.mean(times) / ideal
    assert mean[1] > mean[4] > mean[16] > 1.0
    assert mean[1] > 1.8  # E[max load] of 8 balls in 8 bins is about 2.4


def test_same_seed_everywhere_polarizes_a_three_tier_fabric():
    """With one seed on every switch, the spine repeats the leaf's choice: few core links carry traffic."""
    spec = ClusterSpec(servers=64, server={"template": "dgx-h100"},
                       fabric={"kind": "clos", "tiers": 3, "switch_radix": 16, "rail_optimized": False},
                       routing={"kind": "ecmp"})
    topo = build_topology(spec)
    flows = pattern_flows(topo, PatternSpec(kind="permutation", size="1MB", seed=3))
    core_up = np.flatnonzero((topo.node_tier[topo.link_src] == 2) & (topo.node_tier[topo.link_dst] == 3))
    used = {}
    for per_switch in (True, False):
        routes = route_flows(topo, RoutingSpec(kind="ecmp", seed=5, per_switch_seed=per_switch), flows.src, flows.dst)
        load = np.asarray(routes.link_weights[:, core_up].sum(axis=0)).ravel()
        used[per_switch] = (load > 0).mean()
    # independent hashes: ~456 cross-pod flows into 512 core uplinks, balls into bins fills 1-(1-1/512)^456 = 59 %
    assert used[True] == pytest.approx(1 - (1 - 1 / 512) ** 456, abs=0.06)
    # one seed everywhere: spine j re-picks index j, so only core j of each group of 8 carries traffic
    assert used[False] == pytest.approx(1 / 8)


def test_static_dmodk_spreads_a_shift_permutation_without_collisions():
    spec = leaf_spine(transport="infiniband")
    topo = build_topology(spec.model_copy(update={"routing": RoutingSpec(kind="static")}))
    flows = _leaf_to_leaf(topo)
    routes = route_flows(topo, RoutingSpec(kind="static", qps_per_connection=4), flows.src, flows.dst, transport="infiniband")
    load = np.asarray(routes.link_weights[:, _uplinks(topo)].sum(axis=0)).ravel()
    # destination-based: the 4 QPs of a connection share a path; 8 destinations on 8 uplinks, one each
    assert load.tolist() == [4.0] * 8


def test_spray_splits_evenly_and_conserves_the_flow(two_leaf_cluster):
    topo = two_leaf_cluster
    routes = route_flows(topo, RoutingSpec(kind="spray"), ["s0.gpu0"], ["s1.gpu0"])
    up = _uplinks(topo)
    weights = np.asarray(routes.link_weights[0, up].todense()).ravel()
    assert weights == pytest.approx([1 / 8] * 8)
    # every hop level carries the whole flow: the weights into the destination NIC sum to 1
    links, w = routes.links_of_row(0)
    into_dst_nic = topo.link_dst[links] == topo.node_id("s1.nic0")
    assert w[into_dst_nic].sum() == pytest.approx(1.0)


def test_adaptive_routing_steers_around_a_degraded_uplink(two_leaf_cluster):
    topo = two_leaf_cluster
    up = _uplinks(topo)
    capacity = topo.link_capacity_Bps.copy()
    capacity[up[3]] *= 0.25
    degraded = dataclasses.replace(topo, link_capacity_Bps=capacity)
    flows = _leaf_to_leaf(degraded)
    rocev2 = TRANSPORTS["rocev2"]
    spray = simulate_flows(degraded, flows, RoutingSpec(kind="spray"), rocev2)
    adaptive = simulate_flows(degraded, flows, RoutingSpec(kind="adaptive"), rocev2)
    ideal = 1e9 / (50e9 * rocev2.wire_efficiency)
    # spraying sends 1/8 of all 8 flows over the quarter-speed link: it carries one flow's rate, at C/4
    assert spray.makespan_s == pytest.approx(4 * ideal, rel=0.01)
    # adaptive routing shifts load to the healthy uplinks: 7.25 links' worth of capacity for 8 links' load
    assert adaptive.makespan_s == pytest.approx(8 / 7.25 * ideal, rel=0.02)


def test_dual_plane_spreads_qps_over_both_planes():
    topo = build_preset("dual-plane-2x200g", servers=8)
    routes = route_flows(topo, RoutingSpec(kind="ecmp", qps_per_connection=2), ["s0.gpu0"], ["s5.gpu0"])
    planes = [set(topo.link_plane[routes.links_of_row(r)[0]][topo.link_plane[routes.links_of_row(r)[0]] >= 0].tolist())
              for r in range(2)]
    assert planes == [{0}, {1}]


def test_dual_tor_qps_use_both_leaves():
    topo = build_topology(ClusterSpec(servers=8, server={"template": "dgx-h100", "nic_ports": 2},
                                      fabric={"kind": "clos", "dual_tor": True, "switch_radix": 64}))
    routes = route_flows(topo, RoutingSpec(kind="ecmp", qps_per_connection=2), ["s0.gpu0"], ["s7.gpu0"])
    first_hops = [topo.link_name(routes.ordered_links(r, topo)[0][2]) for r in range(2)]
    assert first_hops == ["s0.nic0->leaf0", "s0.nic0->leaf1"]
    spray = route_flows(topo, RoutingSpec(kind="spray"), ["s0.gpu0"], ["s7.gpu0"])
    links, weights = spray.links_of_row(0)
    from_nic = topo.link_src[links] == topo.node_id("s0.nic0")
    assert weights[from_nic] == pytest.approx([0.5, 0.5])


def test_bad_endpoints_get_one_clear_error(two_leaf_cluster):
    topo = two_leaf_cluster
    with pytest.raises(RoutingError, match="spine0.*is a switch"):
        route_flows(topo, RoutingSpec(), ["spine0"], ["s1.gpu0"])
    with pytest.raises(RoutingError, match="both s0.gpu0"):
        route_flows(topo, RoutingSpec(), ["s0.gpu0"], ["s0.gpu0"])
    with pytest.raises(Exception, match="s9.gpu0"):
        route_flows(topo, RoutingSpec(), ["s9.gpu0"], ["s0.gpu1"])


def test_unconnected_endpoints_are_an_error():
    topo = build_topology(ClusterSpec(servers=2, server={"template": "dgx-h100"},
                                      fabric={"kind": "clos", "planes": 1}, storage={"mode": "separate"}))
    # a storage server on the separate storage network is not reachable through the compute NIC
    with pytest.raises(RoutingError, match="no path|storage NIC"):
        route_flows(topo, RoutingSpec(), ["s0.nic0"], ["stor0"])



def _fat_tree_k4():
    """The textbook k=4 fat tree: 16 one-NIC hosts, 8 leaves and 8 spines in 4 pods, 4 cores."""
    return build_topology(ClusterSpec(servers=16, server={"gpus": 1, "nics": 1, "pcie_switches": 1, "cpus": 1},
                                      fabric={"kind": "clos", "tiers": 3, "switch_radix": 4}))


def test_leaves_of_one_pod_share_one_bfs_and_keep_their_own_distances():
    from scipy.sparse.csgraph import shortest_path

    from gpuwait.routing.paths import _Distances, _leaf_rows

    topo = _fat_tree_k4()
    dist = _Distances(topo, topo.nic_node.ravel())  # fills the routing cache
    graph = topo.__dict__["_routing_cache"]["switch_graph"]
    leaves = sorted({int(x) for x in dist.up_leaf[topo.nic_node.ravel()].ravel()})
    rows, representative = _leaf_rows(graph, leaves)
    assert len(leaves) == 8 and len(set(representative.values())) == 4  # one BFS per pod
    exact = shortest_path(graph, unweighted=True, indices=leaves).astype(np.float32)
    for leaf, row in zip(leaves, exact):
        np.testing.assert_array_equal(rows[leaf], row)


def test_spray_uses_exactly_the_links_of_every_shortest_path_in_a_fat_tree():
    import networkx as nx

    topo = _fat_tree_k4()
    graph = nx.DiGraph()
    fabric = np.flatnonzero(topo.link_network == topo.link_network[topo.nic_uplink[0, 0, 0]])
    graph.add_edges_from(zip(topo.link_src[fabric].tolist(), topo.link_dst[fabric].tolist()))
    nics = topo.nic_node.ravel()
    src, dst = np.meshgrid(nics, nics, indexing="ij")
    pairs = src.ravel() != dst.ravel()
    routes = route_flows(topo, RoutingSpec(kind="spray"), src.ravel()[pairs], dst.ravel()[pairs])
    for row, (a, b) in enumerate(zip(src.ravel()[pairs], dst.ravel()[pairs])):
        expected = {topo.links_between(np.array([u]), np.array([v]))[0]
                    for path in nx.all_shortest_paths(graph, int(a), int(b)) for u, v in zip(path, path[1:])}
        assert set(routes.links_of_row(row)[0].tolist()) == expected


def test_one_qp_reaches_every_nic_lane_of_a_gpu_and_the_port_it_left_by():
    """NCCL spreads a GPU's channels over its NICs and, from 2.20, stripes a connection over a dual-port NIC's
    ports (NCCL_IB_MERGE_NICS, src/transport/net_ib.cc), whatever NCCL_IB_QPS_PER_CONNECTION is: one QP per
    connection still loads every lane. Two NICs per GPU (16 x 200G for 8 GPUs) and one NIC with two ports on
    one leaf (parallel cables): two rows, one per lane, each arriving on the receiver's port of the same index."""
    two_nics = build_topology(ClusterSpec(servers=2, server={"template": "dgx-h100", "nics": 16, "nic_speed": "200Gbps"},
                                          fabric={"kind": "clos", "switch_radix": 64}))
    routes = route_flows(two_nics, RoutingSpec(kind="ecmp", qps_per_connection=1), ["s0.gpu0"], ["s1.gpu0"])
    firsts = {two_nics.link_name(routes.ordered_links(r, two_nics)[0][2]).split("->")[0] for r in range(2)}
    assert len(routes.flow_index) == 2 and len(firsts) == 2  # both of the GPU's NICs
    dual_port = build_topology(ClusterSpec(servers=2, server={"template": "dgx-h100", "nic_ports": 2,
                                                              "nic_speed": "200Gbps"},
                                           fabric={"kind": "clos", "switch_radix": 64, "rail_optimized": True,
                                                   "servers_per_unit": 16}))
    routes = route_flows(dual_port, RoutingSpec(kind="ecmp"), ["s0.gpu0"], ["s1.gpu0"])
    paths = [[dual_port.link_name(link) for link in routes.ordered_links(r, dual_port)[0]] for r in range(2)]
    assert [p[2] for p in paths] == ["s0.nic0->leaf0", "s0.nic0->leaf0#1"]
    assert [p[3] for p in paths] == ["leaf0->s1.nic0", "leaf0->s1.nic0#1"]  # the port of the same index
    # one 200G port each way before: the two rows now take the NIC's whole 400G
    run = simulate_flows(dual_port, _pair(dual_port), RoutingSpec(kind="ecmp"), TRANSPORTS["rocev2"])
    assert run.flow_mean_rate_Bps[0] == pytest.approx(2 * 25e9 * TRANSPORTS["rocev2"].wire_efficiency, rel=0.01)


def test_two_dual_port_nics_per_gpu_give_every_nic_port_lane_a_qp():
    """Two NICs per GPU, each with two ports: a connection is 4 lanes (NCCL's channels over the NICs, the
    merged ports of each; src/transport/net_ib.cc). QP q leaves by port q mod 2, so the NIC must take the
    next digit of q: with the NIC at q mod 2 too, QPs 0-3 met only (nic0, port0) and (nic1, port1)."""
    topo = build_topology(ClusterSpec(servers=2, server={"template": "dgx-h100", "nics": 16, "nic_ports": 2,
                                                         "nic_speed": "100Gbps"},
                                      fabric={"kind": "clos", "switch_radix": 64, "rail_optimized": True,
                                              "servers_per_unit": 16}))
    routes = route_flows(topo, RoutingSpec(kind="ecmp", qps_per_connection=1), ["s0.gpu0"], ["s1.gpu0"])
    paths = [[topo.link_name(link) for link in routes.ordered_links(r, topo)[0]] for r in range(4)]
    assert len(routes.flow_index) == 4
    assert sorted(p[2] for p in paths) == ["s0.nic0->leaf0", "s0.nic0->leaf0#1", "s0.nic1->leaf1", "s0.nic1->leaf1#1"]
    for path in paths:  # each arrives on the receiver's NIC and port of the same index
        nic, leaf = path[2].split("->")
        port = "#1" if leaf.endswith("#1") else ""
        assert path[3] == f"{leaf.removesuffix('#1')}->{nic.replace('s0.', 's1.')}{port}"
    # the flow takes the GPU's whole 4 x 100G, not the 2 x 100G of two lanes
    run = simulate_flows(topo, _pair(topo), RoutingSpec(kind="ecmp"), TRANSPORTS["rocev2"])
    assert run.flow_mean_rate_Bps[0] == pytest.approx(4 * 12.5e9 * TRANSPORTS["rocev2"].wire_efficiency, rel=0.01)


def _pair(topo):
    from gpuwait.spec import TrafficSpec
    from gpuwait.workload.traffic import traffic_flows

    return traffic_flows(topo, TrafficSpec.model_validate({"flows": [{"src": "s0.gpu0", "dst": "s1.gpu0", "size": "1GB"}]}))
