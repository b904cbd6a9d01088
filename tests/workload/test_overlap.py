"""ZeRO-3 / FSDP traffic with its real concurrency, and the overlap switches for pipeline sends and MoE
all-to-all. Each moves the step the way its public source describes.

- FSDP (Zhao et al. 2023, "PyTorch FSDP", arXiv:2304.11277, §3.3-3.4): each layer's weights are
  all-gathered before its forward and again before its backward, its gradients reduce-scattered after;
  the next layer's gather is issued one layer ahead (forward / backward prefetch), and all of them
  share the network. Without prefetch the gathers wait for the compute and show.
- ZeRO-3 at a fixed global batch (Narayanan et al. SC'21, arXiv:2104.04473, Table 2 / Figure 10): more
  GPUs means fewer tokens per GPU for the same per-layer gathers, so per-GPU throughput falls.
- Megatron-Core's 1F1B blocks on send_forward_recv_backward; --overlap-p2p-comm (default with the
  interleaved schedule) posts the transfer ahead and hides it under compute.
- DualPipe (DeepSeek-V3, arXiv:2412.19437, §3.2.1) overlaps the MoE all-to-all with the compute of
  another micro-batch: the exposed all-to-all time shrinks.
"""

from __future__ import annotations

import pytest

from gpuwait.errors import SpecError
from gpuwait.runner.workload import run_workload
from gpuwait.spec import Scenario, validate_data
from gpuwait.steps.training import zero3_exposed_s


def _scenario(servers: int, parallel: dict, model: dict | None = None, gpu: str = "H100-SXM",
              cluster: dict | None = None) -> Scenario:
    workload = {"model": model or {"preset": "llama-8b"}, "parallel": parallel,
                "compute": {"gpu": gpu, "jitter_cv": 0.0}}
    return validate_data(Scenario, {"cluster": {"preset": "dgx-h100", "servers": servers, **(cluster or {})},
                                    "workload": workload})


def _run(scenario: Scenario):
    return run_workload(scenario)[0].breakdown


def test_zero3_queue_closed_forms():
    # compute-bound: only the first layer's gather shows in forward; backward adds the first gather and
    # the last layer's scatter
    assert zero3_exposed_s(8, 1.0, 2.0, 0.3, 0.2) == pytest.approx((0.3, 0.5))
    # network-bound: forward = every gather + the last layer's compute; backward = every gather and scatter
    f, b = zero3_exposed_s(8, 1.0, 2.0, 3.0, 2.0)
    assert f == pytest.approx(8 * 3.0 + 1.0 - 8 * 1.0) and b == pytest.approx(8 * (3.0 + 2.0) - 8 * 2.0 + 0.0, abs=2.0)
    # no prefetch (depth 0): each gather waits for the previous layer, all of them exposed
    assert zero3_exposed_s(8, 1.0, 2.0, 0.3, 0.0, depth=0)[0] == pytest.approx(8 * 0.3)
    # deeper prefetch never hurts
    assert zero3_exposed_s(8, 1.0, 2.0, 1.5, 0.5, depth=2)[1] <= zero3_exposed_s(8, 1.0, 2.0, 1.5, 0.5, depth=1)[1]


def test_zero3_prefetch_hides_gathers():
    base = {"zero": 3, "global_batch": 16, "micro_batch": 1}
    with_prefetch = _run(_scenario(2, base))
    without = _run(_scenario(2, {**base, "prefetch_depth": 0}))
    assert without.step_time_s > with_prefetch.step_time_s
    assert without.exposed_comm_s["dp all_gather"] > with_prefetch.exposed_comm_s["dp all_gather"]


def test_zero3_per_gpu_throughput_falls_with_gpus_at_fixed_batch():
    # Narayanan et al. Table 2: at a fixed global batch, 4x the GPUs leaves each GPU a quarter of the
    # tokens for the same per-layer gathers; once a layer computes for less than its gather takes, the
    # network sets the pace and per-GPU throughput falls to ~0.3x (144 -> 44 TFLOP/s, 384 -> 1,536 GPUs).
    # Short sequences put a small model in that regime on 16 -> 64 H100s.
    model = {"preset": "llama-8b", "seq_len": 512}
    runs = {}
    for servers in (2, 8):
        gpus = 8 * servers
        runs[gpus] = _run(_scenario(servers, {"zero": 3, "global_batch": 64, "micro_batch": 64 // gpus}, model))
    assert runs[64].mfu / runs[16].mfu < 0.5
    assert runs[64].exposed_comm_s["dp all_gather"] > 10 * runs[16].exposed_comm_s["dp all_gather"]


def test_zero3_gathers_and_scatters_share_the_network():
    # the backward's gathers and scatters queue on one network: more than the gathers alone
    assert zero3_exposed_s(8, 1.0, 2.0, 2.0, 2.0)[1] > zero3_exposed_s(8, 1.0, 2.0, 2.0, 0.0)[1]


def test_prefetch_depth_only_with_zero3():
    with pytest.raises(SpecError, match="workload.parallel.prefetch_depth: only used with zero: 3"):
        _run(_scenario(2, {"zero": 1, "prefetch_depth": 2}))


def test_p2p_overlap_shortens_a_pipeline_step():
    par = {"tp": 8, "pp": 4, "global_batch": 16}
    blocking = _run(_scenario(4, par))
    overlapped = _run(_scenario(4, {**par, "overlap_p2p_comm": True}))
    assert overlapped.step_time_s < blocking.step_time_s
    assert overlapped.exposed_comm_s.get("pp sendrecv", 0.0) < blocking.exposed_comm_s["pp sendrecv"]


def test_ep_all_to_all_overlap_hides_dispatch():
    par = {"tp": 1, "ep": 8, "global_batch": 16, "micro_batch": 1}
    model = {"preset": "mixtral-8x7b", "layers": 4, "seq_len": 2048}
    plain = _run(_scenario(2, par, model))
    dualpipe = _run(_scenario(2, {**par, "ep_comm_overlap": True}, model))
    assert dualpipe.exposed_comm_s.get("ep alltoall", 0.0) < plain.exposed_comm_s["ep alltoall"]
    assert dualpipe.step_time_s < plain.step_time_s
    with pytest.raises(SpecError, match="ep_comm_overlap: needs expert parallelism"):
        _run(_scenario(2, {"ep_comm_overlap": True}))
