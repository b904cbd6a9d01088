"""Benchmark: a 1 GiB all_reduce across a large cluster, predicted end to end.

Prints figures; not a timed test. Run with::

    python bench/bench_collective.py [--servers 2048] [--routing ecmp]

The cluster is the DGX H100 SuperPOD-style rail-optimized fabric (3 tiers past 256 servers) run
over RoCEv2 with ECMP, as issue 3 asks. Figures: wall time and peak RSS of the prediction
(compile + route + flow engine + NCCL model), and the predicted busbw.
"""

from __future__ import annotations

import argparse
import resource
import time

from gpuwait.collectives.communicator import Communicator
from gpuwait.collectives.ncclenv import parse_env
from gpuwait.engine.perf import CollectivePredictor
from gpuwait.spec import ClusterSpec
from gpuwait.topology import build_cluster
from gpuwait.transport import TRANSPORTS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", type=int, default=2048)
    parser.add_argument("--routing", default="ecmp")
    parser.add_argument("--size", type=int, default=2**30)
    parser.add_argument("--env", action="append", default=[])
    args = parser.parse_args()
    t0 = time.perf_counter()
    spec = ClusterSpec(preset="dgx-h100-superpod", servers=args.servers, transport={"name": "rocev2"},
                       routing={"kind": args.routing})
    topo = build_cluster(spec)
    t_build = time.perf_counter() - t0
    env = parse_env(dict(pair.split("=", 1) for pair in args.env))
    predictor = CollectivePredictor.create(Communicator.world(topo), env, topo.spec.routing, TRANSPORTS["rocev2"])
    t1 = time.perf_counter()
    est = predictor.estimate("all_reduce", args.size)
    t_predict = time.perf_counter() - t1
    n = predictor.comm.n_ranks
    busbw = args.size / est.time_s * 2 * (n - 1) / n / 1e9
    rss_GiB = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"{n} GPUs ({args.servers} servers), {args.routing}: build {t_build:.2f} s, predict {t_predict:.2f} s, "
          f"peak RSS {rss_GiB:.2f} GiB")
    print(f"all_reduce {args.size} B: {est.algorithm}/{est.protocol}, {est.n_channels} channels, "
          f"{est.time_s * 1e3:.3f} ms, busbw {busbw:.1f} GB/s, limited by {est.limited_by}")


if __name__ == "__main__":
    main()
