"""MetricSets as Parquet in long format: one row per sample, for DuckDB, pandas or polars.

Columns: ``name`` (string), ``labels`` (map<string, string>, in the sample's label order),
``value`` (float64), ``timestamp_s`` (float64, null when the sample has none). Types and help
texts are kept in the schema metadata (key ``gpuwait.metric_info``, JSON).

Examples
--------
Query a written file with DuckDB::

    SELECT labels['Hostname'] AS host, avg(value) AS util_pct
    FROM 'metrics.parquet' WHERE name = 'DCGM_FI_DEV_GPU_UTIL' GROUP BY ALL ORDER BY ALL
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from gpuwait.spec.reader import read_bytes_checked, short_value
from gpuwait.telemetry.errors import TelemetryFormatError
from gpuwait.telemetry.metricset import MetricInfo, MetricSet

METRIC_SCHEMA = pa.schema([
    ("name", pa.string()), ("labels", pa.map_(pa.string(), pa.string())), ("value", pa.float64()),
    ("timestamp_s", pa.float64()),
])
_INFO_KEY = b"gpuwait.metric_info"


def metrics_table(metrics: MetricSet) -> pa.Table:
    """The samples as an Arrow table with :data:`METRIC_SCHEMA` and the info in its metadata."""
    ts = metrics.timestamp_s
    table = pa.table({
        "name": pa.array(metrics.name.tolist(), type=pa.string()),
        "labels": pa.array([list(lab) for lab in metrics.labels], type=pa.map_(pa.string(), pa.string())),
        "value": pa.array(np.asarray(metrics.value, dtype=float)),
        "timestamp_s": pa.array(ts, mask=np.isnan(ts), type=pa.float64()),
    }, schema=METRIC_SCHEMA)
    info = {k: [v.type, v.help] for k, v in metrics.info.items()}
    return table.replace_schema_metadata({_INFO_KEY: json.dumps(info).encode()})


def write_metrics_parquet(metrics: MetricSet, path: str | Path) -> Path:
    """Write ``metrics`` to ``path`` (long format, see the module doc); returns the path."""
    path = Path(path)
    pq.write_table(metrics_table(metrics), path)
    return path


def _metric_info(meta: bytes | None, path: Path, skipped: list[str]) -> dict[str, MetricInfo]:
    """The types and help texts in the schema metadata; unreadable metadata is skipped and noted."""
    if not meta:
        return {}
    try:
        raw = json.loads(meta)
        return {str(k): MetricInfo(str(v[0]), str(v[1])) for k, v in raw.items()}
    except (ValueError, TypeError, AttributeError, IndexError, KeyError):
        skipped.append(f"{path}: metadata {_INFO_KEY.decode()} is not the JSON gpuwait writes; types and help ignored")
        return {}


def _checked_columns(table: pa.Table, path: Path) -> dict[str, list]:
    """The four columns as Python lists, each of the type :data:`METRIC_SCHEMA` names."""
    cols = {}
    for want in METRIC_SCHEMA:
        got = table.schema.field(want.name).type
        try:
            cols[want.name] = table.column(want.name).cast(want.type).to_pylist()
        except (pa.ArrowException, ValueError, TypeError):
            raise TelemetryFormatError(f"{path}: column {want.name!r} is {got}; expected {want.type}",
                                       hint="expected a metrics file written by gpuwait (write_metrics_parquet)") from None
    return cols


def read_metrics_parquet(path: str | Path, skipped: list[str] | None = None) -> MetricSet:
    """Read a file written by :func:`write_metrics_parquet` (or any with its four columns).

    Rows without a name or a value are skipped; each skip (and unreadable metadata) is described
    in ``skipped`` when given, so the caller can count them and name the first few.
    """
    path = Path(path)
    skipped = [] if skipped is None else skipped
    data = read_bytes_checked(path, "a metrics Parquet file")
    try:
        table = pq.read_table(pa.BufferReader(data))
    except (OSError, pa.ArrowException, ValueError) as err:
        raise TelemetryFormatError(f"{path}: cannot read as Parquet ({short_value(str(err))})",
                                   hint="expected a metrics file written by gpuwait (write_metrics_parquet)") from None
    missing = [c for c in METRIC_SCHEMA.names if c not in table.column_names]
    if missing:
        raise TelemetryFormatError(f"{path}: Parquet file lacks column(s) {', '.join(missing)}; expected "
                                   f"{', '.join(METRIC_SCHEMA.names)} (long-format metrics)")
    info = _metric_info((table.schema.metadata or {}).get(_INFO_KEY), path, skipped)
    cols = _checked_columns(table, path)
    samples = []
    for row, (n, lab, v, t) in enumerate(zip(cols["name"], cols["labels"], cols["value"], cols["timestamp_s"])):
        if n is None or v is None:
            skipped.append(f"{path} row {row}: no {'name' if n is None else 'value'}")
            continue
        samples.append((n, tuple((str(k), "" if x is None else str(x)) for k, x in lab or ()), v,
                        None if t is None or math.isnan(t) else t))
    return MetricSet.from_samples(samples, info=info)
