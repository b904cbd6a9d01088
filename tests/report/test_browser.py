"""The HTML report in a real browser: headless Chromium opens it from disk and every plot renders.

How: one ``chromium --headless`` run loads ``file://.../report.html`` with ``--dump-dom`` (the DOM
after scripts ran, on stdout), ``--screenshot`` (a PNG) and ``--enable-logging=stderr --v=0``, which
logs every console message of the page as an ``INFO:CONSOLE`` line on stderr. Chromium logs them
all at INFO whatever their level, so the check is strict: the report writes nothing to the console,
and any ``CONSOLE`` line fails the test. The page also counts its own script errors into
``<html data-report-errors>``, checked too. A plot has rendered when its div holds plotly's
``<svg class="main-svg">``.

The report includes a case and task names built to run script if escaping fails (they set
``data-pwned`` on ``<html>``); the test checks that nothing ran.

Chromium is a system package (``apt-get install chromium``); ``$GPUWAIT_CHROMIUM`` overrides the
path. Without it the tests skip and say why, so the README's test command passes on a fresh machine.
With ``GPUWAIT_REQUIRE_BROWSER=1`` (``.ci/run`` sets it) a missing browser is a failure instead: CI
must never skip them silently.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from gpuwait.report.html import write_html_report

from .conftest import HOSTILE, make_result

pytestmark = pytest.mark.browser

CONSOLE_LINE = re.compile(r":CONSOLE[:(]\d*\)?\] (.*)")
# plotly adds classes and styles to the div, so match the figure's own attribute anywhere in the tag
FIGURE_DIV = re.compile(r'<div\b[^>]*\bdata-figure="([^"]+)"[^>]*>')


REQUIRE_BROWSER = "GPUWAIT_REQUIRE_BROWSER"


def browser_required() -> bool:
    """True when ``$GPUWAIT_REQUIRE_BROWSER`` is set to anything but empty or ``0``."""
    return os.environ.get(REQUIRE_BROWSER, "").strip() not in ("", "0")


def chromium() -> str:
    """The Chromium binary; skips the test when there is none, fails instead under ``$GPUWAIT_REQUIRE_BROWSER``."""
    path = os.environ.get("GPUWAIT_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if Path(path).exists():
        return path
    missing = f"headless Chromium not found at {path}"
    hint = "install it (apt-get install chromium) or point GPUWAIT_CHROMIUM at a chromium binary"
    if browser_required():
        pytest.fail(f"{missing} and {REQUIRE_BROWSER} is set: {hint}", pytrace=False)
    pytest.skip(f"{missing}: {hint}; set {REQUIRE_BROWSER}=1 to make this a failure (CI does)")


def load_in_browser(page: Path, tmp_path: Path) -> tuple[str, str, Path]:
    """The rendered DOM, Chromium's stderr and a screenshot of ``page``."""
    png = tmp_path / "report.png"
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           "--no-first-run", "--disable-extensions", f"--user-data-dir={tmp_path / 'profile'}",
           "--enable-logging=stderr", "--v=0",
           # let timers and plotly's promises settle before the DOM is dumped
           "--virtual-time-budget=3000", "--window-size=1400,3000", f"--screenshot={png}", "--dump-dom",
           page.resolve().as_uri()]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"chromium exited {done.returncode}:\n{done.stderr[-3000:]}"
    return done.stdout, done.stderr, png


def rendered_page(dom: str, stderr: str) -> tuple[str, list[re.Match]]:
    """Check a page Chromium loaded: nothing written to the console, no injected attribute, no report
    error, every figure drawn by plotly; return its ``<html>`` tag and the figure divs."""
    console = [m.group(1) for m in map(CONSOLE_LINE.search, stderr.splitlines()) if m]
    assert console == [], "the page wrote to the console:\n" + "\n".join(console)
    html_tag = re.search(r"<html[^>]*>", dom).group(0)
    assert "data-pwned" not in html_tag and 'data-report-errors="0"' in html_tag
    divs = list(FIGURE_DIV.finditer(dom))
    for div, after in zip(divs, divs[1:] + [None]):
        body = dom[div.end(): after.start() if after else len(dom)]
        assert 'class="main-svg"' in body, f"{div.group(1)} did not render"
    return html_tag, divs


def test_report_renders_in_chromium(tmp_path):
    results = [make_result("RoCEv2, ECMP"), make_result("InfiniBand, adaptive routing", comm_scale=0.5),
               make_result(HOSTILE, n_gpus=40, slow_rank=37, task_prefix=HOSTILE)]
    findings = [{"rank": 1, "kind": "slow-gpu", "component": HOSTILE, "severity": "critical", "score": 1.0,
                 "evidence": {"compute_vs_median": 1.3, "note": HOSTILE}, "explanation": HOSTILE, "fix": HOSTILE,
                 "step_time_s": 1.0, "fixed_step_time_s": 0.8, "expected_gain_fraction": 0.2, "direct_evidence": False},
                {"rank": 2, "kind": "ecmp-collision", "component": "leaf0->spine3", "severity": "info", "score": 0.9,
                 "evidence": {}, "explanation": "e", "fix": "more QPs", "step_time_s": 1.0, "fixed_step_time_s": 0.99,
                 "expected_gain_fraction": 0.01, "direct_evidence": False}]
    page = write_html_report(results, tmp_path / "report.html", findings=findings)
    dom, stderr, png = load_in_browser(page, tmp_path)

    console = [m.group(1) for m in map(CONSOLE_LINE.search, stderr.splitlines()) if m]
    assert console == [], "the page wrote to the console:\n" + "\n".join(console)

    html_tag = re.search(r"<html[^>]*>", dom).group(0)
    assert "data-pwned" not in html_tag, f"a hostile name ran as script: {html_tag}"
    assert 'data-report-errors="0"' in html_tag, f"the page caught script errors: {html_tag}"

    # each figure div, up to the next one, must hold plotly's SVG
    divs = list(FIGURE_DIV.finditer(dom))
    assert len(divs) == 3 + 3 * len(results) and f'data-figures="{len(divs)}"' in html_tag
    for div, after in zip(divs, divs[1:] + [None]):
        body = dom[div.end(): after.start() if after else len(dom)]
        assert 'class="main-svg"' in body, f"{div.group(1)} did not render"
    # timelines draw groups of alike ranks with a drill-down (report.ranks.rank_groups), not ranks 0-31
    assert "group 1: " in dom and '<details class="rank-group"' in dom

    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # a blank 1400x3000 page compresses to a few kB; plots, tables and text make it much larger
    assert png.stat().st_size > 50_000
