"""Benchmark: one training step of a 405B-class model on 16,384 H100 GPUs, and `gpuwait demo`.

Prints figures; not a timed test. Run with::

    python bench/bench_training.py [--json] [--skip-demo]

The layout is Llama 3 405B's at 16,384 GPUs (arXiv 2407.21783, Table 4: TP 8, PP 16, DP 128,
BF16 MFU 41 % at sequence length 8,192 and 16M tokens per batch) on a DGX H100 SuperPOD-style
rail-optimized 3-tier RoCEv2 fabric with ECMP: 126 layers on 16 stages, one fewer on the first
and the last (the embedding and the loss counted as a layer each). One deviation, forced by the
model: sequences of 4,096 (at 8,192 with 1F1B and selective recomputation the activations need 81 GiB per GPU; Meta
fit them with optimizations gpuwait does not model). Tokens per batch stay 16M. The pipeline runs
Megatron's interleaved 1F1B with 4 model chunks per stage (Meta used an interleaved schedule too).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time

from gpuwait.runner.workload import run_workload
from gpuwait.spec import Scenario, validate_data

SCENARIO = {
    "name": "llama-405b-class-16k-gpus",
    "cluster": {"preset": "dgx-h100-superpod", "servers": 2048, "transport": {"name": "rocev2"},
                "routing": {"kind": "ecmp", "seed": 1}},
    "workload": {
        # 126 layers on 16 stages with one fewer on the first and last, as Llama 3 (§3.3.2)
        "model": {"preset": "llama-405b", "seq_len": 4096},
        "parallel": {"tp": 8, "pp": 16, "zero": 1, "micro_batch": 1, "global_batch": 4096,
                     "schedule": "interleaved-1f1b", "virtual_stages": 4,
                     "account_for_embedding": True, "account_for_loss": True},
        "compute": {"gpu": "H100-SXM"},
        "steps": 1,
    },
}
PUBLISHED_MFU = 0.41  # Llama 3 405B at 16,384 H100s (Table 4)


def peak_rss_GiB() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--skip-demo", action="store_true", help="do not time `gpuwait demo`")
    args = parser.parse_args()
    scenario = validate_data(Scenario, SCENARIO, source="bench_training", require_units=False)
    start = time.perf_counter()
    result = run_workload(scenario)[0]
    wall_s = time.perf_counter() - start
    b = result.breakdown
    figures = {
        "workload": result.workload, "gpus": b.n_gpus, "step_wall_s": round(wall_s, 2),
        "peak_rss_GiB": round(peak_rss_GiB(), 2), "step_time_s": round(b.step_time_s, 3),
        "ideal_step_time_s": round(b.ideal_step_time_s, 3), "mfu": round(b.mfu, 3), "published_mfu": PUBLISHED_MFU,
        "breakdown_s": {k: round(v, 3) for k, v in b.job_mean_s().items()},
        "exposed_comm_s": {k: round(v, 3) for k, v in b.exposed_comm_s.items()},
        "task_rows": len(result.tasks),
    }
    if not args.skip_demo:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "gpuwait", "demo", "--report", tmp, "--json"], check=True,
                           stdout=subprocess.DEVNULL)
            figures["demo_wall_s"] = round(time.perf_counter() - t0, 2)
    if args.json:
        print(json.dumps(figures))
        return
    for key, value in figures.items():
        print(f"{key:>18}: {value}")


if __name__ == "__main__":
    main()
