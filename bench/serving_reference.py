"""Score gpuwait's serving model against published serving measurements (a held-out check: nothing is fitted).

Reads ``tests/data/serving_reference.yaml`` (published end-to-end latency of a static batch, or TTFT and
inter-token latency at concurrency 1, each row with its model, GPU, TP, precision, batch and token counts),
runs each row's scenario (``workload: {mode: inference}``) on the flow engine and prints predicted beside
published for every scored figure, with the median and worst absolute error. Beside each row it splits the
predicted time per output token into the terms of the decode model, so a large error says which term is off:

* **HBM**: a decode step reading the weights and the batch's KV cache at the datasheet HBM bandwidth;
* **FLOPs**: the same step's FLOPs at the achieved tensor-core rate (the step takes the longer of the two);
* **TP comm**: the step's tensor-parallel all-reduces on the fabric (TPOT minus the ideal-network TPOT).

    python bench/serving_reference.py [--no-write]

Writes the section between the markers of docs/validation-serving.md.
"""

from __future__ import annotations

import argparse
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
    """The row's ``workload`` section: one replica on ``tp * pp`` GPUs."""
    inference = {"pp": 1, **row["inference"]}
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
    """One decode step's HBM-read time and FLOP time (no communication), each alone, at the context
    serving_step uses: the model's own ``decode_step_time_s`` with the other resource made free."""
    spec = WorkloadSpec(**workload(row, source))
    shape = wm.resolve_model(spec.model)
    gpu = wm.resolve_gpu(spec.compute, shape.precision)
    layout = wm.validate_inference_layout(shape, spec, spec.gpus, 8)
    context = layout.prompt_tokens + layout.output_tokens // 2
    free_flops = replace(gpu, peak_flops=float("inf"), efficiency=1.0)
    free_hbm = replace(gpu, hbm_bandwidth_Bps=float("inf"))
    return {"hbm_s": wm.decode_step_time_s(shape, free_flops, layout, context),
            "flops_s": wm.decode_step_time_s(shape, free_hbm, layout, context)}


def predict(row: dict, source: dict) -> dict[str, float]:
    """The row's figures as gpuwait predicts them (same names and units as ``published``)."""
    result = run_workload(scenario(row, source))[0]
    s = result.serving
    out = row["inference"]["output_tokens"]
    e2e_s = result.breakdown.step_time_s
    return {"e2e_latency_ms": e2e_s * 1e3, "median_latency_ms": e2e_s * 1e3, "ttft_ms": s["ttft_s"] * 1e3,
            "itl_ms": s["tpot_s"] * 1e3, "tokens_per_s": out / e2e_s,
            "tpot_ms": s["tpot_s"] * 1e3, "ideal_tpot_ms": s["ideal_tpot_s"] * 1e3}


def published_tpot_ms(row: dict, predicted: dict) -> float:
    """The published time per output token: the ITL, or for an end-to-end figure the latency less the
    predicted TTFT over the decode passes (the prefill of 8 x 32 tokens is a few ms of seconds)."""
    pub, out = row["published"], row["inference"]["output_tokens"]
    if "itl_ms" in pub:
        return pub["itl_ms"]
    return (pub["e2e_latency_ms"] - predicted["ttft_ms"]) / wm.decode_passes(out)


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


def report(rows: list[dict], reference: dict) -> str:
    errs = errors(rows)
    absolute = [abs(e) for e in errs]
    worst = max(errs, key=abs)
    lines = [BEGIN, "", "Generated by `python bench/serving_reference.py`; do not edit by hand.", "",
             f"{len(errs)} figures from {len(rows)} rows: median absolute error {100 * statistics.median(absolute):.0f} %, "
             f"worst {100 * worst:+.0f} %; {sum(e < 0 for e in errs)} of {len(errs)} predicted below the published figure.",
             "", "| row | figure | published | gpuwait | error |", "|---|---|---|---|---|"]
    for r in rows:
        for figure, pub, got in r["points"]:
            lines.append(f"| {r['id']} | {figure} | {pub:.2f} | {got:.2f} | {100 * (got / pub - 1):+.0f} % |")
    lines += ["", "Time per output token (ms): the published one (the ITL, or the end-to-end latency less gpuwait's TTFT "
              "over the decode passes) beside gpuwait's and its terms. *HBM* and *FLOPs* are one decode step's weight "
              "and KV-cache read at the datasheet bandwidth and its FLOPs at the achieved rate (the step takes the "
              "longer); *TP comm* is the step's all-reduces; *HBM share needed* is the fraction of the datasheet "
              "bandwidth at which the HBM term alone would close the gap (published TPOT less TP comm).", "",
              "| row | published TPOT | gpuwait TPOT | HBM | FLOPs | TP comm | published / gpuwait | HBM share needed |",
              "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        p, t = r["predicted"], r["terms"]
        comm_ms = p["tpot_ms"] - p["ideal_tpot_ms"]
        hbm_ms, flops_ms = 1e3 * t["hbm_s"], 1e3 * t["flops_s"]
        share = hbm_ms / (r["published_tpot_ms"] - comm_ms)
        lines.append(f"| {r['id']} | {r['published_tpot_ms']:.2f} | {p['tpot_ms']:.2f} | {hbm_ms:.2f} | {flops_ms:.2f} | "
                     f"{comm_ms:.2f} | {r['published_tpot_ms'] / p['tpot_ms']:.2f} | {share:.2f} |")
    lines += ["", "Sources:", ""] + [f"* `{k}`: {v['cite']}. {v['note']}" for k, v in reference["sources"].items()]
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
