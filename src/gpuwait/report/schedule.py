"""The scheduler's results as a table and an HTML page: per-policy figures, a job Gantt chart per
policy, the JCT CDF of every policy, fragmentation over time and the links most shared between jobs."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import jinja2
import numpy as np
import plotly.graph_objects as go
import plotly.offline

from gpuwait.report.figures import esc
from gpuwait.report.html import script_safe_json
from gpuwait.runner.schedule import ScheduleResult
from gpuwait.version import __version__

COLUMNS = ("policy", "makespan", "mean JCT", "p99 JCT", "mean queue", "mean slowdown", "allocation", "utilization",
           "fragmentation", "leaf fragmentation", "jobs in contention", "GPUs in contention")


def duration_text(seconds: float) -> str:
    """Seconds as a scheduler reads them: s, min or h."""
    if not np.isfinite(seconds):
        return "-"
    if seconds >= 3600:
        return f"{seconds / 3600:.2f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.3g} s"


def summary_rows(results: Sequence[ScheduleResult]) -> list[list[str]]:
    """One row of :data:`COLUMNS` per policy."""
    rows = []
    for r in results:
        s = r.summary()
        rows.append([r.policy + ("" if r.backfill else " (no backfill)"), duration_text(s["makespan_s"]),
                     duration_text(s["mean_jct_s"]), duration_text(s["p99_jct_s"]),
                     duration_text(s["mean_queue_delay_s"]),
                     f"{100 * s['mean_slowdown']:+.1f} %", f"{100 * s['allocation_rate']:.1f} %",
                     f"{100 * s['utilization']:.1f} %", f"{100 * s['fragmentation']:.1f} %",
                     f"{100 * s['leaf_fragmentation']:.1f} %", f"{100 * s['contended_jobs']:.0f} %",
                     f"{100 * s['contended_gpus']:.0f} %"])
    return rows


def gantt_figure(result: ScheduleResult, max_jobs: int = 300) -> go.Figure:
    """One bar per job from start to end (queue delay in grey before it), first ``max_jobs`` arrivals."""
    jobs = sorted(result.jobs, key=lambda j: j.arrival_s)[:max_jobs]
    names = [esc(j.name) for j in jobs]
    fig = go.Figure()
    fig.add_trace(go.Bar(y=names, x=[j.queue_delay_s for j in jobs], base=[j.arrival_s for j in jobs],
                         orientation="h", name="queued", marker_color="#bbb"))
    fig.add_trace(go.Bar(y=names, x=[j.end_s - j.start_s for j in jobs], base=[j.start_s for j in jobs],
                         orientation="h", name="running",
                         marker_color=["#d62728" if j.contended else "#1f77b4" for j in jobs],
                         text=[f"{j.gpus} GPUs, {j.leaves} leaves, {100 * j.slowdown:+.0f} %" for j in jobs],
                         hovertemplate="%{y}: %{text}<extra></extra>"))
    fig.update_layout(title=f"{esc(result.policy)}: jobs over time (red: shared a link with another job)",
                      barmode="overlay", xaxis_title="time (s)", height=max(300, 14 * len(jobs) + 120),
                      yaxis={"autorange": "reversed", "showticklabels": len(jobs) <= 60})
    return fig


def jct_cdf_figure(results: Sequence[ScheduleResult]) -> go.Figure:
    fig = go.Figure()
    for r in results:
        jct = np.sort(r.jct_s)
        fig.add_trace(go.Scatter(x=jct, y=np.arange(1, len(jct) + 1) / len(jct), mode="lines",
                                 line_shape="hv", name=esc(r.policy)))
    fig.update_layout(title="JCT CDF per policy", xaxis_title="job completion time (s)", xaxis_type="log",
                      yaxis_title="share of jobs", height=420)
    return fig


def fragmentation_figure(results: Sequence[ScheduleResult]) -> go.Figure:
    fig = go.Figure()
    for r in results:
        t = r.timeline
        fig.add_trace(go.Scatter(x=t[:, 0], y=t[:, 3], mode="lines", line_shape="hv",
                                 name=f"{esc(r.policy)}: free GPUs in partly allocated leaves"))
        fig.add_trace(go.Scatter(x=t[:, 0], y=t[:, 2], mode="lines", line_shape="hv", line_dash="dot",
                                 name=f"{esc(r.policy)}: free GPUs the head of the queue cannot use"))
    fig.update_layout(title="fragmentation over time", xaxis_title="time (s)", yaxis_title="GPUs", height=420)
    return fig


def shared_links_figure(results: Sequence[ScheduleResult], top: int = 10) -> go.Figure:
    fig = go.Figure()
    for r in results:
        items = list(r.link_shared_s.items())[:top]
        fig.add_trace(go.Bar(x=[esc(k) for k, _ in items], y=[v for _, v in items], name=esc(r.policy)))
    fig.update_layout(title="links most shared between jobs", yaxis_title="seconds carrying 2+ jobs", height=420)
    return fig


def render_schedule_report(results: Sequence[ScheduleResult], title: str, cluster: str) -> str:
    figures = [("JCT CDF per policy", "jct", jct_cdf_figure(results)),
               ("Fragmentation over time", "frag", fragmentation_figure(results)),
               ("Links most shared between jobs", "links", shared_links_figure(results))]
    figures += [(f"Jobs over time: {r.policy}", f"gantt-{i}", gantt_figure(r)) for i, r in enumerate(results)]
    env = jinja2.Environment(loader=jinja2.PackageLoader("gpuwait.report", "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    shared = [{"policy": r.policy, "link": k, "seconds": f"{v:.6g}"} for r in results
              for k, v in list(r.link_shared_s.items())[:10]]
    return env.get_template("schedule.html.j2").render(
        title=title, version=__version__, cluster=cluster, n_jobs=len(results[0].jobs), n_gpus=results[0].n_gpus,
        policies=[r.policy for r in results], columns=COLUMNS, rows=summary_rows(results), shared=shared,
        figures=[{"title": t, "id": f"fig-{k}", "json": script_safe_json(f)} for t, k, f in figures],
        plotly_js=plotly.offline.get_plotlyjs())


def write_schedule_report(results: Sequence[ScheduleResult], directory: str | Path, title: str, cluster: str) -> Path:
    """``DIRECTORY/schedule.html`` and ``DIRECTORY/jobs.csv`` (one row per job and policy)."""
    from gpuwait.report.files import report_directory, write_atomically

    out = report_directory(directory)
    out.mkdir(parents=True, exist_ok=True)
    page = write_atomically(out / "schedule.html",
                            lambda p: p.write_text(render_schedule_report(results, title, cluster), encoding="utf-8"))
    lines = ["policy,job,arrival_s,start_s,end_s,queue_delay_s,jct_s,slowdown,gpus,leaves,pods,cross_spine_bytes,contended"]
    for r in results:
        for j in r.jobs:
            lines.append(",".join(str(x) for x in (
                r.policy, j.name.replace(",", ";"), j.arrival_s, j.start_s, j.end_s, j.queue_delay_s, j.jct_s,
                j.slowdown, j.gpus, j.leaves, j.pods, j.cross_spine_bytes, int(j.contended))))
    write_atomically(out / "jobs.csv", lambda p: p.write_text("\n".join(lines) + "\n", encoding="utf-8"))
    return page
