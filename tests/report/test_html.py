"""The HTML report, read as text: self-contained, escaped, figures present (the browser test renders it)."""

from __future__ import annotations

import json
import re

import markupsafe
from plotly.offline import get_plotlyjs

from gpuwait.report.html import script_safe_json, write_html_report

from .conftest import HOSTILE, make_result

FIGURE_BLOCK = re.compile(r'<script type="application/json" id="([^"]+)">(.*?)</script>', re.S)


def test_report_is_self_contained(tmp_path, two_cases):
    page = write_html_report(two_cases, tmp_path / "report.html").read_text(encoding="utf-8")
    assert page.count(get_plotlyjs()) == 1
    # plotly.js mentions CDNs for features the report does not use (MathJax, geo maps); the rest of
    # the page must name no URL, so it opens offline
    assert "http" not in page.replace(get_plotlyjs(), "")
    assert page.count("Plotly.newPlot") == 1
    blocks = dict(FIGURE_BLOCK.findall(page))
    # breakdown, busbw, and a utilization distribution, a heatmap, a timeline and its group's members per case
    assert sorted(blocks) == sorted(["fig-breakdown-data", "fig-busbw-data", "fig-heatmap-0-data", "fig-heatmap-1-data",
                                     "fig-timeline-0-data", "fig-timeline-1-data", "fig-utilization-0-data",
                                     "fig-utilization-1-data", "fig-timeline-0-group-1-data", "fig-timeline-1-group-1-data"])
    for text in blocks.values():
        assert json.loads(text)["data"]
    heatmap = json.loads(blocks["fig-heatmap-0-data"])["data"][0]
    assert heatmap["y"] == ["nvlink", "host-leaf", "leaf-spine", "storage"]
    assert "leaf0-&gt;spine0" in json.dumps(heatmap["text"])  # names escaped for plotly's HTML-ish labels
    assert "4 GPUs in 1 group" in page and "dp all_reduce, storage read" in page
    assert len(page) < 6_000_000


def test_hostile_names_stay_text(tmp_path):
    page = write_html_report([make_result(case=HOSTILE, task_prefix=HOSTILE)], tmp_path / "r.html").read_text("utf-8")
    assert HOSTILE not in page and "<img" not in page
    assert str(markupsafe.escape(HOSTILE)) in page  # shown, escaped, in the tables
    # every </script> is the template's own: error hook, plotly.js, 5 figure blocks, the timeline's one
    # group, the renderer
    assert page.count("</script>") == 1 + 1 + 5 + 1 + 1
    for _, text in FIGURE_BLOCK.findall(page):
        assert "<" not in text and ">" not in text
    title = json.loads(dict(FIGURE_BLOCK.findall(page))["fig-heatmap-0-data"])["layout"]["title"]["text"]
    assert title.startswith("&lt;/script&gt;&lt;script&gt;")  # plotly shows it as text


def test_script_safe_json_keeps_the_value():
    import plotly.graph_objects as go

    fig = go.Figure(layout_title_text="a</script>&<!--b\u2028")
    assert json.loads(script_safe_json(fig))["layout"]["title"]["text"] == "a</script>&<!--b\u2028"


def test_big_job_timeline_is_grouped_with_a_drill_down(tmp_path):
    result = make_result(n_gpus=48, steps=2, slow_rank=45)
    page = write_html_report([result], tmp_path / "r.html", max_ranks=36).read_text("utf-8")
    blocks = dict(FIGURE_BLOCK.findall(page))
    timeline = json.loads(blocks["fig-timeline-0-data"])
    assert timeline["layout"]["yaxis"]["ticktext"] == ["group 1: 48 GPUs (0-47)"]
    # the group opens to its members: the median, the slowest (rank 45) and the first ones
    assert page.count('<details class="rank-group"') == 1 and "slowest rank 45" in page
    members = json.loads(blocks["fig-timeline-0-group-1-data"])["layout"]["yaxis"]["ticktext"]
    assert len(members) == 36 and "rank 45 (slowest)" in members


def test_findings_read_in_words_without_backticks(tmp_path):
    finding = {"rank": 1, "severity": "warning", "kind": "link-degrade", "component": "leaf0->spine21",
               "expected_gain_fraction": 0.11, "evidence": {"lost_ms": 159.35, "utilization": 0.915},
               "explanation": "runs at `100 Gb/s`", "fix": "check `ibstat`"}
    page = write_html_report([make_result()], tmp_path / "r.html", findings=[finding]).read_text()
    text = re.sub(r"<script.*?</script>", "", page, flags=re.S)  # plotly.js itself uses backticks
    assert "`" not in text and "<code>ibstat</code>" in text
    assert "lost 159.3ms, utilization 91.5%" in text and "lost_ms" not in text


def test_a_serving_report_words_its_step_as_the_batch_the_terminal_does(tmp_path):
    """Was 'ideal-network step (ms)', '% of step' and a figure 'Where the step goes ... ms per step' beside the
    terminal's 'ideal-network batch (ms)' and 'Where the batch's time goes' for the same serving run."""
    from gpuwait.report.figures import breakdown_figure
    from gpuwait.steps.serving import run_serving
    from tests.steps.test_serving import _fabric, _step

    fabric = _fabric()
    result = run_serving(_step(fabric, pp=2, out=4, send_prefill=1e6, send_decode=1e4), fabric)
    fig = breakdown_figure([result])
    assert fig.layout.title.text == "Where the batch's time goes" and fig.layout.yaxis.title.text == "ms per batch"
    assert [t.name for t in fig.data if t.type == "scatter"] == ["ideal-network batch"]
    page = write_html_report([result], tmp_path / "report.html").read_text(encoding="utf-8")
    text = re.sub(r"<script.*?</script>", "", page, flags=re.S)
    assert "ideal-network batch (ms)" in text and "compute (ms, % of batch)" in text and "batch time (ms)" in text
    assert "of step" not in text and "ideal-network step" not in text


def test_a_findings_gain_reads_as_the_terminal_prints_it(tmp_path):
    """Was '0.9 %' beside the terminal's '1.0 %' (dp-only with a degraded cable, its ECMP collision): the
    page printed the JSON's gain, already rounded to 0.0095, to 0.1 % again."""
    from gpuwait.diagnosis.report import finding_dict
    from gpuwait.diagnosis.run import Finding

    finding = Finding("ecmp-collision", "leaf2->spine4", "info", 0.5, {}, "e", "f", 1.0, 0.99049)
    assert f"{100 * finding.gain_fraction:.1f} %" == "1.0 %"  # as `gpuwait diagnose` prints it
    page = write_html_report([make_result()], tmp_path / "r.html", findings=[finding_dict(finding, 1)]).read_text()
    text = re.sub(r"<script.*?</script>", "", page, flags=re.S)
    assert "<td>1.0 %</td>" in text.replace(" class=\"num\"", "") and "0.9 %" not in text


def test_a_run_without_collectives_or_network_links_draws_no_empty_axes(tmp_path, capsys):
    """Was an empty busbw chart, an empty links-by-utilization chart and a header-only collectives table
    (HTML and terminal) for one-GPU serving replicas on one DGX: nothing to draw, said in words."""
    from gpuwait.cli.main import main

    scenario = tmp_path / "one-gpu.yaml"
    scenario.write_text("name: one-gpu\ncluster: {preset: dgx-h100, servers: 1}\n"
                        "workload: {mode: inference, model: {preset: llama-8b}, compute: {gpu: H100-SXM},\n"
                        "  inference: {tp: 1, pp: 1, batch: 8, prompt_tokens: 1024, output_tokens: 8}}\n")
    assert main(["run", str(scenario), "--report", str(tmp_path / "rep")]) == 0
    assert "no collectives" in capsys.readouterr().out
    page = (tmp_path / "rep" / "report.html").read_text(encoding="utf-8")
    blocks = dict(FIGURE_BLOCK.findall(page))
    assert "fig-busbw-data" not in blocks and "fig-utilization-0-data" not in blocks
    assert all(json.loads(body)["data"] for body in blocks.values())  # every figure drawn has something in it
    text = re.sub(r"<script.*?</script>", "", page, flags=re.S)
    assert "No collectives in any case." in text and '<td colspan="8">no collectives</td>' in text
