"""A healthy but network-bound job: diagnose finds no fault, and says what its design costs.

Diagnose compares the step against a healthy model of the same design, so a design's own costs are never a
finding; `run` measures them (the network against an ideal one, the pipeline bubble, data wait). Before, a
Mixtral 8x7B job at TP 2, CP 2, PP 3 (48 GPUs on RoCEv2 with ECMP) read only "no cause of lost time found"
while `run` showed a sixth of its step spent on the network and a seventh in the bubble.
"""

from __future__ import annotations

import json

import pytest

from tests.cli.test_cli import run_cli

MIXTRAL = """name: mixtral-tp2-pp3-cp2
cluster: {preset: rocev2-400g-2tier, servers: 6}
workload:
  model: {preset: mixtral-8x7b}
  parallel: {tp: 2, pp: 3, cp: 2, ep: 8, account_for_embedding: true, micro_batch: 1, global_batch: 64}
  compute: {gpu: H100-SXM}
  steps: 1
"""


def test_no_fault_still_names_the_design_costs_run_measures(capsys, tmp_path):
    path = tmp_path / "mixtral.yaml"
    path.write_text(MIXTRAL)
    code, out, err = run_cli(capsys, "run", str(path), "--json")
    assert code == 0, err
    case = json.loads(out)["cases"][0]
    network_s, bubble_s = case["network_cost_s"], case["breakdown_s"]["bubble"]
    step_s = case["step_time_s"]
    assert network_s / step_s > 0.1 and bubble_s / step_s > 0.1 and case["breakdown_s"]["data_wait"] == 0.0
    code, out, err = run_cli(capsys, "diagnose", str(path), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["findings"] == [] and doc["step_time_s"] == pytest.approx(step_s, rel=1e-12)
    sentences = doc["conclusion"]
    assert sentences.startswith("RoCEv2, ECMP: no cause of lost time found. ")
    assert (f"Design cost, not a fault: exposed communication against an ideal network, {network_s * 1e3:,.1f} ms "
            f"per step ({network_s / step_s:.1%}).") in sentences
    assert f"Design cost, not a fault: pipeline bubble, {bubble_s * 1e3:,.1f} ms per step ({bubble_s / step_s:.1%})." \
        in sentences
    assert "data wait" not in sentences  # none in this run: a cost of 0 is no line
    assert "`gpuwait sweep`" in sentences
    code, out, err = run_cli(capsys, "diagnose", str(path))
    assert code == 0 and "Design cost, not a fault: pipeline bubble" in out and "no findings" in out, err


def test_the_design_costs_are_the_runs_and_stay_out_of_a_diagnosis_with_a_cause(tmp_path):
    """The numbers beside the words are the diagnosed run's own (Conclusion.numbers); a diagnosis that found a
    cause says that cause, unchanged, and no design cost."""
    import gpuwait as g
    from gpuwait.report.conclusion import diagnosis_conclusion

    d = g.diagnose("examples/dp-only.yaml", inject=["slow-gpu:s1.gpu3"], measure_gain=False).diagnosis
    c = diagnosis_conclusion(d)
    assert "design_costs_s" not in c.numbers and "Design cost" not in c.text and c.text.startswith(
        f"{d.case}: the main cause is slow gpu on s1.gpu3")
    path = tmp_path / "mixtral.yaml"
    path.write_text(MIXTRAL)
    healthy = g.diagnose(str(path), measure_gain=False).diagnosis
    costs = diagnosis_conclusion(healthy).numbers["design_costs_s"]
    result = next(r for r in healthy.run.results if r.case == healthy.case)
    assert costs == {"network_s": result.breakdown.network_cost_s,
                     "bubble_s": result.breakdown.job_mean_s()["bubble"]}
