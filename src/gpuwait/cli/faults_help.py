"""``--inject``: the option and its help, which lists the registered fault kinds only when shown.

The kinds live in the fault registry, which imports the scenario models (pydantic); reading it
when the help is printed, not when the CLI starts, keeps ``gpuwait --help`` fast.
"""

from __future__ import annotations

import typer
from typer.core import TyperCommand

INJECT_HELP = "Inject a fault (repeatable)."
INJECT_OPTION = typer.Option(None, "--inject", metavar="KIND:TARGET[:PARAM=VALUE,...]", help=INJECT_HELP)


def kinds_help() -> str:
    """``name (target, param, ...)`` of every registered fault kind."""
    from gpuwait.faults import FAULT_KINDS

    return "; ".join(f"{k.name} ({k.target}" + (", " + ", ".join(k.params) if k.params else "") + ")"
                     for k in FAULT_KINDS.values())


class InjectHelpCommand(TyperCommand):
    """A command whose ``--inject`` help names the fault kinds, read from the registry when the help shows."""

    def format_help(self, ctx, formatter) -> None:
        for param in self.params:
            if param.name == "inject":
                param.help = f"{INJECT_HELP} Kinds (target, parameters): {kinds_help()}."  # type: ignore[attr-defined]
        super().format_help(ctx, formatter)
