"""grad_reduce_in_fp32: gradients kept and reduced over data parallelism in fp32, in closed form.

Megatron-Core (NVIDIA/Megatron-LM @d98e8a64, megatron/core/distributed/param_and_grad_buffer.py): each DDP
buffer's gradient dtype is ``torch.float if grad_reduce_in_fp32 else param.dtype``
(``group_params_for_buffers``); ``_ParamAndGradBuffer`` allocates ``grad_data`` with every element of the
buffer on every rank, also under the distributed optimizer, and ``start_grad_sync`` all-reduces or
reduce-scatters that buffer in place. So the flag doubles the bytes of every gradient reduction (4 B per
parameter instead of bf16's 2) and of the gradient buffer in memory, and moves nothing else: the parameter
all-gather stays in the parameters' dtype. megatron/training/arguments.py turns it on for ``--bf16`` unless
``--grad-reduce-in-bf16``; distributed_data_parallel_config.py defaults it off.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpuwait.errors import SpecError
from gpuwait.runner.workload import run_workload
from gpuwait.spec import Scenario, WorkloadSpec, validate_data
from gpuwait.topology.presets import build_cluster, resolve_cluster
from gpuwait.workload import model as wm
from gpuwait.workload.steps import training_step
from tests.workload.test_layouts import _scenario


def _layout(model: dict, parallel: dict, gpus: int) -> tuple[wm.ModelShape, wm.ParallelLayout]:
    spec = WorkloadSpec(model=model, parallel=parallel)
    shape = wm.resolve_model(spec.model)
    return shape, wm.validate_layout(shape, spec, gpus, 8)


LLAMA_70B = {"preset": "llama-70b"}
TP8_PP4 = {"tp": 8, "pp": 4, "zero": 1, "micro_batch": 1}
H = 8192


def _stage0_params(shape: wm.ModelShape) -> float:
    """Llama-70B at tp 8, pp 4, first stage: 20 layers (matrices over tp, two norm vectors whole) and the
    vocab-parallel embedding (as test_memory_closed_form_llama_70b)."""
    return 20 * ((shape.dense_layer_params - 2 * H) / 8 + 2 * H) + 128256 * H / 8


@pytest.mark.parametrize(("flag", "grad_bytes"), [(False, 2), (True, 4)])
def test_reduce_scatter_moves_four_bytes_per_parameter(flag, grad_bytes):
    shape, par = _layout(LLAMA_70B, {**TP8_PP4, "grad_reduce_in_fp32": flag}, 512)
    p0 = _stage0_params(shape)
    v = wm.comm_volumes(shape, par, stage=0)
    assert v.dp_grad_collective == "reduce_scatter"
    assert v.dp_grad_bytes == pytest.approx(grad_bytes * p0, rel=1e-12)
    assert v.dp_param_allgather_bytes == pytest.approx(2 * p0, rel=1e-12)  # weights gathered in bf16 either way


def test_all_reduce_without_zero_is_fp32_too():
    shape, par = _layout({"preset": "llama-8b"}, {"tp": 1, "zero": 0, "grad_reduce_in_fp32": True}, 16)
    v = wm.comm_volumes(shape, par)
    assert v.dp_grad_collective == "all_reduce"
    assert v.dp_grad_bytes == pytest.approx(4 * shape.params, rel=1e-12)


def test_moe_expert_gradients_in_fp32_over_their_group():
    # Mixtral 8x7B at tp 2, ep 4 over 16 GPUs: the experts' own buffers are fp32 as well (same BufferKey rule)
    model, parallel = {"preset": "mixtral-8x7b"}, {"tp": 2, "ep": 4, "zero": 1, "micro_batch": 1, "global_batch": 8}
    shape, par = _layout(model, {**parallel, "grad_reduce_in_fp32": True}, 16)
    _, plain = _layout(model, parallel, 16)
    v, before = wm.comm_volumes(shape, par), wm.comm_volumes(shape, plain)
    experts = shape.layers * shape.experts * shape.expert_params / (2 * 4)
    assert before.expert_dp_grad_bytes == pytest.approx(2 * experts, rel=1e-12)
    assert v.expert_dp_grad_bytes == pytest.approx(4 * experts, rel=1e-12)
    assert v.dp_grad_bytes == pytest.approx(2 * before.dp_grad_bytes, rel=1e-12)
    assert v.expert_dp_param_allgather_bytes == before.expert_dp_param_allgather_bytes


def test_zero3_reduce_scatters_fp32_and_gathers_bf16():
    shape, par = _layout({"preset": "llama-8b"}, {"tp": 1, "zero": 3, "global_batch": 8, "grad_reduce_in_fp32": True}, 8)
    v = wm.comm_volumes(shape, par)
    assert v.zero3_layer_grad_bytes * 32 == pytest.approx(4 * shape.params, rel=1e-12)
    assert v.zero3_layer_allgather_bytes * 32 == pytest.approx(2 * shape.params, rel=1e-12)


def test_with_fp8_param_gather_weights_one_byte_gradients_four():
    """The two switches are independent in Megatron-Core: the fp8 matrices' buffer key is (uint8, float)."""
    shape, par = _layout({"preset": "llama-70b", "precision": "fp8"},
                         {**TP8_PP4, "fp8_param_gather": True, "grad_reduce_in_fp32": True}, 512)
    matrices = 20 * (shape.dense_layer_params - 2 * H) / 8
    p0 = _stage0_params(shape)
    v = wm.comm_volumes(shape, par, stage=0)
    assert v.dp_grad_bytes == pytest.approx(4 * p0, rel=1e-12)
    assert v.dp_param_allgather_bytes == pytest.approx(2 * p0 - matrices, rel=1e-12)


@pytest.mark.parametrize(("zero", "grads"), [(1, lambda p0: 4 * p0), (2, lambda p0: 4 * p0 / 16)])
def test_memory_counts_the_fp32_gradient_buffer(zero, grads):
    """The closed form of test_memory_closed_form_llama_70b with 4 B gradients: the whole buffer on every rank
    with the distributed optimizer (ZeRO-1, Megatron-Core's grad_data is not sharded), the shard with ZeRO-2;
    weights, optimizer state and activations do not move."""
    shape, par = _layout(LLAMA_70B, {**TP8_PP4, "zero": zero, "grad_reduce_in_fp32": True}, 512)
    _, plain = _layout(LLAMA_70B, {**TP8_PP4, "zero": zero}, 512)
    p0 = _stage0_params(shape)
    mem, before = wm.memory_per_gpu_bytes(shape, par, stage=0), wm.memory_per_gpu_bytes(shape, plain, stage=0)
    assert mem["grads"] == pytest.approx(grads(p0), rel=1e-12)
    assert before["grads"] == pytest.approx(grads(p0) / 2, rel=1e-12)
    assert {k: mem[k] for k in ("weights", "optimizer", "activations", "logits")} == {
        k: before[k] for k in ("weights", "optimizer", "activations", "logits")}


def test_the_step_reduces_fp32_buckets():
    """The step program carries 4 B per parameter, and with the reduction exposed (no overlap) it reduces
    ceil(4 P / bucket) buckets of that size, one after another: about twice the bf16 time."""
    parallel = {"tp": 1, "zero": 1, "global_batch": 16, "micro_batch": 1, "overlap_grad_reduce": False}
    model = {"preset": "llama-8b", "layers": 4, "seq_len": 2048}
    exposed = {}
    for flag in (False, True):
        scenario = _scenario(2, {**parallel, "grad_reduce_in_fp32": flag}, model)
        topo = build_cluster(resolve_cluster(scenario.cluster))
        step = training_step(scenario.workload, topo)
        params = wm.resolve_model(scenario.workload.model).params
        assert step.dp_grad_bytes[0] == pytest.approx((4 if flag else 2) * params, rel=1e-12)
        assert step.param_gather_bytes[0] == pytest.approx(2 * params, rel=1e-12)
        exposed[flag] = run_workload(scenario)[0].breakdown.exposed_comm_s["dp reduce_scatter"]
        assert int(np.ceil(step.dp_grad_bytes[0] / step.bucket_bytes)) == int(np.ceil((4 if flag else 2) * params / 25 / 2**20))
    assert 1.8 < exposed[True] / exposed[False] < 2.2


def test_default_is_bf16():
    assert WorkloadSpec().parallel.grad_reduce_in_fp32 is False


@pytest.mark.parametrize("value", ["fp32", 4])
def test_a_non_boolean_is_refused(value):
    data = {"cluster": {"preset": "dgx-h100", "servers": 1},
            "workload": {"model": {"preset": "llama-8b"}, "parallel": {"grad_reduce_in_fp32": value}}}
    with pytest.raises(SpecError, match=r"workload.parallel.grad_reduce_in_fp32"):
        validate_data(Scenario, data)
