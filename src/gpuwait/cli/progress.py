"""Workloads and traffic simulated with progress on a terminal's stderr (never on a pipe or with --json)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from gpuwait.fabric.memory import memory_limit
from gpuwait.runner.cost import CostEstimate
from gpuwait.runner.workload import run_workload
from gpuwait.spec import Scenario
from gpuwait.steps.result import RunResult


def state_estimate(estimate: CostEstimate, max_memory_bytes: float | None) -> None:
    """What the run will allocate and its limit (``--max-memory`` as parsed, or the default), on a terminal's
    stderr (stdout stays the results; a pipe or a log keeps only errors, like the progress bar): one dim line."""
    from gpuwait.units import format_size

    if not sys.stderr.isatty():
        return
    Console(stderr=True, highlight=False).print(
        f"[dim]allocates {estimate.describe()} (limit {format_size(memory_limit(max_memory_bytes)[0])}: --max-memory)[/dim]")


def simulate(scenario: Scenario, steps: int | None, show_progress: bool,
             max_memory_bytes: float | None = None) -> list[RunResult]:
    """Run the workload (held to ``max_memory_bytes``); the bar shows only on a terminal and disappears when done."""
    console = Console(stderr=True)
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} steps"),
                  TimeElapsedColumn(), console=console, transient=True,
                  disable=not (show_progress and sys.stderr.isatty())) as bar:
        task = bar.add_task("simulating", total=None)

        def progress(case: int, cases: int, step: int, steps_total: int) -> None:
            bar.update(task, description=f"case {case + 1}/{cases}", completed=step, total=steps_total)

        return run_workload(scenario, steps=steps, progress=progress, max_memory_bytes=max_memory_bytes)


class _TrafficProgress:
    """The callback :func:`traffic_progress` yields: ``(case, cases, name)`` before each case, and
    ``run(p)`` with a packet run's progress (packets delivered, simulated time, events/s) between
    chunks of its event loop. Hidden (a pipe, ``--json``), ``run`` is None: the run goes in one call."""

    def __init__(self, bar: Progress, task, engine: str, shown: bool) -> None:
        self.bar, self.task, self.engine, self.case = bar, task, engine, ""
        self.run = self._run if shown else None

    def __call__(self, case: int, cases: int, name: str) -> None:
        self.case = f"{self.engine} engine: case {case + 1}/{cases} ({name})"
        self.bar.update(self.task, description=self.case, completed=0, total=None)

    def _run(self, p) -> None:
        self.bar.update(self.task, description=f"{self.case}: {p.describe()}", completed=p.delivered_packets,
                        total=max(p.packets, 1))


@contextmanager
def traffic_progress(engine: str, show_progress: bool, stream=None) -> Iterator:
    """A ``progress(case, cases, name)`` callback for traffic runs: a packet run takes seconds to
    minutes per case, so the terminal shows which case runs, how far its packets are and the time
    so far. Shown only when ``stream`` (default stderr) is a terminal."""
    stream = sys.stderr if stream is None else stream
    console = Console(file=stream, force_terminal=stream.isatty() or None)
    shown = show_progress and stream.isatty()
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(bar_width=20), TimeElapsedColumn(),
                  console=console, transient=True, disable=not shown) as bar:
        yield _TrafficProgress(bar, bar.add_task(f"{engine} engine", total=None), engine, shown)


def simulate_traffic(scenario: Scenario, engine: str, show_progress: bool, stream=None) -> list:
    """Run the traffic on ``engine``, one case after the other, with progress on a terminal."""
    from gpuwait.runner.traffic import run_traffic

    with traffic_progress(engine, show_progress, stream) as progress:
        return run_traffic(scenario, engine, progress=progress)
