"""aws-ofi-nccl's multi-rail EFA device: a message up to the round-robin threshold keeps one rail busy.

On AWS p5 each GPU's NCCL network device is a group of 4 EFA devices of 100 Gbit/s (AWS EC2 p5
instance type: 32 x 100 Gbit/s EFA for 8 GPUs). aws-ofi-nccl's scheduler (src/nccl_ofi_scheduler.c,
v1.8.1-aws) sends a message of at most ``OFI_NCCL_ROUND_ROBIN_THRESHOLD`` = 256 KiB
(include/nccl_ofi_param.h) whole on one rail and stripes larger ones over all four.

* Ring LL128 all_reduce on 2 x 8 H100 at 16 MiB: 16 channels on 8 devices, 2 connections per device and
  direction, one message each in flight (a ring step waits for the previous rank), 65536-byte chunks
  (69905 bytes with LL128's flags) on one rail each: 2 of 4 rails busy, so the busiest NIC's time is
  twice the full-rate time (closed form 4 / (2 x 1 x 1)).
* At 1 GiB the ring's 576000-byte LL128 chunks (614400 bytes on the wire) are striped: no slowdown.
* InfiniBand NICs are one device each: no rail bound.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuwait.collectives.communicator import Communicator
from gpuwait.collectives.ncclenv import parse_env
from gpuwait.fabric.perf import PROTOCOL_PAYLOAD, CollectivePredictor
from gpuwait.spec import ClusterSpec, RoutingSpec
from gpuwait.topology.presets import build_cluster
from gpuwait.transport import TRANSPORTS

MiB = 2**20
RING_LL128 = {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL128"}


def _predictor(transport) -> CollectivePredictor:
    topo = build_cluster(ClusterSpec.model_validate({"server": "p5-48xlarge", "servers": 2}))
    return CollectivePredictor.create(Communicator.world(topo), parse_env(RING_LL128), RoutingSpec(), transport)


def _full_rate_nic_s(predictor: CollectivePredictor, n_bytes: int) -> float:
    server = predictor.comm.topo.spec.server
    nic_bytes = predictor.nic_bytes_per_byte("all_reduce", "ring", "LL128", 16) * n_bytes / 2
    return nic_bytes / (predictor.transport.goodput_Bps(server.nic_speed) * PROTOCOL_PAYLOAD["LL128"])


def test_one_rail_messages_run_at_the_share_of_rails_they_cover():
    predictor = _predictor(TRANSPORTS["efa"])
    est = predictor.estimate("all_reduce", 16 * MiB)
    assert (est.algorithm, est.protocol, est.n_channels, est.chunk_bytes) == ("ring", "LL128", 16, 65536)
    bound = predictor._rail_bound_s("all_reduce", 16 * MiB, "ring", "LL128", 16, 16, est.chunk_bytes)
    assert bound == pytest.approx(2 * _full_rate_nic_s(predictor, 16 * MiB))
    assert est.costs.wire_s == pytest.approx(bound)


def test_striped_messages_and_single_device_nics_have_no_rail_bound():
    efa = _predictor(TRANSPORTS["efa"])
    big = efa.estimate("all_reduce", 2**30)
    assert big.chunk_bytes == 576000
    assert efa._rail_bound_s("all_reduce", 2**30, "ring", "LL128", 16, 16, big.chunk_bytes) == 0.0
    one_device = _predictor(replace(TRANSPORTS["efa"], device_speed_Bps=None))
    assert one_device._rail_bound_s("all_reduce", 16 * MiB, "ring", "LL128", 16, 16, 65536) == 0.0
    assert one_device.estimate("all_reduce", 16 * MiB).time_s < efa.estimate("all_reduce", 16 * MiB).time_s
