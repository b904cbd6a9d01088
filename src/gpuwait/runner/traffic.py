"""Run a scenario's traffic on its cluster with any registered engine, for the base and every variant."""

from __future__ import annotations

from gpuwait.collectives.ncclenv import cluster_env
from gpuwait.engine.base import EngineRun, get_engine
from gpuwait.errors import SpecError
from gpuwait.routing.paths import route_flows
from gpuwait.spec.cluster import ClusterSpec, RoutingSpec, TransportSpec
from gpuwait.spec.scenario import Scenario
from gpuwait.topology.presets import build_cluster, resolve_cluster
from gpuwait.transport.profiles import TransportProfile, resolve_transport
from gpuwait.workload.traffic import traffic_flows


def scenario_cases(scenario: Scenario, cluster: ClusterSpec) -> list[tuple[str | None, RoutingSpec, TransportProfile]]:
    """(variant name or None for the base, routing, transport) of the base and every variant."""
    cases: list[tuple[str | None, RoutingSpec, TransportSpec]] = [(None, cluster.routing, cluster.transport)]
    cases += [(v.name, v.routing or cluster.routing, v.transport or cluster.transport) for v in scenario.variants]
    return [(name, routing, resolve_transport(transport)) for name, routing, transport in cases]


def refuse_unused_sections(scenario: Scenario) -> None:
    """Refuse a section the scenario's run would ignore: a run with `jobs:` times its jobs on the base
    case without faults or other flows, and a `workload:` run has no background flows, so a
    `variants:`, `faults:` or `traffic:` there would change nothing while the output looked as if it had."""
    has_traffic = bool(scenario.traffic.flows or scenario.traffic.patterns)
    if scenario.jobs:
        for section, given in (("variants", scenario.variants), ("faults", scenario.faults), ("traffic", has_traffic)):
            if given:
                raise SpecError(f"{section}: a scenario with `jobs:` runs its jobs on the base cluster without "
                                f"{section}, so they would change nothing; expected none",
                                hint="give each variant or fault its own scenario with one job's `workload:`")
    elif scenario.workload is not None and has_traffic:
        raise SpecError("traffic: a scenario with a `workload:` runs its steps without these flows, so they would "
                        "change nothing; expected none", hint="run the flows as their own scenario (no `workload:`)")


def check_scenario(scenario: Scenario) -> dict:
    """Everything `run` would refuse, without simulating: build the cluster, the flows (names,
    dependencies) and route them for the base and every variant. Returns what was checked, with its
    ``notes`` (an ``nccl.version`` newer than gpuwait checked): `run` prints the same note per case of a
    workload, and once for a `jobs:` run."""
    refuse_unused_sections(scenario)
    cluster = resolve_cluster(scenario.cluster)
    checked = _checked(scenario, cluster)
    # steps and jobs predict NCCL's choices under nccl.version; traffic runs its flows without NCCL
    notes = cluster_env(cluster).notes if scenario.jobs or scenario.workload is not None else ()
    return checked | {"notes": list(notes)}


def _checked(scenario: Scenario, cluster: ClusterSpec) -> dict:
    """:func:`check_scenario`'s checks on the resolved ``cluster``, and what they covered."""
    topo = build_cluster(cluster)
    cases = scenario_cases(scenario, cluster)
    if scenario.jobs:  # names, placements and each job's layout, as `run` checks them
        from gpuwait.runner.jobs import check_jobs

        return check_jobs(scenario, topo) | {"routed_cases": len(cases)}
    if scenario.workload is not None:
        # layout, memory and presets: everything `run` refuses before simulating
        from gpuwait.workload.steps import serving_step, training_step

        step = (training_step if scenario.workload.mode == "training" else serving_step)(scenario.workload, topo)
        return {"servers": topo.n_servers, "gpus": topo.n_gpus, "workload": step.description,
                "routed_cases": len(cases)}
    if not (scenario.traffic.flows or scenario.traffic.patterns):
        return {"servers": topo.n_servers, "gpus": topo.n_gpus, "flows": 0, "routed_cases": 0}
    flows = traffic_flows(topo, scenario.traffic)
    for _, routing, transport in cases:
        route_flows(topo, routing, flows.src, flows.dst, transport=transport.name)
    return {"servers": topo.n_servers, "gpus": topo.n_gpus, "flows": len(flows), "routed_cases": len(cases)}


def run_traffic(scenario: Scenario, engine: str = "flow", progress=None) -> list[EngineRun]:
    """Simulate the traffic with the cluster's routing and transport, then with each variant's.

    ``progress(case_index, n_cases, name)`` is called before each case runs (for a progress display);
    if it also has a ``run`` method, an engine that reports progress within a run (the packet
    engine) calls ``progress.run(p)`` with a :class:`~gpuwait.engine.packet.run.PacketProgress`
    a few times a second.

    The topology and the flow table are built once and shared; runs never depend on each other.
    ``engine`` names an entry of :data:`gpuwait.engine.ENGINES`.
    """
    simulator = get_engine(engine)
    if scenario.workload is not None:
        raise SpecError(f"engine={engine!r}: runs a scenario's `traffic:` only; this scenario has a `workload:`",
                        hint="use the flow engine for training and inference steps")
    options = simulator.options_for(scenario)
    within_run = getattr(progress, "run", None)
    if within_run is not None and simulator.reports_progress:
        options["progress"] = within_run
    cluster = resolve_cluster(scenario.cluster)
    topo = build_cluster(cluster)
    flows = traffic_flows(topo, scenario.traffic)
    runs = []
    cases = scenario_cases(scenario, cluster)
    for index, (name, routing, transport) in enumerate(cases):
        if progress is not None:
            progress(index, len(cases), name or f"{transport.name}, {routing.kind}")
        run = simulator.simulate(topo, flows, routing, transport, **options)
        if name is not None:
            run.labels["name"] = name
        runs.append(run)
    return runs
