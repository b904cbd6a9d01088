"""Issue 14: ECMP collisions read from each collective's phase, not from per-step byte totals.

Within one collective two flows hashed onto one link keep it busy the whole phase while an
equal-cost sibling finishes early or idles (Al-Fares et al., "Hedera: Dynamic Flow Scheduling for
Data Center Networks", NSDI 2010, section 2: hash collisions cost large flows up to half their
bandwidth while links idle); over the step another collective may load the sibling, so the step's
totals even out. Port counters see the bytes each flow sends, not its rate times the slowest flow's
time, so they are conserved whatever the routing."""

from __future__ import annotations

import numpy as np
import pytest

from gpuwait.diagnosis.observe import Observation, observe_run
from gpuwait.diagnosis.rules import RULES, RuleOutput, _equal_cost_groups
from gpuwait.runner.workload import simulate_workload
from gpuwait.spec import ClusterSpec, Scenario, validate_data
from gpuwait.steps.result import CollectiveStat
from gpuwait.topology.model import LinkKind
from gpuwait.topology.presets import build_cluster

#: a 3-tier RoCE fabric of radix-8 switches (two pods), 8 servers of 8 GPUs and 4 NICs
CLUSTER3 = {"preset": "rocev2-400g-2tier", "servers": 8, "server": {"template": "hgx-h100-4nic"},
            "fabric": {"kind": "clos", "tiers": 3, "switch_radix": 8, "leaf_downlinks": 4},
            "transport": {"name": "rocev2"}}
#: a 3D-parallel job: TP 8 inside each server, 2 pipeline stages, data parallel across the rest
JOB3D = {"model": {"preset": "llama-8b", "seq_len": 4096},
         "parallel": {"tp": 8, "pp": 2, "micro_batch": 1, "global_batch": 64},
         "compute": {"gpu": "H100-SXM", "efficiency": 0.5, "jitter_cv": 0.0, "seed": 1}, "steps": 1}


def _scenario(routing: dict) -> Scenario:
    return validate_data(Scenario, {"name": "3d-on-3-tiers", "cluster": {**CLUSTER3, "routing": routing},
                                    "workload": JOB3D}, source="test", require_units=False)


def _check(obs: Observation) -> RuleOutput:
    out = RuleOutput()
    RULES["ecmp-collision"].check(obs, out)
    return out


def _fabric_link(topo, link: int) -> bool:
    return min(int(topo.node_tier[topo.link_src[link]]), int(topo.node_tier[topo.link_dst[link]])) >= 1


@pytest.fixture(scope="module")
def runs():
    """The job on ECMP with three hash seeds, and on adaptive routing (load-aware: no collisions)."""
    ecmp = {seed: simulate_workload(_scenario({"kind": "ecmp", "seed": seed, "per_switch_seed": True}))
            for seed in (473, 11, 902)}
    return ecmp, simulate_workload(_scenario({"kind": "adaptive"}))


def test_port_bytes_are_conserved_whatever_the_routing(runs):
    """Each collective moves the same bytes through the NIC ports under ECMP and adaptive routing
    (a port counts what its flows send, however long the slowest flow takes)."""
    ecmp, adaptive = runs
    topo = adaptive.topo
    nics = topo.link_kind == LinkKind.HOST
    ideal = adaptive.results[0].links.phase_bytes
    for run in ecmp.values():
        phases = run.results[0].links.phase_bytes
        assert set(phases) == set(ideal)
        for label, sent in phases.items():
            assert sent[nics].sum() == pytest.approx(ideal[label][nics].sum(), rel=1e-9)


def test_hashing_collisions_of_a_3d_job_are_named_on_a_switch_link(runs):
    """The job on ECMP loses time to hashing (its step is longer than on adaptive routing); the rule
    names ecmp-collision on a switch-to-switch link, with a cost of the same order as the loss."""
    ecmp, adaptive = runs
    ideal_s = adaptive.results[0].breakdown.step_time_s
    for seed, run in ecmp.items():
        result = run.results[0]
        loss_s = result.breakdown.step_time_s - ideal_s
        assert loss_s > 0.01 * result.breakdown.step_time_s, seed
        found = _check(observe_run(run.topo, result, run.effects)).candidates
        assert len(found) == 1, seed
        link = run.topo.link_id(found[0].component)
        assert _fabric_link(run.topo, link), found[0].component
        assert found[0].evidence["collective"] in result.links.phase_bytes
        assert found[0].evidence["busy_share_of_phase"] > found[0].evidence["siblings_mean_busy_share"]
        # the estimate counts the hot links alone (what spreading would give back): within a factor 2
        assert 0.5 * loss_s <= found[0].lost_s <= 1.5 * loss_s, (seed, found[0].lost_s, loss_s)


def test_a_balanced_run_is_not_a_collision(runs):
    """Adaptive routing spreads each equal-cost set evenly: nothing to name."""
    _, adaptive = runs
    obs = observe_run(adaptive.topo, adaptive.results[0], adaptive.effects)
    assert obs.link_phase_bytes
    assert not _check(obs).candidates


TOPO3 = build_cluster(ClusterSpec.model_validate({
    "servers": 8, "server": {"gpus": 4, "nics": 4, "nic_speed": "100Gbps", "pcie_switches": 2, "cpus": 2},
    "fabric": {"tiers": 3, "switch_radix": 8, "leaf_downlinks": 4}}))


def _phases(n: int, exposed_s: float) -> dict[str, np.ndarray]:
    zeros = np.zeros(n)
    return {"compute": zeros + 0.5, "straggler_wait": zeros, "data_wait": zeros, "exposed_comm": zeros + exposed_s,
            "bubble": zeros}


def _down_set() -> np.ndarray:
    """The downlinks from the spines into leaf0: an equal-cost set."""
    leaf = TOPO3.node_id("leaf0")
    return next(g for g in _equal_cost_groups(Observation(TOPO3)) if (TOPO3.link_dst[g] == leaf).all())


def test_phase_imbalance_hidden_in_step_totals_is_found():
    """Two collectives: in the first, two flows share one downlink and a sibling idles; in the
    second, the idle sibling carries two flows. The step's totals are even; each phase is not.
    Spread evenly each phase would take half as long on the hot link: half its exposed time is lost."""
    down = _down_set()
    rate = TOPO3.link_capacity_Bps.astype(float)
    a, b = np.zeros(TOPO3.n_links), np.zeros(TOPO3.n_links)
    a[down[:4]] = [2e9, 1e9, 1e9, 0.0]
    b[down[:4]] = [0.0, 1e9, 1e9, 2e9]
    phase_s = 2e9 / rate[down[0]]  # the hot link busy the whole phase
    stats = tuple(CollectiveStat(label, "dp", "all_gather", 8, 1e9, 1, phase_s, 1.0, 1.0, "ring", "Simple")
                  for label in ("dp all_gather", "dp reduce_scatter"))
    common = {"step_time_s": 1.0, "per_gpu_s": _phases(TOPO3.n_gpus, 2 * phase_s), "link_bytes": a + b,
              "link_rate_Bps": rate, "link_nominal_Bps": rate, "collectives": stats,
              "exposed_comm_s": {"dp all_gather": phase_s, "dp reduce_scatter": phase_s}}
    assert not _check(Observation(TOPO3, **common)).candidates  # per-step totals: balanced
    obs = Observation(TOPO3, link_phase_bytes={"dp all_gather": a, "dp reduce_scatter": b}, **common)
    found = _check(obs).candidates
    assert len(found) == 1 and found[0].kind == "ecmp-collision"
    assert found[0].component in (TOPO3.link_name(int(down[0])), TOPO3.link_name(int(down[3])))
    # each phase: the hot link busy 100 %, the set's mean 50 %, no NIC port busier: half lost, twice
    assert found[0].lost_s == pytest.approx(2 * 0.5 * phase_s)


def test_storage_reads_on_downlinks_are_not_a_collision():
    """Dataset reads pile up on the downlinks toward their clients (5 of 7 wrong collision findings of
    a fresh score): with only per-step totals, the sets the reads may cross are left to the storage
    rules, whether the links are labelled with their readers or (telemetry) the job is only known to read."""
    down = _down_set()
    rate = TOPO3.link_capacity_Bps.astype(float)
    carried = np.zeros(TOPO3.n_links)
    carried[down[:4]] = [1e9, 2e9, 1e9, 0.0]
    common = {"step_time_s": 1.0, "per_gpu_s": _phases(TOPO3.n_gpus, 0.3), "link_bytes": carried,
              "link_rate_Bps": rate, "link_nominal_Bps": rate}
    assert _check(Observation(TOPO3, **common)).candidates  # no reads: the job's own bytes, a collision
    assert not _check(Observation(TOPO3, storage_read=True, **common)).candidates
    users = {int(link): ["dp all_reduce", "storage read"] for link in down}
    assert not _check(Observation(TOPO3, link_users=users, **common)).candidates


def test_uplinks_reads_do_not_climb_are_still_read():
    """Reads climb from the storage servers only: a compute leaf's uplinks carry none of them, so
    a collision there is still found while the job reads."""
    leaf = TOPO3.node_id("leaf0")
    up = next(g for g in _equal_cost_groups(Observation(TOPO3)) if (TOPO3.link_src[g] == leaf).all())
    rate = TOPO3.link_capacity_Bps.astype(float)
    carried = np.zeros(TOPO3.n_links)
    carried[up[:4]] = [1e9, 2e9, 1e9, 0.0]
    obs = Observation(TOPO3, step_time_s=1.0, per_gpu_s=_phases(TOPO3.n_gpus, 0.3), link_bytes=carried,
                      link_rate_Bps=rate, link_nominal_Bps=rate, storage_read=True)
    assert [c.component for c in _check(obs).candidates] == [TOPO3.link_name(int(up[1]))]


def test_reads_into_a_readers_nic_do_not_hide_a_collision():
    """The ports into the NICs carry the job's dataset reads, and a 3D job's reads all enter its few
    reading GPUs' NICs (TP rank 0 of the first and last stage): with the reads counted as the job's own
    bytes, the busiest NIC port (the floor no routing relieves) rose past the hot uplink and a 7.4 %
    collision went unnamed (dev seed 30,000,024). The ports out of the NICs, which reads never use, set it."""
    leaf = TOPO3.node_id("leaf0")
    up = next(g for g in _equal_cost_groups(Observation(TOPO3)) if (TOPO3.link_src[g] == leaf).all())
    rate = TOPO3.link_capacity_Bps.astype(float)
    carried = np.zeros(TOPO3.n_links)
    carried[up[:4]] = [1e9, 2e9, 1e9, 0.0]
    nic = TOPO3.nic_node[0, 0]
    into_nic = int(np.flatnonzero((TOPO3.link_dst == nic) & (TOPO3.link_src == leaf))[0])
    carried[into_nic] = 0.9 * rate[into_nic]  # a reader's NIC port 90 % busy with reads, 0.9 s of the 1 s step
    obs = Observation(TOPO3, step_time_s=1.0, per_gpu_s=_phases(TOPO3.n_gpus, 0.3), link_bytes=carried,
                      link_rate_Bps=rate, link_nominal_Bps=rate, storage_read=True)
    assert [c.component for c in _check(obs).candidates] == [TOPO3.link_name(int(up[1]))]


def test_nic_ports_are_the_compute_nics_cables_both_ways():
    """The NIC ports no routing can spread: each compute NIC's cable to its leaf, both directions. A
    NIC node sits on its server's network and its cable on the compute network; selected by the
    ends' networks, the set came out empty."""
    from gpuwait.diagnosis.rules import _nic_ports

    ports = _nic_ports(Observation(TOPO3))
    nics = TOPO3.nic_node.size
    assert len(ports) == 2 * nics
    names = {TOPO3.link_name(int(p)) for p in ports}
    assert TOPO3.link_name(int(TOPO3.nic_uplink[0, 0, 0])) in names


def test_a_hot_uplink_no_busier_than_the_nic_ports_costs_nothing():
    """Within one collective a leaf's downlink set is uneven (one link busy the whole phase, a
    sibling idle), but every NIC port is busy the whole phase too: spreading the set evenly would
    leave the collective waiting on the NIC ports as long, so hashing costs nothing. With the NIC
    ports missed, the imbalance was read as half the phase lost."""
    from gpuwait.diagnosis.rules import _nic_ports

    down = _down_set()
    rate = TOPO3.link_capacity_Bps.astype(float)
    a = np.zeros(TOPO3.n_links)
    a[down[:4]] = [2e9, 1e9, 1e9, 0.0]
    phase_s = 2e9 / rate[down[0]]
    nics = _nic_ports(Observation(TOPO3))
    a[nics] = rate[nics] * phase_s  # every NIC port busy the whole phase
    stats = (CollectiveStat("dp all_gather", "dp", "all_gather", 8, 1e9, 1, phase_s, 1.0, 1.0, "ring", "Simple"),)
    obs = Observation(TOPO3, step_time_s=1.0, per_gpu_s=_phases(TOPO3.n_gpus, phase_s), link_bytes=a,
                      link_rate_Bps=rate, link_nominal_Bps=rate, collectives=stats,
                      exposed_comm_s={"dp all_gather": phase_s}, link_phase_bytes={"dp all_gather": a})
    assert not _check(obs).candidates
    a[nics] *= 0.5  # the NIC ports busy half the phase: the hot link's other half is hashing's
    found = _check(obs).candidates
    assert len(found) == 1 and found[0].lost_s == pytest.approx(0.5 * phase_s)
