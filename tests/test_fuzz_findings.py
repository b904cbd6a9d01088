"""What bench/fuzz.py's sweep, inventory and jobs generators found (issue 14), one test each: every
malformed input ends in one clear error naming the file, line or field, never a traceback or an
exit 0 with nothing done."""

from __future__ import annotations

import copy
import re
import shutil
from pathlib import Path

import pytest
import yaml

from gpuwait.cli.main import main
from gpuwait.errors import SpecError

ROOT = Path(__file__).parents[1]
INVENTORY = ROOT / "tests" / "data" / "inventory"
TRACES = ROOT / "tests" / "data" / "traces"


def _one_error(capsys, argv: list[str]) -> str:
    code = main(argv)
    # progress lines ("  2/2 cases") are not the error
    err = "\n".join(ln for ln in capsys.readouterr().err.strip().splitlines() if not re.match(r"^\s*\d+/\d+ cases$", ln))
    assert code != 0 and "Traceback" not in err and len(err.splitlines()) <= 2, err
    return err.splitlines()[0]


# ------------------------------------------------------------------ inventory import

def test_a_missing_node_name_map_is_one_error(capsys, tmp_path):
    """Was FileNotFoundError: the GUID map was opened without the checked reader."""
    err = _one_error(capsys, ["inventory", "import", "--ibnetdiscover", str(INVENTORY / "x5.ibnetdiscover"),
                              "--node-name-map", str(tmp_path / "missing.map"), "--out", str(tmp_path / "c.yaml")])
    assert "missing.map" in err and "cannot read" in err


@pytest.mark.parametrize("name, flag", [("x5.ibnetdiscover", "--ibnetdiscover"), ("links.csv", "--links"),
                                        ("links.yaml", "--links"), ("x5-topology.conf", "--slurm")])
def test_an_inventory_file_that_is_not_utf8_names_its_line(capsys, tmp_path, name, flag):
    """Was UnicodeDecodeError: the readers decoded with Path.read_text."""
    data = (INVENTORY / name).read_bytes()
    at = data.index(b"\n", len(data) // 2) + 1
    (tmp_path / name).write_bytes(data[:at] + b"\xff\xfe" + data[at:])
    err = _one_error(capsys, ["inventory", "import", flag, str(tmp_path / name), "--out", str(tmp_path / "c.yaml")])
    line = data[:at].count(b"\n") + 1
    assert f"line {line}, column 1: byte 0xff is not UTF-8" in err


def test_an_lldp_file_that_is_not_utf8_is_one_error(capsys, tmp_path):
    shutil.copytree(INVENTORY / "lldp", tmp_path / "lldp")
    (tmp_path / "lldp" / "gpu-a01.json").write_bytes(b"\xff" + (INVENTORY / "lldp" / "gpu-a01.json").read_bytes())
    err = _one_error(capsys, ["inventory", "import", "--lldp", str(tmp_path / "lldp"), "--out", str(tmp_path / "c.yaml")])
    assert "gpu-a01.json" in err and "not UTF-8" in err


def test_a_node_name_map_guid_that_is_not_hex_names_its_line(tmp_path):
    """Was ValueError from int(..., 16) (a 200 KB line of x's in place of a GUID)."""
    from gpuwait.inventory.ibnetdiscover import read_name_map

    (tmp_path / "x.map").write_text("0x0002c903000e0b72 node01\n" + "x" * 200_000 + " node02\n")
    with pytest.raises(SpecError, match=r"x\.map:2: GUID 'x{40}' is not hexadecimal"):
        read_name_map(str(tmp_path / "x.map"))


def test_a_links_csv_field_past_the_csv_limit_names_its_line(tmp_path):
    """Was _csv.Error (field larger than field limit)."""
    from gpuwait.inventory.explicit import read_links

    lines = (INVENTORY / "links.csv").read_text().splitlines()
    lines[1] = "x" * 200_000 + lines[1]
    (tmp_path / "links.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(SpecError, match=r"links\.csv:2: cannot read the row \(field larger than field limit"):
        read_links(str(tmp_path / "links.csv"))


# ------------------------------------------------------------------ job traces

def test_a_trace_row_cut_short_is_skipped(tmp_path):
    """Was KeyError: a Lingjun worker row with fewer fields than the header lacked its columns."""
    from gpuwait.workload.traces import read_lingjun

    text = (TRACES / "lingjun" / "worker-sample.csv").read_text().splitlines()
    full = read_lingjun(TRACES / "lingjun" / "worker-sample.csv")
    (tmp_path / "worker.csv").write_text("\n".join([text[0], "-1e999 nan inf", *text[1:]]) + "\n")
    trace = read_lingjun(tmp_path / "worker.csv")
    assert len(trace.jobs) == len(full.jobs)


def test_a_trace_field_past_the_csv_limit_names_its_line(tmp_path):
    from gpuwait.workload.traces import read_helios

    lines = (TRACES / "helios-sample.csv").read_text().splitlines()
    lines[2] = "x" * 200_000 + " " + lines[2]
    (tmp_path / "helios.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(SpecError, match=r"helios\.csv:3: cannot read the row"):
        read_helios(tmp_path / "helios.csv")


# ------------------------------------------------------------------ scenarios with jobs

def _jobs(edit) -> dict:
    data = yaml.safe_load((ROOT / "examples" / "two-jobs-shared-uplinks.yaml").read_text())
    edit(data["jobs"])
    return data


@pytest.mark.parametrize("edit, expected", [
    (lambda jobs: jobs[1].update(name="a"), "jobs: name 'a' given 2 times (jobs[0], jobs[1]); expected each name once"),
    (lambda jobs: jobs[1].update(placement=list(jobs[0]["placement"])), "jobs[b]: placement.servers: got"),
    (lambda jobs: jobs[0].update(placement=[0]), "jobs[a]: placement.servers: got [0]; expected 8 distinct"),
    (lambda jobs: jobs[0].update(placement=[10 ** 9] * 8), "expected 8 distinct free server indices in 0..15"),
])
def test_validate_refuses_the_jobs_run_refuses(capsys, tmp_path, edit, expected):
    """Was 'ok': validate checked no job (names, placements), though run and place refuse them."""
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(_jobs(edit)))
    assert expected in _one_error(capsys, ["validate", str(tmp_path / "s.yaml")])


def test_validate_describes_a_valid_jobs_scenario(capsys):
    assert main(["validate", str(ROOT / "examples" / "two-jobs-shared-uplinks.yaml")]) == 0
    assert "2 jobs: a (8 servers), b (8 servers)" in capsys.readouterr().out


# ------------------------------------------------------------------ sweeps

TINY_SWEEP = {"name": "tiny",
              "base": {"name": "dp", "cluster": {"preset": "rocev2-400g-2tier", "servers": 2},
                       "workload": {"model": {"preset": "llama-8b", "seq_len": 2048},
                                    "parallel": {"tp": 8, "pp": 1, "micro_batch": 1, "global_batch": 16}}},
              "steps": 1, "axes": [{"path": "cluster.routing.kind", "values": ["ecmp", "adaptive"]}]}


def test_a_sweep_whose_every_case_is_refused_is_one_error(capsys, tmp_path):
    """Was exit 0 ('2 run (2 invalid)') with the reason only in the results: a base scenario with a
    bad field refuses every case, so the sweep file is what is wrong; the error names the field."""
    sweep = copy.deepcopy(TINY_SWEEP)
    sweep["base"]["workload"]["parallel"]["micro_batch"] = -1
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(sweep))
    err = _one_error(capsys, ["sweep", "run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "out"), "--workers", "1"])
    assert "none of the 2 case(s) run was valid" in err and "workload.parallel.micro_batch: got -1" in err


def test_a_sweep_with_two_axes_on_one_path_is_refused(tmp_path):
    """Was accepted: the second axis overwrote the first and the product collapsed to 2 cases."""
    from gpuwait.runner.sweep import load_sweep

    sweep = copy.deepcopy(TINY_SWEEP)
    sweep["axes"].append({"path": "cluster.routing.kind", "values": ["ecmp"], "name": "again"})
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(sweep))
    with pytest.raises(SpecError, match="path 'cluster.routing.kind' appears on two axes; expected each once"):
        load_sweep(str(tmp_path / "s.yaml"))


# ------------------------------------------------------------------ JSON readers

@pytest.mark.parametrize("text, reason", [("[" + "9" * 5000 + "]", "more than 4300 digits"),
                                          ("[" * 100_000, "nested too deep")])
def test_every_json_reader_names_a_number_past_the_digit_limit_or_too_deep_a_nesting(tmp_path, text, reason):
    """json.loads raises a bare ValueError for an integer of more than 4300 digits (Python's
    int-max-str-digits limit) and RecursionError for deep nesting, which the readers, catching only
    JSONDecodeError, let out as tracebacks; spec.reader.loads_json turns both into the decode error each
    reader already names."""
    from gpuwait.inventory.lldp import read_lldp
    from gpuwait.telemetry.errors import TelemetryFormatError
    from gpuwait.telemetry.kineto import parse_kineto_trace
    from gpuwait.telemetry.nccltests_log import from_json
    from gpuwait.telemetry.promjson import parse_prometheus_json
    from gpuwait.workload.traces import read_philly

    path = tmp_path / "x.json"
    path.write_text(text)
    readers = [(lambda: parse_prometheus_json(text, source="q.json"), TelemetryFormatError),
               (lambda: parse_kineto_trace(text, source="t.json"), TelemetryFormatError),
               (lambda: from_json(text), SpecError), (lambda: read_lldp([str(path)]), SpecError),
               (lambda: read_philly(path), SpecError)]
    for read, error in readers:
        with pytest.raises(error, match=reason):
            read()


# ------------------------------------------------------------------ names the OS refuses

@pytest.mark.parametrize("argv", [["validate", "{s}"], ["perf", "all_reduce", "--cluster", "x" * 300]])
def test_a_preset_name_too_long_for_a_file_name_is_an_unknown_preset(capsys, tmp_path, argv):
    """Was OSError 'File name too long' (seed 3047): looks_like_file asked Path.exists, which raises
    ENAMETOOLONG, whether a 300-character preset name was a file."""
    data = yaml.safe_load((ROOT / "examples" / "ecmp-collision.yaml").read_text())
    data["cluster"] = "x" * 300
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(data))
    err = _one_error(capsys, [a.format(s=tmp_path / "s.yaml") for a in argv])
    assert "unknown preset 'xxx" in err
