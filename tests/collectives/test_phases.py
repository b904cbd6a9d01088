"""Collectives as phases on the flow engine, against closed forms on a non-blocking fabric.

Closed forms (NVIDIA/nccl-tests doc/PERFORMANCE.md):
ring all-reduce moves 2(n-1)/n x S per rank, all-gather and reduce-scatter (n-1)/n x S, so on a
non-blocking fabric the bandwidth time is that volume over the per-rank bandwidth B and busbw = B.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpuwait.collectives.algorithms import compile_collective, ring_edges
from gpuwait.collectives.communicator import Communicator
from gpuwait.engine.base import effective_capacity_Bps
from gpuwait.errors import SpecError
from gpuwait.fabric.collective import run_plan
from gpuwait.spec import ClusterSpec, RoutingSpec
from gpuwait.topology import build_topology
from gpuwait.transport import TRANSPORTS

S = 2.0**30


@pytest.fixture(scope="module")
def fabric():
    return build_topology(ClusterSpec(servers=8, server={"template": "dgx-h100"}, fabric={"kind": "clos"}))


def _time(topo, comm, collective, channels=1, algorithm="ring", routing="adaptive"):
    transport = TRANSPORTS["infiniband"]
    plan = compile_collective(comm, collective, S, algorithm, channels)
    return run_plan(topo, plan, RoutingSpec(kind=routing), transport, effective_capacity_Bps(topo, transport))


@pytest.mark.parametrize("collective, volume", [("all_reduce", lambda n: 2 * (n - 1) / n), ("all_gather", lambda n: (n - 1) / n),
                                                ("reduce_scatter", lambda n: (n - 1) / n), ("broadcast", lambda n: 1.0)])
def test_one_gpu_per_server_ring_matches_the_closed_form(fabric, collective, volume):
    comm = Communicator.world(fabric, gpus_per_server=1)
    nic_Bps = 50e9 * TRANSPORTS["infiniband"].wire_efficiency
    run = _time(fabric, comm, collective)
    assert run.bandwidth_time_s == pytest.approx(volume(comm.n_ranks) * S / nic_Bps, rel=1e-9)


def test_one_channel_per_rail_reaches_the_servers_aggregate_nic_bandwidth(fabric):
    comm = Communicator.world(fabric)
    n = comm.n_ranks
    nic_Bps = 50e9 * TRANSPORTS["infiniband"].wire_efficiency
    one = _time(fabric, comm, "all_reduce", channels=1).bandwidth_time_s
    eight = _time(fabric, comm, "all_reduce", channels=8).bandwidth_time_s
    busbw_one = S / one * 2 * (n - 1) / n
    busbw_eight = S / eight * 2 * (n - 1) / n
    assert busbw_one == pytest.approx(nic_Bps, rel=1e-6)  # one ring crosses servers through one NIC
    assert busbw_eight == pytest.approx(8 * nic_Bps, rel=1e-6)  # eight rails


def test_ring_hops_between_servers_are_rail_aligned(fabric):
    comm = Communicator.world(fabric, servers=2)
    src, dst = ring_edges(comm, 8)
    topo = fabric
    crossing = topo.node_server[src] != topo.node_server[dst]
    local = lambda g: g - topo.gpu_node[topo.node_server[g], 0]  # noqa: E731
    assert (local(src[crossing]) == local(dst[crossing])).all()
    assert sorted(set(local(src[crossing]).tolist())) == list(range(8))


def test_phases_repeat_instead_of_unrolling(fabric):
    comm = Communicator.world(fabric)
    plan = compile_collective(comm, "all_reduce", S, "ring", 4)
    assert len(plan.phases) == 1 and plan.phases[0].repeat == 2 * (comm.n_ranks - 1)
    assert plan.phases[0].n_flows == 4 * comm.n_ranks + 4 * (comm.n_nodes)  # ring hops + PXN NVLink hand-overs


def test_alltoall_busbw_on_n_servers_is_n_over_n_minus_1_nic_bandwidth(fabric):
    """NVIDIA/nccl-tests#130 (maintainer comment): alltoall busbw ~ N/(N-1) x network bandwidth per GPU.

    Exactly: each GPU sends (n - ppn)/n of S over its NIC, so busbw = B (n-1)/(n-ppn); the maintainers'
    N/(N-1) is that with intra-server traffic counted as free (large ppn).
    """
    for servers in (2, 4, 8):
        comm = Communicator.world(fabric, servers=servers)
        run = _time(fabric, comm, "alltoall", algorithm="direct")
        n = comm.n_ranks
        busbw = S / run.bandwidth_time_s * (n - 1) / n
        nic_Bps = 50e9 * TRANSPORTS["infiniband"].wire_efficiency
        assert busbw == pytest.approx(nic_Bps * (n - 1) / (n - comm.ppn), rel=1e-6)
        assert busbw == pytest.approx(servers / (servers - 1) * nic_Bps, rel=0.07)


def test_bad_requests(fabric):
    comm = Communicator.world(fabric, servers=2)
    with pytest.raises(SpecError, match="collective: got 'allreduce'"):
        compile_collective(comm, "allreduce", S, "ring")
    with pytest.raises(SpecError, match="ring does not run alltoall"):
        compile_collective(comm, "alltoall", S, "ring")
    with pytest.raises(SpecError, match="gpus per server: got 9"):
        Communicator.world(fabric, gpus_per_server=9)


def test_merging_identical_local_flows_changes_nothing(fabric):
    """A k-fold flow on one path loads every link with k times its rate: the same max-min answer."""
    from gpuwait.collectives.algorithms import Phase
    from gpuwait.fabric.collective import run_phase

    comm = Communicator.world(fabric, servers=1)
    transport = TRANSPORTS["infiniband"]
    capacity = effective_capacity_Bps(fabric, transport)
    src, dst = comm.rank_gpu[[0, 0, 0, 1]], comm.rank_gpu[[1, 1, 1, 2]]
    run = run_phase(fabric, Phase("p", src, dst, np.full(4, S), 1), RoutingSpec(), transport, capacity)
    # three identical GPU0 -> GPU1 flows share GPU0's NVLink: each gets a third of it
    assert run.step_time_s == pytest.approx(3 * S / capacity[fabric.link_id("s0.gpu0->s0.nvsw")])
    load = run.link_load_Bps()
    assert load[fabric.link_id("s0.gpu0->s0.nvsw")] == pytest.approx(capacity[fabric.link_id("s0.gpu0->s0.nvsw")])


def test_nvls_tree_is_bound_by_each_gpus_nic_on_a_non_blocking_fabric(fabric):
    """NVLSTree: each GPU's NIC carries its 1/ppn shard over two binary trees. On 4 nodes every node
    sends 3 half-shards per tree pair (interior in one tree, leaf in the other), so the NIC time is
    1.5 S / (ppn B) — less NIC traffic per byte than a ring's 2(n-1)/n S / (ppn B)."""
    from gpuwait.collectives.ncclenv import parse_env
    from gpuwait.fabric.perf import CollectivePredictor

    comm = Communicator.world(fabric, servers=4)
    predictor = CollectivePredictor.create(comm, parse_env({}), RoutingSpec(kind="adaptive"), TRANSPORTS["infiniband"])
    nic_Bps = 50e9 * TRANSPORTS["infiniband"].wire_efficiency
    nvls_tree_s = predictor.fabric_time_s("all_reduce", S, "nvls_tree", "Simple", 1)
    assert nvls_tree_s == pytest.approx(1.5 * S / (comm.ppn * nic_Bps), rel=1e-6)
    ring_s = predictor.fabric_time_s("all_reduce", S, "ring", "Simple", 8)
    assert ring_s > nvls_tree_s


@pytest.mark.parametrize("collective", ["all_gather", "reduce_scatter"])
@pytest.mark.parametrize("servers", [4, 8])
def test_pat_moves_the_ring_volume_in_log2_rounds(fabric, collective, servers):
    """PAT at one GPU per server: rounds of 1, 2, 4, ... shards; (n-1)/n x S per rank over its NIC
    in log2(n) phases (NCCL tuning.cc v2.30.7 gives PAT's latency as log2(nNodes) steps)."""
    comm = Communicator.world(fabric, servers=servers, gpus_per_server=1)
    run = _time(fabric, comm, collective, algorithm="pat")
    nic_Bps = 50e9 * TRANSPORTS["infiniband"].wire_efficiency
    assert len(run.phases) == int(np.log2(servers))
    assert run.bandwidth_time_s == pytest.approx((servers - 1) / servers * S / nic_Bps, rel=1e-9)


def test_hierarchical_all_reduce_closed_form(fabric):
    """Reduce-scatter and all-gather inside each server over NVLink, a ring per rail between servers:
    2(p-1)/p x S over NVLink plus 2(N-1)/N x S/p over each GPU's own NIC."""
    comm = Communicator.world(fabric, servers=4)
    ppn, nodes = comm.ppn, comm.n_nodes
    run = _time(fabric, comm, "all_reduce", algorithm="hierarchical")
    transport = TRANSPORTS["infiniband"]
    nvlink_Bps = fabric.spec.server.nvlink_bandwidth
    nic_Bps = 50e9 * transport.wire_efficiency
    expected = 2 * (ppn - 1) / ppn * S / nvlink_Bps + 2 * (nodes - 1) / nodes * S / ppn / nic_Bps
    assert [p.phase.name for p in run.phases] == ["all_reduce-hier-rs", "all_reduce-hier-rails", "all_reduce-hier-ag"]
    assert run.bandwidth_time_s == pytest.approx(expected, rel=1e-6)


def test_rings_on_a_mesh_of_direct_links_use_every_link():
    """A GH200 quad's GPUs are a mesh: 6 NVLink4 links (150 GB/s) per pair, no NVSwitch. NCCL's graph search places
    each ring channel on links that still have bandwidth (src/graph/search.cc ncclTopoSearchRec), so its rings cover
    all 12 GPU-to-GPU links and a ring moves 3 x 150 GB/s out of each GPU. With every channel in one GPU order the
    rings loaded 4 links and reached one pair's 150 GB/s (busbw), a third of the all-to-all's and of NCCL's own plan."""
    quad = build_topology(ClusterSpec(servers=1, server={"template": "gh200-quad"}, fabric={"kind": "clos"}))
    comm = Communicator.world(quad)
    run = _time(quad, comm, "all_reduce", channels=12)
    pair_Bps = effective_capacity_Bps(quad, TRANSPORTS["infiniband"])[quad.link_id("s0.gpu0->s0.gpu1")]
    assert pair_Bps == pytest.approx(150e9, rel=0.05)
    busbw = S / run.bandwidth_time_s * 2 * 3 / 4
    assert busbw == pytest.approx(3 * pair_Bps, rel=0.01)
    src, dst = ring_edges(comm, 12)
    per_link = np.unique(np.c_[src, dst], axis=0, return_counts=True)[1]
    assert len(per_link) == 12 and (per_link == 4).all()  # 48 hops, four rings on each link
