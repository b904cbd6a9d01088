"""A run's report files in one directory: the HTML report, one Perfetto trace per case, Parquet tables."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from gpuwait.diagnosis.report import diagnosis_dict
from gpuwait.report.html import write_html_report
from gpuwait.report.parquet import write_link_parquet, write_task_parquet
from gpuwait.report.perfetto import write_perfetto_trace
from gpuwait.steps.result import RunResult


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "case"


def write_reports(results: Sequence[RunResult], directory: str | Path, title: str, diagnoses: Iterable = ()) -> list[Path]:
    """The HTML report, one Perfetto trace per case and the Parquet tables, in ``directory``;
    with ``diagnoses``, their findings lead the report."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    findings = [f for d in diagnoses for f in diagnosis_dict(d)["findings"]]
    paths = [write_html_report(results, out / "report.html", title=title, findings=findings)]
    for result in results:
        paths.append(write_perfetto_trace(result, out / f"trace-{_slug(result.case)}.json",
                                          gpus_per_server=result.gpus_per_server))
    paths.append(write_task_parquet(results, out / "tasks.parquet"))
    paths.append(write_link_parquet(results, out / "links.parquet"))
    return paths
