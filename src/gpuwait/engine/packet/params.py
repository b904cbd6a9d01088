"""Packet-engine parameters: the typed models live in :mod:`gpuwait.spec.packet` (the scenario's
``packet:`` section); here the engine reads them from a scenario."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuwait.spec.packet import DcqcnSettings, PacketParams, packet_params

if TYPE_CHECKING:
    from gpuwait.spec.scenario import Scenario

__all__ = ["DcqcnSettings", "PacketParams", "packet_params", "scenario_options"]


def scenario_options(scenario: Scenario) -> dict[str, PacketParams]:
    """The packet engine's options a scenario sets: its ``packet:`` section (validated with the scenario)."""
    return {} if scenario.packet is None else {"params": scenario.packet}
