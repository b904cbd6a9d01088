"""Packet engine benchmark: a random permutation on a 3-tier 100 Gb/s fat tree (htsim's connection matrix).

``--hosts 1024``: 1,024 servers with one GPU and one 100 Gb/s NIC each, a 3-tier clos of radix-32
switches (non-blocking), and a random permutation of 1,024 flows of 2 MB each, ECMP, RoCEv2 with PFC
and DCQCN. htsim needs about 12 s for this benchmark single-threaded. Prints figures; ``--json``
prints one JSON object. The numba compile time (first call in a fresh cache) is reported apart:
``compile_s`` is the time of a tiny warm-up run. The run is repeated (``--repeat``, the same seed,
so the same events): ``wall_s`` and ``events_per_s`` are the median run's, ``wall_s_runs`` lists
every run, because a shared machine's speed swings by a quarter from one second to the next;
``cpu_s`` is the median of the runs' process CPU time (their setup included), which waiting for a
busy machine's cores does not inflate.
``--start-jitter-us J`` starts the flows at random times in [0, J) µs: the fabric then leaves
lockstep and most event times differ, the event queue's worst case.
``--chunked`` also times each run with its event loop in chunks, as a progress display runs it
(a no-op callback; chunks sized to about 0.25 s of wall time), paired with the one-call runs (each
first in every other pair) so both see the same machine: ``chunked_wall_s`` is the median chunked run and ``chunked_overhead`` the
median of the paired ratios chunked / one call, minus 1 (``chunked_cpu_overhead`` the same on the
process's CPU time, steadier on a shared machine); the chunked results must equal the others.
``digest`` is a sha256 over every per-QP output (first transmission, finish, counters), every
per-link array (counters, queue integral, queue samples), the delivery samples, the delay histogram
and the run's event, packet and end-time totals: a change of the engine that keeps results keeps it.

    python bench/packet_permutation.py --hosts 1024 --json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time

import numpy as np


def results_digest(run) -> str:
    """sha256 over every output array of a packet run (in a fixed order, with dtype and shape), so two
    runs that differ in any counter differ in the digest."""
    h = hashlib.sha256()
    arrays = [run.qp_first_tx_s, run.qp_finish_s, run.qp_counters, run.link_counters, run.link_queue_integral,
              run.queue_links, run.queue_time_s, run.queue_bytes, run.qp_delivered_packets, run.delay_histogram,
              np.array([run.events, run.packets, int(run.timed_out)], np.int64), np.array([run.end_s])]
    for arr in arrays:
        arr = np.ascontiguousarray(arr)
        h.update(f"{arr.dtype.str}{arr.shape}".encode())
        h.update(arr.tobytes())
    return h.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=1024)
    parser.add_argument("--size", type=float, default=2e6, help="bytes per flow")
    parser.add_argument("--radix", type=int, default=32)
    parser.add_argument("--transport", default="rocev2", choices=["rocev2", "infiniband"])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--start-jitter-us", type=float, default=0.0, help="flows start uniformly in [0, J) us")
    parser.add_argument("--repeat", type=int, default=3, help="runs to time (the median is reported)")
    parser.add_argument("--chunked", action="store_true", help="also time runs in progress chunks (paired)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, got {args.repeat}")
    if args.start_jitter_us < 0:
        parser.error(f"--start-jitter-us must be >= 0, got {args.start_jitter_us}")

    t_import = time.perf_counter()
    from gpuwait.engine.flow_run import simulate_flows
    from gpuwait.engine.packet import simulate_packets
    from gpuwait.routing.paths import route_flows
    from gpuwait.spec import RoutingSpec
    from gpuwait.spec.cluster import ClusterSpec
    from gpuwait.topology.presets import build_cluster
    from gpuwait.transport import TRANSPORTS
    from gpuwait.workload.traffic import FlowTable
    import_s = time.perf_counter() - t_import

    spec = ClusterSpec.model_validate({
        "name": f"fat-tree-{args.hosts}", "servers": args.hosts,
        "server": {"gpus": 1, "nics": 1, "nic_speed": "100Gbps", "pcie_switches": 1, "cpus": 1},
        "fabric": {"tiers": 3, "switch_radix": args.radix}})
    topo = build_cluster(spec)
    nics = topo.nic_node[:, 0].astype(np.int64)
    rng = np.random.default_rng(args.seed)
    while True:  # a permutation with no fixed point
        perm = rng.permutation(len(nics))
        if not (perm == np.arange(len(nics))).any():
            break
    n = len(nics)
    start_s = rng.uniform(0.0, args.start_jitter_us * 1e-6, n) if args.start_jitter_us > 0 else np.zeros(n)
    flows = FlowTable([f"f{i}" for i in range(n)], nics, nics[perm], np.full(n, args.size), start_s,
                      np.full(n, np.inf), [[] for _ in range(n)])
    routing = RoutingSpec(kind="ecmp")
    transport = TRANSPORTS[args.transport]

    # compile (or load from the numba cache) on a two-flow run
    t0 = time.perf_counter()
    small = FlowTable(["a", "b"], nics[:2], nics[[1, 0]], np.full(2, 1e4), np.zeros(2), np.full(2, np.inf), [[], []])
    simulate_packets(topo, small, routing, transport)
    compile_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    routes = route_flows(topo, routing, flows.src, flows.dst, transport=transport.name)
    route_s = time.perf_counter() - t0
    runs, chunked, cpu_pairs, cpu_s = [], [], [], []

    def timed(**kw):
        c0 = time.process_time()
        t0 = time.perf_counter()
        run = simulate_packets(topo, flows, routing, transport, seed=args.seed, routes=routes, **kw)
        return run, time.perf_counter() - t0, time.process_time() - c0

    for i in range(args.repeat):
        # the two runs of a pair in turn first and second, so an order effect cancels
        chunk = timed(progress=lambda p: None) if args.chunked and i % 2 else None
        one, total, cpu = timed()
        runs.append((one, total))
        cpu_s.append(cpu)
        if args.chunked:
            chunk = chunk or timed(progress=lambda p: None)
            chunked.append(chunk[0])
            cpu_pairs.append(chunk[2] / cpu)
    pairs = [c.wall_s / r.wall_s for (r, _), c in zip(runs, chunked)]
    digests = {results_digest(r) for r in [r for r, _ in runs] + chunked}
    if len(digests) != 1:
        raise SystemExit(f"the same seed gave {len(digests)} different results over {args.repeat} runs")
    runs.sort(key=lambda r: r[0].wall_s)
    run, total_s = runs[len(runs) // 2]
    t0 = time.perf_counter()
    flow_run = simulate_flows(topo, flows, routing, transport)
    flow_s = time.perf_counter() - t0
    totals = run.totals()
    doc = {
        "hosts": n, "switches": int(len(topo.switches())), "links": topo.n_links, "flows": n,
        "flow_size_bytes": args.size, "start_jitter_us": args.start_jitter_us, "transport": transport.name,
        "wall_s": run.wall_s, "wall_s_runs": [round(r.wall_s, 4) for r, _ in runs], "setup_s": total_s - run.wall_s,
        "cpu_s": float(np.median(cpu_s)),
        "route_s": route_s, "compile_s": compile_s,
        "import_s": import_s, "events": run.events, "events_per_s": run.events_per_s, "packets": run.packets,
        "simulated_s": run.end_s, "mean_fct_s": float(run.flow_time_s.mean()),
        "fct_p50_s": run.fct_percentiles_s()["p50"], "fct_p99_s": run.fct_percentiles_s()["p99"],
        "flow_engine_mean_fct_s": float(flow_run.flow_time_s.mean()), "flow_engine_wall_s": flow_s,
        "pause_frames": totals[f"rx_prio{run.params.data_priority}_pause"], "ecn_marks": totals["ecn_marked_packets"],
        "cnps": totals["np_cnp_sent"], "drops": totals["PortXmitDiscards"], "digest": digests.pop(),
    }
    if args.chunked:
        doc.update(chunked_wall_s=float(np.median([c.wall_s for c in chunked])),
                   chunked_wall_s_runs=[round(c.wall_s, 4) for c in chunked],
                   chunked_overhead=float(np.median(pairs)) - 1, chunked_cpu_overhead=float(np.median(cpu_pairs)) - 1)
    if args.json:
        print(json.dumps(doc))
        return
    for key, value in doc.items():
        print(f"{key:>24}: {value:,.6g}" if isinstance(value, float) else f"{key:>24}: {value}")


if __name__ == "__main__":
    main()
