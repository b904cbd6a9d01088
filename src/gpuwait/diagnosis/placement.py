"""Causes that belong to a job among other jobs (a scenario with ``jobs:``), each measured by
re-running the shared run with the cause removed:

- ``placement``: the job spans several leaf domains (or pods); placing it compactly (Slurm
  topology/tree on the servers the other jobs leave free) and running everything again gives back
  X % of its step.
- ``noisy-neighbor``: another job shares the job's network links; running without that job gives
  back X % of the step. The co-tenant that costs most is named.

Published sizes these reproduce in sign: fragmented placement with path collisions degraded
training by more than 30 % at Meta (Gangidi et al., SIGCOMM 2024); a co-located job's iteration went
from 1.53 s to 1.70 s at Alibaba (Cao et al., "Crux", SIGCOMM 2024).
"""

from __future__ import annotations

from gpuwait.runner.jobs import JobsRun, run_jobs
from gpuwait.spec.jobs import PlacementSpec
from gpuwait.spec.scenario import Scenario

#: a cause is reported when removing it gives back at least this share of the step
MIN_GAIN = 0.01
#: the shared steps a diagnosis runs when the caller gives none
DEFAULT_STEPS = 2


def _pinned(run: JobsRun) -> list:
    """The run's jobs with their servers written out, so a re-run keeps everyone else where they were."""
    return [spec.model_copy(update={"placement": PlacementSpec(policy="explicit", servers=job.servers.tolist())})
            for spec, job in zip(run.scenario.jobs, run.jobs)]


def _finding(kind: str, job, component: str, fixed_s: float, explanation: str, fix: str, evidence: dict) -> dict:
    gain = 1.0 - fixed_s / job.shared_step_s
    return {"job": job.name, "kind": kind, "component": component, "severity": "critical" if gain > 0.1 else "warning",
            "score": gain, "evidence": evidence, "explanation": explanation, "fix": fix,
            "step_time_s": job.shared_step_s, "fixed_step_time_s": fixed_s, "expected_gain_fraction": gain,
            "direct_evidence": False}


def placement_findings(run: JobsRun, steps: int, max_memory_bytes: float | None = None) -> list[dict]:
    """A ``placement`` finding per job that spans more leaves than a compact placement would (each re-run
    held to ``max_memory_bytes``, as :func:`~gpuwait.runner.jobs.run_jobs`)."""
    out = []
    pinned = _pinned(run)
    for k, job in enumerate(run.jobs):
        if job.leaves <= 1:
            continue
        others = [j for i, j in enumerate(pinned) if i != k]
        low = min([j.priority for j in others], default=0) - 1  # placed last, on what the others leave
        packed = run.scenario.jobs[k].model_copy(update={"placement": PlacementSpec(policy="slurm-tree"), "priority": low})
        again = run_jobs(run.scenario.model_copy(update={"jobs": [*others[:k], packed, *others[k:]]}), steps,
                         max_memory_bytes)
        fixed = again.jobs[k]
        if fixed.leaves >= job.leaves or 1.0 - fixed.shared_step_s / job.shared_step_s < MIN_GAIN:
            continue
        pods = f" / {job.pods} pods" if job.pods > 1 else ""
        gain = 1.0 - fixed.shared_step_s / job.shared_step_s
        out.append(_finding(
            "placement", job, job.hostlist, fixed.shared_step_s,
            f"job {job.name} spans {job.leaves} leaves{pods}; a compact placement ({fixed.hostlist}, "
            f"{fixed.leaves} leaves) gives back {100 * gain:.1f} % of its step",
            "place it topology-aware: Slurm topology/tree (--switches=N), Kueue podset-required-topology, "
            "or Volcano networkTopology mode hard",
            {"leaves": job.leaves, "pods": job.pods, "compact_leaves": fixed.leaves, "compact_hostlist": fixed.hostlist}))
    return out


def neighbor_findings(run: JobsRun, steps: int, max_memory_bytes: float | None = None) -> list[dict]:
    """A ``noisy-neighbor`` finding per job slowed by a co-tenant, naming the one that costs most (each
    re-run held to ``max_memory_bytes``)."""
    out = []
    pinned = _pinned(run)
    names = [j.name for j in run.jobs]
    alone: dict[tuple[int, int], float] = {}
    for k, job in enumerate(run.jobs):
        for other in job.shares:
            o = names.index(other)
            if (k, o) not in alone:
                kept = [j for i, j in enumerate(pinned) if i != o]
                again = run_jobs(run.scenario.model_copy(update={"jobs": kept}), steps, max_memory_bytes)
                alone[(k, o)] = again.jobs[k if k < o else k - 1].shared_step_s
        costs = {other: alone[(k, names.index(other))] for other in job.shares}
        if not costs:
            continue
        worst = min(costs, key=costs.__getitem__)
        fixed = costs[worst]
        if 1.0 - fixed / job.shared_step_s < MIN_GAIN:
            continue
        links = job.shares[worst]
        shown = ", ".join(run.link_names[i] for i in links[:3]) + (" ..." if len(links) > 3 else "")
        out.append(_finding(
            "noisy-neighbor", job, worst, fixed,
            f"job {job.name} shares {len(links)} network links with job {worst} ({shown}); without {worst} "
            f"its step is {100 * (1 - fixed / job.shared_step_s):.1f} % shorter",
            f"keep {job.name} and {worst} under separate leaves (a topology-aware placement), or raise their "
            "uplink capacity", {"other_job": worst, "shared_links": len(links), "others": sorted(costs)}))
    return out


def diagnose_jobs(scenario: Scenario, steps: int | None = None, max_memory_bytes: float | None = None) -> dict:
    """Every job's step alone and shared, and the placement and noisy-neighbor findings, ranked by gain;
    every run held to ``max_memory_bytes`` (``max_memory``; None: half the machine's memory)."""
    n_steps = steps or DEFAULT_STEPS
    run = run_jobs(scenario, n_steps, max_memory_bytes)
    findings = sorted(placement_findings(run, n_steps, max_memory_bytes) + neighbor_findings(run, n_steps, max_memory_bytes),
                      key=lambda f: -f["expected_gain_fraction"])
    for rank, f in enumerate(findings, 1):
        f["rank"] = rank
    return {"run": run, "findings": findings}
