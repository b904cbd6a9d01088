"""An all-to-all run as weighted flow groups equals the same all-to-all with every flow listed.

Issue 16's bar: busbw within 1 % and per-link bytes exact against the per-flow engine on every case
small enough to run both. The grouped run (gpuwait.fabric.alltoall) keeps one row per (source leaf
and demand, destination leaf) under spraying and adaptive routing; the reference lists the n(n-1)
flows (``Phase.expanded``) and solves them one by one. The max-min check (the bottleneck
characterization, Bertsekas and Gallager, Data Networks, section 6.5.2) must accept the grouped
solution when it is right and reject it when a rate is wrong.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpuwait.fabric.alltoall as alltoall
import gpuwait.fabric.memory as memory
from gpuwait.collectives.algorithms import compile_collective
from gpuwait.collectives.communicator import Communicator
from gpuwait.engine.base import effective_capacity_Bps
from gpuwait.fabric.alltoall import group_pairs, local_pairs, verify
from gpuwait.fabric.collective import _join, _merge_local_flows, _solve, run_plan
from gpuwait.routing.paths import route_flows
from gpuwait.spec import ClusterSpec, RoutingSpec
from gpuwait.topology import build_preset, build_topology
from gpuwait.transport import TRANSPORTS

GIB = 2**30


def _topo(fabric: str, servers: int):
    if fabric == "superpod":
        return build_preset("dgx-h100-superpod", servers=servers)
    if fabric == "rocev2-2tier":
        return build_preset("rocev2-400g-2tier", servers=servers)
    return build_topology(ClusterSpec(servers=servers, server={"template": "dgx-h100"},
                                      fabric={"kind": "clos", "tiers": 3, "switch_radix": 16, "rail_optimized": False}))


def _both(topo, kind: str, gpus=None, capacity_scale=None):
    """(grouped run, listed run) of a 1 GiB all-to-all."""
    transport = TRANSPORTS[topo.spec.transport.name]
    capacity = effective_capacity_Bps(topo, transport)
    if capacity_scale is not None:
        capacity = capacity * capacity_scale
    comm = Communicator.world(topo) if gpus is None else Communicator(topo, gpus)
    plan = compile_collective(comm, "alltoall", GIB, "direct")
    listed = replace(plan, phases=tuple(p.expanded() for p in plan.phases))
    spec = RoutingSpec(kind=kind)
    return run_plan(topo, plan, spec, transport, capacity), run_plan(topo, listed, spec, transport, capacity)


def _assert_equal(grouped, listed):
    assert grouped.bandwidth_time_s == pytest.approx(listed.bandwidth_time_s, rel=1e-9)
    for a, b in zip(grouped.phases, listed.phases, strict=True):
        bytes_a, bytes_b = a.link_load_Bps() * a.time_s, b.link_load_Bps() * b.time_s
        np.testing.assert_allclose(bytes_a, bytes_b, rtol=1e-9, atol=1e-9 * bytes_b.max())


@pytest.fixture(params=[False, True], ids=["per-class-walk", "stages"])
def stages(request, monkeypatch):
    """Run with the routes' leaf-pair classes walked one by one, or by stages (routing.stages) however few."""
    import gpuwait.routing.paths as paths
    if request.param:
        monkeypatch.setattr(paths, "_STAGES_MIN_CLASSES", 0)
    return request.param


@pytest.fixture(params=[True, False], ids=["per-pod", "per-leaf"])
def per_pod(request, monkeypatch):
    """Groups per destination pod, or (as where a route's last hops do not allow it) per leaf."""
    if not request.param:
        monkeypatch.setattr(alltoall, "_split_at_pod", lambda *args: None)
    return request.param


@pytest.mark.parametrize("kind", ["spray", "adaptive", "ecmp"])
@pytest.mark.parametrize(("fabric", "servers"), [("superpod", 8), ("rocev2-2tier", 6), ("clos-3tier", 32)])
def test_grouped_alltoall_equals_listed_flows(fabric, servers, kind, stages, per_pod):
    topo = _topo(fabric, servers)
    grouped, listed = _both(topo, kind)
    _assert_equal(grouped, listed)
    n_flows = listed.phases[0].phase.n_flows
    assert grouped.phases[0].phase.n_flows == n_flows == topo.n_gpus * (topo.n_gpus - 1)
    rows = grouped.phases[0].routes.n_rows
    if kind == "ecmp":  # every flow hashes on its own: listed
        assert rows == listed.phases[0].routes.n_rows
    else:  # a row per group and QP, and the server-local rows
        assert rows < listed.phases[0].routes.n_rows / 4


def test_groups_are_few_on_a_superpod(monkeypatch):
    """8 SuperPOD servers, 64 GPUs: 8 rail leaves under the same spines (one pod), so per source leaf
    one group to its own leaf (56 flows: 7 other servers) and one to the other 7 leaves of the pod
    (392 flows), 16 groups instead of 3,584 rows; per leaf pair (the fallback) 8 x 8 groups of 56."""
    topo = _topo("superpod", 8)
    phase = compile_collective(Communicator.world(topo), "alltoall", GIB, "direct").phases[0]
    groups = group_pairs(topo, phase, RoutingSpec(kind="adaptive"), "infiniband")
    assert groups is not None and groups.last_members is not None
    assert len(groups.multiplicity) == 16 and sorted(set(groups.multiplicity.tolist())) == [56.0, 392.0]
    assert groups.multiplicity.sum() == 64 * 56  # every flow between servers once
    monkeypatch.setattr(alltoall, "_split_at_pod", lambda *args: None)  # the fallback: per destination leaf
    groups = group_pairs(topo, phase, RoutingSpec(kind="adaptive"), "infiniband")
    assert groups is not None and groups.last_members is None
    assert len(groups.multiplicity) == 64 and set(groups.multiplicity.tolist()) == {56.0}


@pytest.mark.parametrize("preset", ["oci-a100-roce", "dual-plane-2x200g"])
def test_group_pairs_is_none_where_a_gpu_has_not_one_nic_of_one_uplink(preset):
    topo = build_preset(preset, servers=2)
    phase = compile_collective(Communicator.world(topo), "alltoall", GIB, "direct").phases[0]
    assert group_pairs(topo, phase, RoutingSpec(kind="adaptive"), topo.spec.transport.name) is None


def _grouped_solution(topo, kind):
    transport = TRANSPORTS[topo.spec.transport.name]
    capacity = effective_capacity_Bps(topo, transport)
    phase = compile_collective(Communicator.world(topo), "alltoall", GIB, "direct").phases[0]
    groups = group_pairs(topo, phase, RoutingSpec(kind=kind), transport.name)
    src, dst, size, mult = _merge_local_flows(topo, local_pairs(topo, phase))
    routes = _join(route_flows(topo, RoutingSpec(kind=kind), src, dst, transport=transport.name), groups.routes, len(src))
    size, mult = np.r_[size, groups.bytes_per_flow], np.r_[mult, groups.multiplicity]
    remote = np.r_[np.zeros(len(src), bool), np.ones(len(groups.multiplicity), bool)]
    rate, _, cap = _solve(routes, size, mult, remote, transport, capacity)
    return routes, rate, mult[routes.flow_index], capacity, cap, groups


@pytest.mark.parametrize("kind", ["spray", "adaptive"])
def test_max_min_check_accepts_the_solution_and_rejects_a_wrong_rate(kind):
    routes, rate, mult, capacity, cap, groups = _grouped_solution(_topo("rocev2-2tier", 6), kind)
    assert verify(routes, rate, mult, capacity, cap, groups)
    slower = rate.copy()
    slower[-1] *= 0.9  # one group below its fair share: no longer bottlenecked
    assert not verify(routes, slower, mult, capacity, cap, groups)
    assert not verify(routes, rate * 0.5, mult, capacity, cap, groups)  # nothing saturated


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fabric=st.sampled_from(["superpod", "rocev2-2tier"]), servers=st.integers(2, 10),
       kind=st.sampled_from(["spray", "adaptive", "ecmp"]), data=st.data())
def test_random_fabrics_communicators_and_faults(fabric, servers, kind, data):
    """Random fabric size, routing, communicator (any subset of GPUs, so leaves hold unequal counts)
    and a degraded link (so groups may stop being symmetric: the check must then fall back)."""
    topo = _topo(fabric, servers)
    # NCCL's model wants as many ranks on every server of a communicator
    servers_used = data.draw(st.lists(st.integers(0, servers - 1), min_size=1, max_size=servers, unique=True))
    per_server = data.draw(st.integers(1 if len(servers_used) > 1 else 2, topo.gpus_per_server))
    gpus = np.sort(np.concatenate([
        topo.gpu_node[s, data.draw(st.permutations(range(topo.gpus_per_server)))[:per_server]] for s in servers_used]))
    scale = np.ones(topo.n_links)
    if data.draw(st.booleans()):
        link = data.draw(st.integers(0, topo.n_links - 1))
        scale[link] = data.draw(st.sampled_from([0.1, 0.5, 0.9]))
    grouped, listed = _both(topo, kind, gpus, scale)
    _assert_equal(grouped, listed)


@pytest.mark.parametrize("kind", ["spray", "adaptive"])
def test_a_slow_nic_sends_the_phase_back_to_the_listed_solve(kind, monkeypatch):
    """One NIC's uplink at a tenth: its GPU's flows are slower than the rest of their group, the
    grouped rates fail the max-min check and the phase is solved flow by flow (same result)."""
    import gpuwait.fabric.collective as collective

    outcomes = []
    grouped_run = collective._run_grouped

    def spy(*args, **kwargs):
        outcomes.append(grouped_run(*args, **kwargs) is not None)
        return None if not outcomes[-1] else grouped_run(*args, **kwargs)

    monkeypatch.setattr(collective, "_run_grouped", spy)
    topo = _topo("superpod", 4)
    nic = topo.nic_node[0, topo.gpu_nic[0]]
    uplink = np.flatnonzero((topo.link_src == nic) & topo.switch_nodes[topo.link_dst])
    scale = np.ones(topo.n_links)
    scale[uplink] = 0.1
    grouped, listed = _both(topo, kind, capacity_scale=scale)
    _assert_equal(grouped, listed)
    assert outcomes == [False]
    _both(topo, kind)  # and with every NIC whole the groups stand
    assert outcomes == [False, True]


@pytest.mark.parametrize("kind", ["spray", "adaptive"])
def test_several_all_to_alls_in_one_phase(kind):
    """Two expert-parallel groups at once (GPUs 0-3 and 4-7 of every server, other sizes), as a family
    of groups compiles them (fabric.perf joins the peers' pair sets): never a flow between the sets."""
    from gpuwait.collectives.algorithms import Phase
    from gpuwait.fabric.collective import run_phase

    topo = _topo("rocev2-2tier", 5)
    transport = TRANSPORTS[topo.spec.transport.name]
    capacity = effective_capacity_Bps(topo, transport)
    none = np.zeros(0, np.int64)
    phase = Phase("ep", none, none, np.zeros(0), 1, ((topo.gpu_node[:, :4].ravel(), 1e6),
                                                     (topo.gpu_node[:, 4:].ravel(), 2e6)))
    assert phase.n_flows == 2 * 20 * 19
    grouped = run_phase(topo, phase, RoutingSpec(kind=kind), transport, capacity)
    listed = run_phase(topo, phase.expanded(), RoutingSpec(kind=kind), transport, capacity)
    assert grouped.routes.n_rows < listed.routes.n_rows
    assert grouped.time_s == pytest.approx(listed.time_s, rel=1e-9)
    np.testing.assert_allclose(grouped.link_load_Bps(), listed.link_load_Bps(), rtol=1e-9,
                               atol=1e-9 * listed.link_load_Bps().max())


def test_ecmp_alltoall_too_large_to_list_is_refused_with_its_memory(monkeypatch):
    """ECMP hashes every flow's own 5-tuple, so its all-to-all stays listed flow by flow (n(n-1) rows:
    268 M at 16,384 GPUs): one that cannot fit is refused before allocating, naming its estimate."""
    from gpuwait.errors import SimulationError

    topo = _topo("superpod", 8)
    monkeypatch.setattr(memory, "default_memory_limit_bytes", lambda: 1_000_000)
    with pytest.raises(SimulationError, match=r"4,032 flows listed one by one need about .*expected at most 1MB "
                                              r"\(half this machine's memory\)"):
        _both(topo, "ecmp")
    _both(topo, "adaptive")  # grouped per leaf pair: never listed


def test_a_listed_alltoall_is_held_to_the_callers_max_memory(monkeypatch):
    """The caller's limit (``max_memory``) governs the listed all-to-all's refusal, not half the machine's
    memory, and the message names it (as ``--max-memory`` on the command line)."""
    from gpuwait.cli.common import options_named
    from gpuwait.errors import SimulationError

    topo = _topo("superpod", 8)
    transport = TRANSPORTS[topo.spec.transport.name]
    plan = compile_collective(Communicator.world(topo), "alltoall", GIB, "direct")
    args = (topo, plan, RoutingSpec(kind="ecmp"), transport, effective_capacity_Bps(topo, transport))
    with pytest.raises(SimulationError, match=r"expected at most 1MB \(`max_memory`\)"):
        run_plan(*args, max_memory_bytes=1e6)
    with pytest.raises(SimulationError, match=r"expected at most 1MB \(--max-memory\)"), \
            options_named(max_memory="--max-memory"):
        run_plan(*args, max_memory_bytes=1e6)
    monkeypatch.setattr(memory, "default_memory_limit_bytes", lambda: 1_000_000)
    assert run_plan(*args, max_memory_bytes=64 * GIB).bandwidth_time_s > 0  # over the default, within the caller's


@pytest.mark.parametrize("kind", ["spray", "adaptive"])
def test_shared_last_hops_and_way_up_on_three_tiers(kind, monkeypatch):
    """On a 3-tier fabric routed by stages, a group row's last hops are memberships of (switch, shares)
    classes scaled by the fraction f(s) reaching the switch, and the source leaf's way up to the cores
    is one side part per source group kept apart from the (group, pod) part (Routes.class_sides): both
    fewer entries than the rows' copies, and the solve still equals the listed one."""
    import gpuwait.routing.paths as paths
    monkeypatch.setattr(paths, "_STAGES_MIN_CLASSES", 0)
    topo = _topo("clos-3tier", 32)
    grouped, listed = _both(topo, kind)
    _assert_equal(grouped, listed)
    routes = grouped.phases[0].routes
    assert routes.class_sides  # the way up kept apart, part of each row's M
    up_of, up = routes.side_classes[routes.class_sides[0]]
    assert up.shape[0] < routes.class_weights.shape[0]
    has = up_of >= 0
    assert up.nnz < up[up_of[has]].nnz / 2  # stored once per group, not per group row (measured 2,560 vs 7,168)
    last = [(rc, cw) for rc, cw in routes.side_classes if sp.issparse(rc)]
    assert len(last) == 1  # the last hops: rows x (switch, shares) classes
    members, classes = last[0]
    assert members.nnz + classes.nnz < (members @ classes).nnz / 2  # measured 1,024 + 2,048 vs 7,936 (adaptive)


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_destination_members_per_leaf_equal_the_per_gpu_table(data):
    """The destination members kept per (group, leaf) (alltoall.DestinationMembers) answer every question
    the per-(group, GPU) table answered, against that table counted pair by pair from the definition: a
    source of class c and a destination on a leaf of key k, on different servers, are one member each."""
    n = data.draw(st.integers(2, 30))
    server = np.array(data.draw(st.lists(st.integers(0, 5), min_size=n, max_size=n)))
    leaf = np.unique(data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), return_inverse=True)[1].ravel()
    demand = np.array(data.draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)))
    src_class = np.unique(leaf * 2 + demand, return_inverse=True)[1].ravel()
    n_classes, n_leaves = int(src_class.max()) + 1, int(leaf.max()) + 1
    key_of = np.array(data.draw(st.lists(st.integers(0, 2), min_size=n_classes * n_leaves,
                                         max_size=n_classes * n_leaves))).reshape(n_classes, n_leaves)
    members_src, members_dst = alltoall._members(server, src_class, leaf, key_of)
    want_src, want_dst = np.zeros(members_src.shape), np.zeros(members_src.shape)
    for s in range(n):
        for d in range(n):
            if server[s] != server[d]:
                group = src_class[s] * (int(key_of.max()) + 1) + key_of[src_class[s], leaf[d]]
                want_src[group, s] += 1
                want_dst[group, d] += 1
    np.testing.assert_array_equal(members_src.toarray(), want_src)
    np.testing.assert_array_equal(members_dst.listed().toarray(), want_dst)
    has = want_dst.any(axis=1)
    first, second = members_dst.first_two()
    want_first = np.argmax(want_dst > 0, axis=1)
    other = (want_dst > 0) & (server[None, :] != server[want_first][:, None])
    want_second = np.where(other.any(axis=1), np.argmax(other, axis=1), want_first)
    np.testing.assert_array_equal(first[has], want_first[has])
    np.testing.assert_array_equal(second[has], want_second[has])
    n_of_group = np.array(data.draw(st.lists(st.integers(1, n), min_size=len(has), max_size=len(has))))
    n_of_group[has] = np.where(data.draw(st.booleans()), (want_dst[has] > 0).sum(axis=1), n_of_group[has])
    values = np.where(want_dst > 0, want_dst, np.nan)
    even = ((want_dst > 0).sum(axis=1) == n_of_group) & (np.nanmax(np.where(has[:, None], values, 0), axis=1)
                                                          == np.nanmin(np.where(has[:, None], values, 0), axis=1))
    np.testing.assert_array_equal(members_dst.even(n_of_group), even)
    level = np.array(data.draw(st.lists(st.sampled_from([1.0, 2.0, 3.0, np.inf]), min_size=n, max_size=n)))
    pairs = members_dst.pairs.tocoo()
    want_max = [max(level[d] for d in range(n) if leaf[d] == b and want_dst[g, d] > 0)
                for g, b in zip(pairs.row, pairs.col, strict=True)]
    np.testing.assert_array_equal(members_dst.leaf_max(level), want_max)
    np.testing.assert_array_equal(members_dst.pairs.toarray(),
                                  [[((want_dst[g] > 0) & (leaf == b)).sum() for b in range(n_leaves)] for g in range(len(has))])
    np.testing.assert_array_equal(members_dst.sums.toarray(),
                                  [[want_dst[g, leaf == b].sum() for b in range(n_leaves)] for g in range(len(has))])
