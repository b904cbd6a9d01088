"""Benchmark: how the flow model's cost grows with the cluster, for many-flow collectives (issue 16).

Runs each case in its own subprocess (so each peak RSS is its own ``ru_maxrss``), as ``gpuwait perf``
does: build the DGX SuperPOD H100 preset, pick NCCL's algorithm, compile it, route and solve it.

* alltoall 1 GiB, the preset's adaptive routing: 256, 1,024, 4,096, 16,384 GPUs
* all_reduce 1 GiB, adaptive routing and packet spraying: 2,048, 4,096, 8,192, 16,384 GPUs
* one training step of a DeepSeek-V3-like MoE model on 2,048 GPUs with its published parallelism
  (:data:`MOE_SCENARIO`): the step engine's expert-parallel all-to-alls, pipeline and ZeRO traffic

Each collective case also states the memory ``gpuwait perf`` estimates before its run
(:func:`gpuwait.runner.cost.estimate_perf`, counted before any fabric run; it includes fixed
allowances for the interpreter, :data:`gpuwait.runner.cost.BASE_BYTES`, and the route walk,
:data:`gpuwait.fabric.memory.WALK_ALLOWANCE_BYTES`) beside its peak RSS, with the ratio of the run's parts:
the estimate less both allowances over the peak RSS less the RSS after the imports.

Prints a table and the fitted growth exponent of wall time vs GPUs (least squares on log-log,
points from 1,024 GPUs up: the issue's target), and with ``--write`` rewrites docs/performance.md.
The machine may be shared: the 1-minute load average is recorded with the figures, and on a loaded
machine the wall time also counts the time other processes held the cores, so the exponent of the
case's own CPU time (same interval, same fit) is printed next to it. The all_reduce series has a
4,096-GPU point: 2,048 GPUs is the last 2-tier SuperPOD (a leaf pair's split crosses 64 links), 4,096
the first 3-tier one (about 2,100), so with the points 2,048 / 8,192 / 16,384 alone the fit measures
the step to the third tier more than the growth within one fabric shape; the exponent from 4,096 up
(3 tiers only) is printed as well, for information (the target stays the one from 1,024). Run with::

    python bench/bench_scaling.py [--write] [--timeout 300] [--max-gb 10] [--only alltoall]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

GPUS_PER_SERVER = 8  # DGX H100
GIB = 2**30
SERIES = {
    "alltoall adaptive": ("alltoall", "adaptive", (256, 1024, 4096, 16384)),
    "all_reduce adaptive": ("all_reduce", "adaptive", (2048, 4096, 8192, 16384)),
    "all_reduce spray": ("all_reduce", "spray", (2048, 4096, 8192, 16384)),
    "DeepSeek-V3-like MoE step": ("moe", "preset", (2048,)),  # see MOE_SCENARIO
}
FIT_FROM_GPUS = 1024
THREE_TIERS_FROM_GPUS = 4096  # the SuperPOD preset's first 3-tier size (radix-64 switches, 8 rails)
# DeepSeek-V3 (DeepSeek-AI, "DeepSeek-V3 Technical Report", arXiv:2412.19437): 671B parameters, 37B active
# per token; 61 layers, hidden 7,168, 128 attention heads, the first 3 layers dense, every other layer
# 1 shared + 256 routed experts of inner width 2,048 with 8 routed per token, sequences of 4,096 (§4.2);
# dense inner width 18,432 and vocabulary 129,280 from the released config.json
# (huggingface.co/deepseek-ai/DeepSeek-V3). Trained on 2,048 H800 GPUs with 16-way pipeline, 64-way
# expert parallelism over 8 nodes and ZeRO-1 data parallelism, no tensor parallelism (§3.2).
# Deviations: multi-head latent attention is modelled as multi-head attention of the same heads;
# H100 SuperPOD servers instead of H800; 61 layers split 15 x 4 + 1 over the 16 stages;
# DeepSeek's batch of 15,360 sequences (§4.2) as 120 micro-batches of one sequence per dp rank.
MOE_GPUS = 2048
MOE_SCENARIO = {
    "name": "deepseek-v3-like-moe-2k-gpus",
    "cluster": {"preset": "dgx-h100-superpod", "servers": MOE_GPUS // GPUS_PER_SERVER},
    "workload": {
        "model": {"layers": 61, "hidden": 7168, "ffn_hidden": 18432, "heads": 128, "kv_heads": 128,
                  "vocab": 129280, "experts": 256, "top_k": 8, "expert_ffn_hidden": 2048,
                  "shared_experts": 1, "dense_layers": 3, "seq_len": 4096},
        "parallel": {"tp": 1, "pp": 16, "ep": 64, "zero": 1, "micro_batch": 1, "global_batch": 15360,
                     "last_stage_layers": 1},
        "compute": {"gpu": "H100-SXM"},
        "steps": 1,
    },
}
DOC = Path(__file__).resolve().parents[1] / "docs" / "performance.md"


def _cpu_s() -> float:
    """CPU seconds of this process so far (user + system): on a shared machine the wall time also
    counts the time other processes held the cores, so both are reported."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_case(collective: str, routing: str, gpus: int) -> dict:
    """One case in this process: the figures as a dict (the subprocess prints it as JSON)."""
    from gpuwait.collectives.communicator import Communicator
    from gpuwait.collectives.ncclenv import parse_env
    from gpuwait.fabric.memory import WALK_ALLOWANCE_BYTES
    from gpuwait.fabric.perf import FLOW_ALGORITHMS, CollectivePredictor
    from gpuwait.runner.cost import BASE_BYTES, estimate_perf
    from gpuwait.spec import ClusterSpec
    from gpuwait.topology import build_cluster
    from gpuwait.transport import TRANSPORTS

    base_rss_GB = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9  # the interpreter and imports
    t0, c0 = time.perf_counter(), time.process_time()
    topo = build_cluster(ClusterSpec(preset="dgx-h100-superpod", servers=gpus // GPUS_PER_SERVER,
                                     routing={"kind": routing}))
    predictor = CollectivePredictor.create(Communicator.world(topo), parse_env({}), topo.spec.routing,
                                           TRANSPORTS[topo.spec.transport.name])
    est = predictor.estimate(collective, GIB)
    wall_s, case_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    peak_rss_GB = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9
    # what gpuwait perf states before the run (counted from the plan and topology: no fabric run; out of the timing)
    estimate = estimate_perf(predictor, collective, [GIB])
    flows = rows = classes = 0
    if est.fabric_time_s is not None:
        algorithm = FLOW_ALGORITHMS.get(est.algorithm, est.algorithm)
        _, run = predictor.fabric_run(est.collective, algorithm, est.protocol, est.n_channels)
        flows = sum(p.phase.n_flows for p in run.phases)
        rows = sum(p.routes.n_rows for p in run.phases)
        classes = sum(0 if p.routes.class_weights is None else p.routes.class_weights.shape[0] for p in run.phases)
    n = predictor.comm.n_ranks
    factor = 2 * (n - 1) / n if collective == "all_reduce" else (n - 1) / n  # nccl-tests busbw factors
    return {"collective": collective, "routing": routing, "gpus": n, "wall_s": wall_s, "case_cpu_s": case_cpu_s,
            "peak_rss_GB": peak_rss_GB, "cpu_s": _cpu_s(), "algorithm": est.algorithm, "busbw_GBps": GIB / est.time_s * factor / 1e9,
            "flows": flows, "route_rows": rows, "route_classes": classes, "estimate_GB": estimate.bytes / 1e9,
            "base_rss_GB": base_rss_GB, "run_estimate_GB": (estimate.bytes - BASE_BYTES - WALK_ALLOWANCE_BYTES) / 1e9}


def run_moe_case() -> dict:
    """One training step of :data:`MOE_SCENARIO` in this process: wall, peak RSS and the step's figures."""
    from gpuwait.runner.workload import run_workload
    from gpuwait.spec import Scenario, validate_data

    t0, c0 = time.perf_counter(), time.process_time()
    scenario = validate_data(Scenario, MOE_SCENARIO, source="bench_scaling", require_units=False)
    result = run_workload(scenario)[0]
    b = result.breakdown
    params = scenario.workload.model
    return {"collective": "moe step", "routing": scenario.cluster.routing.kind, "gpus": b.n_gpus,
            "wall_s": time.perf_counter() - t0, "case_cpu_s": time.process_time() - c0,
            "peak_rss_GB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9, "cpu_s": _cpu_s(),
            "step_time_s": b.step_time_s, "mfu": b.mfu, "model": params.preset or MOE_SCENARIO["name"],
            "exposed_comm_s": {k: round(v, 4) for k, v in b.exposed_comm_s.items()},
            "flows": 0, "route_classes": 0, "busbw_GBps": float("nan")}


def run_subprocess(collective: str, routing: str, gpus: int, timeout_s: float, max_gb: float) -> dict:
    def limit_memory() -> None:  # a runaway case fails alone instead of swapping a shared machine
        limit = int(max_gb * 1e9)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    cmd = [sys.executable, __file__, "--child", collective, routing, str(gpus)]
    t0 = time.perf_counter()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, preexec_fn=limit_memory)
    except subprocess.TimeoutExpired:
        return {"collective": collective, "routing": routing, "gpus": gpus, "error": f"> {timeout_s:.0f} s, stopped"}
    if done.returncode != 0:
        reason = "MemoryError" if "MemoryError" in done.stderr else (done.stderr.strip().splitlines() or ["?"])[-1]
        return {"collective": collective, "routing": routing, "gpus": gpus, "error": f"failed: {reason[:80]}"}
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    figures["process_wall_s"] = time.perf_counter() - t0  # with interpreter start and imports
    return figures


def growth_exponent(points: list[dict], field: str = "wall_s", from_gpus: int = FIT_FROM_GPUS) -> float | None:
    """Slope of log(``field``) vs log(GPUs) over the finished points from ``from_gpus`` up."""
    ok = [p for p in points if field in p and p["gpus"] >= from_gpus]
    if len(ok) < 2 or len({p["gpus"] for p in ok}) < 2:
        return None
    return float(np.polyfit(np.log([p["gpus"] for p in ok]), np.log([p[field] for p in ok]), 1)[0])


def _exponent_line(name: str, points: list[dict]) -> str:
    def fmt(value: float | None) -> str:
        return "not enough points" if value is None else f"{value:.2f}"

    line = (f"- growth exponent of wall time vs GPUs, {name} (from {FIT_FROM_GPUS:,} GPUs): {fmt(growth_exponent(points))}"
            f"; of the case's CPU time: {fmt(growth_exponent(points, 'case_cpu_s'))}")
    three_tiers = growth_exponent(points, "wall_s", THREE_TIERS_FROM_GPUS)
    if three_tiers is not None and any(p["gpus"] < THREE_TIERS_FROM_GPUS for p in points):
        line += (f"; 3 tiers only (from {THREE_TIERS_FROM_GPUS:,}): wall {fmt(three_tiers)}, "
                 f"CPU {fmt(growth_exponent(points, 'case_cpu_s', THREE_TIERS_FROM_GPUS))}")
    return line


def table(results: dict[str, list[dict]]) -> list[str]:
    lines = ["| case | GPUs | flows | route classes | wall (CPU of the case) | peak RSS | estimate | busbw / step |",
             "|---|---|---|---|---|---|---|---|"]
    for name, points in results.items():
        for p in points:
            if "error" in p:
                lines.append(f"| {name} | {p['gpus']:,} | | | {p['error']} | | | |")
                continue
            result = (f"step {p['step_time_s']:.2f} s, MFU {p['mfu']:.3f}" if "step_time_s" in p
                      else f"{p['busbw_GBps']:.1f} GB/s")
            cpu = f" ({p['case_cpu_s']:.1f} s CPU)" if "case_cpu_s" in p else ""
            estimate = ""
            if "estimate_GB" in p:  # the ratio of the run's parts: estimate less both allowances, peak less the baseline
                estimate = f"{p['estimate_GB']:.2f} GB ({p['run_estimate_GB'] / (p['peak_rss_GB'] - p['base_rss_GB']):.1f}x)"
            lines.append(f"| {name} | {p['gpus']:,} | {p['flows']:,} | {p['route_classes']:,} | {p['wall_s']:.1f} s{cpu} "
                         f"| {p['peak_rss_GB']:.2f} GB | {estimate} | {result} |")
    lines.append("")
    for name, points in results.items():
        lines.append(_exponent_line(name, points))
    return lines


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        figures = run_moe_case() if sys.argv[2] == "moe" else run_case(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        print(json.dumps(figures))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the table in docs/performance.md")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per case")
    parser.add_argument("--max-gb", type=float, default=10.0, help="address-space limit per case, GB")
    parser.add_argument("--only", default="", help="run only the series whose name contains this")
    args = parser.parse_args()
    results: dict[str, list[dict]] = {}
    load = []
    for name, (collective, routing, sizes) in SERIES.items():
        if args.only not in name:
            continue
        results[name] = []
        for gpus in sizes:
            load.append(os.getloadavg()[0])
            results[name].append(run_subprocess(collective, routing, gpus, args.timeout, args.max_gb))
            print(json.dumps(results[name][-1]), flush=True)
    lines = table(results)
    lines.append(f"- 1-minute load average during the runs: {min(load):.1f} to {max(load):.1f} "
                 f"on {os.cpu_count()} cores")
    print("\n".join(lines))
    if args.write:
        text = DOC.read_text()
        start, end = text.index("<!-- bench_scaling -->"), text.index("<!-- /bench_scaling -->")
        DOC.write_text(text[:start] + "<!-- bench_scaling -->\n" + "\n".join(lines) + "\n" + text[end:])


if __name__ == "__main__":
    main()
