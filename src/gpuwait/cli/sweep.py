"""``gpuwait sweep``: run a sweep file's cases, then query, report and compact their results.

``gpuwait sweep SWEEP.yaml --out DIR`` is short for ``gpuwait sweep run SWEEP.yaml --out DIR``: the
group sends a first argument that names no subcommand to ``run``.
"""

from __future__ import annotations

import typer
from typer.core import TyperGroup

from gpuwait.cli.common import JSON_OPTION, MAX_MEMORY_OPTION

SUBCOMMANDS = ("run", "query", "report", "compact")


class _RunByDefault(TyperGroup):
    """A group whose unknown first argument (a sweep file) is the argument of ``run``."""

    def parse_args(self, ctx, args):
        if args and args[0] not in SUBCOMMANDS and not args[0].startswith("-"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


app = typer.Typer(cls=_RunByDefault, no_args_is_help=True, rich_markup_mode="markdown",
                  help="Thousands of variants of a scenario on all cores or on Ray; results queryable and resumable. "
                       "`gpuwait sweep SWEEP.yaml --out DIR` runs one (see docs/sweeps.md).")

OUT_OPTION = typer.Option(..., "--out", metavar="DIR", help="Results directory (one Parquet file per case).")
EXECUTOR_OPTION = typer.Option("local", "--executor", metavar="local|ray",
                               help="'local': a process pool over all cores; 'ray': tasks on a Ray cluster.")
ADDRESS_OPTION = typer.Option(None, "--address", help="Ray cluster address (default: start a local Ray).")
WORKERS_OPTION = typer.Option(None, "--workers", min=1, help="Worker processes (default: one per core).")
RETRY_OPTION = typer.Option(False, "--retry-failed", help="Run again the cases stored as invalid or failed.")
DIR_ARGUMENT = typer.Argument(..., metavar="DIR", help="A `gpuwait sweep --out` directory.")


@app.command("run")
def run(sweep_file: str = typer.Argument(..., metavar="SWEEP.yaml", help="Sweep file."),
        out: str = OUT_OPTION, executor: str = EXECUTOR_OPTION, address: str | None = ADDRESS_OPTION,
        workers: int | None = WORKERS_OPTION, retry_failed: bool = RETRY_OPTION,
        max_memory: str | None = MAX_MEMORY_OPTION, json_out: bool = JSON_OPTION) -> None:
    """Run every case of a sweep not already in DIR (a rerun does no work; a killed run resumes). A case
    estimated to allocate more than --max-memory is stored as invalid, not run.

    Example: `gpuwait sweep examples/sweeps/ib-vs-roce.yaml --out out/ib-vs-roce`
    """
    from functools import partial

    from gpuwait.cli.common import renamed
    from gpuwait.cli.output import Output
    from gpuwait.runner.cost import parse_max_memory
    from gpuwait.runner.sweep import load_sweep, plan_sweep
    from gpuwait.runner.sweep_exec import run_sweep

    out_sink = Output(json_out)
    max_memory_bytes = parse_max_memory(max_memory)
    plan = plan_sweep(*load_sweep(sweep_file))
    show = not json_out
    if show:  # before the cases run: a note that changes what the user expects is worth reading first
        for note in plan.notes:
            typer.echo(f"note: {note}", err=True)

    def progress(done: int, total: int) -> None:
        if show and (done == total or done % max(1, total // 20) == 0):
            typer.echo(f"  {done}/{total} cases", err=True)

    try:
        # a row's error names --max-memory, the option the user sets (a sweep file has no memory limit)
        summary = run_sweep(plan, out, executor, workers, address, retry_failed, progress, max_memory_bytes,
                            partial(renamed, option_of_field={"max_memory": "--max-memory"}))
    except KeyboardInterrupt:  # Ctrl-C: say what is kept, since that is what a rerun builds on
        _interrupted(plan, out)
    if summary.ran and not summary.by_status.get("ok"):
        _refuse_all_bad(sweep_file, out, summary.ran)
    statuses = ", ".join(f"{n} {s}" for s, n in sorted(summary.by_status.items())) or "nothing to run"
    out_sink.emit({"sweep": plan.name, "out": out} | summary.to_dict() | {"notes": list(plan.notes)},
                  lambda c: c.print(f"[bold]{plan.name}[/]: {summary.n_cases} cases, {summary.skipped} already done, "
                                    f"{summary.ran} run ({statuses}) in {summary.wall_s:.1f} s on "
                                    f"{summary.workers or 0} {executor} workers -> {out}", markup=True))


def _interrupted(plan, out: str) -> None:
    """After Ctrl-C: how many of the sweep's cases are stored (each finished case is, whole) and that the
    same command resumes; exits 130, the shell's code for a command ended by SIGINT."""
    from gpuwait.runner.sweep_exec import ResultStore

    ids = {c.case_id for c in plan.cases}
    stored = len(ids & set(ResultStore(out).statuses()))
    typer.echo(f"interrupted: {stored} of {len(ids)} cases are stored in {out}; run the same command again to run "
               f"the other {len(ids) - stored} (stored cases are not run again)", err=True)
    raise typer.Exit(130)


def _refuse_all_bad(sweep_file: str, out: str, ran: int) -> None:
    """Not one case ran: the sweep file itself is wrong (its base, or every axis value). The cases stay
    stored (a rerun with --retry-failed runs them again); the first one's error says why."""
    from gpuwait.errors import SpecError
    from gpuwait.report.sweep import query as run_query

    _, rows = run_query(out, "select error from results where status <> 'ok' and error is not null "
                             "order by case_id limit 1")
    first = rows[0][0] if rows else "no error recorded"
    raise SpecError(f"{sweep_file}: none of the {ran} case(s) run was valid; the first: {first}",
                    hint="check the base scenario and the axis values (each case's row keeps its error)")


@app.command("query")
def query(directory: str = DIR_ARGUMENT, sql: str = typer.Argument(..., metavar="SQL", help="DuckDB SQL over the view `results`."),
          json_out: bool = JSON_OPTION) -> None:
    """Run SQL over the results (DuckDB; the view `results` has one row per case).

    Example: `gpuwait sweep query out/s "select cluster_transport_name, min(step_time_s) from results group by 1"`
    """
    from rich.table import Table

    from gpuwait.cli.output import Output
    from gpuwait.report.sweep import query as run_query

    columns, rows = run_query(directory, sql)

    def render(console) -> None:
        table = Table(*columns)
        for row in rows:
            table.add_row(*("" if v is None else f"{v:.6g}" if isinstance(v, float) else str(v) for v in row))
        console.print(table)

    Output(json_out).emit({"columns": columns, "rows": [list(r) for r in rows]}, render)


@app.command("report")
def report(directory: str = DIR_ARGUMENT, metric: str | None = typer.Option(None, "--metric", help="Column to rank by (default step_time_s, else busbw_GBps, else makespan_s)."),
           x: str | None = typer.Option(None, "--x", help="Heatmap axis across (default the first axis)."),
           y: str | None = typer.Option(None, "--y", help="Heatmap axis down (default the second axis)."),
           cost: str = typer.Option("n_switches", "--cost", help="Cost column of the Pareto front."),
           path: str | None = typer.Option(None, "--html", help="Where to write the page (default DIR/report.html)."),
           json_out: bool = JSON_OPTION) -> None:
    """Write an HTML page: the best case per axis value, a heatmap of two axes, a Pareto front; print where
    (with --json: the page, the cases by status, the best case per axis value and the Pareto front).

    Example: `gpuwait sweep report out/s --x cluster_routing_kind --y cluster_routing_qps_per_connection`
    """
    from gpuwait.cli.output import Output
    from gpuwait.report.sweep import sweep_report

    report = sweep_report(directory, metric, x, y, cost)
    page = report.write(path)

    def render(console) -> None:
        console.print(str(page), markup=False, emoji=False, soft_wrap=True)
        if report.not_stored:
            console.print(f"note: {report.not_stored} of the sweep's {report.planned} cases are not stored yet; "
                          "the best cases are among those stored", markup=False, emoji=False, soft_wrap=True)

    Output(json_out).emit({"page": str(page)} | report.to_dict(), render)


@app.command("compact")
def compact(directory: str = DIR_ARGUMENT, json_out: bool = JSON_OPTION) -> None:
    """Merge the per-case Parquet files into one (queries over many small files are slower)."""
    from gpuwait.cli.output import Output
    from gpuwait.report.sweep import compact as merge

    n, target = merge(directory)
    line = f"merged {n} files into {target}" if target else f"{n} file(s): nothing to merge"
    Output(json_out).emit({"files": n, "merged_into": None if target is None else str(target)},
                          lambda c: c.print(line, markup=False, emoji=False, soft_wrap=True))
