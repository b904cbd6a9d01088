"""examples/telemetry edited the way a real cluster's telemetry comes: a reading that is NaN, a port
whose counter kept one sample of the query's window. The answer stays the one the clean bundle gives
(the degraded HCA port of docs/telemetry.md's walkthrough), and what was left out is named."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.cli.test_cli import run_cli

BUNDLE = Path("examples/telemetry")
CLUSTER = "examples/inventory/x5-cluster.yaml"
QUERY = Path("node-exporter") / "query_range.json"


def _findings(capsys, bundle: Path) -> tuple[list[tuple[str, str, str]], list[str]]:
    code, out, err = run_cli(capsys, "diagnose", "--telemetry", str(bundle), "--cluster", CLUSTER, "--json")
    assert code == 0, err
    doc = json.loads(out)
    return [(f["severity"], f["kind"], f["component"]) for f in doc["findings"]], doc["missing"]


def _edited(tmp_path: Path, edit) -> Path:
    bundle = tmp_path / "telemetry"
    shutil.copytree(BUNDLE, bundle)
    doc = json.loads((bundle / QUERY).read_text())
    for series in doc["data"]["result"]:
        edit(series["metric"]["__name__"], series["metric"]["instance"].split(":")[0], series["values"])
    (bundle / QUERY).write_text(json.dumps(doc))
    return bundle


CLEAN = [("warning", "link-degrade", "hoibp0013->sl390lin105.hca"), ("warning", "ib-xmit-wait", "sl390lin105.hca")]


def test_a_nan_reading_is_left_out_and_named(capsys, tmp_path):
    """A NaN busy ratio of one GPU read as 100 % busy (min(1, nan) is 1): a critical slow-gpu on a
    healthy GPU. NaN is no reading: left out, and the file and series are named."""
    bundle = tmp_path / "telemetry"
    shutil.copytree(BUNDLE, bundle)
    dcgm = bundle / "dcgm" / "sl390lin102.prom"
    lines = [line.rsplit(" ", 1)[0] + " NaN" if line.startswith("DCGM_FI_PROF_SM_ACTIVE{gpu=\"3\"") else line
             for line in dcgm.read_text().splitlines()]
    dcgm.write_text("\n".join(lines) + "\n")
    findings, missing = _findings(capsys, bundle)
    assert findings == CLEAN
    assert any("dcgm/sl390lin102.prom: 1 sample(s) without a finite value (NaN or Inf) left out" in m for m in missing)


def test_a_port_counter_with_one_sample_in_the_window_is_left_out_and_named(capsys, tmp_path):
    """r815lin112's transmit counter keeps one point of the window (the other was NaN, or the exporter
    was down): its count since the counter was cleared, 5e12 bytes, read beside the others' increases
    over the window as the busiest port, and the degraded port cost nothing (info). Left out instead."""

    def one_point(name, host, values):
        if host == "r815lin112" and name == "node_infiniband_port_data_transmitted_bytes_total":
            del values[1]

    findings, missing = _findings(capsys, _edited(tmp_path, one_point))
    assert findings == CLEAN
    assert ("port byte counters without a rate over the window (one sample), left out: "
            "r815lin112.hca->S-0002c902004827b0") in missing


def test_timestamps_in_milliseconds_are_one_error(capsys, tmp_path):
    """A query_range answer whose timestamps are milliseconds (another tool's export) read as seconds
    stretched the 60 s window to 16 hours: utilization 0.1 % and the degraded port 'info', silently."""

    def milliseconds(name, host, values):
        for point in values:
            point[0] *= 1000

    bundle = _edited(tmp_path, milliseconds)
    code, _, err = run_cli(capsys, "diagnose", "--telemetry", str(bundle), "--cluster", CLUSTER)
    assert code != 0 and len(err.strip().splitlines()) == 2
    assert "timestamp 1764612000000.0 is after the year 5000 in seconds; expected Unix seconds" in err
    assert "divide it by 1000" in err


def test_a_busy_ratio_written_as_a_percentage_is_left_out_and_named(capsys, tmp_path):
    """DCGM_FI_PROF_SM_ACTIVE is a ratio; a recording rule that made it a percentage (52.5) was clipped
    to 1: every GPU fully busy, no exposed communication, and the degraded port cost nothing (info).
    Readings above a field's full scale are left out and named; the next busy field every GPU reports
    is read and the degraded port is found again."""
    bundle = tmp_path / "telemetry"
    shutil.copytree(BUNDLE, bundle)
    for dcgm in (bundle / "dcgm").glob("*.prom"):
        lines = [f"{line.rsplit(' ', 1)[0]} {100 * float(line.rsplit(' ', 1)[1])}"
                 if line.startswith("DCGM_FI_PROF_SM_ACTIVE{") else line for line in dcgm.read_text().splitlines()]
        dcgm.write_text("\n".join(lines) + "\n")
    findings, missing = _findings(capsys, bundle)
    assert [f[1:] for f in findings] == [f[1:] for f in CLEAN] and findings[0][0] != "info"
    assert any(m.startswith("GPU busy readings above their full scale (a 0-1 ratio written as a percentage?), "
                            "left out: DCGM_FI_PROF_SM_ACTIVE{r815lin110.gpu0} 51.8") for m in missing)


def _export(step_s: float) -> str:
    """A few series of gpuwait's own export of a 2-server run: its step, its steps, DCGM's busy ratios."""
    lines = [f"gpuwait_step_seconds {step_s}", "# TYPE gpuwait_steps_total counter", "gpuwait_steps_total 3"]
    lines += [f'DCGM_FI_PROF_SM_ACTIVE{{gpu="{g}",Hostname="s{s}"}} {0.6 if (s, g) == (1, 3) else 0.45}'
              for s in range(2) for g in range(8)]
    return "\n".join(lines) + "\n"


def test_an_export_copied_twice_is_read_once_and_two_runs_are_one_error(capsys, tmp_path):
    """The same export twice in the directory was '2 samples of gpuwait_steps_total match labels {};
    add labels to pick one (e.g. {})', which names neither the files nor what to do. Identical copies
    are read once; two runs' exports (different step times) are one error naming the files."""
    cluster = ["--cluster", "rocev2-400g-2tier", "--servers", "2"]
    copies = tmp_path / "copies"
    copies.mkdir()
    (copies / "a.prom").write_text(_export(1.5))
    (copies / "b.prom").write_text(_export(1.5))
    code, out, err = run_cli(capsys, "diagnose", "--telemetry", str(copies), *cluster, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["step_time_s"] == 1.5 and doc["findings"][0]["component"] == "s1.gpu3"
    (copies / "b.prom").write_text(_export(2.0))
    code, _, err = run_cli(capsys, "diagnose", "--telemetry", str(copies), *cluster)
    assert code != 0 and len(err.strip().splitlines()) == 2
    assert "gpuwait_step_seconds differs within the directory (a.prom: 1.5; b.prom: 2); expected the export of one run" in err
