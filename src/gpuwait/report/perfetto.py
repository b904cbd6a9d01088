"""A run's per-GPU timeline as Chrome trace-event JSON, for ui.perfetto.dev or chrome://tracing.

Layout (Trace Event Format, Google doc cited in docs/sources.md): one process per group of alike GPUs
(:func:`~gpuwait.report.ranks.rank_groups`, the same groups as the HTML timeline's rows; ``pid`` =
group + 1, named by the group's label, which Perfetto shows collapsed until opened), one thread per
shown member GPU (``tid`` = 1000 × its place in the group; the median and the slowest member first
named as such) carrying compute and the wait kinds, and next to it one thread per communication group
of that GPU (``"rank 3 dp"``), because NCCL runs each communicator on its own stream and its kernels
overlap compute. Slices are complete events (``"ph": "X"``) with ``ts`` and
``dur`` in microseconds; ``args`` carry kind, group, step and the exposed part of communication.
A last process, ``job``, shows each step's span over all ranks.

Pitfall this module guards against: complete events on one thread must nest. Two slices that
overlap without nesting are dropped or mangled by the importer, so slices that overlap on one
stream get an extra lane (``"rank 3 dp #2"``), and times are rounded to the nanosecond *before*
``dur`` is taken so back-to-back slices touch exactly instead of overlapping by rounding noise.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from gpuwait.report.ranks import rank_groups
from gpuwait.steps.result import RunResult

#: Thread ids per GPU: lane 0 is the GPU itself, the rest its communication streams and their extra
#: lanes (many DP buckets in flight at once each need one); ids are only labels, so the block is wide.
_TIDS_PER_GPU = 1000


def _us(time_s: np.ndarray) -> np.ndarray:
    return np.round(np.asarray(time_s, dtype=float) * 1e6, 3)


def _lanes(start_us: Iterable[float], end_us: Iterable[float]) -> list[int]:
    """Greedy interval colouring in start order: the lowest lane whose last slice has ended."""
    lane_end: list[float] = []
    lanes = []
    for s, e in zip(start_us, end_us):
        for i, busy_until in enumerate(lane_end):
            if s >= busy_until:
                lane_end[i] = e
                lanes.append(i)
                break
        else:
            lane_end.append(e)
            lanes.append(len(lane_end) - 1)
    return lanes


def _meta(name: str, pid: int, value: object, tid: int | None = None) -> dict:
    event = {"ph": "M", "name": name, "pid": pid, "args": {("sort_index" if name.endswith("sort_index") else "name"): value}}
    if tid is not None:
        event["tid"] = tid
    return event


def perfetto_trace(result: RunResult, max_ranks: int = 64, gpus_per_server: int = 8) -> dict:
    """The trace as a dict (see module docstring); ``max_ranks`` bounds the GPUs shown, shared out
    among the groups (at least the median and the slowest member of each)."""
    if gpus_per_server < 1:
        raise ValueError(f"gpus_per_server must be at least 1, got {gpus_per_server}")
    groups, how = rank_groups(result)
    members = [g.shown_members(max(2, max_ranks // max(1, len(groups)))) for g in groups]
    pid_of = {int(r): g.index + 1 for g, m in zip(groups, members) for r in m}
    place = {int(r): i for m in members for i, r in enumerate(m)}
    role = {g.median_rank: " median" for g in groups} | {g.slowest_rank: " slowest" for g in groups}
    ranks = np.array(sorted(pid_of), dtype=int)
    shown = f"{how}; {len(ranks)} GPUs shown (each group's median, slowest and first members){result.tasks_cover_text()}"
    t = result.tasks
    keep = np.isin(t.rank, ranks)
    rank, step, kind, name, group = (t.rank[keep], t.step[keep], t.kind[keep], t.name[keep], t.group[keep])
    start_us, end_us = _us(t.start_s[keep]), _us(t.end_s[keep])
    exposed_us = _us(t.exposed_s[keep])
    is_comm = kind == "comm"
    stream = np.where(is_comm, np.where(group == "", "comm", group), "")

    events: list[dict] = []
    for g in groups:
        events.append(_meta("process_name", g.index + 1, g.label))
        events.append(_meta("process_sort_index", g.index + 1, g.index))

    # One stream = (rank, stream name); each gets lanes so its slices never overlap on one thread.
    order = np.lexsort((end_us, start_us, stream, rank))
    slices: list[tuple[int, int, str, int]] = []  # (task index, rank, stream, lane)
    i = 0
    while i < len(order):
        r, s = int(rank[order[i]]), str(stream[order[i]])
        j = i
        while j < len(order) and int(rank[order[j]]) == r and str(stream[order[j]]) == s:
            j += 1
        idx = order[i:j]
        slices.extend((task, r, s, lane) for task, lane in zip(idx, _lanes(start_us[idx], end_us[idx])))
        i = j

    threads: dict[tuple[int, str, int], int] = {}

    def tid_of(r: int, s: str, lane: int) -> int:
        key = (r, s, lane)
        if key not in threads:
            # streams and extra lanes of one GPU share its block of thread ids, in first-seen order
            used = sum(1 for k in threads if k[0] == r)
            threads[key] = place[r] * _TIDS_PER_GPU + used
        return threads[key]

    for r in ranks:
        tid_of(int(r), "", 0)  # every shown GPU gets its own track first, even if idle
    for task, r, s, lane in slices:
        tid = tid_of(r, s, lane)
        events.append({
            "ph": "X", "pid": pid_of[r], "tid": tid, "name": str(name[task]), "cat": str(kind[task]),
            "ts": float(start_us[task]), "dur": float(round(end_us[task] - start_us[task], 3)),
            "args": {"rank": r, "step": int(step[task]), "kind": str(kind[task]), "group": str(group[task]),
                     "exposed_us": float(exposed_us[task]) if is_comm[task] else float(round(end_us[task] - start_us[task], 3))},
        })
    for (r, s, lane), tid in threads.items():
        where = f"server {r // gpus_per_server} GPU{r % gpus_per_server}"
        label = f"rank {r}{role.get(r, '')} ({where})" if not s else f"rank {r} {s}"
        if lane:
            label += f" #{lane + 1}"
        pid = pid_of[r]
        events.append(_meta("thread_name", pid, label, tid))
        events.append(_meta("thread_sort_index", pid, tid, tid))

    events.extend(_step_events(result, job_pid=len(groups) + 1))
    return {
        "displayTimeUnit": "ns",
        "traceEvents": events,
        "otherData": {"case": result.case, "workload": result.workload, "cluster": result.cluster,
                      "steps": result.steps, "ranks_shown": shown, "gpus_per_server": gpus_per_server,
                      "groups": [{"label": g.label, "ranks": g.ranks.tolist(), "median_rank": g.median_rank,
                                  "slowest_rank": g.slowest_rank} for g in groups],
                      "notes": list(result.notes)},
    }


def _step_events(result: RunResult, job_pid: int) -> list[dict]:
    """One slice per step from its first task start to its last task end, over all ranks."""
    t = result.tasks
    events = [_meta("process_name", job_pid, "job"), _meta("process_sort_index", job_pid, -1)]
    if len(t) == 0:
        return events
    steps = np.unique(t.step)
    first = _us(np.array([t.start_s[t.step == s].min() for s in steps]))
    last = _us(np.array([t.end_s[t.step == s].max() for s in steps]))
    lanes = _lanes(first, last)  # pipelined steps overlap: give them a second lane
    for lane in sorted(set(lanes)):
        events.append(_meta("thread_name", job_pid, "steps" if lane == 0 else f"steps #{lane + 1}", lane))
    for s, a, b, lane in zip(steps, first, last, lanes):
        events.append({"ph": "X", "pid": job_pid, "tid": lane, "name": f"step {int(s)}", "cat": "step",
                       "ts": float(a), "dur": float(round(b - a, 3)), "args": {"step": int(s)}})
    return events


def write_perfetto_trace(result: RunResult, path: str | Path, max_ranks: int = 64, gpus_per_server: int = 8) -> Path:
    """Write :func:`perfetto_trace` as JSON to ``path``; open it at https://ui.perfetto.dev.

    ``gpus_per_server`` maps ranks to servers (rank // gpus_per_server), as the job's placement did.
    """
    path = Path(path)
    with path.open("w", encoding="utf-8") as f:
        json.dump(perfetto_trace(result, max_ranks=max_ranks, gpus_per_server=gpus_per_server), f,
                  separators=(",", ":"), allow_nan=False)
    return path
