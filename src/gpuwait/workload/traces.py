"""Public GPU-cluster traces as jobs: importers, a sampler and the mapping from a trace job to a
training workload.

Formats (column names as the traces publish them; no code of theirs is used):

- **Alibaba Lingjun 2023** (https://github.com/alibaba/alibaba-lingjun-dataset-2023, Apache-2.0;
  Cao et al., "Crux", SIGCOMM 2024): ``worker.csv`` has one row per worker (``job_name``,
  ``host_ip``, ``gmt_created``, ``gmt_pod_finished`` as ``YYYY/M/D HH:MM``, ``RES`` a JSON object
  whose ``nvidia.com/gpu`` is the worker's GPUs); ``topo.csv`` one row per host (``ip``, ``DSW``,
  ``PSW``, ``ASW``: its core, aggregation and ToR switch). A job is its workers: arrival the first
  ``gmt_created``, end the last ``gmt_pod_finished``, GPUs the sum, hosts the set of ``host_ip``.
  Workers without times or GPUs are dropped (CPU-only or unfinished workers).
- **Alibaba PAI 2020** (https://github.com/alibaba/clusterdata, ``cluster-trace-gpu-v2020``;
  Weng et al., "MLaaS in the Wild", NSDI 2022): ``pai_task_table`` (``job_name, task_name,
  inst_num, status, start_time, end_time, plan_cpu, plan_mem, plan_gpu, gpu_type``; times in
  seconds, ``plan_gpu`` in percent of one GPU per instance). A job's GPUs are the sum over its tasks
  of ``inst_num x plan_gpu / 100`` rounded up; the released files have no header row (it is in
  ``pai_task_table.header``), so both forms are read.
- **SenseTime Helios** (https://github.com/S-Lab-System-Group/HeliosData; Hu et al., SC 2021):
  ``cluster_log.csv`` (``job_id, user, vc, gpu_num, cpu_num, node_num, state, submit_time,
  start_time, end_time, duration, queue``; times ``YYYY-MM-DD HH:MM:SS``, duration in seconds).
- **Microsoft Philly** (https://github.com/msr-fiddle/philly-traces; Jeon et al., "Analysis of
  Large-Scale Multi-Tenant GPU Clusters for DNN Training Workloads", ATC 2019): ``cluster_job_log``,
  a JSON list of jobs (``jobid``, ``status``, ``vc``, ``user``, ``submitted_time``, ``attempts``: each
  attempt a ``start_time``, ``end_time`` and ``detail``, one ``{ip, gpus}`` per machine; times
  ``YYYY-MM-DD HH:MM:SS`` or ``None``). A job arrives at ``submitted_time``; its GPUs are its
  largest attempt's (GPUs summed over machines), its hosts that attempt's ``ip``; its duration is
  the sum of its attempts' run times (the gaps between attempts are the scheduler's retries, not
  the job's work). Attempts without both times are dropped (the README: "a logging error", or still
  running); a job with none left is dropped.
- **Shanghai AI Lab Acme** (https://github.com/InternLM/AcmeTrace; Hu et al., "Characterization of
  Large Language Model Development in the Datacenter", NSDI 2024): ``trace_seren.csv`` and
  ``trace_kalos.csv`` (``job_id, user, node_num, gpu_num, cpu_num, type, state, submit_time,
  start_time, end_time, duration, queue, gpu_time``; Kalos adds ``mem_per_pod_GB,
  shared_mem_per_pod, fail_time, stop_time``; times ISO 8601 with a UTC offset, duration in
  seconds). GPU jobs (``gpu_num`` > 0) with a positive duration.

Mapping a trace job to a workload (:func:`trace_workload`), stated because the traces do not record
models or hyperparameters (the Lingjun README says the same: "assuming computation and
communication workloads"):

- size class by GPUs: less than a server -> a Llama-3.2-1B shape (16 layers, hidden 2048, FFN 8192,
  32 heads, 8 KV heads, vocabulary 128256: its published config.json); up to 63 GPUs -> Llama-3-8B; 64 to 511 -> Llama-3-70B; 512 or more ->
  Llama-3-405B (the scale each is commonly trained at, Llama 3 paper, Meta 2024);
- layout: tensor parallel inside a server (tp = min(GPUs, GPUs per server)); pipeline stages 4
  (70B) or 8 (405B) when the servers divide; ZeRO-1 data parallel over the rest; one sequence per
  micro-batch, 2 x pp micro-batches per step;
- steps: the trace duration over the job's step time alone on a compact placement (done by the
  scheduler, :mod:`gpuwait.runner.schedule`), so the job carries the trace's work under every policy.

The sampler (:func:`sample`) keeps the jobs that arrive in a time window, drops jobs larger than
the cluster after scaling, scales GPU counts and times down by given factors and keeps at most
``max_jobs``; a job's GPUs become whole servers (the schedulers place whole servers).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from gpuwait.errors import SpecError
from gpuwait.spec.reader import loads_json, read_text_checked

#: bytes a trace file may hold (the full Lingjun worker.csv is ~10 MB; Helios' Venus log ~30 MB)
MAX_TRACE_BYTES = 512 * 2**20


#: Llama 3.2 1B's shape (meta-llama/Llama-3.2-1B config.json), for jobs of less than one server
LLAMA_1B = {"layers": 16, "hidden": 2048, "ffn_hidden": 8192, "heads": 32, "kv_heads": 8, "vocab": 128256,
            "seq_len": 4096}


@dataclass(frozen=True)
class TraceJob:
    """One job of a trace: when it arrived, how many GPUs it held, how long it ran, where."""

    name: str
    arrival_s: float      # from the trace's first arrival
    duration_s: float
    gpus: int
    hosts: tuple[str, ...] = ()   # hosts it ran on, when the trace records them (Lingjun)


@dataclass(frozen=True)
class Trace:
    source: str
    jobs: list[TraceJob]
    topo: dict[str, tuple[str, str, str]] | None = None   # host -> (ToR, aggregation, core) switch


def _rows(path: str | Path, header: list[str] | None = None) -> list[dict[str, str]]:
    text = read_text_checked(path, "a CSV trace file", MAX_TRACE_BYTES)
    reader = csv.reader(io.StringIO(text))
    try:
        rows = [r for r in reader if r]
    except csv.Error as err:  # a field past the csv module's limit (128 KiB); its line_num can lag a line
        limit = csv.field_size_limit()
        line = next((n for n, ln in enumerate(text.splitlines(), 1) if len(ln) > limit), reader.line_num)
        raise SpecError(f"{path}:{line}: cannot read the row ({err}); expected a CSV trace") from None
    if not rows:
        raise SpecError(f"{path}: empty; expected a CSV trace")
    if header is None or rows[0][:len(header)] == header[:len(rows[0])]:
        header, rows = rows[0], rows[1:]
    # a row cut short has every column, empty: the importers skip rows whose fields do not read
    return [dict(zip(header, r + [""] * (len(header) - len(r)))) for r in rows]


def _need(path, rows: list[dict], columns: tuple[str, ...]) -> None:
    missing = [c for c in columns if rows and c not in rows[0]]
    if missing:
        raise SpecError(f"{path}: no column {', '.join(missing)}; expected {', '.join(columns)}")


def _rebase(jobs: list[TraceJob]) -> list[TraceJob]:
    t0 = min((j.arrival_s for j in jobs), default=0.0)
    return sorted((replace(j, arrival_s=j.arrival_s - t0) for j in jobs), key=lambda j: (j.arrival_s, j.name))


# ------------------------------------------------------------------------------------------ importers

def read_lingjun(worker_csv: str | Path, topo_csv: str | Path | None = None) -> Trace:
    """Alibaba Lingjun 2023 ``worker.csv`` (and ``topo.csv``) as jobs (see the module docstring)."""
    rows = _rows(worker_csv)
    _need(worker_csv, rows, ("job_name", "host_ip", "gmt_created", "gmt_pod_finished", "RES"))
    jobs: dict[str, dict] = {}
    for row in rows:
        try:
            start = datetime.strptime(row["gmt_created"], "%Y/%m/%d %H:%M").timestamp()
            end = datetime.strptime(row["gmt_pod_finished"], "%Y/%m/%d %H:%M").timestamp()
            gpus = int(json.loads(row["RES"]).get("nvidia.com/gpu", 0))
        except (ValueError, TypeError, AttributeError):
            continue  # a worker without times or resources: not a finished GPU worker
        if gpus <= 0 or end < start:
            continue
        job = jobs.setdefault(row["job_name"], {"start": start, "end": end, "gpus": 0, "hosts": []})
        job["start"], job["end"] = min(job["start"], start), max(job["end"], end)
        job["gpus"] += gpus
        if row["host_ip"] not in job["hosts"]:
            job["hosts"].append(row["host_ip"])
    out = [TraceJob(name, j["start"], j["end"] - j["start"], j["gpus"], tuple(j["hosts"])) for name, j in jobs.items()]
    topo = read_lingjun_topo(topo_csv) if topo_csv is not None else None
    return Trace("alibaba-lingjun-2023", _rebase(out), topo)


def read_lingjun_topo(topo_csv: str | Path) -> dict[str, tuple[str, str, str]]:
    """Lingjun ``topo.csv``: host -> (ASW, PSW, DSW), its ToR, aggregation and core switch."""
    rows = _rows(topo_csv)
    _need(topo_csv, rows, ("ip", "ASW", "PSW", "DSW"))
    return {r["ip"]: (r["ASW"], r["PSW"], r["DSW"]) for r in rows}


_PAI_HEADER = ["job_name", "task_name", "inst_num", "status", "start_time", "end_time", "plan_cpu", "plan_mem",
               "plan_gpu", "gpu_type"]


def read_pai(task_csv: str | Path) -> Trace:
    """Alibaba PAI 2020 ``pai_task_table`` as jobs (see the module docstring)."""
    rows = _rows(task_csv, _PAI_HEADER)
    _need(task_csv, rows, ("job_name", "inst_num", "start_time", "end_time", "plan_gpu"))
    jobs: dict[str, list[float]] = {}
    for row in rows:
        try:
            start, end = float(row["start_time"]), float(row["end_time"])
            gpus = float(row["inst_num"]) * float(row["plan_gpu"]) / 100.0
        except ValueError:
            continue  # a task that never ran (empty times) or used no GPU (empty plan_gpu)
        if not (gpus > 0 and end >= start):
            continue
        job = jobs.setdefault(row["job_name"], [start, end, 0.0])
        job[0], job[1], job[2] = min(job[0], start), max(job[1], end), job[2] + gpus
    out = [TraceJob(name, s, e - s, max(1, math.ceil(g - 1e-9))) for name, (s, e, g) in jobs.items()]
    return Trace("alibaba-pai-2020", _rebase(out))


def _submitted_jobs(trace_csv: str | Path, submit_time_s) -> list[TraceJob]:
    """Rows of job_id, gpu_num, submit_time, duration as jobs (GPU jobs with a positive duration);
    ``submit_time_s`` parses the trace's time format, raising ValueError on a row without one."""
    rows = _rows(trace_csv)
    _need(trace_csv, rows, ("job_id", "gpu_num", "submit_time", "duration"))
    out = []
    for row in rows:
        try:
            submit = submit_time_s(row["submit_time"])
            gpus, duration = int(float(row["gpu_num"])), float(row["duration"])
        except ValueError:
            continue  # a job without a submit time or a duration
        if gpus > 0 and duration > 0:
            out.append(TraceJob(row["job_id"], submit, duration, gpus))
    return out


def read_helios(log_csv: str | Path) -> Trace:
    """SenseTime Helios ``cluster_log.csv`` as jobs (GPU jobs with a positive duration)."""
    return Trace("sensetime-helios", _rebase(_submitted_jobs(
        log_csv, lambda text: datetime.strptime(text, "%Y-%m-%d %H:%M:%S").timestamp())))


def _philly_time(text) -> float | None:
    try:
        return datetime.strptime(text, "%Y-%m-%d %H:%M:%S").timestamp()
    except (TypeError, ValueError):
        return None  # "None" or absent: a logging gap or a job still running


def _philly_job(job: dict) -> TraceJob | None:
    submitted = _philly_time(job.get("submitted_time"))
    run_s = 0.0
    best: tuple[int, tuple[str, ...]] = (0, ())  # (GPUs, host IPs) of the widest attempt
    for attempt in job.get("attempts") or ():
        start, end = _philly_time(attempt.get("start_time")), _philly_time(attempt.get("end_time"))
        if start is None or end is None or end < start:
            continue
        run_s += end - start
        detail = [d for d in attempt.get("detail") or () if isinstance(d, dict)]
        gpus = sum(len(d.get("gpus") or ()) for d in detail)
        if gpus > best[0]:
            best = (gpus, tuple(str(d.get("ip")) for d in detail))
    if submitted is None or best[0] == 0 or run_s <= 0:
        return None
    return TraceJob(str(job.get("jobid")), submitted, run_s, best[0], best[1])


def read_philly(job_log: str | Path) -> Trace:
    """Microsoft Philly ``cluster_job_log`` (JSON) as jobs (see the module docstring)."""
    text = read_text_checked(job_log, "a Philly cluster_job_log (JSON)", MAX_TRACE_BYTES)
    try:
        data = loads_json(text)
    except json.JSONDecodeError as e:
        raise SpecError(f"{job_log}: not JSON ({e.msg}, line {e.lineno}); expected Philly's cluster_job_log, "
                        "a list of jobs") from None
    if not isinstance(data, list) or not all(isinstance(j, dict) for j in data):
        raise SpecError(f"{job_log}: expected a JSON list of jobs (objects with jobid, submitted_time, attempts)")
    missing = [k for k in ("jobid", "submitted_time", "attempts") if data and k not in data[0]]
    if missing:
        raise SpecError(f"{job_log}: first job has no {', '.join(missing)}; expected jobid, submitted_time, attempts")
    out = [j for j in map(_philly_job, data) if j is not None]
    return Trace("microsoft-philly", _rebase(out))


def read_acme(trace_csv: str | Path) -> Trace:
    """Shanghai AI Lab Acme ``trace_seren.csv`` / ``trace_kalos.csv`` as jobs (GPU jobs that ran; times
    carry their UTC offset)."""
    return Trace("shanghai-ai-lab-acme", _rebase(_submitted_jobs(
        trace_csv, lambda text: datetime.fromisoformat(text).timestamp())))


READERS: dict[str, Callable[[str | Path], Trace]] = {
    "lingjun": read_lingjun, "pai": read_pai, "helios": read_helios, "philly": read_philly, "acme": read_acme}


def _guess_kind(path: str | Path) -> str:
    first = read_text_checked(path, "a trace file", MAX_TRACE_BYTES).lstrip()[:4096]
    if first[:1] in "[{":
        return "philly"
    header = first.split("\n", 1)[0]
    if "host_ip" in header:
        return "lingjun"
    if "gpu_num" in header:
        return "acme" if "gpu_time" in header else "helios"
    return "pai"


def read_trace(path: str | Path, kind: str | None = None, topo_csv: str | Path | None = None) -> Trace:
    """A trace file by ``kind`` (lingjun, pai, helios, philly, acme), else guessed from its contents."""
    kind = kind if kind is not None else _guess_kind(path)
    if kind not in READERS:
        raise SpecError(f"trace kind: got {kind!r}; expected one of {', '.join(READERS)}")
    if kind == "lingjun":
        return read_lingjun(path, topo_csv)
    return READERS[kind](path)


# ------------------------------------------------------------------------------------------ sampler

def sample(trace: Trace, *, start_s: float = 0.0, window_s: float | None = None, max_jobs: int | None = None,
           gpu_scale: float = 1.0, time_scale: float = 1.0, arrival_scale: float = 1.0,
           max_gpus: int | None = None, gpus_per_server: int = 8) -> Trace:
    """The jobs arriving in ``[start_s, start_s + window_s)``, GPUs divided by ``gpu_scale``, all
    times by ``time_scale`` and arrival times also by ``arrival_scale`` (> 1 raises the load of a
    trace taken from a larger cluster), GPUs rounded up to whole servers, jobs above ``max_gpus``
    dropped, at most ``max_jobs`` (the first to arrive)."""
    # each factor named as the schedule command spells it (--gpu-scale ...), so a bad one is one clear line
    for option, value in (("--gpu-scale", gpu_scale), ("--time-scale", time_scale),
                          ("--arrival-scale", arrival_scale), ("--window", window_s)):
        if value is not None and not value > 0:
            raise SpecError(f"trace sample {option}: got {value:g}; expected a number > 0")
    if not start_s >= 0:
        raise SpecError(f"trace sample --start: got {start_s:g}; expected seconds >= 0 from the first arrival")
    end_s = start_s + window_s if window_s is not None else math.inf
    out = []
    for j in trace.jobs:
        if not start_s <= j.arrival_s < end_s:
            continue
        gpus = max(1, math.ceil(j.gpus / gpu_scale))
        gpus = -(-gpus // gpus_per_server) * gpus_per_server if gpus > gpus_per_server else gpus
        if max_gpus is not None and gpus > max_gpus:
            continue
        out.append(replace(j, arrival_s=(j.arrival_s - start_s) / time_scale / arrival_scale,
                           duration_s=max(j.duration_s / time_scale, 1.0), gpus=gpus))
    return replace(trace, jobs=out[:max_jobs] if max_jobs is not None else out)


# ------------------------------------------------------------------------------------------ mapping

def trace_workload(gpus: int, gpus_per_server: int = 8, gpu: str | None = None) -> dict:
    """The ``workload:`` mapping of a trace job of ``gpus`` (see the module docstring)."""
    servers = -(-gpus // gpus_per_server)
    tp = min(gpus, gpus_per_server)
    model: dict = {"preset": "llama-8b"}
    pp = 1
    if gpus >= 512:
        model, pp = {"preset": "llama-405b"}, 8
    elif gpus >= 64:
        model, pp = {"preset": "llama-70b"}, 4
    elif gpus < gpus_per_server:
        model = dict(LLAMA_1B)
    if servers % pp:
        pp = 1
    dp = max(gpus // (tp * pp), 1)
    parallel = {"tp": tp, "pp": pp, "zero": 1, "micro_batch": 1, "global_batch": dp * 2 * pp}
    compute: dict[str, int | str] = {"jitter_cv": 0}
    if gpu is not None:
        compute["gpu"] = gpu
    return {"model": model, "parallel": parallel, "compute": compute, "steps": 1}


def trace_jobs(trace: Trace, gpus_per_server: int = 8, gpu: str | None = None) -> tuple[list[dict], dict[str, float]]:
    """(``jobs:`` entries, job name -> duration in seconds) of a trace, for the scheduler."""
    jobs, durations = [], {}
    for j in trace.jobs:
        jobs.append({"name": j.name, "arrival": j.arrival_s, "gpus": j.gpus,
                     "workload": trace_workload(j.gpus, gpus_per_server, gpu)})
        durations[j.name] = j.duration_s
    return jobs, durations


# ------------------------------------------------------------------------------------------ link sharing

def link_sharing(trace: Trace) -> dict:
    """Replay a trace's own placements on its own three-tier Clos (Lingjun ``topo.csv``): the share
    of multi-host jobs, and of their GPUs, that at some time shared a network link with another
    running job.

    A job's traffic leaves its hosts only if it spans two or more hosts; it loads each host's NIC
    link, the uplinks of every ToR (ASW) it uses if it spans two or more ToRs, and the uplinks of
    every aggregation switch (PSW) it uses if it spans two or more PSWs (ECMP spreads a flow set
    over all uplinks, so a job that leaves a switch loads all of that switch's uplinks). Two jobs
    share a link if both load the same one while both run. Single-host jobs cannot share a
    network link and count as not sharing (Crux counts over all jobs).
    """
    if not trace.topo:
        raise SpecError("trace: no topology; expected the Lingjun topo.csv beside worker.csv")
    loads: list[frozenset[tuple[str, str]]] = []  # per job, the (kind, switch or host) links it loads
    for j in trace.jobs:
        hosts = [h for h in j.hosts if h in trace.topo]
        if len(hosts) < 2:
            loads.append(frozenset())
            continue
        asw = {trace.topo[h][0] for h in hosts}
        psw = {trace.topo[h][1] for h in hosts}
        links = {("host", h) for h in hosts}
        if len(asw) > 1:
            links |= {("asw-up", a) for a in asw}
        if len(psw) > 1:
            links |= {("psw-up", p) for p in psw}
        loads.append(frozenset(links))
    shared = [False] * len(trace.jobs)
    events = sorted(range(len(trace.jobs)), key=lambda i: trace.jobs[i].arrival_s)
    for a_pos, a in enumerate(events):
        ja = trace.jobs[a]
        if not loads[a]:
            continue
        for b in events[a_pos + 1:]:
            jb = trace.jobs[b]
            if jb.arrival_s >= ja.arrival_s + ja.duration_s:
                break
            if loads[a] & loads[b]:
                shared[a] = shared[b] = True
    gpus = [j.gpus for j in trace.jobs]
    total = sum(gpus) or 1
    return {"jobs": len(trace.jobs), "multi_host_jobs": sum(bool(x) for x in loads),
            "shared_jobs": sum(shared) / max(len(shared), 1),
            "shared_gpus": sum(g for g, s in zip(gpus, shared) if s) / total}
