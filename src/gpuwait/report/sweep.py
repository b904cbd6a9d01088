"""A sweep's results: DuckDB over its Parquet files, merging small files, and the HTML report.

Every query sees one view, ``results``: one row per case, the latest where a case was run again
(``--retry-failed``, or a compacted file and a newer case file), so counts are cases whatever the
history of the directory.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import plotly.graph_objects as go
import plotly.offline

from gpuwait.errors import SpecError
from gpuwait.report.html import script_safe_json
from gpuwait.runner.sweep_exec import ResultStore
from gpuwait.version import __version__

#: Metrics a report ranks by when none is named: lower is better unless listed in HIGHER_IS_BETTER.
DEFAULT_METRICS = ("step_time_s", "busbw_GBps", "makespan_s")
HIGHER_IS_BETTER = {"busbw_GBps", "avg_busbw_GBps", "mfu", "tokens_per_s"}


def connect(directory: str | Path):
    """A DuckDB connection with the ``results`` view over the sweep's Parquet files."""
    try:
        import duckdb
    except ImportError:
        raise SpecError("sweep query: the duckdb package is not installed", hint="pip install duckdb") from None
    files = ResultStore(directory).files()
    if not files:
        raise SpecError(f"{directory}: no sweep results (no cases/*.parquet); expected a `gpuwait sweep --out` directory")
    con = duckdb.connect()
    listing = ", ".join("'" + str(p).replace("'", "''") + "'" for p in files)
    con.execute(f"create view all_rows as select * from read_parquet([{listing}], union_by_name=true)")
    con.execute("create view results as select * exclude (_rank) from (select *, row_number() over "
                "(partition by case_id order by finished_at desc) as _rank from all_rows) where _rank = 1")
    return con


def query(directory: str | Path, sql: str) -> tuple[list[str], list[tuple]]:
    """Run ``sql`` over the ``results`` view; the column names and the rows."""
    import duckdb

    con = connect(directory)
    try:
        cursor = con.execute(sql)
    except duckdb.Error as err:
        raise SpecError(f"sweep query: {' '.join(str(err).split())}",
                        hint="the view is `results`; `select * from results limit 1` shows its columns") from None
    if cursor.description is None:
        return [], []
    return [d[0] for d in cursor.description], cursor.fetchall()


def compact(directory: str | Path) -> tuple[int, Path | None]:
    """Merge every case file (and earlier merged files) into one ``compact-<n>.parquet``.

    The merged file is written to a temporary name and renamed before the small files are removed,
    so a kill at any point leaves every case readable (at worst twice, which the view collapses).
    """
    store = ResultStore(directory)
    files = store.files()
    if len(files) <= 1:
        return len(files), None
    con = connect(directory)
    target = store.root / f"compact-{len(list(store.root.glob('compact-*.parquet'))):05d}-{os.getpid()}.parquet"
    tmp = store.root / f".{target.name}.tmp"
    path = str(tmp).replace("'", "''")
    con.execute(f"copy (select * from results order by case_id) to '{path}' (format parquet)")
    os.replace(tmp, target)
    for old in files:
        old.unlink(missing_ok=True)
    return len(files), target


# ---- the HTML report ---------------------------------------------------------------------------

def _rows(directory: str | Path) -> tuple[dict, list[dict]]:
    plan_path = Path(directory) / "sweep.json"
    plan = json.loads(plan_path.read_text()) if plan_path.exists() else {"name": str(directory), "axes": []}
    columns, rows = query(directory, "select * from results order by case_id")
    return plan, [dict(zip(columns, r)) for r in rows]


def _pick_metric(rows: list[dict], metric: str | None) -> str:
    present = {k for r in rows for k, v in r.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    if metric is not None:
        if metric not in present:
            raise SpecError(f"--metric: got {metric!r}; expected a numeric column: {', '.join(sorted(present))}")
        return metric
    for name in DEFAULT_METRICS:
        if name in present:
            return name
    raise SpecError("sweep report: no ok case has a step time, busbw or makespan to rank by",
                    hint="`gpuwait sweep query DIR \"select status, error from results\"` shows why")


def _better(metric: str, a: float, b: float) -> bool:
    return a > b if metric in HIGHER_IS_BETTER else a < b


def _score(row: dict, metric: str) -> float | None:
    """The row's ``metric``; None where it has none: missing, or NaN (a mean over no flows), which
    compares false both ways and so would win or hold any ranking it entered."""
    score = row.get(metric)
    if score is None or (isinstance(score, float) and math.isnan(score)):
        return None
    return score


def best_per_axis_value(rows: list[dict], axes: list[str], metric: str) -> list[dict]:
    """For every value of every axis, the best case with that value: its metric and other axes, and
    ``ties``, how many cases with that value have exactly its metric (1: it alone). The first of tied cases
    is shown; its other axes are then one choice among equals, which ``others`` says."""
    out = []
    for axis in axes:
        best: dict[Any, dict] = {}
        ties: dict[Any, int] = {}
        for row in rows:
            value, score = row.get(axis), _score(row, metric)
            if score is None:
                continue
            if value not in best or _better(metric, score, best[value][metric]):
                best[value], ties[value] = row, 1
            elif score == best[value][metric]:
                ties[value] += 1
        for value, row in sorted(best.items(), key=lambda kv: str(kv[0])):
            others = ", ".join(f"{a}={row.get(a)}" for a in axes if a != axis)
            if ties[value] > 1:
                others += f" (one of {ties[value]} cases with this {metric})"
            out.append({"axis": axis, "value": value, metric: row[metric], "case_id": row["case_id"],
                        "others": others, "ties": ties[value]})
    return out


def heatmap_figure(rows: list[dict], x: str, y: str, metric: str) -> go.Figure:
    """The best ``metric`` over the other axes for each (x, y) pair of axis values."""
    xs = sorted({r.get(x) for r in rows}, key=str)
    ys = sorted({r.get(y) for r in rows}, key=str)
    z: list[list[float | None]] = [[None] * len(xs) for _ in ys]
    for r in rows:
        score = _score(r, metric)
        if score is None:
            continue
        i, j = ys.index(r.get(y)), xs.index(r.get(x))
        cell = z[i][j]
        if cell is None or _better(metric, score, cell):
            z[i][j] = score
    fig = go.Figure(go.Heatmap(z=z, x=[str(v) for v in xs], y=[str(v) for v in ys], colorscale="Viridis",
                               colorbar={"title": metric}, reversescale=metric not in HIGHER_IS_BETTER))
    fig.update_layout(title=f"best {metric} by {x} and {y}", xaxis_title=x, yaxis_title=y, height=420)
    return fig


def _scored(rows: list[dict], metric: str, cost: str) -> list[dict]:
    """The rows with both a ``metric`` score and a ``cost``: the points of a Pareto plot."""
    return [r for r in rows if _score(r, metric) is not None and r.get(cost) is not None]


def pareto_front(rows: list[dict], metric: str, cost: str) -> list[dict]:
    """Cases no other case beats on both ``metric`` and ``cost`` (lower cost is better)."""
    points = _scored(rows, metric, cost)
    front = []
    for r in points:
        dominated = any(
            o is not r and o[cost] <= r[cost] and not _better(metric, r[metric], o[metric])
            and (o[cost] < r[cost] or _better(metric, o[metric], r[metric])) for o in points)
        if not dominated:
            front.append(r)
    return sorted(front, key=lambda r: r[cost])


def pareto_figure(rows: list[dict], metric: str, cost: str, axes: list[str]) -> go.Figure:
    points = _scored(rows, metric, cost)
    front = pareto_front(rows, metric, cost)

    def label(r: dict) -> str:
        return ", ".join(f"{a}={r.get(a)}" for a in axes)

    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[r[cost] for r in points], y=[r[metric] for r in points], mode="markers",
                             name="cases", text=[label(r) for r in points], marker={"color": "#9aa"}))
    fig.add_trace(go.Scatter(x=[r[cost] for r in front], y=[r[metric] for r in front], mode="lines+markers",
                             name="Pareto front", text=[label(r) for r in front], line={"shape": "hv"}))
    fig.update_layout(title=f"{metric} vs {cost}", xaxis_title=cost, yaxis_title=metric, height=420)
    return fig


def best_figure(best: list[dict], metric: str) -> go.Figure:
    fig = go.Figure()
    for axis in dict.fromkeys(b["axis"] for b in best):
        picks = [b for b in best if b["axis"] == axis]
        fig.add_trace(go.Bar(x=[f"{axis}={b['value']}" for b in picks], y=[b[metric] for b in picks], name=axis))
    fig.update_layout(title=f"best {metric} per axis value", yaxis_title=metric, height=420, showlegend=False)
    return fig


@dataclass(frozen=True)
class SweepReport:
    """What a sweep's report shows: the cases by status, the best case per axis value, the Pareto front of
    ``metric`` against ``cost``; the page (:meth:`html`) adds the figures, ``--json`` prints :meth:`to_dict`."""

    directory: Path
    title: str
    metric: str
    axes: list[str]
    x: str | None
    y: str | None
    cost: str
    rows: list[dict]
    ok: list[dict]
    best: list[dict]
    front: list[dict]
    planned: int | None = None  # the plan's cases (None where sweep.json predates listing them: not known)
    not_stored: int | None = None  # planned cases with no row yet: a run stopped part-way or still running

    def counts(self) -> dict[str, int]:
        return {s: sum(r.get("status") == s for r in self.rows) for s in ("ok", "invalid", "failed")}

    def to_dict(self) -> dict:
        return {"sweep": self.title, "cases": len(self.rows), "planned_cases": self.planned,
                "not_stored": self.not_stored, "by_status": self.counts(), "metric": self.metric,
                "axes": self.axes, "x": self.x, "y": self.y, "cost": self.cost, "best": self.best,
                "pareto_front": [{"case_id": r["case_id"], self.cost: r[self.cost], self.metric: r[self.metric],
                                  **{a: r.get(a) for a in self.axes}} for r in self.front]}

    def html(self) -> str:
        """The report page as one HTML string."""
        figures = {"best": best_figure(self.best, self.metric)}
        if self.x is not None and self.y is not None:
            figures["heatmap"] = heatmap_figure(self.ok, self.x, self.y, self.metric)
        if any(r.get(self.cost) is not None for r in self.ok):
            figures["pareto"] = pareto_figure(self.ok, self.metric, self.cost, self.axes)
        env = jinja2.Environment(loader=jinja2.PackageLoader("gpuwait.report", "templates"), autoescape=True,
                                 undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
        return env.get_template("sweep.html.j2").render(
            title=self.title, version=__version__, metric=self.metric, axes=self.axes, counts=self.counts(),
            n_rows=len(self.rows), missing=self.not_stored, n_planned=self.planned,
            best=[b | {"score": _fmt(b[self.metric])} for b in self.best], cost=self.cost,
            front=[{"score": _fmt(r[self.metric]), "cost": r[self.cost], "axes": {a: r.get(a) for a in self.axes}}
                   for r in self.front],
            errors=[{"case_id": r["case_id"], "status": r["status"], "error": r.get("error")}
                    for r in self.rows if r.get("status") != "ok"][:50],
            figures=[{"id": f"fig-{k}", "json": script_safe_json(f)} for k, f in figures.items()],
            plotly_js=plotly.offline.get_plotlyjs())

    def write(self, path: str | Path | None = None) -> Path:
        """Write :meth:`html` to ``path`` (default ``DIR/report.html``)."""
        target = Path(path) if path is not None else self.directory / "report.html"
        target.write_text(self.html(), encoding="utf-8")
        return target


def sweep_report(directory: str | Path, metric: str | None = None, x: str | None = None, y: str | None = None,
                 cost: str = "n_switches") -> SweepReport:
    """The report of a sweep's results: ranked by ``metric`` (default the first of :data:`DEFAULT_METRICS` the
    ok cases have), its heatmap over axes ``x`` and ``y`` (default the first two)."""
    plan, rows = _rows(directory)
    ok = [r for r in rows if r.get("status") == "ok"]
    axes = [a for a in plan.get("axes", []) if any(a in r for r in rows)]
    metric = _pick_metric(ok, metric)
    for name, value in (("--x", x), ("--y", y)):
        if value is not None and value not in axes:
            raise SpecError(f"{name}: got {value!r}; expected an axis: {', '.join(axes) or '(none)'}")
    x = x or (axes[0] if axes else None)
    y = y or next((a for a in axes if a != x), None)
    front = pareto_front(ok, metric, cost) if any(r.get(cost) is not None for r in ok) else []
    # absent in a directory written before sweep.json listed them: its plan's size is not known, not 0
    planned = set(plan["case_ids"]) if "case_ids" in plan else None
    return SweepReport(Path(directory), plan.get("name", "sweep"), metric, axes, x, y, cost, rows, ok,
                       best_per_axis_value(ok, axes, metric), front, None if planned is None else len(planned),
                       None if planned is None else len(planned - {r["case_id"] for r in rows}))


def render_sweep_report(directory: str | Path, metric: str | None = None, x: str | None = None,
                        y: str | None = None, cost: str = "n_switches") -> str:
    """The report page as one HTML string (see :func:`sweep_report`)."""
    return sweep_report(directory, metric, x, y, cost).html()


def _fmt(value: float) -> str:
    return f"{value:.6g}"


def write_sweep_report(directory: str | Path, path: str | Path | None = None, metric: str | None = None,
                       x: str | None = None, y: str | None = None, cost: str = "n_switches") -> Path:
    """Write ``report.html`` (or ``path``): the best case per axis value, a heatmap of axes ``x``
    and ``y`` (default the first two), and the Pareto front of ``metric`` against ``cost``."""
    return sweep_report(directory, metric, x, y, cost).write(path)
