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
    loader_s_per_step: float       # CPU time to prepare one step's samples on a server
    storage_read_Bps_per_gpu: float
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


def one_f_one_b(pp: int, stage: int, micro_batches: int) -> list[tuple[str, int]]:
    """The 1F1B order of one stage: warm-up forwards, alternating pairs, cool-down backwards
    (Narayanan et al., SC'21, Fig. 4)."""
    warmup = min(pp - stage - 1, micro_batches)
    order = [("F", i) for i in range(warmup)]
    for j in range(micro_batches - warmup):
        order += [("F", warmup + j), ("B", j)]
    order += [("B", i) for i in range(micro_batches - warmup, micro_batches)]
    return order


def interleaved_one_f_one_b(pp: int, stage: int, micro_batches: int, chunks: int) -> list[tuple[str, int, int]]:
    """The interleaved 1F1B order of one stage holding ``chunks`` model chunks: (kind, micro-batch,
    chunk). Megatron-LM's schedule (Narayanan et al., SC'21, §2.2.2): micro-batches go through the
    chunks in groups of ``pp``; warm-up runs ``2 (pp - stage - 1) + (chunks - 1) pp`` forwards; the
    bubble shrinks ``chunks``-fold. ``micro_batches`` must be a multiple of ``pp`` when chunks > 1.

    >>> interleaved_one_f_one_b(2, 1, 2, 2)[:4]
    [('F', 0, 0), ('F', 1, 0), ('F', 0, 1), ('B', 0, 1)]
    """
    if chunks == 1:
        return [(kind, i, 0) for kind, i in one_f_one_b(pp, stage, micro_batches)]
    total = micro_batches * chunks
    group = pp * chunks

    def unit(k: int, forward: bool) -> tuple[int, int]:
        chunk = (k % group) // pp
        return (k // group) * pp + k % pp, chunk if forward else chunks - chunk - 1

    warmup = min((pp - stage - 1) * 2 + (chunks - 1) * pp, total)
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
