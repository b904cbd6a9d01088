"""Dataset reads come from the GPUs that read data, as Megatron-LM reads it.

Megatron-LM builds the dataset and calls the data iterator only on tensor-parallel rank 0 of the first
and the last pipeline stage (``is_dataset_built_on_rank`` and ``get_batch`` in pretrain_gpt.py); the
other TP ranks get the batch by broadcast from TP rank 0 (``get_batch_on_this_tp_rank``,
megatron/core/utils.py); every context-parallel rank reads its replica's samples (the data sampler takes
the data-parallel rank without CP, megatron/training/datasets/data_samplers.py) and keeps its slice
(``get_batch_on_this_cp_rank``); all NVIDIA/Megatron-LM @d98e8a64ddf34856e74b24714e3bedb2f5a39553.

``workload.data.dataset_read_per_gpu`` is the job's read rate over its GPU count: the readers share
``rate x GPUs`` evenly. The byte counts below are closed forms of that: pp=4, tp=8, dp=2 on 64 GPUs has
2 reading stages x 2 replicas = 4 readers, each asking 64 / 4 = 16 times the per-GPU figure.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpuwait.runner.workload import simulate_workload
from gpuwait.spec import Scenario, validate_data
from gpuwait.topology.model import NodeKind
from gpuwait.workload.layout import Layout

READ_PER_GPU_BPS = 1e9


def _scenario(parallel: dict, read_Bps: float, servers: int = 8) -> Scenario:
    # 8 storage servers of 400 Gb/s on the compute fabric: 400 GB/s of ports, more than the 64 GB/s asked
    return validate_data(Scenario, {
        "cluster": {"preset": "dgx-h100", "servers": servers, "routing": {"kind": "adaptive"},
                    "storage": {"mode": "converged", "storage_servers": 8, "storage_server_speed": 400e9 / 8}},
        "workload": {"model": {"preset": "llama-8b", "seq_len": 2048},
                     "parallel": {"micro_batch": 1, "global_batch": 64, **parallel},
                     "compute": {"gpu": "H100-SXM", "jitter_cv": 0.0},
                     "data": {"dataset_read_per_gpu": read_Bps}, "steps": 1}}, require_units=False)


def _reads_into_gpus_Bps(parallel: dict) -> tuple[np.ndarray, np.ndarray, float]:
    """(GPU nodes of the job in rank order, the read bytes/s each receives, bytes/s the storage servers send).

    A run's bytes per step are its collectives' (the same with or without reads) plus the steady reads
    times the step, so the reads on a link are the difference of two runs over the step that reads."""
    reading = simulate_workload(_scenario(parallel, READ_PER_GPU_BPS))
    quiet = simulate_workload(_scenario(parallel, 0.0))
    topo = reading.topo
    step_s = reading.results[0].breakdown.step_time_s
    reads_Bps = (reading.results[0].links.bytes_per_step - quiet.results[0].links.bytes_per_step) / step_s
    into = np.bincount(topo.link_dst, weights=reads_Bps, minlength=topo.n_nodes)
    sent = float(reads_Bps[topo.node_kind[topo.link_src] == NodeKind.STORAGE_SERVER].sum())
    gpus = topo.gpu_node.ravel()  # the default placement: rank r on the job's r-th GPU in server order
    return gpus, into[gpus], sent


def test_a_3d_job_reads_on_tp_rank_0_of_its_first_and_last_stage():
    gpus, into, sent = _reads_into_gpus_Bps({"tp": 8, "pp": 4})
    readers = Layout(tp=8, dp=2, pp=4, ep=1, rank_gpu=np.arange(64)).reader_ranks()
    assert readers.tolist() == [0, 8, 48, 56]
    expected = np.zeros(64)
    expected[readers] = 64 * READ_PER_GPU_BPS / 4  # 16 GB/s each
    assert into == pytest.approx(expected, rel=1e-6, abs=1.0)
    assert sent == pytest.approx(64 * READ_PER_GPU_BPS, rel=1e-6)  # the job's total is the field x GPUs


def test_data_parallel_job_reads_on_every_gpu_as_before():
    """pp = tp = 1: every GPU reads, at exactly the per-GPU figure (the field's meaning is unchanged)."""
    _gpus, into, sent = _reads_into_gpus_Bps({"tp": 1, "pp": 1, "zero": 1})
    assert into == pytest.approx(np.full(64, READ_PER_GPU_BPS), rel=1e-6)
    assert sent == pytest.approx(64 * READ_PER_GPU_BPS, rel=1e-6)


def test_every_context_parallel_rank_reads_its_replica():
    """tp=4, cp=2, pp=2, dp=4: TP rank 0 of each CP rank of the 2 reading stages: 2 x 4 x 2 = 16 readers."""
    gpus, into, sent = _reads_into_gpus_Bps({"tp": 4, "cp": 2, "pp": 2})
    readers = Layout(tp=4, dp=4, pp=2, ep=1, cp=2, rank_gpu=np.arange(64)).reader_ranks()
    assert len(readers) == 16 and all(r % 4 == 0 for r in readers)
    expected = np.zeros(64)
    expected[readers] = 64 * READ_PER_GPU_BPS / 16
    assert into == pytest.approx(expected, rel=1e-6, abs=1.0)
    assert sent == pytest.approx(64 * READ_PER_GPU_BPS, rel=1e-6)
