"""``gpuwait schedule``: jobs from a scenario or a public trace through the scheduler over time,
one table row per placement policy, and an HTML report."""

from __future__ import annotations

import typer

from gpuwait.cli.common import JSON_OPTION, SERVERS_OPTION, options_named

#: the policies one option can give every job (a job's own `explicit` server list cannot be one)
POLICIES = ("random", "first-fit", "spread", "slurm-tree", "slurm-block", "kueue", "volcano")
POLICIES_HELP = ", ".join(POLICIES)


def schedule(source: str = typer.Argument(..., metavar="SCENARIO.yaml|TRACE",
                                          help="A scenario with `jobs:`, or a trace: Alibaba Lingjun worker.csv, Alibaba PAI pai_task_table, SenseTime Helios cluster_log.csv, Microsoft Philly cluster_job_log (JSON), Shanghai AI Lab Acme trace_seren.csv / trace_kalos.csv."),
             cluster: str | None = typer.Option(None, "--cluster", help="Cluster preset or file (a trace needs one; default for a scenario: its own)."),
             servers: int | None = SERVERS_OPTION,
             policy: str | None = typer.Option(None, "--policy", "-p", metavar="POLICY", help=f"Placement policy for every job: {POLICIES_HELP} (default: a scenario's jobs keep their own `placement:`, a trace's jobs use slurm-tree)."),
             compare: list[str] = typer.Option([], "--compare", metavar="POLICY", help="Another policy to run side by side (repeat)."),
             backfill: bool = typer.Option(True, "--backfill/--no-backfill", help="EASY backfill (default on)."),
             seed: int = typer.Option(0, "--seed", help="random: seed."),
             trace_kind: str | None = typer.Option(None, "--trace-kind", help="lingjun, pai, helios, philly or acme (default: guessed from the contents)."),
             max_jobs: int | None = typer.Option(None, "--max-jobs", min=1, help="Trace: at most this many jobs (the first to arrive)."),
             start: float = typer.Option(0.0, "--start", help="Trace: window start (seconds from its first arrival)."),
             window: float | None = typer.Option(None, "--window", help="Trace: window length (seconds)."),
             gpu_scale: float = typer.Option(1.0, "--gpu-scale", help="Trace: divide every job's GPUs by this."),
             time_scale: float = typer.Option(1.0, "--time-scale", help="Trace: divide all times by this."),
             arrival_scale: float = typer.Option(1.0, "--arrival-scale", help="Trace: also divide arrival times by this (raises the load)."),
             report: str | None = typer.Option(None, "--report", metavar="DIR", help="Write schedule.html and jobs.csv here."),
             json_out: bool = JSON_OPTION) -> None:
    """Schedule jobs over time with one or more placement policies: queue delay, JCT, slowdown,
    fragmentation, allocation and utilization, and the jobs that shared links.

    Examples: `gpuwait schedule tests/data/traces/helios-sample.csv --cluster rocev2-400g-2tier --servers 16
    --max-jobs 20 --arrival-scale 10 --policy slurm-tree --compare random --compare first-fit --report out/`
    """
    from gpuwait.cli.output import Output
    from gpuwait.errors import SpecError
    from gpuwait.report.files import report_directory
    from gpuwait.runner.schedule import schedule as run_schedule
    from gpuwait.spec.jobs import PlacementSpec
    from gpuwait.spec.load import validate_data
    from gpuwait.topology.presets import resolve_cluster

    if report is not None:
        report_directory(report)  # checked before the simulation, not after
    scenario, durations, title = _jobs(source, cluster, servers, trace_kind,
                                       dict(start_s=start, window_s=window, max_jobs=max_jobs, gpu_scale=gpu_scale,
                                            time_scale=time_scale, arrival_scale=arrival_scale))
    if policy is None and durations is not None:
        policy = "slurm-tree"  # a trace's jobs carry no placement of their own
    results = []
    for name in dict.fromkeys([policy, *compare]):
        if name is not None and name not in POLICIES:
            why = " ('explicit' is a job's own list of servers: give it under the job's placement:)" * (name == "explicit")
            raise SpecError(f"--policy/--compare: got {name!r}; expected one of {POLICIES_HELP}{why}",
                            hint="`gpuwait schedule --help` lists them; docs/workloads.md describes each")
        # None: each job's own `placement:` (the scenario's), reported as the policy "per job"
        spec = None if name is None else validate_data(PlacementSpec, {"policy": name} | ({"seed": seed} if name == "random" else {}),
                                                         source="--policy/--compare")
        results.append(run_schedule(scenario, spec, backfill=backfill, durations_s=durations))
    cluster_name = resolve_cluster(scenario.cluster).name  # the preset's name, as `run` prints it
    page = None
    if report is not None:
        from gpuwait.report.schedule import write_schedule_report
        page = write_schedule_report(results, report, title, cluster_name)
    out = Output(json_out)
    out.emit({"source": source, "policies": [r.summary() for r in results],
              "jobs": {r.policy: [_job_dict(j) for j in r.jobs] for r in results},
              "report": str(page) if page else None},
             lambda c: _render(c, results, title, cluster_name, page))


def _jobs(source: str, cluster: str | None, servers: int | None, kind: str | None, sampling: dict):
    """(scenario, durations or None, title) from a scenario file or a trace."""
    from pathlib import Path

    from gpuwait.errors import SpecError
    from gpuwait.runner.inputs import load_cluster, load_scenario
    from gpuwait.spec.jobs import refuse_repeated_names
    from gpuwait.spec.load import validate_data
    from gpuwait.spec.scenario import Scenario
    from gpuwait.workload.traces import READERS, read_trace, sample, trace_jobs

    if kind is not None and kind not in READERS:  # before the cluster: the kind decides the file is a trace
        raise SpecError(f"--trace-kind: got {kind!r}; expected one of {', '.join(READERS)}")
    # a trace by its kind, suffix, or Philly's file name (cluster_job_log ships without a suffix)
    if kind is not None or source.lower().endswith((".csv", ".csv.gz", ".txt", ".json")) or \
            Path(source).name.startswith("cluster_job_log"):
        if cluster is None:
            raise SpecError("--cluster: a trace needs a cluster to run on; expected a preset or a file",
                            hint="e.g. --cluster rocev2-400g-2tier --servers 256")
        with options_named(preset="--cluster"):
            spec = load_cluster(cluster, servers)
        trace = sample(read_trace(source, kind), max_gpus=spec.servers * spec.server.gpus,
                       gpus_per_server=spec.server.gpus, **sampling)
        if not trace.jobs:
            raise SpecError(f"{source}: no job left after sampling; expected a window or scale that keeps some")
        # the trace's own ids, before they become `jobs:` entries the user never wrote
        refuse_repeated_names([j.name for j in trace.jobs], source, noun="job id")
        jobs, durations = trace_jobs(trace, spec.server.gpus)
        return validate_data(Scenario, {"cluster": spec.model_dump(exclude_unset=True), "jobs": jobs}, source=source,
                             require_units=False), durations, f"{trace.source}: {len(jobs)} jobs"
    scenario = load_scenario(source, cluster_replaced=cluster is not None)
    if cluster is not None:
        with options_named(preset="--cluster"):
            scenario = scenario.model_copy(update={"cluster": load_cluster(cluster, servers)})
    elif servers is not None:
        scenario = scenario.model_copy(update={"cluster": load_cluster(source, servers)})
    return scenario, None, scenario.name or source


def _job_dict(j) -> dict:
    return {"name": j.name, "arrival_s": j.arrival_s, "start_s": j.start_s, "end_s": j.end_s,
            "queue_delay_s": j.queue_delay_s, "jct_s": j.jct_s, "slowdown": j.slowdown, "gpus": j.gpus,
            "steps": j.steps, "leaves": j.leaves, "pods": j.pods, "cross_spine_bytes": j.cross_spine_bytes,
            "contended": j.contended, "shares_with": sorted(j.shares_with)}


def _render(console, results, title: str, cluster: str, page) -> None:
    from rich.table import Table

    from gpuwait.report.schedule import COLUMNS, summary_rows

    console.print(f"[bold]{title}[/] on [bold]{cluster}[/] ({results[0].n_gpus} GPUs)")
    table = Table(title="Scheduler over time, per placement policy")
    for col in COLUMNS:
        table.add_column(col, justify="left" if col == "policy" else "right", no_wrap=col == "policy")
    for row in summary_rows(results):
        table.add_row(*row)
    console.print(table)
    if page is not None:
        console.print(f"report: {page}")
