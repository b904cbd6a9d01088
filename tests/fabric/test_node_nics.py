"""NCCL's graph search of a node sees its network devices, not its GPUs: GPUs that share a NIC count once.

* ``hgx-h100-4nic`` and AWS ``p4de-24xlarge`` pair two GPUs on each of 4 NICs (p4d/p4de: 4 EFA devices
  for 8 A100s, AWS EC2 instance-type documentation; aws-ofi-nccl lists one NCCL network device per EFA
  device there): 4 devices, and the ring runs 2 channels per device (8), as ``dgx-h100``'s 8 NICs run 16.
* A communicator of 2 GPUs per server that share one NIC sees that one NIC.
"""

from __future__ import annotations

import pytest

from gpuwait.collectives.communicator import Communicator
from gpuwait.collectives.ncclenv import parse_env
from gpuwait.fabric.perf import CollectivePredictor
from gpuwait.spec import ClusterSpec, RoutingSpec
from gpuwait.topology.presets import build_cluster
from gpuwait.transport import TRANSPORTS


def _predictor(server: str, gpus: int | None = None) -> CollectivePredictor:
    topo = build_cluster(ClusterSpec.model_validate({"server": server, "servers": 2}))
    comm = Communicator.world(topo, gpus_per_server=gpus)
    return CollectivePredictor.create(comm, parse_env({}), RoutingSpec(), TRANSPORTS["infiniband"])


@pytest.mark.parametrize(("server", "nics", "channels"),
                         [("hgx-h100-4nic", 4, 8), ("p4de-24xlarge", 4, 8), ("dgx-h100", 8, 16)])
def test_gpus_sharing_a_nic_count_it_once(server, nics, channels):
    predictor = _predictor(server)
    assert predictor._node_nics() == nics
    assert predictor.tuning_inputs("all_reduce").n_channels == channels


def test_two_gpus_on_one_nic_see_one_nic():
    assert _predictor("hgx-h100-4nic", gpus=2)._node_nics() == 1
    assert _predictor("dgx-h100", gpus=2)._node_nics() == 2
