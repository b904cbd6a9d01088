"""Plotly figures of runs: step breakdown, link-utilization heatmap, busbw per collective, per-GPU timeline.

Each function returns a ``plotly.graph_objects.Figure``; :mod:`gpuwait.report.html` puts them in a
page. Plotly draws text labels as a small subset of HTML and decodes entities, so every name that
comes from a user (cases, links, tasks) goes in through :func:`html.escape`: a case called ``<b>``
shows as ``<b>``, and no markup from a scenario file reaches the page.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from gpuwait.report.ranks import RankGroup, rank_groups
from gpuwait.report.step import category_means_s
from gpuwait.steps.result import BREAKDOWN_CATEGORIES, TASK_KINDS, RunResult
from gpuwait.units import format_size, format_time

#: Colours per breakdown category / task kind (colour-blind-safe Okabe-Ito order).
COLORS = {"compute": "#009E73", "exposed_comm": "#D55E00", "comm": "#D55E00", "data_wait": "#E69F00",
          "straggler_wait": "#CC79A7", "bubble": "#999999", "checkpoint": "#0072B2"}
# communication groups: hues not used by the kinds above, so "comm dp" never looks like a wait
_GROUP_COLORS = ("#D55E00", "#56B4E9", "#882255", "#44AA99", "#332288", "#AA4499", "#F0E442", "#117733")
#: Heatmap rows come in this order when present; other tiers follow alphabetically.
TIER_ORDER = ("nvlink", "pcie", "host-leaf", "leaf-spine", "spine-core", "storage")
_LAYOUT = dict(template="plotly_white", margin=dict(l=70, r=20, t=50, b=50), font=dict(size=12))


def esc(text: object) -> str:
    return html.escape(str(text), quote=False)  # plotly decodes &lt; &gt; &amp; but shows &quot; raw


def case_labels(results: Sequence[RunResult]) -> list[str]:
    """Escaped case names, made unique (a repeated name gets " (2)") so categorical axes keep them apart."""
    seen: dict[str, int] = {}
    labels = []
    for r in results:
        seen[r.case] = seen.get(r.case, 0) + 1
        labels.append(esc(r.case if seen[r.case] == 1 else f"{r.case} ({seen[r.case]})"))
    return labels


def breakdown_figure(results: Sequence[RunResult]) -> go.Figure:
    """Stacked bar per case: each category's job mean in ms, with the ideal-network step as a marker; a
    serving run's step is its batch, and the figure says so as the terminal's table does."""
    labels = case_labels(results)
    unit = "batch" if all(r.serving for r in results) else "step"
    means = [category_means_s(r) for r in results]
    fig = go.Figure()
    for cat in BREAKDOWN_CATEGORIES:
        values_ms = [m[cat] * 1e3 for m in means]
        if not any(values_ms):
            continue
        shares = [m[cat] / r.breakdown.step_time_s if r.breakdown.step_time_s > 0 else 0.0 for m, r in zip(means, results)]
        fig.add_bar(x=labels, y=values_ms, name=cat.replace("_", " "), marker_color=COLORS[cat],
                    customdata=shares, hovertemplate="%{x}<br>%{y:.2f} ms (%{customdata:.1%})<extra>%{fullData.name}</extra>")
    fig.add_scatter(x=labels, y=[r.breakdown.ideal_step_time_s * 1e3 for r in results], mode="markers",
                    name=f"ideal-network {unit}", marker=dict(symbol="line-ew-open", size=40, line=dict(width=3, color="black")),
                    hovertemplate="%{x}<br>ideal network: %{y:.2f} ms<extra></extra>")
    fig.update_layout(**_LAYOUT, barmode="stack", height=420, legend_traceorder="normal", yaxis_title=f"ms per {unit}",
                      title="Where the batch's time goes" if unit == "batch" else "Where the step goes (job mean per step)")
    return fig


def busbw_figure(results: Sequence[RunResult]) -> go.Figure:
    """Bus bandwidth of each collective, one bar per case."""
    fig = go.Figure()
    for label, r in zip(case_labels(results), results):
        fig.add_bar(name=label, x=[esc(c.label) for c in r.collectives], y=[c.busbw_GBps for c in r.collectives],
                    hovertext=[esc(f"{c.label}: {c.n_ranks} ranks, {format_size(c.size_bytes)}, {format_time(c.time_s)}, "
                                   f"algbw {c.algbw_GBps:.1f} GB/s, {c.algorithm}/{c.protocol}") for c in r.collectives],
                    hoverinfo="text+y")
    fig.update_layout(**_LAYOUT, barmode="group", title="Bus bandwidth per collective (nccl-tests busbw)",
                      yaxis_title="busbw GB/s", height=380, showlegend=len(results) > 1)
    return fig


def ordered_tiers(tiers: np.ndarray) -> list[str]:
    present = {str(t) for t in np.unique(tiers)}
    return [t for t in TIER_ORDER if t in present] + sorted(present - set(TIER_ORDER))


def link_heatmap_figure(result: RunResult, max_columns: int = 400) -> go.Figure:
    """Peak link utilization (the links table's), one row per fabric tier, its links in topology (link id) order.

    A tier with more than ``max_columns`` links is shown in ``max_columns`` bins of consecutive
    links, each coloured by its busiest link, so a 16k-GPU fabric stays a readable, small figure.
    """
    links = result.links
    tiers = ordered_tiers(links.tier)
    util = np.asarray(links.utilization, dtype=float)
    z: list[list[float | None]] = []
    text: list[list[str]] = []
    width = 1
    for tier in tiers:
        ids = np.flatnonzero(links.tier == tier)
        bins = np.array_split(ids, min(len(ids), max_columns))
        row_z: list[float | None] = []  # None: a blank cell where a tier is shorter than the widest
        row_text: list[str] = []
        for b in bins:
            k = int(b[np.argmax(util[b])])
            row_z.append(float(util[k]))
            what = esc(links.name[k]) if len(b) == 1 else f"{len(b)} links, busiest {esc(links.name[k])}"
            row_text.append(f"{what}<br>{format_size(float(links.bytes_per_step[k]))}/step")
        z.append(row_z)
        text.append(row_text)
        width = max(width, len(row_z))
    for row_z, row_text in zip(z, text):  # short tiers leave blank cells, not stretched ones
        row_z.extend([None] * (width - len(row_z)))
        row_text.extend([""] * (width - len(row_text)))
    fig = go.Figure(go.Heatmap(z=z, y=[esc(t) for t in tiers], text=text, zmin=0.0, zmax=1.0, colorscale="YlOrRd",
                               hovertemplate="%{y}: %{text}<br>peak utilization %{z:.0%}<extra></extra>", xgap=1, ygap=2,
                               colorbar=dict(title="util", tickformat=".0%")))
    fig.update_layout(**_LAYOUT, title=f"{esc(result.case)}: peak link utilization by tier", height=140 + 45 * len(tiers),
                      xaxis=dict(title="links of the tier in topology order (wide tiers binned: busiest of each bin)",
                                 showticklabels=False),
                      yaxis=dict(autorange="reversed"))
    return fig


#: Utilization bins of the distribution figure: idle links (no bytes) apart, then tenths.
_UTIL_EDGES = np.linspace(0.0, 1.0, 11)


def utilization_bin_labels() -> list[str]:
    return ["idle"] + [f"{lo:.0%}-{hi:.0%}" for lo, hi in zip(_UTIL_EDGES[:-1], _UTIL_EDGES[1:])]


def utilization_bins(util: np.ndarray, bytes_per_step: np.ndarray) -> np.ndarray:
    """Bin index per link: 0 for a link that carried nothing, else 1 + its tenth of utilization."""
    tenth = np.clip(np.ceil(np.asarray(util, dtype=float) * 10).astype(int), 1, 10)
    return np.where(np.asarray(bytes_per_step) > 0, tenth, 0)


def utilization_distribution_figure(result: RunResult, highlight: Sequence[str] = ()) -> go.Figure:
    """Per network tier, how many links sit idle and how many at each tenth of utilization: ECMP's
    signature (some uplinks idle while others saturate) shows as two bars at the ends of one tier.
    Links named in ``highlight`` (the findings') are marked with their names at their bin."""
    links = result.links
    labels = utilization_bin_labels()
    bins = utilization_bins(links.utilization, links.bytes_per_step)
    fig = go.Figure()
    for tier in ordered_tiers(links.tier):
        if tier in ("nvlink", "pcie"):
            continue
        ids = np.flatnonzero(links.tier == tier)
        counts = np.bincount(bins[ids], minlength=len(labels))
        fig.add_bar(x=labels, y=counts, name=esc(tier),
                    hovertemplate="%{x}: %{y} links<extra>%{fullData.name}</extra>")
    index = {name: i for i, name in enumerate(links.name)}
    marked = [index[n] for n in dict.fromkeys(highlight) if n in index]
    if marked:
        # links in the same bin are stacked apart so their names do not print over each other
        seen: dict[int, int] = {}
        heights = []
        for i in marked:
            seen[int(bins[i])] = seen.get(int(bins[i]), -1) + 1
            heights.append(seen[int(bins[i])])
        top = max((t.y.max() for t in fig.data if t.y is not None and len(t.y)), default=1)
        fig.add_scatter(x=[labels[bins[i]] for i in marked], y=[h * 0.12 * top for h in heights], mode="markers+text",
                        text=[esc(links.name[i]) for i in marked], textposition="top center", name="named in findings",
                        marker=dict(symbol="star", size=16, color="#D00000"),
                        hovertemplate="%{text}<extra>named in findings</extra>")
    fig.update_layout(**_LAYOUT, barmode="group", title=f"{esc(result.case)}: links by peak utilization, per tier",
                      xaxis_title="peak utilization: share of the line rate while the link's busiest communication runs (idle: no bytes)",
                      yaxis_title="links", height=360)
    return fig


#: Timeline bars closer than this fraction of the drawn span merge into one band (about a pixel
#: of a 1,500-pixel plot): 2,560 TP calls per step are then a few bands of their colour, not a grey
#: stripe where the colour of the calls and of the compute between them blur into each other.
BAND_FRACTION = 1 / 1500


def merge_bands(row: np.ndarray, start: np.ndarray, end: np.ndarray, gap: float) -> tuple[np.ndarray, ...]:
    """Bars of one colour merged per row where the gap between them is at most ``gap``: returns
    (index of each band's first bar, row, start, end, number of bars) per band, by row then start."""
    if not len(row):
        return tuple(np.zeros(0, dtype=t) for t in (int, int, float, float, int))
    order = np.lexsort((start, row))
    r, s, e = row[order], start[order], end[order]
    shift = (float(e.max() - s.min()) + 2 * gap + 1.0) * r  # rows laid end to end never touch
    reach = np.maximum.accumulate(e + shift)
    new = np.ones(len(r), dtype=bool)
    new[1:] = (s + shift)[1:] > reach[:-1] + gap
    band = np.cumsum(new) - 1
    first = np.flatnonzero(new)
    last = np.append(first[1:], len(r)) - 1
    return order[first], r[first], s[first], reach[last] - shift[last], np.bincount(band)


def _gantt(fig: go.Figure, result: RunResult, row_of: dict[int, int], keep: np.ndarray, band_ms: float) -> None:
    """Add the tasks ``keep`` of the ranks in ``row_of`` as bars on their rows: compute and waits in
    the upper half, communication (it overlaps compute) in the lower; a colour per kind and group."""
    t = result.tasks
    rank, kind, group, name = t.rank[keep], t.kind[keep], t.group[keep], t.name[keep]
    rows = np.array([row_of[int(r)] for r in rank], dtype=int)
    start_ms, end_ms = t.start_s[keep] * 1e3, t.end_s[keep] * 1e3
    exposed_ms, step = t.exposed_s[keep] * 1e3, t.step[keep]
    series = [(k, kind == k) for k in TASK_KINDS if k != "comm"]
    groups = sorted({str(g) for g in group[kind == "comm"]})
    series += [(f"comm {g}" if g else "comm", (kind == "comm") & (group == g)) for g in groups]
    for label, mask in series:
        if not mask.any():
            continue
        is_comm = label.startswith("comm")
        color = _GROUP_COLORS[groups.index(label[5:]) % len(_GROUP_COLORS)] if label.startswith("comm ") else COLORS.get(label, "#D55E00")
        idx = np.flatnonzero(mask)
        first, band_row, lo, hi, count = merge_bands(rows[idx], start_ms[idx], end_ms[idx], band_ms)
        first = idx[first]
        exposed = np.bincount(np.repeat(np.arange(len(count)), count),
                              weights=exposed_ms[idx][np.lexsort((start_ms[idx], rows[idx]))], minlength=len(count))
        # numbers go in one numeric customdata array (plotly ships it as compact base64) and are
        # formatted by the hover template; a formatted string per bar would double the file
        numbers = np.column_stack([rank[first], step[first], lo, hi, hi - lo, exposed, count]).astype(float)
        texts = [esc(n) if c == 1 else f"{c} tasks from {esc(n)}" for n, c in zip(name[first], count)]
        fig.add_bar(orientation="h", y=band_row, base=lo, x=np.maximum(hi - lo, band_ms),
                    width=0.42, offset=0.04 if is_comm else -0.46, name=esc(label.replace("_", " ")),
                    marker=dict(color=color, line=dict(width=0)), text=texts, textposition="none", customdata=numbers,
                    hovertemplate=("%{text}<br>rank %{customdata[0]}, step %{customdata[1]}<br>"
                                   "%{customdata[2]:.3f}–%{customdata[3]:.3f} ms (%{customdata[4]:.3f} ms"
                                   + (", %{customdata[5]:.3f} exposed" if is_comm else "") + ")<extra>%{fullData.name}</extra>"))


def _bounded_steps(result: RunResult, keep: np.ndarray, max_tasks: int) -> tuple[np.ndarray, str]:
    """``keep`` cut to the first steps whose tasks fit in ``max_tasks`` (SVG slows past ~20k bars, and
    each bar adds ~100 bytes to the page), and the words saying so."""
    t = result.tasks
    if keep.sum() <= max_tasks:
        return keep, ""
    per_step = np.bincount(t.step[keep])
    n_steps = max(1, int(np.searchsorted(np.cumsum(per_step), max_tasks, side="right")))
    return keep & (t.step < n_steps), f", first {n_steps} of {result.steps} steps"


def _band_ms(result: RunResult, keep: np.ndarray) -> float:
    t = result.tasks
    return float(t.end_s[keep].max() - t.start_s[keep].min()) * 1e3 * BAND_FRACTION if keep.any() else 0.0


def timeline_figure(result: RunResult, max_groups: int = 16, max_tasks: int = 12000) -> tuple[go.Figure, str]:
    """Per-group Gantt chart: one row per :func:`~gpuwait.report.ranks.rank_groups` group, drawing its
    median member's tasks, its label naming the members and a diamond marking where its slowest
    member ends its own work each step. Returns the figure and a sentence saying what it shows;
    :func:`group_timeline_figure` draws one group's members (the drill-down)."""
    groups, how = rank_groups(result, max_groups=max_groups)
    row_of = {g.median_rank: i for i, g in enumerate(groups)}
    keep, cut = _bounded_steps(result, np.isin(result.tasks.rank, list(row_of)), max_tasks)
    fig = go.Figure()
    _gantt(fig, result, row_of, keep, _band_ms(result, keep))
    _slowest_marks(fig, result, groups, keep)
    fig.update_layout(**_LAYOUT, barmode="overlay", bargap=0, title=f"{esc(result.case)}: timeline by group of alike GPUs",
                      height=160 + 60 * len(groups), xaxis_title="ms from the start of the run",
                      yaxis=dict(tickmode="array", tickvals=list(range(len(groups))),
                                 ticktext=[esc(g.label) for g in groups], autorange="reversed"))
    return fig, how + "; each row is its median member" + cut + result.tasks_cover_text()


def _slowest_marks(fig: go.Figure, result: RunResult, groups: Sequence[RankGroup], keep: np.ndarray) -> None:
    """A diamond per group and step where its slowest member's last own task (compute, data) ends."""
    t = result.tasks
    own = np.isin(t.kind, ("compute", "data_wait", "checkpoint"))
    xs, ys, info = [], [], []
    shown_steps = np.unique(t.step[keep])
    for row, g in enumerate(groups):
        mine = own & (t.rank == g.slowest_rank)
        for s in shown_steps:
            ends = t.end_s[mine & (t.step == s)]
            if len(ends):
                xs.append(float(ends.max()) * 1e3)
                ys.append(row)
                info.append(esc(f"slowest of {len(g.ranks)}: rank {g.slowest_rank}, step {int(s)}; {g.spread_text}"))
    if xs:
        fig.add_scatter(x=xs, y=ys, mode="markers", name="slowest member's own work ends", text=info,
                        marker=dict(symbol="diamond", size=9, color="black"), hovertemplate="%{text}<extra></extra>")


def group_timeline_figure(result: RunResult, group: RankGroup, max_members: int = 16, max_tasks: int = 12000) -> go.Figure:
    """One group's members (at most ``max_members``: the median, the slowest, then the lowest ranks),
    one row each, as :func:`timeline_figure` draws its groups: the drill-down under a group's row."""
    members = group.shown_members(max_members)
    row_of = {int(r): i for i, r in enumerate(members)}
    keep, _ = _bounded_steps(result, np.isin(result.tasks.rank, members), max_tasks)
    fig = go.Figure()
    _gantt(fig, result, row_of, keep, _band_ms(result, keep))
    role = {group.median_rank: " (median)", group.slowest_rank: " (slowest)"}
    fig.update_layout(**_LAYOUT, barmode="overlay", bargap=0, height=140 + 24 * len(members),
                      title=esc(f"{group.label}: {len(members)} of its members"), xaxis_title="ms from the start of the run",
                      yaxis=dict(tickmode="array", tickvals=list(range(len(members))),
                                 ticktext=[f"rank {int(r)}{role.get(int(r), '')}" for r in members], autorange="reversed"))
    return fig


def findings_figure(findings: Sequence[dict]) -> go.Figure:
    """The step time each finding's fix gives back (re-simulated), ranked; hover shows the evidence."""
    ranked = [f for f in findings if f.get("expected_gain_fraction") is not None]
    labels = [esc(f"{f['rank']}. {f['kind']} on {f['component']}") for f in ranked]
    fig = go.Figure()
    fig.add_bar(x=[100 * f["expected_gain_fraction"] for f in ranked], y=labels, orientation="h",
                marker_color=[{"critical": "#c0392b", "warning": "#e67e22"}.get(f["severity"], "#95a5a6") for f in ranked],
                hovertext=[esc(", ".join(f"{k}={v}" for k, v in f["evidence"].items())) for f in ranked], hoverinfo="text+x")
    fig.update_layout(**_LAYOUT, title="Step time each fix gives back (simulated with the fix applied)",
                      xaxis_title="% of the step", yaxis_autorange="reversed", height=120 + 40 * max(len(ranked), 1))
    return fig
