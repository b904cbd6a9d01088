"""What NCCL's own tuning picks on CSCS Alps GH200 nodes, against the published CSCS tables.

Sources of the expectations:

* NCCL's cost model, src/graph/tuning.cc (NVIDIA/nccl v2.25.1-1 and v2.30.7-1, the same formulas here):
  Ring/LL busBw = min(llMaxBw, 0.5 x nChannels x bw), llMaxBws row 0 for a host that is neither AMD nor
  mixed (Grace: the topology leaves an Arm CPU's vendor undefined, src/graph/topo.cc) = 39 GB/s at 2 nodes;
  Tree/Simple latency base 8.4 + 2 x (3 x 4.0 NVLink + 14.0 network) = 60.4 us, Ring/LL 6.6 + 12 x 1.0
  (getNetOverhead on a non-x86 host) + 2 x 2.7 = 24.0 us.
* aws-ofi-nccl reports the network latency as 0 off AWS (``OFI_NCCL_NET_LATENCY`` default,
  include/nccl_ofi_param.h) and the port speed libfabric's CXI provider gives (``/sys/class/net/<if>/speed``
  x 1e6 bit/s, prov/cxi/src/cxip_nic.c, ofiwg/libfabric v1.22.0): 200 Gbit/s per Slingshot-11 NIC, four per
  node. NCCL's socket transport reads the same speed for the hsn interfaces (ncclNetSocketGetProperties).
* The CSCS container template is nvidia/cuda:12.8.1-cudnn-devel-ubuntu24.04 (eth-cscs/cscs-docs
  docs/software/communication/dockerfiles/base), whose bundled NCCL is of the 2.25 line (2.25.1 in the
  12.8.0 images).
* The published tables (eth-cscs/cscs-docs docs/software/communication/nccl.md): with CXI, 512 KiB 170.3 us,
  1 MiB 164.3 us, 2 MiB 182.1 us; without CXI, 1 MiB 1502.2 us, 2 MiB 921.8 us -- the LL-to-Simple switch
  between 1 and 2 MiB.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwait.collectives.tuning import cost_table
from gpuwait.runner.perf import make_predictor

CLUSTERS = Path(__file__).resolve().parents[1] / "nccltests" / "data" / "reference" / "clusters"
SLINGSHOT = str(CLUSTERS / "alps-gh200-slingshot.yaml")
HOOK_ENV = {"NCCL_PROTO": "^LL128", "NCCL_NET_GDR_LEVEL": "PHB"}
MiB = 2**20


@pytest.mark.parametrize("version", ["2.25.1", "2.30.7"])
def test_nccls_model_runs_ring_ll_to_1_mib_and_tree_simple_from_2_mib(version):
    predictor = make_predictor(SLINGSHOT, 2, 4, HOOK_ENV, version)
    inputs = predictor.tuning_inputs("all_reduce")
    assert predictor.transport.nccl_net_latency_s == 0.0  # aws-ofi-nccl off AWS
    table = cost_table(inputs, MiB)
    assert table["ring", "LL"].latency_us == pytest.approx(24.0)
    assert table["tree", "Simple"].latency_us == pytest.approx(60.4)
    assert table["ring", "LL"].bus_bw_GBps == pytest.approx(39.0)  # llMaxBws row 0, 2 nodes
    assert table["ring", "LL"].time_us < table["tree", "Simple"].time_us
    choices = {size: predictor.estimate("all_reduce", size) for size in (MiB // 2, MiB, 2 * MiB)}
    assert [(e.algorithm, e.protocol) for e in choices.values()] == [("ring", "LL"), ("ring", "LL"),
                                                                     ("tree", "Simple")]


def test_the_measured_512k_and_1m_are_the_same_count_of_ll_messages():
    """Ring/LL's step count per connection does not grow from 512 KiB to 1 MiB (8 channels, 14 steps each);
    only the step's bytes double. The table's 170.3 and 164.3 us are flat in size, as a cost per message
    would make them, where the model's wire time doubles."""
    predictor = make_predictor(SLINGSHOT, 2, 4, HOOK_ENV)
    half, whole = (predictor.estimate("all_reduce", size) for size in (MiB // 2, MiB))
    assert half.costs.nic_messages == whole.costs.nic_messages
    assert whole.chunk_bytes == 2 * half.chunk_bytes
    assert whole.costs.wire_s == pytest.approx(2 * half.costs.wire_s)
    assert abs(164.3 / 170.3 - 1) < 0.05


def test_four_200g_socket_interfaces_put_the_switch_where_the_no_cxi_table_has_it(tmp_path):
    """NCCL's socket transport over the four hsn interfaces (200 Gbit/s each as NCCL reads them) switches
    from LL to Simple between 1 and 2 MiB, as the no-CXI table does, and so does the reference's description
    (alps-gh200-nocxi.yaml: those four devices, held to the rate CSCS measured on the path): a ceiling on the
    ports is not what NCCL reads. One 25 Gbit/s device, the earlier description, switches at 128 KiB."""
    for predictor in (make_predictor(SLINGSHOT, 2, 4, {"NCCL_NET": "Socket"}),
                      make_predictor(str(CLUSTERS / "alps-gh200-nocxi.yaml"), 2, 4, {})):
        assert predictor.transport.name == "tcp" and predictor._node_nics() == 4
        assert predictor.estimate("all_reduce", MiB).protocol == "LL"
        assert predictor.estimate("all_reduce", 2 * MiB).protocol == "Simple"
    one_path = tmp_path / "one-path.yaml"
    one_path.write_text("name: one-path\nservers: 2\nserver: {template: gh200-quad, nics: 1, nic_speed: 25Gbps}\n"
                        "fabric: {kind: clos, switch_radix: 64}\ntransport: {name: tcp}\n")
    assert make_predictor(str(one_path), 2, 4, {}).estimate("all_reduce", 128 * 1024).protocol == "Simple"
