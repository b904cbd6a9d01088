"""nccl-tests -g N: one host thread issues every call on N GPUs, so a call costs at least N launches (issue 12).

nccl-tests times ``iters`` calls issued back to back and synchronizes once (``BenchTime``, src/common.cu,
NVIDIA/nccl-tests); with ``-g N`` each call is N NCCL calls inside ncclGroupStart/End from one thread
(``startColl``). Back-to-back calls then run no faster than the host issues them: time = max(the GPUs'
time, N x the per-GPU issue cost). The maintainer in NVIDIA/nccl-tests#333 names it: "the CUDA latency
overheads of single process jobs".
"""

import re
from pathlib import Path

import pytest

from gpuwait.errors import SpecError
from gpuwait.fabric.perf import HOST_ISSUE_PER_GPU_S
from gpuwait.report.perf import compare_log, sweep_text
from gpuwait.runner.perf import SweepArgs, make_predictor, perf_sweep

REFERENCE = Path(__file__).resolve().parent.parent / "nccltests" / "data" / "reference"


@pytest.fixture(autouse=True)
def _no_nccl_env(monkeypatch):
    for name in ("NCCL_ALGO", "NCCL_PROTO"):
        monkeypatch.delenv(name, raising=False)


def test_small_calls_cost_n_launches_and_large_ones_the_gpus_time():
    one = make_predictor("dgx-a100", 1, 8)
    eight = make_predictor("dgx-a100", 1, 8, gpus_per_thread=8)
    assert one.estimate("all_reduce", 8).time_s < 8 * HOST_ISSUE_PER_GPU_S
    assert eight.estimate("all_reduce", 8).time_s == pytest.approx(8 * HOST_ISSUE_PER_GPU_S)
    assert eight.estimate("all_reduce", 2**30).time_s == one.estimate("all_reduce", 2**30).time_s
    # the calibration's cost record carries the floor, so fitted parameters see it too
    assert eight.estimate("all_reduce", 8).costs.host_floor_s == pytest.approx(8 * HOST_ISSUE_PER_GPU_S)


def test_the_floor_stays_below_the_public_g8_floor():
    """The H200 -g 8 table (Azure ND H200 v5, in the repository): 1 and 2 KiB at 0.06 / 0.12 GB/s busbw."""
    text = (REFERENCE / "h200-nvswitch-1node-8gpu-all_reduce-nvls-busbw-only.txt").read_text()
    assert "-g 8" in text
    rows = dict(re.findall(r"^\|\s*(\d+)K\s*\|\s*([\d.]+)\s*\|", text, re.MULTILINE))
    for kib in ("1", "2"):
        time_s = int(kib) * 1024 * 2 * 7 / 8 / (float(rows[kib]) * 1e9)  # busbw = algbw x 2 (n - 1) / n
        assert 8 * HOST_ISSUE_PER_GPU_S <= time_s


def test_more_gpus_per_thread_than_a_server_holds_is_refused():
    with pytest.raises(SpecError, match=r"^gpus_per_thread \(nccl-tests -g\): got 9; expected 1 to 8"):
        make_predictor("dgx-a100", 1, 8, gpus_per_thread=9)


def test_compare_reads_ngpus_from_the_log_header(tmp_path):
    """A table printed with nGpus 8 (as gpuwait perf prints it) compares at the floor it was printed with."""
    sweep = perf_sweep("all_reduce", SweepArgs(min_bytes=8, max_bytes=4096, step_factor=8), "dgx-a100", 1, 8,
                       gpus_per_thread=8)
    text = sweep_text(sweep)
    assert "nGpus 8" in text
    log = tmp_path / "g8.log"
    log.write_text(text)
    rows = compare_log("all_reduce", log, "dgx-a100").rows
    assert [r["predicted_time_us"] for r in rows] == pytest.approx([8 * HOST_ISSUE_PER_GPU_S * 1e6] * len(rows), rel=1e-3)
    log.write_text(text.replace("nGpus 8", "nGpus 1"))
    assert all(r["predicted_time_us"] < 8 * HOST_ISSUE_PER_GPU_S * 1e6 for r in compare_log("all_reduce", log, "dgx-a100").rows)
