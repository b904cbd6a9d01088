"""Tables of a flow run: per-flow times and rates, per-link load, and routing comparisons.

Functions here turn a :class:`~gpuwait.engine.flow_run.FlowRun` into plain dicts (what
``--json`` prints) and rich tables (what people read). No model logic.
"""

from __future__ import annotations

import math

import numpy as np
from rich.console import JustifyMethod
from rich.markup import escape
from rich.table import Table

from gpuwait.engine.flow_run import FlowRun
from gpuwait.routing.routers import get_router
from gpuwait.steps.stats import link_tiers
from gpuwait.topology.model import LinkKind
from gpuwait.units import format_rate, format_size, format_time

_NETWORK_LINKS = (LinkKind.HOST, LinkKind.FABRIC)


def routing_label(run: FlowRun) -> str:
    r = run.routing
    label: str = r.kind
    if r.kind == "ecmp":
        label += f" {r.hash} seed {r.seed}" + ("" if r.per_switch_seed else " (same seed everywhere)")
    if r.qps_per_connection > 1 and get_router(r.kind).single_path:  # QPs spread only single-path routes
        label += f", {r.qps_per_connection} QPs"
    return label


def run_summary(run: FlowRun) -> dict:
    """Headline numbers of a run."""
    util = run.link_peak_utilization()
    topo = run.topo
    up = topo.uplinks(1)
    # only the leaves that send traffic up: their idle uplinks are the wasted ones
    sending = np.unique(topo.link_src[up][run.link_bytes[up] > 0])
    uplinks = up[np.isin(topo.link_src[up], sending)]
    up_bytes = run.link_bytes[uplinks]
    flows_per_uplink = run.link_flow_count()[uplinks]
    return {
        "label": run.labels.get("name", routing_label(run)),
        "routing": run.routing.model_dump(),
        "transport": run.transport.name,
        "flows": len(run.flows),
        "qp_rows": run.routes.n_rows,
        "total_bytes": float(run.flows.size_bytes.sum()),
        "makespan_s": run.makespan_s,
        "mean_flow_time_s": float(run.flow_time_s.mean()),
        "min_flow_rate_Bps": float(run.flow_mean_rate_Bps.min()),
        "mean_flow_rate_Bps": float(run.flow_mean_rate_Bps.mean()),
        "max_link_utilization": float(util.max()) if len(util) else 0.0,
        "uplinks": int(len(uplinks)),
        "uplinks_used": int((up_bytes > 0).sum()),
        "max_flows_per_uplink": int(flows_per_uplink.max()) if len(uplinks) else 0,
        "uplink_imbalance": float(up_bytes.max() / up_bytes.mean()) if len(uplinks) else 1.0,
    }


def flow_rows(run: FlowRun) -> list[dict]:
    names = run.topo.node_name
    bottleneck = run.flow_bottleneck_link
    rows = []
    for i in range(len(run.flows)):
        b = int(bottleneck[i])
        rows.append({
            "name": run.flows.name[i], "src": names[run.flows.src[i]], "dst": names[run.flows.dst[i]],
            "size_bytes": float(run.flows.size_bytes[i]), "start_s": float(run.flow_start_s[i]),
            "finish_s": float(run.flow_finish_s[i]), "mean_rate_Bps": float(run.flow_mean_rate_Bps[i]),
            "bottleneck": run.topo.link_name(b) if b >= 0 else ("rate cap" if b == -1 else "-"),
        })
    return rows


def hot_links(run: FlowRun, limit: int = 10, network_only: bool = True) -> list[dict]:
    """The most utilized links (mean utilization over the run), with the flows that share them."""
    topo = run.topo
    mean_util = run.link_mean_utilization()
    candidates = np.flatnonzero(run.link_bytes > 0)
    if network_only:
        candidates = candidates[np.isin(topo.link_kind[candidates], _NETWORK_LINKS)]
    order = candidates[np.lexsort((candidates, -run.link_bytes[candidates], -mean_util[candidates]))][:limit]
    count = run.link_flow_count()
    tiers = link_tiers(topo)  # the tier names workload runs use
    out = []
    for link in order:
        flows = run.flows_on_link(int(link))
        out.append({
            "link": topo.link_name(int(link)),
            "tier": str(tiers[link]),
            "capacity_Bps": float(run.capacity_Bps[link]),
            "bytes": float(run.link_bytes[link]),
            "mean_utilization": float(mean_util[link]),
            "flows": int(count[link]),
            "flow_names": [run.flows.name[f] for f in flows[:8]],
        })
    return out


def link_timeline(run: FlowRun, links: list[int], max_intervals: int = 2000) -> dict:
    """Utilization of some links over time: the run's event times and each link's rate / capacity."""
    times = run.result.timeline_s
    rates = run.result.link_rate_Bps[:, links].toarray() if len(links) else np.zeros((len(times) - 1, 0))
    util = rates / run.capacity_Bps[links]
    step = max(1, int(np.ceil(len(util) / max_intervals)))  # keep long runs readable
    return {"time_s": times[::step].tolist(),
            "utilization": {run.topo.link_name(int(link)): util[::step, i].tolist() for i, link in enumerate(links)}}


def uplink_loads(run: FlowRun, switch: str) -> list[dict]:
    """Flows and bytes on each uplink of one switch: where ECMP collisions show."""
    topo = run.topo
    node = topo.node_id(switch)
    links = np.flatnonzero((topo.link_src == node) & (topo.node_tier[topo.link_dst] > topo.node_tier[node]))
    count = run.link_flow_count()
    mean_util = run.link_mean_utilization()
    return [{"link": topo.link_name(int(link)), "flows": int(count[link]), "bytes": float(run.link_bytes[link]),
             "mean_utilization": float(mean_util[link])} for link in links]


def sending_leaf(run: FlowRun) -> str | None:
    """The leaf whose uplinks carry the most bytes: where ECMP collisions show first."""
    topo = run.topo
    up = topo.uplinks(1)
    if not len(up):
        return None
    bytes_by_leaf = np.bincount(topo.link_src[up], weights=run.link_bytes[up], minlength=topo.n_nodes)
    leaf = int(np.argmax(bytes_by_leaf))
    return topo.node_name[leaf] if bytes_by_leaf[leaf] > 0 else None


def run_entry(run: FlowRun) -> dict:
    """One flow run as ``gpuwait run --json`` prints it: summary, hottest links, flows, the hottest links' timeline."""
    hottest = hot_links(run, 10)
    return {"summary": run_summary(run), "hot_links": hottest, "flows": flow_rows(run),
            "link_timeline": link_timeline(run, [run.topo.link_id(h["link"]) for h in hottest])}


def packet_run_entry(run) -> dict:
    """One packet run (a :class:`~gpuwait.engine.packet.run.PacketRun`): the flow-run numbers plus
    flow-completion-time percentiles and the port counters' totals."""
    return {"summary": run_summary(run), "hot_links": hot_links(run, 10), "flows": flow_rows(run),
            "fct_s": run.fct_percentiles_s(), "counters": run.totals()}


# ------------------------------------------------------------------------------------ rich tables
def comparison_table(summaries: list[dict]) -> Table:
    # a packet run cut short by packet.max_time_s never completed (makespan inf): compared with none
    best = min((s["makespan_s"] for s in summaries if math.isfinite(s["makespan_s"])), default=math.inf)
    table = Table(title="Completion by routing choice", title_justify="left")
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("routing", "left"), ("completion", "right"), ("vs best", "right"), ("slowest flow", "right"),
        ("mean flow", "right"), ("leaf uplinks used", "right"), ("busiest/mean uplink", "right"))
    for col, justify in columns:
        table.add_column(col, justify=justify)
    for s in summaries:
        if not math.isfinite(s["makespan_s"]):
            completion, versus = "not finished", "-"
        else:
            slow = s["makespan_s"] / best
            completion, versus = format_time(s["makespan_s"]), f"[{'bold red' if slow > 1.05 else 'green'}]{slow:.2f}x[/]"
        table.add_row(escape(s["label"]), completion, versus,
                      format_rate(s["min_flow_rate_Bps"]), format_rate(s["mean_flow_rate_Bps"]),
                      f"{s['uplinks_used']}/{s['uplinks']}", f"{s['uplink_imbalance']:.2f}")
    return table


def uplink_table(label: str, loads: list[dict]) -> Table:
    table = Table(title=f"{escape(label)}: uplinks of the sending leaf", title_justify="left")
    for col in ("link", "flows", "bytes", "utilization"):
        table.add_column(col, justify="left" if col == "link" else "right")
    for row in loads:
        bar = "#" * int(round(row["mean_utilization"] * 20))
        style = "red" if row["flows"] > 1 else ("dim" if row["flows"] == 0 else "")
        table.add_row(f"[{style}]{row['link']}[/]" if style else row["link"], str(row["flows"]), format_size(row["bytes"]),
                      f"{row['mean_utilization']:5.0%} {bar}")
    return table


def flows_table(rows: list[dict], limit: int = 20) -> Table:
    table = Table(title="Flows", title_justify="left")
    for col in ("flow", "src", "dst", "size", "start", "finish", "rate", "bottleneck"):
        table.add_column(col, justify="right" if col in ("size", "start", "finish", "rate") else "left")
    for row in rows[:limit]:
        table.add_row(escape(row["name"]), escape(row["src"]), escape(row["dst"]), format_size(row["size_bytes"]), format_time(row["start_s"]),
                      format_time(row["finish_s"]), format_rate(row["mean_rate_Bps"]), row["bottleneck"])
    if len(rows) > limit:
        table.caption = f"{len(rows) - limit} more flows: use --json for all"
    return table


def hot_links_table(rows: list[dict]) -> Table:
    table = Table(title="Hottest network links", title_justify="left")
    for col in ("link", "tier", "payload capacity", "bytes", "mean util", "flows", "some flows"):
        table.add_column(col, justify="left" if col in ("link", "tier", "some flows") else "right")
    for row in rows:
        table.add_row(row["link"], row["tier"], format_rate(row["capacity_Bps"]), format_size(row["bytes"]),
                      f"{row['mean_utilization']:.0%}", str(row["flows"]), escape(", ".join(row["flow_names"][:4])))
    return table
