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
    _assert_timeline_readable(dom, results[0])


def _assert_timeline_readable(dom: str, result) -> None:
    """The timeline as drawn: one labelled row per group (not 36 rows of ranks), each group opening
    to its members, and no row of stripes: every bar at least a band wide and bars of one colour on
    one row never closer than a band (they were merged)."""
    import json

    import numpy as np

    from gpuwait.report.figures import BAND_FRACTION
    from gpuwait.report.ranks import rank_groups

    groups, _ = rank_groups(result)
    svg = dom[dom.index('id="fig-timeline-0"'):dom.index('id="fig-timeline-0-data"')]
    ticks = re.findall(r'class="ytick"[^>]*>.*?<text[^>]*>([^<]*)</text>', svg)
    assert ticks == [g.label for g in groups], ticks
    assert 2 <= len(groups) <= 16 and dom.count('<details class="rank-group" id="fig-timeline-0-group-') == len(groups)
    fig = json.loads(re.search(r'id="fig-timeline-0-data">(.*?)</script>', dom, re.S).group(1))
    bars = [t for t in fig["data"] if t["type"] == "bar"]
    lo = min(min(_values(t["base"])) for t in bars)
    hi = max(max(np.add(_values(t["base"]), _values(t["x"]))) for t in bars)
    band_ms = (hi - lo) * BAND_FRACTION
    for t in bars:
        base, width, row = _values(t["base"]), _values(t["x"]), _values(t["y"])
        assert width.min() >= band_ms * 0.999, t["name"]
        for r in np.unique(row):
            b, w = base[row == r], width[row == r]
            o = np.argsort(b)
            assert np.all(b[o][1:] - (b[o] + w[o])[:-1] > band_ms * 0.999), (t["name"], r)


def _values(v):
    """A plotly JSON array, plain or base64-packed (``{"dtype", "bdata"}``), as numbers."""
    import base64

    import numpy as np

    if isinstance(v, dict):
        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"]))
    return np.asarray(v, dtype=float)


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
