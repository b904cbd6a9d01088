"""A workload simulated with a progress bar on a terminal's stderr."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from gpuwait.runner.cost import CostEstimate
from gpuwait.runner.workload import run_workload
from gpuwait.spec import Scenario
from gpuwait.steps.result import RunResult


def state_estimate(estimate: CostEstimate, limit_bytes: int) -> None:
    """What the run will allocate, on stderr (stdout stays the results): one dim line."""
    from gpuwait.units import format_size

    Console(stderr=True, highlight=False).print(
        f"[dim]allocates {estimate.describe()} (limit {format_size(limit_bytes)}: --max-memory)[/dim]")


def simulate(scenario: Scenario, steps: int | None, show_progress: bool) -> list[RunResult]:
    """Run the workload; the bar shows only on a terminal and disappears when done."""
    console = Console(stderr=True)
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} steps"),
                  TimeElapsedColumn(), console=console, transient=True,
                  disable=not (show_progress and sys.stderr.isatty())) as bar:
        task = bar.add_task("simulating", total=None)

        def progress(case: int, cases: int, step: int, steps_total: int) -> None:
            bar.update(task, description=f"case {case + 1}/{cases}", completed=step, total=steps_total)

        return run_workload(scenario, steps=steps, progress=progress)
