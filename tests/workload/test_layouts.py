"""Layouts as published: uneven pipeline stages, context parallelism, rank order, placement, overlap
switches. Each effect moves the step in the direction its source reports.

- Uneven stages: Llama 3 405B runs 126 layers on 16 stages with one layer fewer on the first and the
  last stage (Dubey et al. 2024, "The Llama 3 Herd of Models", §3.3.2), Megatron-LM's
  ``--account-for-embedding/loss-in-pipeline-split``; taking layers off the stage that holds the LM head
  shortens the pipeline (the bubble is set by the slowest stage).
- Context parallelism (Liu et al. 2023, arXiv:2310.01889; Megatron-Core's p2p CP): each CP rank holds
  1/cp of the sequence, so activations shrink cp-fold, and the K/V ring runs under attention.
- TP communication overlap (Megatron-Core --tp-comm-overlap; Wang et al. 2022, ASPLOS '23, "Overlap
  communication with dependent computation via decomposition") shortens the step.
- Placement: a job spread over two pods crosses the core tier; ByteDance reports about 17 % lower
  all_reduce busbw for such jobs (the figure issue 13 quotes; ECMP collisions grow with the tiers a
  flow crosses, Jiang et al. 2024, "MegaScale", arXiv:2402.15627, describes the fabric).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from gpuwait.errors import SpecError
from gpuwait.runner.workload import run_workload
from gpuwait.spec import Scenario, validate_data
from gpuwait.spec.workload import ParallelSpec, WorkloadSpec
from gpuwait.topology.presets import build_cluster, resolve_cluster
from gpuwait.workload import model as wm
from gpuwait.workload.layout import Layout, parse_rank_order
from gpuwait.workload.steps import server_order, server_pods, training_step


def _scenario(servers: int, parallel: dict, model: dict | None = None, cluster: dict | None = None,
              gpus: int | None = None) -> Scenario:
    workload = {"model": model or {"preset": "llama-8b"}, "parallel": parallel,
                "compute": {"gpu": "H100-SXM", "jitter_cv": 0.0}}
    if gpus:
        workload["gpus"] = gpus
    return validate_data(Scenario, {"cluster": {"preset": "dgx-h100", "servers": servers, **(cluster or {})},
                                    "workload": workload})


def _step_s(scenario: Scenario) -> float:
    return run_workload(scenario)[0].breakdown.step_time_s


def test_126_layers_on_16_stages_as_llama3():
    p = ParallelSpec(pp=16, account_for_embedding=True, account_for_loss=True)
    counts = wm.split_layers("workload.parallel", p, 126, 1)
    assert counts == (7,) + (8,) * 14 + (7,)
    # interleaved: 128 "layers" over 16 x 2 virtual stages of 4; the first and last chunks hold 3
    counts = wm.split_layers("workload.parallel", p, 126, 2)
    assert counts[0] == 3 and counts[-1] == 3 and sum(counts) == 126
    with pytest.raises(SpecError, match=r"workload.parallel.pp: 16 does not divide 126 layers"):
        wm.split_layers("workload.parallel", ParallelSpec(pp=16), 126, 1)
    with pytest.raises(SpecError, match="first_stage_layers: the other 2 stages cannot share the remaining 35"):
        wm.split_layers("workload.parallel", ParallelSpec(pp=4, first_stage_layers=13, last_stage_layers=13), 61, 1)


def test_first_and_last_stages_taking_every_layer_are_refused():
    # an audit's file: pp 4 with 30 + 2 of 32 layers left the middle stages empty, and it ran
    with pytest.raises(SpecError, match="take all 32 layers and leave none for the other 2 stages"):
        wm.split_layers("workload.parallel", ParallelSpec(pp=4, first_stage_layers=30, last_stage_layers=2), 32, 1)


def test_fewer_layers_on_the_head_stage_shorten_the_step():
    model = {"preset": "llama-8b", "layers": 64}
    even = _step_s(_scenario(4, {"tp": 8, "pp": 4, "global_batch": 32}, model))
    uneven = _step_s(_scenario(4, {"tp": 8, "pp": 4, "global_batch": 32, "first_stage_layers": 15,
                                   "last_stage_layers": 15}, model))
    assert uneven < 0.99 * even


def test_stage_layers_follow_the_split():
    shape = wm.resolve_model(wm.ModelSpec(preset="llama-8b", layers=62))
    spec = WorkloadSpec(parallel={"tp": 8, "pp": 4, "account_for_embedding": True, "account_for_loss": True})
    par = wm.validate_layout(shape, spec, 32, 8)
    assert [len(wm.stage_layers(shape, par, s)) for s in range(4)] == [15, 16, 16, 15]
    assert wm.stage_layers(shape, par, 3)[-1] == 61


def test_rank_order_and_cp_groups():
    assert parse_rank_order("tp-cp-ep-dp-pp") == ("tp", "cp", "dp", "pp")
    lay = Layout(tp=2, dp=2, pp=1, ep=1, cp=2, rank_gpu=np.arange(8))
    assert lay.groups("cp").tolist() == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert lay.groups("dp_cp").tolist() == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert lay.lane_ranks().tolist() == [[[0, 1, 2, 3], [4, 5, 6, 7]]]
    with pytest.raises(SpecError, match="rank_order: got 'tp-ep-pp-dp'; expected ep right before dp"):
        parse_rank_order("tp-ep-pp-dp")


def test_context_parallel_splits_the_sequence_and_its_activations():
    shape = wm.resolve_model(wm.ModelSpec(preset="llama-8b", seq_len=16384))
    par1 = wm.validate_layout(shape, WorkloadSpec(parallel={"tp": 8, "cp": 1}), 16, 8)
    par2 = wm.validate_layout(shape, WorkloadSpec(parallel={"tp": 8, "cp": 2}), 16, 8)
    assert par2.dp == 1 and par2.weight_replicas == 2
    a1 = wm.activation_bytes_per_layer(shape, par1)
    assert wm.activation_bytes_per_layer(shape, par2) == pytest.approx(a1 / 2)
    v = wm.comm_volumes(shape, par2)
    # K and V of 8192 tokens, 8 KV heads of 128 on 8 TP ranks: one head each, bf16
    assert v.cp_kv_bytes == 8192 * 2 * 128 * 2
    with pytest.raises(SpecError, match="workload.parallel.cp: seq_len 8190 is not a multiple of 2\\*cp = 4"):
        wm.validate_layout(wm.resolve_model(wm.ModelSpec(preset="llama-8b", seq_len=8190)),
                           WorkloadSpec(parallel={"tp": 8, "cp": 2}), 16, 8)


def test_context_parallel_runs_with_its_ring_on_the_fabric():
    scenario = _scenario(4, {"tp": 8, "cp": 2, "pp": 1}, {"preset": "llama-8b", "seq_len": 32768})
    result = run_workload(scenario)[0]
    labels = {c.label for c in result.collectives}
    assert "cp sendrecv" in labels and "dp all_reduce" in labels
    # ring attention hides most of the K/V exchange under attention compute
    assert result.breakdown.exposed_comm_s.get("cp sendrecv", 0.0) < 0.02 * result.breakdown.step_time_s


def test_tp_comm_overlap_shortens_the_step():
    base = {"tp": 8, "pp": 1, "global_batch": 8, "micro_batch": 2}
    off = _step_s(_scenario(1, base))
    on = _step_s(_scenario(1, {**base, "tp_comm_overlap": True}))
    assert on < off


def test_zero2_with_pipelines_reduces_every_micro_batch():
    scenario = _scenario(4, {"tp": 8, "pp": 2, "zero": 2, "global_batch": 32})
    step = training_step(scenario.workload, build_cluster(resolve_cluster(scenario.cluster)))
    assert any(op.group == "dp" and op.collective == "reduce_scatter" and op.calls_bwd for op in step.inline_ops)
    assert step.dp_grad_bytes.max() == 0  # nothing left to reduce at the end of the step


def _three_tier() -> dict:
    # a fat tree of radix-16 switches: 8 DGX servers (8 rail leaves) per pod
    return {"fabric": {"tiers": 3, "switch_radix": 16}}


def test_spread_placement_spans_pods():
    scenario = _scenario(16, {"tp": 8}, cluster=_three_tier(), gpus=64)
    topo = build_cluster(resolve_cluster(scenario.cluster))
    pods = server_pods(topo)
    assert len(np.unique(pods)) >= 2
    packed, spread = server_order(topo, "packed", 64), server_order(topo, "spread", 64)
    assert len(np.unique(pods[packed[:8]])) == 1 and len(np.unique(pods[spread[:8]])) >= 2
    with pytest.raises(SpecError, match="workload.parallel.placement: got \\[0, 0\\]"):
        server_order(topo, [0, 0], 64)


def test_a_job_across_two_pods_reduces_gradients_slower():
    """Jobs spread over pods see lower all_reduce busbw than jobs inside one pod (ECMP collisions on
    the extra tiers). Direction only: here the in-pod job's rings stay on their rail leaves,
    so the gap (about 45 %) is wider than the 17 % published between jobs that both cross spines."""
    cluster = {**_three_tier(), "routing": {"kind": "ecmp"}}
    inside = run_workload(_scenario(16, {"tp": 8, "placement": "packed"}, cluster=cluster, gpus=64))[0]
    across = run_workload(_scenario(16, {"tp": 8, "placement": "spread"}, cluster=cluster, gpus=64))[0]

    def busbw(result):
        return next(c.busbw_GBps for c in result.collectives if c.label.startswith("dp "))

    assert busbw(across) < busbw(inside)


@pytest.mark.parametrize("model, parallel", [
    ("llama-8b", {"tp": 1}),
    ("deepseek-moe-16b", {"tp": 1, "ep": 4}),  # experts split 4 ways, each replicated over dp / ep = 4 ranks
])
def test_zero3_moves_three_times_the_parameter_bytes_per_micro_batch(model, parallel):
    # ZeRO-3 (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion Parameter
    # Models", §7.2.2): every parameter is all-gathered before its forward and again before its
    # backward, and every gradient reduce-scattered: 3 x the parameter bytes, where ZeRO-1 moves 2 x
    # (a reduce-scatter and an all-gather of the same bytes). The embedding, the LM head and the
    # experts are parameters too.
    cluster = build_cluster(resolve_cluster(_scenario(2, {}).cluster))
    base = {**parallel, "global_batch": 16, "micro_batch": 1}  # 16 GPUs: one micro-batch per step
    z1 = training_step(_scenario(2, {**base, "zero": 1}, {"preset": model}).workload, cluster)
    z3 = training_step(_scenario(2, {**base, "zero": 3}, {"preset": model}).workload, cluster)
    # ZeRO-1 reduce-scatters every gradient on the GPU once (the experts' over their own group)
    params_bytes = float(z1.dp_grad_bytes[0] + z1.expert_grad_bytes[0])
    assert z1.micro_batches == z3.micro_batches == 1 and params_bytes > 0
    moved = {"all_gather": 0.0, "reduce_scatter": float(z3.dp_grad_bytes[0] + z3.expert_grad_bytes[0])}
    for op in z3.inline_ops:
        if op.group in ("dp", "expert_dp"):
            moved[op.collective] += op.size_bytes * (op.calls_fwd + op.calls_bwd)
    gathered_after = float(z3.param_gather_bytes[0] + z3.expert_param_gather_bytes[0])
    assert moved["all_gather"] + gathered_after == pytest.approx(2 * params_bytes, rel=1e-9)
    assert moved["reduce_scatter"] == pytest.approx(params_bytes, rel=1e-9)


@pytest.mark.parametrize("ep", [4, 16])
def test_zero3_gathers_experts_over_their_expert_data_parallel_group(ep):
    # Megatron-Core shards and reduces expert parameters over the expert-data-parallel group (the
    # dp / ep ranks holding the same experts: parallel_state.get_expert_data_parallel_group, which its
    # DDP and distributed optimizer use for expert parameters), the rest over dp; a ZeRO-3 / FSDP
    # parameter is all-gathered and its gradient reduce-scattered over the group it is sharded on
    # (Zhao et al. 2023, arXiv:2304.11277, §3.2). With ep = dp that group is one rank: experts stay whole.
    # The bytes the inline ops move per pass are the bytes the memory model holds gathered.
    import dataclasses

    cluster = build_cluster(resolve_cluster(_scenario(2, {}).cluster))
    scenario = _scenario(2, {"tp": 1, "ep": ep, "zero": 3, "global_batch": 16, "micro_batch": 1},
                         {"preset": "deepseek-moe-16b"})
    step = training_step(scenario.workload, cluster)
    shape = wm.resolve_model(scenario.workload.model)
    par = wm.validate_layout(shape, scenario.workload, 16, 8)
    dense, expert = wm.params_on_gpu(shape, par)
    ops = {(op.group, op.collective): op.size_bytes * shape.layers for op in step.inline_ops if op.zero3}
    expected = {("dp", "all_gather"): 2 * dense, ("dp", "reduce_scatter"): 2 * dense}
    if ep < 16:
        expected.update({("expert_dp", "all_gather"): 2 * expert, ("expert_dp", "reduce_scatter"): 2 * expert})
    assert ops == pytest.approx(expected, rel=1e-12)
    # every unit gathered at once (a prefetch as deep as the model): the same bytes as one pass's gathers
    whole = dataclasses.replace(par, prefetch_depth=10**6)
    assert 2 * wm.zero3_gathered_params(shape, whole, 0) == pytest.approx(sum(
        v for (_group, coll), v in ops.items() if coll == "all_gather"), rel=1e-12)
    sizes = {c.label: c.n_ranks for c in run_workload(scenario)[0].collectives}
    assert sizes["dp all_gather"] == 16
    assert sizes.get("expert_dp all_gather") == (16 // ep if ep < 16 else None)


@pytest.mark.parametrize("zero, ep", [(0, 8), (1, 4), (2, 4), (1, 16)])
def test_expert_gradients_and_weights_move_over_their_expert_data_parallel_group(zero, ep):
    # Megatron-Core's DistributedDataParallel puts expert parameters in buffers of their own
    # (``expert_parallel_buffers``), reduced over the expert-data-parallel group (``intra_expt_dp_group``;
    # dense ones over ``intra_dp_cp_group``), and its distributed optimizer shards and all-gathers each
    # buffer over the group that reduces it (megatron/core/distributed/distributed_data_parallel.py,
    # param_and_grad_buffer.py); the expert-data-parallel group is the dp / ep ranks holding the same
    # experts (parallel_state.initialize_model_parallel). In closed form, per GPU: expert gradients
    # 2 B x moe_layers x experts x expert_params / (tp x ep) over dp / ep ranks, the rest over dp; the
    # memory model's optimizer shard is what the all-gathers collect from each rank.
    scenario = _scenario(2, {"tp": 1, "ep": ep, "zero": zero, "global_batch": 16, "micro_batch": 1},
                         {"preset": "deepseek-moe-16b"})
    step = training_step(scenario.workload, build_cluster(resolve_cluster(scenario.cluster)))
    shape = wm.resolve_model(scenario.workload.model)
    expert = shape.moe_layers * shape.experts * shape.expert_params / ep
    dense = shape.params - shape.moe_layers * shape.experts * shape.expert_params  # tp = 1: all of it
    edp = 16 // ep
    assert step.expert_grad_bytes[0] == pytest.approx(2 * expert if edp > 1 else 0.0, rel=1e-12)
    assert step.dp_grad_bytes[0] == pytest.approx(2 * dense, rel=1e-12)
    sharded = zero in (1, 2)
    assert step.expert_param_gather_bytes[0] == pytest.approx(2 * expert if sharded and edp > 1 else 0.0, rel=1e-12)
    assert step.param_gather_bytes[0] == pytest.approx(2 * dense if sharded else 0.0, rel=1e-12)
    result = run_workload(scenario)[0]
    coll = "all_reduce" if zero == 0 else "reduce_scatter"
    sizes = {c.label: c.n_ranks for c in result.collectives if c.label.split()[0] in ("dp", "expert_dp")}
    expected = {f"dp {coll}": 16} | ({"dp all_gather": 16} if sharded else {})
    if edp > 1:
        expected |= {f"expert_dp {coll}": edp} | ({"expert_dp all_gather": edp} if sharded else {})
    assert sizes == expected
    assert set(result.breakdown.exposed_comm_s) >= set(expected)
    if sharded:
        par = wm.validate_layout(shape, scenario.workload, 16, 8)
        optimizer_params = wm.memory_per_gpu_bytes(shape, par)["optimizer"] / 12
        from_each_rank = (step.param_gather_bytes[0] / 16 + step.expert_param_gather_bytes[0] / max(edp, 1)) / 2
        expected_shard = dense / 16 + expert / edp
        assert optimizer_params == pytest.approx(expected_shard, rel=1e-12)
        if edp > 1:
            assert from_each_rank == pytest.approx(expected_shard, rel=1e-12)


def test_zero2_with_pipelines_reduces_expert_gradients_over_their_group_every_micro_batch():
    # as above, layer by layer: ZeRO-2 keeps only its gradient shard, the experts' on their expert-dp group
    scenario = _scenario(4, {"tp": 1, "pp": 2, "ep": 4, "zero": 2, "global_batch": 64, "micro_batch": 1},
                         {"preset": "deepseek-moe-16b"})
    step = training_step(scenario.workload, build_cluster(resolve_cluster(scenario.cluster)))
    shape = wm.resolve_model(scenario.workload.model)
    layers = shape.layers // 2
    moe_layers = sum(shape.is_moe_layer(layer) for layer in range(layers))  # the first stage's
    ops = {op.group: op for op in step.inline_ops if op.collective == "reduce_scatter"}
    assert set(ops) == {"dp", "expert_dp"} and ops["dp"].hidden_with == ops["expert_dp"].hidden_with != ""
    assert ops["expert_dp"].size_bytes * ops["expert_dp"].calls_bwd == pytest.approx(
        2 * moe_layers * shape.experts * shape.expert_params / 4, rel=1e-12)
    assert step.expert_grad_bytes.max() == 0 and step.dp_grad_bytes.max() == 0
    sizes = {c.label: c.n_ranks for c in run_workload(scenario)[0].collectives}
    assert sizes["expert_dp reduce_scatter"] == 16 // 4 and sizes["dp reduce_scatter"] == 16


def test_context_parallel_ranks_join_the_expert_data_parallel_group():
    # Megatron-Core: expert_data_parallel_size = world / (expert_tp x ep x pp), its expert rank generator
    # has no cp (parallel_state.initialize_model_parallel): with expert_tp = tp that is dp x cp / ep.
    # Context parallelism splits the sequence, not the weights, so a dp rank's cp ranks hold its experts
    # and reduce their gradients with it. Here dp = 8, cp = 2, ep = 4: groups of 4, not 2.
    scenario = _scenario(2, {"tp": 1, "cp": 2, "ep": 4, "zero": 1, "global_batch": 8, "micro_batch": 1},
                         {"preset": "deepseek-moe-16b"})
    shape = wm.resolve_model(scenario.workload.model)
    par = wm.validate_layout(shape, scenario.workload, 16, 8)
    assert (par.dp, par.cp, par.expert_dp) == (8, 2, 16 // (1 * 4 * 1))
    step = training_step(scenario.workload, build_cluster(resolve_cluster(scenario.cluster)))
    lay = step.layout
    assert lay.expert_dp == 4
    # a group: ranks of one dp_cp group (the same dense weights) at one ep index (the same experts),
    # membership as Megatron-Core's expert rank generator gives it (test below)
    dp_cp_of = {int(r): i for i, g in enumerate(lay.groups("dp_cp")) for r in g}
    ep_index = {int(r): i for g in lay.groups("ep") for i, r in enumerate(g)}
    for g in lay.groups("expert_dp"):
        assert len({dp_cp_of[int(r)] for r in g}) == 1 and len({ep_index[int(r)] for r in g}) == 1
    # bytes and group as with cp = 1; memory shards the experts over the same 4 ranks
    expert = shape.moe_layers * shape.experts * shape.expert_params / 4
    assert step.expert_grad_bytes[0] == pytest.approx(2 * expert, rel=1e-12)
    dense = shape.params - shape.moe_layers * shape.experts * shape.expert_params
    assert wm.memory_per_gpu_bytes(shape, par)["optimizer"] == pytest.approx(12 * (dense / 16 + expert / 4), rel=1e-12)
    sizes = {c.label: c.n_ranks for c in run_workload(scenario)[0].collectives}
    assert sizes["expert_dp reduce_scatter"] == sizes["expert_dp all_gather"] == 4
    assert sizes["dp reduce_scatter"] == 16


def test_with_ep_equal_to_dp_context_parallel_ranks_still_reduce_expert_gradients():
    # ep = dp leaves each expert on one dp rank, but its cp ranks see other tokens: dp x cp / ep = cp
    scenario = _scenario(2, {"tp": 1, "cp": 2, "ep": 8, "zero": 1, "global_batch": 8, "micro_batch": 1},
                         {"preset": "deepseek-moe-16b"})
    step = training_step(scenario.workload, build_cluster(resolve_cluster(scenario.cluster)))
    assert step.layout.expert_dp == 2 and step.expert_grad_bytes[0] > 0
    sizes = {c.label: c.n_ranks for c in run_workload(scenario)[0].collectives}
    assert sizes["expert_dp reduce_scatter"] == 2


def test_ep_may_exceed_dp_when_it_divides_dp_times_cp():
    """Megatron-Core's expert grid is world / (tp ep pp) ranks (parallel_state.initialize_model_parallel,
    NVIDIA/Megatron-LM @d98e8a64; arguments.py asks only that ep divide the experts), so ep 8 over dp 4 x cp 4
    runs there; gpuwait refused it ("ep: 8 does not divide dp = 4") though its groups already split dp x cp
    (audit36). Each expert is then held by dp x cp / ep = 2 ranks, which reduce its gradients."""
    scenario = _scenario(2, {"tp": 1, "cp": 4, "ep": 8, "zero": 1, "global_batch": 8, "micro_batch": 1},
                         {"preset": "deepseek-moe-16b"})
    step = training_step(scenario.workload, build_cluster(resolve_cluster(scenario.cluster)))
    assert (step.layout.dp, step.layout.expert_dp) == (4, 2)
    sizes = {c.label: c.n_ranks for c in run_workload(scenario)[0].collectives}
    assert sizes["ep alltoall"] == 8 and sizes["expert_dp reduce_scatter"] == 2
    bad = _scenario(2, {"tp": 1, "cp": 4, "ep": 32, "global_batch": 8}, {"preset": "deepseek-moe-16b"})
    with pytest.raises(SpecError, match=re.escape("workload.parallel.ep: 32 does not divide dp*cp = 4*4 = 16")):
        training_step(bad.workload, build_cluster(resolve_cluster(bad.cluster)))


def _megatron_groups(sizes: dict[str, int], order: str, kind: str) -> set[tuple[int, ...]]:
    """Megatron-Core's RankGenerator.get_ranks(kind) (megatron/core/parallel_state.py, NVIDIA/Megatron-LM @d98e8a64),
    written out again: ranks numbered in ``order`` (fastest first), a group varying ``kind`` with the rest fixed."""
    tokens = order.split("-")
    grid = np.arange(int(np.prod([sizes[t] for t in tokens]))).reshape([sizes[t] for t in reversed(tokens)])
    axis = len(tokens) - 1 - tokens.index(kind)
    return {tuple(int(r) for r in group) for group in np.moveaxis(grid, axis, -1).reshape(-1, sizes[kind])}


@pytest.mark.parametrize(("tp", "cp", "dp", "pp", "ep"), [(1, 2, 8, 1, 4), (2, 2, 4, 2, 2), (2, 4, 4, 2, 4),
                                                       (1, 4, 8, 1, 8), (2, 1, 8, 2, 4), (1, 2, 2, 2, 1),
                                                       # ep above dp: Megatron-Core needs only world % (tp ep pp)
                                                       (1, 2, 4, 1, 8), (2, 4, 2, 2, 4)])
def test_expert_groups_are_megatron_cores_with_context_parallelism(tp, cp, dp, pp, ep):
    """Megatron-Core numbers expert ranks with a second RankGenerator, order 'tp-cp-ep-dp-pp' and cp = 1
    (parallel_state.initialize_model_parallel): 'tp-ep-dp-pp' over expert_dp = world / (tp ep pp). With
    cp > 1 an EP group therefore takes a dp rank's cp ranks first; its size was always ep."""
    lay = Layout(tp=tp, dp=dp, pp=pp, ep=ep, rank_gpu=np.arange(tp * cp * dp * pp), cp=cp)
    dense = {"tp": tp, "cp": cp, "dp": dp, "pp": pp}
    expert = {"tp": tp, "ep": ep, "dp": cp * dp // ep, "pp": pp}
    assert {tuple(g) for g in lay.groups("ep").tolist()} == _megatron_groups(expert, "tp-ep-dp-pp", "ep")
    assert {tuple(g) for g in lay.groups("expert_dp").tolist()} == _megatron_groups(expert, "tp-ep-dp-pp", "dp")
    # and the dense groups are its default generator's
    for kind in ("tp", "cp", "dp", "pp"):
        assert {tuple(g) for g in lay.groups(kind).tolist()} == _megatron_groups(dense, "tp-cp-dp-pp", kind)
