"""Issue 14, fresh-case confusions: a fabric's own collision under another fault, and ECMP
polarization named only where one seed everywhere costs time.

The step's loss splits as the fabric's own (healthy against non-blocking with adaptive routing)
plus what a fault adds to the fabric as built (the decomposition the random cases score by,
gpuwait.diagnosis.randomcases): a fabric cause is measured with the other findings fixed.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpuwait.diagnosis import rules
from gpuwait.diagnosis.observe import Observation, observe_run
from gpuwait.diagnosis.run import Finding, diagnose_scenario
from gpuwait.faults import parse_inject
from gpuwait.runner.workload import simulate_workload
from gpuwait.spec import ClusterSpec, Scenario, validate_data
from gpuwait.topology.presets import build_cluster

#: a 3-tier RoCE Clos of 8 servers with 4 NICs each (8-port switches), hashing with one ECMP seed
THREE_TIER = {"preset": "rocev2-400g-2tier", "servers": 8, "server": {"template": "hgx-h100-4nic"},
              "fabric": {"kind": "clos", "tiers": 3, "switch_radix": 8, "leaf_downlinks": 4},
              "transport": {"name": "rocev2"}}


def _scenario(seed: int, workload: dict, jitter: float, compute_seed: int) -> Scenario:
    cluster = {**THREE_TIER, "routing": {"kind": "ecmp", "seed": seed}}
    compute = {"gpu": "H100-SXM", "efficiency": 0.5, "jitter_cv": jitter, "seed": compute_seed}
    return validate_data(Scenario, {"name": "rules5", "cluster": cluster,
                                    "workload": {**workload, "compute": compute, "steps": 2}},
                         source="test", require_units=False)


LLAMA_70B_3D = {"model": {"preset": "llama-70b", "seq_len": 4096},
                "parallel": {"tp": 8, "pp": 4, "micro_batch": 1, "global_batch": 32}}
LLAMA_8B_DP = {"model": {"preset": "llama-8b", "seq_len": 4096},
               "parallel": {"tp": 1, "pp": 1, "zero": 1, "micro_batch": 1, "global_batch": 256}}


def test_gain_fraction_counts_from_the_reference_step():
    f = Finding("ecmp-collision", "leaf0->spine1", "warning", 0.5, {}, "", "", step_time_s=1.0,
                fixed_step_time_s=0.80, reference_step_time_s=0.90)
    assert f.gain_fraction == pytest.approx(0.10)
    assert Finding("nic-down", "s0.nic0", "warning", 1.0, {}, "", "", 1.0, 0.90).gain_fraction == pytest.approx(0.10)


def test_collision_under_a_dead_nic_is_measured_with_the_nic_repaired():
    """The fabric's collisions cost 4.7 % of the healthy step, the dead NIC adds 1.4 %. Re-simulating
    adaptive routing with the NIC still down gave back little (the doubled NIC port, which no
    routing spreads, stays), so the NIC ranked first; measured with the NIC repaired, the fabric's
    own cost is the healthy step against adaptive routing, and it comes first."""
    scenario = _scenario(388, LLAMA_70B_3D, 0.01738867901060425, 335904797)
    diagnosis = diagnose_scenario(scenario, [parse_inject("nic-down:s5.nic1")])
    kinds = [f.kind for f in diagnosis.findings]
    assert kinds[0] == "ecmp-collision" and "nic-down" in kinds
    collision, nic = diagnosis.findings[0], diagnosis.findings[kinds.index("nic-down")]
    # repairing the NIC gives back the healthy step: the collision is measured from there
    assert collision.reference_step_time_s == pytest.approx(diagnosis.baseline_step_time_s, rel=1e-6)
    assert nic.reference_step_time_s is None
    assert collision.gain_fraction > nic.gain_fraction > 0.01


def _polarized_observation(first_stage_bytes: float) -> tuple[Observation, dict]:
    topo = build_cluster(ClusterSpec.model_validate({
        "servers": 16, "server": {"gpus": 4, "nics": 4, "nic_speed": "100Gbps", "pcie_switches": 2, "cpus": 2},
        "fabric": {"tiers": 3, "switch_radix": 8}}))
    second = rules._uplinks_by_switch(Observation(topo), 2)
    first = rules._uplinks_by_switch(Observation(topo), 1)
    link_bytes = np.zeros(topo.n_links)
    for links in second.values():
        link_bytes[links[0]] = 1e9  # one seed everywhere: each spine sends all it forwards up one link
    for links in first.values():
        link_bytes[links] = first_stage_bytes
    rate = topo.link_capacity_Bps.astype(float)
    return Observation(topo, link_bytes=link_bytes, link_rate_Bps=rate, link_nominal_Bps=rate, step_time_s=1.0), second


def test_polarization_costs_the_hot_second_stage_beyond_the_first():
    obs, second = _polarized_observation(first_stage_bytes=0.25e9)
    out = rules.RuleOutput()
    rules.polarization(obs, out)
    [found] = out.candidates
    rate = float(obs.link_rate_Bps[next(iter(second.values()))[0]])
    assert found.lost_s == pytest.approx(1e9 / rate - 0.25e9 / rate)  # spread, the first stage would bound it
    assert found.evidence["idle_core_uplinks"] == sum(len(v) - 1 for v in second.values())


def test_polarization_behind_a_busier_first_stage_costs_nothing():
    """The signature (each spine on one core uplink) is there, but the leaf uplinks carry more: the
    step waits on them, and re-seeding the second stage would give nothing back. The rule named it
    anyway (no cost estimate) and ranked it above the fabric's own collision."""
    obs, _ = _polarized_observation(first_stage_bytes=2e9)
    out = rules.RuleOutput()
    rules.polarization(obs, out)
    assert out.candidates == []


def test_one_seed_everywhere_polarizes_a_simulated_three_tier_fabric():
    """On a simulated 3-tier Clos, one seed everywhere puts each spine's core traffic on one uplink
    (the signature the rule reads); a seed per switch spreads it (Cisco's and Cumulus Linux's ECMP
    guidance: a per-switch seed avoids polarization)."""
    scenario = _scenario(116, LLAMA_8B_DP, 0.0, 1)
    used = {}
    for label, faults in (("polarized", [parse_inject("ecmp-polarization:all")]), ("healthy", [])):
        run = simulate_workload(scenario, faults=faults)
        obs = observe_run(run.topo, run.results[0], run.effects, run.results[0])
        groups = rules._uplinks_by_switch(obs, 2)
        used[label] = [int((obs.link_bytes[g] > 0).sum()) for g in groups.values() if (obs.link_bytes[g] > 0).any()]
    assert len(used["polarized"]) >= 2 and max(used["polarized"]) == 1
    assert max(used["healthy"]) > 1


def test_slow_storage_is_named_from_telemetry_alone():
    """A storage backend at a fifth of its ports' rate: the exported telemetry carries node_exporter's
    disk busy time (the storage servers busy one second per second), so the telemetry-only diagnosis
    names storage-slow; without that series the rule had nothing to read and the case went unnamed."""
    from pathlib import Path

    from gpuwait.diagnosis.accuracy import Case, resolve_inject, scenario_for
    from gpuwait.diagnosis.run import diagnose_observation
    from gpuwait.diagnosis.telemetry import export_metrics, observe_telemetry
    from gpuwait.telemetry.bundle import TelemetryBundle
    from gpuwait.topology.presets import resolve_cluster

    case = Case("roce-storage", "dp-8b-reads", "storage-slow:all:throughput_fraction=0.2", "storage-slow", "storage")
    scenario = scenario_for(case, 0)
    run = simulate_workload(scenario, faults=[parse_inject(resolve_inject(case, scenario))])
    bundle = TelemetryBundle(root=Path("."), metric_files={"export.prom": export_metrics(run)})
    obs = observe_telemetry(bundle, build_cluster(resolve_cluster(run.scenario.cluster)))
    assert obs.storage_busy and set(obs.storage_busy) <= {run.topo.node_name[n] for n in run.topo.storage_server_node}
    top = diagnose_observation(obs).top
    assert (top.kind, top.component, top.severity) == ("storage-slow", "storage", "critical")
    healthy = simulate_workload(scenario)
    bundle = TelemetryBundle(root=Path("."), metric_files={"export.prom": export_metrics(healthy)})
    assert observe_telemetry(bundle, build_cluster(resolve_cluster(scenario.cluster))).storage_busy == ()


def test_storage_contention_costs_the_reads_on_a_shared_link():
    """Dataset reads share a leaf uplink with the job's all-reduce and no GPU waits for data: the reads
    delay the collective (the link's bytes beyond the collective's own are the reads'). The rule estimated
    nothing (the data wait alone), so its fix was ranked last, and adaptive routing, which spreads the reads
    too, took the cause. The delay is max-min's: reads a share u of the link all step leave the collective
    1 - u of it, so its time alone grows by u / (1 - u); charging the reads' whole time on the link instead
    made 465 ms of a storage fix that measured 0.25 ms (dev seed 7)."""
    topo = build_cluster(ClusterSpec.model_validate({
        "servers": 8, "server": {"gpus": 4, "nics": 4, "nic_speed": "100Gbps", "pcie_switches": 2, "cpus": 2},
        "fabric": {"tiers": 2, "switch_radix": 8}}))
    link = int(next(iter(rules._uplinks_by_switch(Observation(topo), 1).values()))[0])
    rate = topo.link_capacity_Bps.astype(float)
    collective = np.zeros(topo.n_links)
    collective[link] = 1e9
    link_bytes = collective.copy()
    link_bytes[link] += 0.5e9  # the reads' bytes on the same link
    zeros = np.zeros(topo.gpu_node.size)
    phases = {"compute": zeros + 1.0, "straggler_wait": zeros, "data_wait": zeros, "exposed_comm": zeros + 0.5}
    obs = Observation(topo, step_time_s=1.5, per_gpu_s=phases, link_bytes=link_bytes, link_rate_Bps=rate,
                      link_nominal_Bps=rate, link_users={link: ["storage read", "dp all_reduce"]},
                      link_phase_bytes={"dp all_reduce": collective}, storage_read=True, storage_busy=())
    out = rules.RuleOutput()
    rules.storage(obs, out)
    [found] = out.candidates
    share = 0.5e9 / rate[link] / 1.5
    late_s = 1e9 / rate[link] * share / (1 - share)
    assert found.lost_s == pytest.approx(late_s)
    assert found.evidence["reads_delay_collectives_ms"] == pytest.approx(round(late_s * 1e3, 2))
    # the explanation states the delay the finding is charged with, whether or not the storage servers are
    # busy (it said only "the GPUs wait 0.00 ms per step ... while the storage servers themselves are not busy")
    assert f"delay the collectives {rules._ms(late_s)} per step" in found.explanation
    assert "not busy" in found.explanation
