"""Chrome trace-event JSON (the Trace Event Format): tracks per GPU, slices equal to tasks."""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict

import numpy as np
import pytest

from gpuwait.report.perfetto import perfetto_trace, write_perfetto_trace
from gpuwait.steps.result import TaskTable

from .conftest import make_result


def load(path) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def slices(trace: dict, cat: str | None = None) -> list[dict]:
    return [e for e in trace["traceEvents"] if e["ph"] == "X" and (cat is None or e["cat"] == cat)]


def thread_names(trace: dict) -> dict[tuple[int, int], str]:
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"]
            if e["ph"] == "M" and e["name"] == "thread_name"}


def test_trace_parses_and_has_a_process_per_group_and_a_track_per_gpu(tmp_path):
    result = make_result(n_gpus=12)
    trace = load(write_perfetto_trace(result, tmp_path / "trace.json", gpus_per_server=4))
    assert trace["displayTimeUnit"] == "ns" and trace["otherData"]["case"] == "RoCEv2, ECMP"
    processes = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert processes == {1: "group 1: 12 GPUs (0-11)", 2: "job"}
    names = thread_names(trace)
    gpu_tracks = {key: name for key, name in names.items() if "(server " in name}
    # ranks 0, 2-11 tie on own time: the median of the twelve is the sixth of them, rank 6
    role = {1: " slowest", 6: " median"}
    assert sorted(gpu_tracks.values()) == sorted(f"rank {r}{role.get(r, '')} (server {r // 4} GPU{r % 4})" for r in range(12))
    # communication overlaps compute, so it has its own stream track next to the GPU
    assert {n for n in names.values() if n.startswith("rank 0 ")} >= {"rank 0 dp", "rank 0 tp"}


def test_perfetto_groups_are_the_html_timeline_rows():
    from gpuwait.report.figures import timeline_figure

    base = make_result(n_gpus=8, steps=1, slow_rank=5)
    t = base.tasks
    extra = (t.rank >= 4) & (t.name == "fwd")  # ranks 4-7 run another schedule
    tasks = TaskTable(**{k: np.concatenate([v, v[extra]]) for k, v in t.columns().items()})
    tasks.name[len(t):] = "fwd again"
    result = dataclasses.replace(base, tasks=tasks)
    trace = perfetto_trace(result)
    groups = trace["otherData"]["groups"]
    assert [g["ranks"] for g in groups] == [[0, 1, 2, 3], [4, 5, 6, 7]] and groups[1]["slowest_rank"] == 5
    rows = list(timeline_figure(result)[0].layout.yaxis.ticktext)
    assert rows == [g["label"] for g in groups]


def test_every_task_is_a_slice_with_its_duration(result):
    trace = perfetto_trace(result)
    events = [e for e in slices(trace) if e["cat"] != "step"]
    assert len(events) == len(result.tasks)
    t = result.tasks
    by_key = {(e["args"]["rank"], e["args"]["step"], e["name"], e["ts"]): e for e in events}
    for i in range(len(t)):
        e = by_key[(int(t.rank[i]), int(t.step[i]), str(t.name[i]), round(t.start_s[i] * 1e6, 3))]
        assert e["dur"] == pytest.approx((t.end_s[i] - t.start_s[i]) * 1e6, abs=1e-3)
        assert e["args"]["kind"] == t.kind[i] and e["args"]["group"] == t.group[i]
        assert e["args"]["exposed_us"] == pytest.approx(t.exposed_s[i] * 1e6, abs=1e-3)
    steps = slices(trace, "step")
    assert [e["name"] for e in steps] == ["step 0", "step 1", "step 2"]
    assert sum(e["dur"] for e in steps) == pytest.approx(result.step_times_s.sum() * 1e6)


def test_slices_on_one_track_never_overlap():
    # two DP buckets in flight at once on rank 0: the second needs its own lane
    base = make_result(n_gpus=2, steps=1)
    t = base.tasks
    extra = TaskTable(rank=np.array([0], np.int32), step=np.array([0], np.int32), kind=np.array(["comm"]),
                      name=np.array(["dp all_reduce bucket 1"]), group=np.array(["dp"]),
                      start_s=t.start_s[t.group == "dp"][:1] + 1e-3, end_s=t.end_s[t.group == "dp"][:1] + 1e-3,
                      exposed_s=np.array([0.0]))
    tasks = TaskTable(**{k: np.concatenate([v, extra.columns()[k]]) for k, v in t.columns().items()})
    result = dataclasses.replace(base, tasks=tasks)
    trace = perfetto_trace(result)
    assert "rank 0 dp #2" in thread_names(trace).values()
    tracks = defaultdict(list)
    for e in slices(trace):
        tracks[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    for spans in tracks.values():
        spans.sort()
        assert all(b[0] >= a[1] for a, b in zip(spans, spans[1:]))


def test_max_ranks_bounds_the_trace_and_keeps_the_slowest():
    result = make_result(n_gpus=40, steps=1, slow_rank=37)
    trace = perfetto_trace(result, max_ranks=16)
    ranks = {e["args"]["rank"] for e in slices(trace) if e["cat"] != "step"}
    assert len(ranks) == 16 and 37 in ranks
    assert "16 GPUs shown" in trace["otherData"]["ranks_shown"]
    assert "rank 37 slowest (server 4 GPU5)" in thread_names(trace).values()
