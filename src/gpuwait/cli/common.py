"""Option aliases shared by the commands. Nothing heavy here: `gpuwait --help` imports it."""

from __future__ import annotations

import typer

JSON_OPTION = typer.Option(False, "--json", help="Print machine-readable JSON instead of tables.")
SERVERS_OPTION = typer.Option(None, "--servers", "-n", min=1, help="Number of servers (overrides the preset or file).")
