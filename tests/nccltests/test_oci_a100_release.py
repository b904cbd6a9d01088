"""The OCI A100 RoCE table's tree/LL128 -> tree/Simple switch is NCCL 2.19.3's, the release the run used (issue 12).

Source: oracle-quickstart/oci-hpc-oke, commit 1402938d8c77b586e20ec9d40849e2177feef411 (2024-02-13). README.md
prints the all_reduce table of 2 x BM.GPU4.8 (8 x A100-SXM4-40GB, 16 x 100 Gb/s RoCE) for the Volcano job
``nccl-allreduce-job0``; manifests/a100-nccl-test.yaml of the same commit defines that job with the image
``nccl-tests:pytorch-23.10-nccl-2.19.3-1`` and ``NCCL_IB_QPS_PER_CONNECTION=4``. The table's busbw stays at
153-166 GB/s from 64 MiB to 512 MiB and jumps to 219 GB/s at 1 GiB: the tree leaves LL128 for Simple between
512 MiB and 1 GiB.

NCCL 2.19.3 prices a Tree/Simple hop at 28 us over NVLink and over the network (hwLat, src/graph/tuning.cc
v2.19.3-1), 2.30.7 at 4 and 14 us (v2.30.7-1): with 7 NVLink hops and 1 network hop each way on 2 nodes x 8,
2.19.3's tree/Simple latency is 0 + 2 x (7 x 28 + 28) = 448 us (baseLat 0) against 2.30.7's 8.4 + 2 x (7 x 4 + 14)
= 92.4 us, which moves NCCL's own switch from 512 MiB to 1 GiB.
"""

import pytest

from gpuwait.collectives.tuning import predict
from gpuwait.runner.perf import make_predictor

MiB, GiB = 2**20, 2**30
OCI_ENV = ["NCCL_IB_QPS_PER_CONNECTION=4"]


@pytest.fixture
def clean_env(monkeypatch):
    for name in ("NCCL_ALGO", "NCCL_PROTO", "NCCL_MIN_CTAS", "NCCL_MAX_CTAS"):
        monkeypatch.delenv(name, raising=False)


def choices(version):
    predictor = make_predictor("oci-a100-roce", 2, 8, OCI_ENV, nccl_version=version)
    return {size: predictor._choice("all_reduce", size)[1:3] for size in (256 * MiB, 512 * MiB, GiB)}


def test_nccl_2_19_3_switches_the_tree_to_simple_at_1_gib_as_the_published_run(clean_env):
    assert choices("2.19.3") == {256 * MiB: ("tree", "LL128"), 512 * MiB: ("tree", "LL128"),
                                 GiB: ("tree", "Simple")}


def test_nccl_2_30_7_would_switch_one_size_earlier(clean_env):
    # the default release's cheaper Tree/Simple hops: the switch the table does not show
    assert choices("2.30.7")[512 * MiB] == ("tree", "Simple")


def test_the_release_moves_the_tree_simple_latency_by_nccls_hop_latencies(clean_env):
    def tree_simple_latency_us(version):
        predictor = make_predictor("oci-a100-roce", 2, 8, OCI_ENV, nccl_version=version)
        return predict(predictor.tuning_inputs("all_reduce"), "tree", "Simple", GiB).latency_us

    assert tree_simple_latency_us("2.19.3") == pytest.approx(0.0 + 2 * (7 * 28.0 + 28.0))
    assert tree_simple_latency_us("2.30.7") == pytest.approx(8.4 + 2 * (7 * 4.0 + 14.0))
