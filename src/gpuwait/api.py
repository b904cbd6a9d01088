"""gpuwait from Python: load a scenario, simulate it, predict nccl-tests tables, diagnose.

Every function here runs the same library code as the matching command, so ``result.to_dict()``
is the document ``gpuwait ... --json`` prints, and bad input raises the same
:class:`~gpuwait.errors.GpuwaitError` (a :class:`~gpuwait.errors.SpecError` names the YAML path,
the value and what was expected). ``import gpuwait`` stays light: this module, and the engines
behind it, load on first use of one of these names.

Examples
--------
>>> import gpuwait as g
>>> topo = g.build_cluster("rocev2-400g-2tier", servers=8)
>>> topo.n_gpus
64

docs/python.md walks through every function with examples that run in the test suite.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from gpuwait.cli.common import options_named
from gpuwait.engine import get_engine
from gpuwait.errors import SpecError
from gpuwait.report.diagnosis import diagnose_run, diagnose_telemetry, diagnosis_engine
from gpuwait.report.results import DiagnosisResult, TrafficResult, WorkloadResult
from gpuwait.runner import inputs
from gpuwait.runner.cost import check_scenario_cost, parse_max_memory
from gpuwait.runner.inputs import load_cluster, with_servers
from gpuwait.runner.perf import PerfSweep, SweepArgs, estimated_sweep
from gpuwait.runner.traffic import run_traffic
from gpuwait.runner.workload import refuse_steps_without_workload, run_workload
from gpuwait.spec import ClusterSpec, Scenario
from gpuwait.spec.faults import FaultSpec
from gpuwait.spec.reader import not_one_string, short_value, whole_number
from gpuwait.topology import Topology, build_topology, resolve_cluster

__all__ = ["build_cluster", "diagnose", "load_scenario", "perf", "simulate"]


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file, as ``gpuwait validate`` does: every problem names its YAML path,
    the value and what was expected.

    Parameters
    ----------
    path : str or Path
        The scenario's YAML file. A scenario already in Python is a :class:`~gpuwait.spec.Scenario` (what this
        returns), which :func:`simulate` and :func:`diagnose` take as it is.

    Raises
    ------
    SpecError
        A path that cannot be read, an invalid scenario, or an argument that is not a path (a dict is refused:
        ``load_scenario`` reads a file).
    """
    return inputs.load_scenario(_file_path("path", path, "the path of a scenario file (str or Path)"))


def _file_path(name: str, value: object, expected: str) -> str:
    """``value`` as a file name if it is one (a str or a Path), else one SpecError naming the argument: a dict or
    None was read as a file name ("{'name': ...}: cannot read the file")."""
    path = os.fspath(value) if isinstance(value, os.PathLike) else value
    if isinstance(path, str):
        return path
    hint = "write the mapping to a YAML file and pass its path" if isinstance(value, Mapping) else None
    raise SpecError(f"{name}: got {type(value).__name__} {short_value(value)}; expected {expected}", hint=hint)


def _scenario(value: object) -> Scenario:
    """``simulate``'s and ``diagnose``'s ``scenario``: a Scenario as it is, or the path of its file, loaded."""
    if isinstance(value, Scenario):
        return value
    return inputs.load_scenario(_file_path("scenario", value, "a Scenario (gpuwait.load_scenario) or the path of "
                                                              "its YAML file"))


def simulate(scenario: Scenario | str | Path, engine: str = "flow", steps: int | None = None,
             max_memory: str | None = None) -> WorkloadResult | TrafficResult:
    """Simulate a scenario (or a scenario file) and its variants, as ``gpuwait run`` does.

    Parameters
    ----------
    scenario : Scenario or path
        A loaded scenario (:func:`load_scenario`) or the path of its YAML file.
    engine : {"flow", "packet"}
        Traffic scenarios only: fluid max-min rates, or packets with queues, PFC, ECN and DCQCN.
        Workloads (training and inference steps) run on the flow engine.
    steps : int, optional
        Workloads only: the steps to simulate (default: the scenario's).
    max_memory : str, optional
        Refuse a run estimated to allocate more than this (``"16GiB"``); default half the machine's
        memory. The estimate is made before anything is built (:func:`~gpuwait.runner.cost.check_scenario_cost`);
        an all-to-all too large to list flow by flow is held to the same limit as the run reaches it.

    Returns
    -------
    WorkloadResult or TrafficResult
        ``.results`` (one :class:`~gpuwait.steps.result.RunResult` per case) or ``.runs`` (one
        engine run per case); ``to_dict()``, ``to_arrow()`` and ``to_parquet(directory)``.

    Raises
    ------
    SpecError
        A bad argument or scenario, or a run over ``max_memory`` (naming what to change).
    """
    _counts(steps=steps)
    scenario = _scenario(scenario)
    get_engine(engine)  # an unknown name is one error listing the engines
    if scenario.jobs:
        raise SpecError("scenario: has `jobs:`; simulate runs `traffic:` and `workload:` scenarios",
                        hint="shared-cluster jobs run with `gpuwait run FILE` (gpuwait.runner.jobs.run_jobs)")
    if scenario.workload is not None and engine == "packet":
        raise SpecError("engine='packet': runs `traffic:` scenarios only; this one has a `workload:`",
                        hint="training and inference steps run on the flow engine")
    refuse_steps_without_workload(scenario, steps)
    max_memory_bytes = parse_max_memory(max_memory)
    check_scenario_cost(scenario, max_memory_bytes, steps, engine)  # before anything is built
    if scenario.workload is not None:
        return WorkloadResult(scenario.name, run_workload(scenario, steps=steps, max_memory_bytes=max_memory_bytes))
    return TrafficResult(scenario.name, engine, run_traffic(scenario, engine))


def perf(op: str, cluster: str = "dgx-h100", servers: int | None = None, sizes: Sequence[int | str] | None = None,
         env: Mapping[str, str] | Iterable[str] = (), gpus: int | None = None, step_factor: int = 2,
         dtype: str = "float", nccl_version: str | None = None, gpus_per_thread: int = 1,
         max_memory: str | None = None, **nccl_tests_args) -> PerfSweep:
    """The nccl-tests table ``gpuwait perf`` prints, for ``op`` on a preset or cluster file.

    Parameters
    ----------
    op : str
        ``all_reduce``, ``all_gather``, ``reduce_scatter``, ``alltoall``, ``broadcast``... (or the
        nccl-tests binary name, ``all_reduce_perf``).
    cluster, servers, gpus
        A preset name or a cluster/scenario file; servers (default: the preset's); GPUs per server.
    sizes : (min, max) or (size,), optional
        The ``-b`` and ``-e`` sizes in bytes or with K/M/G suffixes; sizes between them grow by
        ``step_factor`` (``-f``); one size alone is both. Default: 32M only, as nccl-tests. Another
        number of sizes is refused (an error names ``sizes``, or ``sizes[i]`` for a size it cannot use).
    env : mapping or NAME=VALUE strings
        NCCL variables (``{"NCCL_ALGO": "Ring"}``) over the process environment, as NCCL reads them.
    nccl_version : str, optional
        The NCCL release whose algorithm and protocol choices to predict (``"2.21.5"``; 2.18 or later);
        default the cluster's ``nccl.version``, else 2.30.7.
    gpus_per_thread : int
        GPUs one host thread drives, as nccl-tests ``-g`` in one process (default 1: a process per GPU).
    max_memory : str, optional
        Refuse a sweep estimated to allocate more than this (``"16GiB"``); default half the machine's memory.
    nccl_tests_args
        Other fields of :class:`~gpuwait.runner.perf.SweepArgs`: ``iters``, ``warmup_iters``,
        ``check``, ``redop``, ``root``, ``step_bytes``; any other keyword is one SpecError listing those
        ``perf`` takes.

    Returns
    -------
    PerfSweep
        ``.rows`` (nccl-tests rows: size, time, algbw, busbw), ``.choices`` (algorithm, protocol,
        channels per size), ``.memory_estimate_bytes`` (estimated before any fabric run: a sweep over
        ``max_memory`` raises SpecError), ``to_dict()`` and ``to_arrow()``;
        :func:`gpuwait.report.perf.sweep_text` prints it as nccl-tests does.
    """
    _counts(servers=servers, gpus=gpus, gpus_per_thread=gpus_per_thread)
    _known_nccl_tests_args(nccl_tests_args)
    if not isinstance(cluster, ClusterSpec):
        cluster = _file_path("cluster", cluster, "a preset name or a cluster or scenario file")
    not_one_string("env", env, "['NCCL_ALGO=Ring'] or {'NCCL_ALGO': 'Ring'}")
    sizes = _size_range(sizes)
    args = SweepArgs(min_bytes=sizes[0], max_bytes=sizes[-1], step_factor=step_factor, dtype=dtype, **nccl_tests_args)
    # SweepArgs' fields are the command line's -b / -e; this caller wrote sizes=(min, max)
    with options_named(min_bytes="sizes[0]", max_bytes=f"sizes[{len(sizes) - 1}]"):
        return estimated_sweep(op, args, cluster, servers, gpus, env, nccl_version, gpus_per_thread,
                               parse_max_memory(max_memory))


def _known_nccl_tests_args(given: Mapping[str, object]) -> None:
    """``perf``'s other keywords are the SweepArgs fields it has no argument of its own for; any other name is
    one SpecError naming it and listing every keyword ``perf`` takes (it was SweepArgs' own TypeError,
    'unexpected keyword argument', naming a class the caller never wrote)."""
    own = [p for p in inspect.signature(perf).parameters if p != "nccl_tests_args"]
    sizes = ("min_bytes", "max_bytes")  # SweepArgs' -b and -e: perf's `sizes`
    extra = [f.name for f in dataclasses.fields(SweepArgs) if f.name not in own and f.name not in sizes]
    for name in given:
        if name in sizes:
            raise SpecError(f"{name}: perf takes the sizes as sizes=(min, max), not {name}=",
                            hint="e.g. sizes=('8', '8G'), nccl-tests' -b and -e")
        if name not in extra:
            raise SpecError(f"perf: unknown argument {name!r}; expected one of {', '.join(own + extra)}")


def _size_range(sizes: Sequence[int | str] | None) -> Sequence[int | str]:
    """``perf``'s ``sizes``: ``(min, max)`` or one size, else nccl-tests' default 32M only; a third size
    would be dropped silently (the sweep runs from min to max by ``step_factor``), so it is refused."""
    if sizes is None:
        return ("32M",)
    if isinstance(sizes, (str, bytes)) or len(sizes) not in (1, 2):
        raise SpecError(f"sizes: got {short_value(sizes)}; expected (min, max), nccl-tests' -b and -e, or one size",
                        hint="e.g. sizes=('8', '8G') with step_factor=2; the sizes between grow by step_factor")
    return sizes


def diagnose(scenario: Scenario | str | Path | None = None, inject: Sequence[str | FaultSpec] = (), *,
             steps: int | None = None, measure_gain: bool = True, telemetry: str | Path | None = None,
             cluster: str | None = None, servers: int | None = None,
             max_memory: str | None = None) -> DiagnosisResult:
    """Name what slows a scenario, as ``gpuwait diagnose`` does.

    A training scenario is simulated with the faults in ``inject`` (``"slow-gpu:s1.gpu3"``,
    ``"link-degrade:leaf0->spine1:factor=0.25"`` or fault specs), and each proposed fix is simulated
    again to measure its gain; a traffic scenario runs on the packet engine. With ``telemetry=DIR``
    and ``cluster=``, imported telemetry is diagnosed instead.

    Parameters
    ----------
    scenario : Scenario or path, optional
        A loaded scenario (:func:`load_scenario`) or the path of its YAML file.
    inject : sequence of str or FaultSpec
        Faults to simulate (training scenarios only).
    steps : int, optional
        The steps to simulate (default: the scenario's).
    measure_gain : bool
        Simulate each proposed fix again to measure its gain.
    telemetry : path, optional
        A directory of imported telemetry to diagnose instead of a scenario (with ``cluster``).
    cluster, servers
        With ``telemetry``: the preset or cluster file the telemetry comes from, and its servers.
    max_memory : str, optional
        Refuse a scenario estimated to allocate more than this (``"16GiB"``); default half the
        machine's memory. Telemetry is read without simulating, so it has no estimate.

    Returns
    -------
    DiagnosisResult
        ``.diagnosis.findings`` ranked by the gain of their fix (a traffic scenario's packet diagnosis: root
        cause first), negligible ones last; ``to_dict()`` and ``to_arrow()``.

    Raises
    ------
    SpecError
        A bad argument or scenario, or a scenario over ``max_memory`` (naming what to change).
    """
    _counts(steps=steps, servers=servers)
    not_one_string("inject", inject, "['slow-gpu:s1.gpu3']")
    if telemetry is not None:
        if scenario is not None or inject:
            raise SpecError("telemetry: expected either a scenario (with inject) or telemetry with cluster, not both")
        if cluster is None:
            raise SpecError("telemetry: expected cluster= naming the cluster the telemetry comes from")
        return diagnose_telemetry(telemetry, cluster, servers)
    if scenario is None:
        raise SpecError("diagnose: expected a scenario, or telemetry= with cluster=")
    scenario = _scenario(scenario)
    if scenario.jobs:
        raise SpecError("scenario: has `jobs:`; diagnose runs `traffic:` and `workload:` scenarios",
                        hint="shared-cluster jobs are diagnosed with `gpuwait diagnose FILE` "
                             "(gpuwait.diagnosis.placement.diagnose_jobs)")
    refuse_steps_without_workload(scenario, steps)  # a traffic scenario's packet run has no steps, as in `diagnose`
    max_memory_bytes = parse_max_memory(max_memory)
    check_scenario_cost(scenario, max_memory_bytes, steps, diagnosis_engine(scenario))
    return diagnose_run(scenario, list(inject), steps=steps, measure_gain=measure_gain, max_memory_bytes=max_memory_bytes)


def build_cluster(preset_or_file: str | Path | ClusterSpec, servers: int | None = None) -> Topology:
    """The topology of a preset (``"dgx-h100"``), a cluster or scenario file, or a cluster spec:
    nodes and links as numpy columns, with names (``s0.gpu0``, ``leaf0->spine1``)."""
    _counts(servers=servers)
    if isinstance(preset_or_file, ClusterSpec):
        spec = preset_or_file if servers is None else with_servers(preset_or_file, servers, source="build_cluster")
        return build_topology(resolve_cluster(spec))
    name = _file_path("preset_or_file", preset_or_file, "a preset name, a cluster or scenario file, or a ClusterSpec")
    return build_topology(load_cluster(name, servers))


def _counts(**counts: object) -> None:
    """Each count given (not None) is a whole number, 1 or more, or one SpecError naming its argument."""
    for name, value in counts.items():
        if value is not None:
            whole_number(name, value, 1)
