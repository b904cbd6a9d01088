"""``gpuwait run``: simulate a scenario and its variants (workload steps, or traffic on either engine)."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.markup import escape

from gpuwait.cli.common import JSON_OPTION, MAX_MEMORY_OPTION

STEPS_OPTION = typer.Option(None, "--steps", min=1, max=1_000_000, help="Training steps to simulate (default: the file's).")
REPORT_OPTION = typer.Option(None, "--report", metavar="DIR",
                             help="Write the HTML report, Perfetto traces and Parquet tables here.")
#: flows listed in a traffic run's table unless --flows says otherwise
DEFAULT_FLOWS = 20
FLOWS_OPTION = typer.Option(None, "--flows", min=0,
                            help=f"Flows to list in the table (traffic scenarios only; default {DEFAULT_FLOWS}).")
ENGINE_OPTION = typer.Option("flow", "--engine", metavar="flow|packet",
                             help="Traffic scenarios: 'flow' (fluid, max-min) or 'packet' (queues, PFC, ECN, DCQCN, credits).")


def run(scenario_file: str = typer.Argument(..., metavar="SCENARIO.yaml", help="Scenario file."),
        steps: int | None = STEPS_OPTION, report: str | None = REPORT_OPTION, flows_limit: int | None = FLOWS_OPTION,
        engine: str = ENGINE_OPTION, max_memory: str | None = MAX_MEMORY_OPTION, json_out: bool = JSON_OPTION) -> None:
    """Simulate a scenario and its variants.

    A scenario with a `workload:` runs training or inference steps: the breakdown of the step
    (compute, exposed communication, waiting on data, on stragglers, pipeline bubble), MFU, the
    same step on an ideal network, the collectives and the hottest links. A scenario with
    `traffic:` runs its flows: completion times and link loads; `--report` then writes the flow
    completion time CDF, and on the packet engine the queue depth and PFC pauses of the hottest
    ports and ECN/CNP rates, with a Perfetto trace per case (queues as counter tracks). A scenario
    with `jobs:` runs every job alone and then all together on one clock: per job the step alone and
    shared; `--report` writes which job is slowed most and by whom, the links shared and a timeline
    of every job's phases, with a Perfetto trace holding a process per job.

    Examples: `gpuwait run examples/dp-only.yaml --report out/`, `gpuwait run examples/ecmp-collision.yaml`,
    `gpuwait run examples/ecmp-collision.yaml --engine packet --report out/`
    """
    from gpuwait.cli.output import Output
    from gpuwait.engine.base import ENGINES
    from gpuwait.errors import SpecError
    from gpuwait.runner.cost import check_scenario_cost, parse_max_memory
    from gpuwait.runner.inputs import load_scenario
    from gpuwait.runner.workload import refuse_steps_without_workload

    if engine not in ENGINES:
        raise SpecError(f"--engine: got {engine!r}; expected one of {', '.join(ENGINES)}")
    scenario = load_scenario(scenario_file)
    max_memory_bytes = parse_max_memory(max_memory)
    estimate = check_scenario_cost(scenario, max_memory_bytes, steps, engine)  # before any allocation
    if report is not None:
        from gpuwait.report.files import report_directory

        report_directory(report)  # refused before a long run, not after it
    refuse_steps_without_workload(scenario, steps)
    _refuse_flows_without_traffic(scenario, flows_limit)
    if not json_out:  # once every input check has passed: the next thing is the run itself
        from gpuwait.cli.progress import state_estimate

        state_estimate(estimate, max_memory_bytes)
    out = Output(json_out)
    if scenario.jobs:
        _run_jobs(out, scenario, steps, engine, report, max_memory_bytes)
        return
    if scenario.workload is not None:
        if engine == "packet":
            raise SpecError("--engine packet: runs `traffic:` scenarios only; this one has a `workload:`",
                            hint="training and inference steps run on the flow engine")
        _run_workload(out, scenario, steps, report, max_memory_bytes)
        return
    from gpuwait.cli.progress import simulate_traffic
    from gpuwait.report.results import TrafficResult

    runs = simulate_traffic(scenario, engine, not json_out)
    paths = []
    if report is not None:
        from gpuwait.report.traffic import write_traffic_reports

        paths = write_traffic_reports(runs, report, scenario.name)
    result = TrafficResult(scenario.name, engine, runs, paths)
    shown = DEFAULT_FLOWS if flows_limit is None else flows_limit
    out.emit(result.to_dict(), lambda c: _render_traffic(c, result, shown))


def _refuse_flows_without_traffic(scenario, flows_limit: int | None) -> None:
    """--flows sizes a traffic run's flow table; a workload or jobs run prints no flow table, so it is refused."""
    from gpuwait.errors import SpecError

    if flows_limit is None or not (scenario.jobs or scenario.workload is not None):
        return
    section = "`jobs:`" if scenario.jobs else "a `workload:`"
    raise SpecError(f"--flows: lists a traffic scenario's flows; this one has {section}, whose output has no flow table",
                    hint="its collectives and hottest links print without it; --flows applies to `traffic:` scenarios")


def _render_traffic(console: Console, result, flows_limit: int) -> None:
    """The conclusion first, then the engine's tables, then where the report went."""
    from rich.markup import escape

    from gpuwait.report.traffic import traffic_conclusion

    for sentence in traffic_conclusion(result.runs).sentences:
        console.print(f"[bold]{escape(sentence)}[/]")
    (_render_packet_runs if result.engine == "packet" else _render_flow_runs)(console, result, flows_limit)
    if result.report:
        console.print(f"report: {result.report[0]}  (Perfetto traces and flows.parquet beside it)")


def _run_jobs(out, scenario, steps: int | None, engine: str, report: str | None,
              max_memory_bytes: float | None) -> None:
    from gpuwait.cli.place import jobs_dict, render_jobs
    from gpuwait.errors import SpecError
    from gpuwait.runner.jobs import run_jobs

    if engine != "flow":
        raise SpecError(f"--engine: got {engine!r}; a scenario with `jobs:` runs on the flow engine")
    result = run_jobs(scenario, steps, max_memory_bytes)
    data = jobs_dict(result)
    if report is not None:
        from gpuwait.report.jobs import write_jobs_reports

        paths = write_jobs_reports(result, report, scenario.name)
        data["report"] = [str(p) for p in paths]
    out.emit(data, lambda c: render_jobs(c, result, data.get("report")))


def _run_workload(out, scenario, steps: int | None, report: str | None, max_memory_bytes: float | None) -> None:
    from gpuwait.cli.progress import simulate
    from gpuwait.cli.views import render_workload
    from gpuwait.report.files import write_reports
    from gpuwait.report.results import WorkloadResult

    results = simulate(scenario, steps, not out.json_mode, max_memory_bytes)
    paths = write_reports(results, report, scenario.name) if report is not None else []
    result = WorkloadResult(scenario.name, results, paths)
    out.emit(result.to_dict(), lambda c: render_workload(c, result))


def _render_flow_runs(console: Console, result, flows_limit: int) -> None:
    from gpuwait.report.flows import (
        comparison_table,
        flow_rows,
        flows_table,
        hot_links,
        hot_links_table,
        routing_label,
        run_summary,
        sending_leaf,
        uplink_loads,
        uplink_table,
    )
    from gpuwait.units import format_size

    runs = result.runs
    base = runs[0]
    console.print(f"[bold]{escape(result.scenario)}[/] on [bold]{escape(base.topo.name)}[/]: {base.topo.n_servers} servers, "
                  f"{base.topo.n_gpus} GPUs, {len(base.flows)} flows, {format_size(float(base.flows.size_bytes.sum()))} "
                  f"over {base.transport.name}")
    if len(runs) > 1:
        console.print(comparison_table([run_summary(r) for r in runs]))
    leaf = sending_leaf(base)
    if leaf is not None:
        for run in runs:
            console.print(uplink_table(run.labels.get("name", routing_label(run)), uplink_loads(run, leaf)))
    console.print(flows_table(flow_rows(base), flows_limit))
    console.print(hot_links_table(hot_links(base, 10)))


def _render_packet_runs(console: Console, result, flows_limit: int) -> None:
    from gpuwait.report.flows import (
        comparison_table,
        flow_rows,
        flows_table,
        hot_links,
        hot_links_table,
        routing_label,
        run_summary,
    )
    from gpuwait.report.traffic import unfinished_flows
    from gpuwait.units import format_time

    runs = result.runs
    if len(runs) > 1:
        console.print(comparison_table([run_summary(r) for r in runs]))
    for r in runs:
        t, fct, left = r.totals(), r.fct_percentiles_s(), unfinished_flows(r)
        finished = len(r.flows) - left
        fct_text = ("no flow finished" if not finished else
                    f"FCT p50 {format_time(fct['p50'])}, p99 {format_time(fct['p99'])}, p99.9 {format_time(fct['p99.9'])}"
                    + (f" (of the {finished} finished flows of {len(r.flows)})" if left else ""))
        console.print(f"[bold]{escape(r.labels.get('name', routing_label(r)))}[/]: {fct_text}; "
                      f"pause frames {t[f'rx_prio{r.params.data_priority}_pause']:,.0f} "
                      f"(paused {format_time(t['paused_s'])}), ECN marks {t['ecn_marked_packets']:,.0f}, "
                      f"CNPs {t['np_cnp_sent']:,.0f}, drops {t['PortXmitDiscards']:,.0f}, "
                      f"retransmitted {t['retransmitted_packets']:,.0f}, out_of_sequence {t['out_of_sequence']:,.0f}")
    console.print(flows_table(flow_rows(runs[0]), flows_limit))
    console.print(hot_links_table(hot_links(runs[0], 10)))
