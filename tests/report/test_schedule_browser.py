"""The schedule report in headless Chromium: every plot renders, nothing reaches the console, and a
hostile job name is shown, not run (same harness as test_browser.py)."""

from __future__ import annotations

import pytest

from gpuwait.report.schedule import write_schedule_report
from gpuwait.runner.schedule import schedule
from gpuwait.spec import Scenario
from gpuwait.spec.jobs import PlacementSpec

from .test_browser import load_in_browser, rendered_page

pytestmark = pytest.mark.browser

HOSTILE = '</script><script>document.documentElement.setAttribute("data-pwned","1")</script>'


def _results():
    def job(name, servers, arrival):
        return {"name": name, "servers": servers, "arrival": arrival,
                "workload": {"model": {"preset": "llama-8b"}, "steps": 5, "compute": {"gpu": "H100-SXM", "jitter_cv": 0},
                             "parallel": {"tp": 1, "zero": 1, "micro_batch": 1, "global_batch": 8 * servers}}}
    scenario = Scenario.model_validate({"cluster": {"preset": "rocev2-400g-2tier", "servers": 16},
                                        "jobs": [job(HOSTILE, 4, 0.0), job("b", 8, 0.5), job("c", 8, 1.0)]})
    return [schedule(scenario, PlacementSpec(policy=p)) for p in ("slurm-tree", "spread")]


def test_schedule_report_renders_in_chromium(tmp_path):
    page = write_schedule_report(_results(), tmp_path / "out", HOSTILE, HOSTILE)
    dom, stderr, png = load_in_browser(page, tmp_path)
    html_tag, divs = rendered_page(dom, stderr)
    assert len(divs) == 3 + 2 and f'data-figures="{len(divs)}"' in html_tag  # CDF, fragmentation, links, 2 Gantts
    assert png.stat().st_size > 30_000
