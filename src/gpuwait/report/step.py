"""Tables of a training or inference run: where the step goes, the hottest links, the collectives.

Functions here read :class:`~gpuwait.steps.result.RunResult` objects and return plain dicts
(what ``--json`` prints) or rich tables (what people read). No model logic: every number is read
from the result or is a ratio of two numbers in it.

Names in results (cases, links, tasks) come from users' scenario files, so they go into rich
tables through :func:`rich.markup.escape`: a case called ``"[red]x"`` must print as itself.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from rich.markup import escape
from rich.table import Table

from gpuwait.report.words import group_sizes, part_label
from gpuwait.steps.result import BREAKDOWN_CATEGORIES, CollectiveStat, RunResult
from gpuwait.units import format_size, format_time

#: How many links the hottest-links views show unless asked otherwise.
HOT_LINKS_DEFAULT = 10


def _ms(time_s: float) -> str:
    return f"{time_s * 1e3:,.2f}"


def _pct(fraction: float) -> str:
    return f"{fraction:.1%}"


def category_means_s(result: RunResult) -> dict[str, float]:
    """Job mean of every breakdown category, seconds per step; a category the run lacks is 0."""
    means = result.breakdown.job_mean_s()
    return {c: means.get(c, 0.0) for c in BREAKDOWN_CATEGORIES}


def collective_dict(stat: CollectiveStat) -> dict:
    return {"label": stat.label, "group": stat.group, "collective": stat.collective, "n_ranks": stat.n_ranks,
            "size_bytes": stat.size_bytes, "count_per_step": stat.count_per_step, "time_s": stat.time_s,
            "algbw_GBps": stat.algbw_GBps, "busbw_GBps": stat.busbw_GBps, "algorithm": stat.algorithm,
            "protocol": stat.protocol}


#: What the links table's "peak utilization" is (its column in the text and HTML tables, ``peak_utilization``
#: in --json and Parquet): the link's rate while its busiest communication runs (the steady state of that
#: collective's phase, plus any storage read) over its line rate. Not a share of the step: a link at 100 % for
#: 85 ms of a 557 ms step sends 15 % of the time (busy/step), and waits 0 s when its tier is as busy.
PEAK_UTILIZATION = ("peak utilization: the share of its line rate a link uses while its busiest communication "
                    "runs, not a share of the step (busy/step says how long it sends)")
#: the waiting column adds up communication time, some of which compute hides: a bound on the step time, not
#: a share of it (dp-only's leaf2->spine4 waits 101.6 ms a step of a step whose exposed communication is 92.3 ms)
WAITING_PER_STEP = ("waiting/step: how long the bytes through a link wait behind it beyond an evenly loaded tier; "
                    "the step loses that much where the communication is exposed, less where compute hides it")


def _link_row(links, i: int, waiting: np.ndarray, busy: np.ndarray) -> dict:
    return {"link_id": int(i), "link": links.name[i], "tier": str(links.tier[i]),
            "peak_utilization": float(links.utilization[i]), "bytes_per_step": float(links.bytes_per_step[i]),
            "busy_s": float(busy[i]), "waiting_s": float(waiting[i]), "users": list(links.users.get(int(i), []))}


def hot_link_rows(result: RunResult, n: int = HOT_LINKS_DEFAULT, network_only: bool = True) -> list[dict]:
    """The links that cost the job most time (:meth:`~gpuwait.steps.result.LinkStats.costliest`:
    seconds per step their bytes wait beyond a balanced tier, then busy time, then name), with their
    peak utilization (:data:`PEAK_UTILIZATION`) and who shares them."""
    links = result.links
    waiting, busy = links.waiting_s(), links.busy_s()
    return [_link_row(links, i, waiting, busy) for i in links.costliest(n, network_only=network_only)]


def grouped_hot_link_rows(result: RunResult, n: int = HOT_LINKS_DEFAULT, highlight: Sequence[str] = ()) -> list[dict]:
    """:func:`hot_link_rows` with ties grouped: links of one tier with the same waiting time,
    peak utilization, bytes and users make one row (``"alike"`` lists the others), so ten rows name more
    than ten links' worth of story. Links in ``highlight`` (a diagnosis's findings) are marked, and
    added if not among them."""
    groups: list[dict] = []
    for row in hot_link_rows(result, n * 8):
        key = (row["tier"], round(row["waiting_s"], 6), round(row["peak_utilization"], 3), round(row["bytes_per_step"], -3),
               tuple(row["users"]))
        if groups and groups[-1]["key"] == key:
            groups[-1]["alike"].append(row["link"])
        else:
            groups.append({**row, "key": key, "alike": []})
    rows = groups[:n]
    shown = {name for r in rows for name in (r["link"], *r["alike"])}
    index = {name: i for i, name in enumerate(result.links.name)}
    waiting, busy = result.links.waiting_s(), result.links.busy_s()
    for name in dict.fromkeys(highlight):
        if name in index and name not in shown:
            rows.append({**_link_row(result.links, index[name], waiting, busy), "alike": []})
    for r in rows:
        r.pop("key", None)
        r["named_in_findings"] = r["link"] in highlight or any(a in highlight for a in r["alike"])
    return rows


def alike_text(alike: Sequence[str], limit: int = 3) -> str:
    """``"+9 alike: leaf0->spine12, leaf0->spine16, leaf1->spine0, ..."``, or "" when alone."""
    if not alike:
        return ""
    more = ", ..." if len(alike) > limit else ""
    return f"+{len(alike)} alike: {', '.join(alike[:limit])}{more}"


def step_summary_dict(result: RunResult, hot_links: int = HOT_LINKS_DEFAULT) -> dict:
    """Everything the terminal tables show, as plain JSON-able data (floats in SI units)."""
    b = result.breakdown
    means = category_means_s(result)
    step_s = b.step_time_s
    step_times = np.asarray(result.step_times_s, dtype=float)
    return {
        "case": result.case,
        "workload": result.workload,
        "cluster": result.cluster,
        "steps": result.steps,
        "n_gpus": b.n_gpus,
        "step_time_s": step_s,
        "step_times_s": step_times.tolist(),
        "step_time_max_s": float(step_times.max()) if len(step_times) else step_s,
        "breakdown_s": means,
        "breakdown_fraction": {c: (v / step_s if step_s > 0 else 0.0) for c, v in means.items()},
        "exposed_comm_s": dict(b.exposed_comm_s),
        "ideal_step_time_s": b.ideal_step_time_s,
        "network_cost_s": b.network_cost_s,
        "wait_fraction": b.wait_fraction,
        "mfu": b.mfu,
        "model_flops_per_step": b.model_flops_per_step,
        "tokens_per_step": b.tokens_per_step,
        "tokens_per_s": b.tokens_per_step / step_s if step_s > 0 else 0.0,
        "collectives": [collective_dict(c) for c in result.collectives],
        "hottest_links": hot_link_rows(result, hot_links),
        "notes": list(result.notes),
    } | ({"serving": dict(result.serving)} if result.serving else {})


#: Breakdown rows that are training words: an inference run does not show them.
_TRAINING_ONLY = ("data_wait", "straggler_wait", "checkpoint")


def serving_rows(results: Sequence[RunResult]) -> list[tuple[str, list[str]]]:
    """Inference first: TTFT, TPOT and throughput, each beside its ideal-network value."""
    def cell(s: dict | None, key: str, fmt) -> str:
        if s and s[key] is None:  # TPOT of one output token: no decode step, so no time per token
            return "n/a (one output token, no decode step)"
        return "-" if not s else f"{fmt(s[key])} (ideal {fmt(s['ideal_' + key])})"

    ms = lambda x: f"{x * 1e3:,.3f} ms"  # noqa: E731
    return [("time to first token", [cell(r.serving, "ttft_s", ms) for r in results]),
            ("time per output token", [cell(r.serving, "tpot_s", ms) for r in results]),
            ("throughput (tokens/s, all replicas)", [cell(r.serving, "tokens_per_s", lambda x: f"{x:,.0f}") for r in results])]


def serving_table(results: Sequence[RunResult]) -> Table:
    """Inference's own numbers, one column per case."""
    table = Table(title="Inference: latency and throughput (ideal network in brackets)", title_justify="left")
    table.add_column("", justify="left")
    for r in results:
        table.add_column(escape(r.case), justify="right")
    for label, cells in serving_rows(results):
        table.add_row(label, *cells, style="bold" if label != "throughput (tokens/s, all replicas)" else None)
    return table


# ------------------------------------------------------------------------------------ rich tables
def breakdown_table(results: Sequence[RunResult]) -> Table:
    """Step breakdown, one column per case: each category in ms and % of the step."""
    inference = all(r.serving for r in results)
    title = "Where the batch's time goes" if inference else "Where the step goes (job mean per step)"
    table = Table(title=title, title_justify="left")
    table.add_column("", justify="left")
    for r in results:
        table.add_column(escape(r.case), justify="right")
    summaries = [step_summary_dict(r, hot_links=0) for r in results]

    def row(label: str, cells: list[str], style: str | None = None) -> None:
        table.add_row(label, *cells, style=style)

    row("batch time (ms)" if inference else "step time (ms)", [_ms(s["step_time_s"]) for s in summaries], style="bold")
    for cat in BREAKDOWN_CATEGORIES:
        if inference and cat in _TRAINING_ONLY:
            continue
        row(f"  {cat.replace('_', ' ')}",
            [f"{_ms(s['breakdown_s'][cat])}  {_pct(s['breakdown_fraction'][cat]):>6}" for s in summaries])
    groups = sorted({g for s in summaries for g in s["exposed_comm_s"]})
    if groups:
        row("exposed comm by group (ms)", ["" for _ in summaries], style="dim")
    sizes = group_sizes(results)
    for g in groups:
        row(f"  {escape(part_label(g, sizes))}", [_ms(s["exposed_comm_s"][g]) if g in s["exposed_comm_s"] else "-" for s in summaries])
    table.add_section()
    row("ideal-network batch (ms)" if inference else "ideal-network step (ms)", [_ms(s["ideal_step_time_s"]) for s in summaries])
    row("network cost (ms)", [f"{_ms(s['network_cost_s'])}  {_pct(s['network_cost_s'] / s['step_time_s']) if s['step_time_s'] > 0 else '-':>6}"
                              for s in summaries])
    if inference:  # MFU and waiting are training's words; the serving table says tokens/s
        return table
    row("wait fraction", [_pct(s["wait_fraction"]) for s in summaries], style="bold")
    row("MFU", [_pct(s["mfu"]) for s in summaries])
    row("tokens/s", [f"{s['tokens_per_s']:,.0f}" for s in summaries])
    return table


def hot_links_table(result: RunResult, n: int = HOT_LINKS_DEFAULT, highlight: Sequence[str] = ()) -> Table:
    """The network links the most traffic waits behind (bytes waiting behind them beyond a balanced
    tier: a bound on what they cost the step), how busy they are and which communication shares each; links alike share a row, and links
    named in ``highlight`` are marked."""
    table = Table(title=f"{escape(result.case)}: links the most traffic waits behind (alike links grouped)",
                  title_justify="left")
    for col in ("link", "tier", "waiting/step", "busy/step", "peak utilization", "bytes/step", "shared by"):
        table.add_column(col, justify="left" if col in ("link", "tier", "shared by") else "right")
    for row in grouped_hot_link_rows(result, n, highlight):
        bar = "#" * int(round(row["peak_utilization"] * 10))
        style = "red" if row["peak_utilization"] >= 0.9 else ""
        util = f"{row['peak_utilization']:5.0%} {bar:<10}"
        name = escape(row["link"]) + (f" [dim]{escape(alike_text(row['alike']))}[/]" if row["alike"] else "")
        if row["named_in_findings"]:
            name = f"[bold red]* {name}[/]"
        table.add_row(name, escape(row["tier"]), format_time(row["waiting_s"]), format_time(row["busy_s"]),
                      f"[{style}]{util}[/]" if style else util, format_size(row["bytes_per_step"]),
                      escape(", ".join(row["users"])) or "-")
    table.caption = f"{WAITING_PER_STEP}. {PEAK_UTILIZATION}" if table.row_count else "no network traffic"
    return table


def collectives_table(result: RunResult) -> Table:
    """Each collective of the step as nccl-tests would report it for one group."""
    table = Table(title=f"{escape(result.case)}: collectives per step", title_justify="left")
    for col in ("collective", "ranks", "size", "calls/step", "time", "algbw GB/s", "busbw GB/s", "algorithm/protocol"):
        table.add_column(col, justify="left" if col in ("collective", "algorithm/protocol") else "right")
    for c in result.collectives:
        table.add_row(escape(c.label), str(c.n_ranks), format_size(c.size_bytes), str(c.count_per_step),
                      format_time(c.time_s), f"{c.algbw_GBps:.2f}", f"{c.busbw_GBps:.2f}",
                      escape(f"{c.algorithm}/{c.protocol}"))
    if not table.row_count:  # as the links table says "no network traffic": not a header over nothing
        table.caption = "no collectives"
    return table
