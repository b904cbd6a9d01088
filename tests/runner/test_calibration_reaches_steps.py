"""A cluster's ``calibration:`` section (written by ``gpuwait calibrate``) reaches ``gpuwait run`` and
``gpuwait diagnose``: their step engines time collectives with the same CollectivePredictor as ``perf``, which
reads the parameters from the cluster spec (gpuwait.collectives.physical.physical_params).

Expected direction, from the model's closed form (collectives/physical.py): a collective's time is its
latency plus bytes over (rate x efficiency), so a lower ``nic_efficiency`` and a larger ``launch_latency``
can only lengthen a step whose collectives cross the network, and a variant keeps its cluster's calibration.
"""

from __future__ import annotations

import pytest

from gpuwait.api import diagnose, simulate
from gpuwait.runner.inputs import load_scenario

SCENARIO = """name: calibrated
cluster:
  preset: rocev2-400g-2tier
  servers: 4
  transport: {{name: rocev2}}
  routing: {{kind: ecmp, seed: 3}}
{calibration}
workload:
  model: {{preset: llama-8b, seq_len: 4096}}
  parallel: {{tp: 1, pp: 1, zero: 1, micro_batch: 1, global_batch: 64}}
  compute: {{gpu: H100-SXM, efficiency: 0.5, jitter_cv: 0.0}}
  steps: 1
variants:
  - name: adaptive routing
    routing: {{kind: adaptive}}
"""
SLOWER = "  calibration: {nic_efficiency: 0.5, launch_latency: 1ms, fitted_on: [made-up.log]}"


def _scenario(tmp_path, calibration: str):
    path = tmp_path / ("cal.yaml" if calibration else "plain.yaml")
    path.write_text(SCENARIO.format(calibration=calibration))
    return load_scenario(path)


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cal")
    return _scenario(tmp, ""), _scenario(tmp, SLOWER)


def test_run_applies_the_calibration_to_every_case(scenarios):
    plain, calibrated = (simulate(s).results for s in scenarios)
    assert len(plain) == len(calibrated) == 2  # the base case and its variant
    for before, after in zip(plain, calibrated, strict=True):
        assert after.step_times_s.mean() > before.step_times_s.mean()


def test_diagnose_applies_it_too(scenarios):
    plain, calibrated = (diagnose(s, measure_gain=False).diagnosis for s in scenarios)
    assert calibrated.step_time_s > plain.step_time_s


def test_run_names_the_calibration_it_used(scenarios):
    # run printed the cluster as "rocev2-400g-2tier: 4 servers x 8 GPUs" calibrated or not; it now says so,
    # as perf's settings do, and an uncalibrated cluster's label is unchanged
    plain, calibrated = (simulate(s).results for s in scenarios)
    assert [r.cluster for r in plain] == ["rocev2-400g-2tier: 4 servers x 8 GPUs"] * 2
    assert [r.cluster for r in calibrated] == ["rocev2-400g-2tier: 4 servers x 8 GPUs, calibrated (fitted to made-up.log)"] * 2
