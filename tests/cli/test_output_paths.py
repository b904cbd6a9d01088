"""Output paths are checked before the run starts (one line each), and files are written under a
temporary name and renamed, so a failed write leaves no half file."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwait.cli.main import main
from gpuwait.errors import SpecError
from gpuwait.report.files import output_file, report_directory, write_atomically

EXAMPLE = str(Path(__file__).parents[2] / "examples" / "dp-only.yaml")


@pytest.mark.parametrize("target, message", [
    ("", "expected a file name"), (".", "which is a directory"), ("afile/x", "cannot write into"),
    ("missing/x", "does not exist"), ("x" * 300, "File name too long"),
])
def test_telemetry_out_is_checked_before_the_run(tmp_path, capsys, monkeypatch, target, message):
    monkeypatch.chdir(tmp_path)
    Path("afile").write_text("x")
    monkeypatch.setattr("gpuwait.runner.workload.simulate_workload", lambda *a, **k: pytest.fail("ran"))
    assert main(["telemetry", "export", EXAMPLE, "--out", target]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.splitlines()) <= 2


@pytest.mark.parametrize("target, message", [
    ("", "expected a directory"), ("afile", "which is a file"), ("afile/sub", "inside the file"),
    ("y" * 100_000, "File name too long"),
])
def test_report_directory_errors(tmp_path, monkeypatch, target, message):
    monkeypatch.chdir(tmp_path)
    Path("afile").write_text("x")
    with pytest.raises(SpecError, match=message):
        report_directory(target)


def test_a_failed_write_leaves_no_file(tmp_path):
    target = output_file(tmp_path / "out.prom")

    def half(path):
        path.write_text("# HELP half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        write_atomically(target, half)
    assert list(tmp_path.iterdir()) == []
    write_atomically(target, lambda p: p.write_text("whole\n"))
    assert target.read_text() == "whole\n" and [p.name for p in tmp_path.iterdir()] == ["out.prom"]
