"""``gpuwait calibrate`` around the fit: nccl-tests logs read, errors scored, results shown.

The fit and its cross-validation are :mod:`gpuwait.runner.calibrate`; this module reads the logs
(the telemetry layer sits above the runner) and scores the predictions with the summary ``gpuwait
perf --compare`` prints (:func:`gpuwait.report.perf.comparison_summary`), so both commands judge a
prediction the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rich.table import Table

from gpuwait.collectives.fit import MIN_GAIN
from gpuwait.collectives.physical import adjust
from gpuwait.errors import SpecError
from gpuwait.report.perf import (
    check_timed,
    comparison_summary,
    comparison_warnings,
    log_command_env,
    log_debug_info,
    log_layout,
    log_nccl_version,
    ranks_run,
    read_nccl_tests,
)
from gpuwait.runner.calibrate import (
    LEAVE_ONE_LOG_OUT,
    Calibration,
    MeasuredLog,
    calibrate,
    check_writable,
    overlay,
    params_dict,
    unshown_lines,
    write_overlay,
)
from gpuwait.runner.inputs import cluster_of_file, looks_like_file, sized_cluster
from gpuwait.runner.perf import placing_layout
from gpuwait.spec import read_yaml
from gpuwait.spec.reader import read_text_checked
from gpuwait.telemetry.nccl_debug import NcclDebugInfo
from gpuwait.topology import resolve_server

#: the three predictions of every size, in the order they are shown
VARIANTS = ("shipped", "calibrated", "defaults")


def read_log(path: Path, skipped: list[str] | None = None) -> MeasuredLog:
    """The sizes, times and busbw (each size's faster column, ``Row.steady_time_us``) of the nccl-tests log at
    ``path``; with ``skipped`` (a list) a row that cannot be read (cut short by a killed job, broken by another
    rank's output) is left out and reported there, as ``perf --compare`` warns of it."""
    return _read_log(path, skipped)[0]


def _read_log(path: Path, skipped: list[str] | None = None, servers: int | None = None, gpus: int | None = None,
              gpus_in_server: int = 0) -> tuple[MeasuredLog, list[str], NcclDebugInfo | None, int | None]:
    """:func:`read_log`, with what the log says of the hardware it ran on: its GPUs' names (the ``# Rank`` lines)
    and NCCL's INFO lines, which :func:`~gpuwait.report.perf.comparison_warnings` sets beside the cluster. A log
    that does not say how many ranks ran takes them from ``servers`` and ``gpus`` (``--servers``, ``-g``) on
    servers of ``gpus_in_server`` GPUs (:func:`~gpuwait.report.perf.ranks_run`); the last item is then the GPUs
    per server that placed it (None for a log that says its count)."""
    try:
        text = read_text_checked(path, "an nccl-tests log")
    except SpecError as err:
        raise SpecError(str(err).replace("cannot read the file", "cannot read the log"), hint=err.hint) from None
    log = read_nccl_tests(text, path, skipped)  # its errors name the file
    check_timed(log, path)
    rows = [r for r in log.rows if r.size_bytes > 0 and r.oop_time_us > 0]
    if not rows:
        raise SpecError(f"{path}: no result rows with a size and a time; expected an nccl-tests table",
                        hint="pass the stdout of e.g. all_reduce_perf -b 8 -e 8G -f 2")
    placed: list[str] = []
    n_ranks = ranks_run(log, path, servers, gpus, gpus_in_server, placed)
    if skipped is not None:
        skipped += [f"{path}: {w}" for w in placed]
    if log.collective is None:
        raise SpecError(f"{path}: the log does not say which collective ran",
                        hint="keep the '# Collective test starting' line")
    debug = log_debug_info(text)
    measured = MeasuredLog(str(path), str(log.collective), n_ranks, tuple(r.size_bytes for r in rows),
                           tuple(r.steady_time_us * 1e-6 for r in rows), tuple(r.steady_busbw_GBps for r in rows),
                           log_nccl_version(text, debug, log.build), log_layout(log), tuple(log_command_env(text).items()))
    placed_gpus = n_ranks // servers if log.n_ranks is None and servers else None
    return measured, [d.name for d in log.devices], debug, placed_gpus


@dataclass(frozen=True, eq=False)
class CalibrateReport:
    """A calibration, its cross-validated scores, and where the overlay went (``out`` None: not written)."""

    calibration: Calibration
    overlay: dict
    out: Path | None
    warnings: list[str] = field(default_factory=list)  # rows left out unread; a log's hosts unlike the cluster's

    def summaries(self, variant: str) -> dict[str, dict]:
        """Per log, and pooled over every log as ``"all"``: :func:`comparison_summary` of ``variant``."""
        per_log = {r.log.name: getattr(r, variant) for r in self.calibration.logs}
        out = {name: _scores(rows) for name, rows in per_log.items()}
        if len(per_log) > 1:
            out["all"] = _scores([row for rows in per_log.values() for row in rows])
        return out

    def to_dict(self) -> dict:
        c = self.calibration
        return {"cluster": c.cluster, "n_ranks": c.n_ranks, "rank_counts": list(c.rank_counts), "validation": c.validation,
                "considered": list(c.names), "not_shown": list(c.unshown), "fitted": list(c.freed),
                # the values the fit started from, in the units of their names: c.prior holds moves (the message
                # overhead a factor on the transport's), and printed as such read 1.284 s for 231 ns
                "prior": params_dict(adjust(c.defaults, dict(c.prior))),
                "not_separable": [list(g) for g in c.not_separable],
                "selection": {"freed": list(c.freed), "min_gain": MIN_GAIN,
                              "candidates": [{"freed": list(k.freed), "held_out_error": k.held_out_error,
                                              "gain": k.gain, "gain_se": k.gain_se}
                                             for k in c.selection.candidates],
                              "per_fold_freed": [list(f) for f in c.fold_freed]},
                "params": {"fitted": params_dict(c.params), "shipped": params_dict(c.shipped),
                           "defaults": params_dict(c.defaults)},
                "errors": {v: self.summaries(v) for v in VARIANTS},
                "logs": [{"log": r.log.name, "collective": r.log.collective, "nccl_version": r.nccl_version,
                          "nccl_version_source": r.nccl_source, **{v: getattr(r, v) for v in VARIANTS}}
                         for r in c.logs],
                "overlay": self.overlay, "out": None if self.out is None else str(self.out), "warnings": self.warnings}


def _scores(rows: list[dict]) -> dict:
    summary = comparison_summary(rows)
    return {k: summary[k] for k in ("busbw_sizes", "busbw_median_error_pct", "busbw_worst_error_pct",
                                    "floor_sizes", "floor_median_error_pct")}


def run_calibrate(paths: Sequence[Path], cluster: str, servers: int | None = None, gpus: int | None = None,
                  env: Mapping[str, str] | Iterable[str] = (), names: Iterable[str] | None = None,
                  out: Path | None = None, prior: Mapping[str, float] | None = None,
                  nccl_version: str | None = None) -> CalibrateReport:
    """Read ``paths``, fit (from ``prior``, each log as NCCL ``nccl_version`` or the version it prints:
    :func:`gpuwait.runner.calibrate.calibrate`), and write the overlay to ``out`` (checked before the fit runs)."""
    if out is not None:
        check_writable(out)
    seen: dict[Path, Path] = {}
    for path in map(Path, paths):
        if (first := seen.setdefault(path.resolve(), path)) is not path:
            raise SpecError(f"LOG: {path} is given twice (as {first}); expected each log once: leave-one-log-out would "
                            "score it with a fit on its own sizes", hint="drop the repeated path")
    # a cluster file read once: its cluster is sized and fitted, its own content overlaid
    raw = read_yaml(cluster) if looks_like_file(cluster) else None
    unsized = cluster if raw is None else cluster_of_file(raw, cluster)
    gpus_in_server = resolve_server(sized_cluster(unsized, 1, source=cluster).server).gpus
    warnings: list[str] = []
    read = [_read_log(Path(p), warnings, servers, gpus, gpus_in_server) for p in paths]
    logs = [log for log, _, _, _ in read]
    layouts = {log.layout for log in logs}
    layout = layouts.pop() if len(layouts) == 1 else None
    # a log placed by the flags (no '# Rank' lines) ran as many GPUs per server as placed it (nGpus when -g does not
    # say): the cluster must give that run, as perf --compare predicts it, not whole servers
    placed_gpus = {per_server for *_, per_server in read if per_server is not None}
    if gpus is None and len(placed_gpus) == 1:
        gpus = placed_gpus.pop()
    if gpus is None and layout is not None:  # the run as its '# Rank' lines place it, as perf --compare does
        if (placed := placing_layout(layout, servers, gpus_in_server)) is not None:
            servers, gpus = placed
    spec = sized_cluster(unsized, servers, source=cluster)
    # the GPUs and network a log ran on against the cluster's, as perf --compare warns of them (each log is
    # predicted as the release it prints, so a release unlike the model's is no warning here)
    gpu_model = resolve_server(spec.server).gpu_model
    warnings += [f"{log.name}: {w}" for log, devices, debug, _ in read
                 for w in comparison_warnings(None, devices, gpu_model, spec.transport.name, debug)]
    calibration = calibrate(logs, spec, None, gpus, env, names, prior, nccl_version,
                            unsized=None if servers is not None else unsized)
    warnings += calibration.warnings
    data = overlay(cluster, servers, calibration, raw)
    if out is not None:
        header = (f"# gpuwait calibrate: {cluster} with the collective model's physical parameters fitted to "
                  f"{', '.join(r.log.name for r in calibration.logs)}\n")
        write_overlay(out, data, header)
    return CalibrateReport(calibration, data, out, warnings)


# --------------------------------------------------------------------------------------------
# Shown to people
# --------------------------------------------------------------------------------------------

def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} %"


def error_table(report: CalibrateReport) -> Table:
    """busbw median/worst (>= 1 MiB) and the floor (<= 64 KiB) per log, before and after."""
    c = report.calibration
    how = ("each log predicted with the parameters fitted on the other logs" if c.validation == LEAVE_ONE_LOG_OUT
           else "each size predicted with the parameters fitted on the alternate sizes")
    ranks = " and ".join(map(str, c.rank_counts or (c.n_ranks,)))
    table = Table(title=f"error before -> after calibration on {c.cluster} ({ranks} ranks), "
                        f"cross-validated: {c.validation} ({how})", title_justify="left")
    for col in ("log", "busbw median >= 1 MiB", "busbw worst >= 1 MiB", "time floor <= 64 KiB"):
        table.add_column(col, justify="left" if col == "log" else "right")
    before, after = report.summaries("shipped"), report.summaries("calibrated")
    for name in before:
        b, a = before[name], after[name]
        table.add_row(Path(name).name if name != "all" else "all logs",
                      *(f"{_pct(b[k])} -> {_pct(a[k])}" for k in ("busbw_median_error_pct", "busbw_worst_error_pct",
                                                                  "floor_median_error_pct")))
    return table


#: how each parameter is shown: (scale, unit)
_SHOWN = {"launch_latency_s": (1e6, "us"), "net_step_latency_s": (1e6, "us"), "intra_step_latency_s": (1e6, "us"),
          "net_message_overhead_s": (1e6, "us"), "nic_efficiency": (1.0, "of the NIC's rate"),
          "nvlink_efficiency": (1.0, "of NCCL's NVLink figure"), "net_step_cycle_s": (1e6, "us")}


def selection_table(report: CalibrateReport) -> Table:
    """Forward selection on every log: each set of freed parameters tried and its held-out error."""
    c = report.calibration
    table = Table(title=f"parameters freed by forward selection (held-out error: mean |ln(predicted / measured)| of "
                        f"the time, {c.validation}; a parameter is freed only if the drop it brings is >= "
                        f"{MIN_GAIN * 100:.1f} % and >= its standard error over the sizes)", title_justify="left")
    for col in ("freed parameters", "held-out error", "drop", "standard error", "chosen"):
        table.add_column(col, justify="left" if col in ("freed parameters", "chosen") else "right")
    for k in c.selection.candidates:
        table.add_row(", ".join(k.freed) or "(none: as shipped)", f"{k.held_out_error * 100:.2f} %",
                      f"{k.gain * 100:+.2f} %" if k.freed else "", f"{k.gain_se * 100:.2f} %" if k.freed else "",
                      "yes" if k.freed == c.freed else "")
    return table


def params_table(report: CalibrateReport) -> Table:
    """The fitted values with units, beside the physical defaults and what the cluster ships with."""
    c = report.calibration
    table = Table(title="physical parameters (selected and fitted on every size of every log)", title_justify="left")
    for col in ("parameter", "physical default", "as shipped", "calibrated", "unit"):
        table.add_column(col, justify="left" if col in ("parameter", "unit") else "right")
    for name, (scale, unit) in _SHOWN.items():
        value = f"{getattr(c.params, name) * scale:.4g}"
        if name not in c.freed:
            value += " (not freed)" if name in c.names else " (not a candidate)"
        table.add_row(name, f"{getattr(c.defaults, name) * scale:.4g}", f"{getattr(c.shipped, name) * scale:.4g}",
                      value, unit)
    return table


def separability_lines(report: CalibrateReport) -> list[str]:
    """One line per group of parameters the logs cannot tell apart."""
    return [f"{', '.join(g[:-1])} and {g[-1]} are not separable on these logs (their effects on every time are "
            f"alike): the fit carries their joint effect, not which of them it is; logs at another node count "
            f"would separate them" for g in report.calibration.not_separable]


def closing_lines(report: CalibrateReport) -> list[str]:
    """Which parameters the logs could not tell apart, where the overlay went and how to use it."""
    lines = [f"{r.log.name}: predicted as NCCL {r.nccl_version} ({r.nccl_source})" for r in report.calibration.logs]
    lines += unshown_lines(report.calibration.names + report.calibration.unshown, report.calibration.names)
    lines += separability_lines(report)
    lines += [f"warning: {w}" for w in report.warnings]
    if report.out is None:
        return [*lines, "overlay not written: pass --out FILE to write it (then `gpuwait perf --cluster FILE ...`)"]
    if "cluster" in report.overlay:  # a scenario stays one: run and diagnose take it as they took the original
        return [*lines, f"wrote {report.out}: a scenario, e.g. `gpuwait run {report.out}`, `gpuwait diagnose "
                f"{report.out}` or `gpuwait perf all_reduce --cluster {report.out}`"]
    # a scenario's `cluster:` holds a preset name or fields, never a file name: the fields are copied there
    return [*lines, f"wrote {report.out}: use it wherever an option takes PRESET|FILE, e.g. `gpuwait perf all_reduce "
            f"--cluster {report.out}`; for run and diagnose, put its fields under a scenario's `cluster:`"]
