"""examples/telemetry edited the way a real cluster's telemetry comes: a reading that is NaN, a port
whose counter kept one sample of the query's window. The answer stays the one the clean bundle gives
(the degraded HCA port of docs/telemetry.md's walkthrough), and what was left out is named."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gpuwait.telemetry.bundle import load_telemetry_dir
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


def _times(factor: float, names: tuple[str, ...], hosts: tuple[str, ...] | None = None):
    def edit(name, host, values):
        if name in names and (hosts is None or host in hosts):
            for point in values:
                point[1] = repr(float(point[1]) * factor)
    return edit


_PORT_BYTES = ("node_infiniband_port_data_transmitted_bytes_total", "node_infiniband_port_data_received_bytes_total")


def test_port_counters_in_bits_are_left_out_and_named(capsys, tmp_path):
    """The query's port byte counters written in bits (8 times the bytes): read as bytes, every port sent
    up to 4 times its 32 Gb/s line rate and the degraded port's utilization read 792 %. Bytes above a
    port's line rate are no reading (the unit is not guessed): left out and named with both rates, and
    the answer is the one the bundle gives without those counters."""
    findings, missing = _findings(capsys, _edited(tmp_path, _times(8, _PORT_BYTES)))
    assert findings == CLEAN
    named = [m for m in missing if m.startswith("port byte rates above the port's line rate (counters in bits?), "
                                                "left out: ")]
    assert len(named) == 1 and "and 25 more" in named[0]  # 14 hosts' ports, both directions
    assert "sl390lin107.hca->hoibp0013 128Gbps over a line rate of 32Gbps" in named[0]
    code, out, _ = run_cli(capsys, "diagnose", "--telemetry", str(tmp_path / "telemetry"), "--cluster", CLUSTER, "--json")
    utilization = [f["evidence"].get("utilization") for f in json.loads(out)["findings"]]
    assert not any(isinstance(u, float) and u > 1 for u in utilization)


def test_port_counters_within_the_line_rate_are_read(capsys, tmp_path):
    """The tolerance is argued from sampling (mapping.SAMPLING_TOLERANCE, 4/3): the example's ports
    at up to twice their bytes (the busiest at 16 of 32 Gb/s, then 32) stay readings, not errors."""
    findings, missing = _findings(capsys, _edited(tmp_path, _times(2, _PORT_BYTES)))
    assert not any("above the port's line rate" in m for m in missing)
    assert [f[1:] for f in findings][:1] == [f[1:] for f in CLEAN][:1]


def _pause_scrapes(increase_us: float) -> str:
    """Two scrapes 60 s apart of node_exporter's ethtool collector on s1's mlx5_2 (mlx5 counters.rst names;
    rx_prio3_pause_duration in microseconds): the port's bytes and the pause time it received."""
    lines = []
    for t_ms, k in ((1764612000000, 0), (1764612060000, 1)):
        labels = '{device="mlx5_2",instance="s1:9100"}'
        lines += [f"node_ethtool_received_prio3_pause_duration{labels} {1000 + k * increase_us:.0f} {t_ms}",
                  f"node_ethtool_transmitted_bytes_phy{labels} {1e9 + k * 6e11:.0f} {t_ms}"]
    return "\n".join(lines) + "\n"


def test_pause_time_above_the_window_is_left_out_and_named(tmp_path):
    """PFC pause durations are microseconds (mlx5 counters.rst); a counter in nanoseconds (or a rate
    recorded as a total) grows faster than time: 60,000 s paused in a 60 s window. No port is paused
    more than the window (SAMPLING_TOLERANCE allows for when the scrapes read it): left out and
    named; 12 s paused in the window is read as 12 s."""
    from gpuwait.diagnosis.telemetry import observe_telemetry
    from gpuwait.topology.presets import build_preset

    topo = build_preset("rocev2-400g-2tier", servers=2)
    up = int(topo.nic_uplink[1, 2, 0])
    for increase_us, read_s in ((12e6, 12.0), (6e10, None)):
        (tmp_path / "node.prom").write_text(_pause_scrapes(increase_us))
        obs = observe_telemetry(load_telemetry_dir(tmp_path), topo)
        named = [m for m in obs.missing if m.startswith("PFC pause time above its window's length")]
        if read_s is not None:
            assert obs.counters["pause_received_s"][up] == pytest.approx(read_s) and not named
        else:
            assert "pause_received_s" not in obs.counters
            assert named == [f"PFC pause time above its window's length (durations not in microseconds?), left out: "
                             f"node_ethtool_received_prio3_pause_duration of {topo.link_name(up)}: 1e+03 s paused "
                             "per second of the window"]


def test_nvml_utilization_above_100_percent_is_left_out_and_named(tmp_path):
    """DCGM_FI_DEV_GPU_UTIL is a percentage (NVML nvmlDeviceGetUtilizationRates, 0-100): a reading of 250
    (summed over a recording rule's series) is no reading of it, as a ratio above 1 is not of SM_ACTIVE."""
    from gpuwait.diagnosis.telemetry import observe_telemetry
    from gpuwait.topology.presets import build_preset

    topo = build_preset("rocev2-400g-2tier", servers=2)
    rows = [f'DCGM_FI_DEV_GPU_UTIL{{gpu="{g}",Hostname="s{s}"}} {250 if (s, g) == (0, 1) else 90}'
            for s in range(2) for g in range(8)]
    (tmp_path / "dcgm.prom").write_text("\n".join(rows) + "\n")
    obs = observe_telemetry(load_telemetry_dir(tmp_path), topo)
    assert obs.gpu_names is not None and "s0.gpu1" not in obs.gpu_names and len(obs.gpu_names) == 15
    assert any(m.endswith("left out: DCGM_FI_DEV_GPU_UTIL{s0.gpu1} 250") for m in obs.missing)
