"""Runs as Parquet tables, for DuckDB, pandas or polars.

Each writer takes one result or several and adds a ``case`` column, so the cases of a comparison
land in one file and ``GROUP BY case`` compares them. Columns keep the result's names and units
(``start_s``, ``bytes_per_step``); strings are dictionary-encoded, which keeps task names cheap.

Examples
--------
Query a written file with DuckDB::

    SELECT "case", kind, sum(end_s - start_s) / max(step + 1) AS s_per_step
    FROM 'tasks.parquet' GROUP BY ALL ORDER BY ALL
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from gpuwait.steps.result import RunResult

TASK_SCHEMA = pa.schema([
    ("case", pa.string()), ("rank", pa.int32()), ("step", pa.int32()), ("kind", pa.string()),
    ("name", pa.string()), ("group", pa.string()), ("start_s", pa.float64()), ("end_s", pa.float64()),
    ("exposed_s", pa.float64()),
])

LINK_SCHEMA = pa.schema([
    ("case", pa.string()), ("link_id", pa.int32()), ("link", pa.string()), ("tier", pa.string()),
    ("peak_utilization", pa.float64()), ("bytes_per_step", pa.float64()), ("users", pa.list_(pa.string())),
])


def _as_list(results: RunResult | Sequence[RunResult]) -> list[RunResult]:
    return [results] if isinstance(results, RunResult) else list(results)


def _strings(values: np.ndarray) -> pa.Array:
    return pa.array(np.asarray(values).astype(str).tolist(), type=pa.string())


def task_table(results: RunResult | Sequence[RunResult]) -> pa.Table:
    """One row per task of every result: the TaskTable columns plus ``case``."""
    parts = []
    for r in _as_list(results):
        t = r.tasks
        parts.append(pa.table({
            "case": pa.array([r.case] * len(t), type=pa.string()),
            "rank": pa.array(np.asarray(t.rank, dtype=np.int32)),
            "step": pa.array(np.asarray(t.step, dtype=np.int32)),
            "kind": _strings(t.kind), "name": _strings(t.name), "group": _strings(t.group),
            "start_s": pa.array(np.asarray(t.start_s, dtype=float)),
            "end_s": pa.array(np.asarray(t.end_s, dtype=float)),
            "exposed_s": pa.array(np.asarray(t.exposed_s, dtype=float)),
        }, schema=TASK_SCHEMA))
    return pa.concat_tables(parts) if parts else TASK_SCHEMA.empty_table()


def link_table(results: RunResult | Sequence[RunResult]) -> pa.Table:
    """One row per link of every result; ``users`` is filled for the hottest links only (as in LinkStats)."""
    parts = []
    for r in _as_list(results):
        links = r.links
        n = len(links.name)
        parts.append(pa.table({
            "case": pa.array([r.case] * n, type=pa.string()),
            "link_id": pa.array(np.arange(n, dtype=np.int32)),
            "link": pa.array([str(x) for x in links.name], type=pa.string()),
            "tier": _strings(links.tier),
            "peak_utilization": pa.array(np.asarray(links.utilization, dtype=float)),
            "bytes_per_step": pa.array(np.asarray(links.bytes_per_step, dtype=float)),
            "users": pa.array([list(links.users.get(i, [])) for i in range(n)], type=pa.list_(pa.string())),
        }, schema=LINK_SCHEMA))
    return pa.concat_tables(parts) if parts else LINK_SCHEMA.empty_table()


def write_task_parquet(results: RunResult | Sequence[RunResult], path: str | Path) -> Path:
    """Write :func:`task_table` to ``path`` (zstd-compressed Parquet)."""
    path = Path(path)
    pq.write_table(task_table(results), path, compression="zstd")
    return path


def write_link_parquet(results: RunResult | Sequence[RunResult], path: str | Path) -> Path:
    """Write :func:`link_table` to ``path`` (zstd-compressed Parquet)."""
    path = Path(path)
    pq.write_table(link_table(results), path, compression="zstd")
    return path
