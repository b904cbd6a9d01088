"""Fault kinds, --inject parsing and their effect on the fabric (issue 5)."""

from __future__ import annotations

import numpy as np
import pytest

from gpuwait.errors import GpuwaitError, SpecError, UnknownNameError
from gpuwait.faults import FAULT_KINDS, apply_faults, parse_inject
from gpuwait.faults.apply import LOSS_RTT_S
from gpuwait.spec import Scenario, validate_data
from gpuwait.topology.presets import build_preset

SCENARIO = {"cluster": {"preset": "rocev2-400g-2tier", "servers": 8},
            "workload": {"model": {"preset": "llama-8b", "seq_len": 4096},
                         "parallel": {"zero": 1, "global_batch": 64}}}


@pytest.fixture(scope="module")
def topo():
    return build_preset("rocev2-400g-2tier", servers=8)


@pytest.fixture(scope="module")
def scenario():
    return validate_data(Scenario, SCENARIO, source="test", require_units=False)


def test_every_kind_is_registered_with_its_target():
    assert set(FAULT_KINDS) == {"link-degrade", "link-flap", "link-loss", "slow-gpu", "nic-down", "tcp-fallback",
                                "no-gdr", "nic-affinity", "ecmp-polarization", "storage-contention",
                                "dataloader-starvation", "noisy-neighbor"}


@pytest.mark.parametrize("text, message", [
    ("link-degrad:leaf0->spine0", "close: link-degrade"),
    ("link-degrade:leaf0->spine0:factor=1.5", "factor = 1.5; expected fraction of the link's speed left"),
    ("link-loss:leaf0->spine0:loss_rate=2", "loss_rate = 2; expected probability"),
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


def test_link_faults_change_both_directions_of_the_cable(topo, scenario):
    _, perturbation = apply_faults(scenario, [parse_inject("link-degrade:leaf0->spine3:factor=0.25")], topo)
    faulty, effects = perturbation.apply(topo)
    forward, back = topo.link_id("leaf0->spine3"), topo.link_id("spine3->leaf0")
    assert faulty.link_capacity_Bps[forward] == pytest.approx(0.25 * topo.link_capacity_Bps[forward])
    assert faulty.link_capacity_Bps[back] == pytest.approx(0.25 * topo.link_capacity_Bps[back])
    changed = np.flatnonzero(faulty.link_capacity_Bps != topo.link_capacity_Bps)
    assert sorted(changed.tolist()) == sorted([forward, back])


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
    changed, _ = apply_faults(scenario, [parse_inject("tcp-fallback"), parse_inject("slow-gpu:s0.gpu3:factor=1.5"),
                                         parse_inject("ecmp-polarization")], topo)
    assert changed.cluster.transport.name == "tcp"
    assert changed.cluster.routing.per_switch_seed is False
    assert [(s.rank, s.factor) for s in changed.workload.compute.slow_gpus] == [(3, 1.5)]
