"""The fault tests' shared scenario: an 8-server RoCEv2 leaf-spine running a Llama-8B ZeRO-1 job."""

from __future__ import annotations

import pytest

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
