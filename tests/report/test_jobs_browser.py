"""The multi-job report in headless Chromium: both figures render, nothing reaches the console, and a
hostile job name is shown, not run (same harness as test_browser.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwait.report.jobs import write_jobs_reports
from gpuwait.runner.jobs import run_jobs
from gpuwait.spec import Scenario, load_model

from .test_browser import load_in_browser, rendered_page

pytestmark = pytest.mark.browser

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "two-jobs-shared-uplinks.yaml"
HOSTILE = '</script><script>document.documentElement.setAttribute("data-pwned","1")</script>'


def test_jobs_report_renders_in_chromium(tmp_path):
    scenario = load_model(Scenario, EXAMPLE)  # two jobs, two servers each under every leaf: they slow each other
    jobs = [scenario.jobs[0].model_copy(update={"name": HOSTILE}), scenario.jobs[1]]
    run = run_jobs(scenario.model_copy(update={"jobs": jobs}), steps=1)
    page, _trace = write_jobs_reports(run, tmp_path / "out", HOSTILE)
    dom, stderr, png = load_in_browser(page, tmp_path)
    html_tag, divs = rendered_page(dom, stderr)
    assert len(divs) == 2 and f'data-figures="{len(divs)}"' in html_tag  # step bars, phase timeline
    assert "is slowed most" in dom and "stretched by co-tenants" in dom
    assert png.stat().st_size > 30_000
