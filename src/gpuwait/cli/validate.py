"""``gpuwait validate``: check a scenario file without simulating it."""

from __future__ import annotations

import typer

from gpuwait.cli.common import API_OPTIONS, JSON_OPTION, MAX_MEMORY_OPTION, options_named


def validate(file: str = typer.Argument(..., metavar="FILE", help="Scenario or sweep file to check."),
             max_memory: str | None = MAX_MEMORY_OPTION, json_out: bool = JSON_OPTION) -> None:
    """Check a scenario file: every problem with its YAML path, value and what was expected.

    States what `run` would allocate and refuses, as `run` does, a scenario over --max-memory.
    A sweep file (`base:` and `axes:`) is expanded as `gpuwait sweep run` would: every case's scenario
    is checked and each refused case named (memory is checked per case when the sweep runs).

    Example: `gpuwait validate examples/ecmp-collision.yaml`
    """
    from rich.markup import escape

    from gpuwait.cli.output import Output
    from gpuwait.errors import GpuwaitError
    from gpuwait.runner.cost import check_scenario_cost, parse_max_memory
    from gpuwait.runner.inputs import load_scenario
    from gpuwait.runner.traffic import check_scenario

    if _is_sweep_file(file):
        _validate_sweep(file, json_out)
        return
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


def _is_sweep_file(file: str) -> bool:
    """Whether ``file`` holds a sweep (its ``base`` and ``axes``), not a scenario; any file that cannot be
    read so is left to the scenario reader, whose errors name the problem."""
    from gpuwait.errors import GpuwaitError
    from gpuwait.spec.reader import read_yaml_checked

    try:
        doc = read_yaml_checked(file)
    except GpuwaitError:
        return False
    return isinstance(doc, dict) and "base" in doc and "axes" in doc


#: refused cases named in the text output; --json lists them all
SHOWN_REFUSED_CASES = 5


def _validate_sweep(file: str, json_out: bool) -> None:
    """Expand the sweep as ``sweep run`` does and name every case whose scenario is refused."""
    from rich.markup import escape

    from gpuwait.cli.output import Output
    from gpuwait.errors import SpecError
    from gpuwait.runner.sweep import load_sweep, plan_sweep

    spec, base = load_sweep(file)
    plan = plan_sweep(spec, base)
    refused = [{"axes": c.axes, "problem": c.error} for c in plan.cases if c.error]
    doc = {"file": file, "valid": not refused, "sweep": plan.name, "kind": plan.kind, "axes": plan.axes,
           "cases": len(plan.cases), "refused": refused, "notes": list(plan.notes)}
    if refused and not json_out:
        shown = "; ".join(f"{r['axes']}: {r['problem']}" for r in refused[:SHOWN_REFUSED_CASES])
        more = f" (and {len(refused) - SHOWN_REFUSED_CASES} more)" if len(refused) > SHOWN_REFUSED_CASES else ""
        raise SpecError(f"{file}: {len(refused)} of {len(plan.cases)} cases refused: {shown}{more}",
                        hint="`gpuwait sweep run` stores a refused case as invalid and runs the others")

    def render(c) -> None:
        c.print("[green]ok[/] " + escape(f"{file}: sweep {plan.name} of kind {plan.kind}, {len(plan.cases)} cases over "
                                         f"{', '.join(plan.axes)}; every case's scenario checked"))
        for note in plan.notes:
            c.print(f"note: {escape(note)}")

    Output(json_out).emit(doc, render)
    if refused:
        raise typer.Exit(1)
