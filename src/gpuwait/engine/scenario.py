"""Run a scenario's traffic on its cluster, for the base and every variant."""

from __future__ import annotations

from gpuwait.engine.network import NetworkRun, simulate_flows
from gpuwait.routing.paths import route_flows
from gpuwait.spec.scenario import Scenario
from gpuwait.topology.presets import build_cluster, resolve_cluster
from gpuwait.transport.profiles import resolve_transport
from gpuwait.workload.traffic import traffic_flows


def check_scenario(scenario: Scenario) -> dict:
    """Everything `run` would refuse, without simulating: build the cluster, the flows (names,
    dependencies) and route them for the base and every variant. Returns what was checked."""
    cluster = resolve_cluster(scenario.cluster)
    topo = build_cluster(cluster)
    has_traffic = bool(scenario.traffic.flows or scenario.traffic.patterns)
    flows = traffic_flows(topo, scenario.traffic) if has_traffic else None
    cases = [(cluster.routing, cluster.transport)] + [(v.routing or cluster.routing, v.transport or cluster.transport)
                                                       for v in scenario.variants]
    for routing, transport in cases:
        profile = resolve_transport(transport)
        if flows is not None:
            route_flows(topo, routing, flows.src, flows.dst, transport=profile.name)
    return {"servers": topo.n_servers, "gpus": topo.n_gpus, "flows": 0 if flows is None else len(flows),
            "routed_cases": len(cases) if flows is not None else 0}


def run_scenario_traffic(scenario: Scenario) -> list[NetworkRun]:
    """Simulate the traffic with the cluster's routing and transport, then with each variant's.

    The topology and the flow table are built once and shared; runs never depend on each other.
    """
    cluster = resolve_cluster(scenario.cluster)
    topo = build_cluster(cluster)
    flows = traffic_flows(topo, scenario.traffic)
    runs = []
    cases = [("base", cluster.routing, cluster.transport)]
    cases += [(v.name, v.routing or cluster.routing, v.transport or cluster.transport) for v in scenario.variants]
    for name, routing, transport in cases:
        run = simulate_flows(topo, flows, routing, resolve_transport(transport))
        run.labels["name"] = name if name != "base" else None
        runs.append(run)
    for run in runs:
        if run.labels.get("name") is None:
            run.labels.pop("name")
    return runs
