"""A network connection with one message in flight pays each step's software cost, then its transmission.

LogGP (Alexandrov et al., "LogGP: Incorporating Long Messages into the LogP Model", SPAA 1995): a k-byte
message costs o + (k - 1) G + L + o, and only a sender with a next message to inject overlaps its overhead
o with the previous message's gap. A connection that waits for each step pays, per step, the proxy's cycle,
the send's and the receive's overhead o and the message's transmission, in series. A ring's network connection keeps one message in flight: a ring step
waits for the previous rank's (src/device/prims_ll128.h, NVIDIA/nccl v2.30.7-1; a Simple AllReduce step
sends 2 slices, so 2 are in flight). Its steps then cost the proxy's cycle plus the message's time on the
rails it travels on, in series: aws-ofi-nccl's scheduler (src/nccl_ofi_scheduler.c, v1.8.1-aws) sends a
message of at most ``OFI_NCCL_ROUND_ROBIN_THRESHOLD`` = 256 KiB (include/nccl_ofi_param.h) on one
100 Gbit/s EFA device of the four behind each p5 GPU.

* Ring LL128 all_reduce on 2 x 8 H100 (p5) at 16 MiB: each connection carries 2 (16 - 1) = 30 steps of
  65536 payload bytes, one rail each: closed form 30 x 65536 / (12.5 GB/s x 8192 / 8274 x 120 / 128).
* Ring Simple (2 slices in flight) and 8 in-flight NVLSTree chunks: nothing in series.
* The published p5 table (aws-samples/awsome-distributed-training, micro-benchmarks/nccl-tests/README.md,
  2 x p5.48xlarge): from 2 to 16 MiB the measured time is the ~123 us ring LL128 floor (512 KiB - 1 MiB)
  plus the bytes at about 200 GB/s busbw (147.2, 168.6, 204.8, 298.1 us); within 5 % of it (was 19-36 %
  too fast when the step cycle and the transmission overlapped), and T(16 MiB) - T(2 MiB) within 10 %.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwait.collectives.communicator import Communicator
from gpuwait.collectives.ncclenv import parse_env
from gpuwait.fabric.perf import CollectivePredictor
from gpuwait.spec import ClusterSpec, RoutingSpec
from gpuwait.telemetry.nccltests_log import parse_nccl_tests_log
from gpuwait.topology.presets import build_cluster
from gpuwait.transport import TRANSPORTS

MiB = 2**20
TABLE = Path(__file__).parents[1] / "nccltests" / "data" / "reference" / "h100-efa-2node-16gpu-all_reduce.log"


def _predictor(server: str, env: dict, transport: str) -> CollectivePredictor:
    topo = build_cluster(ClusterSpec.model_validate({"server": server, "servers": 2}))
    return CollectivePredictor.create(Communicator.world(topo), parse_env(env), RoutingSpec(), TRANSPORTS[transport])


def test_one_message_in_flight_pays_its_rail_time_after_each_step():
    predictor = _predictor("p5-48xlarge", {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL128"}, "efa")
    est = predictor.estimate("all_reduce", 16 * MiB)
    assert (est.algorithm, est.protocol, est.n_channels, est.chunk_bytes) == ("ring", "LL128", 16, 65536)
    rail_Bps = 12.5e9 * 8192 / (8192 + 82) * 120 / 128
    assert est.costs.serial_s == pytest.approx(30 * 65536 / rail_Bps)
    # the connection's 30 sends and 30 receives, each paying the per-message overhead in the same series
    assert est.costs.serial_messages == 60
    params, costs = predictor.params, est.costs
    series = (costs.connection_steps * costs.proxy_load * params.net_step_cycle_s
              + costs.serial_messages * params.net_message_overhead_s + costs.serial_s)
    assert series > costs.wire_s  # the connection, not the NIC, sets the pace here
    assert est.time_s == pytest.approx(costs.latency_with(params) + series + costs.fill_with(params))


def test_several_messages_in_flight_overlap():
    ib = _predictor("dgx-h100", {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"}, "infiniband")
    assert ib.estimate("all_reduce", 64 * MiB).costs.serial_s == 0.0
    nvls_tree = _predictor("dgx-h100", {}, "infiniband").estimate("all_reduce", 2**30)
    assert nvls_tree.algorithm == "nvls_tree" and nvls_tree.costs.serial_s == 0.0


def test_the_published_p5_table_from_2_to_16_mib():
    rows = {r.size_bytes: r.oop_time_us * 1e-6 for r in parse_nccl_tests_log(TABLE.read_text()).rows}
    predictor = _predictor("p5-48xlarge", {}, "efa")
    predicted = {mib: predictor.estimate("all_reduce", mib * MiB) for mib in (2, 4, 8, 16)}
    for mib, est in predicted.items():
        assert (est.algorithm, est.protocol) == ("ring", "LL128")
        assert est.time_s == pytest.approx(rows[mib * MiB], rel=0.05), mib
    measured_ramp = rows[16 * MiB] - rows[2 * MiB]
    assert predicted[16].time_s - predicted[2].time_s == pytest.approx(measured_ramp, rel=0.10)
