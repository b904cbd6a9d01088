"""The NVLS / NVLSTree kernel's rate holds under every NCCL release, not only those whose tuning says it.

NCCL 2.28.3-1 re-described NVLS and NVLSTree in its tuning (``nvlsEfficiency``, ``perChMaxNVLSTreeBws``,
src/graph/tuning.cc; release notes 2.28.3: "Improved NVLS/NVLSTree tuning prediction", "NVLSTree Tuning
Fixes. Update tuning data for H100"), while the kernel is the same one: ``RunWorkColl`` for NVLS_TREE in
src/device/all_reduce.h differs only in layout from v2.26.2-1 to v2.30.7-1, its warp split is the same since
v2.19.3-1, and NVLS_NCHANNELS_SM90 and NCCL_NVLS_CHUNKSIZE in src/transport/nvls.cc did not change. So the
2.28 figures bound the hardware for a 2.26 run too, while 2.26's own formula still steers its choice.

Measured (NVIDIA/nccl-tests#309, the 2-node DGX H100 table printed as NCCL 2.26.2,
tests/nccltests/data/reference/h100-ib-2node-16gpu-all_reduce.log): NVLSTree's plateau is 469 GB/s busbw
(16 GiB in 68652 us), under NCCL 2.26.2's own ceiling of 500 (8 channels x 40 GB/s x 5/6) and near 2.28's
8 x 57.7 = 461.6.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwait.collectives.nccltests import busbw_factor
from gpuwait.collectives.tuning import nvls_kernel_alg_GBps
from gpuwait.runner.perf import make_predictor
from gpuwait.telemetry.nccltests_log import parse_nccl_tests_log

GiB = 2**30
DATA = Path(__file__).parents[1] / "nccltests" / "data" / "reference"


def _busbw_GBps(n_bytes: int, time_s: float, n_ranks: int) -> float:
    return n_bytes / time_s / 1e9 * busbw_factor("all_reduce", n_ranks)


def test_two_node_nvls_tree_plateau_is_the_kernels_under_the_release_the_table_prints():
    rows = {r.size_bytes: r for r in
            parse_nccl_tests_log((DATA / "h100-ib-2node-16gpu-all_reduce.log").read_text()).rows}
    measured = _busbw_GBps(16 * GiB, rows[16 * GiB].steady_time_us * 1e-6, 16)
    assert measured == pytest.approx(469, abs=1)
    est = make_predictor("dgx-h100", 2, 8, [], "2.26.2").estimate("all_reduce", 16 * GiB)
    assert est.algorithm == "nvls_tree"
    assert _busbw_GBps(16 * GiB, est.time_s, 16) == pytest.approx(measured, rel=0.03)


@pytest.mark.parametrize("servers", [1, 2, 4, 8])
def test_the_kernel_rate_does_not_depend_on_the_release(servers):
    """The same kernel, so the same plateau under 2.26.2 and 2.28.3 wherever both run NVLS / NVLSTree
    (the rest of the time, latency and start-up, still follows each release's tuning)."""
    old, new = (make_predictor("dgx-h100", servers, 8, [], v) for v in ("2.26.2", "2.28.3"))
    algorithm = "nvls" if servers == 1 else "nvls_tree"
    rates = [nvls_kernel_alg_GBps(p.tuning_inputs("all_reduce"), algorithm) for p in (old, new)]
    assert rates[0] == pytest.approx(rates[1], rel=1e-12)


def test_an_older_release_is_never_faster_than_the_kernel():
    """2.26.2's tuning ceiling (500 GB/s busbw on 2 nodes) lies above the kernel's: the prediction follows the
    kernel; 2.28.3's ceiling is the kernel's, so both releases give the same bandwidth time."""
    old, new = (make_predictor("dgx-h100", 2, 8, [], v).estimate("all_reduce", 16 * GiB) for v in ("2.26.2", "2.28.3"))
    assert old.model_bandwidth_time_s < old.fabric_time_s
    assert old.fabric_time_s == pytest.approx(max(new.fabric_time_s, new.model_bandwidth_time_s), rel=1e-9)
