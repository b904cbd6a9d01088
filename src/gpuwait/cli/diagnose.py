"""``gpuwait diagnose``: the root cause of lost step time, its evidence, and the measured gain of its fix."""

from __future__ import annotations

import typer
from rich.console import Console

from gpuwait.cli.common import JSON_OPTION, MAX_MEMORY_OPTION, SERVERS_OPTION, options_named
from gpuwait.cli.faults_help import INJECT_OPTION

SCENARIO_ARGUMENT = typer.Argument(None, metavar="[SCENARIO.yaml]", help="A scenario with a training workload.")
TELEMETRY_OPTION = typer.Option(
    None, "--telemetry", metavar="DIR",
    help="Diagnose imported telemetry (Prometheus text / OpenMetrics / query_range JSON, Parquet, NCCL_DEBUG logs, "
         "nccl-tests logs, ethtool -S, perfquery, PyTorch profiler traces); see docs/telemetry.md.")
CLUSTER_OPTION = typer.Option(None, "--cluster", metavar="PRESET|FILE",
                              help="With --telemetry: the cluster the telemetry comes from.")
STEPS_OPTION = typer.Option(None, "--steps", min=1, max=1_000_000, help="Training steps to simulate.")
NO_GAIN_OPTION = typer.Option(False, "--no-gain", help="Skip re-simulating the fixes.")
REPORT_OPTION = typer.Option(None, "--report", metavar="DIR",
                             help="Write the HTML report with the findings here (a traffic scenario's: FCT, queues, pauses).")


def diagnose(scenario_file: str | None = SCENARIO_ARGUMENT, inject: list[str] | None = INJECT_OPTION,
             telemetry: str | None = TELEMETRY_OPTION, cluster: str | None = CLUSTER_OPTION,
             servers: int | None = SERVERS_OPTION, steps: int | None = STEPS_OPTION, no_gain: bool = NO_GAIN_OPTION,
             report: str | None = REPORT_OPTION, max_memory: str | None = MAX_MEMORY_OPTION,
             json_out: bool = JSON_OPTION) -> None:
    """Name the root cause of lost step time, where it is, the evidence, and a fix whose gain is
    measured by simulating the scenario again with the fix applied.

    A scenario with only `traffic:` runs on the packet engine and is diagnosed from its pauses,
    ECN marks and queues (head-of-line blocking, PFC storms, ECN thresholds above PFC's).

    Faults are measured against a healthy model of the same design, so a design's own costs are never a
    finding: with no fault found, the step's design costs `run` measures (exposed communication against an
    ideal network, pipeline bubble, data wait) are listed as such; `gpuwait sweep` weighs other designs.

    Examples: `gpuwait diagnose examples/dp-only.yaml --inject 'link-degrade:leaf0->spine21:factor=0.25'` (quoted: a shell reads `>` as a redirect),
    `gpuwait diagnose --telemetry scrapes/ --cluster rocev2-400g-2tier --servers 16`
    """
    from gpuwait.cli.output import Output
    from gpuwait.errors import SpecError
    from gpuwait.report.diagnosis import diagnose_run, diagnose_telemetry, diagnosis_engine
    from gpuwait.runner.inputs import load_scenario

    if telemetry is not None:
        if scenario_file is not None or inject:
            raise SpecError("--telemetry: expected either a scenario (with --inject) or --telemetry DIR --cluster, not both")
        if cluster is None:
            raise SpecError("--telemetry: expected --cluster PRESET|FILE naming the cluster the telemetry comes from")
        with options_named(preset="--cluster"):
            result = diagnose_telemetry(telemetry, cluster, servers)
    elif scenario_file is None:
        raise SpecError("diagnose: expected SCENARIO.yaml, or --telemetry DIR --cluster PRESET|FILE")
    elif cluster is not None or servers is not None:  # a scenario brings its cluster: they would be ignored
        option = "--cluster" if cluster is not None else "--servers"
        raise SpecError(f"{option}: only with --telemetry; expected the scenario's own cluster (edit its `cluster:`)")
    else:
        from gpuwait.cli.progress import traffic_progress
        from gpuwait.runner.cost import check_scenario_cost, parse_max_memory
        from gpuwait.runner.workload import refuse_steps_without_workload

        scenario = load_scenario(scenario_file)
        max_memory_bytes = parse_max_memory(max_memory)
        if scenario.jobs:  # several jobs on one fabric: placement and noisy-neighbor causes per job
            from gpuwait.cli.place import jobs_dict
            from gpuwait.diagnosis.placement import DEFAULT_STEPS, diagnose_jobs

            if inject:  # the shared run models co-tenants, not faults: the fault would change nothing
                raise SpecError("--inject: a scenario with `jobs:` is diagnosed for placement and co-tenants, without "
                                "faults; expected no --inject", hint="inject faults into one job's scenario (its `workload:`)")
            check_scenario_cost(scenario, max_memory_bytes, steps or DEFAULT_STEPS)
            jobs = diagnose_jobs(scenario, steps, max_memory_bytes)
            Output(json_out).emit({**jobs_dict(jobs["run"]), "findings": jobs["findings"]},
                                  lambda c: _render_jobs_diagnosis(c, jobs["run"], jobs["findings"]))
            return
        refuse_steps_without_workload(scenario, steps)  # a traffic scenario's packet run has no steps
        check_scenario_cost(scenario, max_memory_bytes, steps, diagnosis_engine(scenario))
        with traffic_progress("packet", not json_out) as progress:  # shown only for a traffic scenario
            result = diagnose_run(scenario, inject or [], steps=steps, measure_gain=not no_gain,
                                  report=report, progress=progress, max_memory_bytes=max_memory_bytes)
    Output(json_out).emit(result.to_dict(), lambda c: render_diagnosis(c, result.diagnosis))


def _render_jobs_diagnosis(console: Console, run, findings: list[dict]) -> None:
    """The shared run's jobs, then the findings in rank order."""
    from gpuwait.cli.place import render_jobs

    render_jobs(console, run)
    for f in findings:
        console.print(f"{f['rank']}. [bold]{f['kind']}[/] {f['component']}: {f['explanation']}; fix: {f['fix']}")


def render_diagnosis(console: Console, diagnosis, limit: int = 8) -> None:
    """The head line, the findings table, the top three explained with their fix, what was not available."""
    from rich.markup import escape
    from rich.table import Table

    from gpuwait.report.conclusion import diagnosis_conclusion
    from gpuwait.report.words import evidence_text

    for sentence in diagnosis_conclusion(diagnosis).sentences:
        console.print(f"[bold]{escape(sentence)}[/]")
    step, base = diagnosis.step_time_s, diagnosis.baseline_step_time_s
    head = (f"[bold]{escape(diagnosis.case)}[/]: {diagnosis.measure} {step * 1e3:.3f} ms" if step
            else f"[bold]{escape(diagnosis.case)}[/]")
    if base:
        head += f", healthy model {base * 1e3:.1f} ms ({100 * (step - base) / step:+.1f} % of the step lost)"
    console.print(head)
    if not diagnosis.findings:
        console.print("no findings")
    # a packet diagnosis orders by kind, the root cause first (diagnosis.packet), not by gain; one from
    # telemetry alone (no run), or run with --no-gain, re-simulates no fix, so its findings rank by their
    # rules' estimates
    if diagnosis.measure != "step":
        order = "root cause first, those whose fix gives back under a warning's share last"
    elif diagnosis.run is None or all(f.gain_fraction is None for f in diagnosis.findings):
        order = "by the cost their rules estimate (direct evidence first when close), info last"
    else:
        order = "by the gain of their fix (direct evidence first when close), info last"
    table = Table(title=f"Findings, {order}", title_justify="left")
    for column in ("#", "severity", "kind", "component", "gain if fixed", "evidence"):
        table.add_column(column, overflow="fold")
    for i, f in enumerate(diagnosis.findings[:limit], 1):
        gain = f.gain_fraction
        color = {"critical": "red", "warning": "yellow"}.get(f.severity, "dim")
        evidence = evidence_text(f.evidence)
        table.add_row(str(i), f"[{color}]{f.severity}[/]", f.kind, escape(f.component),
                      "-" if gain is None else f"{100 * gain:.1f} %", escape(evidence))
    if diagnosis.findings:
        console.print(table)
    for i, f in enumerate(diagnosis.findings[:3], 1):
        # two prints: the console shows a line break inside one string escaped, as it shows names' control characters
        console.print(f"[bold]{i}. {f.kind} on {escape(f.component)}[/]: {escape(f.explanation)}")
        console.print(f"   fix: {escape(f.fix)}")
    if diagnosis.missing:
        console.print("[dim]not available: " + "; ".join(diagnosis.missing) + "[/]")
    for note in diagnosis.notes:
        console.print(f"note: {escape(note)}")
