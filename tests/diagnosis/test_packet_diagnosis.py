"""Packet-level findings (issue 6): head-of-line blocking under PFC, a PFC storm from a slow
receiver, ECN thresholds above the PFC XOFF point, and an ECMP collision read from the run's ports."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from gpuwait.diagnosis.packet import diagnose_packets
from gpuwait.engine.packet import PacketParams, simulate_packets
from gpuwait.spec import RoutingSpec
from gpuwait.transport import TRANSPORTS
from tests.engine.packet.test_packet_engine import fabric, table


def _incast(topo, nics, **params):
    src = np.r_[nics[1:4], nics[1]]
    dst = np.r_[np.full(3, nics[0]), nics[4]]
    return simulate_packets(topo, table(src, dst, 4e6), RoutingSpec(), TRANSPORTS["rocev2"],
                            PacketParams(switch_buffer_bytes=2 * 2**20, **params))


def test_incast_under_pfc_is_head_of_line_blocking():
    topo = fabric()
    nics = topo.nic_node[:, 0].astype(np.int64)
    diagnosis = diagnose_packets(_incast(topo, nics, congestion_control="none"))
    top = diagnosis.top
    assert (top.kind, top.component) == ("hol-blocking", "leaf0->s0.nic0")
    assert top.evidence["worst_slowdown_vs_max_min"] >= 1.5
    # the fix (DCQCN with ECN marking before PFC) is simulated and gives time back
    assert top.fixed_step_time_s < top.step_time_s


def test_ecn_thresholds_above_xoff_are_a_misconfiguration():
    topo = fabric()
    nics = topo.nic_node[:, 0].astype(np.int64)
    run = _incast(topo, nics, ecn_kmin_bytes=50e6, ecn_kmax_bytes=60e6)
    diagnosis = diagnose_packets(run)
    [ecn] = [f for f in diagnosis.findings if f.kind == "ecn-misconfig"]
    assert ecn.evidence["ecn_marked_packets"] == 0
    # its fix (DCQCN marking below XOFF) gives the mean FCT back 7.1 % (a warning), HOL blocking's 28 % on the
    # innocent flow: the ECN thresholds, the root cause, lead. With marks made at enqueue, whose staler signal
    # let the senders cut later, the fixes gave 2.7 % (info, listed after) and 12 %.
    assert (diagnosis.top.kind, ecn.severity) == ("ecn-misconfig", "warning")
    assert [f.severity for f in diagnosis.findings if f.kind == "hol-blocking"] == ["critical"]


def test_a_slow_receiver_spreads_pauses_into_the_fabric():
    topo = fabric(servers=8, radix=8, tiers=2)
    slow = topo.link_id("leaf0->s0.nic0")
    capacity = topo.link_capacity_Bps.copy()
    capacity[slow] *= 0.02  # a receiver draining at 2 % of its rate
    topo = dataclasses.replace(topo, link_capacity_Bps=capacity)
    nics = topo.nic_node[:, 0].astype(np.int64)
    src = nics[4:8]  # the other leaf: the pauses must cross the spines
    run = simulate_packets(topo, table(src, np.full(4, nics[0]), 2e6), RoutingSpec(), TRANSPORTS["rocev2"],
                           PacketParams(switch_buffer_bytes=2 * 2**20, congestion_control="none", max_time_s=0.05))
    kinds = [f.kind for f in diagnose_packets(run, measure_gain=False).findings]
    assert kinds[0] == "pfc-storm"


def test_cli_diagnoses_a_traffic_scenario_packet_by_packet(capsys, tmp_path):
    import json

    from tests.cli.test_cli import run_cli

    path = tmp_path / "incast.yaml"
    path.write_text("""name: incast
cluster:
  servers: 8
  server: {gpus: 1, nics: 1, nic_speed: 100Gbps, pcie_switches: 1, cpus: 1}
  fabric: {tiers: 2, switch_radix: 8}
  transport: {name: rocev2}
traffic:
  patterns:
    - {kind: incast, count: 3, size: 2MB}
""")
    code, out, _ = run_cli(capsys, "diagnose", str(path), "--json")
    assert code == 0
    doc = json.loads(out)
    # DCQCN with the default ECN thresholds handles a small incast: nothing above info
    assert doc["measure"] == "mean flow completion time"
    assert all(f["severity"] == "info" for f in doc["findings"])


INCAST_YAML = """name: incast-hol
cluster:
  servers: 8
  server: {gpus: 1, nics: 1, nic_speed: 100Gbps, pcie_switches: 1, cpus: 1}
  fabric: {tiers: 2, switch_radix: 8}
  transport: {name: rocev2}
packet: {congestion_control: none, switch_buffer_bytes: 2097152}
traffic:
  flows:
    - {src: s1.nic0, dst: s0.nic0, size: 4MB}
    - {src: s2.nic0, dst: s0.nic0, size: 4MB}
    - {src: s3.nic0, dst: s0.nic0, size: 4MB}
    - {src: s1.nic0, dst: s4.nic0, size: 4MB}
"""


def test_scenario_packet_section_reaches_the_engine(capsys, tmp_path):
    import json

    from tests.cli.test_cli import run_cli

    path = tmp_path / "incast.yaml"
    path.write_text(INCAST_YAML)
    code, out, _ = run_cli(capsys, "diagnose", str(path), "--json")
    top = json.loads(out)["findings"][0]
    assert (top["kind"], top["component"]) == ("hol-blocking", "leaf0->s0.nic0")
    assert top["expected_gain_fraction"] > 0.03  # the innocent flow gets time back with DCQCN on
    path.write_text(INCAST_YAML.replace("congestion_control:", "congestion_contrl:"))
    code, _, err = run_cli(capsys, "validate", str(path))
    assert code == 2 and "congestion_contrl" in err.splitlines()[0]


def test_ecmp_collision_read_from_a_packet_run(capsys, tmp_path):
    """examples/ecmp-collision.yaml, smaller: 8 flows between two leaves hashed by ECMP onto 8
    uplinks, two of which carry two flows while two carry none (the published pathology the
    example documents); more QPs per connection spread them, and the rerun measures it."""
    import json

    from tests.cli.test_cli import run_cli

    example = (Path(__file__).parents[2] / "examples" / "ecmp-collision.yaml").read_text()
    path = tmp_path / "collision.yaml"
    path.write_text(example.replace("size: 1GB", "size: 64MB"))
    code, out, _ = run_cli(capsys, "diagnose", str(path), "--json")
    assert code == 0
    top = json.loads(out)["findings"][0]
    assert top["kind"] == "ecmp-collision" and top["component"].startswith("leaf0->spine")
    assert top["evidence"]["hottest_uplink_vs_typical"] >= 1.5  # two flows where the others carry one
    assert top["expected_gain_fraction"] > 0.03


def test_traffic_without_a_hotspot_leaves_the_packet_rules_silent():
    """One flow per receiver: no queue builds, so no pauses (below PAUSED_SHARE and STORM_SHARE) and
    no marks to miss: ecn-misconfig, pfc-storm and hol-blocking stay silent."""
    topo = fabric()
    nics = topo.nic_node[:, 0].astype(np.int64)
    run = simulate_packets(topo, table(nics[0:3], nics[4:7], 1e6), RoutingSpec(), TRANSPORTS["rocev2"],
                           PacketParams(switch_buffer_bytes=2 * 2**20, congestion_control="none"))
    kinds = {f.kind for f in diagnose_packets(run, measure_gain=False).findings}
    assert kinds.isdisjoint({"ecn-misconfig", "pfc-storm", "hol-blocking"})


def test_a_packet_diagnosis_is_labelled_with_its_case_as_a_flow_diagnosis_is():
    """The head line read "packet run: mean flow completion time ..."; a workload's diagnosis names its case
    ("RoCEv2, ECMP"), and so does a traffic scenario's, its variants by their own names."""
    topo = fabric()
    nics = topo.nic_node[:, 0].astype(np.int64)
    run = _incast(topo, nics)
    assert diagnose_packets(run, measure_gain=False).case == "RoCEv2, ECMP"
    run.labels["name"] = "deeper buffers"
    assert diagnose_packets(run, measure_gain=False).case == "deeper buffers"


def test_a_negligible_packet_finding_ranks_below_one_whose_fix_gives_back_more(monkeypatch):
    """Packet findings were ordered by kind alone: an ECN misconfiguration whose fix gives back 1 % (info,
    negligible: a packet diagnosis's warning starts at 3 %) stayed the top finding above an ECMP collision giving back 10 %, while the conclusion named
    the collision the main cause. As in a step diagnosis, a negligible finding now ranks after the others
    (kind order within each group)."""
    from gpuwait.diagnosis import packet
    from gpuwait.diagnosis.rules import RULES, Candidate
    from gpuwait.report.conclusion import diagnosis_conclusion

    topo = fabric()
    nics = topo.nic_node[:, 0].astype(np.int64)
    run = _incast(topo, nics, ecn_kmin_bytes=50e6, ecn_kmax_bytes=60e6)
    collision = Candidate("ecmp-collision", "leaf0->spine1", 1.0, {}, "two flows hash", "spread them")
    assert RULES["ecmp-collision"].fix.routing is not None  # its fix reruns with another routing
    monkeypatch.setattr(packet, "_routing_candidates", lambda r: [collision])
    monkeypatch.setattr(packet, "simulate_packets",
                        lambda topo, flows, routing, transport, params: ("rerun", routing == run.routing))
    # the original run's mean FCT 1; the ECN fix (same routing) 0.99, the routing fix 0.9
    monkeypatch.setattr(packet, "_mean_fct", lambda r, flows=None: 1.0 if r is run else (0.99 if r[1] else 0.9))
    diagnosis = diagnose_packets(run)
    # the incast's innocent flow adds HOL blocking, rerun with the routing kept: 1 % too
    assert [(f.kind, f.severity) for f in diagnosis.findings] == [
        ("ecmp-collision", "warning"), ("ecn-misconfig", "info"), ("hol-blocking", "info")]
    assert diagnosis.top.kind == "ecmp-collision"
    assert diagnosis_conclusion(diagnosis).numbers["causes"][0]["kind"] == "ecmp-collision"


def test_the_packet_findings_table_says_how_it_is_ordered(capsys, tmp_path):
    """A packet diagnosis lists its findings root cause first (ECN, PFC storm, HOL blocking, collision,
    oversubscription), negligible ones last; its table was titled 'by the gain of their fix', a step
    diagnosis's order."""
    from tests.cli.test_cli import run_cli

    path = tmp_path / "incast.yaml"
    path.write_text(INCAST_YAML)
    code, out, _ = run_cli(capsys, "diagnose", str(path), "--no-gain")
    assert code == 0 and "Findings, root cause first" in out and "by the gain of their fix" not in out
    inject = ("--inject", "link-degrade:leaf0->spine21:factor=0.25")
    code, out, _ = run_cli(capsys, "diagnose", "examples/dp-only.yaml", *inject)
    assert code == 0 and "Findings, by the gain of their fix" in out
    # --no-gain re-simulates no fix: the findings rank by their rules' estimates (it said 'by the gain')
    code, out, _ = run_cli(capsys, "diagnose", "examples/dp-only.yaml", "--no-gain", *inject)
    assert code == 0 and "Findings, by the cost their rules estimate" in out
