"""Diagnosis of a packet-level run: what PFC, ECN and the queues say.

Three causes the flow engine cannot see, each from the counters real switches and NICs keep
(``rx_prio3_pause`` / duration, ECN marks, queue depth):

- **hol-blocking**: an incast fills one egress queue, PFC pauses the ports feeding it, and flows that
  only share a paused port, not the congested one, slow down too (the classic PFC pathology).
- **pfc-storm**: the pauses spread past the first hop into the fabric (switch-to-switch ports paused
  for a large share of the run), from a receiver that drains too slowly.
- **ecn-misconfig**: congestion control is on but the switches pause before they mark (ECN Kmin at or
  above the PFC XOFF point), so DCQCN never hears about the congestion and PFC does all the work.

The routing causes the flow-level diagnosis knows are read from the run's port utilization with
the same rules (:mod:`gpuwait.diagnosis.rules`): an ECMP hash collision (uplinks full beside idle
siblings) and an oversubscribed leaf (every uplink full).

Each finding's fix is simulated again packet by packet where the run alone allows it (ECN
thresholds below XOFF, DCQCN on with marking, more QPs per connection) and its gain is the change
of the run's mean flow completion time; adding uplinks needs a new topology, so that finding
carries no measured gain.
"""

from __future__ import annotations

import numpy as np

from gpuwait.diagnosis.observe import Observation
from gpuwait.diagnosis.rules import RULES, RuleOutput, collision, oversubscription
from gpuwait.diagnosis.run import Diagnosis, Finding, negligible
from gpuwait.engine.flow_run import simulate_flows
from gpuwait.engine.packet.params import PacketParams
from gpuwait.engine.packet.run import PacketRun, simulate_packets
from gpuwait.runner.workload import case_label
from gpuwait.spec.cluster import RoutingSpec
from gpuwait.topology.model import LinkKind

PAUSED_SHARE = 0.2      # a port paused a fifth of the run is held back by PFC, not by its own rate
SLOWED = 1.5            # an innocent flow this much slower than its max-min share is blocked
STORM_SHARE = 0.5       # fabric ports paused half the run: the pauses have spread


#: what a packet diagnosis's gains are shares of
MEASURE = "mean flow completion time"


def _severity(gain: float | None) -> str:
    if gain is None or gain < 0.03:
        return "info"
    return "critical" if gain >= 0.2 else "warning"


def _mean_fct(run: PacketRun, flows: list[int] | None = None) -> float:
    fct = run.flow_time_s if flows is None else run.flow_time_s[flows]
    fct = fct[np.isfinite(fct)]
    return float(fct.mean()) if len(fct) else float("inf")


def _routing_candidates(run: PacketRun) -> list:
    """ECMP collisions and oversubscription, from the run's mean port utilization."""
    span_s = max(run.end_s - float(run.flows.start_s.min()), 1e-300) if len(run.flows) else 1.0
    rate = np.asarray(run.capacity_Bps, dtype=float)
    obs = Observation(run.topo, step_time_s=span_s, link_util=run.link_mean_utilization(), link_bytes=run.link_bytes,
                      link_rate_Bps=rate, link_nominal_Bps=rate)
    out = RuleOutput()
    collision(obs, out)
    oversubscription(obs, out)
    return out.candidates


def diagnose_packets(run: PacketRun, measure_gain: bool = True) -> Diagnosis:
    """Findings from one packet run (its topology, flows, routing, transport and parameters)."""
    topo = run.topo
    prio = run.params.data_priority
    span = max(run.makespan_s, 1e-30)
    paused = run.paused_s[:, prio] / span
    network = topo.network_links
    queue = np.where(network, run.link_mean_queue_bytes, 0.0)
    congested = int(np.argmax(queue))
    port = topo.link_name(congested)
    marks = float(run.ecn_marked_packets.sum())
    pauses = float(run.pause_frames[:, prio].sum())
    # kind, component, score, evidence, explanation, fix, what the rerun changes (packet parameters,
    # routing; None: no rerun), flows it is for (None: all), seen in a counter (not inferred)
    findings: list[tuple[str, str, float, dict, str, str, tuple[dict, RoutingSpec] | None, list[int] | None, bool]] = []
    if pauses > 0 and run.resolved.ecn and run.resolved.congestion_control == "dcqcn" and marks < 0.01 * pauses:
        findings.append(("ecn-misconfig", "all", 1.0,
                         {"pause_frames": int(pauses), "ecn_marked_packets": int(marks), "congested_port": port},
                         f"Switches sent {int(pauses)} PFC pauses but marked {int(marks)} packets: ECN's Kmin sits at or "
                         "above the PFC XOFF point, so PFC stops the senders before DCQCN hears of the congestion.",
                         "set ECN Kmin/Kmax well below the PFC XOFF threshold (e.g. Kmin 100 KB, Kmax 400 KB per 25 Gb/s)",
                         ({"ecn_kmin_bytes": None, "ecn_kmax_bytes": None}, run.routing), None, True))
    fabric_links = np.flatnonzero(topo.link_kind == LinkKind.FABRIC)
    spread = fabric_links[paused[fabric_links] >= STORM_SHARE]
    if len(spread):
        findings.append(("pfc-storm", port, 0.9,
                         {"fabric_ports_paused": int(len(spread)), "max_paused_share": round(float(paused.max()), 3),
                          "congested_port": port},
                         f"PFC pauses spread into the fabric: {len(spread)} switch-to-switch port(s) paused more than half "
                         f"the run, rooted at {port}, whose queue never drains.",
                         f"find why {port} drains slowly (a slow or stuck receiver, a degraded link); enable the PFC "
                         "watchdog so a stuck queue is dropped instead of pausing the fabric",
                         None, None, True))
    # innocent flows: they cross a paused port but not the congested one
    flows_here = set(run.flows_on_link(congested).tolist())
    paused_links = np.flatnonzero(paused >= PAUSED_SHARE)
    innocent = sorted({int(f) for link in paused_links for f in run.flows_on_link(int(link))} - flows_here)
    if innocent:
        fluid = simulate_flows(topo, run.flows, run.routing, run.transport)
        slowdown = run.flow_time_s[innocent] / np.maximum(fluid.flow_time_s[innocent], 1e-30)
        if slowdown.max() >= SLOWED:
            findings.append(("hol-blocking", port, 0.85,
                             {"innocent_flows": len(innocent), "worst_slowdown_vs_max_min": round(float(slowdown.max()), 2),
                              "paused_ports": int(len(paused_links)), "congested_port": port},
                             f"An incast fills {port}; PFC pauses the ports feeding it, and {len(innocent)} flow(s) that "
                             f"only share a paused port run up to {slowdown.max():.1f}x slower than their fair share "
                             "(head-of-line blocking).",
                             "let congestion control act before PFC (DCQCN with ECN marking below XOFF), or spread the "
                             "incast over time or receivers",
                             ({"congestion_control": "dcqcn", "ecn": True, "ecn_kmin_bytes": None,
                               "ecn_kmax_bytes": None}, run.routing),
                             innocent, True))
    for cand in _routing_candidates(run):
        change = RULES[cand.kind].fix.routing  # a routing change reruns packet by packet; a new topology cannot
        routing = change(run.routing) if change is not None else None
        findings.append((cand.kind, cand.component, cand.score, cand.evidence, cand.explanation, cand.fix,
                         ({}, routing) if routing is not None else None, None, cand.direct))
    out = []
    for kind, component, score, evidence, explanation, fix, rerun, victims, direct in findings:
        # the gain is measured on the flows the cause hurts: the innocent ones for HOL blocking
        before = _mean_fct(run, victims)
        fixed = None
        if measure_gain and rerun is not None:
            params_update, routing = rerun
            new = run.params.model_copy(update=params_update)
            again = simulate_packets(topo, run.flows, routing, run.transport, PacketParams.model_validate(new.model_dump()))
            fixed = _mean_fct(again, victims)
        gain = (before - fixed) / before if fixed is not None and before > 0 else None
        out.append(Finding(kind, component, _severity(gain), score, evidence, explanation, fix, before, fixed, direct))
    order = {"ecn-misconfig": 0, "pfc-storm": 1, "hol-blocking": 2, "ecmp-collision": 3, "oversubscription": 4}
    # as in a step diagnosis, a finding whose measured fix gives back under a warning's share ranks after the
    # others, so the top finding is the conclusion's main cause (report.conclusion names no negligible one)
    out.sort(key=lambda f: (negligible(f, MEASURE), order[f.kind]))
    # labelled as a workload's diagnosis is: the variant's name, else "RoCEv2, ECMP"
    case = case_label(run.labels.get("name"), run.routing, run.transport)
    return Diagnosis(case, _mean_fct(run), None, tuple(out), (), measure=MEASURE)
