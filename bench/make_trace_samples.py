"""Write the constructed trace samples in tests/data/traces/ (seeded; rerun to regenerate).

The public traces' job files are too large to ship (Lingjun's worker.csv is not in its repository's
git history as a plain file; PAI's and Helios' are tarballs of 100+ MB), so the samples here are
*constructed in each trace's published schema*: the column names and formats are the traces', the
rows are drawn by this script (Lingjun, PAI, Helios, Philly's cluster_job_log, Acme's
trace_seren.csv). Only ``lingjun/topo.csv`` is real: the released file, unchanged
(https://github.com/alibaba/alibaba-lingjun-dataset-2023, data/topo.csv, Apache-2.0). The worker
sample's hosts are that file's hosts, so a replay on its topology exercises its real ToR/PSW tiers.

Sizes and durations follow the shapes the trace papers report: most jobs small (one server),
a tail of multi-server jobs, log-normal durations (Jeon et al., "Analysis of Large-Scale
Multi-Tenant GPU Clusters for DNN Training Workloads", ATC 2019; Hu et al., "Characterization and
Prediction of Deep Learning Workloads in Large-Scale GPU Datacenters", SC 2021).

    python bench/make_trace_samples.py
"""

from __future__ import annotations

import csv
import json
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "traces"
T0 = datetime(2023, 8, 1)


def _sizes(rng, n: int) -> np.ndarray:
    return rng.choice([1, 1, 1, 2, 2, 4, 4, 8, 16], size=n)  # servers of 8 GPUs


def lingjun(rng, n_jobs: int = 80) -> None:
    topo = list(csv.DictReader(open(OUT / "lingjun" / "topo.csv")))
    hosts = [r["ip"] for r in topo]
    asw = {r["ip"]: r["ASW"] for r in topo}
    busy_until = {h: T0 for h in hosts}
    rows, t = [], T0
    for k, servers in enumerate(_sizes(rng, n_jobs)):
        t += timedelta(minutes=float(rng.exponential(20)))
        dur = timedelta(minutes=float(np.clip(rng.lognormal(4.0, 1.0), 5, 2000)))
        free = [h for h in hosts if busy_until[h] <= t]
        if rng.random() < 0.5:  # packed: the ToR with the most free hosts first
            free.sort(key=lambda h: (-sum(asw[x] == asw[h] for x in free), asw[h], h))
        else:  # scattered: any free hosts
            free = list(rng.permutation(free))
        chosen = free[:servers]
        name = f"dlc{k:04d}"
        for w, h in enumerate(chosen):
            busy_until[h] = t + dur
            rows.append({"id": len(rows), "job_name": name, "worker_name": f"{name}-worker-{w}", "replica_type": "worker",
                         "host_ip": h, "gmt_created": f"{t:%Y/%-m/%-d %H:%M}", "gmt_pod_running": "",
                         "gmt_pod_finished": f"{t + dur:%Y/%-m/%-d %H:%M}",
                         "RES": json.dumps({"cpu": "96", "memory": "1600Gi", "nvidia.com/gpu": "8"})})
    with open(OUT / "lingjun" / "worker-sample.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def helios(rng, n_jobs: int = 60) -> None:
    header = ["job_id", "user", "vc", "gpu_num", "cpu_num", "node_num", "state", "submit_time", "start_time",
              "end_time", "duration", "queue"]
    rows, t = [], datetime(2020, 9, 1)
    for k, servers in enumerate(_sizes(rng, n_jobs)):
        t += timedelta(minutes=float(rng.exponential(15)))
        gpus = int(servers * 8 if rng.random() < 0.7 else rng.choice([1, 2, 4]))
        dur = int(np.clip(rng.lognormal(7.5, 1.2), 60, 200_000))
        rows.append([k, f"u{k % 7}", f"vc{k % 3}", gpus, 4 * gpus, max(1, gpus // 8), "COMPLETED",
                     f"{t:%Y-%m-%d %H:%M:%S}", f"{t:%Y-%m-%d %H:%M:%S}", f"{t + timedelta(seconds=dur):%Y-%m-%d %H:%M:%S}",
                     dur, 0])
    with open(OUT / "helios-sample.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def pai(rng, n_jobs: int = 40) -> None:
    rows, t = [], 500_000.0
    for k, servers in enumerate(_sizes(rng, n_jobs)):
        t += float(rng.exponential(900))
        dur = float(np.clip(rng.lognormal(7.0, 1.3), 30, 100_000))
        name = f"{k:024x}"
        rows.append([name, "worker", int(servers), "Terminated", int(t), int(t + dur), 600, 29.0, 800, "V100"])
        if rng.random() < 0.3:  # a parameter-server task without GPUs
            rows.append([name, "ps", 1, "Terminated", int(t), int(t + dur), 600, 29.0, "", ""])
    with open(OUT / "pai-task-sample.csv", "w", newline="") as f:
        csv.writer(f).writerows(rows)  # headerless, as the released pai_task_table


def philly(rng, n_jobs: int = 40) -> None:
    """Philly's cluster_job_log: a JSON list of jobs with their scheduling attempts per machine/GPU
    (msr-fiddle/philly-traces README); a quarter of the jobs retried once, some attempts unlogged."""
    jobs, t = [], datetime(2017, 10, 3)
    for k, servers in enumerate(_sizes(rng, n_jobs)):
        t += timedelta(minutes=float(rng.exponential(10)))
        gpus = int(servers * 8 if rng.random() < 0.6 else rng.choice([1, 2, 4]))
        machines = [{"ip": f"m{int(m)}", "gpus": [f"gpu{g}" for g in range(min(gpus, 8))]}
                    for m in rng.choice(np.arange(1, 500), size=max(1, gpus // 8), replace=False)]
        start, attempts = t + timedelta(seconds=float(rng.exponential(120))), []
        for _ in range(2 if rng.random() < 0.25 else 1):
            end = start + timedelta(seconds=float(np.clip(rng.lognormal(7.5, 1.4), 30, 300_000)))
            attempts.append({"start_time": f"{start:%Y-%m-%d %H:%M:%S}", "end_time": f"{end:%Y-%m-%d %H:%M:%S}",
                             "detail": machines})
            start = end + timedelta(seconds=30)
        if rng.random() < 0.05:
            attempts[-1]["end_time"] = "None"  # still running when the snapshot was taken
        jobs.append({"status": str(rng.choice(["Pass", "Pass", "Killed", "Failed"])), "vc": f"{k % 5:06x}",
                     "jobid": f"application_1506638472019_{k:05d}", "attempts": attempts,
                     "submitted_time": f"{t:%Y-%m-%d %H:%M:%S}", "user": f"{k % 9:06x}"})
    (OUT / "philly-job-log-sample.json").write_text(json.dumps(jobs, indent=1) + "\n")


def acme(rng, n_jobs: int = 60) -> None:
    """Acme's trace_seren.csv columns (InternLM/AcmeTrace README), times with a +08:00 offset."""
    header = ["job_id", "user", "node_num", "gpu_num", "cpu_num", "type", "state", "submit_time", "start_time",
              "end_time", "duration", "queue", "gpu_time"]
    rows, t = [], datetime(2023, 3, 1)
    for k, servers in enumerate(_sizes(rng, n_jobs)):
        t += timedelta(minutes=float(rng.exponential(12)))
        gpus = int(servers * 8 if rng.random() < 0.8 else rng.choice([0, 1, 4]))  # some CPU-only jobs
        queue = int(rng.exponential(60))
        dur = int(np.clip(rng.lognormal(7.0, 1.5), 10, 400_000))
        start = t + timedelta(seconds=queue)
        rows.append([5778432 + k, f"u{k % 11}", max(1, gpus // 8), gpus, 16 * max(gpus, 1),
                     str(rng.choice(["Pretrain", "SFT", "Evaluation", "Debug", "Other"])),
                     str(rng.choice(["COMPLETED", "COMPLETED", "FAILED", "CANCELLED"])),
                     f"{t:%Y-%m-%d %H:%M:%S}+08:00", f"{start:%Y-%m-%d %H:%M:%S}+08:00",
                     f"{start + timedelta(seconds=dur):%Y-%m-%d %H:%M:%S}+08:00", dur, queue, float(dur * gpus)])
    with open(OUT / "acme-seren-sample.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


if __name__ == "__main__":
    rng = np.random.default_rng(2023)
    lingjun(rng)
    helios(rng)
    pai(rng)
    philly(rng)  # after the others: their rows stay as they were
    acme(rng)
