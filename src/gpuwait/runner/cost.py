"""What a run will allocate, estimated from the scenario before anything is built or simulated.

``run``, ``place``, ``diagnose``, ``telemetry export`` and ``validate`` state the estimate and refuse a
scenario whose estimate exceeds a limit the user can raise (``--max-memory``; default half the machine's
memory), naming the field to change; the Python API's ``simulate`` and ``diagnose`` refuse alike
(``max_memory=``) through the same :func:`check_scenario_cost`, ``perf`` through :func:`estimate_perf`, and
``sweep run`` each case in its worker (an invalid row).
The estimate counts what grows with the input, with coefficients measured on this code (peak
resident memory under ``/usr/bin/time -f %M``):

- training steps: the task table holds one row per task of every rank, and each pipeline step keeps
  forward/backward end times per (stage, chunk, micro-batch, dp rank): measured 0.84-0.90 KB per
  rank x micro-batch x model chunk x step on ``examples/dp-only.yaml`` with global_batch 8,192-32,768
  and 2-8 steps; counted as :data:`TASK_BYTES`;
- several jobs on one fabric (``jobs:``, :mod:`gpuwait.runner.jobs`): each job's step run alone once (its
  task table, :data:`TASK_BYTES` per rank x micro-batch x chunk: measured +35 MB for 65,536 of them on
  ``examples/two-jobs-shared-uplinks.yaml`` with job a's global_batch 65,536), its program (the step cut at
  every start and end of a network collective: with a collective per micro-batch, pipeline stages, experts,
  context parallelism or ZeRO-3, measured 2.2-6 segments per micro-batch x chunk, counted as
  :data:`SEGMENTS_PER_MICRO_BATCH`; data parallelism alone 4 a step whatever its micro-batches and buckets,
  counted as :data:`SEGMENTS_PER_STEP`) with a per-link peak load per segment (float64 over
  :data:`LINKS_PER_GPU` links per GPU of the cluster), and the shared run's
  record of every segment of every step (measured 143 B each: +3.4 MB for 3,000 steps of 8 segments;
  counted as :data:`SEGMENT_BYTES`);
- traffic on the flow engine: the flow table, one path per flow, and a rate per flow at each
  completion event (flows x flows): measured +5 MB for 3,584 flows and +195 MB for 15,360 flows
  (all-to-all on rocev2-400g-2tier, 8 and 16 servers); counted as :data:`FLOW_BYTES` per flow plus
  :data:`FLOW_PAIR_BYTES` per flow pair, which covers both;
- ``gpuwait perf``: the collective's fabric runs, counted from the compiled plan and the topology by
  :mod:`gpuwait.fabric.memory` (rows, link entries and an all-to-all's membership cells, each with
  the bytes of the arrays the code holds for it), plus the topology's arrays (:func:`estimate_perf`);
- the packet engine: packets (bytes / 4 KiB MTU) are stated; their count bounds time, not memory
  (queues hold packets in flight only), and ``packet.max_time_s`` bounds the run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuwait.errors import SpecError, UnitError
from gpuwait.fabric.memory import memory_limit
from gpuwait.spec import Scenario
from gpuwait.spec.workload import WorkloadSpec
from gpuwait.topology import resolve_cluster
from gpuwait.topology.presets import resolve_server
from gpuwait.units import format_size, parse_size_bytes

#: bytes per rank x micro-batch x model chunk x step (measured 0.84-0.90 KB, see the module doc)
TASK_BYTES = 1024
#: bytes per flow: flow table, path and result rows
FLOW_BYTES = 2048
#: bytes per pair of flows: a rate per flow at each completion event (measured ~0.8 B)
FLOW_PAIR_BYTES = 1
#: what every run holds besides (interpreter, numpy, the topology of a mid-size cluster)
BASE_BYTES = 200 * 2**20
#: the packet engine's MTU-sized packets, for the stated count
PACKET_BYTES = 4096
#: segments of a job's program per micro-batch x model chunk, with a network collective per micro-batch
#: (measured 2.2-6, see the module doc)
SEGMENTS_PER_MICRO_BATCH = 6
#: segments of a job's program whose only network collectives are data parallelism's (measured 4)
SEGMENTS_PER_STEP = 8
#: bytes per segment the shared run of several jobs records per step (measured 143 B)
SEGMENT_BYTES = 160
#: links per GPU of a cluster, for a job program's per-link loads (measured 11.75-26.9 on the dgx-a100,
#: dgx-h100(-superpod), rocev2-400g-2tier, dual-plane-2x200g and gb200-nvl72 presets at 4 and 32 servers)
LINKS_PER_GPU = 32


@dataclass(frozen=True)
class CostEstimate:
    """The counts a run allocates by, the bytes they come to, and the field that drives them."""

    counts: dict[str, int]
    bytes: float
    field: str
    joiner: str = " x "  # ", " where the counts are not factors of one product (perf's)

    def describe(self) -> str:
        """``'128 ranks x 4 micro-batches x 1 chunk x 2 steps; about 201 MB'``."""
        return self.joiner.join(f"{v:,} {k}" for k, v in self.counts.items()) + f"; about {format_size(self.bytes)}"

    def to_dict(self) -> dict:
        return {"counts": dict(self.counts), "bytes": self.bytes, "field": self.field}


def _training_counts(spec: WorkloadSpec, ranks: int) -> tuple[int, int]:
    """(micro-batches, model chunks) of one training step of ``spec`` on ``ranks`` GPUs."""
    par = spec.parallel
    dp = par.dp or max(ranks // (par.tp * par.pp), 1)
    global_batch = par.global_batch or dp * par.micro_batch * (4 * par.pp if par.pp > 1 else 1)
    micro_batches = max(global_batch // (dp * par.micro_batch), 1)
    return micro_batches, par.virtual_stages if par.schedule == "interleaved-1f1b" else 1


def _workload_estimate(scenario: Scenario, spec: WorkloadSpec, steps: int | None) -> CostEstimate:
    cluster = resolve_cluster(scenario.cluster)
    ranks = spec.gpus or cluster.servers * resolve_server(cluster.server).gpus
    n_steps = steps if steps is not None else spec.steps
    if spec.mode == "inference":  # closed form per batch: per-rank arrays only
        return CostEstimate({"ranks": ranks, "steps": n_steps}, BASE_BYTES + 64.0 * ranks * n_steps, "workload.steps")
    micro_batches, chunks = _training_counts(spec, ranks)
    counts = {"ranks": ranks, "micro-batches": micro_batches, "chunks": chunks, "steps": n_steps}
    field = "workload.parallel.global_batch" if micro_batches * chunks >= n_steps else "workload.steps or `steps`"
    return CostEstimate(counts, BASE_BYTES + float(TASK_BYTES) * math.prod(counts.values()), field)


def _pattern_flows(kind: str, count: int | None, gpus: int, per_server: int) -> int:
    if kind == "all-to-all":
        return gpus * max(gpus - per_server, 0)
    if kind in ("leaf-to-leaf", "incast") and count is not None:
        return count
    return gpus


def _traffic_estimate(scenario: Scenario, engine: str) -> CostEstimate:
    cluster = resolve_cluster(scenario.cluster)
    per_server = resolve_server(cluster.server).gpus
    gpus = cluster.servers * per_server
    flows = len(scenario.traffic.flows)
    sent = sum(f.size for f in scenario.traffic.flows)
    for p in scenario.traffic.patterns:
        n = _pattern_flows(p.kind, p.count, gpus, per_server)
        flows += n
        sent += n * p.size
    cases = 1 + len(scenario.variants)
    counts = {"flows": flows, "cases": cases}
    if engine == "packet":
        counts["packets"] = int(min(sent / PACKET_BYTES, 2**62))
    per_case = float(FLOW_BYTES) * flows + float(FLOW_PAIR_BYTES) * flows * flows
    return CostEstimate(counts, BASE_BYTES + per_case * cases, "traffic (patterns: servers or size; flows)")


def _jobs_estimate(scenario: Scenario, steps: int | None) -> CostEstimate:
    """Several jobs on one fabric (:func:`gpuwait.runner.jobs.run_jobs`): each job's step alone, its program's
    segments with a load per link, and the shared run's record of every segment of ``steps`` steps."""
    from gpuwait.runner.jobs import job_servers_needed

    cluster = resolve_cluster(scenario.cluster)
    per_server = resolve_server(cluster.server).gpus
    n_steps = steps if steps is not None else max(j.workload.steps for j in scenario.jobs)
    cells = segments = 0
    for job in scenario.jobs:
        ranks = job_servers_needed(job, per_server)[1]
        micro_batches, chunks = _training_counts(job.workload, ranks)
        cells += ranks * micro_batches * chunks
        par = job.workload.parallel
        per_micro_batch = par.pp > 1 or par.ep > 1 or par.cp > 1 or par.zero == 3 or par.tp > per_server
        segments += SEGMENTS_PER_MICRO_BATCH * micro_batches * chunks if per_micro_batch else SEGMENTS_PER_STEP
    links = LINKS_PER_GPU * cluster.servers * per_server
    parts = {"jobs[].workload.parallel.global_batch": float(TASK_BYTES) * cells,
             "cluster.servers or jobs[].workload.parallel.global_batch": 8.0 * segments * links,
             "`steps` or jobs[].workload.steps": float(SEGMENT_BYTES) * segments * n_steps}
    counts = {"jobs": len(scenario.jobs), "rank x micro-batch x chunk cells": cells, "segments per step": segments,
              "steps": n_steps}
    return CostEstimate(counts, BASE_BYTES + sum(parts.values()), max(parts, key=parts.__getitem__), joiner=", ")


def estimate_scenario(scenario: Scenario, steps: int | None = None, engine: str = "flow") -> CostEstimate:
    """What running ``scenario`` allocates: a workload's steps, several jobs' steps, or its traffic on ``engine``."""
    if scenario.workload is not None:
        return _workload_estimate(scenario, scenario.workload, steps)
    if scenario.jobs:
        return _jobs_estimate(scenario, steps)
    return _traffic_estimate(scenario, engine)


def parse_max_memory(text: str | None) -> float | None:
    """``max_memory`` (``--max-memory``) in bytes: a size such as ``16GiB``, or None when not given (the
    default limit applies: :func:`gpuwait.fabric.memory.memory_limit`). The one parse: a caller passes the
    bytes on, to this module's checks and to the run (whose all-to-alls listed flow by flow are held to it)."""
    if text is None:
        return None
    try:
        return parse_size_bytes(text, allow_zero=False)
    except UnitError as err:
        raise SpecError(f"max_memory: {str(err).split(': ', 1)[-1]}", hint="e.g. max_memory='16GiB'") from None


def check_cost(estimate: CostEstimate, max_memory_bytes: float | None = None) -> CostEstimate:
    """``estimate``, or a :class:`SpecError` naming it, the limit and the field to change when it is over.

    The limit is named as the caller's argument (`` `max_memory` ``; the command line renames it
    ``--max-memory``): a Python traceback shows the message, not the hint."""
    limit = memory_limit(max_memory_bytes)[0]
    if estimate.bytes > limit:
        raise SpecError(f"the run would allocate {estimate.describe()}, over the limit of {format_size(limit)} "
                        f"(`max_memory`); expected less (change {estimate.field})",
                        hint="raise the limit (e.g. max_memory='64GiB') if the machine has it")
    return estimate


def check_scenario_cost(scenario: Scenario, max_memory_bytes: float | None = None, steps: int | None = None,
                        engine: str = "flow") -> CostEstimate:
    """What running ``scenario`` allocates, checked against ``max_memory_bytes`` before anything is built.

    The one guard of every command and :mod:`gpuwait.api` function that simulates a scenario: the
    estimate (:func:`estimate_scenario`) against the limit (``max_memory`` as :func:`parse_max_memory` read
    it, default half the machine's memory), refused with one :class:`SpecError` line by :func:`check_cost`.

    Parameters
    ----------
    scenario : Scenario
        The loaded scenario.
    max_memory_bytes : float, optional
        The limit in bytes (:func:`parse_max_memory` of ``max_memory``); default half the machine's memory.
    steps : int, optional
        A workload's steps, when they override the scenario's.
    engine : {"flow", "packet"}
        The engine a traffic scenario runs on (the packet engine also states its packet count).

    Returns
    -------
    CostEstimate
        The estimate, when it is within the limit.

    Raises
    ------
    SpecError
        Over the limit (naming the estimate, the limit and the field to change).

    Examples
    --------
    >>> from gpuwait.spec import validate_data
    >>> doc = {"name": "doc", "cluster": {"preset": "dgx-h100", "servers": 2},
    ...        "traffic": {"patterns": [{"kind": "permutation", "size": "1MiB"}]}}
    >>> scenario = validate_data(Scenario, doc, source="doc", require_units=False)
    >>> check_scenario_cost(scenario).counts
    {'flows': 16, 'cases': 1}
    >>> check_scenario_cost(scenario, max_memory_bytes=parse_max_memory("1MB"))
    Traceback (most recent call last):
    ...
    gpuwait.errors.SpecError: the run would allocate 16 flows x 1 cases; about 209.7MB, over the limit of 1MB (`max_memory`); expected less (change traffic (patterns: servers or size; flows))
    """
    return check_cost(estimate_scenario(scenario, steps, engine), max_memory_bytes)


def _topology_bytes(topo) -> int:
    """The topology's arrays, already built when a collective's estimate is made."""
    import numpy as np

    return sum(v.nbytes for v in vars(topo).values() if isinstance(v, np.ndarray))


def estimate_perf(predictor, op: str, sizes: list[int]) -> CostEstimate:
    """What ``gpuwait perf`` allocates to predict ``op`` at ``sizes`` (bytes) with ``predictor``, before any
    fabric run: every distinct fabric run NCCL's choices need (:meth:`CollectivePredictor.fabric_key`) is
    counted phase by phase (:mod:`gpuwait.fabric.memory`). The predictor keeps each run it solved, so the
    runs' held bytes add up, and the largest run's working set comes on top once."""
    from gpuwait.fabric.memory import WALK_ALLOWANCE_BYTES, run_bytes

    keys = list(dict.fromkeys(k for k in (predictor.fabric_key(op, s) for s in sizes) if k is not None))
    held_bytes, working_bytes, rows, entries, cells = 0.0, 0.0, 0, 0, 0
    # a run's routes do not depend on the protocol (only its capacities do): counted once, though each run holds its own
    by_routes: dict = {}
    for key in keys:
        collective, algorithm, _, n_channels = key
        if (collective, algorithm, n_channels) not in by_routes:
            by_routes[collective, algorithm, n_channels] = predictor.fabric_counts(key)
        counts = by_routes[collective, algorithm, n_channels]
        peak, held = run_bytes(counts)
        held_bytes += held
        working_bytes = max(working_bytes, peak - held)
        rows, entries = rows + sum(c.rows for c in counts), entries + sum(c.entries + c.class_entries for c in counts)
        cells += sum(c.cells for c in counts)
    topo = predictor.comm.topo
    counts = {"GPUs": predictor.comm.n_ranks, "links": topo.n_links, "fabric runs": len(keys), "route rows": rows,
              "link entries": entries}
    if cells:
        counts["all-to-all member cells"] = cells
    total = BASE_BYTES + _topology_bytes(topo) + held_bytes + working_bytes + (WALK_ALLOWANCE_BYTES if keys else 0)
    # the caller's argument names in backquotes: the command line names its options (cli.common.options_named)
    return CostEstimate(counts, total, "`servers`, or fewer algorithms: NCCL_ALGO in `env` or a narrower `sizes` range",
                        joiner=", ")
