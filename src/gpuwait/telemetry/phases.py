"""Per-collective port bytes from port counters sampled over time and the collectives' time windows.

A port counter (``PortXmitData``, ``tx_bytes_phy``) counts bytes, not which collective sent them.
What an operator can have is the counter sampled at a fixed interval (a Prometheus scrape, a
``perfquery`` or sysfs loop, UFM's telemetry) and the time windows each collective ran in (PyTorch
profiler NCCL kernels, NCCL's own timestamps). Aligning the two gives each collective's bytes on
each port: the bytes of an interval that only one collective's windows cover are that collective's;
an interval two collectives share is split in proportion to each one's rate on that port times its
time in the interval, the rates being the steady ones that best explain every interval's increase
(non-negative least squares over the intervals; a collective's intervals alone pin it exactly).

The reconstruction is exact when every collective runs at a steady rate on a port (the split of a
shared interval is then right), and traffic outside the collectives (dataset reads) is steady;
whatever the collectives' rates, a collective's error on a port is at most the bytes of the
intervals it does not fill alone, which :func:`phase_bytes_from_series` returns as ``uncertain``.
Those last at most the time it overlaps other collectives plus two intervals per window (its
edges), so a collective with ``n`` windows is off by at most ``(overlap + 2 n dt)`` seconds of the
port's peak rate: sample faster than the collectives are long.

Series (gpuwait's own names; a real cluster fills them from the tools above):

* ``gpuwait_port_transmit_bytes_total{link}`` - bytes sent on a link since the run began, one sample
  per scrape (timestamped);
* ``gpuwait_phase_window_seconds{phase, window, edge}`` - where each window of each collective
  starts and ends (``edge`` ``start``/``end``), in seconds on the counters' clock. In the value, not
  the timestamp: Prometheus text keeps timestamps to the millisecond, shorter than some windows.

A simulated run gives the windows from its task table (the union over ranks of each collective's
tasks, per step) and counters that carry each collective's per-step bytes (``LinkStats.phase_bytes``)
at a steady rate over its windows, plus the rest (dataset reads) spread over the step: the flow
model gives per-collective totals, not how a rate varies inside a window.

Examples
--------
>>> import numpy as np
>>> stamps = np.array([0.0, 1.0, 2.0, 3.0])
>>> counters = np.array([[0.0], [10.0], [15.0], [25.0]])  # one port: 10 B/s, then 5, then 10
>>> got = phase_bytes_from_series(stamps, counters, {"a": [(0.0, 1.5)], "b": [(1.5, 3.0)]})
>>> got.bytes["a"].tolist(), got.bytes["b"].tolist(), got.uncertain["a"].tolist()
([12.5], [12.5], [5.0])
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

from gpuwait.errors import SpecError
from gpuwait.steps.result import CollectiveStat, RunResult
from gpuwait.telemetry.metricset import MetricInfo, MetricSet
from gpuwait.topology.model import Topology

PORT_BYTES_METRIC = "gpuwait_port_transmit_bytes_total"
PHASE_WINDOW_METRIC = "gpuwait_phase_window_seconds"
#: Prometheus text keeps timestamps in whole milliseconds (exposition format): a finer scrape would collapse
MIN_SCRAPE_INTERVAL_S = 1e-3
#: an interval a column covers for less than this share of its length counts as not covered (float rounding)
_COVER_EPS = 1e-9
#: a phase's share of a port's bytes below this fraction of them is the least-squares solve's rounding
_SOLVER_REL = 1e-6

INFO = {
    PORT_BYTES_METRIC: MetricInfo("counter", "Bytes sent on a link since the run began, sampled every scrape interval."),
    PHASE_WINDOW_METRIC: MetricInfo("gauge", "Start or end (edge) of one time window of a collective (phase), seconds "
                                    "on the port counters' clock."),
}


@dataclass(frozen=True)
class PhaseBytes:
    """Per collective label: bytes per link (over the series, or per step once divided) and the part
    of them read from intervals shared with other traffic (the error bound)."""

    bytes: dict[str, np.ndarray]
    uncertain: dict[str, np.ndarray]


def _merge(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for a, b in sorted(intervals):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _label_of(name: str, group: str, labels: list[str]) -> str | None:
    """The collective label (``"pp sendrecv"``) of a task (``"pp recv mb3"``, ``"tp all_gather fwd mb0"``)."""
    mine = [lab for lab in labels if lab.split(" ", 1)[0] == group]
    words = name.split()
    verb = words[1] if len(words) > 1 else ""
    for lab in mine:
        collective = lab.split(" ", 1)[-1]
        if verb == collective or (verb in ("send", "recv") and collective == "sendrecv"):
            return lab
    return mine[0] if len(mine) == 1 else None


def phase_windows(result: RunResult) -> dict[str, list[list[tuple[float, float]]]]:
    """Per collective label, per step: the merged time windows its tasks ran in (union over ranks)."""
    tasks = result.tasks
    labels = [c.label for c in result.collectives]
    out: dict[str, list[list[tuple[float, float]]]] = {lab: [[] for _ in range(result.steps)] for lab in labels}
    comm = np.flatnonzero(tasks.kind == "comm")
    for i in comm.tolist():
        label = _label_of(str(tasks.name[i]), str(tasks.group[i]), labels)
        step = int(tasks.step[i])
        if label is not None and 0 <= step < result.steps:
            out[label][step].append((float(tasks.start_s[i]), float(tasks.end_s[i])))
    return {lab: [_merge(w) for w in steps] for lab, steps in out.items() if any(steps)}


def _step_bounds(result: RunResult) -> np.ndarray:
    """Start of every step and end of the last (cumulative step times)."""
    return np.concatenate([[0.0], np.cumsum(np.asarray(result.step_times_s, dtype=float))])


def _cumulative(stamps_s: np.ndarray, windows: list[tuple[float, float]]) -> np.ndarray:
    """Seconds of ``windows`` (merged) before each stamp."""
    out = np.zeros(len(stamps_s))
    for a, b in windows:
        out += np.clip(stamps_s - a, 0.0, b - a)
    return out


def port_byte_series(result: RunResult, topo: Topology, interval_s: float) -> MetricSet:
    """The run's network port counters sampled every ``interval_s`` and its collectives' windows
    (see the module doc for the series and the steady-rate assumption)."""
    if not (isinstance(interval_s, (int, float)) and math.isfinite(interval_s) and interval_s >= MIN_SCRAPE_INTERVAL_S):
        raise SpecError(f"scrape interval: got {interval_s!r} s; expected a number of seconds >= {MIN_SCRAPE_INTERVAL_S} "
                        "(Prometheus timestamps are whole milliseconds)")
    bounds = _step_bounds(result)
    stamps = np.arange(0.0, bounds[-1] + interval_s, interval_s)
    stamps[-1] = min(stamps[-1], bounds[-1]) if len(stamps) > 1 else stamps[-1]
    links = np.flatnonzero(topo.network_links)
    phase = {lab: np.asarray(b, dtype=float)[links] for lab, b in result.links.phase_bytes.items()}
    counts = np.zeros((len(stamps), len(links)))
    windows = phase_windows(result)
    rest = np.asarray(result.links.bytes_per_step, dtype=float)[links] - sum(phase.values(), np.zeros(len(links)))
    # window edges carry no timestamp, port counter samples do
    samples: list[tuple[str, dict[str, str], float] | tuple[str, dict[str, str], float, float]] = []
    for step in range(result.steps):
        lo, hi = bounds[step], bounds[step + 1]
        counts += np.outer(np.clip(stamps - lo, 0.0, hi - lo) / max(hi - lo, 1e-300), np.clip(rest, 0.0, None))
        for lab, per_step in windows.items():
            w = per_step[step]
            total = sum(b - a for a, b in w)
            if total > 0 and lab in phase:
                counts += np.outer(_cumulative(stamps, w) / total, phase[lab])
                samples += [(PHASE_WINDOW_METRIC, {"phase": lab, "window": f"{step}.{k}", "edge": edge}, t)
                            for k, (a, b) in enumerate(w) for edge, t in (("start", a), ("end", b))]
    for j, link in enumerate(links.tolist()):
        name = topo.link_name(link)
        samples += [(PORT_BYTES_METRIC, {"link": name}, float(round(v)), float(t)) for t, v in zip(stamps, counts[:, j])]
    return MetricSet.from_samples(samples, info=INFO)


def windows_from_metrics(metrics: MetricSet) -> dict[str, list[tuple[float, float]]]:
    """Per phase label, its merged windows from ``gpuwait_phase_window_seconds`` samples."""
    chosen = metrics.select(name=PHASE_WINDOW_METRIC)
    edges: dict[tuple[str, str], dict[str, float]] = {}
    for labels, value in zip(chosen.labels, chosen.value):
        lab = dict(labels)
        if "phase" in lab and lab.get("edge") in ("start", "end"):
            edges.setdefault((lab["phase"], lab.get("window", "")), {})[lab["edge"]] = float(value)
    out: dict[str, list[tuple[float, float]]] = {}
    for (phase, _), e in edges.items():
        if "start" in e and "end" in e and e["end"] > e["start"]:
            out.setdefault(phase, []).append((e["start"], e["end"]))
    return {phase: _merge(w) for phase, w in out.items()}


def _coverage(stamps_s: np.ndarray, windows: dict[str, list[tuple[float, float]]]) -> np.ndarray:
    """(intervals, phases + 1): seconds of each interval each phase covers; the last column is the
    interval's whole length (traffic outside every collective may flow at any time)."""
    cols = [np.diff(_cumulative(stamps_s, w)) for w in windows.values()]
    return np.column_stack(cols + [np.diff(stamps_s)])


def _rates(deltas: np.ndarray, cover: np.ndarray) -> np.ndarray:
    """(columns, links) steady rate of each column on each port. The background's (last column) is
    its mean over the intervals no phase touches (0 without one: phases that cover every interval
    add up to its column, so it cannot be told apart from them). The phases' are those that best
    explain the rest of every interval's increase (non-negative least squares, ``deltas[k] - bg =
    sum_p cover[k, p] rate[p]``): exact when the rates are steady, and a phase that never runs
    alone is still told apart by how its share of the intervals differs from the others'."""
    rates = np.zeros((cover.shape[1], deltas.shape[1]))
    free = cover[:, :-1].sum(axis=1) <= _COVER_EPS * cover[:, -1]
    if free.any():
        rates[-1] = deltas[free].sum(axis=0) / cover[free, -1].sum()
    rest = np.clip(deltas - np.outer(cover[:, -1], rates[-1]), 0.0, None)
    used = np.flatnonzero(cover[:, :-1].sum(axis=0) > 0)
    if not len(used):
        return rates
    scale = cover[:, used].max(axis=0)  # columns of like size: the solver's tolerance is absolute
    design = cover[:, used] / scale
    for link in np.flatnonzero(rest.sum(axis=0) > 0).tolist():
        norm = float(rest[:, link].max())
        rates[used, link] = nnls(design, rest[:, link] / norm)[0] / scale * norm
    return rates


def phase_bytes_from_series(stamps_s: np.ndarray, counters: np.ndarray,
                            windows: dict[str, list[tuple[float, float]]]) -> PhaseBytes:
    """Each phase's bytes per port over the series (see the module doc).

    ``stamps_s`` (K+1,) increasing sample times; ``counters`` (K+1, ports) cumulative bytes (a drop
    is a reset: the increase after it counts from zero); ``windows`` per phase label."""
    stamps_s = np.asarray(stamps_s, dtype=float)
    counters = np.asarray(counters, dtype=float)
    steps = np.diff(counters, axis=0)
    deltas = np.where(steps >= 0, steps, counters[1:])
    labels = list(windows)
    cover = _coverage(stamps_s, {lab: windows[lab] for lab in labels})
    length = cover[:, -1:]
    active = cover > _COVER_EPS * np.maximum(length, 1e-300)
    rates = _rates(deltas, cover)
    # the background is steady: its expected bytes come off first; the rest of an interval's increase
    # is the phases', split by each one's rate times its time there (by time alone where every
    # active phase's rate is 0)
    background = np.minimum(np.outer(cover[:, -1], rates[-1]), deltas)
    rest = deltas - background
    weight = rates[None, :-1, :] * cover[:, :-1, None]
    total = weight.sum(axis=1, keepdims=True)
    weight = np.where(total <= 0, cover[:, :-1, None] * np.ones((1, 1, deltas.shape[1])), weight)
    total = weight.sum(axis=1, keepdims=True)
    share = np.divide(weight, total, out=np.zeros_like(weight), where=total > 0)
    got = share * rest[:, None, :]
    n_phases = active[:, :-1].sum(axis=1)
    out, unsure = {}, {}
    for p, lab in enumerate(labels):
        # an interval is read exactly for a phase only when it covers all of it alone
        shared = active[:, p] & ((n_phases > 1) | (cover[:, p] < (1 - 1e-9) * cover[:, -1]))
        # below the solver's relative precision of the port's bytes is rounding, not traffic
        mine = got[:, p, :].sum(axis=0)
        out[lab] = np.where(mine > _SOLVER_REL * deltas.sum(axis=0), mine, 0.0)
        unsure[lab] = deltas[shared].sum(axis=0)
    return PhaseBytes(out, unsure)


def phase_bytes_from_metrics(metrics: MetricSet, topo: Topology,
                             step_s: float | None) -> tuple[dict[str, np.ndarray], tuple[CollectiveStat, ...]] | None:
    """Per collective label, bytes per link per step, and one row per collective with its time per
    step (its windows' length), from the series of the module doc; None unless the counters have
    two or more samples and the windows are given."""
    names = set(metrics.names()) if len(metrics) else set()
    if PORT_BYTES_METRIC not in names or PHASE_WINDOW_METRIC not in names:
        return None
    windows = windows_from_metrics(metrics)
    chosen = metrics.select(name=PORT_BYTES_METRIC)
    per_link: dict[int, dict[float, float]] = {}
    for labels, value, stamp in zip(chosen.labels, chosen.value, chosen.timestamp_s):
        name = dict(labels).get("link")
        if name is None or np.isnan(stamp):
            continue
        per_link.setdefault(topo.link_id(name), {})[float(stamp)] = float(value)
    stamps = sorted({t for series in per_link.values() for t in series})
    if len(stamps) < 2 or not windows:
        return None
    links = sorted(per_link)
    counters = np.column_stack([[per_link[link].get(t, np.nan) for t in stamps] for link in links])
    counters = _fill_gaps(counters)
    got = phase_bytes_from_series(np.array(stamps), counters, windows)
    span = stamps[-1] - stamps[0]
    n_steps = max(1.0, round(span / step_s)) if step_s else 1.0
    phase_bytes = {}
    for lab, values in got.bytes.items():
        full = np.zeros(topo.n_links)
        full[links] = values / n_steps
        phase_bytes[lab] = full
    stats = tuple(CollectiveStat(lab, lab.split(" ", 1)[0], lab.split(" ", 1)[-1], 0, 0.0, 1,
                                 sum(b - a for a, b in windows[lab]) / n_steps, 0.0, 0.0, "", "")
                  for lab in got.bytes)
    return phase_bytes, stats


def _fill_gaps(counters: np.ndarray) -> np.ndarray:
    """A port missing a scrape keeps its last value (its bytes land in the next interval)."""
    out = counters.copy()
    for j in range(out.shape[1]):
        col = out[:, j]
        for i in range(len(col)):
            if np.isnan(col[i]):
                col[i] = col[i - 1] if i > 0 else 0.0
    return out
