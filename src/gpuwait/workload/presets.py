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
* GPUs: NVIDIA datasheets — dense (not 2:4 sparse) bf16 tensor-core FLOP/s, HBM capacity and bandwidth.
  A100 SXM 80GB: 312 TFLOP/s, 2,039 GB/s; A100 SXM 40GB: 1,555 GB/s; H100 SXM: 989 TFLOP/s (1,979 with
  sparsity), 80GB, 3.35 TB/s; H200 SXM: 989 TFLOP/s, 141GB, 4.8 TB/s; B200 (HGX/DGX B200, 1 kW):
  2.25 PFLOP/s (4.5 sparse), 180GB (DGX B200: 1,440 GB for 8 GPUs; the die carries 192GB), 8 TB/s.
  NVIDIA's "GB" of HBM are binary in practice (nvidia-smi shows 81559 MiB on an H100 80GB), so memory is
  stored in GiB.
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
    """Datasheet figures of one GPU."""

    name: str
    peak_flops: float       # dense bf16 tensor-core FLOP/s
    memory_bytes: float     # HBM capacity, bytes
    hbm_bandwidth_Bps: float  # HBM bandwidth, bytes/s
    source: str


GPU_PRESETS: dict[str, GpuPreset] = {}


def register_model(name: str, **fields) -> dict:
    """Add a model preset (fields of :class:`gpuwait.spec.workload.ModelSpec`)."""
    MODEL_PRESETS[name] = dict(fields)
    return MODEL_PRESETS[name]


def register_gpu(preset: GpuPreset) -> GpuPreset:
    """Add a GPU preset."""
    GPU_PRESETS[preset.name] = preset
    return preset


_LLAMA3 = dict(vocab=128256, seq_len=8192, experts=1)
register_model("llama-8b", layers=32, hidden=4096, ffn_hidden=14336, heads=32, kv_heads=8, **_LLAMA3)
register_model("llama-70b", layers=80, hidden=8192, ffn_hidden=28672, heads=64, kv_heads=8, **_LLAMA3)
register_model("llama-405b", layers=126, hidden=16384, ffn_hidden=53248, heads=128, kv_heads=8, **_LLAMA3)
register_model("mixtral-8x7b", layers=32, hidden=4096, ffn_hidden=14336, heads=32, kv_heads=8, vocab=32000,
               experts=8, top_k=2, expert_ffn_hidden=14336, seq_len=4096)
register_model("deepseek-moe-16b", layers=28, hidden=2048, ffn_hidden=10944, heads=16, kv_heads=16, vocab=102400,
               experts=64, top_k=6, expert_ffn_hidden=1408, shared_experts=2, dense_layers=1, seq_len=4096)

register_gpu(GpuPreset("A100", 312e12, 80 * GiB, 2.039e12, "NVIDIA A100 datasheet (SXM4 80GB)"))
register_gpu(GpuPreset("A100-40GB", 312e12, 40 * GiB, 1.555e12, "NVIDIA A100 datasheet (SXM4 40GB)"))
register_gpu(GpuPreset("H100-SXM", 989e12, 80 * GiB, 3.35e12, "NVIDIA H100 datasheet (SXM5 80GB)"))
register_gpu(GpuPreset("H200", 989e12, 141 * GiB, 4.8e12, "NVIDIA H200 datasheet (SXM 141GB)"))
register_gpu(GpuPreset("B200", 2.25e15, 180 * GiB, 8.0e12, "NVIDIA DGX/HGX B200 datasheet"))


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
    return None
