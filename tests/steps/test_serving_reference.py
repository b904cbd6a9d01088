"""The published serving reference set (tests/data/serving_reference.yaml), scored by bench/serving_reference.py.

Each row's figures reproduce one another (a concurrency-1 row's tokens/s from its TTFT and ITL; a static
batch's mean latency beside its median), no row beats the roofline its GPU's datasheet allows, and the
serving model's median error over the rows stays under a bound read from the rows themselves (below). The
rows are a held-out check: no constant of the model is fitted to them.
"""

from __future__ import annotations

import statistics

import pytest

from gpuwait.spec.workload import WorkloadSpec
from gpuwait.workload import model as wm
from gpuwait.workload.presets import GPU_PRESETS
from tests.conftest import load_bench

BENCH = load_bench("serving_reference")
REFERENCE = BENCH.load()
ROWS = REFERENCE["rows"]
FIGURES = {"e2e_latency_ms", "median_latency_ms", "ttft_ms", "itl_ms", "tokens_per_s", "out_tokens_per_s_per_gpu"}

#: Bound on the median absolute error of the scored figures. Not a fit: with the model as shipped the 36
#: figures have a median of 11 %, and the order statistics that bracket the median of 36 values with
#: probability 0.93 (binomial, distribution-free; bench/serving_reference.py median_interval) are 9 % and
#: 20 %. 21 % is just above that interval: a change that makes the model worse on these rows fails, any change
#: that brings it closer passes (11 % [8, 20] with the `vllm` preset's time all per layer, before vLLM's own
#: split of its step into forward and the rest set its per-layer and per-step parts; 30 % [12, 27] before the
#: vLLM rows ran on the `vllm` engine preset's fixed decode time, read off vLLM's own batch-1 latency, not these
#: rows; 33 % [24, 37] before decode
#: and prefill streamed HBM at the training step's 0.85 and prefill read its weights at least once). Where the
#: model is off (NIM's batch-1 decode still 1.3x fast with no TensorRT-LLM engine preset, short-prompt prefill
#: fast, TensorRT-LLM v0.6's large batches slow): docs/validation-serving.md.
MEDIAN_ERROR_BOUND = 0.21


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r["id"])
def test_row_is_cited_and_its_configuration_resolves(row):
    source = REFERENCE["sources"][row["source"]]
    assert ("http" in source["cite"] or "@" in source["cite"]) and source["gpu"] in GPU_PRESETS
    assert set(row["published"]) <= FIGURES and set(row["scored"]) <= set(row["published"]) and row["scored"]
    spec = WorkloadSpec(**BENCH.workload(row, source))
    shape = wm.resolve_model(spec.model)
    layout = wm.validate_inference_layout(shape, spec, spec.gpus, 8)
    wm.check_fits(shape, layout, wm.resolve_gpu(spec.compute, shape.precision))


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r["id"])
def test_row_reproduces_itself(row):
    pub, out = row["published"], row["inference"]["output_tokens"]
    if "tokens_per_s" in pub:
        # one request at a time: its output tokens over TTFT + (out - 1) x ITL (the tables print 2 decimals)
        latency_s = (pub["ttft_ms"] + wm.decode_passes(out) * pub["itl_ms"]) / 1e3
        assert out / latency_s == pytest.approx(pub["tokens_per_s"], rel=2e-3)
    if "median_latency_ms" in pub:
        # the same fixed batch every iteration: mean and median within 1 %
        assert pub["median_latency_ms"] == pytest.approx(pub["e2e_latency_ms"], rel=0.01)


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r["id"])
def test_no_row_beats_the_roofline(row):
    # a decode step reads at least every weight (or the experts its batch touches) once at the datasheet HBM
    # rate; a prefill alone (one output token) runs at least its FLOPs at the datasheet peak
    source = REFERENCE["sources"][row["source"]]
    spec = WorkloadSpec(**BENCH.workload(row, source))
    shape = wm.resolve_model(spec.model)
    inf, preset = row["inference"], GPU_PRESETS[source["gpu"]]
    pub, decodes = row["published"], wm.decode_passes(inf["output_tokens"])
    if decodes == 0:
        floor_ms = 1e3 * inf["batch"] * wm.prefill_flops(shape, inf["prompt_tokens"]) / (
            inf["tp"] * preset.flops(shape.precision))
        assert pub["ttft_ms"] > floor_ms
        return
    floor_ms = 1e3 * wm.decode_weight_bytes(shape, inf["batch"]) / (inf["tp"] * preset.hbm_bandwidth_Bps)
    per_token_ms = pub["itl_ms"] if "itl_ms" in pub else BENCH.published_e2e_ms(row) / decodes
    assert per_token_ms > floor_ms


def test_median_error_stays_under_the_bound():
    rows = BENCH.measure(REFERENCE)
    errors = [abs(e) for e in BENCH.errors(rows)]
    assert len(errors) == sum(len(r["scored"]) for r in ROWS)
    assert statistics.median(errors) < MEDIAN_ERROR_BOUND
