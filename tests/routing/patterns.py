"""Traffic patterns and a small 3-tier fabric shared by the routing tests."""

from __future__ import annotations

import numpy as np

from gpuwait.spec import ClusterSpec
from gpuwait.topology import build_topology


def three_tier():
    """32 DGX H100 servers on a 3-tier Clos of radix-16 switches, not rail-optimized."""
    return build_topology(ClusterSpec(servers=32, server={"template": "dgx-h100"},
                                      fabric={"kind": "clos", "tiers": 3, "switch_radix": 16, "rail_optimized": False}))


def all_to_all(topo):
    gpus = topo.gpu_node.ravel()
    src, dst = np.repeat(gpus, len(gpus)), np.tile(gpus, len(gpus))
    return src[src != dst], dst[src != dst]


def permutation(topo, seed=2):
    gpus = topo.gpu_node.ravel()
    dst = np.random.default_rng(seed).permutation(gpus)
    return gpus[gpus != dst], dst[gpus != dst]


def ring(topo):
    gpus = topo.gpu_node.ravel()
    return gpus, np.roll(gpus, -8)  # GPU i of server s to GPU i of server s+1: one rail
