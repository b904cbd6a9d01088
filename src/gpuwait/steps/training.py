"""Run training steps: a 1F1B pipeline per data-parallel replica, collectives timed on the fabric,
every second of every GPU's step put in one breakdown category.

The step is simulated at the granularity engineers reason about: a micro-batch's forward or backward
on one pipeline stage of one replica (a TP group, whose GPUs wait for each other at every TP
collective), the pipeline sends between stages, the DP gradient buckets reduced while the last
backward runs (an MoE's expert gradients in buckets of their own over the expert-dp group, queued
with the others), the optimizer, data loading and checkpoints. Every replica and stage is a numpy lane,
so a 16,384-GPU step costs a few hundred vector operations. Communication times come from the
fabric model (:mod:`gpuwait.fabric.groups`): each collective is run by all its groups at once on the
real topology, so groups contend for the links they share.

Simplifications, stated: the DP all-reduces of all stages are timed as if concurrent (in 1F1B they
overlap partly, so this is the pessimistic side); pipeline sends are timed with every stage sending at
once; TP and EP collectives inside a micro-batch run on the critical path (Megatron's default) except
the part an overlap switch hides (``CommOp.hidden_s``: TP comm overlap, CP's ring, MoE all-to-all overlap);
ZeRO-3's per-layer gathers and scatters queue on the network as FSDP issues them (:func:`zero3_exposed_s`);
pipeline sends block both stages unless ``overlap_p2p_comm`` (Megatron-Core's interleaved default).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from gpuwait.errors import SimulationError
from gpuwait.fabric.groups import FabricModel
from gpuwait.rng import as_generator
from gpuwait.steps.result import (
    BREAKDOWN_CATEGORIES,
    RunResult,
    StepBreakdown,
    TaskTable,
)
from gpuwait.steps.stats import Family, collective_stats, link_stats
from gpuwait.workload.layout import Layout
from gpuwait.workload.program import CommOp, TrainingStep, interleaved_one_f_one_b


@dataclass
class _Account:
    """Seconds per (stage, replica) lane in each category, plus the task records."""

    shape: tuple[int, int]
    seconds: dict[str, np.ndarray] = field(init=False)
    comm: dict[str, np.ndarray] = field(init=False)
    records: list = field(default_factory=list)

    def __post_init__(self) -> None:
        self.seconds = {c: np.zeros(self.shape) for c in BREAKDOWN_CATEGORIES}
        self.comm = {}

    def add(self, category: str, s: int | slice, values) -> None:
        self.seconds[category][s] += values

    def add_comm(self, label: str, s: int | slice, values) -> None:
        self.comm.setdefault(label, np.zeros(self.shape))[s] += values
        self.seconds["exposed_comm"][s] += values

    def record(self, stage: int, kind: str, name: str, group: str, start, end) -> None:
        self.records.append((stage, kind, name, group, np.array(start, float), np.array(end, float)))  # copies: lanes move on


@dataclass(frozen=True, eq=False)
class _CommTimes:
    inline_fwd_s: dict[str, float]
    inline_bwd_s: dict[str, float]
    pp_send_s: float
    bucket_s: dict[str, float]  # one gradient bucket's reduction, per group that reduces any ("dp", "expert_dp")
    param_gather_s: dict[str, np.ndarray]  # (pp,) the parameter all-gather after the optimizer, per group
    checkpoint_s: float
    storage_shortfall: float  # demanded / achieved storage read rate - 1 (0 when the fabric keeps up)
    families: list[Family]  # label, run, calls per step


def _comm_times(step: TrainingStep, fabric: FabricModel | None,
                others_Bps: dict[str, np.ndarray] | None = None) -> _CommTimes:
    """Time of every communication of the step on ``fabric`` (None = an ideal network).

    ``others_Bps`` maps a family's label to its mean per-link load over the step; each family is
    then timed with the other families' load on the links as background.
    """
    lay = step.layout
    pp = lay.pp
    if fabric is None:
        zeros = {f"{op.group} {op.collective}": 0.0 for op in step.inline_ops}
        return _CommTimes(zeros, dict(zeros), 0.0, {}, {}, 0.0, 0.0, [])
    gpus = lay.rank_gpu
    families: list[Family] = []
    m = step.micro_batches
    base = fabric
    n_buckets = _buckets(step)
    reduces = {g: b for g, b in _grad_bytes(step).items() if n_buckets[g].max() > 0}
    sizes = _group_sizes(lay)
    gathers = {g: b for g, b in _param_gather_bytes(step).items() if sizes[g] > 1 and b.max() > 0}
    # what runs after a stage's last backward (the gradient buckets when they wait for it, the
    # parameter all-gather after the optimizer) meets none of the step's forward / backward traffic,
    # which is over by then, and is none of it: only the background the fabric itself carries (other
    # jobs, storage) is beside it, and it is beside none of the traffic inside the step
    after_backward = {f"{g} all_gather" for g in gathers}
    if not step.overlap_grad_reduce:
        after_backward |= {f"{g} {step.dp_collective}" for g in reduces}

    def beside_others_of(labels: set[str]) -> FabricModel:
        if not others_Bps:
            return base
        apart = labels | after_backward
        other = sum((v for k, v in others_Bps.items() if k not in apart), np.zeros(base.topo.n_links))
        return base.with_background(other)

    def beside_others(label: str) -> FabricModel:
        return beside_others_of({label})

    queued = _queued_with(step)
    timed: list[tuple[CommOp, float]] = []
    for op in step.inline_ops:
        label = f"{op.group} {op.collective}"
        run = beside_others_of(queued[label]).collective(gpus[_groups(lay, op.group)], op.collective, op.size_bytes)
        families.append((label, run, (op.calls_fwd + op.calls_bwd) * m))
        timed.append((op, run.time_s))
    fwd, bwd = _inline_exposed(step, timed)
    pp_send_s = 0.0
    if pp > 1 and step.pp_send_bytes > 0:
        run = beside_others("pp sendrecv").collective(gpus[lay.groups("pp")], "sendrecv", step.pp_send_bytes)
        pp_send_s = run.time_s
        families.append(("pp sendrecv", run, 2 * m))
    bucket_s: dict[str, float] = {}
    # the buckets of both groups go out one after another (_reduce_gradients): not each other's background
    bucket_labels = {f"{g} {step.dp_collective}" for g in reduces}
    for g, grads in reduces.items():
        label = f"{g} {step.dp_collective}"
        size = float(grads.max()) / n_buckets[g].max()
        run = (base if label in after_backward else beside_others_of(bucket_labels)).collective(
            gpus[_groups(lay, g)], step.dp_collective, size)
        bucket_s[g] = run.time_s
        families.append((label, run, int(n_buckets[g].max())))
    gather: dict[str, np.ndarray] = {}
    for g, params in gathers.items():
        run = base.collective(gpus[_groups(lay, g)], "all_gather", float(params.max()))
        gather[g] = np.full(pp, run.time_s) * (params > 0)
        families.append((f"{g} all_gather", run, 1))
    checkpoint_s, shortfall = _storage_times(step, fabric, gpus)
    return _CommTimes(fwd, bwd, pp_send_s, bucket_s, gather, checkpoint_s, shortfall, families)


def _queued_with(step: TrainingStep) -> dict[str, set[str]]:
    """Each inline op's label and the labels of the ops whose calls queue one after another with its
    own, so that they are not each other's background (only the step's other traffic is): ZeRO-3's
    gathers and scatters (:func:`_add_zero3_exposed`), the ops that share a hidden window."""
    zero3 = {f"{op.group} {op.collective}" for op in step.inline_ops if op.zero3}
    windows: dict[str, set[str]] = {}
    for op in step.inline_ops:
        if op.hidden_with:
            windows.setdefault(op.hidden_with, set()).add(f"{op.group} {op.collective}")
    return {f"{op.group} {op.collective}": zero3 if op.zero3 else windows.get(op.hidden_with, {f"{op.group} {op.collective}"})
            for op in step.inline_ops}


def _inline_exposed(step: TrainingStep, timed: list[tuple[CommOp, float]]) -> tuple[dict[str, float], dict[str, float]]:
    """Exposed seconds per label in one micro-batch's forward and backward, from each inline op and one
    call's time: a call shows what its hidden compute does not cover, the ops sharing a window and
    ZeRO-3's as they queue."""
    fwd: dict[str, float] = {}
    bwd: dict[str, float] = {}
    zero3_s: dict[str, tuple[str, float]] = {}
    windows: dict[str, list[tuple[CommOp, float]]] = {}
    for op, seconds in timed:
        label = f"{op.group} {op.collective}"
        if op.zero3:
            zero3_s[label] = (op.collective, seconds)
        elif op.hidden_with:
            windows.setdefault(op.hidden_with, []).append((op, seconds))
        else:
            exposed = max(seconds - op.hidden_s, 0.0)
            fwd[label] = fwd.get(label, 0.0) + op.calls_fwd * exposed
            bwd[label] = bwd.get(label, 0.0) + op.calls_bwd * exposed
    for shared in windows.values():
        _add_window_exposed(shared, fwd, bwd)
    if zero3_s and step.zero3_layers:
        _add_zero3_exposed(step, zero3_s, fwd, bwd)
    return fwd, bwd


def _add_window_exposed(shared: list[tuple[CommOp, float]], fwd: dict[str, float], bwd: dict[str, float]) -> None:
    """Add to ``fwd`` and ``bwd`` the time ops sharing one hidden window leave exposed, from each op and
    one call's time (``shared``): their calls run one after another under the same compute, so together
    they hide ``hidden_s`` once, and what shows is shared in proportion to the time each takes."""
    total_s = sum(seconds for _op, seconds in shared)
    exposed = max(total_s - shared[0][0].hidden_s, 0.0)
    for op, seconds in shared:
        label = f"{op.group} {op.collective}"
        part = exposed * (seconds / total_s) if total_s > 0 else 0.0
        fwd[label] = fwd.get(label, 0.0) + op.calls_fwd * part
        bwd[label] = bwd.get(label, 0.0) + op.calls_bwd * part


def _add_zero3_exposed(step: TrainingStep, zero3_s: dict[str, tuple[str, float]], fwd: dict[str, float],
                       bwd: dict[str, float]) -> None:
    """Add to ``fwd`` and ``bwd`` (exposed seconds per label, per micro-batch) the time ZeRO-3's
    per-layer gathers and scatters leave exposed, from one call's (collective, time) of each label
    (``zero3_s``). A layer's gathers (non-expert weights over dp, experts over expert-dp) run one
    after another, and so do its scatters: a layer's gather or scatter takes the sum of their times."""
    layers = step.zero3_layers
    total = {"all_gather": 0.0, "reduce_scatter": 0.0}
    for collective, seconds in zero3_s.values():
        total[collective] += seconds
    gather_s, scatter_s = total["all_gather"], total["reduce_scatter"]
    f_exp, b_exp = zero3_exposed_s(layers, float(step.fwd_compute_s.max()) / layers,
                                   float(step.bwd_compute_s.max()) / layers, gather_s, scatter_s, step.prefetch_depth)
    # the exposed time is shared by the calls in proportion to the network time they take (the
    # backward's by gathers and scatters)
    share = gather_s / (gather_s + scatter_s) if gather_s + scatter_s > 0 else 1.0
    for label, (collective, seconds) in zero3_s.items():
        part = seconds / total[collective] if total[collective] > 0 else 0.0
        gather = collective == "all_gather"
        fwd[label] = fwd.get(label, 0.0) + (f_exp * part if gather else 0.0)
        bwd[label] = bwd.get(label, 0.0) + b_exp * (share if gather else 1.0 - share) * part


def _storage_times(step: TrainingStep, fabric: FabricModel, gpus: np.ndarray) -> tuple[float, float]:
    """``(checkpoint_s, storage_shortfall)``: one checkpoint write at the slowest GPU's rate to storage
    (every GPU writes its shard), and demanded / achieved dataset read rate - 1 of the slowest reading
    GPU (0 when the fabric keeps up)."""
    checkpoint_s = 0.0
    if step.checkpoint_interval_steps and step.checkpoint_bytes_per_gpu > 0:
        write = fabric.storage(gpus, float("inf"), write=True)
        slowest = float(write.rate_per_gpu_Bps.min()) if len(gpus) else 0.0
        if slowest <= 0:
            raise SimulationError("checkpoint: the job's GPUs cannot reach a storage server; "
                                  "expected a storage network (cluster.storage.mode) or storage on the fabric")
        checkpoint_s = step.checkpoint_bytes_per_gpu / slowest
    shortfall = 0.0
    if step.storage_read_Bps_per_reader > 0:
        # only the ranks that read the dataset (a pipeline's first and last stage, TP rank 0) read it
        read = fabric.storage(gpus[step.layout.reader_ranks()], step.storage_read_Bps_per_reader)
        achieved = float(read.rate_per_gpu_Bps.min())
        if achieved <= 0:
            raise SimulationError("workload.data.dataset_read_per_gpu: the job's GPUs cannot reach a storage server; "
                                  "expected a storage network (cluster.storage.mode) or storage on the fabric")
        shortfall = max(step.storage_read_Bps_per_reader / achieved - 1.0, 0.0)
    return checkpoint_s, shortfall


def zero3_exposed_s(layers: int, fwd_layer_s: float, bwd_layer_s: float, gather_s: float, scatter_s: float,
                    depth: int = 1) -> tuple[float, float]:
    """Communication time ZeRO-3 / FSDP leaves exposed in one micro-batch's forward and backward.

    Two streams, as PyTorch FSDP runs them (Zhao et al. 2023, "PyTorch FSDP", arXiv:2304.11277, §3.3-3.4):
    compute runs the layers in order; the network runs, one after another in the order they are
    issued, each layer's weight all-gather (``gather_s``) and, in backward, each layer's gradient
    reduce-scatter (``scatter_s``) as soon as its backward ends. A layer computes once its weights are
    gathered; its gather may be issued when the layer ``depth`` places earlier starts computing
    (FSDP's prefetch: 1 by default; 0 = only when the previous layer ends). Backward gathers the
    weights again (they are freed after forward) and the step's last scatter ends the backward.

    Returns ``(forward, backward)`` seconds beyond the compute (``layers x layer time``).

    >>> zero3_exposed_s(4, 1.0, 2.0, 0.5, 0.5)  # the network keeps up: only the first gather shows
    (0.5, 1.0)
    >>> zero3_exposed_s(4, 1.0, 2.0, 2.0, 2.0)  # network-bound: 4 gathers (+ 4 scatters) end it
    (5.0, 8.0)
    """
    def run(compute_s: float, backward: bool) -> float:
        start = [0.0] * layers
        end = [0.0] * layers
        net_free = 0.0
        lag = max(depth, 1)
        for i in range(layers):
            if depth >= 1:
                issue = start[i - depth] if i >= depth else 0.0
            else:
                issue = end[i - 1] if i else 0.0
            net_free = max(net_free, issue) + gather_s
            start[i] = max(end[i - 1] if i else 0.0, net_free)
            end[i] = start[i] + compute_s
            if backward and i >= lag:
                # the scatter of the layer `lag` back was issued after this gather (FSDP's BACKWARD_PRE)
                net_free = max(net_free, end[i - lag]) + scatter_s
        if backward:
            for i in range(max(layers - lag, 0), layers):
                net_free = max(net_free, end[i]) + scatter_s
        finish = max(end[-1], net_free) if layers else 0.0
        return finish - layers * compute_s

    return run(fwd_layer_s, False), run(bwd_layer_s, True)


def _groups(lay: Layout, kind: str) -> np.ndarray:
    """The ranks of each group of ``kind``; "dp" traffic (gradients, ZeRO shards) runs over dp x cp,
    the ranks that hold the same weights (Megatron-Core's data-parallel-with-context-parallel group)."""
    return lay.groups("dp_cp" if kind == "dp" else kind)


def _per_stage(values: np.ndarray | None, pp: int) -> np.ndarray:
    return np.zeros(pp) if values is None else values


def _grad_bytes(step: TrainingStep) -> dict[str, np.ndarray]:
    """(pp,) gradient bytes per GPU each stage reduces after its last backward, by group: the non-expert
    weights over dp x cp, the routed experts over their expert-dp group (Megatron-Core's DDP reduces
    each in buffers of its own: distributed_data_parallel.py's ``buffers`` and ``expert_parallel_buffers``)."""
    return {"dp": step.dp_grad_bytes, "expert_dp": _per_stage(step.expert_grad_bytes, step.layout.pp)}


def _param_gather_bytes(step: TrainingStep) -> dict[str, np.ndarray]:
    """(pp,) parameter bytes per GPU all-gathered after the optimizer, by group (as :func:`_grad_bytes`)."""
    return {"dp": step.param_gather_bytes, "expert_dp": _per_stage(step.expert_param_gather_bytes, step.layout.pp)}


def _buckets(step: TrainingStep) -> dict[str, np.ndarray]:
    """(pp,) gradient buckets each stage reduces after its last backward, by group; 0 where the stage
    reduces nothing over it (no bytes, or a group of one rank)."""
    sizes = _group_sizes(step.layout)
    out = {}
    for g, grads in _grad_bytes(step).items():
        n = np.maximum(np.ceil(grads / max(step.bucket_bytes, 1.0)), 1).astype(int)
        out[g] = np.where(grads > 0, n, 0) if sizes[g] > 1 else np.zeros_like(n)
    return out


@dataclass
class _Pipeline:
    """One step's pipeline schedule while it runs; times in seconds, one lane per DP replica."""

    orders: list[list[tuple[str, int, int]]]  # per stage: (kind F/B, micro-batch, model chunk) in order
    f_end: np.ndarray         # (pp, chunks, micro-batches, dp) end of each forward; nan until it ran
    b_end: np.ndarray         # the same for backwards
    clock: np.ndarray         # (pp, dp) when each stage's device is free
    last_b_start: np.ndarray  # (pp, chunks, dp) start of each chunk's latest backward
    position: list[int]       # per stage: the next task of its order


def _dependency(pipe: _Pipeline, kind: str, s: int, c: int, i: int,
                send_s: float) -> tuple[np.ndarray, float] | None:
    """When the input of task (``kind``, micro-batch ``i``, chunk ``c``) of stage ``s`` is ready, and the
    send it waits for; None while that input is not computed yet.

    The input comes from the previous virtual stage (forward) or the next one (backward): the
    neighbour device, or across the pipeline's wrap into the adjacent model chunk. The first virtual
    stage's forward has none (its batch is the data, :func:`_reads_data`).
    """
    pp, v, _, dp = pipe.f_end.shape
    if kind == "F":
        if s == 0 and c == 0:
            return np.full(dp, -np.inf), 0.0
        prev = pipe.f_end[s - 1, c, i] if s > 0 else pipe.f_end[pp - 1, c - 1, i]
        return None if np.isnan(prev[0]) else (prev, send_s)
    if s == pp - 1 and c == v - 1:
        return pipe.f_end[s, c, i], 0.0
    nxt = pipe.b_end[s + 1, c, i] if s < pp - 1 else pipe.b_end[0, c + 1, i]
    return None if np.isnan(nxt[0]) else (nxt, send_s)


def _reads_data(kind: str, s: int, c: int, pp: int, v: int) -> bool:
    """Whether task (``kind``, stage ``s``, chunk ``c``) takes a batch from the data loader: the forward
    of the first virtual stage (tokens) and of the last (labels and loss mask), once per micro-batch —
    Megatron-LM's ``forward_step`` calls ``get_batch`` before each micro-batch's forward, after the
    blocking ``recv_forward`` of its input (pretrain_gpt.py; megatron/core/pipeline_parallel/schedules.py,
    NVIDIA/Megatron-LM @d98e8a64)."""
    return kind == "F" and ((s == 0 and c == 0) or (s == pp - 1 and c == v - 1))


def _account_data_wait(acct: _Account, s: int, ready: np.ndarray, start: np.ndarray) -> None:
    """Book the time stage ``s`` waited for its batch between ``ready`` (its input was in) and ``start``."""
    gap = start - ready
    acct.add("data_wait", s, gap)
    if gap.any():
        acct.record(s, "data_wait", "wait for data", "data", ready, start)


def _account_wait(acct: _Account, s: int, i: int, free: np.ndarray, start: np.ndarray, dep_send: float) -> None:
    """Book the time stage ``s`` waited between ``free`` and ``start`` on the neighbour stage: its send is
    exposed communication, the rest is bubble."""
    gap = start - free
    sending = np.minimum(gap, dep_send)
    acct.add_comm("pp sendrecv", s, sending)
    acct.add("bubble", s, gap - sending)
    if (gap - sending).any():
        acct.record(s, "bubble", "pipeline bubble", "pp", free, start - sending)
    if sending.any():
        acct.record(s, "comm", f"pp recv mb{i}", "pp", start - sending, start)


def _run_task(step: TrainingStep, comm: _CommTimes, acct: _Account, s: int, task: tuple[str, int, int],
              start: np.ndarray, compute: np.ndarray) -> np.ndarray:
    """Book one forward or backward of stage ``s`` and its inline collectives from ``start``; its end."""
    kind, i, c = task
    v = step.model_chunks
    inline = comm.inline_fwd_s if kind == "F" else comm.inline_bwd_s
    if step.stage_layer_scale is not None:  # uneven stages: a smaller stage runs fewer layers' collectives
        inline = {label: seconds * float(step.stage_layer_scale[s]) for label, seconds in inline.items()}
    acct.add("compute", s, compute)
    name = ("fwd" if kind == "F" else "bwd") + (f" mb{i}" if v == 1 else f" mb{i} chunk{c}")
    acct.record(s, "compute", name, "", start, start + compute)
    t = start + compute
    for label, seconds in inline.items():
        if seconds > 0:
            acct.add_comm(label, s, seconds / v)
            acct.record(s, "comm", f"{label} {name}", label.split()[0], t, t + seconds / v)
            t = t + seconds / v
    return start + compute + sum(inline.values()) / v


def _run_pipeline(step: TrainingStep, comm: _CommTimes, factor: np.ndarray, t_start: float, data_ready: np.ndarray,
                  acct: _Account) -> _Pipeline:
    """Run every stage's (interleaved) 1F1B order from ``t_start``, each task once its input is ready
    and, on a stage that reads data, its batch (``data_ready``: (pp, micro-batches, dp) times)."""
    lay = step.layout
    pp, dp, m, v = lay.pp, lay.dp, step.micro_batches, step.model_chunks
    tp_factor = factor[lay.lane_ranks()].max(axis=2)  # a TP (x CP) group runs at its slowest GPU
    c_fwd = step.fwd_compute_s[:, None] * tp_factor
    c_bwd = step.bwd_compute_s[:, None] * tp_factor
    pipe = _Pipeline(orders=[interleaved_one_f_one_b(pp, s, m, v, step.microbatch_group_size) for s in range(pp)],
                     f_end=np.full((pp, v, m, dp), np.nan), b_end=np.full((pp, v, m, dp), np.nan),
                     clock=np.full((pp, dp), t_start), last_b_start=np.zeros((pp, v, dp)), position=[0] * pp)
    progressed = True
    while progressed:
        progressed = False
        for s in range(pp):
            while pipe.position[s] < len(pipe.orders[s]):
                kind, i, c = task = pipe.orders[s][pipe.position[s]]
                found = _dependency(pipe, kind, s, c, i, comm.pp_send_s)
                if found is None:
                    break
                dep, dep_send = found
                if step.overlap_p2p_comm:
                    # the transfer ran while this stage was still computing (posted ahead, waited on late)
                    start = np.maximum(pipe.clock[s], dep + dep_send)
                else:
                    # Megatron's blocking send_forward_recv_backward: the exchange starts once both
                    # stages reach it, so its transfer is always on this stage's path
                    start = np.maximum(pipe.clock[s], dep) + dep_send
                if not (s == 0 and c == 0 and kind == "F"):
                    _account_wait(acct, s, i, pipe.clock[s], start, dep_send)
                if _reads_data(kind, s, c, pp, v):
                    fed = np.maximum(start, data_ready[s, i])
                    _account_data_wait(acct, s, start, fed)
                    start = fed
                compute = (c_fwd[s] if kind == "F" else c_bwd[s]) / v
                end = _run_task(step, comm, acct, s, task, start, compute)
                if kind == "F":
                    pipe.f_end[s, c, i] = end
                else:
                    pipe.b_end[s, c, i] = end
                    pipe.last_b_start[s, c] = start
                pipe.clock[s] = end
                pipe.position[s] += 1
                progressed = True
    if any(pipe.position[s] < len(pipe.orders[s]) for s in range(pp)):
        raise SimulationError("pipeline schedule deadlocked; expected every 1F1B dependency to be met")
    return pipe


def _reduce_gradients(step: TrainingStep, comm: _CommTimes, acct: _Account, s: int, t1: np.ndarray,
                      last_b_start: np.ndarray, nb: dict[str, int]) -> tuple[float, dict[str, float]]:
    """When stage ``s``'s gradient buckets (``nb``: how many per group) are reduced on every replica
    (its slowest replica's end when there are none), and the part of each group's reduction that
    runs past the last backward. Each group's buckets become ready evenly during the last backward;
    the buckets of all groups are reduced one after another in the order they are ready (one
    communication stream), each once every replica has it."""
    dp = step.layout.dp
    t_end = t1.max()
    if not any(nb.values()):
        return t_end, {}
    # a chunk's gradients are complete after its last backward: buckets fill from the first
    # chunk to finish (interleaved schedules finish chunks one after another) to the end
    t0 = last_b_start.min(axis=0) if step.overlap_grad_reduce else t1
    ready: dict[str, np.ndarray] = {}
    queue: list[tuple[float, str]] = []
    for g, n in nb.items():
        if n:
            ready[g] = (t0[None, :] + (np.arange(1, n + 1)[:, None] / n) * (t1 - t0)[None, :]).max(axis=1)
            queue += [(float(r), g) for r in ready[g]]
    end = -np.inf
    last = dict.fromkeys(ready, -np.inf)
    past = dict.fromkeys(ready, 0.0)  # seconds of each group's buckets after the last backward
    for r, g in sorted(queue, key=lambda item: item[0]):  # stable: ties keep the group order
        start = max(end, r)
        end = start + comm.bucket_s.get(g, 0.0)
        last[g] = end
        past[g] += max(end - max(start, t_end), 0.0)
    end_dp = max(end, t_end)
    # the queue is busy from t_end to end_dp: the non-expert buckets take what the others leave
    others = sum(v for g, v in past.items() if g != "dp")
    exposed = {g: (end_dp - t_end) - others if g == "dp" else past[g] for g in ready}
    for g in ready:
        label = f"{g} {step.dp_collective}"
        acct.record(s, "comm", f"{label} ({nb[g]} buckets)", g, np.full(dp, ready[g][0]), np.full(dp, max(last[g], t_end)))
    return end_dp, exposed


def _finish_stage(step: TrainingStep, comm: _CommTimes, acct: _Account, s: int, t1: np.ndarray,
                  last_b_start: np.ndarray, nb: dict[str, int]) -> np.ndarray:
    """After stage ``s``'s last backward (``t1`` per replica): gradient reduction, the wait for the
    slowest replica, the optimizer and the parameter all-gathers; the stage's end per replica."""
    dp = step.layout.dp
    end_dp, exposed = _reduce_gradients(step, comm, acct, s, t1, last_b_start, nb)
    straggle = np.minimum(t1.max(), end_dp) - t1
    acct.add("straggler_wait", s, straggle)
    if straggle.any():
        acct.record(s, "straggler_wait", "wait for slowest replica", "dp", t1, t1 + straggle)
    for g, seconds in exposed.items():
        acct.add_comm(f"{g} {step.dp_collective}", s, np.full(dp, seconds))
    t = np.full(dp, end_dp)
    opt = step.optimizer_s
    acct.add("compute", s, opt)
    acct.record(s, "compute", "optimizer", "", t, t + opt)
    t = t + opt
    for g, gather_s in comm.param_gather_s.items():
        if gather_s[s] > 0:
            acct.add_comm(f"{g} all_gather", s, gather_s[s])
            acct.record(s, "comm", f"{g} all_gather params", g, t, t + gather_s[s])
            t = t + gather_s[s]
    return t


def _end_step(step: TrainingStep, comm: _CommTimes, acct: _Account, stage_end: np.ndarray, checkpoint: bool) -> float:
    """The step ends with its last stage: the others' tail is bubble (straggling without a pipeline),
    then the checkpoint write if this step takes one."""
    pp, dp = step.layout.pp, step.layout.dp
    step_end = float(stage_end.max())
    tail = step_end - stage_end
    acct.add("bubble" if pp > 1 else "straggler_wait", slice(None), tail)
    if checkpoint and comm.checkpoint_s > 0:
        acct.add("checkpoint", slice(None), comm.checkpoint_s)
        for s in range(pp):
            acct.record(s, "checkpoint", "checkpoint write", "storage", np.full(dp, step_end),
                        np.full(dp, step_end + comm.checkpoint_s))
        step_end += comm.checkpoint_s
    return step_end


def _simulate_step(step: TrainingStep, comm: _CommTimes, factor: np.ndarray, t_start: float, data_ready: np.ndarray,
                   checkpoint: bool, acct: _Account) -> float:
    """Run one step from ``t_start``, its batches ready at ``data_ready``; fill ``acct``; return the step's end time."""
    lay = step.layout
    pipe = _run_pipeline(step, comm, factor, t_start, data_ready, acct)
    n_buckets = _buckets(step)
    stage_end = np.empty((lay.pp, lay.dp))
    for s in range(lay.pp):
        nb = {g: int(n[s]) for g, n in n_buckets.items()}
        stage_end[s] = _finish_stage(step, comm, acct, s, pipe.clock[s].copy(), pipe.last_b_start[s], nb)
    return _end_step(step, comm, acct, stage_end, checkpoint)


def _factors(step: TrainingStep, steps: int) -> np.ndarray:
    """(steps, ranks) compute-time factors: lognormal jitter of mean 1 and the given CV, times slow GPUs."""
    rng = as_generator(step.seed)
    n = step.layout.n_ranks
    if step.jitter_cv > 0:
        sigma = math.sqrt(math.log1p(step.jitter_cv ** 2))
        jitter = rng.lognormal(-sigma ** 2 / 2, sigma, size=(steps, n))
    else:
        jitter = np.ones((steps, n))
    return jitter * step.slow_factor[None, :]


def _batch_period_s(step: TrainingStep, comm: _CommTimes) -> np.ndarray:
    """(pp, dp) seconds between two micro-batches of each lane's producer (the CPU loaders, or storage
    reads when the fabric cannot deliver them at the asked rate) on the stages that read data; 0 where
    the producer keeps up with the GPUs over a step (it works ahead, so no batch is ever late)."""
    lay, m = step.layout, step.micro_batches
    nominal_s = float((step.fwd_compute_s + step.bwd_compute_s).sum()) * m / lay.pp
    stages, _ = lay.data_readers()
    period_s = np.zeros((lay.pp, lay.dp))
    period_s[list(stages)] = np.maximum(step.loader_s_per_step[list(stages)], nominal_s * (1.0 + comm.storage_shortfall))
    return np.where(period_s > nominal_s, period_s / m, 0.0)


def _steady_batch_s(step: TrainingStep, comm: _CommTimes, factors: np.ndarray) -> np.ndarray:
    """(pp, 1, dp) seconds between two micro-batches of the producers that make GPUs wait in steady state;
    0 on every other lane.

    A producer works ahead without pause, so one whose period is shorter than the job's gains that
    difference every step and, in a running job, is ahead by any margin: its batches are ready when
    asked. The job's period is its slowest producer's, or its GPUs' mean step without data waits where
    that is longer. Only the producers with the job's period, the slowest ones where they are slower
    than the GPUs, are left: a server with a faster loader than the job's slowest, or a loader slower
    than the stages' compute but faster than the pipelined step, never starves its GPUs.
    """
    lay, m = step.layout, step.micro_batches
    batch_s = _batch_period_s(step, comm)
    if not (batch_s > 0).any():
        return batch_s[:, None, :]
    slowest_s = float(batch_s.max())
    free = np.full((lay.pp, m, lay.dp), -np.inf)
    t, free_s = 0.0, 0.0  # the window's steps with every batch ready, checkpoints as in the window
    for k, f in enumerate(factors):
        end = _simulate_step(step, comm, f, t, free, _checkpoint(step, k), _Account((lay.pp, lay.dp)))
        free_s, t = free_s + end - t, end
    binding = np.isclose(batch_s, slowest_s, rtol=1e-9, atol=0.0) & (slowest_s * m > free_s / len(factors))
    return np.where(binding, batch_s, 0.0)[:, None, :]


def _checkpoint(step: TrainingStep, k: int) -> bool:
    """Whether the window's step ``k`` (from 0) ends with a checkpoint write."""
    interval = step.checkpoint_interval_steps
    return bool(interval and (k + 1) % interval == 0)


def _run_steps(step: TrainingStep, comm: _CommTimes, factors: np.ndarray, progress=None):
    """Run the steps back to back, in steady state. Data comes, on each lane that reads it, from a
    producer that works ahead without pause, one micro-batch at a time (Megatron-LM reads a batch per
    micro-batch), so a forward waits only when the producer is slower than the job (:func:`_steady_batch_s`).

    Where a producer is that slow, two unreported steps run first. A job's first step finds a batch
    its loaders made before training began and fills its pipeline while the others wait for data;
    no later step does either. From the end of the second step on, every step ends the same time
    after the slowest producer's last batch of the step, so the window starts in the phase of a
    running job. The second unreported step is the last step again (its jitter, its checkpoint), so the
    window also ends in the phase it starts in (periodic boundaries): a producer-bound window spans exactly its
    production periods, on the real network and on the ideal one alike (docs/workloads.md)."""
    lay = step.layout
    steps = len(factors)
    ends, accts = [], []
    m = step.micro_batches
    batch_s = _steady_batch_s(step, comm, factors)  # (pp, 1, dp)
    slow = batch_s > 0
    # the second warm-up step is the window's last (jitter and checkpoint), so the window is periodic
    warm_up = [(factors[0], False), (factors[-1], _checkpoint(step, steps - 1))] if slow.any() else []
    t = 0.0
    for k, (f, checkpoint) in enumerate(warm_up):
        ready = np.where(slow, (k * m + np.arange(m)[None, :, None]) * batch_s, -np.inf)
        t = _simulate_step(step, comm, f, t, ready, checkpoint, _Account((lay.pp, lay.dp)))
    warm_up_end_s, t = t, 0.0  # the window's clock starts where the warm-up ends
    for k in range(steps):
        acct = _Account((lay.pp, lay.dp))
        ready = np.where(slow, ((k + len(warm_up)) * m + np.arange(m)[None, :, None]) * batch_s - warm_up_end_s, -np.inf)
        end = _simulate_step(step, comm, factors[k], t, ready, _checkpoint(step, k), acct)
        ends.append(end - t)
        accts.append(acct)
        t = end
        if progress is not None:
            progress(k + 1, steps)
    return np.array(ends), accts


def _per_rank(step: TrainingStep, accts: list[_Account], factors: np.ndarray) -> dict[str, np.ndarray]:
    """Mean seconds per step of each category for every rank; the TP-group lane is split between
    a GPU's own compute and its wait for the slowest GPU of its TP group."""
    lay = step.layout
    lane = lay.lane_of()  # (stage, replica) lane = TP (x CP) group index
    out = {c: np.zeros(lay.n_ranks) for c in BREAKDOWN_CATEGORIES}
    nominal = (step.fwd_compute_s + step.bwd_compute_s) * step.micro_batches  # (pp,)
    stage = lay.stage_of()
    for acct, f in zip(accts, factors):
        for c in BREAKDOWN_CATEGORIES:
            out[c] += acct.seconds[c].ravel()[lane]
        tp_max = f[lay.lane_ranks()].reshape(lay.pp * lay.dp, -1).max(axis=1)[lane]
        own_wait = (tp_max - f) * nominal[stage]
        out["compute"] -= own_wait
        out["straggler_wait"] += own_wait
    return {c: v / len(accts) for c, v in out.items()}


def _task_table(step: TrainingStep, accts: list[_Account], max_tasks: int) -> tuple[TaskTable, int | None]:
    """Every GPU's tasks, one row per (task record, GPU of its lane), in record order, as many records
    as fit in ``max_tasks`` rows; and how many steps the table holds whole when it stops before the
    run does (its last step may be cut short), None when it holds every task. Built in one pass over
    the records' columns: a record stands for the same number of GPUs on every stage (dp lanes of a TP
    group's width), so a run of tens of steps spent more time copying rows one record at a time than
    simulating them."""
    lay = step.layout
    ranks_of_lane = lay.lane_ranks()  # (pp, dp, width)
    width = ranks_of_lane.shape[2]
    per_record = lay.dp * width
    records = [(k, rec) for k, acct in enumerate(accts) for rec in acct.records]
    kept = max_tasks // per_record if per_record else 0
    whole_steps = None
    if kept < len(records):
        whole_steps = int(np.searchsorted(np.cumsum([len(acct.records) for acct in accts]), kept, side="right"))
    records = records[:kept]
    if not records:
        empty = np.zeros(0)
        return TaskTable(empty.astype(np.int32), empty.astype(np.int32), empty.astype(object), empty.astype(object),
                         empty.astype(object), empty, empty, empty), whole_steps
    stage = np.array([rec[0] for _, rec in records])
    text = {col: np.repeat(np.array([rec[i] for _, rec in records], dtype=object), per_record)
            for i, col in ((1, "kind"), (2, "name"), (3, "group"))}
    times = [np.repeat(_per_lane([rec[i] for _, rec in records], lay.dp), width, axis=1).ravel() for i in (4, 5)]
    return TaskTable(ranks_of_lane[stage].reshape(-1).astype(np.int32),
                     np.repeat(np.array([k for k, _ in records], np.int32), per_record),
                     text["kind"], text["name"], text["group"], times[0], times[1], times[1] - times[0]), whole_steps


def _per_lane(times: list[np.ndarray], dp: int) -> np.ndarray:
    """(records, dp) times from records' times, each one time for every lane (0-d) or one per lane (dp,)."""
    out = np.empty((len(times), dp))
    scalar = [i for i, t in enumerate(times) if t.ndim == 0]
    lanes = [i for i, t in enumerate(times) if t.ndim != 0]
    if scalar:
        out[scalar] = np.array([times[i] for i in scalar])[:, None]
    if lanes:
        out[lanes] = np.stack([times[i] for i in lanes])
    return out


def _network_only(fabric: FabricModel, link_values: np.ndarray) -> np.ndarray:
    """Only fabric and host-NIC links: NVLink and PCIe traffic does not meet other families'."""
    return np.where(fabric.topo.network_links, link_values, 0.0)


def _networked(comm: _CommTimes) -> int:
    """How many of the step's communication families put bytes on the network."""
    return sum(1 for _label, run, _calls in comm.families if run.link_bytes.any())


def _group_sizes(lay: Layout) -> dict[str, int]:
    return {"tp": lay.tp, "cp": lay.cp, "dp": lay.dp * lay.cp, "pp": lay.pp, "ep": lay.ep, "expert_dp": lay.expert_dp}


def run_training(step: TrainingStep, fabric: FabricModel, *, steps: int = 1, case: str = "", cluster: str = "",
                 max_tasks: int = 2_000_000, progress=None) -> RunResult:
    """Simulate ``steps`` training steps and the same steps on an ideal network.

    Returns a :class:`~gpuwait.steps.result.RunResult`; nothing in ``step`` or ``fabric`` changes.
    """
    if steps < 1:
        raise SimulationError(f"steps: got {steps}; expected at least 1")
    comm = _comm_times(step, fabric)
    factors = _factors(step, steps)
    step_times, accts = _run_steps(step, comm, factors, None if _networked(comm) > 1 else progress)
    if _networked(comm) > 1:
        # the step's other traffic shares the links: time each family again beside the others'
        # mean load over the step just simulated (a second pass; bursts above the mean are not seen)
        mean_step_s = float(step_times.mean())
        loads = {label: _network_only(fabric, run.link_bytes) * calls / mean_step_s for label, run, calls in comm.families}
        comm = _comm_times(step, fabric, loads)
        step_times, accts = _run_steps(step, comm, factors, progress)
    ideal_times, _ = _run_steps(step, _comm_times(step, None), factors)
    per_gpu = _per_rank(step, accts, factors)
    step_time = float(step_times.mean())
    exposed: dict[str, float] = {}
    lane = step.layout.lane_of()
    for acct in accts:
        for label, v in acct.comm.items():
            exposed[label] = exposed.get(label, 0.0) + float(v.ravel()[lane].mean()) / len(accts)
    mfu = step.model_flops_per_step / (step_time * step.layout.n_ranks * step.peak_flops_per_gpu) if step_time > 0 else 0.0
    breakdown = StepBreakdown(step_time, per_gpu, exposed, float(ideal_times.mean()), mfu,
                              step.model_flops_per_step, step.tokens_per_step)
    tasks, whole_steps = _task_table(step, accts, max_tasks)
    return RunResult(case=case, workload=step.description, cluster=cluster, steps=steps, breakdown=breakdown,
                     collectives=collective_stats(comm.families, _group_sizes(step.layout)),
                     links=link_stats(fabric, comm.families, step_time),
                     tasks=tasks, tasks_whole_steps=whole_steps, step_times_s=step_times,
                     gpus_per_server=fabric.topo.gpus_per_server)


def communication_families(step: TrainingStep, fabric: FabricModel) -> list[Family]:
    """(label, run, calls per step) of every communication family of ``step`` on ``fabric``, each
    timed alone (the first pass of :func:`run_training`); for models that run several jobs' steps
    together (:mod:`gpuwait.runner.jobs`)."""
    return list(_comm_times(step, fabric).families)
