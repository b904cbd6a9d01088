"""Traffic runs as first-class results: `run --report` on either engine and `diagnose --report` on a
traffic scenario write a report (FCT CDF, queues and pauses of the hottest ports, ECN/CNP rates), a
Perfetto trace with queue counter tracks, and flows.parquet; the conclusion's numbers are the runs'."""

from __future__ import annotations

import json
import re

import numpy as np
import pyarrow.parquet as pq
import pytest

from gpuwait.report.traffic import case_name, hot_ports, queue_series, render_traffic_html, traffic_conclusion
from gpuwait.runner.inputs import load_scenario
from gpuwait.runner.traffic import run_traffic
from gpuwait.units import format_time
from tests.cli.test_cli import run_cli
from tests.diagnosis.test_packet_diagnosis import INCAST_YAML

TWO_CASES = INCAST_YAML + """variants:
  - name: adaptive
    routing: {kind: adaptive}
"""


@pytest.fixture()
def incast(tmp_path):
    path = tmp_path / "incast.yaml"
    path.write_text(INCAST_YAML)
    return path


def test_packet_run_writes_a_report(capsys, tmp_path, incast):
    out_dir = tmp_path / "rep"
    code, out, _ = run_cli(capsys, "run", str(incast), "--engine", "packet", "--report", str(out_dir), "--json")
    assert code == 0
    doc = json.loads(out)
    names = [p.split("/")[-1] for p in doc["report"]]
    assert names[0] == "report.html" and names[-2:] == ["flows.parquet", "pauses.parquet"] and names[1].startswith("trace-")
    page = (out_dir / "report.html").read_text()
    assert "fig-fct" in page and "fig-queue-0" in page and "fig-pause-0" in page and "ECN marks/s" in page
    assert "fig-pause-time-0" in page  # PFC pauses over time, not only their totals
    assert page.index('id="conclusion"') < page.index("<h2>")
    trace = json.loads(next(out_dir.glob("trace-*.json")).read_text())
    counters = [e for e in trace["traceEvents"] if e["ph"] == "C"]
    assert counters and all(e["name"].startswith(("queue ", "paused ")) for e in counters)
    paused = [e for e in counters if e["name"].startswith("paused ")]
    assert paused and all(0 <= e["args"]["paused"] <= 1 for e in paused)
    assert len([e for e in trace["traceEvents"] if e["ph"] == "X"]) == 4  # one slice per flow
    assert pq.read_table(out_dir / "flows.parquet").num_rows == 4
    pauses = pq.read_table(out_dir / "pauses.parquet").to_pydict()
    assert set(pauses) == {"case", "link", "time_s", "paused_fraction"} and max(pauses["paused_fraction"]) > 0


def test_every_figure_of_a_packet_report_names_what_its_y_axis_counts(capsys, tmp_path, incast):
    """Was a bare 0-100 % axis on 'time paused by PFC': the share of what (the run, an interval) said nowhere
    but in a hover text."""
    out_dir = tmp_path / "rep"
    assert run_cli(capsys, "run", str(incast), "--engine", "packet", "--report", str(out_dir))[0] == 0
    page = (out_dir / "report.html").read_text()
    figures = dict(re.findall(r'<script type="application/json" id="(fig-[^"]+)-data">(.*?)</script>', page, re.S))
    assert "fig-pause-0" in figures
    for fig_id, body in figures.items():
        title = json.loads(body)["layout"].get("yaxis", {}).get("title", {}).get("text")
        assert title, f"{fig_id}: no y axis title"
    assert json.loads(figures["fig-pause-0"])["layout"]["yaxis"]["title"]["text"] == "share of the run paused"


def test_a_run_without_pauses_draws_no_empty_pause_plot(tmp_path):
    # InfiniBand's credits never send a PFC pause: the queues are plotted, a bar chart of zeros is not
    path = tmp_path / "ib.yaml"
    path.write_text(INCAST_YAML.replace("transport: {name: rocev2}", "transport: {name: infiniband}"))
    runs = run_traffic(load_scenario(str(path)), "packet")
    assert runs[0].paused_s.sum() == 0 and hot_ports(runs[0])
    page = render_traffic_html(runs, "ib")
    assert "fig-queue-0" in page and "fig-pause-0" not in page and "fig-pause-time-0" not in page


UNFINISHED_YAML = """name: cut-short
cluster:
  servers: 4
  server: {gpus: 1, nics: 1, nic_speed: 100Gbps, pcie_switches: 1, cpus: 1}
  fabric: {tiers: 2, switch_radix: 8}
  transport: {name: rocev2}
# clamping DCQCN's target at every cut keeps this 3:1 incast (1.0 ms at line rate) going past the
# 1.1 ms limit: its flows end at 1.28, 2.30 and 2.66 ms
packet: {max_time_s: 0.0011, dcqcn: {clamp_target_rate: true}}
traffic:
  patterns:
    - {kind: incast, size: 4MB}
"""


def test_a_run_cut_short_by_its_time_limit_says_so(capsys, tmp_path):
    path = tmp_path / "cut.yaml"
    path.write_text(UNFINISHED_YAML)
    runs = run_traffic(load_scenario(str(path)), "packet")
    assert runs[0].timed_out and not np.isfinite(runs[0].flow_finish_s).any()
    text = " ".join(traffic_conclusion(runs).sentences)
    assert "completes" not in text and "3 of 3 flows did not finish" in text and "1.1ms" in text
    code, out, _ = run_cli(capsys, "run", str(path), "--engine", "packet")
    assert code == 0 and "did not finish" in out and "nan" not in out and "no flow finished" in out



def test_a_base_that_completes_beside_cases_cut_short_says_its_own_time(tmp_path):
    # InfiniBand's credits finish the incast within the limit, the clamped RoCEv2 variant does not: the
    # conclusion states the base's completion time (it compared only completed cases and, the base being
    # the only one, said nothing of it)
    path = tmp_path / "cut-variant.yaml"
    path.write_text(UNFINISHED_YAML.replace("transport: {name: rocev2}", "transport: {name: infiniband}")
                    + "variants:\n  - name: clamped\n    transport: {name: rocev2}\n")
    runs = run_traffic(load_scenario(str(path)), "packet")
    assert np.isfinite(runs[0].flow_finish_s).all() and not np.isfinite(runs[1].flow_finish_s).any()
    c = traffic_conclusion(runs)
    end = float(runs[0].flow_finish_s.max())
    assert c.sentences[0].startswith(f"{case_name(runs[0])} completes the traffic in ") and "clamped" in c.sentences[0]
    assert c.numbers["completion_s"][case_name(runs[0])] == end
    assert "clamped: 3 of 3 flows did not finish" in " ".join(c.sentences)


def test_the_p99_sentence_pairs_each_case_with_its_own_flows_when_two_share_a_name(tmp_path):
    # a variant named as the base's label ("ecmp crc32 seed 0"; two variants of one name are refused): the p99s
    # were keyed by name, then zipped with the runs' unfinished counts, so one case lost its entry and a
    # clamped one printed "nanps"
    path = tmp_path / "same-names.yaml"
    path.write_text(UNFINISHED_YAML + "variants:\n  - name: ecmp crc32 seed 0\n    transport: {name: infiniband}\n"
                    "  - name: other\n    transport: {name: rocev2}\n")
    runs = run_traffic(load_scenario(str(path)), "packet")
    assert [case_name(r) for r in runs] == ["ecmp crc32 seed 0"] * 2 + ["other"]
    assert [bool(np.isfinite(r.flow_finish_s).all()) for r in runs] == [False, True, False]
    [p99] = [s for s in traffic_conclusion(runs).sentences if s.startswith("Flow completion time p99")]
    assert "nan" not in p99 and p99.count("unknown (3 flows unfinished)") == 2
    assert f"ecmp crc32 seed 0 {format_time(runs[1].fct_percentiles_s()['p99'])}" in p99

def test_the_conclusion_states_the_runs_numbers(tmp_path):
    path = tmp_path / "two.yaml"
    path.write_text(TWO_CASES)
    runs = run_traffic(load_scenario(str(path)), "packet")
    c = traffic_conclusion(runs)
    ends = [float(r.flow_finish_s.max()) for r in runs]
    best = 0 if len(runs) == 1 else 1
    assert c.numbers["speedup"] == pytest.approx(ends[0] / ends[best])
    m = re.search(r"([\d.]+)x faster", c.sentences[0])
    assert m and float(m[1]) == pytest.approx(ends[0] / ends[best], abs=0.006)
    for r in runs:
        assert c.numbers["fct_p99_s"][case_name(r)] == r.fct_percentiles_s()["p99"]
    # the hot ports are ranked by their deepest queue; thinning a queue line keeps its peak
    ports = hot_ports(runs[0])
    qmax = runs[0].link_max_queue_bytes
    assert list(qmax[ports]) == sorted(qmax[ports], reverse=True)
    t, q = queue_series(runs[0], ports[0], max_points=10)
    assert len(t) <= 10 and q.max() == runs[0].queue_depth(ports[0])[1].max()


def test_diagnose_a_traffic_scenario_writes_its_report(capsys, tmp_path, incast):
    out_dir = tmp_path / "diag"
    code, out, _ = run_cli(capsys, "diagnose", str(incast), "--report", str(out_dir), "--no-gain", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["report"] and (out_dir / "report.html").exists()
    page = (out_dir / "report.html").read_text()
    top = doc["findings"][0]
    assert "<h2>Findings</h2>" in page and top["component"].replace(">", "&gt;") in page
    assert doc["conclusion"].startswith(f"{doc['case']}: the main cause is ")


def test_flow_run_writes_a_report(capsys, tmp_path):
    out_dir = tmp_path / "flow"
    code, out, _ = run_cli(capsys, "run", "examples/ecmp-collision.yaml", "--report", str(out_dir))
    assert code == 0 and "completes the traffic in" in out.splitlines()[0]  # the conclusion first
    page = (out_dir / "report.html").read_text()
    assert "fig-fct" in page and "fig-util-0" in page


def test_the_comparison_table_says_a_case_cut_short_did_not_finish():
    # a packet run cut short by packet.max_time_s has an infinite makespan: the table printed "inf" and
    # "infx" against the best case, and "nanx" for every case when none finished
    from rich.console import Console

    from gpuwait.report.flows import comparison_table

    def summary(label: str, makespan_s: float) -> dict:
        return {"label": label, "makespan_s": makespan_s, "min_flow_rate_Bps": 1e9, "mean_flow_rate_Bps": 1e9,
                "uplinks_used": 0, "uplinks": 0, "uplink_imbalance": 1.0}

    def text(summaries: list[dict]) -> str:
        console = Console(width=200, record=True)
        console.print(comparison_table(summaries))
        return console.export_text()

    some = text([summary("base", float("inf")), summary("ib", 1e-3), summary("spray", 2e-3)])
    assert "inf" not in some and "not finished" in some and "1.00x" in some and "2.00x" in some
    none = text([summary("base", float("inf")), summary("ib", float("inf"))])
    assert "nan" not in none and "inf" not in none and none.count("not finished") == 2
