"""One self-contained HTML report of one or more runs: tables and plotly figures, readable offline.

The page holds plotly.js once, inline, so it opens from a file with no network (about 5 MB).
Two rules keep names from scenario files harmless:

* text goes through jinja2 with autoescape on, so ``<script>`` in a case name is shown, not run;
* figure JSON sits in ``<script type="application/json">`` blocks with ``<``, ``>`` and ``&``
  written as ``\\u003c`` etc., so no string inside can close the block (``</script>``) or open a
  comment; figures are parsed with ``JSON.parse`` and never evaluated.

The page also records its own script errors in ``<html data-report-errors="N">`` and a visible
banner, so a broken plot says so instead of leaving a blank box.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import jinja2
import plotly.graph_objects as go
import plotly.io as pio
import plotly.offline

from gpuwait.report import figures
from gpuwait.report.conclusion import workload_conclusion
from gpuwait.report.ranks import rank_groups
from gpuwait.report.step import alike_text, grouped_hot_link_rows, serving_rows, step_summary_dict
from gpuwait.report.words import code_spans, evidence_text, group_sizes, part_label
from gpuwait.steps.result import BREAKDOWN_CATEGORIES, RunResult
from gpuwait.units import format_size, format_time
from gpuwait.version import __version__

_JSON_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def script_safe_json(fig: go.Figure) -> str:
    """The figure as JSON that cannot end the ``<script>`` block it sits in.

    ``< > &`` occur in JSON only inside strings, where ``\\u003c`` means the same character, so the
    replacement keeps the JSON equal while no ``</script>`` or ``<!--`` can appear. Recent plotly
    escapes ``<`` and ``/`` itself; doing it here keeps the guarantee ours, whatever plotly does.
    """
    text = pio.to_json(fig, validate=False)
    for char, escaped in _JSON_ESCAPES.items():
        text = text.replace(char, escaped)
    return text


def _environment() -> jinja2.Environment:
    # autoescape=True for every template, not by file extension: the template is .html.j2
    return jinja2.Environment(loader=jinja2.PackageLoader("gpuwait.report", "templates"), autoescape=True,
                              undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)


def _breakdown_rows(summaries: list[dict], sizes: dict[str, int]) -> list[tuple[str, list[str]]]:
    def ms(x: float) -> str:
        return f"{x * 1e3:,.2f}"

    inference = all("serving" in s for s in summaries)
    unit = "batch" if inference else "step"  # as the terminal's table words it
    rows = [(f"{unit} time (ms)", [ms(s["step_time_s"]) for s in summaries])]
    for cat in BREAKDOWN_CATEGORIES:
        if inference and cat in ("data_wait", "straggler_wait", "checkpoint"):
            continue
        rows.append((f"{cat.replace('_', ' ')} (ms, % of {unit})",
                     [f"{ms(s['breakdown_s'][cat])} ({s['breakdown_fraction'][cat]:.1%})" for s in summaries]))
    for g in sorted({g for s in summaries for g in s["exposed_comm_s"]}):
        rows.append((f"exposed {part_label(g, sizes)} (ms)", [ms(s["exposed_comm_s"][g]) if g in s["exposed_comm_s"] else "-"
                                                              for s in summaries]))
    rows += [(f"ideal-network {unit} (ms)", [ms(s["ideal_step_time_s"]) for s in summaries]),
             ("network cost (ms)", [ms(s["network_cost_s"]) for s in summaries])]
    if inference:  # no MFU or waiting: the serving rows lead the table instead
        return rows
    rows += [("wait fraction", [f"{s['wait_fraction']:.1%}" for s in summaries]),
             ("MFU", [f"{s['mfu']:.1%}" for s in summaries]),
             ("tokens/s", [f"{s['tokens_per_s']:,.0f}" for s in summaries])]
    return rows


def _gain_text(finding: dict) -> str:
    """A finding's gain as the terminal prints it, from its step times when it has them: its
    ``expected_gain_fraction`` is rounded to 4 digits, and rounded again to 0.1 % a gain of 0.00951
    printed 0.9 % beside the terminal's 1.0 %."""
    gain = finding["expected_gain_fraction"]
    if gain is None:
        return "-"
    reference, fixed, step = (finding.get(k) for k in ("reference_step_time_s", "fixed_step_time_s", "step_time_s"))
    if reference is not None and fixed is not None and step:
        gain = (reference - fixed) / step
    return f"{100 * gain:.1f} %"


def _distribution(result: RunResult, index: int, highlight: Sequence[str]) -> dict | None:
    """The links-by-utilization figure, or None when it would be empty axes: it counts the network tiers'
    links, and a cluster of one NVLink domain has none (its NVLink and PCIe links are in the heatmap)."""
    fig = figures.utilization_distribution_figure(result, highlight)
    return {"id": f"fig-utilization-{index}", "json": script_safe_json(fig)} if fig.data else None


def _case_section(result: RunResult, index: int, hot_links: int, max_ranks: int, highlight: Sequence[str] = ()) -> dict:
    timeline, shown = figures.timeline_figure(result)
    groups, _ = rank_groups(result)
    per_group = max(2, max_ranks // max(1, len(groups)))  # the drill-downs together show about max_ranks GPUs
    return {
        "case": result.case, "workload": result.workload, "cluster": result.cluster, "steps": result.steps,
        "notes": [code_spans(n) for n in result.notes], "ranks_shown": shown,
        "distribution": _distribution(result, index, highlight),
        "heatmap": {"id": f"fig-heatmap-{index}", "json": script_safe_json(figures.link_heatmap_figure(result))},
        "timeline": {"id": f"fig-timeline-{index}", "json": script_safe_json(timeline)},
        # the drill-down: each group's members, drawn when the reader opens the group
        "groups": [{"label": g.label, "spread": g.spread_text, "id": f"fig-timeline-{index}-group-{g.index + 1}",
                    "json": script_safe_json(figures.group_timeline_figure(result, g, max_members=per_group))}
                   for g in groups],
        "hot_links": [{**row, "peak_utilization": f"{row['peak_utilization']:.0%}", "bytes_per_step": format_size(row["bytes_per_step"]),
                       "waiting": format_time(row["waiting_s"]), "busy": format_time(row["busy_s"]),
                       "users": ", ".join(row["users"]) or "-", "alike": alike_text(row["alike"])}
                      for row in grouped_hot_link_rows(result, hot_links, highlight)],
        "collectives": [{"label": c.label, "n_ranks": c.n_ranks, "size": format_size(c.size_bytes),
                         "count": c.count_per_step, "time": format_time(c.time_s), "algbw": f"{c.algbw_GBps:.2f}",
                         "busbw": f"{c.busbw_GBps:.2f}", "algo": f"{c.algorithm}/{c.protocol}"} for c in result.collectives],
    }


def render_html_report(results: Sequence[RunResult], title: str | None = None, hot_links: int = 10,
                       max_ranks: int = 36, findings: Sequence[dict] = (), conclusion: Sequence[str] | None = None) -> str:
    """The report as one HTML string (see :func:`write_html_report`); ``conclusion`` (sentences) opens
    it, by default the comparison of the cases (:func:`~gpuwait.report.conclusion.workload_conclusion`)."""
    results = list(results)
    if not results:
        raise ValueError("an HTML report needs at least one RunResult")
    summaries = [step_summary_dict(r, hot_links=0) for r in results]
    page = _environment().get_template("report.html.j2").render(
        title=title or " vs ".join(r.case for r in results),
        conclusion=list(workload_conclusion(results).sentences if conclusion is None else conclusion),
        version=__version__,
        case_names=[r.case for r in results],
        breakdown_rows=(serving_rows(results) if all(r.serving for r in results) else []) + _breakdown_rows(summaries, group_sizes(results)),
        breakdown={"id": "fig-breakdown", "json": script_safe_json(figures.breakdown_figure(results))},
        # no case with a collective (every group one GPU): a note, not empty axes
        busbw={"id": "fig-busbw", "json": script_safe_json(figures.busbw_figure(results))}
        if any(r.collectives for r in results) else None,
        cases=[_case_section(r, i, hot_links, max_ranks, [f["component"] for f in findings]) for i, r in enumerate(results)],
        findings=[{**f, "evidence_text": evidence_text(f["evidence"]), "explanation": code_spans(f["explanation"]),
                   "fix": code_spans(f["fix"]),
                   "gain_text": _gain_text(f)}
                  for f in findings],
        findings_figure={"id": "fig-findings", "json": script_safe_json(figures.findings_figure(findings))}
        if any(f.get("expected_gain_fraction") is not None for f in findings) else None,
        plotly_js=plotly.offline.get_plotlyjs(),
    )
    return page


def write_html_report(results: Sequence[RunResult], path: str | Path, title: str | None = None,
                      hot_links: int = 10, max_ranks: int = 36, findings: Sequence[dict] = (),
                      conclusion: Sequence[str] | None = None) -> Path:
    """Write one self-contained HTML file comparing ``results`` and return its path.

    It holds the step breakdown (stacked bars and a table), per case a link-utilization heatmap by
    fabric tier, the ``hot_links`` hottest links with who shares them, the collectives with their
    busbw, and a timeline with one row per group of alike GPUs (:func:`~gpuwait.report.ranks.rank_groups`),
    its groups opening to about ``max_ranks`` of their members in all. ``findings`` (the diagnosis's, as plain dicts) come first, ranked,
    with the gain each fix gives back plotted. The page opens with ``conclusion``, by default the
    comparison of the cases.
    """
    path = Path(path)
    path.write_text(render_html_report(results, title=title, hot_links=hot_links, max_ranks=max_ranks,
                                       findings=findings, conclusion=conclusion), encoding="utf-8")
    return path
