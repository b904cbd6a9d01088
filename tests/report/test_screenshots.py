"""Screenshots of the three kinds of report in headless Chromium (issue 19): the demo's workload
report, a diagnosis's and a packet run's. Each must render (every plot drawn, no script error, a
non-blank page); the PNGs are kept in ``$GPUWAIT_ARTEFACTS`` (default: the test's tmp dir) for a
person to look at. Skipped without Chromium, failed under ``$GPUWAIT_REQUIRE_BROWSER``, as
tests/report/test_browser.py explains."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from .test_browser import FIGURE_DIV, load_in_browser

pytestmark = pytest.mark.browser


@pytest.fixture()
def artefacts(tmp_path) -> Path:
    out = Path(os.environ.get("GPUWAIT_ARTEFACTS") or tmp_path / "artefacts")
    out.mkdir(parents=True, exist_ok=True)
    return out


def _check_and_keep(page: Path, tmp_path: Path, artefacts: Path, name: str) -> str:
    dom, _, png = load_in_browser(page, tmp_path / name)
    html_tag = re.search(r"<html[^>]*>", dom).group(0)
    assert 'data-report-errors="0"' in html_tag, f"{name}: the page caught script errors: {html_tag}"
    divs = list(FIGURE_DIV.finditer(dom))
    assert divs, f"{name}: no figures"
    for div, after in zip(divs, divs[1:] + [None]):
        body = dom[div.end(): after.start() if after else len(dom)]
        assert 'class="main-svg"' in body, f"{name}: {div.group(1)} did not render"
    assert png.stat().st_size > 50_000, f"{name}: the screenshot looks blank"
    shutil.copy(png, artefacts / f"{name}.png")
    return dom


def test_demo_report_screenshot(tmp_path, artefacts):
    from gpuwait.report.files import write_reports
    from gpuwait.runner.inputs import demo_scenario
    from gpuwait.runner.workload import run_workload

    scenario = demo_scenario()
    results = run_workload(scenario, steps=1)
    (tmp_path / "demo").mkdir()
    page = write_reports(results, tmp_path / "demo-report", scenario.name)[0]
    dom = _check_and_keep(page, tmp_path, artefacts, "demo")
    assert 'id="conclusion"' in dom and "fig-utilization-0" in dom


def test_diagnose_report_screenshot(tmp_path, artefacts):
    from gpuwait.report.diagnosis import diagnose_run
    from gpuwait.runner.inputs import load_scenario

    (tmp_path / "diagnose").mkdir()
    result = diagnose_run(load_scenario("examples/dp-only.yaml"), ["link-degrade:leaf0->spine21:factor=0.25"],
                          measure_gain=False, report=tmp_path / "diag-report")
    dom = _check_and_keep(result.report[0], tmp_path, artefacts, "diagnose")
    assert 'class="finding"' in dom and "leaf0-&gt;spine21" in dom  # the degraded link, marked in its table


def test_packet_report_screenshot(tmp_path, artefacts):
    from gpuwait.report.traffic import write_traffic_reports
    from gpuwait.runner.inputs import load_scenario
    from gpuwait.runner.traffic import run_traffic
    from tests.diagnosis.test_packet_diagnosis import INCAST_YAML

    path = tmp_path / "incast.yaml"
    path.write_text(INCAST_YAML)
    (tmp_path / "packet").mkdir()
    page = write_traffic_reports(run_traffic(load_scenario(str(path)), "packet"), tmp_path / "pkt-report", "incast")[0]
    dom = _check_and_keep(page, tmp_path, artefacts, "packet")
    assert "fig-queue-0" in dom and "ECN marks/s" in dom
