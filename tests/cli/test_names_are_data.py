"""Names from a user's file are data: markup in them never crashes rich, escape sequences never reach
the terminal, and errors stay on one readable line."""

from __future__ import annotations

import io

from gpuwait.cli.common import error_line, terminal_safe
from gpuwait.cli.main import main
from gpuwait.cli.output import SafeConsole

SCENARIO = """name: "{name}"
cluster: {{preset: rocev2-400g-2tier, servers: 2}}
traffic:
  flows:
    - {{name: "{name}", src: s0.gpu0, dst: s1.gpu0, size: 1MB}}
variants:
  - {{name: "{name}", routing: {{kind: adaptive}}}}
"""


def test_markup_and_escapes_in_names_are_printed_as_text(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.format(name="[/] [red]x \\e[2J\\e]0;title\\a"))
    assert main(["run", str(path)]) == 0
    out = capsys.readouterr().out
    assert "[/] [red]x" in out  # shown as written, not interpreted
    assert "\x1b" not in out and "\x07" not in out and "\\x1b[2J" in out


def test_safe_console_never_raises_on_broken_markup():
    buf = io.StringIO()
    console = SafeConsole(file=buf, force_terminal=False, width=80)
    console.print("[bold]ok[/] then [/] alone")
    assert "[/] alone" in buf.getvalue()


def test_error_lines_are_short_and_safe():
    assert terminal_safe("a\x1b[31mb\nc") == "a\\x1b[31mb\\nc"
    line = error_line("preset: got '" + "y" * 5000 + "'; expected one of a, b")
    assert len(line) < 200 and line.endswith("(5,000 characters); expected one of a, b")


def test_long_unknown_name_is_one_short_line(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text("name: x\nworkload:\n  model: {preset: " + "z" * 20000 + "}\n")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) <= 2 and max(len(ln) for ln in err.splitlines()) < 400
