"""Model arithmetic: parameters, FLOPs, communication volumes and memory of training and inference steps.

Everything here is a pure function of resolved, frozen values — :class:`ModelShape`, :class:`GpuShape`,
:class:`ParallelLayout` / :class:`InferenceLayout` — built from the scenario's ``workload`` by
:func:`resolve_model`, :func:`resolve_gpu`, :func:`validate_layout` and :func:`validate_inference_layout`.
Units are SI: FLOPs, bytes, seconds, bytes/s. Communication sizes follow nccl-tests: an all_reduce's size is
its buffer, an all_gather's its gathered output, a reduce_scatter's its input, an all_to_all's one rank's
send buffer.

Conventions (the ones Megatron-LM and its papers use, so MFU figures compare):

* Training FLOPs per token = 6·N + 12·layers·hidden·seq_len (Kaplan et al. 2020, "Scaling Laws for Neural
  Language Models", §2.1; Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
  Clusters Using Megatron-LM", SC'21, eq. (3)), with N the parameters a token multiplies by: every active
  parameter except the input embedding table, which is a lookup. Forward is 1/3 of it, backward 2/3.
  Attention counts the full (non-causal) score matrix, as both papers do; recomputation is not counted.
* Weights and gradients in training are bf16 (2 B/param) whatever ``precision`` (fp8 training keeps bf16
  weights and activations and only runs the matmuls in fp8), except with ``fp8_param_gather``, where the
  transformer layers' matrices are kept and all-gathered in fp8 (1 B/param, :func:`fp8_params_on_gpu`), and
  with ``grad_reduce_in_fp32``, where the gradients are kept and reduced in fp32 (4 B/param); Adam keeps
  an fp32 master copy and two fp32 moments (12 B/param). Activations per layer follow Korthikanti et al.
  2022, "Reducing Activation Recomputation in Large Transformer Models", with selective recomputation.
* MoE routing is assumed balanced: each expert-parallel rank computes as many token-expert pairs as its
  own tokens ask for.

>>> shape = resolve_model(ModelSpec(preset="llama-70b"))
>>> round(shape.params / 1e9, 1), shape.layers, shape.head_dim
(70.6, 80, 128)
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from gpuwait.errors import SpecError, UnknownNameError
from gpuwait.spec.workload import ComputeSpec, InferenceSpec, ModelSpec, ParallelSpec, WorkloadSpec
from gpuwait.topology.gpus import gpu_arch
from gpuwait.workload.compute import HBM_EFFICIENCY, ComputeModel, head_times, layer_times
from gpuwait.workload.layout import DEFAULT_ORDER, parse_rank_order
from gpuwait.workload.presets import ENGINE_PRESETS, GPU_PRESETS, MODEL_PRESETS, GpuPreset, gpu_preset_for_model
from gpuwait.workload.program import in_flight_counts

GiB = 2.0**30
#: bytes per element of training weights, gradients and activations (bf16)
TRAIN_BYTES = 2
#: bytes per element of an fp8 weight (E4M3) kept by TransformerEngine under ``fp8_param_gather``
FP8_BYTES = 1
#: bytes per gradient element with ``grad_reduce_in_fp32``: Megatron-Core allocates the gradient buffer in
#: ``torch.float`` then (param_and_grad_buffer.py ``group_params_for_buffers``) and reduces it in place
GRAD_FP32_BYTES = 4
#: Adam optimizer state per parameter: fp32 master weights + first and second moments
ADAM_BYTES_PER_PARAM = 12
#: bytes per parameter of a checkpoint: bf16 weights + the Adam state
CHECKPOINT_BYTES_PER_PARAM = TRAIN_BYTES + ADAM_BYTES_PER_PARAM
_PRECISION_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1}
#: dropout after the attention and the MLP of a shape given field by field: Megatron-LM's --hidden-dropout
#: default (megatron/training/arguments.py; Megatron-Core TransformerConfig.hidden_dropout)
MEGATRON_HIDDEN_DROPOUT = 0.1
_FIELD = "workload.model"


def _fail(path: str, message: str, hint: str | None = None):
    text = f"{path}: {message}"
    raise SpecError(text, problems=[text], hint=hint)


# ------------------------------------------------------------------------------------------------ shape
@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer with every dimension resolved (counts and elements; see :class:`ModelSpec`).

    ``params`` counts every weight (embeddings, attention, MLPs or experts, routers, norms, LM head);
    ``active_params`` those one token uses (the routed experts it picks, not all of them).
    """

    name: str
    layers: int
    hidden: int
    ffn_hidden: int
    heads: int
    kv_heads: int
    vocab: int
    experts: int
    top_k: int
    expert_ffn_hidden: int
    shared_experts: int
    dense_layers: int
    seq_len: int
    precision: str
    hidden_dropout: float
    params: int = field(init=False)
    active_params: int = field(init=False)

    def __post_init__(self) -> None:
        moe = self.moe_layers
        dense = self.layers - moe
        total = (self.embedding_params + self.head_params + dense * self.dense_layer_params
                 + moe * (self.moe_layer_nonexpert_params + self.experts * self.expert_params))
        active = (self.embedding_params + self.head_params + dense * self.dense_layer_params
                  + moe * self.moe_layer_active_params)
        object.__setattr__(self, "params", int(total))
        object.__setattr__(self, "active_params", int(active))

    # parameter counts, per piece -------------------------------------------------------------
    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def is_moe(self) -> bool:
        return self.experts > 1

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts (count)."""
        return self.layers - self.dense_layers if self.is_moe else 0

    def is_moe_layer(self, layer: int) -> bool:
        return self.is_moe and layer >= self.dense_layers

    @property
    def attention_params(self) -> int:
        """Q and O projections (hidden × heads·head_dim) plus K and V (hidden × kv_heads·head_dim)."""
        return 2 * self.hidden * self.heads * self.head_dim + 2 * self.hidden * self.kv_heads * self.head_dim

    @property
    def norm_params(self) -> int:
        """Two RMSNorm weight vectors per layer."""
        return 2 * self.hidden

    @property
    def dense_layer_params(self) -> int:
        """One layer with a dense SwiGLU MLP (gate, up, down: 3·hidden·ffn_hidden)."""
        return self.attention_params + 3 * self.hidden * self.ffn_hidden + self.norm_params

    @property
    def expert_params(self) -> int:
        """One expert: a SwiGLU MLP of expert_ffn_hidden."""
        return 3 * self.hidden * self.expert_ffn_hidden

    @property
    def moe_layer_nonexpert_params(self) -> int:
        """An MoE layer's weights outside the routed experts: attention, norms, router, shared experts."""
        return (self.attention_params + self.norm_params + self.hidden * self.experts
                + self.shared_experts * self.expert_params)

    @property
    def moe_layer_active_params(self) -> int:
        return self.moe_layer_nonexpert_params + self.top_k * self.expert_params

    @property
    def embedding_params(self) -> int:
        """Input embedding table (a lookup: no FLOPs)."""
        return self.vocab * self.hidden

    @property
    def head_params(self) -> int:
        """Final norm and the (untied) LM head."""
        return self.hidden + self.vocab * self.hidden

    def layer_params(self, layer: int) -> int:
        """Every weight of one layer (all experts)."""
        if self.is_moe_layer(layer):
            return self.moe_layer_nonexpert_params + self.experts * self.expert_params
        return self.dense_layer_params

    def layer_active_params(self, layer: int) -> int:
        """The weights of one layer a token multiplies by."""
        return self.moe_layer_active_params if self.is_moe_layer(layer) else self.dense_layer_params

    def layer_expert_params(self, layer: int) -> int:
        """The routed-expert weights of one layer (split by expert parallelism); 0 for a dense layer."""
        return self.experts * self.expert_params if self.is_moe_layer(layer) else 0


_REQUIRED = ("layers", "hidden", "heads", "vocab")


def _preset_and_overrides(spec: ModelSpec) -> dict:
    """The preset's fields (none without a preset), overridden by every field ``spec`` sets."""
    fields: dict = {}
    if spec.preset is not None:
        try:
            fields.update(MODEL_PRESETS[spec.preset])
        except KeyError:
            raise UnknownNameError(
                f"{_FIELD}.preset: unknown model preset {spec.preset!r}; expected one of {', '.join(sorted(MODEL_PRESETS))}",
                hint="or give the shape: layers, hidden, ffn_hidden, heads, kv_heads, vocab",
            ) from None
    fields.update({k: v for k, v in spec.model_dump().items() if v is not None and k != "preset"})
    return fields


def _fill_moe(fields: dict) -> None:
    """An MoE model needs top_k and an expert width; its dense width defaults to the expert width."""
    experts = fields["experts"]
    if "top_k" not in fields:
        _fail(f"{_FIELD}.top_k", f"required for an MoE model (experts = {experts})")
    if "expert_ffn_hidden" not in fields and "ffn_hidden" in fields:
        fields["expert_ffn_hidden"] = fields["ffn_hidden"]
    if "expert_ffn_hidden" not in fields:
        _fail(f"{_FIELD}.expert_ffn_hidden", "required for an MoE model (or ffn_hidden)")
    if "ffn_hidden" not in fields:
        if fields["dense_layers"] > 0:
            _fail(f"{_FIELD}.ffn_hidden", f"required: the first {fields['dense_layers']} layers are dense")
        fields["ffn_hidden"] = fields["expert_ffn_hidden"]


def _fill_dense(fields: dict) -> None:
    """A dense model needs ffn_hidden; its expert fields describe one expert that every token runs."""
    if "ffn_hidden" not in fields:
        _fail(f"{_FIELD}.ffn_hidden", "required when no preset gives it")
    fields.update(experts=1, top_k=1, shared_experts=0, dense_layers=0)
    fields.setdefault("expert_ffn_hidden", fields["ffn_hidden"])


def _check_shape(fields: dict) -> None:
    """Heads divide the hidden size, KV heads divide heads, top_k fits the experts, an MoE layer is left."""
    hidden, heads, kv_heads = fields["hidden"], fields["heads"], fields["kv_heads"]
    if hidden % heads:
        _fail(f"{_FIELD}.heads", f"{heads} does not divide hidden = {hidden}")
    if kv_heads > heads or heads % kv_heads:
        _fail(f"{_FIELD}.kv_heads", f"{kv_heads} does not divide heads = {heads}")
    if fields["top_k"] > fields["experts"]:
        _fail(f"{_FIELD}.top_k", f"{fields['top_k']} is more than the {fields['experts']} experts")
    if fields["dense_layers"] >= fields["layers"] and fields["experts"] > 1:
        _fail(f"{_FIELD}.dense_layers", f"{fields['dense_layers']} leaves no MoE layer of {fields['layers']}")


def resolve_model(spec: ModelSpec) -> ModelShape:
    """Apply ``spec.preset`` (explicit fields win), fill defaults and check the shape.

    Raises :class:`UnknownNameError` for an unknown preset, :class:`SpecError` naming the field for a
    missing or inconsistent dimension.

    >>> resolve_model(ModelSpec(preset="llama-8b", layers=16)).layers
    16
    """
    fields = _preset_and_overrides(spec)
    for name in _REQUIRED:
        if name not in fields:
            _fail(f"{_FIELD}.{name}", "required when no preset gives it")
    fields.setdefault("kv_heads", fields["heads"])
    fields.setdefault("shared_experts", 0)
    fields.setdefault("dense_layers", 0)
    fields.setdefault("seq_len", 4096)
    fields.setdefault("hidden_dropout", MEGATRON_HIDDEN_DROPOUT)
    if fields.get("experts", 1) > 1:
        _fill_moe(fields)
    else:
        _fill_dense(fields)
    _check_shape(fields)
    names = ("layers", "hidden", "ffn_hidden", "heads", "kv_heads", "vocab", "experts", "top_k", "expert_ffn_hidden",
             "shared_experts", "dense_layers", "seq_len", "precision", "hidden_dropout")
    return ModelShape(name=spec.preset or "custom", **{k: fields[k] for k in names})


# ------------------------------------------------------------------------------------------------ GPU
@dataclass(frozen=True)
class GpuShape:
    """One GPU's arithmetic for the workload's precision.

    ``kernels`` times a layer from its GEMM shapes (:mod:`gpuwait.workload.compute`); ``flat`` says the
    scenario pinned ``compute.efficiency``, so every layer's FLOPs run at ``peak_flops * efficiency``
    instead (the model before issue 13).
    """

    name: str
    peak_flops: float          # dense FLOP/s at the workload's precision (the MFU denominator)
    efficiency: float          # flat model: achieved fraction of peak; kernel model: a large GEMM's
    memory_bytes: float
    hbm_bandwidth_Bps: float
    kernels: ComputeModel | None = None
    flat: bool = True
    layer_forward_s: float | None = None   # measured kernel times (compute.layer_forward_time)
    layer_backward_s: float | None = None

    @property
    def achieved_flops(self) -> float:
        """FLOP/s the model's matmuls reach: ``peak_flops * efficiency``."""
        return self.peak_flops * self.efficiency

    def compute_time_s(self, flops: float) -> float:
        return flops / self.achieved_flops

    @property
    def streamed_Bps(self) -> float:
        """HBM bytes/s a kernel that streams memory reaches: the bandwidth x ``compute.hbm_efficiency``, as
        the training step's element-wise kernels (:data:`gpuwait.workload.compute.HBM_EFFICIENCY`)."""
        return self.hbm_bandwidth_Bps * (self.kernels.hbm_efficiency if self.kernels is not None else HBM_EFFICIENCY)


def _custom_preset(peak_flops: float, memory_bytes: float, hbm_bandwidth_Bps: float,
                   server_gpu_model: str | None) -> GpuPreset:
    """A GPU given by its figures: generation from the cluster's GPU when known (else Hopper), 132 SMs."""
    generation = "hopper"
    if server_gpu_model:
        try:
            sm = gpu_arch(server_gpu_model).sm
            generation = "ampere" if sm < 90 else "hopper" if sm < 100 else "blackwell"
        except SpecError:
            pass
    return GpuPreset("custom", peak_flops, memory_bytes, hbm_bandwidth_Bps, "workload.compute", generation, 132)


def resolve_gpu(spec: ComputeSpec, precision: str = "bf16", server_gpu_model: str | None = None) -> GpuShape:
    """The GPU preset (``spec.gpu``, else the cluster's ``server_gpu_model``, else H100-SXM) with overrides.

    >>> g = resolve_gpu(ComputeSpec(gpu="H100-SXM", efficiency=0.5), "fp8")
    >>> g.peak_flops, g.achieved_flops, g.memory_bytes / 2**30
    (1979000000000000.0, 989500000000000.0, 80.0)
    >>> resolve_gpu(ComputeSpec(gpu="A100"), "fp8")
    Traceback (most recent call last):
    ...
    gpuwait.errors.SpecError: workload.model.precision: A100 has no fp8 tensor cores; expected one of fp32, tf32, bf16, fp16
    """
    name = spec.gpu
    if name is None and server_gpu_model is not None:
        name = gpu_preset_for_model(server_gpu_model)
        if name is None and None in (spec.peak_flops, spec.memory, spec.hbm_bandwidth):
            _fail("workload.compute.gpu", f"the cluster's GPU {server_gpu_model!r} has no preset; expected a preset "
                  f"({', '.join(GPU_PRESETS)}) or peak_flops, memory and hbm_bandwidth")
    preset: GpuPreset | None
    if name is None and spec.peak_flops is not None and spec.memory is not None and spec.hbm_bandwidth is not None:
        preset = _custom_preset(spec.peak_flops, spec.memory, spec.hbm_bandwidth, server_gpu_model)
    else:
        key = name or "H100-SXM"
        preset = GPU_PRESETS.get(key) or next((p for n, p in GPU_PRESETS.items() if n.upper() == key.upper()), None)
        if preset is None:
            raise UnknownNameError(f"workload.compute.gpu: unknown GPU {key!r}; expected one of {', '.join(GPU_PRESETS)}",
                                   hint="or give peak_flops, memory and hbm_bandwidth")
    hbm = spec.hbm_bandwidth if spec.hbm_bandwidth is not None else preset.hbm_bandwidth_Bps
    kernels = ComputeModel.for_gpu(preset, peak_bf16_flops=spec.peak_flops, hbm_Bps=hbm,
                                   gemm_efficiency=spec.gemm_efficiency, attention_efficiency=spec.attention_efficiency,
                                   hbm_efficiency=spec.hbm_efficiency)
    dtype = "bf16" if precision == "fp16" and "fp16" not in kernels.dtype_flops else precision
    peak = kernels.peak(dtype)
    flat = spec.efficiency is not None
    return GpuShape(
        name=preset.name,
        peak_flops=peak,
        efficiency=spec.efficiency if spec.efficiency is not None else kernels.achievable.get(dtype, 0.75),
        memory_bytes=spec.memory if spec.memory is not None else preset.memory_bytes,
        hbm_bandwidth_Bps=hbm,
        kernels=kernels,
        flat=flat and spec.layer_forward_time is None,
        layer_forward_s=spec.layer_forward_time,
        layer_backward_s=spec.layer_backward_time,
    )


# ------------------------------------------------------------------------------------------------ FLOPs
def matmul_params(shape: ModelShape) -> int:
    """Active parameters a token multiplies by: all but the input embedding table (a lookup)."""
    return shape.active_params - shape.embedding_params


def training_flops_per_token(shape: ModelShape) -> float:
    """Model FLOPs of one token's forward and backward: ``6·N + 12·layers·hidden·seq_len``.

    N = :func:`matmul_params`. Forward is a third of it, backward two thirds. For a GPT shape (ffn = 4h,
    MHA) this is exactly Narayanan et al. 2021 eq. (3) divided by the tokens of a batch.

    >>> shape = resolve_model(ModelSpec(preset="llama-8b"))
    >>> training_flops_per_token(shape) == 6 * (shape.active_params - 128256 * 4096) + 12 * 32 * 4096 * 8192
    True
    """
    return 6.0 * matmul_params(shape) + 12.0 * shape.layers * shape.hidden * shape.seq_len


def layer_forward_flops(shape: ModelShape, tokens: float, layer: int | None = None) -> float:
    """Forward FLOPs of one transformer layer over ``tokens`` tokens (whole sequences of seq_len).

    ``2·(the layer's active params)·tokens`` for the matmuls plus ``4·tokens·seq_len·hidden`` for the
    attention scores (QKᵀ and AV). ``layer`` picks a dense or MoE layer; default: a typical layer
    (an MoE layer in an MoE model). Whole job, not per GPU: divide by tp for one tensor-parallel rank.
    """
    if layer is None:
        layer = shape.dense_layers if shape.is_moe else 0
    return 2.0 * shape.layer_active_params(layer) * tokens + 4.0 * tokens * shape.seq_len * shape.hidden


def head_forward_flops(shape: ModelShape, tokens: float) -> float:
    """Forward FLOPs outside the layers: the LM head and final norm (``2·(vocab+1)·hidden·tokens``).

    The input embedding is a lookup and costs nothing; the head runs on the last pipeline stage.
    """
    return 2.0 * shape.head_params * tokens


def chunk_layers(shape: ModelShape, layout: ParallelLayout, stage: int) -> list[range]:
    """The layers of each model chunk of pipeline stage ``stage``: chunks ``stage, stage + pp, ...`` of the
    split :func:`split_layers` resolved (uneven first and last stages, interleaving); one chunk without
    interleaving."""
    counts = layout.stage_layer_counts or (shape.layers // (layout.pp * layout.virtual_stages),) * (
        layout.pp * layout.virtual_stages)
    starts = [sum(counts[:j]) for j in range(len(counts) + 1)]
    return [range(starts[j], starts[j + 1]) for j in range(stage, layout.pp * layout.virtual_stages, layout.pp)]


def stage_layers(shape: ModelShape, layout: ParallelLayout | int, stage: int) -> list[int] | range:
    """The layers of pipeline stage ``stage``: contiguous ``layers / pp`` each for an int ``layout`` (pp);
    for a :class:`ParallelLayout`, those of its model chunks (:func:`chunk_layers`)."""
    if isinstance(layout, int):
        per = shape.layers // layout
        return range(stage * per, (stage + 1) * per)
    return [layer for chunk in chunk_layers(shape, layout, stage) for layer in chunk]


def stage_forward_flops(shape: ModelShape, layout: ParallelLayout, stage: int, micro_batch: int | None = None) -> float:
    """Forward FLOPs of one micro-batch on one GPU of pipeline stage ``stage`` (its layers, plus the LM
    head on the last stage, split over tp). Backward is twice this.
    """
    tokens = (micro_batch or layout.micro_batch) * shape.seq_len
    flops = sum(layer_forward_flops(shape, tokens, layer) for layer in stage_layers(shape, layout, stage))
    if stage == layout.pp - 1:
        flops += head_forward_flops(shape, tokens)
    return flops / (layout.tp * layout.cp)


def stage_compute_times_s(shape: ModelShape, layout: ParallelLayout, gpu: GpuShape, stage: int) -> tuple[float, float]:
    """Forward and backward time of one micro-batch on one GPU of ``stage`` (backward with recomputation).

    Kernel model (:mod:`gpuwait.workload.compute`): the sum of the stage's layer times, plus the LM head
    on the last stage; measured ``layer_forward_s`` / ``layer_backward_s`` replace the layers' times.
    Flat model (``compute.efficiency`` set): FLOPs / (peak x efficiency), backward twice forward, and
    recomputation adds the forward FLOPs it repeats (the attention scores, or the whole forward).
    """
    layers = stage_layers(shape, layout, stage)
    tokens = layout.micro_batch * shape.seq_len / layout.cp  # context parallelism: seq_len / cp per GPU
    last = stage == layout.pp - 1
    if gpu.flat or gpu.kernels is None:
        fwd = gpu.compute_time_s(stage_forward_flops(shape, layout, stage))
        again = {"none": 0.0, "full": fwd,
                 "selective": gpu.compute_time_s(len(layers) * 4.0 * tokens * shape.seq_len * shape.hidden / layout.tp)}
        return fwd, 2.0 * fwd + again[layout.recompute]
    fwd = bwd = 0.0
    if gpu.layer_forward_s is not None:
        back = gpu.layer_backward_s if gpu.layer_backward_s is not None else 2.0 * gpu.layer_forward_s
        fwd, bwd = len(layers) * gpu.layer_forward_s, len(layers) * back
        if layout.recompute == "full":
            bwd += fwd
    else:
        for layer in layers:
            t = layer_times(gpu.kernels, shape, layer, tokens, layout.tp, layout.ep, layout.sequence_parallel,
                            shape.precision)
            fwd, bwd = fwd + t.forward_s, bwd + t.backward_with(layout.recompute)
    if last:
        head = head_times(gpu.kernels, shape, tokens, layout.tp)
        fwd, bwd = fwd + head.forward_s, bwd + head.backward_s
    return fwd, bwd


# ------------------------------------------------------------------------------------------------ layout
@dataclass(frozen=True)
class ParallelLayout:
    """A training job's parallelism with every degree resolved and checked (counts unless named).

    Ranks are laid out Megatron-style, tensor-parallel fastest: ``rank = tp_rank + tp·(dp_rank + dp·pp_rank)``;
    an expert-parallel group is ``ep`` ranks consecutive among a stage's cp·dp ranks of one tp rank (``ep``
    consecutive dp ranks when cp = 1; Megatron-Core's expert order, :meth:`gpuwait.workload.layout.Layout.groups`).
    """

    gpus: int
    tp: int
    pp: int
    dp: int
    ep: int
    zero: int
    sequence_parallel: bool
    micro_batch: int            # sequences
    global_batch: int           # sequences per step
    bucket_bytes: float
    overlap_grad_reduce: bool
    schedule: str
    virtual_stages: int = 1       # model chunks per pipeline stage (interleaved 1F1B)
    recompute: str = "none"       # activation recomputation: none | selective | full
    cp: int = 1                   # context-parallel degree (sequence split over cp GPUs, ring attention)
    stage_layer_counts: tuple[int, ...] = ()  # layers per virtual stage (pp * virtual_stages); () = even
    tp_comm_overlap: bool = False  # TP collectives overlapped with the GEMMs (userbuffers)
    rank_order: tuple[str, ...] = DEFAULT_ORDER  # fastest-varying first
    prefetch_depth: int = 1       # ZeRO-3: layers whose all-gather may run ahead of compute (FSDP: 1)
    overlap_p2p_comm: bool = False  # pipeline sends overlapped with compute (Megatron-Core, interleaved)
    ep_comm_overlap: bool = False  # MoE all-to-all under another micro-batch's compute (DualPipe-like)
    microbatch_group_size: int | None = None  # interleaved 1F1B: micro-batches per chunk in a row (N); None = pp
    fp8_param_gather: bool = False  # layer matrices kept and all-gathered in fp8 (Megatron-Core --fp8-param-gather)
    grad_reduce_in_fp32: bool = False  # gradient buffer and its dp reduction in fp32 (Megatron-Core grad_reduce_in_fp32)

    @property
    def weight_replicas(self) -> int:
        """Ranks holding the same (non-expert) weights, which reduce gradients and share ZeRO shards: dp·cp."""
        return self.dp * self.cp

    @property
    def micro_batches(self) -> int:
        """Micro-batches per step on each dp rank (gradient-accumulation steps)."""
        return self.global_batch // (self.dp * self.micro_batch)

    @property
    def expert_dp(self) -> int:
        """Ranks holding the same experts (their gradients are reduced together): dp·cp / ep.

        Context parallelism splits the sequence, not the weights, so the cp ranks of a dp rank hold its
        experts too; Megatron-Core's expert-data-parallel group has ``world / (expert_tp·ep·pp)`` ranks
        (parallel_state.initialize_model_parallel, its expert rank generator has no cp), dp·cp / ep
        with the experts split over tp as the rest.
        """
        return self.dp * self.cp // self.ep


def _check_tp(path: str, tp: int, shape: ModelShape, domain_gpus: int | None, allow: bool) -> None:
    """TP divides the heads and stays inside one NVLink domain of ``domain_gpus`` GPUs (a server, or
    the servers cluster.nvlink_domain joins), unless ``allow`` lets it cross the scale-out network."""
    if shape.heads % tp:
        _fail(f"{path}.tp", f"{tp} does not divide {shape.heads} attention heads")
    if domain_gpus is not None and not allow:
        if tp > domain_gpus:
            _fail(f"{path}.tp", f"{tp} is more than the {domain_gpus} GPUs of an NVLink domain "
                  "(set allow_tp_across_servers: true to run TP over the scale-out network)",
                  hint="tensor parallelism belongs inside the NVLink domain; lower tp and raise pp")
        if domain_gpus % tp:
            _fail(f"{path}.tp", f"{tp} does not divide the {domain_gpus} GPUs of an NVLink domain "
                  "(a TP group would straddle two domains)")


def _job_gpus(spec: WorkloadSpec, cluster_gpus: int) -> int:
    gpus = spec.gpus if spec.gpus is not None else cluster_gpus
    if gpus > cluster_gpus:
        _fail("workload.gpus", f"{gpus} GPUs but the cluster has {cluster_gpus}")
    return gpus


def _data_parallel(path: str, p: ParallelSpec, gpus: int) -> int:
    """dp as given (checked against the job's GPUs), else the GPUs tp x cp x pp leaves."""
    model = p.tp * p.cp * p.pp
    if p.dp is None:
        if gpus % model:
            _fail(path, f"tp*cp*pp = {p.tp}*{p.cp}*{p.pp} = {model} does not divide the job's {gpus} GPUs")
        return gpus // model
    if model * p.dp != gpus:
        _fail(f"{path}.dp", f"tp*cp*pp*dp = {p.tp}*{p.cp}*{p.pp}*{p.dp} = {model * p.dp} but the job has {gpus} GPUs")
    return p.dp


def _check_expert_parallel(path: str, p: ParallelSpec, shape: ModelShape, dp: int) -> None:
    """ep > 1 needs an MoE model whose experts and dp it divides."""
    if not shape.is_moe:
        _fail(f"{path}.ep", f"{p.ep} needs an MoE model (experts > 1); {shape.name} is dense")
    if shape.experts % p.ep:
        _fail(f"{path}.ep", f"{p.ep} does not divide {shape.experts} experts")
    # Megatron-Core's expert grid is world / (tp * ep * pp) ranks (parallel_state.initialize_model_parallel,
    # NVIDIA/Megatron-LM @d98e8a64): ep splits the dp x cp ranks of a stage, which hold the same weights
    if (dp * p.cp) % p.ep:
        _fail(f"{path}.ep", f"{p.ep} does not divide dp*cp = {dp}*{p.cp} = {dp * p.cp} (expert parallelism runs "
              "inside the ranks that hold the same weights)")


def _model_chunks(path: str, p: ParallelSpec) -> int:
    """Model chunks per pipeline stage: virtual_stages for interleaved 1F1B (checked), else 1."""
    chunks = p.virtual_stages if p.schedule == "interleaved-1f1b" else 1
    if chunks > 1 and p.pp < 2:
        _fail(f"{path}.schedule", "interleaved-1f1b needs pipeline parallelism (pp >= 2)")
    return chunks


def _even(path: str, p: ParallelSpec, layers: int, chunks: int, extra: int) -> list[int]:
    """``layers + extra`` split evenly over ``pp · chunks`` virtual stages (one error naming the field)."""
    parts = p.pp * chunks
    if (layers + extra) % parts:
        if extra:
            _fail(f"{path}.pp", f"{layers} layers + {extra} (embedding / loss counted as layers) do not split evenly "
                  f"over pp*virtual_stages = {parts}")
        if chunks > 1:
            _fail(f"{path}.virtual_stages", f"pp*virtual_stages = {p.pp}*{chunks} does not divide {layers} layers")
        _fail(f"{path}.pp", f"{p.pp} does not divide {layers} layers",
              hint="or set first_stage_layers / last_stage_layers, or account_for_embedding / account_for_loss")
    return [(layers + extra) // parts] * parts


def split_layers(path: str, p: ParallelSpec, layers: int, chunks: int) -> tuple[int, ...]:
    """Transformer layers of each virtual stage (``pp · chunks`` of them, stage s holding chunks s, s+pp, ...).

    As Megatron-Core (``TransformerConfig``; ``get_num_layers_to_build``): with
    ``first_stage_layers`` / ``last_stage_layers`` the first and last stages hold those and the other
    stages split the rest evenly; with ``account_for_embedding`` / ``account_for_loss`` the embedding and
    the loss count as one layer each in an even split, so the first / last virtual stage holds one
    transformer layer fewer (126 layers on 16 stages: 7, 8 x 14, 7 — Llama 3 405B's layout); otherwise
    every virtual stage holds ``layers / (pp · chunks)``. A stage's chunks share its layers evenly.

    >>> split_layers("p", ParallelSpec(pp=4, account_for_embedding=True, account_for_loss=True), 62, 1)
    (15, 16, 16, 15)
    >>> split_layers("p", ParallelSpec(pp=4, first_stage_layers=15, last_stage_layers=14), 61, 1)
    (15, 16, 16, 14)
    """
    pp, uneven = p.pp, p.first_stage_layers is not None or p.last_stage_layers is not None
    if uneven and (p.account_for_embedding or p.account_for_loss):
        _fail(f"{path}.first_stage_layers", "set either first/last_stage_layers or account_for_embedding/loss, not both "
              "(Megatron-LM refuses the combination)")
    if uneven:
        if pp < 2:
            _fail(f"{path}.first_stage_layers", "needs pipeline parallelism (pp >= 2)")
        first, last = p.first_stage_layers, p.last_stage_layers
        middle = layers - (first or 0) - (last or 0)
        if middle < 0:
            _fail(f"{path}.first_stage_layers", f"first + last stage layers exceed the model's {layers}")
        rest = pp - (first is not None) - (last is not None)
        if rest and middle % rest:
            # Megatron-Core splits the remaining layers evenly: none of them may be left over
            _fail(f"{path}.first_stage_layers", f"the other {rest} stages cannot share the remaining {middle} layers evenly")
        if not rest and middle:
            _fail(f"{path}.last_stage_layers", f"first + last stage layers leave {middle} layers for no stage")
        if rest and not middle:
            # a middle stage would hold neither a layer, the embedding nor the loss: a pipeline hop that only waits
            _fail(f"{path}.first_stage_layers", f"first + last stage layers take all {layers} layers and leave none for "
                  f"the other {rest} stages")
        per_stage = [first if first is not None else None] + [None] * (pp - 2) + [last]
        per = middle // rest if rest else 0
        stages = [per if n is None else n for n in per_stage]
        for s, n in enumerate(stages):
            if n % chunks:
                _fail(f"{path}.virtual_stages", f"stage {s} holds {n} layers, not a multiple of {chunks} model chunks")
        return tuple(stages[j % pp] // chunks for j in range(pp * chunks))
    extra = int(p.account_for_embedding) + int(p.account_for_loss)
    counts = _even(path, p, layers, chunks, extra)
    counts[0] -= int(p.account_for_embedding)
    counts[-1] -= int(p.account_for_loss)
    return tuple(counts)


def _global_batch(path: str, p: ParallelSpec, dp: int, chunks: int) -> int:
    """Sequences per step: as given (a whole number of micro-batch rounds), else 4·pp rounds with a pipeline."""
    per_step = dp * p.micro_batch
    global_batch = p.global_batch if p.global_batch is not None else per_step * (4 * p.pp if p.pp > 1 else 1)
    if global_batch % per_step:
        _fail(f"{path}.global_batch", f"{global_batch} is not a multiple of dp*micro_batch = {dp}*{p.micro_batch} = {per_step}")
    micro_batches = global_batch // per_step
    if chunks > 1 and p.microbatch_group_size_per_vp_stage is None and micro_batches % p.pp:
        group = accepted_microbatch_group(p.pp, micro_batches)
        _fail(f"{path}.global_batch", f"interleaved-1f1b runs micro-batches in groups of pp = {p.pp}; "
              f"{micro_batches} micro-batches per step is not a multiple (Megatron-LM requires it)",
              hint=f"or set microbatch_group_size_per_vp_stage (e.g. {group})" if group is not None
              else _more_micro_batches(p, per_step))
    return global_batch


def accepted_microbatch_group(pp: int, micro_batches: int) -> int | None:
    """The smallest ``microbatch_group_size_per_vp_stage`` Megatron-Core's interleaved schedule accepts
    for ``micro_batches`` per step (:func:`_microbatch_group`'s rules: from pp to the micro-batches, the
    last group none or at least pp); the smallest holds the fewest activations in warm-up. None when
    there are fewer micro-batches than pp: no group size is accepted then.

    >>> accepted_microbatch_group(4, 10), accepted_microbatch_group(4, 7), accepted_microbatch_group(4, 3)
    (5, 7, None)
    """
    return next((n for n in range(pp, micro_batches + 1) if micro_batches % n == 0 or micro_batches % n >= pp), None)


def _more_micro_batches(p: ParallelSpec, per_step: int) -> str:
    """What helps an interleaved schedule with fewer micro-batches per step than pp, which no group size can."""
    return (f"fewer micro-batches per step than pp = {p.pp}, which no microbatch_group_size_per_vp_stage accepts "
            f"(Megatron-Core needs pp <= it <= the micro-batches): raise global_batch to a multiple of "
            f"pp*dp*micro_batch = {p.pp * per_step}, lower micro_batch, or use schedule: 1f1b")


def _microbatch_group(path: str, p: ParallelSpec, chunks: int, micro_batches: int, per_step: int) -> int | None:
    """``microbatch_group_size_per_vp_stage`` checked as Megatron-Core's interleaved schedule checks it
    (``forward_backward_pipelining_with_interleaving``, schedules.py @d98e8a64): from pp to the
    ``micro_batches`` per step (of ``per_step`` = dp·micro_batch sequences), and a last group (the rest) of
    none or at least pp micro-batches."""
    group, field = p.microbatch_group_size_per_vp_stage, f"{path}.microbatch_group_size_per_vp_stage"
    if group is None:
        return None
    if chunks == 1:
        _fail(field, "only used with schedule: interleaved-1f1b and virtual_stages > 1 (the order of model chunks)")
    if micro_batches < p.pp:
        _fail(field, f"{micro_batches} micro-batches per step are fewer than pp = {p.pp}: no group size is accepted "
              "(Megatron-Core needs pp <= it <= the micro-batches)",
              hint=_more_micro_batches(p, per_step))
    if not p.pp <= group <= micro_batches:
        _fail(field, f"{group} is outside [pp, micro-batches per step] = [{p.pp}, {micro_batches}] (Megatron-Core refuses it)")
    if 0 < micro_batches % group < p.pp:
        _fail(field, f"{micro_batches} micro-batches per step leave a last group of {micro_batches % group}, fewer than "
              f"pp = {p.pp} (Megatron-Core refuses it: dependency bubbles)")
    return group


def validate_layout(shape: ModelShape, spec: WorkloadSpec, cluster_gpus: int,
                    gpus_per_server: int | None = None) -> ParallelLayout:
    """Resolve ``spec.parallel`` for a job on ``cluster_gpus`` GPUs and check it; one :class:`SpecError`
    naming the field for the first problem.

    >>> shape = resolve_model(ModelSpec(preset="llama-70b"))
    >>> validate_layout(shape, WorkloadSpec(parallel={"tp": 8, "pp": 7}), 448, 8)
    Traceback (most recent call last):
    ...
    gpuwait.errors.SpecError: workload.parallel.pp: 7 does not divide 80 layers
    """
    p, path = spec.parallel, "workload.parallel"
    gpus = _job_gpus(spec, cluster_gpus)
    _check_tp(path, p.tp, shape, gpus_per_server, p.allow_tp_across_servers)
    dp = _data_parallel(path, p, gpus)
    chunks = _model_chunks(path, p)
    counts = split_layers(path, p, shape.layers, chunks)
    if p.cp > 1 and shape.seq_len % (2 * p.cp):
        # Megatron-Core's load-balanced causal ring gives each CP rank two of 2·cp sequence chunks
        _fail(f"{path}.cp", f"seq_len {shape.seq_len} is not a multiple of 2*cp = {2 * p.cp}")
    order = parse_rank_order(p.rank_order, f"{path}.rank_order")
    if p.ep > 1:
        _check_expert_parallel(path, p, shape, dp)
    sp = p.sequence_parallel if p.sequence_parallel is not None else p.tp > 1
    sp = sp and p.tp > 1
    if shape.is_moe and p.tp > 1 and not sp:
        _fail(f"{path}.sequence_parallel", "an MoE model with tp > 1 needs sequence parallelism (Megatron-LM requires it)")
    if p.zero == 3 and p.pp > 1:
        _fail(f"{path}.zero", f"ZeRO stage 3 gathers every layer's weights per micro-batch, which pipeline parallelism "
              f"(pp = {p.pp}) would repeat on every stage; expected zero 0, 1 or 2 with pp > 1 (as DeepSpeed and Megatron-LM)")
    if "prefetch_depth" in p.model_fields_set and p.zero != 3:
        _fail(f"{path}.prefetch_depth", f"only used with zero: 3 (FSDP's prefetch of layer weights); zero is {p.zero}")
    if p.ep_comm_overlap and not (shape.is_moe and p.ep > 1):
        _fail(f"{path}.ep_comm_overlap", "needs expert parallelism (an MoE model and ep > 1): there is no all-to-all to overlap")
    _check_fp8_param_gather(path, p, shape)
    # Megatron-Core overlaps P2P with compute only in its interleaved schedule (overlap_p2p_comm needs
    # virtual pipeline stages); 1F1B's send_forward_recv_backward blocks
    overlap_p2p = p.overlap_p2p_comm if p.overlap_p2p_comm is not None else chunks > 1
    global_batch = _global_batch(path, p, dp, chunks)
    group = _microbatch_group(path, p, chunks, global_batch // (dp * p.micro_batch), dp * p.micro_batch)
    return ParallelLayout(gpus=gpus, tp=p.tp, pp=p.pp, dp=dp, ep=p.ep, zero=p.zero, sequence_parallel=sp,
                          micro_batch=p.micro_batch, global_batch=global_batch, bucket_bytes=p.bucket,
                          overlap_grad_reduce=p.overlap_grad_reduce, schedule=p.schedule, virtual_stages=chunks,
                          recompute=p.recompute, cp=p.cp, stage_layer_counts=counts, tp_comm_overlap=p.tp_comm_overlap,
                          rank_order=order, prefetch_depth=p.prefetch_depth, overlap_p2p_comm=overlap_p2p,
                          ep_comm_overlap=p.ep_comm_overlap, microbatch_group_size=group,
                          fp8_param_gather=p.fp8_param_gather, grad_reduce_in_fp32=p.grad_reduce_in_fp32)


def _check_fp8_param_gather(path: str, p: ParallelSpec, shape: ModelShape) -> None:
    """fp8_param_gather needs fp8 matmuls and sharded weights to gather: TransformerEngine creates fp8
    weights only inside an fp8 model (fp8_model_init under --fp8), and Megatron-LM asserts a distributed
    optimizer or FSDP (megatron/training/arguments.py @d98e8a64, validate_args)."""
    if not p.fp8_param_gather:
        return
    if shape.precision != "fp8":
        _fail(f"{path}.fp8_param_gather", f"needs fp8 compute (workload.model.precision: fp8); precision is "
              f"{shape.precision}, whose weights stay {shape.precision}")
    if p.zero == 0:
        _fail(f"{path}.fp8_param_gather", "needs a distributed optimizer or FSDP (zero: 1, 2 or 3): with zero 0 no "
              "weights are gathered (Megatron-LM refuses --fp8-param-gather without --use-distributed-optimizer)")


# ------------------------------------------------------------------------------------------------ comm
def params_on_gpu(shape: ModelShape, layout: ParallelLayout, stage: int = 0) -> tuple[float, float]:
    """Parameters one GPU of ``stage`` holds before ZeRO sharding: ``(non_expert, expert)``.

    Matrices (and the vocab-parallel embedding and head) split over tp; routed experts over ep·tp;
    norms are replicated over tp. The embedding sits on the first stage, the head on the last.
    """
    dense = expert = 0.0
    for layer in stage_layers(shape, layout, stage):
        d, e = _layer_on_gpu(shape, layout, layer)
        dense += d
        expert += e
    if stage == 0:
        dense += _embedding_on_gpu(shape, layout)
    if stage == layout.pp - 1:
        dense += _head_on_gpu(shape, layout)
    return dense, expert


def params_in_shard(shape: ModelShape, layout: ParallelLayout, stage: int = 0) -> float:
    """Parameters of ``stage`` in one GPU's ZeRO shard: the non-expert ones split over the dp·cp ranks
    that reduce them, the routed experts over their expert-dp group (Megatron-Core's distributed optimizer
    shards each gradient buffer over the group that reduces it: the dense buffers over the data-parallel
    group with context parallelism, the expert buffers over the expert-data-parallel group,
    ``megatron/core/distributed/distributed_data_parallel.py``)."""
    return _in_shard(layout, *params_on_gpu(shape, layout, stage))


def _in_shard(layout: ParallelLayout, dense: float, expert: float) -> float:
    """One GPU's ZeRO shard of ``dense`` non-expert and ``expert`` routed-expert parameters (:func:`params_in_shard`)."""
    return dense / layout.weight_replicas + expert / layout.expert_dp


def _layer_on_gpu(shape: ModelShape, layout: ParallelLayout, layer: int) -> tuple[float, float]:
    """``(non_expert, expert)`` parameters of one layer on one GPU: matrices over tp, norms replicated,
    routed experts over ep·tp."""
    exp = shape.layer_expert_params(layer)
    nonexp = shape.layer_params(layer) - exp
    return (nonexp - shape.norm_params) / layout.tp + shape.norm_params, exp / (layout.tp * layout.ep)


def _embedding_on_gpu(shape: ModelShape, layout: ParallelLayout) -> float:
    """The vocab-parallel input embedding's slice (first stage)."""
    return shape.embedding_params / layout.tp


def _head_on_gpu(shape: ModelShape, layout: ParallelLayout) -> float:
    """The vocab-parallel LM head's slice and the final norm (last stage)."""
    return shape.vocab * shape.hidden / layout.tp + shape.hidden


def _layer_fp8_on_gpu(shape: ModelShape, layout: ParallelLayout, layer: int) -> tuple[float, float]:
    """Of :func:`_layer_on_gpu`, the ``(non_expert, expert)`` parameters kept in fp8 under
    ``fp8_param_gather``: the layer's matrices (attention, dense MLP or shared and routed experts), not its
    norms or router; ``(0, 0)`` without the switch."""
    if not layout.fp8_param_gather:
        return 0.0, 0.0
    dense, expert = _layer_on_gpu(shape, layout, layer)
    router = shape.hidden * shape.experts if shape.is_moe_layer(layer) else 0
    return dense - shape.norm_params - router / layout.tp, expert


def fp8_params_on_gpu(shape: ModelShape, layout: ParallelLayout, stage: int = 0) -> tuple[float, float]:
    """Of :func:`params_on_gpu`, the ``(non_expert, expert)`` parameters kept in fp8 (1 B) under
    ``fp8_param_gather``; ``(0, 0)`` without it.

    Megatron-Core builds each transformer layer inside TransformerEngine's ``fp8_model_init`` when
    ``fp8_param`` is set (``TransformerBlock.build_layer`` with ``get_fp8_context(..., is_init=True)``,
    megatron/core/fp8_utils.py @d98e8a64), which makes the weights of TE's linear modules fp8 tensors; the
    DDP buffers hold those as uint8 and the rest in bf16 (``group_params_for_buffers``,
    megatron/core/distributed/param_and_grad_buffer.py), so the distributed optimizer gathers 1 B per
    matrix weight and 2 B per norm, router, embedding and LM-head weight (the router is a plain parameter
    of ``TopKRouter``; the embedding and output layer are built outside the transformer block).
    """
    dense = expert = 0.0
    for layer in stage_layers(shape, layout, stage):
        d, e = _layer_fp8_on_gpu(shape, layout, layer)
        dense += d
        expert += e
    return dense, expert


def grad_bytes_per_param(layout: ParallelLayout) -> int:
    """Bytes of one gradient element in the buffer the data-parallel group reduces: bf16 (2), or fp32 (4)
    with ``grad_reduce_in_fp32``.

    Megatron-Core's DDP gives each buffer the gradient dtype ``torch.float if grad_reduce_in_fp32 else
    param.dtype`` (``group_params_for_buffers``), allocates it whole on every rank (``_ParamAndGradBuffer``:
    ``grad_data`` of ``numel`` elements, not a shard, also with the distributed optimizer) and all-reduces or
    reduce-scatters it in place (``start_grad_sync``), NVIDIA/Megatron-LM @d98e8a64
    megatron/core/distributed/param_and_grad_buffer.py; fp8 weights keep bf16 gradients without it.

    >>> grad_bytes_per_param(ParallelLayout(8, 1, 1, 8, 1, 1, False, 1, 8, 25 * 2**20, True, "1f1b"))
    2
    """
    return GRAD_FP32_BYTES if layout.grad_reduce_in_fp32 else TRAIN_BYTES


def weight_bytes(params: float, fp8_params: float) -> float:
    """Bytes of ``params`` training weights of which ``fp8_params`` are kept in fp8, the rest in bf16."""
    return TRAIN_BYTES * params - (TRAIN_BYTES - FP8_BYTES) * fp8_params


@dataclass(frozen=True)
class CommVolumes:
    """Bytes each communication of a training step moves, for one GPU of one pipeline stage.

    Sizes follow nccl-tests (see the module docstring); counts say how often a group runs each one.
    """

    activation_bytes: float
    """One micro-batch's activation tensor b·s·h·2 B (the unit of TP and PP traffic)."""
    tp_forward: tuple[tuple[str, float], ...]
    """Per layer per micro-batch forward: (collective, size_bytes) — 2 all_reduce, or 2 all_gather + 2
    reduce_scatter with sequence parallelism (Megatron-LM; Korthikanti et al. 2022 §4.2.2). Empty for tp = 1."""
    tp_backward: tuple[tuple[str, float], ...]
    """The same per layer per micro-batch backward."""
    pp_send_bytes: float
    """Per micro-batch across each stage boundary, each way (activations forward, their gradients backward);
    b·s·h·2 B, divided by tp with sequence parallelism (each TP rank sends its slice). 0 for pp = 1."""
    dp_grad_collective: str
    """'all_reduce' (ZeRO 0) or 'reduce_scatter' (ZeRO ≥ 1, the distributed-optimizer way)."""
    dp_grad_bytes: float
    """Non-expert gradient bytes per GPU reduced over its dp group per step (2 B per parameter; 4 B with
    ``grad_reduce_in_fp32``, :func:`grad_bytes_per_param`)."""
    dp_param_allgather_bytes: float
    """ZeRO 1 and 2: updated non-expert weights all-gathered over dp (x cp) after the optimizer step, bf16
    (fp8 matrices with ``fp8_param_gather``, :func:`weight_bytes`); 0 otherwise."""
    expert_dp_grad_bytes: float
    """Routed-expert gradient bytes per GPU reduced (``dp_grad_collective``) over its expert-dp group per
    step, not over dp: Megatron-Core's DDP keeps expert parameters in buffers of their own, reduced over the
    expert-data-parallel group (``expert_parallel_buffers`` over ``intra_expt_dp_group``,
    megatron/core/distributed/distributed_data_parallel.py). 0 when that group is one rank."""
    expert_dp_param_allgather_bytes: float
    """ZeRO 1 and 2: the updated expert weights all-gathered over the expert-dp group they are sharded on
    (the distributed optimizer gathers each buffer over its own group); 0 otherwise."""
    zero3_layer_allgather_bytes: float
    """ZeRO 3: one layer's share of the non-expert weights this GPU holds (its tp slice, gathered size),
    all-gathered over dp (x cp) before the layer's forward and again before its backward, its gradients
    reduce-scattered (``zero3_layer_grad_bytes``; the same size unless ``fp8_param_gather`` gathers fp8). The share is every non-expert parameter on the GPU over the
    stage's layers: the embedding and LM head are sharded too and travel with the layers (spread
    evenly), so a micro-batch moves 3x the GPU's parameter bytes (Rajbhandari et al. 2020, §7.2.2)."""
    ep_all_to_all_bytes: float
    """Per MoE layer per micro-batch, one rank's send buffer of each all_to_all: tokens·top_k·h·2 B / tp
    (each TP rank routes its sequence slice); 4 per layer per micro-batch: dispatch and combine, forward
    and backward. 1/ep of it stays on the GPU. 0 without expert parallelism."""
    moe_layers_in_stage: int
    zero3_layer_expert_allgather_bytes: float = 0.0
    """ZeRO 3: the same for the routed experts, which are sharded over their expert-data-parallel group
    (the dp·cp / ep ranks holding the same experts, Megatron-Core's expert-data-parallel group) and
    gathered and reduce-scattered over it; 0 when that group is one rank (ep = dp: nothing to shard)."""
    zero3_layer_grad_bytes: float = 0.0
    """ZeRO 3: one layer's share of the non-expert gradients (bf16, fp32 with ``grad_reduce_in_fp32``),
    reduce-scattered over dp (x cp)."""
    zero3_layer_expert_grad_bytes: float = 0.0
    """ZeRO 3: the same for the routed experts' gradients, over their expert-dp group."""
    cp_kv_bytes: float = 0.0
    """Context parallelism: one ring step's K and V block per layer per micro-batch, sent to the next CP
    rank (``b·(s/cp)·2·kv_heads·head_dim·2 B``, K/V heads split over tp). Forward takes cp − 1 steps per
    layer, backward 2(cp − 1) (K/V again and their gradients), as ring attention does (arXiv:2310.01889)."""


def comm_volumes(shape: ModelShape, layout: ParallelLayout, micro_batch: int | None = None, stage: int = 0) -> CommVolumes:
    """Communication volumes of a training step for one GPU of ``stage``.

    >>> shape = resolve_model(ModelSpec(preset="llama-8b"))
    >>> layout = ParallelLayout(16, 8, 1, 2, 1, 0, False, 1, 2, 25 * 2**20, True, "1f1b")
    >>> v = comm_volumes(shape, layout)
    >>> v.tp_forward == (("all_reduce", 8192 * 4096 * 2.0),) * 2
    True
    """
    b = micro_batch or layout.micro_batch
    local_seq = shape.seq_len / layout.cp  # context parallelism splits every sequence over cp GPUs
    act = b * local_seq * shape.hidden * TRAIN_BYTES
    tp_fwd: tuple[tuple[str, float], ...]
    tp_bwd: tuple[tuple[str, float], ...]
    if layout.tp == 1:
        tp_fwd = tp_bwd = ()
    elif layout.sequence_parallel:
        tp_fwd = (("all_gather", act), ("reduce_scatter", act)) * 2
        tp_bwd = (("all_gather", act), ("reduce_scatter", act)) * 2
    else:
        tp_fwd = tp_bwd = (("all_reduce", act),) * 2
    pp_send = 0.0 if layout.pp == 1 else act / (layout.tp if layout.sequence_parallel else 1)
    dense, expert = params_on_gpu(shape, layout, stage)
    grad_d, grad_e = dense * grad_bytes_per_param(layout), expert * grad_bytes_per_param(layout)
    fp8_d, fp8_e = fp8_params_on_gpu(shape, layout, stage)
    weights_d, weights_e = weight_bytes(dense, fp8_d), weight_bytes(expert, fp8_e)
    layers = stage_layers(shape, layout, stage)
    moe_in_stage = sum(shape.is_moe_layer(layer) for layer in layers)
    z3 = layout.zero == 3
    replicas = layout.weight_replicas
    # experts are sharded over their expert-dp replicas; with ep = dp they have none and stay put
    z3_layers = max(len(layers), 1)
    ep_bytes = b * local_seq * shape.top_k * shape.hidden * TRAIN_BYTES / layout.tp if layout.ep > 1 else 0.0
    kv_width = shape.kv_heads * shape.head_dim / min(layout.tp, shape.kv_heads)
    cp_kv = b * local_seq * 2 * kv_width * TRAIN_BYTES if layout.cp > 1 else 0.0
    return CommVolumes(
        activation_bytes=act,
        tp_forward=tp_fwd,
        tp_backward=tp_bwd,
        pp_send_bytes=pp_send,
        dp_grad_collective="all_reduce" if layout.zero == 0 else "reduce_scatter",
        dp_grad_bytes=grad_d if replicas > 1 else 0.0,
        dp_param_allgather_bytes=weights_d if layout.zero in (1, 2) and replicas > 1 else 0.0,
        expert_dp_grad_bytes=grad_e if layout.expert_dp > 1 else 0.0,
        expert_dp_param_allgather_bytes=weights_e if layout.zero in (1, 2) and layout.expert_dp > 1 else 0.0,
        zero3_layer_allgather_bytes=weights_d / z3_layers if z3 and replicas > 1 else 0.0,
        zero3_layer_expert_allgather_bytes=weights_e / z3_layers if z3 and layout.expert_dp > 1 else 0.0,
        zero3_layer_grad_bytes=grad_d / z3_layers if z3 and replicas > 1 else 0.0,
        zero3_layer_expert_grad_bytes=grad_e / z3_layers if z3 and layout.expert_dp > 1 else 0.0,
        ep_all_to_all_bytes=ep_bytes,
        moe_layers_in_stage=moe_in_stage,
        cp_kv_bytes=cp_kv,
    )


# ------------------------------------------------------------------------------------------------ memory
def activation_bytes_per_layer(shape: ModelShape, layout: ParallelLayout, layer: int | None = None,
                               micro_batch: int | None = None) -> float:
    """Activations one layer keeps for backward, per micro-batch per GPU.

    Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models", §4.1), term by
    term, in units of ``s·b·h`` bytes (bf16): the two norms' inputs (4), the attention's and the MLP's inputs
    (2 + 2), Q (2), K and V (``4·kv_heads/heads``: grouped-query attention keeps fewer), the attention
    output (2), the SwiGLU MLP's two first-matrix outputs and the second matrix's input (``6·ffn/h``), and a
    1-byte dropout mask after the attention and after the MLP when ``hidden_dropout`` > 0. For GPT's
    multi-head attention, 4h GeLU (written as SwiGLU of 8h/3) and dropout this is their ``34`` with
    sequence parallelism (``10 + 24/tp`` without: norms, the two inputs and the masks are then whole on
    every rank). It is their selective-recomputation figure, and what ``recompute: none`` keeps with flash
    attention, which never stores the ``5·a·s/h`` score matrix (Dao et al. 2022). An MoE layer keeps the
    router's input, then per routed expert a token runs its dispatched copy (2) and that expert's MLP
    (``6·expert_ffn/h``), and the shared experts' MLPs. ``recompute: full`` keeps only the layer's input:
    ``2·s·b·h`` (divided by tp with sequence parallelism).

    >>> shape = resolve_model(ModelSpec(preset="llama-70b"))  # GQA 8 of 64, ffn 3.5h, no dropout
    >>> layout = ParallelLayout(8, 1, 1, 8, 1, 0, False, 1, 8, 25 * 2**20, True, "1f1b")
    >>> activation_bytes_per_layer(shape, layout) / (8192 * 8192)
    33.5
    """
    if layer is None:
        layer = shape.dense_layers if shape.is_moe else 0
    sbh = shape.seq_len / layout.cp * (micro_batch or layout.micro_batch) * shape.hidden
    if layout.recompute == "full":
        return 2.0 * sbh / (layout.tp if layout.sequence_parallel else 1)
    h = shape.hidden
    masks = 2.0 if shape.hidden_dropout > 0 else 0.0
    whole = 4.0 + 2.0 + 2.0 + masks  # norms' inputs, attention and MLP inputs, dropout masks
    q = 2.0 * shape.heads * shape.head_dim / h  # Q, and the attention's output of the same width
    kv = 4.0 * shape.kv_heads * shape.head_dim / h
    if shape.is_moe_layer(layer):
        mlp = (shape.top_k * (2.0 + 6.0 * shape.expert_ffn_hidden / h)
               + shape.shared_experts * 6.0 * shape.expert_ffn_hidden / h)
    else:
        mlp = 6.0 * shape.ffn_hidden / h
    split = 2.0 * q + mlp
    # K and V heads split over tp only as far as there are heads; past that every rank keeps its copy
    kv_per_rank = kv / min(layout.tp, shape.kv_heads)
    if layout.sequence_parallel or layout.tp == 1:
        return sbh * ((whole + split) / layout.tp + kv_per_rank)
    return sbh * (whole + split / layout.tp + kv_per_rank)


def memory_per_gpu_bytes(shape: ModelShape, layout: ParallelLayout, precision: str | None = None,
                         stage: int | None = None) -> dict[str, float]:
    """Memory of one GPU of ``stage`` (default: the stage that needs most), bytes by part.

    ``weights`` and ``grads`` (bf16, 2 B/param; the layers' matrices 1 B with ``fp8_param_gather``, which keeps
    no bf16 copy of them; gradients 4 B with ``grad_reduce_in_fp32``), ``optimizer`` (Adam, 12 B/param), sharded over dp by ZeRO
    stage ≥ 3, ≥ 2, ≥ 1 respectively (experts over dp·cp / ep); ``activations`` of the micro-batches in flight
    at the schedule's peak, each holding its model chunk's layers (:func:`~gpuwait.workload.program.in_flight_counts`;
    1F1B: stage i holds min(pp − i, micro-batches); interleaved 1F1B: Megatron-Core's warm-up
    2 (pp − i − 1) + (v − 1) N forwards plus one, each a chunk of 1/v of the stage, which on the first
    stage is Korthikanti et al. 2022's L (1 + (pp − 1) / (pp v)) layers' worth, §4.2.3); ``logits`` the fp32
    logits of the loss on the last stage (4·b·s·vocab / tp). ``precision`` alone does not change
    training memory (see the module docstring).

    >>> shape = resolve_model(ModelSpec(preset="llama-8b"))
    >>> layout = ParallelLayout(8, 1, 1, 8, 1, 3, False, 1, 8, 25 * 2**20, True, "1f1b")
    >>> mem = memory_per_gpu_bytes(shape, layout)
    >>> mem["optimizer"] == 12 * shape.params / 8, mem["activations"] == 34 * 8192 * 4096 * 32
    (True, True)
    """
    if stage is None:
        return max((memory_per_gpu_bytes(shape, layout, precision, s) for s in range(layout.pp)),
                   key=lambda parts: sum(parts.values()))
    dense, expert = params_on_gpu(shape, layout, stage)
    shard = _in_shard(layout, dense, expert)
    fp8_d, fp8_e = fp8_params_on_gpu(shape, layout, stage)
    weights_d, weights_e = weight_bytes(dense, fp8_d), weight_bytes(expert, fp8_e)
    weights = (_in_shard(layout, weights_d, weights_e) + zero3_gathered_bytes(shape, layout, stage)
               if layout.zero >= 3 else weights_d + weights_e)

    def sharded(min_stage: int) -> float:
        return shard if layout.zero >= min_stage else dense + expert

    layers = stage_layers(shape, layout, stage)
    per_chunk = [sum(activation_bytes_per_layer(shape, layout, layer) for layer in chunk)
                 for chunk in chunk_layers(shape, layout, stage)]
    acts = max(sum(n * chunk_bytes for n, chunk_bytes in zip(held, per_chunk))
               for held in in_flight_counts(layout.pp, stage, layout.micro_batches, layout.virtual_stages,
                                            layout.microbatch_group_size))
    if layout.recompute == "full" and len(layers):
        # backward of a layer re-creates its whole activation set once (one layer at a time)
        acts += activation_bytes_per_layer(shape, replace(layout, recompute="none"), layers[-1])
    logits = (4.0 * layout.micro_batch * shape.seq_len / layout.cp * shape.vocab / layout.tp
              if stage == layout.pp - 1 else 0.0)
    return {
        "weights": weights,
        "grads": grad_bytes_per_param(layout) * sharded(2),
        "optimizer": ADAM_BYTES_PER_PARAM * sharded(1),
        "activations": acts,
        "logits": logits,
    }


def zero3_gathered_params(shape: ModelShape, layout: ParallelLayout, stage: int) -> float:
    """Parameters one GPU of ``stage`` holds unsharded at once under ZeRO-3, beside its shards (0 otherwise).

    FSDP un-shards a unit (here: the input embedding on the first stage, each transformer layer, the
    final norm and LM head on the last stage) while it runs and frees it after, and gathers the
    ``prefetch_depth`` units after it (before it, in backward) ahead of time. Peak memory is the
    sharded model plus the largest fully materialized units (Zhao et al. 2023, "PyTorch FSDP",
    arXiv:2304.11277, §3.2.1 and §3.4.1), so this is the largest sum of ``1 + prefetch_depth``
    consecutive units in the order they run; the embedding and LM head, vocab x hidden / tp each,
    are often the largest.

    >>> shape = resolve_model(ModelSpec(preset="llama-8b"))
    >>> layout = ParallelLayout(8, 1, 1, 8, 1, 3, False, 1, 8, 25 * 2**20, True, "1f1b")
    >>> zero3_gathered_params(shape, layout, 0) == shape.head_params + shape.dense_layer_params
    True
    """
    return _largest_window([params for params, _fp8 in _zero3_units(shape, layout, stage)], layout.prefetch_depth)


def zero3_gathered_bytes(shape: ModelShape, layout: ParallelLayout, stage: int) -> float:
    """Bytes of :func:`zero3_gathered_params`: bf16, the layers' matrices in fp8 with ``fp8_param_gather``
    (Megatron-FSDP gathers and keeps them in fp8, ``init_param_with_fp8``), the largest such window.

    >>> shape = resolve_model(ModelSpec(preset="llama-8b"))
    >>> layout = ParallelLayout(8, 1, 1, 8, 1, 3, False, 1, 8, 25 * 2**20, True, "1f1b")
    >>> zero3_gathered_bytes(shape, layout, 0) == 2 * zero3_gathered_params(shape, layout, 0)
    True
    """
    return _largest_window([weight_bytes(*unit) for unit in _zero3_units(shape, layout, stage)], layout.prefetch_depth)


def _zero3_units(shape: ModelShape, layout: ParallelLayout, stage: int) -> list[tuple[float, float]]:
    """FSDP's units of ``stage`` in the order they run, each ``(params, fp8_params)`` on one GPU; none
    outside ZeRO-3 or with one replica (nothing to gather)."""
    if layout.zero != 3 or layout.weight_replicas == 1:
        return []
    units = [(_embedding_on_gpu(shape, layout), 0.0)] if stage == 0 else []
    # experts are gathered over their expert-dp group: with none (ep = dp) they stay whole, in the shards
    gathered_experts = layout.expert_dp > 1
    for layer in stage_layers(shape, layout, stage):
        dense, expert = _layer_on_gpu(shape, layout, layer)
        fp8_dense, fp8_expert = _layer_fp8_on_gpu(shape, layout, layer)
        units.append((dense + (expert if gathered_experts else 0.0), fp8_dense + (fp8_expert if gathered_experts else 0.0)))
    if stage == layout.pp - 1:
        units.append((_head_on_gpu(shape, layout), 0.0))
    return units


def _largest_window(units: list[float], prefetch_depth: int) -> float:
    """The largest sum of ``1 + prefetch_depth`` consecutive units (all of them when fewer; 0 for none)."""
    window = min(1 + prefetch_depth, len(units))
    return max((sum(units[i:i + window]) for i in range(len(units) - window + 1)), default=0.0)


def _gib(value: float) -> str:
    return f"{value / GiB:.1f} GiB"


def check_fits(shape: ModelShape, layout: ParallelLayout | InferenceLayout, gpu: GpuShape) -> dict[str, float]:
    """Raise :class:`SpecError` when one GPU's memory is too small; return the parts otherwise."""
    if isinstance(layout, InferenceLayout):
        parts = inference_memory_per_gpu_bytes(shape, layout)
        hint = "raise inference.tp or pp, or lower batch or the token counts"
    else:
        parts = memory_per_gpu_bytes(shape, layout)
        hint = "raise tp or pp, shard with zero: 1..3, recompute: selective or full, or lower micro_batch"
    need = sum(parts.values())
    if need > gpu.memory_bytes:
        detail = ", ".join(f"{k} {_gib(v)}" for k, v in parts.items() if v)
        text = (f"workload: model needs {_gib(need)} per GPU but the GPU has {_gib(gpu.memory_bytes)} "
                f"({_gib(need - gpu.memory_bytes)} over)")
        raise SpecError(text, problems=[text], hint=f"{detail}; {hint}")
    return parts


def checkpoint_bytes(shape: ModelShape) -> float:
    """Bytes of a whole-job checkpoint: bf16 weights and the fp32 Adam state, 14 B per parameter."""
    return float(CHECKPOINT_BYTES_PER_PARAM * shape.params)


# ------------------------------------------------------------------------------------------------ inference
@dataclass(frozen=True)
class InferenceLayout:
    """An inference service resolved: ``replicas`` copies of the model, each on tp·pp GPUs."""

    gpus: int
    tp: int
    pp: int
    replicas: int
    batch: int            # sequences per replica
    prompt_tokens: int
    output_tokens: int
    decode_layer_overhead_s: float = 0.0  # fixed time per layer of a decode step (the serving engine's)
    decode_step_overhead_s: float = 0.0   # fixed time per decode step whatever the layers (the engine's)


def resolve_engine_overheads_s(inf: InferenceSpec) -> tuple[float, float]:
    """Fixed decode time per layer and per step: the engine preset's, each part replaced by
    ``inference.decode_layer_overhead`` / ``inference.decode_step_overhead`` when given.

    >>> resolve_engine_overheads_s(InferenceSpec(engine="vllm")), resolve_engine_overheads_s(InferenceSpec())
    ((5e-05, 0.00071), (0.0, 0.0))
    >>> resolve_engine_overheads_s(InferenceSpec(engine="vllm", decode_layer_overhead=10e-6))
    (1e-05, 0.00071)

    An unknown name is refused as the file loads (``InferenceSpec.engine`` lists the presets).
    """
    preset = ENGINE_PRESETS[inf.engine]
    layer_s = preset.decode_layer_overhead_s if inf.decode_layer_overhead is None else inf.decode_layer_overhead
    step_s = preset.decode_step_overhead_s if inf.decode_step_overhead is None else inf.decode_step_overhead
    return layer_s, step_s


def validate_inference_layout(shape: ModelShape, spec: WorkloadSpec, cluster_gpus: int,
                              gpus_per_server: int | None = None) -> InferenceLayout:
    """Resolve ``spec.inference`` and check it like :func:`validate_layout`."""
    inf, path = spec.inference or InferenceSpec(), "workload.inference"
    gpus = _job_gpus(spec, cluster_gpus)
    _check_tp(path, inf.tp, shape, gpus_per_server, inf.allow_tp_across_servers)
    if gpus % (inf.tp * inf.pp):
        _fail(path, f"tp*pp = {inf.tp}*{inf.pp} = {inf.tp * inf.pp} does not divide the job's {gpus} GPUs")
    if shape.layers % inf.pp:
        _fail(f"{path}.pp", f"{inf.pp} does not divide {shape.layers} layers")
    layer_s, step_s = resolve_engine_overheads_s(inf)
    return InferenceLayout(gpus=gpus, tp=inf.tp, pp=inf.pp, replicas=gpus // (inf.tp * inf.pp), batch=inf.batch,
                           prompt_tokens=inf.prompt_tokens, output_tokens=inf.output_tokens,
                           decode_layer_overhead_s=layer_s, decode_step_overhead_s=step_s)


def weight_bytes_per_param(precision: str) -> int:
    """Inference weight (and KV-cache) bytes per element: 1 for fp8, else 2."""
    return _PRECISION_BYTES[precision]


def prefill_flops(shape: ModelShape, prompt_tokens: int) -> float:
    """Forward FLOPs of one sequence's prompt: ``2·N·T + 2·layers·hidden·T·(T+1)``.

    Causal attention: token i attends to the i tokens up to itself, so the prefill costs exactly what
    decoding the prompt token by token would (the sum of :func:`decode_flops_per_token` over 1..T).
    Inference counts what the kernels do; training keeps Megatron's full-matrix convention.
    """
    t = prompt_tokens
    return 2.0 * matmul_params(shape) * t + 2.0 * shape.layers * shape.hidden * t * (t + 1)


def decode_passes(output_tokens: int) -> int:
    """Decode passes that generate ``output_tokens`` tokens: the prefill pass emits the first (it is the time to
    first token), each decode pass one more, so ``output_tokens - 1``; TPOT = (latency - TTFT) / (output_len - 1),
    as vLLM's serving benchmark (``vllm bench serve``) and SGLang's count it.

    >>> decode_passes(256), decode_passes(1)
    (255, 0)
    """
    return output_tokens - 1


def decode_flops_per_token(shape: ModelShape, context_tokens: int) -> float:
    """Forward FLOPs of one decoded token attending to ``context_tokens`` tokens (the cached ones and
    itself): ``2·N + 4·layers·hidden·context`` (QKᵀ and AV over the context).
    """
    return 2.0 * matmul_params(shape) + 4.0 * shape.layers * shape.hidden * context_tokens


def kv_cache_bytes_per_token(shape: ModelShape) -> float:
    """K and V of one token in every layer: ``2·layers·kv_heads·head_dim·bytes``."""
    return 2.0 * shape.layers * shape.kv_heads * shape.head_dim * weight_bytes_per_param(shape.precision)


def decode_weight_bytes(shape: ModelShape, batch: int = 1) -> float:
    """Weight bytes one decode step of ``batch`` sequences reads from HBM (whole model, all GPUs).

    Dense: every weight. MoE: the non-expert weights and, per MoE layer, the experts at least one of the
    batch's tokens picks — ``experts·(1 − (1 − top_k/experts)^batch)`` on average with uniform routing.
    The input embedding reads one row per token, counted as nothing.
    """
    per = weight_bytes_per_param(shape.precision)
    total: float = shape.params - shape.embedding_params
    if shape.is_moe:
        touched = shape.experts * (1.0 - (1.0 - shape.top_k / shape.experts) ** batch)
        total -= shape.moe_layers * (shape.experts - touched) * shape.expert_params
    return float(total * per)


def decode_step_time_s(shape: ModelShape, gpu: GpuShape, layout: InferenceLayout, context_tokens: int) -> float:
    """Time of one decode step (one token for each of the batch's sequences) through one replica, with no
    communication: ``max(FLOPs / (tp·achieved FLOP/s), bytes read / (tp·streamed HBM bytes/s))``, summed
    over the pp stages it passes one after another (so pp does not shorten it). Bytes read = weights + the
    batch's KV cache, at the HBM rate streaming kernels reach (:attr:`GpuShape.streamed_Bps`). Then every
    layer adds the engine's fixed time per layer (``layout.decode_layer_overhead_s``) and the step its fixed
    time per step (``layout.decode_step_overhead_s``, :class:`EnginePreset`): a small batch's step is its
    weights' read plus launch and kernel gaps and the engine's own work, which neither bytes nor tp shorten.
    """
    flops = layout.batch * decode_flops_per_token(shape, context_tokens)
    read = decode_weight_bytes(shape, layout.batch) + layout.batch * context_tokens * kv_cache_bytes_per_token(shape)
    return (_roofline_s(gpu, layout.tp, flops, read) + shape.layers * layout.decode_layer_overhead_s
            + layout.decode_step_overhead_s)


def _roofline_s(gpu: GpuShape, tp: int, flops: float, hbm_bytes: float) -> float:
    """The longer of ``flops`` at the achieved rate and ``hbm_bytes`` at the streamed HBM rate, split over tp."""
    return max(flops / (tp * gpu.achieved_flops), hbm_bytes / (tp * gpu.streamed_Bps))


def prefill_time_s(shape: ModelShape, gpu: GpuShape, layout: InferenceLayout) -> float:
    """Time of the prefill pass (every prompt token of the batch) through one replica, with no
    communication: ``max(FLOPs / (tp·achieved FLOP/s), bytes / (tp·streamed HBM bytes/s))`` summed over the
    pp stages, as :func:`decode_step_time_s`. A pass reads every weight its tokens use once and writes their
    K and V, so a short prompt is bound by the weights' bytes, not its FLOPs (the roofline's memory side).

    >>> shape = resolve_model(ModelSpec(preset="llama-8b"))
    >>> gpu = resolve_gpu(ComputeSpec(gpu="H100-SXM"))
    >>> short, long = (InferenceLayout(1, 1, 1, 1, 1, n, 2) for n in (16, 4096))
    >>> moved = decode_weight_bytes(shape, 16) + 16 * kv_cache_bytes_per_token(shape)
    >>> prefill_time_s(shape, gpu, short) == moved / gpu.streamed_Bps  # 16 tokens: the weights' bytes bind
    True
    >>> prefill_time_s(shape, gpu, long) == prefill_flops(shape, 4096) / gpu.achieved_flops  # 4096: the FLOPs
    True
    """
    tokens = layout.batch * layout.prompt_tokens
    flops = layout.batch * prefill_flops(shape, layout.prompt_tokens)
    moved = decode_weight_bytes(shape, tokens) + tokens * kv_cache_bytes_per_token(shape)
    return _roofline_s(gpu, layout.tp, flops, moved)


def inference_tp_all_reduce_bytes(shape: ModelShape, tokens: int) -> float:
    """Size of one TP all_reduce for ``tokens`` tokens (bf16 activations): ``tokens·hidden·2`` bytes.
    Two per layer per forward (after attention and after the MLP); one token per sequence in decode.
    A pipeline boundary sends the same hidden states: fp8 serving keeps weights and KV cache in one
    byte, the activations between layers in the model dtype (TensorRT-LLM, vLLM).
    """
    return float(tokens * shape.hidden * TRAIN_BYTES)


def inference_memory_per_gpu_bytes(shape: ModelShape, layout: InferenceLayout) -> dict[str, float]:
    """Memory of one GPU of a replica: its weight slice and the KV cache of the batch at full length.

    KV heads split over tp (replicated when tp > kv_heads, as vLLM and Megatron do).
    """
    weights = shape.params * weight_bytes_per_param(shape.precision) / (layout.tp * layout.pp)
    kv_split = min(layout.tp, shape.kv_heads)
    tokens = layout.batch * (layout.prompt_tokens + layout.output_tokens)
    kv = tokens * kv_cache_bytes_per_token(shape) / (kv_split * layout.pp)
    return {"weights": weights, "kv_cache": kv}
