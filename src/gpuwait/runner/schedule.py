"""A batch scheduler over time: jobs arrive, wait in a queue, get whole servers by a placement
policy (gang allocation: all of a job's servers at once or none), run their steps at the step time
their placement and their co-tenants give them, and leave.

The queue is first come, first served within priority (higher first). With ``backfill`` a later job
may start while the head waits if it does not delay the head's reservation (EASY backfill, Lifka,
"The ANL/IBM SP scheduling system", JSSPP 1995; the rule Slurm's ``sched/backfill`` applies,
https://slurm.schedmd.com/sched_config.html): the head's *shadow time* is when enough servers will
be free counting the running jobs' predicted ends; a later job may start now if it ends by then or
uses only the servers the head will not need at the shadow time.

How long a job runs (all in :mod:`gpuwait.runner.jobs`' terms):

- Its *program* (its step cut at network phase boundaries) is computed once, when it starts, by
  timing one step alone on its servers. A job that arrives with a duration (a trace) gets its step
  count from its step time alone on a *compact* placement (Slurm topology/tree on an empty cluster),
  so a trace job carries the same work under every policy and a fragmented placement stretches it.
- A running job that shares network links with others is run together on one clock with the (at
  most three) co-running jobs that share the most bytes with it on common links
  (:func:`~gpuwait.runner.jobs.run_together`, two steps); its step time is its mean step there. A
  set's result is cached by its membership, so it is simulated once however often the scheduler
  passes through it. The bound keeps a random placement (every job on the spines) from turning
  into one simulation of every running job per event; a job sharing with more than three others is
  slowed by its three heaviest co-tenants only, an underestimate.
- Between two events (an arrival or a completion) every running job advances at 1 / its step time;
  it completes when its steps are done.

Metrics: per job queue delay, JCT (end - arrival), slowdown (run time over its steps' time alone on a
compact placement, minus 1), leaf domains and pods spanned, cross-spine bytes (bytes its run puts on
links into tier-2 and higher switches), whether it ever shared a network link with another running
job. Per cluster: allocation rate (time-averaged share of GPUs allocated), utilization (allocated
GPU-time weighted by each job's compact-alone over actual step time: the share of the cluster doing
useful work), fragmentation (time-averaged share of GPUs free while the head of the queue cannot
start: free GPUs the head cannot use), leaf fragmentation (time-averaged share of GPUs free in
partly allocated leaf domains: free capacity a job of one leaf cannot use compactly), makespan, mean and p99 JCT, share of jobs and of GPUs that
ever ran in contention, and seconds each link spent shared by two or more jobs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from gpuwait.collectives.ncclenv import cluster_env
from gpuwait.engine.base import effective_capacity_Bps
from gpuwait.fabric.groups import FabricModel
from gpuwait.placement import fabric_tree, place
from gpuwait.placement.policies import PlacementError
from gpuwait.placement.tree import FabricTree
from gpuwait.runner.jobs import (
    PlacedJob,
    Program,
    check_job_list,
    job_program,
    job_size,
    job_step,
    mincut_servers,
    run_together,
)
from gpuwait.runner.traffic import scenario_cases
from gpuwait.spec.jobs import JobSpec, PlacementSpec
from gpuwait.spec.scenario import Scenario
from gpuwait.steps.training import communication_families, run_training
from gpuwait.topology.presets import build_cluster, resolve_cluster

_EPS_S = 1e-9
#: steps a group of co-running jobs is simulated together to get each member's shared step time
_SHARED_STEPS = 2
#: co-running jobs a job's shared step is simulated with: those sharing the most bytes on common links
_MAX_NEIGHBOURS = 3


@dataclass
class JobRecord:
    """One job's course through the scheduler."""

    name: str
    arrival_s: float
    servers_needed: int
    gpus: int
    steps: int
    start_s: float = np.nan
    end_s: float = np.nan
    servers: np.ndarray | None = None
    leaves: int = 0
    pods: int = 0
    step_alone_s: float = np.nan      # alone on its servers
    step_compact_s: float = np.nan    # alone on a compact placement of an empty cluster
    cross_spine_bytes: float = 0.0
    contended: bool = False
    shares_with: set = field(default_factory=set)

    @property
    def queue_delay_s(self) -> float:
        return self.start_s - self.arrival_s

    @property
    def jct_s(self) -> float:
        return self.end_s - self.arrival_s

    @property
    def slowdown(self) -> float:
        ideal_s = self.steps * self.step_compact_s
        return (self.end_s - self.start_s) / ideal_s - 1.0 if ideal_s > 0 else 0.0


@dataclass(frozen=True, eq=False)
class ScheduleResult:
    policy: str
    backfill: bool
    jobs: list[JobRecord]
    n_gpus: int
    makespan_s: float
    allocation_rate: float
    utilization: float
    fragmentation: float
    leaf_fragmentation: float
    timeline: np.ndarray           # (events, 5): time, allocated, fragmented, leaf-fragmented GPUs, queued jobs
    link_shared_s: dict[str, float]  # link name -> seconds it carried two or more jobs
    link_names: list[str]

    @property
    def jct_s(self) -> np.ndarray:
        return np.array([j.jct_s for j in self.jobs])

    @property
    def mean_jct_s(self) -> float:
        return float(self.jct_s.mean())

    @property
    def p99_jct_s(self) -> float:
        return float(np.percentile(self.jct_s, 99))

    @property
    def contended_jobs(self) -> float:
        return float(np.mean([j.contended for j in self.jobs]))

    @property
    def contended_gpus(self) -> float:
        gpus = np.array([j.gpus for j in self.jobs], float)
        return float(gpus[[j.contended for j in self.jobs]].sum() / gpus.sum())

    def summary(self) -> dict:
        return {"policy": self.policy, "backfill": self.backfill, "jobs": len(self.jobs),
                "makespan_s": self.makespan_s, "mean_jct_s": self.mean_jct_s, "p99_jct_s": self.p99_jct_s,
                "mean_queue_delay_s": float(np.mean([j.queue_delay_s for j in self.jobs])),
                "mean_slowdown": float(np.mean([j.slowdown for j in self.jobs])),
                "allocation_rate": self.allocation_rate, "utilization": self.utilization,
                "fragmentation": self.fragmentation, "leaf_fragmentation": self.leaf_fragmentation,
                "contended_jobs": self.contended_jobs,
                "contended_gpus": self.contended_gpus}


class _Cluster:
    """The topology, fabric and caches every scheduled job is timed on."""

    def __init__(self, scenario: Scenario):
        cluster = resolve_cluster(scenario.cluster)
        self.topo = build_cluster(cluster)
        self.tree: FabricTree = fabric_tree(self.topo)
        _, routing, transport = scenario_cases(scenario, cluster)[0]
        # no NCCL environment, as a workload or jobs run: the QPs per connection are the routing's (qps_setting)
        env = cluster_env(cluster, transport=transport.name)
        self.fabric = FabricModel(self.topo, routing, transport, env)
        self.capacity_Bps = effective_capacity_Bps(self.topo, transport)
        network = self.topo.network_links
        tier = self.topo.node_tier
        self.network = network
        self.cross_spine = network & (np.maximum(tier[self.topo.link_src], tier[self.topo.link_dst]) >= 2)
        self._alone: dict = {}
        self._shapes: dict = {}
        self.shape_hits = 0
        self._link_index: tuple | None = None
        # the shape rule holds where routing does not depend on which servers a flow joins, and under
        # static routing where the destinations keep their D-mod-k residues (see destination_residues)
        self.shape_symmetric = routing.kind in SHAPE_SYMMETRIC_ROUTING and cluster.fabric.kind == "clos"
        self._residues = None
        if routing.kind == "static" and cluster.fabric.kind == "clos":
            self._residues = destination_residues(self.topo)
            self.shape_symmetric = self._residues is not None
        self._compact: dict[str, float] = {}
        self._groups: dict[frozenset, dict[int, float]] = {}

    def alone(self, spec: JobSpec, servers: np.ndarray, gpus: int) -> tuple[Program, np.ndarray]:
        """(program, bytes per step per link) of the job alone on ``servers`` (cached; on a fabric whose
        routing ignores which servers, reused across placements of the same shape, see ``shape_key``)."""
        key = (_workload_key(spec), gpus, tuple(servers.tolist()) if len(servers) > 1 else ())
        if key in self._alone:
            return self._alone[key]
        shape = (_workload_key(spec), gpus, shape_key(self.tree, servers, self._residues)) if self.shape_symmetric else None
        if shape is not None and shape in self._shapes:
            first_servers, (program, link_bytes) = self._shapes[shape]
            loaded = np.flatnonzero((link_bytes > 0) | program.peak_Bps.any(axis=0))
            if self._link_index is None:
                self._link_index = link_index(self.topo)
            moved = relabel_links(self.topo, first_servers, servers, loaded, self._link_index)
            if moved is not None:
                peak = np.zeros_like(program.peak_Bps)
                peak[:, moved] = program.peak_Bps[:, loaded]
                placed = np.zeros_like(link_bytes)
                placed[moved] = link_bytes[loaded]
                self.shape_hits += 1
                self._alone[key] = (Program(program.duration_s, program.pace, peak, program.groups, program.ends_step), placed)
                return self._alone[key]
        step = job_step(PlacedJob(spec, servers, gpus), self.topo)
        result = run_training(step, self.fabric, steps=1, case=spec.name)
        program = job_program(result, communication_families(step, self.fabric), self.topo)
        self._alone[key] = (program, np.where(self.network, result.links.bytes_per_step, 0.0))
        if shape is not None:
            self._shapes.setdefault(shape, (servers.copy(), self._alone[key]))
        return self._alone[key]

    def compact_step_s(self, spec: JobSpec, n_servers: int, gpus: int) -> float:
        """The job's step alone on the most compact placement of an empty cluster."""
        key = f"{_workload_key(spec)}|{gpus}"
        if key not in self._compact:
            free = np.ones(self.tree.n_servers, bool)
            servers = place(free, self.tree, n_servers, PlacementSpec(policy="slurm-tree"))
            self._compact[key] = self.alone(spec, servers, gpus)[0].step_s
        return self._compact[key]

    def group_steps(self, members: frozenset, programs: dict[int, Program]) -> dict[int, float]:
        """Each member's step time when the group's jobs run together (cached by membership)."""
        if members not in self._groups:
            order = sorted(members)
            # only the links some member loads matter: the max-min solve on those is much smaller
            cols = np.flatnonzero(np.any([programs[i].peak_Bps.any(axis=0) for i in order], axis=0))
            sliced = [Program(p.duration_s, p.pace, p.peak_Bps[:, cols], p.groups, p.ends_step) for p in (programs[i] for i in order)]
            lanes = run_together(sliced, [0.0] * len(order), self.capacity_Bps[cols], _SHARED_STEPS)
            self._groups[members] = {i: ln.step_ends[_SHARED_STEPS - 1] / _SHARED_STEPS for i, ln in zip(order, lanes)}
        return self._groups[members]


# ------------------------------------------------------------------------------------------ shapes
#: routing kinds under which a job's step alone depends only on its placement's shape: spray splits
#: every flow evenly over all equal-cost next hops and adaptive splits by load (with no other traffic,
#: the job's own), so relabelling servers, their leaves and nothing else maps routes onto routes.
#: ECMP hashes each flow's 5-tuple (its servers' addresses): there two placements of one shape collide
#: differently, so each placement is run. Static routing is reused under a stricter key
#: (:func:`destination_residues`).
SHAPE_SYMMETRIC_ROUTING = ("spray", "adaptive")


def destination_residues(topo) -> np.ndarray | None:
    """(servers, NICs) each NIC's destination index in fat-tree order modulo K, the product over the
    tiers below the top of the least common multiple of that tier's up-degrees; None if no NIC is cabled.

    Why: static (D-mod-k) routing sends a flow up from tier t by ``(d // stride) mod k_t``, ``d`` its
    destination's fat-tree index, ``k_t`` the up-links of the switch it is at and ``stride`` the product of
    the earlier ``k``; going down there is one path (parallel cables by QP). Every path's product of
    ``k_t`` divides K, so two destinations with one residue modulo K take the same up-choices from every
    switch. A relabelling that keeps spines and cores (``relabel_links``) maps one placement's routes onto
    the other's exactly when every server keeps its NICs' residues; with another residue the flows climb
    to other spines or cores, which the relabelling does not move. So under static routing the residues
    join the shape key (on a 2:1 leaf of 4 servers with 16 uplinks: the server's position in its leaf,
    mod 2)."""
    from gpuwait.routing.paths import _fat_tree_order  # the order the static router numbers destinations in

    if not topo.nic_node.size or not (topo.nic_uplink[:, :, 0] >= 0).any():
        return None
    tier = topo.node_tier
    up = tier[topo.link_dst] > tier[topo.link_src]
    degree = np.bincount(topo.link_src[up], minlength=topo.n_nodes)
    k = 1
    for t in range(int(tier.max())):
        d = degree[(tier == t) & (degree > 0)]
        k *= int(np.lcm.reduce(d)) if len(d) else 1
    return _fat_tree_order(topo)[topo.nic_node] % k


def shape_key(tree: FabricTree, servers: np.ndarray, residues: np.ndarray | None = None) -> tuple:
    """The placement's shape: per server in rank order, its pod and its leaf domain numbered by first
    appearance. Two placements with one shape hold the same number of servers per leaf in the same
    rank order, and leaves that share a pod in one share it in the other; on a Clos whose leaves are
    alike and whose pods are alike a relabelling of servers, leaves and pods maps one onto the other.
    The pods are kept as they are (not renumbered) so spines and cores need no relabelling.
    ``residues`` (static routing, :func:`destination_residues`): each server's NICs' residues join its entry."""
    leaf_ids: dict[int, int] = {}
    out = []
    for s in servers.tolist():
        leaf = int(tree.leaf_of_server[s])
        entry = (int(tree.pod_of_server[s]), leaf_ids.setdefault(leaf, len(leaf_ids)))
        out.append(entry if residues is None else (*entry, tuple(residues[s].tolist())))
    return tuple(out)


def link_index(topo) -> tuple[dict[tuple[int, int], list[int]], np.ndarray]:
    """(node pair -> its links, each link's rank among its pair's parallel cables), for relabelling."""
    links_of: dict[tuple[int, int], list[int]] = {}
    for k, (u, v) in enumerate(zip(topo.link_src.tolist(), topo.link_dst.tolist())):
        links_of.setdefault((u, v), []).append(k)
    rank = np.zeros(len(topo.link_src), np.int64)
    for pair_links in links_of.values():
        rank[pair_links] = np.arange(len(pair_links))
    return links_of, rank


def relabel_links(topo, first: np.ndarray, now: np.ndarray, links: np.ndarray,
                  index: tuple[dict, np.ndarray] | None = None) -> np.ndarray | None:
    """For each of ``links`` (those the job loads), its image when server ``first[i]`` becomes
    ``now[i]`` (nodes inside a server by their order in it, a leaf by the leaf its image NICs reach, every other node fixed); None
    when the images are not links of ``topo`` or a leaf would map two ways (the fabric is not
    symmetric there: then the job is run)."""
    node_map = np.arange(len(topo.node_server))
    for a, b in zip(first.tolist(), now.tolist()):
        if a == b:
            continue
        na, nb = np.flatnonzero(topo.node_server == a), np.flatnonzero(topo.node_server == b)
        if len(na) != len(nb):
            return None
        node_map[na] = nb
    # leaves: where each moved NIC's uplinks land
    tier1 = topo.node_tier[topo.link_dst] == 1
    host_up = tier1 & (topo.node_server[topo.link_src] >= 0)
    leaf_map: dict[int, int] = {}
    links_of, rank = index if index is not None else link_index(topo)
    for k in np.flatnonzero(host_up & (node_map[topo.link_src] != topo.link_src)):
        src, leaf = int(topo.link_src[k]), int(topo.link_dst[k])
        image = sorted({int(topo.link_dst[j]) for j in np.flatnonzero((topo.link_src == node_map[src]) & tier1)})
        if len(image) != 1 or leaf_map.setdefault(leaf, image[0]) != image[0]:
            return None
    for leaf, leaf_image in leaf_map.items():
        node_map[leaf] = leaf_image
    if len(set(leaf_map.values())) != len(leaf_map):
        return None
    # parallel cables between one pair of nodes: the n-th maps to the n-th
    moved = np.empty(len(links), np.int64)
    for i, k in enumerate(links.tolist()):
        parallel = links_of.get((int(node_map[topo.link_src[k]]), int(node_map[topo.link_dst[k]])), [])
        if rank[k] >= len(parallel):
            return None
        moved[i] = parallel[rank[k]]
    if len(set(moved.tolist())) != len(moved):
        return None
    return moved


def _workload_key(spec: JobSpec) -> str:
    return json.dumps(spec.workload.model_dump(mode="json", exclude={"steps"}), sort_keys=True)


@dataclass
class _State:
    free: np.ndarray
    queue: list[int] = field(default_factory=list)
    running: dict[int, float] = field(default_factory=dict)   # job -> steps left
    step_s: dict[int, float] = field(default_factory=dict)    # job -> current step time
    programs: dict[int, Program] = field(default_factory=dict)
    links: dict[int, np.ndarray] = field(default_factory=dict)  # job -> network links it loads (bool)
    bytes: dict[int, np.ndarray] = field(default_factory=dict)  # job -> bytes per step per network link


def schedule(scenario: Scenario, policy: PlacementSpec | None = None, *, backfill: bool = True,
             durations_s: dict[str, float] | None = None) -> ScheduleResult:
    """Run ``scenario.jobs`` through the scheduler (see the module docstring).

    ``policy`` overrides every job's placement; ``durations_s`` (job name -> seconds, from a trace)
    sets a job's steps from its compact step time alone instead of its workload's ``steps``.
    """
    check_job_list(scenario, expected="a `jobs:` list or a trace")
    cl = _Cluster(scenario)
    specs = [j if policy is None else j.model_copy(update={"placement": policy}) for j in scenario.jobs]
    records = _records(specs, cl, durations_s or {})
    return _Run(cl, specs, records, backfill).go(policy.policy if policy else "per job")


def _records(specs: list[JobSpec], cl: _Cluster, durations_s: dict[str, float]) -> list[JobRecord]:
    out = []
    for spec in specs:
        n, gpus = job_size(spec, cl.tree)
        compact_s = cl.compact_step_s(spec, n, gpus)
        steps = spec.workload.steps
        if spec.name in durations_s:
            steps = max(1, int(round(durations_s[spec.name] / compact_s)))
        out.append(JobRecord(spec.name, spec.arrival, n, gpus, steps, step_compact_s=compact_s))
    return out


class _Run:
    """One pass of the event loop."""

    def __init__(self, cl: _Cluster, specs: list[JobSpec], records: list[JobRecord], backfill: bool):
        self.cl, self.specs, self.rec, self.backfill = cl, specs, records, backfill
        self.st = _State(np.ones(cl.tree.n_servers, bool))
        self.order = sorted(range(len(specs)), key=lambda i: (specs[i].arrival, -specs[i].priority, i))
        self.timeline: list[tuple[float, int, int, int, int]] = []
        self.link_shared_s = np.zeros(cl.topo.n_links)
        self.alloc_gpu_s = self.useful_gpu_s = self.frag_gpu_s = self.leaf_frag_gpu_s = 0.0
        self.leaf_size = np.bincount(cl.tree.leaf_of_server)

    # ---------------------------------------------------------------- events
    def go(self, policy_name: str) -> ScheduleResult:
        now, nxt = 0.0, 0
        while nxt < len(self.order) or self.st.queue or self.st.running:
            t_arrival = self.specs[self.order[nxt]].arrival if nxt < len(self.order) else np.inf
            t_end = min((now + left * self.st.step_s[i] for i, left in self.st.running.items()), default=np.inf)
            t_next = min(t_arrival, t_end)
            if not np.isfinite(t_next):
                self._refuse_head()
            self._advance(now, t_next)
            now = t_next
            self._finish(now)
            while nxt < len(self.order) and self.specs[self.order[nxt]].arrival <= now + _EPS_S:
                self._enqueue(self.order[nxt])
                nxt += 1
            self._dispatch(now)
            self._retime()
            self._sample(now)
        n_gpus = self.cl.tree.n_servers * self.cl.tree.gpus_per_server
        span = max(now, _EPS_S)
        names = self.cl.topo.link_names()
        shared = {names[k]: float(self.link_shared_s[k]) for k in np.argsort(-self.link_shared_s)[:20]
                  if self.link_shared_s[k] > 0}
        return ScheduleResult(policy_name, self.backfill, self.rec, n_gpus, now, self.alloc_gpu_s / (span * n_gpus),
                              self.useful_gpu_s / (span * n_gpus), self.frag_gpu_s / (span * n_gpus),
                              self.leaf_frag_gpu_s / (span * n_gpus),
                              np.array(self.timeline, float).reshape(-1, 5), shared, names)

    def _enqueue(self, i: int) -> None:
        self.st.queue.append(i)
        self.st.queue.sort(key=lambda k: (-self.specs[k].priority, self.specs[k].arrival, k))

    def _advance(self, t0: float, t1: float) -> None:
        dt = t1 - t0
        if dt <= 0:
            return
        st = self.st
        for i in st.running:
            st.running[i] -= dt / st.step_s[i]
            self.alloc_gpu_s += self.rec[i].gpus * dt
            self.useful_gpu_s += self.rec[i].gpus * dt * min(self.rec[i].step_compact_s / st.step_s[i], 1.0)
        if st.queue and self._head_blocked():
            self.frag_gpu_s += int(st.free.sum()) * self.cl.tree.gpus_per_server * dt
        self.leaf_frag_gpu_s += self._leaf_fragmented() * dt
        if len(st.running) > 1:
            count = sum(st.links[i].astype(int) for i in st.running)
            self.link_shared_s[count >= 2] += dt

    def _finish(self, now: float) -> None:
        for i in [i for i, left in self.st.running.items() if left <= 1e-9 * max(self.rec[i].steps, 1)]:
            del self.st.running[i]
            self.st.free[self.rec[i].servers] = True
            self.rec[i].end_s = now

    def _refuse_head(self) -> None:
        """Nothing runs and nothing arrives, yet the head waits: its policy cannot place it on the empty
        cluster. The policy's own reason and hint say why (as run and place give them)."""
        i = self.st.queue[0]
        head = self.specs[i]
        try:
            place(self.st.free, self.cl.tree, self.rec[i].servers_needed, head.placement)
        except PlacementError as err:
            raise PlacementError(f"jobs[{head.name}]: {err}; the policy cannot place it even on an empty cluster",
                                 hint=err.hint) from None
        raise PlacementError(f"jobs[{head.name}]: the policy cannot place it even on an empty cluster")

    # ---------------------------------------------------------------- dispatch
    def _try_start(self, i: int, now: float) -> bool:
        st, rec = self.st, self.rec[i]
        if rec.servers_needed > int(st.free.sum()):
            return False
        try:
            servers = place(st.free, self.cl.tree, rec.servers_needed, self.specs[i].placement)
        except PlacementError:
            return False
        if self.specs[i].placement.ranks == "mincut":
            servers = mincut_servers(self.specs[i], servers, self.cl.tree)
        program, link_bytes = self.cl.alone(self.specs[i], servers, rec.gpus)
        st.free[servers] = False
        st.running[i] = float(rec.steps)
        st.step_s[i] = program.step_s
        st.programs[i] = program
        st.links[i] = link_bytes > 0
        st.bytes[i] = link_bytes
        rec.start_s, rec.servers = now, servers
        rec.leaves, rec.pods = self.cl.tree.spans(servers)
        rec.step_alone_s = program.step_s
        rec.cross_spine_bytes = float(link_bytes[self.cl.cross_spine].sum()) * rec.steps
        return True

    def _head_blocked(self) -> bool:
        head = self.rec[self.st.queue[0]]
        if head.servers_needed > int(self.st.free.sum()):
            return True
        try:
            place(self.st.free, self.cl.tree, head.servers_needed, self.specs[self.st.queue[0]].placement)
        except PlacementError:
            return True
        return False

    def _dispatch(self, now: float) -> None:
        st = self.st
        while st.queue and self._try_start(st.queue[0], now):
            st.queue.pop(0)
        if not st.queue or not self.backfill:
            return
        shadow_s, extra = self._shadow(now)
        for i in list(st.queue[1:]):
            rec = self.rec[i]
            ends_s = now + rec.steps * rec.step_compact_s
            if ends_s > shadow_s + _EPS_S and rec.servers_needed > extra:
                continue
            if self._try_start(i, now):
                st.queue.remove(i)
                if ends_s > shadow_s + _EPS_S:
                    extra -= rec.servers_needed

    def _shadow(self, now: float) -> tuple[float, int]:
        """When the head will have its servers (running jobs' predicted ends) and the servers to spare then."""
        st = self.st
        need = self.rec[st.queue[0]].servers_needed
        free = int(st.free.sum())
        ends = sorted((now + left * st.step_s[i], self.rec[i].servers_needed) for i, left in st.running.items())
        for t, n in ends:
            free += n
            if free >= need:
                return t, free - need
        return np.inf, 0

    # ---------------------------------------------------------------- contention
    def _retime(self) -> None:
        """Each running job's step time beside the co-running jobs that share its links: simulated
        with at most :data:`_MAX_NEIGHBOURS` of them, those sharing the most bytes (cost bound)."""
        st = self.st
        running = [i for i in st.running if st.links[i].any()]
        for i in st.running:
            st.step_s[i] = st.programs[i].step_s
        if len(running) < 2:
            return
        load = np.array([st.bytes[i] for i in running])
        for a, i in enumerate(running):
            overlap = np.minimum(load[a], load).sum(axis=1)
            overlap[a] = 0.0
            others = [running[b] for b in np.argsort(-overlap, kind="stable")[:_MAX_NEIGHBOURS] if overlap[b] > 0]
            if not others:
                continue
            steps = self.cl.group_steps(frozenset([i, *others]), st.programs)
            st.step_s[i] = max(steps[i], st.programs[i].step_s)
            self.rec[i].contended = True
            self.rec[i].shares_with.update(self.rec[k].name for k in others)

    def _sample(self, now: float) -> None:
        st = self.st
        allocated = sum(self.rec[i].gpus for i in st.running)
        frag = int(st.free.sum()) * self.cl.tree.gpus_per_server if st.queue and self._head_blocked() else 0
        self.timeline.append((now, allocated, frag, self._leaf_fragmented(), len(st.queue)))

    def _leaf_fragmented(self) -> int:
        """Free GPUs in partly allocated leaf domains: capacity a job wanting a whole leaf cannot use."""
        free = np.bincount(self.cl.tree.leaf_of_server[self.st.free], minlength=len(self.leaf_size))
        return int(free[(free > 0) & (free < self.leaf_size)].sum()) * self.cl.tree.gpus_per_server
