"""Flows on real topologies: oversubscription, transports, dependencies, storage paths.

External references: a 2:1 oversubscribed leaf has half the uplink capacity of its downlinks, so
cross-leaf all-to-all throughput halves (fabric definition); header bytes per packet of IB and
RoCEv2 (IBTA LRH/BTH/ICRC/VCRC, RFC 791/768 framing) set the wire efficiency; the kernel TCP
path is held to 0.85 of the port rate (Mellanox/ngc_multinode_perf ngc_tcp_test.sh PASS_CRITERION).
"""

from __future__ import annotations

import numpy as np
import pytest

from gpuwait.collectives.communicator import Communicator
from gpuwait.collectives.ncclenv import parse_env
from gpuwait.collectives.physical import PUBLIC_TABLE_FIT
from gpuwait.engine.base import message_overhead_s
from gpuwait.engine.flow_run import simulate_flows
from gpuwait.fabric.perf import CollectivePredictor
from gpuwait.runner.traffic import run_traffic
from gpuwait.spec import ClusterSpec, PatternSpec, RoutingSpec, Scenario, TrafficSpec
from gpuwait.spec.cluster import CalibrationSpec
from gpuwait.topology import build_topology
from gpuwait.transport import TRANSPORTS
from gpuwait.workload.traffic import pattern_flows, traffic_flows
from tests.conftest import leaf_spine


def _all_to_all_throughput(oversubscription: float, routing: str) -> float:
    topo = build_topology(leaf_spine(oversubscription=oversubscription))
    flows = pattern_flows(topo, PatternSpec(kind="all-to-all", size="64MB"))
    run = simulate_flows(topo, flows, RoutingSpec(kind=routing), TRANSPORTS["rocev2"])
    return float(flows.size_bytes.sum()) / run.makespan_s


@pytest.mark.parametrize("routing", ["spray", "adaptive"])
def test_two_to_one_oversubscription_halves_all_to_all(routing):
    full = _all_to_all_throughput(1.0, routing)
    half = _all_to_all_throughput(2.0, routing)
    assert half / full == pytest.approx(0.5, rel=0.01)
    # non-blocking: both directions at 8 NICs x 400G of payload
    assert full == pytest.approx(2 * 8 * 50e9 * TRANSPORTS["rocev2"].wire_efficiency, rel=0.01)


@pytest.mark.parametrize("transport, efficiency", [("infiniband", 4096 / 4122), ("rocev2", 4096 / 4178),
                                                   # the bare tcp profile is the wire; NCCL's socket ceilings
                                                   # (streams, proxy core) come from transport.socket
                                                   ("tcp", 8948 / 9038)])
def test_transport_sets_the_payload_rate_of_one_flow(transport, efficiency):
    topo = build_topology(leaf_spine(transport=transport))
    flows = pattern_flows(topo, PatternSpec(kind="rail-ring", size="1GB"))
    run = simulate_flows(topo, flows, RoutingSpec(kind="spray"), TRANSPORTS[transport])
    expected_s = 1e9 / (50e9 * efficiency)
    assert run.flow_time_s.max() == pytest.approx(expected_s, rel=1e-3)
    # latency: the path plus one message overhead, on top of the transfer
    assert run.flow_time_s.max() > expected_s + message_overhead_s(topo, TRANSPORTS[transport])


def _one_flow_time_s(cluster: ClusterSpec) -> float:
    topo = build_topology(cluster)
    traffic = TrafficSpec.model_validate({"flows": [{"name": "a", "src": "s0.gpu0", "dst": "s1.gpu0", "size": "1MB"}]})
    return float(simulate_flows(topo, traffic_flows(topo, traffic), RoutingSpec(), TRANSPORTS["rocev2"]).flow_time_s[0])


def test_a_flow_starts_after_the_message_overhead_perf_charges():
    # one parameter, read by both models: the collective model's per-message cost (the transport's LogGP o moved
    # by the public table fit) is what a network flow pays at its start
    topo = build_topology(leaf_spine())
    predictor = CollectivePredictor.create(Communicator.world(topo), parse_env({}), RoutingSpec(), TRANSPORTS["rocev2"])
    assert message_overhead_s(topo, TRANSPORTS["rocev2"]) == predictor.params.net_message_overhead_s
    assert predictor.params.net_message_overhead_s == pytest.approx(
        TRANSPORTS["rocev2"].message_overhead_s * PUBLIC_TABLE_FIT["net_message_overhead_s"])
    # a cluster's calibration section moves both: 10 us more per message is 10 us more per flow
    calibrated = leaf_spine().model_copy(update={"calibration": CalibrationSpec(net_message_overhead=10.2e-6)})
    zero = leaf_spine().model_copy(update={"calibration": CalibrationSpec(net_message_overhead=0.2e-6)})
    assert _one_flow_time_s(calibrated) - _one_flow_time_s(zero) == pytest.approx(10e-6, rel=1e-6)


def test_flows_wait_for_their_dependencies():
    topo = build_topology(leaf_spine())
    traffic = TrafficSpec.model_validate({"flows": [
        {"name": "a", "src": "s0.gpu0", "dst": "s1.gpu0", "size": "1GB"},
        {"name": "b", "src": "s0.gpu1", "dst": "s1.gpu1", "size": "1GB", "after": ["a"]},
    ]})
    flows = traffic_flows(topo, traffic)
    run = simulate_flows(topo, flows, RoutingSpec(kind="ecmp", qps_per_connection=2), TRANSPORTS["rocev2"])
    assert run.flow_start_s[1] == pytest.approx(run.flow_finish_s[0])


def test_converged_storage_traffic_crosses_the_compute_spines():
    spec = ClusterSpec(servers=4, server={"template": "dgx-h100"}, storage={"mode": "converged", "storage_servers": 2},
                       fabric={"kind": "clos", "tiers": 2, "leaf_downlinks": 8, "switch_radix": 16})
    topo = build_topology(spec)
    traffic = TrafficSpec.model_validate({"flows": [{"src": "stor0", "dst": "s0.gpu0", "size": "1GB"}]})
    run = simulate_flows(topo, traffic_flows(topo, traffic), RoutingSpec(kind="ecmp"), TRANSPORTS["rocev2"])
    crossed = topo.link_names(np.flatnonzero(run.link_bytes > 0))
    assert any("spine" in name for name in crossed)
    assert "leaf0->s0.nic0" in crossed


def test_separate_storage_network_uses_storage_nics():
    spec = ClusterSpec(servers=2, server={"template": "dgx-h100"}, storage={"mode": "separate", "storage_servers": 2})
    topo = build_topology(spec)
    traffic = TrafficSpec.model_validate({"flows": [{"src": "stor1", "dst": "s1.gpu5", "size": "1GB"}]})
    run = simulate_flows(topo, traffic_flows(topo, traffic), RoutingSpec(kind="ecmp"), TRANSPORTS["rocev2"])
    crossed = topo.link_names(np.flatnonzero(run.link_bytes > 0))
    assert any(name.startswith("stor.leaf0->s1.snic") for name in crossed)
    assert not any("nic" in name and "snic" not in name for name in crossed)


def test_scenario_variants_share_inputs_and_are_independent():
    scenario = Scenario.model_validate({
        "cluster": leaf_spine(seed=7).model_dump(exclude_unset=True),
        "traffic": {"patterns": [{"kind": "leaf-to-leaf", "count": 8, "size": "1GB"}]},
        "variants": [{"name": "spray", "routing": {"kind": "spray"}}],
    })
    first = run_traffic(scenario)
    again = run_traffic(scenario)
    assert [r.makespan_s for r in first] == [r.makespan_s for r in again]
    assert first[0].makespan_s > first[1].makespan_s
    assert first[1].labels["name"] == "spray"


def test_a_gpu_with_two_nics_uses_both():
    """OCI BM.GPU4.8 has 16 x 100G for 8 A100 (a100-oci-2node-16gpu-roce-all_reduce.md: 16 VFs per node):
    with the table's 4 QPs per connection a GPU's traffic leaves through both of its NICs."""
    from gpuwait.topology import build_preset

    topo = build_preset("oci-a100-roce", 2)
    flows = pattern_flows(topo, PatternSpec(kind="rail-ring", size="1GB"))
    run = simulate_flows(topo, flows, topo.spec.routing, TRANSPORTS["rocev2"])
    per_gpu_Bps = run.flow_mean_rate_Bps.min()
    assert per_gpu_Bps == pytest.approx(2 * 12.5e9 * TRANSPORTS["rocev2"].wire_efficiency, rel=0.01)


def test_dual_plane_preset_uses_both_planes_by_default():
    from gpuwait.topology import build_preset

    topo = build_preset("dual-plane-2x200g", 8)
    traffic = TrafficSpec.model_validate({"flows": [{"src": "s0.gpu0", "dst": "s5.gpu0", "size": "1GB"}]})
    run = simulate_flows(topo, traffic_flows(topo, traffic), topo.spec.routing, TRANSPORTS["rocev2"])
    assert run.flow_mean_rate_Bps[0] == pytest.approx(2 * 25e9 * TRANSPORTS["rocev2"].wire_efficiency, rel=0.01)
