"""Severity follows the time a cause costs (issue 14, the 1 % rule) when only telemetry is there.

- A collective's ports move their bytes side by side and it ends with the slowest: a port slowed by
  a factor costs only the part of its longer transfer beyond what the job's busiest other port
  already takes (a fluid bound: max-min fair sharing, Bertsekas & Gallager, "Data Networks", 6.5).
- ``LinkDownedCounter`` gives no duration (IBTA Vol. 1, PortCounters): a flap is ranked by the most
  it can cost and rated info from the evidence alone.
- NCCL's socket transport moves per GPU what its proxy thread copies (net_socket.cc, NCCL v2.30.7-1):
  its cost is the NIC ports' bytes at that rate, so a job whose network bytes are few loses little.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpuwait.diagnosis.observe import Observation
from gpuwait.diagnosis.rules import RULES, RuleOutput, _link_lost_s
from gpuwait.diagnosis.run import diagnose_observation
from gpuwait.spec import ClusterSpec
from gpuwait.topology.model import LinkKind
from gpuwait.topology.presets import build_cluster


def _fabric(oversubscription: float = 1.0, nic_speed: str = "100Gbps", gpus: int = 4):
    return build_cluster(ClusterSpec.model_validate({
        "servers": 8, "server": {"gpus": gpus, "nics": 4, "nic_speed": nic_speed, "pcie_switches": 2, "cpus": 2},
        "fabric": {"tiers": 2, "switch_radix": 8, "oversubscription": oversubscription}}))


TOPO = _fabric()


def _phases(topo, exposed_s: float) -> dict[str, np.ndarray]:
    n = topo.gpu_node.size
    return {"compute": np.full(n, 1.0 - exposed_s), "straggler_wait": np.zeros(n), "data_wait": np.zeros(n),
            "exposed_comm": np.full(n, exposed_s)}


def _nic_bytes(topo, per_port_s: float) -> np.ndarray:
    """Every NIC port (and its leaf's port back) busy ``per_port_s`` per step; uplinks half of it."""
    carried = np.zeros(topo.n_links)
    host = topo.link_kind == LinkKind.HOST
    carried[host] = per_port_s * topo.link_capacity_Bps[host]
    fabric = topo.link_kind == LinkKind.FABRIC
    carried[fabric] = 0.5 * per_port_s * topo.link_capacity_Bps[fabric]
    return carried


def _obs(topo=TOPO, exposed_s: float = 0.3, per_port_s: float = 0.2, **fields) -> Observation:
    nominal = topo.link_capacity_Bps.astype(float)
    return Observation(topo, step_time_s=1.0, per_gpu_s=_phases(topo, exposed_s), link_bytes=_nic_bytes(topo, per_port_s),
                       link_rate_Bps=nominal, link_nominal_Bps=nominal, **fields)


def test_a_slowed_port_with_headroom_costs_only_what_exceeds_the_busiest_port():
    uplink = int(np.flatnonzero(TOPO.link_kind == LinkKind.FABRIC)[0])
    obs = _obs()
    # the uplink carries 100 ms of bytes beside NIC ports of 200 ms: 1.5x slower still fits
    assert _link_lost_s(obs, uplink, 1.5) == 0.0
    # 3x slower: 300 ms, 100 ms past the NIC ports
    assert _link_lost_s(obs, uplink, 3.0) == pytest.approx(0.1)
    # a NIC port among equals: the run as observed exposes 300 ms of communication while the slowed
    # port needs 400 ms (2x) or 800 ms (4x), so part of its bytes move under compute; the exposed part
    # scales with the slowest port's time and would shrink by 200/400 or 200/800 (rules._held_up_s)
    nic = int(np.flatnonzero(TOPO.link_kind == LinkKind.HOST)[0])
    assert _link_lost_s(obs, nic, 2.0) == pytest.approx(0.3 * (1 - 0.2 / 0.4))
    assert _link_lost_s(obs, nic, 4.0) == pytest.approx(0.3 * (1 - 0.2 / 0.8))
    # every byte exposed (an exposed time of the slowed port's own): the whole extra time
    assert _link_lost_s(_obs(exposed_s=0.4), nic, 2.0) == pytest.approx(0.2)


def test_a_lossy_uplink_with_headroom_is_info_from_telemetry():
    uplink = int(np.flatnonzero(TOPO.link_kind == LinkKind.FABRIC)[0])
    errors = np.zeros(TOPO.n_links)
    errors[uplink] = 10
    diagnosis = diagnose_observation(_obs(counters={"symbol_errors": errors}))
    assert diagnosis.top.kind == "link-loss" and diagnosis.top.severity == "info"


def test_a_flap_ranks_by_its_bound_and_stays_info():
    nic = int(np.flatnonzero(TOPO.link_kind == LinkKind.HOST)[0])
    downed = np.zeros(TOPO.n_links)
    downed[nic] = 2
    diagnosis = diagnose_observation(_obs(counters={"link_downed": downed}))
    top = diagnosis.top
    assert (top.kind, top.component, top.severity) == ("link-flap", TOPO.link_name(nic), "info")
    assert top.evidence["cost"].startswith("not measured")


def test_sockets_cost_the_nic_bytes_at_the_proxy_rate():
    """Generic NICs: no helper threads, so each GPU's proxy copies send and receive on one core
    (20 GB/s, transport.socket): 10 GB/s per GPU; 4 GPUs on 4 NICs of 400 Gb/s (50 GB/s): 5x slower."""
    fast = _fabric(nic_speed="400Gbps")
    out = RuleOutput()
    RULES["tcp-fallback"].check(_obs(fast, exposed_s=0.3, per_port_s=0.02, socket_transport=True), out)
    assert out.candidates[0].lost_s == pytest.approx(0.02 * 4)
    out = RuleOutput()  # a job whose network bytes take 1 ms a step loses 4 ms: info
    RULES["tcp-fallback"].check(_obs(fast, exposed_s=0.3, per_port_s=0.001, socket_transport=True), out)
    assert out.candidates[0].lost_s == pytest.approx(0.004)
    assert diagnose_observation(_obs(fast, exposed_s=0.3, per_port_s=0.001, socket_transport=True)).top.severity == "info"



def test_the_socket_proxy_ceiling_holds_per_nic_port_not_per_gpu_behind_it():
    """The proxy copy ceiling is stated per NIC port and direction (transport.profiles, the engine's
    effective capacity): a ring's bytes leave a server through a NIC from the one rank at the server's
    edge. 8 GPUs on 4 NICs of 400 Gb/s: a port of 20 ms at 50 GB/s takes 100 ms at 10 GB/s, not 50 ms
    (two GPUs' ceilings counted as the port's: a 21 % telemetry-only loss read as 0.3 %, seed 12,000,102)."""
    fast = _fabric(nic_speed="400Gbps", gpus=8)
    out = RuleOutput()
    RULES["tcp-fallback"].check(_obs(fast, exposed_s=0.3, per_port_s=0.02, socket_transport=True), out)
    assert out.candidates[0].lost_s == pytest.approx(0.02 * 4)


def _leaf_uplinks(topo) -> np.ndarray:
    return np.array([topo.link_id(name) for name in (topo.link_name(i) for i in range(topo.n_links))
                     if name.startswith("leaf0->spine")])


def test_a_hashed_uplink_costs_only_beyond_the_busiest_nic_port():
    """Per-step totals: a collective waits on its busiest NIC port whatever the routing, so a hot
    uplink costs only the part of its time beyond that port's (max-min fair sharing, Bertsekas &
    Gallager, "Data Networks", 6.5): a healthy MoE run's uplink with twice its siblings' bytes, no
    longer busy than the NIC ports, was rated a 4 % collision warning (seed 15,000,180)."""
    up = _leaf_uplinks(TOPO)
    for hot_s, lost_s in ((0.35, 0.3 * (1 - 0.2 / 0.35)), (0.18, None)):
        obs = _obs()  # NIC ports 200 ms a step
        cap = TOPO.link_capacity_Bps[up]
        obs.link_bytes[up] = 0.1 * cap
        obs.link_bytes[up[0]] = hot_s * cap[0]
        obs.link_bytes[up[1]] = 0.0  # an idle sibling
        out = RuleOutput()
        RULES["ecmp-collision"].check(obs, out)
        if lost_s is None:
            assert out.candidates == []
        else:
            assert out.candidates[0].lost_s == pytest.approx(lost_s)
