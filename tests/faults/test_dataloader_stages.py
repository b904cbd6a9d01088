"""Which servers a dataloader-starvation fault slows, now that the last pipeline stage reads data too.

Megatron-LM reads a batch per micro-batch on the first stage (tokens) and the last (labels, loss mask),
none between (get_batch in pretrain_gpt.py, NVIDIA/Megatron-LM @d98e8a64). On 4 servers with one stage
each (pp = 4, one replica): starving the last stage's server makes its GPUs wait for data; starving a
middle stage's server changes nothing; starving the first stage's server alone and starving every
server give the same run, bit for bit — every loader equally slow has the last stage's batch ready
when its input arrives, a forward of each earlier stage after the first stage took the same batch.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpuwait.faults import parse_inject
from gpuwait.runner.workload import simulate_workload
from gpuwait.spec import Scenario, validate_data

SCENARIO = {"cluster": {"preset": "rocev2-400g-2tier", "servers": 4},
            "workload": {"model": {"preset": "llama-8b", "seq_len": 4096},
                         "parallel": {"tp": 8, "pp": 4, "micro_batch": 1, "global_batch": 16}, "steps": 3}}


@pytest.fixture(scope="module")
def runs():
    scenario = validate_data(Scenario, SCENARIO, source="test", require_units=False)
    out = {"healthy": simulate_workload(scenario).results[0]}
    for target in ("s0", "all", "s1", "s3"):
        fault = parse_inject(f"dataloader-starvation:{target}:samples_per_s_per_server=10")
        out[target] = simulate_workload(scenario, faults=[fault]).results[0]
    return out


def _data_wait_per_server(result) -> list[float]:
    return result.breakdown.per_gpu_s["data_wait"].reshape(4, 8).mean(axis=1).tolist()


def test_starving_the_first_stage_alone_or_every_server_is_the_same_run(runs):
    first, every = runs["s0"], runs["all"]
    assert np.array_equal(first.step_times_s, every.step_times_s)
    for phase, seconds in first.breakdown.per_gpu_s.items():
        assert np.array_equal(seconds, every.breakdown.per_gpu_s[phase])
    wait = _data_wait_per_server(every)
    assert wait[0] > 0 and wait[1:] == [0.0, 0.0, 0.0]  # the last stage's batch is always in first


def test_the_last_stages_starved_loader_makes_its_gpus_wait(runs):
    wait = _data_wait_per_server(runs["s3"])
    assert wait[:3] == [0.0, 0.0, 0.0] and wait[3] > 0
    # 16 samples a step at 10 samples/s: once the first step's prepared batches are used, 1.6 s a step
    assert runs["s3"].step_times_s[-1] == pytest.approx(1.6, rel=1e-3)
    assert runs["all"].step_times_s[-1] == pytest.approx(1.6, rel=1e-3)


def test_a_middle_stages_loader_is_never_read(runs):
    assert np.array_equal(runs["s1"].step_times_s, runs["healthy"].step_times_s)
    assert not runs["s1"].breakdown.per_gpu_s["data_wait"].any()



@pytest.mark.parametrize("target", ["s3", "all"])
def test_a_starvation_fault_never_speeds_a_loader_up(target):
    """Data parallelism alone over the 4 servers (each reads its replica's 4 samples a step), whose loaders
    already deliver 5 samples/s, starved 'to' 10 samples/s: the fault set s3 (or every server) to 10, so the
    faulty run was faster than the healthy one, or s3's GPUs waited for data less (review36). Now the slower
    rate stays, and the run is the healthy one, bit for bit."""
    workload = {**SCENARIO["workload"], "parallel": {"tp": 8, "micro_batch": 1, "global_batch": 16},
                "data": {"loader_samples_per_s_per_server": 5.0}}
    scenario = validate_data(Scenario, {**SCENARIO, "workload": workload}, source="test", require_units=False)
    healthy = simulate_workload(scenario).results[0]
    fault = parse_inject(f"dataloader-starvation:{target}:samples_per_s_per_server=10")
    starved = simulate_workload(scenario, faults=[fault]).results[0]
    assert healthy.step_times_s[-1] == pytest.approx(4 / 5, rel=1e-3)  # 4 samples a step at 5 samples/s
    assert np.array_equal(starved.step_times_s, healthy.step_times_s)
    for phase, seconds in healthy.breakdown.per_gpu_s.items():
        assert np.array_equal(seconds, starved.breakdown.per_gpu_s[phase]), phase
