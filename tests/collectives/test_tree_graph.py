"""NCCL's tree graph between nodes and the Tree / NVLSTree choice it leads to, against NCCL's source and logs.

References (public sources, see docs/sources.md):
- NVIDIA/nccl v2.26.2-1 src/init.cc: ``treeGraph->minChannels = treeGraph->maxChannels =
  ringGraph->nChannels`` (the tree search runs at the ring search's channel count); src/graph/connect.cc
  ``ncclTopoPostset``: ``comm->nChannels = min(MAXCHANNELS, nChannels*2)`` (the kernels run twice the
  search's channels); src/graph/search.cc ``sm90SpeedArrayInter`` and pass 2 "increase bwIntra for trees";
  src/graph/tuning.cc: busBw = ``graphs[a]->nChannels`` x ``bwInter`` beyond 2 nodes, Tree LL128 capped at
  ``nChannels * perChMaxTreeLL128Bw`` (Hopper N4: 29.0 GB/s per channel).
- NVIDIA/nccl#1752: NCCL's per-size choices on 64 x 8 H200: ``16777216 Bytes -> Algo TREE proto LL128
  channel{Lo..Hi}={0..15}``, ``33554432 Bytes -> Algo NVLS_TREE proto SIMPLE channel{Lo..Hi}={0..15}``
  (copied to tests/data/nccl_choices/nccl1752-64x8-h200.yaml).
- NVIDIA/nccl#1649 (maintainer, 2025-03-20): Tree "would require 32 SMs" to reach NVLSTree's bandwidth, so
  at NCCL's default channel count "Tree usually achieves significantly lower bandwidth than NVLSTree".
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpuwait.collectives.communicator import Communicator
from gpuwait.collectives.nccl_versions import nccl_release
from gpuwait.collectives.ncclenv import parse_env
from gpuwait.collectives.tuning import Graph, choose, inter_speeds, net_tree_graph, nvlink_bw_GBps, predict
from gpuwait.errors import SpecError
from gpuwait.fabric.perf import CollectivePredictor
from gpuwait.spec import ClusterSpec, RoutingSpec
from gpuwait.topology.presets import build_cluster
from gpuwait.transport import TRANSPORTS

MiB = 2**20
DATA = Path(__file__).resolve().parents[1] / "data" / "nccl_choices"


def _predictor(servers: int, version: str, transport: str = "infiniband") -> CollectivePredictor:
    # DGX H100: 8 SM90 GPUs, 18 NVLink4 links, 8 x 400G NICs; an 8 x H200 server has the same GPU
    # architecture, NVLink and (on the cluster of nccl#1752, Ethernet) 400G NICs
    topo = build_cluster(ClusterSpec.model_validate({"preset": "dgx-h100", "servers": servers}))
    return CollectivePredictor.create(Communicator.world(topo), parse_env({}).with_version(version), RoutingSpec(),
                                      TRANSPORTS[transport])


# ------------------------------------------------------------------------------------------ the graph

def test_dgx_h100_tree_graph_runs_at_the_ring_search_channels():
    # 8 search channels (one per NIC); 8 x 48 = 384 GB/s does not fit 370.8 GB/s of NVLink, 8 x 45 does;
    # bwIntra cannot rise (8 x 48 again); the kernels run 16 (connect.cc doubles them)
    g = net_tree_graph(8, 8, 50.0, 48.0, nvlink_bw_GBps(90, 18), 90)
    assert (g.n_channels, g.bw_intra_GBps, g.bw_inter_GBps, g.channels_run) == (8, 45.0, 45.0, 16)
    assert g.run_bw_GBps(inter=True) == pytest.approx(22.5)


def test_a100_16_nic_tree_graph_raises_bw_intra_to_the_nvlink_total():
    # 16 x 100G (12.5 GB/s): 12 GB/s per channel between nodes; pass 2 raises bwIntra to 15 (16 x 15 = 240
    # GB/s, the A100's NVLink total), below twice bwInter
    g = net_tree_graph(16, 16, 12.5, 12.5, nvlink_bw_GBps(80, 12), 80)
    assert (g.n_channels, g.bw_intra_GBps, g.bw_inter_GBps) == (16, 15.0, 12.0)


def test_perf_builds_the_search_tree_graph_on_dgx_h100():
    x = _predictor(4, "2.26.2").tuning_inputs("all_reduce")
    tree = x.graph("tree")
    assert (tree.n_channels, tree.channels_run) == (8, 16)
    # init.cc: the tree searches the ring search's channels; both run on twice that
    assert (x.graph("ring").n_channels, x.graph("ring").channels_run) == (8, 16)
    # NVLSTree between nodes at a speed the search tries: 48 GB/s per head (the 50 GB/s NIC rounds down)
    assert x.graph("nvls_tree").bw_inter_GBps == 48.0


def test_inter_speeds_by_release():
    assert 22.0 not in inter_speeds(90, nccl_release("2.18.3"))
    assert 22.0 in inter_speeds(90, nccl_release("2.19.3"))
    assert inter_speeds(100, nccl_release("2.26.2"))[0] == 48.0
    assert inter_speeds(100, nccl_release("2.27.3"))[0] == 47.9
    assert inter_speeds(100, nccl_release("2.28.9"))[:2] == (96.0, 48.0)
    assert inter_speeds(100, nccl_release("2.29.7"))[:2] == (96.0, 80.0)
    assert inter_speeds(100, nccl_release("2.30.7"))[:3] == (96.0, 86.0, 80.0)
    assert inter_speeds(80)[:2] == (48.0, 30.0)


def test_run_channels_must_be_a_count():
    with pytest.raises(SpecError, match="run_channels"):
        Graph(8, 45.0, 45.0, run_channels=-1)


# ------------------------------------------------------------------------------ the choice it leads to

def test_nccl_1752_choices_on_64_h200_servers():
    data = yaml.safe_load((DATA / "nccl1752-64x8-h200.yaml").read_text())
    for version in data["nccl_versions"]:
        for transport in ("infiniband", "rocev2"):
            p = _predictor(data["servers"], version, transport)
            inputs = p.tuning_inputs("all_reduce")
            for row in data["choices"]:
                algorithm, protocol, _ = choose(inputs, row["bytes"])
                assert (algorithm, protocol) == (row["algorithm"], row["protocol"]), (version, transport, row)
                assert p.estimate("all_reduce", row["bytes"]).n_channels == row["channels"]


def test_tree_ll128_below_nvls_tree_beyond_two_nodes():
    # nccl#1649: at NCCL's default channels Tree reaches much less than NVLSTree; in NCCL's model the tree's
    # 8 search channels cap Tree LL128 at 8 x 29.0 GB/s busBw (tuning.cc perChMaxTreeLL128Bws, Hopper N4)
    for servers in (4, 8, 64):
        inputs = _predictor(servers, "2.26.2").tuning_inputs("all_reduce")
        tree = predict(inputs, "tree", "LL128", 1 << 30)
        nvls_tree = predict(inputs, "nvls_tree", "Simple", 1 << 30)
        assert tree.bus_bw_GBps == pytest.approx(8 * 29.0)
        assert tree.plateau_alg_bw_GBps < nvls_tree.plateau_alg_bw_GBps
