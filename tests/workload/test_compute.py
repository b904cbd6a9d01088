"""The kernel-time compute model: effects checked against closed forms and published behaviour.

Sources: NVIDIA "Matrix Multiplication Background User's Guide" (tile and wave quantization);
Korthikanti et al. 2022, arXiv:2205.05198 (recomputation: full recompute repeats the forward, 8N vs 6N
FLOPs per token; activation memory 34·sbh/t vs 2·sbh/t); published FP8/BF16 step ratios of 0.65-0.80
(NVIDIA NeMo performance tables, Transformer Engine FP8 primer).
"""

from __future__ import annotations

import pytest

from gpuwait.errors import SpecError
from gpuwait.spec.workload import ModelSpec, WorkloadSpec
from gpuwait.workload import model as wm
from gpuwait.workload.compute import ACHIEVABLE, ComputeModel
from gpuwait.workload.presets import GPU_PRESETS


def _stage(preset="llama-70b", precision="bf16", recompute="none", compute=None, tp=8, pp=4, gpus=1024):
    w = WorkloadSpec(model={"preset": preset, "precision": precision},
                     parallel={"tp": tp, "pp": pp, "recompute": recompute}, compute=compute or {})
    shape = wm.resolve_model(w.model)
    par = wm.validate_layout(shape, w, gpus, 8)
    gpu = wm.resolve_gpu(w.compute, precision)
    return shape, par, gpu, wm.stage_compute_times_s(shape, par, gpu, 0)


def test_wave_quantization_one_tile_over_the_sms_is_slower_per_flop():
    c = ComputeModel.for_gpu(GPU_PRESETS["H100-SXM"])
    k = 8192
    # 132 tiles of 256x128 fill one wave; one more row block of tiles needs a second, mostly idle wave
    full = c.gemm_time_s(256 * 66, 256, k) / (256 * 66 * 256)
    over = c.gemm_time_s(256 * 66 + 128, 256, k) / ((256 * 66 + 128) * 256)
    assert over > 1.3 * full


def test_tile_quantization_a_ragged_dimension_pays_for_its_padded_tile():
    c = ComputeModel.for_gpu(GPU_PRESETS["A100"])
    assert c.quantization(108 * 256, 128) == 1.0
    assert c.quantization(108 * 256 + 1, 128) < c.quantization(108 * 256, 128)


def test_full_recompute_costs_a_third_more_compute():
    # closed form: 8N instead of 6N FLOPs per token (one more forward); the kernel model keeps the ratio
    # within a few percent (its backward/forward ratio is not exactly 2)
    _, _, _, (f0, b0) = _stage(recompute="none")
    _, _, _, (f1, b1) = _stage(recompute="full")
    assert f1 == f0
    assert (f1 + b1) / (f0 + b0) == pytest.approx(4 / 3, rel=0.03)
    _, _, _, (fs, bs) = _stage(recompute="selective")
    assert f0 + b0 < fs + bs < f1 + b1


def test_flat_model_full_recompute_is_exactly_eight_over_six():
    _, _, _, (f0, b0) = _stage(recompute="none", compute={"efficiency": 0.5})
    _, _, _, (f1, b1) = _stage(recompute="full", compute={"efficiency": 0.5})
    assert (f1 + b1) / (f0 + b0) == pytest.approx(8 / 6)


def test_fp8_step_ratio_is_in_the_published_range_not_one_half():
    for preset in ("llama-8b", "llama-70b", "llama-405b"):
        tp, pp = {"llama-8b": (1, 1), "llama-70b": (8, 8), "llama-405b": (8, 7)}[preset]
        _, _, _, (fb, bb) = _stage(preset, "bf16", tp=tp, pp=pp, gpus=tp * pp * 16)
        _, _, _, (f8, b8) = _stage(preset, "fp8", tp=tp, pp=pp, gpus=tp * pp * 16)
        assert 0.6 <= (f8 + b8) / (fb + bb) <= 0.8, preset


def test_full_recompute_lets_a_layout_fit_that_does_not_otherwise():
    w = dict(model={"preset": "llama-70b"}, parallel={"tp": 8, "pp": 1, "zero": 1, "micro_batch": 4})
    shape = wm.resolve_model(ModelSpec(preset="llama-70b"))
    gpu = wm.resolve_gpu(WorkloadSpec(**w).compute)
    with pytest.raises(SpecError, match="model needs"):
        wm.check_fits(shape, wm.validate_layout(shape, WorkloadSpec(**w), 512, 8), gpu)
    w["parallel"]["recompute"] = "full"
    par = wm.validate_layout(shape, WorkloadSpec(**w), 512, 8)
    assert wm.check_fits(shape, par, gpu)["activations"] < 8 * 2**30


def test_full_recompute_keeps_two_bytes_per_element_of_the_layer_input():
    shape, par, _, _ = _stage(recompute="full")
    sbh = shape.seq_len * shape.hidden
    assert wm.activation_bytes_per_layer(shape, par) == 2 * sbh / 8


def test_measured_layer_times_replace_the_model():
    shape, par, _, (f, b) = _stage(compute={"layer_forward_time": 0.01, "layer_backward_time": 0.025}, pp=4)
    layers = shape.layers // 4
    assert f == pytest.approx(layers * 0.01) and b == pytest.approx(layers * 0.025)


def test_overrides_per_op_class():
    _, _, _, (f, _) = _stage()
    # halving the GEMM rate nearly doubles a GEMM-dominated forward
    _, _, _, (slow, _) = _stage(compute={"gemm_efficiency": 0.5 * ACHIEVABLE[("hopper", "bf16")]})
    assert 1.7 * f < slow < 2.0 * f


def test_presets_have_every_dtype_and_a100_has_no_fp8():
    for name in ("A100", "A100-40GB", "H100-SXM", "H800", "H20", "H200", "B200", "GB200"):
        p = GPU_PRESETS[name]
        assert p.flops("bf16") == p.peak_flops and p.flops("tf32") < p.flops("bf16") and p.sms > 0
    assert GPU_PRESETS["H100-SXM"].flops("fp8") == 2 * GPU_PRESETS["H100-SXM"].flops("bf16") + 1e12
    with pytest.raises(SpecError, match="A100 has no fp8"):
        _stage(precision="fp8", compute={"gpu": "A100"})


def test_newer_gpus_are_faster_per_layer():
    times = {g: sum(_stage(compute={"gpu": g})[3]) for g in ("A100", "H100-SXM", "B200", "H20")}
    assert times["B200"] < times["H100-SXM"] < times["A100"] and times["H20"] > times["H100-SXM"]
