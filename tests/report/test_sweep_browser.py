"""The sweep report in headless Chromium: every plot renders, nothing reaches the console, and a
hostile axis value is shown, not run (same harness as test_browser.py)."""

from __future__ import annotations

import pytest

from gpuwait.report.sweep import write_sweep_report
from gpuwait.runner.sweep_exec import ResultStore

from .test_browser import load_in_browser, rendered_page

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
    _, divs = rendered_page(dom, stderr)
    assert [d.group(1) for d in divs] == ["fig-best-data", "fig-heatmap-data", "fig-pareto-data"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
