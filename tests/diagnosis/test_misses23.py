"""The misses of the 20,000,000 and 21,000,000 interim fresh scores (issue 14): each fix on a small
case the old rules got wrong."""

from __future__ import annotations

import numpy as np
import pytest

from gpuwait.diagnosis import rules
from gpuwait.diagnosis.observe import Observation
from gpuwait.spec import ClusterSpec
from gpuwait.topology.presets import build_cluster

TOPO = build_cluster(ClusterSpec.model_validate({
    "servers": 4, "server": {"gpus": 4, "nics": 4, "nic_speed": "100Gbps", "pcie_switches": 2, "cpus": 2},
    "fabric": {"tiers": 2, "switch_radix": 8}, "storage": {"mode": "converged", "storage_servers": 4}}))
N_GPUS = TOPO.gpu_node.size
STORAGE = [TOPO.node_name[n] for n in TOPO.storage_server_node]


def _storage_obs(port_share: dict[str, float], busy: tuple[str, ...], data_wait_s: float) -> Observation:
    """A 1 s step whose GPUs wait ``data_wait_s`` for data while each storage server's port sends
    ``port_share`` of its negotiated rate and the servers ``busy`` show their disks busy all the time."""
    rate = TOPO.link_capacity_Bps.astype(float)
    carried = np.zeros(TOPO.n_links)
    for name, share in port_share.items():
        ports = np.flatnonzero(TOPO.link_src == TOPO.node_id(name))
        carried[ports] = share * rate[ports]
    zeros = np.zeros(N_GPUS)
    phases = {"compute": zeros + 1.0 - data_wait_s, "straggler_wait": zeros, "data_wait": zeros + data_wait_s,
              "exposed_comm": zeros}
    return Observation(TOPO, step_time_s=1.0, per_gpu_s=phases, storage_read=True, storage_busy=busy,
                       link_bytes=carried, link_rate_Bps=rate, link_nominal_Bps=rate,
                       gpu_names=[TOPO.node_name[g] for g in TOPO.gpu_node.ravel()])


def _storage_slow(obs: Observation) -> list[rules.Candidate]:
    out = rules.RuleOutput()
    rules.storage_slow(obs, out)
    return out.candidates


def test_storage_short_as_a_tier_is_named_storage_not_the_port_that_filled_first():
    """Reads asking 4x what the storage servers can send (seed 20,000,004): two of four ports fill to
    98 %, two stay at 78-82 % (their paths differ). The servers are healthy, sending at their rate;
    the tier is short, and the finding named stor2, the first full port, where the scorer (and an
    operator adding servers) expects the storage tier."""
    shares = dict(zip(STORAGE, (0.82, 0.78, 0.98, 0.98)))
    found = _storage_slow(_storage_obs(shares, (), 0.5))
    assert [(c.kind, c.component) for c in found] == [("storage-slow", "storage")]
    # the telemetry shows the full ports' disks busy too (seed 20,000,239): still the tier
    found = _storage_slow(_storage_obs(shares, (STORAGE[2], STORAGE[3]), 0.5))
    assert [(c.kind, c.component) for c in found] == [("storage-slow", "storage")]


def test_one_slow_backend_is_named_by_its_server():
    """One server's backend slowed (its disk busy all the time, its port sending a fifth of its rate):
    that server is the one to repair, and it is named."""
    shares = dict(zip(STORAGE, (0.3, 0.2, 0.3, 0.3)))
    found = _storage_slow(_storage_obs(shares, (STORAGE[1],), 0.3))
    assert [(c.kind, c.component, c.direct) for c in found] == [("storage-slow", STORAGE[1], True)]


def test_a_data_wait_with_no_busy_storage_server_still_suspects_the_storage():
    """Seed 21,000,103: the GPUs waited 990 ms for data while every storage port sat at 72-80 % of its
    rate; more storage servers gave the step back, but storage-slow was never proposed, so its fix was
    never measured. It is proposed, inferred (not direct), and costs the data wait."""
    shares = dict(zip(STORAGE, (0.74, 0.72, 0.80, 0.78)))
    found = _storage_slow(_storage_obs(shares, (), 0.3))
    assert [(c.kind, c.component, c.direct) for c in found] == [("storage-slow", "storage", False)]
    assert found[0].lost_s == pytest.approx(0.3)
    assert _storage_slow(_storage_obs(shares, (), 0.001)) == []  # a wait that does not matter


def test_a_degraded_nic_port_does_not_hide_the_fabrics_collision():
    """Seed 21,000,066: a NIC port negotiated at 39 % of its rate took longer than the hot uplink, set
    the floor a collision is measured against, and hid the fabric's 9.2 % collision behind a 0.7 %
    link-degrade. The NIC port counts at its nominal rate (the degrade is its own finding)."""
    from gpuwait.topology.model import LinkKind

    rate = TOPO.link_capacity_Bps.astype(float)
    nic = int(np.flatnonzero((TOPO.link_kind == LinkKind.HOST) & ~np.isin(TOPO.link_src, TOPO.storage_server_node)
                             & ~np.isin(TOPO.link_dst, TOPO.storage_server_node))[0])
    carried = np.zeros(TOPO.n_links)
    carried[nic] = 0.1 * rate[nic]  # 0.1 s at its nominal rate
    negotiated = rate.copy()
    negotiated[nic] *= 0.39
    obs = Observation(TOPO, step_time_s=1.0, link_bytes=carried, link_rate_Bps=negotiated, link_nominal_Bps=rate)
    assert rules._busiest_nic_port_s(obs) == pytest.approx(0.1)
