"""A packet run shows its progress on a terminal's stderr, and nowhere else.

``gpuwait run TRAFFIC.yaml --engine packet`` runs the event loop in chunks and redraws one line
between them (case, packets delivered, simulated time against the fluid bound, events/s, elapsed);
a pipe, a log file or ``--json`` (show_progress False) get nothing. The terminal is a fake: a
text stream whose ``isatty()`` says yes.
"""

from __future__ import annotations

import io

import pytest

from gpuwait.cli.progress import simulate_traffic, traffic_progress
from gpuwait.spec import Scenario


class _FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _scenario() -> Scenario:
    return Scenario.model_validate({
        "cluster": {"preset": "rocev2-400g-2tier", "servers": 2},
        "traffic": {"flows": [{"name": f"f{i}", "src": f"s0.gpu{i}", "dst": "s1.gpu0", "size": "2MB"}
                              for i in range(4)]}})


def test_progress_lines_on_a_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # a wide terminal: the line is not cut short
    stream = _FakeTerminal()
    runs = simulate_traffic(_scenario(), "packet", True, stream=stream)
    shown = stream.getvalue()
    assert len(runs) == 1 and runs[0].events > 0
    assert "packet engine: case 1/1" in shown
    assert "% delivered" in shown and "simulated (fluid bound" in shown and "M events/s" in shown


@pytest.mark.parametrize(("terminal", "show"), [(False, True), (True, False)])
def test_no_progress_on_a_pipe_or_with_json(terminal, show):
    stream = _FakeTerminal() if terminal else io.StringIO()
    simulate_traffic(_scenario(), "packet", show, stream=stream)
    assert stream.getvalue() == ""


def test_a_hidden_display_runs_the_loop_in_one_call():
    for stream, show in ((io.StringIO(), True), (_FakeTerminal(), False)):
        with traffic_progress("packet", show, stream) as progress:
            assert progress.run is None  # the runner then passes no progress callback to the engine
    with traffic_progress("packet", True, _FakeTerminal()) as progress:
        assert callable(progress.run)
