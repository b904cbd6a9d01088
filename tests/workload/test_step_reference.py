"""The published step reference set (tests/data/step_reference.yaml) is well formed: every row cites a
source, names a GPU preset and a figure kind, and its layout resolves and fits in memory as written.
The scoring itself is bench/step_reference.py (it runs the engine; too slow for the suite)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpuwait.errors import SpecError
from gpuwait.spec.workload import WorkloadSpec
from gpuwait.workload import model as wm
from gpuwait.workload.presets import GPU_PRESETS

REFERENCE = yaml.safe_load((Path(__file__).resolve().parents[1] / "data" / "step_reference.yaml").read_text())


@pytest.mark.parametrize("row", REFERENCE["rows"], ids=lambda r: r["id"])
def test_row_is_cited_and_its_layout_runs(row):
    assert row["source"] in REFERENCE["sources"] and REFERENCE["sources"][row["source"]]["cite"]
    assert row["gpu"] in GPU_PRESETS
    assert row["figure"] in ("tflops_per_gpu_megatron", "tflops_per_gpu_model", "tokens_per_s_per_gpu", "step_s")
    spec = WorkloadSpec(gpus=row["gpus"], model=row["model"], parallel=row["parallel"], compute={"gpu": row["gpu"]})
    shape = wm.resolve_model(spec.model)
    layout = wm.validate_layout(shape, spec, row["gpus"], REFERENCE["sources"][row["source"]].get("gpus_per_server", 8))
    wm.check_fits(shape, layout, wm.resolve_gpu(spec.compute, shape.precision))


def test_gpt_rows_keep_the_published_parameter_count():
    # Narayanan et al. Table 1 and 2 sizes, from 12 l h^2 + V h with the 4h MLP written as SwiGLU of 8h/3
    for row in REFERENCE["rows"]:
        if row["source"] not in ("narayanan2021", "narayanan2021-t2"):
            continue
        published_b = float(row["id"].split("-")[1].rstrip("b"))
        shape = wm.resolve_model(WorkloadSpec(model=row["model"]).model)
        # gpuwait unties the LM head; the GPT models tie it, so count the embedding once
        params = shape.params - shape.vocab * shape.hidden
        # (position embeddings, biases and norms, which the table counts, add < 0.5 %; 1.7B is 1.65B rounded)
        assert params / 1e9 == pytest.approx(published_b, rel=0.035), row["id"]


def test_llama3_rows_are_laid_out_as_published():
    # Llama 3 §3.3.2 / Table 4: 126 layers, one fewer on the first and the last of 16 stages, 16M tokens
    for row in REFERENCE["rows"]:
        if row["source"] != "llama3-2024":
            continue
        spec = WorkloadSpec(gpus=row["gpus"], model=row["model"], parallel=row["parallel"], compute={"gpu": row["gpu"]})
        shape = wm.resolve_model(spec.model)
        layout = wm.validate_layout(shape, spec, row["gpus"], 8)
        assert shape.layers == 126 and layout.pp == 16 and sum(layout.stage_layer_counts) == 126
        assert layout.global_batch * shape.seq_len == 16 * 2**20
        # "the first model chunk on the first stage has only the embedding, and the last model chunk on the
        # last stage has only output projection and loss"; FSDP shards optimizer state and gradients
        assert layout.stage_layer_counts[0] == layout.stage_layer_counts[-1] == 0 and layout.zero == 2


def test_unscored_rows_say_why():
    for row in REFERENCE["rows"]:
        if row.get("scored", True) is False:
            assert "not scored" in row["assumed"], row["id"]


def test_mtnlg_rows_reproduce_the_published_iteration_times():
    # Smith et al. 2022 (arXiv:2201.11990) Section 2.4: batch 1,920 on 2,240 / 2,800 / 3,360 A100s took 60.1 /
    # 50.2 / 44.4 s per iteration, quoted as 126 / 121 / 113 TFLOP/s per GPU. Narayanan et al.'s eq. (3) over the
    # rows' model and batch turns each time into its TFLOP/s to the published rounding: the rows hold that layout.
    seconds = {2240: 60.1, 2800: 50.2, 3360: 44.4}
    rows = [r for r in REFERENCE["rows"] if r["source"] == "smith2022"]
    assert sorted(r["gpus"] for r in rows) == sorted(seconds)
    for row in rows:
        shape = wm.resolve_model(WorkloadSpec(model=row["model"]).model)
        b, s, ell, h, v = row["parallel"]["global_batch"], shape.seq_len, shape.layers, shape.hidden, shape.vocab
        flops = 96.0 * b * s * ell * h * h * (1 + s / (6 * h) + v / (16 * ell * h))
        assert flops / (seconds[row["gpus"]] * row["gpus"]) / 1e12 == pytest.approx(row["value"], abs=0.6), row["id"]


def test_sources_found_after_the_fit_are_flagged_as_such():
    for name, source in REFERENCE["sources"].items():
        assert source.get("after_the_fit", False) in (True, False), name
        if source.get("after_the_fit"):
            assert "found after" in source["note"], name


def test_bloom_row_reproduces_the_logged_iteration():
    # bigscience-workshop/bigscience train/tr11-176B-ml/README.md: "elapsed time per iteration (s): 104.70 | ...
    # global batch size: 2048 | ... TFLOPs: 149.77" on 384 GPUs; eq. (3) over the row's model gives that rate.
    row = next(r for r in REFERENCE["rows"] if r["id"] == "bloom-176b-384")
    shape = wm.resolve_model(WorkloadSpec(model=row["model"]).model)
    b, s, ell, h, v = row["parallel"]["global_batch"], shape.seq_len, shape.layers, shape.hidden, shape.vocab
    flops = 96.0 * b * s * ell * h * h * (1 + s / (6 * h) + v / (16 * ell * h))
    assert flops / (104.70 * row["gpus"]) / 1e12 == pytest.approx(row["value"], abs=0.05)
    spec = WorkloadSpec(gpus=row["gpus"], model=row["model"], parallel=row["parallel"], compute={"gpu": row["gpu"]})
    layout = wm.validate_layout(shape, spec, row["gpus"], 8)
    assert layout.stage_layer_counts[0] == layout.stage_layer_counts[-1] == 5 and sum(layout.stage_layer_counts) == 70


# NVIDIA Megatron-Bridge performance summary (NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md): 25.11 at
# @00b7660b (DGX-H100, DGX-B200 and DGX-GB200, FP8-CS) and 26.02 at @c0b9a000 (DGX-H100, FP8): per row the printed
# Model TFLOP/sec/GPU and the layout columns (TP, PP, CP, VP, GA; 26.02 prints no GA: GBS / (MBS x DP)).
MEGATRON_BRIDGE = {
    "mb-llama3-8b-h100": {"tflops": 744, "tp": 1, "pp": 1, "cp": 1, "vp": 1, "ga": 16},
    "mb-llama3-70b-h100": {"tflops": 719, "tp": 4, "pp": 8, "cp": 1, "vp": 5, "ga": 64},
    "mb-llama31-405b-h100": {"tflops": 737, "tp": 8, "pp": 8, "cp": 2, "vp": 8, "ga": 64},
    "mb-llama3-8b-b200": {"tflops": 1576, "tp": 1, "pp": 1, "cp": 1, "vp": 1, "ga": 8},
    "mb-llama31-405b-b200": {"tflops": 1667, "tp": 4, "pp": 8, "cp": 2, "vp": 8, "ga": 32},
    "mb-llama3-8b-gb200": {"tflops": 1622, "tp": 1, "pp": 1, "cp": 1, "vp": 1, "ga": 8},
    "mb2602-llama3-70b-h100": {"tflops": 728, "tp": 4, "pp": 8, "cp": 1, "vp": 5, "ga": 128},
    "mb2602-llama31-405b-h100": {"tflops": 784, "tp": 8, "pp": 8, "cp": 2, "vp": 8, "ga": 192},
}


def _megatron_bridge_rows():
    return [r for r in REFERENCE["rows"] if r["source"].startswith("mbridge")]


def test_megatron_bridge_rows_are_the_published_ones():
    assert sorted(r["id"] for r in _megatron_bridge_rows()) == sorted(MEGATRON_BRIDGE)
    for row in _megatron_bridge_rows():
        assert REFERENCE["sources"][row["source"]].get("after_the_fit") is True, row["id"]
        assert row["model"]["precision"] == "fp8", row["id"]  # FP8-CS: the matmuls in fp8


def test_megatron_bridge_tokens_agree_with_the_printed_tflops():
    # The table prints Tokens/sec/GPU and Model TFLOP/sec/GPU; the step is scored on the tokens (no FLOP count
    # involved). The two agree through the model's FLOPs per token to 0.2 % once attention is counted causal
    # (half the score matrix: 6N + 6·l·h·s per token), as Megatron-Bridge does; gpuwait's own
    # training_flops_per_token counts the full matrix (12·l·h·s, as Narayanan et al. and the Llama 3 rows), which
    # would read 4 % (405B) to 12 % (8B) above the printed figure at s = 8,192.
    for row in _megatron_bridge_rows():
        shape = wm.resolve_model(WorkloadSpec(model=row["model"]).model)
        causal_per_token = wm.training_flops_per_token(shape) - 6.0 * shape.layers * shape.hidden * shape.seq_len
        printed = MEGATRON_BRIDGE[row["id"]]["tflops"]
        assert row["value"] * causal_per_token / 1e12 == pytest.approx(printed, rel=0.002), row["id"]
        assert row["value"] * wm.training_flops_per_token(shape) / 1e12 > 1.03 * printed, row["id"]


def _shape_and_layout(row):
    """The row's model shape and its layout on its source's servers."""
    spec = WorkloadSpec(gpus=row["gpus"], model=row["model"], parallel=row["parallel"], compute={"gpu": row["gpu"]})
    shape = wm.resolve_model(spec.model)
    return shape, wm.validate_layout(shape, spec, row["gpus"], REFERENCE["sources"][row["source"]].get("gpus_per_server", 8))


def _assert_laid_out_as(layout, published, row_id):
    """The layout columns NVIDIA's tables print: TP, PP, CP, VP and GA (micro-batches per step)."""
    assert (layout.tp, layout.pp, layout.cp, layout.virtual_stages, layout.micro_batches) == (
        published["tp"], published["pp"], published["cp"], published["vp"], published["ga"]), row_id


def test_megatron_bridge_rows_are_laid_out_as_published():
    for row in _megatron_bridge_rows():
        shape, layout = _shape_and_layout(row)
        _assert_laid_out_as(layout, MEGATRON_BRIDGE[row["id"]], row["id"])
        assert shape.seq_len == 8192 and sum(layout.stage_layer_counts or (shape.layers,)) == shape.layers


def test_nemo_2407_tokens_agree_with_the_printed_tflops():
    # NVIDIA/NeMo docs/source/performance/performance_summary.md @070a0bb1 (24.07, DGX-H100, FP8): Tokens/sec/GPU
    # and Model TFLOP/sec/GPU per row (GPT3-175B 726 / 782, 782 / 842; LLAMA3-8B 12036 / 697; LLAMA3-70B 1533 / 738;
    # Nemotron-8B 12701 / 653, -22B 4256 / 554, -340B 322 / 678).
    # NeMo 1 counts the full attention matrix, as gpuwait's training_flops_per_token: the rows' models (GPT-3's GELU
    # and Nemotron's squared-ReLU MLPs written as SwiGLU of 8h/3, GPT-3's vocabulary padded to 50,688) give the printed
    # rate within 0.5 %.
    printed = {"nemo-gpt3-175b-128": 782, "nemo-gpt3-175b-512": 842, "nemo-llama3-8b": 697, "nemo-llama3-70b": 738,
               "nemo-nemotron-8b": 653, "nemo-nemotron-22b": 554, "nemo-nemotron-340b": 678}
    rows = [r for r in REFERENCE["rows"] if r["source"] == "nemo2407-h100"]
    assert sorted(r["id"] for r in rows) == sorted(printed)
    for row in rows:
        shape = wm.resolve_model(WorkloadSpec(model=row["model"]).model)
        assert row["value"] * wm.training_flops_per_token(shape) / 1e12 == pytest.approx(printed[row["id"]], rel=0.005), row["id"]


def test_nemo_2407_rows_drop_out_as_their_launcher_configs():
    # hidden_dropout decides the memory check's two 1-byte masks per layer. NVIDIA/NeMo-Framework-Launcher
    # launcher_scripts/conf/training at tag 24.07: gpt3/175b_fp8.yaml 0.1; llama/llama3_8b.yaml, llama3_70b.yaml and
    # nemotron/nemotron_8b.yaml, nemotron_22b.yaml, nemotron_340b.yaml 0.0
    configured = {"nemo-gpt3-175b-128": 0.1, "nemo-gpt3-175b-512": 0.1, "nemo-llama3-8b": 0.0, "nemo-llama3-70b": 0.0,
                  "nemo-nemotron-8b": 0.0, "nemo-nemotron-22b": 0.0, "nemo-nemotron-340b": 0.0}
    rows = {r["id"]: r for r in REFERENCE["rows"] if r["source"] == "nemo2407-h100"}
    assert sorted(rows) == sorted(configured)
    for name, dropout in configured.items():
        assert wm.resolve_model(WorkloadSpec(model=rows[name]["model"]).model).hidden_dropout == dropout, name


# NVIDIA DGX Cloud Benchmarking (NVIDIA/dgxc-benchmarking llama3.1/README.md): v25.04 @741c886 (H100) and v25.05.01
# @60d6fd3 (GB200). Per row the printed "Throughput in tokens per second" (the whole job's: s x GBS / step) and the
# layout columns (TP, PP, CP, VP, GA).
DGXC = {
    "dgxc-llama31-8b-bf16": {"tokens_per_s": 85459, "tp": 1, "pp": 1, "cp": 2, "vp": 1, "ga": 32},
    "dgxc-llama31-8b-fp8": {"tokens_per_s": 112388, "tp": 1, "pp": 1, "cp": 2, "vp": 1, "ga": 32},
    "dgxc-llama31-70b-bf16": {"tokens_per_s": 71526, "tp": 4, "pp": 4, "cp": 2, "vp": 5, "ga": 64},
    "dgxc-llama31-70b-fp8": {"tokens_per_s": 106346, "tp": 4, "pp": 8, "cp": 1, "vp": 5, "ga": 64},
    "dgxc-llama31-405b-bf16": {"tokens_per_s": 106024, "tp": 8, "pp": 8, "cp": 2, "vp": 8, "ga": 64},
    "dgxc-llama31-405b-fp8": {"tokens_per_s": 169535, "tp": 8, "pp": 8, "cp": 2, "vp": 8, "ga": 64},
    "dgxc-llama31-70b-fp8-2048": {"tokens_per_s": 3305855, "tp": 4, "pp": 8, "cp": 1, "vp": 5, "ga": 64},
    "dgxc-llama31-405b-fp8-2048": {"tokens_per_s": 667883, "tp": 8, "pp": 8, "cp": 2, "vp": 8, "ga": 64},
    "dgxc-llama31-405b-bf16-gb200": {"tokens_per_s": 56092, "tp": 4, "pp": 8, "cp": 2, "vp": 8, "ga": 32},
    "dgxc-llama31-405b-fp8-gb200": {"tokens_per_s": 85514, "tp": 4, "pp": 8, "cp": 2, "vp": 8, "ga": 32},
}


def test_dgxc_rows_are_the_published_ones_and_their_step_gives_the_printed_throughput():
    rows = [r for r in REFERENCE["rows"] if r["source"].startswith("dgxc")]
    assert sorted(r["id"] for r in rows) == sorted(DGXC)
    for row in rows:
        assert REFERENCE["sources"][row["source"]].get("after_the_fit") is True and row["figure"] == "step_s", row["id"]
        shape, layout = _shape_and_layout(row)
        published = DGXC[row["id"]]
        assert shape.seq_len * layout.global_batch / row["value"] == pytest.approx(published["tokens_per_s"], abs=1.0), row["id"]
        _assert_laid_out_as(layout, published, row["id"])


def test_llama3_rows_leave_fp32_gradients_unset_as_no_modelled_cadence_fits():
    # Llama 3 §3.3.2: "FP32 gradient accumulation during backward computation over multiple micro-batches and
    # also reduce-scatter gradients in FP32 across data parallel workers in FSDP", with no word on when. The rows
    # leave grad_reduce_in_fp32 unset because neither cadence gpuwait has fits (docs/validation-steps.md):
    row = next(r for r in REFERENCE["rows"] if r["id"] == "llama3-405b-8k")
    assert not any(r["parallel"].get("grad_reduce_in_fp32") for r in REFERENCE["rows"] if r["source"] == "llama3-2024")
    fp32 = {**row["parallel"], "grad_reduce_in_fp32": True}
    spec = WorkloadSpec(gpus=row["gpus"], model=row["model"], parallel=fp32, compute={"gpu": row["gpu"]})
    shape = wm.resolve_model(spec.model)
    gpu = wm.resolve_gpu(spec.compute, shape.precision)
    layout = wm.validate_layout(shape, spec, row["gpus"], 8)
    # per micro-batch (ZeRO-2): stage 1's FP32 gradients of a step need more than the 400 Gb/s NIC (§3.3.1)
    # carries over the stage's backward time, however the reduce-scatters overlap it
    _, bwd_s = wm.stage_compute_times_s(shape, layout, gpu, 1)
    ring = (layout.dp - 1) / layout.dp
    assert wm.comm_volumes(shape, layout, stage=1).dp_grad_bytes * ring / bwd_s > 400e9 / 8
    # one reduction a step from an unsharded FP32 buffer (ZeRO-1): the buffer does not fit beside the warm-up
    whole = WorkloadSpec(gpus=row["gpus"], model=row["model"], parallel={**fp32, "zero": 1}, compute={"gpu": row["gpu"]})
    with pytest.raises(SpecError, match="per GPU but the GPU has"):
        wm.check_fits(shape, wm.validate_layout(shape, whole, row["gpus"], 8), gpu)
    wm.check_fits(shape, layout, gpu)  # the ZeRO-2 shard in FP32 does
