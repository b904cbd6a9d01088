"""Where a training job reads its data, and how long its loaders take, as Megatron-LM does it.

Megatron-LM (NVIDIA/Megatron-LM @d98e8a64) reads batches on the first pipeline stage (tokens,
position ids) and the last (labels, loss mask), on TP rank 0 of each CP rank, which broadcasts them to
its TP group: ``get_batch`` in pretrain_gpt.py returns ``None`` on the stages between and
``is_dataset_built_on_rank`` builds no loader there; ``get_batch_on_this_tp_rank`` in
megatron/core/utils.py (megatron/training/utils.py before the 2026 move) sends tokens from the first
stage and labels from the last.
"""

from __future__ import annotations

import pytest

from gpuwait.errors import SpecError
from gpuwait.spec.workload import DataSpec
from gpuwait.topology.presets import build_preset
from gpuwait.workload.layout import Layout
from gpuwait.workload.steps import loader_s_per_lane

TOPO = build_preset("rocev2-400g-2tier", servers=4)  # 8 GPUs a server


def _layout(tp: int, pp: int, dp: int = 1, cp: int = 1) -> Layout:
    n = tp * pp * dp * cp
    return Layout(tp=tp, dp=dp, pp=pp, ep=1, cp=cp, rank_gpu=TOPO.gpu_node.ravel()[:n])


@pytest.mark.parametrize("tp, pp, cp, stages, readers", [
    (8, 1, 1, (0,), [[0]]),                 # no pipeline: the one stage reads, once
    (8, 2, 1, (0, 1), [[0], [8]]),          # first and last
    (8, 4, 1, (0, 3), [[0], [24]]),         # the middle stages read nothing
    (2, 2, 2, (0, 1), [[0, 2], [4, 6]]),    # every CP rank's TP rank 0
])
def test_the_first_and_last_stage_read_on_tp_rank_0_of_each_cp_rank(tp, pp, cp, stages, readers):
    got_stages, ranks = _layout(tp, pp, cp=cp).data_readers()
    assert got_stages == stages
    assert ranks[:, 0, :].tolist() == readers


def test_readers_on_one_server_share_its_loader():
    # 64 samples a step at 32 samples/s per server: a reader alone on its server takes 2 s a step
    data = DataSpec(loader_samples_per_s_per_server=32.0)
    apart = loader_s_per_lane(_layout(8, 2), TOPO, data, 64)       # stages on s0 and s1
    assert apart.tolist() == [[2.0], [2.0]]
    together = loader_s_per_lane(_layout(4, 2), TOPO, data, 64)    # both stages on s0: twice the samples
    assert together.tolist() == [[4.0], [4.0]]
    middle = loader_s_per_lane(_layout(8, 4), TOPO, data, 64)
    assert middle.ravel().tolist() == [2.0, 0.0, 0.0, 2.0]
    # 4 replicas on 4 servers without a pipeline: each reads 16 samples on its own server
    assert loader_s_per_lane(_layout(8, 1, dp=4), TOPO, data, 64).tolist() == [[0.5, 0.5, 0.5, 0.5]]


def test_a_servers_own_loader_rate_applies_to_its_readers_only():
    data = DataSpec(loader_samples_per_s_by_server={"s3": 16.0})
    assert loader_s_per_lane(_layout(8, 4), TOPO, data, 64).ravel().tolist() == [0.0, 0.0, 0.0, 4.0]
    assert not loader_s_per_lane(_layout(8, 4), TOPO, DataSpec(loader_samples_per_s_by_server={"s1": 1.0}), 64).any()
    assert not loader_s_per_lane(_layout(8, 4), TOPO, DataSpec(), 64).any()


def test_an_unknown_server_is_refused_by_name():
    with pytest.raises(SpecError, match=r"workload\.data\.loader_samples_per_s_by_server: got server 's9'; "
                                        r"expected a server of the cluster \(s0 to s3"):
        loader_s_per_lane(_layout(8, 4), TOPO, DataSpec(loader_samples_per_s_by_server={"s9": 1.0}), 64)
    with pytest.raises(ValueError, match="greater than 0"):
        DataSpec(loader_samples_per_s_by_server={"s1": 0.0})
