"""``gpuwait validate``: check a scenario file without simulating it."""

from __future__ import annotations

import typer

from gpuwait.cli.common import API_OPTIONS, JSON_OPTION, MAX_MEMORY_OPTION, options_named


def validate(file: str = typer.Argument(..., metavar="FILE", help="Scenario file to check."),
             max_memory: str | None = MAX_MEMORY_OPTION, json_out: bool = JSON_OPTION) -> None:
    """Check a scenario file: every problem with its YAML path, value and what was expected.

    States what `run` would allocate and refuses, as `run` does, a scenario over --max-memory.

    Example: `gpuwait validate examples/ecmp-collision.yaml`
    """
    from rich.markup import escape

    from gpuwait.cli.output import Output
    from gpuwait.errors import GpuwaitError
    from gpuwait.runner.cost import check_scenario_cost, parse_max_memory
    from gpuwait.runner.inputs import load_scenario
    from gpuwait.runner.traffic import check_scenario

    try:
        # the Python API's argument names as options here too, before --json prints the message: validate has
        # no --steps of its own, so the one to change is run's
        with options_named(**{**API_OPTIONS, "steps": "run's --steps"}):
            scenario = load_scenario(file)
            estimate = check_scenario_cost(scenario, parse_max_memory(max_memory))
            runs = check_scenario(scenario)
    except GpuwaitError as err:
        if json_out:
            problems = getattr(err, "problems", None) or [str(err)]
            Output(True).emit({"file": file, "valid": False, "problems": problems, "hint": err.hint}, lambda c: None)
            raise typer.Exit(1) from None
        raise
    def render(c) -> None:
        c.print("[green]ok[/] " + escape(
            f"{file}: {runs['servers']} servers, {runs['gpus']} GPUs, "
            + (f"workload {runs['workload']}, " if "workload" in runs else f"{runs['flows']} flows, ")
            + f"{runs['routed_cases']} case(s) checked; run allocates {estimate.describe()}"))
        for note in runs["notes"]:
            c.print(f"note: {escape(note)}")

    Output(json_out).emit({"file": file, "valid": True} | runs | {"estimate": estimate.to_dict()}, render)
