"""The sweep report in headless Chromium: every plot renders, nothing reaches the console, and a
hostile axis value is shown, not run (same harness as test_browser.py)."""

from __future__ import annotations

import re

import pytest

from gpuwait.report.sweep import write_sweep_report
from gpuwait.runner.sweep_exec import ResultStore

from .test_browser import CONSOLE_LINE, FIGURE_DIV, load_in_browser

pytestmark = pytest.mark.browser

HOSTILE = '</script><script>document.documentElement.setAttribute("data-pwned","1")</script>'


def _fake_sweep(root):
    """A stored sweep of 2 x 3 cases (no simulation: rows as a worker writes them)."""
    import json

    store = ResultStore(root)
    store.create()
    (root / "sweep.json").write_text(json.dumps({"name": HOSTILE, "kind": "workload", "axes": ["transport", "qps"]}))
    for i, transport in enumerate(["infiniband", HOSTILE]):
        for qps in (1, 2, 4):
            store.write({"case_id": f"c{i}{qps}", "transport": transport, "qps": qps, "status": "ok", "error": None,
                         "step_time_s": 5.0 - 0.3 * i - 0.1 * qps, "n_switches": 24 + 8 * i + qps,
                         "finished_at": 1.0})
    store.write({"case_id": "bad", "transport": "x", "qps": 3, "status": "invalid", "error": HOSTILE,
                 "finished_at": 1.0})


def test_sweep_report_renders_in_chromium(tmp_path):
    _fake_sweep(tmp_path / "s")
    page = write_sweep_report(tmp_path / "s")
    dom, stderr, png = load_in_browser(page, tmp_path)
    console = [m.group(1) for m in map(CONSOLE_LINE.search, stderr.splitlines()) if m]
    assert console == [], "the page wrote to the console:\n" + "\n".join(console)
    html_tag = re.search(r"<html[^>]*>", dom).group(0)
    assert "data-pwned" not in html_tag and 'data-report-errors="0"' in html_tag
    divs = list(FIGURE_DIV.finditer(dom))
    assert [d.group(1) for d in divs] == ["fig-best-data", "fig-heatmap-data", "fig-pareto-data"]
    for div, after in zip(divs, divs[1:] + [None]):
        body = dom[div.end(): after.start() if after else len(dom)]
        assert 'class="main-svg"' in body, f"{div.group(1)} did not render"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
