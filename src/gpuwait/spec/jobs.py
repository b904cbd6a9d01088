"""Several jobs on one cluster: what each asks for and which placement policy puts it on servers.

Configuration holds no logic: the policies themselves are :mod:`gpuwait.placement`; the shared
run is :mod:`gpuwait.runner.jobs`. The fields are the ones a batch scheduler's job record carries
(name, arrival time, size, priority), so a trace importer can fill them.

>>> job = JobSpec(name="a", servers=4, workload={"model": {"preset": "llama-8b"}}, placement={"policy": "slurm-tree"})
>>> job.placement.policy, job.placement.level
('slurm-tree', 'leaf')
"""

from __future__ import annotations

from collections import Counter
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator

from gpuwait.errors import SpecError
from gpuwait.spec.cluster import SpecModel
from gpuwait.spec.types import TimeS
from gpuwait.spec.workload import WorkloadSpec

PolicyName = Literal["random", "first-fit", "spread", "slurm-tree", "slurm-block", "kueue", "volcano", "explicit"]

#: the placement options each policy reads (`ranks` applies to every policy)
POLICY_OPTIONS: dict[str, tuple[str, ...]] = {
    "servers": ("explicit",), "seed": ("random",), "switches": ("slurm-tree",), "block_size": ("slurm-block",),
    "segment": ("slurm-block",), "mode": ("kueue", "volcano"), "level": ("kueue", "volcano"), "algorithm": ("kueue",)}


def options_for_policy(options: dict[str, Any], policy: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A placement's options (without ``policy``) split into those ``policy`` also reads and those it drops
    (:data:`POLICY_OPTIONS`; ``ranks`` applies to every policy).

    >>> options_for_policy({"mode": "required", "level": "pod", "algorithm": "Balanced", "ranks": "mincut"},
    ...                    "volcano")
    ({'mode': 'required', 'level': 'pod', 'ranks': 'mincut'}, {'algorithm': 'Balanced'})
    """
    kept: dict[str, Any] = {}
    dropped: dict[str, Any] = {}
    for name, value in options.items():
        (kept if policy in POLICY_OPTIONS.get(name, (policy,)) else dropped)[name] = value
    return kept, dropped


def refuse_repeated_names(names: list[str], field: str, noun: str = "name", entries: str | None = None) -> None:
    """One error for a name given more than once (names key each job's results and co-tenants, so a second
    would take the first's place), naming the caller's ``field`` and, with ``entries`` (``"jobs[{}]"``), the
    first five entries that give it.

    >>> refuse_repeated_names(["a", "b", "a"], "jobs", entries="jobs[{}]")
    Traceback (most recent call last):
    ...
    gpuwait.errors.SpecError: jobs: name 'a' given 2 times (jobs[0], jobs[2]); expected each name once
    >>> refuse_repeated_names(["7", "7"], "trace.csv", noun="job id")
    Traceback (most recent call last):
    ...
    gpuwait.errors.SpecError: trace.csv: job id '7' given 2 times; expected each job id once
    """
    counts = Counter(names)
    if len(counts) == len(names):
        return
    # the first repeated name, not the list: a trace's jobs number in the thousands, so they are counted once
    # (a count per name scanned the list again for each: minutes at 10^5 ids)
    twice = next(n for n in names if counts[n] > 1)
    at = [i for i, n in enumerate(names) if n == twice]
    where = "" if entries is None else \
        f" ({', '.join(entries.format(i) for i in at[:5])}{', ...' if len(at) > 5 else ''})"
    raise SpecError(f"{field}: {noun} {twice!r} given {len(at)} times{where}; expected each {noun} once")


def _policy_or_spec(value: Any) -> Any:
    if isinstance(value, str):
        return {"policy": value}
    if isinstance(value, list):
        return {"policy": "explicit", "servers": value}
    return value


class PlacementSpec(SpecModel):
    """How a job's servers are chosen: a policy named after the scheduler that implements it."""

    policy: PolicyName = Field("first-fit", description="'random', 'first-fit' (lowest free server indices), 'spread' (one server per leaf in turn) — topology-unaware baselines; 'slurm-tree' (Slurm topology/tree: the lowest switch that holds the job, its leaves best-fit), 'slurm-block' (Slurm topology/block: the smallest aggregated block level), 'kueue' (Kueue topology-aware scheduling), 'volcano' (Volcano HyperNode tiers); 'explicit' = the listed `servers`.")
    servers: list[int] | None = Field(None, description="explicit: server indices in rank order.")
    seed: int = Field(0, ge=0, le=2**32 - 1, description="random: seed of the choice.")
    switches: int | None = Field(None, ge=1, description="slurm-tree: at most this many leaf switches (Slurm's --switches=N); a job that needs more is refused (this part has no scheduler clock for Slurm's @max-time wait).")
    block_size: int | None = Field(None, ge=1, description="slurm-block: servers per base block (topology.conf BlockSizes' first value); default one leaf domain.")
    segment: int | None = Field(None, ge=1, description="slurm-block: allocate in segments of this many servers, each inside one base block (Slurm's --segment=N).")
    mode: Literal["required", "preferred", "unconstrained"] = Field("preferred", description="kueue: kueue.x-k8s.io/podset-required-topology (the whole job inside one domain of `level`, else not placed), podset-preferred-topology (try `level`, then the levels above), or podset-unconstrained-topology. volcano: 'required' = networkTopology mode hard, 'preferred' = soft.")
    level: Literal["leaf", "pod", "cluster"] = Field("leaf", description="kueue: the topology level the request names (leaf = rack, pod = block). volcano: the highest HyperNode tier allowed (leaf = tier 1, pod = tier 2) in hard mode.")
    algorithm: Literal["BestFit", "LeastFreeCapacity", "Balanced"] = Field("BestFit", description="kueue: how domains are filled — 'BestFit' (fewest domains, the last one the tightest fit), 'LeastFreeCapacity' (the fullest domains first), 'Balanced' (the fewest domains, servers split evenly among them).")
    ranks: Literal["megatron", "mincut"] = Field("megatron", description="Which chosen server runs which block of ranks: 'megatron' = the policy's order (servers grouped by leaf); 'mincut' = reordered by a graph partition of the job's traffic so each TP / CP group, then PP neighbours, then DP groups stay under one leaf where the leaves' counts allow (gpuwait.placement.mincut; needs the default rank_order).")

    @model_validator(mode="after")
    def _options_of_the_policy(self) -> PlacementSpec:
        # an option only another policy reads would change nothing: refused, not ignored (its default is harmless)
        for name, readers in POLICY_OPTIONS.items():
            if getattr(self, name) != type(self).model_fields[name].default and self.policy not in readers:
                raise ValueError(f"{name}: read by {' and '.join(readers)} only; expected no {name} with policy "
                                 f"{self.policy!r}")
        return self


class JobSpec(SpecModel):
    """One job of a multi-job scenario: its size, its workload and where it runs."""

    name: str = Field(..., min_length=1, description="Job name, used in output and to name co-tenants.")
    arrival: TimeS = Field(0.0, description="When the job starts running (seconds from the start of the run).")
    gpus: int | None = Field(None, ge=1, description="GPUs the job uses (count, whole servers); default `servers` x GPUs per server, else workload.gpus.")
    servers: int | None = Field(None, ge=1, description="Servers the job uses (count); alternative to `gpus`.")
    priority: int = Field(0, description="Higher priority is placed first (ties: earlier arrival, then list order).")
    placement: Annotated[PlacementSpec, BeforeValidator(_policy_or_spec)] = Field(
        default_factory=PlacementSpec, description="Placement policy (a name, a list of server indices, or {policy, options}).")
    workload: WorkloadSpec = Field(..., description="The job's training workload, as a scenario's `workload:` (its `gpus` and `parallel.placement` are set from this job).")

    @model_validator(mode="after")
    def _one_size(self) -> JobSpec:
        if self.gpus is not None and self.servers is not None:
            raise ValueError("give `gpus` or `servers`, not both")
        if self.workload.mode != "training":
            raise ValueError("workload.mode: only training jobs share a fabric in this version")
        return self
