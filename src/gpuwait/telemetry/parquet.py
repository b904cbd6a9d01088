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


def read_metrics_parquet(path: str | Path) -> MetricSet:
    """Read a file written by :func:`write_metrics_parquet` (or any with its four columns)."""
    path = Path(path)
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as err:
        raise TelemetryFormatError(f"{path}: cannot read as Parquet ({err})",
                                   hint="expected a metrics file written by gpuwait (write_metrics_parquet)") from None
    missing = [c for c in METRIC_SCHEMA.names if c not in table.column_names]
    if missing:
        raise TelemetryFormatError(f"{path}: Parquet file lacks column(s) {', '.join(missing)}; expected "
                                   f"{', '.join(METRIC_SCHEMA.names)} (long-format metrics)")
    meta = (table.schema.metadata or {}).get(_INFO_KEY)
    info = {k: MetricInfo(*v) for k, v in json.loads(meta).items()} if meta else {}
    cols = table.select(METRIC_SCHEMA.names).to_pydict()
    samples = [(n, lab or (), v, None if t is None or math.isnan(t) else t)
               for n, lab, v, t in zip(cols["name"], cols["labels"], cols["value"], cols["timestamp_s"])]
    return MetricSet.from_samples(samples, info=info)
