"""A `jobs:` run says what a one-workload run says beside its NCCL predictions: the cluster's
calibration when one is used, a calibration fitted under NCCL variables the run does not set, and an
``nccl.version`` newer than gpuwait checked. The jobs' output printed none of them."""

from __future__ import annotations

import json

import yaml

from gpuwait.runner.jobs import run_jobs
from gpuwait.runner.workload import run_workload
from gpuwait.spec import Scenario
from tests.cli.test_cli import run_cli

WORKLOAD = {"model": {"preset": "llama-8b", "seq_len": 4096},
            "parallel": {"tp": 1, "pp": 1, "zero": 1, "micro_batch": 1, "global_batch": 16},
            "compute": {"gpu": "H100-SXM", "jitter_cv": 0}, "steps": 1}
CLUSTER = {"preset": "rocev2-400g-2tier", "servers": 4, "nccl": {"version": "2.99.0"},
           "calibration": {"nic_efficiency": 0.9, "fitted_on": ["two-node.log"], "nccl_env": {"NCCL_ALGO": "Ring"}}}


def _jobs() -> dict:
    return {"cluster": CLUSTER, "jobs": [{"name": "a", "servers": 2, "placement": [0, 1], "workload": WORKLOAD}]}


def test_a_jobs_run_has_the_notes_and_the_calibrated_label_of_a_workload_run():
    alone = run_workload(Scenario.model_validate({"cluster": CLUSTER, "workload": WORKLOAD | {"gpus": 16}}))[0]
    run = run_jobs(Scenario.model_validate(_jobs()))
    assert "calibrated (fitted to two-node.log)" in alone.cluster and run.cluster == alone.cluster
    assert len(alone.notes) == 2 and run.notes == alone.notes
    assert run.notes[0].startswith("NCCL 2.99.0 is newer than") and "NCCL_ALGO=Ring" in run.notes[1]


def test_gpuwait_run_prints_the_jobs_notes_and_gives_them_in_json(capsys, tmp_path):
    scenario = tmp_path / "jobs.yaml"
    scenario.write_text(yaml.safe_dump(_jobs()))
    code, out, err = run_cli(capsys, "run", str(scenario), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert "calibrated (fitted to two-node.log)" in doc["cluster"] and len(doc["notes"]) == 2
    code, out, err = run_cli(capsys, "run", str(scenario))
    assert code == 0, err
    text = " ".join(out.split())  # rich wraps long lines
    assert "calibrated (fitted to two-node.log)" in text
    for note in doc["notes"]:
        assert f"note: {' '.join(note.split())}" in text
