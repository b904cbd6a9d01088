"""Reading what a user names: a scenario file, or a cluster given as a preset name or a file.

The CLI and the Python API both read their inputs here, so a bad file or an unknown preset raises
the same :class:`~gpuwait.errors.SpecError` (with its YAML path and hint) from either.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from gpuwait.errors import SpecError, UnknownNameError
from gpuwait.spec import ClusterSpec, Scenario, read_yaml, validate_data
from gpuwait.topology import preset_spec, resolve_cluster, resolve_server


def looks_like_file(arg: str) -> bool:
    """Whether ``arg`` names a file (a YAML/JSON suffix, or an existing path) rather than a preset; an empty
    name is neither (``Path("")`` is the working directory, which exists). ``os.path.exists`` rather than
    ``Path.exists``: a name the OS refuses to look up (longer than NAME_MAX, a NUL byte) is no file, where
    ``Path.exists`` raises OSError for it.

    >>> looks_like_file("dgx-h100"), looks_like_file("my.yaml"), looks_like_file(""), looks_like_file("x" * 300)
    (False, True, False, False)
    """
    return arg.endswith((".yaml", ".yml", ".json")) or (bool(arg) and os.path.exists(arg))


def load_scenario(path: str | Path, *, cluster_replaced: bool = False) -> Scenario:
    """The scenario in a YAML file, validated: every problem names its YAML path, value and what was expected.

    ``cluster_replaced``: the caller puts another cluster in its place (a command's ``--cluster``), so the
    file's own preset and server template names are not looked up: an unknown one there is never used.
    """
    scenario = validate_data(Scenario, read_yaml(str(path)), source=str(path))
    if not cluster_replaced:
        check_cluster_names(scenario.cluster, f"{path}: cluster.")
    return scenario


def check_cluster_names(spec: ClusterSpec, where: str) -> None:
    """Refuse an unknown preset or server template in a file as its other fields are refused: with the file
    and the field's YAML path (``where``), which the registries' own errors cannot know."""
    try:
        if spec.preset is not None:
            preset_spec(spec.preset, 1)
        resolve_server(spec.server)
    except UnknownNameError as err:
        hint = err.hint
        if spec.preset is not None and looks_like_file(spec.preset):  # `cluster: my-cluster.yaml` in a scenario
            hint = (f"a preset is a built-in name, not a file: put {spec.preset}'s fields in its place "
                    f"(a file is taken where an option reads PRESET|FILE, e.g. --cluster {spec.preset})")
        raise UnknownNameError(f"{where}{err}", hint=hint) from None


def load_cluster(arg: str | ClusterSpec, servers: int | None = None) -> ClusterSpec:
    """A cluster from a preset name or a file (a scenario with ``cluster:`` or a bare cluster).

    ``arg`` may also be a cluster already loaded (by this function, or :func:`sized_cluster`), so a caller
    that read the file for other fields does not read it again; it has its servers already."""
    if isinstance(arg, ClusterSpec):
        if servers is not None:
            raise SpecError(f"servers: got {servers} with a loaded cluster; expected None (the cluster has "
                            f"{arg.servers})")
        return arg
    return sized_cluster(read_cluster(arg), servers, source=arg)


def read_cluster(arg: str) -> str | ClusterSpec:
    """What ``arg`` names before it is sized: a preset name as it is, or the file's cluster read and
    validated once (its preset not applied yet). :func:`sized_cluster` makes clusters of any size
    from it without reading the file again."""
    return cluster_of_file(read_yaml(arg), arg) if looks_like_file(arg) else arg


def cluster_of_file(data: Any, source: str) -> ClusterSpec:
    """The cluster of file ``source``'s YAML ``data`` (read by the caller): a scenario's ``cluster:`` or
    a bare cluster, validated once (its preset not applied yet), as :func:`read_cluster` reads it."""
    if not isinstance(data, dict):
        raise SpecError(f"{source}: expected a mapping at the top level")
    if "cluster" in data:
        spec = validate_data(Scenario, data, source=source).cluster
    else:
        spec = validate_data(ClusterSpec, data, source=source)
    check_cluster_names(spec, f"{source}: cluster." if "cluster" in data else f"{source}: ")
    return spec


def sized_cluster(cluster: str | ClusterSpec, servers: int | None = None, source: str = "servers") -> ClusterSpec:
    """The resolved cluster of :func:`read_cluster`'s ``cluster`` with ``servers`` servers (default: its
    own). Sized before its preset is applied: a preset chooses fields by the server count (tiers, an
    NVLink domain's size); ``source`` names the file in a validation error."""
    if isinstance(cluster, str):
        return preset_spec(cluster, servers)  # names the presets when `cluster` is none of them
    if servers is not None:
        cluster = with_servers(cluster, servers, source=source)
    return resolve_cluster(cluster)


def with_servers(spec: ClusterSpec, servers: int, source: str = "servers") -> ClusterSpec:
    """``spec`` with ``servers`` servers, validated again (the count bounds other fields)."""
    return validate_data(ClusterSpec, spec.model_dump(exclude_unset=True) | {"servers": servers}, source=source,
                         require_units=False)  # already parsed into SI numbers


def demo_scenario() -> Scenario:
    """The embedded demo: a 70B-class model on 64 DGX H100 servers, RoCEv2/ECMP beside InfiniBand/adaptive."""
    text = resources.files("gpuwait.data").joinpath("demo-training.yaml").read_text()
    return validate_data(Scenario, yaml.safe_load(text), source="embedded demo scenario")
