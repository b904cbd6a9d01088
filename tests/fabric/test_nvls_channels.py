"""NVLS and NVLSTree run NCCL's NVLS compute channels, not the NVLS graph's heads.

NVIDIA/nccl src/transport/nvls.cc sets ``comm->nvlsChannels`` to ``NVLS_NCHANNELS`` (16 for every GPU
from v2.18.1-1; ``NVLS_NCHANNELS_SM90`` 16 / ``NVLS_NCHANNELS_SM100`` 32 from v2.25.1-1;
``NVLS_NCHANNELS_SM100_NVL`` 24 on one SM100 node from v2.27.3-1), then clamps it to
``[minCTAs, maxCTAs]`` (``NCCL_MIN_CTAS`` / ``NCCL_MAX_CTAS``; ``NCCL_MIN_NCHANNELS`` does not apply).
src/enqueue.cc runs an NVLS or NVLSTree call on ``nc = comm->nvlsChannels``, and src/graph/connect.cc
(connectNvls) gives every compute channel every head: "NVLS compute channels work orthogonally to NVLS
search channels". So two DGX H100 (8 heads) run NVLSTree on 16 channels, 24 under ``NCCL_MIN_CTAS=24``
(the 8-node nccl-tests run of NVIDIA/nccl-tests#309).
"""

from __future__ import annotations

import pytest

from gpuwait.collectives.nccl_versions import nccl_release
from gpuwait.collectives.ncclenv import parse_env
from gpuwait.errors import SpecError
from gpuwait.runner.perf import make_predictor

GiB = 2**30


@pytest.mark.parametrize(("env", "channels"), [([], 16), (["NCCL_MIN_CTAS=24"], 24), (["NCCL_MAX_CTAS=8"], 8),
                                               (["NCCL_MIN_NCHANNELS=32"], 16),
                                               # NCCL_NVLS_NCHANNELS replaces the default, still clamped to the CTA limits
                                               (["NCCL_NVLS_NCHANNELS=8"], 8), (["NCCL_NVLS_NCHANNELS=32"], 32),
                                               (["NCCL_NVLS_NCHANNELS=8", "NCCL_MIN_CTAS=12"], 12)])
def test_nvls_tree_channels_follow_nvls_nchannels_and_the_cta_limits(env, channels):
    est = make_predictor("dgx-h100", 2, None, ["NCCL_ALGO=NVLSTree", *env]).estimate("all_reduce", GiB)
    assert est.algorithm == "nvls_tree"
    assert est.n_channels == channels


def test_single_node_nvls_runs_sixteen_channels_on_hopper():
    est = make_predictor("dgx-h100", 1, None, ["NCCL_ALGO=NVLS"]).estimate("all_reduce", GiB)
    assert est.algorithm == "nvls" and est.n_channels == 16


@pytest.mark.parametrize(("version", "sm", "nodes", "channels"), [
    ("2.18.3", 90, 2, 16), ("2.24.3", 100, 2, 16),  # one default for every GPU before 2.25
    ("2.25.1", 100, 1, 32), ("2.26.2", 100, 2, 32),  # NVLS_NCHANNELS_SM100
    ("2.27.3", 100, 1, 24), ("2.30.7", 100, 2, 32), ("2.30.7", 90, 1, 16),  # NVLS_NCHANNELS_SM100_NVL on one node
])
def test_nvls_channels_per_release(version, sm, nodes, channels):
    assert nccl_release(version).nvls_channels(sm, nodes) == channels


def test_only_cta_limits_below_nccls_default_slow_nvls():
    """NCCL's NVLS cost model prices the graph's heads (tuning.cc ``busBw = graphs[a]->nChannels * bw``)
    with its default compute channels; 32 heads on 24 default channels (one GB200 NVL72 domain) are not a
    shortfall, NCCL_MAX_CTAS=8 below the default 16 of a DGX H100 halves the plateau."""
    rack = make_predictor("gb200-nvl72", 18, None, ["NCCL_ALGO=NVLS"])
    est = rack.estimate("all_reduce", GiB)
    assert est.n_channels == 24 and rack.tuning_inputs("all_reduce").graph("nvls").n_channels == 32
    on_heads = make_predictor("gb200-nvl72", 18, None, ["NCCL_ALGO=NVLS", "NCCL_MIN_CTAS=32"]).estimate("all_reduce", GiB)
    assert on_heads.n_channels == 32
    assert est.model_bandwidth_time_s == pytest.approx(on_heads.model_bandwidth_time_s)
    free = make_predictor("dgx-h100", 1, None, ["NCCL_ALGO=NVLS"]).estimate("all_reduce", GiB)
    capped = make_predictor("dgx-h100", 1, None, ["NCCL_ALGO=NVLS", "NCCL_MAX_CTAS=8"]).estimate("all_reduce", GiB)
    assert capped.model_bandwidth_time_s == pytest.approx(2 * free.model_bandwidth_time_s)


def test_nvls_nchannels_out_of_range_is_one_clear_error():
    with pytest.raises(SpecError, match="NCCL_NVLS_NCHANNELS: got '0'; expected an integer from 1 to 64"):
        parse_env({"NCCL_NVLS_NCHANNELS": "0"})


def test_an_nvl72_domain_chunks_nvls_by_its_32_heads_not_its_72_gpus():
    """calcCollChunking (src/enqueue.cc, NVIDIA/nccl v2.30.7-1) shrinks the NVLS chunk by its concurrent
    ops, ``nChannels * nvls.nHeads``; the heads are the NVLS graph's channels, at most
    NCCL_MAX_NVLS_ARITY = 32 (search.cc ``maxChannels``, connect.cc ``connectNvls``). On a 72-GPU domain
    with 24 compute channels a 512 MiB all_reduce has 768 concurrent ops: 512 MiB >= 8 x 768 x 64 KiB keeps
    the 64 KiB chunk (72 heads, 1728 ops, would cut it to 32 KiB)."""
    rack = make_predictor("gb200-nvl72", 18, None, ["NCCL_ALGO=NVLS"])
    assert rack.estimate("all_reduce", 512 * 2**20).chunk_bytes == 65536
    # below 8 x 768 x 64 KiB = 384 MiB the chunk drops to 32 KiB
    assert rack.estimate("all_reduce", 256 * 2**20).chunk_bytes == 32768
