"""Score gpuwait's serving model against published serving measurements (a held-out check: nothing is fitted).

Reads ``tests/data/serving_reference.yaml`` (published end-to-end latency or output tokens/s of a static
batch, a batch-1 prefill's TTFT, or TTFT and inter-token latency at concurrency 1, each row with its model,
GPU, TP, precision, batch and token counts),
runs each row's scenario (``workload: {mode: inference}``) on the flow engine and prints predicted beside
published for every scored figure, with the median and worst absolute error. Beside each row it splits the
predicted time per output token into the terms of the decode model, so a large error says which term is off:

* **HBM**: a decode step reading the weights and the batch's KV cache at the datasheet HBM bandwidth;
* **FLOPs**: the same step's FLOPs at the achieved tensor-core rate (the step takes the longer of the two);
* **engine**: the serving engine's fixed time in the step (per layer and per step, its engine preset's);
* **TP comm**: the step's tensor-parallel all-reduces on the fabric (TPOT minus the ideal-network TPOT).

    python bench/serving_reference.py [--no-write]

Writes the section between the markers of docs/validation-serving.md.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import yaml

from gpuwait.runner.workload import run_workload
from gpuwait.spec import Scenario, validate_data
from gpuwait.spec.workload import WorkloadSpec
from gpuwait.workload import model as wm

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "serving_reference.yaml"
DOC = ROOT / "docs" / "validation-serving.md"
BEGIN, END = "<!-- serving_reference: begin -->", "<!-- serving_reference: end -->"


def load() -> dict:
    return yaml.safe_load(DATA.read_text())


def workload(row: dict, source: dict) -> dict:
    """The row's ``workload`` section: one replica on ``tp * pp`` GPUs, on the source's serving engine."""
    inference = {"pp": 1, "engine": source.get("engine", "none"), **row["inference"]}
    return {"mode": "inference", "gpus": inference["tp"] * inference["pp"], "model": row["model"],
            "compute": {"gpu": source["gpu"]}, "inference": inference}


def scenario(row: dict, source: dict) -> Scenario:
    gpus_per_server = 8
    inference = {"pp": 1, **row["inference"]}
    servers = -(-inference["tp"] * inference["pp"] // gpus_per_server)
    data = {"name": row["id"], "cluster": {**source["cluster"], "servers": servers},
            "workload": workload(row, source)}
    return validate_data(Scenario, data, source=f"serving_reference:{row['id']}", require_units=False)


def decode_terms_s(row: dict, source: dict) -> dict[str, float]:
    """One decode step's HBM-read time, FLOP time (no communication) and the engine's fixed time, each alone,
    at the context serving_step uses: the model's own ``decode_step_time_s`` with the others made free."""
    spec = WorkloadSpec(**workload(row, source))
    shape = wm.resolve_model(spec.model)
    gpu = wm.resolve_gpu(spec.compute, shape.precision)
    layout = wm.validate_inference_layout(shape, spec, spec.gpus, 8)
    roofline = replace(layout, decode_layer_overhead_s=0.0, decode_step_overhead_s=0.0)
    context = layout.prompt_tokens + layout.output_tokens // 2
    free_flops = replace(gpu, peak_flops=float("inf"), efficiency=1.0)
    free_hbm = replace(gpu, hbm_bandwidth_Bps=float("inf"))
    return {"hbm_s": wm.decode_step_time_s(shape, free_flops, roofline, context),
            "flops_s": wm.decode_step_time_s(shape, free_hbm, roofline, context),
            "overhead_s": shape.layers * layout.decode_layer_overhead_s + layout.decode_step_overhead_s}


def predict(row: dict, source: dict) -> dict[str, float]:
    """The row's figures as gpuwait predicts them (same names and units as ``published``)."""
    result = run_workload(scenario(row, source))[0]
    s = result.serving
    out = row["inference"]["output_tokens"]
    e2e_s = result.breakdown.step_time_s
    # a one-token row has no decode step, so no TPOT (None, as gpuwait reports it); no row scores one there
    tpot_ms = None if s["tpot_s"] is None else s["tpot_s"] * 1e3
    ideal_tpot_ms = None if s["ideal_tpot_s"] is None else s["ideal_tpot_s"] * 1e3
    return {"e2e_latency_ms": e2e_s * 1e3, "median_latency_ms": e2e_s * 1e3, "ttft_ms": s["ttft_s"] * 1e3,
            "itl_ms": tpot_ms, "tokens_per_s": out / e2e_s,
            "out_tokens_per_s_per_gpu": s["tokens_per_s"] / gpus(row),
            "tpot_ms": tpot_ms, "ideal_tpot_ms": ideal_tpot_ms}


def gpus(row: dict) -> int:
    return row["inference"]["tp"] * row["inference"].get("pp", 1)


def published_e2e_ms(row: dict) -> float | None:
    """The published end-to-end latency of the row's batch: given, or from a static batch's throughput per
    GPU (batch x output tokens over the latency and the GPUs); None for a concurrency-1 row."""
    pub, inf = row["published"], row["inference"]
    if "e2e_latency_ms" in pub:
        return pub["e2e_latency_ms"]
    if "out_tokens_per_s_per_gpu" in pub:
        return 1e3 * inf["batch"] * inf["output_tokens"] / (pub["out_tokens_per_s_per_gpu"] * gpus(row))
    return None


def published_tpot_ms(row: dict, predicted: dict) -> float | None:
    """The published time per output token: the ITL, or for an end-to-end figure the latency less the
    predicted TTFT over the decode passes; None when the row has no decode (one output token)."""
    pub, out = row["published"], row["inference"]["output_tokens"]
    if "itl_ms" in pub:
        return pub["itl_ms"]
    e2e_ms = published_e2e_ms(row)
    # a batch whose predicted prefill is most of its published latency leaves too little to read a decode off
    if e2e_ms is None or wm.decode_passes(out) == 0 or predicted["ttft_ms"] > 0.5 * e2e_ms:
        return None
    return (e2e_ms - predicted["ttft_ms"]) / wm.decode_passes(out)


def measure(reference: dict) -> list[dict]:
    rows = []
    for row in reference["rows"]:
        source = reference["sources"][row["source"]]
        start = time.perf_counter()
        predicted = predict(row, source)
        terms = decode_terms_s(row, source)
        points = [(figure, row["published"][figure], predicted[figure]) for figure in row["scored"]]
        rows.append({"id": row["id"], "source": row["source"], "points": points, "predicted": predicted,
                     "terms": terms, "published_tpot_ms": published_tpot_ms(row, predicted)})
        print(f"{row['id']:36s} " + "  ".join(f"{f} {p:.2f} vs {g:.2f}" for f, p, g in points)
              + f"  ({time.perf_counter() - start:.1f} s)", file=sys.stderr)
    return rows


def errors(rows: list[dict]) -> list[float]:
    """Signed relative error of every scored figure: predicted / published - 1."""
    return [got / pub - 1.0 for r in rows for _, pub, got in r["points"]]


def median_interval(values: list[float], coverage: float = 0.9) -> tuple[float, float, float]:
    """The distribution-free interval of the median of ``values``: the order statistics ``k`` and ``n + 1 - k``
    (1-based) with the largest ``k`` whose binomial(n, 1/2) probability of holding the median is >= ``coverage``;
    returns (low, high, that probability)."""
    ordered, n = sorted(values), len(values)
    best = (ordered[0], ordered[-1], 1.0 - 2.0 * 0.5**n)
    for k in range(1, n // 2 + 1):
        inside = sum(math.comb(n, j) for j in range(k, n + 1 - k)) / 2.0**n
        if inside < coverage:
            break
        best = (ordered[k - 1], ordered[n - k], inside)
    return best


#: figures where more is faster (rates); the others are times
RATES = ("tokens_per_s", "out_tokens_per_s_per_gpu")


def faster(points: list[tuple[str, float, float]]) -> int:
    """How many of ``points`` (figure, published, predicted) gpuwait predicts faster than published."""
    return sum((got > pub) if figure in RATES else (got < pub) for figure, pub, got in points)


def _summary(label: str, points: list[tuple[str, float, float]]) -> str:
    errs = [got / pub - 1.0 for _, pub, got in points]
    absolute = [abs(e) for e in errs]
    return (f"| {label} | {len(errs)} | {100 * statistics.median(absolute):.0f} % | {100 * max(errs, key=abs):+.0f} % | "
            f"{faster(points)} |")


def report(rows: list[dict], reference: dict) -> str:
    errs = errors(rows)
    absolute = [abs(e) for e in errs]
    low, high, inside = median_interval(absolute)
    lines = [BEGIN, "", "Generated by `python bench/serving_reference.py`; do not edit by hand.", "",
             f"{len(errs)} figures from {len(rows)} rows: median absolute error {100 * statistics.median(absolute):.0f} % "
             f"(distribution-free interval of the median [{100 * low:.0f} %, {100 * high:.0f} %] at {100 * inside:.0f} %), "
             f"worst {100 * max(errs, key=abs):+.0f} %; gpuwait is faster than published in "
             f"{faster([p for r in rows for p in r['points']])} of {len(errs)}.", "",
             "| rows | figures | median absolute error | worst | gpuwait faster |", "|---|---|---|---|---|"]
    for src in reference["sources"]:
        mine = [p for r in rows if r["source"] == src for p in r["points"]]
        if mine:
            lines.append(_summary(src, mine))
    for figure in ("ttft_ms", "itl_ms", "e2e_latency_ms", "out_tokens_per_s_per_gpu"):
        mine = [p for r in rows for p in r["points"] if p[0] == figure]
        if mine:
            lines.append(_summary(f"every {figure}", mine))
    lines += ["", "| row | figure | published | gpuwait | error |", "|---|---|---|---|---|"]
    for r in rows:
        for figure, pub, got in r["points"]:
            lines.append(f"| {r['id']} | {figure} | {pub:.2f} | {got:.2f} | {100 * (got / pub - 1):+.0f} % |")
    lines += ["", "Time per output token (ms): the published one (the ITL, or the end-to-end latency less gpuwait's TTFT "
              "over the decode passes) beside gpuwait's and its terms. *HBM* and *FLOPs* are one decode step's weight "
              "and KV-cache read at the streamed HBM rate (0.85 of the datasheet bandwidth) and its FLOPs at the "
              "achieved rate (the step takes the longer); *engine* is the source's serving engine's fixed time per "
              "step (its layers times the engine preset's time per layer, plus its time per step; 0 for sources with "
              "no engine preset); "
              "*TP comm* is the step's all-reduces; *share needed* is the fraction of the binding term's rate (the "
              "streamed HBM rate, or the achieved FLOP rate) at which that term alone would match the published "
              "TPOT less TP comm and the engine's time. Rows whose predicted prefill is over half their published latency are "
              "left out (too little decode to read).", "",
              "| row | published TPOT | gpuwait TPOT | HBM | FLOPs | engine | TP comm | published / gpuwait "
              "| bound, share needed |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        p, t = r["predicted"], r["terms"]
        if r["published_tpot_ms"] is None:
            continue
        comm_ms = p["tpot_ms"] - p["ideal_tpot_ms"]
        hbm_ms, flops_ms, fixed_ms = 1e3 * t["hbm_s"], 1e3 * t["flops_s"], 1e3 * t["overhead_s"]
        bound = "HBM" if hbm_ms >= flops_ms else "FLOPs"
        share = max(hbm_ms, flops_ms) / (r["published_tpot_ms"] - comm_ms - fixed_ms)
        lines.append(f"| {r['id']} | {r['published_tpot_ms']:.2f} | {p['tpot_ms']:.2f} | {hbm_ms:.2f} | {flops_ms:.2f} | "
                     f"{fixed_ms:.2f} | {comm_ms:.2f} | {r['published_tpot_ms'] / p['tpot_ms']:.2f} | {bound} {share:.2f} |")
    lines += ["", "Sources:", ""] + [f"* `{k}`: {v['cite']}. {v['note']}. Engine preset: {v.get('engine', 'none')}"
                                     for k, v in reference["sources"].items()]
    lines += ["", END]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true", help="print, do not rewrite docs/validation-serving.md")
    args = parser.parse_args()
    reference = load()
    rows = measure(reference)
    text = report(rows, reference)
    print(text)
    if not args.no_write:
        doc = DOC.read_text() if DOC.exists() else f"# Serving model against published measurements\n\n{BEGIN}\n{END}\n"
        head, rest = doc.split(BEGIN, 1)
        DOC.write_text(head + text + rest.split(END, 1)[1])


if __name__ == "__main__":
    main()
