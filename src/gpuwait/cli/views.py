"""What people read of a workload run (`gpuwait demo`, `gpuwait run`); machines get ``to_dict()``."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from gpuwait.report.results import WorkloadResult
from gpuwait.report.step import breakdown_table, collectives_table, hot_links_table


def render_workload(console: Console, result: WorkloadResult) -> None:
    """Where the step goes per case, then each case's collectives, hottest links and notes."""
    results = result.results
    head = results[0]
    console.print(f"[bold]{escape(result.scenario)}[/]: {escape(head.workload)}\non {escape(head.cluster)}, {head.steps} step(s)")
    console.print(breakdown_table(results))
    for r in results:
        console.print(collectives_table(r))
        console.print(hot_links_table(r))
        for note in r.notes:
            console.print(f"{escape(r.case)}: {escape(note)}")
    if result.report:
        console.print(f"report: {escape(str(result.report[0]))}  (Perfetto traces and Parquet tables beside it)")
