"""Small hand-made RunResults: a few GPUs, a few steps, every task kind, so the report writers can
be tested without running a simulation."""

from __future__ import annotations

import numpy as np
import pytest

from gpuwait.steps.result import (
    BREAKDOWN_CATEGORIES,
    CollectiveStat,
    LinkStats,
    RunResult,
    StepBreakdown,
    TaskTable,
)

# A case name that tries to break out of every context a report puts it in: <script> blocks,
# HTML attributes, plotly's pseudo-HTML labels and rich markup. If any of it runs, the page gets
# a data-pwned attribute, which the browser test looks for.
HOSTILE = ("</script><script>document.documentElement.setAttribute('data-pwned','1')</script>"
           "<img src=x onerror=\"document.documentElement.setAttribute('data-pwned','2')\">[bold]&amp;\u2028")


def make_result(case: str = "RoCEv2, ECMP", n_gpus: int = 4, steps: int = 3, slow_rank: int = 1,
                comm_scale: float = 1.0, task_prefix: str = "") -> RunResult:
    """Per step and GPU: data wait, forward, backward with a DP all-reduce under it (its tail exposed),
    a wait for the slow rank, a TP all-reduce fully exposed. Times in seconds."""
    fwd_s, bwd_s, data_s, tp_s = 0.010, 0.020, 0.002, 0.001 * comm_scale
    dp_s = 0.015 * comm_scale
    slow_extra_s = 0.003
    rows: list[tuple] = []
    step_times = []
    t0 = 0.0
    for step in range(steps):
        ends = []
        for rank in range(n_gpus):
            extra = slow_extra_s if rank == slow_rank else 0.0
            t = t0
            rows.append((rank, step, "data_wait", "data loader", "", t, t + data_s, data_s))
            t += data_s
            rows.append((rank, step, "compute", f"{task_prefix}fwd", "", t, t + fwd_s + extra, fwd_s + extra))
            t += fwd_s + extra
            bwd_start = t
            rows.append((rank, step, "compute", f"{task_prefix}bwd", "", t, t + bwd_s, bwd_s))
            t += bwd_s
            dp_start = bwd_start + bwd_s / 2
            dp_end = dp_start + dp_s
            rows.append((rank, step, "comm", "dp all_reduce bucket 0", "dp", dp_start, dp_end, max(0.0, dp_end - t)))
            ends.append(max(t, dp_end))
        # everyone waits for the slowest member before the TP all-reduce
        sync = max(ends)
        for rank in range(n_gpus):
            mine = ends[rank]
            if sync > mine:
                rows.append((rank, step, "straggler_wait", "wait tp all_reduce", "tp", mine, sync, sync - mine))
            rows.append((rank, step, "comm", "tp all_reduce", "tp", sync, sync + tp_s, tp_s))
        step_times.append(sync + tp_s - t0)
        t0 = sync + tp_s

    cols = list(zip(*rows))
    tasks = TaskTable(rank=np.array(cols[0], dtype=np.int32), step=np.array(cols[1], dtype=np.int32),
                      kind=np.array(cols[2]), name=np.array(cols[3]), group=np.array(cols[4]),
                      start_s=np.array(cols[5]), end_s=np.array(cols[6]), exposed_s=np.array(cols[7]))

    step_s = float(np.mean(step_times))
    per_gpu = {c: np.zeros(n_gpus) for c in BREAKDOWN_CATEGORIES}
    for rank in range(n_gpus):
        mine = (tasks.rank == rank)
        for kind in ("compute", "data_wait", "straggler_wait"):
            per_gpu[kind][rank] = tasks.exposed_s[mine & (tasks.kind == kind)].sum() / steps
        per_gpu["exposed_comm"][rank] = tasks.exposed_s[mine & (tasks.kind == "comm")].sum() / steps
    dp_exposed = float(tasks.exposed_s[(tasks.group == "dp") & (tasks.kind == "comm")].sum() / steps / n_gpus)
    tp_exposed = float(tasks.exposed_s[(tasks.group == "tp") & (tasks.kind == "comm")].sum() / steps / n_gpus)
    breakdown = StepBreakdown(step_time_s=step_s, per_gpu_s=per_gpu,
                              exposed_comm_s={"dp all_reduce": dp_exposed, "tp all_reduce": tp_exposed},
                              ideal_step_time_s=step_s - dp_exposed - tp_exposed, mfu=0.41,
                              model_flops_per_step=3.2e15, tokens_per_step=4 * 4096)

    names = ([f"gpu{i}->nvswitch" for i in range(4)] + [f"nic{i}->leaf0" for i in range(4)]
             + [f"leaf0->spine{i}" for i in range(4)] + ["leaf0->storage"])
    tier = np.array(["nvlink"] * 4 + ["host-leaf"] * 4 + ["leaf-spine"] * 4 + ["storage"])
    util = np.array([0.3, 0.3, 0.3, 0.3, 0.5, 0.5, 0.45, 0.4, 0.95, 0.1, 0.0, 0.6, 0.2]) * min(1.0, comm_scale)
    links = LinkStats(name=names, tier=tier, utilization=util, bytes_per_step=util * 1e9,
                      users={8: ["dp all_reduce", "storage read"], 11: ["dp all_reduce"], 4: ["tp all_reduce"]})
    collectives = (
        CollectiveStat("dp all_reduce bucket", "dp", "all_reduce", n_gpus, 256e6, 1, dp_s, 17.1, 25.6, "ring", "Simple"),
        CollectiveStat("tp all_reduce", "tp", "all_reduce", n_gpus, 8e6, 1, tp_s, 8.0, 12.0, "nvls", "LL128"),
    )
    return RunResult(case=case, workload=f"toy, DP{n_gpus}, {n_gpus} GPUs", cluster="toy leaf-spine", steps=steps,
                     breakdown=breakdown, collectives=collectives, links=links, tasks=tasks,
                     step_times_s=np.array(step_times), notes=("synthetic",))


@pytest.fixture
def result() -> RunResult:
    return make_result()


@pytest.fixture
def two_cases() -> list[RunResult]:
    return [make_result("RoCEv2, ECMP"), make_result("InfiniBand, adaptive routing", comm_scale=0.5)]


@pytest.fixture
def hostile_result() -> RunResult:
    return make_result(case=HOSTILE, task_prefix=HOSTILE)


def pytest_terminal_summary(terminalreporter) -> None:
    """Say why the browser tests skipped, without ``-rs``: a skip must never go unnoticed."""
    for report in terminalreporter.stats.get("skipped", []):
        if "browser" in getattr(report, "keywords", {}) and isinstance(report.longrepr, tuple):
            reason = str(report.longrepr[2]).removeprefix("Skipped: ")
            terminalreporter.write_line(f"browser test skipped: {reason}", yellow=True)
