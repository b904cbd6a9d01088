"""Reports of traffic runs (``run TRAFFIC.yaml [--engine packet] --report DIR``, ``diagnose TRAFFIC.yaml
--report DIR``): the HTML page, a Perfetto trace per case and ``flows.parquet``.

The page opens with its conclusion (which case finishes the traffic first, by how much, its tail
flow completion time), then the flow completion time CDF of every case; packet runs add, for the
ports that queued most, the queue depth over time, the time each was paused by PFC, and ECN marks
and CNPs per second; flow runs add the utilization over time of their hottest links. The Perfetto
trace has one slice per flow (a thread per sending NIC) and, for packet runs, a counter track per
hot port's queue depth, so queues and the flows they delay line up in one view.

The packet engine samples queue depth every ``queue_sample_interval_s``; pause frames and paused
time are totals per port (the engine keeps no pause time series), so pauses show as a bar per port.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TypedDict

import numpy as np
import plotly.graph_objects as go
import plotly.offline

from gpuwait.report.conclusion import Conclusion
from gpuwait.report.figures import _LAYOUT, esc
from gpuwait.report.flows import hot_links, link_timeline, routing_label
from gpuwait.report.html import _environment, script_safe_json
from gpuwait.report.words import code_spans, evidence_text
from gpuwait.units import format_rate, format_size, format_time
from gpuwait.version import __version__

#: Ports whose queues and pauses the report draws (the ones that queued most).
HOT_PORTS = 6


def case_name(run) -> str:
    return run.labels.get("name", routing_label(run))


def _is_packet(run) -> bool:
    return hasattr(run, "queue_bytes")


def traffic_conclusion(runs: Sequence) -> Conclusion:
    """Which case finishes the traffic first and by how much against the first case; packet runs add
    the tail (p99) flow completion time of each."""
    runs = list(runs)
    left = [unfinished_flows(r) for r in runs]
    # a case with flows still running when its simulated time ran out never completed the traffic
    ends = [float(np.max(r.flow_finish_s[np.isfinite(r.flow_finish_s)], initial=0.0)) if not n else float("inf")
            for r, n in zip(runs, left)]
    numbers: dict = {"completion_s": dict(zip(map(case_name, runs), ends))}
    sentences: list[str] = []
    done = [i for i in range(1, len(runs)) if not left[i]]
    if len(runs) == 1 and not left[0]:
        sentences.append(f"{case_name(runs[0])}: the traffic completes in {format_time(ends[0])}.")
    elif done:
        best = min(done, key=lambda i: ends[i])
        if left[0]:
            sentences.append(f"{case_name(runs[best])} completes the traffic in {format_time(ends[best])}; "
                             f"{case_name(runs[0])} does not.")
        else:
            speedup = ends[0] / ends[best] if ends[best] > 0 else float("inf")
            numbers |= {"best": case_name(runs[best]), "speedup": speedup}
            sentences.append(f"{case_name(runs[best])} completes the traffic in {format_time(ends[best])}, "
                             f"{speedup:.2f}x faster than {case_name(runs[0])} ({format_time(ends[0])}).")
    elif not left[0]:  # the base alone completes: its time is the one to state
        others = ", ".join(case_name(r) for r in runs[1:])
        sentences.append(f"{case_name(runs[0])} completes the traffic in {format_time(ends[0])}; "
                         f"{others} {'does' if len(runs) == 2 else 'do'} not.")
    for r, n in zip(runs, left):
        if n:
            limit = f" within its {format_time(r.params.max_time_s)} limit (packet.max_time_s)" if _is_packet(r) else ""
            sentences.append(f"{case_name(r)}: {n} of {len(r.flows)} flows did not finish{limit}.")
    if _is_packet(runs[0]):
        p99_s = [r.fct_percentiles_s()["p99"] for r in runs]
        numbers["fct_p99_s"] = dict(zip(map(case_name, runs), p99_s))
        # run by run, not through the dict: two variants may share a name
        sentences.append("Flow completion time p99: " + ", ".join(
            f"{case_name(r)} {format_time(v)}" if not n else f"{case_name(r)} unknown ({n} flows unfinished)"
            for r, v, n in zip(runs, p99_s, left)) + ".")
    return Conclusion(tuple(sentences), numbers)


def unfinished_flows(run) -> int:
    """Flows with no finish time: still running when a packet run reached ``max_time_s``."""
    return int((~np.isfinite(run.flow_finish_s)).sum())


def fct_cdf_figure(runs: Sequence) -> go.Figure:
    """Share of flows finished within each completion time, one line per case."""
    fig = go.Figure()
    for r in runs:
        fct = np.sort(r.flow_time_s[np.isfinite(r.flow_time_s)])
        share = np.arange(1, len(fct) + 1) / max(len(fct), 1)
        fig.add_scatter(x=fct * 1e3, y=share, mode="lines", line_shape="hv", name=esc(case_name(r)),
                        hovertemplate="%{x:.3f} ms: %{y:.1%} of flows done<extra>%{fullData.name}</extra>")
    fig.update_layout(**_LAYOUT, title="Flow completion time (CDF)", xaxis_title="flow completion time (ms)",
                      yaxis_title="share of flows", yaxis_tickformat=".0%", height=360)
    return fig


def hot_ports(run, n: int = HOT_PORTS) -> list[int]:
    """The sampled ports that queued most (max queue, then paused time, then name: a stable order)."""
    links = np.asarray(run.queue_links, dtype=int)
    qmax = run.link_max_queue_bytes[links]
    paused = run.paused_s.sum(axis=1)[links]
    names = [run.topo.link_name(int(i)) for i in links]
    order = sorted(range(len(links)), key=lambda k: (-qmax[k], -paused[k], names[k]))
    return [int(links[k]) for k in order[:n] if qmax[k] > 0 or paused[k] > 0]


#: Points per queue-depth line: more than a screen is wide, so peaks survive while pages stay small.
MAX_POINTS = 1500


def queue_series(run, link: int, max_points: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """(time_s, bytes queued) of one port, at most ``max_points`` samples: each kept point is the
    deepest queue of its bin, so no peak is lost to thinning."""
    t_s, q_bytes = run.queue_depth(link)
    if len(t_s) <= max_points:
        return t_s, q_bytes
    edges = np.linspace(0, len(t_s), max_points + 1).astype(int)
    peaks = np.maximum.reduceat(q_bytes, edges[:-1])
    return t_s[edges[:-1]], peaks


def queue_figure(run, ports: Sequence[int]) -> go.Figure:
    """Queue depth over time of ``ports`` (bytes waiting in each egress queue)."""
    fig = go.Figure()
    for link in ports:
        t_s, q_bytes = queue_series(run, link)
        fig.add_scatter(x=t_s * 1e3, y=q_bytes / 1e3, mode="lines", line_shape="hv", name=esc(run.topo.link_name(link)),
                        hovertemplate="%{x:.3f} ms: %{y:.1f} KB queued<extra>%{fullData.name}</extra>")
    fig.update_layout(**_LAYOUT, title=f"{esc(case_name(run))}: queue depth of the ports that queued most",
                      xaxis_title="time (ms)", yaxis_title="queued (KB)", height=360)
    return fig


def port_rows(run, ports: Sequence[int]) -> list[dict]:
    """Per hot port: max and mean queue, PFC pauses, ECN marks and drops, with rates per second."""
    end_s = max(run.end_s, 1e-12)
    paused, frames = run.paused_s.sum(axis=1), run.pause_frames.sum(axis=1)
    ecn, drops = run.ecn_marked_packets, run.drops
    return [{"port": run.topo.link_name(i), "max_queue": format_size(float(run.link_max_queue_bytes[i])),
             "mean_queue": format_size(float(run.link_mean_queue_bytes[i])),
             "paused": f"{format_time(float(paused[i]))} ({paused[i] / end_s:.1%})", "pause_frames": f"{frames[i]:,.0f}",
             "ecn_per_s": f"{ecn[i] / end_s:,.0f}", "drops": f"{drops[i]:,.0f}"} for i in ports]


def pause_figure(run, ports: Sequence[int]) -> go.Figure:
    """Share of the run each hot port spent paused by PFC."""
    paused = run.paused_s.sum(axis=1)
    names = [esc(run.topo.link_name(i)) for i in ports]
    fig = go.Figure(go.Bar(x=names, y=[paused[i] / max(run.end_s, 1e-12) for i in ports], marker_color="#CC79A7",
                           hovertemplate="%{x}: paused %{y:.1%} of the run<extra></extra>"))
    fig.update_layout(**_LAYOUT, title=f"{esc(case_name(run))}: time paused by PFC", yaxis_title="share of the run paused",
                      yaxis_tickformat=".0%", height=300)
    return fig


def pause_series(run, n: int = HOT_PORTS, max_points: int = MAX_POINTS) -> tuple[list[int], np.ndarray, np.ndarray]:
    """The ``n`` ports paused longest: (link ids, interval ends in s, fraction of each interval each
    was paused), at most ``max_points`` intervals (merged ones keep their mean: the paused time
    over the merged span, so the area under each line stays the port's paused time)."""
    links, t_s, frac = run.pause_series()
    if not len(links):
        return [], np.zeros(0), np.zeros((0, 0))
    dt_s = np.diff(run.queue_time_s)
    total_s = (frac * dt_s[:, None]).sum(axis=0)
    names = [run.topo.link_name(int(i)) for i in links]
    top = sorted(range(len(links)), key=lambda k: (-total_s[k], names[k]))[:n]
    frac = frac[:, top]
    if len(t_s) > max_points:
        edges = np.linspace(0, len(t_s), max_points + 1).astype(int)
        paused_s = np.add.reduceat(frac * dt_s[:, None], edges[:-1], axis=0)
        span_s = np.add.reduceat(dt_s, edges[:-1])
        frac = np.divide(paused_s, span_s[:, None], out=np.zeros_like(paused_s), where=span_s[:, None] > 0)
        t_s = t_s[edges[1:] - 1]
    return [int(links[k]) for k in top], t_s, frac


def pause_timeline_figure(run) -> go.Figure | None:
    """Share of each sample interval the most-paused ports spent paused by PFC, over time (None when
    no port paused)."""
    links, t_s, frac = pause_series(run)
    if not links:
        return None
    fig = go.Figure()
    for j, link in enumerate(links):
        fig.add_scatter(x=t_s * 1e3, y=frac[:, j], mode="lines", line_shape="vh", name=esc(run.topo.link_name(link)),
                        hovertemplate="until %{x:.3f} ms: paused %{y:.0%}<extra>%{fullData.name}</extra>")
    fig.update_layout(**_LAYOUT, title=f"{esc(case_name(run))}: PFC pauses over time of the ports paused longest",
                      xaxis_title="time (ms)", yaxis_title="share of the interval paused", yaxis_tickformat=".0%",
                      yaxis_range=[0, 1.05], height=340)
    return fig


def utilization_figure(run, links: Sequence[int]) -> go.Figure:
    """Utilization over time of a flow run's hottest links."""
    timeline = link_timeline(run, list(links))
    fig = go.Figure()
    t_ms = np.asarray(timeline["time_s"]) * 1e3
    for name, util in timeline["utilization"].items():
        fig.add_scatter(x=t_ms, y=util, mode="lines", line_shape="hv", name=esc(name))
    fig.update_layout(**_LAYOUT, title=f"{esc(case_name(run))}: utilization of the hottest links",
                      xaxis_title="time (ms)", yaxis_title="utilization", yaxis_tickformat=".0%", height=340)
    return fig


class _Figure(TypedDict):
    id: str
    json: str


class _CaseView(TypedDict):
    """One case of the traffic report, as traffic.html.j2 reads it."""

    case: str
    figures: list[_Figure]
    hot_links: list[dict]
    ports: list[dict]
    counters: str


def _figure(fig_id: str, fig: go.Figure) -> _Figure:
    return {"id": fig_id, "json": script_safe_json(fig)}


def _case(run, index: int) -> _CaseView:
    out: _CaseView = {"case": case_name(run), "figures": [],
                      "hot_links": [{**h, "capacity": format_rate(h["capacity_Bps"]), "bytes": format_size(h["bytes"]),
                                     "mean_utilization": f"{h['mean_utilization']:.0%}"} for h in hot_links(run, 10)],
                      "ports": [], "counters": ""}
    if _is_packet(run):
        ports = hot_ports(run)
        t = run.totals()
        end_s = max(run.end_s, 1e-12)
        out["counters"] = (f"ECN marks {t['ecn_marked_packets'] / end_s:,.0f}/s, CNPs {t['np_cnp_sent'] / end_s:,.0f}/s, "
                           f"pause frames {sum(v for k, v in t.items() if k.startswith('rx_prio') and k.endswith('_pause')):,.0f}, "
                           f"drops {t['PortXmitDiscards']:,.0f}, retransmitted {t['retransmitted_packets']:,.0f} packets")
        if ports:
            out["figures"].append(_figure(f"fig-queue-{index}", queue_figure(run, ports)))
            if run.paused_s[ports].sum() > 0:  # no pause (credits, lossy, or none needed): no chart of zeros
                out["figures"].append(_figure(f"fig-pause-{index}", pause_figure(run, ports)))
            out["ports"] = port_rows(run, ports)
        pauses = pause_timeline_figure(run)
        if pauses is not None:
            out["figures"].append(_figure(f"fig-pause-time-{index}", pauses))
    else:
        links = [run.topo.link_id(h["link"]) for h in hot_links(run, 6)]
        if links:
            out["figures"].append(_figure(f"fig-util-{index}", utilization_figure(run, links)))
    return out


def render_traffic_html(runs: Sequence, title: str, findings: Sequence[dict] = (),
                        conclusion: Sequence[str] | None = None) -> str:
    """The traffic report as one HTML string (self-contained, like the workload report)."""
    runs = list(runs)
    sentences = list(conclusion if conclusion is not None else traffic_conclusion(runs).sentences)
    return _environment().get_template("traffic.html.j2").render(
        title=title, version=__version__, conclusion=sentences, engine="packet" if _is_packet(runs[0]) else "flow",
        cluster=runs[0].topo.name, n_flows=len(runs[0].flows),
        fct=_figure("fig-fct", fct_cdf_figure(runs)), cases=[_case(r, i) for i, r in enumerate(runs)],
        findings=[{**f, "evidence_text": evidence_text(f["evidence"]), "explanation": code_spans(f["explanation"]),
                   "fix": code_spans(f["fix"])} for f in findings],
        plotly_js=plotly.offline.get_plotlyjs())


def traffic_trace(run) -> dict:
    """Chrome trace-event JSON: a slice per flow on its sending NIC's thread, and for packet runs a
    counter track per hot port's queue depth (bytes) and per most-paused port's share of time paused."""
    topo, flows = run.topo, run.flows
    events: list[dict] = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "flows by sending NIC"}}]
    senders = {int(s): k for k, s in enumerate(dict.fromkeys(int(x) for x in flows.src))}
    for src, tid in senders.items():
        events.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": tid, "args": {"name": topo.node_name[src]}})
    start, finish = run.flow_start_s, run.flow_finish_s
    for i in range(len(flows)):
        if not np.isfinite(finish[i]):
            continue
        events.append({"ph": "X", "name": flows.name[i], "pid": 1, "tid": senders[int(flows.src[i])],
                       "ts": round(float(start[i]) * 1e6, 3), "dur": round(float(finish[i] - start[i]) * 1e6, 3),
                       "args": {"dst": topo.node_name[flows.dst[i]], "bytes": float(flows.size_bytes[i])}})
    if _is_packet(run):
        events.append({"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "queues of the hottest ports"}})
        for link in hot_ports(run):
            t_s, q_bytes = queue_series(run, link)
            name = f"queue {topo.link_name(link)}"
            events += [{"ph": "C", "name": name, "pid": 2, "ts": round(float(t) * 1e6, 3), "args": {"bytes": float(q)}}
                       for t, q in zip(t_s, q_bytes)]
        links, t_s, frac = pause_series(run)
        if links:
            events.append({"ph": "M", "name": "process_name", "pid": 3, "args": {"name": "PFC pauses of the ports paused longest"}})
        for j, link in enumerate(links):
            name = f"paused {topo.link_name(link)}"
            # a counter holds its value until the next one: each interval's share is set at its start
            starts = np.r_[run.queue_time_s[0], t_s[:-1]]
            events += [{"ph": "C", "name": name, "pid": 3, "ts": round(float(t) * 1e6, 3), "args": {"paused": float(f)}}
                       for t, f in zip(starts, frac[:, j])]
    return {"traceEvents": events, "displayTimeUnit": "ns"}


def _slug(text: str) -> str:
    import re

    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "case"


def write_traffic_reports(runs: Sequence, directory: str | Path, title: str, findings: Sequence[dict] = (),
                          conclusion: Sequence[str] | None = None) -> list[Path]:
    """``report.html``, a Perfetto trace per case, ``flows.parquet`` and, when a packet run's ports
    paused, ``pauses.parquet`` (case, link, interval end ``time_s``, ``paused_fraction``) in ``directory``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from gpuwait.report.files import make_report_directory
    from gpuwait.report.flows import flow_rows

    out = make_report_directory(directory)
    html = out / "report.html"
    html.write_text(render_traffic_html(runs, title, findings, conclusion), encoding="utf-8")
    paths = [html]
    for r in runs:
        path = out / f"trace-{_slug(case_name(r))}.json"
        path.write_text(json.dumps(traffic_trace(r)), encoding="utf-8")
        paths.append(path)
    rows = [{"case": case_name(r)} | row for r in runs for row in flow_rows(r)]
    pq.write_table(pa.Table.from_pylist(rows), out / "flows.parquet", compression="zstd")
    paths.append(out / "flows.parquet")
    pauses = [{"case": case_name(r), "link": r.topo.link_name(int(link)), "time_s": float(t), "paused_fraction": float(f)}
              for r in runs if _is_packet(r) for link, t, f in _pause_rows(r)]
    if pauses:  # the time series of the ports that paused: one row per port and sample interval
        pq.write_table(pa.Table.from_pylist(pauses), out / "pauses.parquet", compression="zstd")
        paths.append(out / "pauses.parquet")
    return paths


def _pause_rows(run):
    links, t_s, frac = run.pause_series()
    for j, link in enumerate(links):
        for t, f in zip(t_s, frac[:, j]):
            yield link, t, f
