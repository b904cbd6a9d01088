"""The GPU-side fault kinds the simulator lacked (issue 14): gpu-throttle (clocks held down, DCGM's
throttle reason bits exported) and pcie-downtrained (a GPU's PCIe link trained at fewer lanes or a
lower generation). Checked against closed forms: a kernel at a fraction f of its clock takes 1/f as
long; a PCIe link carries lanes x the per-lane rate of its generation (PCI-SIG, PCI Express Base
Specification: 32 GT/s x 128/130 / 8 = 3.94 GB/s a lane at Gen5)."""

from __future__ import annotations

import numpy as np
import pytest

from gpuwait.errors import SpecError
from gpuwait.faults import apply_faults, parse_inject
from gpuwait.faults.kinds import PCIE_LANE_Bps, server_pcie_generation
from gpuwait.spec import Scenario, validate_data
from gpuwait.topology.model import LinkKind
from tests.faults.conftest import SCENARIO


def test_throttled_gpu_computes_at_its_clock_share_and_reports_why(topo, scenario):
    fault = parse_inject("gpu-throttle:s2.gpu5:clock_fraction=0.8,reasons=8")
    changed, perturbation = apply_faults(scenario, [fault], topo)
    [slow] = changed.workload.compute.slow_gpus
    assert slow.rank == 2 * 8 + 5 and slow.factor == pytest.approx(1 / 0.8)
    _, effects = perturbation.apply(topo)
    assert effects.gpu_throttle == {topo.node_id("s2.gpu5"): 0x8}  # NVML's HW slowdown bit


def test_downtrained_pcie_link_carries_lanes_times_the_lane_rate(topo, scenario):
    assert server_pcie_generation(topo) == 5  # the preset's 63 GB/s is Gen5 x16
    assert PCIE_LANE_Bps[5] == pytest.approx(32e9 * 128 / 130 / 8)
    for text, gen, lanes in (("pcie-downtrained:s1.gpu2", 5, 8), ("pcie-downtrained:s1.gpu2:generation=3,lanes=16", 3, 16)):
        _, perturbation = apply_faults(scenario, [parse_inject(text)], topo)
        damaged, effects = perturbation.apply(topo)
        gpu = topo.node_id("s1.gpu2")
        pcie = np.flatnonzero(((topo.link_src == gpu) | (topo.link_dst == gpu)) & (topo.link_kind == LinkKind.PCIE))
        assert len(pcie) == 2 and np.allclose(damaged.link_capacity_Bps[pcie], PCIE_LANE_Bps[gen] * lanes)
        assert effects.gpu_pcie == {gpu: (gen, lanes)}
        others = np.setdiff1d(np.flatnonzero(topo.link_kind == LinkKind.PCIE), pcie)
        assert np.array_equal(damaged.link_capacity_Bps[others], topo.link_capacity_Bps[others])


@pytest.mark.parametrize("text, message", [
    ("pcie-downtrained:s0.gpu0:lanes=32", "lanes = 32; expected lanes the GPU's PCIe link trained at"),
    ("gpu-throttle:s0.gpu0:clock_fraction=0", "clock_fraction = 0; expected share of its clocks"),
    ("gpu-throttle:leaf0", "is a switch; expected a gpu"),
])
def test_bad_gpu_faults_give_one_clear_error(topo, scenario, text, message):
    with pytest.raises(SpecError, match=message):
        apply_faults(scenario, [parse_inject(text)], topo)


def test_the_export_carries_the_fault_to_dcgm_series():
    """A simulated run's telemetry shows what dcgm-exporter would: the throttle bits and the trained link."""
    from gpuwait.diagnosis.telemetry import export_metrics
    from gpuwait.runner.workload import simulate_workload

    scenario = validate_data(Scenario, {**SCENARIO, "cluster": {"preset": "rocev2-400g-2tier", "servers": 2},
                                        "workload": {**SCENARIO["workload"], "parallel": {"zero": 1, "global_batch": 16}}},
                             source="test", require_units=False)
    run = simulate_workload(scenario, 2, faults=[parse_inject("gpu-throttle:s1.gpu3:reasons=64"),
                                                 parse_inject("pcie-downtrained:s0.gpu1:lanes=4")])
    metrics = export_metrics(run)

    def value(name, host, gpu):
        chosen = metrics.select(name=name)
        return next(v for lab, v in zip(chosen.labels, chosen.value) if dict(lab) == {"Hostname": host, "gpu": gpu})

    assert value("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "s1", "3") == 64
    assert value("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "s0", "3") == 0
    assert value("DCGM_FI_DEV_PCIE_LINK_WIDTH", "s0", "1") == 4 and value("DCGM_FI_DEV_PCIE_LINK_WIDTH", "s0", "2") == 16
    assert value("DCGM_FI_DEV_PCIE_LINK_GEN", "s0", "1") == 5
