"""Issue 14, the random-case misses of the fresh score on seeds 2,000,000-2,000,239: one test each,
a small scenario where the old rule missed and the rule now names the cause and its component."""

from __future__ import annotations

import numpy as np

from gpuwait.diagnosis import rules
from gpuwait.diagnosis.accuracy import Case, fabric_link, scenario_for
from gpuwait.diagnosis.observe import Observation
from gpuwait.diagnosis.rules import RULES, RuleOutput
from gpuwait.diagnosis.run import diagnose_observation
from gpuwait.spec import ClusterSpec
from gpuwait.topology.model import LinkKind
from gpuwait.topology.presets import build_cluster

#: 3 tiers of radix-8 switches, one 4-NIC server per leaf: two pods of four leaves and four spines
TOPO3 = build_cluster(ClusterSpec.model_validate({
    "servers": 8, "server": {"gpus": 4, "nics": 4, "nic_speed": "100Gbps", "pcie_switches": 2, "cpus": 2},
    "fabric": {"tiers": 3, "switch_radix": 8, "leaf_downlinks": 4}}))


def _check(name: str, obs: Observation) -> RuleOutput:
    out = RuleOutput()
    RULES[name].check(obs, out)
    return out


def _into(switch: str) -> np.ndarray:
    """The links coming down into ``switch`` from the tier above."""
    dst = TOPO3.node_id(switch)
    return np.flatnonzero((TOPO3.link_dst == dst) & (TOPO3.node_tier[TOPO3.link_src] > TOPO3.node_tier[dst])
                          & (TOPO3.link_kind == LinkKind.FABRIC))


def _phases(n: int, exposed_s: float) -> dict[str, np.ndarray]:
    zeros = np.zeros(n)
    return {"compute": zeros + 0.5, "straggler_wait": zeros, "data_wait": zeros, "exposed_comm": zeros + exposed_s,
            "bubble": zeros}


def test_a_collision_on_the_core_to_spine_downlinks_is_found():
    """18 of 34 missed 3-tier collisions: the rule read leaf uplinks only. Two flows hashed onto
    core1 -> spine0 while core3 -> spine0 idles, every uplink balanced: the collision is named on
    the downlink, and accuracy counts any switch-to-switch link as a collision's place."""
    down = _into("spine0")
    assert len(down) == 4
    carried = np.zeros(TOPO3.n_links)
    carried[down] = [1e9, 2e9, 1e9, 0.0]  # bytes per step: one flow, two flows, one flow, none
    rate = TOPO3.link_capacity_Bps.astype(float)
    obs = Observation(TOPO3, step_time_s=1.0, per_gpu_s=_phases(TOPO3.n_gpus, 0.3), link_bytes=carried,
                      link_rate_Bps=rate, link_nominal_Bps=rate)
    found = _check("ecmp-collision", obs).candidates
    assert [c.component for c in found] == [TOPO3.link_name(int(down[1]))]
    assert found[0].component.startswith("core") and fabric_link(found[0].component)
    # the cost: the second flow's bytes at the link's rate (1 GB at 12.5 GB/s), under the exposed time
    assert found[0].lost_s == min(1e9 / rate[down[1]], 0.3 * 0.5)
    assert not fabric_link("s0.nic1->leaf0") and fabric_link("spine3->leaf2#1")


def test_a_collision_on_the_spine_to_leaf_downlinks_is_found():
    down = _into("leaf5")
    carried = np.zeros(TOPO3.n_links)
    carried[down] = [0.0, 2e9, 1e9, 1e9]
    rate = TOPO3.link_capacity_Bps.astype(float)
    obs = Observation(TOPO3, step_time_s=1.0, per_gpu_s=_phases(TOPO3.n_gpus, 0.3), link_bytes=carried,
                      link_rate_Bps=rate, link_nominal_Bps=rate)
    assert [c.component for c in _check("ecmp-collision", obs).candidates] == [TOPO3.link_name(int(down[1]))]


def test_pcie_generation_read_with_noise_is_the_whole_generation():
    """A healthy Gen5 x16 link scraped as 4.97 (noise, or a mean over a window) was read as Gen4,
    half the rate, and named downtrained: 4 false alarms in 60 telemetry-heavy development cases."""
    gpus = [int(g) for g in TOPO3.gpu_node.ravel()[:8]]
    pcie = {g: (5.0 * (1 + 0.006 * (-1) ** i), 16.0 * (1 - 0.004 * (-1) ** i)) for i, g in enumerate(gpus)}
    assert _check("pcie-downtrained", Observation(TOPO3, gpu_pcie=pcie)).candidates == []
    pcie[gpus[3]] = (4.02, 15.97)  # a Gen4 x16 link among Gen5 ones is still found
    found = _check("pcie-downtrained", Observation(TOPO3, gpu_pcie=pcie)).candidates
    assert [c.component for c in found] == [TOPO3.node_name[gpus[3]]]


def test_no_gdr_costs_the_nic_bytes_at_the_host_staged_rate():
    """no-gdr had no cost estimate, so from telemetry it was rated by how sure it was: a warning on
    a job it cost nothing. Staged through host memory a NIC moves at most half the PCIe bandwidth;
    the cost is its bytes at that rate beyond its own, none when the NIC is the slower."""
    topo = build_cluster(scenario_for(Case("ib-rail-ar", "dp-8b", None, None)).cluster)
    ports = rules._host_nic_links(Observation(topo))
    rate = topo.link_capacity_Bps.astype(float)
    staged = topo.spec.server.pcie_bandwidth / 2
    assert staged < rate[ports].max()  # a 400 Gb/s NIC behind a Gen5 x16 switch
    carried = np.zeros(topo.n_links)
    carried[ports] = 1e9
    obs = Observation(topo, step_time_s=1.0, per_gpu_s=_phases(topo.n_gpus, 0.5), link_bytes=carried,
                      link_rate_Bps=rate, link_nominal_Bps=rate, gdr_off_servers=(2,))
    found = _check("no-gdr", obs).candidates
    port = int(ports[0])
    expected = 1e9 / rate[port] * (rate[port] / staged - 1)
    assert found[0].component == "s2" and np.isclose(found[0].lost_s, expected)
    quiet = Observation(topo, step_time_s=10.0, per_gpu_s=_phases(topo.n_gpus, 0.5), link_bytes=carried,
                        link_rate_Bps=rate, link_nominal_Bps=rate, gdr_off_servers=(2,), socket_transport=False,
                        remote_nic_gpus=())
    assert [f.severity for f in diagnose_observation(quiet).findings if f.kind == "no-gdr"] == ["info"]
