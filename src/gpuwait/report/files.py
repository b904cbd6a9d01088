"""A run's report files in one directory: the HTML report, one Perfetto trace per case, Parquet tables."""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from pathlib import Path

from gpuwait.diagnosis.report import diagnosis_dict
from gpuwait.errors import SpecError
from gpuwait.report.conclusion import diagnosis_conclusion
from gpuwait.report.html import write_html_report
from gpuwait.report.parquet import write_link_parquet, write_task_parquet
from gpuwait.report.perfetto import write_perfetto_trace
from gpuwait.spec.reader import short_value
from gpuwait.steps.result import RunResult


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "case"


def _existing_ancestor(out: Path, option: str, text: str) -> Path:
    """The nearest existing path of ``out`` and its parents; a too-long name is one error."""
    try:
        return next(p for p in (out, *out.parents) if p.exists())
    except OSError as err:  # ENAMETOOLONG and friends: Path.exists only swallows "not found"
        raise SpecError(f"{option}: got {short_value(text)}; cannot use it ({err.strerror})",
                        hint="use a shorter path") from None


def report_directory(directory: str | Path) -> Path:
    """``directory`` checked as a place for report files, before anything runs: one error naming
    ``--report``, the value and what was expected, never a traceback after a long simulation.

    >>> report_directory("")
    Traceback (most recent call last):
    ...
    gpuwait.errors.SpecError: --report: got ''; expected a directory to write the report files into
    """
    text = str(directory)
    if not text.strip():
        raise SpecError(f"--report: got {text!r}; expected a directory to write the report files into",
                        hint="e.g. --report out/")
    out = Path(text)
    existing = _existing_ancestor(out, "--report", text)
    if existing == out and not out.is_dir():
        raise SpecError(f"--report: got {short_value(text)}, which is a file; expected a directory",
                        hint="name a new or existing directory")
    if not existing.is_dir():
        raise SpecError(f"--report: got {short_value(text)}, inside the file {short_value(str(existing))}; "
                        "expected a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise SpecError(f"--report: got {short_value(text)}; cannot write into {short_value(str(existing))}",
                        hint="check its permissions")
    return out


def output_file(path: str | Path, option: str = "--out") -> Path:
    """``path`` checked as a file to write, before anything runs: not empty, not a directory, its
    directory existing and writable, its name not too long; one error naming ``option``."""
    text = str(path)
    if not text.strip():
        raise SpecError(f"{option}: got {text!r}; expected a file name", hint="e.g. --out telemetry.prom")
    out = Path(text)
    if text.endswith(("/", os.sep)):
        raise SpecError(f"{option}: got {short_value(text)}, a directory path; expected a file",
                        hint=f"e.g. {option} {out / 'telemetry.prom'}")
    existing = _existing_ancestor(out, option, text)
    if existing == out:
        if out.is_dir():
            raise SpecError(f"{option}: got {short_value(text)}, which is a directory; expected a file",
                            hint=f"e.g. {option} {out / 'telemetry.prom'}")
        if not os.access(out, os.W_OK):
            raise SpecError(f"{option}: got {short_value(text)}; cannot overwrite it", hint="check its permissions")
        return out
    if existing != out.parent:
        raise SpecError(f"{option}: got {short_value(text)}; its directory {short_value(str(out.parent))} does not "
                        "exist", hint="create it first")
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise SpecError(f"{option}: got {short_value(text)}; cannot write into {short_value(str(existing))}",
                        hint="check the path and its permissions")
    if len(out.name.encode()) > 255:
        raise SpecError(f"{option}: got {short_value(text)}; a file name of {len(out.name.encode()):,} bytes; "
                        "expected at most 255", hint="use a shorter name")
    return out


def write_atomically(path: str | Path, write: Callable[[Path], object]) -> Path:
    """Call ``write(temporary path)`` beside ``path``, then rename it onto ``path``: a failed or
    interrupted write leaves no half file (a rename within one directory is atomic on POSIX)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:100]}.", suffix=".partial")
    os.close(fd)
    try:
        write(Path(tmp))
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it 0600; a report is as readable as any file the user writes
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def make_report_directory(directory: str | Path) -> Path:
    """``directory`` checked (:func:`report_directory`) and created."""
    out = report_directory(directory)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise SpecError(f"--report: cannot create {short_value(str(directory))} ({err.strerror})") from None
    return out


def write_reports(results: Sequence[RunResult], directory: str | Path, title: str, diagnoses: Iterable = ()) -> list[Path]:
    """The HTML report, one Perfetto trace per case and the Parquet tables, in ``directory``;
    with ``diagnoses``, their findings lead the report."""
    out = make_report_directory(directory)
    diagnoses = list(diagnoses)
    findings = [f for d in diagnoses for f in diagnosis_dict(d)["findings"]]
    # a diagnosis opens with its ranked causes, a comparison with what separates the cases
    conclusion = [s for d in diagnoses for s in diagnosis_conclusion(d).sentences] or None
    writers: list[tuple[str, Callable[[Path], object]]] = [
        ("report.html", lambda p: write_html_report(results, p, title=title, findings=findings, conclusion=conclusion))]
    for result in results:
        writers.append((f"trace-{_slug(result.case)}.json",
                        partial(write_perfetto_trace, result, gpus_per_server=result.gpus_per_server)))
    writers.append(("tasks.parquet", lambda p: write_task_parquet(results, p)))
    writers.append(("links.parquet", lambda p: write_link_parquet(results, p)))
    return [write_atomically(out / name, write) for name, write in writers]
