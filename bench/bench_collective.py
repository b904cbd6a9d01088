"""Benchmark: a 1 GiB all_reduce across a large cluster, predicted end to end.

Prints figures; not a timed test. Run with::

    python bench/bench_collective.py [--gpus 16384] [--routing ecmp] [--switch-radix 128] [--json]
    python bench/bench_collective.py --gpus 131072          # 16,384 DGX H100 servers, radix-128 switches

The cluster is the DGX H100 SuperPOD-style rail-optimized fabric (3 tiers past 256 servers at the
preset's radix 64) run over RoCEv2 with ECMP, as issue 3 asks. A 3-tier fat tree of radix k holds
k^3/4 NIC ports: 65,536 at radix 64, so 131,072 GPUs need radix 128 (51.2T switches, 128 x 400G);
``--switch-radix`` defaults to the smallest of 64 and 128 that holds the cluster.

Figures: wall time per stage — build (topology tables), compile (NCCL model, phases, merging
server-local flows), route (ECMP paths), solve (max-min rates) — and the total, and the same in
this process's CPU time (user + system: on shared cores the wall time also counts other processes'
turns, the CPU time does not); peak RSS after the build and at the end; the predicted time and busbw.
The run's own load average (1 minute) is printed with them. Route and solve CPU are those of phases
routed flow by flow (a grouped all-to-all's are counted in compile). The digest (BLAKE2b, computed after
the timings) covers every simulated phase's routes (rows, their own and shared link weights) and rates: a
change meant to be faster only must leave it, the time and the busbw unchanged.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import sys
import time

import numpy as np

from gpuwait.collectives.communicator import Communicator
from gpuwait.collectives.ncclenv import parse_env
from gpuwait.errors import TopologyError
from gpuwait.fabric.perf import FLOW_ALGORITHMS, CollectivePredictor
from gpuwait.spec import ClusterSpec
from gpuwait.topology import build_cluster
from gpuwait.transport import TRANSPORTS

GPUS_PER_SERVER = 8  # DGX H100
PRESET_RADIX = 64  # QM9700


def peak_rss_GiB() -> float:
    # ru_maxrss is in KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def run_digest(run) -> str:
    """BLAKE2b of the phases' routes and rates, bit for bit (16 hex digits); "-" when nothing was simulated."""
    if run is None:
        return "-"
    digest = hashlib.blake2b(digest_size=8)
    for phase in run.phases:
        routes = phase.routes
        parts = [routes.flow_index, routes.qp_index, routes.path_latency_s, routes.udp_sport, phase.rate_Bps,
                 np.float64(phase.step_time_s), routes.own_weights.indptr, routes.own_weights.indices,
                 routes.own_weights.data]
        for row_class, weights in ((routes.row_class, routes.class_weights), *routes.side_classes):
            if weights is not None:
                parts += [row_class.toarray() if hasattr(row_class, "toarray") else row_class,
                          weights.indptr, weights.indices, weights.data]
        for part in parts:
            digest.update(np.ascontiguousarray(part).tobytes())
    return digest.hexdigest()


def fat_tree_ports(radix: int) -> int:
    """NIC ports a non-blocking 3-tier fat tree of this radix holds."""
    return radix**3 // 4


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=None, help=f"GPUs ({GPUS_PER_SERVER} per server); overrides --servers")
    parser.add_argument("--servers", type=int, default=2048)
    parser.add_argument("--switch-radix", type=int, default=None,
                        help="compute-fabric switch radix; default 64 (the preset's) or 128 when 64 cannot hold the NICs")
    parser.add_argument("--routing", default="ecmp")
    parser.add_argument("--size", type=int, default=2**30, help="bytes per rank")
    parser.add_argument("--storage", choices=("auto", "preset", "none"), default="auto",
                        help="the preset's storage network, none, or auto: the preset's unless it cannot hold the cluster")
    parser.add_argument("--env", action="append", default=[], help="NCCL_X=value, repeatable")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    args = parser.parse_args()
    servers = args.servers if args.gpus is None else -(-args.gpus // GPUS_PER_SERVER)
    nic_ports = servers * GPUS_PER_SERVER
    radix = args.switch_radix or (PRESET_RADIX if nic_ports <= fat_tree_ports(PRESET_RADIX) else 2 * PRESET_RADIX)

    fields = dict(preset="dgx-h100-superpod", servers=servers, transport={"name": "rocev2"},
                  routing={"kind": args.routing})
    if radix != PRESET_RADIX:
        fields["fabric"] = {"switch_radix": radix}
    storage = args.storage
    t0, c0 = time.perf_counter(), time.process_time()
    topo = None
    if storage != "none":
        try:
            topo = build_cluster(ClusterSpec(**fields))
            storage = "preset"
        except TopologyError as err:
            # errors name their field path first: only the storage network may be dropped
            if args.storage == "preset" or not str(err).startswith("storage"):
                raise
            storage = f"none ({err})"
    if topo is None:
        t0, c0 = time.perf_counter(), time.process_time()
        topo = build_cluster(ClusterSpec(**fields, storage={"mode": "none"}))
    build_s, build_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    build_rss_GiB = peak_rss_GiB()

    env = parse_env(dict(pair.split("=", 1) for pair in args.env))
    t1, c1 = time.perf_counter(), time.process_time()
    predictor = CollectivePredictor.create(Communicator.world(topo), env, topo.spec.routing, TRANSPORTS["rocev2"])
    est = predictor.estimate("all_reduce", args.size)
    predict_s, predict_cpu_s = time.perf_counter() - t1, time.process_time() - c1
    route_s = solve_s = route_cpu_s = solve_cpu_s = 0.0
    run = None
    if est.fabric_time_s is not None:
        # already simulated by estimate(): the cached run, for its stage timings
        _, run = predictor.fabric_run(est.collective, FLOW_ALGORITHMS[est.algorithm], est.protocol, est.n_channels)
        route_s = sum(p.route_wall_s for p in run.phases)
        solve_s = sum(p.solve_wall_s for p in run.phases)
        route_cpu_s = sum(p.route_cpu_s for p in run.phases)
        solve_cpu_s = sum(p.solve_cpu_s for p in run.phases)
    n = predictor.comm.n_ranks
    busbw_GBps = args.size / est.time_s * 2 * (n - 1) / n / 1e9
    figures = {
        "gpus": n, "servers": servers, "switch_radix": radix, "tiers": topo.spec.fabric.tiers,
        "storage_network": storage, "routing": args.routing, "nodes": topo.n_nodes, "links": topo.n_links,
        "wall_s": {"build": build_s, "compile": predict_s - route_s - solve_s, "route": route_s, "solve": solve_s,
                   "total": build_s + predict_s},
        "cpu_s": {"build": build_cpu_s, "compile": predict_cpu_s - route_cpu_s - solve_cpu_s, "route": route_cpu_s,
                  "solve": solve_cpu_s, "total": build_cpu_s + predict_cpu_s},
        "load_average_1min": os.getloadavg()[0],
        "peak_rss_GiB": {"after_build": build_rss_GiB, "total": peak_rss_GiB()},
        "size_bytes": args.size, "algorithm": est.algorithm, "protocol": est.protocol, "n_channels": est.n_channels,
        "time_s": est.time_s, "busbw_GBps": busbw_GBps, "limited_by": est.limited_by, "digest": run_digest(run),
    }
    if args.json:
        json.dump(figures, sys.stdout, indent=2)
        print()
        return
    wall, cpu = figures["wall_s"], figures["cpu_s"]
    print(f"{n} GPUs ({servers} servers), {topo.spec.fabric.tiers}-tier radix {radix}, {args.routing}, "
          f"storage network: {storage}; {topo.n_nodes} nodes, {topo.n_links} links")
    print("wall: " + ", ".join(f"{stage} {seconds:.2f} s" for stage, seconds in wall.items())
          + f"; peak RSS {figures['peak_rss_GiB']['after_build']:.2f} GiB after build, "
          f"{figures['peak_rss_GiB']['total']:.2f} GiB total")
    print("cpu:  " + ", ".join(f"{stage} {seconds:.2f} s" for stage, seconds in cpu.items())
          + f"; load average {figures['load_average_1min']:.1f}")
    print(f"all_reduce {args.size} B: {est.algorithm}/{est.protocol}, {est.n_channels} channels, "
          f"{est.time_s * 1e3:.3f} ms, busbw {busbw_GBps:.1f} GB/s, limited by {est.limited_by}; "
          f"digest {figures['digest']}")


if __name__ == "__main__":
    main()
