"""Placement policies: each behaves as its scheduler's public documentation says (cited in
gpuwait.placement.policies), never changes its inputs, and refuses what it cannot place."""

from __future__ import annotations

import numpy as np
import pytest

from gpuwait.placement import POLICIES, PlacementError, fabric_tree, hostlist, place
from gpuwait.spec.jobs import PlacementSpec
from gpuwait.topology.presets import build_preset


@pytest.fixture(scope="module")
def tree():
    return fabric_tree(build_preset("rocev2-400g-2tier", servers=16))  # 4 servers per leaf, 4 leaves


def _free(tree, busy):
    free = np.ones(tree.n_servers, bool)
    free[busy] = False
    return free


def test_leaf_domains_of_a_top_of_rack_fabric(tree):
    assert tree.leaf_of_server.tolist() == [0] * 4 + [1] * 4 + [2] * 4 + [3] * 4
    assert set(tree.pod_of_server.tolist()) == {0}


def test_rail_optimized_unit_is_one_leaf_domain():
    # every server of a scalable unit has one NIC on each rail leaf: the unit is the domain
    t = fabric_tree(build_preset("dgx-h100-superpod", servers=64))
    assert len(set(t.leaf_of_server[:32].tolist())) == 1 and t.leaf_of_server[32] != t.leaf_of_server[0]


@pytest.mark.parametrize("policy", sorted(set(POLICIES) - {"explicit"}))
def test_every_policy_returns_free_distinct_servers_and_leaves_free_unchanged(tree, policy):
    free = _free(tree, [0, 1, 2, 5])
    before = free.copy()
    servers = place(free, tree, 6, PlacementSpec(policy=policy, mode="preferred"))
    assert len(set(servers.tolist())) == 6 and free[servers].all()
    assert (free == before).all()


def test_slurm_tree_lowest_switch_then_best_fit_leaves(tree):
    # Slurm Topology Guide: the lowest switch that satisfies the job, its leaves best-fit
    free = _free(tree, [0, 1, 2, 5])                    # free per leaf: 1, 3, 4, 4
    assert sorted(place(free, tree, 3, PlacementSpec(policy="slurm-tree")).tolist()) == [4, 6, 7]  # tightest leaf
    six = place(free, tree, 6, PlacementSpec(policy="slurm-tree"))
    assert tree.spans(six)[0] == 2
    with pytest.raises(PlacementError, match="switches"):
        place(free, tree, 6, PlacementSpec(policy="slurm-tree", switches=1))


def test_topology_unaware_baselines_span_more_leaves(tree):
    free = _free(tree, [0, 1, 2, 5])
    spans = {p: tree.spans(place(free, tree, 6, PlacementSpec(policy=p)))[0] for p in ("spread", "first-fit", "slurm-tree")}
    assert spans["spread"] == 4 and spans["first-fit"] == 3 and spans["slurm-tree"] == 2


def test_slurm_block_lowest_aggregate_and_segments(tree):
    # topology.conf(5): blocks aggregated in powers of two; --segment keeps each segment in one block
    free = _free(tree, [0, 1, 2, 5])
    servers = place(free, tree, 4, PlacementSpec(policy="slurm-block", segment=2))
    assert tree.spans(servers)[0] == 1
    with pytest.raises(PlacementError, match="segment"):
        place(free, tree, 3, PlacementSpec(policy="slurm-block", segment=2))


def test_kueue_required_balanced_and_least_free(tree):
    free = _free(tree, [0, 4, 5, 6, 7, 9])             # free per leaf: 3, 0, 3, 4
    with pytest.raises(PlacementError, match="required"):
        place(free, tree, 6, PlacementSpec(policy="kueue", mode="required", level="leaf"))
    # Balanced: the fewest leaves, split evenly (3:3), where BestFit fills the fullest leaf first (4:2)
    balanced = place(free, tree, 6, PlacementSpec(policy="kueue", algorithm="Balanced"))
    best = place(free, tree, 6, PlacementSpec(policy="kueue", algorithm="BestFit"))
    assert sorted(np.bincount(tree.leaf_of_server[balanced]).tolist()) == [0, 0, 3, 3]
    assert sorted(np.bincount(tree.leaf_of_server[best], minlength=4).tolist()) == [0, 0, 2, 4]
    # LeastFreeCapacity: the fullest (least free) leaf is used first
    assert tree.leaf_of_server[place(free, tree, 2, PlacementSpec(policy="kueue", level="cluster",
                                                                    algorithm="LeastFreeCapacity"))].tolist() == [0, 0]


def test_volcano_hard_mode_caps_the_tier(tree):
    free = _free(tree, [0, 4, 5, 6, 7, 9])
    with pytest.raises(PlacementError, match="hard"):
        place(free, tree, 5, PlacementSpec(policy="volcano", mode="required", level="leaf"))
    assert tree.spans(place(free, tree, 3, PlacementSpec(policy="volcano", mode="required", level="leaf")))[0] == 1


def test_too_big_and_unknown_are_one_clear_error(tree):
    with pytest.raises(PlacementError, match="needs 17 servers; 16 of 16 are free"):
        place(np.ones(16, bool), tree, 17, PlacementSpec())


def test_hostlist_is_slurms_compressed_form():
    assert hostlist(["s0", "s1", "s2", "s5", "s7", "s8"]) == "s[0-2,5,7-8]"
    assert hostlist(["gpu01", "gpu02", "gpu03"]) == "gpu[01-03]"
