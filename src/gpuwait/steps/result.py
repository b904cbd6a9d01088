"""What a training or inference run returns: per-task records, the step-time breakdown, collective
and link statistics. Plain data (numpy columns and floats) so reports, exporters and the diagnosis
layer read it without knowing how it was produced; nothing here computes the model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

#: Where a GPU's step time goes. Every second of a step on a GPU falls in exactly one category, so
#: per GPU they add up to the step time.
BREAKDOWN_CATEGORIES: tuple[str, ...] = (
    "compute",         # kernels running (forward, backward, optimizer)
    "exposed_comm",    # communication not hidden under compute
    "data_wait",       # waiting on the data loader (CPU) or on storage reads
    "straggler_wait",  # ready for a collective, waiting for the slowest member of its group
    "bubble",          # pipeline bubble: the stage has no micro-batch to work on
    "checkpoint",      # blocked writing a checkpoint
)

#: Values of ``TaskTable.kind``.
TASK_KINDS: tuple[str, ...] = ("compute", "comm", "data_wait", "straggler_wait", "bubble", "checkpoint")


@dataclass(frozen=True, eq=False)
class TaskTable:
    """Every task of every GPU in a run, one row each (columns of equal length).

    ``kind`` is one of :data:`TASK_KINDS`; ``name`` is readable (``"fwd mb3"``, ``"dp all_reduce
    bucket 2"``); ``group`` the parallel group the task belongs to (``"tp"``, ``"pp"``, ``"dp"``,
    ``"ep"``, ``"expert_dp"``, ``"storage"``, ``""`` for compute). ``exposed_s`` is the part of a communication task
    no compute hides (equal to ``end_s - start_s`` for other kinds).
    """

    rank: np.ndarray      # int32, GPU rank in the job
    step: np.ndarray      # int32, 0-based step number
    kind: np.ndarray      # str
    name: np.ndarray      # str
    group: np.ndarray     # str
    start_s: np.ndarray   # float64, from the start of the run
    end_s: np.ndarray     # float64
    exposed_s: np.ndarray  # float64

    def __len__(self) -> int:
        return len(self.rank)

    def columns(self) -> dict[str, np.ndarray]:
        return {"rank": self.rank, "step": self.step, "kind": self.kind, "name": self.name, "group": self.group,
                "start_s": self.start_s, "end_s": self.end_s, "exposed_s": self.exposed_s}


@dataclass(frozen=True, eq=False)
class StepBreakdown:
    """Where the time of one (mean) step goes, per GPU and for the job.

    ``per_gpu_s[category]`` is an array over GPU ranks, seconds per step, for every category of
    :data:`BREAKDOWN_CATEGORIES`; per rank they sum to ``step_time_s``. ``exposed_comm_s`` splits the
    job's mean exposed communication by ``"group collective"`` (``"dp all_reduce"``, ``"tp
    all_reduce"``, ``"pp sendrecv"``). ``ideal_step_time_s`` is the same step on a network with
    infinite bandwidth and zero latency, so ``network_cost_s`` is what the network costs.
    """

    step_time_s: float
    per_gpu_s: dict[str, np.ndarray]
    exposed_comm_s: dict[str, float]
    ideal_step_time_s: float
    mfu: float
    model_flops_per_step: float
    tokens_per_step: int

    @property
    def n_gpus(self) -> int:
        return len(next(iter(self.per_gpu_s.values())))

    def job_mean_s(self) -> dict[str, float]:
        """Mean over GPUs of each category, seconds per step."""
        return {c: float(np.mean(v)) for c, v in self.per_gpu_s.items()}

    @property
    def wait_fraction(self) -> float:
        """Fraction of the step the GPUs (on average) are not computing."""
        return 1.0 - float(np.mean(self.per_gpu_s["compute"])) / self.step_time_s if self.step_time_s > 0 else 0.0

    @property
    def network_cost_s(self) -> float:
        return self.step_time_s - self.ideal_step_time_s


@dataclass(frozen=True)
class CollectiveStat:
    """One kind of collective in the step, as nccl-tests would report it for one group."""

    label: str            # "dp all_reduce bucket"
    group: str            # "dp"
    collective: str       # "all_reduce"
    n_ranks: int
    size_bytes: float
    count_per_step: int   # how many times a group runs it per step
    time_s: float         # one call, with the step's concurrent traffic on the fabric
    algbw_GBps: float
    busbw_GBps: float
    algorithm: str
    protocol: str


@dataclass(frozen=True, eq=False)
class LinkStats:
    """Per-link load over the step (all links of the topology, indexed by link id).

    ``tier`` is a short label for the heatmap rows (``"nvlink"``, ``"pcie"``, ``"host-leaf"``,
    ``"leaf-spine"``, ``"spine-core"``, ``"storage"``); ``users[link]`` names the communication
    sharing a link (``"dp all_reduce"``, ``"storage read"``), filled for the hottest and costliest
    links only. ``capacity_Bps`` is each link's effective capacity (after faults; None when unknown),
    from which :meth:`busy_s` and :meth:`waiting_s` follow.
    ``phase_bytes[label]`` is what each link carries per step during one communication's calls
    (the collective's phase, labelled as in ``RunResult.collectives``): within a phase, equal-cost
    links carrying unequal bytes is a hash collision even where the step's totals even out.
    """

    name: list[str]
    tier: np.ndarray          # str per link
    utilization: np.ndarray   # peak: share of the line rate while the link's busiest communication runs, 0..1
    bytes_per_step: np.ndarray
    users: dict[int, list[str]] = field(default_factory=dict)
    capacity_Bps: np.ndarray | None = None
    phase_bytes: dict[str, np.ndarray] = field(default_factory=dict)

    def busy_s(self) -> np.ndarray:
        """Seconds per step each link spends sending: its bytes per step over its capacity (0 without one)."""
        if self.capacity_Bps is None:
            return np.zeros(len(self.name))
        cap = np.asarray(self.capacity_Bps, dtype=float)
        return np.divide(self.bytes_per_step, cap, out=np.zeros(len(cap)), where=cap > 0)

    def waiting_s(self) -> np.ndarray:
        """Seconds per step the bytes on each link wait behind it beyond a balanced fabric: its busy time
        minus its tier's (the tier's bytes over the tier's capacity, the busy time every link of the
        tier would have if routing spread the bytes in proportion to capacity, as ideal adaptive
        routing tends to). In a fluid model a link carrying ``B`` bytes at ``C`` B/s keeps its last
        byte ``B/C`` after its first, so the excess over the balanced ``sum(B)/sum(C)`` is the time its
        imbalance (an ECMP collision, a link degraded to a quarter of its rate) adds to every
        communication through it: the step time it costs when that communication is on the critical
        path, an upper bound when compute hides it. A tier whose links are evenly loaded costs 0
        however busy, since no routing could do better with those links."""
        busy = self.busy_s()
        out = np.zeros(len(busy))
        if self.capacity_Bps is None:
            return out
        cap = np.asarray(self.capacity_Bps, dtype=float)
        for tier in np.unique(self.tier):
            mine = (self.tier == tier) & (cap > 0)
            if mine.any():
                balanced_s = float(self.bytes_per_step[mine].sum() / cap[mine].sum())
                excess_s = busy[mine] - balanced_s
                # below a billionth of the balanced time is the rounding of the sums, not a wait
                out[mine] = np.where(excess_s > 1e-9 * balanced_s, excess_s, 0.0)
        return out

    def costliest(self, n: int = 10, network_only: bool = True) -> np.ndarray:
        """Link ids ranked by the time they cost the job (:meth:`waiting_s`), then by busy time, then
        by name in natural order (ties are common: ECMP loads whole sets of uplinks alike); links that carry nothing
        are left out. Without capacities, :meth:`hottest`."""
        if self.capacity_Bps is None:
            return self.hottest(n, network_only)
        waiting, busy = np.round(self.waiting_s(), 12), np.round(self.busy_s(), 12)
        keep = self.bytes_per_step > 0
        if network_only:
            keep &= ~np.isin(self.tier, ("nvlink", "pcie"))
        ids = np.flatnonzero(keep)
        # names in natural order (spine2 before spine10), as the operator reads them
        natural = sorted(range(len(ids)), key=lambda k: [int(p) if p.isdigit() else p
                                                         for p in re.split(r"(\d+)", self.name[ids[k]])])
        name_rank = np.empty(len(ids), dtype=int)
        name_rank[natural] = np.arange(len(ids))
        order = np.lexsort((name_rank, -busy[ids], -waiting[ids]))
        return ids[order][:n]

    def hottest(self, n: int = 10, network_only: bool = True) -> np.ndarray:
        """Link ids, busiest first. Among equally busy links the ones deeper in the fabric come first
        (a saturated spine uplink says more than a saturated NIC port), then the most bytes, then id."""
        util = self.utilization.copy()
        if network_only:
            util[np.isin(self.tier, ("nvlink", "pcie"))] = -1.0
        depth = np.select([self.tier == "spine-core", self.tier == "leaf-spine", self.tier == "storage"], [3, 2, 1], 0)
        order = np.lexsort((np.arange(len(util)), -self.bytes_per_step, -depth, -np.round(util, 6)))
        return order[: n][util[order[: n]] > 0]


@dataclass(frozen=True, eq=False)
class RunResult:
    """One case of a run (one cluster and routing) of a workload over ``steps`` steps."""

    case: str                 # "RoCEv2, ECMP" / "InfiniBand, adaptive routing" / a variant name
    workload: str             # readable description: "llama-70b, TP8 PP4 DP16, 512 GPUs"
    cluster: str              # preset or file name plus fabric summary
    steps: int
    breakdown: StepBreakdown
    collectives: tuple[CollectiveStat, ...]
    links: LinkStats
    tasks: TaskTable
    step_times_s: np.ndarray  # one per step
    notes: tuple[str, ...] = ()
    gpus_per_server: int = 8  # to lay GPUs out by server in timelines
    # inference only: ttft_s, tpot_s, tokens_per_s and each one's ideal-network value (ideal_ttft_s...); tpot_s and
    # ideal_tpot_s are None, with the reason in tpot_undefined, when one output token leaves no decode step
    serving: dict | None = None
    # what of the run ``tasks`` holds when not all of it, in words ("the prefill and the first 64 of 255 decode
    # passes"); "" when it holds every task. Timelines drawn from the tasks say it.
    tasks_cover: str = ""
    # training: the steps whose every task ``tasks`` holds when it stops before the run does (max_tasks rows;
    # its last step may be cut short there); None when it holds every task
    tasks_whole_steps: int | None = None

    def tasks_cover_text(self) -> str:
        """The clause a timeline or trace drawn from ``tasks`` appends when they stop before the run does
        ("; it shows the prefill and the first 64 of 255 decode passes: the first 5,975 ms of the run's
        10,553 ms"), so it is not read as the whole run; "" when they hold every task."""
        if not self.tasks_cover or not len(self.tasks):
            return ""
        shown_ms, run_ms = float(self.tasks.end_s.max()) * 1e3, float(np.sum(self.step_times_s)) * 1e3
        return f"; it shows {self.tasks_cover}: the first {shown_ms:,.0f} ms of the run's {run_ms:,.0f} ms"
