"""The sweep file: a base scenario and the axes that vary it (``gpuwait sweep SWEEP.yaml``).

Like a scenario, a sweep file is frozen configuration with no logic: expanding the axes into cases
and running them is :mod:`gpuwait.runner.sweep`'s job.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, ValidationInfo, field_validator

from gpuwait.spec.cluster import SpecModel

_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*$")


class AxisSpec(SpecModel):
    """One axis: a field of the case, by dotted path, and the values it takes."""

    path: str = Field(..., description="Dotted path into the base scenario (`cluster.servers`, `cluster.routing.qps_per_connection`, `workload.parallel.tp`, `cluster.fabric.oversubscription`, `variants.0.routing.kind`), or `perf.<field>` for the nccl-tests arguments of a perf sweep (`perf.env.NCCL_ALGO`, `perf.op`), or `steps`.")
    values: list[Any] = Field(..., min_length=1, description="Values the field takes, one case each (per combination with the other axes).")
    name: str | None = Field(None, description="Column name of the axis in the results; default the path with '.' written '_'.")

    @field_validator("path")
    @classmethod
    def _dotted(cls, value: str) -> str:
        if not _PATH.match(value):
            raise ValueError("expected a dotted path such as cluster.routing.kind")
        if value == "workload.steps":  # every case runs the sweep's own `steps`, which would undo this axis
            # (quoted, not in backticks: the command line would rename `steps` to run's --steps)
            raise ValueError("the sweep file's own steps field sets every case's steps, so this axis would change "
                             "nothing; expected the path \"steps\"")
        return value

    @property
    def column(self) -> str:
        return self.name or self.path.replace(".", "_")


def _axes_mapping(value: Any) -> Any:
    # `axes: {cluster.servers: [8, 16]}` is short for `axes: [{path: cluster.servers, values: [8, 16]}]`
    if isinstance(value, dict):
        return [{"path": k, "values": v if isinstance(v, list) else [v]} for k, v in value.items()]
    return value


class PerfCaseSpec(SpecModel):
    """The nccl-tests run a perf case predicts (what ``gpuwait perf`` prints), on the case's cluster."""

    op: str = Field("all_reduce", description="Collective: all_reduce, all_gather, reduce_scatter, alltoall, broadcast, reduce, sendrecv...")
    min_bytes: int | str = Field("8", description="Smallest size (-b), bytes or with a binary K/M/G suffix.")
    max_bytes: int | str = Field("8G", description="Largest size (-e).")
    step_factor: int = Field(2, ge=1, description="Multiply the size by this each step (-f).")
    dtype: str = Field("float", description="Datatype (-d).")
    gpus: int | None = Field(None, ge=1, description="GPUs per server (-g); default all.")
    env: dict[str, str] = Field(default_factory=dict, description="NCCL variables NAME: VALUE (the process environment is not read, so a case means the same everywhere).")
    nccl_version: str | None = Field(None, description="NCCL release to predict; default the cluster's nccl.version.")


class SweepSpec(SpecModel):
    """A sweep file: a base scenario, axes over any of its fields, how they combine, what to leave out."""

    name: str = Field("sweep", description="Sweep name, for reports.")
    base: str | dict[str, Any] = Field(..., description="The base scenario: a scenario file (relative to the sweep file) or the scenario inline.")
    kind: Literal["auto", "workload", "traffic", "perf"] = Field("auto", description="What each case runs: 'workload' (training or inference steps), 'traffic' (the scenario's flows), 'perf' (an nccl-tests prediction on the case's cluster); 'auto': workload if the base has one, else perf when `perf:` is given, else traffic.")
    perf: PerfCaseSpec | None = Field(None, description="The nccl-tests arguments of a perf sweep.")
    axes: Annotated[list[AxisSpec], BeforeValidator(_axes_mapping)] = Field(default_factory=list, description="The axes (a mapping path: [values] or a list of {path, values, name}).")
    combine: Literal["product", "zip"] = Field("product", description="'product': every combination of the axes' values; 'zip': the i-th value of every axis together (the axes must be equally long).")
    exclude: list[dict[str, Any]] = Field(default_factory=list, description="Combinations to leave out: a case is dropped when, for every `path: value` of an entry, its value at that path equals the value (or is in it, for a list). Every path of an entry must be an axis's path.")
    steps: int = Field(1, ge=1, description="Training steps simulated per workload case; replaces the base's `workload.steps` (a note says so when they differ).")
    engine: Literal["flow", "packet"] = Field("flow", description="Engine for traffic cases ('flow' or 'packet'); workloads and perf run on the flow engine.")

    @field_validator("axes")
    @classmethod
    def _one_axis_per_path(cls, axes: list[AxisSpec]) -> list[AxisSpec]:
        # two axes on one path overwrite each other (the cases collapse) and two on one column overwrite it
        for what, keys in (("path", [a.path for a in axes]), ("column name", [a.column for a in axes])):
            twice = sorted({k for k in keys if keys.count(k) > 1})
            if twice:
                raise ValueError(f"{what} {twice[0]!r} appears on two axes; expected each once")
        return axes

    @field_validator("exclude")
    @classmethod
    def _exclude_names_axes(cls, exclude: list[dict[str, Any]], info: ValidationInfo) -> list[dict[str, Any]]:
        # an entry on a path no axis varies never matches a case: it would leave out nothing, silently
        if "axes" not in info.data:  # the axes were refused already
            return exclude
        paths = [a.path for a in info.data["axes"]]
        for i, entry in enumerate(exclude):
            if not entry:  # no path to compare: it would match, and leave out, every case
                raise ValueError(f"entry {i}: empty; expected at least one axis path and its value "
                                 f"({', '.join(paths) or '(no axes)'})")
            unknown = sorted(set(entry) - set(paths))
            if unknown:
                raise ValueError(f"entry {i}: {unknown[0]!r} is not an axis path; expected one of "
                                 f"{', '.join(paths) or '(no axes)'}")
        return exclude
