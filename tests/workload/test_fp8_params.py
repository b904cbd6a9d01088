"""fp8_param_gather: the layers' matrices kept and all-gathered in fp8, in closed form.

Megatron-Core (NVIDIA/Megatron-LM @d98e8a64): under ``--fp8-param-gather`` each transformer layer is built
inside TransformerEngine's ``fp8_model_init`` (megatron/core/transformer/transformer_block.py build_layer,
megatron/core/fp8_utils.py get_fp8_context(is_init=True)), so the weights of TE's linear modules are fp8
tensors; megatron/core/distributed/param_and_grad_buffer.py (group_params_for_buffers) stores those in a
uint8 buffer (1 B each) and every other parameter (norms, the router, the embedding, the output layer) in
bf16, and the distributed optimizer all-gathers the buffers as they are; the gradients stay bf16.
megatron/training/arguments.py refuses the flag without a distributed optimizer or FSDP, and
megatron/core/transformer/moe/README.md lists it as removing the bf16 weight copy.
"""

from __future__ import annotations

import pytest

from gpuwait.errors import SpecError
from gpuwait.spec import WorkloadSpec
from gpuwait.topology.presets import build_cluster, resolve_cluster
from gpuwait.workload import model as wm
from gpuwait.workload.steps import training_step
from tests.workload.test_layouts import _scenario


def _layout(model: dict, parallel: dict, gpus: int) -> tuple[wm.ModelShape, wm.ParallelLayout]:
    spec = WorkloadSpec(model=model, parallel=parallel)
    shape = wm.resolve_model(spec.model)
    return shape, wm.validate_layout(shape, spec, gpus, 8)


LLAMA_70B_FP8 = {"preset": "llama-70b", "precision": "fp8"}
TP8_PP4 = {"tp": 8, "pp": 4, "zero": 1, "micro_batch": 1}


@pytest.mark.parametrize("flag", [False, True])
def test_dense_gather_is_one_byte_per_matrix_weight(flag):
    shape, par = _layout(LLAMA_70B_FP8, {**TP8_PP4, "fp8_param_gather": flag}, 512)
    h, tp = 8192, 8
    # the first stage: 20 layers (their matrices over tp, two norm vectors each whole) and the embedding
    matrices = 20 * (shape.dense_layer_params - 2 * h) / tp
    bf16 = 20 * 2 * h + 128256 * h / tp
    v = wm.comm_volumes(shape, par, stage=0)
    assert v.dp_param_allgather_bytes == pytest.approx((1 if flag else 2) * matrices + 2 * bf16, rel=1e-12)
    assert v.dp_grad_bytes == pytest.approx(2 * (matrices + bf16), rel=1e-12)  # gradients stay bf16
    # the last stage: its matrices, the final norm and the LM head (bf16, outside the transformer block)
    last = wm.comm_volumes(shape, par, stage=3)
    head = 128256 * h / tp + h
    assert last.dp_param_allgather_bytes == pytest.approx((1 if flag else 2) * matrices + 2 * (20 * 2 * h + head),
                                                          rel=1e-12)


def test_flag_off_moves_nothing():
    shape, off = _layout(LLAMA_70B_FP8, TP8_PP4, 512)
    assert wm.fp8_params_on_gpu(shape, off, 0) == (0.0, 0.0)
    assert wm.comm_volumes(shape, off).dp_param_allgather_bytes == 2 * sum(wm.params_on_gpu(shape, off))


@pytest.mark.parametrize("zero", [1, 2])
def test_moe_experts_gather_in_fp8_the_router_in_bf16(zero):
    # Mixtral 8x7B at tp 2, ep 4 over 16 GPUs: experts over their expert-dp group (16 / 4 = 4 ranks)
    model = {"preset": "mixtral-8x7b", "precision": "fp8"}
    parallel = {"tp": 2, "ep": 4, "zero": zero, "micro_batch": 1, "global_batch": 8}
    shape, par = _layout(model, {**parallel, "fp8_param_gather": True}, 16)
    _, plain = _layout(model, parallel, 16)
    h, tp, layers = shape.hidden, 2, shape.layers
    experts = layers * shape.experts * shape.expert_params / (tp * 4)
    attention = layers * shape.attention_params / tp
    router = layers * h * shape.experts / tp
    norms = layers * 2 * h
    embedding_and_head = 2 * shape.vocab * h / tp + h
    v, before = wm.comm_volumes(shape, par), wm.comm_volumes(shape, plain)
    assert v.expert_dp_param_allgather_bytes == pytest.approx(experts, rel=1e-12)
    assert before.expert_dp_param_allgather_bytes == pytest.approx(2 * experts, rel=1e-12)
    assert v.dp_param_allgather_bytes == pytest.approx(attention + 2 * (router + norms + embedding_and_head), rel=1e-12)
    assert (v.dp_grad_bytes, v.expert_dp_grad_bytes) == (before.dp_grad_bytes, before.expert_dp_grad_bytes)


def test_the_step_gathers_fp8_bytes():
    """The step program carries the gather sizes the model computes, on the dp group."""
    scenario = _scenario(2, {"tp": 1, "zero": 1, "global_batch": 16, "micro_batch": 1, "fp8_param_gather": True},
                         {"preset": "llama-8b", "layers": 4, "seq_len": 2048, "precision": "fp8"})
    step = training_step(scenario.workload, build_cluster(resolve_cluster(scenario.cluster)))
    shape = wm.resolve_model(scenario.workload.model)
    matrices = 4 * (shape.dense_layer_params - 2 * shape.hidden)
    others = shape.params - matrices
    assert step.param_gather_bytes[0] == pytest.approx(matrices + 2 * others, rel=1e-12)
    assert step.dp_grad_bytes[0] == pytest.approx(2 * shape.params, rel=1e-12)


def test_zero3_gathers_fp8_and_reduce_scatters_bf16():
    shape, par = _layout({"preset": "llama-8b", "precision": "fp8"},
                         {"tp": 1, "zero": 3, "global_batch": 8, "fp8_param_gather": True}, 8)
    v = wm.comm_volumes(shape, par)
    dense = wm.params_on_gpu(shape, par)[0]
    matrices = 32 * (shape.dense_layer_params - 2 * shape.hidden)
    assert v.zero3_layer_allgather_bytes * 32 == pytest.approx(2 * dense - matrices, rel=1e-12)
    assert v.zero3_layer_grad_bytes * 32 == pytest.approx(2 * dense, rel=1e-12)
    # memory: the fp8 shard plus the largest two units gathered (the LM head and the last layer)
    weights = wm.memory_per_gpu_bytes(shape, par)["weights"]
    head, layer = shape.head_params, shape.dense_layer_params
    layer_bytes = 2 * layer - (layer - 2 * shape.hidden)
    assert weights == pytest.approx((2 * dense - matrices) / 8 + 2 * head + layer_bytes, rel=1e-12)


def test_memory_keeps_no_bf16_copy_of_the_matrices():
    """The closed form of test_memory_closed_form_llama_70b with the matrices at 1 B: weights drop from
    2 B to 1 B per matrix weight; gradients, optimizer and activations do not move."""
    shape, par = _layout(LLAMA_70B_FP8, {**TP8_PP4, "fp8_param_gather": True}, 512)
    _, plain = _layout(LLAMA_70B_FP8, TP8_PP4, 512)
    h = 8192
    matrices = 20 * (shape.dense_layer_params - 2 * h) / 8
    p0 = matrices + 20 * 2 * h + 128256 * h / 8
    mem, before = wm.memory_per_gpu_bytes(shape, par, stage=0), wm.memory_per_gpu_bytes(shape, plain, stage=0)
    assert before["weights"] == 2 * p0
    assert mem["weights"] == pytest.approx(2 * p0 - matrices, rel=1e-12)
    assert {k: mem[k] for k in ("grads", "optimizer", "activations", "logits")} == {
        k: before[k] for k in ("grads", "optimizer", "activations", "logits")}
    assert before["weights"] - mem["weights"] == pytest.approx(1.99 * 2**30, rel=0.01)  # freed on each GPU


@pytest.mark.parametrize(("model", "parallel", "message"), [
    ({"preset": "llama-8b"}, {"zero": 1}, r"fp8_param_gather: needs fp8 compute \(workload.model.precision: fp8\); "
                                          r"precision is bf16"),
    ({"preset": "llama-8b", "precision": "fp8"}, {"zero": 0}, r"fp8_param_gather: needs a distributed optimizer"),
])
def test_refused_without_fp8_or_a_distributed_optimizer(model, parallel, message):
    with pytest.raises(SpecError, match=message):
        _layout(model, {**parallel, "tp": 8, "fp8_param_gather": True}, 64)
