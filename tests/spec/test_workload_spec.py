"""The `workload:` section of a scenario file: quantities parsed, bad values named by their YAML path."""

from __future__ import annotations

import pydantic
import pytest

from gpuwait.errors import SpecError
from gpuwait.spec import Scenario, WorkloadSpec, load_model, validate_data
from gpuwait.spec.workload import ComputeSpec

SCENARIO = """
name: llama-70b on a superpod
cluster: {preset: dgx-h100-superpod, servers: 4}
workload:
  gpus: 32
  model: {preset: llama-70b, seq_len: 4096, precision: fp8}
  parallel: {tp: 8, pp: 4, zero: 1, micro_batch: 2, global_batch: 64, bucket: 50MB}
  compute:
    gpu: H100-SXM
    efficiency: 0.45
    hbm_bandwidth: 3.35TB/s
    memory: 80GiB
    slow_gpus: [{rank: 5, factor: 1.3}]
  data: {dataset_read_per_gpu: 200MB/s, checkpoint_size: 1TB, checkpoint_interval_steps: 100}
  steps: 3
"""


def test_workload_loads_from_yaml_with_units(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    w = load_model(Scenario, path).workload
    assert w.mode == "training" and w.gpus == 32 and w.steps == 3
    assert w.model.preset == "llama-70b" and w.model.seq_len == 4096 and w.model.precision == "fp8"
    assert w.model.layers is None  # filled by the preset when resolved, not here
    assert (w.parallel.tp, w.parallel.pp, w.parallel.dp, w.parallel.zero) == (8, 4, None, 1)
    assert w.parallel.bucket == 50e6 and w.parallel.overlap_grad_reduce and w.parallel.schedule == "1f1b"
    assert w.compute.hbm_bandwidth == 3.35e12 and w.compute.memory == 80 * 2**30
    assert w.compute.slow_gpus[0].rank == 5 and w.compute.slow_gpus[0].factor == 1.3
    assert w.data.dataset_read_per_gpu == 200e6 and w.data.checkpoint_size == 1e12


def test_defaults():
    w = WorkloadSpec()
    assert w.mode == "training" and w.gpus is None and w.steps == 1 and w.inference is None
    assert w.parallel.bucket == 25 * 2**20  # PyTorch DDP bucket_cap_mb=25
    assert w.compute.efficiency is None and w.parallel.recompute == "none" and w.compute.jitter_cv == 0.02 and w.compute.gpu is None
    assert w.data.dataset_read_per_gpu == 0 and w.data.checkpoint_interval_steps is None
    assert Scenario().workload is None


def test_workload_is_frozen():
    w = WorkloadSpec()
    with pytest.raises(pydantic.ValidationError):
        w.steps = 2
    with pytest.raises(pydantic.ValidationError):
        w.parallel.tp = 2


def test_inference_section():
    w = validate_data(WorkloadSpec, {"mode": "inference", "model": {"preset": "llama-8b"},
                                     "inference": {"batch": 16, "prompt_tokens": 2048, "output_tokens": 128, "tp": 2}})
    assert w.inference.batch == 16 and w.inference.tp == 2 and w.inference.pp == 1


@pytest.mark.parametrize(("workload", "path", "expected"), [
    ({"parallel": {"micro_batch": 0}}, "workload.parallel.micro_batch", "greater than or equal to 1"),
    ({"parallel": {"global_batch": 0}}, "workload.parallel.global_batch", "greater than or equal to 1"),
    ({"parallel": {"tp": 0}}, "workload.parallel.tp", "greater than or equal to 1"),
    ({"parallel": {"zero": 4}}, "workload.parallel.zero", "0, 1, 2 or 3"),
    ({"parallel": {"schedule": "gpipe"}}, "workload.parallel.schedule", "'1f1b'"),
    ({"parallel": {"bucket": 0}}, "workload.parallel.bucket", "more than zero"),
    ({"parallel": {"typo": 1}}, "workload.parallel.typo", "no such field"),
    ({"model": {"precision": "fp4"}}, "workload.model.precision", "'bf16', 'fp16' or 'fp8'"),
    ({"model": {"layers": 0}}, "workload.model.layers", "greater than or equal to 1"),
    ({"compute": {"efficiency": 1.5}}, "workload.compute.efficiency", "less than or equal to 1"),
    ({"compute": {"hbm_bandwidth": 3e12}}, "workload.compute.hbm_bandwidth", "a bare number has no unit"),
    ({"compute": {"slow_gpus": [{"rank": 1, "factor": 0}]}}, "workload.compute.slow_gpus[0].factor", "greater than 0"),
    ({"data": {"dataset_read_per_gpu": "fast"}}, "workload.data.dataset_read_per_gpu", "cannot read 'fast'"),
    ({"data": {"checkpoint_interval_steps": 0}}, "workload.data.checkpoint_interval_steps", "greater than or equal to 1"),
    ({"mode": "inference", "inference": {"batch": 0}}, "workload.inference.batch", "greater than or equal to 1"),
    ({"inference": {"batch": 4}}, "workload.inference", "only with mode: inference"),
    # an inference service reads neither: parallel.tp 4 beside inference.tp 8 served at TP 8, silently
    ({"mode": "inference", "parallel": {"tp": 4}}, "workload.parallel", "only with mode: training"),
    ({"mode": "inference", "data": {"dataset_read_per_gpu": "1GB/s"}}, "workload.data", "only with mode: training"),
    # nor per-GPU variation: a slow GPU in a serving scenario was read by nothing (audit33)
    ({"mode": "inference", "compute": {"slow_gpus": [{"rank": 0, "factor": 2}]}}, "workload.compute",
     "slow_gpus: only with mode: training"),
    ({"mode": "inference", "compute": {"jitter_cv": 0.1, "seed": 3}}, "workload.compute",
     "jitter_cv, seed: only with mode: training"),
    ({"mode": "serve"}, "workload.mode", "'training' or 'inference'"),
    ({"steps": 0}, "workload.steps", "greater than or equal to 1"),
])
def test_bad_values_name_the_field(workload, path, expected):
    with pytest.raises(SpecError) as info:
        validate_data(Scenario, {"workload": workload}, source="s.yaml")
    assert len(info.value.problems) == 1
    problem = info.value.problems[0]
    assert problem.startswith(f"{path}: ") and expected in problem, problem


@pytest.mark.parametrize("cv", [float("inf"), float("nan"), 1.5, -0.1])
def test_jitter_cv_outside_0_to_1_is_refused(cv):
    """inf reached the flow engine as a NaN capacity (found by bench/fuzz.py); a cv above 1 is not jitter."""
    with pytest.raises(pydantic.ValidationError):
        ComputeSpec(jitter_cv=cv)
