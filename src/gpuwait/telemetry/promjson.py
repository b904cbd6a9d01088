"""Read a Prometheus HTTP API answer: ``/api/v1/query_range`` (matrix) or ``/api/v1/query`` (vector).

The format (prometheus.io/docs/prometheus/latest/querying/api/, "Expression query result formats")::

    {"status": "success",
     "data": {"resultType": "matrix",
              "result": [{"metric": {"__name__": "DCGM_FI_DEV_GPU_UTIL", "Hostname": "node01", "gpu": "0"},
                          "values": [[1435781430.781, "87"], [1435781445.781, "91"]]}]}}

A vector has one ``"value": [t, "v"]`` per series instead of ``"values"``. Times are Unix seconds;
values are strings (``"NaN"``, ``"+Inf"`` included). Every series must keep its ``__name__``: the
readers place series by metric name, so export raw series (``query=DCGM_FI_DEV_GPU_UTIL``), not
an expression such as ``rate(...)`` that drops the name.

Examples
--------
>>> m = parse_prometheus_json('{"status": "success", "data": {"resultType": "vector", "result": ['
...     '{"metric": {"__name__": "up", "job": "node"}, "value": [1435781451.781, "1"]}]}}')
>>> m.value_of("up", job="node"), float(m.timestamp_s[0])
(1.0, 1435781451.781)
"""

from __future__ import annotations

import json
import math

from gpuwait.spec.reader import loads_json
from gpuwait.telemetry.errors import TelemetryFormatError
from gpuwait.telemetry.metricset import MetricSet, Sample

_EXPECTED = ('{"status": "success", "data": {"resultType": "matrix"|"vector", "result": '
             '[{"metric": {"__name__": ...}, "values": [[t, "v"], ...]}]}} (a /api/v1/query_range answer)')


def _number(text: object, where: str, source: str) -> float:
    if isinstance(text, (str, int, float)):  # what else JSON holds (a list, an object, null) is no number
        try:
            return float(text) if not isinstance(text, str) or text.lower() not in ("nan", "+nan") else math.nan
        except ValueError:
            pass
        except OverflowError:  # a JSON integer past a double's range (10**400); float() of any string gives inf
            raise TelemetryFormatError(f"{source}: {where}: an integer of {len(str(text).lstrip('-'))} digits, beyond a "
                                       "float's range (about 1.8e308); expected a string such as \"0.5\" (\"+Inf\" "
                                       "for an unbounded value)") from None
    raise TelemetryFormatError(f"{source}: {where}: {text!r} is not a number; expected a string such as \"0.5\"")


#: Unix seconds past this are after the year 5000: a timestamp in milliseconds (VictoriaMetrics' export,
#: a converted Grafana table), which read as seconds would stretch every window 1000-fold and cut
#: every rate by as much
LATEST_UNIX_S = 1e11


def parse_prometheus_json(text: str, *, source: str = "Prometheus API answer") -> MetricSet:
    """Samples of a ``query_range`` (all points) or ``query`` (one point per series) answer.

    Raises
    ------
    TelemetryFormatError
        When the text is not JSON, the status is not ``success``, the result type is not
        ``matrix``/``vector``, or a series lacks ``__name__`` or has a malformed point; the message
        names the series.
    """
    try:
        doc = loads_json(text)
    except json.JSONDecodeError as err:
        raise TelemetryFormatError(f"{source}: not JSON ({err.msg} at line {err.lineno}); expected {_EXPECTED}") from None
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, dict) or doc.get("status", "success") != "success":
        raise TelemetryFormatError(f"{source}: status {doc.get('status') if isinstance(doc, dict) else None!r} and no data; "
                                   f"expected {_EXPECTED}", hint="save the answer of a query that succeeded")
    kind = data.get("resultType")
    if kind not in ("matrix", "vector"):
        raise TelemetryFormatError(f"{source}: data.resultType is {kind!r}; expected 'matrix' (query_range) or "
                                   "'vector' (query)")
    samples: list[Sample] = []
    for i, series in enumerate(data.get("result") or []):
        labels = dict(series.get("metric") or {}) if isinstance(series, dict) else {}
        name = labels.pop("__name__", None)
        if not name:
            raise TelemetryFormatError(f"{source}: data.result[{i}] ({labels}) has no __name__; expected raw series",
                                       hint="query the metric itself (DCGM_FI_DEV_GPU_UTIL), not an expression "
                                            "such as rate(...) that drops the name")
        points = series.get("values") if kind == "matrix" else [series.get("value")]
        for j, point in enumerate(points or []):
            if not isinstance(point, list) or len(point) != 2:
                raise TelemetryFormatError(f"{source}: data.result[{i}] ({name}) point {j}: {point!r}; "
                                           "expected [unix seconds, \"value\"]")
            where = f"data.result[{i}] ({name}) point {j}"
            stamp_s = _number(point[0], where, source)
            if abs(stamp_s) >= LATEST_UNIX_S:
                raise TelemetryFormatError(f"{source}: {where}: timestamp {point[0]!r} is after the year 5000 in "
                                           "seconds; expected Unix seconds, as Prometheus's API answers",
                                           hint="a timestamp in milliseconds: divide it by 1000")
            samples.append(Sample(name, tuple((k, str(v)) for k, v in labels.items()),
                                  _number(point[1], where, source), stamp_s))
    return MetricSet.from_samples(samples)
