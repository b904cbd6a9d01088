"""Benchmark: the event-driven flow engine on a sprayed or adaptive permutation, with the routes'
per-leaf-pair classes (``FlowSet.shared``) against the same routes joined into one row per QP.

Prints figures; not a timed test. Run with::

    python bench/bench_events.py [--servers 512] [--routing spray] [--sizes varied] [--json]

Each mode runs in its own process (``--mode``), so peak RSS is that mode's. ``--sizes varied``
draws each flow's size from 64-256 MiB (seeded), so every flow ends at its own event and the
engine re-solves once per finish; ``equal`` gives one event. Wall, CPU and the 1-minute load
average are printed: on a shared machine wall time follows the load, CPU time does not.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np


def run_mode(args: argparse.Namespace) -> dict:
    from gpuwait.engine.base import effective_capacity_Bps
    from gpuwait.engine.flow import FlowEngine, FlowSet, LinkTable, SharedWeights
    from gpuwait.routing import route_flows
    from gpuwait.spec import PatternSpec, RoutingSpec
    from gpuwait.topology import build_preset
    from gpuwait.transport import TRANSPORTS
    from gpuwait.workload.traffic import pattern_flows

    topo = build_preset("dgx-h100-superpod", args.servers)
    flows = pattern_flows(topo, PatternSpec(kind="permutation", size="256MiB", seed=1))
    sizes = flows.size_bytes
    if args.sizes == "varied":
        sizes = np.random.default_rng(1).uniform(64, 256, len(flows)) * 2**20
    routes = route_flows(topo, RoutingSpec(kind=args.routing), flows.src, flows.dst, transport="infiniband")
    capacity = effective_capacity_Bps(topo, TRANSPORTS["infiniband"])
    wall0, cpu0 = time.perf_counter(), time.process_time()
    if args.mode == "classes":
        flowset = FlowSet(size_bytes=routes.per_qp(sizes), link_weights=routes.own_weights,
                          shared=SharedWeights(routes.row_class, np.ones(routes.n_rows), routes.class_weights))
    else:
        flowset = FlowSet(size_bytes=routes.per_qp(sizes), link_weights=routes.link_weights)
    result = FlowEngine(LinkTable(capacity, topo.link_latency_s)).run(flowset)
    return {"mode": args.mode, "servers": args.servers, "gpus": topo.n_gpus, "routing": args.routing,
            "sizes": args.sizes, "rows": routes.n_rows, "engine_wall_s": round(time.perf_counter() - wall0, 2),
            "engine_cpu_s": round(time.process_time() - cpu0, 2),
            "peak_rss_GiB": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
            "load_1min": round(os.getloadavg()[0], 2), "makespan_s": float(result.makespan_s),
            "link_bytes_sum": float(result.link_bytes.sum()), "counters": result.counters}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", type=int, default=512)
    parser.add_argument("--routing", default="spray", choices=["spray", "adaptive"])
    parser.add_argument("--sizes", default="varied", choices=["equal", "varied"])
    parser.add_argument("--mode", choices=["joined", "classes"], help="run one mode in this process")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.mode:
        print(json.dumps(run_mode(args)))
        return
    rows = []
    for mode in ("joined", "classes"):
        out = subprocess.run([sys.executable, __file__, "--servers", str(args.servers), "--routing", args.routing,
                              "--sizes", args.sizes, "--mode", mode], check=True, capture_output=True, text=True)
        rows.append(json.loads(out.stdout))
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    for r in rows:
        print(f"{r['mode']:>8}: {r['gpus']} GPUs {r['routing']} {r['sizes']}: engine wall {r['engine_wall_s']} s, "
              f"CPU {r['engine_cpu_s']} s, peak RSS {r['peak_rss_GiB']} GiB, load {r['load_1min']}, "
              f"makespan {r['makespan_s']:.6e} s, {r['counters']['full_solves']} full solves")


if __name__ == "__main__":
    main()
