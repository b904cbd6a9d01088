"""``gpuwait place``: where a placement policy puts a job, its step time there and what it shares;
and the per-job rows of ``gpuwait run`` on a scenario with ``jobs:``."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from gpuwait.cli.common import JSON_OPTION, MAX_MEMORY_OPTION, options_named

CLUSTER_OPTION = typer.Option(None, "--cluster", help="Cluster preset or file (default: the file's cluster).")
POLICY_OPTION = typer.Option(None, "--policy", "-p", metavar="POLICY",
                             help="random, first-fit, spread, slurm-tree, slurm-block, kueue, volcano (default: the job's).")


def place(job_file: str = typer.Argument(..., metavar="JOB.yaml", help="A scenario with `jobs:` (the last job, or --job, is placed; the others first, as co-tenants), or one job's mapping."),
          cluster: str | None = CLUSTER_OPTION, policy: str | None = POLICY_OPTION,
          job: str | None = typer.Option(None, "--job", help="Name of the job to place (default: the last)."),
          switches: int | None = typer.Option(None, "--switches", min=1, help="slurm-tree: at most N leaf switches (Slurm --switches=N)."),
          segment: int | None = typer.Option(None, "--segment", min=1, help="slurm-block: segments of N servers (Slurm --segment=N)."),
          mode: str | None = typer.Option(None, "--mode", help="kueue/volcano: required, preferred or unconstrained."),
          level: str | None = typer.Option(None, "--level", help="kueue/volcano: leaf or pod (or cluster)."),
          algorithm: str | None = typer.Option(None, "--algorithm", help="kueue: BestFit, LeastFreeCapacity or Balanced."),
          seed: int | None = typer.Option(None, "--seed", help="random: seed."),
          steps: int | None = typer.Option(None, "--steps", min=1, help="Steps every job completes in the shared run (default: the file's, the most any job asks, as `run`)."),
          export: str | None = typer.Option(None, "--export", metavar="FORMAT",
                                            help="Print the fabric and this placement for a scheduler instead of the table: slurm (topology.conf + sbatch options), kueue (Topology, ResourceFlavor, node labels, Job) or volcano (HyperNodes, Job) YAML."),
          max_memory: str | None = MAX_MEMORY_OPTION, json_out: bool = JSON_OPTION) -> None:
    """Place a job with a policy; print its servers (a Slurm hostlist), the leaves and pods it spans,
    its predicted step time alone and beside the other jobs, and the links it shares with whom.

    Examples: `gpuwait place examples/two-jobs-shared-uplinks.yaml --policy slurm-tree`,
    `gpuwait place examples/two-jobs-shared-uplinks.yaml --policy kueue --mode required --level pod`,
    `gpuwait place examples/two-jobs-shared-uplinks.yaml --policy volcano --export volcano > hypernodes.yaml`
    """
    from gpuwait.cli.output import Output
    from gpuwait.runner.cost import check_scenario_cost, parse_max_memory
    from gpuwait.runner.jobs import run_jobs

    scenario, notes = _scenario(job_file, cluster, job, policy, dict(switches=switches, segment=segment, mode=mode,
                                                                     level=level, algorithm=algorithm, seed=seed))
    max_memory_bytes = parse_max_memory(max_memory)
    if not json_out:  # before the run: a note that changes what the user expects is worth reading first
        for note in notes:
            typer.echo(f"note: {note}", err=True)
    if export is not None:  # places the jobs and simulates nothing: no estimate to hold to the limit
        _export(scenario, export)
        return
    estimate = check_scenario_cost(scenario, max_memory_bytes, steps)  # before any allocation, as `run`
    if not json_out:
        from gpuwait.cli.progress import state_estimate

        state_estimate(estimate, max_memory_bytes)
    result = run_jobs(scenario, steps, max_memory_bytes)
    target = result.jobs[-1]
    out = Output(json_out)
    data = jobs_dict(result)
    # the --policy notes (printed before the run) first, then the run's own (NCCL version, calibration)
    data["notes"] = [*notes, *data["notes"]]
    out.emit({"policy": scenario.jobs[-1].placement.model_dump(exclude_none=True), **data},
             lambda c: _render_place(c, result, target))


def _export(scenario, fmt: str) -> None:
    """Place the jobs (no simulation) and print the fabric and the last job's placement in ``fmt``."""
    import sys

    from gpuwait.placement import fabric_tree
    from gpuwait.placement.export import check_export_format, export_placement
    from gpuwait.runner.jobs import place_jobs
    from gpuwait.topology.presets import build_cluster, resolve_cluster

    check_export_format(fmt)  # before building the fabric: a typo costs nothing
    tree = fabric_tree(build_cluster(resolve_cluster(scenario.cluster)))
    job = place_jobs(list(scenario.jobs), tree)[-1]
    p = job.spec.placement
    mode = None
    if p.policy in ("kueue", "volcano"):
        mode = p.mode if fmt == "kueue" else ("hard" if p.mode == "required" else "soft")
    sys.stdout.write(export_placement(fmt, tree, job.servers, job.spec.name, mode))


def _scenario(job_file: str, cluster: str | None, name: str | None, policy: str | None, options: dict):
    """The file's jobs with the one to place last, its placement set from the options; and the notes on the
    file's placement options another --policy does not read."""
    from gpuwait.errors import SpecError
    from gpuwait.runner.inputs import check_cluster_names, load_cluster
    from gpuwait.spec.jobs import POLICY_OPTIONS, JobSpec, options_for_policy
    from gpuwait.spec.load import read_yaml, validate_data
    from gpuwait.spec.scenario import Scenario

    data = read_yaml(job_file)
    if not isinstance(data, dict):
        raise SpecError(f"{job_file}: expected a mapping (a scenario with `jobs:` or one job)")
    if "jobs" not in data:
        data = {"cluster": data.pop("cluster", {}), "jobs": [validate_data(JobSpec, data, source=job_file).model_dump()]}
    scenario = validate_data(Scenario, data, source=job_file)
    if cluster is None:  # --cluster replaces the file's cluster: its names are never used
        check_cluster_names(scenario.cluster, f"{job_file}: cluster.")
    jobs = list(scenario.jobs)
    names = [j.name for j in jobs]
    if name is not None:
        if name not in names:
            raise SpecError(f"--job: got {name!r}; expected one of {', '.join(names)}")
        jobs.append(jobs.pop(names.index(name)))
    update = {k: v for k, v in options.items() if v is not None}
    if policy is not None:
        update["policy"] = policy
    notes = []
    if update:
        # the error names the options given, not every option place has (each key is its flag's name)
        given = jobs[-1].placement.model_dump(exclude_unset=True)
        new_policy = update.get("policy", given.get("policy"))
        if new_policy is not None and new_policy != given.get("policy"):
            # another policy keeps the file's options it also reads (kueue's mode and level for volcano)
            given.pop("policy", None)
            given, dropped = options_for_policy(given, new_policy)
            # an explicit server list is the policy replaced, not an option of it: no note
            notes = [f"--policy {new_policy}: job {jobs[-1].name}'s placement.{key} ({value}) is read by "
                     f"{' and '.join(POLICY_OPTIONS[key])} only; not used" for key, value in dropped.items()
                     if key != "servers"]
        placement = validate_data(type(jobs[-1].placement), {**given, **update},
                                  source="/".join(f"--{key}" for key in update))
        # the placed job goes after its co-tenants: lowest priority, so they keep their servers
        low = min(j.priority for j in jobs) - 1
        jobs[-1] = jobs[-1].model_copy(update={"placement": placement, "priority": low})
    update_scenario: dict[str, object] = {"jobs": jobs}
    if cluster is not None:
        with options_named(preset="--cluster"):
            update_scenario["cluster"] = load_cluster(cluster)
    return scenario.model_copy(update=update_scenario), notes


def jobs_dict(result) -> dict:
    """The shared run as plain data (for --json)."""
    from gpuwait.report.jobs import jobs_conclusion

    names = result.link_names
    return {"scenario": result.scenario.name, "cluster": result.cluster, "steps": result.steps,
            "conclusion": list(jobs_conclusion(result).sentences), "notes": list(result.notes), "jobs": [{
        "name": j.name, "servers": j.servers.tolist(), "hostlist": j.hostlist, "leaves": j.leaves, "pods": j.pods,
        "workload": j.alone.workload, "step_alone_s": j.alone_step_s, "step_shared_s": j.shared_step_s,
        "slowdown": j.slowdown, "exposed_comm_alone_s": j.exposed_comm_alone_s,
        "exposed_comm_shared_s": j.exposed_comm_shared_s, "slowed_by_others_s": j.slowed_s,
        "shares": {other: [names[link] for link in links] for other, links in j.shares.items()},
    } for j in result.jobs]}


def jobs_table(result) -> Table:
    from gpuwait.units import format_time

    table = Table(title=f"{len(result.jobs)} jobs sharing the fabric ({result.steps} steps each, run together)")
    for col in ("job", "servers", "leaves", "pods", "step alone", "step shared", "slowdown", "exposed comm alone -> shared",
                "shares links with"):
        table.add_column(col, justify="left" if col in ("job", "servers", "shares links with") else "right")
    for j in result.jobs:
        shares = ", ".join(f"{other} ({len(links)} links)" for other, links in j.shares.items()) or "-"
        table.add_row(j.name, j.hostlist, str(j.leaves), str(j.pods), format_time(j.alone_step_s),
                      format_time(j.shared_step_s), f"{100 * j.slowdown:+.1f} %",
                      f"{format_time(j.exposed_comm_alone_s)} -> {format_time(j.exposed_comm_shared_s)}", shares)
    return table


def render_jobs(console: Console, result, report: list[str] | None = None) -> None:
    from rich.markup import escape

    from gpuwait.report.jobs import jobs_conclusion

    console.print(f"[bold]{escape(jobs_conclusion(result).text)}[/]", highlight=False)
    # the cluster as a workload run labels it: its size, and its calibration when one is used
    console.print(f"[bold]{escape(result.scenario.name)}[/] on [bold]{escape(result.cluster)}[/]; "
                  f"{len(set(result.tree.leaf_of_server.tolist()))} leaf domains, "
                  f"{len(set(result.tree.pod_of_server.tolist()))} pods")
    for j in result.jobs:
        console.print(f"  {j.name}: {j.alone.workload}")
    console.print(jobs_table(result))
    print_run_notes(console, result)
    if report:
        console.print(f"report: {report[0]}  (Perfetto trace beside it: {report[1]})", markup=False)


def print_run_notes(console: Console, result) -> None:
    """The shared run's notes (its NCCL version, a calibration fitted under other NCCL variables), one line each."""
    from rich.markup import escape

    for note in result.notes:
        console.print(f"note: {escape(note)}")


def _render_place(console: Console, result, job) -> None:
    from gpuwait.units import format_time

    p = result.scenario.jobs[-1].placement
    console.print(f"[bold]{job.name}[/] placed by [bold]{p.policy}[/]: {job.hostlist} "
                  f"({len(job.servers)} servers, {job.leaves} leaf domains, {job.pods} pods)")
    console.print(f"  step {format_time(job.alone_step_s)} alone, {format_time(job.shared_step_s)} beside "
                  f"{len(result.jobs) - 1} other jobs ({100 * job.slowdown:+.1f} %)")
    for other, links in job.shares.items():
        shown = ", ".join(result.link_names[k] for k in links[:4]) + (" ..." if len(links) > 4 else "")
        console.print(f"  shares {len(links)} network links with {other}: {shown}")
    console.print(jobs_table(result))
    print_run_notes(console, result)
