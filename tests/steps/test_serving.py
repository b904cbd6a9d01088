"""Serving one batch (steps/serving.py) against closed forms.

- A pass through a pp-stage pipeline with no micro-batching: pp x (stage compute + its TP all-reduces)
  + (pp - 1) activation sends; TTFT is the prefill pass, which emits the first token, TPOT the decode pass,
  and the batch takes TTFT + (output_tokens - 1) x TPOT: TPOT = (latency - TTFT) / (output_len - 1), as
  vLLM's serving benchmark counts it (vllm bench serve).
- Prefill compute from FLOPs: batch x (2·N·T + 2·layers·hidden·T·(T+1)) / achieved FLOP/s, split over
  tp x pp GPUs (causal attention; Kaplan et al. 2020 §2.1 for 2·N per token).
- A decode step is bound by reading the weights and the KV cache from HBM when the batch is small:
  bytes / (tp x HBM bandwidth) (the roofline of Williams et al., CACM 2009).
- TP all-reduces in Megatron-style tensor parallelism: two per layer per forward (Shoeybi et al.,
  "Megatron-LM", 2019 §3), of batch x tokens x hidden x 2 bytes.
- MFU = model FLOPs / (time x GPUs x peak FLOP/s).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from gpuwait.collectives.ncclenv import parse_env
from gpuwait.errors import SimulationError
from gpuwait.fabric.groups import FabricModel
from gpuwait.spec.workload import WorkloadSpec
from gpuwait.steps.serving import run_serving, time_per_output_token_s
from gpuwait.topology.presets import build_preset, preset_spec
from gpuwait.transport.profiles import TRANSPORTS
from gpuwait.workload import model as wm
from gpuwait.workload.layout import Layout
from gpuwait.workload.program import ServingStep
from gpuwait.workload.steps import serving_step

PRESET = "rocev2-400g-2tier"
PREFILL_S, DECODE_S, PEAK = 0.050, 0.004, 989e12


def _fabric(servers: int = 2) -> FabricModel:
    spec = preset_spec(PRESET, servers=servers)
    return FabricModel(build_preset(PRESET, servers=servers), spec.routing, TRANSPORTS[spec.transport.name],
                       parse_env({}))


def _step(fabric: FabricModel, tp=1, pp=1, *, out=16, batch=4, layers=8, ar_prefill=0.0, ar_decode=0.0,
          send_prefill=0.0, send_decode=0.0, model_flops=1e15) -> ServingStep:
    n = tp * pp
    lay = Layout(tp, 1, pp, 1, fabric.topo.gpu_node.ravel()[:n])
    return ServingStep(lay, PREFILL_S, DECODE_S, layers // pp, ar_prefill, ar_decode, 2, send_prefill, send_decode,
                       out, batch, model_flops, PEAK, "test")


def _time(fabric: FabricModel, step: ServingStep, group: str, collective: str, n_bytes: float) -> float:
    lay = step.layout
    return fabric.collective(lay.rank_gpu[lay.groups(group)], collective, n_bytes).time_s


def test_no_communication_is_compute_only():
    fabric = _fabric()
    step = _step(fabric, out=16)
    result = run_serving(step, fabric)
    ttft, tpot = PREFILL_S, DECODE_S
    total = ttft + 15 * tpot  # 16 output tokens: the prefill's and 15 decode passes
    b = result.breakdown
    assert b.step_time_s == pytest.approx(total, rel=1e-12)
    assert b.ideal_step_time_s == pytest.approx(total, rel=1e-12)
    assert time_per_output_token_s(result) == pytest.approx(tpot, rel=1e-3)  # the note keeps 3 decimals in ms
    assert result.notes[0] == f"time to first token {ttft * 1e3:.3f} ms"
    assert b.per_gpu_s["compute"][0] == pytest.approx(total)
    assert b.per_gpu_s["exposed_comm"][0] == 0.0 and b.per_gpu_s["bubble"][0] == pytest.approx(0.0, abs=1e-15)
    assert b.mfu == pytest.approx(1e15 / (total * 1 * PEAK))
    assert b.tokens_per_step == 4 * 16
    assert result.collectives == ()


def test_replicas_serve_their_batches_at_once_and_count_in_the_throughput():
    # the job's tokens, as a training step's: two replicas of batch 4 make 2 x 4 x 16 tokens in one batch's time
    # (it counted one replica's while MFU counted every GPU's FLOPs: "389 tokens/s" for a 778 tokens/s service)
    fabric = _fabric()
    one, two = _step(fabric), _step(fabric)
    two = ServingStep(Layout(1, 2, 1, 1, fabric.topo.gpu_node.ravel()[:2]), *[getattr(one, f) for f in (
        "prefill_compute_s", "decode_compute_s", "layers_per_stage", "tp_allreduce_prefill_bytes",
        "tp_allreduce_decode_bytes", "allreduces_per_layer", "pp_send_prefill_bytes", "pp_send_decode_bytes",
        "output_tokens", "batch")], 2 * one.model_flops, PEAK, "test")
    a, b = run_serving(one, fabric), run_serving(two, fabric)
    assert b.breakdown.step_time_s == a.breakdown.step_time_s
    assert b.breakdown.tokens_per_step == 2 * a.breakdown.tokens_per_step == 2 * 4 * 16
    assert b.serving["tokens_per_s"] == pytest.approx(2 * a.serving["tokens_per_s"], rel=1e-12)
    assert b.breakdown.mfu == pytest.approx(a.breakdown.mfu, rel=1e-12)


def test_tensor_parallel_all_reduces_add_to_every_pass():
    fabric = _fabric()
    ar_pre, ar_dec = 4 * 512 * 8192 * 2.0, 4 * 8192 * 2.0
    step = _step(fabric, tp=8, out=32, layers=8, ar_prefill=ar_pre, ar_decode=ar_dec)
    calls = 8 * 2  # layers x two all-reduces per layer
    tp_pre, tp_dec = _time(fabric, step, "tp", "all_reduce", ar_pre), _time(fabric, step, "tp", "all_reduce", ar_dec)
    assert tp_pre > 0 and tp_dec > 0
    ttft, tpot = PREFILL_S + calls * tp_pre, DECODE_S + calls * tp_dec
    result = run_serving(step, fabric)
    b = result.breakdown
    decodes = 32 - 1  # the prefill pass emits the first of the 32 tokens
    assert b.step_time_s == pytest.approx(ttft + decodes * tpot, rel=1e-12)
    assert b.ideal_step_time_s == pytest.approx(PREFILL_S + decodes * DECODE_S, rel=1e-12)
    assert b.exposed_comm_s["tp all_reduce"] == pytest.approx(calls * (tp_pre + decodes * tp_dec), rel=1e-12)
    assert b.exposed_comm_s["pp sendrecv"] == 0.0
    labels = {c.label: c for c in result.collectives}
    assert labels["tp all_reduce decode"].count_per_step == calls * decodes
    assert labels["tp all_reduce prefill"].count_per_step == calls
    assert labels["tp all_reduce decode"].n_ranks == 8


def test_pipeline_pass_and_bubble():
    fabric = _fabric()
    pp, out = 4, 8
    send_pre, send_dec = 4 * 512 * 8192 * 2.0, 4 * 8192 * 2.0
    step = _step(fabric, pp=pp, out=out, send_prefill=send_pre, send_decode=send_dec)
    s_pre, s_dec = _time(fabric, step, "pp", "sendrecv", send_pre), _time(fabric, step, "pp", "sendrecv", send_dec)
    ttft = pp * PREFILL_S + (pp - 1) * s_pre
    tpot = pp * DECODE_S + (pp - 1) * s_dec
    total = ttft + (out - 1) * tpot
    result = run_serving(step, fabric)
    b = result.breakdown
    assert b.step_time_s == pytest.approx(total, rel=1e-12)
    recv = s_pre + (out - 1) * s_dec  # one receive per pass, on each stage past the first
    assert b.exposed_comm_s["pp sendrecv"] == pytest.approx((pp - 1) / pp * recv, rel=1e-12)  # the GPUs' mean
    # each GPU computes only its stage; the other stages' work and the sends between them are its bubble
    compute = PREFILL_S + (out - 1) * DECODE_S
    assert b.per_gpu_s["compute"] == pytest.approx(np.full(pp, compute))
    assert b.per_gpu_s["exposed_comm"] == pytest.approx([0.0] + [recv] * (pp - 1))
    assert b.per_gpu_s["bubble"] == pytest.approx([total - compute] + [total - compute - recv] * (pp - 1))
    assert b.per_gpu_s["bubble"][0] == pytest.approx((pp - 1) * (compute + recv))


def test_stage_0_waits_for_stage_1_and_the_transfer_each_decode_pass():
    """Closed form of a two-stage pipeline serving one batch (no TP, nothing else running): stage 0 computes,
    hands its activations to stage 1 and has nothing to do until stage 1 has received them and computed, so
    its bubble per pass is stage 1's compute plus the transfer; stage 1 waits for stage 0's compute and
    receives. Was (pp - 1) transfers charged to both GPUs as exposed communication, and stage 0's bubble in
    the breakdown was short of its timeline's by one transfer per pass (30 ms in the 405B example)."""
    fabric = _fabric()
    send_pre, send_dec = 4 * 512 * 8192 * 2.0, 4 * 8192 * 2.0
    per_pass = {}
    for out in (6, 7):
        step = _step(fabric, pp=2, out=out, send_prefill=send_pre, send_decode=send_dec)
        per_pass[out] = run_serving(step, fabric).breakdown.per_gpu_s
    s_pre, s_dec = _time(fabric, step, "pp", "sendrecv", send_pre), _time(fabric, step, "pp", "sendrecv", send_dec)
    assert s_dec > 0 and s_pre > s_dec
    one_more = {c: per_pass[7][c] - per_pass[6][c] for c in ("compute", "exposed_comm", "bubble")}
    assert one_more["bubble"][0] == pytest.approx(DECODE_S + s_dec, rel=1e-9)  # stage 1's compute + the transfer
    assert one_more["exposed_comm"][0] == 0.0
    assert one_more["bubble"][1] == pytest.approx(DECODE_S, rel=1e-9)  # stage 0's compute
    assert one_more["exposed_comm"][1] == pytest.approx(s_dec, rel=1e-9)  # its receive
    b = per_pass[6]
    assert b["bubble"][0] == pytest.approx(PREFILL_S + s_pre + 5 * (DECODE_S + s_dec), rel=1e-12)
    assert b["exposed_comm"].tolist() == pytest.approx([0.0, s_pre + 5 * s_dec], rel=1e-12)


@pytest.mark.parametrize("pp", [1, 2, 4])
def test_each_gpus_breakdown_is_its_tasks_summed_by_category(pp):
    """The breakdown and the timeline of a run are the same account: per GPU, each category's task
    durations in the table (comm counted by its exposed part) sum to that GPU's breakdown. Was off by
    (pp - 1) transfers per pass on every GPU: all were charged every stage's send."""
    fabric = _fabric()
    step = _step(fabric, tp=2, pp=pp, out=9, ar_prefill=4 * 512 * 8192 * 2.0, ar_decode=4 * 8192 * 2.0,
                 send_prefill=4 * 512 * 8192 * 2.0, send_decode=4 * 8192 * 2.0)
    result = run_serving(step, fabric)
    t, per_gpu = result.tasks, result.breakdown.per_gpu_s
    assert result.tasks_cover == ""  # the table holds every pass, so it sums to the batch
    seconds = np.where(t.kind == "comm", t.exposed_s, t.end_s - t.start_s)
    for category, kind in (("compute", "compute"), ("exposed_comm", "comm"), ("bubble", "bubble")):
        summed = np.bincount(t.rank[t.kind == kind], seconds[t.kind == kind], minlength=2 * pp)
        assert summed == pytest.approx(per_gpu[category], rel=1e-9, abs=1e-12), category
    assert set(t.kind) <= {"compute", "comm", "bubble"}
    if pp > 1:  # the receivers wait on the network, the first stage does not
        assert per_gpu["exposed_comm"][-1] > per_gpu["exposed_comm"][0]


def test_one_output_token_is_the_prefill_alone():
    """The prefill pass emits the first token: one output token is TTFT, with no decode pass and no decode
    collective (vLLM's TPOT leaves such a request out: (latency - TTFT) / (1 - 1))."""
    fabric = _fabric()
    step = _step(fabric, tp=8, out=1, ar_prefill=4 * 512 * 8192 * 2.0, ar_decode=4 * 8192 * 2.0)
    result = run_serving(step, fabric)
    ttft = PREFILL_S + 8 * 2 * _time(fabric, step, "tp", "all_reduce", 4 * 512 * 8192 * 2.0)
    assert result.breakdown.step_time_s == pytest.approx(ttft, rel=1e-12)
    assert result.breakdown.tokens_per_step == 4
    assert [c.label for c in result.collectives] == ["tp all_reduce prefill"]
    assert not any(str(name).startswith("decode") for name in result.tasks.name)


def test_tasks_start_at_each_stage_in_turn():
    fabric = _fabric()
    step = _step(fabric, pp=2, out=3)
    t = run_serving(step, fabric).tasks
    prefill = t.name == "prefill"
    assert t.start_s[prefill].tolist() == pytest.approx([0.0, PREFILL_S])
    first = t.name == "decode t0"
    assert t.start_s[first].tolist() == pytest.approx([2 * PREFILL_S, 2 * PREFILL_S + DECODE_S])
    assert np.all(t.end_s - t.start_s == t.exposed_s)


def test_each_gpus_tasks_tile_the_batch_and_its_stage_is_a_timeline_group_of_its_own():
    """Was one timeline group of both stages: their tasks had the same names (the times, which differ, are
    left out of the grouping on purpose), so the row drawn was stage 0's and stage 1's work and the pipeline
    bubble (half the batch) showed nowhere. Now stage 1 receives stage 0's activations ('pp recv ... from
    stage 0'), and each GPU's waits are pipeline bubbles: its tasks cover the batch end to end."""
    from gpuwait.report.ranks import rank_groups

    fabric = _fabric()
    step = _step(fabric, pp=2, out=5, send_prefill=4 * 512 * 8192 * 2.0, send_decode=4 * 8192 * 2.0)
    result = run_serving(step, fabric)
    t = result.tasks
    groups, _ = rank_groups(result)
    assert [g.ranks.tolist() for g in groups] == [[0], [1]]
    assert "pp recv prefill from stage 0" in t.name[t.rank == 1] and not any("recv" in n for n in t.name[t.rank == 0])
    for rank in (0, 1):
        mine = np.flatnonzero(t.rank == rank)
        mine = mine[np.argsort(t.start_s[mine])]
        assert t.start_s[mine[0]] == 0.0 and t.end_s[mine[-1]] == pytest.approx(result.breakdown.step_time_s, rel=1e-12)
        assert np.allclose(t.start_s[mine[1:]], t.end_s[mine[:-1]], rtol=0, atol=1e-12)  # no gap, no overlap
    bubble = t.kind == "bubble"
    assert np.sum(t.end_s[bubble & (t.rank == 0)] - t.start_s[bubble & (t.rank == 0)]) == pytest.approx(
        4 * (DECODE_S + _time(fabric, step, "pp", "sendrecv", 4 * 8192 * 2.0))
        + PREFILL_S + _time(fabric, step, "pp", "sendrecv", 4 * 512 * 8192 * 2.0), rel=1e-9)  # stage 1's passes
    assert result.tasks_cover == ""


def test_a_long_generation_records_its_first_decode_passes_and_its_timeline_says_so():
    """Was silent: the tasks stop after 64 decode passes (of 99 here), and the timeline, drawn from them,
    ended there with nothing saying the batch goes on."""
    from gpuwait.report.figures import timeline_figure
    from gpuwait.report.perfetto import perfetto_trace

    fabric = _fabric()
    result = run_serving(_step(fabric, out=100), fabric)
    assert result.tasks_cover == "the prefill and the first 64 of 99 decode passes"
    shown_ms = (PREFILL_S + 64 * DECODE_S) * 1e3
    assert result.tasks.end_s.max() * 1e3 == pytest.approx(shown_ms)
    _, caption = timeline_figure(result)
    said = (f"; it shows the prefill and the first 64 of 99 decode passes: the first {shown_ms:,.0f} ms "
            f"of the run's {result.breakdown.step_time_s * 1e3:,.0f} ms")
    assert caption.endswith(said)
    assert perfetto_trace(result)["otherData"]["ranks_shown"].endswith(said)  # the trace's step slice stops there too


def test_a_long_generations_tasks_hold_whole_passes_on_every_stage():
    """The table stops after 64 decode passes on every stage at the same moment, the end of the 64th pass:
    stage 0 ended at its own last all-reduce, without its wait for stage 1's part of that pass (the
    transfer and stage 1's compute), so its row was short of the time the caption says the timeline shows,
    and its bubble per pass was short of the breakdown's on the last one."""
    fabric = _fabric()
    step = _step(fabric, pp=2, out=100, send_prefill=4 * 512 * 8192 * 2.0, send_decode=4 * 8192 * 2.0)
    result = run_serving(step, fabric)
    t, s = result.tasks, result.serving
    shown_s = s["ttft_s"] + 64 * s["tpot_s"]
    assert [t.end_s[t.rank == r].max() for r in (0, 1)] == pytest.approx([shown_s, shown_s], rel=1e-12)
    # per GPU, the table is the prefill's pass and 64 decode passes of the breakdown's account
    full = run_serving(_step(fabric, pp=2, out=65, send_prefill=4 * 512 * 8192 * 2.0, send_decode=4 * 8192 * 2.0),
                       fabric).breakdown.per_gpu_s
    bubble = t.kind == "bubble"
    summed = np.bincount(t.rank[bubble], (t.end_s - t.start_s)[bubble], minlength=2)
    assert summed == pytest.approx(full["bubble"], rel=1e-9)


def test_prefill_and_decode_from_flops_and_bytes():
    """TTFT from prefill FLOPs; a decode step of a small batch from weight and KV bytes over the HBM rate a
    streaming kernel reaches (0.85 of the datasheet, as the training step's element-wise kernels)."""
    fabric = _fabric(servers=1)
    batch, prompt, out, tp = 1, 1024, 64, 8
    spec = WorkloadSpec(mode="inference", model={"preset": "llama-8b"}, compute={"gpu": "H100-SXM"},
                        inference={"tp": tp, "pp": 1, "batch": batch, "prompt_tokens": prompt, "output_tokens": out})
    step = serving_step(spec, fabric.topo)
    shape = wm.resolve_model(spec.model)
    gpu = wm.resolve_gpu(spec.compute, shape.precision, fabric.topo.spec.server.gpu_model)
    n_matmul = wm.matmul_params(shape)
    flops = batch * (2 * n_matmul * prompt + 2 * shape.layers * shape.hidden * prompt * (prompt + 1))
    assert step.prefill_compute_s == pytest.approx(flops / gpu.achieved_flops / tp, rel=1e-12)
    context = prompt + out // 2
    width = 2  # bf16 weights and KV cache
    weights = (shape.params - shape.embedding_params) * width
    kv = batch * context * 2 * shape.layers * shape.kv_heads * shape.head_dim * width
    memory_s = (weights + kv) / (tp * 0.85 * gpu.hbm_bandwidth_Bps)
    compute_s = batch * (2 * n_matmul + 4 * shape.layers * shape.hidden * context) / (tp * gpu.achieved_flops)
    assert memory_s > compute_s  # batch 1 decode is memory-bound
    assert step.decode_compute_s == pytest.approx(memory_s, rel=1e-12)
    assert step.tp_allreduce_decode_bytes == batch * shape.hidden * 2
    result = run_serving(step, fabric)
    tp_dec = _time(fabric, step, "tp", "all_reduce", step.tp_allreduce_decode_bytes)
    assert time_per_output_token_s(result) == pytest.approx(memory_s + shape.layers * 2 * tp_dec, rel=1e-3)


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_the_pipeline_sends_the_same_bf16_hidden_states_the_tp_all_reduce_sums(precision):
    """FP8 serving stores weights and KV cache in one byte, but the hidden states between layers stay
    bf16 (TensorRT-LLM and vLLM send the model dtype across a pipeline boundary): a stage boundary
    carries batch x tokens x hidden x 2 bytes, the size of one TP all-reduce of the same tokens."""
    fabric = _fabric(servers=2)
    batch, prompt = 4, 512
    spec = WorkloadSpec(mode="inference", model={"preset": "llama-8b", "precision": precision},
                        compute={"gpu": "H100-SXM"},
                        inference={"tp": 8, "pp": 2, "batch": batch, "prompt_tokens": prompt, "output_tokens": 8})
    step = serving_step(spec, fabric.topo)
    hidden = wm.resolve_model(spec.model).hidden
    assert step.pp_send_prefill_bytes == step.tp_allreduce_prefill_bytes == batch * prompt * hidden * 2
    assert step.pp_send_decode_bytes == step.tp_allreduce_decode_bytes == batch * hidden * 2


def test_a_short_prompt_is_bound_by_reading_the_weights():
    """The roofline's memory side: a prefill pass reads every weight once, so a 32-token prompt on one GPU takes
    the weights' bytes over HBM, not its FLOPs (which would take a third of that); it was timed by FLOPs alone,
    and vLLM's batch-8, 32-token prefills ran 36-75 % faster than published (docs/validation-serving.md)."""
    fabric = _fabric(servers=1)
    spec = WorkloadSpec(mode="inference", model={"preset": "llama-8b"}, compute={"gpu": "H100-SXM"},
                        inference={"tp": 1, "pp": 1, "batch": 1, "prompt_tokens": 32, "output_tokens": 8})
    step = serving_step(spec, fabric.topo)
    shape = wm.resolve_model(spec.model)
    gpu = wm.resolve_gpu(spec.compute, shape.precision, fabric.topo.spec.server.gpu_model)
    read_s = ((shape.params - shape.embedding_params) * 2 + 32 * 2 * shape.layers * shape.kv_heads * shape.head_dim * 2) / (
        0.85 * gpu.hbm_bandwidth_Bps)
    assert wm.prefill_flops(shape, 32) / gpu.achieved_flops < read_s / 2
    assert step.prefill_compute_s == pytest.approx(read_s, rel=1e-12)


def test_rejects_an_empty_batch_and_a_non_serving_result():
    fabric = _fabric()
    with pytest.raises(SimulationError, match="at least one output token"):
        run_serving(_step(fabric, out=0), fabric)
    result = run_serving(_step(fabric), fabric)
    bare = type(result)(**{**result.__dict__, "notes": ()})
    with pytest.raises(SimulationError, match="not a serving run"):
        time_per_output_token_s(bare)


def test_more_than_one_batch_is_refused_not_ignored(capsys, tmp_path):
    """Serving is one batch in closed form: `run --steps 3` (or `steps: 3` in the file) printed one batch
    and "steps": 1 in the JSON, while the schema said steps are batches served one after another."""
    from tests.cli.test_cli import run_cli

    example = "examples/inference-across-servers.yaml"
    code, _, err = run_cli(capsys, "run", example, "--steps", "3")
    assert code == 2 and err.startswith("error: --steps: got 3; an inference workload serves one batch"), err
    path = tmp_path / "three.yaml"
    path.write_text(open(example).read().replace("compute: {gpu: H100-SXM}", "compute: {gpu: H100-SXM}\n  steps: 3"))
    code, _, err = run_cli(capsys, "validate", str(path))
    assert code == 2 and "workload.steps: got 3; an inference workload serves one batch" in err.splitlines()[0], err
    code, out, _ = run_cli(capsys, "run", example, "--steps", "1", "--json")
    assert code == 0 and json.loads(out)["cases"][0]["steps"] == 1


def test_a_single_stage_has_no_bubble_not_a_negative_one(capsys, tmp_path):
    """Llama 3 70B at TP 8 on two DGX H100 (two replicas, one stage): the pass minus its compute and TP
    all-reduces is rounding, -2.2e-16 s, which the table printed as a bubble of '-0.00 -0.0%'."""
    from tests.cli.test_cli import run_cli

    path = tmp_path / "serve.yaml"
    path.write_text("name: serve\ncluster: {preset: dgx-h100, servers: 2}\n"
                    "workload:\n  mode: inference\n  model: {preset: llama-70b}\n"
                    "  inference: {tp: 8, pp: 1, batch: 8, prompt_tokens: 1024, output_tokens: 128}\n")
    code, out, err = run_cli(capsys, "run", str(path), "--json")
    assert code == 0, err
    assert json.loads(out)["cases"][0]["breakdown_s"]["bubble"] == 0.0
    code, out, err = run_cli(capsys, "run", str(path))
    assert code == 0 and "-0.0" not in out, err


def test_one_output_token_has_no_time_per_output_token(capsys, tmp_path):
    """TPOT = (e2e - TTFT) / (output tokens - 1) is 0 / 0 for one output token: vLLM's serving benchmark leaves
    such a request out of its TPOT (vllm-project/vllm@def9ce85 vllm/benchmarks/serve.py, calculate_metrics,
    ``if output_len > 1``). gpuwait printed the decode pass it never ran as 'time per output token 19.209 ms'
    and tpot_s 0.0192 in --json (Llama 3 70B, TP 4 PP 2, batch 7, 1000 prompt + 1 output tokens, vLLM)."""
    from tests.cli.test_cli import run_cli

    fabric = _fabric()
    result = run_serving(_step(fabric, out=1), fabric)
    s = result.serving
    assert s["tpot_s"] is None and s["ideal_tpot_s"] is None and "no decode step" in s["tpot_undefined"]
    assert result.breakdown.step_time_s == pytest.approx(s["ttft_s"], rel=1e-12)  # the batch is its prefill
    assert time_per_output_token_s(result) is None and result.notes[1].startswith("time per output token n/a (")
    path = tmp_path / "one.yaml"
    path.write_text("name: one\ncluster: {preset: dgx-h100, servers: 1}\nworkload:\n  mode: inference\n"
                    "  model: {preset: llama-70b}\n  inference: {tp: 4, pp: 2, batch: 7, prompt_tokens: 1000, "
                    "output_tokens: 1, engine: vllm}\n")
    code, out, err = run_cli(capsys, "run", str(path), "--json")
    assert code == 0, err
    doc = json.loads(out)
    serving = doc["cases"][0]["serving"]
    assert serving["tpot_s"] is None and serving["ideal_tpot_s"] is None and serving["tpot_undefined"]
    assert "time per output token n/a" in doc["conclusion"] and "time to first token" in doc["conclusion"]
    code, out, err = run_cli(capsys, "run", str(path))
    assert code == 0 and "n/a (one output token, no decode step)" in out and "per output token 1" not in out, err
