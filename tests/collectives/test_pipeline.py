"""NCCL's chunking and the pipelined time, checked against NCCL's source and closed forms.

Chunk sizes: NVIDIA/nccl v2.30.7-1 ``src/enqueue.cc`` (``calcCollChunking``, ``getAlgoInfo``),
``src/init.cc`` (buffer sizes), ``src/include/collectives.h`` (chunk and slice steps). The fit: a
synthetic set whose true parameters are known must be recovered (a closed-form check of the fitter).
"""

from __future__ import annotations

import numpy as np
import pytest

from gpuwait.collectives.fit import FIT_NAMES, Observation, fit, log_errors
from gpuwait.collectives.physical import (
    PhysicalParams,
    PipelineCosts,
    adjust,
    pipelined_time_s,
    pipelined_times_s,
    stack_costs,
    stack_params,
)
from gpuwait.collectives.pipeline import (
    LL128_BUFFER_BYTES,
    LL_BUFFER_BYTES,
    channels_for_size,
    chunk_bytes,
    latency_steps,
    pipeline_depth,
    thread_threshold_bytes,
)


def test_buffer_sizes_are_nccls_defaults():
    # DEFAULT_LL_BUFFSIZE = 8 lines x 512 threads x 8 steps x 16 B; DEFAULT_LL128_BUFFSIZE = 120 x 640 x 8 x 8 B
    assert LL_BUFFER_BYTES == 524288
    assert LL128_BUFFER_BYTES == 4915200


def test_ring_simple_step_is_half_a_chunk_of_two_mib():
    # stepSize 4 MiB / 8 = 512 KiB; ALLREDUCE_CHUNKSTEPS 4 -> chunk 2 MiB; SLICESTEPS 2 -> two 1 MiB slices
    assert chunk_bytes("all_reduce", "ring", "Simple", 2**34, n_channels=16, n_ranks=16, n_nodes=2) == 2**20
    # a small call: each rank's share per channel, halved into slices
    assert chunk_bytes("all_reduce", "ring", "Simple", 2**22, n_channels=16, n_ranks=16, n_nodes=2) == 2**22 // 256 // 2


def test_nvls_chunk_shrinks_for_small_calls():
    big = chunk_bytes("all_reduce", "nvls", "Simple", 2**34, n_channels=16, n_ranks=8, n_nodes=1, nvls_heads=8)
    small = chunk_bytes("all_reduce", "nvls", "Simple", 2**20, n_channels=16, n_ranks=8, n_nodes=1, nvls_heads=8)
    assert big == 128 * 1024  # NCCL_NVLS_CHUNKSIZE
    assert small == 16384  # nBytes < 2 x concurrentOps x chunk


@pytest.mark.parametrize(("version", "nodes", "expected"), [
    ("2.30.7", 2, 131072),   # chunkSize = min(nvlsChunkSize 128 KiB, nvlsTreeMaxChunkSize) (v2.30.7-1)
    ("2.20.5", 2, 524288),   # chunkSize = stepSize * chunkSteps = 4 MiB / 8 (v2.20.5-1): no cap below 4 nodes
    ("2.20.5", 4, 65536),    # NCCL_NVLSTREE_MAX_CHUNKSIZE -2: 64 KiB from 4 nodes (v2.19.1-1 on)
    ("2.18.6", 4, 524288),   # 2.18 had no 4-node cap
])
def test_nvls_tree_chunk_follows_the_release(version, nodes, expected):
    from gpuwait.collectives.nccl_versions import nccl_release
    rel = nccl_release(version)
    chunk = chunk_bytes("all_reduce", "nvls_tree", "Simple", 16 * 2**30, n_channels=8, n_ranks=8 * nodes,
                        n_nodes=nodes, nvls_heads=8,
                        nvls_tree_chunk=(rel.nvls_tree_first_chunk_bytes, rel.nvls_tree_chunk_4_nodes_bytes))
    assert chunk == expected


def test_small_calls_drop_channels_like_nccl():
    # LL: 512 threads x 8 B per channel; 64 KiB keeps 16 channels, 32 KiB keeps 8 (32768 < 9 x 4096)
    assert channels_for_size("ring", "LL", 65536, 16) == 16
    assert channels_for_size("ring", "LL", 32768, 16) == 8
    assert channels_for_size("nvls", "Simple", 1024, 16) == 16


def test_ring_ll_threshold_grows_with_the_ranks():
    # NCCL prints its thresholds at init as "threadThresholds TreeLL/TreeLL128/TreeSimple | RingLL/RingLL128/
    # RingSimple | ...": "threadThresholds 8/8/64 | 64/8/64 | 512 | 512" on one 8-GPU H800 node
    # (NVIDIA/nccl issue #892, NCCL_DEBUG=INFO log); tuning.cc multiplies ring LL's by nRanks (v2.18.3-1 to v2.30.7-1)
    printed = [thread_threshold_bytes(a, p, 8) for a in ("tree", "ring") for p in ("LL", "LL128", "Simple")]
    assert printed == [8, 8, 64, 64, 8, 64]
    # 16 ranks: ring LL keeps a channel per 512 threads x 128 B = 64 KiB, so 256 KiB runs on 4 of 16 channels
    assert channels_for_size("ring", "LL", 256 * 1024, 16, n_ranks=16) == 4
    assert channels_for_size("ring", "LL128", 256 * 1024, 16, n_ranks=16) == 16


def test_depths_and_steps_follow_the_algorithms():
    # 8 nodes x 8 GPUs: tree chain of 7 hops inside, 3 levels between nodes, up and down
    assert pipeline_depth("tree", "all_reduce", 64, 8) == (14, 6)
    assert latency_steps("ring", "all_reduce", 64, 8) == (126 - 14, 14)
    assert latency_steps("nvls", "all_reduce", 8, 1) == (1, 0)


def _costs(wire_s: float, messages: float, multi_node: bool = True) -> PipelineCosts:
    return PipelineCosts(10e-6, 14, 2, wire_s, messages, 2e-6, 1e-6, 0.0, multi_node)


def test_messages_and_wire_overlap():
    params = PhysicalParams(net_message_overhead_s=1e-6)
    wire_bound = pipelined_time_s(_costs(100e-6, 10), params)
    message_bound = pipelined_time_s(_costs(100e-6, 1000), params)
    assert wire_bound == pytest.approx(10e-6 + 100e-6 + 3e-6)
    assert message_bound == pytest.approx(10e-6 + 1000e-6 + 3e-6)


def test_efficiency_slows_only_the_bottleneck_it_names():
    costs = _costs(100e-6, 0, multi_node=False)
    slow_nic = pipelined_time_s(costs, PhysicalParams(nic_efficiency=0.5))
    assert slow_nic == pytest.approx(10e-6 + 100e-6 + 2e-6 + 2e-6)  # only the inter-node fill doubles


def test_fit_recovers_known_parameters():
    """Synthetic measurements made with known moves: the fit finds them (closed-form check)."""
    rng = np.random.default_rng(0)
    truth = {"launch_latency_s": 3e-6, "net_step_latency_s": 1e-6, "intra_step_latency_s": 0.0,
             "net_message_overhead_s": 0.5, "nic_efficiency": 0.9, "nvlink_efficiency": 0.95}
    defaults = PhysicalParams(net_message_overhead_s=1e-6)
    observations = []
    for i in range(120):
        costs = PipelineCosts(float(rng.uniform(5e-6, 50e-6)), int(rng.integers(1, 30)), int(rng.integers(0, 8)),
                              float(10 ** rng.uniform(-6, -2)), float(10 ** rng.uniform(0, 4)),
                              float(rng.uniform(0, 5e-6)), float(rng.uniform(0, 5e-6)), 0.0, bool(i % 3))
        observations.append(Observation(costs, defaults, pipelined_time_s(costs, adjust(defaults, truth)), f"g{i % 6}"))
    fitted = fit(observations)
    assert set(fitted.values) == set(FIT_NAMES)
    assert np.abs(log_errors(observations, fitted)).max() < 0.01
    assert fitted.values["nic_efficiency"] == pytest.approx(0.9, rel=0.03)


def test_fit_refuses_bad_input():
    with pytest.raises(ValueError, match="observations"):
        fit([])
    obs = [Observation(_costs(1e-5, 1), PhysicalParams(), 1e-5)]
    with pytest.raises(ValueError, match="names: unknown parameter 'bogus'"):
        fit(obs, names=["bogus"])



def test_connection_step_cycle_bounds_the_steps_after_the_first_pass():
    # Closed form: a connection whose steps follow each other through NCCL's proxy (net.cc v2.30.7-1,
    # sendProxyProgress: one state change per pass) takes max(wire, steps x cycle) after its first pass:
    # 1000 steps at a 2 us cycle are 2 ms however few bytes they carry, until the wire passes it.
    params = PhysicalParams(net_message_overhead_s=0.0, net_step_cycle_s=2e-6)
    for wire_s, expected_s in ((100e-6, 2e-3), (1e-3, 2e-3), (4e-3, 4e-3)):
        costs = PipelineCosts(0.0, 0, 0, wire_s, 4000, 0.0, 0.0, 0.0, True, 1000)
        assert pipelined_time_s(costs, params) == pytest.approx(expected_s)
    # a single-node call has no network connection: the cycle never applies
    assert pipelined_time_s(PipelineCosts(0.0, 0, 0, 20e-6, 0, 0.0, 0.0, 0.0, False, 0.0), params) == pytest.approx(20e-6)


def test_stacked_times_are_the_scalar_times_bit_for_bit():
    # the fit and bench/reference_tables.py evaluate many observations at once through stacked arrays: each
    # entry must be the very float pipelined_time_s gives for that observation alone, with stacked or
    # scalar params
    costs = [PipelineCosts(20e-6, 14, 2, 100e-6, 200, 5e-6, 3e-6, 0.0, True, 30),
             PipelineCosts(5e-6, 7, 0, 40e-6, 0, 1e-6, 0.0, 0.25, False, 0.0, serial_s=8e-6, sm80_steps=7),
             PipelineCosts(9e-6, 2, 4, 1e-3, 900, 0.0, 2e-6, 0.0, True, 12, host_floor_s=2e-3)]
    params = [PhysicalParams(net_message_overhead_s=1e-6), PhysicalParams(nic_efficiency=0.8, sm80_step_latency_s=7e-7),
              PhysicalParams(net_step_cycle_s=1e-6, nvlink_efficiency=0.9)]
    stacked = pipelined_times_s(stack_costs(costs), stack_params(params))
    assert stacked.tolist() == [pipelined_time_s(c, p) for c, p in zip(costs, params, strict=True)]
    one = pipelined_times_s(stack_costs(costs), params[0])
    assert one.tolist() == [pipelined_time_s(c, params[0]) for c in costs]
