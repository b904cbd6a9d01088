"""Fault kinds, --inject parsing and their effect on the fabric (issue 5)."""

from __future__ import annotations

from typing import Literal

import numpy as np
import pytest

from gpuwait.errors import GpuwaitError, SpecError, UnknownNameError
from gpuwait.faults import FAULT_KINDS, apply_faults, parse_inject
from gpuwait.faults.apply import LOSS_RTT_S
from gpuwait.spec import Scenario, validate_data
from tests.faults.conftest import SCENARIO


def test_every_kind_is_registered_with_its_target():
    assert set(FAULT_KINDS) == {"link-degrade", "link-flap", "link-loss", "slow-gpu", "gpu-throttle", "pcie-downtrained",
                                "nic-down", "tcp-fallback",
                                "no-gdr", "nic-affinity", "ecmp-polarization", "storage-contention",
                                "dataloader-starvation", "noisy-neighbor", "storage-slow"}


@pytest.mark.parametrize("text, message", [
    ("link-degrad:leaf0->spine0", "close: link-degrade"),
    ("link-degrade:leaf0->spine0:factor=1.5", "factor = 1.5; expected fraction of the link's speed left"),
    ("link-loss:leaf0->spine0:loss_rate=2", "loss_rate = 2; expected probability"),
    # every packet lost: nothing arrives, yet it ran to a finite step (19 s on 4 servers)
    ("link-loss:leaf0->spine0:loss_rate=1", "loss_rate = 1; expected probability a packet is lost, 0 <= loss_rate < 1"),
    ("link-degrade:leaf0->spine0:facter=0.5", "unknown parameter 'facter' (close: factor)"),
    ("slow-gpu:s0.gpu0:factor=abc", "expected a number"),
])
def test_bad_injections_give_one_clear_error(text, message):
    with pytest.raises(GpuwaitError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        parse_inject(text)


def test_unknown_targets_name_close_matches(topo, scenario):
    with pytest.raises(UnknownNameError, match=r"close: s0\.gpu1"):
        apply_faults(scenario, [parse_inject("slow-gpu:s0.gpu11")], topo)
    with pytest.raises(SpecError, match="is a switch; expected a gpu"):
        apply_faults(scenario, [parse_inject("slow-gpu:leaf0")], topo)
    with pytest.raises(UnknownNameError, match="not cabled together"):
        apply_faults(scenario, [parse_inject("link-degrade:s0.nic0->spine3")], topo)
    # the error says a fault's target asked for the name (a scenario names links and nodes elsewhere too)
    with pytest.raises(UnknownNameError, match=r"^fault link-degrade: target: link 'nolink': expected SRC->DST"):
        apply_faults(scenario, [parse_inject("link-degrade:nolink")], topo)
    with pytest.raises(UnknownNameError, match=r"^fault slow-gpu: target: "):
        apply_faults(scenario, [parse_inject("slow-gpu:s0.gpu11")], topo)


@pytest.mark.parametrize("text", ["tcp-fallback:s0", "storage-contention:s0.gpu0"])
def test_a_target_the_kind_cannot_use_is_refused(topo, scenario, text):
    # issue 20: a whole-job kind given a target used to apply everywhere without a word
    with pytest.raises(SpecError, match=r"is not used; this kind acts on the whole job or fabric"):
        apply_faults(scenario, [parse_inject(text)], topo)
    kind = text.split(":")[0]
    apply_faults(scenario, [parse_inject(kind)], topo)  # no target (= all) is still accepted
    apply_faults(scenario, [parse_inject(f"{kind}:all")], topo)


def test_a_server_target_of_dataloader_starvation_must_exist(topo, scenario):
    # the kind starves one server when given one (issue 14), so a server that is not there is refused
    with pytest.raises(UnknownNameError, match="'s14' does not exist"):
        apply_faults(scenario, [parse_inject("dataloader-starvation:s14")], topo)
    apply_faults(scenario, [parse_inject("dataloader-starvation:s1")], topo)


def test_link_faults_change_both_directions_of_the_cable(topo, scenario):
    _, perturbation = apply_faults(scenario, [parse_inject("link-degrade:leaf0->spine3:factor=0.25")], topo)
    faulty, effects = perturbation.apply(topo)
    forward, back = topo.link_id("leaf0->spine3"), topo.link_id("spine3->leaf0")
    assert faulty.link_capacity_Bps[forward] == pytest.approx(0.25 * topo.link_capacity_Bps[forward])
    assert faulty.link_capacity_Bps[back] == pytest.approx(0.25 * topo.link_capacity_Bps[back])
    changed = np.flatnonzero(faulty.link_capacity_Bps != topo.link_capacity_Bps)
    assert sorted(changed.tolist()) == sorted([forward, back])


def test_a_link_fault_on_a_parallel_cable_changes_that_cable_only(scenario):
    from gpuwait.spec import ClusterSpec
    from gpuwait.topology import build_cluster

    # both ports of a NIC on one leaf: two cables s0.nic0 <-> leaf0; the second one degrades
    two_ports = build_cluster(ClusterSpec(servers=2, server={"template": "dgx-h100", "nic_ports": 2}))
    _, perturbation = apply_faults(scenario, [parse_inject("link-degrade:s0.nic0->leaf0#1:factor=0.25")], two_ports)
    faulty, _ = perturbation.apply(two_ports)
    changed = np.flatnonzero(faulty.link_capacity_Bps != two_ports.link_capacity_Bps)
    assert sorted(two_ports.link_names(changed)) == ["leaf0->s0.nic0#1", "s0.nic0->leaf0#1"]


def test_loss_goodput_is_go_back_n(topo, scenario):
    """Each loss resends the window in flight: goodput = 1 / (1 + p W), W = capacity x RTT / MTU packets."""
    _, perturbation = apply_faults(scenario, [parse_inject("link-loss:leaf0->spine3:loss_rate=0.001")], topo)
    faulty, effects = perturbation.apply(topo, mtu_bytes=4096)
    link = topo.link_id("leaf0->spine3")
    window = topo.link_capacity_Bps[link] * LOSS_RTT_S / 4096
    assert faulty.link_capacity_Bps[link] == pytest.approx(topo.link_capacity_Bps[link] / (1 + 0.001 * window))
    assert effects.loss_rate[link] == 0.001


def test_nic_down_moves_its_gpu_to_the_neighbour(topo, scenario):
    from gpuwait.routing.paths import route_flows

    _, perturbation = apply_faults(scenario, [parse_inject("nic-down:s1.nic2")], topo)
    faulty, effects = perturbation.apply(topo)
    routes = route_flows(faulty, topo.spec.routing, faulty.node_ids(["s1.gpu2"]), faulty.node_ids(["s5.gpu2"]))
    names = [faulty.link_name(int(link)) for link in routes.ordered_links(0, faulty)[0]]
    assert "s1.nic2->" not in " ".join(names) and any(n.startswith("s1.nic3->") for n in names)


def test_scenario_level_faults(topo, scenario):
    changed, _ = apply_faults(scenario, [parse_inject("tcp-fallback"), parse_inject("slow-gpu:s0.gpu3:factor=1.5")], topo)
    assert changed.cluster.transport.name == "tcp"
    assert [(s.rank, s.factor) for s in changed.workload.compute.slow_gpus] == [(3, 1.5)]


def test_tcp_fallback_drops_what_belonged_to_the_rdma_transport(topo, scenario):
    """NCCL's socket transport has no net plugin and no provider rendezvous: a cluster whose RoCE runs under
    nccl-rdma-sharp-plugins (transport.net_plugin: ibext) still falls back to a TCP profile that resolves."""
    from gpuwait.transport import resolve_transport
    transport = scenario.cluster.transport.model_copy(update={"name": "rocev2", "net_plugin": "ibext"})
    with_plugin = scenario.model_copy(update={"cluster": scenario.cluster.model_copy(update={"transport": transport})})
    changed, _ = apply_faults(with_plugin, [parse_inject("tcp-fallback")], topo)
    assert changed.cluster.transport.net_plugin is None
    assert resolve_transport(changed.cluster.transport).name == "tcp"


THREE_TIER = {"preset": "rocev2-400g-2tier", "servers": 8, "routing": {"kind": "ecmp", "seed": 5},
              "server": {"template": "hgx-h100-4nic"},
              "fabric": {"kind": "clos", "tiers": 3, "switch_radix": 8, "leaf_downlinks": 4}}


def test_polarization_sets_one_seed_where_two_hashing_stages_exist():
    from gpuwait.topology.presets import build_cluster

    three = validate_data(Scenario, {**SCENARIO, "cluster": THREE_TIER}, source="test", require_units=False)
    changed, _ = apply_faults(three, [parse_inject("ecmp-polarization")], build_cluster(three.cluster))
    assert changed.cluster.routing.per_switch_seed is False


def test_polarization_is_refused_on_one_hashing_stage(topo, scenario):
    """Issue 14: a leaf-spine hashes once (leaf to spine); one seed everywhere has no second stage to
    repeat the first one's choice, so the fault cannot act there and is refused with the reason."""
    with pytest.raises(SpecError, match="one hashing stage.*fabric.tiers: 3"):
        apply_faults(scenario, [parse_inject("ecmp-polarization")], topo)


def test_nic_down_on_a_gpu_with_two_nics_moves_it_to_its_other_nic():
    """Issue 14: OCI BM.GPU4.8 gives each A100 two 100G NICs. With its second NIC down the GPU
    sent on the dead port and the step took 3.2e8 s; now it keeps its other NIC."""
    from gpuwait.runner.workload import simulate_workload

    oci = validate_data(Scenario, {**SCENARIO, "cluster": {"preset": "oci-a100-roce", "servers": 4},
                                   "workload": {**SCENARIO["workload"], "compute": {"gpu": "A100"}, "steps": 1}},
                        source="test", require_units=False)
    healthy = simulate_workload(oci).results[0].breakdown.step_time_s
    for nic in ("s1.nic0", "s1.nic1"):
        run = simulate_workload(oci, faults=[parse_inject(f"nic-down:{nic}")])
        step = run.results[0].breakdown.step_time_s
        assert healthy <= step < 1.2 * healthy
        assert run.topo.gpu_nic_override[run.topo.node_id("s1.gpu0")] == run.topo.node_id(
            "s1.nic1" if nic == "s1.nic0" else "s1.nic0")


def test_losses_and_flaps_leave_the_negotiated_rate_alone(topo, scenario):
    """A dirty fibre loses packets at full line rate: ``ibstat`` still shows the negotiated rate, so
    the port rate telemetry reports falls only for lanes down (link-degrade) or a dead port."""
    faults = [parse_inject("link-loss:leaf0->spine3:loss_rate=0.01"), parse_inject("link-flap:leaf1->spine2"),
              parse_inject("link-degrade:leaf1->spine1:factor=0.5")]
    _, perturbation = apply_faults(scenario, faults, topo)
    faulty, effects = perturbation.apply(topo)
    changed = np.flatnonzero(effects.port_rate_Bps != topo.link_capacity_Bps)
    assert sorted(topo.link_name(int(link)) for link in changed) == ["leaf1->spine1", "spine1->leaf1"]
    assert faulty.link_capacity_Bps[topo.link_id("leaf0->spine3")] < topo.link_capacity_Bps[topo.link_id("leaf0->spine3")]


def test_every_fault_model_is_a_registered_kind_with_an_effect():
    from gpuwait.spec.faults import FAULT_MODELS, kind_of

    assert [kind_of(m) for m in FAULT_MODELS] == list(FAULT_KINDS)
    for kind in FAULT_KINDS.values():
        assert kind.model.model_json_schema()["properties"]["kind"]["const"] == kind.name
        assert kind.on_scenario is not None or kind.on_fabric is not None


def test_a_kind_without_a_model_in_the_union_cannot_register():
    from gpuwait.faults import register_fault
    from gpuwait.spec.cluster import SpecModel

    class Other(SpecModel):
        kind: Literal["cosmic-ray"]

    with pytest.raises(ValueError, match="not a member"):
        register_fault(Other, "all", on_fabric=lambda damage, fault: None)
    assert "cosmic-ray" not in FAULT_KINDS


def test_scenario_files_list_faults_with_typed_parameters():
    data = {**SCENARIO, "faults": [{"kind": "link-degrade", "target": "leaf0->spine3", "params": {"factor": 0.5}},
                                   {"kind": "tcp-fallback"}, {"kind": "slow-gpu", "target": "s0.gpu1"}]}
    faults = validate_data(Scenario, data, source="test").faults
    assert [type(f).__name__ for f in faults] == ["LinkDegradeFault", "TcpFallbackFault", "SlowGpuFault"]
    assert faults[0].params.factor == 0.5 and faults[2].params.factor == 1.3  # the default
    assert faults[0] == parse_inject("link-degrade:leaf0->spine3:factor=0.5")


@pytest.mark.parametrize("fault, message", [
    ({"kind": "degraded-link"}, r"faults\[0\]: .*kind 'degraded-link' is not a fault kind \(close: link-degrade\)"),
    ({"kind": "link-degrade", "params": {"factor": 2}}, r"faults\[0\]\.link-degrade\.params\.factor: got 2"),
    ({"kind": "link-flap", "params": {"period": 2}}, r"faults\[0\]\.link-flap\.params\.period: got 2; no such field"),
    ({"kind": "nic-down", "params": {"factor": 2}}, r"faults\[0\]\.nic-down\.params\.factor: got 2; no such field"),
    ({"target": "leaf0->spine3"}, r"faults\[0\]: .*a fault needs a `kind`"),
])
def test_bad_faults_in_a_file_name_the_field(fault, message):
    with pytest.raises(SpecError, match=message):
        validate_data(Scenario, {**SCENARIO, "faults": [fault]}, source="test")


def test_the_schema_shows_every_kind_with_its_parameters_and_units():
    defs = Scenario.model_json_schema()["$defs"]
    mapping = Scenario.model_json_schema()["properties"]["faults"]["items"]["discriminator"]["mapping"]
    assert set(mapping) == set(FAULT_KINDS)
    for kind in FAULT_KINDS.values():
        params = defs[kind.model.model_fields["params"].annotation.__name__]
        assert list(params["properties"]) == list(kind.params)
        for name, field in params["properties"].items():
            assert "default" in field and field["description"], (kind.name, name)
