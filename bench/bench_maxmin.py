"""Benchmark of the flow engine: one max-min solve at fabric scale, and a full event-driven run.

Prints figures; it is not a timed test. Run with::

    PYTHONPATH=src python bench/bench_maxmin.py [--hosts 16384] [--run-flows 4096] [--seed 0]

The input is a synthetic fat-tree-like incidence: every host sends to one other host (a random
permutation) through 6 directional links — host uplink, a random leaf uplink, a random spine
uplink, a random spine downlink, a random leaf downlink of the destination leaf, host downlink.
Random uplink choices (like ECMP hashing) put 2-3 flows on some fabric links, so the solve
has several bottleneck levels.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import scipy.sparse as sp

from gpuwait.engine.flow import FlowEngine, FlowSet, LinkTable, MaxMinSolver

HOSTS_PER_LEAF = 32
HOST_LINK_BPS = 50e9  # 400 Gb/s NIC
FABRIC_LINK_BPS = 50e9


def synthetic_fabric(n_hosts: int, rng: np.random.Generator) -> tuple[sp.csr_matrix, np.ndarray]:
    """``(F, L)`` incidence of a host permutation over a synthetic two-tier-plus-core fabric, and capacities."""
    n_leaves = -(-n_hosts // HOSTS_PER_LEAF)
    n_leaf_up = n_leaves * HOSTS_PER_LEAF  # non-blocking leaves: one uplink per host port
    n_spine_up = (200_000 - 2 * n_hosts - 2 * n_leaf_up) // 2 if n_hosts >= 16_384 else 4 * n_leaf_up
    blocks = [n_hosts, n_leaf_up, n_spine_up, n_spine_up, n_leaf_up, n_hosts]  # order along the path
    base = np.concatenate([[0], np.cumsum(blocks)[:-1]])
    n_links = int(sum(blocks))

    src = np.arange(n_hosts)
    dst = rng.permutation(n_hosts)
    hop_links = np.stack([
        base[0] + src,
        base[1] + (src // HOSTS_PER_LEAF) * HOSTS_PER_LEAF + rng.integers(0, HOSTS_PER_LEAF, n_hosts),
        base[2] + rng.integers(0, n_spine_up, n_hosts),
        base[3] + rng.integers(0, n_spine_up, n_hosts),
        base[4] + (dst // HOSTS_PER_LEAF) * HOSTS_PER_LEAF + rng.integers(0, HOSTS_PER_LEAF, n_hosts),
        base[5] + dst,
    ], axis=1)
    rows = np.repeat(src, hop_links.shape[1])
    weights = sp.csr_matrix((np.ones(rows.size), (rows, hop_links.ravel())), shape=(n_hosts, n_links))
    weights.sum_duplicates()
    capacity_Bps = np.full(n_links, FABRIC_LINK_BPS)
    capacity_Bps[: blocks[0]] = HOST_LINK_BPS
    capacity_Bps[-blocks[-1]:] = HOST_LINK_BPS
    return weights, capacity_Bps


def best_of(n_runs: int, fn):
    best_s, out = np.inf, None
    for _ in range(n_runs):
        t0_s = time.perf_counter()
        out = fn()
        best_s = min(best_s, time.perf_counter() - t0_s)
    return best_s, out


def print_counters(counters: dict[str, int]) -> None:
    print(f"  rate updates {counters['rate_updates']:,}: {counters['local_updates']:,} settled locally "
          f"({counters['local_rounds']:,} local re-solves), {counters['full_solves']:,} full solves "
          f"({counters['full_solve_iterations']:,} filling iterations)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=16_384, help="flows in the single solve")
    parser.add_argument("--run-flows", type=int, default=4_096, help="flows in the full engine run")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)

    weights, capacity_Bps = synthetic_fabric(args.hosts, rng)
    load = np.bincount(weights.indices, minlength=weights.shape[1])
    print(f"max-min solve: {weights.shape[0]:,} flows x {weights.shape[1]:,} links, {weights.nnz:,} nonzeros, "
          f"flows per used link max {load.max()}, links with >=2 flows {int((load >= 2).sum()):,}")
    build_s, solver = best_of(3, lambda: MaxMinSolver(weights, capacity_Bps))
    solve_s, solution = best_of(3, solver.solve)
    print(f"  solver setup (checks, triplets) {build_s:8.4f} s")
    print(f"  one solve (best of 3)           {solve_s:8.4f} s   {solution.iterations} filling iterations")
    levels_Gbps = np.unique(np.round(solution.rate_Bps * 8 / 1e9, 3))
    print(f"  rates: {levels_Gbps.size} distinct levels, {levels_Gbps.min():.1f}..{levels_Gbps.max():.1f} Gb/s")

    weights, capacity_Bps = synthetic_fabric(args.run_flows, rng)
    n_flows = weights.shape[0]
    size_bytes = rng.uniform(1e6, 256e6, n_flows)  # distinct sizes: one event per flow end
    links = LinkTable(capacity_Bps=capacity_Bps, latency_s=np.full(capacity_Bps.shape, 1e-6))
    flows = FlowSet(size_bytes=size_bytes, link_weights=weights, path_latency_s=np.full(n_flows, 6e-6))
    engine = FlowEngine(links)
    run_s, result = best_of(3, lambda: engine.run(flows))
    print(f"engine run: {n_flows:,} flows x {weights.shape[1]:,} links, distinct sizes, all released at 0")
    print(f"  run (best of 3)                 {run_s:8.4f} s   {result.n_intervals:,} intervals "
          f"({run_s / max(result.n_intervals, 1) * 1e3:.3f} ms per event)")
    print(f"  makespan {result.makespan_s * 1e3:.3f} ms; rate log entries: {result.flow_rate_log.index.size:,} flow, "
          f"{result.link_rate_log.index.size:,} link")
    print_counters(result.counters)

    # Same flows with dependencies: flow i waits for flow i - n/4 (four waves of a pipeline).
    wave = n_flows // 4
    deps = sp.csr_matrix((np.ones(n_flows - wave, dtype=bool), (np.arange(wave, n_flows), np.arange(n_flows - wave))),
                         shape=(n_flows, n_flows))
    chained = FlowSet(size_bytes=size_bytes, link_weights=weights, path_latency_s=np.full(n_flows, 6e-6),
                      depends_on=deps)
    run_s, result = best_of(3, lambda: engine.run(chained))
    print(f"engine run with dependencies (4 waves of {wave:,}):")
    print(f"  run (best of 3)                 {run_s:8.4f} s   {result.n_intervals:,} intervals, "
          f"makespan {result.makespan_s * 1e3:.3f} ms")
    print_counters(result.counters)


if __name__ == "__main__":
    main()
