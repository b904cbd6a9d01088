"""The first chunk's trip through a tree's intra-node hops: one channel's rate, not the search's reservation.

Sources of the expectations:

* NCCL's tree search reserves a speed per channel on the node's links that stays near the NIC's speed
  class (src/graph/search.cc, NVIDIA/nccl v2.30.7-1): 6 GB/s intra beside one 25 Gbit/s interface, 48 GB/s
  beside a 200 Gbit/s Slingshot NIC (``net_tree_graph``).
* One tree channel's ceiling in NCCL's model: ``perChMaxTreeBws`` (Simple) and ``perChMaxTreeLL128Bws``
  (LL128), src/graph/tuning.cc v2.30.7-1: Hopper, 2 nodes, 41.4 and 36.7 GB/s.
* The GH200 board's NVLink between a pair of superchips: 6 NVLink4 links, 150 GB/s per direction (Juelich
  JUPITER configuration page), so a channel's ceiling is what limits the hop, not the link.
* The published CSCS Alps GH200 all_reduce (eth-cscs/cscs-docs docs/software/communication/nccl.md, "All-reduce
  latency", 2 x 4 GH200 over Slingshot): tree/Simple from 2 MiB, measured 292.7 us at 4 MiB and 344.5 us at 8 MiB.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwait.collectives.pipeline import intra_hop_bytes
from gpuwait.collectives.tuning import choose
from gpuwait.runner.perf import make_predictor

CLUSTERS = Path(__file__).resolve().parents[1] / "nccltests" / "data" / "reference" / "clusters"
SLINGSHOT_ENV = {"NCCL_PROTO": "^LL128", "NCCL_NET_GDR_LEVEL": "PHB"}
NVLINK_PAIR_GBps = 150.0


#: the GH200 nodes with one 25 Gbit/s socket interface (the low end of the search's speeds)
ONE_25G = ("name: one-25g\nservers: 2\nserver: {template: gh200-quad, nics: 1, nic_speed: 25Gbps}\n"
           "fabric: {kind: clos, switch_radix: 64}\ntransport: {name: tcp}\n")


@pytest.mark.parametrize(("cluster", "search_intra_GBps"), [("one-25g", 6.0), ("alps-gh200-slingshot", 48.0)])
def test_tree_fill_crosses_nvlink_hops_at_one_channels_ceiling(cluster, search_intra_GBps, tmp_path):
    env = {} if cluster == "one-25g" else SLINGSHOT_ENV
    path = CLUSTERS / f"{cluster}.yaml"
    if cluster == "one-25g":
        path = tmp_path / "one-25g.yaml"
        path.write_text(ONE_25G)
    predictor = make_predictor(str(path), 2, 4, {**env, "NCCL_ALGO": "Tree", "NCCL_PROTO": "Simple"})
    size = 64 * 2**20
    estimate = predictor.estimate("all_reduce", size)
    tree = predictor.tuning_inputs("all_reduce").graph("tree")
    assert (estimate.algorithm, estimate.protocol) == ("tree", "Simple")
    assert tree.bw_intra_GBps == search_intra_GBps
    per_channel_GBps = 41.4  # perChMaxTreeBws, Hopper, 2 nodes
    assert per_channel_GBps < NVLINK_PAIR_GBps
    # 2 (ppn - 1) = 6 hops up and down the node's chain, each the 512 KiB Simple step
    assert estimate.costs.fill_intra_s == pytest.approx(6 * 524288 / (per_channel_GBps * 1e9))
    assert estimate.costs.fill_intra_s < 6 * 524288 / (tree.run_bw_GBps(inter=False) * 1e9)


def test_tree_ll128_fill_uses_the_ll128_channel_ceiling():
    predictor = make_predictor(str(CLUSTERS / "alps-gh200-slingshot.yaml"), 2, 4,
                               {"NCCL_ALGO": "Tree", "NCCL_PROTO": "LL128"})
    estimate = predictor.estimate("all_reduce", 16 * 2**20)
    assert estimate.protocol == "LL128"
    # each hop holds one loop pass of LL128's threads, not the chunk (tests/fabric/test_tree_line_fill.py)
    hop_bytes = intra_hop_bytes("tree", "LL128", estimate.chunk_bytes)
    assert hop_bytes < estimate.chunk_bytes
    assert estimate.costs.fill_intra_s == pytest.approx(6 * hop_bytes / 36.7e9)


def test_ll_and_ring_keep_the_graphs_speed():
    predictor = make_predictor(str(CLUSTERS / "alps-gh200-slingshot.yaml"), 2, 4, {"NCCL_ALGO": "Tree",
                                                                                  "NCCL_PROTO": "LL"})
    estimate = predictor.estimate("all_reduce", 2**20)
    tree = predictor.tuning_inputs("all_reduce").graph("tree")
    hop_bytes = intra_hop_bytes("tree", "LL", estimate.chunk_bytes)
    assert estimate.costs.fill_intra_s == pytest.approx(6 * hop_bytes / (tree.run_bw_GBps(inter=False) * 1e9))
    ring = make_predictor(str(CLUSTERS / "alps-gh200-slingshot.yaml"), 2, 4, {"NCCL_ALGO": "Ring"})
    assert ring.estimate("all_reduce", 2**26).costs.fill_intra_s == 0.0


@pytest.mark.parametrize(("size", "measured_us"), [(4 * 2**20, 292.7), (8 * 2**20, 344.5)])
def test_alps_slingshot_mid_sizes_within_ten_percent(size, measured_us):
    predictor = make_predictor(str(CLUSTERS / "alps-gh200-slingshot.yaml"), 2, 4, SLINGSHOT_ENV)
    inputs = predictor.tuning_inputs("all_reduce")
    assert choose(inputs, size, allowed_protos="^LL128")[:2] == ("tree", "Simple")
    assert predictor.estimate("all_reduce", size).time_s * 1e6 == pytest.approx(measured_us, rel=0.10)
