"""Rules on what operators already collect beyond utilization: the congestion counters (PFC pauses
on RoCE, InfiniBand ``PortXmitWait``, ECN marks / CNPs of DCQCN) and NCCL's own account of which NIC
and GID each GPU uses (``NCCL_DEBUG=INFO``). Registered with :func:`~gpuwait.diagnosis.rules.rule`
like the others; each estimates the step time its cause costs and names it past ``rules.MATTERS``.

Both PFC and InfiniBand's credits are back-pressure: a port whose peer has no room stops sending
while it has data. A pause (or a credit wait) on link ``a -> b`` means ``b`` could not drain what
``a`` sent; ``b``'s buffers then fill with traffic from its own upstream ports and it pauses them in
turn, so the stalled links form a tree growing backwards from one sink (a PFC "storm"; Guo et al.,
"RDMA over Commodity Ethernet at Scale", SIGCOMM 2016, section 4). The sink is the stalled link whose
receiver is not itself stalled on any link its traffic leaves by: its congestion is its own (a slow
receiver behind its PCIe, an overloaded egress whose counters were not collected). That receiver is
the finding's component; the other stalled links are its victims.

Time lost. A port stalled for ``stall_s`` while it sent ``window_bytes`` at ``rate`` in the same
counter window was held back a share ``X = stall / (stall + window_bytes / rate)`` of the time it had
data, so it delivered at most ``1 - X`` of its rate. A step's bytes on it then take ``bytes / rate x
X / (1 - X)`` longer, of which the job waits the exposed share: at most the exposed communication x X
(rules._held_up_s, as for any slowed port). PFC pauses are sent because
this port's own traffic fills the peer's ingress buffer (the XOFF threshold), so the port has data
while paused; a credit wait is counted only while it has data (IBTA's definition of PortXmitWait).
"""

from __future__ import annotations

import numpy as np

from gpuwait.diagnosis.observe import ROCE_PACKET_BYTES, Observation
from gpuwait.diagnosis.rules import (
    Candidate,
    RuleOutput,
    _dropping,
    _exposed_comm_s,
    _gbps,
    _held_up_s,
    _matters,
    _ms,
    _traffic_share,
    rule,
)
from gpuwait.topology.model import NodeKind

#: PortXmitWait counts ticks; a tick is a multiple (1 to 256, set in PortSamplesControl.Tick, which
#: ``perfquery -c`` prints) of the symbol time, the time one byte takes on one lane (4 ns at SDR)
#: (IBTA InfiniBand Architecture Specification Vol. 1, PortXmitWait and PortSamplesControl; NVIDIA
#: ibdiagnet User Manual v2.13, "Congestion Assessment on InfiniBand Links"). One symbol time is the
#: shortest tick, so the wait it gives is a lower bound: no finding is inflated by a guessed tick.
XMIT_WAIT_TICK_SYMBOLS = 1
#: lanes of an InfiniBand port (4X), over which the port's data rate is striped byte by byte
IB_LANES = 4
#: a 32-bit PMA counter stops at its maximum (IBTA Vol. 1, PortCounters): its value is then a floor
PMA32_MAX = 2**32 - 1


def _rate(obs: Observation, link: int) -> float:
    if obs.link_rate_Bps is not None and obs.link_rate_Bps[link] > 0:
        return float(obs.link_rate_Bps[link])
    return float(obs.topo.link_capacity_Bps[link])


def stalled_share(stall_s: float, window_bytes: float, rate_Bps: float) -> float:
    """The share of the time a port had data that it could not send (see the module doc).

    >>> round(stalled_share(0.1, 0.9 * 50e9, 50e9), 3)   # 0.1 s stalled beside 0.9 s of sending
    0.1
    """
    send_s = window_bytes / rate_Bps if rate_Bps > 0 else 0.0
    total = stall_s + send_s
    return stall_s / total if total > 0 else 0.0


def _lost_s(obs: Observation, link: int, share: float) -> float:
    """Per step, the time the link holds the job up when its bytes take ``1 / (1 - share)`` of their
    sending time (the stalls beside the sending): its exposed share (rules._held_up_s, as for a
    slowed port); the exposed communication alone where a step's bytes are unknown or the port sent nothing."""
    exposed = _exposed_comm_s(obs)
    if obs.link_bytes is None or share >= 1.0:
        return exposed * (_traffic_share(obs, link) if obs.link_bytes is not None else 1.0)
    send_s = float(obs.link_bytes[link]) / _rate(obs, link)
    return _held_up_s(obs, send_s / (1.0 - share), send_s)


def _downstream(obs: Observation, link: int) -> np.ndarray:
    """The links the traffic of ``link`` can leave its receiver by: every link out of a switch but
    the way back; out of a NIC, only into its host (what arrives at a NIC is for its server)."""
    topo = obs.topo
    src, dst = int(topo.link_src[link]), int(topo.link_dst[link])
    out = np.flatnonzero((topo.link_src == dst) & (topo.link_dst != src))
    if topo.node_kind[dst] == NodeKind.NIC:
        out = out[topo.node_kind[topo.link_dst[out]] != NodeKind.SWITCH]
    return out


def congestion_trees(obs: Observation, stalled: dict[int, float]) -> dict[int, list[int]]:
    """Receiver node of each sink -> the stalled links of its tree (sink links first, then those
    reached backwards through stalled links into their senders)."""
    topo = obs.topo
    sinks = [link for link in stalled if not any(int(d) in stalled for d in _downstream(obs, link))]
    trees: dict[int, list[int]] = {}
    for link in sinks:
        trees.setdefault(int(topo.link_dst[link]), []).append(link)
    for links in trees.values():
        frontier = list(links)
        while frontier:
            src = int(topo.link_src[frontier.pop()])
            for up in stalled:
                if int(topo.link_dst[up]) == src and up not in links and int(topo.link_src[up]) != int(topo.link_dst[links[0]]):
                    links.append(up)
                    frontier.append(up)
    return trees


def _window_bytes(obs: Observation, link: int) -> float | None:
    if obs.link_window_bytes is None:
        return None
    return float(obs.link_window_bytes[link])


def _stalls(obs: Observation, seconds: dict[int, float]) -> dict[int, tuple[float, float]]:
    """link -> (stalled share of its busy time, step time lost) for links whose bytes were counted."""
    out = {}
    for link, stall_s in seconds.items():
        window = _window_bytes(obs, link)
        if window is None:
            continue
        share = stalled_share(stall_s, window, _rate(obs, link))
        out[link] = (share, _lost_s(obs, link, share))
    return out


def _ecn_words(obs: Observation, node: int) -> str:
    """What DCQCN did at the sink's receiver: ECN marks and CNPs on the links into it."""
    into = np.flatnonzero(obs.topo.link_dst == node)
    marks = sum(float(obs.counters[key][into].sum()) for key in ("ecn_marked", "cnp_sent") if key in obs.counters)
    if not any(key in obs.counters for key in ("ecn_marked", "cnp_sent")):
        return "ECN counters not collected"
    return f"{marks:.0f} ECN marks / CNPs at it" if marks else "no ECN marks at it: DCQCN is not slowing the senders"


def _tree_candidate(obs: Observation, kind: str, node: int, links: list[int],
                    stalls: dict[int, tuple[float, float]], what: str, fix: str) -> Candidate | None:
    topo = obs.topo
    lost = max(stalls[link][1] for link in links)
    if not _matters(obs, lost):
        return None
    sink = links[0]
    share = stalls[sink][0]
    name = topo.node_name[node]
    victims = [topo.link_name(int(link)) for link in links[1:]]
    ecn = _ecn_words(obs, node) if kind == "pfc-pause" else None
    evidence: dict[str, float | str] = {
        "sink_link": topo.link_name(int(sink)), "stalled_share": round(share, 4),
        "delivers_at_most": _gbps(_rate(obs, sink) * (1.0 - share)), "rate": _gbps(_rate(obs, sink)),
        "stalled_links": len(links), "lost_ms": round(lost * 1e3, 2)}
    if ecn is not None:
        evidence["ecn"] = ecn
    spread = f"; the stall spread back over {len(victims)} more link(s) ({', '.join(victims[:3])})" if victims else ""
    return Candidate(
        kind, name, 0.9, evidence,
        f"{name} {what}: {topo.link_name(int(sink))} could not send {100 * share:.1f} % of the time it had data, so it "
        f"delivers at most {_gbps(_rate(obs, sink) * (1.0 - share))} of {_gbps(_rate(obs, sink))}{spread}"
        + (f" ({ecn})" if ecn else "") + f"; about {_ms(lost)} per step.",
        fix, direct=True, lost_s=lost)


def _sink_fix(obs: Observation, node: int, pfc: bool) -> str:
    name = obs.topo.node_name[node]
    if obs.topo.node_kind[node] == NodeKind.NIC:
        return (f"{name} cannot drain what arrives: check its host's PCIe link (lspci LnkSta), GPUDirect RDMA "
                "(nvidia-peermem) and the NIC's rx_discards_phy / rx_out_of_buffer; "
                + ("enable ECN (DCQCN) on the RDMA priority so senders slow before PFC fires" if pfc
                   else "check the HCA's firmware and PCIe placement"))
    return (f"an egress port of {name} is oversubscribed: collect its port counters to find which, spread the "
            "traffic (adaptive routing, more queue pairs) " + ("and set ECN marking (Kmin/Kmax) below the PFC "
                                                               "threshold" if pfc else "or add uplinks"))


def _seconds(obs: Observation, key: str) -> dict[int, float]:
    values = obs.counters.get(key)
    return {} if values is None else {int(link): float(values[link]) for link in np.flatnonzero(values > 0)}


@rule("pfc-pause", _dropping("pfc-pause"))
def pfc_pause(obs: Observation, out: RuleOutput) -> None:
    """RoCE ports paused by PFC (mlx5 ``rx_prio<p>_pause_duration`` / ``tx_prio<p>_pause_duration``,
    microseconds): the tree of paused links is traced back to the port where the pauses start, and
    the time lost is the paused share's (module doc). Counts without durations give no time; a
    NIC's PFC storm prevention (``tx_pause_storm_*_events``) names the sink directly."""
    seconds = _seconds(obs, "pause_received_s")
    for link, value in _seconds(obs, "pause_sent_s").items():
        seconds[link] = seconds.get(link, 0.0) + value
    counts = [k for k in ("pause_received", "pause_sent") if k in obs.counters and obs.counters[k].any()]
    if counts and not seconds:
        out.missing.append("PFC pause durations (rx_prio<p>_pause_duration / tx_prio<p>_pause_duration): pause "
                           "frame counts alone give no time")
    storms = _seconds(obs, "pause_storm_events")
    stalls = _stalls(obs, seconds)
    if seconds and not stalls:
        out.missing.append("port byte counters beside the PFC pause durations (tx_bytes_phy / rx_bytes_phy)")
    named = set()
    for node, links in congestion_trees(obs, {k: v for k, v in seconds.items() if k in stalls}).items():
        cand = _tree_candidate(obs, "pfc-pause", node, links, stalls, "is where the PFC pauses start",
                               _sink_fix(obs, node, pfc=True))
        if cand is not None:
            out.candidates.append(cand)
            named.add(node)
    for link, events in storms.items():
        node = int(obs.topo.link_dst[link])
        if node in named:
            continue
        name = obs.topo.node_name[node]
        lost = _exposed_comm_s(obs) * _traffic_share(obs, link)
        out.candidates.append(Candidate(
            "pfc-pause", name, 0.95, {"pause_storm_events": int(events), "traffic_share": round(_traffic_share(obs, link), 3)},
            f"{name} kept pausing {obs.topo.link_name(link)} until its PFC storm prevention fired {int(events)} time(s): "
            "it stopped draining, and every sender behind that switch port stalled with it.",
            _sink_fix(obs, node, pfc=True), direct=True, lost_s=lost))


@rule("ib-xmit-wait", _dropping("ib-xmit-wait"))
def xmit_wait(obs: Observation, out: RuleOutput) -> None:
    """InfiniBand ports that had data but no credits (``PortXmitWait``, in ticks of at least one
    symbol time): the credit-starved links are traced back to their sink like PFC pauses, and the
    time lost is the waiting share's (module doc). A counter stuck at its 32-bit maximum gives no
    share (clear it: ``perfquery -R``)."""
    ticks = _seconds(obs, "xmit_wait")
    saturated = [link for link, value in ticks.items() if value == PMA32_MAX]  # 64-bit ones run past it
    if saturated:
        out.missing.append(f"PortXmitWait of {obs.topo.link_name(saturated[0])} is saturated at 2^32-1: clear the "
                           "counters (perfquery -R) and read them again over a known window")
    seconds = {}
    for link, value in ticks.items():
        if value != PMA32_MAX:
            symbol_s = IB_LANES / float(obs.topo.link_capacity_Bps[link])  # one byte on one lane
            seconds[link] = value * XMIT_WAIT_TICK_SYMBOLS * symbol_s
    stalls = _stalls(obs, seconds)
    for node, links in congestion_trees(obs, {k: v for k, v in seconds.items() if k in stalls}).items():
        cand = _tree_candidate(obs, "ib-xmit-wait", node, links, stalls, "holds back its senders' credits",
                               _sink_fix(obs, node, pfc=False))
        if cand is not None:
            out.candidates.append(cand)


#: DCQCN's switches mark with a probability rising from 0 at the queue length Kmin to Pmax at Kmax
#: and mark every packet beyond it (Zhu et al., "Congestion Control for Large-Scale RDMA
#: Deployments", SIGCOMM 2015: Kmin 5 KB, Kmax 200 KB, Pmax 1 %); a receiver with more than Pmax of
#: its packets marked sat behind a queue past Kmax: sustained congestion, not a burst
ECN_SUSTAINED_SHARE = 0.01


@rule("ecn-marks", _dropping("ecn-marks"))
def ecn_marks(obs: Observation, out: RuleOutput) -> None:
    """ECN-marked RoCE packets at a receiving NIC (``np_ecn_marked_roce_packets``, with the CNPs it
    sent back): a queue on the way to it stayed above the marking threshold. DCQCN then slows the
    senders instead of pausing them, so marks cost no time of their own that the counters measure:
    the receiver with sustained marking is named at info level (where congestion sits), and any time
    lost shows in the pause, XmitWait, collision or oversubscription findings."""
    marked = obs.counters.get("ecn_marked")
    if marked is None or not marked.any() or obs.link_window_bytes is None:
        return
    packets = obs.link_window_bytes / ROCE_PACKET_BYTES
    share = np.divide(marked, packets, out=np.zeros_like(marked), where=packets > 0)
    worst = int(np.argmax(share))
    if share[worst] < ECN_SUSTAINED_SHARE:
        return
    node = int(obs.topo.link_dst[worst])
    name = obs.topo.node_name[node]
    cnps = float(obs.counters["cnp_sent"][worst]) if "cnp_sent" in obs.counters else None
    out.candidates.append(Candidate(
        "ecn-marks", name, 0.5,
        {"ecn_marked_share": round(float(share[worst]), 4), "ecn_marked": int(marked[worst]),
         "cnp_sent": int(cnps) if cnps is not None else "n/a", "receivers_marked": int((marked > 0).sum())},
        f"{100 * share[worst]:.1f} % of the packets {name} receives are ECN-marked: a queue on the way to it stays past the "
        "marking threshold, and DCQCN keeps slowing its senders (an incast onto it, or a hot link on its path).",
        f"find the hot queue on the path into {name} (switch egress counters); spread its senders (placement, "
        "adaptive routing) if it costs time", direct=True, lost_s=0.0))


# ------------------------------------------------------------------ NCCL's choice of NIC and GID

def _local_nics(obs: Observation, gpu: int) -> set[int]:
    """The NIC nodes on GPU node ``gpu``'s own PCIe switch (the server template's GPU-NIC map)."""
    topo = obs.topo
    where = np.argwhere(topo.gpu_node == gpu)
    if not len(where):
        return set()
    server, index = (int(v) for v in where[0])
    return {int(topo.nic_node[server, k]) for k in topo.gpu_nics[index] if k >= 0}


@rule("nccl-wrong-hca", _dropping("nic-affinity", on_component=True))
def nccl_wrong_hca(obs: Observation, out: RuleOutput) -> None:
    """A GPU whose NCCL connections leave through a NIC that is not on its PCIe switch (``[send] via
    NET/IB/<dev>`` lines; ``<dev>`` indexes the ``NET/IB : Using [0]mlx5_0:1/...`` list): a wrong
    ``NCCL_IB_HCA`` order, a container that hides the topology, a stale ``NCCL_TOPO_FILE``. Past the
    PCIe switch GPUDirect RDMA is off by default (NCCL_NET_GDR_LEVEL), so the data bounces through
    host memory, crossing PCIe and, for a NIC of the other socket, the CPU interconnect twice: at most
    half the smaller of the two (the bound nic-affinity uses). Connections through a PXN proxy
    (``NET/IB/3(5)``) use the proxy GPU's own NIC on purpose and are not counted."""
    if obs.nccl_nic_use is None:
        return
    from gpuwait.diagnosis.rules import _link_lost_s

    topo = obs.topo
    server = topo.spec.server
    bounce_Bps = min(server.pcie_bandwidth, server.cpu_interconnect_bandwidth) / 2
    for gpu, nics in sorted(obs.nccl_nic_use.items()):
        local = _local_nics(obs, gpu)
        if not local or set(nics) & local:
            continue
        nic = nics[0]
        ups = np.flatnonzero((topo.link_src == nic) & (topo.node_kind[topo.link_dst] == NodeKind.SWITCH))
        nic_Bps = float(topo.link_capacity_Bps[ups[0]]) if len(ups) else 0.0
        lost = _link_lost_s(obs, int(ups[0]), nic_Bps / bounce_Bps) if len(ups) and bounce_Bps < nic_Bps else 0.0
        name, used = topo.node_name[gpu], topo.node_name[nic]
        wanted = ", ".join(sorted(topo.node_name[n] for n in local))
        device = used.rsplit(".", 1)[-1]
        out.candidates.append(Candidate(
            "nccl-wrong-hca", name, 0.9, {"nccl_uses": used, "local_nic": wanted, "path_rate": _gbps(bounce_Bps)},
            f"NCCL sends {name}'s traffic through {used}, which is not on its PCIe switch (its own: {wanted}); the "
            f"data leaves through the CPU and host memory, at most {_gbps(bounce_Bps)}.",
            f"set NCCL_IB_HCA so each GPU gets the NIC on its PCIe switch (on {name.rsplit('.', 1)[0]}: {wanted} for "
            f"this GPU, not {device}); check the container sees the real PCI topology, or give NCCL_TOPO_FILE",
            direct=True, lost_s=lost))


@rule("nccl-gid", _dropping("nccl-gid"))
def nccl_gid(obs: Observation, out: RuleOutput) -> None:
    """RoCE queue pairs on an IPv6 link-local GID (``GID 0 (80FE/...)`` in NCCL's ``NET/IB`` lines):
    the GID index maps to fe80::, which no router forwards, so traffic between leaves of a routed
    (L3) fabric fails or takes a fallback; and ConnectX's RoCE v1 entries (no IP header, so no ECN
    mark for DCQCN) sit at these indexes too. The time it costs cannot be read from the log."""
    topo = obs.topo
    for nic, index in sorted(obs.nccl_link_local_gids.items()):
        name = topo.node_name[nic]
        out.candidates.append(Candidate(
            "nccl-gid", name, 0.8, {"gid_index": index, "gid": "fe80::/64 (link-local)"},
            f"NCCL's RoCE queue pairs on {name} use GID index {index}, an IPv6 link-local address: not routable past "
            "the leaf, and on ConnectX's default table a RoCE v1 entry (no ECN, so no DCQCN) sits beside it.",
            f"set NCCL_IB_GID_INDEX to {name}'s RoCE v2 IPv4 GID (`show_gids`: usually 3) or unset it (-1) so NCCL "
            "picks the RoCE v2 one (NCCL_IB_ROCE_VERSION_NUM=2, NCCL_IB_ADDR_FAMILY=AF_INET)", direct=True))
