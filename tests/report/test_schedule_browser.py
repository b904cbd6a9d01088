"""The schedule report in headless Chromium: every plot renders, nothing reaches the console, and a
hostile job name is shown, not run (same harness as test_browser.py)."""

from __future__ import annotations

import re

import pytest

from gpuwait.report.schedule import write_schedule_report
from gpuwait.runner.schedule import schedule
from gpuwait.spec import Scenario
from gpuwait.spec.jobs import PlacementSpec

from .test_browser import CONSOLE_LINE, FIGURE_DIV, load_in_browser

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
    console = [m.group(1) for m in map(CONSOLE_LINE.search, stderr.splitlines()) if m]
    assert console == [], "the page wrote to the console:\n" + "\n".join(console)
    html_tag = re.search(r"<html[^>]*>", dom).group(0)
    assert "data-pwned" not in html_tag and 'data-report-errors="0"' in html_tag
    divs = list(FIGURE_DIV.finditer(dom))
    assert len(divs) == 3 + 2 and f'data-figures="{len(divs)}"' in html_tag  # CDF, fragmentation, links, 2 Gantts
    for div, after in zip(divs, divs[1:] + [None]):
        body = dom[div.end(): after.start() if after else len(dom)]
        assert 'class="main-svg"' in body, f"{div.group(1)} did not render"
    assert png.stat().st_size > 30_000
