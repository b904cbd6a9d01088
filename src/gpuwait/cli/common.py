"""Shared option aliases and loaders of the CLI."""

from __future__ import annotations

from pathlib import Path

import typer

from gpuwait.errors import SpecError
from gpuwait.spec import ClusterSpec, Scenario, read_yaml, validate_data
from gpuwait.topology import preset_spec, resolve_cluster

JSON_OPTION = typer.Option(False, "--json", help="Print machine-readable JSON instead of tables.")
SERVERS_OPTION = typer.Option(None, "--servers", "-n", min=1, help="Number of servers (overrides the preset or file).")


def looks_like_file(arg: str) -> bool:
    return arg.endswith((".yaml", ".yml", ".json")) or Path(arg).exists()


def load_scenario(path: str) -> Scenario:
    return validate_data(Scenario, read_yaml(path), source=path)


def load_cluster(arg: str, servers: int | None = None) -> ClusterSpec:
    """A cluster from a preset name or a file (a scenario with ``cluster:`` or a bare cluster)."""
    if not looks_like_file(arg):
        spec = preset_spec(arg, servers)  # names the presets when `arg` is none of them
    else:
        data = read_yaml(arg)
        if not isinstance(data, dict):
            raise SpecError(f"{arg}: expected a mapping at the top level")
        if "cluster" in data:
            spec = validate_data(Scenario, data, source=arg).cluster
        else:
            spec = validate_data(ClusterSpec, data, source=arg)
        if servers is not None:
            spec = validate_data(ClusterSpec, spec.model_dump(exclude_unset=True) | {"servers": servers}, source=arg,
                                 require_units=False)  # already parsed into SI numbers
    return resolve_cluster(spec)
