"""Benchmark: the event-driven flow engine, two comparisons.

* ``--case classes`` (default): a sprayed or adaptive permutation, with the routes' per-leaf-pair
  classes (``FlowSet.shared``) against the same routes joined into one row per QP.
* ``--case staggered``: many concurrent ECMP flows with many distinct rates on a 2-tier RoCEv2
  fabric (``--perms`` random GPU permutations, each flow released at a random time in the first
  ``--spread-ms`` and sized 16-256 MiB), with full max-min re-solves at every event against the
  two incremental updates (``FlowEngine(reallocation=...)``: "local", "levels"): wall, events and
  the mean number of flows re-solved per event (``counters["resolved_flows"] / counters["rate_updates"]``).

``--reallocation`` sets the engine's reallocation in the classes case (the joined rows use it; the
classes re-solve in full at every event whatever it is); the engine's default without it.

Prints figures; not a timed test. Run with::

    python bench/bench_events.py [--servers 512] [--routing spray] [--sizes varied] [--json]
    python bench/bench_events.py --case staggered [--servers 512] [--perms 12] [--spread-ms 20]

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


def run_staggered(args: argparse.Namespace) -> dict:
    from gpuwait.engine.base import effective_capacity_Bps
    from gpuwait.engine.flow import FlowEngine, FlowSet, LinkTable
    from gpuwait.routing import route_flows
    from gpuwait.spec import PatternSpec, RoutingSpec
    from gpuwait.topology import build_preset
    from gpuwait.transport import TRANSPORTS
    from gpuwait.workload.traffic import pattern_flows

    topo = build_preset("rocev2-400g-2tier", args.servers)
    tables = [pattern_flows(topo, PatternSpec(kind="permutation", size="1MiB", seed=seed)) for seed in range(args.perms)]
    src = np.concatenate([t.src for t in tables])
    dst = np.concatenate([t.dst for t in tables])
    rng = np.random.default_rng(1)
    routes = route_flows(topo, RoutingSpec(kind="ecmp", qps_per_connection=1), src, dst, transport="rocev2")
    size_bytes = routes.per_qp(rng.uniform(16, 256, src.size) * 2**20)
    release_s = rng.uniform(0, args.spread_ms * 1e-3, src.size)[routes.flow_index]
    capacity = effective_capacity_Bps(topo, TRANSPORTS["rocev2"])
    flowset = FlowSet(size_bytes=size_bytes, link_weights=routes.link_weights, release_time_s=release_s)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    result = FlowEngine(LinkTable(capacity, topo.link_latency_s), reallocation=args.mode).run(flowset)
    wall_s = time.perf_counter() - wall0
    counters = result.counters
    active_s = np.diff(result.timeline_s)
    return {"mode": args.mode, "servers": args.servers, "gpus": topo.n_gpus, "flows": routes.n_rows,
            "distinct_rates": int(np.unique(np.round(result.mean_rate_Bps, 3)).size),
            "events": counters["rate_updates"], "engine_wall_s": round(wall_s, 2),
            "engine_cpu_s": round(time.process_time() - cpu0, 2),
            "ms_per_event": round(1e3 * wall_s / max(counters["rate_updates"], 1), 2),
            "mean_resolved_per_event": round(counters["resolved_flows"] / max(counters["rate_updates"], 1), 1),
            "mean_changed_per_event": round(counters["changed_flows"] / max(counters["rate_updates"], 1), 1),
            "mean_active_flows": round(float(np.sum(result.tx_end_s - result.start_s) / max(active_s.sum(), 1e-300)), 1),
            "peak_rss_GiB": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
            "load_1min": round(os.getloadavg()[0], 2), "makespan_s": float(result.makespan_s),
            "link_bytes_sum": float(result.link_bytes.sum()), "counters": counters}


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
    engine = FlowEngine(LinkTable(capacity, topo.link_latency_s), **(
        {"reallocation": args.reallocation} if args.reallocation else {}))
    result = engine.run(flowset)
    return {"mode": args.mode, "reallocation": engine.reallocation, "servers": args.servers, "gpus": topo.n_gpus, "routing": args.routing,
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
    parser.add_argument("--case", default="classes", choices=["classes", "staggered"])
    parser.add_argument("--perms", type=int, default=12, help="staggered: GPU permutations (flows = perms x GPUs)")
    parser.add_argument("--spread-ms", type=float, default=20.0, help="staggered: releases spread over this")
    parser.add_argument("--mode", choices=["joined", "classes", "full", "levels", "local"],
                        help="run one mode in this process")
    parser.add_argument("--reallocation", choices=["full", "levels", "local"],
                        help="classes case: the engine's reallocation (default: the engine's)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.mode:
        print(json.dumps(run_staggered(args) if args.case == "staggered" else run_mode(args)))
        return
    if args.case == "staggered":
        staggered(args)
        return
    options = ["--servers", str(args.servers), "--routing", args.routing, "--sizes", args.sizes]
    rows = _children(options + (["--reallocation", args.reallocation] if args.reallocation else []),
                     ("joined", "classes"))
    _report(rows, args.json, lambda r: (
        f"{r['mode']:>8} ({r['reallocation']}): {r['gpus']} GPUs {r['routing']} {r['sizes']}: engine wall {r['engine_wall_s']} s, "
        f"CPU {r['engine_cpu_s']} s, peak RSS {r['peak_rss_GiB']} GiB, load {r['load_1min']}, "
        f"makespan {r['makespan_s']:.6e} s, {r['counters']['full_solves']} full solves, re-solved "
        f"{r['counters']['resolved_flows'] / max(r['counters']['rate_updates'], 1):.1f} flows/event"))


def _report(rows: list[dict], as_json: bool, line) -> None:
    """The children's rows as JSON, or one line each as ``line`` writes it."""
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    for r in rows:
        print(line(r))


def _children(options: list[str], modes: tuple[str, ...]) -> list[dict]:
    """Each mode run in its own subprocess (its own peak RSS), as the JSON row it prints."""
    return [json.loads(subprocess.run([sys.executable, __file__, *options, "--mode", mode], check=True,
                                      capture_output=True, text=True).stdout) for mode in modes]


def staggered(args: argparse.Namespace) -> None:
    rows = _children(["--case", "staggered", "--servers", str(args.servers), "--perms", str(args.perms),
                      "--spread-ms", str(args.spread_ms)], ("full", "local", "levels"))
    _report(rows, args.json, lambda r: (
        f"{r['mode']:>7}: {r['gpus']} GPUs, {r['flows']} flows ({r['distinct_rates']} distinct mean rates), "
        f"{r['events']} events, mean {r['mean_active_flows']} active: engine wall {r['engine_wall_s']} s "
        f"({r['ms_per_event']} ms/event), CPU {r['engine_cpu_s']} s, re-solved {r['mean_resolved_per_event']} "
        f"flows/event ({r['mean_changed_per_event']} changed), peak RSS {r['peak_rss_GiB']} GiB, "
        f"load {r['load_1min']}, makespan {r['makespan_s']:.9e} s"))


if __name__ == "__main__":
    main()
