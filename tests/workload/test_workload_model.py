"""Model arithmetic: parameter counts against published sizes, FLOPs, comm volumes and memory in closed form,
and one clear error per bad layout."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwait.errors import SpecError, UnknownNameError
from gpuwait.spec import ComputeSpec, ModelSpec, WorkloadSpec
from gpuwait.workload.model import (
    CHECKPOINT_BYTES_PER_PARAM,
    InferenceLayout,
    ParallelLayout,
    activation_bytes_per_layer,
    check_fits,
    checkpoint_bytes,
    comm_volumes,
    decode_flops_per_token,
    decode_step_time_s,
    decode_weight_bytes,
    head_forward_flops,
    inference_memory_per_gpu_bytes,
    inference_tp_all_reduce_bytes,
    kv_cache_bytes_per_token,
    layer_forward_flops,
    memory_per_gpu_bytes,
    params_on_gpu,
    prefill_flops,
    resolve_gpu,
    resolve_model,
    stage_forward_flops,
    training_flops_per_token,
    validate_inference_layout,
    validate_layout,
    zero3_gathered_params,
)

GiB = 2**30


def model(**fields):
    return resolve_model(ModelSpec(**fields))


def layout(gpus, tp=1, pp=1, dp=None, ep=1, zero=0, sp=None, micro_batch=1, global_batch=None):
    dp = dp or gpus // (tp * pp)
    return ParallelLayout(gpus, tp, pp, dp, ep, zero, tp > 1 if sp is None else sp, micro_batch,
                          global_batch or dp * micro_batch * (4 * pp if pp > 1 else 1), 25 * 2**20, True, "1f1b")


# ------------------------------------------------------------------------------------------- parameters
@pytest.mark.parametrize(("preset", "total", "active"), [
    ("llama-8b", 8.0e9, 8.0e9),       # Llama 3 paper (arXiv 2407.21783), Table 3
    ("llama-70b", 70.6e9, 70.6e9),    # 70.6B: the released model card
    ("llama-405b", 405e9, 405e9),
    ("mixtral-8x7b", 46.7e9, 12.9e9),  # Mixtral of Experts (arXiv 2401.04088)
    ("deepseek-moe-16b", 16.4e9, 2.8e9),  # DeepSeekMoE (arXiv 2401.06066)
])
def test_preset_params_match_published_sizes(preset, total, active):
    shape = model(preset=preset)
    assert shape.params == pytest.approx(total, rel=0.02)
    assert shape.active_params == pytest.approx(active, rel=0.02)


def test_llama_8b_param_count_closed_form():
    h, f, v, L, kv_dim = 4096, 14336, 128256, 32, 8 * 128
    per_layer = 2 * h * h + 2 * h * kv_dim + 3 * h * f + 2 * h
    assert model(preset="llama-8b").params == 2 * v * h + h + L * per_layer


def test_explicit_fields_override_the_preset():
    base, short = model(preset="llama-70b"), model(preset="llama-70b", layers=40, seq_len=2048)
    assert (short.layers, short.seq_len, short.hidden, short.kv_heads) == (40, 2048, 8192, 8)
    assert base.params - short.params == 40 * base.dense_layer_params
    custom = model(layers=2, hidden=64, ffn_hidden=256, heads=4, vocab=100)
    assert custom.kv_heads == 4 and custom.experts == 1 and custom.name == "custom" and custom.seq_len == 4096


@settings(max_examples=60, deadline=None)
@given(layers=st.integers(1, 100), hidden_per_head=st.integers(1, 64), heads=st.sampled_from([1, 2, 4, 8]),
       ffn=st.integers(1, 4096), vocab=st.integers(1, 50_000), experts=st.sampled_from([1, 4, 8]), top_k=st.integers(1, 4))
def test_params_grow_with_layers_and_active_never_exceeds_total(layers, hidden_per_head, heads, ffn, vocab, experts, top_k):
    fields = dict(hidden=hidden_per_head * heads, heads=heads, ffn_hidden=ffn, vocab=vocab, experts=experts,
                  top_k=min(top_k, experts))
    a, b = model(layers=layers, **fields), model(layers=layers + 1, **fields)
    assert b.params > a.params and b.active_params > a.active_params
    assert a.active_params <= a.params
    assert (a.active_params == a.params) == (experts == 1 or fields["top_k"] == experts)


@pytest.mark.parametrize(("fields", "error", "message"), [
    (dict(preset="llama-9b"), UnknownNameError,
     "workload.model.preset: unknown model preset 'llama-9b'; expected one of deepseek-moe-16b, llama-405b, llama-70b, llama-8b, mixtral-8x7b"),
    (dict(layers=2, heads=4, ffn_hidden=8, vocab=10), SpecError, "workload.model.hidden: required when no preset gives it"),
    (dict(layers=2, hidden=64, heads=4, vocab=10), SpecError, "workload.model.ffn_hidden: required"),
    (dict(preset="llama-8b", heads=48), SpecError, "workload.model.heads: 48 does not divide hidden = 4096"),
    (dict(preset="llama-8b", kv_heads=3), SpecError, "workload.model.kv_heads: 3 does not divide heads = 32"),
    (dict(preset="llama-8b", experts=8), SpecError, "workload.model.top_k: required for an MoE model (experts = 8)"),
    (dict(preset="mixtral-8x7b", top_k=9), SpecError, "workload.model.top_k: 9 is more than the 8 experts"),
    (dict(preset="mixtral-8x7b", dense_layers=32), SpecError, "workload.model.dense_layers: 32 leaves no MoE layer of 32"),
])
def test_bad_model_shapes_name_the_field(fields, error, message):
    with pytest.raises(error) as info:
        model(**fields)
    assert str(info.value).startswith(message)


# ------------------------------------------------------------------------------------------- FLOPs
def test_training_flops_match_megatron_closed_form():
    # A GPT shape — MHA, MLP params 8h² (SwiGLU with ffn = 8h/3) — must reproduce Narayanan et al. 2021
    # eq. (3): F = 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)) per batch of B sequences (norms aside).
    h, L, s, V, B = 3072, 24, 2048, 50_000, 8
    shape = model(layers=L, hidden=h, ffn_hidden=8 * h // 3, heads=24, vocab=V, seq_len=s)
    megatron = 72 * B * s * L * h**2 * (1 + s / (6 * h) + V / (12 * L * h))
    assert training_flops_per_token(shape) * B * s == pytest.approx(megatron, rel=1e-4)


def test_six_n_t_plus_attention():
    shape = model(preset="llama-405b")
    n = shape.params - shape.vocab * shape.hidden  # the input embedding is a lookup
    assert training_flops_per_token(shape) == 6 * n + 12 * 126 * 16384 * 8192
    moe = model(preset="mixtral-8x7b")  # MoE: only the active experts count
    assert training_flops_per_token(moe) == 6 * (moe.active_params - 32000 * 4096) + 12 * 32 * 4096 * 4096


@pytest.mark.parametrize("preset", ["llama-8b", "mixtral-8x7b", "deepseek-moe-16b"])
def test_layers_and_head_add_up_to_a_third_of_training_flops(preset):
    shape = model(preset=preset)
    tokens = 2 * shape.seq_len
    forward = sum(layer_forward_flops(shape, tokens, layer) for layer in range(shape.layers)) + head_forward_flops(shape, tokens)
    assert forward == pytest.approx(training_flops_per_token(shape) * tokens / 3, rel=1e-12)


@pytest.mark.parametrize(("tp", "pp"), [(1, 1), (8, 1), (2, 4), (8, 7)])
def test_stage_flops_split_the_forward(tp, pp):
    shape = model(preset="deepseek-moe-16b") if pp != 4 else model(preset="llama-8b")
    lay = layout(tp * pp * 2, tp=tp, pp=pp, micro_batch=3)
    total = sum(stage_forward_flops(shape, lay, s) for s in range(pp)) * tp
    assert total == pytest.approx(training_flops_per_token(shape) * 3 * shape.seq_len / 3, rel=1e-12)


# ------------------------------------------------------------------------------------------- layout
def workload(**parallel):
    return WorkloadSpec(parallel=parallel)


def test_layout_derives_dp_and_the_batch():
    shape = model(preset="llama-70b")
    lay = validate_layout(shape, workload(tp=8, pp=4, global_batch=512, micro_batch=2), 512, 8)
    assert (lay.dp, lay.micro_batches, lay.sequence_parallel, lay.gpus) == (16, 16, True, 512)
    default = validate_layout(shape, workload(tp=8, pp=4), 512, 8)
    assert default.global_batch == 16 * 4 * 4 and default.micro_batches == 16
    assert validate_layout(shape, workload(), 8, 8).global_batch == 8
    assert validate_layout(shape, WorkloadSpec(gpus=64, parallel={"tp": 8}), 512, 8).dp == 8


@pytest.mark.parametrize(("preset", "cluster_gpus", "spec", "message"), [
    ("llama-70b", 448, dict(parallel=dict(tp=8, pp=7)), "workload.parallel.pp: 7 does not divide 80 layers"),
    ("llama-70b", 512, dict(parallel=dict(tp=8, pp=3)), "workload.parallel: tp*cp*pp = 8*1*3 = 24 does not divide the job's 512 GPUs"),
    ("llama-70b", 512, dict(parallel=dict(tp=8, pp=4, dp=8)), "workload.parallel.dp: tp*cp*pp*dp = 8*1*4*8 = 256 but the job has 512 GPUs"),
    ("llama-70b", 512, dict(gpus=1024), "workload.gpus: 1024 GPUs but the cluster has 512"),
    ("llama-70b", 512, dict(parallel=dict(tp=16)), "workload.parallel.tp: 16 is more than the 8 GPUs of an NVLink domain"),
    ("llama-70b", 512, dict(parallel=dict(tp=4, pp=2, global_batch=100)),
     "workload.parallel.global_batch: 100 is not a multiple of dp*micro_batch = 64*1 = 64"),
    ("llama-8b", 64, dict(parallel=dict(ep=2)), "workload.parallel.ep: 2 needs an MoE model (experts > 1); llama-8b is dense"),
    ("mixtral-8x7b", 48, dict(parallel=dict(ep=3)), "workload.parallel.ep: 3 does not divide 8 experts"),
    ("mixtral-8x7b", 48, dict(parallel=dict(tp=8, ep=4)), "workload.parallel.ep: 4 does not divide dp*cp = 6*1 = 6"),
    ("mixtral-8x7b", 64, dict(parallel=dict(tp=2, sequence_parallel=False)),
     "workload.parallel.sequence_parallel: an MoE model with tp > 1 needs sequence parallelism"),
    ("llama-70b", 64, dict(parallel=dict(pp=4, zero=3)), "workload.parallel.zero: ZeRO stage 3 gathers every layer's weights per micro-batch"),
    ("llama-8b", 60, dict(parallel=dict(tp=3)), "workload.parallel.tp: 3 does not divide 32 attention heads"),
    ("deepseek-moe-16b", 64, dict(parallel=dict(tp=16, allow_tp_across_servers=True, micro_batch=0)), None),
])
def test_bad_layouts_name_the_field(preset, cluster_gpus, spec, message):
    shape = model(preset=preset)
    if message is None:  # micro_batch=0 is caught by the spec itself
        with pytest.raises(Exception, match="greater than or equal to 1"):
            WorkloadSpec(**spec)
        return
    with pytest.raises(SpecError) as info:
        validate_layout(shape, WorkloadSpec(**spec), cluster_gpus, 8)
    assert str(info.value).startswith(message), str(info.value)
    assert info.value.problems == [str(info.value)]


def test_tp_across_servers_only_when_allowed():
    shape = model(preset="llama-405b")
    with pytest.raises(SpecError, match="set allow_tp_across_servers") as info:
        validate_layout(shape, workload(tp=16), 64, 8)
    assert "NVLink" in info.value.hint
    assert validate_layout(shape, workload(tp=16, allow_tp_across_servers=True), 64, 8).tp == 16
    with pytest.raises(SpecError, match="tp: 4 does not divide the 6 GPUs of an NVLink domain"):
        validate_layout(shape, workload(tp=4), 48, 6)


@settings(max_examples=40, deadline=None)
@given(tp=st.sampled_from([1, 2, 4]), pp=st.sampled_from([1, 2, 3]), edp=st.integers(1, 3), ep=st.sampled_from([1, 2]))
def test_every_rank_is_in_exactly_one_group_of_each_kind(tp, pp, edp, ep):
    from gpuwait.workload.layout import Layout

    par = layout(tp * pp * edp * ep, tp=tp, pp=pp, ep=ep)
    lay = Layout(tp=par.tp, dp=par.dp, pp=par.pp, ep=par.ep, rank_gpu=np.arange(par.gpus))
    for kind, size in [("tp", tp), ("pp", pp), ("dp", lay.dp), ("ep", ep), ("expert_dp", edp)]:
        groups = lay.groups(kind)
        assert groups.shape == (par.gpus // size, size)
        assert np.array_equal(np.sort(groups.ravel()), np.arange(par.gpus))
    stages = lay.stage_of()[lay.groups("pp")[0]]
    assert np.array_equal(stages, np.arange(pp))
    # an expert-parallel group lies inside one data-parallel group
    dp_of = {r: i for i, g in enumerate(lay.groups("dp")) for r in g}
    assert all(len({dp_of[r] for r in g}) == 1 for g in lay.groups("ep"))


# ------------------------------------------------------------------------------------------- comm
def test_tp_volumes_all_reduce_or_sequence_parallel():
    shape = model(preset="llama-70b")
    act = 2 * 8192 * 8192 * 2  # b·s·h·2 B for micro_batch 2
    plain = comm_volumes(shape, layout(64, tp=8, pp=2, sp=False, micro_batch=2))
    assert plain.tp_forward == (("all_reduce", act),) * 2 and plain.tp_backward == plain.tp_forward
    assert plain.pp_send_bytes == act
    sp = comm_volumes(shape, layout(64, tp=8, pp=2, micro_batch=2))
    assert sorted(sp.tp_forward) == [("all_gather", act)] * 2 + [("reduce_scatter", act)] * 2
    assert sp.pp_send_bytes == act / 8
    single = comm_volumes(shape, layout(8, pp=2))
    assert single.tp_forward == () and comm_volumes(shape, layout(8)).pp_send_bytes == 0


def test_dp_gradient_bytes_are_two_bytes_per_parameter_on_the_gpu():
    shape = model(preset="llama-8b")
    v = comm_volumes(shape, layout(16, tp=2))
    assert v.dp_grad_collective == "all_reduce" and v.dp_param_allgather_bytes == 0
    per_layer = (shape.dense_layer_params - 2 * 4096) / 2 + 2 * 4096
    expected = 32 * per_layer + (2 * 128256 * 4096) / 2 + 4096
    assert v.dp_grad_bytes == 2 * expected
    z1 = comm_volumes(shape, layout(16, tp=2, zero=1))
    assert z1.dp_grad_collective == "reduce_scatter" and z1.dp_param_allgather_bytes == z1.dp_grad_bytes
    z3 = comm_volumes(shape, layout(16, tp=2, zero=3))
    # ZeRO-3 shards every parameter, the embedding and the head too: the layers' gathers carry them all
    assert z3.zero3_layer_allgather_bytes * 32 == pytest.approx(2 * expected, rel=1e-12)
    assert z3.dp_param_allgather_bytes == 0
    assert comm_volumes(shape, layout(2, tp=2)).dp_grad_bytes == 0  # dp = 1: nothing to reduce


def test_pipeline_stages_hold_their_share():
    shape = model(preset="llama-70b")
    lay = layout(32, tp=8, pp=4)
    first, mid, last = (params_on_gpu(shape, lay, s)[0] for s in (0, 1, 3))
    assert first - mid == pytest.approx(128256 * 8192 / 8)
    assert last - mid == pytest.approx(128256 * 8192 / 8 + 8192)
    total = sum(params_on_gpu(shape, lay, s)[0] for s in range(4))
    norms = 80 * 2 * 8192 + 8192  # replicated over tp
    assert total * 8 - 7 * norms == pytest.approx(shape.params)


def test_expert_parallel_volumes():
    shape = model(preset="mixtral-8x7b")
    lay = layout(64, tp=2, ep=4, micro_batch=1)
    v = comm_volumes(shape, lay)
    assert v.ep_all_to_all_bytes == 4096 * 2 * 4096 * 2 / 2  # tokens·top_k·h·2 B / tp
    assert v.moe_layers_in_stage == 32
    dense, expert = params_on_gpu(shape, lay)
    assert expert == 32 * 8 * shape.expert_params / (2 * 4)
    assert v.expert_dp_grad_bytes == 2 * expert and v.dp_grad_bytes == 2 * dense
    assert comm_volumes(shape, layout(64, tp=2)).ep_all_to_all_bytes == 0


# ------------------------------------------------------------------------------------------- memory
def test_memory_closed_form_llama_70b():
    shape = model(preset="llama-70b")
    lay = layout(512, tp=8, pp=4, zero=1, micro_batch=1)  # 16 micro-batches per step
    mem = memory_per_gpu_bytes(shape, lay)  # worst stage: the first (4 micro-batches in flight)
    h, s = 8192, 8192
    p0 = 20 * ((shape.dense_layer_params - 2 * h) / 8 + 2 * h) + 128256 * h / 8
    assert mem["weights"] == 2 * p0 and mem["grads"] == 2 * p0
    assert mem["optimizer"] == pytest.approx(12 * p0 / 16)
    # Korthikanti's terms per layer, s·b·h/t each, p micro-batches: 34, less the two dropout masks (none in
    # Llama), less K and V's 4·(1 - 8/64) (GQA), plus the SwiGLU MLP's 6·3.5 over GeLU's 16 + 2
    assert mem["activations"] == 4 * 20 * 33.5 * s * 1 * h / 8
    assert mem["logits"] == 0
    last = memory_per_gpu_bytes(shape, lay, stage=3)
    assert last["activations"] == 1 * 20 * 33.5 * s * h / 8 and last["logits"] == 4 * s * 128256 / 8


@pytest.mark.parametrize(("pp", "chunks", "group", "m"), [(4, 5, 4, 16), (4, 2, 4, 8), (8, 2, 8, 32), (2, 4, 2, 4),
                                                     (4, 5, 8, 16), (4, 2, 6, 12)])
def test_interleaved_activations_in_flight(pp, chunks, group, m):
    """The first stage of interleaved 1F1B holds Megatron-Core's warm-up forwards plus one, each a chunk of
    1/v of the stage's layers (megatron/core/pipeline_parallel/schedules.py, get_pp_rank_microbatches:
    2 (p - 1) + (v - 1) N, NVIDIA/Megatron-LM @d98e8a64). With N = p that is Korthikanti et al. 2022's
    closed form (§4.2.3: L (1 + (p - 1) / (p v)) layers' worth on the first stage, the
    interleaved_schedule_memory_penalty of Megatron-LM's megatron/training/theoretical_memory_usage.py)."""
    shape = model(preset="llama-70b")  # 80 layers
    lay = replace(layout(64 * pp, tp=8, pp=pp, global_batch=m * 64 // 8 * 1), schedule="interleaved-1f1b",
                  virtual_stages=chunks, microbatch_group_size=group)
    assert lay.micro_batches == m
    per_layer = activation_bytes_per_layer(shape, lay)
    held = min(2 * (pp - 1) + (chunks - 1) * group + 1, m * chunks)
    acts = memory_per_gpu_bytes(shape, lay, stage=0)["activations"]
    assert acts == pytest.approx(held * shape.layers / (pp * chunks) * per_layer, rel=1e-12)
    if group == pp and held < m * chunks:
        assert acts == pytest.approx(shape.layers * (1 + (pp - 1) / (pp * chunks)) * per_layer, rel=1e-12)
    plain = memory_per_gpu_bytes(shape, replace(lay, schedule="1f1b", virtual_stages=1), stage=0)["activations"]
    assert plain == pytest.approx(min(pp, m) * shape.layers / pp * per_layer, rel=1e-12) and acts > plain


def test_interleaved_first_chunk_of_embedding_only_holds_no_layers():
    """Llama 3's split (Dubey et al. 2024, §3.3.2): with the embedding and the loss counted as layers and one
    layer per chunk, the first stage's first chunk holds only the embedding, so the warm-up forwards
    of that chunk keep no transformer layer's activations."""
    shape = model(preset="llama-405b")  # 126 layers + embedding + loss = 16 stages x 8 chunks of 1
    spec = WorkloadSpec(parallel={"tp": 8, "pp": 16, "schedule": "interleaved-1f1b", "virtual_stages": 8,
                                  "account_for_embedding": True, "account_for_loss": True, "global_batch": 2048})
    lay = validate_layout(shape, spec, 8192, 8)
    assert lay.micro_batches == 32 and lay.stage_layer_counts[:2] == (0, 1) and lay.stage_layer_counts[-1] == 0
    per_layer = activation_bytes_per_layer(shape, lay)
    # stage 1: warm-up 2·14 + 7·16 = 140 one-layer chunks, plus the one forward before the first backward
    assert memory_per_gpu_bytes(shape, lay, stage=1)["activations"] == pytest.approx(141 * per_layer, rel=1e-12)
    # stage 0: 142 + 1 forwards before its first backward, 16 + 15 of them of the embedding-only chunk 0:
    # 7 x 16 one-layer chunks, the 112 layers 1F1B's 16 micro-batches of 7 layers hold (then each backward
    # frees a layer before the next layer-holding forward)
    assert memory_per_gpu_bytes(shape, lay, stage=0)["activations"] == pytest.approx(112 * per_layer, rel=1e-12)


def test_activations_are_korthikanti_for_gpt():
    """Korthikanti et al. 2022, §4.1 / Table 2: a GPT layer (multi-head attention, 4h GeLU MLP, dropout)
    keeps 34·s·b·h with sequence parallelism over t (selective recomputation), 10 + 24/t without it,
    and 2·s·b·h with full recomputation. gpuwait writes the 4h GeLU MLP as a SwiGLU of 8h/3 (same weights)."""
    gpt = model(layers=8, hidden=3072, ffn_hidden=8192, heads=24, vocab=51200, seq_len=2048)
    assert gpt.hidden_dropout == 0.1  # Megatron-LM's default for a shape given field by field
    sbh = 2048 * 1 * 3072
    for tp in (1, 2, 4, 8):
        assert activation_bytes_per_layer(gpt, layout(8, tp=tp, micro_batch=1)) == pytest.approx(34 * sbh / tp)
        no_sp = layout(8, tp=tp, sp=False, micro_batch=1)
        assert activation_bytes_per_layer(gpt, no_sp) == pytest.approx(sbh * (10 + 24 / tp))
        full = replace(no_sp, recompute="full")
        assert activation_bytes_per_layer(gpt, full) == 2 * sbh
    # without dropout (hidden_dropout 0, as Llama's and Nemotron's recipes) the two 1-byte masks go
    no_masks = model(layers=8, hidden=3072, ffn_hidden=8192, heads=24, vocab=51200, seq_len=2048, hidden_dropout=0.0)
    assert activation_bytes_per_layer(no_masks, layout(8, tp=4, micro_batch=1)) == pytest.approx(32 * sbh / 4)


def test_activations_without_sequence_parallelism_and_for_moe():
    dense = model(preset="llama-8b")  # GQA 8 of 32 heads, SwiGLU ffn 3.5h, no dropout
    sbh = 8192 * 2 * 4096
    # whole on every rank: norms 4, attention and MLP inputs 2 + 2; split: Q and output 2 + 2, MLP 6·3.5;
    # K and V 4·8/32 split over min(tp, kv_heads)
    assert activation_bytes_per_layer(dense, layout(8, tp=4, sp=False, micro_batch=2)) == sbh * (8 + 25 / 4 + 1 / 4)
    assert activation_bytes_per_layer(dense, layout(8, tp=1, micro_batch=2)) == 34 * sbh
    moe = model(preset="mixtral-8x7b")  # top-2: each routed copy of the token (2) and its expert's MLP (6·3.5)
    assert activation_bytes_per_layer(moe, layout(8)) == 4096 * 4096 * (8 + 4 + 1 + 2 * (2 + 21))


def test_zero_stages_shard_in_order():
    shape = model(preset="llama-8b")
    parts = [memory_per_gpu_bytes(shape, layout(8, zero=z)) for z in range(4)]
    n = shape.params
    assert parts[0]["optimizer"] == 12 * n and parts[1]["optimizer"] == 12 * n / 8
    assert parts[1]["grads"] == 2 * n and parts[2]["grads"] == 2 * n / 8
    # ZeRO-3 also holds its largest unit unsharded with the one FSDP prefetches (prefetch_depth 1):
    # the LM head (and final norm) with the last layer (test_zero3_gathers_the_largest_units_of_each_stage)
    assert parts[2]["weights"] == 2 * n
    assert parts[3]["weights"] == 2 * n / 8 + 2 * (shape.head_params + shape.dense_layer_params)
    totals = [sum(p.values()) for p in parts]
    assert totals == sorted(totals, reverse=True)


@pytest.mark.parametrize("depth", [0, 1, 2])
def test_zero3_gathers_the_largest_units_of_each_stage(depth):
    # PyTorch FSDP (Zhao et al. 2023, arXiv:2304.11277, §3.2.1): peak memory is the sharded model plus
    # the largest fully materialized FSDP units; each unit is un-sharded while it runs and the
    # prefetch_depth next ones are gathered ahead (§3.4.1). Units, in the order they run: the
    # embedding (vocab x hidden / tp, first stage), each layer, the final norm + LM head (last stage).
    import dataclasses

    shape = model(preset="llama-8b")
    tp, per_stage = 2, shape.layers // 4
    lay = dataclasses.replace(layout(64, tp=tp, pp=4, zero=3), prefetch_depth=depth)
    layer = (shape.dense_layer_params - shape.norm_params) / tp + shape.norm_params
    embedding, head = shape.vocab * shape.hidden / tp, shape.vocab * shape.hidden / tp + shape.hidden
    assert embedding > 2 * layer  # llama-8b's 128K vocabulary: the embedding outweighs two layers
    expected = [embedding + depth * layer, (1 + depth) * layer, (1 + depth) * layer, head + depth * layer]
    for stage, want in enumerate(expected):
        assert zero3_gathered_params(shape, lay, stage) == pytest.approx(want, rel=1e-12)
        sharded = sum(params_on_gpu(shape, lay, stage)) / lay.dp
        got = memory_per_gpu_bytes(shape, lay, stage=stage)["weights"]
        assert got == pytest.approx(2 * (sharded + want), rel=1e-12)
    assert per_stage > 1 + depth
    # nothing is gathered without ZeRO-3 or without a replica to shard over
    assert zero3_gathered_params(shape, layout(64, tp=tp, pp=4, zero=2), 0) == 0.0
    assert zero3_gathered_params(shape, layout(8, tp=8, zero=3), 0) == 0.0


def test_check_fits_says_how_much_is_missing():
    shape = model(preset="llama-70b")
    h100 = resolve_gpu(ComputeSpec(gpu="H100-SXM"))
    with pytest.raises(SpecError) as info:
        check_fits(shape, layout(8, tp=8), h100)
    text = str(info.value)
    need = sum(memory_per_gpu_bytes(shape, layout(8, tp=8)).values()) / GiB
    assert text == f"workload: model needs {need:.1f} GiB per GPU but the GPU has 80.0 GiB ({need - 80:.1f} GiB over)"
    assert "optimizer" in info.value.hint and "zero" in info.value.hint
    parts = check_fits(shape, layout(512, tp=8, pp=4, zero=1), h100)
    assert sum(parts.values()) < 80 * GiB


def test_checkpoint_is_fourteen_bytes_per_parameter():
    shape = model(preset="llama-8b")
    assert checkpoint_bytes(shape) == CHECKPOINT_BYTES_PER_PARAM * shape.params == 14 * shape.params


# ------------------------------------------------------------------------------------------- GPUs
def test_gpu_presets_and_overrides():
    a100 = resolve_gpu(ComputeSpec(gpu="A100"))
    assert (a100.peak_flops, a100.memory_bytes, a100.hbm_bandwidth_Bps) == (312e12, 80 * GiB, 2.039e12)
    assert resolve_gpu(ComputeSpec(gpu="b200"), "fp8").peak_flops == 4.5e15
    assert resolve_gpu(ComputeSpec(), server_gpu_model="H200-SXM5-141GB").memory_bytes == 141 * GiB
    assert resolve_gpu(ComputeSpec(), server_gpu_model="A100-SXM4-40GB").name == "A100-40GB"
    assert resolve_gpu(ComputeSpec()).name == "H100-SXM"
    custom = resolve_gpu(ComputeSpec(gpu="H100-SXM", peak_flops=500e12, efficiency=0.4))
    assert custom.achieved_flops == 200e12 and custom.memory_bytes == 80 * GiB
    explicit = resolve_gpu(ComputeSpec(peak_flops=1e15, memory=100e9, hbm_bandwidth=5e12), server_gpu_model="L40S")
    assert explicit.name == "custom" and explicit.memory_bytes == 100e9


def test_unknown_gpus():
    with pytest.raises(UnknownNameError, match="workload.compute.gpu: unknown GPU 'H900'; expected one of A100, "):
        resolve_gpu(ComputeSpec(gpu="H900"))
    with pytest.raises(SpecError, match="workload.compute.gpu: the cluster's GPU 'L40S' has no preset"):
        resolve_gpu(ComputeSpec(), server_gpu_model="L40S")


# ------------------------------------------------------------------------------------------- inference
def test_kv_cache_of_llama_70b_is_320_kib_per_token():
    assert kv_cache_bytes_per_token(model(preset="llama-70b")) == 2 * 80 * 8 * 128 * 2 == 320 * 1024
    assert kv_cache_bytes_per_token(model(preset="llama-70b", precision="fp8")) == 160 * 1024


def test_prefill_equals_decoding_the_prompt_token_by_token():
    shape = model(preset="llama-8b")
    assert prefill_flops(shape, 100) == pytest.approx(sum(decode_flops_per_token(shape, c) for c in range(1, 101)), rel=1e-12)
    assert decode_flops_per_token(shape, 1) == 2 * (shape.params - 128256 * 4096) + 4 * 32 * 4096


def test_decode_is_memory_bound_at_batch_one():
    shape = model(preset="llama-70b")
    gpu = resolve_gpu(ComputeSpec(gpu="H100-SXM"))
    lay = InferenceLayout(gpus=8, tp=8, pp=1, replicas=1, batch=1, prompt_tokens=1000, output_tokens=24)
    read = (shape.params - shape.embedding_params) * 2 + 1024 * 320 * 1024
    # at the HBM rate a streaming kernel reaches: 0.85 of the datasheet's 3.35 TB/s (compute.HBM_EFFICIENCY)
    assert decode_step_time_s(shape, gpu, lay, 1024) == pytest.approx(read / (8 * 0.85 * 3.35e12))
    assert read / 3.35e12 > decode_flops_per_token(shape, 1024) / gpu.achieved_flops
    assert inference_tp_all_reduce_bytes(shape, 1) == 8192 * 2


def test_engine_adds_a_fixed_time_per_layer_and_per_step_to_every_decode_step():
    shape = model(preset="llama-70b")
    gpu = resolve_gpu(ComputeSpec(gpu="H100-SXM"))

    def layout(tp, pp, **inference):
        spec = WorkloadSpec(mode="inference", inference={"tp": tp, "pp": pp, **inference})
        return validate_inference_layout(shape, spec, tp * pp, 8)

    bare, vllm = layout(4, 1), layout(4, 1, engine="vllm")
    assert (bare.decode_layer_overhead_s, bare.decode_step_overhead_s) == (0.0, 0.0)
    assert (vllm.decode_layer_overhead_s, vllm.decode_step_overhead_s) == (50e-6, 0.71e-3)
    # every layer's kernels run on every GPU of the tp group: tp shortens the bytes, not the fixed time; the
    # engine's scheduling and sampling happen once a step whatever the layers
    added_s = decode_step_time_s(shape, gpu, vllm, 1024) - decode_step_time_s(shape, gpu, bare, 1024)
    assert added_s == pytest.approx(80 * 50e-6 + 0.71e-3)
    staged = layout(4, 2, engine="vllm")  # pp splits the layers, the step passes every stage: the same total
    assert decode_step_time_s(shape, gpu, staged, 1024) == pytest.approx(decode_step_time_s(shape, gpu, vllm, 1024))
    # each explicit value replaces its own part of the preset only
    own_layer = layout(4, 1, engine="vllm", decode_layer_overhead=10e-6)
    assert (own_layer.decode_layer_overhead_s, own_layer.decode_step_overhead_s) == (10e-6, 0.71e-3)
    own_step = layout(4, 1, engine="vllm", decode_step_overhead=2e-3)
    assert (own_step.decode_layer_overhead_s, own_step.decode_step_overhead_s) == (50e-6, 2e-3)
    assert layout(4, 1, decode_step_overhead=2e-3).decode_layer_overhead_s == 0.0


def test_engines_whose_sources_give_no_split_keep_the_whole_step_per_layer():
    from gpuwait.workload.presets import ENGINE_PRESETS
    assert {name: p.decode_step_overhead_s for name, p in ENGINE_PRESETS.items() if name != "vllm"} == \
        {"none": 0.0, "vllm-v1": 0.0, "sglang": 0.0, "sglang-eager": 0.0}
    vllm = ENGINE_PRESETS["vllm"]
    # the two parts add up to the whole published step above the roofline (2.30 ms: 7.58 ms less 5.28 ms)
    assert 32 * vllm.decode_layer_overhead_s + vllm.decode_step_overhead_s == pytest.approx(7.58e-3 - 5.28e-3, abs=0.02e-3)


def test_every_serving_engine_name_is_a_preset_and_the_schema_lists_them():
    """``InferenceSpec.engine`` was a plain string: `gpuwait schema` listed no choices. Its names are the
    engine presets', kept in step here (as RoutingSpec.kind with the routers)."""
    import typing

    from gpuwait.spec.workload import InferenceSpec
    from gpuwait.workload.presets import ENGINE_PRESETS

    assert set(typing.get_args(InferenceSpec.model_fields["engine"].annotation)) == set(ENGINE_PRESETS)
    schema = InferenceSpec.model_json_schema()["properties"]["engine"]
    assert set(schema["enum"]) == set(ENGINE_PRESETS)


def test_an_unknown_engine_is_one_line_naming_the_field_and_the_choices(capsys, tmp_path):
    from tests.cli.test_cli import run_cli

    bad = tmp_path / "bad-engine.yaml"
    bad.write_text("cluster: {preset: dgx-h100, servers: 1}\nworkload:\n  mode: inference\n"
                   "  model: {preset: llama-8b}\n  inference: {engine: tgi}\n")
    code, out, err = run_cli(capsys, "validate", str(bad))
    assert code != 0 and out == ""
    first = err.strip().splitlines()[0]
    assert "workload.inference.engine: got 'tgi'" in first
    assert "'none', 'vllm', 'vllm-v1', 'sglang' or 'sglang-eager'" in first


def test_a_negative_overhead_is_one_clear_error():
    with pytest.raises(ValueError, match="decode_layer_overhead"):
        WorkloadSpec(mode="inference", inference={"decode_layer_overhead": -1e-6})
    with pytest.raises(ValueError, match="decode_step_overhead"):
        WorkloadSpec(mode="inference", inference={"decode_step_overhead": -1e-6})


def test_moe_decode_reads_only_the_experts_it_uses():
    shape = model(preset="mixtral-8x7b")
    assert decode_weight_bytes(shape, 1) == (shape.active_params - shape.embedding_params) * 2
    assert decode_weight_bytes(shape, 10_000) == pytest.approx((shape.params - shape.embedding_params) * 2)
    assert decode_weight_bytes(shape, 1) < decode_weight_bytes(shape, 4) < decode_weight_bytes(shape, 64)


def test_inference_layout_and_memory():
    shape = model(preset="llama-70b")
    spec = WorkloadSpec(mode="inference", inference={"tp": 4, "pp": 2, "batch": 8, "prompt_tokens": 3000, "output_tokens": 1096})
    lay = validate_inference_layout(shape, spec, 64, 8)
    assert (lay.replicas, lay.batch) == (8, 8)
    mem = inference_memory_per_gpu_bytes(shape, lay)
    assert mem["weights"] == shape.params * 2 / 8
    assert mem["kv_cache"] == 8 * 4096 * 320 * 1024 / (4 * 2)
    check_fits(shape, lay, resolve_gpu(ComputeSpec(gpu="H100-SXM")))
    big = validate_inference_layout(shape, WorkloadSpec(mode="inference", inference={"batch": 64}), 8, 8)
    with pytest.raises(SpecError, match=r"workload: model needs .* GiB per GPU but the GPU has 80.0 GiB \(.* GiB over\)"):
        check_fits(shape, big, resolve_gpu(ComputeSpec(gpu="H100-SXM")))
    with pytest.raises(SpecError, match="workload.inference.pp: 3 does not divide 80 layers"):
        validate_inference_layout(shape, WorkloadSpec(mode="inference", inference={"pp": 3}), 48, 8)
    with pytest.raises(SpecError, match="workload.inference.tp: 16 is more than the 8 GPUs of an NVLink domain"):
        validate_inference_layout(shape, WorkloadSpec(mode="inference", inference={"tp": 16}), 64, 8)
