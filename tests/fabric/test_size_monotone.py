"""A larger call never takes less time on the same algorithm and protocol: NCCL moves a channel's bytes in whole
loops, every step of a loop one message per connection however few bytes the last loop holds (the ring kernels'
per-loop chunk shrinks; NVLSTree gives each head divUp(remaining, nHeads) of the last loop: src/device/all_reduce.h
v2.30.7-1). Power-of-two sizes fill whole loops; sizes between them are where a count of bytes / chunk undercounts."""

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


@pytest.mark.xfail(strict=True, reason="known gap: the per-message term counts a NIC's bytes over the chunk, so a "
                                       "partial last loop sends fewer, smaller-than-chunk messages than NCCL's whole "
                                       "loop of steps: NVLSTree on 4 DGX H100 nodes takes 151.1 us at 256 B and "
                                       "143.7 us at 320 B (found by the audit of session 30)")
def test_sizes_between_powers_of_two_never_fall():
    assert _falls(["NCCL_ALGO=NVLSTree"], range(64, 4097, 64)) == []
