"""What a training or inference step does, as the engines run it: compute times per pipeline stage,
the collectives each parallel group issues and how often, pipeline sends, gradient buckets, data
and checkpoints. Derived from the workload spec by :mod:`gpuwait.workload.steps`; plain data, no
simulation (the engines in :mod:`gpuwait.steps.training` and :mod:`gpuwait.steps.serving` run it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuwait.workload.layout import Layout


@dataclass(frozen=True)
class CommOp:
    """A collective each group of ``group`` runs ``calls_fwd`` times per micro-batch forward and
    ``calls_bwd`` times per backward, on ``size_bytes`` (nccl-tests size convention)."""

    group: str
    collective: str
    size_bytes: float
    calls_fwd: int
    calls_bwd: int
    hidden_s: float = 0.0  # compute that can hide each call (an overlap switch)
    hidden_with: str = ""  # ops of the same name run one after another under one hidden_s window
    zero3: bool = False    # a ZeRO-3 weight gather / gradient scatter, queued per layer as FSDP issues it


@dataclass(frozen=True, eq=False)
class TrainingStep:
    """Everything a training step needs, derived from the workload spec (no logic here)."""

    layout: Layout
    micro_batches: int
    fwd_compute_s: np.ndarray      # (pp,) one micro-batch's forward on a stage, nominal GPU speed
    bwd_compute_s: np.ndarray      # (pp,) its backward (with recomputation if any)
    optimizer_s: float
    inline_ops: tuple[CommOp, ...]  # TP / EP / ZeRO-3 collectives inside forward and backward
    pp_send_bytes: float           # activations (and their gradients) per micro-batch per boundary
    dp_grad_bytes: np.ndarray      # (pp,) non-expert gradient bytes per GPU of each stage, reduced over dp x cp
    bucket_bytes: float
    dp_collective: str             # "all_reduce" (DDP, ZeRO-0) or "reduce_scatter" (ZeRO >= 1)
    param_gather_bytes: np.ndarray  # (pp,) all_gather of non-expert parameters after the optimizer (ZeRO 1, 2), 0 if none
    overlap_grad_reduce: bool
    jitter_cv: float
    slow_factor: np.ndarray        # (ranks,) compute slowdown per rank (1 = nominal)
    seed: int
    loader_s_per_step: np.ndarray  # (pp, dp) CPU time a lane's loaders take to prepare one step's samples (0: none)
    storage_read_Bps_per_reader: float  # dataset bytes/s each reading GPU asks (Layout.reader_ranks); 0: none
    checkpoint_bytes_per_gpu: float
    checkpoint_interval_steps: int | None
    model_flops_per_step: float
    tokens_per_step: int
    peak_flops_per_gpu: float
    description: str = ""
    model_chunks: int = 1          # interleaved 1F1B: model chunks (virtual stages) per pipeline stage
    stage_layer_scale: np.ndarray | None = None  # (pp,) layers of each stage / the largest stage's (inline ops scale)
    prefetch_depth: int = 1        # ZeRO-3: layers a weight all-gather may run ahead of compute (FSDP: 1)
    zero3_layers: int = 0          # ZeRO-3: layers whose weights are gathered per micro-batch (0 = no ZeRO-3)
    overlap_p2p_comm: bool = True  # pipeline sends overlapped with compute (False: each exchange blocks)
    expert_grad_bytes: np.ndarray | None = None  # (pp,) routed-expert gradient bytes per GPU, reduced over expert_dp
    expert_param_gather_bytes: np.ndarray | None = None  # (pp,) the same for the expert all_gather; None = 0
    microbatch_group_size: int | None = None  # interleaved 1F1B: micro-batches per chunk in a row (N); None = pp


def one_f_one_b(pp: int, stage: int, micro_batches: int) -> list[tuple[str, int]]:
    """The 1F1B order of one stage: warm-up forwards, alternating pairs, cool-down backwards
    (Narayanan et al., SC'21, Fig. 4)."""
    warmup = warmup_forwards(pp, stage, micro_batches)
    order = [("F", i) for i in range(warmup)]
    for j in range(micro_batches - warmup):
        order += [("F", warmup + j), ("B", j)]
    order += [("B", i) for i in range(micro_batches - warmup, micro_batches)]
    return order


def warmup_forwards(pp: int, stage: int, micro_batches: int, chunks: int = 1, group: int | None = None) -> int:
    """Forwards stage ``stage`` runs before its first backward, counted in (micro-batch, chunk) units.

    Megatron-Core's ``get_pp_rank_microbatches`` (megatron/core/pipeline_parallel/schedules.py, NVIDIA/Megatron-LM
    @d98e8a64, 2026-08-22): ``pp - stage - 1`` without interleaving; with ``chunks`` model chunks per stage
    ``2 (pp - stage - 1) + (chunks - 1) group``, ``group`` being ``microbatch_group_size_per_vp_stage``
    (default ``pp``); both capped at the ``micro_batches x chunks`` forwards of the step.

    >>> warmup_forwards(4, 0, 8), warmup_forwards(4, 0, 8, chunks=2), warmup_forwards(4, 0, 8, 2, group=8)
    (3, 10, 14)
    """
    if chunks == 1:
        return min(pp - stage - 1, micro_batches)
    return min(2 * (pp - stage - 1) + (chunks - 1) * (group or pp), micro_batches * chunks)


def _groups(micro_batches: int, group: int) -> tuple[int, int]:
    """Megatron-Core's micro-batch groups: how many full ``group``-sized groups come before the last,
    and the last group's size (the rest, 1 to ``group``; ``get_schedule_table``)."""
    full = -(-micro_batches // group) - 1
    return full, micro_batches - full * group


def schedule_unit(k: int, micro_batches: int, chunks: int, group: int) -> tuple[int, int]:
    """The (micro-batch, chunk) of a stage's ``k``-th forward in the interleaved order: Megatron-Core's
    ``get_schedule_table`` (schedules.py @d98e8a64). Micro-batches run in groups of ``group``, each group
    through chunk 0, then chunk 1, ...; the last group takes the micro-batches left over.

    >>> [schedule_unit(k, 5, 2, 3) for k in range(10)]  # its docstring's PP 2, N 3, M 5, VP 2
    [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1), (3, 0), (4, 0), (3, 1), (4, 1)]
    """
    full, last = _groups(micro_batches, group)
    regular = full * group * chunks
    if k < regular:
        g, r = divmod(k, group * chunks)
        return g * group + r % group, r // group
    r = k - regular
    return full * group + r % last, r // last


def _forwards_of_chunk(x: int, micro_batches: int, chunks: int, group: int, chunk: int) -> int:
    """How many of a stage's first ``x`` forwards run ``chunk`` (:func:`schedule_unit`, counted in closed form)."""
    full, last = _groups(micro_batches, group)
    regular = full * group * chunks
    g, r = divmod(min(x, regular), group * chunks)
    return (g * group + min(max(r - chunk * group, 0), group)
            + min(max(x - regular - chunk * last, 0), last))


def in_flight_counts(pp: int, stage: int, micro_batches: int, chunks: int = 1,
                     group: int | None = None) -> set[tuple[int, ...]]:
    """Micro-batches whose activations stage ``stage`` holds, per model chunk, at each moment the
    holding can peak: right after each forward of the steady phase, before its backward frees one
    (all ``micro_batches`` of every chunk when every forward is warm-up). The distinct count vectors only.

    A forward keeps its chunk's activations until the matching backward; backwards run chunks in
    reverse (Megatron-Core's ``get_model_chunk_id(..., forward=False)``). The steady phase repeats
    every ``group x chunks`` forwards until the last group, so only the first period and the tail are
    visited: the cost grows with ``group x chunks``, not with ``micro_batches`` beyond it (breadth-first,
    group = micro_batches, visits every forward: 0.7 s for 16 stages of 2,048 x 8). Without interleaving this is
    ``min(pp - stage, micro_batches)`` (Narayanan et al., SC'21, §2.2.1).

    >>> in_flight_counts(4, 0, 8), in_flight_counts(4, 3, 8)
    ({(4,)}, {(1,)})
    >>> sorted(in_flight_counts(2, 0, 4, chunks=2))  # warm-up: 4 of the 8 forwards
    [(3, 2), (4, 1)]
    """
    n = group or pp
    total = micro_batches * chunks
    warmup = warmup_forwards(pp, stage, micro_batches, chunks, n)
    if warmup == total:
        return {(micro_batches,) * chunks}
    steady, period = total - warmup, n * chunks
    full, _ = _groups(micro_batches, n)
    tail = max(full * period - warmup - period, 0)
    moments = [*range(min(steady, period)), *range(max(tail, period), steady)]
    return {tuple(_forwards_of_chunk(warmup + k + 1, micro_batches, chunks, n, c)
                  - _forwards_of_chunk(k, micro_batches, chunks, n, chunks - 1 - c) for c in range(chunks))
            for k in moments}


def interleaved_one_f_one_b(pp: int, stage: int, micro_batches: int, chunks: int,
                            group: int | None = None) -> list[tuple[str, int, int]]:
    """The interleaved 1F1B order of one stage holding ``chunks`` model chunks: (kind, micro-batch,
    chunk). Megatron-LM's schedule (Narayanan et al., SC'21, §2.2.2; Megatron-Core's
    ``forward_backward_pipelining_with_interleaving``): micro-batches go through the chunks in groups
    of ``group`` (``microbatch_group_size_per_vp_stage``, default ``pp``: :func:`schedule_unit`);
    warm-up runs :func:`warmup_forwards`; backwards visit the chunks in reverse; the bubble shrinks
    ``chunks``-fold.

    >>> interleaved_one_f_one_b(2, 1, 2, 2)[:4]
    [('F', 0, 0), ('F', 1, 0), ('F', 0, 1), ('B', 0, 1)]
    """
    if chunks == 1:
        return [(kind, i, 0) for kind, i in one_f_one_b(pp, stage, micro_batches)]
    total = micro_batches * chunks
    n = group or pp

    def unit(k: int, forward: bool) -> tuple[int, int]:
        i, chunk = schedule_unit(k, micro_batches, chunks, n)
        return i, chunk if forward else chunks - chunk - 1

    warmup = warmup_forwards(pp, stage, micro_batches, chunks, n)
    order = [("F", *unit(k, True)) for k in range(warmup)]
    for j in range(total - warmup):
        order += [("F", *unit(warmup + j, True)), ("B", *unit(j, False))]
    order += [("B", *unit(k, False)) for k in range(total - warmup, total)]
    return order


@dataclass(frozen=True, eq=False)
class ServingStep:
    """One batch of requests, derived from the workload spec (no logic here)."""

    layout: Layout                 # dp = independent replicas serving in parallel
    prefill_compute_s: float       # one stage's prefill of the whole batch
    decode_compute_s: float        # one stage's decode step (max of FLOP time and weight-read time)
    layers_per_stage: int
    tp_allreduce_prefill_bytes: float  # one all-reduce during prefill (batch x prompt x hidden x bytes)
    tp_allreduce_decode_bytes: float   # one all-reduce during a decode step (batch x hidden x bytes)
    allreduces_per_layer: int          # 2 in Megatron-style TP (attention out, MLP out)
    pp_send_prefill_bytes: float
    pp_send_decode_bytes: float
    output_tokens: int
    batch: int
    model_flops: float             # whole batch, prefill and decode
    peak_flops_per_gpu: float
    description: str = ""
