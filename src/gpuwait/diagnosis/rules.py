"""Rules: one per cause, each with its fix. A rule weighs the evidence an engineer would weigh and
proposes a finding with a score (how sure, 0..1), the component, the numbers behind it, an
explanation and a fix in words; the rule registers its fix in machine form too (:class:`Fix`), so
re-simulating a finding runs the fix its rule declared and no other. Rules see only an
:class:`~gpuwait.diagnosis.observe.Observation`; a rule whose series are missing returns nothing and
names what it lacked. Adding a rule is one registration here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from gpuwait.diagnosis.observe import Observation
from gpuwait.faults.apply import LOSS_RTT_S
from gpuwait.faults.kinds import PCIE_LANE_Bps
from gpuwait.spec.cluster import RoutingSpec
from gpuwait.spec.faults import FaultSpec
from gpuwait.spec.scenario import Scenario
from gpuwait.topology.model import LinkKind, Network, NodeKind, Topology
from gpuwait.topology.presets import build_cluster, resolve_cluster
from gpuwait.transport import resolve_transport
from gpuwait.transport.socket import socket_transport

#: A cause is worth naming when it costs at least 1 % of the step: the smallest loss issue 14's
#: scoring rule asks to be found, and about what a week of a 1,000-GPU job's run-to-run variation
#: hides (MLPerf Training asks for repeated runs because single runs differ by a few percent).
#: Every rule below estimates the time its cause costs from the evidence (``lost_s``) and names
#: it only past this share; no rule has a utilization threshold of its own.
MATTERS = 0.01
#: A GPU is an outlier when its compute is this many robust standard deviations (1.4826 x the
#: median absolute deviation, the normal-consistent estimator) above the median of its peers: with
#: 64 GPUs the largest of normal jitter lies about 2.4 sigma out, so 4 sigma is not jitter.
OUTLIER_SIGMAS = 4.0
#: A port below this share of its nominal rate has lost lanes or speed: InfiniBand and Ethernet
#: ports negotiate in discrete steps (4X -> 2X / 1X width, NDR -> HDR speed), so a port either runs
#: at its nominal rate or at half of it or less; 90 % separates the two with room for rounding.
RATE_DOWNSHIFT = 0.9
#: A difference between two noisy readings counts as time lost only beyond this many standard
#: deviations of its noise (:func:`_held_up_s`): 3 leaves 1 in 740 of the differences noise alone
#: makes (one-sided normal tail), where 1 % telemetry noise otherwise rated a 0.8 % cost a warning.
NOISE_SIGMAS = 3.0
#: Another job's load on a link the job uses; any measured foreign traffic counts once its cost
#: (the share of the link it takes, over the job's exposed communication) passes MATTERS.
FOREIGN_SHARE = 0.05
#: An uplink is idle beside a collided sibling when it carries less than half of the average
#: uplink's bytes: with equal flows over k uplinks, one collision (two flows on one uplink) leaves a
#: sibling with none, so half the mean separates "one flow fewer" from "balanced".
IDLE_SIBLING = 0.5


class Lost(float):
    """Seconds a cause costs per step as its rule estimates them from noisy readings, with the range
    the readings' noise leaves (``low_s`` .. ``high_s``, NOISE_SIGMAS standard deviations of the
    estimate either side, the point clipped into it). A float, so rules compare, rank and pick it as
    any estimate; the range rides along where a rule picks one estimate among several (max, min).
    Telemetry-only severity reads ``low_s``: a warning says the cause costs MATTERS of the step at
    least, given what the readings resolve (run.diagnose_observation)."""

    low_s: float
    high_s: float

    def __new__(cls, value_s: float, low_s: float | None = None, high_s: float | None = None):
        lost = super().__new__(cls, value_s)
        lost.low_s = float(value_s) if low_s is None else min(float(low_s), float(value_s))
        lost.high_s = float(value_s) if high_s is None else max(float(high_s), float(value_s))
        return lost


def lost_range_s(lost_s: float, noise: float) -> tuple[float, float]:
    """The range of an estimated cost: a :class:`Lost`'s own, else (a time read directly, such as a
    wait phase) NOISE_SIGMAS of its reading's relative ``noise`` either side."""
    if isinstance(lost_s, Lost):
        return lost_s.low_s, lost_s.high_s
    return max(lost_s * (1.0 - NOISE_SIGMAS * noise), 0.0), lost_s * (1.0 + NOISE_SIGMAS * noise)


@dataclass(frozen=True)
class Candidate:
    kind: str                         # the rule that proposed it (a key of RULES)
    component: str
    score: float                      # how sure, 0..1
    evidence: dict[str, float | str]
    explanation: str
    fix: str                          # what to do, in words; the machine form is RULES[kind].fix
    direct: bool = False              # seen in an error counter, a port state or a transport line, not inferred
    lost_s: float | None = None       # the step time the cause costs, estimated from the evidence alone
    # lost_s is only the most the cause can cost: its counters give no duration (a link-down count),
    # so from the evidence alone it is ranked by that bound but rated info (run.diagnose_observation)
    bound_only: bool = False

    def __post_init__(self) -> None:
        if self.kind not in RULES:  # its fix is its rule's: a kind without a rule would carry none
            raise ValueError(f"candidate kind {self.kind!r}: no such rule; expected one of {', '.join(RULES)}")


@dataclass
class RuleOutput:
    candidates: list[Candidate] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


#: a fix on a scenario: (scenario, its faults, the finding's component) -> the scenario and faults with it applied
ScenarioFix = Callable[[Scenario, list[FaultSpec], str], tuple[Scenario, list[FaultSpec]]]


@dataclass(frozen=True)
class Fix:
    """A rule's fix in machine form: how the scenario changes (``scenario``), and, when the fix is a
    routing change alone, the same change on a routing (``routing``; a packet run reruns with it)."""

    scenario: ScenarioFix
    routing: Callable[[RoutingSpec], RoutingSpec] | None = None


@dataclass(frozen=True)
class Rule:
    name: str
    check: Callable[[Observation, RuleOutput], None]
    fix: Fix


RULES: dict[str, Rule] = {}


def rule(name: str, fix: Fix):
    """Register the decorated check as rule ``name`` (the kind of the candidates it proposes) with its fix."""
    def wrap(fn):
        RULES[name] = Rule(name, fn, fix)
        return fn
    return wrap


def same_cable(a: str, b: str) -> bool:
    """Whether two link names are one cable (either direction; ``#k`` parallel cables alike), or the same name.

    >>> same_cable("leaf0->spine3", "spine3->leaf0#1"), same_cable("leaf0->spine3", "leaf0->spine2")
    (True, False)
    """
    if a == b:
        return True
    sa, _, da = a.partition("->")
    sb, arrow, db = b.partition("->")
    return bool(arrow) and sa == db.split("#")[0] and da.split("#")[0] == sb


def _drop(faults: Sequence[FaultSpec], kinds: tuple[str, ...], target: str | None = None) -> list[FaultSpec]:
    """``faults`` without those of ``kinds`` (on ``target`` or its cable, when given)."""
    return [f for f in faults if not (f.kind in kinds and (target is None or f.target == target
                                                           or same_cable(f.target, target)))]


def _dropping(*kinds: str, on_component: bool = False) -> Fix:
    """The fix that removes the faults of ``kinds`` (those on the finding's component only, when asked)."""
    def scenario_fix(scenario: Scenario, faults: list[FaultSpec], component: str) -> tuple[Scenario, list[FaultSpec]]:
        return scenario, _drop(faults, kinds, component if on_component else None)
    return Fix(scenario_fix)


def _cable_name(obs: Observation, link: int | np.integer) -> str:
    return obs.topo.link_name(int(link))


_Series = TypeVar("_Series")


def _checked(series: _Series | None, what: str) -> _Series:
    """A series of the observation that the rule reaching this helper checked first (a rule whose
    series are missing returns before its helpers read them)."""
    if series is None:
        raise ValueError(f"Observation.{what} is None in a helper of a rule that checked it; expected the rule "
                         "to return when it is missing")
    return series


def _step(obs: Observation) -> float:
    return obs.step_time_s or 1.0


def _heal_gpu(scenario: Scenario, faults: list[FaultSpec], gpu: str) -> tuple[Scenario, list[FaultSpec]]:
    """The GPU computes at the speed of the others: its slow-gpu fault and its slow entry go."""
    workload = scenario.workload
    if workload is not None and workload.compute.slow_gpus:
        topo = build_cluster(resolve_cluster(scenario.cluster))
        rank = int((topo.gpu_node.ravel() == topo.node_id(gpu)).nonzero()[0][0])
        kept = [s for s in workload.compute.slow_gpus if s.rank != rank]
        workload = workload.model_copy(update={"compute": workload.compute.model_copy(update={"slow_gpus": kept})})
        scenario = scenario.model_copy(update={"workload": workload})
    return scenario, _drop(faults, ("slow-gpu", "gpu-throttle", "pcie-downtrained"), gpu)


def _exposed_comm_s(obs: Observation) -> float:
    """Mean communication per GPU not hidden under compute: the most any network fix can give back."""
    if obs.per_gpu_s is None or "exposed_comm" not in obs.per_gpu_s:
        return _step(obs)
    return float(np.mean(obs.per_gpu_s["exposed_comm"]))


def _matters(obs: Observation, lost_s: float) -> bool:
    return lost_s >= MATTERS * _step(obs)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.0f} ms" if seconds >= 0.01 else f"{seconds * 1e3:.2f} ms"


def _role_ratio(obs: Observation, compute: np.ndarray) -> np.ndarray:
    """Each GPU's compute over the median of its peers in the same role: the GPUs of its server.

    In 3D parallelism the GPUs of one pipeline stage do the same work and those of different stages
    do not (the first holds the embedding, the last the loss, layers split unevenly), so a job-wide
    median and spread mix the stages' difference into the jitter. Tensor-parallel groups sit inside
    a server's NVLink domain (Megatron-LM's placement: TP innermost, on one node), so a server's GPUs
    hold one stage and one TP group's shards; in data parallelism every GPU is alike anyway. A
    server with fewer than 3 GPUs is compared with the job's median instead.

    Each GPU is compared with the median of the *other* GPUs of its server: against a median it
    takes part in, the two middle GPUs of a group of 8 sit at 1.0 by construction, which shrank the
    spread (the median absolute deviation) the outlier test divides by, and jitter passed for a
    slow GPU (a 3 % draw read as 4.6 sigmas)."""
    job = float(np.median(compute))
    if obs.gpu_names is None or len(obs.gpu_names) != len(compute):
        return compute / job if job > 0 else np.ones_like(compute)
    servers = np.array([int(obs.topo.node_server[obs.topo.node_id(n)]) for n in obs.gpu_names])
    peers = np.full(len(compute), job)
    for server in np.unique(servers):
        mine = np.flatnonzero(servers == server)
        if len(mine) >= 3:
            for i in mine:
                peers[i] = float(np.median(compute[mine[mine != i]]))
    return np.divide(compute, peers, out=np.ones_like(compute), where=peers > 0)


def _compute_lost_s(obs: Observation, own_s: float, slowest_other_s: float) -> float:
    """The time the other GPUs wait for one: its compute beyond the slowest other GPU's, with the
    range two compute readings of relative noise ``reading_noise`` leave (:class:`Lost`)."""
    lost = own_s - slowest_other_s
    if obs.reading_noise <= 0:
        return lost
    sd = obs.reading_noise * float(np.hypot(own_s, slowest_other_s))
    return Lost(lost, max(lost - NOISE_SIGMAS * sd, 0.0), lost + NOISE_SIGMAS * sd)


@rule("slow-gpu", Fix(_heal_gpu))
def slow_gpu(obs: Observation, out: RuleOutput) -> None:
    """One GPU computes longer than its peers in the same role (:func:`_role_ratio`) every step,
    and the others wait for it at each collective (synchronous training runs at the pace of its
    slowest rank). An outlier is OUTLIER_SIGMAS robust deviations above its peers, the deviation
    measured on every GPU's ratio to its own peers (so a pipeline's stages do not count as jitter).
    Its cost is the time the others wait for it: what it computes beyond the slowest other GPU of
    the job, which is what the step would shrink by if it computed like its peers (a GPU of a light
    pipeline stage that stays under the heaviest stage's compute costs nothing)."""
    if obs.per_gpu_s is None or obs.gpu_names is None:  # a finding names its GPU: phases without names name none
        out.missing.append("per-GPU compute time (DCGM_FI_PROF_SM_ACTIVE / DCGM_FI_DEV_GPU_UTIL or step markers)")
        return
    compute = obs.per_gpu_s["compute"]
    if len(compute) < 3:
        return
    ratio = _role_ratio(obs, compute)
    worst = int(np.argmax(ratio))
    others = np.delete(ratio, worst)
    sigma = 1.4826 * float(np.median(np.abs(others - np.median(others))))
    excess = float(ratio[worst] - np.median(others))
    lost = _compute_lost_s(obs, float(compute[worst]), float(np.delete(compute, worst).max()))
    if excess <= OUTLIER_SIGMAS * sigma or not _matters(obs, lost):
        return
    name = obs.gpu_names[worst]
    peers_s = float(compute[worst] / ratio[worst])
    # peers reading alike (DCGM_FI_DEV_GPU_UTIL's whole percents) have no spread to count in: the
    # ratio to a 1e-12 floor read "333333333333 times the spread"
    sigmas: float | str = round(excess / sigma, 1) if sigma > 0 else "peers alike"
    spread = f"{excess / sigma:.0f} times the spread of GPUs around their peers" if sigma > 0 else "its peers all alike"
    out.candidates.append(Candidate(
        "slow-gpu", name, min(1.0, excess / max(8 * sigma, 1e-12)),
        {"own_compute_ms": round(float(compute[worst]) * 1e3, 2), "peers_median_compute_ms": round(peers_s * 1e3, 2),
         "sigmas_above_peers": sigmas, "lost_ms": round(lost * 1e3, 2)},
        f"{name} computes {_ms(float(compute[worst]))} per step against a median of {_ms(peers_s)} for the GPUs of its "
        f"server ({100 * excess:.1f} % longer, {spread}); the other GPUs wait about {_ms(lost)} per step for it at "
        "their collectives.",
        f"drain {name} and read its clocks and throttle reasons (DCGM_FI_DEV_CLOCK_THROTTLE_REASONS, "
        "nvidia-smi -q -d PERFORMANCE: thermal or power capping), temperature and ECC errors; replace it if it stays slow",
        lost_s=lost))


#: NVML's clock throttle (clock event) reasons that slow a busy GPU, by bit: what
#: DCGM_FI_DEV_CLOCK_THROTTLE_REASONS carries (NVML API reference, "nvmlClocksThrottleReasons",
#: https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksThrottleReasons.html). Idle (0x1),
#: application clocks (0x2), sync boost (0x10) and display (0x100) are settings, not faults.
THROTTLE_REASONS = {0x4: "software power cap", 0x8: "hardware slowdown (thermal or power)",
                    0x20: "software thermal slowdown", 0x40: "hardware thermal slowdown",
                    0x80: "hardware power brake"}


def _throttle_words(bits: int) -> str:
    return ", ".join(word for bit, word in THROTTLE_REASONS.items() if bits & bit)


def _excess_over_peers_s(obs: Observation, gpu: int, peers: set[int]) -> float | None:
    """How much longer GPU node ``gpu`` computes per step than the median of ``peers`` (None: no phases)."""
    if obs.per_gpu_s is None or obs.gpu_names is None:
        return None
    compute = obs.per_gpu_s["compute"]
    ids = [obs.topo.node_id(name) for name in obs.gpu_names]
    others = [compute[i] for i, g in enumerate(ids) if g in peers]
    if gpu not in ids or not others:
        return None
    return max(float(compute[ids.index(gpu)]) - float(np.median(others)), 0.0)


@rule("gpu-throttle", Fix(_heal_gpu))
def gpu_throttle(obs: Observation, out: RuleOutput) -> None:
    """A GPU's clocks are held down by a thermal or power limit (its throttle reasons say which):
    it computes slower, and synchronous training waits for it at every collective. Its cost is the
    time it computes beyond the median of the unthrottled GPUs (what the others wait); GPUs all
    throttled alike leave no peer to compare with and are named only as unmeasured (info)."""
    if obs.gpu_throttle is None:
        out.missing.append("GPU clock throttle reasons (DCGM_FI_DEV_CLOCK_THROTTLE_REASONS)")
        return
    mask = sum(THROTTLE_REASONS)
    throttled = {g: bits for g, bits in obs.gpu_throttle.items() if bits & mask}
    if not throttled:
        return
    peers = set(obs.gpu_throttle) - set(throttled)
    costs = {g: _excess_over_peers_s(obs, g, peers) for g in throttled}
    worst = max(throttled, key=lambda g: costs[g] or 0.0)
    lost = costs[worst]
    if lost is not None and not _matters(obs, lost):
        return
    name = obs.topo.node_name[worst]
    words = _throttle_words(throttled[worst])
    cost = f"; it computes {_ms(lost)} per step longer than its unthrottled peers, and they wait for it" if lost else ""
    out.candidates.append(Candidate(
        "gpu-throttle", name, 0.95,
        {"throttle_reasons": words, "throttled_gpus": len(throttled),
         "lost_ms": round(lost * 1e3, 2) if lost is not None else "n/a"},
        f"{name}'s clocks are held down ({words}){cost}.",
        f"check {name}'s cooling (inlet temperature, fans, airflow in the rack) and power (power limit, PSU, "
        "power brake signal from the BMC); drain it until it runs at its clocks",
        direct=True, lost_s=lost))


#: PCIe data rate per lane by generation, GB/s: the transfer rate (2.5, 5, 8, 16, 32, 64 GT/s) times
#: the line code (8b/10b for generations 1-2, 128b/130b for 3-5, 242/256 FLIT for 6), over 8 bits
#: (PCI-SIG, PCI Express Base Specification 6.0, and "PCIe 6.0 specification FAQ", pcisig.com)
PCIE_LANE_GBps = {gen: rate_Bps / 1e9 for gen, rate_Bps in PCIE_LANE_Bps.items()}  # the fault's table, in GB/s


def _pcie_Bps(gen: float, width: float) -> float:
    # a generation and a width are whole numbers: a scrape averaged over a window, or with noise,
    # reads 4.97 for Gen5, which is Gen5 (truncating it made a healthy link a Gen4 one)
    if not (np.isfinite(gen) and np.isfinite(width)) or round(gen) not in PCIE_LANE_GBps:
        return float("nan")
    return PCIE_LANE_GBps[round(gen)] * 1e9 * round(width)


def _nic_link_of_gpu(obs: Observation, gpu: int) -> int | None:
    """The uplink of the NIC GPU node ``gpu`` sends through (its first NIC's first port)."""
    topo = obs.topo
    where = np.argwhere(topo.gpu_node == gpu)
    if not len(where):
        return None
    server, index = (int(v) for v in where[0])
    link = int(topo.nic_uplink[server, int(topo.gpu_nic[index]), 0])
    return link if link >= 0 else None


def _pcie_lost_s(obs: Observation, gpu: int, link: int, pcie_Bps: float) -> float:
    """The step time GPU node ``gpu``'s downtrained PCIe link (``pcie_Bps``) costs: the bytes it
    carries against that rate. GPUDirect RDMA moves the GPU's network bytes over its PCIe link to
    the NIC at ``link``; a NIC shared by several GPUs (two per NIC on a 4-NIC HGX) carries all their
    bytes, of which this GPU's share crosses its link (GPUs of one job move alike). The link holds
    the job up only where its time, ``share / pcie_Bps``, exceeds what the NIC port and the job's
    busiest other port take anyway, and only in the exposed part (:func:`_held_up_s`). Read as the
    whole NIC's bytes at the PCIe rate, it named a GPU whose link, at a third of its NIC's rate,
    carried half the NIC's bytes within the time another port needed."""
    topo = obs.topo
    if obs.link_bytes is None or obs.link_nominal_Bps is None or obs.link_nominal_Bps[link] <= 0:
        nic_Bps = float(topo.link_capacity_Bps[link])
        return _link_lost_s(obs, link, nic_Bps / pcie_Bps) if pcie_Bps < nic_Bps else 0.0
    index = int(np.argwhere(topo.gpu_node == gpu)[0][1])
    sharing = int((topo.gpu_nic == topo.gpu_nic[index]).sum())
    nic_s = float(obs.link_bytes[link]) / float(obs.link_nominal_Bps[link])
    gpu_s = float(obs.link_bytes[link]) / max(sharing, 1) / pcie_Bps
    return _held_up_s(obs, max(nic_s, gpu_s), max(nic_s, _busiest_other_port_s(obs, link)))


@rule("pcie-downtrained", Fix(_heal_gpu))
def pcie_downtrained(obs: Observation, out: RuleOutput) -> None:
    """A GPU's PCIe link trained at a lower generation or fewer lanes than its peers' (a reseated or
    dusty riser, a failing retimer): GPUDirect RDMA moves the GPU's network bytes over that link, so
    when it is slower than the NIC the NIC sends at the link's rate. Links train in discrete steps
    (halving per generation or width), so a link below RATE_DOWNSHIFT of the best peer's has lost
    one. Read while the job runs: an idle GPU lowers its link generation to save power. The cost is
    the NIC's bytes at the PCIe rate instead of the NIC's."""
    if obs.gpu_pcie is None:
        out.missing.append("GPU PCIe link generation and width (DCGM_FI_DEV_PCIE_LINK_GEN / _WIDTH)")
        return
    rates = {g: _pcie_Bps(*gw) for g, gw in obs.gpu_pcie.items()}
    known = [r for r in rates.values() if np.isfinite(r)]
    if len(known) < 2:
        return
    best = max(known)
    for gpu, rate in rates.items():
        if not np.isfinite(rate) or rate >= RATE_DOWNSHIFT * best:
            continue
        link = _nic_link_of_gpu(obs, gpu)
        nic_Bps = float(obs.topo.link_capacity_Bps[link]) if link is not None else 0.0
        lost = _pcie_lost_s(obs, gpu, link, rate) if link is not None else 0.0
        name = obs.topo.node_name[gpu]
        gen, width = (round(v) for v in obs.gpu_pcie[gpu])
        out.candidates.append(Candidate(
            "pcie-downtrained", name, 0.9 if lost > 0 else 0.5,
            {"pcie_link": f"Gen{int(gen)} x{int(width)}", "its_rate": _gbps(rate), "peers_best": _gbps(best),
             "nic_rate": _gbps(nic_Bps) if nic_Bps else "n/a"},
            f"{name}'s PCIe link trained at Gen{int(gen)} x{int(width)} ({_gbps(rate)}) where its peers reach "
            f"{_gbps(best)}" + (f"; its share of its NIC's ({_gbps(nic_Bps)}) traffic crosses it slower than the "
                                f"job's other ports move theirs, about {_ms(lost)} per step" if lost > 0
                                else "; its share of its NIC's traffic crosses it within the time the job's busiest "
                                "port needs anyway, so the network does not wait for it") + ".",
            f"reseat {name} (or its riser / retimer) and check `lspci -vv` LnkSta against LnkCap; "
            "replace the part if it trains low again", direct=True, lost_s=lost))


def _fast_loader(scenario: Scenario, faults: list[FaultSpec], component: str) -> tuple[Scenario, list[FaultSpec]]:
    """The loaders keep up: no loader limit, no dataloader-starvation fault."""
    if scenario.workload is not None:
        data = scenario.workload.data.model_copy(update={"loader_samples_per_s_per_server": None,
                                                         "loader_samples_per_s_by_server": {}})
        scenario = scenario.model_copy(update={"workload": scenario.workload.model_copy(update={"data": data})})
    return scenario, _drop(faults, ("dataloader-starvation",))


def _data_wait(obs: Observation) -> tuple[float, str]:
    """The data wait a step loses, and where it sits: ``all``, or the one server whose GPUs wait
    while the others do not and some fed server's GPUs wait for it at their collectives.

    The step loses the wait of the GPUs a batch enters (the mean over the GPUs that wait for data at
    all), not the mean over every GPU: in a pipeline the later stages wait the same time in their
    bubble, so the mean over every GPU read pp-fold low (12.7 s against 50.7 s lost on 4 stages).

    Where a job reads its data decides who waits for it: every GPU in data parallelism; in a
    pipeline the first and the last stage (Megatron-LM's get_batch), but loaders equally slow leave
    the last stage no wait of its own (its batch was ready when the first stage took the same
    micro-batch, a forward of each stage earlier) and the stages between wait in their bubble. So
    loaders too slow on every server of a pipeline job leave the first stage's server(s) alone
    waiting for data, and no GPU waiting at a collective. One server's loaders too slow leave its
    GPUs waiting for data while the GPUs that have their batch, on the servers of its data-parallel
    peers, wait for it at their next collective (straggler wait) as long as it waits for data: that,
    not the bubble, names one server. A first (or last) stage on one server whose data-parallel
    peers sit on no other server shows the same either way — for the first stage's server the run
    is the same bit for bit — so it reads ``all``; the fix is the loaders' in both."""
    phases = _checked(obs.per_gpu_s, "per_gpu_s")
    wait = phases["data_wait"]
    waiting = wait[wait > 0]
    mean = float(waiting.mean()) if waiting.size else 0.0
    if obs.gpu_names is None or mean <= 0:
        return mean, "all"
    servers = np.array([int(obs.topo.node_server[obs.topo.node_id(n)]) for n in obs.gpu_names])
    per_server = {int(s): float(wait[servers == s].mean()) for s in np.unique(servers)}
    worst = max(per_server, key=per_server.__getitem__)
    rest = [v for s, v in per_server.items() if s != worst]
    straggler = phases["straggler_wait"]
    fed_wait = max((float(straggler[servers == s].mean()) for s in per_server if s != worst), default=0.0)
    if rest and max(rest) < 0.5 * per_server[worst] and fed_wait >= 0.5 * per_server[worst]:
        return per_server[worst], obs.topo.server_name(int(worst))  # the host by its real name
    return mean, "all"


@rule("dataloader-starvation", Fix(_fast_loader))
def dataloader(obs: Observation, out: RuleOutput) -> None:
    """The GPUs wait for their next batch while no dataset read is on the network: the CPU data
    loaders do not keep up (a producer slower than its consumer: the step is the producer's period).
    The cost is the wait itself."""
    if obs.per_gpu_s is None:
        out.missing.append("data-wait phase per GPU (step markers or PyTorch profiler traces)")
        return
    if obs.storage_read:
        return
    wait, where = _data_wait(obs)
    if not _matters(obs, wait):
        return
    who = "Every GPU" if where == "all" else f"The GPUs of {where}"
    out.candidates.append(Candidate(
        "dataloader-starvation", where, min(1.0, 0.5 + wait / _step(obs) / 0.1),
        {"data_wait_ms": round(wait * 1e3, 2), "share_of_step": round(wait / _step(obs), 3)},
        f"{who} wait{'s' if where == 'all' else ''} {_ms(wait)} per step ({100 * wait / _step(obs):.1f} %) for the next "
        "batch while no dataset read is on the network: the CPU data loaders do not keep up"
        + ("" if where == "all" else ", and every other GPU waits for them at its collectives") + ".",
        ("on " + where + ": " if where != "all" else "") + "raise the data loader's workers or prefetch, move "
        "preprocessing to the GPU, or pre-tokenize the dataset (check the host's CPU load and memory)",
        lost_s=wait))


def _storage_ports_for_reads(scenario: Scenario, rate_per_gpu_Bps: float) -> dict:
    """The storage NICs (count and line rate) a server needs for a separate storage network to carry the
    reads it has: two at least, as many as the readers on the busiest server ask together, and each as
    fast as one reader's ask. Only the data-reading GPUs read (a 3D job's TP rank 0 of its first and
    last stage, :meth:`~gpuwait.workload.layout.Layout.reader_ranks`), sharing the job's total, and one
    reader's stream crosses one port: 4 readers of 32 GPUs asking 10.4 GB/s each through the 6.25 GB/s
    storage NIC of an OCI BM.GPU4.8 made the step 17 % longer than the compute fabric did, and the
    rule's fix read as a loss (dev seed 31,000,021)."""
    workload = scenario.workload
    if workload is None or workload.mode != "training" or rate_per_gpu_Bps <= 0:
        return {"storage_nics": max(scenario.cluster.server.storage_nics, 2)}
    from gpuwait.workload.steps import read_rate_per_reader_Bps, training_step

    topo = build_cluster(resolve_cluster(scenario.cluster))
    server = topo.spec.server  # the server template applied (a preset's names one)
    nics, speed_Bps = max(server.storage_nics, 2), server.storage_nic_speed
    layout = training_step(workload, topo).layout
    per_reader_Bps = read_rate_per_reader_Bps(layout, rate_per_gpu_Bps)
    readers = int(np.bincount(topo.node_server[layout.rank_gpu[layout.reader_ranks()]]).max())
    speed_Bps = max(speed_Bps, per_reader_Bps)
    return {"storage_nics": max(nics, math.ceil(readers * per_reader_Bps / speed_Bps)), "storage_nic_speed": speed_Bps}


def _separate_storage(scenario: Scenario, faults: list[FaultSpec], component: str) -> tuple[Scenario, list[FaultSpec]]:
    """Storage on its own network, its NICs sized for the reads (:func:`_storage_ports_for_reads`),
    reading at the injected rate."""
    rate = next((f.params.read_rate_per_gpu_Bps for f in faults if f.kind == "storage-contention"), None)
    cluster, workload = scenario.cluster, scenario.workload
    storage = cluster.storage.model_copy(update={"mode": "separate"})
    asked = rate if rate is not None else (workload.data.dataset_read_per_gpu if workload is not None else 0.0)
    server = cluster.server.model_copy(update=_storage_ports_for_reads(scenario, asked))
    cluster = cluster.model_copy(update={"storage": storage, "server": server})
    if workload is not None and rate is not None:
        workload = workload.model_copy(update={"data": workload.data.model_copy(update={"dataset_read_per_gpu": rate})})
    return scenario.model_copy(update={"cluster": cluster, "workload": workload}), _drop(faults, ("storage-contention",))


@rule("storage-contention", Fix(_separate_storage))
def storage(obs: Observation, out: RuleOutput) -> None:
    """Dataset reads cross the compute fabric and the GPUs wait for data: the network carrying the
    reads is the bottleneck, or one of them (no storage server's backend is busy, else storage-slow
    names them; with storage ports full both propose and the fixes' measured gains decide). The cost
    is the data wait."""
    if obs.per_gpu_s is None or not obs.storage_read:
        return
    wait, _ = _data_wait(obs)
    serving = _storage_serving_all(obs)
    if _matters(obs, wait) and obs.storage_busy:
        return  # the GPUs wait on storage servers whose backends are busy (storage-slow)
    # storage ports full while the GPUs wait: the tier holds the reads back, and their paths over the compute
    # fabric may too (a 3D job's few readers' large flows colliding: 8 readers asking 40 GB/s each filled 3 of
    # 4 ports while a separate network gave back 29 % of the step and more storage servers 12 %, accuracy
    # suite roce-ecmp/3d-8b; 8 asking 45 GB/s filled all 4 while a separate network gave back 2.4 % and more
    # servers made the step 38 % longer, their reads filling the readers' NICs, dev seed 30,000,224). Both
    # rules propose; the fixes' measured gains decide
    saturated = bool(serving) and not _matters(obs, wait)
    # servers sending at their ports' rate while the GPUs do not wait for data are not what the job
    # waits on: the reads they push hold the links the collectives share (an 18.7 % loss on a
    # 3-tier fabric was silent here and named an ECMP collision, seed 11,000,227); then only the
    # network's part is this cause's, the data wait (storage-slow's) is not
    wait = 0.0 if saturated else wait
    shared = [link for link, users in obs.link_users.items() if "storage read" in users and len(users) > 1]
    if not _matters(obs, wait) and not shared:
        if not any("storage read" in users for users in obs.link_users.values()):
            _reads_unplaced(obs, out)
        return
    util = obs.link_util
    delay_s = _reads_delay_s(obs, shared)
    evidence: dict = {"data_wait_ms": round(wait * 1e3, 2)}
    if delay_s > 0:
        evidence["reads_delay_collectives_ms"] = round(delay_s * 1e3, 2)
    where = ""
    if shared and util is not None:
        hot = max(shared, key=lambda link: util[link])
        evidence |= {"busiest_link_with_reads": _cable_name(obs, hot),
                     "its_utilization": round(float(util[hot]), 3)}
        where = f" ({_cable_name(obs, hot)}, carrying reads, runs at {100 * util[hot]:.0f} % while they flow)"
    out.candidates.append(Candidate(
        "storage-contention", "all", 0.9, evidence,
        f"Dataset reads share the compute network with the job's collectives{where}; the GPUs wait {_ms(wait)} per "
        f"step ({100 * wait / _step(obs):.1f} %) for data"
        # the delay is part of the cost charged (lost_s) whether or not the servers are busy: always said
        + (f", and the reads sharing those links delay the collectives {_ms(delay_s)} per step" if delay_s > 0 else "")
        + ("." if serving else " while the storage servers themselves are not busy."),
        "give storage its own network (or its own lossless class and bandwidth share), or cache the dataset locally",
        lost_s=wait + delay_s))


def _reads_unplaced(obs: Observation, out: RuleOutput) -> None:
    """Storage servers on the compute network send at their ports' rate while no link says what it
    carries (telemetry: port counters count bytes, not whose): the reads reach the compute hosts'
    NICs, whose ports the collectives use too, so they share links, but what they delay the
    collectives by needs the collectives' own bytes on those ports (per-collective port bytes). Named
    at info, its cost unmeasured (dev seed 26,000,096: 1.1 % of contention from telemetry found nothing)."""
    full = _storage_saturated(obs)
    if not full or obs.link_bytes is None or obs.link_rate_Bps is None:
        return
    ports = np.flatnonzero(np.isin(obs.topo.link_src, obs.topo.storage_server_node))
    delivered_Bps = float(obs.link_bytes[ports].sum()) / _step(obs)
    out.candidates.append(Candidate(
        "storage-contention", "all", 0.5,
        {"full_storage_servers": ", ".join(full), "delivered_GBps": round(delivered_Bps / 1e9, 2),
         "data_wait_ms": round(_data_wait(obs)[0] * 1e3, 2)},
        f"Storage server{'s' if len(full) > 1 else ''} {', '.join(full)} send{'' if len(full) > 1 else 's'} dataset reads "
        f"at {'their' if len(full) > 1 else 'its'} ports' rate ({delivered_Bps / 1e9:.1f} GB/s) over the compute network "
        f"while the GPUs' wait for data costs under {100 * MATTERS:g} % of the step: the reads share the compute hosts' NIC ports with the collectives; what "
        "they delay them by needs per-collective port bytes.",
        "give storage its own network (or its own lossless class and bandwidth share), or cache the dataset locally",
        lost_s=0.0))


def _reads_delay_s(obs: Observation, shared: list[int]) -> float:
    """How long the dataset reads delay the collectives on the link they share the most, at most the exposed
    communication; 0 without the collectives' own bytes (per-collective counters), where reads and collectives
    cannot be told apart.

    The reads flow at the loader's rate all step, a share ``u = reads / (rate x step)`` of the link; a
    collective given the rest under max-min sharing takes ``1 / (1 - u)`` of its time alone, so it is late by
    ``own / rate x u / (1 - u)``, and never by more than the reads' own time on the link. (Charging the reads'
    whole time on the link, as this did, counted reads that flow while the collectives are idle: 465 ms, 5.5 %
    of a step the fix gave back nothing of, dev seed 7.)"""
    if not shared or not obs.link_phase_bytes or obs.link_bytes is None or obs.link_rate_Bps is None:
        return 0.0
    links = np.array(shared)
    own = sum(obs.link_phase_bytes.values(), np.zeros(obs.topo.n_links))[links]
    rate = np.maximum(obs.link_rate_Bps[links], 1e-30)
    reads_s = np.maximum(obs.link_bytes[links] - own, 0.0) / rate
    share = np.minimum(reads_s / _step(obs), 1.0)
    with np.errstate(divide="ignore"):
        late_s = np.where(share < 1.0, own / rate * share / np.maximum(1.0 - share, 1e-30), np.inf)
    return min(float(np.minimum(late_s, reads_s).max(initial=0.0)), _exposed_comm_s(obs))


def _storage_saturated(obs: Observation) -> tuple[str, ...]:
    """Storage servers whose ports send at their negotiated rate the whole step (bytes per step at
    RATE_DOWNSHIFT of rate x step or more): they serve all they can; the demand exceeds them."""
    if obs.link_bytes is None or obs.link_rate_Bps is None:
        return ()
    ports = np.flatnonzero(np.isin(obs.topo.link_src, obs.topo.storage_server_node))
    full = ports[obs.link_bytes[ports] >= RATE_DOWNSHIFT * obs.link_rate_Bps[ports] * _step(obs)]
    return tuple(sorted({obs.topo.node_name[obs.topo.link_src[p]] for p in full}))


def _storage_serving_all(obs: Observation) -> tuple[str, ...]:
    """Storage servers that serve all they can, sorted: those whose disks are busy all the time
    (``obs.storage_busy``) and those whose ports send at their negotiated rate the whole step
    (:func:`_storage_saturated`). storage-contention stands aside for them and storage-slow names
    them, so both rules read the one list."""
    return tuple(sorted(set(obs.storage_busy or ()) | set(_storage_saturated(obs))))


def _faster_storage(scenario: Scenario, faults: list[FaultSpec], component: str) -> tuple[Scenario, list[FaultSpec]]:
    """Storage that serves what the job asks: the slow backend repaired, and as many storage servers
    as the job's reads need at their port speed."""
    cluster, workload = scenario.cluster, scenario.workload
    rate = next((f.params.read_rate_per_gpu_Bps for f in faults if f.kind == "storage-contention"),
                workload.data.dataset_read_per_gpu if workload is not None else 0.0)
    if rate > 0:
        # the field is the job's read rate over its GPUs (its readers share the total, docs/workloads.md)
        demand_Bps = rate * ((workload.gpus if workload is not None else None) or build_cluster(resolve_cluster(cluster)).n_gpus)
        needed = int(np.ceil(demand_Bps / cluster.storage.storage_server_speed))
        storage = cluster.storage.model_copy(update={"storage_servers": max(cluster.storage.storage_servers, needed)})
        scenario = scenario.model_copy(update={"cluster": cluster.model_copy(update={"storage": storage})})
    return scenario, _drop(faults, ("storage-slow",))


def _slow_backends(obs: Observation, busy: tuple[str, ...]) -> tuple[str, ...]:
    """Of the storage servers whose disks are busy all the time, those whose ports send under
    RATE_DOWNSHIFT of their negotiated rate: the backend, not the port, holds them back (a server
    whose port sends at its rate is healthy and serving all it can)."""
    if obs.link_bytes is None or obs.link_rate_Bps is None:
        return busy
    full = set(_storage_saturated(obs))
    return tuple(name for name in busy if name not in full)


def _storage_component(obs: Observation, names: list[str]) -> str:
    """The component a storage-slow finding names. One storage server whose backend is slow (its disk
    busy all the time while its port sends under its rate) is named by its name, the one to repair.
    Servers that send at their ports' negotiated rate are healthy: the job asks more than the storage
    servers together can send, so the storage tier ("storage") is short, whichever server's port
    happens to fill first (the reads' paths differ; a tier short by 4x filled 2 of 4 ports to
    98 % and left 2 at 78-82 %, seed 20,000,004); as it is when every server is slow."""
    slow = _slow_backends(obs, tuple(obs.storage_busy or ()))
    # one slow server is named unless it is the only storage server the cluster description has
    return slow[0] if len(slow) == 1 and len(obs.topo.storage_server_node) != 1 else "storage"


@rule("storage-slow", Fix(_faster_storage))
def storage_slow(obs: Observation, out: RuleOutput) -> None:
    """The GPUs wait for data while the storage servers serve all they can: their backends (disks,
    file system) are busy all the time (node_exporter's ``node_disk_io_time_seconds_total`` rising
    one second per second), or their ports send at their negotiated rate the whole step. The storage,
    not the compute network, is the bottleneck, and a separate storage network would not help. The
    cost is the data wait.

    With no server seen busy the storage tier is still a suspect whenever the data wait matters: the
    reads the job asks may exceed what the servers deliver through the paths they have, with every
    port under the saturation line (a tier short by a third delivered through ports at 72-80 % while
    the GPUs waited 990 ms, and more servers gave the step back, seed 21,000,103). Then the cause is
    inferred, not seen, and re-simulating its fix decides it against storage-contention's."""
    if obs.per_gpu_s is None or not obs.storage_read:
        return
    if obs.storage_busy is None:
        out.missing.append("storage servers' disk busy time (node_disk_io_time_seconds_total)")
        return
    wait, _ = _data_wait(obs)
    if not _matters(obs, wait):
        return
    names = list(_storage_serving_all(obs))
    if not names:
        _storage_suspect(obs, out, wait)
        return
    servers = np.flatnonzero(np.isin(obs.topo.node_name, names))  # those the cluster description knows
    ports = np.flatnonzero(np.isin(obs.topo.link_src, servers))
    delivered_Bps = float(obs.link_bytes[ports].sum()) / _step(obs) if obs.link_bytes is not None else 0.0
    port_Bps = float(obs.link_rate_Bps[ports].sum()) if obs.link_rate_Bps is not None else 0.0
    out.candidates.append(Candidate(
        "storage-slow", _storage_component(obs, names), 0.95,
        {"busy_storage_servers": ", ".join(names), "delivered_GBps": round(delivered_Bps / 1e9, 2),
         "ports_GBps": round(port_Bps / 1e9, 2), "data_wait_ms": round(wait * 1e3, 2)},
        f"The GPUs wait {_ms(wait)} per step ({100 * wait / _step(obs):.1f} %) for data while storage server"
        f"{'s' if len(names) > 1 else ''} {', '.join(names)} {'are' if len(names) > 1 else 'is'} busy all the time and "
        f"deliver{'s' if len(names) == 1 else ''} {delivered_Bps / 1e9:.1f} GB/s through ports of {port_Bps / 1e9:.0f} GB/s: "
        "the storage servers (their backend, or all their ports can send) are the bottleneck, not the network.",
        _STORAGE_FIX, direct=True, lost_s=wait))


_STORAGE_FIX = ("add storage servers or faster media to serve the job's reads, check the file system's health (degraded RAID, "
                "rebuild, metadata load), or stage the dataset on local NVMe before the job")


def _storage_suspect(obs: Observation, out: RuleOutput, wait: float) -> None:
    """storage-slow inferred from the data wait alone: no storage server is seen busy."""
    ports = np.flatnonzero(np.isin(obs.topo.link_src, obs.topo.storage_server_node))
    share = 0.0
    if obs.link_bytes is not None and obs.link_rate_Bps is not None and len(ports):
        share = float((obs.link_bytes[ports] / np.maximum(obs.link_rate_Bps[ports] * _step(obs), 1e-30)).max())
    out.candidates.append(Candidate(
        "storage-slow", "storage", 0.5,
        {"data_wait_ms": round(wait * 1e3, 2), "busiest_storage_port_share": round(share, 3)},
        f"The GPUs wait {_ms(wait)} per step ({100 * wait / _step(obs):.1f} %) for data; no storage server is seen busy "
        f"(its busiest port sends {100 * share:.0f} % of its rate), but the reads may ask more than the storage servers "
        "deliver through the paths they have.", _STORAGE_FIX, lost_s=wait))


@rule("tcp-fallback", _dropping("tcp-fallback"))
def tcp(obs: Observation, out: RuleOutput) -> None:
    if obs.socket_transport is None:
        out.missing.append("NCCL_DEBUG=INFO transport lines")
        return
    if not obs.socket_transport:
        return
    # the groups whose collectives may cross servers: every group but tp, which Megatron-LM's placement
    # keeps inside a server (an MoE's expert-dp group too: dp ranks ep apart and their cp ranks; cp's ring
    # exchange crosses once tp x cp outgrows a server, and on sockets can be the slowest of them: 4.3 GB/s
    # against the gradient all-reduce's 8.5, tests/diagnosis/test_tcp_fallback_cp.py); telemetry has no busbw
    slow = [c for c in obs.collectives if c.group in ("cp", "dp", "pp", "ep", "expert_dp") and c.busbw_GBps > 0]
    # without NCCL's lines, the kernel's netdev counters carrying the NIC ports' bytes say the same
    # (RDMA bypasses the kernel): diagnosis.telemetry.KERNEL_COUNTED_SOCKETS
    seen = "the kernel's network-device counters count the NIC ports' bytes (RDMA would bypass the kernel)" \
        if obs.socket_from_counters else "NCCL runs on its socket transport (NET/Socket)"
    evidence: dict = {"transport": "NET/Socket" if not obs.socket_from_counters else "kernel TCP (netdev counters)"}
    if slow:
        evidence["busbw_GBps"] = round(min(c.busbw_GBps for c in slow), 2)
    lost = _socket_lost_s(obs)
    evidence["lost_ms"] = round(lost * 1e3, 2)
    out.candidates.append(Candidate(
        "tcp-fallback", "all", 1.0, evidence,
        f"{seen[0].upper()}{seen[1:]}: every byte goes through the kernel TCP stack and the CPU, "
        "at a fraction of the NICs' RDMA bandwidth and with a latency floor 5-10x higher.",
        "restore RDMA: check the IB/RoCE devices are visible in the container (rdma devices, NCCL_IB_HCA), "
        "NCCL_IB_DISABLE unset and the RDMA kernel modules loaded", direct=True, lost_s=lost))


def _socket_lost_s(obs: Observation) -> float:
    """The step time sockets cost: the busiest NIC port's bytes at what NCCL's socket transport moves
    per NIC port (the proxy copy ceiling, which the transport profile states per NIC port and direction;
    else one connection's ceiling for each GPU on the NIC: transport.socket, from net_socket.cc) instead
    of the port's rate, beyond what the busiest other port takes, at most the exposed communication
    (what a 0.2 % socket cost and a 30 % one differ by)."""
    topo = obs.topo
    socket = socket_transport(resolve_transport(topo.spec.transport))
    ports = _host_nic_links(obs)
    socket_Bps: float | None = None
    if socket.host_ceiling_Bps is not None:
        # a ring's or tree's bytes leave a server through a NIC from the rank at the server's edge,
        # whose proxy copies them: the ceiling holds per port, not per GPU behind the port (counted
        # per GPU, a 4-NIC server of 8 GPUs had twice the socket rate: a 21 % loss read as 0.3 %,
        # dev seed 12,000,102)
        socket_Bps = float(socket.host_ceiling_Bps)
    elif socket.rate_cap_Bps is not None:
        gpus_per_nic = max(topo.gpus_per_server / max(topo.nic_node.shape[1], 1), 1.0)
        socket_Bps = gpus_per_nic * float(socket.rate_cap_Bps)
    if socket_Bps is None or not len(ports):
        return _exposed_comm_s(obs)
    return max((_link_lost_s(obs, int(p), float(topo.link_capacity_Bps[p]) / socket_Bps) for p in ports
                if topo.link_capacity_Bps[p] > socket_Bps), default=0.0)


@rule("no-gdr", _dropping("no-gdr"))
def no_gdr(obs: Observation, out: RuleOutput) -> None:
    if obs.gdr_off_servers is None:
        out.missing.append("NCCL_DEBUG=INFO GDRDMA flags")
        return
    if not obs.gdr_off_servers:
        return
    servers = sorted(obs.gdr_off_servers)
    component = "all" if len(servers) == obs.topo.n_servers else obs.topo.server_name(servers[0])
    # staged through host memory, each network byte crosses the PCIe switch's uplink twice (GPU to
    # memory, memory to NIC, and the reverse on receive), so a NIC moves at most half the PCIe
    # bandwidth; GPUDirect RDMA moves it once, at the NIC's rate. The cost is the busiest such NIC
    # port's bytes at the staged rate instead of its own (none when the NIC is the slower)
    staged_Bps = obs.topo.spec.server.pcie_bandwidth / 2
    ports = [int(p) for p in _host_nic_links(obs) if int(obs.topo.node_server[obs.topo.link_src[p]]) in servers]
    lost = max((_link_lost_s(obs, p, float(obs.topo.link_capacity_Bps[p]) / staged_Bps) for p in ports
                if obs.topo.link_capacity_Bps[p] > staged_Bps), default=0.0)
    out.candidates.append(Candidate(
        "no-gdr", component, 0.95, {"servers_without_gdr": len(servers), "staged_rate": _gbps(staged_Bps),
                                    "lost_ms": round(lost * 1e3, 2)},
        "NCCL's network connections on " + ("every server" if component == "all" else component)
        + f" lack GDRDMA: data bounces through host memory and crosses the PCIe switch twice, at most {_gbps(staged_Bps)}"
        + (f"; the step waits about {_ms(lost)} for it." if lost > 0 else ", which the NIC does not exceed anyway."),
        "load nvidia-peermem (or use DMA-BUF), keep ACS off on the PCIe switches and set NCCL_NET_GDR_LEVEL", direct=True,
        lost_s=lost))


@rule("nic-affinity", _dropping("nic-affinity", on_component=True))
def nic_affinity(obs: Observation, out: RuleOutput) -> None:
    if obs.remote_nic_gpus is None:
        out.missing.append("NCCL topology / NIC NUMA placement")
        return
    server = obs.topo.spec.server
    # without GPUDirect across sockets the data bounces through host memory: each byte crosses the
    # PCIe and the socket interconnect twice (in and out of memory), so the path carries half the
    # smaller of the two (the cluster description's figures)
    bounce_Bps = min(server.pcie_bandwidth, server.cpu_interconnect_bandwidth) / 2
    for gpu in obs.remote_nic_gpus:
        name = obs.topo.node_name[gpu]
        link = _nic_link_of_gpu(obs, gpu)
        nic_Bps = float(obs.topo.link_capacity_Bps[link]) if link is not None else 0.0
        lost = _link_lost_s(obs, link, nic_Bps / bounce_Bps) if link is not None and bounce_Bps < nic_Bps else 0.0
        out.candidates.append(Candidate(
            "nic-affinity", name, 0.9, {"nic_numa_node": "remote", "path_rate": _gbps(bounce_Bps)},
            f"{name} sends through a NIC behind the other CPU socket: its traffic crosses the CPU interconnect "
            f"and host memory instead of its own PCIe switch, at most {_gbps(bounce_Bps)}.",
            "map each GPU to the NIC on its PCIe switch (NCCL_IB_HCA order, a correct NCCL_TOPO_FILE, the container's NUMA binding)",
            direct=True, lost_s=lost))


def _host_nic_links(obs: Observation) -> np.ndarray:
    topo = obs.topo
    nic = topo.node_kind == NodeKind.NIC
    return np.flatnonzero(nic[topo.link_src] & (topo.link_kind == LinkKind.HOST))


#: a port or cable repaired: whatever link fault was injected on it goes
RESTORE_LINK = _dropping("link-degrade", "link-flap", "link-loss", "nic-down", on_component=True)


@rule("nic-down", RESTORE_LINK)
def nic_down(obs: Observation, out: RuleOutput) -> None:
    if obs.link_rate_Bps is None or obs.link_nominal_Bps is None:
        out.missing.append("port state / rate per NIC")
        return
    topo = obs.topo
    ports = _host_nic_links(obs)
    down = ports[obs.link_rate_Bps[ports] < 0.01 * obs.link_nominal_Bps[ports]]
    for link in down:
        nic = topo.node_name[topo.link_src[link]]
        out.candidates.append(Candidate(
            "nic-down", nic, 1.0, {"port_state": "down", "nominal": _gbps(float(obs.link_nominal_Bps[link]))},
            f"{nic}'s port is down (0 of {_gbps(float(obs.link_nominal_Bps[link]))}); its GPU's traffic moved to another "
            "NIC, which now carries two GPUs' share.",
            f"replace {nic}'s cable or transceiver (or the NIC); check `ibstat`/`ethtool` and the switch port", direct=True,
            lost_s=_rerouted_lost_s(obs, ports, int(topo.node_server[topo.link_src[link]]))))


def _rerouted_lost_s(obs: Observation, ports: np.ndarray, server: int) -> float | None:
    """The time a dead NIC costs: the busiest port of its server (the port that took the dead one's
    traffic) moves its bytes longer than the median NIC port of the job, and the exposed
    communication waits on it that much more (:func:`_held_up_s`); half of that communication when
    no port shows the extra bytes."""
    # where the counters do not show the doubled port (the traffic took another path, or bytes are
    # missing), the neighbour carrying two GPUs' share at most doubles the communication waiting on it
    bound = 0.5 * _exposed_comm_s(obs)
    if obs.link_bytes is None:
        return bound
    rate = _checked(obs.link_rate_Bps, "link_rate_Bps")  # nic-down's own evidence
    alive = ports[rate[ports] >= 0.01 * _checked(obs.link_nominal_Bps, "link_nominal_Bps")[ports]]
    times = obs.link_bytes[alive] / rate[alive]
    mine = times[obs.topo.node_server[obs.topo.link_src[alive]] == server]
    if not len(mine) or mine.max() <= np.median(times):
        return bound
    # the doubled port against the median port: the exposed part of the communication shrinks
    # as that port's time would (a DP job's gradient reduce-scatter moves half its bytes under the
    # backward pass: the port's extra time counted whole overstated a 1 % loss as 2 %). Relieved, it
    # still waits on the job's busiest port elsewhere (a collective ends with its slowest port, as
    # for any slowed port: _link_lost_s); the server's own ports are left out, since they may share
    # the dead NIC's traffic (a doubled port beside a 6 % ECMP collision that takes as long cost
    # nothing and ranked first, dev seed 16,000,085)
    return _held_up_s(obs, float(mine.max()), max(float(np.median(times)), _busiest_port_off_server_s(obs, server)))


def _storage_ports(topo, ports: np.ndarray) -> np.ndarray:
    """Which of ``ports`` start or end at a storage server (the dataset's reads, not the job's collectives)."""
    return np.isin(topo.link_src[ports], topo.storage_server_node) | np.isin(topo.link_dst[ports], topo.storage_server_node)


def _longest_port_s(obs: Observation, ports: np.ndarray) -> float:
    """The longest any of ``ports`` takes to move the job's own bytes per step at its negotiated rate
    (the nominal one where no rate was read); 0 for no ports."""
    if not len(ports):
        return 0.0
    rate = (obs.link_rate_Bps if obs.link_rate_Bps is not None else _checked(obs.link_nominal_Bps, "link_nominal_Bps"))[ports]
    return float(np.max(_job_bytes(obs, ports) / np.maximum(rate, 1e-30), initial=0.0))


def _busiest_port_off_server_s(obs: Observation, server: int) -> float:
    """The longest any network port of the job not on ``server`` (nor on a storage server) takes to
    move its own bytes per step at its negotiated rate."""
    topo = obs.topo
    ports = np.flatnonzero(_fabric_or_host(obs) & (_checked(obs.link_nominal_Bps, "link_nominal_Bps") > 0))
    ends = np.concatenate([topo.link_src[ports][:, None], topo.link_dst[ports][:, None]], axis=1)
    on_server = (topo.node_server[ends] == server).any(axis=1)
    return _longest_port_s(obs, ports[~on_server & ~_storage_ports(topo, ports)])


def _fabric_or_host(obs: Observation) -> np.ndarray:
    kinds = (LinkKind.HOST, LinkKind.FABRIC)
    return np.isin(obs.topo.link_kind, kinds)


def _gbps(rate_Bps: float) -> str:
    return f"{rate_Bps * 8 / 1e9:.0f} Gb/s"


def _busiest_other_port_s(obs: Observation, link: int) -> float:
    """The longest any other network port of the job (its cable's other direction and the storage
    servers' ports left out) takes to move its own bytes per step at its negotiated rate."""
    topo = obs.topo
    ports = np.flatnonzero(_fabric_or_host(obs) & (_checked(obs.link_nominal_Bps, "link_nominal_Bps") > 0))
    cable = (topo.link_src[ports] == topo.link_dst[link]) & (topo.link_dst[ports] == topo.link_src[link])
    return _longest_port_s(obs, ports[~_storage_ports(topo, ports) & ~cable & (ports != link)])


def _held_up_s(obs: Observation, with_s: float, without_s: float) -> float:
    """The step time a port holds the job up when it takes ``with_s`` per step to move its bytes
    where ``without_s`` would do (the time of the job's busiest other port, or its own at full rate).

    The observation is of the run as it went: its exposed communication already includes the
    slowness. A collective ends when its most loaded port has sent its bytes, so its duration, and
    the exposed part of it, scales with that port's time; relieved, the exposed part shrinks by
    ``without_s / with_s``. The extra port time itself bounds the loss too: it is all the step can
    lose, when every byte on the port is exposed; when most of them move under compute (a data-parallel
    job's reduce-scatter overlapping the backward pass), the exposed share is the smaller of the two."""
    # noise floor: two readings that each carry a relative noise n differ by noise alone by up to
    # NOISE_SIGMAS x n x sqrt(2) of their size (their difference's standard deviation, NOISE_SIGMAS
    # times): only the part beyond it is evidence of time lost (0 on a simulation's exact readings)
    noise = obs.reading_noise
    floor_s = without_s + NOISE_SIGMAS * np.sqrt(2.0) * noise * with_s
    exposed_s = _exposed_comm_s(obs)
    point = 0.0 if with_s <= floor_s or with_s <= 0 else min(with_s - floor_s, exposed_s * (1.0 - floor_s / with_s))
    if noise <= 0 or with_s <= 0:
        return point
    # the range: each of the two bounds with its readings' noise propagated (independent readings of
    # relative noise n): the extra port time with - without, and the exposed share e (1 - r), r = without / with
    ratio = without_s / with_s
    extra, extra_sd = with_s - without_s, noise * float(np.hypot(with_s, without_s))
    share, share_sd = exposed_s * (1.0 - ratio), noise * exposed_s * float(np.hypot(1.0 - ratio, np.sqrt(2.0) * ratio))
    low = min(extra - NOISE_SIGMAS * extra_sd, share - NOISE_SIGMAS * share_sd)
    high = min(extra + NOISE_SIGMAS * extra_sd, share + NOISE_SIGMAS * share_sd)
    return Lost(point, max(low, 0.0), max(high, 0.0))


def _link_lost_s(obs: Observation, link: int, slowdown: float) -> float:
    """The step time a link costs when moving its bytes takes ``slowdown`` times longer than at its
    nominal rate: the part of its longer transfer that the job's busiest other port does not
    already take (a collective's ports move their bytes side by side and it ends with the slowest:
    a port with headroom absorbs a slowdown up to that port's time), and of that only what is
    exposed (:func:`_held_up_s`: time hidden under compute costs nothing)."""
    if obs.link_bytes is None or obs.link_nominal_Bps is None or obs.link_nominal_Bps[link] <= 0:
        return _exposed_comm_s(obs)
    # the job's own bytes are what waits (another job's bytes on the port counted as its own made a
    # 0.04 s transfer 2.3 s: a 74 % foreign load rated a warning on a run that lost nothing)
    nominal_s = float(_job_bytes(obs, np.array([link]))[0]) / float(obs.link_nominal_Bps[link])
    slowed_s = nominal_s * max(slowdown, 1.0)
    return _held_up_s(obs, slowed_s, max(nominal_s, _busiest_other_port_s(obs, link)))


def _traffic_share(obs: Observation, link: int) -> float:
    """The link's bytes over the busiest network link's: how much of the job's traffic waits on it."""
    if obs.link_bytes is None:
        return 1.0
    top = float(obs.link_bytes[_fabric_or_host(obs)].max(initial=0.0))
    return float(obs.link_bytes[link]) / top if top > 0 else 0.0


@rule("link-flap", RESTORE_LINK)
def link_flap(obs: Observation, out: RuleOutput) -> None:
    """``LinkDownedCounter`` > 0: the port lost its link and retrained; traffic on it stalls
    meanwhile. The counter gives no duration: a short flap on a port with headroom costs nothing,
    one that lasts costs up to the job's exposed communication in proportion to the share of its
    traffic the link carries (0 if unused). That bound ranks the finding; it is rated info from the
    evidence alone, since nothing measured says the step lost time (a simulation measures it)."""
    downed = obs.counters.get("link_downed")
    if downed is None:
        return
    for link in np.flatnonzero(downed > 0):
        name = _cable_name(obs, link)
        lost = _exposed_comm_s(obs) * _traffic_share(obs, int(link))
        out.candidates.append(Candidate(
            "link-flap", name, 1.0, {"LinkDownedCounter": int(downed[link]), "traffic_share": round(_traffic_share(obs, int(link)), 3),
                                     "cost": f"not measured (no duration); at most {_ms(lost)} per step"},
            f"{name} went down {int(downed[link])} time(s) during the run (LinkDownedCounter); traffic on it stalls "
            f"while it retrains. The counter gives no duration: the step loses up to {_ms(lost)} if the link was down "
            "whenever its traffic needed it, nothing if each flap was short.",
            f"reseat or replace the cable and transceivers of {name}; check the switch logs for the port", direct=True,
            lost_s=lost, bound_only=True))


def _loss_window_packets(rate_Bps: float) -> float:
    """Packets in flight on a link, which go-back-N resends after each loss: the bandwidth-delay
    product at the link's rate over the MTU. An RC queue pair (InfiniBand, and RoCE NICs, which
    implement IB transport over UDP) keeps packet sequence numbers; a receiver that sees a gap NAKs
    and discards what follows, so the sender resends from the lost packet on (InfiniBand
    Architecture Specification vol. 1, section 9.7.5, "Requester: responder NAK"; Mittal et al.,
    "Revisiting Network Support for RDMA", SIGCOMM 2018, on RoCE NICs' go-back-N). LOSS_RTT_S is a
    few switch hops and two NICs (faults.apply)."""
    return max(1.0, rate_Bps * LOSS_RTT_S / 4096.0)


def _loss_rate(obs: Observation, link: int, errors: float) -> float:
    """The share of the link's packets lost: errors over the packets it sent in the window the
    counter covers (the counters' own window bytes, else a step's bytes times the steps it covers:
    a two-step window read against one step's packets doubled the rate)."""
    if obs.link_window_bytes is not None and obs.link_window_bytes[link] > 0:
        sent_bytes = float(obs.link_window_bytes[link])
    elif obs.link_bytes is not None:
        sent_bytes = float(obs.link_bytes[link]) * max(obs.counter_steps, 1.0)
    else:
        return 0.0
    packets = sent_bytes / 4096.0
    return errors / packets if packets > 0 else 0.0


@rule("link-loss", RESTORE_LINK)
def link_loss(obs: Observation, out: RuleOutput) -> None:
    """Symbol errors / out-of-sequence packets on a port: every loss makes a go-back-N sender (RoCE
    NICs, InfiniBand RC) resend its window, so goodput is ``1 / (1 + p W)`` (Zhu et al., SIGCOMM
    2015); the cost is the link's bytes moved that much slower."""
    errors = obs.counters.get("symbol_errors")
    if errors is None:
        return
    for link in np.flatnonzero(errors > 0):
        if obs.counters.get("link_downed") is not None and obs.counters["link_downed"][link] > 0:
            continue
        name = _cable_name(obs, link)
        loss = _loss_rate(obs, int(link), float(errors[link]))
        rate = float(obs.link_nominal_Bps[link]) if obs.link_nominal_Bps is not None else 0.0
        slowdown = 1.0 + loss * _loss_window_packets(rate)
        out.candidates.append(Candidate(
            "link-loss", name, 0.95, {"symbol_errors": int(errors[link]),
                                      "out_of_sequence": int(obs.counters.get("out_of_sequence", errors)[link]),
                                      "loss_rate": float(f"{loss:.3g}")},
            f"{name} corrupts packets: {int(errors[link])} symbol errors, about {loss:.1e} of its packets; every loss "
            f"makes the sender resend its window (go-back-N), so it moves data {slowdown:.2f} times slower than its rate.",
            f"clean or replace the fibre and optics of {name}", direct=True,
            lost_s=_link_lost_s(obs, int(link), slowdown)))


@rule("link-degrade", RESTORE_LINK)
def link_degrade(obs: Observation, out: RuleOutput) -> None:
    """A port negotiated below its nominal rate (fewer lanes, a lower speed): what ``ibstat``'s
    "Rate" / ``ethtool``'s "Speed" report. The cost is the link's bytes at the lower rate."""
    if obs.link_rate_Bps is None or obs.link_nominal_Bps is None:
        return
    net = _fabric_or_host(obs)
    ratio = np.divide(obs.link_rate_Bps, obs.link_nominal_Bps, out=np.ones(obs.topo.n_links),
                      where=obs.link_nominal_Bps > 0)
    flagged = set()
    for counter in ("symbol_errors", "link_downed"):
        if counter in obs.counters:
            flagged |= set(np.flatnonzero(obs.counters[counter] > 0).tolist())
    suspects = np.flatnonzero(net & (ratio < RATE_DOWNSHIFT) & (ratio > 0.01))
    for link in suspects:
        if int(link) in flagged:
            continue
        name = _cable_name(obs, link)
        used = obs.link_bytes is not None and obs.link_bytes[link] > 0
        rate, nominal = float(obs.link_rate_Bps[link]), float(obs.link_nominal_Bps[link])
        out.candidates.append(Candidate(
            "link-degrade", name, 0.9 if used else 0.5,
            {"negotiated": _gbps(rate), "nominal": _gbps(nominal),
             "utilization": round(float(obs.link_util[link]), 3) if obs.link_util is not None else "n/a"},
            f"{name} runs at {_gbps(rate)} of its {_gbps(nominal)} (lanes or speed lost)"
            + (" and its traffic queues behind it" if used else "; no traffic of the job crosses it") + ".",
            f"replace the optics or cable of {name} (lanes down); check `ibstat`/`ethtool` for the negotiated width and speed",
            direct=True, lost_s=_link_lost_s(obs, int(link), nominal / rate) if used else 0.0))


@rule("noisy-neighbor", _dropping("noisy-neighbor"))
def noisy(obs: Observation, out: RuleOutput) -> None:
    """Bytes on the job's links that its own flows do not account for: another job. Its cost is the
    job's bytes on the worst such link moved at the rate the other job leaves."""
    if obs.link_foreign_Bps is None or obs.link_rate_Bps is None or obs.link_nominal_Bps is None:
        return
    share = np.divide(obs.link_foreign_Bps, obs.link_nominal_Bps, out=np.zeros(obs.topo.n_links),
                      where=obs.link_nominal_Bps > 0)
    busy = np.flatnonzero(share >= FOREIGN_SHARE)
    if not len(busy):
        return
    lost = max(_link_lost_s(obs, int(link), 1.0 / max(1.0 - share[link], 1e-3)) for link in busy)
    fabric = np.flatnonzero(obs.topo.link_kind == LinkKind.FABRIC)
    worst = int(busy[np.argmax(share[busy])])
    component = "all" if len(busy) >= 0.5 * len(fabric) else _cable_name(obs, worst)
    out.candidates.append(Candidate(
        "noisy-neighbor", component, 0.9,
        {"links_with_foreign_traffic": int(len(busy)), "max_foreign_share": round(float(share.max()), 3)},
        f"Another job's traffic holds up to {100 * share.max():.0f} % of {len(busy)} link(s) the job uses "
        f"(e.g. {_gbps(float(obs.link_foreign_Bps[worst]))} on {_cable_name(obs, worst)}): its collectives get what is left.",
        "place the job where no other job shares its leaves and spines (topology-aware scheduling), or give it its own traffic class",
        direct=True, lost_s=lost))  # measured: port counters beyond the job's own bytes


def _uplinks_by_switch(obs: Observation, tier: int) -> dict[int, np.ndarray]:
    topo = obs.topo
    compute = topo.node_network == Network.COMPUTE
    up = np.flatnonzero((topo.node_tier[topo.link_src] == tier) & (topo.node_tier[topo.link_dst] == tier + 1)
                        & compute[topo.link_src] & compute[topo.link_dst])
    groups: dict[int, list[int]] = {}
    for link in up:
        groups.setdefault(int(topo.link_src[link]), []).append(int(link))
    return {k: np.array(v) for k, v in groups.items()}


def _equal_cost_groups(obs: Observation) -> list[np.ndarray]:
    return equal_cost_groups(obs.topo)


def equal_cost_groups(topo: Topology) -> list[np.ndarray]:
    """Every set of equal-cost switch-to-switch links one hash chooses among, on every tier: a
    switch's uplinks to the tier above (its own hash picks one), and the downlinks from the tier
    above into one switch (the hash a tier lower picked which of them a flow comes down: a 3-tier
    collision on spine -> core also sits on core -> spine and spine -> leaf)."""
    compute = topo.node_network == Network.COMPUTE
    src_tier, dst_tier = topo.node_tier[topo.link_src], topo.node_tier[topo.link_dst]
    fabric = (src_tier >= 1) & (dst_tier >= 1) & compute[topo.link_src] & compute[topo.link_dst]
    groups: dict[tuple[str, int], list[int]] = {}
    for link in np.flatnonzero(fabric & (dst_tier == src_tier + 1)):
        groups.setdefault(("up", int(topo.link_src[link])), []).append(int(link))
    for link in np.flatnonzero(fabric & (dst_tier == src_tier - 1)):
        groups.setdefault(("down", int(topo.link_dst[link])), []).append(int(link))
    return [np.array(v) for v in groups.values()]


def _seed_per_switch(scenario: Scenario, faults: list[FaultSpec], component: str) -> tuple[Scenario, list[FaultSpec]]:
    routing = scenario.cluster.routing.model_copy(update={"per_switch_seed": True})
    scenario = scenario.model_copy(update={"cluster": scenario.cluster.model_copy(update={"routing": routing})})
    return scenario, _drop(faults, ("ecmp-polarization",))


def _polarization_lost_s(obs: Observation, second: dict[int, np.ndarray]) -> tuple[float, float]:
    """(expected, at most): the time one seed everywhere costs. One seed is every switch's, the
    leaves' too, so re-seeding redraws every stage's choices; what it removes for certain is the
    stages repeating one another: the second stage's links (spine -> core, and core -> spine, which
    that choice fixes) would carry about their set's mean, while the first stage is a fresh draw of
    the same odds, its collisions as likely as now. Expected: the second stage's hottest uplink
    beyond what would still bound the step (the other links' times, the sets' means). At most: the
    hottest hashed link on any stage beyond the NIC ports and the sets' means (the fresh draw may
    also undo today's leaf collision: a 9.2 % loss from one seed sat behind its own leaf collision,
    dev seed 19,500,037, and another polarized fabric's 18 % collision cost the seed nothing, dev
    seed 19,500,012). A collective ends with its most loaded link; both at most the exposed
    communication."""
    topo = obs.topo
    rate = obs.link_rate_Bps if obs.link_rate_Bps is not None else topo.link_capacity_Bps.astype(float)
    times = _job_bytes(obs, np.arange(topo.n_links)) / np.maximum(rate, 1e-30)
    stage = np.concatenate(list(second.values()))
    polarized = np.zeros(topo.n_links, bool)
    polarized[stage] = True
    polarized |= (topo.node_tier[topo.link_src] == 3) & (topo.node_tier[topo.link_dst] == 2)  # back down from the core
    exposed = _exposed_comm_s(obs)
    rest = float(times[_fabric_or_host(obs) & ~polarized].max(initial=0.0))
    spread = max((float(times[links].mean()) for links in _equal_cost_groups(obs) if len(links)), default=0.0)
    expected = min(max(float(times[stage].max(initial=0.0)) - max(rest, spread), 0.0), exposed)
    hashed = _fabric_or_host(obs) & (topo.node_tier[topo.link_src] >= 1) & (topo.node_tier[topo.link_dst] >= 1)
    ports = float(times[_fabric_or_host(obs) & ~hashed].max(initial=0.0))
    most = min(max(float(times[hashed].max(initial=0.0)) - max(ports, spread), 0.0), exposed)
    return expected, max(most, expected)


@rule("ecmp-polarization", Fix(_seed_per_switch))
def polarization(obs: Observation, out: RuleOutput) -> None:
    """Every spine that sends to the core sends on one uplink only, though it forwards flows from
    several leaf uplinks: with one hash seed everywhere, a spine receives only the flows whose hash
    picked it at the leaf, and hashing them again the same way picks the same index for all of
    them (Cisco, "ECMP load balancing / hash polarization"; NVIDIA Cumulus Linux, "Equal Cost Multipath
    Load Sharing": a unique hash seed per switch avoids it; Dell OS9 configuration guide, "ECMP":
    anti-polarization by hash offset or per-node hash function). Independent hashing
    leaves some spines on one uplink by chance, never all of them; and the second tier's other
    uplinks then idle fabric-wide. Its cost is expected from the second stage, and may reach any
    hashed link's (:func:`_polarization_lost_s`): the rule proposes it when the most matters, so a
    re-simulation measures it, and ranks it by what is expected. The fix (per-switch seeds) differs
    from a collision's (adaptive routing), and the fabric's own collisions can only be read once the
    seeds are right (run.diagnose_scenario measures them after this fix)."""
    if obs.link_bytes is None:
        return
    groups = _uplinks_by_switch(obs, 2)  # spine -> core: the second hashing stage
    if not groups:
        return
    used = [int((obs.link_bytes[links] > 0).sum()) for links in groups.values() if (obs.link_bytes[links] > 0).any()]
    if len(used) < 2 or max(used) > 1:
        return
    # proposed when what re-seeding may give back matters (a re-simulation measures it); ranked and
    # rated by what it is expected to give back
    lost, most = _polarization_lost_s(obs, groups)
    if not _matters(obs, most):
        return
    k = int(np.median([len(links) for links in groups.values()]))
    idle = sum(int((obs.link_bytes[links] <= 0).sum()) for links in groups.values())
    out.candidates.append(Candidate(
        "ecmp-polarization", "all", 0.9,
        {"spines_sending": len(used), "core_uplinks_each_uses": f"1 of {k}", "idle_core_uplinks": idle,
         "lost_ms": round(lost * 1e3, 2), "at_most_ms": round(most * 1e3, 2)},
        f"Each of the {len(used)} spines that send to the core uses one of its {k} core uplinks ({idle} core uplinks idle "
        "fabric-wide): every tier hashes the same flows the same way (one seed everywhere), so the second stage repeats "
        f"the first stage's choice, and the collectives wait about {_ms(lost)} per step on the uplinks it loads (up to "
        f"{_ms(most)} with the first stage's collisions, which new seeds redraw).",
        "set a different ECMP hash seed (or hash function, or hash offset) per switch or per tier", lost_s=lost))


def more_qps(routing: RoutingSpec) -> RoutingSpec:
    """At least 4 QPs per connection (NCCL_IB_QPS_PER_CONNECTION=4): each connection's bytes spread
    over more hashed paths."""
    return routing.model_copy(update={"qps_per_connection": max(4, routing.qps_per_connection)})


def _adaptive(scenario: Scenario, faults: list[FaultSpec], component: str) -> tuple[Scenario, list[FaultSpec]]:
    """Adaptive routing (load-aware per packet, as InfiniBand AR or Spectrum-X RoCE do): no flow is
    pinned to a hashed path, so no two collide while a sibling idles. A packet run reruns with more
    QPs instead (its engine hashes per QP). No hash is left to polarize either."""
    routing = scenario.cluster.routing.model_copy(update={"kind": "adaptive"})
    cluster = scenario.cluster.model_copy(update={"routing": routing})
    return scenario.model_copy(update={"cluster": cluster}), _drop(faults, ("ecmp-polarization",))


def _job_bytes(obs: Observation, links: np.ndarray) -> np.ndarray:
    """The job's own bytes per step on ``links`` (another job's traffic taken out)."""
    own = _checked(obs.link_bytes, "link_bytes")[links].astype(float)
    if obs.link_foreign_Bps is not None:
        own = np.maximum(own - obs.link_foreign_Bps[links] * _step(obs), 0.0)
    return own


def _collided(obs: Observation, links: np.ndarray) -> tuple[float, int, float] | None:
    """(time lost, hottest link, its bytes over the mean) when ECMP left one of ``links`` (equal-cost
    siblings: a switch's uplinks, or the downlinks into one switch) with more than its share while a
    sibling sat idle, read on per-step byte totals (when no per-phase counters were collected)."""
    port_rate = _checked(obs.link_rate_Bps, "link_rate_Bps")
    if len(links) < 2 or (port_rate[links] < RATE_DOWNSHIFT * _checked(obs.link_nominal_Bps, "link_nominal_Bps")[links]).any():
        return None  # a degraded port explains an imbalance
    if any("storage read" in obs.link_users.get(int(link), ()) for link in links):
        return None  # dataset reads pile up toward their clients: the storage rules' business, not hashing's
    own = _job_bytes(obs, links)
    mean = float(own.mean())
    if mean <= 0 or own.min() >= IDLE_SIBLING * mean:
        return None
    hot = int(np.argmax(own))
    others = np.delete(own, hot)
    carrying = others[others >= IDLE_SIBLING * mean]
    if not len(carrying):
        return None  # one flow on one uplink, the rest idle: nothing collided
    # the hottest link against a typical busy sibling: two flows where the others carry one
    typical = float(np.median(carrying))
    if own[hot] <= typical:
        return None
    rate = float(port_rate[links[hot]])
    hot_s = float(own[hot]) / rate
    # balanced, the hot link would carry what its busy siblings carry (a hashed flow is not split,
    # and a flow alone on a link already runs at its NIC's pace); and the collectives would still
    # wait on the job's busiest NIC port, which no routing can relieve (as _phase_collided's spread
    # counts it): an uplink with twice its siblings' bytes that takes no longer than the NIC ports
    # cost nothing (a healthy MoE run rated a 4 % collision warning, seed 15,000,180)
    floor_s = max(typical / rate, _busiest_nic_port_s(obs))
    # two bounds: the bytes beyond the floor at the link's rate (counters of one step), and the
    # share of the exposed communication the floor would save (whatever the counters' window)
    lost = min(hot_s - floor_s, _exposed_comm_s(obs) * (1.0 - floor_s / hot_s))
    return lost, int(links[hot]), float(own[hot]) / max(typical, 1e-30)


def _busiest_nic_port_s(obs: Observation) -> float:
    """The longest any compute NIC port of the job (either direction; storage servers' left out)
    takes to move its own bytes per step at its negotiated rate. Servers with a NIC down are left
    out: a neighbour carrying the dead NIC's bytes is nic-down's cost, and a fabric cause is measured
    as if the other findings were fixed (a doubled port hid a 6 % collision, seed 16,000,085)."""
    topo = obs.topo
    ports = np.flatnonzero((topo.link_kind == LinkKind.HOST) & (topo.link_network == Network.COMPUTE))
    rate_Bps, nominal_Bps = _checked(obs.link_rate_Bps, "link_rate_Bps"), _checked(obs.link_nominal_Bps, "link_nominal_Bps")
    down = ports[rate_Bps[ports] < 0.01 * nominal_Bps[ports]]
    dead = set(int(n) for n in topo.node_server[topo.link_src[down]] if n >= 0)
    ends_server = np.stack([topo.node_server[topo.link_src[ports]], topo.node_server[topo.link_dst[ports]]], axis=1)
    on_dead = np.isin(ends_server, list(dead)).any(axis=1) if dead else np.zeros(len(ports), bool)
    ports = ports[~_storage_ports(topo, ports) & ~on_dead & (rate_Bps[ports] > 0)]
    if obs.storage_read:
        # the ports into the NICs carry the job's dataset reads too, the storage rules' business: all of a
        # 3D job's reads enter its few reading GPUs' NICs (10 GB/s into each of 4 set the floor past a hot
        # uplink and hid a 7.4 % collision, dev seed 30,000,024); the ports out carry the collectives alone
        ports = ports[~_read_paths(obs)[ports]]
    if not len(ports):
        return _longest_port_s(obs, ports)
    # at the nominal rate where a port negotiated lower: that is link-degrade's cost, and a fabric
    # cause is measured as if it were fixed (a NIC port at 39 % of its rate set the floor above the
    # hot uplink and hid a 9.2 % collision behind a 0.7 % link-degrade, seed 21,000,066)
    rate = np.maximum(rate_Bps[ports], nominal_Bps[ports])
    return float(np.max(_job_bytes(obs, ports) / np.maximum(rate, 1e-30), initial=0.0))


#: (time lost, hottest link, its busy share over its siblings' mean, collective label or None, hot busy, siblings' mean busy)
Collided = tuple[float, int, float, "str | None", float, float]


def _phase_s(obs: Observation, label: str) -> float:
    """How long the collective ``label`` runs per step: its calls' time."""
    return sum(c.time_s * c.count_per_step for c in obs.collectives if c.label == label)


def _nic_ports(obs: Observation) -> np.ndarray:
    """The compute network's NIC ports (both directions): links no routing can spread. Selected by
    the cable's network (``link_network``), not its ends': a NIC node sits in its server (``node_network``
    SERVER) although its cable to the leaf is on the compute network."""
    topo = obs.topo
    nic = topo.node_kind == NodeKind.NIC
    ports = np.flatnonzero((topo.link_kind == LinkKind.HOST) & (topo.link_network == Network.COMPUTE)
                           & (nic[topo.link_src] | nic[topo.link_dst]))
    if obs.link_rate_Bps is None:
        return ports
    # as for _busiest_nic_port_s: a server with a NIC down is left out, since a neighbour carrying the
    # dead NIC's bytes is nic-down's cost and a fabric cause is measured as if the other findings
    # were fixed (counted, a doubled port hid the fabric's own collision: fixed suite, roce-3tier 3d-8b)
    down = ports[obs.link_rate_Bps[ports] < 0.01 * _checked(obs.link_nominal_Bps, "link_nominal_Bps")[ports]]
    dead = [int(n) for n in topo.node_server[np.concatenate([topo.link_src[down], topo.link_dst[down]])] if n >= 0]
    ends = np.stack([topo.node_server[topo.link_src[ports]], topo.node_server[topo.link_dst[ports]]], axis=1)
    return ports[~np.isin(ends, dead).any(axis=1)] if dead else ports


def _phase_collided(obs: Observation, label: str, groups: list[np.ndarray], nics: np.ndarray) -> Collided | None:
    """The time the collective ``label`` loses to hashing, from each link's busy share of its phase
    (its bytes during the phase at the port's rate, over the phase's duration).

    A collective cannot end before its most loaded link has sent its bytes, so its bandwidth time
    scales with the highest busy share on its links. Load-aware routing (adaptive routing, packet
    spraying) would give every link of an equal-cost set the set's mean; a NIC port's load no routing
    can move. So the phase would shrink from the hottest set member's share to the highest of the sets'
    means and the NIC ports' shares; its exposed part shrinks alike."""
    phase_s = _phase_s(obs, label)
    if phase_s <= 0:
        return None
    port_rate = _checked(obs.link_rate_Bps, "link_rate_Bps")
    port_nominal = _checked(obs.link_nominal_Bps, "link_nominal_Bps")
    phase_bytes = _checked(obs.link_phase_bytes, "link_phase_bytes")[label]
    rate = np.where(port_rate > 0, port_rate, np.inf)
    busy = phase_bytes / rate / phase_s
    healthy = [g for g in groups if len(g) >= 2 and busy[g].any()
               and not (port_rate[g] < RATE_DOWNSHIFT * port_nominal[g]).any()]
    if not healthy:
        return None
    hot_group = max(healthy, key=lambda g: float(busy[g].max()))
    hot = int(hot_group[np.argmax(busy[hot_group])])
    # a NIC port at its nominal rate: one that negotiated lower is link-degrade's cost, and a fabric
    # cause is measured as if the other findings were fixed (a NIC port at 35 % of its rate, busy
    # past every uplink, hid the fabric's 6-9 % collision behind a 0.5-4.7 % link-degrade, seeds
    # 20,000,113 and 21,000,066)
    nominal = np.where(port_nominal > 0, port_nominal, np.inf)
    nic_busy = phase_bytes[nics] / np.maximum(nominal[nics], rate[nics]) / phase_s
    spread = max([float(nic_busy.max(initial=0.0))] + [float(busy[g].mean()) for g in groups if len(g)])
    if busy[hot] <= spread:
        return None
    exposed = obs.exposed_comm_s.get(label, min(phase_s, _exposed_comm_s(obs)))
    lost = exposed * (1.0 - spread / float(busy[hot]))
    mean = float(busy[hot_group].mean())
    return lost, hot, float(busy[hot]) / max(mean, 1e-30), label, float(busy[hot]), mean


def _collision_by_phase(obs: Observation) -> Collided | None:
    """The collectives' losses to hashing summed, named by the link of the one that loses most."""
    groups, nics = _equal_cost_groups(obs), _nic_ports(obs)
    labels = _checked(obs.link_phase_bytes, "link_phase_bytes")
    found = [c for label in labels if (c := _phase_collided(obs, label, groups, nics)) is not None]
    if not found:
        return None
    worst = max(found, key=lambda c: c[0])
    return (sum(c[0] for c in found),) + worst[1:]


def _read_paths(obs: Observation) -> np.ndarray:
    """Links dataset reads may load: every link down the fabric (toward the clients) and the uplinks
    of the switches the reads climb through from the storage servers."""
    topo = obs.topo
    tier_src, tier_dst = topo.node_tier[topo.link_src], topo.node_tier[topo.link_dst]
    climbed = set(int(n) for n in topo.storage_server_node)
    frontier = set(climbed)
    while frontier:
        up = np.isin(topo.link_src, list(frontier)) & (tier_dst > tier_src)
        frontier = set(int(n) for n in topo.link_dst[up]) - climbed
        climbed |= frontier
    return (tier_dst < tier_src) | np.isin(topo.link_src, list(climbed))


def _collision_by_step(obs: Observation) -> Collided | None:
    """Per-step totals mix in dataset reads where the job reads over the fabric: the sets the reads
    may cross are left out (the job's own bytes there are not known)."""
    best = None
    reads = _read_paths(obs) if obs.storage_read else np.zeros(obs.topo.n_links, bool)
    for links in _equal_cost_groups(obs):
        if reads[links].any():
            continue
        found = _collided(obs, links)
        if found is not None and (best is None or found[0] > best[0]):
            best = found
    return None if best is None else (*best, None, 0.0, 0.0)


@rule("ecmp-collision", Fix(_adaptive, routing=more_qps))
def collision(obs: Observation, out: RuleOutput) -> None:
    """ECMP hashed two or more flows onto one link while an equal-cost sibling had less to carry
    (siblings: a switch's uplinks, or the downlinks from the tier above into one switch, on every
    tier): a load imbalance across equal-cost paths, not a busy threshold (Al-Fares et al., "Hedera",
    NSDI 2010, find such collisions cost large flows up to half their bandwidth while links idle).

    Read per collective where per-phase port counters exist: within one collective's phase the
    colliding flows keep their link busy the whole phase while a sibling finishes early, though over
    the step the bytes may even out (another collective loads the sibling); the cost is the phase's
    exposed time beyond what spreading each equal-cost set evenly would leave (:func:`_phase_collided`).
    On per-step totals only, the cost is the hottest link's bytes beyond a busy sibling's share at its
    rate, at most that share of the exposed communication. The job's own bytes are compared: dataset
    reads piling up toward their clients are the storage rules' business."""
    if obs.link_bytes is None or obs.link_rate_Bps is None or obs.link_nominal_Bps is None:
        out.missing.append("per-port transmitted bytes and rates")
        return
    best = _collision_by_phase(obs) if obs.link_phase_bytes and obs.collectives else _collision_by_step(obs)
    if best is None or not _matters(obs, best[0]):
        return
    lost, link, over, label, hot_busy, mean_busy = best
    name = _cable_name(obs, link)
    evidence: dict[str, float | str] = {"hottest_uplink_vs_typical": round(over, 2), "lost_ms": round(lost * 1e3, 2)}
    if label is None:
        what = (f"it carries {over:.1f} times the bytes of a typical busy equal-cost sibling (a link a flow could "
                "have taken instead) while at least one sibling is idle")
    else:
        evidence |= {"collective": label, "busy_share_of_phase": round(hot_busy, 3),
                     "siblings_mean_busy_share": round(mean_busy, 3)}
        what = (f"during {label} it is busy {100 * hot_busy:.0f} % of the collective's time while its equal-cost "
                f"siblings (links a flow could have taken instead) average {100 * mean_busy:.0f} %")
    out.candidates.append(Candidate(
        "ecmp-collision", name, min(1.0, 0.5 + (over - 1.0) / 2), evidence,
        f"ECMP hashed several flows onto {name}: {what}, and the collectives wait about {_ms(lost)} per step for it.",
        "use adaptive routing / packet spraying on the switches, or spread each connection over more QPs "
        "(NCCL_IB_QPS_PER_CONNECTION=4)", lost_s=lost))


def _non_blocking(scenario: Scenario, faults: list[FaultSpec], component: str) -> tuple[Scenario, list[FaultSpec]]:
    """As many uplinks as downlinks (a new topology: a packet run cannot rerun it)."""
    fabric = scenario.cluster.fabric.model_copy(update={"oversubscription": 1.0})
    return scenario.model_copy(update={"cluster": scenario.cluster.model_copy(update={"fabric": fabric})}), list(faults)


def _leaf_oversubscribed(obs: Observation, switch: int, links: np.ndarray) -> tuple[float, float] | None:
    """(time lost, down-to-up capacity ratio) of leaf ``switch`` with uplinks ``links``."""
    topo = obs.topo
    down = np.flatnonzero((topo.link_dst == switch) & (topo.node_tier[topo.link_src] == 0))
    rate_Bps = _checked(obs.link_rate_Bps, "link_rate_Bps")
    up_Bps = float(rate_Bps[links].sum())
    ratio = float(_checked(obs.link_nominal_Bps, "link_nominal_Bps")[down].sum()) / max(up_Bps, 1e-30)
    if ratio <= 1.01 or not len(down):
        return None
    t_up = float(_job_bytes(obs, links).sum()) / up_Bps       # the leaf's offered load through its uplinks
    # with as much capacity up as down the same bytes would take t_up / ratio, but never less than
    # the leaf's busiest server port needs for its own bytes (those ports, not the uplinks, then set
    # the pace): the uplinks hold the job up only beyond that, and only in its exposed part
    ports = down[rate_Bps[down] > 0]
    t_port = float((_job_bytes(obs, ports) / rate_Bps[ports]).max(initial=0.0))
    return _held_up_s(obs, t_up, max(t_up / ratio, t_port)), ratio


@rule("oversubscription", Fix(_non_blocking))
def oversubscription(obs: Observation, out: RuleOutput) -> None:
    """A leaf with more capacity down (to its servers) than up, whose servers offer more traffic
    across the fabric than its uplinks carry in the time their own ports need: the offered load over
    the uplink capacity, not a utilization threshold nor the nominal ratio. The cost is the uplink
    time beyond what a non-blocking leaf would need (and beyond what the servers' own ports need),
    as far as it is exposed: the time the uplinks actually held the job up."""
    if obs.link_bytes is None or obs.link_rate_Bps is None or obs.link_nominal_Bps is None:
        return
    best = None
    for switch, links in _uplinks_by_switch(obs, 1).items():
        found = _leaf_oversubscribed(obs, switch, links)
        if found is not None and (best is None or found[0] > best[1][0]):
            best = (switch, found)
    if best is None or not _matters(obs, best[1][0]):
        return
    switch, (lost, ratio) = best
    name = obs.topo.node_name[switch]
    out.candidates.append(Candidate(
        "oversubscription", name, 0.8, {"downlink_to_uplink": round(ratio, 2), "lost_ms": round(lost * 1e3, 2)},
        f"{name} has {ratio:.1f}x more capacity down than up, and its servers send more across the fabric than its "
        f"uplinks carry in the time their own ports need: about {_ms(lost)} per step waits on the uplinks, whatever "
        "the routing.",
        "place the job's ranks so that most traffic stays under one leaf (topology-aware placement), or add uplinks",
        lost_s=lost))


def evaluate(obs: Observation) -> RuleOutput:
    out = RuleOutput()
    for entry in RULES.values():
        entry.check(obs, out)
    return out


# the rules on congestion counters (PFC, PortXmitWait, ECN) register themselves after these
from gpuwait.diagnosis import rules_counters  # noqa: E402,F401
