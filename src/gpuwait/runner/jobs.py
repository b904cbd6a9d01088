"""Several training jobs on one fabric: place each by its policy, time each alone, then run every
job's step program together on one clock so each job's communication meets its co-tenants' only
while both actually run.

How the shared run works (a phase-level fluid model):

1. Each job is run alone with :func:`~gpuwait.steps.training.run_training` for the run's steps (its
   collectives timed on the real topology with its own groups contending). Its task table becomes a
   *program*: the steps cut into segments at every step end and every start and end of a network
   collective, so a checkpoint every other step or a step's jitter is in it. A segment
   has its duration alone, the network groups (dp, pp, ep, cp, tp across servers) active in it, and
   their demand: each group's per-link rate while its busiest phase runs (``FamilyRun.link_peak_Bps``)
   and its *pace*, the fraction of the segment it keeps the network busy (gradient buckets reduced
   while backward runs are paced by backward: busy time / span). A segment with no network group is
   compute (or an NVLink-only collective) and takes its own time whatever the others do.
2. All jobs' programs run on one clock, each repeating its step. At every segment boundary of any
   job the rates are shared out by weighted max-min fairness (:func:`~gpuwait.engine.flow.max_min_rates`):
   a job's weight on a link is the number of its flows there (its peak load on the link over its
   peak load on its busiest link), so two jobs on an uplink split it per flow, as the flow engine
   splits a link between QPs. A segment's network work then advances at the rate it gets; the segment
   ends when its work is done and, if compute hid it alone, not before its alone duration.
3. The run goes on until every job has finished ``steps`` steps (jobs that finish first keep
   training, repeating their program, as they would); a job's shared step time is the mean of its
   first ``steps`` steps, and alone, with nothing shared, it is its alone run's mean step. A large
   job's task table may stop before its run does (``max_tasks`` rows): its program is then the steps
   the table holds whole, repeated.

Stated simplifications: a segment keeps its alone duration where no network work is in it, so a
data wait does not absorb a co-tenant's delay as the job's free-running loaders would (a loader-bound
job's shared slowdown is an upper bound); a checkpoint's storage writes are timed alone; a
segment's groups share one progress rate; latency-bound phases stretch like
bandwidth-bound ones (pessimistic for small messages); the routes of each job are hashed as if alone
(ECMP hashes a flow by its own 5-tuple, so they are).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from gpuwait.collectives.ncclenv import cluster_env
from gpuwait.engine.base import effective_capacity_Bps
from gpuwait.engine.flow import max_min_rates
from gpuwait.errors import SpecError
from gpuwait.fabric.groups import FabricModel
from gpuwait.placement import fabric_tree, hostlist, place
from gpuwait.placement.tree import FabricTree
from gpuwait.runner.traffic import refuse_unused_sections, scenario_cases
from gpuwait.runner.workload import cluster_label
from gpuwait.spec.jobs import JobSpec, refuse_repeated_names
from gpuwait.spec.scenario import Scenario
from gpuwait.steps.result import RunResult
from gpuwait.steps.training import communication_families, run_training
from gpuwait.topology.model import Topology
from gpuwait.topology.presets import build_cluster, resolve_cluster
from gpuwait.workload.steps import training_step

_EPS_S = 1e-15
#: a slowdown smaller than this is float rounding between the alone and the shared run, not contention
STEP_ROUNDING_FRACTION = 1e-9


@dataclass(frozen=True, eq=False)
class PlacedJob:
    """A job and the servers its policy chose (rank order)."""

    spec: JobSpec
    servers: np.ndarray
    gpus: int

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass(frozen=True, eq=False)
class Program:
    """A job's steps alone cut at every step end and network phase boundary (see the module docstring)."""

    duration_s: np.ndarray   # (segments,) alone
    pace: np.ndarray         # (segments,) fraction of the segment its network work keeps busy; 0 = no network
    peak_Bps: np.ndarray     # (segments, links) load while the network work runs at full speed
    groups: list[tuple[str, ...]]  # network groups active per segment
    ends_step: np.ndarray    # (segments,) bool: a step ends with the segment (the last segment always)

    @property
    def steps(self) -> int:
        return int(self.ends_step.sum())

    @property
    def step_s(self) -> float:
        """The mean step alone."""
        return float(self.duration_s.sum()) / self.steps


@dataclass(frozen=True, eq=False)
class JobOutcome:
    """One job's figures alone and in the shared run."""

    name: str
    servers: np.ndarray
    hostlist: str
    leaves: int
    pods: int
    alone: RunResult
    program: Program
    shared_step_s: float
    slowed_s: float                          # time per step its network work ran below its alone pace
    shares: dict[str, list[int]] = field(default_factory=dict)  # other job -> network links both load
    segments: np.ndarray = field(default_factory=lambda: np.zeros((0, 3)))  # (segment, start, end) in the shared run

    @property
    def alone_step_s(self) -> float:
        return self.program.step_s

    @property
    def slowdown(self) -> float:
        """Shared step over alone step, minus 1; a difference within rounding is 0.0 (never -0.0)."""
        if self.alone_step_s <= 0:
            return 0.0
        slowdown = self.shared_step_s / self.alone_step_s - 1.0
        # the shared run adds the same phases as the alone one in another order: a job no other job
        # touches comes out a last bit faster, which printed "-0.0 %"
        return 0.0 if abs(slowdown) < STEP_ROUNDING_FRACTION else slowdown

    @property
    def exposed_comm_alone_s(self) -> float:
        return float(sum(self.alone.breakdown.exposed_comm_s.values()))

    @property
    def exposed_comm_shared_s(self) -> float:
        """Alone exposure plus what co-tenants added (the step's growth is all network waiting)."""
        return self.exposed_comm_alone_s + max(self.shared_step_s - self.alone_step_s, 0.0)


@dataclass(frozen=True, eq=False)
class JobsRun:
    scenario: Scenario
    topo: Topology
    tree: FabricTree
    jobs: list[JobOutcome]
    steps: int
    link_names: list[str]
    #: "rocev2-400g-2tier: 16 servers x 8 GPUs", with ", calibrated (fitted to a.log)" when the cluster's
    #: calibration is used (runner.workload.cluster_label: a workload run's label)
    cluster: str = ""
    #: what the jobs' NCCL predictions must say beside their results, as a workload run's: an nccl.version
    #: newer than gpuwait checked, a calibration fitted under NCCL variables the jobs do not set (NcclEnv.notes)
    notes: tuple[str, ...] = ()


# ------------------------------------------------------------------------------------------ placement

def job_servers_needed(job: JobSpec, gpus_per_server: int) -> tuple[int, int]:
    """(servers, GPUs) of ``job``: from `servers`, `gpus` or its workload's `gpus`."""
    if job.servers is not None:
        return job.servers, job.servers * gpus_per_server
    gpus = job.gpus if job.gpus is not None else job.workload.gpus
    if gpus is None:
        raise SpecError(f"jobs[{job.name}]: no size; expected `servers`, `gpus` or workload.gpus")
    return -(-gpus // gpus_per_server), gpus


def job_size(job: JobSpec, tree: FabricTree) -> tuple[int, int]:
    """:func:`job_servers_needed` on ``tree``'s servers; a job larger than the whole cluster is an error that
    says so (no placement, and no wait in a queue, can start it)."""
    n, gpus = job_servers_needed(job, tree.gpus_per_server)
    if n > tree.n_servers:
        raise SpecError(f"jobs[{job.name}]: needs {n} servers; the cluster has {tree.n_servers}")
    return n, gpus


def place_jobs(jobs: list[JobSpec], tree: FabricTree) -> list[PlacedJob]:
    """Place the jobs in priority order (higher first; then arrival, then list order), each on the
    servers the earlier ones left free. Returned in list order."""
    free = np.ones(tree.n_servers, bool)
    placed: dict[int, PlacedJob] = {}
    order = sorted(range(len(jobs)), key=lambda i: (-jobs[i].priority, jobs[i].arrival, i))
    for i in order:
        n, gpus = job_size(jobs[i], tree)
        try:
            servers = place(free, tree, n, jobs[i].placement)
        except SpecError as err:
            raise type(err)(f"jobs[{jobs[i].name}]: {err}", hint=err.hint) from None
        if jobs[i].placement.ranks == "mincut":
            servers = mincut_servers(jobs[i], servers, tree)
        free[servers] = False
        placed[i] = PlacedJob(jobs[i], servers, gpus)
    return [placed[i] for i in range(len(jobs))]


def mincut_servers(job: JobSpec, servers: np.ndarray, tree: FabricTree) -> np.ndarray:
    """``servers`` reordered by the min-cut rank assignment (placement.ranks: mincut)."""
    from gpuwait.placement.mincut import mincut_order

    p = job.workload.parallel
    if p.rank_order != "tp-cp-ep-dp-pp":
        raise SpecError(f"jobs[{job.name}]: placement.ranks: mincut assumes Megatron's rank order; "
                        f"got workload.parallel.rank_order {p.rank_order!r}")
    return mincut_order(servers, tree, p.tp, p.cp, p.pp)


def job_workload(job: PlacedJob):
    """The job's workload on its servers (its `gpus` and explicit placement filled in)."""
    w = job.spec.workload
    parallel = w.parallel.model_copy(update={"placement": [int(s) for s in job.servers]})
    return w.model_copy(update={"gpus": job.gpus, "parallel": parallel})


def job_step(job: PlacedJob, topo: Topology):
    """The job's training step on its servers; a workload the step refuses is an error that names the job
    (``jobs[a]: workload.parallel.global_batch: ...``): the workload's own checks know only its fields."""
    try:
        return training_step(job_workload(job), topo)
    except SpecError as err:
        raise type(err)(f"jobs[{job.name}]: {err}", problems=[f"jobs[{job.name}]: {p}" for p in err.problems],
                        hint=err.hint) from None


# ------------------------------------------------------------------------------------------ programs

def _group_demand(families, network: np.ndarray, calls_weighted: bool = True):
    """Per network group: peak per-link load and busy seconds per step."""
    peak: dict[str, np.ndarray] = {}
    busy: dict[str, float] = {}
    for label, run, calls in families:
        links = np.where(network, run.link_peak_Bps, 0.0)
        if not (np.where(network, run.link_bytes, 0.0) > 0).any():
            continue
        g = label.split()[0]
        peak[g] = np.maximum(peak.get(g, 0.0), links)
        busy[g] = busy.get(g, 0.0) + run.time_s * calls
    return peak, busy


def _intervals(result: RunResult, groups: set[str], steps: int) -> dict[str, np.ndarray]:
    """(n, 2) unique [start, end) of each network group's communication tasks in the first ``steps`` steps."""
    t = result.tasks
    comm = (t.kind == "comm") & (t.step < steps)
    out = {}
    for g in groups:
        m = comm & (t.group == g)
        if m.any():
            out[g] = np.unique(np.column_stack([t.start_s[m], t.end_s[m]]), axis=0)
    return out


def _union_s(iv: np.ndarray) -> float:
    total, end = 0.0, -np.inf
    for a, b in iv[np.argsort(iv[:, 0])]:
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def job_program(result: RunResult, families, topo: Topology) -> Program:
    """The steps of ``result`` as segments of network work (see the module docstring)."""
    peak, busy = _group_demand(families, topo.network_links)
    # the steps the task table holds whole (a long run of a large job stops at max_tasks rows): a step
    # past them would have no network work in its segments, so the program is those steps (the first
    # at least), repeated in the shared run
    steps = result.steps if result.tasks_whole_steps is None else max(result.tasks_whole_steps, 1)
    step_ends_s = np.cumsum(result.step_times_s[:steps])
    run_s = float(step_ends_s[-1])
    spans = _intervals(result, set(peak), steps)
    pace = {g: min(busy[g] * steps / max(_union_s(iv), _EPS_S), 1.0) for g, iv in spans.items()}
    cuts = np.unique(np.concatenate([[0.0], step_ends_s, *[iv.ravel() for iv in spans.values()]]).clip(0.0, run_s))
    n_links = topo.n_links
    durations, paces, peaks, active, seg_ends = [], [], [], [], []
    for a, b in zip(cuts[:-1], cuts[1:]):
        if b - a <= _EPS_S:
            continue
        mid = 0.5 * (a + b)
        on = tuple(sorted(g for g, iv in spans.items() if ((iv[:, 0] <= mid) & (iv[:, 1] > mid)).any()))
        durations.append(b - a)
        paces.append(max((pace[g] for g in on), default=0.0))
        peaks.append(sum((peak[g] for g in on), np.zeros(n_links)))
        active.append(on)
        seg_ends.append(b)
    # a step ends with the first kept segment reaching its end (a sliver under _EPS_S was dropped)
    ends_step = np.zeros(len(durations), bool)
    ends_step[np.minimum(np.searchsorted(seg_ends, step_ends_s - _EPS_S), len(durations) - 1)] = True
    return Program(np.array(durations), np.array(paces), np.array(peaks).reshape(-1, n_links), active, ends_step)


# ------------------------------------------------------------------------------------------ shared run

@dataclass
class _Lane:
    """One job's position in its program during the shared run."""

    program: Program
    start_s: float
    seg: int = 0
    work_s: float = 0.0    # network seconds (at full speed) left in the segment
    floor_s: float = 0.0   # time the segment lasts at least (compute hiding the network work)
    step_ends: list = field(default_factory=list)
    slowed_s: float = 0.0
    record: bool = False   # keep every finished segment's (index, start, end) for the report's timeline
    segments: list = field(default_factory=list)
    seg_start_s: float = 0.0

    def begin(self) -> None:
        d, p = float(self.program.duration_s[self.seg]), float(self.program.pace[self.seg])
        self.work_s = p * d
        self.floor_s = d if p < 1.0 else 0.0  # hidden or no network work: the segment lasts its compute

    @property
    def pace(self) -> float:
        """Fastest progress of the network work: paced by the compute it hides under, else full speed."""
        return float(self.program.pace[self.seg]) if self.floor_s > 0 else 1.0

    def next_event_s(self, rate: float) -> float:
        if self.work_s <= 0:
            return self.floor_s
        done = self.work_s / rate if rate > 0 else np.inf
        return min(done, self.floor_s) if self.floor_s > 0 else done

    def advance(self, dt: float, rate: float, now_s: float) -> None:
        if self.work_s > 0 and rate < self.pace * (1 - 1e-9):
            self.slowed_s += dt
        self.work_s = self.work_s - rate * dt if self.work_s > rate * dt * (1 + 1e-12) else 0.0
        self.floor_s = self.floor_s - dt if self.floor_s > dt * (1 + 1e-12) else 0.0
        if self.work_s <= 0 and self.floor_s <= 0:
            if self.record:
                self.segments.append((self.seg, self.seg_start_s, now_s))
            self.seg_start_s = now_s
            if self.program.ends_step[self.seg]:
                self.step_ends.append(now_s)
            self.seg = (self.seg + 1) % len(self.program.duration_s)
            self.begin()


#: up to this many jobs at once the max-min solve is done on the dense (jobs x links) array: a few
#: numpy reductions per freezing round instead of building a sparse matrix every segment boundary
_DENSE_JOBS = 8


def dense_max_min(weights: np.ndarray, capacity_Bps: np.ndarray, rate_cap_Bps: np.ndarray) -> np.ndarray:
    """Weighted max-min fair rates of a few flows (rows of ``weights``, ``(F, L)``) on links of
    ``capacity_Bps`` under per-flow caps: the same allocation as
    :func:`~gpuwait.engine.flow.max_min_rates` (progressive filling: all unfrozen flows rise together;
    a link that saturates freezes the flows on it, a flow that reaches its cap freezes), computed
    on the dense array, which for a handful of flows is cheaper than the sparse solver's setup."""
    n = weights.shape[0]
    rate = np.zeros(n)
    frozen = np.zeros(n, bool)
    used = weights > 0
    while not frozen.all():
        live = ~frozen
        w_live = weights[live].sum(axis=0)
        room = capacity_Bps - rate[frozen] @ weights[frozen]
        on = w_live > 0
        level = np.full(len(capacity_Bps), np.inf)
        level[on] = np.maximum(room[on], 0.0) / w_live[on]
        t = min(float(level.min()) if on.any() else np.inf, float(rate_cap_Bps[live].min()))
        if not np.isfinite(t):
            raise RuntimeError("shared run: a flow crosses no link and has no cap")
        tight = level <= t * (1 + 1e-12)
        freeze = live & ((rate_cap_Bps <= t * (1 + 1e-12)) | (used[:, tight].any(axis=1)))
        rate[freeze] = t
        frozen |= freeze
    return rate


def _rates(lanes: list[_Lane], now_s: float, capacity_Bps: np.ndarray) -> np.ndarray:
    """Progress rate (network seconds per second) of each lane's current segment: per-flow max-min."""
    rates = np.zeros(len(lanes))
    busy = [i for i, ln in enumerate(lanes) if ln.start_s <= now_s and ln.work_s > 0]
    if not busy:
        return rates
    peaks = np.array([lanes[i].program.peak_Bps[lanes[i].seg] for i in busy])
    flow_Bps = peaks.max(axis=1)  # one flow's rate alone: the load on the job's busiest link per flow there
    flow_Bps[flow_Bps <= 0] = 1.0
    pace = np.array([lanes[i].pace for i in busy])
    cap = np.maximum(capacity_Bps, (peaks * pace[:, None]).max(axis=0))  # alone, every job keeps its pace
    weights = peaks / flow_Bps[:, None]
    if len(busy) <= _DENSE_JOBS:
        got = dense_max_min(weights, cap, flow_Bps * pace)
    else:
        got, _ = max_min_rates(sp.csr_matrix(weights), cap, flow_Bps * pace)
    rates[busy] = got / flow_Bps
    return rates


def run_together(programs: list[Program], arrivals_s: list[float], capacity_Bps: np.ndarray,
                 steps: int, record: bool = False) -> list[_Lane]:
    """Run the programs on one clock until each has finished ``steps`` steps (``record``: each lane
    keeps its finished segments' times)."""
    lanes = [_Lane(p, a, record=record, seg_start_s=a) for p, a in zip(programs, arrivals_s)]
    for ln in lanes:
        ln.begin()
    now = min(arrivals_s)
    while any(len(ln.step_ends) < steps for ln in lanes):
        rates = _rates(lanes, now, capacity_Bps)
        dt = min(ln.start_s - now if ln.start_s > now else ln.next_event_s(r) for ln, r in zip(lanes, rates))
        if not np.isfinite(dt):
            raise RuntimeError("shared run: no job can progress")  # a link of capacity 0 under a job
        started = [ln.start_s <= now for ln in lanes]
        now += dt
        for ln, r, on in zip(lanes, rates, started):
            if on:
                ln.advance(dt, float(r), now)
    return lanes


def _shared_links(link_bytes: list[np.ndarray], network: np.ndarray, names: list[str]) -> list[dict[str, list[int]]]:
    out = []
    for i, mine in enumerate(link_bytes):
        shares = {}
        for j, theirs in enumerate(link_bytes):
            if i != j:
                both = np.flatnonzero(network & (mine > 0) & (theirs > 0))
                if len(both):
                    shares[names[j]] = both.tolist()
        out.append(shares)
    return out


def _first_steps(lane: _Lane, program: Program, steps: int) -> np.ndarray:
    """(segment, start, end) of the lane's segments in its first ``steps`` steps."""
    rows = np.array(lane.segments, float).reshape(-1, 3)
    done = np.cumsum(program.ends_step[rows[:, 0].astype(int)])
    return rows[: int(np.searchsorted(done, steps)) + 1]


def check_job_list(scenario: Scenario, expected: str = "a `jobs:` list") -> list[str]:
    """The jobs' names, once each, in a scenario without a top-level workload: what `run`, `validate`,
    `place` and `schedule` all refuse. ``expected`` says where the jobs may come from (``schedule`` also
    takes a trace).

    >>> from gpuwait.spec import Scenario
    >>> job = {"name": "a", "servers": 1, "workload": {"model": {"preset": "llama-8b"}}}
    >>> check_job_list(Scenario.model_validate({"jobs": [job, job | {"name": "b"}, job]}))
    Traceback (most recent call last):
    ...
    gpuwait.errors.SpecError: jobs: name 'a' given 2 times (jobs[0], jobs[2]); expected each name once
    """
    if not scenario.jobs:
        raise SpecError(f"jobs: the scenario has none; expected {expected}")
    if scenario.workload is not None:
        raise SpecError("workload: a scenario with `jobs:` describes each job's workload in its entry; "
                        "expected no top-level `workload:`")
    refuse_unused_sections(scenario)
    names = [j.name for j in scenario.jobs]
    refuse_repeated_names(names, "jobs", entries="jobs[{}]")
    return names


def check_jobs(scenario: Scenario, topo: Topology) -> dict:
    """What `run` refuses in a scenario's jobs, without simulating (`gpuwait validate`): names, each
    placement on the servers the others leave free, each job's layout on its servers."""
    names = check_job_list(scenario)
    placed = place_jobs(list(scenario.jobs), fabric_tree(topo))
    for job in placed:
        job_step(job, topo)
    described = ", ".join(f"{name} ({len(job.servers)} servers)" for name, job in zip(names, placed))
    return {"servers": topo.n_servers, "gpus": topo.n_gpus, "workload": f"{len(names)} jobs: {described}"}


def run_jobs(scenario: Scenario, steps: int | None = None, max_memory_bytes: float | None = None) -> JobsRun:
    """Place ``scenario.jobs``, time each alone, then run them together (base case only); the jobs'
    collectives are held to ``max_memory_bytes`` (``max_memory``; None: half the machine's memory)."""
    names = check_job_list(scenario)
    cluster = resolve_cluster(scenario.cluster)
    topo = build_cluster(cluster)
    tree = fabric_tree(topo)
    placed = place_jobs(list(scenario.jobs), tree)
    _, routing, transport = scenario_cases(scenario, cluster)[0]
    # no NCCL environment, as a workload run: the QPs per connection are the routing's (qps_setting); given
    # as NCCL_IB_QPS_PER_CONNECTION they were a variable the jobs set, which a calibration's note then named
    env = cluster_env(cluster, transport=transport.name)
    n_steps = steps if steps is not None else max(j.workload.steps for j in scenario.jobs)
    if n_steps < 1:
        raise SpecError(f"steps: got {n_steps}; expected at least 1")
    fabric = FabricModel(topo, routing, transport, env, max_memory_bytes=max_memory_bytes)
    alone, programs = [], []
    for job in placed:
        step = job_step(job, topo)
        result = run_training(step, fabric, steps=n_steps, case=job.name, cluster=cluster.name)
        alone.append(result)
        programs.append(job_program(result, communication_families(step, fabric), topo))
    capacity = effective_capacity_Bps(topo, transport)
    lanes = run_together(programs, [j.spec.arrival for j in placed], capacity, n_steps, record=True)
    shares = _shared_links([np.where(topo.network_links, r.links.bytes_per_step, 0.0) for r in alone],
                           topo.network_links, names)
    outcomes = []
    for job, result, program, lane, share in zip(placed, alone, programs, lanes, shares):
        ends = np.array([job.spec.arrival, *lane.step_ends[:n_steps]])
        leaves, pods = tree.spans(job.servers)
        outcomes.append(JobOutcome(job.name, job.servers, hostlist([tree.server_names[s] for s in job.servers]),
                                   leaves, pods, result, program, float(np.diff(ends).mean()),
                                   lane.slowed_s / max(len(lane.step_ends), 1), share,
                                   _first_steps(lane, program, n_steps)))
    return JobsRun(scenario, topo, tree, outcomes, n_steps, topo.link_names(),
                   cluster_label(scenario.cluster.preset or cluster.name, topo, transport, transport), env.notes)


def busbw_over_hash_seeds(scenario: Scenario, placement: list[int], seeds: int, label: str = "dp ") -> np.ndarray:
    """busbw (GB/s) of the step's collective whose label starts with ``label``, with the workload on
    ``placement``, once per ECMP hash seed 0..seeds-1.

    A per-flow hash makes one placement's collisions a draw: a fabric's hash seeds decide which flows
    meet, so a placement's bandwidth is compared as the mean over seeds, as a measurement over many
    jobs would average it."""
    from gpuwait.runner.workload import run_workload

    if scenario.workload is None:
        raise SpecError("workload: expected one workload to place (a scenario with `workload:`, not `jobs:`)")
    out = np.empty(seeds)
    for seed in range(seeds):
        cluster = scenario.cluster.model_copy(update={"routing": scenario.cluster.routing.model_copy(update={"seed": seed})})
        parallel = scenario.workload.parallel.model_copy(update={"placement": list(placement)})
        workload = scenario.workload.model_copy(update={"parallel": parallel})
        result = run_workload(scenario.model_copy(update={"cluster": cluster, "workload": workload}))[0]
        out[seed] = next(c.busbw_GBps for c in result.collectives if c.label.startswith(label))
    return out
