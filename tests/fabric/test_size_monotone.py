"""A larger call never takes less time on the same algorithm and protocol: it has at least the smaller call's bytes
in every channel, and NCCL gives each busy head of an NVLSTree channel divUp(remaining, nHeads) elements of its
last loop (src/device/all_reduce.h v2.30.7-1), so no channel or head goes idle as the size grows."""

from __future__ import annotations

import pytest

from gpuwait.runner.perf import make_predictor


def _falls(env: list[str], sizes: range) -> list[tuple[int, float, float]]:
    predictor = make_predictor("dgx-h100", 4, None, env)
    out, previous, before = [], 0.0, None
    for size in sizes:
        estimate = predictor.estimate("all_reduce", size)
        if before is not None and (estimate.algorithm, estimate.protocol) == before and estimate.time_s < previous:
            out.append((size, previous * 1e6, estimate.time_s * 1e6))
        previous, before = estimate.time_s, (estimate.algorithm, estimate.protocol)
    return out


def test_power_of_two_sizes_never_fall():
    predictor = make_predictor("dgx-h100", 4, None, ["NCCL_ALGO=NVLSTree"])
    times = [predictor.estimate("all_reduce", 2**k).time_s for k in range(3, 24)]
    assert all(b >= a for a, b in zip(times, times[1:], strict=False))


@pytest.mark.xfail(strict=True, reason="known gap: a call's messages are its NIC bytes over the step, and NVLSTree's "
                                       "step is a channel's bytes split over its heads in bytes, where NCCL splits "
                                       "elements (divUp(remCount, nHeads), src/device/all_reduce.h): at 320 B a "
                                       "head's 3-byte share makes 7 busy heads of 8 per channel, at 256 B 2 bytes "
                                       "make 8, so 4 DGX H100 nodes take 143.7 us at 320 B and 151.1 us at 256 B "
                                       "(found by the audit of session 30; padding to whole loops instead raised "
                                       "8-16 B calls from 113 to 157 us, as if idle channels sent)")
def test_sizes_between_powers_of_two_never_fall():
    assert _falls(["NCCL_ALGO=NVLSTree"], range(64, 4097, 64)) == []
