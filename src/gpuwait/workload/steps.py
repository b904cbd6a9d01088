"""From a workload spec and a topology to the step the scheduler runs: compute times derived from
FLOPs and the GPU's achieved rate, communication volumes from the model's shape and parallelism.
"""

from __future__ import annotations

import numpy as np

from gpuwait.errors import GpuwaitError, SpecError
from gpuwait.spec.workload import DataSpec, WorkloadSpec
from gpuwait.topology.model import Topology
from gpuwait.workload import model as wm
from gpuwait.workload.layout import DEFAULT_ORDER, Layout
from gpuwait.workload.program import CommOp, ServingStep, TrainingStep

#: Adam's update reads and writes the fp32 master weight and two moments and reads the gradient:
#: about 16 B of HBM traffic per parameter held on the GPU (memory-bound, Megatron's fused Adam), at the
#: rate a streaming kernel reaches (``GpuShape.streamed_Bps``), as the step's other element-wise kernels.
ADAM_HBM_BYTES_PER_PARAM = 16.0


def _job_layout(topo: Topology, gpus: int, tp: int, dp: int, pp: int, ep: int, cp: int = 1,
                order: tuple[str, ...] = DEFAULT_ORDER, placement: str | list[int] = "packed") -> Layout:
    servers = server_order(topo, placement, gpus)
    return Layout(tp=tp, dp=dp, pp=pp, ep=ep, cp=cp, order=order, rank_gpu=topo.gpu_node[servers].ravel()[:gpus])


def server_pods(topo: Topology) -> np.ndarray:
    """Pod of every server: servers whose first NIC's leaf reaches the same tier-2 switches (one pod in
    a 2-tier leaf-spine, one per pod in a 3-tier fat tree; 0 for every server without a fabric)."""
    pods = np.zeros(topo.n_servers, np.int64)
    if not topo.nic_node.size:
        return pods
    keys = []
    for server in range(topo.n_servers):
        nic = topo.nic_node[server, 0]
        leaves = topo.link_dst[(topo.link_src == nic) & (topo.node_tier[topo.link_dst] == 1)]
        up = topo.link_dst[np.isin(topo.link_src, leaves) & (topo.node_tier[topo.link_dst] == 2)]
        keys.append(int(up.min()) if len(up) else -1)
    return np.unique(np.array(keys), return_inverse=True)[1].astype(np.int64)


def server_order(topo: Topology, placement: str | list[int], gpus: int) -> np.ndarray:
    """Servers the job's ranks fill, in rank order (``workload.parallel.placement``)."""
    n = topo.n_servers
    if isinstance(placement, list):
        need = -(-gpus // topo.gpus_per_server)
        bad = [s for s in placement if not 0 <= s < n]
        if bad or len(set(placement)) != len(placement) or len(placement) < need:
            raise SpecError(f"workload.parallel.placement: got {placement}; expected {need} distinct server indices "
                            f"in 0..{n - 1} (the job's {gpus} GPUs)")
        return np.asarray(placement, np.int64)
    if placement == "spread":
        # take servers from each pod in turn: server k of pod 0, of pod 1, ..., then server k+1
        pods = server_pods(topo)
        rank_in_pod = np.zeros(n, np.int64)
        for pod in np.unique(pods):
            members = np.flatnonzero(pods == pod)
            rank_in_pod[members] = np.arange(len(members))
        return np.lexsort((pods, rank_in_pod))
    return np.arange(n)


def describe(shape: wm.ModelShape, parts: str, gpus: int) -> str:
    billions = shape.params / 1e9
    return f"{shape.name} ({billions:.1f}B params), {parts}, {gpus} GPUs"


def loader_s_per_lane(lay: Layout, topo: Topology, data: DataSpec, global_batch: int) -> np.ndarray:
    """(pp, dp) seconds the CPU loaders of each (stage, replica) lane take to prepare one step's samples:
    0 on a stage that reads no data (:meth:`Layout.data_readers`) or where no loader limit is set.

    Each reading rank reads its replica's ``global_batch / dp`` samples a step; the readers on one server
    share its loaders' throughput, and a lane waits for the slowest of its (CP) readers.
    """
    rates = np.full(topo.n_servers, data.loader_samples_per_s_per_server or np.inf)
    for name, rate in data.loader_samples_per_s_by_server.items():
        try:
            rates[topo.server_id(name)] = rate
        except GpuwaitError:
            raise SpecError(f"workload.data.loader_samples_per_s_by_server: got server {name!r}; expected a server "
                            f"of the cluster (s0 to s{topo.n_servers - 1} or its host name)") from None
    out = np.zeros((lay.pp, lay.dp))
    if np.isinf(rates).all():
        return out
    stages, readers = lay.data_readers()
    servers = topo.node_server[lay.rank_gpu[readers]]
    per_server_s = np.bincount(servers.ravel(), minlength=topo.n_servers) * (global_batch / lay.dp) / rates
    out[list(stages)] = per_server_s[servers].max(axis=2)
    return out


def read_rate_per_reader_Bps(lay: Layout, read_per_gpu_Bps: float) -> float:
    """Bytes/s each GPU that reads the dataset asks from storage, from ``workload.data.dataset_read_per_gpu``:
    the job's read rate over its GPU count (what a storage dashboard shows for the job, over its GPUs),
    shared by the ranks that read (:meth:`Layout.reader_ranks`), so the job's total stays
    ``read_per_gpu_Bps x GPUs`` whatever the layout; with pp = tp = 1 every GPU reads and asks exactly that.

    >>> lay = Layout(tp=8, dp=2, pp=4, ep=1, rank_gpu=np.arange(64))  # 4 readers of 64 GPUs
    >>> read_rate_per_reader_Bps(lay, 1e9) / 1e9
    16.0
    >>> read_rate_per_reader_Bps(Layout(tp=1, dp=8, pp=1, ep=1, rank_gpu=np.arange(8)), 1e9) / 1e9
    1.0
    """
    return read_per_gpu_Bps * lay.n_ranks / lay.reader_ranks().size


def training_step(spec: WorkloadSpec, topo: Topology) -> TrainingStep:
    """The training step ``spec`` describes on ``topo``'s first GPUs (checked: layout, memory)."""
    shape = wm.resolve_model(spec.model)
    gpu = wm.resolve_gpu(spec.compute, shape.precision, topo.spec.server.gpu_model)
    # TP stays inside an NVLink domain: one server, or several joined by cluster.nvlink_domain
    par = wm.validate_layout(shape, spec, topo.n_gpus, topo.gpus_per_server * topo.servers_per_nvlink_domain)
    wm.check_fits(shape, par, gpu)
    lay = _job_layout(topo, par.gpus, par.tp, par.dp, par.pp, par.ep, par.cp, par.rank_order, spec.parallel.placement)
    m = par.global_batch // (par.dp * par.micro_batch)
    pp = par.pp
    times = np.array([wm.stage_compute_times_s(shape, par, gpu, s) for s in range(pp)])
    fwd, bwd = times[:, 0], times[:, 1]
    volumes = [wm.comm_volumes(shape, par, stage=s) for s in range(pp)]
    stage_layer_counts = np.array([len(wm.stage_layers(shape, par, s)) for s in range(pp)], float)
    layers = int(stage_layer_counts.max())  # the inline ops are counted for the largest stage
    v = volumes[0]
    ops = _inline_ops(shape, par, gpu, v, layers, float(fwd.max()) / max(layers, 1))
    # gradients left to reduce when the last backward ends: none under ZeRO-3 or ZeRO-2 with pipelining
    # (reduced layer by layer, _inline_ops); the experts' over their own group, as their weights' gathers
    at_end = not (par.zero == 3 or (par.zero == 2 and pp > 1))
    grads = np.array([vol.dp_grad_bytes if at_end else 0.0 for vol in volumes])
    expert_grads = np.array([vol.expert_dp_grad_bytes if at_end else 0.0 for vol in volumes])
    gather = np.array([vol.dp_param_allgather_bytes for vol in volumes])
    expert_gather = np.array([vol.expert_dp_param_allgather_bytes for vol in volumes])
    # Adam updates the GPU's shard of the parameters (all of them without ZeRO)
    updated = np.array([wm.params_in_shard(shape, par, s) if par.zero >= 1 else sum(wm.params_on_gpu(shape, par, s))
                        for s in range(pp)])
    optimizer_s = float(updated.max()) * ADAM_HBM_BYTES_PER_PARAM / gpu.streamed_Bps
    slow = np.ones(lay.n_ranks)
    for s in spec.compute.slow_gpus:
        if s.rank >= lay.n_ranks:
            raise SpecError(f"workload.compute.slow_gpus: rank {s.rank} is outside the job's {lay.n_ranks} GPUs")
        slow[s.rank] *= s.factor
    data = spec.data
    loader_s = loader_s_per_lane(lay, topo, data, par.global_batch)
    checkpoint = data.checkpoint_size if data.checkpoint_size is not None else wm.checkpoint_bytes(shape)
    tokens = par.global_batch * shape.seq_len
    sp = " SP" if par.sequence_parallel else ""
    parts = f"TP{par.tp}{sp}" + (f" CP{par.cp}" if par.cp > 1 else "") + f" PP{par.pp}" + (f"x{par.virtual_stages}" if par.virtual_stages > 1 else "") + f" DP{par.dp}" + (f" EP{par.ep}" if par.ep > 1 else "") + (
        f" ZeRO-{par.zero}" if par.zero else "") + (f" recompute {par.recompute}" if par.recompute != "none" else "") + f", {m} micro-batches of {par.micro_batch}"
    return TrainingStep(
        layout=lay, micro_batches=m, fwd_compute_s=fwd, bwd_compute_s=bwd, optimizer_s=optimizer_s,
        inline_ops=tuple(ops), pp_send_bytes=v.pp_send_bytes, dp_grad_bytes=grads, bucket_bytes=par.bucket_bytes,
        dp_collective=v.dp_grad_collective, param_gather_bytes=gather, overlap_grad_reduce=par.overlap_grad_reduce,
        jitter_cv=spec.compute.jitter_cv, slow_factor=slow, seed=spec.compute.seed, loader_s_per_step=loader_s,
        storage_read_Bps_per_reader=read_rate_per_reader_Bps(lay, data.dataset_read_per_gpu),
        checkpoint_bytes_per_gpu=checkpoint / par.gpus if data.checkpoint_interval_steps else 0.0,
        checkpoint_interval_steps=data.checkpoint_interval_steps,
        model_flops_per_step=wm.training_flops_per_token(shape) * tokens, tokens_per_step=tokens,
        peak_flops_per_gpu=gpu.peak_flops, description=describe(shape, parts, par.gpus),
        model_chunks=par.virtual_stages, stage_layer_scale=stage_layer_counts / max(layers, 1),
        prefetch_depth=par.prefetch_depth, zero3_layers=layers if par.zero == 3 else 0,
        overlap_p2p_comm=par.overlap_p2p_comm, expert_grad_bytes=expert_grads, expert_param_gather_bytes=expert_gather,
        microbatch_group_size=par.microbatch_group_size)


def _inline_ops(shape: wm.ModelShape, par: wm.ParallelLayout, gpu: wm.GpuShape, v: wm.CommVolumes, layers: int,
                layer_fwd_s: float) -> list[CommOp]:
    """The collectives inside a micro-batch's forward and backward on a stage of ``layers`` layers, each
    with the compute that may hide one call (the overlap switches, docs/workloads.md)."""
    ops: list[CommOp] = []
    # TP collectives: each (collective, size) the same count per layer forward and backward
    tp_kinds: dict[tuple[str, float], list[int]] = {}
    for coll, size in v.tp_forward:
        tp_kinds.setdefault((coll, size), [0, 0])[0] += layers
    for coll, size in v.tp_backward:
        tp_kinds.setdefault((coll, size), [0, 0])[1] += layers
    # tp_comm_overlap: each all-gather / reduce-scatter runs in chunks under the GEMM that consumes or
    # produces it (userbuffers, Megatron-Core --tp-comm-overlap); a call hides under its share of the layer
    tp_hidden_s = layer_fwd_s / max(len(v.tp_forward), 1) if par.tp_comm_overlap else 0.0
    ops += [CommOp("tp", coll, size, f, b, hidden_s=tp_hidden_s) for (coll, size), (f, b) in tp_kinds.items()]
    if v.cp_kv_bytes > 0:
        # ring attention: cp - 1 K/V exchanges per layer forward, 2 (cp - 1) backward, each hidden under
        # the attention of the block already here (Megatron-Core / TransformerEngine's p2p CP)
        ring = par.cp - 1
        ops.append(CommOp("cp", "sendrecv", v.cp_kv_bytes, ring * layers, 2 * ring * layers,
                          hidden_s=_attention_block_s(shape, par, gpu)))
    if v.ep_all_to_all_bytes > 0 and v.moe_layers_in_stage:
        # ep_comm_overlap (DualPipe, DeepSeek-V3 §3.2.1): a forward and a backward chunk of two micro-batches
        # run together, so a layer's 4 all-to-alls (dispatch and combine, each way) hide under that layer's
        # forward + backward compute (3 forwards): 3/4 of a forward each
        ep_hidden_s = 0.75 * layer_fwd_s if par.ep_comm_overlap else 0.0
        ops.append(CommOp("ep", "alltoall", v.ep_all_to_all_bytes, 2 * v.moe_layers_in_stage, 2 * v.moe_layers_in_stage,
                          hidden_s=ep_hidden_s))
    if par.zero == 3:
        # FSDP: each layer's weights gathered before its forward and again before its backward, its
        # gradients reduce-scattered after; the engine queues them per layer (prefetch_depth ahead).
        # Experts are sharded over their expert-dp group (Megatron-Core), the rest over dp x cp; the gradients
        # are bf16 (fp32 with grad_reduce_in_fp32) even when fp8_param_gather gathers the weights in fp8
        for group, gather, grads in (("dp", v.zero3_layer_allgather_bytes, v.zero3_layer_grad_bytes),
                                     ("expert_dp", v.zero3_layer_expert_allgather_bytes, v.zero3_layer_expert_grad_bytes)):
            if gather > 0:
                ops.append(CommOp(group, "all_gather", gather, layers, layers, zero3=True))
                ops.append(CommOp(group, "reduce_scatter", grads, 0, layers, zero3=True))
    if par.zero == 2 and par.pp > 1:
        # ZeRO-2 keeps only its gradient shard, so every micro-batch's backward reduce-scatters each
        # layer's gradients (under the next layer's backward) instead of one reduction per step; the
        # experts' over their expert-dp group, one after the other under the same backward
        for group, size in (("dp", v.dp_grad_bytes), ("expert_dp", v.expert_dp_grad_bytes)):
            if size > 0:
                ops.append(CommOp(group, "reduce_scatter", size / max(layers, 1), 0, layers, hidden_s=2 * layer_fwd_s,
                                  hidden_with="zero2 layer grads"))
    return ops


def _attention_block_s(shape: wm.ModelShape, par: wm.ParallelLayout, gpu: wm.GpuShape) -> float:
    """Forward attention of one CP rank's queries against one K/V block (a ring step)."""
    tokens = par.micro_batch * shape.seq_len / par.cp
    flops = 4.0 * tokens * shape.seq_len * shape.hidden / par.tp
    if gpu.kernels is not None and not gpu.flat:
        return gpu.kernels.attention_time_s(flops) / par.cp
    return gpu.compute_time_s(0.5 * flops) / par.cp


def serving_step(spec: WorkloadSpec, topo: Topology) -> ServingStep:
    """One batch of requests on every replica, as ``spec.inference`` describes."""
    shape = wm.resolve_model(spec.model)
    gpu = wm.resolve_gpu(spec.compute, shape.precision, topo.spec.server.gpu_model)
    inf = wm.validate_inference_layout(shape, spec, topo.n_gpus, topo.gpus_per_server * topo.servers_per_nvlink_domain)
    wm.check_fits(shape, inf, gpu)
    lay = _job_layout(topo, inf.gpus, inf.tp, inf.replicas, inf.pp, 1)
    prompt, out, batch = inf.prompt_tokens, inf.output_tokens, inf.batch
    prefill_flops = batch * wm.prefill_flops(shape, prompt)
    prefill_s = wm.prefill_time_s(shape, gpu, inf) / inf.pp
    # decode attends to a growing context; its mean is the prompt plus half the output
    decode_s = wm.decode_step_time_s(shape, gpu, inf, prompt + out // 2) / inf.pp
    decode_flops = batch * wm.decode_passes(out) * wm.decode_flops_per_token(shape, prompt + out // 2)
    # a TP all-reduce sums the bf16 hidden states a pipeline boundary sends, whatever the weights' precision
    prefill_bytes, decode_bytes = (wm.inference_tp_all_reduce_bytes(shape, tokens) for tokens in (batch * prompt, batch))
    return ServingStep(
        layout=lay, prefill_compute_s=prefill_s, decode_compute_s=decode_s, layers_per_stage=shape.layers // inf.pp,
        tp_allreduce_prefill_bytes=prefill_bytes if inf.tp > 1 else 0.0,
        tp_allreduce_decode_bytes=decode_bytes if inf.tp > 1 else 0.0,
        allreduces_per_layer=2,
        pp_send_prefill_bytes=prefill_bytes if inf.pp > 1 else 0.0,
        pp_send_decode_bytes=decode_bytes if inf.pp > 1 else 0.0,
        output_tokens=out, batch=batch, model_flops=(prefill_flops + decode_flops) * inf.replicas,
        peak_flops_per_gpu=gpu.peak_flops,
        description=describe(shape, f"serving TP{inf.tp} PP{inf.pp} x{inf.replicas} replicas, batch {batch}, "
                             f"{prompt} prompt + {out} output tokens", inf.gpus))
