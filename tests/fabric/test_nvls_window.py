"""NVLS's in-flight window grows with the NVLS compute channels NCCL runs.

The window whose bytes pay NVLS's second pass is NCCL's NVLS channels x NCCL_STEPS x NVLS chunk
(16 x 8 x 128 KiB on a default DGX H100: src/transport/nvls.cc, src/include/device.h). The channels are
``comm->nvlsChannels``, which NCCL clamps to ``[NCCL_MIN_CTAS, NCCL_MAX_CTAS]`` (src/transport/nvls.cc,
NVIDIA/nccl v2.27.3-1: ``nvlsChannels = max(minCTAs, min(maxCTAs, NVLS_NCHANNELS_SM90))``), so
``NCCL_MIN_CTAS=24`` keeps 24 channels' chunks in flight, half as many again as the default 16.

Measured (NVIDIA/nccl-tests#309, the same 8 DGX-class H100 nodes, the tables in
tests/nccltests/data/reference/): with ``NCCL_MIN_CTAS=24 NCCL_IB_QPS_PER_CONNECTION=2`` the NVLSTree
sizes 32-128 MiB take 18-24 % longer than with NCCL's defaults (621 / 510 us at 32 MiB, 892 / 718 at
64 MiB, 1395 / 1159 at 128 MiB), the model on one window for both predicted no difference. On NVLS
(one node) the extra channels widen the window; on NVLSTree (across nodes) they widen each tree hop's
first wave on the head NICs.
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
#: the release bench/reference_tables.py predicts these tables with (not printed: the newest before the post)
GJ_AION_NCCL = "2.27.3"


def _times_us(stem: str) -> dict[int, float]:
    return {r.size_bytes: r.oop_time_us for r in parse_nccl_tests_log((DATA / f"{stem}.log").read_text()).rows}


def test_window_is_channels_times_steps_times_chunk():
    assert nvls_window_bytes(16) == NVLS_WINDOW_BYTES == 16 * 8 * 128 * 1024
    assert nvls_window_bytes(24) == 24 * 8 * 128 * 1024
    assert nvls_window_bytes(8) == NVLS_WINDOW_BYTES // 2


def test_min_ctas_24_slows_nvls_tree_mid_sizes_as_measured():
    """NVLSTree's extra channels cross the tree between nodes on the same head NICs.

    Every NVLS compute channel has a tree connection on every head (``connectNvls``, src/graph/connect.cc,
    NVIDIA/nccl v2.27.3-1), so the first chunks of all 24 channels share each head's NIC on each of the
    tree's 2 x log2(8) = 6 hops: 8 channels x 64 KiB more per hop than NCCL's default 16."""
    default = make_predictor("dgx-h100", 8, 8, [], GJ_AION_NCCL)
    tuned = make_predictor("dgx-h100", 8, 8, TUNED, GJ_AION_NCCL)
    measured = _times_us("h100-ib-8node-64gpu-all_reduce")
    measured_tuned = _times_us("h100-ib-8node-64gpu-all_reduce-minctas24-qps2")
    head_nic_GBps = default.tuning_inputs("all_reduce").graph("nvls_tree").bw_inter_GBps
    for mib in (32, 64, 128):
        base, more = (p.estimate("all_reduce", mib * MiB) for p in (default, tuned))
        assert base.algorithm == more.algorithm == "nvls_tree"
        assert (base.n_channels, more.n_channels) == (16, 24)
        assert base.chunk_bytes == more.chunk_bytes == 64 * 1024
        extra_s = 6 * (24 - 16) * 64 * 1024 / (head_nic_GBps * 1e9)
        assert more.costs.fill_inter_s - base.costs.fill_inter_s == pytest.approx(extra_s, rel=1e-9)
        predicted, seen = more.time_s / base.time_s, measured_tuned[mib * MiB] / measured[mib * MiB]
        assert 1.0 < predicted < seen  # the direction measured, not all of it


def test_window_is_nvls_only():
    """NVLS's window pays its second pass on NVLink; NVLSTree's wire term is the NICs', so it has none."""
    assert make_predictor("dgx-h100", 1, 8).estimate("all_reduce", 16 * MiB).costs.window_share == 1.0
    across = make_predictor("dgx-h100", 8, 8).estimate("all_reduce", 16 * MiB)
    assert across.algorithm == "nvls_tree" and across.costs.window_share == 0.0


def test_nvls_tree_step_is_a_heads_share():
    """A small call's last loop splits each channel's bytes between the heads (``lastChunkCount =
    divUp(remCount, nHeads)``, src/device/all_reduce.h v2.27.3-1): 1 MiB over 16 channels and 8 heads is
    8 KiB a step, not the 32 KiB chunk."""
    est = make_predictor("dgx-h100", 2, 8, [], "2.26.2").estimate("all_reduce", MiB)  # the 2-node table's release
    assert est.algorithm == "nvls_tree" and est.chunk_bytes == MiB // (16 * 8)


def test_eight_nodes_switch_to_nvls_tree_at_8_mib_as_the_connect_spike_shows():
    """Both 8-node tables time 8 MiB out-of-place 2.3-4x in-place: NVLSTree's first call, which connects it
    (NCCL_RUNTIME_CONNECT, default 1 since v2.22.3-1: ncclPrepareTasks, src/enqueue.cc), nccl-tests having
    warmed up only the first and last sizes (src/common.cu before v2.16.8). NCCL up to 2.28.7 (NVLSTree's
    network hwLat 14 us, src/graph/tuning.cc) switches there; 2.28.9's 20.9 us moves the switch to 16 MiB."""
    for stem in ("h100-ib-8node-64gpu-all_reduce", "h100-ib-8node-64gpu-all_reduce-minctas24-qps2"):
        rows = {r.size_bytes: r for r in parse_nccl_tests_log((DATA / f"{stem}.log").read_text()).rows}
        spikes = [s for s, r in rows.items() if r.oop_time_us > 2 * r.ip_time_us]
        assert spikes == [8 * MiB]
    old, new = make_predictor("dgx-h100", 8, 8, [], GJ_AION_NCCL), make_predictor("dgx-h100", 8, 8, [], "2.30.7")
    assert [old.estimate("all_reduce", s * MiB).algorithm for s in (4, 8)] == ["tree", "nvls_tree"]
    assert [new.estimate("all_reduce", s * MiB).algorithm for s in (8, 16)] == ["tree", "nvls_tree"]
