"""``gpuwait validate``: check a scenario file without simulating it."""

from __future__ import annotations

import typer

from gpuwait.cli.common import JSON_OPTION


def validate(file: str = typer.Argument(..., metavar="FILE", help="Scenario file to check."),
             json_out: bool = JSON_OPTION) -> None:
    """Check a scenario file: every problem with its YAML path, value and what was expected.

    Example: `gpuwait validate examples/ecmp-collision.yaml`
    """
    from gpuwait.cli.output import Output
    from gpuwait.errors import GpuwaitError
    from gpuwait.runner.inputs import load_scenario
    from gpuwait.runner.traffic import check_scenario

    try:
        runs = check_scenario(load_scenario(file))
    except GpuwaitError as err:
        if json_out:
            problems = getattr(err, "problems", None) or [str(err)]
            Output(True).emit({"file": file, "valid": False, "problems": problems, "hint": err.hint}, lambda c: None)
            raise typer.Exit(1) from None
        raise
    Output(json_out).emit(
        {"file": file, "valid": True} | runs,
        lambda c: c.print(f"[green]ok[/] {file}: {runs['servers']} servers, {runs['gpus']} GPUs, "
                          + (f"workload {runs['workload']}, " if "workload" in runs else f"{runs['flows']} flows, ")
                          + f"{runs['routed_cases']} case(s) checked"))
