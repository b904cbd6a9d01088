"""Compute time of a training step from the shapes of its kernels, not from a flat efficiency.

A transformer layer runs, per micro-batch on one tensor-parallel rank:

* **GEMMs** from their (m, n, k) after TP sharding (QKV, attention output, gate+up, down; MoE experts
  with the tokens routing sends them; the LM head). A GEMM's time is ``2·m·n·k / (peak · achievable ·
  quantization)``. Quantization follows NVIDIA's "Matrix Multiplication Background User's Guide"
  (docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication): the output is cut into
  tiles (cuBLAS picks among 256x128, 128x256, 128x128) that run in waves over the SMs, so a GEMM whose
  tiles fill ``SMs + 1`` slots pays for two waves (wave quantization) and a dimension that is not a tile
  multiple pays for the padded tile (tile quantization). A GEMM too small to be compute-bound is bounded
  by its operand bytes over HBM bandwidth (roofline).
* **Attention** (flash): the causal kernel does half the full-matrix FLOPs Megatron counts, at its own
  efficiency (Dao, "FlashAttention-2", arXiv:2307.08691: 50-73 % of A100 peak forward, ~ 60 % forward +
  backward at head dim 128; Shah et al., "FlashAttention-3", arXiv:2407.08608: up to 75 % of H100 bf16 peak).
* **Element-wise and normalization** (RMSNorm, residual adds, SwiGLU, RoPE, fp8 casts): bytes moved / HBM
  bandwidth.
* The **optimizer** stays in :mod:`gpuwait.workload.steps` (Adam, HBM-bound).

``achievable`` is the fraction of the datasheet peak a large, well-shaped GEMM reaches, per GPU generation
and dtype. Its defaults are public cuBLAS / Transformer Engine measurements (see :data:`ACHIEVABLE`) and the
bf16 ones are what ``bench/step_reference.py`` fits across published training runs (leave-one-source-out).
FP8 runs the GEMMs at the FP8 peak with the same model while attention and element-wise work stays in bf16,
so an FP8 step is 0.65-0.8 of a BF16 one, not 0.5.

Activation recomputation (Korthikanti et al. 2022, arXiv:2205.05198): ``selective`` re-runs the attention
core forward during backward, ``full`` the whole layer's forward.

>>> from gpuwait.workload.presets import GPU_PRESETS
>>> c = ComputeModel.for_gpu(GPU_PRESETS["H100-SXM"])
>>> round(c.gemm_efficiency(8192, 8192, 8192), 3)  # 0.78 x 0.73 sustained x 2,048 tiles in 16 waves of 132 SMs
0.552
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gpuwait.errors import SpecError
from gpuwait.workload.presets import GpuPreset

BF16_BYTES = 2

#: Fraction of the dense datasheet peak a large GEMM reaches in a cuBLAS microbenchmark, by (GPU
#: generation, dtype). Public measurements: A100 SXM bf16 ~ 250-270 of 312 TFLOP/s on large square GEMMs;
#: H100 SXM bf16 ~ 750-800 of 989 TFLOP/s and fp8 ~ 1,300-1,450 of 1,979 TFLOP/s (NVIDIA Transformer
#: Engine / cuBLASLt benchmarks). Blackwell: no measurement read; taken equal to Hopper's.
MICROBENCH_ACHIEVABLE: dict[tuple[str, str], float] = {
    ("ampere", "bf16"): 0.85, ("ampere", "fp16"): 0.85, ("ampere", "tf32"): 0.80,
    ("hopper", "bf16"): 0.78, ("hopper", "fp16"): 0.78, ("hopper", "tf32"): 0.75, ("hopper", "fp8"): 0.68,
    ("blackwell", "bf16"): 0.78, ("blackwell", "fp16"): 0.78, ("blackwell", "tf32"): 0.75, ("blackwell", "fp8"): 0.68,
}
#: Share of the microbenchmark rate a GEMM keeps inside a training step (sustained clocks under power
#: limits, launch gaps, kernels sharing the GPU with NCCL). The model's one fitted parameter: one number
#: for every GPU and dtype, fitted by bench/step_reference.py on the published sources it fits on (its
#: leave-one-source-out score refits it without each; sources found after the fit are scored, never
#: fitted on: docs/validation-steps.md).
SUSTAINED_FRACTION = 0.73
#: Fraction of the dense datasheet peak a large GEMM reaches in a training step.
ACHIEVABLE: dict[tuple[str, str], float] = {k: v * SUSTAINED_FRACTION for k, v in MICROBENCH_ACHIEVABLE.items()}
#: Flash attention's fraction of the bf16 peak, forward and backward (FlashAttention-2 on A100: ~ 0.6;
#: Hopper: between FlashAttention-2's ~ 0.35-0.4 and FlashAttention-3's 0.6-0.75; 0.55 taken).
ATTENTION_EFFICIENCY: dict[str, float] = {"ampere": 0.60, "hopper": 0.55, "blackwell": 0.55}
#: Fraction of HBM bandwidth streaming kernels reach (STREAM-like copy on A100/H100 reaches ~ 0.85-0.9).
HBM_EFFICIENCY = 0.85
#: Output tiles cuBLAS chooses among (NVIDIA matrix-multiplication guide, "Tile quantization").
#: Smaller tiles (64-wide) are left out: they trade quantization for operand reuse at a per-SM rate the
#: guide does not give.
TILES: tuple[tuple[int, int], ...] = ((256, 128), (128, 256), (128, 128))


@dataclass(frozen=True)
class ComputeModel:
    """One GPU's kernel-time model: peaks, SMs, HBM bandwidth and the efficiency factors."""

    name: str
    generation: str
    sms: int
    dtype_flops: dict[str, float]
    hbm_Bps: float
    achievable: dict[str, float] = field(default_factory=dict)
    attention_efficiency: float = 0.55
    hbm_efficiency: float = HBM_EFFICIENCY

    @classmethod
    def for_gpu(cls, preset: GpuPreset, *, peak_bf16_flops: float | None = None, hbm_Bps: float | None = None,
                gemm_efficiency: float | None = None, attention_efficiency: float | None = None,
                hbm_efficiency: float | None = None, achievable: dict[tuple[str, str], float] | None = None) -> ComputeModel:
        """The model of ``preset``; explicit arguments override its peak, bandwidth and efficiencies."""
        flops = dict(preset.dtype_flops) or {"bf16": preset.peak_flops, "fp16": preset.peak_flops,
                                             "fp8": 2 * preset.peak_flops}
        if peak_bf16_flops is not None:
            scale = peak_bf16_flops / flops["bf16"]
            flops = {k: v * scale for k, v in flops.items()}
        table = achievable or ACHIEVABLE
        ach = {dt: table.get((preset.generation, dt), 0.75) for dt in flops}
        if gemm_efficiency is not None:
            ach = dict.fromkeys(flops, gemm_efficiency)
        return cls(preset.name, preset.generation, preset.sms, flops, hbm_Bps or preset.hbm_bandwidth_Bps, ach,
                   attention_efficiency if attention_efficiency is not None else ATTENTION_EFFICIENCY.get(preset.generation, 0.55),
                   hbm_efficiency if hbm_efficiency is not None else HBM_EFFICIENCY)

    def peak(self, dtype: str) -> float:
        if dtype not in self.dtype_flops:
            raise SpecError(f"workload.model.precision: {self.name} has no {dtype} tensor cores; expected one of "
                            f"{', '.join(self.dtype_flops)}")
        return self.dtype_flops[dtype]

    # ------------------------------------------------------------------------------------ GEMM
    def quantization(self, m: int, n: int) -> float:
        """Useful share of the tile slots a GEMM's output occupies, with the best tile (tile and wave
        quantization): ``m·n / (waves · SMs · tile_m · tile_n)``; 1 for a shape that fills whole waves.

        >>> c = ComputeModel("x", "hopper", 132, {"bf16": 1e15}, 3e12)
        >>> c.quantization(128 * 132, 256), round(c.quantization(128 * 133, 256), 2)
        (1.0, 0.67)
        """
        best = 0.0
        for tm, tn in TILES:
            tiles = math.ceil(m / tm) * math.ceil(n / tn)
            waves = math.ceil(tiles / self.sms)
            best = max(best, m * n / (waves * self.sms * tm * tn))
        return best

    def gemm_efficiency(self, m: int, n: int, k: int, dtype: str = "bf16") -> float:
        """Achieved fraction of ``dtype``'s peak on an (m, n, k) GEMM, before the HBM bound."""
        return self.achievable.get(dtype, 0.75) * self.quantization(m, n)

    def gemm_time_s(self, m: float, n: float, k: float, dtype: str = "bf16") -> float:
        """Time of ``C[m,n] = A[m,k]·B[k,n]``: compute at the quantized efficiency, at least its operands'
        HBM traffic (``dtype`` inputs, bf16 output)."""
        m, n, k = max(int(round(m)), 1), max(int(round(n)), 1), max(int(round(k)), 1)
        width = 1 if dtype == "fp8" else BF16_BYTES
        compute_s = 2.0 * m * n * k / (self.peak(dtype) * self.gemm_efficiency(m, n, k, dtype))
        memory_s = ((m * k + k * n) * width + m * n * BF16_BYTES) / (self.hbm_Bps * self.hbm_efficiency)
        return max(compute_s, memory_s)

    def gemm_fwd_bwd_s(self, m: float, n: float, k: float, dtype: str) -> tuple[float, float]:
        """Forward GEMM and its two backward GEMMs (data gradient ``m×k`` over n, weight gradient ``k×n`` over m)."""
        return self.gemm_time_s(m, n, k, dtype), self.gemm_time_s(m, k, n, dtype) + self.gemm_time_s(k, n, m, dtype)

    # ------------------------------------------------------------------------------------ others
    def attention_time_s(self, full_matrix_flops: float) -> float:
        """Flash attention forward on ``full_matrix_flops`` (Megatron's count): the causal kernel does half."""
        return 0.5 * full_matrix_flops / (self.peak("bf16") * self.attention_efficiency)

    def hbm_time_s(self, bytes_moved: float) -> float:
        return bytes_moved / (self.hbm_Bps * self.hbm_efficiency)


# ------------------------------------------------------------------------------------------------ layers
@dataclass(frozen=True)
class LayerTimes:
    """One micro-batch through one layer (or the head) on one GPU: forward, backward without recompute,
    and the forward part recomputed by ``selective`` (the attention core) and ``full`` (all of it)."""

    forward_s: float
    backward_s: float
    attention_forward_s: float

    def backward_with(self, recompute: str) -> float:
        if recompute == "full":
            return self.backward_s + self.forward_s
        if recompute == "selective":
            return self.backward_s + self.attention_forward_s
        return self.backward_s


def _gemms(cm: ComputeModel, shapes: list[tuple[float, float, float]], dtype: str) -> tuple[float, float]:
    """Forward and backward time of a list of (m, n, k) GEMMs; fp8 adds the casts of their inputs
    (read bf16, write fp8: 3 B per element of A forward, of the output gradient backward)."""
    fwd = bwd = 0.0
    for m, n, k in shapes:
        f, b = cm.gemm_fwd_bwd_s(m, n, k, dtype)
        fwd, bwd = fwd + f, bwd + b
        if dtype == "fp8":
            fwd += cm.hbm_time_s(3.0 * m * k)
            bwd += cm.hbm_time_s(3.0 * m * n)
    return fwd, bwd


def layer_times(cm: ComputeModel, shape, layer: int, tokens: float, tp: int, ep: int = 1,
                sequence_parallel: bool = True, dtype: str = "bf16") -> LayerTimes:
    """Kernel times of one transformer layer for ``tokens`` tokens (whole sequences) on one TP rank.

    GEMMs (after TP sharding): QKV ``(T, (q + 2kv)/tp, h)``, attention output ``(T, h, q/tp)``, gate+up
    ``(T, 2f/tp, h)``, down ``(T, h, f/tp)``; an MoE layer's router ``(T, E, h)``, shared experts like a dense
    MLP of ``shared·f_e``, and ``E/ep`` local experts of ``T·top_k·ep/E`` tokens each (balanced routing).
    Element-wise bytes per token forward: two RMSNorms (8h) and residual adds (12h) on ``T/tp`` tokens with
    sequence parallelism, RoPE on Q and K (``4(q + kv)/tp``), SwiGLU (``6f/tp``); backward moves twice that.
    """
    h, d = shape.hidden, shape.head_dim
    q, kv = shape.heads * d, shape.kv_heads * d
    t = float(tokens)
    gemms = [(t, (q + 2 * kv) / tp, h), (t, h, q / tp)]
    if shape.is_moe_layer(layer):
        fe = shape.expert_ffn_hidden
        local = shape.experts // ep
        per_expert = t * shape.top_k * ep / shape.experts
        mlp_width = (shape.top_k + shape.shared_experts) * fe
        router = [(t, shape.experts, h)]
        shared = [(t, 2 * shape.shared_experts * fe / tp, h), (t, h, shape.shared_experts * fe / tp)] if shape.shared_experts else []
        experts = [(per_expert, 2 * fe / tp, h), (per_expert, h, fe / tp)] * local
        extra_fwd, extra_bwd = _gemms(cm, router, "bf16")
        mlp_fwd, mlp_bwd = _gemms(cm, shared + experts, dtype)
        mlp_fwd, mlp_bwd = mlp_fwd + extra_fwd, mlp_bwd + extra_bwd
    else:
        f = shape.ffn_hidden
        mlp_width = f
        mlp_fwd, mlp_bwd = _gemms(cm, [(t, 2 * f / tp, h), (t, h, f / tp)], dtype)
    att_fwd, att_bwd = _gemms(cm, gemms, dtype)
    core_fwd = cm.attention_time_s(4.0 * t * shape.seq_len * h / tp)
    norm_tokens = t / tp if sequence_parallel else t
    elementwise = norm_tokens * 20.0 * h + t * (4.0 * (q + kv) + 6.0 * mlp_width) / tp
    ew_s = cm.hbm_time_s(elementwise)
    forward = att_fwd + mlp_fwd + core_fwd + ew_s
    # flash attention's backward does 2.5x its forward's matmul work (dQ, dK, dV and the recomputed scores)
    backward = att_bwd + mlp_bwd + 2.5 * core_fwd + 2.0 * ew_s
    return LayerTimes(forward, backward, core_fwd)


def head_times(cm: ComputeModel, shape, tokens: float, tp: int) -> LayerTimes:
    """The LM head (bf16 GEMM ``(T, V/tp, h)``) and the loss over fp32 logits (written once, read twice
    forward; read and written backward: ~ 20·V/tp bytes per token)."""
    fwd, bwd = _gemms(cm, [(tokens, shape.vocab / tp, shape.hidden)], "bf16")
    loss_s = cm.hbm_time_s(tokens * 4.0 * shape.vocab / tp * 3)
    return LayerTimes(fwd + loss_s, bwd + cm.hbm_time_s(tokens * 4.0 * shape.vocab / tp * 2), 0.0)
