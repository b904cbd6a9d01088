"""The training schedule against closed forms.

- Data parallel without overlap: step = compute + the bucket all-reduces one after another.
- With overlap (PyTorch DDP's bucketed all-reduce, Li et al., VLDB 2020): buckets become ready evenly
  through the last backward and are reduced one at a time; only what runs past the backward is exposed.
- 1F1B pipeline (Narayanan et al., SC'21, §2.2): the bubble is (p-1)/(m+p-1) of the ideal step.
- A synchronous step waits for its slowest GPU.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwait.api import simulate
from gpuwait.collectives.ncclenv import parse_env
from gpuwait.fabric.groups import FabricModel
from gpuwait.spec.scenario import Scenario
from gpuwait.steps.result import BREAKDOWN_CATEGORIES
from gpuwait.steps.training import run_training
from gpuwait.topology.presets import build_preset, preset_spec
from gpuwait.transport.profiles import TRANSPORTS
from gpuwait.workload.layout import Layout
from gpuwait.workload.program import CommOp, TrainingStep, one_f_one_b

FWD_S, BWD_S, OPT_S = 0.010, 0.020, 0.002


def _fabric(servers: int, preset: str = "rocev2-400g-2tier") -> FabricModel:
    spec = preset_spec(preset, servers=servers)
    return FabricModel(build_preset(preset, servers=servers), spec.routing, TRANSPORTS[spec.transport.name],
                       parse_env({}))


def _step(fabric: FabricModel, tp=1, pp=1, dp=8, m=4, *, grads=2e9, overlap=True, cv=0.0, slow=None,
          tp_ops=(), pp_bytes=0.0, loader_s=0.0, seed=0) -> TrainingStep:
    n = tp * pp * dp
    lay = Layout(tp, dp, pp, 1, fabric.topo.gpu_node.ravel()[:n])
    slow_factor = np.ones(n)
    for rank, factor in (slow or {}).items():
        slow_factor[rank] = factor
    return TrainingStep(lay, m, np.full(pp, FWD_S), np.full(pp, BWD_S), OPT_S, tuple(tp_ops), pp_bytes,
                        np.full(pp, grads), 25e6, "all_reduce", np.zeros(pp), overlap, cv, slow_factor, seed,
                        np.broadcast_to(np.asarray(loader_s, float), (pp, dp)), 0.0, 0.0, None, 1e15, 1000, 989e12, "test")


def _bucket_s(fabric: FabricModel, step: TrainingStep) -> float:
    lay = step.layout
    size = float(step.dp_grad_bytes.max()) / np.ceil(step.dp_grad_bytes.max() / step.bucket_bytes)
    return fabric.collective(lay.rank_gpu[lay.groups("dp")], "all_reduce", size).time_s


def test_data_parallel_without_overlap_is_compute_plus_all_reduce():
    fabric = _fabric(2)
    step = _step(fabric, dp=16, overlap=False)
    result = run_training(step, fabric)
    buckets = int(np.ceil(2e9 / 25e6))
    compute = 4 * (FWD_S + BWD_S) + OPT_S
    assert result.breakdown.step_time_s == pytest.approx(compute + buckets * _bucket_s(fabric, step), rel=1e-9)
    assert result.breakdown.exposed_comm_s["dp all_reduce"] == pytest.approx(buckets * _bucket_s(fabric, step))


def test_overlap_exposes_only_what_outlasts_the_backward():
    fabric = _fabric(2)
    step = _step(fabric, dp=16, overlap=True)
    result = run_training(step, fabric)
    t_bucket, buckets = _bucket_s(fabric, step), int(np.ceil(2e9 / 25e6))
    # bucket k is ready at (k+1)/nb of the last backward; they run one after another
    ready = BWD_S * np.arange(1, buckets + 1) / buckets
    end = 0.0
    for r in ready:
        end = max(end, r) + t_bucket
    exposed = max(end - BWD_S, 0.0)
    assert result.breakdown.exposed_comm_s["dp all_reduce"] == pytest.approx(exposed, rel=1e-9)
    assert exposed < buckets * t_bucket  # overlap hid part of it


@pytest.mark.parametrize("pp, m", [(2, 4), (4, 8), (4, 16), (8, 8)])
def test_one_f_one_b_bubble(pp, m):
    """No communication at all: every stage idles (p-1)(f+b), i.e. (p-1)/(m+p-1) of the pipeline time."""
    fabric = _fabric(1)
    step = _step(fabric, pp=pp, dp=1, m=m, grads=0.0)
    result = run_training(step, fabric)
    pipeline_s = (m + pp - 1) * (FWD_S + BWD_S)
    assert result.breakdown.step_time_s == pytest.approx(pipeline_s + OPT_S)
    bubble = result.breakdown.per_gpu_s["bubble"]
    assert np.allclose(bubble, (pp - 1) * (FWD_S + BWD_S))
    assert float(bubble.mean()) / pipeline_s == pytest.approx((pp - 1) / (m + pp - 1))


def test_one_f_one_b_order():
    assert one_f_one_b(4, 0, 4) == [("F", 0), ("F", 1), ("F", 2), ("F", 3), ("B", 0), ("B", 1), ("B", 2), ("B", 3)]
    assert one_f_one_b(4, 3, 3) == [("F", 0), ("B", 0), ("F", 1), ("B", 1), ("F", 2), ("B", 2)]


def test_a_slow_gpu_makes_everyone_wait():
    fabric = _fabric(2)
    step = _step(fabric, dp=16, grads=0.0, slow={5: 1.5})
    result = run_training(step, fabric)
    b = result.breakdown
    compute = 4 * (FWD_S + BWD_S)
    assert b.step_time_s == pytest.approx(1.5 * compute + OPT_S)
    others = np.delete(np.arange(16), 5)
    assert np.allclose(b.per_gpu_s["straggler_wait"][others], 0.5 * compute)
    assert b.per_gpu_s["straggler_wait"][5] == pytest.approx(0.0)


def test_jitter_is_a_tail_the_step_waits_for():
    fabric = _fabric(2)
    steady = run_training(_step(fabric, dp=16, grads=0.0), fabric, steps=3)
    jittered = run_training(_step(fabric, dp=16, grads=0.0, cv=0.05, seed=3), fabric, steps=3)
    again = run_training(_step(fabric, dp=16, grads=0.0, cv=0.05, seed=3), fabric, steps=3)
    assert np.array_equal(jittered.step_times_s, again.step_times_s)  # seeded
    assert jittered.breakdown.step_time_s > steady.breakdown.step_time_s
    assert jittered.breakdown.job_mean_s()["straggler_wait"] > 0


def test_tp_group_waits_for_its_slowest_member():
    fabric = _fabric(1)
    op = CommOp("tp", "all_reduce", 16e6, 4, 4)
    step = _step(fabric, tp=8, dp=1, grads=0.0, tp_ops=(op,), slow={2: 1.2})
    b = run_training(step, fabric).breakdown
    compute = 4 * (FWD_S + BWD_S)
    assert b.per_gpu_s["straggler_wait"][2] == pytest.approx(0.0)
    assert b.per_gpu_s["straggler_wait"][0] == pytest.approx(0.2 * compute)
    assert b.exposed_comm_s["tp all_reduce"] > 0


def test_a_slow_data_loader_shows_as_data_wait():
    fabric = _fabric(2)
    fast = run_training(_step(fabric, dp=16, grads=0.0), fabric, steps=3)
    slow = run_training(_step(fabric, dp=16, grads=0.0, loader_s=0.5), fabric, steps=3)
    assert fast.breakdown.job_mean_s()["data_wait"] == 0.0
    compute = 4 * (FWD_S + BWD_S) + OPT_S
    # the loader sets the pace, one micro-batch per 0.5 s / 4 (Megatron-LM reads a batch per micro-batch):
    # in steady state every micro-batch waits a whole 0.125 s production period, longer than its 0.03 s of
    # forward and backward, and the step's tail (last backward and optimizer, 0.032 s) fits in the next
    # period, so each step lasts exactly the loader's 0.5 s
    assert slow.step_times_s == pytest.approx([0.5, 0.5, 0.5], rel=1e-12)
    # nothing else waits (one stage, no gradients, no jitter): the rest of each step is data wait
    assert slow.breakdown.job_mean_s()["data_wait"] == pytest.approx(0.5 - compute)


def test_a_loader_bound_job_is_timed_in_steady_state():
    """The first simulated step is a step of a running job, not its start: a job's very first step
    finds a batch made before training began (the producer started first), which no later step does.
    A one-step run of a loader-bound job therefore gives the same step as the steady state, which by
    the closed form above is the loader's period; a loader that keeps up changes nothing."""
    fabric = _fabric(2)
    one = run_training(_step(fabric, dp=16, grads=0.0, loader_s=0.5), fabric, steps=1)
    assert one.step_times_s == pytest.approx([0.5], rel=1e-12)
    m, fwd_bwd = 4, FWD_S + BWD_S
    barely = 1.01 * m * fwd_bwd  # slower than the GPUs' nominal compute, faster than the step with its optimizer
    kept_up = run_training(_step(fabric, dp=16, grads=0.0, loader_s=barely), fabric, steps=3)
    free = run_training(_step(fabric, dp=16, grads=0.0), fabric, steps=3)
    assert kept_up.step_times_s == pytest.approx(free.step_times_s, rel=1e-12)


def test_only_the_slowest_producer_makes_gpus_wait_in_steady_state():
    """A producer works ahead without pause, so one faster than the job's pace gains the difference
    every step and, in a running job, is ahead by any margin: its GPUs never wait for data. Replica 1's
    loader takes 0.45 s a step, replica 0's 0.5 s: the job steps every 0.5 s and replica 1 waits only
    for replica 0 (its data wait fell 0.24, 0.19, 0.14 s... over the window, a transient). The same
    holds between a pipeline's first stage (0.45 s) and its last (0.5 s)."""
    fabric = _fabric(2)
    replicas = run_training(_step(fabric, dp=2, grads=0.0, loader_s=np.array([[0.5, 0.45]])), fabric, steps=4)
    assert replicas.step_times_s == pytest.approx([0.5] * 4, rel=1e-12)
    wait = replicas.breakdown.per_gpu_s["data_wait"]
    assert wait[0] == pytest.approx(0.5 - 4 * (FWD_S + BWD_S) - OPT_S) and wait[1] == 0.0
    stages, stage_wait = _two_stage_loader([0.45, 0.5])
    assert stages.step_times_s == pytest.approx([0.5] * 3, rel=1e-12)
    assert stage_wait[0] == 0.0 and stage_wait[1] > 0


def test_a_loader_faster_than_the_pipelined_step_never_starves_it():
    """4 stages, 4 micro-batches: a stage computes 4 x 0.03 = 0.12 s a step, but the 1F1B step with its
    bubble and optimizer lasts 7 x 0.03 + 0.002 = 0.212 s. A loader of 0.211 s a step is slower than the
    stages' compute and faster than the step, so it gains 1 ms a step and a running job never waits for
    it: the run is the run without a loader limit (it reported 58 ms of data wait a step, shrinking by
    1 ms a step)."""
    fabric = _fabric(2)
    loader_s = np.array([[0.211], [0.0], [0.0], [0.211]])
    fed = run_training(_step(fabric, pp=4, dp=1, grads=0.0, loader_s=loader_s), fabric, steps=3)
    free = run_training(_step(fabric, pp=4, dp=1, grads=0.0), fabric, steps=3)
    assert free.step_times_s == pytest.approx([7 * (FWD_S + BWD_S) + OPT_S] * 3, rel=1e-12)
    assert np.array_equal(fed.step_times_s, free.step_times_s)
    assert fed.breakdown.job_mean_s()["data_wait"] == 0.0


def test_a_loader_bound_job_hides_its_checkpoint_under_the_loaders_period():
    """The window is periodic: the step before it is its last step again, checkpoint included. A job
    that writes a checkpoint every step while its loaders keep working gains on them by the write,
    and as long as compute plus the write fit in the loaders' period, it steps at that period: 8 readers
    a server, 2 samples each a step, at 5 samples/s make 3.2 s, with 1 simulated step or 3. Before, the
    step before the window had no checkpoint, and the window's first step lasted 3.2 s plus the write."""
    doc = {"name": "loader-checkpoint",
           "cluster": {"preset": "dgx-h100", "servers": 2, "server": {"storage_nics": 2},
                       "storage": {"mode": "converged", "storage_servers": 2}},
           "workload": {"model": {"preset": "llama-8b"}, "compute": {"gpu": "H100-SXM"},
                        "parallel": {"tp": 1, "pp": 1, "zero": 1, "micro_batch": 1, "global_batch": 32},
                        "data": {"loader_samples_per_s_per_server": 5, "checkpoint_interval_steps": 1}}}
    for steps in (1, 3):
        doc["workload"]["steps"] = steps
        result = simulate(Scenario.model_validate(doc)).results[0]
        assert result.breakdown.job_mean_s()["checkpoint"] > 0
        assert result.breakdown.step_time_s == pytest.approx(16 / 5, rel=1e-9)


@settings(max_examples=12, deadline=None)
@given(tp=st.sampled_from([1, 2, 8]), pp=st.sampled_from([1, 2, 4]), m=st.integers(1, 6),
       cv=st.sampled_from([0.0, 0.03]), overlap=st.booleans(), seed=st.integers(0, 5),
       loader_s=st.sampled_from([0.0, 0.4, 1.5]))
def test_every_second_of_the_step_is_accounted_for(tp, pp, m, cv, overlap, seed, loader_s):
    fabric = _fabric(4)
    dp = 32 // (tp * pp)
    ops = (CommOp("tp", "all_reduce", 8e6, 2, 2),) if tp > 1 else ()
    # a loader slower on the last stage's first replica than elsewhere (0 = none)
    loader = np.full((pp, dp), loader_s)
    loader[-1, 0] *= 1.5
    step = _step(fabric, tp=tp, pp=pp, dp=dp, m=m, grads=3e8, overlap=overlap, cv=cv, tp_ops=ops,
                 pp_bytes=4e6 if pp > 1 else 0.0, seed=seed, loader_s=loader)
    result = run_training(step, fabric, steps=2)
    b = result.breakdown
    total = sum(b.per_gpu_s[c] for c in BREAKDOWN_CATEGORIES)
    assert np.allclose(total, b.step_time_s, rtol=1e-9)
    assert all((b.per_gpu_s[c] >= -1e-12).all() for c in BREAKDOWN_CATEGORIES)
    assert b.ideal_step_time_s <= b.step_time_s + 1e-12
    assert len(result.tasks) > 0 and (result.tasks.end_s >= result.tasks.start_s).all()


def test_families_contend_for_the_links_they_share():
    """DP reductions and pipeline sends cross the same leaf uplinks: each is slower beside the other
    than alone (on a 4:1 oversubscribed fabric, where the uplinks are the bottleneck)."""
    spec = preset_spec("rocev2-400g-2tier", servers=8)
    spec = spec.model_copy(update={"fabric": spec.fabric.model_copy(update={"oversubscription": 4.0})})
    from gpuwait.topology.build import build_topology

    fabric = FabricModel(build_topology(spec), spec.routing, TRANSPORTS["rocev2"], parse_env({}))
    step = _step(fabric, tp=8, pp=2, dp=4, m=4, grads=5e8, pp_bytes=64e6)
    result = run_training(step, fabric)
    lay = step.layout
    alone = fabric.collective(lay.rank_gpu[lay.groups("dp")], "all_reduce", 25e6).time_s
    beside = next(c for c in result.collectives if c.label == "dp all_reduce").time_s
    assert beside > 1.02 * alone


def _oversubscribed(servers: int) -> FabricModel:
    from gpuwait.topology.build import build_topology

    spec = preset_spec("rocev2-400g-2tier", servers=servers)
    spec = spec.model_copy(update={"fabric": spec.fabric.model_copy(update={"oversubscription": 4.0})})
    return FabricModel(build_topology(spec), spec.routing, TRANSPORTS["rocev2"], parse_env({}))


@pytest.mark.parametrize("overlap", [True, False])
def test_end_of_step_phases_meet_none_of_the_steps_own_traffic(overlap):
    """What runs after a stage's last backward sees only the traffic still running then. The ZeRO-1/2
    parameter all-gather follows the optimizer step (Megatron-LM's distributed optimizer,
    docs/source/api-guide/dist_optimizer.md: reduce-scatter the gradients, step, all-gather the
    updated parameters); without overlap_grad_reduce the gradient reduction waits for the whole
    backward (Megatron-Core's DDP: ``finalize_model_grads`` after the backward; PyTorch DDP with
    gradients reduced after backward, Li et al. VLDB 2020 §3.2). The pipeline sends are over by
    then: both take their time on the fabric alone, whatever overlap_grad_reduce. With overlap the
    buckets run during the last backward, beside the pipeline sends, and are slower than alone."""
    import dataclasses

    fabric = _oversubscribed(8)
    step = dataclasses.replace(_step(fabric, tp=8, pp=2, dp=4, m=4, grads=5e8, pp_bytes=64e6, overlap=overlap),
                               dp_collective="reduce_scatter", param_gather_bytes=np.full(2, 5e8))
    result = run_training(step, fabric)
    groups = step.layout.rank_gpu[step.layout.groups("dp")]
    gather_alone = fabric.collective(groups, "all_gather", 5e8).time_s
    bucket_alone = fabric.collective(groups, "reduce_scatter", 5e8 / np.ceil(5e8 / 25e6)).time_s
    times = {c.label: c.time_s for c in result.collectives}
    assert times["dp all_gather"] == pytest.approx(gather_alone, rel=1e-12)
    assert result.breakdown.exposed_comm_s["dp all_gather"] == pytest.approx(gather_alone, rel=1e-12)
    if overlap:
        assert times["dp reduce_scatter"] > 1.02 * bucket_alone
    else:
        assert times["dp reduce_scatter"] == pytest.approx(bucket_alone, rel=1e-12)


def test_the_parameter_all_gather_is_no_background_to_the_backward():
    """The ZeRO-1 parameter all-gather follows the optimizer, which follows the last gradient bucket
    (Megatron-LM's distributed optimizer, docs/source/api-guide/dist_optimizer.md): the buckets reduced
    during the backward never run beside it. With no other traffic, the overlapped buckets take their
    time alone and expose what outlasts the backward (PyTorch DDP's closed form, Li et al. VLDB 2020)."""
    import dataclasses

    fabric = _fabric(8)  # one GPU of each server in a DP group: every byte crosses the fabric
    step = dataclasses.replace(_step(fabric, tp=8, dp=8, grads=5e8, overlap=True), dp_collective="reduce_scatter",
                               param_gather_bytes=np.full(1, 5e8))
    result = run_training(step, fabric)
    groups = step.layout.rank_gpu[step.layout.groups("dp")]
    buckets = int(np.ceil(5e8 / 25e6))
    t_bucket = fabric.collective(groups, "reduce_scatter", 5e8 / buckets).time_s
    end = 0.0
    for ready in BWD_S * np.arange(1, buckets + 1) / buckets:
        end = max(end, ready) + t_bucket
    times = {c.label: c.time_s for c in result.collectives}
    assert times["dp reduce_scatter"] == pytest.approx(t_bucket, rel=1e-12)
    assert result.breakdown.exposed_comm_s["dp reduce_scatter"] == pytest.approx(max(end - BWD_S, 0.0), rel=1e-9)
    gather_s = fabric.collective(groups, "all_gather", 5e8).time_s
    compute = 4 * (FWD_S + BWD_S) + OPT_S
    assert result.breakdown.step_time_s == pytest.approx(compute + max(end - BWD_S, 0.0) + gather_s, rel=1e-9)


def test_expert_gradients_and_weights_queue_behind_the_dense_ones_on_their_own_group():
    """Megatron-Core's DDP reduces expert gradients in buffers of their own over the expert-data-parallel
    group, the rest over dp (megatron/core/distributed/distributed_data_parallel.py: ``buffers`` over
    ``intra_dp_cp_group``, ``expert_parallel_buffers`` over ``intra_expt_dp_group``), on the one
    gradient-reduction stream, and its distributed optimizer all-gathers each buffer over the same
    group after the step (docs/source/api-guide/dist_optimizer.md). Without overlap every bucket waits
    for the backward: step = compute + n_dp x t_dp + n_edp x t_edp + both all-gathers, each on its group."""
    import dataclasses

    fabric = _fabric(2)
    base = _step(fabric, dp=16, grads=2e9, overlap=False)
    lay = Layout(1, 16, 1, 2, base.layout.rank_gpu)  # ep = 2: experts replicated over 8 ranks
    step = dataclasses.replace(base, layout=lay, dp_collective="reduce_scatter", param_gather_bytes=np.full(1, 2e9),
                               expert_grad_bytes=np.full(1, 1e9), expert_param_gather_bytes=np.full(1, 1e9))
    result = run_training(step, fabric)
    dense, experts = lay.rank_gpu[lay.groups("dp")], lay.rank_gpu[lay.groups("expert_dp")]
    assert experts.shape == (2, 8)
    n_dp, n_edp = int(np.ceil(2e9 / 25e6)), int(np.ceil(1e9 / 25e6))
    t_dp = fabric.collective(dense, "reduce_scatter", 2e9 / n_dp).time_s
    t_edp = fabric.collective(experts, "reduce_scatter", 1e9 / n_edp).time_s
    g_dp = fabric.collective(dense, "all_gather", 2e9).time_s
    g_edp = fabric.collective(experts, "all_gather", 1e9).time_s
    compute = 4 * (FWD_S + BWD_S) + OPT_S
    assert result.breakdown.step_time_s == pytest.approx(compute + n_dp * t_dp + n_edp * t_edp + g_dp + g_edp, rel=1e-9)
    exposed = result.breakdown.exposed_comm_s
    assert exposed["dp reduce_scatter"] == pytest.approx(n_dp * t_dp, rel=1e-9)
    assert exposed["expert_dp reduce_scatter"] == pytest.approx(n_edp * t_edp, rel=1e-9)
    assert exposed["expert_dp all_gather"] == pytest.approx(g_edp, rel=1e-12)
    sizes = {c.label: c.n_ranks for c in result.collectives}
    assert sizes == {"dp reduce_scatter": 16, "expert_dp reduce_scatter": 8, "dp all_gather": 16,
                     "expert_dp all_gather": 8}


def test_ops_sharing_a_hidden_window_hide_under_it_once():
    """Two collectives issued one after the other under the same compute (ZeRO-2's per-layer gradient
    reduce-scatters, dense and expert, under the next layer's backward) hide ``hidden_s`` together:
    each micro-batch shows max(t_1 + t_2 - hidden, 0), shared in proportion to their times."""
    fabric = _fabric(1)
    lay = Layout(1, 8, 1, 1, fabric.topo.gpu_node.ravel()[:8])
    groups = lay.rank_gpu[lay.groups("dp")]
    t_1 = fabric.collective(groups, "reduce_scatter", 2e8).time_s
    t_2 = fabric.collective(groups, "all_gather", 1e8).time_s
    hidden = 0.75 * (t_1 + t_2)
    assert hidden >= max(t_1, t_2)  # each alone would hide entirely
    ops = (CommOp("dp", "reduce_scatter", 2e8, 1, 0, hidden_s=hidden, hidden_with="w"),
           CommOp("dp", "all_gather", 1e8, 1, 0, hidden_s=hidden, hidden_with="w"))
    result = run_training(_step(fabric, dp=8, grads=0.0, tp_ops=ops), fabric)
    shown = t_1 + t_2 - hidden
    assert result.breakdown.step_time_s == pytest.approx(4 * (FWD_S + BWD_S + shown) + OPT_S, rel=1e-9)
    assert result.breakdown.exposed_comm_s["dp reduce_scatter"] == pytest.approx(4 * shown * t_1 / (t_1 + t_2), rel=1e-9)


def test_end_of_step_phases_keep_the_fabrics_own_background():
    """The traffic the fabric carries (another job, storage reads) runs at the end of the step too."""
    import dataclasses

    fabric = _oversubscribed(8)
    background = np.where(fabric.topo.network_links, 0.5 * fabric.topo.link_capacity_Bps, 0.0)
    busy = fabric.with_background(background)
    step = dataclasses.replace(_step(busy, tp=8, pp=2, dp=4, m=4, grads=5e8, pp_bytes=64e6, overlap=False),
                               dp_collective="reduce_scatter", param_gather_bytes=np.full(2, 5e8))
    groups = step.layout.rank_gpu[step.layout.groups("dp")]
    times = {c.label: c.time_s for c in run_training(step, busy).collectives}
    assert times["dp all_gather"] == pytest.approx(busy.collective(groups, "all_gather", 5e8).time_s, rel=1e-12)
    assert times["dp all_gather"] > 1.2 * fabric.collective(groups, "all_gather", 5e8).time_s


def test_storage_reads_on_a_converged_fabric_slow_the_gradients():
    from gpuwait.topology.build import build_topology

    spec = preset_spec("rocev2-400g-2tier", servers=8)
    spec = spec.model_copy(update={"storage": spec.storage.model_copy(update={"mode": "converged", "storage_servers": 8}),
                                   "server": spec.server.model_copy(update={"storage_nics": 1})})
    topo = build_topology(spec)
    quiet = FabricModel(topo, spec.routing, TRANSPORTS["rocev2"], parse_env({}))
    reads = quiet.storage(topo.gpu_node.ravel(), 20e9)
    busy = FabricModel(topo, spec.routing, TRANSPORTS["rocev2"], parse_env({}), background_Bps=reads.link_load_Bps)
    groups = topo.gpu_node.T  # one rank per server: every byte crosses the NICs the reads use
    assert busy.collective(groups, "all_reduce", 256e6).time_s > 1.3 * quiet.collective(groups, "all_reduce", 256e6).time_s


@pytest.mark.parametrize("pp, m, chunks", [(2, 4, 2), (4, 8, 2), (4, 8, 4), (8, 16, 2)])
def test_interleaved_bubble_shrinks_by_the_chunks(pp, m, chunks):
    """Interleaved 1F1B (Narayanan et al., SC'21, §2.2.2): each stage holds ``chunks`` model chunks,
    and the bubble is (p-1) x (f+b)/chunks: ``chunks`` times smaller than plain 1F1B's."""
    import dataclasses

    fabric = _fabric(1)
    step = dataclasses.replace(_step(fabric, pp=pp, dp=1, m=m, grads=0.0), model_chunks=chunks)
    result = run_training(step, fabric)
    bubble_s = (pp - 1) * (FWD_S + BWD_S) / chunks
    assert result.breakdown.step_time_s == pytest.approx(m * (FWD_S + BWD_S) + bubble_s + OPT_S)
    assert np.allclose(result.breakdown.per_gpu_s["bubble"], bubble_s)


def test_interleaved_layout_checks():
    from gpuwait.errors import SpecError
    from gpuwait.spec import WorkloadSpec
    from gpuwait.workload.model import resolve_model, validate_layout

    shape = resolve_model(WorkloadSpec().model.model_copy(update={"preset": "llama-8b"}))
    ok = WorkloadSpec(parallel={"tp": 8, "pp": 4, "schedule": "interleaved-1f1b", "virtual_stages": 2, "global_batch": 64})
    assert validate_layout(shape, ok, 256, 8).virtual_stages == 2
    with pytest.raises(SpecError, match="virtual_stages: pp\\*virtual_stages = 4\\*3 does not divide 32 layers"):
        validate_layout(shape, WorkloadSpec(parallel={"tp": 8, "pp": 4, "schedule": "interleaved-1f1b",
                                                      "virtual_stages": 3, "global_batch": 64}), 256, 8)
    with pytest.raises(SpecError, match="groups of pp = 4"):
        validate_layout(shape, WorkloadSpec(parallel={"tp": 8, "pp": 4, "schedule": "interleaved-1f1b",
                                                      "global_batch": 40}), 256, 8)


# ----------------------------------------------------------------- interleaved warm-up and activations in flight
def _megatron_warmup(pp, stage, m, chunks, group):
    """Megatron-Core's get_pp_rank_microbatches (megatron/core/pipeline_parallel/schedules.py, NVIDIA/Megatron-LM
    @d98e8a64), written out again from its source: pp - rank - 1 without interleaving; 2 (pp - rank - 1)
    + (num_model_chunks - 1) microbatch_group_size_per_vp_stage with it; capped at the total."""
    total = m * chunks
    warmup = pp - stage - 1 if chunks == 1 else (pp - stage - 1) * 2 + (chunks - 1) * group
    return min(warmup, total)


def _held_by_walking(order, chunks):
    """Every per-chunk count of forwards not yet backwarded, after each forward of ``order``."""
    held, seen = [0] * chunks, set()
    for kind, _, chunk in order:
        held[chunk] += 1 if kind == "F" else -1
        if kind == "F":
            seen.add(tuple(held))
    return seen


@settings(max_examples=150, deadline=None)
@given(pp=st.integers(2, 8), chunks=st.integers(1, 6), extra_group=st.integers(0, 6), groups=st.integers(1, 4),
       rest=st.integers(0, 12), data=st.data())
def test_interleaved_warmup_and_in_flight_are_megatron_cores(pp, chunks, extra_group, groups, rest, data):
    """The order's warm-up is Megatron-Core's count, every (micro-batch, chunk) runs forward then backward
    once, and the closed-form activations in flight (what the memory check multiplies) peak where
    walking the order does."""
    from gpuwait.workload.program import in_flight_counts, interleaved_one_f_one_b, warmup_forwards

    group = pp + extra_group
    rest = 0 if rest < pp or rest >= group else rest  # Megatron-Core's last group: none or >= pp
    m = groups * group + rest
    stage = data.draw(st.integers(0, pp - 1))
    order = interleaved_one_f_one_b(pp, stage, m, chunks, group)
    warmup = warmup_forwards(pp, stage, m, chunks, group)
    assert warmup == _megatron_warmup(pp, stage, m, chunks, group)
    # the steady phase runs one more forward before each backward
    assert next(k for k, (kind, _, _) in enumerate(order) if kind == "B") == min(warmup + 1, m * chunks)
    assert sorted(u for u in order if u[0] == "F") == sorted(("F", i, c) for i in range(m) for c in range(chunks))
    assert sorted(u for u in order if u[0] == "B") == sorted(("B", i, c) for i in range(m) for c in range(chunks))
    walked = _held_by_walking(order, chunks)
    def peak(counts, weights):
        return max(sum(n * w for n, w in zip(held, weights)) for held in counts)

    for weights in ([1.0] * chunks, [2.0 ** c for c in range(chunks)], [2.0 ** -c for c in range(chunks)]):
        assert peak(in_flight_counts(pp, stage, m, chunks, group), weights) == peak(walked, weights)


def test_microbatch_group_orders_chunks_as_megatron_cores_table():
    """Megatron-Core's ModelParallelConfig.microbatch_group_size_per_vp_stage docstring (@d98e8a64): PP 2,
    VP 2, N 3, M 5 runs rank 0's forwards as micro-batches 0 1 2 0 1 2 3 4 3 4."""
    from gpuwait.workload.program import interleaved_one_f_one_b

    forwards = [(i, c) for kind, i, c in interleaved_one_f_one_b(2, 0, 5, 2, group=3) if kind == "F"]
    assert [i for i, _ in forwards] == [0, 1, 2, 0, 1, 2, 3, 4, 3, 4]
    assert [c for _, c in forwards] == [0, 0, 0, 1, 1, 1, 0, 0, 1, 1]


def test_microbatch_group_size_checks():
    from gpuwait.errors import SpecError
    from gpuwait.spec import WorkloadSpec
    from gpuwait.workload.model import memory_per_gpu_bytes, resolve_model, validate_layout

    shape = resolve_model(WorkloadSpec().model.model_copy(update={"preset": "llama-8b"}))

    def lay(**parallel):
        base = {"tp": 8, "pp": 4, "schedule": "interleaved-1f1b", "virtual_stages": 2}
        return validate_layout(shape, WorkloadSpec(parallel={**base, **parallel}), 256, 8)

    assert lay(global_batch=64).microbatch_group_size is None  # Megatron-Core's default: pp
    # a larger N runs more warm-up forwards: 16 micro-batches in groups of 8 hold more than in groups of 4
    depth_first, wider = lay(global_batch=128), lay(global_batch=128, microbatch_group_size_per_vp_stage=8)
    # 2 (pp - 1) + (v - 1) N + 1 chunks of 4 layers each
    assert memory_per_gpu_bytes(shape, wider, stage=0)["activations"] == pytest.approx(
        (2 * 3 + 8 + 1) / (2 * 3 + 4 + 1) * memory_per_gpu_bytes(shape, depth_first, stage=0)["activations"], rel=1e-12)
    # 10 micro-batches in groups of 6: the last group of 4 >= pp runs (it would not in groups of pp)
    assert lay(global_batch=80, microbatch_group_size_per_vp_stage=6).microbatch_group_size == 6
    field = "workload.parallel.microbatch_group_size_per_vp_stage"
    with pytest.raises(SpecError, match=f"{field}: 3 is outside \\[pp, micro-batches per step\\] = \\[4, 8\\]"):
        lay(global_batch=64, microbatch_group_size_per_vp_stage=3)
    with pytest.raises(SpecError, match=f"{field}: 16 is outside"):
        lay(global_batch=64, microbatch_group_size_per_vp_stage=16)
    with pytest.raises(SpecError, match=f"{field}: 12 micro-batches per step leave a last group of 2, fewer than pp = 4"):
        lay(global_batch=96, microbatch_group_size_per_vp_stage=5)
    with pytest.raises(SpecError, match=f"{field}: only used with schedule: interleaved-1f1b"):
        lay(global_batch=64, schedule="1f1b", microbatch_group_size_per_vp_stage=4)


def _two_stage_loader(loader_s: list[float]) -> tuple[object, np.ndarray]:
    """A 2-stage pipeline, one replica, 4 micro-batches, free sends, over 3 steps; ``loader_s`` per stage."""
    fabric = _fabric(2)
    result = run_training(_step(fabric, pp=2, dp=1, grads=0.0, loader_s=np.array(loader_s)[:, None]), fabric, steps=3)
    stage_wait = result.breakdown.per_gpu_s["data_wait"][:2]  # rank 0: stage 0, rank 1: stage 1
    return result, stage_wait


def test_a_pipeline_reads_data_on_its_last_stage_too_but_equal_loaders_leave_it_no_wait():
    """Megatron-LM's last stage reads labels and loss mask per micro-batch before its forward (get_batch
    in pretrain_gpt.py, after recv_forward in schedules.py, NVIDIA/Megatron-LM @d98e8a64). With loaders
    equally slow on both stages (0.5 s a step, 0.125 s a micro-batch), each micro-batch is ready on both
    at the same time: the first stage starts its forward then, the last stage gets its input a forward
    later and finds its batch already there. In steady state each step lasts the loaders' 0.5 s."""
    result, wait = _two_stage_loader([0.5, 0.5])
    assert result.step_times_s == pytest.approx([0.5, 0.5, 0.5], rel=1e-12)
    assert wait[0] > 0 and wait[1] == 0.0


def test_a_pipelines_last_stage_waits_for_its_own_slow_loader():
    """The last stage's loader alone slow (the first stage's keeps up): the last stage waits for each
    micro-batch's labels, one per 0.125 s; the first stage never waits for data. In steady state each
    step lasts the slow loader's 0.5 s."""
    result, wait = _two_stage_loader([0.0, 0.5])
    assert result.step_times_s == pytest.approx([0.5, 0.5, 0.5], rel=1e-12)
    assert wait[0] == 0.0 and wait[1] > 0
    # the first stage's loader alone as slow: the same pace, the wait on the other stage
    first, first_wait = _two_stage_loader([0.5, 0.0])
    assert first_wait[0] > 0 and first_wait[1] == 0.0
    assert first.step_times_s[2] == pytest.approx(0.5)


def test_a_loader_that_keeps_up_changes_nothing():
    fabric = _fabric(2)
    none = run_training(_step(fabric, pp=2, dp=4, grads=3e8), fabric, steps=3)
    # 0.1 s a step per lane, under the 4 x 0.03 s a stage computes: the producer works ahead
    kept = run_training(_step(fabric, pp=2, dp=4, grads=3e8, loader_s=0.1), fabric, steps=3)
    assert np.array_equal(none.step_times_s, kept.step_times_s)
    for c in BREAKDOWN_CATEGORIES:
        assert np.array_equal(none.breakdown.per_gpu_s[c], kept.breakdown.per_gpu_s[c])


def test_the_group_size_hint_is_offered_only_where_megatron_core_accepts_one():
    """Megatron-Core's interleaved schedule (NVIDIA/Megatron-LM @d98e8a64, megatron/core/pipeline_parallel/
    schedules.py, forward_backward_pipelining_with_interleaving) accepts a group size N only in [pp, M] with
    M mod N 0 or at least pp. With fewer micro-batches per step than pp (M < pp) no N exists, yet the
    error said 'or set microbatch_group_size_per_vp_stage'; it now says what would help, and where an N
    exists it names one the schedule accepts."""
    from gpuwait.errors import SpecError
    from gpuwait.spec import WorkloadSpec
    from gpuwait.workload.model import resolve_model, validate_layout

    shape = resolve_model(WorkloadSpec().model.model_copy(update={"preset": "llama-8b"}))

    def lay(**parallel):  # dp 8, one sequence per micro-batch: 8 sequences per micro-batch round
        base = {"tp": 8, "pp": 4, "schedule": "interleaved-1f1b", "virtual_stages": 2}
        return validate_layout(shape, WorkloadSpec(parallel={**base, **parallel}), 256, 8)

    with pytest.raises(SpecError) as few:
        lay(global_batch=16)  # 2 micro-batches per step, pp 4
    assert "set microbatch_group_size_per_vp_stage" not in few.value.hint
    assert "raise global_batch to a multiple of pp*dp*micro_batch = 32" in few.value.hint
    assert "schedule: 1f1b" in few.value.hint
    assert lay(global_batch=32).microbatch_group_size is None  # the first remedy runs
    assert lay(global_batch=16, schedule="1f1b", virtual_stages=1).global_batch == 16  # and so does the last
    field = "workload.parallel.microbatch_group_size_per_vp_stage"
    with pytest.raises(SpecError, match=f"{field}: 2 micro-batches per step are fewer than pp = 4: no group size") as given:
        lay(global_batch=16, microbatch_group_size_per_vp_stage=4)
    assert "raise global_batch" in given.value.hint
    # 6 micro-batches: N 4 leaves 2 and N 5 leaves 1 (< pp), N 6 leaves none: the hint names 6, which runs
    with pytest.raises(SpecError) as some:
        lay(global_batch=48)
    assert some.value.hint == "or set microbatch_group_size_per_vp_stage (e.g. 6)"
    assert lay(global_batch=48, microbatch_group_size_per_vp_stage=6).microbatch_group_size == 6
