"""Solo runs reused under static (destination-based, InfiniBand D-mod-k) routing.

The subnet manager's fat-tree routing numbers the destinations by leaf, then port, and sends a flow
up from a switch by ``(destination / product of earlier up-choices) mod up-links`` (D-mod-k, as analysed
in "Oblivious routing schemes in extended generalized fat tree networks", IEEE CLUSTER 2009,
https://research.ibm.com/publications/oblivious-routing-schemes-in-extended-generalized-fat-tree-networks).
A relabelling of servers and leaves that keeps the
spines and cores maps one placement's routes onto another's only if every destination keeps its
residue modulo the product of the up-degrees (``runner.schedule.destination_residues``). Checked here
by running the second placement for real: per-link loads equal on a 2-tier and a 3-tier InfiniBand
fabric when the residues match, and different (so no reuse) when they do not."""

from __future__ import annotations

import numpy as np
import pytest

from gpuwait.runner.schedule import _Cluster, destination_residues, link_index, relabel_links, shape_key
from gpuwait.spec import Scenario
from gpuwait.workload.traces import trace_workload

TWO_TIER = {"preset": "rocev2-400g-2tier", "servers": 64, "fabric": {"oversubscription": 2}}
# radix-16 switches, 2:1 at the leaf: a leaf per server with 4 uplinks, 4 spines of 8 uplinks per pod of 8 leaves
# DGX SuperPOD: rail-optimized, a leaf per rail of each 32-server unit (32 uplinks), storage leaves beside
SUPERPOD = {"preset": "dgx-h100-superpod", "servers": 64}
THREE_TIER = {"preset": "rocev2-400g-2tier", "servers": 32, "fabric": {"tiers": 3, "switch_radix": 16, "oversubscription": 2}}


def _cluster(fabric: dict) -> tuple[_Cluster, object]:
    job = {"name": "x", "gpus": 32, "workload": trace_workload(32)}
    cluster = {**fabric, "routing": {"kind": "static"}, "transport": {"name": "infiniband"}}
    scenario = Scenario.model_validate({"cluster": cluster, "jobs": [job]})
    return _Cluster(scenario), scenario.jobs[0]


def _assert_same(got, want) -> None:
    (program, link_bytes), (want_program, want_bytes) = got, want
    assert program.step_s == pytest.approx(want_program.step_s, rel=1e-12)
    np.testing.assert_allclose(program.peak_Bps, want_program.peak_Bps, rtol=1e-9, atol=1e-3)
    np.testing.assert_allclose(link_bytes, want_bytes, rtol=1e-9, atol=1e-3)


@pytest.mark.parametrize("fabric,first,second", [
    (TWO_TIER, [0, 1, 4, 8], [22, 23, 12, 28]),    # leaf positions 0,1 | 0 | 0 -> 2,3 | 0 | 0: parities kept
    (SUPERPOD, [0, 1, 2, 3], [32, 33, 34, 35]),    # the same slots of the other unit
    (THREE_TIER, [0, 1, 8, 9], [4, 5, 12, 13]),     # leaf j -> j + 4 in its pod: residues mod 4 x 8 kept
], ids=["2-tier", "2-tier-rail-optimized", "3-tier"])
def test_static_routing_reuses_a_placement_whose_destinations_keep_their_residues(fabric, first, second):
    reuse, spec = _cluster(fabric)
    fresh, _ = _cluster(fabric)
    assert reuse.shape_symmetric
    first, second = np.array(first), np.array(second)
    assert shape_key(reuse.tree, first, reuse._residues) == shape_key(reuse.tree, second, reuse._residues)
    reuse.alone(spec, first, 32)
    got = reuse.alone(spec, second, 32)
    assert reuse.shape_hits == 1
    _assert_same(got, fresh.alone(spec, second, 32))


def test_residues_are_the_server_position_in_its_leaf_mod_2_on_a_2_to_1_leaf():
    cl, _ = _cluster(TWO_TIER)
    r = destination_residues(cl.topo)
    # 4 servers x 8 NICs under a leaf with 16 uplinks: index = leaf * 32 + position * 8 + nic, mod 16
    assert r.shape == (64, 8) and (r[0] == np.arange(8)).all() and (r[1] == 8 + np.arange(8)).all()
    assert (r[2] == r[0]).all() and (r[5] == r[1]).all()


def test_another_residue_is_not_reused_and_relabelling_would_be_wrong():
    cl, spec = _cluster(TWO_TIER)
    first, other = np.array([0, 1, 4, 8]), np.array([21, 22, 12, 28])  # positions 1,2 under leaf 5: parities swapped
    assert shape_key(cl.tree, first) == shape_key(cl.tree, other)  # the spray/adaptive shape matches...
    assert shape_key(cl.tree, first, cl._residues) != shape_key(cl.tree, other, cl._residues)  # ...static's does not
    program, link_bytes = cl.alone(spec, first, 32)
    fresh = cl.alone(spec, other, 32)
    assert cl.shape_hits == 0
    loaded = np.flatnonzero(link_bytes > 0)
    moved = relabel_links(cl.topo, first, other, loaded, link_index(cl.topo))
    relabelled = np.zeros_like(link_bytes)
    relabelled[moved] = link_bytes[loaded]
    assert not np.allclose(relabelled, fresh[1], rtol=1e-6, atol=1.0)  # the flows climb to other spines
