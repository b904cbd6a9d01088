"""A run's report files in one directory: the HTML report, one Perfetto trace per case, Parquet tables."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from gpuwait.diagnosis.report import diagnosis_dict
from gpuwait.errors import SpecError
from gpuwait.report.conclusion import diagnosis_conclusion
from gpuwait.report.html import write_html_report
from gpuwait.report.parquet import write_link_parquet, write_task_parquet
from gpuwait.report.perfetto import write_perfetto_trace
from gpuwait.steps.result import RunResult


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "case"


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
    if out.exists() and not out.is_dir():
        raise SpecError(f"--report: got {text!r}, which is a file; expected a directory", hint="name a new or existing directory")
    existing = next(p for p in (out, *out.parents) if p.exists())
    if not existing.is_dir():
        raise SpecError(f"--report: got {text!r}, inside the file {str(existing)!r}; expected a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise SpecError(f"--report: got {text!r}; cannot write into {str(existing)!r}", hint="check its permissions")
    return out


def make_report_directory(directory: str | Path) -> Path:
    """``directory`` checked (:func:`report_directory`) and created."""
    out = report_directory(directory)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise SpecError(f"--report: cannot create {str(directory)!r} ({err.strerror})") from None
    return out


def write_reports(results: Sequence[RunResult], directory: str | Path, title: str, diagnoses: Iterable = ()) -> list[Path]:
    """The HTML report, one Perfetto trace per case and the Parquet tables, in ``directory``;
    with ``diagnoses``, their findings lead the report."""
    out = make_report_directory(directory)
    diagnoses = list(diagnoses)
    findings = [f for d in diagnoses for f in diagnosis_dict(d)["findings"]]
    # a diagnosis opens with its ranked causes, a comparison with what separates the cases
    conclusion = [s for d in diagnoses for s in diagnosis_conclusion(d).sentences] or None
    paths = [write_html_report(results, out / "report.html", title=title, findings=findings, conclusion=conclusion)]
    for result in results:
        paths.append(write_perfetto_trace(result, out / f"trace-{_slug(result.case)}.json",
                                          gpus_per_server=result.gpus_per_server))
    paths.append(write_task_parquet(results, out / "tasks.parquet"))
    paths.append(write_link_parquet(results, out / "links.parquet"))
    return paths
