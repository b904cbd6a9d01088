"""Run a scenario's traffic with the packet engine, for the base and every variant."""

from __future__ import annotations

from gpuwait.engine.packet.params import PacketParams
from gpuwait.engine.packet.run import PacketRun, simulate_packets
from gpuwait.engine.scenario import scenario_cases
from gpuwait.errors import SpecError
from gpuwait.spec.scenario import Scenario
from gpuwait.topology.presets import build_cluster, resolve_cluster
from gpuwait.workload.traffic import traffic_flows


def scenario_packet_params(scenario: Scenario) -> PacketParams:
    """The scenario's ``packet:`` section as validated parameters (one error naming the field)."""
    from gpuwait.spec.load import validate_data

    return validate_data(PacketParams, scenario.packet, source="packet", require_units=False)


def run_scenario_packets(scenario: Scenario, params: PacketParams | None = None, seed: int = 0) -> list[PacketRun]:
    """Like :func:`gpuwait.engine.scenario.run_scenario_traffic`, packet by packet.

    The topology and the flow table are built once; each case gets its own run.
    """
    if scenario.workload is not None:
        raise SpecError("--engine packet: runs a scenario's `traffic:` only; this scenario has a `workload:`",
                        hint="use the flow engine for training and inference steps")
    if params is None and scenario.packet:
        params = scenario_packet_params(scenario)
    cluster = resolve_cluster(scenario.cluster)
    topo = build_cluster(cluster)
    flows = traffic_flows(topo, scenario.traffic)
    runs = []
    for name, routing, transport in scenario_cases(scenario, cluster):
        run = simulate_packets(topo, flows, routing, transport, params, seed)
        if name is not None:
            run.labels["name"] = name
        runs.append(run)
    return runs
