"""Benchmark on the real model: build a 16,384-GPU (2,048-server) 3-tier fabric, route a
permutation with one flow per GPU through it, and solve max-min rates once.

Prints figures; it is not a timed test. Run with::

    python bench/bench_fabric.py [--servers 2048] [--routing ecmp]

Figures are wall-clock seconds on whatever machine runs it (best of --repeat), and memory
is the peak traced by tracemalloc while building plus the bytes of the topology's arrays.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np

from gpuwait.engine.base import effective_capacity_Bps
from gpuwait.engine.flow import max_min_rates
from gpuwait.engine.flow_run import simulate_flows
from gpuwait.routing import route_flows
from gpuwait.spec import PatternSpec, RoutingSpec
from gpuwait.topology import build_preset
from gpuwait.topology.summary import summarize
from gpuwait.transport import TRANSPORTS
from gpuwait.workload.traffic import pattern_flows


def best_of(repeat: int, fn):
    times, value = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - t0)
    return min(times), value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", type=int, default=2048)
    parser.add_argument("--routing", default="ecmp", choices=["ecmp", "static", "spray", "adaptive"])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    tracemalloc.start()
    t0 = time.perf_counter()
    topo = build_preset("dgx-h100-superpod", args.servers)
    build_s = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    array_bytes = sum(getattr(topo, f).nbytes for f in topo.__dataclass_fields__ if isinstance(getattr(topo, f), np.ndarray)
                      and getattr(topo, f).dtype != object)
    build_s = min(build_s, best_of(args.repeat - 1, lambda: build_preset("dgx-h100-superpod", args.servers))[0]) \
        if args.repeat > 1 else build_s
    print(f"fabric: dgx-h100-superpod x {args.servers} servers = {topo.n_gpus} GPUs, {topo.n_nodes} nodes, {topo.n_links} links")
    print(f"build: {build_s:.3f} s (best of {args.repeat}); peak traced memory {peak / 2**20:.1f} MiB; "
          f"numeric arrays {array_bytes / 2**20:.1f} MiB")
    summary_s, summary = best_of(1, lambda: summarize(topo))
    print(f"summary (bisection, oversubscription, diameter): {summary_s:.3f} s")

    flows = pattern_flows(topo, PatternSpec(kind="permutation", size="1GB", seed=1))
    spec = RoutingSpec(kind=args.routing)
    route_s, routes = best_of(args.repeat, lambda: route_flows(topo, spec, flows.src, flows.dst, transport="infiniband"))
    print(f"route a permutation ({len(flows)} flows, {args.routing}): {route_s:.3f} s, {routes.link_weights.nnz} link entries")

    capacity = effective_capacity_Bps(topo, TRANSPORTS["infiniband"])
    solve_s, (rate, bottleneck) = best_of(args.repeat, lambda: max_min_rates(routes.link_weights, capacity))
    print(f"one max-min solve: {solve_s:.3f} s (target <= 2 s); rates {rate.min() / 1e9:.2f}..{rate.max() / 1e9:.2f} GB/s, "
          f"{len(np.unique(np.round(rate, 3)))} distinct levels")
    run_s, run = best_of(1, lambda: simulate_flows(topo, flows, spec, TRANSPORTS["infiniband"]))
    print(f"full run of the permutation (route + {run.result.n_intervals} events): {run_s:.3f} s; "
          f"makespan {run.makespan_s * 1e3:.2f} ms, slowest flow {run.flow_mean_rate_Bps.min() / 1e9:.2f} GB/s")


if __name__ == "__main__":
    main()
