"""Fit the collective model's physical parameters to a user's nccl-tests logs (``gpuwait calibrate``).

Each log's sizes are predicted on the cluster the user names, exactly as ``gpuwait perf --compare``
does; every size becomes an :class:`~gpuwait.collectives.fit.Observation` (the model's
:class:`~gpuwait.collectives.physical.PipelineCosts` and the measured time: the faster of the
out-of-place and in-place columns, :attr:`~gpuwait.collectives.nccltests.Row.steady_time_us`). The fit starts
from the model as shipped (:data:`~gpuwait.collectives.fit.SHIPPED`, the public-table fit; a cluster's
own ``calibration`` section is not a starting point: a cluster calibrated before starts afresh), and
:func:`gpuwait.collectives.fit.select` frees, by cross-validation within the logs, only the parameters
that predict held-out sizes better (why: :mod:`gpuwait.collectives.fit`); the freed ones are then fitted.
NCCL's algorithm choice and the fabric simulation do not depend on these parameters, so one prediction
per size serves every fit.

The error a user sees is cross-validated, never scored on the sizes it was fitted to:

* two or more logs: **leave-one-log-out**, each log predicted with the parameters fitted on the others;
* one log: **alternate sizes**, two folds: its distinct sizes sorted, fitted on the even-numbered ones and
  scored on the odd ones, then the other way round, so every size is scored by a fit that did not see it
  (every row of a size on one side: a log of several tables, nccl-tests ``-d all``, repeats its sizes).

The selection is part of what is scored: inside each fold it is made again on that fold's training
sizes alone, split the same way (the other logs left out one at a time, or the one training log's
alternate sizes), so a held-out size informs neither which parameters are freed nor their values.
The values written to the overlay are selected and fitted on every size of every log. Parameters the
logs cannot tell apart (their effects on every logged time alike within 1 %, e.g. a launch latency and a
per-step latency on one node count) are reported as such: the fit reproduces their joint effect, and
which of them carries it is not known (nor, then, how the time grows with the node count). Logs are read (and the
errors summarised) by the layers above: :mod:`gpuwait.report.calibrate`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from gpuwait.collectives.fit import (
    FIT_NAMES,
    SHIPPED,
    Adjustment,
    Candidate,
    Observation,
    Selection,
    fit,
    not_separable,
    select,
    separable_groups,
)
from gpuwait.collectives.nccl_versions import newer_release_note
from gpuwait.collectives.nccltests import busbw_factor
from gpuwait.collectives.physical import (
    SPEC_NAMES,
    PhysicalParams,
    PipelineCosts,
    calibration_section,
    physical_defaults,
    pipelined_time_s,
)
from gpuwait.errors import SpecError
from gpuwait.fabric.perf import CollectiveEstimate
from gpuwait.runner.inputs import load_cluster, looks_like_file, read_cluster, sized_cluster
from gpuwait.runner.perf import (
    BANDWIDTH_MIN_BYTES,
    FLOOR_MAX_BYTES,
    layout_warning,
    log_gpus_per_server,
    log_release,
    make_predictor,
    nccl_env,
    unused_log_variables,
)
from gpuwait.spec import ClusterSpec, read_yaml
from gpuwait.topology import resolve_server
from gpuwait.units import format_time

#: how the error is cross-validated
LEAVE_ONE_LOG_OUT = "leave-one-log-out"
ALTERNATE_SIZES = "alternate sizes"

#: parameters a log shows at some sizes only, with what it takes: a latency lifts the latency floor (at 1 GiB a
#: 30 us launch latency is 0.4 % of the time, inside a log's noise), an efficiency slows the bandwidth sizes (at
#: 64 KiB the latency hides it). Without such sizes the logs cannot tell the parameter from noise, yet a fit
#: that freed it would carry it to the sizes no log timed: four sizes of 1-8 GiB (a published DGX A100 table)
#: freed a launch latency to its 30 us bound, which nearly tripled the predicted 8 B time.
SHOWN_AT: dict[str, tuple[Callable[[int], bool], str]] = {
    **dict.fromkeys(("launch_latency_s", "net_step_latency_s", "intra_step_latency_s"),
                    (lambda size: size <= FLOOR_MAX_BYTES, f"a size <= {FLOOR_MAX_BYTES // 2**10} KiB (the latency floor)")),
    **dict.fromkeys(("nic_efficiency", "nvlink_efficiency"),
                    (lambda size: size >= BANDWIDTH_MIN_BYTES, f"a size >= {BANDWIDTH_MIN_BYTES // 2**20} MiB (the bandwidth sizes)")),
}


def shown_names(sizes_bytes: Iterable[int | None], names: Sequence[str]) -> tuple[str, ...]:
    """Those of ``names`` that ``sizes_bytes`` show (:data:`SHOWN_AT`), in order: what a fit on those sizes may free.

    >>> shown_names([2**30, 2**33], ["launch_latency_s", "nvlink_efficiency"])
    ('nvlink_efficiency',)
    """
    sizes = [s for s in sizes_bytes if s is not None]
    return tuple(n for n in names if n not in SHOWN_AT or any(map(SHOWN_AT[n][0], sizes)))


def unshown_lines(names: Sequence[str], shown: Sequence[str]) -> list[str]:
    """One line per kind of size the logs lack, naming the parameters of ``names`` it leaves out of ``shown``."""
    by_need: dict[str, list[str]] = {}
    for name in names:
        if name not in shown:
            by_need.setdefault(SHOWN_AT[name][1], []).append(name)
    return [f"{', '.join(left)} not freed: no log times {need}, where {'they show' if len(left) > 1 else 'it shows'}; "
            f"{'they keep their' if len(left) > 1 else 'it keeps its'} shipped value{'s' if len(left) > 1 else ''}"
            for need, left in by_need.items()]


@dataclass(frozen=True)
class MeasuredLog:
    """What calibration needs from one nccl-tests log: its collective, rank count and, per size,
    the time and busbw of its faster column (``Row.steady_time_us``). ``name`` identifies it in errors and in ``fitted_on``."""

    name: str
    collective: str
    n_ranks: int
    sizes_bytes: tuple[int, ...]
    time_s: tuple[float, ...]
    busbw_GBps: tuple[float, ...]
    nccl_version: str | None = None  # the NCCL version the log prints, if any
    layout: tuple[int, int] | None = None  # (hosts, ranks per host) its '# Rank' lines show, if they do
    logged_env: tuple[tuple[str, str], ...] = ()  # NCCL variables its command line or INFO lines say the run set


@dataclass(frozen=True, eq=False)
class LogResult:
    """One log's sizes predicted three ways, as rows in the form :func:`gpuwait.report.perf.comparison_summary`
    scores: ``shipped`` (the model as shipped for the cluster), ``defaults`` (the physical defaults,
    nothing fitted) and ``calibrated`` (cross-validated: parameters fitted without these sizes)."""

    log: MeasuredLog
    shipped: list[dict]
    defaults: list[dict]
    calibrated: list[dict]
    nccl_version: str = ""     # the NCCL release the log's sizes were predicted as
    nccl_source: str = ""      # why that one (gpuwait.runner.perf.log_release)


@dataclass(frozen=True, eq=False)
class Calibration:
    """The outcome of :func:`calibrate`: fitted parameters, the per-log predictions, how they were scored."""

    cluster: str
    n_ranks: int
    names: tuple[str, ...]          # PhysicalParams fields the selection may free (--params)
    validation: str                 # LEAVE_ONE_LOG_OUT or ALTERNATE_SIZES
    defaults: PhysicalParams        # the physical defaults (nothing fitted)
    shipped: PhysicalParams         # what the cluster uses today
    params: PhysicalParams          # selected and fitted on every size of every log
    logs: list[LogResult]
    selection: Selection            # on every log: what was freed, each candidate's held-out error
    fold_freed: tuple[tuple[str, ...], ...] = ()  # what each cross-validation fold's own selection freed
    prior: Mapping[str, float] = field(default_factory=lambda: dict(SHIPPED))  # the moves it started from
    #: groups of candidate parameters whose effects on these logs' times are alike (fit.not_separable, at
    #: the fitted values): which of a group carries a time is not identifiable, only their joint effect
    not_separable: tuple[tuple[str, ...], ...] = ()
    warnings: tuple[str, ...] = ()  # where a log's run and the cluster differ (its hosts and GPUs per host)
    rank_counts: tuple[int, ...] = ()  # the logs' rank counts (several: each log predicted on its own run's size)
    #: candidates no log's sizes show (SHOWN_AT): kept at their shipped values, never tried
    unshown: tuple[str, ...] = ()
    #: the modelled NCCL variables the logs were predicted under, away from NCCL's defaults (--env and the
    #: process environment): recorded in the overlay, whose users are told when they predict under others
    nccl_env: Mapping[str, str] = field(default_factory=dict)

    @property
    def freed(self) -> tuple[str, ...]:
        """The parameters fitted (the others keep their shipped values)."""
        return self.selection.freed

    def section(self) -> dict:
        """The ``calibration`` section holding :attr:`params`, fitted on the logs."""
        return calibration_file_section(self.params, [r.log.name for r in self.logs], self.nccl_env)


def calibration_file_section(params: PhysicalParams, fitted_on: list[str] | None = None,
                             nccl_env: Mapping[str, str] | None = None) -> dict:
    """The ``calibration`` section of a cluster file holding ``params``, times with their unit as files
    require (``1.36us``), every value to 6 significant digits, and the NCCL variables the logs ran with
    (``nccl_env``; None: not recorded).

    >>> calibration_file_section(PhysicalParams(launch_latency_s=1.5e-6, nic_efficiency=0.91234567))["launch_latency"]
    '1.5us'
    """
    section = calibration_section(params, fitted_on, nccl_env)
    for name, spec_name in SPEC_NAMES.items():
        value = section[spec_name]
        section[spec_name] = format_time(value, digits=6) if name.endswith("_s") else float(f"{value:.6g}")
    return section


def fit_names(names: Iterable[str] | None) -> tuple[str, ...]:
    """The PhysicalParams fields named by ``--params`` (with or without the ``_s`` of the YAML name)."""
    if names is None:
        return FIT_NAMES
    by_yaml = {spec_name: name for name, spec_name in SPEC_NAMES.items()}
    out = []
    for given in (n.strip() for n in names):
        name = given if given in FIT_NAMES else by_yaml.get(given)
        if name is None:
            raise SpecError(f"--params: unknown parameter {given!r}; expected some of {', '.join(FIT_NAMES)}",
                            hint="separate names with commas, e.g. --params nic_efficiency,net_step_latency_s")
        if name not in out:
            out.append(name)
    if not out:
        raise SpecError("--params: got no names; expected some of " + ", ".join(FIT_NAMES))
    return tuple(out)


def _own_runs(logs: Sequence[MeasuredLog], gpus_in_server: int, gpus: int | None) -> list[tuple[int, int]]:
    """(servers, GPUs per server) each log ran on, from its own rank count, as ``perf --compare`` places a log
    without ``--servers``: ``gpus`` per server (``-g``), else as its ``# Rank`` lines place the ranks, else as
    many as a server holds."""
    runs = []
    for log in logs:
        per_server = gpus or log_gpus_per_server(log.n_ranks, log.layout, gpus_in_server)
        if log.n_ranks % per_server:
            raise SpecError(f"{log.name}: its {log.n_ranks} ranks do not fill servers of {per_server} GPUs",
                            hint="pass -g, the GPUs per server the logs used")
        runs.append((log.n_ranks // per_server, per_server))
    return runs


def calibrate(logs: Sequence[MeasuredLog], cluster: str | ClusterSpec, servers: int | None = None, gpus: int | None = None,
              env: Mapping[str, str] | Iterable[str] = (), names: Iterable[str] | None = None,
              prior: Mapping[str, float] | None = None, nccl_version: str | None = None,
              unsized: str | ClusterSpec | None = None) -> Calibration:
    """Calibrate to ``logs`` on a preset or cluster file: from ``prior`` (moves as
    :func:`~gpuwait.collectives.physical.adjust`; default the shipped :data:`SHIPPED`), free those of
    ``names`` (default: every parameter) that cross-validation within the logs supports, and fit them;
    the error is cross-validated with the selection inside each fold.

    Each log is predicted as the NCCL release :func:`~gpuwait.runner.perf.log_release` picks
    (``nccl_version``, else the one it prints, else the cluster's). Every log must have as many ranks as the cluster gives (``servers`` servers of ``gpus`` GPUs).
    With no ``servers``, a log whose rank count the cluster does not give (one log of 2 nodes on a 1-server
    preset; logs of several rank counts, the same cluster at 2 and 4 nodes, which separates a launch latency
    from a per-step one) is predicted on the cluster sized to its own run (:func:`_own_runs`), as
    ``perf --compare`` predicts it; that needs the cluster before sizing: ``cluster`` itself when it names a
    preset or file, else ``unsized`` (:func:`~gpuwait.runner.inputs.read_cluster`'s, for a caller that read
    the file).
    ``prior`` serves experiments (bench/calibrate_transfer.py: a public fit without the target's tables).
    ``cluster`` may be a cluster already loaded (:func:`~gpuwait.runner.inputs.load_cluster`, its servers its own).
    """
    chosen = fit_names(names)
    base = {**SHIPPED, **(prior or {})}
    if not logs:
        raise SpecError("calibrate: got no logs; expected at least one nccl-tests log")
    spec = load_cluster(cluster, servers)  # once: every release's predictor is built on it
    source = unsized if unsized is not None else cluster if isinstance(cluster, str) else None
    runs: list[tuple[int | None, int | None]] = [(None, gpus)] * len(logs)
    sized: dict[int | None, ClusterSpec] = {None: spec}
    cluster_ranks = spec.servers * (gpus or resolve_server(spec.server).gpus)
    if servers is None and source is not None and any(log.n_ranks != cluster_ranks for log in logs):
        runs = list(_own_runs(logs, resolve_server(spec.server).gpus, gpus))
        unsized_source = read_cluster(source) if isinstance(source, str) else source
        name = source if isinstance(source, str) else spec.name
        sized.update({n: sized_cluster(unsized_source, n, source=name) for n, _ in dict.fromkeys(runs)})
    versions = [log_release(log.nccl_version, nccl_version, spec.nccl.version) for log in logs]
    predictors = {(v, n, g): make_predictor(sized[n], None, g, env, v)
                  for (v, _), (n, g) in dict.fromkeys(zip(versions, runs, strict=True))}
    by_log = [predictors[v, n, g] for (v, _), (n, g) in zip(versions, runs, strict=True)]
    predictor = by_log[0]
    for log, run in zip(logs, by_log, strict=True):
        if log.n_ranks != run.comm.n_ranks:
            raise SpecError(f"{log.name}: the log has {log.n_ranks} ranks but the cluster gives {run.comm.n_ranks}",
                            hint="use --servers and -g to describe the run's servers and GPUs")
    warnings = tuple(f"{log.name}: {w}" for log, run in zip(logs, by_log, strict=True)
                     if (w := layout_warning(log.layout, run.comm.topo.spec.servers,
                                             run.comm.n_ranks // run.comm.topo.spec.servers)) is not None)
    warnings += tuple(note for v, _ in dict.fromkeys(versions) if (note := newer_release_note(v)) is not None)
    used = nccl_env(env)
    warnings += tuple(f"{log.name}: the log's run set {', '.join(f'{k}={v}' for k, v in unused.items())}, which this "
                      "calibration did not: pass them with --env (it applies to every log)" for log in logs
                      if (unused := unused_log_variables(dict(log.logged_env), used)))
    defaults = physical_defaults(predictor.transport)
    estimates = [[run.estimate(log.collective, size) for size in log.sizes_bytes]
                 for log, run in zip(logs, by_log, strict=True)]
    observations = [[Observation(_costs(e), defaults, t, log.name, size)
                     for e, t, size in zip(ests, log.time_s, log.sizes_bytes, strict=True)]
                    for log, ests in zip(logs, estimates, strict=True)]
    validation, folds = _folds(observations)
    held_out = [np.zeros(len(log.sizes_bytes)) for log in logs]
    fold_freed = []
    for train, tests in folds:
        selection, adjustment = select_and_fit([[o for o, keep in zip(group, picked, strict=True) if keep]
                                                for group, picked in zip(observations, train, strict=True)],
                                               chosen, base)
        fold_freed.append(selection.freed)
        for times, group, picked in zip(held_out, observations, tests, strict=True):
            for i in np.flatnonzero(picked):
                times[i] = _time_s(group[i], adjustment)
    selection, everything = select_and_fit(observations, chosen, base)
    results = [LogResult(log, _rows(log, ests, [e.time_s for e in ests]),
                         _rows(log, ests, [pipelined_time_s(_costs(e), defaults) for e in ests]),
                         _rows(log, ests, list(times)), version, source)
               for log, ests, times, (version, source) in zip(logs, estimates, held_out, versions, strict=True)]
    flat = [o for group in observations for o in group]
    shown = shown_names((o.size_bytes for o in flat), chosen)
    alike = separable_groups(shown, not_separable(flat, shown, everything.values))
    return Calibration(predictor.comm.topo.name, predictor.comm.n_ranks, shown, validation, defaults, predictor.params,
                       everything.apply(defaults), results, selection, tuple(fold_freed), base, tuple(alike), warnings,
                       tuple(sorted({log.n_ranks for log in logs})), tuple(n for n in chosen if n not in shown),
                       unused_log_variables(used, {}))  # those of `used` that move the model off NCCL's defaults


def select_and_fit(groups: list[list[Observation]], names: Sequence[str],
                   base: Mapping[str, float] = SHIPPED) -> tuple[Selection, Adjustment]:
    """Forward selection among those of ``names`` the sizes of ``groups`` show (:func:`shown_names`),
    cross-validated within ``groups`` (one list of sizes per log, split as :func:`_folds` splits), then the
    freed parameters fitted on every size, from ``base`` (the shipped values). Too few sizes to cross-validate (one log of one size) free nothing: ``base`` itself."""
    groups = [g for g in groups if g]
    flat = [o for g in groups for o in g]
    try:
        _, folds = _folds(groups)
    except SpecError:
        return Selection((), (Candidate((), float("nan")),)), Adjustment(dict(base))
    flat_folds = [(np.concatenate(train), np.concatenate(test)) for train, test in folds]
    selection = select(flat, flat_folds, shown_names((o.size_bytes for o in flat), names), base)
    return selection, fit(flat, selection.freed, base)


def _folds(observations: list[list[Observation]]) -> tuple[str, list[tuple[list[np.ndarray], list[np.ndarray]]]]:
    """(validation name, [(train mask per log, test mask per log)]): one fold per log when there are
    several, else the single log's sizes split by distinct size, alternately over the sorted sizes.

    Every row of one size falls on the same side: a log of several tables (nccl-tests ``-d all`` or
    ``-o all`` prints the sweep again per datatype and reduction) would otherwise score a size with a
    fit that saw it. A log of one row per size, in rising order, splits into its even and odd rows.
    """
    if len(observations) >= 2:
        folds = []
        for held in range(len(observations)):
            test = [np.full(len(group), i == held) for i, group in enumerate(observations)]
            folds.append(([~t for t in test], test))
        return LEAVE_ONE_LOG_OUT, folds
    sizes_bytes = np.array([o.size_bytes for o in observations[0]])
    distinct = np.unique(sizes_bytes)
    if len(distinct) < 2:
        raise SpecError(f"{observations[0][0].group}: one size is too few to fit and score on different sizes",
                        hint="give a log with a size sweep (nccl-tests -b 8 -e 8G -f 2) or several logs")
    even = np.isin(sizes_bytes, distinct[::2])
    return ALTERNATE_SIZES, [([even], [~even]), ([~even], [even])]


def _costs(estimate: CollectiveEstimate) -> PipelineCosts:
    """The parts ``estimate``'s time is made of."""
    # a predictor's estimate always carries them (CollectivePredictor._estimate builds every one);
    # only fabric.groups' placeholder for an empty group has none, and calibration never sees it
    assert estimate.costs is not None, f"{estimate.collective} estimate without its costs"
    return estimate.costs


def _time_s(observation: Observation, adjustment: Adjustment) -> float:
    return float(pipelined_time_s(observation.costs, adjustment.apply(observation.defaults)))


def _rows(log: MeasuredLog, estimates: list[CollectiveEstimate], predicted_s: list[float]) -> list[dict]:
    """Measured beside predicted per size, in the row form of ``gpuwait perf --compare``."""
    factor = busbw_factor(log.collective, log.n_ranks)
    rows = []
    for size, t_s, busbw, est, pred_s in zip(log.sizes_bytes, log.time_s, log.busbw_GBps, estimates, predicted_s,
                                             strict=True):
        rows.append({"size_bytes": size, "measured_time_us": t_s * 1e6, "predicted_time_us": pred_s * 1e6,
                     "measured_busbw_GBps": busbw, "predicted_busbw_GBps": size / pred_s * factor / 1e9,
                     "time_error_pct": 100 * (pred_s - t_s) / t_s, "algorithm": est.algorithm,
                     "protocol": est.protocol})
    return rows


def overlay(cluster: str, servers: int | None, calibration: Calibration, data: Any = None) -> dict:
    """The overlay file's content: the preset (``preset: NAME``) or the cluster file's own content (``data``
    when the caller has read it already), with ``servers`` when given and the fitted ``calibration``
    section. A scenario file stays a scenario (its ``cluster:`` section calibrated), so ``run`` and
    ``diagnose`` take the overlay as they took the file."""
    if data is None:
        data = read_yaml(cluster) if looks_like_file(cluster) else {"preset": cluster}
    scenario = isinstance(data, dict) and "cluster" in data
    base = data["cluster"] if scenario else data
    base = {"preset": base} if isinstance(base, str) else dict(base)
    if servers is not None:
        base["servers"] = servers
    base["calibration"] = calibration.section()
    return {**data, "cluster": base} if scenario else base


def write_overlay(path: Path, data: dict, header: str = "") -> None:
    """Write the overlay YAML; a path that cannot be written is one error."""
    import yaml

    try:
        path.write_text(header + yaml.safe_dump(data, sort_keys=False))
    except OSError as err:
        raise SpecError(f"--out: cannot write {path} ({err.strerror})", hint="choose a writable path") from None


def check_writable(path: Path) -> None:
    """Refuse an ``--out`` path that cannot be written before the (slower) fit runs."""
    import os

    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise SpecError(f"--out: {path} is a directory; expected a file path", hint="e.g. --out my-cluster.yaml")
    if not parent.is_dir():
        raise SpecError(f"--out: {parent} is not a directory", hint="create it first or choose another path")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise SpecError(f"--out: {path} is not writable", hint="choose a writable path")


def params_dict(params: PhysicalParams) -> dict[str, float]:
    return {f.name: float(getattr(params, f.name)) for f in fields(PhysicalParams)}
