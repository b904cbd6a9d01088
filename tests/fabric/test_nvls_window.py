"""NVLS's in-flight window grows with the NVLS compute channels NCCL runs.

The window whose bytes pay NVLS's second pass is NCCL's NVLS channels x NCCL_STEPS x NVLS chunk
(16 x 8 x 128 KiB on a default DGX H100: src/transport/nvls.cc, src/include/device.h). The channels are
``comm->nvlsChannels``, which NCCL clamps to ``[NCCL_MIN_CTAS, NCCL_MAX_CTAS]`` (src/transport/nvls.cc,
NVIDIA/nccl v2.27.3-1: ``nvlsChannels = max(minCTAs, min(maxCTAs, NVLS_NCHANNELS_SM90))``), so
``NCCL_MIN_CTAS=24`` keeps 24 channels' chunks in flight, half as many again as the default 16.

Measured (NVIDIA/nccl-tests#309, the same 8 DGX-class H100 nodes, the tables in
tests/nccltests/data/reference/): with ``NCCL_MIN_CTAS=24 NCCL_IB_QPS_PER_CONNECTION=2`` the NVLSTree
sizes 32-128 MiB take 18-24 % longer than with NCCL's defaults (621 / 510 us at 32 MiB, 892 / 718 at
64 MiB, 1395 / 1159 at 128 MiB), the model on one window for both predicted no difference.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwait.fabric.perf import NVLS_WINDOW_BYTES, nvls_window_bytes
from gpuwait.runner.perf import make_predictor
from gpuwait.telemetry.nccltests_log import parse_nccl_tests_log

MiB = 2**20
DATA = Path(__file__).parents[1] / "nccltests" / "data" / "reference"
TUNED = ["NCCL_MIN_CTAS=24", "NCCL_IB_QPS_PER_CONNECTION=2"]


def _times_us(stem: str) -> dict[int, float]:
    return {r.size_bytes: r.oop_time_us for r in parse_nccl_tests_log((DATA / f"{stem}.log").read_text()).rows}


def test_window_is_channels_times_steps_times_chunk():
    assert nvls_window_bytes(16) == NVLS_WINDOW_BYTES == 16 * 8 * 128 * 1024
    assert nvls_window_bytes(24) == 24 * 8 * 128 * 1024
    assert nvls_window_bytes(8) == NVLS_WINDOW_BYTES // 2


def test_min_ctas_24_slows_nvls_tree_mid_sizes_as_measured():
    default = make_predictor("dgx-h100", 8, 8)
    tuned = make_predictor("dgx-h100", 8, 8, TUNED)
    measured = _times_us("h100-ib-8node-64gpu-all_reduce")
    measured_tuned = _times_us("h100-ib-8node-64gpu-all_reduce-minctas24-qps2")
    for mib in (32, 64, 128):
        base, more = (p.estimate("all_reduce", mib * MiB) for p in (default, tuned))
        assert base.algorithm == more.algorithm == "nvls_tree"
        assert (base.n_channels, more.n_channels) == (16, 24)
        # 8 MiB more in the window: its second pass at the call's wire rate
        extra_s = (nvls_window_bytes(24) - NVLS_WINDOW_BYTES) / (mib * MiB) * base.costs.wire_s
        assert more.time_s - base.time_s == pytest.approx(extra_s, rel=0.1, abs=3e-6)
        predicted, seen = more.time_s / base.time_s, measured_tuned[mib * MiB] / measured[mib * MiB]
        assert 1.0 < predicted < seen  # the direction measured, not all of it


def test_window_never_exceeds_the_call():
    """Below the window every byte pays the second pass once, whatever the channels."""
    default = make_predictor("dgx-h100", 8, 8).estimate("all_reduce", 16 * MiB)
    tuned = make_predictor("dgx-h100", 8, 8, TUNED).estimate("all_reduce", 16 * MiB)
    assert default.costs.window_share == tuned.costs.window_share == 1.0
