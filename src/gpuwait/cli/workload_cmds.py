"""Running a scenario's workload: the breakdown tables, the report files and a progress bar."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from gpuwait.cli.output import Output
from gpuwait.report.html import write_html_report
from gpuwait.report.parquet import write_link_parquet, write_task_parquet
from gpuwait.report.perfetto import write_perfetto_trace
from gpuwait.report.step import breakdown_table, collectives_table, hot_links_table, step_summary_dict
from gpuwait.runner.workload import run_workload
from gpuwait.spec import Scenario
from gpuwait.steps.result import RunResult


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "case"


def write_reports(results: list[RunResult], directory: str | Path, title: str, diagnoses=()) -> list[Path]:
    """The HTML report, one Perfetto trace per case and the Parquet tables, in ``directory``;
    with ``diagnoses``, their findings lead the report."""
    from gpuwait.diagnose.report import diagnosis_dict

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    findings = [f for d in diagnoses for f in diagnosis_dict(d)["findings"]]
    paths = [write_html_report(results, out / "report.html", title=title, findings=findings)]
    for result in results:
        paths.append(write_perfetto_trace(result, out / f"trace-{_slug(result.case)}.json",
                                          gpus_per_server=result.gpus_per_server))
    paths.append(write_task_parquet(results, out / "tasks.parquet"))
    paths.append(write_link_parquet(results, out / "links.parquet"))
    return paths


def simulate(scenario: Scenario, steps: int | None, show_progress: bool) -> list[RunResult]:
    """Run the workload with a progress bar on a terminal's stderr."""
    console = Console(stderr=True)
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} steps"),
                  TimeElapsedColumn(), console=console, transient=True,
                  disable=not (show_progress and sys.stderr.isatty())) as bar:
        task = bar.add_task("simulating", total=None)

        def progress(case: int, cases: int, step: int, steps_total: int) -> None:
            bar.update(task, description=f"case {case + 1}/{cases}", completed=step, total=steps_total)

        return run_workload(scenario, steps=steps, progress=progress)


def emit_workload(out: Output, scenario: Scenario, results: list[RunResult], report_paths: list[Path]) -> None:
    document = {"scenario": scenario.name, "cases": [step_summary_dict(r) for r in results],
                "report": [str(p) for p in report_paths]}

    def render(console: Console) -> None:
        head = results[0]
        console.print(f"[bold]{scenario.name}[/]: {head.workload}\non {head.cluster}, {head.steps} step(s)")
        console.print(breakdown_table(results))
        for result in results:
            console.print(collectives_table(result))
            console.print(hot_links_table(result))
            for note in result.notes:
                console.print(f"{result.case}: {note}")
        if report_paths:
            console.print(f"report: {report_paths[0]}  (Perfetto traces and Parquet tables beside it)")

    out.emit(document, render)
