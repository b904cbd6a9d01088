"""A tree between 2 ranks moves the buffer once each way, as the ring does (issue 12).

NCCL's tuning model converts a tree's bus bandwidth to algorithm bandwidth with a flat x 0.5
(src/graph/tuning.cc, "Convert bus BW to algorithm BW", NVIDIA/nccl v2.30.7-1); the ring's ratio is
nRanks / nsteps (1 at 2 ranks). At 2 ranks the tree's root receives, reduces and sends back, and the
leaf sends up and receives down (runTreeSplit, src/device/all_reduce.h): each rank sends the buffer once,
so the closed form of the bytes on each rank's link is the ring's, 2 (n - 1) / n = 1 x the buffer.
"""

import pytest

from gpuwait.fabric.perf import tree_pair_share
from gpuwait.runner.perf import make_predictor

SIZE = 2**28


def test_share_is_a_half_only_for_a_tree_between_two_ranks():
    assert tree_pair_share("tree", 2) == 0.5
    assert tree_pair_share("tree", 4) == tree_pair_share("tree", 16) == tree_pair_share("ring", 2) == 1.0


@pytest.mark.parametrize("servers, gpus", [(2, 1), (1, 2)])
def test_forced_tree_between_two_ranks_runs_at_the_rings_rate(monkeypatch, servers, gpus):
    monkeypatch.delenv("NCCL_ALGO", raising=False)
    monkeypatch.delenv("NCCL_PROTO", raising=False)
    tree = make_predictor("dgx-h100", servers, gpus, ["NCCL_ALGO=Tree", "NCCL_PROTO=Simple"]).estimate("all_reduce", SIZE)
    ring = make_predictor("dgx-h100", servers, gpus, ["NCCL_ALGO=Ring", "NCCL_PROTO=Simple"]).estimate("all_reduce", SIZE)
    assert (tree.algorithm, ring.algorithm) == ("tree", "ring")
    # the same bytes on the same links: the flow engine agrees, and NCCL's figure no longer halves the tree
    assert tree.fabric_time_s == pytest.approx(ring.fabric_time_s, rel=0.02)
    assert tree.model_bandwidth_time_s == pytest.approx(ring.model_bandwidth_time_s, rel=0.15)
    assert tree.time_s < 1.2 * ring.time_s

