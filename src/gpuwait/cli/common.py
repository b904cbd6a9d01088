"""Option aliases shared by the commands. Nothing heavy here: `gpuwait --help` imports it.

A flag letter means one thing across all commands; `gpuwait perf` keeps nccl-tests' letters
(`-n` iterations, `-f` step factor, `-o` reduction op), so no other command uses those
(tests/cli/test_help.py walks every command's options).
"""

from __future__ import annotations

import typer

JSON_OPTION = typer.Option(False, "--json", help="Print machine-readable JSON instead of tables.")
SERVERS_OPTION = typer.Option(None, "--servers", min=1, help="Number of servers (overrides the preset or file).")
