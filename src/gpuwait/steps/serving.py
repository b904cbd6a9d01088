"""Serve a model with tensor and pipeline parallelism: prefill, then one decode step per output token.

Decode moves few bytes per collective (a batch of hidden vectors), so its TP all-reduces are
latency-bound: inside an NVSwitch server they cost microseconds, across servers each one pays the
network's latency. The time per output token (TPOT) is therefore where crossing servers shows.
A batch of requests runs as one pipeline (no micro-batching), so every stage waits for the previous
one and its activations' send. Each GPU is charged what its stage does in a pass (:func:`_stage_pass_s`):
its compute and TP all-reduces, and, past the first stage, the receive of the stage before's activations,
which it cannot start without; a stage that has handed its activations on has no work left in the pass, so
the transfer and the later stages' work are its bubble. The per-GPU breakdown and the task table are built
from the same per-stage pass, so they agree (stage 0's bubble per pass is the other stages' work and the
transfers between them).
"""

from __future__ import annotations

import numpy as np

from gpuwait.errors import SimulationError
from gpuwait.fabric.groups import FabricModel
from gpuwait.steps.result import (
    BREAKDOWN_CATEGORIES,
    RunResult,
    StepBreakdown,
    TaskTable,
)
from gpuwait.steps.stats import collective_stats, link_stats
from gpuwait.workload.model import decode_passes
from gpuwait.workload.program import ServingStep

#: Decode passes a serving run records as tasks, after the prefill: every pass of a long generation would be
#: output tokens x GPUs x 4 tasks (receive, compute, all-reduces, bubble), which no timeline draws; what the
#: table leaves out is said (RunResult.tasks_cover) wherever it is drawn
TASK_DECODE_PASSES = 64

#: Why a batch of one output token has no time per output token (the serving dict's ``tpot_undefined``).
TPOT_UNDEFINED = "one output token: the prefill emits it and no decode step follows, so (e2e - TTFT) / (tokens - 1) is 0 / 0"


def _time(fabric: FabricModel | None, groups_gpu: np.ndarray, collective: str, n_bytes: float):
    if fabric is None or groups_gpu.shape[1] < 2 or n_bytes <= 0:
        return 0.0, None
    run = fabric.collective(groups_gpu, collective, n_bytes)
    return run.time_s, run


def _phases(step: ServingStep, fabric: FabricModel | None):
    lay = step.layout
    gpus = lay.rank_gpu
    tp_groups, pp_groups = gpus[lay.groups("tp")], gpus[lay.groups("pp")]
    calls = step.layers_per_stage * step.allreduces_per_layer
    tp_pre, run_tp_pre = _time(fabric, tp_groups, "all_reduce", step.tp_allreduce_prefill_bytes)
    tp_dec, run_tp_dec = _time(fabric, tp_groups, "all_reduce", step.tp_allreduce_decode_bytes)
    send_pre, run_pp_pre = _time(fabric, pp_groups, "sendrecv", step.pp_send_prefill_bytes)
    send_dec, run_pp_dec = _time(fabric, pp_groups, "sendrecv", step.pp_send_decode_bytes)
    prefill = {"compute": step.prefill_compute_s, "tp": calls * tp_pre, "pp": send_pre}
    decode = {"compute": step.decode_compute_s, "tp": calls * tp_dec, "pp": send_dec}
    decodes = decode_passes(step.output_tokens)
    families = [("tp all_reduce prefill", run_tp_pre, calls), ("tp all_reduce decode", run_tp_dec, calls * decodes),
                ("pp sendrecv prefill", run_pp_pre, 1), ("pp sendrecv decode", run_pp_dec, decodes)]
    return prefill, decode, [f for f in families if f[1] is not None and f[2] > 0]


def _stage_pass_s(parts: dict, s: int) -> dict[str, float]:
    """What stage ``s`` does in one pass (``parts``: the prefill's or a decode step's), seconds: its compute, its
    TP all-reduces and, for s > 0, the receive of the stage before's activations (stage 0's input is the
    batch). The sender is not charged the transfer: its part of the pass is done once it hands the
    activations on, and it waits (bubble) as long as the receiver cannot start."""
    return {"compute": parts["compute"], "tp": parts["tp"], "recv": parts["pp"] if s > 0 else 0.0}


def _per_gpu_s(step: ServingStep, prefill: dict, decode: dict, total_s: float) -> dict[str, np.ndarray]:
    """Every GPU's batch time by breakdown category: the prefill pass and each decode pass of its stage
    (:func:`_stage_pass_s`); the rest of the batch is its bubble."""
    lay = step.layout
    decodes = decode_passes(step.output_tokens)
    stage = lay.stage_of()
    per_gpu = {c: np.zeros(lay.n_ranks) for c in BREAKDOWN_CATEGORIES}
    for s in range(lay.pp):
        pre, dec = _stage_pass_s(prefill, s), _stage_pass_s(decode, s)
        on = stage == s
        per_gpu["compute"][on] = pre["compute"] + decodes * dec["compute"]
        per_gpu["exposed_comm"][on] = (pre["tp"] + decodes * dec["tp"]) + (pre["recv"] + decodes * dec["recv"])
    # a single stage waits on none: the difference is rounding (-2e-16 printed "-0.00 -0.0%"), never below 0
    per_gpu["bubble"][:] = np.maximum(total_s - per_gpu["compute"] - per_gpu["exposed_comm"], 0.0)
    return per_gpu


def _pass_time(parts: dict, pp: int) -> float:
    """One pass through the pipeline: every stage's compute and TP collectives, and pp-1 sends."""
    return pp * (parts["compute"] + parts["tp"]) + (pp - 1) * parts["pp"]


def _tpot(decodes: int, tpot_s: float, ideal_tpot_s: float) -> dict:
    """The serving dict's TPOT entries. With no decode pass (one output token) TPOT = (e2e - TTFT) / (tokens - 1)
    is 0 / 0: vLLM's serving benchmark leaves such a request out of its TPOT (vllm-project/vllm@def9ce85
    vllm/benchmarks/serve.py, calculate_metrics: ``if output_len > 1``), so it is None here, with the reason."""
    if decodes == 0:
        return {"tpot_s": None, "ideal_tpot_s": None, "tpot_undefined": TPOT_UNDEFINED}
    return {"tpot_s": tpot_s, "ideal_tpot_s": ideal_tpot_s}


def run_serving(step: ServingStep, fabric: FabricModel, *, case: str = "", cluster: str = "") -> RunResult:
    """Time to first token, time per output token and the breakdown of serving one batch."""
    lay = step.layout
    if step.output_tokens < 1 or step.batch < 1:
        raise SimulationError("workload.inference: expected at least one output token and a batch of at least 1")
    prefill, decode, families = _phases(step, fabric)
    ideal_prefill, ideal_decode, _ = _phases(step, None)
    pp = lay.pp
    ttft = _pass_time(prefill, pp)
    tpot = _pass_time(decode, pp)
    decodes = decode_passes(step.output_tokens)
    total = ttft + decodes * tpot
    ideal_ttft, ideal_tpot = _pass_time(ideal_prefill, pp), _pass_time(ideal_decode, pp)
    ideal = ideal_ttft + decodes * ideal_tpot
    n = lay.n_ranks
    per_gpu = _per_gpu_s(step, prefill, decode, total)
    # the job's mean, as a training step's: every GPU all-reduces, only the stages past the first receive
    recv_s = (prefill["pp"] + decodes * decode["pp"]) * float(np.mean(lay.stage_of() > 0))
    exposed = {"tp all_reduce": prefill["tp"] + decodes * decode["tp"], "pp sendrecv": recv_s}
    mfu = step.model_flops / (total * n * step.peak_flops_per_gpu) if total > 0 else 0.0
    # every replica serves its own batch at once: the job's tokens, as a training step counts the whole job's
    batch_tokens = step.batch * step.output_tokens * lay.dp
    breakdown = StepBreakdown(total, per_gpu, exposed, ideal, mfu, step.model_flops, batch_tokens)
    tasks, tasks_cover = _tasks(step, prefill, decode, ttft, tpot)
    collectives = collective_stats(families, {"tp": lay.tp, "pp": lay.pp})
    links = link_stats(fabric, families, total)
    serving = {"ttft_s": ttft, "ideal_ttft_s": ideal_ttft, **_tpot(decodes, tpot, ideal_tpot),
               "tokens_per_s": batch_tokens / total if total > 0 else 0.0,
               "ideal_tokens_per_s": batch_tokens / ideal if ideal > 0 else 0.0}
    tpot_note = (f"time per output token n/a ({TPOT_UNDEFINED})" if serving["tpot_s"] is None else
                 f"time per output token {tpot * 1e3:.3f} ms (ideal network {ideal_tpot * 1e3:.3f} ms)")
    notes = (f"time to first token {ttft * 1e3:.3f} ms", tpot_note)
    return RunResult(case=case, workload=step.description, cluster=cluster, steps=1, breakdown=breakdown,
                     collectives=collectives, links=links, tasks=tasks, step_times_s=np.array([total]),
                     notes=notes, gpus_per_server=fabric.topo.gpus_per_server, serving=serving, tasks_cover=tasks_cover)


def time_per_output_token_s(result: RunResult) -> float | None:
    """The TPOT a serving run recorded (its second note), in seconds; None for one output token (no decode)."""
    for note in result.notes:
        if note.startswith("time per output token"):
            value = note.split()[4]
            return None if value == "n/a" else float(value) / 1e3
    raise SimulationError("result: not a serving run; expected a 'time per output token' note")


def _stage_rows(parts: dict, t0: float, s: int, name: str) -> list[tuple[str, str, str, float, float]]:
    """Stage ``s``'s tasks of one pass that starts at ``t0`` on stage 0: the receive of the stage before's
    activations (none on stage 0), its compute, then its TP all-reduces; the stages run one after another."""
    begin = t0 + s * (parts["compute"] + parts["tp"] + parts["pp"])
    does = _stage_pass_s(parts, s)
    rows = []
    if does["recv"] > 0:  # named with its sender: the stages' task lists differ, so timelines group them apart
        rows.append(("comm", f"pp recv {name} from stage {s - 1}", "pp", begin - does["recv"], begin))
    rows.append(("compute", name, "", begin, begin + does["compute"]))
    if does["tp"] > 0:
        rows.append(("comm", f"tp all_reduce {name}", "tp", begin + does["compute"], begin + does["compute"] + does["tp"]))
    return rows


def _with_bubbles(rows: list[tuple[str, str, str, float, float]], until_s: float) -> list[tuple[str, str, str, float, float]]:
    """``rows`` (in time order) with a pipeline bubble in each gap a stage waits for the others, and after its
    last task up to ``until_s`` (the end of the last pass the rows hold: the batch's end when they hold every
    pass). A gap under a nanosecond is rounding: with one stage the passes follow each other."""
    out, free = [], 0.0
    for row in [*rows, ("", "", "", until_s, until_s)]:
        if row[3] - free > 1e-9:
            out.append(("bubble", "pipeline bubble", "pp", free, row[3]))
        if row[0]:
            out.append(row)
            free = row[4]
    return out


def _tasks(step: ServingStep, prefill: dict, decode: dict, ttft: float, tpot: float) -> tuple[TaskTable, str]:
    """Per GPU: its stage's prefill, then each decode step's receive, compute and TP collectives, with the
    waits between as pipeline bubbles, for the first :data:`TASK_DECODE_PASSES` decode passes; and the words
    saying what the table holds when that is not every pass ('' when it is)."""
    lay = step.layout
    stage = lay.stage_of()
    decodes = decode_passes(step.output_tokens)
    shown = min(decodes, TASK_DECODE_PASSES)
    tasks = []  # (ranks of the stage, kind, name, group, start, end)
    for s in range(lay.pp):
        rows = []
        for token in range(-1, shown):
            parts, t0 = (prefill, 0.0) if token < 0 else (decode, ttft + token * tpot)
            rows += _stage_rows(parts, t0, s, "prefill" if token < 0 else f"decode t{token}")
        ranks = np.flatnonzero(stage == s).astype(np.int32)
        tasks += [(ranks, *row) for row in _with_bubbles(rows, ttft + shown * tpot)]
    n = np.array([len(t[0]) for t in tasks])

    def column(i: int, dtype: type) -> np.ndarray:
        return np.repeat(np.array([t[i] for t in tasks], dtype), n)

    start, end = column(4, float), column(5, float)
    table = TaskTable(np.concatenate([t[0] for t in tasks]), np.zeros(int(n.sum()), np.int32), column(1, object),
                      column(2, object), column(3, object), start, end, end - start)
    cover = "" if shown == decodes else f"the prefill and the first {shown} of {decodes} decode passes"
    return table, cover
