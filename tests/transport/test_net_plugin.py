"""``transport.net_plugin`` and ``NCCL_IBEXT_DISABLE``: bad input is one line naming the field, and the variable
acts only where the plugin that reads it is installed.

NVIDIA/nccl has no ``IBEXT_DISABLE`` parameter (no match in src/ at v2.27.3-1 or v2.30.7-1); it is
Mellanox/nccl-rdma-sharp-plugins' (``src/ib_plugin.c``: ``NCCL_PARAM(IbDisable, "IBEXT_DISABLE", 0)``), so on a
cluster without that plugin NCCL's own IB transport runs whatever it says.
"""

from __future__ import annotations

import pytest

import gpuwait as g
from gpuwait.errors import SpecError
from gpuwait.runner.perf import make_predictor


def test_an_unknown_net_plugin_names_the_field_and_the_choices(tmp_path):
    cluster = tmp_path / "c.yaml"
    cluster.write_text("name: c\nservers: 2\nserver:\n  template: dgx-h100\ntransport:\n  name: infiniband\n"
                       "  net_plugin: sharp\n")
    with pytest.raises(SpecError) as raised:
        g.perf("all_reduce", cluster=str(cluster))
    assert raised.value.problems == ["transport.net_plugin: got 'sharp'; input should be 'none' or 'ibext'"]


def test_a_bad_ibext_disable_value_is_one_line():
    with pytest.raises(SpecError, match=r"^NCCL_IBEXT_DISABLE: got 'yes'; expected 0 or 1"):
        g.perf("all_reduce", servers=2, env={"NCCL_IBEXT_DISABLE": "yes"})


@pytest.mark.parametrize("size", [8, 2**20, 2**28])
def test_ibext_disable_without_the_plugin_changes_nothing(size):
    plain = make_predictor("dgx-h100", 2, 8, [])
    disabled = make_predictor("dgx-h100", 2, 8, ["NCCL_IBEXT_DISABLE=1"])
    assert disabled.transport.name == plain.transport.name == "infiniband"
    assert disabled.estimate("all_reduce", size).time_s == plain.estimate("all_reduce", size).time_s
