"""Scenario models of a workload: the model, how it is split over GPUs, the GPUs, data and checkpoints.

Configuration holds no logic: these are frozen, documented values. Resolving a ``preset`` (model or
GPU), deriving ``dp`` and checking that the layout fits the cluster is :mod:`gpuwait.workload.model`'s job.

>>> w = WorkloadSpec(model={"preset": "llama-70b"}, parallel={"tp": 8, "pp": 4})
>>> w.model.preset, w.parallel.tp, w.parallel.bucket
('llama-70b', 8, 26214400.0)
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator

from gpuwait.spec.cluster import SpecModel
from gpuwait.spec.types import PositiveSizeBytes, RateBps, RateOrZeroBps, SizeBytes

Precision = Literal["bf16", "fp16", "fp8"]
#: The serving-engine presets (gpuwait.workload.presets.ENGINE_PRESETS, which a test keeps in step with these
#: names): a Literal so `gpuwait schema` lists them and a wrong name is refused as the file loads
ServingEngine = Literal["none", "vllm", "vllm-v1", "sglang", "sglang-eager"]

#: the most GPUs a cluster holds (``servers`` <= 100,000 of at most 72 GPUs): the bound of every rank count
MAX_GPUS = 100_000 * 72
#: serving is timed per batch in closed form with no variation, so every batch takes the same time
INFERENCE_STEPS = "an inference workload serves one batch (in closed form, every batch alike); expected 1"

#: steps simulated at most; what a run may allocate is checked separately (see :mod:`gpuwait.runner.cost`)
MAX_STEPS = 1_000_000


class ModelSpec(SpecModel):
    """A decoder-only transformer: a preset, or its shape field by field (explicit fields override the preset).

    Attention is grouped-query (``kv_heads`` ≤ ``heads``), the MLP is SwiGLU (three matrices), norms
    are RMSNorm. ``experts`` > 1 makes every layer after the first ``dense_layers`` a mixture of
    experts: ``experts`` routed experts of ``expert_ffn_hidden`` of which ``top_k`` run per token,
    plus ``shared_experts`` that every token runs.
    """

    preset: str | None = Field(None, description="Start from this model preset: llama-8b, llama-70b, llama-405b, mixtral-8x7b, deepseek-moe-16b.")
    layers: int | None = Field(None, ge=1, le=10_000, description="Transformer layers (count).")
    hidden: int | None = Field(None, ge=1, le=1_000_000, description="Model (hidden) dimension (elements).")
    ffn_hidden: int | None = Field(None, ge=1, le=10_000_000, description="Inner dimension of a dense SwiGLU MLP (elements).")
    heads: int | None = Field(None, ge=1, le=100_000, description="Query attention heads (count); head dimension = hidden / heads.")
    kv_heads: int | None = Field(None, ge=1, le=100_000, description="Key/value heads (count; = heads for multi-head attention, fewer for GQA).")
    vocab: int | None = Field(None, ge=1, le=100_000_000, description="Vocabulary size (tokens).")
    experts: int | None = Field(None, ge=1, le=100_000, description="Routed experts per MoE layer (count; 1 = dense model).")
    top_k: int | None = Field(None, ge=1, le=100_000, description="Routed experts each token runs (count).")
    expert_ffn_hidden: int | None = Field(None, ge=1, le=10_000_000, description="Inner dimension of one expert's SwiGLU MLP (elements); default ffn_hidden.")
    shared_experts: int | None = Field(None, ge=0, le=100_000, description="Experts every token runs besides the routed ones (count, each of expert_ffn_hidden).")
    dense_layers: int | None = Field(None, ge=0, le=10_000, description="MoE models: the first layers keep a dense MLP of ffn_hidden (count).")
    seq_len: int | None = Field(None, ge=1, le=100_000_000, description="Sequence length of a training sample (tokens); default the preset's, else 4096.")
    hidden_dropout: float | None = Field(None, ge=0, lt=1, description="Dropout probability after the attention and the MLP (Megatron's --hidden-dropout); > 0 keeps a 1-byte mask of each for backward. Default the preset's (0 for the Llama, Mixtral and DeepSeek presets), else Megatron-LM's 0.1.")
    precision: Precision = Field("bf16", description="Math precision of the matmuls: bf16, fp16 or fp8 (fp8 doubles peak FLOP/s; training keeps bf16 weights, gradients and activations).")


class ParallelSpec(SpecModel):
    """How a training job splits over GPUs: tensor, pipeline, data and expert parallelism, and ZeRO."""

    tp: int = Field(1, ge=1, le=MAX_GPUS, description="Tensor-parallel degree (GPUs sharing each layer's matrices).")
    pp: int = Field(1, ge=1, le=MAX_GPUS, description="Pipeline-parallel degree (stages of consecutive layers).")
    dp: int | None = Field(None, ge=1, le=MAX_GPUS, description="Data-parallel degree; default the job's GPUs / (tp * pp).")
    ep: int = Field(1, ge=1, le=MAX_GPUS, description="Expert-parallel degree, inside the dp x cp ranks that hold the same weights (experts split over ep of them; it divides dp x cp, as in Megatron-Core); 1 = every dp rank holds every expert.")
    zero: Literal[0, 1, 2, 3] = Field(0, description="ZeRO stage over dp: 0 = DDP, 1 = optimizer state sharded, 2 = + gradients, 3 = + weights (FSDP).")
    sequence_parallel: bool | None = Field(None, description="Megatron sequence parallelism: TP all-reduces become reduce-scatter + all-gather and norm/dropout activations are split; default on when tp > 1.")
    micro_batch: int = Field(1, ge=1, le=1_000_000_000, description="Sequences per micro-batch on one dp rank.")
    global_batch: int | None = Field(None, ge=1, le=1_000_000_000_000, description="Sequences per optimizer step over the whole job; default dp * micro_batch * (4 * pp with pipelining, else 1).")
    bucket: PositiveSizeBytes = Field(25 * 2.0**20, description="DDP gradient bucket (bytes); PyTorch's bucket_cap_mb=25 is 25 MiB.")
    overlap_grad_reduce: bool = Field(True, description="Start each bucket's gradient reduction as soon as backward fills it (hidden under the rest of backward).")
    schedule: Literal["1f1b", "interleaved-1f1b"] = Field("1f1b", description="Pipeline schedule: '1f1b' = one forward, one backward (PipeDream-flush / Megatron default); 'interleaved-1f1b' = each stage holds `virtual_stages` model chunks, shrinking the bubble that many times (Megatron's virtual pipeline).")
    virtual_stages: int = Field(2, ge=1, le=10_000, description="interleaved-1f1b: model chunks per pipeline stage (count); the layers must divide into pp * virtual_stages chunks.")
    microbatch_group_size_per_vp_stage: int | None = Field(None, ge=1, le=1_000_000_000, description="interleaved-1f1b: micro-batches each model chunk runs in a row (count; Megatron-Core's --microbatch-group-size-per-virtual-pipeline-stage, the N Llama 3 made tunable, Dubey et al. 2024 §3.3.2); from pp (depth-first, the default) to the micro-batches per step (breadth-first). Warm-up runs 2 (pp - stage - 1) + (virtual_stages - 1) N forwards, so a larger N holds more activations.")
    allow_tp_across_servers: bool = Field(False, description="Allow a tensor-parallel group larger than one server (its all-reduces then cross the scale-out network).")
    cp: int = Field(1, ge=1, description="Context-parallel degree (Megatron's --context-parallel-size): each sequence is split over cp GPUs; attention exchanges K/V blocks around the cp ring every layer (ring attention, Liu et al. 2023, arXiv:2310.01889), overlapped with the attention compute as Megatron-Core/TransformerEngine do.")
    first_stage_layers: int | None = Field(None, ge=0, description="Transformer layers on the first pipeline stage (Megatron's --decoder-first-pipeline-num-layers); the rest split evenly over the other stages.")
    last_stage_layers: int | None = Field(None, ge=0, description="Transformer layers on the last pipeline stage (Megatron's --decoder-last-pipeline-num-layers).")
    account_for_embedding: bool = Field(False, description="Count the input embedding as one layer when splitting layers over stages, so the first stage holds one transformer layer fewer (Megatron's --account-for-embedding-in-pipeline-split).")
    account_for_loss: bool = Field(False, description="Count the LM head and loss as one layer when splitting, so the last stage holds one layer fewer (Megatron's --account-for-loss-in-pipeline-split).")
    rank_order: str = Field("tp-cp-ep-dp-pp", description="How ranks are numbered, fastest-varying first (Megatron-Core's order, default 'tp-cp-ep-dp-pp'); e.g. 'tp-pp-dp' puts pipeline neighbours on adjacent GPUs. Tokens: tp, cp, dp, pp (ep, if given, right before dp).")
    placement: Literal["packed", "spread"] | list[int] = Field("packed", description="Which servers the job's ranks run on, in rank order: 'packed' = servers in index order (a job fills one pod before the next); 'spread' = servers taken from each pod in turn (every group spans pods); or a list of server indices (rank r runs on the (r // gpus_per_server)-th listed server).")
    tp_comm_overlap: bool = Field(False, description="Overlap TP all-gathers / reduce-scatters with the GEMMs that use them (Megatron-Core --tp-comm-overlap, TransformerEngine userbuffers; off by default in Megatron-Core, on in NeMo's H100 performance recipes).")
    recompute: Literal["none", "selective", "full"] = Field("none", description="Activation recomputation (Megatron's --recompute-granularity; Korthikanti et al. 2022): 'none' keeps every activation; 'selective' re-runs the attention core in backward; 'full' keeps only each layer's input and re-runs its whole forward (about 1/3 more compute, a fraction of the activation memory).")
    prefetch_depth: int = Field(1, ge=0, description="ZeRO-3 / FSDP: how many layers ahead a layer's weight all-gather may be issued while an earlier layer computes (PyTorch FSDP's forward/backward prefetch: 1, the default; 0 = gather each layer only when it runs). The gathers and gradient reduce-scatters then queue on the network one after another, as the schedule issues them. Only with zero: 3.")
    overlap_p2p_comm: bool | None = Field(None, description="Overlap pipeline send/recv with compute (Megatron-Core --overlap-p2p-comm): the next micro-batch's activations arrive while the stage computes. Default: on with interleaved-1f1b, off with 1f1b (Megatron-Core's schedules), where each exchange blocks both stages for its transfer.")
    ep_comm_overlap: bool = Field(False, description="Overlap MoE all-to-all dispatch/combine with another micro-batch's compute (DualPipe-like, DeepSeek-V3, arXiv:2412.19437; Megatron-Core --overlap-moe-expert-parallel-comm). Default off, as Megatron-Core.")
    fp8_param_gather: bool = Field(False, description="Keep the transformer layers' matrix weights in fp8 (1 byte each) with no bf16 copy and all-gather them in fp8 after the optimizer step (Megatron-Core --fp8-param-gather, DistributedDataParallelConfig.fp8_param_gather; on in NeMo's and Megatron-Bridge's FP8 recipes); norms, routers, the embedding and the LM head stay bf16. Needs model.precision: fp8 and a distributed optimizer (zero >= 1). Default off, as Megatron-Core.")
    grad_reduce_in_fp32: bool = Field(False, description="Keep the gradient buffer in fp32 and reduce gradients over dp in fp32, 4 bytes per parameter instead of 2, in the all-reduce or reduce-scatter and in memory (Megatron-Core DistributedDataParallelConfig.grad_reduce_in_fp32, Megatron-LM --accumulate-allreduce-grads-in-fp32, which Megatron-LM turns on for --bf16; on in NeMo's and Megatron-Bridge's bf16_mixed precision plugins, off in their performance recipes; PyTorch FSDP's reduce_dtype float32 under zero: 3). The bucket stays `bucket` bytes, so it holds half the parameters. Default off: bf16 gradients.")


class SlowGpuSpec(SpecModel):
    """One GPU that computes slower than the rest (thermal throttling, a bad part)."""

    rank: int = Field(..., ge=0, lt=MAX_GPUS, description="Rank of the GPU in the job.")
    factor: float = Field(..., gt=0, description="Multiplier of its compute time (1.3 = 30 % slower).")


class ComputeSpec(SpecModel):
    """The GPUs' arithmetic: a GPU preset, or explicit peak FLOP/s, memory and HBM bandwidth."""

    gpu: str | None = Field(None, description="GPU preset: A100, A100-40GB, H100-SXM, H800, H20, H200, B200, GB200; default the cluster's gpu_model when it names one, else H100-SXM.")
    peak_flops: float | None = Field(None, gt=0, description="Dense bf16 tensor-core peak per GPU (FLOP/s); the preset's other dtypes scale with it (fp8 = 2x without a preset). Overrides the preset.")
    efficiency: float | None = Field(None, gt=0, le=1, description="Flat model: every layer's FLOPs at this fraction of peak (the pre-issue-13 model). Default none: kernel times from the GEMM shapes, flash attention and HBM-bound element-wise work (docs/workloads.md).")
    gemm_efficiency: float | None = Field(None, gt=0, le=1, description="Override the achievable fraction of peak of a large GEMM (default per GPU generation and dtype, from public cuBLAS measurements); tile and wave quantization still apply.")
    attention_efficiency: float | None = Field(None, gt=0, le=1, description="Override flash attention's fraction of the bf16 peak (default per GPU generation).")
    hbm_efficiency: float | None = Field(None, gt=0, le=1, description="Override the fraction of HBM bandwidth memory-streaming kernels reach (default 0.85): training's element-wise kernels and Adam's update, serving's weight and KV-cache reads.")
    layer_forward_time: float | None = Field(None, gt=0, description="Measured forward time of one transformer layer for one micro-batch on one GPU (seconds); replaces the kernel model for the layers.")
    layer_backward_time: float | None = Field(None, gt=0, description="Measured backward time of one layer for one micro-batch (seconds, without recomputation); default 2x layer_forward_time.")
    memory: PositiveSizeBytes | None = Field(None, description="GPU memory (bytes, e.g. 80GiB); overrides the preset.")
    hbm_bandwidth: RateBps | None = Field(None, description="GPU memory (HBM) bandwidth, e.g. 3.35TB/s; overrides the preset.")
    # a GPU's kernel times vary by a few percent step to step; a deviation as large as the mean itself is
    # no longer jitter but a different GPU (a slow-gpu fault), and inf/nan would reach the engine as NaN
    jitter_cv: float = Field(0.02, ge=0, le=1, description="Coefficient of variation of each GPU's per-step compute time (standard deviation / mean), 0-1.")
    slow_gpus: list[SlowGpuSpec] = Field(default_factory=list, description="GPUs slower than the rest: list of {rank, factor}.")
    seed: int = Field(0, ge=0, le=2**32 - 1, description="Seed of the compute-time jitter.")


class DataSpec(SpecModel):
    """Input data and checkpoints: what a step reads from storage and writes to it."""

    dataset_read_per_gpu: RateOrZeroBps = Field(0.0, description="The job's dataset read rate from storage over its GPU count (e.g. 200MB/s: a 64-GPU job reading 12.8 GB/s); 0 = data already local. The GPUs that read (Megatron-LM: tensor-parallel rank 0 of the first and the last pipeline stage, every GPU when tp = pp = 1) share the job's total evenly (docs/workloads.md).")
    loader_samples_per_s_per_server: float | None = Field(None, gt=0, description="CPU data-loader throughput of one server (samples/s); none = the loader never limits. The loaders run where Megatron-LM reads data: the first and the last pipeline stage (docs/workloads.md).")
    loader_samples_per_s_by_server: dict[str, Annotated[float, Field(gt=0)]] = Field(default_factory=dict, description="CPU data-loader throughput of the named servers (server name, e.g. s3 -> samples/s), in place of loader_samples_per_s_per_server on those servers.")
    checkpoint_size: SizeBytes | None = Field(None, description="Bytes of one checkpoint (whole job); default 14 bytes per parameter (bf16 weights + fp32 Adam master and moments).")
    checkpoint_interval_steps: int | None = Field(None, ge=1, le=1_000_000_000, description="Write a checkpoint every this many steps; none = never.")


class InferenceSpec(SpecModel):
    """A serving batch: prefill of the prompts, then token-by-token decode from a KV cache."""

    batch: int = Field(1, ge=1, le=1_000_000_000, description="Sequences decoded together on one model replica (count).")
    prompt_tokens: int = Field(1024, ge=1, le=1_000_000_000, description="Prompt length per sequence (tokens).")
    output_tokens: int = Field(256, ge=1, le=1_000_000_000, description="Tokens generated per sequence (tokens): the prefill pass emits the first, each decode pass one more, so a batch takes TTFT + (output_tokens - 1) x TPOT (vLLM's serving-benchmark convention).")
    tp: int = Field(1, ge=1, le=MAX_GPUS, description="Tensor-parallel degree of one replica.")
    pp: int = Field(1, ge=1, le=MAX_GPUS, description="Pipeline-parallel degree of one replica.")
    allow_tp_across_servers: bool = Field(False, description="Allow a tensor-parallel group larger than one server.")
    engine: ServingEngine = Field("none", description="Serving engine whose fixed time of every decode step, per layer (kernel launches and the gaps between a step's many small kernels) and per step (scheduling, sampling), is added to the step's roofline: none (the roofline alone), vllm, vllm-v1, sglang, sglang-eager; each preset's values and sources: docs/workloads.md.")
    decode_layer_overhead: float | None = Field(None, ge=0, le=1, description="Fixed time per transformer layer of every decode step (seconds, e.g. 50e-6); overrides the engine's per-layer part only.")
    decode_step_overhead: float | None = Field(None, ge=0, le=1, description="Fixed time per decode step whatever the layers (seconds, e.g. 0.71e-3: the engine's scheduling, sampling and LM-head gaps); overrides the engine's per-step part only.")


class WorkloadSpec(SpecModel):
    """What runs on the cluster: a training job (``parallel``) or an inference service (``inference``)."""

    mode: Literal["training", "inference"] = Field("training", description="'training': forward, backward and optimizer steps; 'inference': prefill and decode.")
    gpus: int | None = Field(None, ge=1, le=MAX_GPUS, description="GPUs the job uses (count); default every GPU of the cluster.")
    model: ModelSpec = Field(default_factory=ModelSpec, description="The model.")
    parallel: ParallelSpec = Field(default_factory=ParallelSpec, description="Training parallelism.")
    compute: ComputeSpec = Field(default_factory=ComputeSpec, description="GPU arithmetic and its variation.")
    data: DataSpec = Field(default_factory=DataSpec, description="Storage reads, data loading and checkpoints.")
    inference: InferenceSpec | None = Field(None, description="Inference batch and parallelism (mode: inference only; default values when left out).")
    steps: int = Field(1, ge=1, le=MAX_STEPS, description="Training steps to simulate (inference serves one batch in closed form: 1).")

    @field_validator("steps")
    @classmethod
    def _one_batch_for_inference(cls, value, info: ValidationInfo):
        if value != 1 and info.data.get("mode", "training") == "inference":
            raise ValueError(INFERENCE_STEPS)
        return value

    @field_validator("parallel", "data")
    @classmethod
    def _training_only(cls, value, info: ValidationInfo):
        # an inference service reads neither: parallel: {tp: 4} beside inference: {tp: 8} served at TP 8, silently
        if info.data.get("mode", "training") == "inference":
            raise ValueError("only with mode: training (an inference service is described by `inference`: tp, pp, batch, "
                             "prompt_tokens, output_tokens)")
        return value

    @field_validator("compute")
    @classmethod
    def _variation_only_for_training(cls, value: ComputeSpec, info: ValidationInfo):
        # a serving batch is timed in closed form, the same on every GPU: jitter and slow GPUs were read by nothing
        given = sorted({"jitter_cv", "slow_gpus", "seed"} & value.model_fields_set)
        if given and info.data.get("mode", "training") == "inference":
            raise ValueError(f"{', '.join(given)}: only with mode: training (a serving batch is timed in closed form, "
                             "the same on every GPU)")
        return value

    @field_validator("inference")
    @classmethod
    def _inference_only_for_inference(cls, value, info: ValidationInfo):
        if value is not None and info.data.get("mode", "training") != "inference":
            raise ValueError("only with mode: inference (a training job is described by `parallel`)")
        return value
