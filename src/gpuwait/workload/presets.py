"""Model and GPU presets: registries of published shapes and datasheet figures.

Adding a preset is one ``register_*`` call; no other file changes.

Where the numbers come from:

* Llama 3 (``llama-8b``, ``llama-70b``, ``llama-405b``): Llama Team, "The Llama 3 Herd of Models",
  arXiv 2407.21783, Table 3 (layers, model dimension, FFN dimension, attention heads, key/value heads;
  8 192-token pre-training sequences). Vocabulary 128 256 = the released tokenizer (the paper rounds
  it to 128K). Untied input and output embeddings. Published sizes 8.0B / 70.6B / 405B.
* ``mixtral-8x7b``: Jiang et al., "Mixtral of Experts", arXiv 2401.04088, Table 1 (32 layers, dim 4096,
  hidden 14336, 32 heads, 8 KV heads, 8 experts, top-2, vocab 32000); 46.7B total, 12.9B active.
  Sequence length 4096 is a training choice here (the model's context is 32k).
* ``deepseek-moe-16b``: Dai et al., "DeepSeekMoE", arXiv 2401.06066, §5 / the released config (28 layers,
  hidden 2048, 16 heads, 64 routed experts of 1408 with top-6 plus 2 shared, first layer dense with
  10944, vocab 102400); 16.4B total, 2.8B active.
* GPUs: NVIDIA datasheets and architecture whitepapers — dense (not 2:4 sparse) tensor-core FLOP/s per
  dtype, HBM capacity and bandwidth, SM count, NVLink bandwidth per GPU (both directions). Each preset's
  ``source`` names its documents; docs/sources.md has a row per figure. NVIDIA's "GB" of HBM are binary in
  practice (nvidia-smi shows 81559 MiB on an H100 80GB), so memory is stored in GiB. The A100 has no FP8
  (``fp8`` absent: an fp8 workload on it is an error). H800 and H20 figures are from NVIDIA's China-market
  product briefs as reported by vendors and the press (no English NVIDIA datasheet read): the H800 SXM is an
  H100 SXM with NVLink cut to 400 GB/s; the H20 is a 78-SM Hopper at 148 TFLOP/s bf16 with 96 GB at 4.0 TB/s.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuwait.errors import SpecError
from gpuwait.topology.gpus import gpu_arch

GiB = 2.0**30

#: model preset name -> ModelSpec fields
MODEL_PRESETS: dict[str, dict] = {}


@dataclass(frozen=True)
class GpuPreset:
    """Datasheet figures of one GPU (dense tensor-core FLOP/s per dtype; ``fp32`` is the CUDA-core rate)."""

    name: str
    peak_flops: float       # dense bf16 tensor-core FLOP/s
    memory_bytes: float     # HBM capacity, bytes
    hbm_bandwidth_Bps: float  # HBM bandwidth, bytes/s
    source: str
    generation: str = "hopper"  # ampere | hopper | blackwell: selects the achievable-peak factors
    sms: int = 132              # streaming multiprocessors (GEMM wave quantization)
    dtype_flops: tuple[tuple[str, float], ...] = ()  # (dtype, dense FLOP/s): fp32, tf32, bf16, fp16, fp8
    nvlink_Bps: float = 0.0     # NVLink bytes/s per GPU, both directions together (datasheet convention)

    def flops(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype``; SpecError when the GPU has no such tensor-core path.

        >>> GPU_PRESETS["H100-SXM"].flops("fp8"), GPU_PRESETS["A100"].flops("tf32")
        (1979000000000000.0, 156000000000000.0)
        """
        table = dict(self.dtype_flops) or {"bf16": self.peak_flops, "fp16": self.peak_flops, "fp8": 2 * self.peak_flops}
        if dtype not in table:
            raise SpecError(f"workload.model.precision: {self.name} has no {dtype} tensor cores; expected one of "
                            f"{', '.join(table)}")
        return table[dtype]


GPU_PRESETS: dict[str, GpuPreset] = {}


@dataclass(frozen=True)
class EnginePreset:
    """A serving engine's fixed time in a decode step, per transformer layer and per step, read off published
    measurements.

    A decode step of a small batch reads every weight once, but it also runs ~10 small kernels per layer
    (norms, rotary embedding, KV-cache write, attention, activation, residual adds) whose launch, ramp-up and
    tail gaps do not shrink with the bytes read: that part scales with the layers a GPU runs, not with tp or
    the batch (``decode_layer_overhead_s``). Outside the model's forward the engine schedules, samples and
    detokenizes once a step whatever the layers (``decode_step_overhead_s``). Each part is a published time
    less gpuwait's own roofline for the same work (weights and KV cache at ``compute.hbm_efficiency`` of the
    datasheet bandwidth): the forward's time over the layers, and the step's time outside the forward less the
    LM head's read. An engine whose sources publish only the whole step carries it all per layer and 0 per
    step (an assumption, said in ``source``). ``source`` names the measurements.
    """

    name: str
    decode_layer_overhead_s: float
    decode_step_overhead_s: float
    source: str


#: serving engine name -> its fixed decode time per layer and per step
ENGINE_PRESETS: dict[str, EnginePreset] = {}


def register_engine(preset: EnginePreset) -> EnginePreset:
    """Add a serving-engine preset."""
    ENGINE_PRESETS[preset.name] = preset
    return preset


def register_model(name: str, **fields) -> dict:
    """Add a model preset (fields of :class:`gpuwait.spec.workload.ModelSpec`)."""
    MODEL_PRESETS[name] = dict(fields)
    return MODEL_PRESETS[name]


def register_gpu(preset: GpuPreset) -> GpuPreset:
    """Add a GPU preset."""
    GPU_PRESETS[preset.name] = preset
    return preset


# hidden_dropout 0: none of these models' published configurations drop out (Hugging Face config.json of
# meta-llama/Llama-3.1-*, mistralai/Mixtral-8x7B-v0.1 and deepseek-ai/deepseek-moe-16b-base: attention_dropout
# 0.0 and no hidden dropout; NeMo's Llama 3 and Mixtral recipes: hidden_dropout 0.0)
_LLAMA3 = dict(vocab=128256, seq_len=8192, experts=1, hidden_dropout=0.0)
register_model("llama-8b", layers=32, hidden=4096, ffn_hidden=14336, heads=32, kv_heads=8, **_LLAMA3)
register_model("llama-70b", layers=80, hidden=8192, ffn_hidden=28672, heads=64, kv_heads=8, **_LLAMA3)
register_model("llama-405b", layers=126, hidden=16384, ffn_hidden=53248, heads=128, kv_heads=8, **_LLAMA3)
register_model("mixtral-8x7b", layers=32, hidden=4096, ffn_hidden=14336, heads=32, kv_heads=8, vocab=32000,
               experts=8, top_k=2, expert_ffn_hidden=14336, seq_len=4096, hidden_dropout=0.0)
register_model("deepseek-moe-16b", layers=28, hidden=2048, ffn_hidden=10944, heads=16, kv_heads=16, vocab=102400,
               experts=64, top_k=6, expert_ffn_hidden=1408, shared_experts=2, dense_layers=1, seq_len=4096,
               hidden_dropout=0.0)

_A100 = "NVIDIA A100 Tensor Core GPU datasheet (nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf); NVIDIA A100 Tensor Core GPU Architecture whitepaper (108 SMs)"
_H100 = "NVIDIA H100 Tensor Core GPU datasheet (resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet), SXM5 column; NVIDIA H100 Tensor Core GPU Architecture whitepaper (132 SMs on the SXM5 part)"
_B200 = "NVIDIA DGX B200 datasheet (72 PFLOP/s FP8 training / 8 GPUs, 1,440 GB, 64 TB/s) and HGX B200 specifications (nvidia.com/en-us/data-center/hgx); Blackwell architecture technical brief (148 SMs)"
_GB200 = "NVIDIA GB200 NVL72 specifications (nvidia.com/en-us/data-center/gb200-nvl72): per 72 GPUs 720 PFLOP/s FP8, 360 PFLOP/s FP16/BF16, 180 PFLOP/s TF32 (all sparse), 5,760 TFLOP/s FP32, 13.4 TB HBM3e at 576 TB/s"


def _dtypes(fp32: float, tf32: float, bf16: float, fp8: float | None) -> tuple[tuple[str, float], ...]:
    rows = [("fp32", fp32), ("tf32", tf32), ("bf16", bf16), ("fp16", bf16)]
    return tuple(rows + ([("fp8", fp8)] if fp8 else []))


for _gpu in (
    GpuPreset("A100", 312e12, 80 * GiB, 2.039e12, _A100 + " (SXM4 80GB)", "ampere", 108,
              _dtypes(19.5e12, 156e12, 312e12, None), 600e9),
    GpuPreset("A100-40GB", 312e12, 40 * GiB, 1.555e12, _A100 + " (SXM4 40GB)", "ampere", 108,
              _dtypes(19.5e12, 156e12, 312e12, None), 600e9),
    GpuPreset("H100-SXM", 989e12, 80 * GiB, 3.35e12, _H100, "hopper", 132,
              _dtypes(67e12, 494.5e12, 989e12, 1979e12), 900e9),
    GpuPreset("H800", 989e12, 80 * GiB, 3.35e12, "H100 SXM5 compute and memory (" + _H100 + "); NVLink 400 GB/s "
              "(press and vendor figures, no NVIDIA datasheet read)", "hopper", 132,
              _dtypes(67e12, 494.5e12, 989e12, 1979e12), 400e9),
    GpuPreset("H20", 148e12, 96 * GiB, 4.0e12, "H20: 148 TFLOP/s BF16, 296 FP8, 74 TF32, 44 FP32, 96 GB HBM3 at "
              "4.0 TB/s, NVLink 900 GB/s, 78 SMs (vendor and press figures, no NVIDIA datasheet read)", "hopper", 78,
              _dtypes(44e12, 74e12, 148e12, 296e12), 900e9),
    GpuPreset("H200", 989e12, 141 * GiB, 4.8e12, "NVIDIA H200 Tensor Core GPU datasheet (SXM: 141 GB, 4.8 TB/s; "
              "compute as H100 SXM)", "hopper", 132, _dtypes(67e12, 494.5e12, 989e12, 1979e12), 900e9),
    GpuPreset("B200", 2.25e15, 180 * GiB, 8.0e12, _B200, "blackwell", 148,
              _dtypes(75e12, 1.1e15, 2.25e15, 4.5e15), 1.8e12),
    GpuPreset("GB200", 2.5e15, 186 * GiB, 8.0e12, _GB200, "blackwell", 148,
              _dtypes(80e12, 1.25e15, 2.5e15, 5.0e15), 1.8e12),
):
    register_gpu(_gpu)

def gpu_preset_for_model(gpu_model: str) -> str | None:
    """The GPU preset a cluster's ``server.gpu_model`` names, or None.

    The architecture comes from :func:`gpuwait.topology.gpus.gpu_arch`; the preset also needs the
    SXM part (a PCIe or NVL card has other clocks and memory) and, for the A100, the memory size.

    >>> gpu_preset_for_model("H100-SXM5-80GB"), gpu_preset_for_model("A100-SXM4-40GB"), gpu_preset_for_model("L40S")
    ('H100-SXM', 'A100-40GB', None)
    >>> gpu_preset_for_model("NVIDIA H100 80GB HBM3"), gpu_preset_for_model("GH200"), gpu_preset_for_model("RTX-9999")
    ('H100-SXM', None, None)
    """
    name = gpu_model.upper()
    if name in (p.upper() for p in GPU_PRESETS):
        return next(p for p in GPU_PRESETS if p.upper() == name)
    try:
        arch = gpu_arch(gpu_model).name
    except SpecError:
        return None
    if arch == "A100" and "PCIE" not in name:
        return "A100-40GB" if "40G" in name else "A100"
    if arch == "H100" and "PCIE" not in name and "NVL" not in name:
        return "H100-SXM"
    if arch == "H200" and "NVL" not in name:
        return "H200"
    if arch == "B200":
        return "B200"
    if arch in ("H800", "H20", "GB200"):
        return arch
    return None


# Engines: the batch-1 decode step of Llama 3 8B (32 layers, bf16) on one H100 SXM as published, less gpuwait's
# roofline for it (5.28 ms: 15.0 GB of weights at 0.85 x 3.35 TB/s). vLLM's torch.compile guide
# (vllm-project/vllm PR #11078, docs/source/usage/torch_compile.rst) names the H100 for the same 970.4 ms run;
# the other PRs name no GPU, but 7.4-7.6 ms per token rules out an A100 or H100 PCIe (2.0 TB/s: the weights
# alone take 7.4 ms).
# vLLM V0 splits its step: PR #11081 (same author, 2024-12-11) times the model forward of the same benchmark
# (VLLM_LOG_BATCHSIZE_INTERVAL=1.0 benchmark_latency.py --model meta-llama/Meta-Llama-3-8B --batch-size 1
# --load-format dummy, CUDA graphs, no torch.compile) at a median 6.5 ms over 5,054 batch-1 forwards, and pairs
# it with the guide's end-to-end figures. The forward is what vLLM's set_forward_context wraps: the embedding,
# the 32 layers and the final norm (one CUDA graph replay), timed to a torch.cuda.synchronize; the LM head
# (compute_logits), sampling, scheduling and detokenization run outside it. Per layer: 6.5 ms less the
# forward's roofline (5.28 less the LM head's 1.05 GB, 0.37 ms: 4.91 ms), over 32 = 50 us. Per step: 7.58 ms
# less 6.5 ms less the LM head's 0.37 ms = 0.71 ms. Together 2.31 ms, the whole step as before.
# V1 and SGLang publish no such split: their whole step above the roofline stays per layer.
_SGLANG_8B = ("sglang.bench_latency --model meta-llama/Meta-Llama-3-8B --batch-size 1 --input 128 --output 8 "
              "(one batch, no server: the median of each decode call's batch preparation, forward with the LM head "
              "and sampling, timed between two torch.cuda.synchronize)")
_WHOLE_STEP = "no published split of the step: all of it per layer (an assumption)"
register_engine(EnginePreset("none", 0.0, 0.0, "no fixed time: the step is its roofline alone"))
register_engine(EnginePreset(
    "vllm", 50e-6, 0.71e-3,
    "vLLM main (V0 engine, CUDA graphs on) in vllm-project/vllm PR #10933 (2024-12-05): benchmark_latency.py "
    "--model meta-llama/Meta-Llama-3-8B --batch-size 1 (32 prompt and 128 output tokens) 970.4 ms, 7.58 ms per "
    "token; of it the model forward (embedding, layers, final norm; no LM head, sampling or scheduling) 6.5 ms "
    "median in PR #11081 (2024-12-11, the same benchmark with --load-format dummy): 1.59 ms above the forward's "
    "roofline over 32 layers, and 0.71 ms per step outside it beyond the LM head's read"))
register_engine(EnginePreset(
    "vllm-v1", 66e-6, 0.0,
    "vLLM V1 engine (VLLM_USE_V1=1, multiprocessing, CUDA graphs) in vllm-project/vllm PR #11000 (2024-12-09): "
    f"the same benchmark 944.7 ms, 7.38 ms per token: 2.11 ms above the roofline; {_WHOLE_STEP}"))
register_engine(EnginePreset(
    "sglang", 65e-6, 0.0,
    f"SGLang, FlashInfer attention, CUDA graphs: {_SGLANG_8B} decode median 7.37 ms in sgl-project/sglang issue "
    f"#1008 (2024-08-09) and 7.35 ms in PR #1401 (2024-09-12): 2.09 ms above the roofline; {_WHOLE_STEP}"))
register_engine(EnginePreset(
    "sglang-eager", 92e-6, 0.0,
    f"SGLang, FlashInfer attention, --disable-cuda-graph: {_SGLANG_8B} decode median 8.23 ms in sgl-project/sglang "
    f"PR #1401 (2024-09-12): 2.95 ms above the roofline (CUDA graphs save 0.88 ms per step); {_WHOLE_STEP}"))
