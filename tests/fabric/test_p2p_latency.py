"""The latency of NCCL's p2p path (all-to-all, send/recv) against NCCL's own latency constants.

NCCL's tuning model prices a ring as ``baseLat + nsteps x hwLat`` (src/graph/tuning.cc, NVIDIA/nccl
v2.30.7-1): ``baseLat`` once per call (the kernel's), ``hwLat`` per step on the link the step crosses. A
p2p call is one kernel in which each peer's transfer is one step: send/recv pays the base and one step,
an all-to-all the base and a step each way (its send and its receive). On two RTX 2080 Ti on PCIe
(NCCL's ``pci`` row: Simple 5.7 us, LL 1.0 us; ring ``baseLat`` Simple 8.4 us, LL 6.6 us) that is
8.4 + 2 x 5.7 = 19.8 us (Simple) and 6.6 + 2 x 1.0 = 8.6 us (LL) for an all-to-all, before the fitted
launch latency. Measured on that machine (tests/nccltests/data/reference/rtx2080ti-pcie-1node-2gpu-alltoall.log,
source in its header): 13.0 us for the LL sizes up to 8 KiB and 24.1 us at 64 KiB (Simple, 6.6 us of wire).
"""

from __future__ import annotations

import pytest

from gpuwait.collectives.communicator import Communicator
from gpuwait.collectives.ncclenv import NcclEnv
from gpuwait.fabric.perf import CollectivePredictor
from gpuwait.spec import ClusterSpec, RoutingSpec
from gpuwait.topology.presets import build_cluster
from gpuwait.transport import TRANSPORTS

KiB = 1024


def _predictor() -> CollectivePredictor:
    spec = ClusterSpec.model_validate({"preset": "dgx-h100", "servers": 1, "server": {"template": "rtx2080ti-pcie-2gpu"}})
    return CollectivePredictor.create(Communicator.world(build_cluster(spec)), NcclEnv(), RoutingSpec(),
                                      TRANSPORTS["rocev2"])


@pytest.mark.parametrize(("collective", "n_bytes", "protocol", "latency_us"), [
    ("alltoall", 64 * KiB, "Simple", 8.4 + 2 * 5.7), ("alltoall", 8 * KiB, "LL", 6.6 + 2 * 1.0),
    ("sendrecv", 64 * KiB, "Simple", 8.4 + 5.7), ("sendrecv", 8 * KiB, "LL", 6.6 + 1.0),
])
def test_p2p_latency_is_one_base_and_a_step_per_direction(collective, n_bytes, protocol, latency_us):
    est = _predictor().estimate(collective, n_bytes)
    assert est.protocol == protocol
    assert est.costs.latency_s * 1e6 == pytest.approx(latency_us)


#: the table's out-of-place times (us) for 32 B .. 64 KiB (rtx2080ti-pcie-1node-2gpu-alltoall.log)
RTX_ALLTOALL_FLOOR_US = {32: 13.51, 64: 13.07, 128: 13.07, 256: 12.97, 512: 12.86, 1024: 12.94, 2048: 12.87,
                         4096: 13.03, 8192: 13.18, 16384: 15.03, 32768: 20.2, 65536: 24.1}


def test_p2p_floor_within_a_quarter_of_the_measured_rtx_table():
    # the floor criterion: the median time error over the sizes up to 64 KiB within 25 %; every size
    # within a third (64 KiB, Simple: NCCL's latency constants alone give 22.9 of the 24.1 us measured, and
    # the SHM path both ways adds 8.7 us of wire: +31 %)
    pred = _predictor()
    errors = [pred.estimate("alltoall", n_bytes).time_s * 1e6 / measured_us - 1
              for n_bytes, measured_us in RTX_ALLTOALL_FLOOR_US.items()]
    assert abs(sorted(errors)[len(errors) // 2]) < 0.25
    assert max(abs(e) for e in errors) < 1 / 3


def test_p2p_at_one_rank_per_node_pays_rings_own_network_hop():
    """Send/recv between two servers with one GPU each: the base once and one network step at ring's own figure
    (NCCL's ``hwLat[NCCL_HW_NET][RING][LL]`` 2.7 us, ``baseLat`` 6.6 us, src/graph/tuning.cc v2.30.7-1), not at
    Tree's 5.0 us, which NCCL's tuning substitutes at one rank per node for its choice of collective algorithm
    only (from v2.23.4-1; the p2p path never runs that model) -- the same figure the collectives' time takes
    (``Prediction.own_net_latency_us``)."""
    spec = ClusterSpec.model_validate({"preset": "dgx-h100", "servers": 2, "server": {"gpus": 1}})
    pred = CollectivePredictor.create(Communicator.world(build_cluster(spec)), NcclEnv(), RoutingSpec(),
                                      TRANSPORTS["infiniband"])
    est = pred.estimate("sendrecv", 8)
    assert est.protocol == "LL"
    assert est.costs.latency_s * 1e6 == pytest.approx(6.6 + 2.7)
