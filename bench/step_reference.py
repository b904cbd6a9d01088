"""Score gpuwait's training-step model against published step figures, leave-one-source-out.

Reads ``tests/data/step_reference.yaml`` (published TFLOP/s per GPU with the layouts they were measured
on, each row citing its source), runs each row's step on the flow engine and compares step times (the
published figure turned into a step time with the source's own FLOP count). Three models:

* **before**: the flat model of issue 12 (every layer's FLOPs at 0.5 of peak, no recomputation);
* **leave-one-source-out**: the kernel model (:mod:`gpuwait.workload.compute`) with its one free
  parameter, the share ``s`` of the cuBLAS-microbenchmark GEMM rate kept inside a training step
  (``achievable = MICROBENCH_ACHIEVABLE[generation, dtype] x s``, one ``s`` for every GPU), fitted on
  the *other* sources' rows;
* **as shipped**: the kernel model with the defaults in the code (``SUSTAINED_FRACTION``).

A row's step time is ``A + B / f`` in the achievable fraction ``f`` to well under 1 % (GEMM time scales as
1/f, the rest does not), so each row is run at two values of ``f`` and the fits (and the as-shipped
column) read that curve.

    python bench/step_reference.py [--rows ID,ID] [--no-write]

Writes the section between the markers of docs/validation-steps.md.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import yaml

from gpuwait.errors import SpecError
from gpuwait.runner.workload import run_workload
from gpuwait.spec import Scenario, validate_data
from gpuwait.workload import model as wm
from gpuwait.workload.compute import MICROBENCH_ACHIEVABLE, SUSTAINED_FRACTION
from gpuwait.workload.presets import GPU_PRESETS

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "step_reference.yaml"
DOC = ROOT / "docs" / "validation-steps.md"
BEGIN, END = "<!-- step_reference: begin -->", "<!-- step_reference: end -->"
F_LO, F_HI = 0.6, 0.9  # the two achievable fractions each row runs at
GRID = [0.40 + 0.005 * i for i in range(161)]  # candidate sustained fractions s


def published_step_s(row: dict) -> float:
    """The published figure as a step time, with the FLOP count the source used."""
    m, p = row["model"], row["parallel"]
    shape = wm.resolve_model(wm.ModelSpec(**m))
    tokens = p["global_batch"] * shape.seq_len
    if row["figure"] == "tflops_per_gpu_megatron":
        b, s, ell, h, v = p["global_batch"], shape.seq_len, shape.layers, shape.hidden, shape.vocab
        flops = 96.0 * b * s * ell * h * h * (1 + s / (6 * h) + v / (16 * ell * h))
    elif row["figure"] == "tflops_per_gpu_model":
        flops = wm.training_flops_per_token(shape) * tokens
    elif row["figure"] == "tokens_per_s_per_gpu":  # a rate of tokens: no FLOP count to choose
        return tokens / (row["gpus"] * row["value"])
    elif row["figure"] == "step_s":  # a step time: nothing to convert
        return row["value"]
    else:
        raise SystemExit(f"{row['id']}: unknown figure {row['figure']!r}")
    return flops / (row["gpus"] * row["value"] * 1e12)


def scenario(row: dict, source: dict, compute: dict, recompute: bool) -> Scenario:
    parallel = dict(row["parallel"])
    if not recompute:
        parallel.pop("recompute", None)
    data = {
        "name": row["id"],
        "cluster": {**source["cluster"], "servers": math.ceil(row["gpus"] / source.get("gpus_per_server", 8))},
        "workload": {"gpus": row["gpus"], "model": row["model"], "parallel": parallel,
                     "compute": {"gpu": row["gpu"], **compute}, "steps": 1},
    }
    return validate_data(Scenario, data, source=f"step_reference:{row['id']}", require_units=False)


def step_s(row: dict, source: dict, compute: dict, recompute: bool = True) -> float:
    return run_workload(scenario(row, source, compute, recompute))[0].breakdown.step_time_s


def generation(row: dict) -> str:
    return GPU_PRESETS[row["gpu"]].generation


def predict(a_s: float, b_s: float, f: float) -> float:
    return a_s + b_s / f


def achievable(row: dict, s: float) -> float:
    """The achievable fraction of the row's GEMM dtype peak at sustained fraction ``s`` (rows saved before
    rows carried a precision are bf16)."""
    return MICROBENCH_ACHIEVABLE[(row["gen"], row.get("precision", "bf16"))] * s


def fit(rows: list[dict]) -> float:
    """The sustained fraction ``s`` minimizing the squared log step-time error of ``rows``."""
    return min(GRID, key=lambda s: sum(math.log(predict(r["A"], r["B"], achievable(r, s)) / r["pub"]) ** 2
                                       for r in rows))


def errors(rows: list[dict], key: str) -> list[float]:
    """Absolute relative errors of ``rows`` (rows without a value, NaN, left out)."""
    return [abs(r[key] / r["pub"] - 1.0) for r in rows if not math.isnan(r[key])]


def measure(reference: dict, only: set[str] | None) -> list[dict]:
    rows = []
    for row in reference["rows"]:
        if only and row["id"] not in only:
            continue
        source = reference["sources"][row["source"]]
        start = time.perf_counter()
        try:
            before = step_s(row, source, {"efficiency": 0.5}, recompute=False)
        except SpecError:  # the issue-12 model had no recompute: the layout did not fit
            before = float("nan")
        lo, hi = (step_s(row, source, {"gemm_efficiency": f}) for f in (F_LO, F_HI))
        b_s = (lo - hi) / (1 / F_LO - 1 / F_HI)
        a_s = hi - b_s / F_HI
        rows.append({"id": row["id"], "source": row["source"], "gen": generation(row),
                     "precision": row["model"].get("precision", "bf16"), "pub": published_step_s(row),
                     "before": before, "A": a_s, "B": b_s, "scored": row.get("scored", True)})
        print(f"{row['id']:18s} published {rows[-1]['pub']:8.3f} s  before {before:8.3f}  A {a_s:8.3f} s  B {b_s:8.3f} s"
              f"  ({time.perf_counter() - start:.0f} s)", file=sys.stderr)
    return rows


def fold_of(reference: dict, source: str) -> str:
    """The fold a source is left out with: its ``fold`` (two tables of one paper and cluster go together)."""
    return reference["sources"][source].get("fold", source)


def after_the_fit(reference: dict, row: dict) -> bool:
    """A source found after ``SUSTAINED_FRACTION`` was fitted (its ``after_the_fit``): scored, never fitted on,
    so adding it moves no other source's fit."""
    return bool(reference["sources"][row["source"]].get("after_the_fit", False))


def score(rows: list[dict], reference: dict) -> tuple[float, dict[str, float]]:
    """Leave-one-source-out predictions in place; returns the all-source fit and each fold's. Rows marked
    ``scored: false`` and sources found after the fit are predicted but never fitted on."""
    folds = {}
    fitted = [r for r in rows if r.get("scored", True) and not after_the_fit(reference, r)]
    for fold in sorted({fold_of(reference, r["source"]) for r in rows}):
        others = [r for r in fitted if fold_of(reference, r["source"]) != fold]
        folds[fold] = fit(others) if others else SUSTAINED_FRACTION
        for r in rows:
            if fold_of(reference, r["source"]) == fold:
                r["loso"] = predict(r["A"], r["B"], achievable(r, folds[fold]))
    for r in rows:
        r["shipped"] = predict(r["A"], r["B"], achievable(r, SUSTAINED_FRACTION))
    return fit(fitted), folds


def _cell(errs: list[float]) -> str:
    if not errs:
        return "—"
    return f"{100 * statistics.median(errs):.0f} % / {100 * max(errs):.0f} %"


def _pct(value: float, pub: float) -> str:
    return "—" if math.isnan(value) else f"{value:.3f} ({100 * (value / pub - 1):+.0f} %)"


def report(rows: list[dict], reference: dict, fitted_all: float, folds: dict[str, float]) -> str:
    scored = [r for r in rows if r.get("scored", True)]
    lines = [BEGIN, "", "Median / worst absolute step-time error per source (generated by `python bench/step_reference.py`).",
             "", "| source | rows | before (flat 0.5, no recompute) | leave-one-source-out | as shipped | sustained fraction fitted without it |",
             "|---|---|---|---|---|---|"]
    for src in sorted({r["source"] for r in scored}):
        mine = [r for r in scored if r["source"] == src]
        fold = fold_of(reference, src)
        fs = f"s = {folds[fold]:.3f}" + (f" (left out with {fold})" if fold != src else "")
        lines.append(f"| {src} | {len(mine)} | {_cell(errors(mine, 'before'))} | {_cell(errors(mine, 'loso'))} | "
                     f"{_cell(errors(mine, 'shipped'))} | {fs} |")
    held = [r for r in scored if after_the_fit(reference, r)]
    pools = [("**all**", scored)]
    if held:
        fitted = [r for r in scored if not after_the_fit(reference, r)]
        pools = [("**the sources fitted on**", fitted), ("**found after the fit (held out)**", held),
                 ("**all**", scored)]
    for label, pool in pools:
        lines.append(f"| {label} | {len(pool)} | {_cell(errors(pool, 'before'))} | {_cell(errors(pool, 'loso'))} | "
                     f"{_cell(errors(pool, 'shipped'))} | |")
    lines += ["", f"Sustained fraction fitted on every source fitted on: s = {fitted_all:.3f}; shipped "
              f"`SUSTAINED_FRACTION` = {SUSTAINED_FRACTION:.3f}.",
              "", "| row | source | published step (s) | before | leave-one-source-out | as shipped |", "|---|---|---|---|---|---|"]
    for r in rows:
        mark = " (not scored)" if not r.get("scored", True) else ""
        lines.append(f"| {r['id']}{mark} | {r['source']} | {r['pub']:.3f} | {_pct(r['before'], r['pub'])} | "
                     f"{_pct(r['loso'], r['pub'])} | {_pct(r['shipped'], r['pub'])} |")
    lines += ["", "Sources:", ""] + [f"* `{k}`: {v['cite']}" for k, v in reference["sources"].items()] + ["", END]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", help="comma-separated row ids (default all)")
    parser.add_argument("--no-write", action="store_true", help="print, do not rewrite docs/validation-steps.md")
    parser.add_argument("--save", type=Path, help="write the measured step curves to this JSON file")
    parser.add_argument("--load", type=Path, help="score the step curves of this JSON file instead of running")
    args = parser.parse_args()
    reference = yaml.safe_load(DATA.read_text())
    if args.load:
        rows = json.loads(args.load.read_text())
    else:
        rows = measure(reference, set(args.rows.split(",")) if args.rows else None)
    if args.save:
        args.save.write_text(json.dumps(rows, indent=1))
    fitted_all, folds = score(rows, reference)
    text = report(rows, reference, fitted_all, folds)
    print(text)
    if not args.no_write:
        doc = DOC.read_text() if DOC.exists() else f"# Step model against published runs\n\n{BEGIN}\n{END}\n"
        head, rest = doc.split(BEGIN, 1)
        DOC.write_text(head + text + rest.split(END, 1)[1])


if __name__ == "__main__":
    main()
