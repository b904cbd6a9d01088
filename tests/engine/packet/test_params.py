"""The typed ``packet:`` section: defaults shared with the transport profiles, one error naming the
field, and the engine taking the section as it was validated."""

from __future__ import annotations

import dataclasses

import pytest

from gpuwait.engine.packet.params import scenario_options
from gpuwait.errors import SpecError
from gpuwait.spec.load import validate_data
from gpuwait.spec.packet import DcqcnSettings, PacketParams
from gpuwait.spec.scenario import Scenario
from gpuwait.transport.profiles import DcqcnParams


def test_dcqcn_defaults_are_the_transport_profiles():
    assert DcqcnSettings().model_dump() == dataclasses.asdict(DcqcnParams())


def test_scenario_packet_section_is_typed():
    scenario = validate_data(Scenario, {"packet": {"switch_buffer_bytes": 2e6, "dcqcn": {"g": 0.01}}})
    assert isinstance(scenario.packet, PacketParams)
    assert scenario.packet.dcqcn == DcqcnSettings(g=0.01)
    assert scenario_options(scenario) == {"params": scenario.packet}
    assert scenario_options(validate_data(Scenario, {})) == {}


@pytest.mark.parametrize(("section", "field"), [
    ({"switch_buffer_bytes": -1}, "packet.switch_buffer_bytes"),
    ({"flow_control": "xon"}, "packet.flow_control"),
    ({"dcqcn": {"g": 2}}, "packet.dcqcn.g"),
    ({"ecn_kmin_bytes": 5e3, "ecn_kmax_bytes": 1e3}, "packet.ecn_kmin_bytes"),
    ({"no_such_knob": 1}, "packet.no_such_knob"),
])
def test_bad_values_give_one_error_naming_the_field(section, field):
    with pytest.raises(SpecError) as err:
        validate_data(Scenario, {"packet": section}, source="s.yaml")
    assert "1 problem" in str(err.value) and field in str(err.value)
