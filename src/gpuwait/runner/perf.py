"""nccl-tests tables predicted for a cluster (what ``gpuwait perf`` prints).

A :class:`~gpuwait.fabric.perf.CollectivePredictor` times each size with NCCL's tuning model
(algorithm, protocol, latency) and the flow engine on the real topology and routing (bandwidth);
:func:`perf_sweep` turns those times into the rows nccl-tests would print for the same arguments.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from gpuwait.collectives.communicator import Communicator
from gpuwait.collectives.nccl_versions import nccl_release
from gpuwait.collectives.ncclenv import (
    NOT_MODELLED,
    VARIABLES,
    NcclEnv,
    Setting,
    check_modelled,
    cluster_env,
    env_pairs,
    parse_env,
    platform_setting,
)
from gpuwait.collectives.nccltests import (
    DTYPES,
    REDOPS,
    Device,
    NcclTestsCollective,
    Row,
    RunConfig,
    average_busbw_GBps,
    get_collective,
    make_row,
    parse_size_arg,
    size_and_count,
    size_sweep,
)
from gpuwait.collectives.physical import PhysicalParams, physical_defaults
from gpuwait.collectives.tuning import MODEL_NCCL_VERSION
from gpuwait.errors import SpecError, UnknownNameError
from gpuwait.fabric.perf import CollectiveEstimate, CollectivePredictor
from gpuwait.runner.cost import CostEstimate, check_cost, estimate_perf
from gpuwait.runner.inputs import load_cluster
from gpuwait.spec import ClusterSpec
from gpuwait.spec.reader import whole_number
from gpuwait.topology import build_topology
from gpuwait.transport import resolve_transport

#: sizes a measured log is judged on for bandwidth (the ramp and the plateau) and for the latency floor, by
#: ``perf --compare``'s scores and by what ``calibrate`` lets a log's sizes free alike
BANDWIDTH_MIN_BYTES = 2**20
FLOOR_MAX_BYTES = 64 * 2**10


def nccl_env(env: Mapping[str, str] | Iterable[str] = (), base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (the process environment by default, as NCCL reads it) updated with ``env``:
    a mapping, or ``NAME=VALUE`` strings as ``--env`` takes them."""
    out = dict(os.environ if base is None else base)
    if isinstance(env, Mapping):
        check_modelled(env)  # a name given on purpose must change the result (issue 20)
        return out | {str(k): str(v) for k, v in env.items()}
    return out | env_pairs(env)


def unused_log_variables(logged: Mapping[str, str], used: Mapping[str, str]) -> dict[str, str]:
    """The NCCL variables a log says its run set (``logged``: its command line, NCCL's INFO lines) that would
    change what gpuwait predicts but are not in ``used`` (:func:`nccl_env`: the process environment and
    ``--env``): each one whose value, put in ``used``, parses to another :class:`~gpuwait.collectives.ncclenv.NcclEnv`.
    A name gpuwait does not model, a value NCCL's default already has, or one it cannot read is left out.

    >>> unused_log_variables({"NCCL_ALGO": "Ring", "NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": "mlx5_0"}, {})
    {'NCCL_ALGO': 'Ring'}
    >>> unused_log_variables({"NCCL_ALGO": "ring"}, {"NCCL_ALGO": "Ring"})
    {}
    """
    def model(env: Mapping[str, str]) -> NcclEnv:
        return replace(parse_env(env), explicit=(), set_by={})

    base = model(used)
    out = {}
    for name, value in logged.items():
        # NCCL reads its names case-insensitively (NCCL_ALGO=ring is Ring)
        if name not in VARIABLES or name in NOT_MODELLED or used.get(name, "").lower() == value.lower():
            continue
        try:
            if model({**used, name: value}) != base:
                out[name] = value
        except SpecError:
            continue  # a value gpuwait cannot read: nothing to say it would change
    return out


def log_release(printed: str | None, asked: str | None = None, cluster_version: str | None = None) -> tuple[str, str]:
    """(version, why) a measured log is predicted as, by ``perf --compare`` and ``calibrate`` alike: ``asked``
    (the caller's ``nccl_version``, the command line's ``--nccl-version``), else the version the log ``printed``
    when gpuwait models it (2.18 or later), else the cluster's ``nccl.version``, else gpuwait's default.

    >>> log_release("2.26.2"), log_release("2.4.8", cluster_version="2.21.5"), log_release(None)
    (('2.26.2', "the log's version"), ('2.21.5', "the cluster's nccl.version"), ('2.30.7', "gpuwait's default"))
    """
    if asked is not None:
        nccl_release(asked, "nccl_version")
        return asked, "nccl_version"
    if printed is not None:
        try:
            nccl_release(printed)
            return printed, "the log's version"
        except SpecError:
            pass  # older than the releases modelled: predicted as the cluster's release
    if cluster_version is not None:
        return cluster_version, "the cluster's nccl.version"
    return MODEL_NCCL_VERSION, "gpuwait's default"


def placing_layout(layout: tuple[int, int] | None, servers: int | None,
                   gpus_in_server: int) -> tuple[int, int] | None:
    """The (hosts, ranks per host) a log's ``# Rank`` lines (``layout``) place its run on when ``-g`` does not
    say, by ``perf --compare`` and ``calibrate`` alike; None when they do not: none listed, ``servers``
    (``--servers``) gives another host count, or more ranks on one host name than a server holds
    (``gpus_in_server``: containers given one hostname are not one server).

    >>> placing_layout((2, 4), None, 8), placing_layout((2, 4), 4, 8), placing_layout((1, 16), None, 8)
    ((2, 4), None, None)
    """
    if layout is None or servers not in (None, layout[0]) or layout[1] > gpus_in_server:
        return None
    return layout


def log_gpus_per_server(n_ranks: int, layout: tuple[int, int] | None, gpus_in_server: int, servers: int | None = None,
                        process_gpus: int = 1) -> int:
    """GPUs per server a log ran on when -g does not say, by ``perf --compare`` and ``calibrate`` alike: as its
    '# Rank' lines (``layout``) place the ranks (:func:`placing_layout`), else the GPUs one process drove
    (``process_gpus``: nThread x nGpus, when more than 1), else as many as a server of the cluster holds.

    >>> log_gpus_per_server(16, (2, 8), 8), log_gpus_per_server(16, None, 8, process_gpus=4), log_gpus_per_server(4, None, 8)
    (8, 4, 4)
    """
    if (placed := placing_layout(layout, servers, gpus_in_server)) is not None:
        return placed[1]
    if process_gpus > 1:
        return process_gpus
    return min(n_ranks, gpus_in_server)


def layout_warning(layout: tuple[int, int] | None, servers: int, gpus_per_server: int) -> str | None:
    """What ``perf --compare`` and ``calibrate`` warn of when a log's ``layout`` (hosts, ranks per host: its
    ``# Rank`` lines) is not the run predicted (``servers`` of ``gpus_per_server``); None when it is, or unknown.

    >>> layout_warning((2, 1), 1, 2)
    "the log ran 1 rank(s) on each of 2 host(s) (its '# Rank' lines); the cluster gives 2 GPU(s) on each of 1 server(s)"
    """
    if layout is None or layout == (servers, gpus_per_server):
        return None
    return (f"the log ran {layout[1]} rank(s) on each of {layout[0]} host(s) (its '# Rank' lines); the cluster "
            f"gives {gpus_per_server} GPU(s) on each of {servers} server(s)")


def make_predictor(cluster: str | ClusterSpec, servers: int | None, gpus: int | None,
                   env: Mapping[str, str] | Iterable[str] = (), nccl_version: str | None = None,
                   gpus_per_thread: int = 1, max_memory_bytes: float | None = None) -> CollectivePredictor:
    """A predictor for every GPU (or ``gpus`` per server) of a preset or cluster file, predicting NCCL
    ``nccl_version`` (``--nccl-version``; default the cluster's ``nccl.version``, else 2.30.7), with
    ``gpus_per_thread`` GPUs driven by each host thread (nccl-tests' ``-g``; 1 = one process per GPU), its
    fabric runs held to ``max_memory_bytes`` (``max_memory``; None: half the machine's memory).

    ``cluster`` may also be a cluster already loaded (:func:`~gpuwait.runner.inputs.load_cluster`), so a
    caller that read it for other fields does not read the file again; it has its servers already.
    """
    spec = load_cluster(cluster, servers)
    topo = build_topology(spec)
    environment = nccl_env(env)
    comm = Communicator.world(topo, gpus_per_server=gpus)
    nccl = cluster_env(spec, environment).with_version(nccl_version, "nccl_version")
    return CollectivePredictor.create(comm, nccl, spec.routing, resolve_transport(spec.transport),
                                      gpus_per_thread=gpus_per_thread, max_memory_bytes=max_memory_bytes)


def devices(predictor: CollectivePredictor) -> list[Device]:
    """The ``# Rank ... device`` lines of the header: one per rank, named by server."""
    comm, topo = predictor.comm, predictor.comm.topo
    local = comm.local_gpu_index(np.arange(comm.n_ranks))
    return [Device(r, topo.server_name(int(comm.rank_server[r])), int(local[r]), topo.spec.server.gpu_model)
            for r in range(comm.n_ranks)]


@dataclass(frozen=True, eq=False)
class PerfSweep:
    """A predicted nccl-tests run: its rows, and per size what NCCL's model chose.

    ``to_dict()`` is the document ``gpuwait perf --json`` prints; the text table comes from
    :func:`gpuwait.report.perf.sweep_text`.
    """

    collective: NcclTestsCollective
    n_ranks: int
    cluster: str
    dtype: str
    rows: list[Row]
    choices: list[dict]            # size_bytes, algorithm, protocol, channels, limited_by, latency_s
    rounded: list[tuple[int, int]]  # (requested, run) sizes rounded down to whole elements per rank
    config: RunConfig
    devices: list[Device]
    estimates: list[CollectiveEstimate] = field(default_factory=list)  # per row: the model's parts
    params: PhysicalParams | None = None  # the cluster's physical parameters the estimates used
    unfitted_params: PhysicalParams | None = None  # the physical defaults (what a fit starts from)
    settings: list[Setting] = field(default_factory=list)  # QPs, algorithm... and where each came from
    memory_estimate_bytes: float | None = None  # what the sweep was estimated to allocate (estimated_sweep)
    notes: list[str] = field(default_factory=list)  # what the reader should know beside the rows

    def to_dict(self) -> dict:
        out = {"collective": self.collective.name, "n_ranks": self.n_ranks, "cluster": self.cluster,
               "settings": {s.name: str(s) for s in self.settings},
               "rows": [r.__dict__ for r in self.rows], "choices": self.choices,
               # the table's "# Avg bus bandwidth" line, as a sweep's perf row has it
               "avg_busbw_GBps": average_busbw_GBps(self.rows) if self.rows else None,
               "rounded_sizes": [{"requested": a, "run": b} for a, b in self.rounded], "notes": self.notes}
        if self.memory_estimate_bytes is not None:
            out["memory_estimate_bytes"] = self.memory_estimate_bytes
        return out

    def to_arrow(self):
        """The rows as a ``pyarrow.Table``, one column per nccl-tests field."""
        import pyarrow as pa

        return pa.Table.from_pylist([r.__dict__ for r in self.rows])


@dataclass(frozen=True)
class SweepArgs:
    """The nccl-tests arguments of a sweep (``-b -e -f -i -n -w -c -o -d -r``); sizes in bytes or
    with a binary K/M/G suffix, as nccl-tests reads them."""

    min_bytes: int | str = "32M"
    max_bytes: int | str = "32M"
    step_factor: int = 1
    step_bytes: int | str = "1M"
    iters: int = 20
    warmup_iters: int = 1
    check: int = 1
    redop: str = "sum"
    dtype: str = "float"
    root: int = 0

    def __post_init__(self) -> None:
        # checked before any fabric run, and named by its field (the sizes are, in _sweep_bytes); the CLI
        # names its option instead (gpuwait.cli.perf.SWEEP_OPTIONS)
        if self.dtype not in DTYPES:
            raise UnknownNameError(f"dtype: got {self.dtype!r}; expected one of {', '.join(DTYPES)}")
        # the bounds the command line's options hold (gpuwait.cli.perf: -f, -n, -w, -c, -r min=), here
        # for the Python API, which took step_factor=-2 or iters=0 and printed them in the header
        for name, least in (("step_factor", 1), ("iters", 1), ("warmup_iters", 0), ("check", 0), ("root", 0)):
            whole_number(name, getattr(self, name), least)
        if self.redop not in REDOPS:  # it is printed in every row: a name nccl-tests never prints is not one
            raise UnknownNameError(f"redop: got {self.redop!r}; expected one of {', '.join(REDOPS)}",
                                   hint="nccl-tests' -o all repeats the sweep per operation: every operation takes the "
                                        "same time in the model, so give one")


def _field_bytes(name: str, text: int | str) -> int:
    """``text`` read as nccl-tests reads a size, its error naming the field it came from (``min_bytes``,
    ``max_bytes`` or ``step_bytes``) rather than a bare "size", so a user with three sizes knows which."""
    try:
        return parse_size_arg(text)
    except SpecError as err:
        raise SpecError(f"{name}: {str(err).removeprefix('size: ')}", hint=err.hint) from None


def _sweep_bytes(args: SweepArgs) -> tuple[int, int, int]:
    """``(min_bytes, max_bytes, step_bytes)`` of ``args``; the one place both the size list and the
    sweep read them, so the two cannot disagree."""
    return (_field_bytes("min_bytes", args.min_bytes), _field_bytes("max_bytes", args.max_bytes),
            _field_bytes("step_bytes", args.step_bytes))


def sweep_sizes(op: str, args: SweepArgs, n_ranks: int) -> list[int]:
    """The sizes in bytes :func:`perf_sweep` predicts (after nccl-tests' rounding to whole elements per rank)."""
    coll = get_collective(op)
    lo, hi, step_bytes = _sweep_bytes(args)
    step = args.step_factor if args.step_factor > 1 else None
    return [size_and_count(coll.name, s, args.dtype, n_ranks).size_bytes
            for s in size_sweep(lo, hi, step, step_bytes)] if lo <= hi else []


def estimated_sweep(op: str, args: SweepArgs, cluster: str = "dgx-h100", servers: int | None = None,
                    gpus: int | None = None, env: Mapping[str, str] | Iterable[str] = (),
                    nccl_version: str | None = None, gpus_per_thread: int = 1, max_memory_bytes: float | None = None,
                    state: Callable[[CostEstimate], None] | None = None) -> PerfSweep:
    """:func:`perf_sweep`, its memory estimated first (:func:`gpuwait.runner.cost.estimate_perf`, before any
    fabric run) and refused over ``max_memory_bytes`` (``max_memory``; None: half the machine's memory), the
    limit its fabric runs are held to as well; ``state(estimate)`` is called before the run, and the sweep
    carries the estimate (``memory_estimate_bytes``)."""
    predictor = make_predictor(cluster, servers, gpus, env, nccl_version, gpus_per_thread, max_memory_bytes)
    return checked_sweep(op, args, predictor, max_memory_bytes, state)


def checked_sweep(op: str, args: SweepArgs, predictor: CollectivePredictor, max_memory_bytes: float | None = None,
                  state: Callable[[CostEstimate], None] | None = None) -> PerfSweep:
    """:func:`perf_sweep` on ``predictor``, estimated and held to ``max_memory_bytes`` first, as
    :func:`estimated_sweep` (which builds the predictor) does; a sweep case builds its own."""
    estimate = check_cost(estimate_perf(predictor, op, sweep_sizes(op, args, predictor.comm.n_ranks)),
                          max_memory_bytes)
    if state is not None:
        state(estimate)
    return replace(perf_sweep(op, args, predictor=predictor), memory_estimate_bytes=estimate.bytes)


def perf_sweep(op: str, args: SweepArgs, cluster: str = "dgx-h100", servers: int | None = None,
               gpus: int | None = None, env: Mapping[str, str] | Iterable[str] = (),
               nccl_version: str | None = None, predictor: CollectivePredictor | None = None,
               gpus_per_thread: int = 1) -> PerfSweep:
    """The rows nccl-tests would print for ``op`` and ``args`` on a preset or cluster file
    (``servers`` servers, ``gpus`` GPUs each, NCCL variables ``env`` over the process environment,
    NCCL release ``nccl_version`` or the cluster's, ``gpus_per_thread`` GPUs per host thread as
    nccl-tests' ``-g``), or with ``predictor`` (a sweep builds its own)."""
    coll = get_collective(op)
    lo, hi, step_bytes = _sweep_bytes(args)
    if lo > hi:
        raise SpecError(f"min_bytes: got {lo} bytes, more than the largest size ({hi} bytes); expected the smallest size at most the largest")
    if predictor is None:
        predictor = make_predictor(cluster, servers, gpus, env, nccl_version, gpus_per_thread)
    n = predictor.comm.n_ranks
    if coll.has_root and not 0 <= args.root < n:  # NCCL refuses it too (ncclInvalidArgument)
        raise SpecError(f"root: got {args.root}; expected a root rank from 0 to {n - 1}")
    rows, choices, rounded, estimates = [], [], [], []
    for size in size_sweep(lo, hi, args.step_factor if args.step_factor > 1 else None, step_bytes):
        sc = size_and_count(coll.name, size, args.dtype, n)
        if sc.rounded:
            rounded.append((size, sc.size_bytes))
        est = predictor.estimate(coll.name, sc.size_bytes)
        estimates.append(est)
        rows.append(make_row(coll.name, size, args.dtype, n, oop_time_s=est.time_s, ip_time_s=est.time_s,
                             redop=args.redop if coll.has_redop else None, root=args.root if coll.has_root else None,
                             wrong=0 if args.check else None))
        choices.append({"size_bytes": sc.size_bytes, "algorithm": est.algorithm, "protocol": est.protocol,
                        "channels": est.n_channels, "limited_by": est.limited_by, "latency_s": est.latency_s})
    # nccl-tests' nGpus is the GPUs of one thread (-g), not of a server
    config = RunConfig(n_gpus=predictor.gpus_per_thread, min_bytes=lo, max_bytes=hi, step_factor=args.step_factor,
                       step_bytes=step_bytes, warmup_iters=args.warmup_iters, iters=args.iters,
                       validation=args.check)
    notes = list(predictor.env.notes)
    return PerfSweep(coll, n, predictor.comm.topo.name, args.dtype, rows, choices, rounded, config, devices(predictor),
                     estimates, predictor.params,
                     physical_defaults(predictor.transport), [*predictor.settings(), platform_setting(predictor.env)],
                     notes=notes)
