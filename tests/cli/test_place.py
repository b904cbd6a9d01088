"""``gpuwait place`` and ``gpuwait run`` on a scenario with ``jobs:``."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from gpuwait.cli.main import main
from gpuwait.cli.place import place as place_command
from tests.cli.test_cli import run_cli

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "two-jobs-shared-uplinks.yaml")


def test_place_prints_hostlist_spans_and_co_tenant(capsys):
    assert main(["place", EXAMPLE, "--job", "a", "--policy", "slurm-tree", "--steps", "1"]) == 0
    out = capsys.readouterr().out
    assert "a placed by slurm-tree: s[0-1,4-5,8-9,12-13]" in out and "shares 48 network links with b" in out


def test_place_required_domain_that_does_not_exist_is_one_line(capsys):
    assert main(["place", EXAMPLE, "--job", "a", "--policy", "kueue", "--mode", "required"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: jobs[a]: placement: no free leaf domain holds 8 servers") and "hint:" in err


def test_place_bad_option_names_that_option_only(capsys):
    assert main(["place", EXAMPLE, "--job", "a", "--policy", "nosuch"]) == 2
    first = capsys.readouterr().err.splitlines()[0]
    assert first.startswith("error: --policy: 1 problem: policy: got 'nosuch'; input should be 'random'")


def test_run_prints_one_row_per_job_as_json(capsys):
    assert main(["run", EXAMPLE, "--steps", "1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [j["name"] for j in data["jobs"]] == ["a", "b"]
    # sharing never speeds a job up; a job the other does not slow comes out equal to rounding (1 ulp apart)
    assert all(j["step_shared_s"] >= j["step_alone_s"] * (1 - 1e-12) for j in data["jobs"])


# each example of `gpuwait place --help`, without its redirect to a file
HELP_EXAMPLES = re.findall(r"`gpuwait (place [^`>]*?)\s*(?:>[^`]*)?`", place_command.__doc__)


def test_place_help_has_its_examples():
    # an empty list would skip the test below instead of failing it
    assert len(HELP_EXAMPLES) >= 3, place_command.__doc__


@pytest.mark.parametrize("example", HELP_EXAMPLES)
def test_every_example_in_place_help_runs(capsys, monkeypatch, example):
    """The examples `gpuwait place --help` prints run (one asked for a leaf domain of 8 servers the example's
    leaves of 4 cannot hold, and printed an error)."""
    monkeypatch.chdir(Path(EXAMPLE).parents[1])
    assert main([*shlex.split(example), "--steps", "1"]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["--policy", "first-fit", "--switches", "2"], "switches: read by slurm-tree only; expected no switches with policy 'first-fit'"),
    (["--policy", "random", "--mode", "required"], "mode: read by kueue and volcano only; expected no mode with policy 'random'"),
    (["--policy", "slurm-tree", "--algorithm", "Balanced"], "algorithm: read by kueue only"),
])
def test_an_option_of_another_policy_is_refused_not_ignored(capsys, args, message):
    """`place --policy first-fit --switches 2` placed the job as plain first-fit and said nothing."""
    code, _, err = run_cli(capsys, "place", "examples/two-jobs-shared-uplinks.yaml", *args, "--steps", "1")
    assert code == 2 and message in err.splitlines()[0], err


def test_another_policy_on_the_command_line_drops_the_files_options(capsys):
    """Job b's file placement is an explicit server list: --policy kueue places it by kueue, not refused
    for the list (kueue reads none) nor placed on it."""
    code, out, _ = run_cli(capsys, "place", "examples/two-jobs-shared-uplinks.yaml", "--policy", "kueue", "--steps", "1",
                           "--json")
    assert code == 0 and json.loads(out)["policy"]["policy"] == "kueue"


def test_another_policy_keeps_the_files_options_it_also_reads(capsys, tmp_path):
    """`place --policy volcano` on a job the file places by kueue kept only `ranks`: the file's required pod
    became volcano's default (preferred, leaf). Now the options volcano also reads stay, and kueue's
    algorithm, which volcano does not read, is named in a note."""
    import yaml

    data = yaml.safe_load(Path(EXAMPLE).read_text())
    data["jobs"][0]["placement"] = {"policy": "kueue", "mode": "required", "level": "pod", "algorithm": "Balanced",
                                    "ranks": "mincut"}
    (tmp_path / "jobs.yaml").write_text(yaml.safe_dump(data))
    args = ("place", str(tmp_path / "jobs.yaml"), "--job", "a", "--policy", "volcano", "--steps", "1")
    code, out, err = run_cli(capsys, *args, "--json")
    doc = json.loads(out)
    assert code == 0, err
    assert doc["policy"] == {"policy": "volcano", "seed": 0, "mode": "required", "level": "pod", "algorithm": "BestFit",
                             "ranks": "mincut"}
    assert doc["notes"] == ["--policy volcano: job a's placement.algorithm (Balanced) is read by kueue only; not used"]
    code, _, err = run_cli(capsys, *args)
    assert code == 0 and err.startswith("note: --policy volcano: job a's placement.algorithm (Balanced)"), err


def test_place_runs_the_files_steps_as_run_does(capsys):
    """`place --policy explicit` keeps each job's own servers: the same placement `run` simulates, so the
    same shared step; place ran 2 steps where the file (and run) asks 3, and printed 541 ms for job a
    against run's 525 (the shared step is a mean over steps whose phases drift apart)."""
    import json

    assert main(["run", EXAMPLE, "--json"]) == 0
    ran = {j["name"]: j["step_shared_s"] for j in json.loads(capsys.readouterr().out)["jobs"]}
    assert main(["place", EXAMPLE, "--policy", "explicit", "--json"]) == 0
    placed = json.loads(capsys.readouterr().out)
    assert placed["steps"] == 3
    assert {j["name"]: j["step_shared_s"] for j in placed["jobs"]} == ran
