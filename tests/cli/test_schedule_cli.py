"""``gpuwait schedule`` on the shipped trace sample: three policies side by side and the report."""

from __future__ import annotations

import json
from pathlib import Path

from gpuwait.cli.main import main

TRACE = str(Path(__file__).resolve().parents[1] / "data" / "traces" / "helios-sample.csv")
ARGS = ["schedule", TRACE, "--cluster", "rocev2-400g-2tier", "--servers", "16", "--max-jobs", "8", "--arrival-scale", "10"]


def test_schedule_compares_three_policies_and_writes_the_report(tmp_path, capsys):
    assert main([*ARGS, "--policy", "slurm-tree", "--compare", "random", "--compare", "first-fit",
                 "--report", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "sensetime-helios: 8 jobs on rocev2-400g-2tier (128 GPUs)" in out
    assert all(p in out for p in ("slurm-tree", "random", "first-fit"))
    page = (tmp_path / "out" / "schedule.html").read_text()
    assert "JCT CDF per policy" in page and "Jobs over time: random" in page
    assert len((tmp_path / "out" / "jobs.csv").read_text().splitlines()) == 1 + 3 * 8


def test_schedule_json_has_per_job_rows(capsys):
    assert main([*ARGS, "--policy", "first-fit", "--no-backfill", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [p["policy"] for p in data["policies"]] == ["first-fit"] and data["policies"][0]["backfill"] is False
    jobs = data["jobs"]["first-fit"]
    assert len(jobs) == 8 and all(j["end_s"] > j["start_s"] >= j["arrival_s"] for j in jobs)


def test_schedule_errors_are_one_line(capsys):
    assert main(["schedule", TRACE]) == 2
    assert capsys.readouterr().err.startswith("error: --cluster: a trace needs a cluster")
    assert main([*ARGS, "--policy", "nope"]) == 2
    assert capsys.readouterr().err.startswith("error: --policy/--compare")
    # 'explicit' is a job's own server list: no policy for every job; it was taken and every job then failed
    # with "the policy cannot place it even on an empty cluster"
    assert main([*ARGS, "--policy", "first-fit", "--compare", "explicit"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --policy/--compare: got 'explicit'; expected one of random, first-fit, spread, "
                          "slurm-tree, slurm-block, kueue, volcano") and "placement:" in err
    # an unknown kind is named as such, not as a missing --cluster (a kind makes the file a trace)
    assert main(["schedule", TRACE, "--trace-kind", "slurm"]) == 2
    assert capsys.readouterr().err.startswith("error: --trace-kind: got 'slurm'; expected one of lingjun, ")


def test_schedule_keeps_a_scenarios_own_placements_unless_a_policy_is_given(capsys):
    # examples/two-jobs-shared-uplinks.yaml places each job by hand on servers interleaved over 4 leaves
    # (servers 0, 1, 4, 5, ... and 2, 3, 6, 7, ...), so both jobs cross the spines and share uplinks;
    # first-fit packs each job under 2 leaves of its own.
    example = str(Path(__file__).resolve().parents[2] / "examples" / "two-jobs-shared-uplinks.yaml")
    assert main(["schedule", example, "--compare", "first-fit", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [p["policy"] for p in data["policies"]] == ["per job", "first-fit"]
    assert [(j["leaves"], j["contended"]) for j in data["jobs"]["per job"]] == [(4, True), (4, True)]
    assert [(j["leaves"], j["contended"]) for j in data["jobs"]["first-fit"]] == [(2, False), (2, False)]


def test_a_trace_job_id_given_twice_is_named_as_the_trace_gives_it(tmp_path, capsys):
    """A trace with one job id on two rows said `jobs: names repeat`: jobs the user never wrote. The shared
    check (spec.jobs.refuse_repeated_names) names the trace file and its job id."""
    lines = Path(TRACE).read_text().splitlines()
    (tmp_path / "t.csv").write_text("\n".join([*lines[:5], lines[1]]) + "\n")
    assert main(["schedule", str(tmp_path / "t.csv"), "--cluster", "rocev2-400g-2tier", "--servers", "16"]) == 2
    assert capsys.readouterr().err.startswith(f"error: {tmp_path / 't.csv'}: job id '0' given 2 times; "
                                              "expected each job id once")


def test_schedule_of_a_scenario_names_its_cluster(capsys):
    # the scenario's cluster is a preset: the header names it, as `gpuwait run` does, not the field's default name
    example = str(Path(__file__).resolve().parents[2] / "examples" / "two-jobs-shared-uplinks.yaml")
    assert main(["schedule", example, "--policy", "first-fit"]) == 0
    assert "two-jobs-shared-uplinks on rocev2-400g-2tier (128 GPUs)" in capsys.readouterr().out
