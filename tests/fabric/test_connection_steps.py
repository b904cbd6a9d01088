"""The steps one network connection carries after its first pass, against closed forms.

NCCL's proxy (NVIDIA/nccl v2.30.7-1 ``src/transport/net.cc``) moves each channel's steps through a send
and a receive connection; the first pass (a ring's one loop of 2 (n - 1) steps, a tree's first chunk) is
NCCL's latency term, so only the steps after it can be bound by the per-step cycle.

* Ring all_reduce on 2 x 8 H100 at 4 MiB: one loop (16 channels x 16 ranks x 576000-byte LL128 chunks
  hold 147 MB), so every step is in the first pass: 0 steps after it.
* NVLSTree all_reduce on 8 x 8 H100 at 512 MiB: 16 channels (``NVLS_NCHANNELS`` on SM90, 2 per GPU and
  NIC), 64 KiB chunks from 4 nodes (``NCCL_NVLS_CHUNKSIZE`` tuning, src/transport/nvls.cc): a channel's
  32 MiB is 512 chunks, each crossing its NIC once up the tree and once down: 2 x 512 - 1 steps after the
  first.
"""

from __future__ import annotations

import pytest

from gpuwait.collectives.communicator import Communicator
from gpuwait.collectives.ncclenv import parse_env
from gpuwait.fabric.perf import CollectivePredictor
from gpuwait.spec import ClusterSpec, RoutingSpec
from gpuwait.topology.presets import build_cluster
from gpuwait.transport import TRANSPORTS

MiB = 2**20


def _predictor(servers: int, env: dict | None = None) -> CollectivePredictor:
    topo = build_cluster(ClusterSpec.model_validate({"preset": "dgx-h100", "servers": servers}))
    return CollectivePredictor.create(Communicator.world(topo), parse_env(env or {}), RoutingSpec(),
                                      TRANSPORTS["infiniband"])


def test_a_one_loop_ring_has_no_steps_after_its_first_pass():
    est = _predictor(2, {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL128"}).estimate("all_reduce", 4 * MiB)
    assert (est.algorithm, est.protocol) == ("ring", "LL128")
    assert est.costs.connection_steps == 0.0


def test_nvls_tree_steps_are_its_chunks_up_and_down():
    est = _predictor(8, {"NCCL_ALGO": "NVLSTree"}).estimate("all_reduce", 512 * MiB)
    assert est.algorithm == "nvls_tree" and est.chunk_bytes == 64 * 1024
    assert est.costs.connection_steps == pytest.approx(2 * 512 - 1, rel=0.01)
