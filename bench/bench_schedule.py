"""Speed of the scheduler over time: N trace jobs on a cluster of S servers, per policy.

    python bench/bench_schedule.py                 # 1,000 jobs, 256 servers (2,048 GPUs)
    python bench/bench_schedule.py --jobs 200 --servers 64

The jobs follow the shipped samples' shape (tests/data/traces; bench/make_trace_samples.py): sizes
1-16 servers, most small; log-normal durations; Poisson arrivals at a rate that keeps the cluster
about 70 % allocated. Prints wall and CPU time per policy with the load average. Alone runs are cached per workload and
placement and, under spray or adaptive routing (static: where the destinations keep their D-mod-k residues),
reused across placements of one shape (``gpuwait.runner.schedule.shape_key``); shared runs per distinct
set of co-running jobs on shared links.

    python bench/bench_schedule.py --routing static --transport infiniband [--no-reuse]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from gpuwait.runner.schedule import schedule
from gpuwait.spec import Scenario
from gpuwait.spec.jobs import PlacementSpec
from gpuwait.workload.traces import Trace, TraceJob, trace_jobs


def synthetic_trace(n_jobs: int, servers: int, seed: int = 2023, load: float = 0.7) -> Trace:
    rng = np.random.default_rng(seed)
    sizes = rng.choice([1, 1, 1, 2, 2, 4, 4, 8, 16], size=n_jobs) * 8
    durations = np.clip(rng.lognormal(7.5, 1.0, size=n_jobs), 60, 50_000)
    rate = load * servers * 8 / float(np.mean(sizes * durations))  # jobs per second
    arrivals = np.cumsum(rng.exponential(1 / rate, size=n_jobs))
    jobs = [TraceJob(f"j{i}", float(a), float(d), int(g)) for i, (a, d, g) in enumerate(zip(arrivals, durations, sizes))]
    return Trace("synthetic", jobs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--servers", type=int, default=256)
    ap.add_argument("--policy", action="append", default=None)
    ap.add_argument("--routing", default="ecmp",
                    help="routing kind (spray/adaptive reuse solo runs across placements of one shape, static where "
                         "the destinations keep their D-mod-k residues)")
    ap.add_argument("--transport", default=None, help="transport name (e.g. infiniband with --routing static)")
    ap.add_argument("--no-reuse", action="store_true", help="run every placement alone (the figure before reuse)")
    args = ap.parse_args()
    if args.no_reuse:
        import gpuwait.runner.schedule as schedule_module

        schedule_module.SHAPE_SYMMETRIC_ROUTING = ()
        schedule_module.destination_residues = lambda topo: None
    jobs, durations = trace_jobs(synthetic_trace(args.jobs, args.servers))
    scenario = Scenario.model_validate({"cluster": {"preset": "rocev2-400g-2tier", "servers": args.servers,
                                                    "fabric": {"oversubscription": 2},
                                                    "routing": {"kind": args.routing},
                                                    **({"transport": {"name": args.transport}} if args.transport else {})},
                                         "jobs": jobs})
    for policy in args.policy or ["slurm-tree", "random"]:
        load_before = os.getloadavg()[0]
        t0, c0 = time.perf_counter(), time.process_time()
        r = schedule(scenario, PlacementSpec(policy=policy), durations_s=durations)
        wall_s, cpu_s = time.perf_counter() - t0, time.process_time() - c0
        s = r.summary()
        # the 1-minute load average before and after, and the process's CPU time: on shared cores a wall
        # time means little without them
        print(f"{policy:12s} {args.jobs} jobs, {args.servers * 8} GPUs, {args.routing}"
              f"{' (no reuse)' if args.no_reuse else ''}: {wall_s:7.1f} s wall, {cpu_s:7.1f} s CPU "
              f"(load {load_before:.1f} -> {os.getloadavg()[0]:.1f}); "
              f"mean JCT {s['mean_jct_s']:.0f} s, leaf fragmentation {100 * s['leaf_fragmentation']:.0f} %, "
              f"jobs in contention {100 * s['contended_jobs']:.0f} %", flush=True)


if __name__ == "__main__":
    main()
