"""Benchmark: how the flow model's cost grows with the cluster, for many-flow collectives (issue 16).

Runs each case in its own subprocess (so each peak RSS is its own ``ru_maxrss``), as ``gpuwait perf``
does: build the DGX SuperPOD H100 preset, pick NCCL's algorithm, compile it, route and solve it.

* alltoall 1 GiB, the preset's adaptive routing: 256, 1,024, 4,096, 16,384 GPUs
* all_reduce 1 GiB, adaptive routing and packet spraying: 2,048, 8,192, 16,384 GPUs

Prints a table and the fitted growth exponent of wall time vs GPUs (least squares on log-log,
points from 1,024 GPUs up), and with ``--write`` rewrites docs/performance.md. The machine may be
shared: the 1-minute load average is recorded with the figures. Run with::

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
    "all_reduce adaptive": ("all_reduce", "adaptive", (2048, 8192, 16384)),
    "all_reduce spray": ("all_reduce", "spray", (2048, 8192, 16384)),
}
FIT_FROM_GPUS = 1024
DOC = Path(__file__).resolve().parents[1] / "docs" / "performance.md"


def run_case(collective: str, routing: str, gpus: int) -> dict:
    """One case in this process: the figures as a dict (the subprocess prints it as JSON)."""
    from gpuwait.collectives.communicator import Communicator
    from gpuwait.collectives.ncclenv import parse_env
    from gpuwait.fabric.perf import FLOW_ALGORITHMS, CollectivePredictor
    from gpuwait.spec import ClusterSpec
    from gpuwait.topology import build_cluster
    from gpuwait.transport import TRANSPORTS

    t0 = time.perf_counter()
    topo = build_cluster(ClusterSpec(preset="dgx-h100-superpod", servers=gpus // GPUS_PER_SERVER,
                                     routing={"kind": routing}))
    predictor = CollectivePredictor.create(Communicator.world(topo), parse_env({}), topo.spec.routing,
                                           TRANSPORTS[topo.spec.transport.name])
    est = predictor.estimate(collective, GIB)
    wall_s = time.perf_counter() - t0
    flows = rows = classes = 0
    if est.fabric_time_s is not None:
        algorithm = FLOW_ALGORITHMS.get(est.algorithm, est.algorithm)
        _, run = predictor.fabric_run(est.collective, algorithm, est.protocol, est.n_channels)
        flows = sum(p.phase.n_flows for p in run.phases)
        rows = sum(p.routes.n_rows for p in run.phases)
        classes = sum(0 if p.routes.class_weights is None else p.routes.class_weights.shape[0] for p in run.phases)
    n = predictor.comm.n_ranks
    factor = 2 * (n - 1) / n if collective == "all_reduce" else (n - 1) / n  # nccl-tests busbw factors
    return {"collective": collective, "routing": routing, "gpus": n, "wall_s": wall_s,
            "peak_rss_GB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9,
            "algorithm": est.algorithm, "busbw_GBps": GIB / est.time_s * factor / 1e9,
            "flows": flows, "route_rows": rows, "route_classes": classes}


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


def growth_exponent(points: list[dict]) -> float | None:
    """Slope of log(wall) vs log(GPUs) over the finished points from FIT_FROM_GPUS up."""
    ok = [p for p in points if "wall_s" in p and p["gpus"] >= FIT_FROM_GPUS]
    if len(ok) < 2:
        return None
    return float(np.polyfit(np.log([p["gpus"] for p in ok]), np.log([p["wall_s"] for p in ok]), 1)[0])


def table(results: dict[str, list[dict]]) -> list[str]:
    lines = ["| case | GPUs | flows | route classes | wall | peak RSS | busbw |", "|---|---|---|---|---|---|---|"]
    for name, points in results.items():
        for p in points:
            if "error" in p:
                lines.append(f"| {name} | {p['gpus']:,} | | | {p['error']} | | |")
                continue
            lines.append(f"| {name} | {p['gpus']:,} | {p['flows']:,} | {p['route_classes']:,} | {p['wall_s']:.1f} s "
                         f"| {p['peak_rss_GB']:.2f} GB | {p['busbw_GBps']:.1f} GB/s |")
    lines.append("")
    for name, points in results.items():
        exponent = growth_exponent(points)
        lines.append(f"- growth exponent of wall time vs GPUs, {name} (from {FIT_FROM_GPUS:,} GPUs): "
                     + ("not enough points" if exponent is None else f"{exponent:.2f}"))
    return lines


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        print(json.dumps(run_case(sys.argv[2], sys.argv[3], int(sys.argv[4]))))
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
