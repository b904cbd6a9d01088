"""The step cycle of a network connection grows with the connections its GPU's proxy thread serves.

NCCL's proxy thread (one per GPU) passes over every active network operation in turn and moves each
channel's connection by at most one state per pass (NVIDIA/nccl v2.30.7-1 ``src/proxy.cc``
``progressOps``; ``src/transport/net.cc`` ``sendProxyProgress`` / ``recvProxyProgress``). Closed forms
on DGX H100 (8 NICs, one per GPU), per send-and-receive pair of one channel:

* ring, 16 channels: 2 channels per NIC x 1 peer = 2; with ``NCCL_MIN_CTAS=24``: 3;
* tree at 8 nodes: 2 channels per NIC x 2 peers (the busiest node of NCCL's double binary tree is
  interior in one tree, 3 peers, and a leaf in the other, 1: ``ncclGetDtree``, src/graph/trees.cc) = 4;
* tree at 2 nodes: one peer per channel = 2;
* tree at 8 nodes with ``NCCL_MIN_CTAS=24``: NCCL's 8 extra channels copy channels 0-7, all on tree 0
  (``copyChannels`` / ``connectTrees``, src/graph/connect.cc), so 16 channels run tree 0 and 8 tree 1;
  the node interior in tree 0 averages (16 x 3 + 8 x 1) / 24 = 7/3 peers: 3 channels per NIC x 7/3 = 7.
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


def _predictor(servers: int, env: dict) -> CollectivePredictor:
    topo = build_cluster(ClusterSpec.model_validate({"preset": "dgx-h100", "servers": servers}))
    return CollectivePredictor.create(Communicator.world(topo), parse_env(env), RoutingSpec(), TRANSPORTS["infiniband"])


@pytest.mark.parametrize(("servers", "env", "size", "load"), [
    (2, {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"}, 2**30, 2.0),
    (2, {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple", "NCCL_MIN_CTAS": "24"}, 2**30, 3.0),
    (8, {"NCCL_ALGO": "Tree", "NCCL_PROTO": "LL128"}, 16 * MiB, 4.0),
    (2, {"NCCL_ALGO": "Tree", "NCCL_PROTO": "LL128"}, 16 * MiB, 2.0),
    (8, {"NCCL_ALGO": "Tree", "NCCL_PROTO": "LL128", "NCCL_MIN_CTAS": "24"}, 16 * MiB, 7.0),
    # NVLSTree alternates its channels between the trees (channel c on tree c mod 2, connectNvls): 3 x 2
    (8, {"NCCL_ALGO": "NVLSTree", "NCCL_MIN_CTAS": "24"}, 256 * MiB, 6.0),
])
def test_proxy_load_is_channels_on_the_nic_times_network_peers(servers, env, size, load):
    est = _predictor(servers, env).estimate("all_reduce", size)
    assert est.costs.proxy_load == pytest.approx(load)


def test_more_connections_on_the_proxy_slow_a_mid_size_tree():
    # same tree, same steps: 8 nodes' interior proxies serve twice the connections of 2 nodes' per channel
    few = _predictor(8, {"NCCL_ALGO": "Tree", "NCCL_PROTO": "LL128"}).estimate("all_reduce", 16 * MiB)
    assert few.costs.connection_steps > 0
    assert few.costs.proxy_load == pytest.approx(2 * _predictor(2, {"NCCL_ALGO": "Tree", "NCCL_PROTO": "LL128"})
                                                 .estimate("all_reduce", 16 * MiB).costs.proxy_load)


def test_the_step_cycle_overlaps_the_wire_as_the_8_node_nvls_tree_shows():
    """A connection keeps up to NCCL_STEPS (8) messages on the wire while its proxy posts the next: the send
    proxy transmits step ``transmitted`` while ``transmitted < done + NCCL_STEPS`` and tests completions later
    (``sendProxyProgress``, src/transport/net.cc, NVIDIA/nccl v2.27.3-1; ``maxDepth = min(NCCL_STEPS,
    NCCL_SHARED_STEPS / nsubs)`` is 8, a collective's connection being one sub: ``ProxyAppend`` groups subs
    only on shared connections, src/proxy.cc). So the proxy's cycles run beside the wire, not after it, and
    a call's steady time is the slower of the two. Measured (NVIDIA/nccl-tests#309, 8 H100 nodes,
    tests/nccltests/data/reference/h100-ib-8node-64gpu-all_reduce.log): NVLSTree at 256 MiB in 1955 us,
    where the cycles bound the model (2126 us, -8 % busbw); the two in series would be 3.8 ms."""
    from pathlib import Path

    from gpuwait.runner.perf import make_predictor
    from gpuwait.telemetry.nccltests_log import parse_nccl_tests_log

    data = Path(__file__).parents[1] / "nccltests" / "data" / "reference" / "h100-ib-8node-64gpu-all_reduce.log"
    measured_s = {r.size_bytes: r.steady_time_us for r in parse_nccl_tests_log(data.read_text()).rows}[256 * MiB] * 1e-6
    predictor = make_predictor("dgx-h100", 8, 8, [], "2.27.3")  # the release bench/reference_tables.py reads
    est = predictor.estimate("all_reduce", 256 * MiB)
    costs, params = est.costs, predictor.params
    cycles_s = costs.connection_steps * costs.proxy_load * params.net_step_cycle_s
    assert est.algorithm == "nvls_tree" and cycles_s > costs.wire_s  # the proxy is the bottleneck here
    series_s = costs.latency_s + costs.wire_s + cycles_s + costs.fill_intra_s + costs.fill_inter_s
    assert est.time_s == pytest.approx(measured_s, rel=0.10)
    assert series_s > 1.8 * measured_s
