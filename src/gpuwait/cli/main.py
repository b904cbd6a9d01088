"""Entry point: the typer app, ``--version``, and the one-line error handler."""

from __future__ import annotations

import os
import sys
from typing import Any

import typer

from gpuwait.cli import calibrate, demo, diagnose, inventory, perf, place, route, run, schema, telemetry, topo, validate
from gpuwait.cli import schedule as schedule_cli
from gpuwait.cli import sweep as sweep_cli
from gpuwait.cli.common import API_OPTIONS, error_line, options_named
from gpuwait.cli.faults_help import InjectHelpCommand
from gpuwait.errors import GpuwaitError
from gpuwait.version import __version__


def _click_errors() -> tuple[type[Any], ...]:
    """Usage-error classes: typer >= 0.26 vendors its own click (and may come without click),
    older typer raises click's own."""
    found = []
    for module in ("typer._click.exceptions", "click.exceptions"):
        try:
            found.append(__import__(module, fromlist=["ClickException"]).ClickException)
        except ImportError:
            pass
    return tuple(found)


_CLICK_ERRORS = _click_errors()


def _flags_print_as_flags() -> None:
    """Help shows `--json`, not `--json <bool>`: recent typer prints every option's type, even a flag's,
    which reads as if the flag took a value."""
    from typer.core import TyperOption

    shown = TyperOption.display_type_rich
    if getattr(shown, "_gpuwait_flags", False):
        return

    def display_type_rich(self, ctx):
        return None if self.is_flag and self.metavar is None else shown(self, ctx)

    display_type_rich._gpuwait_flags = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_flags_print_as_flags()

app = typer.Typer(
    name="gpuwait",
    help="Why the GPUs wait, and what makes them stop: model a GPU cluster's data path, run training steps, collectives and traffic on it (flow or packet level), and diagnose what slows them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gpuwait {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """Why the GPUs wait, and what makes them stop."""


# one module per command; each imports what it runs inside its body, so `--help` stays fast
app.command()(demo.demo)
app.command()(run.run)
app.command()(route.route)
app.command()(place.place)
app.command()(schedule_cli.schedule)
app.command()(validate.validate)
app.command()(schema.schema)
app.command()(topo.topo)
app.command()(perf.perf)
app.command()(calibrate.calibrate)
app.command(cls=InjectHelpCommand)(diagnose.diagnose)
telemetry_app = typer.Typer(help="Telemetry under real exporter names.", no_args_is_help=True)
telemetry_app.command("export", cls=InjectHelpCommand)(telemetry.export)
app.add_typer(telemetry_app, name="telemetry")
inventory_app = typer.Typer(help="Import a real cluster's inventory under its real names.", no_args_is_help=True)
inventory_app.command("import")(inventory.import_)
app.add_typer(inventory_app, name="inventory")
app.add_typer(sweep_cli.app, name="sweep")


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; a GpuwaitError becomes one line and a hint (traceback only with GPUWAIT_DEBUG=1)."""
    try:
        with options_named(**API_OPTIONS):  # the API's argument names, as this command line's options
            code = app(args=argv, standalone_mode=False)
    except GpuwaitError as err:
        if os.environ.get("GPUWAIT_DEBUG") == "1":
            raise
        sys.stderr.write(f"error: {error_line(str(err))}\n")
        if err.hint:
            sys.stderr.write(f"hint: {error_line(err.hint)}\n")
        return 2
    except ValueError as err:  # a pydantic model built from options (a preset with --servers): one line too
        # imported on this error path only: the CLI starts without the scenario models (tests/cli/test_startup.py)
        from pydantic import ValidationError

        if not isinstance(err, ValidationError) or os.environ.get("GPUWAIT_DEBUG") == "1":
            raise
        from gpuwait.spec.load import describe_validation_error

        sys.stderr.write(f"error: {error_line('; '.join(describe_validation_error(err)))}\n")
        return 2
    except typer.Exit as done:
        return done.exit_code
    except typer.Abort:
        sys.stderr.write("aborted\n")
        return 1
    except _CLICK_ERRORS as err:  # usage errors: a missing argument, an unknown option, a bad --flag value
        ctx = getattr(err, "ctx", None)
        sys.stderr.write(f"error: {error_line(err.format_message())}\n")
        sys.stderr.write(f"hint: `{ctx.command_path if ctx else 'gpuwait'} --help` shows the usage\n")
        return err.exit_code
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
