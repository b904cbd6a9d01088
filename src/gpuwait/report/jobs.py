"""The report of several jobs sharing one fabric (``gpuwait run SCENARIO_WITH_JOBS --report DIR``).

It opens with its conclusion, computed from the shared run: which job is slowed most, by how much
per step, and by whom (the co-tenant it shares the most bytes with on common network links). Then
per job its step alone and shared, the links it shares and with whom, and a timeline of every job's
network phases in the shared run on one clock (a phase that took longer than alone is drawn red:
a co-tenant slowed it). The Perfetto trace has a process per job: its steps and its phases in the
shared run, and its phases alone, so the stretch is visible phase by phase.
"""

from __future__ import annotations

import json
from pathlib import Path

import jinja2
import numpy as np
import plotly.graph_objects as go
import plotly.offline

from gpuwait.report.conclusion import NEGLIGIBLE_FRACTION, Conclusion
from gpuwait.report.figures import esc
from gpuwait.report.html import script_safe_json
from gpuwait.runner.jobs import JobOutcome, JobsRun
from gpuwait.units import format_size, format_time
from gpuwait.version import __version__

#: bars drawn in the timeline figure at most (segments of every job's steps); later ones are left out
MAX_TIMELINE_BARS = 4000
#: a phase counts as stretched by co-tenants when it lasts this share longer than alone
_STRETCH = 1e-3


def _network_bytes(job: JobOutcome, network: np.ndarray) -> np.ndarray:
    return np.where(network, job.alone.links.bytes_per_step, 0.0)


def common_bytes(run: JobsRun) -> dict[tuple[str, str], float]:
    """(job, other) -> bytes per step both put on the links they share (the smaller of the two per link)."""
    network = run.topo.network_links
    loads = {j.name: _network_bytes(j, network) for j in run.jobs}
    out = {}
    for j in run.jobs:
        for other, links in j.shares.items():
            out[(j.name, other)] = float(np.minimum(loads[j.name][links], loads[other][links]).sum())
    return out


def jobs_conclusion(run: JobsRun) -> Conclusion:
    """The sentences the report opens with (see the module docstring)."""
    worst = max(run.jobs, key=lambda j: j.slowdown)
    numbers = {"job": worst.name, "slowdown": worst.slowdown, "step_alone_s": worst.alone_step_s,
               "step_shared_s": worst.shared_step_s}
    if worst.slowdown <= NEGLIGIBLE_FRACTION:
        sharing = [j for j in run.jobs if j.shares]
        why = ("none of them shares a network link with another" if not sharing else
               "the links they share never carry two jobs' communication at once")
        return Conclusion((f"No job is slowed by its co-tenants: {why}.",), numbers)
    common = common_bytes(run)
    by = max(worst.shares, key=lambda o: common[(worst.name, o)]) if worst.shares else None
    numbers["by"] = by
    first = (f"{worst.name} is slowed most: {format_time(worst.alone_step_s)} -> {format_time(worst.shared_step_s)} "
             f"per step ({100 * worst.slowdown:+.1f} %)")
    if by is not None:
        links = worst.shares[by]
        first += (f", by {by}, with which it shares {len(links)} network links "
                  f"({format_size(common[(worst.name, by)])} per step on them)")
    sentences = [first + "."]
    grown_s = worst.exposed_comm_shared_s - worst.exposed_comm_alone_s
    if grown_s > 0:
        sentences.append(f"Its exposed communication grows {format_time(worst.exposed_comm_alone_s)} -> "
                         f"{format_time(worst.exposed_comm_shared_s)} per step.")
    others = [j for j in run.jobs if j is not worst]
    if others:
        sentences.append("The others: " + ", ".join(f"{j.name} {100 * j.slowdown:+.1f} %" for j in others) + ".")
    return Conclusion(tuple(sentences), numbers)


def job_rows(run: JobsRun) -> list[dict]:
    """One row per job for the page's table."""
    return [{"name": j.name, "hostlist": j.hostlist, "gpus": j.alone.breakdown.n_gpus,
             "leaves": j.leaves, "pods": j.pods, "alone": format_time(j.alone_step_s),
             "shared": format_time(j.shared_step_s), "slowdown": f"{100 * j.slowdown:+.1f} %",
             "exposed": f"{format_time(j.exposed_comm_alone_s)} -> {format_time(j.exposed_comm_shared_s)}",
             "slowed": format_time(j.slowed_s),
             "shares": ", ".join(f"{o} ({len(links)} links)" for o, links in j.shares.items()) or "-"}
            for j in run.jobs]


def shared_link_rows(run: JobsRun, top: int = 20) -> list[dict]:
    """The network links two or more jobs load, most bytes first: each with the jobs and their bytes."""
    network = run.topo.network_links
    loads = np.array([_network_bytes(j, network) for j in run.jobs])
    users = (loads > 0).sum(axis=0)
    links = np.flatnonzero(users >= 2)
    links = links[np.argsort(-loads[:, links].sum(axis=0), kind="stable")][:top]
    return [{"link": run.link_names[k],
             "jobs": ", ".join(f"{j.name} {format_size(loads[i, k])}" for i, j in enumerate(run.jobs) if loads[i, k] > 0)}
            for k in links.tolist()]


def _segment_label(groups: tuple[str, ...]) -> str:
    return " + ".join(groups) if groups else "compute"


def step_figure(run: JobsRun) -> go.Figure:
    names = [esc(j.name) for j in run.jobs]
    fig = go.Figure([go.Bar(x=names, y=[j.alone_step_s for j in run.jobs], name="alone"),
                     go.Bar(x=names, y=[j.shared_step_s for j in run.jobs], name="shared",
                            text=[f"{100 * j.slowdown:+.1f} %" for j in run.jobs], textposition="outside")])
    fig.update_layout(title="step time alone vs beside the other jobs", yaxis_title="s per step", barmode="group",
                      height=400)
    return fig


def timeline_figure(run: JobsRun, max_bars: int = MAX_TIMELINE_BARS) -> go.Figure:
    """Every job's phases in the shared run on one clock: one bar per network phase, grey for compute,
    red where the phase lasted longer than alone."""
    bars: dict[str, dict[str, list]] = {}
    drawn = 0
    for j in run.jobs:
        for seg, a, b in j.segments.tolist():
            if drawn >= max_bars:
                break
            seg = int(seg)
            groups = j.program.groups[seg]
            alone_s = float(j.program.duration_s[seg])
            stretched = b - a > alone_s * (1 + _STRETCH)
            label = "stretched by co-tenants" if stretched else ("compute" if not groups else "network alone pace")
            d = bars.setdefault(label, {"y": [], "x": [], "base": [], "text": []})
            d["y"].append(esc(j.name))
            d["x"].append(b - a)
            d["base"].append(a)
            d["text"].append(f"{esc(_segment_label(groups))}: {format_time(b - a)} (alone {format_time(alone_s)})")
            drawn += 1
    colours = {"compute": "#ccc", "network alone pace": "#1f77b4", "stretched by co-tenants": "#d62728"}
    fig = go.Figure()
    for label in ("compute", "network alone pace", "stretched by co-tenants"):
        if label in bars:
            d = bars[label]
            fig.add_trace(go.Bar(y=d["y"], x=d["x"], base=d["base"], orientation="h", name=label,
                                 marker_color=colours[label], text=d["text"], textposition="none",
                                 hovertemplate="%{y} %{text}<extra></extra>"))
    fig.update_layout(title=f"phases of each job's first {run.steps} steps, run together", barmode="overlay",
                      xaxis_title="time (s)", yaxis={"autorange": "reversed"},
                      height=max(260, 40 * len(run.jobs) + 160))
    return fig


def render_jobs_report(run: JobsRun, title: str) -> str:
    figures = [("Step time per job", "steps", step_figure(run)),
               ("Phases over time (shared run)", "timeline", timeline_figure(run))]
    env = jinja2.Environment(loader=jinja2.PackageLoader("gpuwait.report", "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    return env.get_template("jobs.html.j2").render(
        title=title, version=__version__, cluster=run.topo.name, n_servers=run.topo.n_servers, steps=run.steps,
        conclusion=list(jobs_conclusion(run).sentences), jobs=job_rows(run), links=shared_link_rows(run),
        workloads=[{"name": j.name, "workload": j.alone.workload} for j in run.jobs],
        figures=[{"title": t, "id": f"fig-{k}", "json": script_safe_json(f)} for t, k, f in figures],
        plotly_js=plotly.offline.get_plotlyjs())


# ------------------------------------------------------------------------------------------ Perfetto

def _us(seconds: float) -> float:
    return round(seconds * 1e6, 3)


def _slice(pid: int, tid: int, name: str, a_s: float, b_s: float, args: dict) -> dict:
    a, b = _us(a_s), _us(b_s)
    return {"ph": "X", "pid": pid, "tid": tid, "name": name, "cat": "job", "ts": a, "dur": round(b - a, 3), "args": args}


def jobs_perfetto_trace(run: JobsRun) -> dict:
    """Trace-event JSON with a process per job: thread 0 its steps in the shared run, thread 1 its
    phases there (args: alone and shared seconds), thread 2 its phases alone from time 0."""
    events: list[dict] = []
    for i, j in enumerate(run.jobs):
        pid = i + 1
        events.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": f"job {j.name}"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": i}})
        for tid, label in enumerate(("steps (shared run)", "phases (shared run)", "phases alone")):
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": label}})
        start = j.segments[0, 1] if len(j.segments) else 0.0
        step = 0
        for seg, a, b in j.segments.tolist():
            seg = int(seg)
            events.append(_slice(pid, 1, _segment_label(j.program.groups[seg]), a, b,
                                 {"segment": seg, "alone_s": float(j.program.duration_s[seg]), "shared_s": b - a}))
            if j.program.ends_step[seg]:
                events.append(_slice(pid, 0, f"step {step}", start, b, {"step": step}))
                start, step = b, step + 1
        t = 0.0
        for seg, d in enumerate(j.program.duration_s.tolist()):
            events.append(_slice(pid, 2, _segment_label(j.program.groups[seg]), t, t + d, {"segment": seg}))
            t += d
    return {"displayTimeUnit": "ns", "traceEvents": events,
            "otherData": {"scenario": run.scenario.name, "steps": run.steps, "jobs": [j.name for j in run.jobs]}}


def write_jobs_reports(run: JobsRun, directory: str | Path, title: str) -> list[Path]:
    """``report.html`` and ``trace-jobs.json`` (Perfetto) in ``directory``."""
    from gpuwait.report.files import make_report_directory, write_atomically

    out = make_report_directory(directory)
    return [write_atomically(out / "report.html",
                             lambda p: p.write_text(render_jobs_report(run, title), encoding="utf-8")),
            write_atomically(out / "trace-jobs.json",
                             lambda p: p.write_text(json.dumps(jobs_perfetto_trace(run), separators=(",", ":"),
                                                               allow_nan=False), encoding="utf-8"))]
