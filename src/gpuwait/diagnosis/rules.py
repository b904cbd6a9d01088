"""Rules: one per cause, each with its fix. A rule weighs the evidence an engineer would weigh and
proposes a finding with a score (how sure, 0..1), the component, the numbers behind it, an
explanation and a fix in words; the rule registers its fix in machine form too (:class:`Fix`), so
re-simulating a finding runs the fix its rule declared and no other. Rules see only an
:class:`~gpuwait.diagnosis.observe.Observation`; a rule whose series are missing returns nothing and
names what it lacked. Adding a rule is one registration here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from gpuwait.diagnosis.observe import Observation
from gpuwait.spec.cluster import RoutingSpec
from gpuwait.spec.faults import FaultSpec
from gpuwait.spec.scenario import Scenario
from gpuwait.topology.model import LinkKind, Network, NodeKind
from gpuwait.topology.presets import build_cluster, resolve_cluster

#: thresholds, each with the reason it is where it is
SLOW_GPU_RATIO = 1.08       # compute 8 % above the median: well outside 2-3 % jitter
WAIT_SHARE = 0.03           # a wait worth naming: 3 % of the step
SATURATED = 0.95            # a port at 95 % of its rate is the bottleneck while it runs
IDLE_SIBLING = 0.6          # siblings this far below the hottest one were left idle by hashing
RATE_DOWNSHIFT = 0.9        # a port negotiated at < 90 % of its nominal rate
FOREIGN_SHARE = 0.2         # another job holding 20 % of a link


@dataclass(frozen=True)
class Candidate:
    kind: str                         # the rule that proposed it (a key of RULES)
    component: str
    score: float                      # how sure, 0..1
    evidence: dict[str, float | str]
    explanation: str
    fix: str                          # what to do, in words; the machine form is RULES[kind].fix
    direct: bool = False              # seen in an error counter, a port state or a transport line, not inferred

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


def _cable_name(obs: Observation, link: int) -> str:
    return obs.topo.link_name(int(link))


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
    return scenario, _drop(faults, ("slow-gpu",), gpu)


@rule("slow-gpu", Fix(_heal_gpu))
def slow_gpu(obs: Observation, out: RuleOutput) -> None:
    if obs.per_gpu_s is None:
        out.missing.append("per-GPU compute time (DCGM_FI_DEV_GPU_UTIL or step markers)")
        return
    compute = obs.per_gpu_s["compute"] + obs.per_gpu_s["straggler_wait"] * 0  # own compute only
    median = float(np.median(compute))
    worst = int(np.argmax(compute))
    ratio = float(compute[worst] / median) if median > 0 else 1.0
    others_wait = float(np.delete(obs.per_gpu_s["straggler_wait"], worst).mean()) if len(compute) > 1 else 0.0
    if ratio < SLOW_GPU_RATIO or others_wait < WAIT_SHARE * _step(obs):
        return
    name = obs.gpu_names[worst]
    out.candidates.append(Candidate(
        "slow-gpu", name, min(1.0, (ratio - 1) / 0.2),
        {"compute_vs_median": round(ratio, 3), "others_wait_ms": round(others_wait * 1e3, 2),
         "own_compute_ms": round(float(compute[worst]) * 1e3, 2), "median_compute_ms": round(median * 1e3, 2)},
        f"{name} computes {100 * (ratio - 1):.0f} % longer than the median GPU every step, and the others wait "
        f"{others_wait * 1e3:.0f} ms per step for it at their collectives.",
        f"drain {name} and check its clocks, temperature, power cap and ECC errors (nvidia-smi -q); replace it if it stays slow"))


def _fast_loader(scenario: Scenario, faults: list[FaultSpec], component: str) -> tuple[Scenario, list[FaultSpec]]:
    """The loaders keep up: no loader limit, no dataloader-starvation fault."""
    if scenario.workload is not None:
        data = scenario.workload.data.model_copy(update={"loader_samples_per_s_per_server": None})
        scenario = scenario.model_copy(update={"workload": scenario.workload.model_copy(update={"data": data})})
    return scenario, _drop(faults, ("dataloader-starvation",))


@rule("dataloader-starvation", Fix(_fast_loader))
def dataloader(obs: Observation, out: RuleOutput) -> None:
    if obs.per_gpu_s is None:
        out.missing.append("data-wait phase per GPU (step markers)")
        return
    wait = float(obs.per_gpu_s["data_wait"].mean())
    if wait < WAIT_SHARE * _step(obs) or obs.storage_read:
        return
    out.candidates.append(Candidate(
        "dataloader-starvation", "all", min(1.0, wait / _step(obs) / 0.1),
        {"data_wait_ms": round(wait * 1e3, 2), "share_of_step": round(wait / _step(obs), 3)},
        f"Every GPU waits {wait * 1e3:.0f} ms per step for its next batch while no storage traffic is on the network: "
        "the CPU data loaders do not keep up.",
        "raise the data loader's workers or prefetch, move preprocessing to the GPU, or pre-tokenize the dataset"))


def _separate_storage(scenario: Scenario, faults: list[FaultSpec], component: str) -> tuple[Scenario, list[FaultSpec]]:
    """Storage on its own network (two storage NICs per server at least), reading at the injected rate."""
    rate = next((f.params.read_rate_per_gpu_Bps for f in faults if f.kind == "storage-contention"), None)
    cluster, workload = scenario.cluster, scenario.workload
    storage = cluster.storage.model_copy(update={"mode": "separate"})
    server = cluster.server.model_copy(update={"storage_nics": max(cluster.server.storage_nics, 2)})
    cluster = cluster.model_copy(update={"storage": storage, "server": server})
    if workload is not None and rate is not None:
        workload = workload.model_copy(update={"data": workload.data.model_copy(update={"dataset_read_per_gpu": rate})})
    return scenario.model_copy(update={"cluster": cluster, "workload": workload}), _drop(faults, ("storage-contention",))


@rule("storage-contention", Fix(_separate_storage))
def storage(obs: Observation, out: RuleOutput) -> None:
    if obs.per_gpu_s is None:
        return
    if not obs.storage_read:
        return
    wait = float(obs.per_gpu_s["data_wait"].mean())
    shared = [link for link, users in obs.link_users.items() if "storage read" in users and len(users) > 1]
    hot = max(shared, key=lambda link: obs.link_util[link]) if shared else None
    if wait < WAIT_SHARE * _step(obs) and not (hot is not None and obs.link_util[hot] >= SATURATED):
        return
    evidence = {"data_wait_ms": round(wait * 1e3, 2)}
    if hot is not None:
        evidence |= {"shared_link": _cable_name(obs, hot), "shared_link_util": round(float(obs.link_util[hot]), 3)}
    out.candidates.append(Candidate(
        "storage-contention", "all", 0.9,
        evidence,
        "Dataset reads share the compute fabric with the job's collectives"
        + (f" (e.g. {_cable_name(obs, hot)} at {100 * obs.link_util[hot]:.0f} %)" if hot is not None else "")
        + f"; the GPUs wait {wait * 1e3:.0f} ms per step for data.",
        "give storage its own network (or its own lossless class and bandwidth share), or cache the dataset locally"))


@rule("tcp-fallback", _dropping("tcp-fallback"))
def tcp(obs: Observation, out: RuleOutput) -> None:
    if obs.socket_transport is None:
        out.missing.append("NCCL_DEBUG=INFO transport lines")
        return
    if not obs.socket_transport:
        return
    slow = [c for c in obs.collectives if c.group in ("dp", "pp", "ep")]
    evidence: dict = {"transport": "NET/Socket"}
    if slow:
        evidence["busbw_GBps"] = round(min(c.busbw_GBps for c in slow), 2)
    out.candidates.append(Candidate(
        "tcp-fallback", "all", 1.0, evidence,
        "NCCL runs on its socket transport (NET/Socket): every byte goes through the kernel TCP stack and the CPU, "
        "at a fraction of the NICs' RDMA bandwidth and with a latency floor 5-10x higher.",
        "restore RDMA: check the IB/RoCE devices are visible in the container (rdma devices, NCCL_IB_HCA), "
        "NCCL_IB_DISABLE unset and the RDMA kernel modules loaded", direct=True))


@rule("no-gdr", _dropping("no-gdr"))
def no_gdr(obs: Observation, out: RuleOutput) -> None:
    if obs.gdr_off_servers is None:
        out.missing.append("NCCL_DEBUG=INFO GDRDMA flags")
        return
    if not obs.gdr_off_servers:
        return
    servers = sorted(obs.gdr_off_servers)
    component = "all" if len(servers) == obs.topo.n_servers else obs.topo.server_name(servers[0])
    out.candidates.append(Candidate(
        "no-gdr", component, 0.95, {"servers_without_gdr": len(servers)},
        "NCCL's network connections on " + ("every server" if component == "all" else component)
        + " lack GDRDMA: data bounces through host memory and crosses the PCIe switch twice.",
        "load nvidia-peermem (or use DMA-BUF), keep ACS off on the PCIe switches and set NCCL_NET_GDR_LEVEL", direct=True))


@rule("nic-affinity", _dropping("nic-affinity", on_component=True))
def nic_affinity(obs: Observation, out: RuleOutput) -> None:
    if obs.remote_nic_gpus is None:
        out.missing.append("NCCL topology / NIC NUMA placement")
        return
    for gpu in obs.remote_nic_gpus:
        name = obs.topo.node_name[gpu]
        out.candidates.append(Candidate(
            "nic-affinity", name, 0.9, {"nic_numa_node": "remote"},
            f"{name} sends through a NIC behind the other CPU socket: its traffic crosses the CPU interconnect "
            "and host memory instead of its own PCIe switch.",
            "map each GPU to the NIC on its PCIe switch (NCCL_IB_HCA order, a correct NCCL_TOPO_FILE, the container's NUMA binding)", direct=True))


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
            "nic-down", nic, 1.0, {"port_rate_Bps": float(obs.link_rate_Bps[link]), "state": "down"},
            f"{nic}'s port is down; its GPU's traffic moved to a neighbouring NIC, which now carries two GPUs' share.",
            f"replace {nic}'s cable or transceiver (or the NIC); check `ibstat`/`ethtool` and the switch port", direct=True))


def _fabric_or_host(obs: Observation) -> np.ndarray:
    kinds = (LinkKind.HOST, LinkKind.FABRIC)
    return np.isin(obs.topo.link_kind, kinds)


@rule("link-flap", RESTORE_LINK)
def link_flap(obs: Observation, out: RuleOutput) -> None:
    downed = obs.counters.get("link_downed")
    if downed is None:
        return
    for link in np.flatnonzero(downed > 0):
        name = _cable_name(obs, link)
        out.candidates.append(Candidate(
            "link-flap", name, 1.0, {"LinkDownedCounter": int(downed[link])},
            f"{name} went down {int(downed[link])} time(s) during the run; traffic on it stalls while it retrains.",
            f"reseat or replace the cable and transceivers of {name}; check the switch logs for the port", direct=True))


@rule("link-loss", RESTORE_LINK)
def link_loss(obs: Observation, out: RuleOutput) -> None:
    errors = obs.counters.get("symbol_errors")
    if errors is None:
        return
    for link in np.flatnonzero(errors > 0):
        if obs.counters.get("link_downed") is not None and obs.counters["link_downed"][link] > 0:
            continue
        name = _cable_name(obs, link)
        out.candidates.append(Candidate(
            "link-loss", name, 0.95, {"symbol_errors": int(errors[link]),
                                      "out_of_sequence": int(obs.counters.get("out_of_sequence", errors)[link])},
            f"{name} corrupts packets ({int(errors[link])} symbol errors); every loss makes the sender resend its "
            "window (go-back-N), so goodput drops far more than the loss rate.",
            f"clean or replace the fibre and optics of {name}", direct=True))


@rule("link-degrade", RESTORE_LINK)
def link_degrade(obs: Observation, out: RuleOutput) -> None:
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
        out.candidates.append(Candidate(
            "link-degrade", name, 0.9 if used else 0.5,
            {"rate_vs_nominal": round(float(ratio[link]), 3),
             "utilization": round(float(obs.link_util[link]), 3) if obs.link_util is not None else "n/a"},
            f"{name} runs at {100 * ratio[link]:.0f} % of its nominal rate"
            + (" and its traffic queues behind it" if used else "") + ".",
            f"replace the optics or cable of {name} (lanes down); check `ibstat`/`ethtool` for the negotiated width and speed", direct=True))


@rule("noisy-neighbor", _dropping("noisy-neighbor"))
def noisy(obs: Observation, out: RuleOutput) -> None:
    if obs.link_foreign_Bps is None or obs.link_rate_Bps is None:
        return
    share = np.divide(obs.link_foreign_Bps, obs.link_nominal_Bps, out=np.zeros(obs.topo.n_links),
                      where=obs.link_nominal_Bps > 0)
    busy = np.flatnonzero(share >= FOREIGN_SHARE)
    if not len(busy):
        return
    fabric = np.flatnonzero(obs.topo.link_kind == LinkKind.FABRIC)
    component = "all" if len(busy) >= 0.5 * len(fabric) else _cable_name(obs, busy[np.argmax(share[busy])])
    out.candidates.append(Candidate(
        "noisy-neighbor", component, 0.9,
        {"links_with_foreign_traffic": int(len(busy)), "max_foreign_share": round(float(share.max()), 3)},
        f"Another job's traffic holds up to {100 * share.max():.0f} % of {len(busy)} link(s) the job uses: "
        "its collectives get what is left.",
        "place the job where no other job shares its leaves and spines (topology-aware scheduling), or give it its own traffic class"))


def _uplinks_by_switch(obs: Observation, tier: int) -> dict[int, np.ndarray]:
    topo = obs.topo
    compute = topo.node_network == Network.COMPUTE
    up = np.flatnonzero((topo.node_tier[topo.link_src] == tier) & (topo.node_tier[topo.link_dst] == tier + 1)
                        & compute[topo.link_src] & compute[topo.link_dst])
    groups: dict[int, list[int]] = {}
    for link in up:
        groups.setdefault(int(topo.link_src[link]), []).append(int(link))
    return {k: np.array(v) for k, v in groups.items()}


def _seed_per_switch(scenario: Scenario, faults: list[FaultSpec], component: str) -> tuple[Scenario, list[FaultSpec]]:
    routing = scenario.cluster.routing.model_copy(update={"per_switch_seed": True})
    scenario = scenario.model_copy(update={"cluster": scenario.cluster.model_copy(update={"routing": routing})})
    return scenario, _drop(faults, ("ecmp-polarization",))


@rule("ecmp-polarization", Fix(_seed_per_switch))
def polarization(obs: Observation, out: RuleOutput) -> None:
    if obs.link_bytes is None:
        return
    groups = _uplinks_by_switch(obs, 2)  # spine -> core: the second hashing stage
    if not groups:
        return
    used_fractions = []
    for links in groups.values():
        carrying = obs.link_bytes[links] > 0
        if carrying.any():
            used_fractions.append(carrying.mean())
    if len(used_fractions) < 2:
        return
    used = float(np.mean(used_fractions))
    if used > 0.5:
        return
    out.candidates.append(Candidate(
        "ecmp-polarization", "all", min(1.0, (0.5 - used) / 0.3 + 0.5),
        {"share_of_core_uplinks_used": round(used, 3), "spines_sending": len(used_fractions)},
        f"Spines use only {100 * used:.0f} % of their uplinks to the core: every tier hashes the same flows the same "
        "way (one seed everywhere), so the second stage repeats the first stage's choice and most links idle.",
        "set a different ECMP hash seed (or hash function) per switch or per tier"))


def more_qps(routing: RoutingSpec) -> RoutingSpec:
    """At least 4 QPs per connection (NCCL_IB_QPS_PER_CONNECTION=4): each connection's bytes spread
    over more hashed paths."""
    return routing.model_copy(update={"qps_per_connection": max(4, routing.qps_per_connection)})


def _more_qps(scenario: Scenario, faults: list[FaultSpec], component: str) -> tuple[Scenario, list[FaultSpec]]:
    cluster = scenario.cluster.model_copy(update={"routing": more_qps(scenario.cluster.routing)})
    return scenario.model_copy(update={"cluster": cluster}), list(faults)


@rule("ecmp-collision", Fix(_more_qps, routing=more_qps))
def collision(obs: Observation, out: RuleOutput) -> None:
    if obs.link_util is None:
        out.missing.append("per-port utilization")
        return
    best = None
    for tier in (1, 2):
        for links in _uplinks_by_switch(obs, tier).values():
            util = obs.link_util[links]
            if len(links) < 2 or util.max() < SATURATED:
                continue
            if obs.link_rate_Bps is not None and (obs.link_rate_Bps[links] < RATE_DOWNSHIFT * obs.link_nominal_Bps[links]).any():
                continue  # a degraded port explains it
            spread = float(util.max() - util.mean())
            idle = float((util < IDLE_SIBLING * util.max()).mean())
            if idle < 0.25:
                continue
            if best is None or spread > best[0]:
                best = (spread, int(links[np.argmax(util)]), idle, float(util.mean()))
    if best is None:
        return
    spread, link, idle, mean = best
    name = _cable_name(obs, link)
    out.candidates.append(Candidate(
        "ecmp-collision", name, min(1.0, 0.5 + spread),
        {"hottest_uplink_util": round(float(obs.link_util[link]), 3), "siblings_mean_util": round(mean, 3),
         "siblings_idle_share": round(idle, 3)},
        f"ECMP hashed several large flows onto {name} (full) while {100 * idle:.0f} % of its sibling uplinks stayed "
        "below 60 %: the collective waits for the collided link.",
        "spread each connection over more QPs (NCCL_IB_QPS_PER_CONNECTION=4), or use adaptive routing / packet spraying"))


def _non_blocking(scenario: Scenario, faults: list[FaultSpec], component: str) -> tuple[Scenario, list[FaultSpec]]:
    """As many uplinks as downlinks (a new topology: a packet run cannot rerun it)."""
    fabric = scenario.cluster.fabric.model_copy(update={"oversubscription": 1.0})
    return scenario.model_copy(update={"cluster": scenario.cluster.model_copy(update={"fabric": fabric})}), list(faults)


@rule("oversubscription", Fix(_non_blocking))
def oversubscription(obs: Observation, out: RuleOutput) -> None:
    if obs.link_util is None:
        return
    topo = obs.topo
    for switch, links in _uplinks_by_switch(obs, 1).items():
        util = obs.link_util[links]
        if util.min() < 0.85:
            continue
        down = np.flatnonzero((topo.link_dst == switch) & (topo.node_tier[topo.link_src] == 0))
        ratio = float(topo.link_capacity_Bps[down].sum() / max(topo.link_capacity_Bps[links].sum(), 1e-30))
        if ratio <= 1.01:
            continue
        name = topo.node_name[switch]
        out.candidates.append(Candidate(
            "oversubscription", name, 0.8,
            {"downlink_to_uplink": round(ratio, 2), "uplinks_min_util": round(float(util.min()), 3)},
            f"Every uplink of {name} is full and it has {ratio:.1f}x more capacity down than up: the job sends more "
            "across the fabric than the leaf can carry, whatever the routing.",
            "place the job's ranks so that most traffic stays under one leaf (topology-aware placement), or add uplinks"))
        return


def evaluate(obs: Observation) -> RuleOutput:
    out = RuleOutput()
    for entry in RULES.values():
        entry.check(obs, out)
    return out
