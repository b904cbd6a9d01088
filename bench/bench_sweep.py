"""Benchmark: sweep throughput (cases per hour) on this machine's cores, and where a case's time goes.

Prints figures; not a timed test. Run with::

    python bench/bench_sweep.py [--perf-cases 200] [--train-cases 12] [--workers N] [--json]

Two studies, each over distinct cases (ECMP seeds x QPs per connection, so no case is a cache hit
on disk):

* ``perf64``: the nccl-tests prediction ``gpuwait perf all_reduce -b 8 -e 8G -f 2`` on 64 servers of
  ``rocev2-400g-2tier`` (512 GPUs): 31 sizes per case. Issue 18's target: >= 2,000 cases per hour.
* ``train1024``: one training step of llama-70b (TP8 PP4 DP32) on 128 DGX H100-class servers (1,024 GPUs).

Figures: cases per hour for the whole run (pool start included) and in steady state (workers /
mean case wall time); then, in this process, one case of each split into its stages: validating
the scenario, ``gpuwait validate``'s checks, the topology (built, then from the worker's cache),
the simulation and writing the Parquet row.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from gpuwait.runner.sweep import TopologyCache, load_sweep, plan_sweep, run_case
from gpuwait.runner.sweep_exec import ResultStore, run_sweep

PERF = """
name: perf64
base: {{cluster: {{preset: rocev2-400g-2tier, servers: 64}}}}
perf: {{op: all_reduce, min_bytes: 8, max_bytes: 8G, step_factor: 2}}
axes:
  cluster.routing.seed: [{seeds}]
  cluster.routing.qps_per_connection: [1, 2]
"""

TRAIN = """
name: train1024
base:
  cluster: {{preset: rocev2-400g-2tier, servers: 128}}
  workload:
    model: {{preset: llama-70b, seq_len: 4096}}
    parallel: {{tp: 8, pp: 4, micro_batch: 1, global_batch: 512}}
    compute: {{gpu: H100-SXM, efficiency: 0.55}}
axes:
  cluster.routing.seed: [{seeds}]
  cluster.routing.qps_per_connection: [1, 2]
"""


def _plan(text: str, n_cases: int, root: Path):
    path = root / "sweep.yaml"
    path.write_text(text.format(seeds=", ".join(str(s) for s in range(max(1, n_cases // 2)))))
    return plan_sweep(*load_sweep(path))


def throughput(text: str, n_cases: int, workers: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        plan = _plan(text, n_cases, root)
        start = time.perf_counter()
        summary = run_sweep(plan, root / "out", workers=workers)
        wall_s = time.perf_counter() - start
        from gpuwait.report.sweep import query

        _, rows = query(root / "out", "select avg(wall_s), max(peak_rss_bytes) from results where status = 'ok'")
        mean_case_s, peak_rss = rows[0]
    return {"cases": len(plan.cases), "ok": summary.by_status.get("ok", 0), "wall_s": wall_s,
            "cases_per_hour": len(plan.cases) / wall_s * 3600, "mean_case_s": mean_case_s,
            "steady_cases_per_hour": workers / mean_case_s * 3600, "worker_peak_rss_MiB": peak_rss / 2**20}


def stages(text: str) -> dict:
    """One case in this process, stage by stage (a fresh cache, then the same cluster again)."""
    from gpuwait.runner.traffic import check_scenario
    from gpuwait.spec import Scenario, validate_data

    with tempfile.TemporaryDirectory() as tmp:
        plan = _plan(text, 2, Path(tmp))
        first, second = plan.cases[0], plan.cases[1]
        out: dict[str, float] = {}
        t = time.perf_counter()
        scenario = validate_data(Scenario, first.doc["scenario"], source="case")
        out["validate_s"] = time.perf_counter() - t
        t = time.perf_counter()
        check_scenario(scenario)
        out["validate_checks_s"] = time.perf_counter() - t
        cache = TopologyCache()
        t = time.perf_counter()
        cache.build(scenario.cluster)
        out["topology_build_s"] = time.perf_counter() - t
        t = time.perf_counter()
        cache.build(scenario.cluster)
        out["topology_cached_s"] = time.perf_counter() - t
        run_case(first.case_id, first.doc, first.axes, cache)  # warm: imports, numba, caches of the process
        t = time.perf_counter()
        row = run_case(second.case_id, second.doc, second.axes, cache)
        out["case_total_s"] = time.perf_counter() - t
        store = ResultStore(Path(tmp) / "out")
        store.create()
        t = time.perf_counter()
        store.write(row)
        out["parquet_write_s"] = time.perf_counter() - t
    out["simulate_s"] = out["case_total_s"] - out["validate_s"] - out["validate_checks_s"] - out["topology_cached_s"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--perf-cases", type=int, default=200)
    parser.add_argument("--train-cases", type=int, default=12)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report = {"workers": args.workers}
    for name, text, n in (("perf64", PERF, args.perf_cases), ("train1024", TRAIN, args.train_cases)):
        report[name] = throughput(text, n, args.workers) | {"stages": stages(text)}
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"sweep throughput on {args.workers} workers ({os.cpu_count()} cores)")
    for name in ("perf64", "train1024"):
        r = report[name]
        print(f"  {name:10s} {r['cases']:5d} cases in {r['wall_s']:7.1f} s: {r['cases_per_hour']:8,.0f} cases/h "
              f"(steady state {r['steady_cases_per_hour']:8,.0f}/h; {r['mean_case_s']:.3f} s per case per worker, "
              f"worker peak RSS {r['worker_peak_rss_MiB']:.0f} MiB)")
        print("             one case: " + ", ".join(f"{k[:-2]} {v * 1e3:.1f} ms" for k, v in r["stages"].items()))


if __name__ == "__main__":
    main()
