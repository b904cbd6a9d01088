"""The A100 generation's per-step latency (``sm80_step_latency_s``) predicts one published A100 table's time floor
when fitted on the other (issue 12: floors, sizes <= 64 KiB, within 25 %).

The two A100 tables with small sizes share nothing but the GPU: OCI's 2 x BM.GPU4.8 (AMD host, RoCE, NCCL 2.19.3,
tree/LL below 64 KiB; oracle-quickstart/oci-hpc-oke commit 1402938, README.md) and AWS p4de's 2 x 8 A100 (Intel
host, EFA, ring/Simple; aws-samples/awsome-distributed-training commit 88c2e71,
micro-benchmarks/nccl-tests/README.md). Both run about the same time per step of NCCL's latency chain
above the model, which H100 tables on every host and transport do not (bench/reference_tables.py). A per-step cost
fitted on either table alone (every other parameter as shipped) brings the other's floor within 25 %, and the
two fits agree: the cost belongs to the GPU generation, not to one table's host or network.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpuwait.collectives.fit import FIT_NAMES, PUBLIC_FIT_NAMES, Adjustment, fit
from gpuwait.collectives.physical import PUBLIC_TABLE_FIT, PhysicalParams, PipelineCosts, pipelined_time_s
from gpuwait.runner.perf import make_predictor
from tests.conftest import load_bench

OCI, EFA = "a100-oci-2node-16gpu-roce-all_reduce", "a100-efa-2node-16gpu-all_reduce"
SHIPPED_NOW = {k: v for k, v in PUBLIC_TABLE_FIT.items() if k != "sm80_step_latency_s"}


@pytest.fixture(scope="module")
def bench():
    return load_bench("reference_tables")


def _ref(bench, stem):
    return next(r for r in bench.REFERENCES if r.stem == stem)


def _fitted_on(bench, stem) -> float:
    """``sm80_step_latency_s`` fitted on one table's sizes, every other parameter at its shipped move."""
    return fit(bench.observations(_ref(bench, stem)), ["sm80_step_latency_s"], SHIPPED_NOW).values["sm80_step_latency_s"]


def test_every_step_of_an_a100_chain_pays_it_and_no_other_gpus():
    a100 = make_predictor("oci-a100-roce", 2, 8, ["NCCL_IB_QPS_PER_CONNECTION=4"]).estimate("all_reduce", 8)
    h100 = make_predictor("dgx-h100", 2, 8).estimate("all_reduce", 8)
    assert a100.costs.sm80_steps == a100.costs.intra_steps + a100.costs.inter_steps > 0
    assert h100.costs.sm80_steps == 0
    moved = PhysicalParams(sm80_step_latency_s=1e-6)
    assert pipelined_time_s(a100.costs, moved) - pipelined_time_s(a100.costs, PhysicalParams()) == pytest.approx(
        a100.costs.sm80_steps * 1e-6)
    assert pipelined_time_s(h100.costs, moved) == pipelined_time_s(h100.costs, PhysicalParams())


def test_it_is_fitted_across_tables_not_by_calibrate():
    assert "sm80_step_latency_s" in PUBLIC_FIT_NAMES and "sm80_step_latency_s" not in FIT_NAMES
    costs = PipelineCosts(10e-6, 14, 2, 0.0, 0, 0.0, 0.0, 0.0, True, sm80_steps=16)
    assert pipelined_time_s(costs, PhysicalParams(sm80_step_latency_s=0.5e-6)) == pytest.approx(18e-6)


def test_fitted_on_one_a100_table_it_predicts_the_others_floor(bench):
    on_oci, on_efa = _fitted_on(bench, OCI), _fitted_on(bench, EFA)
    # the same cost per step from two tables that share only the GPU (0.5-0.9 us each, within 0.2 us)
    assert 0.5e-6 < on_oci < 0.9e-6 and 0.5e-6 < on_efa < 0.9e-6 and abs(on_oci - on_efa) < 0.2e-6
    for held_out, value in ((OCI, on_efa), (EFA, on_oci)):
        ref = _ref(bench, held_out)
        before = bench.score(ref, Adjustment(SHIPPED_NOW)).floor_error
        after = bench.score(ref, Adjustment({**SHIPPED_NOW, "sm80_step_latency_s": value})).floor_error
        assert abs(after) < 0.25 and abs(after) < abs(before), (held_out, before, after)
        assert np.isfinite(after)
