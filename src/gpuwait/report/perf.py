"""Predicted nccl-tests runs as text, and set beside a real nccl-tests log (``gpuwait perf``)."""

from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rich.table import Table

from gpuwait.collectives.nccl_versions import nccl_release, newer_release_note
from gpuwait.collectives.nccltests import BuildInfo, get_collective, make_row
from gpuwait.collectives.tuning import (
    MODEL_NCCL_VERSION,
    NCCL_ALGORITHM_NAMES,
    NCCL_COLLECTIVE_NAMES,
    NCCL_PROTOCOL_NAMES,
)
from gpuwait.errors import SpecError
from gpuwait.report.nccltests import format_table
from gpuwait.runner.inputs import read_cluster, sized_cluster
from gpuwait.runner.perf import (
    BANDWIDTH_MIN_BYTES,
    FLOOR_MAX_BYTES,
    PerfSweep,
    layout_warning,
    log_gpus_per_server,
    log_release,
    make_predictor,
    nccl_env,
    unused_log_variables,
)
from gpuwait.spec.reader import read_text_checked
from gpuwait.telemetry.errors import TelemetryFormatError
from gpuwait.telemetry.nccl_debug import NcclDebugInfo, parse_nccl_debug
from gpuwait.telemetry.nccltests_log import NcclTestsLog, from_json, parse_nccl_tests_log
from gpuwait.topology import resolve_server
from gpuwait.topology.gpus import gpu_arch


def sweep_text(sweep: PerfSweep, report_algo: bool = False) -> str:
    """The nccl-tests stdout of a sweep; with ``report_algo``, the choice per size in ``#`` lines after it."""
    out = format_table(sweep.rows, config=sweep.config, devices=sweep.devices, program=sweep.collective.program)
    lines = out.splitlines()
    if report_algo:
        lines += [f"# {s.name}: {s}" for s in sweep.settings]
        lines.append("# size  algorithm  protocol  channels  limited by")
        lines += [f"# {c['size_bytes']:>12}  {c['algorithm']:>8}  {c['protocol']:>6}  {c['channels']:>3}  {c['limited_by']}"
                  for c in sweep.choices]
    if sweep.rounded:
        lines.append(f"# note: {len(sweep.rounded)} size(s) rounded down to whole {sweep.dtype} elements per rank, "
                     "as nccl-tests does")
    lines += [f"# note: {note}" for note in sweep.notes]
    return "\n".join(lines)


@dataclass(frozen=True, eq=False)
class PerfComparison:
    """A real nccl-tests log's sizes predicted on a cluster, beside the measured time and busbw."""

    log: Path
    collective: str
    n_ranks: int
    cluster: str
    rows: list[dict]
    summary: dict = field(default_factory=dict)  # see :func:`comparison_summary`
    warnings: list[str] = field(default_factory=list)  # where the log's run and the cluster differ
    nccl: dict = field(default_factory=dict)  # version predicted, modelled release, where the version came from

    def to_dict(self) -> dict:
        return {"log": str(self.log), "collective": self.collective, "n_ranks": self.n_ranks, "rows": self.rows,
                "summary": self.summary, "warnings": self.warnings, "nccl": self.nccl}


def choice_switches(choices: list[tuple[int, str, str]]) -> list[dict]:
    """Where consecutive (size, algorithm, protocol) choices change."""
    return [{"size_bytes": b[0], "from": f"{a[1]}/{a[2]}", "to": f"{b[1]}/{b[2]}"}
            for a, b in zip(choices, choices[1:]) if a[1:] != b[1:]]


def comparison_summary(rows: list[dict], seen: Sequence[tuple[int, str, str]] = ()) -> dict:
    """How far the prediction is from the log: the median and worst busbw error (sizes >= 1 MiB),
    the median time error of the latency floor (sizes <= 64 KiB), and where the algorithm or
    protocol changes: predicted, and seen when the log carries NCCL's tuning lines
    (``NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING``; nccl-tests itself does not print them)."""
    bw_rows = [r for r in rows if r["size_bytes"] >= BANDWIDTH_MIN_BYTES and r["measured_busbw_GBps"] > 0]
    floor_rows = [r for r in rows if r["size_bytes"] <= FLOOR_MAX_BYTES]
    bw = [abs(r["predicted_busbw_GBps"] / r["measured_busbw_GBps"] - 1) * 100 for r in bw_rows]
    floor = [abs(r["time_error_pct"]) for r in floor_rows]
    # by size: a log of several tables (nccl-tests -d all, -o all) runs the sizes again for each datatype or op,
    # and the choice depends on the size alone
    predicted = choice_switches(sorted({(r["size_bytes"], r["algorithm"], r["protocol"]) for r in rows}))
    # busbw_sizes and floor_sizes count rows: a log of several tables (or runs) repeats its sizes
    return {"busbw_sizes": len(bw), "busbw_median_error_pct": statistics.median(bw) if bw else None,
            "busbw_worst_error_pct": max(bw) if bw else None, "floor_sizes": len(floor),
            "busbw_distinct_sizes": len({r["size_bytes"] for r in bw_rows}),
            "floor_distinct_sizes": len({r["size_bytes"] for r in floor_rows}),
            "floor_median_error_pct": statistics.median(floor) if floor else None, "predicted_switches": predicted,
            "seen_switches": choice_switches(sorted(set(seen))) if seen else None}


_NCCL_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+)")


def _gpu_name(name: str) -> str | None:
    """The architecture a GPU name means (``NVIDIA H100 80GB HBM3`` -> ``H100``), or None when gpuwait does
    not know it (a driver that does not know the board prints ``NVIDIA Graphics Device``)."""
    try:
        return gpu_arch(name).name
    except SpecError:
        return None


#: The network names NCCL prints (``NCCL INFO Using network IB``) for each transport profile; the
#: aws-ofi-nccl plugin has called itself "AWS Libfabric", "Libfabric" and "OFI" across releases (on EFA, and on
#: Slingshot's CXI provider: eth-cscs/cscs-docs docs/software/communication/nccl.md sets NCCL_NET="AWS Libfabric",
#: HewlettPackard/shs-ccl-docs#35 "OFI"), Google's TCPX plugin "GPUDirectTCPX_v7"
#: (google/nccl-plugin-gpudirecttcpx src/nccl_plugin.cc), and nccl-rdma-sharp-plugins' verbs transport (HPC-X)
#: "IBext", then "IBext_v6" ... "IBext_v11" (src/ib_plugin.c, v2.0.0 and master): the plugin's version suffix is
#: dropped before matching. A transport not listed (tcpxo: its plugin is not published) is told apart only
#: from a network another transport's list names.
_NCCL_NETWORK = {"infiniband": ("IB", "IBext"), "rocev2": ("IB", "IBext"), "tcp": ("Socket",),
                 "efa": ("AWS Libfabric", "Libfabric", "OFI"), "slingshot": ("AWS Libfabric", "Libfabric", "OFI"),
                 "tcpx": ("GPUDirectTCPX",)}
_KNOWN_NETWORKS = frozenset(name for names in _NCCL_NETWORK.values() for name in names)
_PLUGIN_VERSION = re.compile(r"_v\d+$")


def log_debug_info(text: str) -> NcclDebugInfo | None:
    """The ``NCCL_DEBUG=INFO`` lines a log may carry beside its table, or None."""
    try:
        return parse_nccl_debug(text)
    except TelemetryFormatError:
        return None


def _ours(nccl_names: Mapping[str, str], spelled: str) -> str:
    """gpuwait's name of an NCCL algorithm/protocol/collective spelled as NCCL prints it (any case)."""
    return {nccl.lower(): ours for ours, nccl in nccl_names.items()}.get(spelled.lower(), spelled.lower())


def _seen_choices(debug: NcclDebugInfo | None, collective: str) -> list[tuple[int, str, str]]:
    """(size, algorithm, protocol) NCCL's tuning lines say it ran for ``collective``."""
    return [(size, _ours(NCCL_ALGORITHM_NAMES, algo), NCCL_PROTOCOL_NAMES.get(_ours(NCCL_PROTOCOL_NAMES, proto), proto))
            for coll, size, algo, proto in (debug.tuning if debug else ())
            if _ours(NCCL_COLLECTIVE_NAMES, coll) == collective]


def comparison_warnings(version: str | None, device_names: list[str], server_gpu_model: str, transport: str,
                        debug: NcclDebugInfo | None = None, model_version: str | None = None,
                        cluster_transport: str | None = None) -> list[str]:
    """Where the log's run differs from what the cluster describes: its GPU model, its network
    (when NCCL's INFO lines say it) against the ``transport`` the prediction ran on (NCCL's socket transport,
    ``tcp``, when the job's variables turn the cluster's ``cluster_transport`` off), or an NCCL release
    (``version``, :func:`log_nccl_version`) whose tuning differs from the model's."""
    out = []
    ours = _gpu_name(server_gpu_model) or server_gpu_model
    theirs = sorted({arch for name in device_names if (arch := _gpu_name(name)) is not None})
    unknown = sorted({name for name in device_names if _gpu_name(name) is None})
    if theirs and theirs != [ours]:
        out.append(f"the log ran on {', '.join(theirs)} GPUs; the cluster has {ours} ({server_gpu_model})")
    if unknown:  # a name that says nothing of the model is neither a match nor a mismatch
        out.append(f"the log names its GPUs {', '.join(map(repr, unknown))}, which gpuwait cannot read as a GPU "
                   f"model: not checked against the cluster's {ours}")
    network = _log_network(debug)
    expected = _NCCL_NETWORK.get(transport)
    name = _PLUGIN_VERSION.sub("", network) if network else None
    if name and (name not in expected if expected else name in _KNOWN_NETWORKS):
        names = f" ({' or '.join(expected)})" if expected else ""
        which = (f"the cluster's transport is {transport}{names}" if cluster_transport in (None, transport) else
                 f"the prediction ran on {transport}{names}, the cluster's {cluster_transport} turned off by the "
                 "job's NCCL variables")
        out.append(f"the log's NCCL used network {network}; {which}")
    predicted = model_version or MODEL_NCCL_VERSION
    if version and _release_of(version) is not _release_of(predicted):
        out.append(f"the log ran NCCL {version}; gpuwait predicted NCCL {predicted}'s algorithm "
                   "and protocol choices, which can differ")
    if (newer := newer_release_note(predicted)) is not None:
        out.append(newer)
    return out


def _log_network(debug: NcclDebugInfo | None) -> str | None:
    """The network NCCL says it used: its ``Using network X`` line, else the one network its connection lines
    go through (``via NET/Socket/0``: NCCL_DEBUG_SUBSYS=INIT,NET without the ``Using network`` line)."""
    if debug is None:
        return None
    nets = {c.transport.removeprefix("NET/") for c in debug.connections if c.transport.startswith("NET/")}
    return debug.network or (nets.pop() if len(nets) == 1 else None)


def log_nccl_version(log_text: str, debug: NcclDebugInfo | None = None, build: BuildInfo | None = None) -> str | None:
    """The NCCL version a log prints (``NCCL version 2.26.2+cuda12.8``, NCCL's INFO line, or the library
    nccl-tests 2.17.4 and later name in their first line, ``nccl-library=22907``), or None."""
    found = _NCCL_VERSION.search(log_text)
    if found:
        return found.group(1)
    if debug is not None and debug.version:
        return debug.version
    return build.library_version if build is not None else None


#: an NCCL variable set on a log's command line (``-x NAME=VALUE`` of Open MPI, ``export NAME=VALUE``,
#: ``NAME=VALUE cmd``, ``-e``/``--env NAME=VALUE``), or NCCL's own INFO line ``NCCL_X set by environment to V``
_COMMAND_VARIABLE = re.compile(r"(?:^|[\s'\"])(NCCL_[A-Z0-9_]+)=([^\s'\"\\]+)")
_SET_BY_ENVIRONMENT = re.compile(r"NCCL INFO (NCCL_[A-Z0-9_]+) set by environment to ([^\s.]+(?:\.[^\s.]+)*)")


def log_command_env(text: str) -> dict[str, str]:
    """The NCCL variables a log says its run set: on a command line before its table (a line that is not a
    ``#`` comment, nor NCCL's own output) or in NCCL's ``... set by environment to ...`` INFO lines.

    >>> log_command_env("mpirun -np 16 -x NCCL_ALGO=Ring -x NCCL_MIN_CTAS=24 ./all_reduce_perf\\n# NCCL_PROTO=LL")
    {'NCCL_ALGO': 'Ring', 'NCCL_MIN_CTAS': '24'}
    >>> log_command_env("h:1:2 [0] NCCL INFO NCCL_IB_QPS_PER_CONNECTION set by environment to 2.")
    {'NCCL_IB_QPS_PER_CONNECTION': '2'}
    """
    out: dict[str, str] = {}
    for line in text.splitlines():
        if (found := _SET_BY_ENVIRONMENT.search(line)) is not None:
            out[found[1]] = found[2]
        elif not line.lstrip().startswith("#") and "NCCL INFO" not in line and "NCCL WARN" not in line:
            out.update(_COMMAND_VARIABLE.findall(line))
    return out


def _release_of(version: str):
    """The modelled release of ``version``, or None when gpuwait does not model it (older than 2.18)."""
    try:
        return nccl_release(version)
    except SpecError:
        return None


def _nccl_choice(log_version: str | None, asked: str | None, cluster_version: str | None) -> dict:
    """Which NCCL release a comparison predicts (:func:`gpuwait.runner.perf.log_release`), and why."""
    version, source = log_release(log_version, asked, cluster_version)
    return {"version": version, "model_release": nccl_release(version, "nccl_version").version, "source": source}


def read_nccl_tests(text: str, path: Path, skipped: list[str] | None = None) -> NcclTestsLog:
    """A log as ``perf --compare`` and ``calibrate`` take it: nccl-tests' stdout (rows it cannot read left out
    and reported in ``skipped``, as is a text of several runs), or the JSON file it writes with ``-J`` (builds
    from late 2025)."""
    if text.lstrip().startswith("{"):
        try:
            return from_json(text)
        except SpecError as err:  # from_json's own hint names the library's text reader: here both are read
            raise SpecError(f"{path}: {err}", hint="pass the JSON file nccl-tests -J wrote, unedited, or the run's "
                            "stdout") from None
    try:
        log = parse_nccl_tests_log(text, source=str(path), skipped=skipped)
    except SpecError as err:  # several logs may be read in one command: the error says which
        raise SpecError(f"{path}: {err}", hint=err.hint) from None
    if log.runs > 1 and skipped is not None:  # runs appended to one file: their rows mix, later hosts are dropped
        skipped.append(f"{path}: the log holds {log.runs} runs ({log.runs} '# nThread' lines), read as one sweep: "
                       "split it into one log per run to compare or calibrate each")
    return log


def check_timed(log: NcclTestsLog, path: Path) -> None:
    """Refuse a log whose time column is ``cputime`` (nccl-tests ``-C 1``): the host's time to enqueue the
    calls, not the collective's (src/common.cu: timeUsec is cputimeSec, the loop's time before completeColl,
    while algbw and busbw keep the completed time), which a prediction cannot be set beside."""
    if log.time_column == "cputime":
        raise SpecError(f"{path}: its time column is cputime (nccl-tests -C 1: the host's time to enqueue the calls, "
                        "not the collective's); expected the time column nccl-tests prints without -C", hint="rerun nccl-tests without -C")


def log_layout(log: NcclTestsLog) -> tuple[int, int] | None:
    """(hosts, ranks per host) of the run, from the ``# Rank ... on HOST`` lines when they list every rank and
    every host runs as many; else None (lines trimmed, or an uneven run).

    >>> from gpuwait.collectives.nccltests import Device
    >>> log = NcclTestsLog(rows=(), devices=tuple(Device(r, f"node{r // 2}", r % 2, "NVIDIA L40S") for r in range(4)),
    ...                    n_ranks=4)
    >>> log_layout(log)
    (2, 2)
    """
    if not log.devices or len(log.devices) != log.n_ranks:
        return None
    per_host = Counter(d.host for d in log.devices)
    counts = set(per_host.values())
    return (len(per_host), counts.pop()) if len(counts) == 1 else None


#: what a log that does not say how many ranks ran (no '# Rank' lines, and a collective whose sizes and busbw do
#: not tell: broadcast, reduce) needs, by ``perf --compare`` and ``calibrate`` alike
NO_RANKS_HINT = "pass --servers (and -g) as the run placed its ranks, or keep the log's '# Using devices' lines"


def ranks_run(log: NcclTestsLog, path: Path, servers: int | None, gpus: int | None, gpus_in_server: int,
              warnings: list[str]) -> int:
    """How many ranks ``log`` ran, by ``perf --compare`` and ``calibrate`` alike: as the log says, else as the
    flags place the run: ``servers`` (``--servers``) of ``gpus`` (``-g``; else the GPUs one process drove,
    nThread x nGpus > 1; else a whole server of ``gpus_in_server``). Nothing in such a log can check that count, so
    ``warnings`` gets a line saying so; without ``--servers`` the flags place nothing, and the log is refused.

    >>> ranks_run(NcclTestsLog(rows=(), collective="broadcast"), Path("b.log"), 2, None, 8, notes := []), notes
    (16, ['the log does not say how many ranks ran; predicted as --servers 2 x 8 GPU(s) = 16 ranks'])
    """
    if log.n_ranks is not None:
        return log.n_ranks
    if servers is None:
        raise SpecError(f"{path}: the log does not say how many ranks ran (no '# Rank' lines, and its sizes and "
                        "busbw do not tell)", hint=NO_RANKS_HINT)
    process_gpus = log.config.process_gpus if log.config else 1
    per_server = gpus or (process_gpus if process_gpus > 1 else gpus_in_server)
    warnings.append(f"the log does not say how many ranks ran; predicted as --servers {servers} x "
                    f"{per_server} GPU(s) = {servers * per_server} ranks")
    return servers * per_server


def compare_log(op: str, log_path: Path, cluster: str, servers: int | None = None, gpus: int | None = None,
                env=(), nccl_version: str | None = None) -> PerfComparison:
    """Predict the collective, sizes and rank count of the nccl-tests log at ``log_path`` on ``cluster``,
    as NCCL ``nccl_version`` would (default: the version the log prints, if gpuwait models it)."""
    try:
        text = read_text_checked(log_path, "an nccl-tests log")
    except SpecError as err:
        raise SpecError(f"--compare: {err}", hint=err.hint) from None
    # a row cut short (a killed job) or broken by another rank's output is left out and named in a warning
    unreadable: list[str] = []
    log = read_nccl_tests(text, log_path, unreadable)
    check_timed(log, log_path)
    collective = get_collective(op).name
    if log.collective is not None and log.collective != collective:  # never predict another collective unasked
        raise SpecError(f"collective: got {op!r}, but {log_path} ran {log.collective}; expected {log.collective}",
                        hint=f"gpuwait perf {log.collective} --compare {log_path}")
    source = read_cluster(cluster)  # the file read once: sized below for one server, then for the log's run
    one_server = sized_cluster(source, 1, source=cluster)
    placed_by_flags: list[str] = []
    try:
        n_ranks = ranks_run(log, log_path, servers, gpus, resolve_server(one_server.server).gpus, placed_by_flags)
    except SpecError as err:
        raise SpecError(f"--compare: {err}", hint=err.hint) from None
    layout = log_layout(log)
    per_server = gpus or log_gpus_per_server(n_ranks, layout, resolve_server(one_server.server).gpus, servers,
                                             log.config.process_gpus if log.config else 1)
    if n_ranks % per_server:
        raise SpecError(f"--compare: {n_ranks} ranks do not fill servers of {per_server} GPUs", hint="pass -g")
    debug = log_debug_info(text)
    printed_version = log_nccl_version(text, debug, log.build)
    nccl = _nccl_choice(printed_version, nccl_version, one_server.nccl.version)
    # the log's nGpus: GPUs one thread drives (nccl-tests -g), each call issued on all of them in turn
    per_thread = min(log.config.n_gpus, per_server) if log.config and log.config.n_gpus > 1 else 1
    n_servers = servers or n_ranks // per_server
    predictor = make_predictor(sized_cluster(source, n_servers, source=cluster), None, per_server, env, nccl["version"],
                               per_thread)
    if predictor.comm.n_ranks != n_ranks:
        raise SpecError(f"--compare: the log has {n_ranks} ranks but the cluster gives {predictor.comm.n_ranks}",
                        hint="use --servers and -g to match the run")
    rows, skipped = [], []
    for row in log.rows:
        # each size's faster column (Row.steady_time_us), as calibrate and the published-table scores take it:
        # a one-off cost in nccl-tests' timed loop only adds time, and the prediction is a warmed-up call
        measured_us = row.steady_time_us
        if not measured_us > 0:  # nccl-tests prints 0.00 below its resolution: nothing to compare against
            skipped.append(row.size_bytes)
            continue
        est = predictor.estimate(collective, row.size_bytes)
        pred = make_row(collective, row.size_bytes, row.dtype, n_ranks, oop_time_s=est.time_s, ip_time_s=est.time_s)
        rows.append({"size_bytes": row.size_bytes, "measured_time_us": measured_us, "predicted_time_us": pred.oop_time_us,
                     "measured_busbw_GBps": row.steady_busbw_GBps, "predicted_busbw_GBps": pred.oop_busbw_GBps,
                     "measured_column": "in-place" if measured_us != row.oop_time_us else "out-of-place",
                     "time_error_pct": 100 * (pred.oop_time_us - measured_us) / measured_us,
                     "algorithm": est.algorithm, "protocol": est.protocol})
    topo = predictor.comm.topo
    seen = _seen_choices(debug, collective)
    warnings = comparison_warnings(printed_version, [d.name for d in log.devices], resolve_server(topo.spec.server).gpu_model,
                                   predictor.transport.name, debug, nccl["version"], topo.spec.transport.name)
    if (placed := layout_warning(layout, n_servers, per_server)) is not None:
        warnings.append(placed)
    if unused := unused_log_variables(log_command_env(text), nccl_env(env)):
        warnings.append(f"the log's run set {', '.join(f'{k}={v}' for k, v in unused.items())}, which this prediction "
                        "did not: pass them with --env to predict that run")
    if (fitted := predictor.env.calibration_note) is not None:  # the overlay's fit was checked only under its logs' env
        warnings.append(fitted)
    warnings += placed_by_flags + unreadable
    if skipped:
        warnings.append(f"{len(skipped)} row(s) skipped, their measured time is 0.00 us (sizes "
                        + ", ".join(map(str, skipped[:3])) + (", ..." if len(skipped) > 3 else "") + ")")
    if not rows:
        raise SpecError(f"--compare: {log_path}: every row's measured time is 0.00 us; expected an nccl-tests table "
                        "with times", hint="rerun nccl-tests with larger sizes (-b)")
    return PerfComparison(log_path, collective, n_ranks, topo.name, rows, comparison_summary(rows, seen), warnings,
                          nccl)


def comparison_table(comparison: PerfComparison) -> Table:
    """Measured against predicted time and busbw per size, with NCCL's choice."""
    c = comparison
    table = Table(title=f"{c.collective} on {c.n_ranks} ranks: {c.log.name} (each size's faster column) vs {c.cluster}",
                  title_justify="left")
    for col in ("size (B)", "measured us", "predicted us", "time err", "measured busbw", "predicted busbw", "choice"):
        table.add_column(col, justify="right")
    for r in c.rows:
        table.add_row(str(r["size_bytes"]), f"{r['measured_time_us']:.2f}", f"{r['predicted_time_us']:.2f}",
                      f"{r['time_error_pct']:+.1f} %", f"{r['measured_busbw_GBps']:.2f}", f"{r['predicted_busbw_GBps']:.2f}",
                      f"{r['algorithm']}/{r['protocol']}")
    return table


def _rows_of_sizes(rows: int, sizes: int) -> str:
    """``14 sizes``, or ``28 rows (14 sizes)`` where a log times its sizes more than once.

    >>> _rows_of_sizes(14, 14), _rows_of_sizes(28, 14)
    ('14 sizes', '28 rows (14 sizes)')
    """
    return f"{sizes} sizes" if rows == sizes else f"{rows} rows ({sizes} sizes)"


def summary_lines(comparison: PerfComparison) -> list[str]:
    """The comparison in one line, which measured column it read, the predicted switch points, and each
    warning."""
    s = comparison.summary
    parts = []
    if s.get("busbw_sizes"):
        parts.append(f"busbw error over {_rows_of_sizes(s['busbw_sizes'], s['busbw_distinct_sizes'])} >= 1 MiB: "
                     f"median {s['busbw_median_error_pct']:.1f} %, worst {s['busbw_worst_error_pct']:.1f} %")
    if s.get("floor_sizes"):
        parts.append(f"time error over {_rows_of_sizes(s['floor_sizes'], s['floor_distinct_sizes'])} <= 64 KiB: "
                     f"median {s['floor_median_error_pct']:.1f} %")
    if comparison.nccl:
        n = comparison.nccl
        release = ("" if n["model_release"] == n["version"] else
                   f", modelled by the tuning of {nccl_release(n['model_release']).covers}")
        parts.append(f"predicted as NCCL {n['version']} ({n['source']}{release})")
    lines = ["; ".join(parts)] if parts else []
    in_place = sum(r.get("measured_column") == "in-place" for r in comparison.rows)
    repeated = len(comparison.rows) > len({r["size_bytes"] for r in comparison.rows})
    lines.append(f"measured: each size's faster column, out-of-place or in-place (in-place at {in_place} of "
                 f"{len(comparison.rows)} {'rows' if repeated else 'sizes'})")
    for which in ("predicted", "seen"):
        if s.get(f"{which}_switches"):
            lines.append(f"{which} switches: " + ", ".join(f"{w['from']} -> {w['to']} at {w['size_bytes']} B"
                                                          for w in s[f"{which}_switches"]))
    return lines + [f"warning: {w}" for w in comparison.warnings]
