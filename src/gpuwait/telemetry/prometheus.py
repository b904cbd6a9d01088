"""Prometheus text exposition format 0.0.4: write a MetricSet, read a scrape.

Format (prometheus/docs ``exposition_formats.md``): ``# HELP name text`` (``\\`` and newline
escaped), ``# TYPE name counter|gauge|histogram|summary|untyped``, then
``name{label="value",...} value [timestamp_ms]``; label values escape ``\\``, ``"`` and newline;
values are Go floats including ``NaN``, ``+Inf``, ``-Inf``. Samples of one metric family are
written together; histogram and summary samples (``_bucket``, ``_sum``, ``_count``) belong to
their family's ``# TYPE``.

Examples
--------
>>> from gpuwait.telemetry.metricset import MetricInfo, MetricSet
>>> m = MetricSet.from_samples([("node_network_speed_bytes", {"device": "eth0"}, 1.25e8)],
...                            info={"node_network_speed_bytes": MetricInfo("gauge", "speed_bytes value.")})
>>> print(to_prometheus_text(m), end="")
# HELP node_network_speed_bytes speed_bytes value.
# TYPE node_network_speed_bytes gauge
node_network_speed_bytes{device="eth0"} 125000000
>>> parse_prometheus_text(to_prometheus_text(m)).value_of("node_network_speed_bytes", device="eth0")
125000000.0
"""

from __future__ import annotations

import math
import re

from gpuwait.telemetry.errors import TelemetryFormatError
from gpuwait.telemetry.metricset import (
    METRIC_TYPES,
    Labels,
    MetricInfo,
    MetricSet,
    Sample,
)

_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
#: OpenMetrics 1.0 types that Prometheus text 0.0.4 lacks, as the nearest 0.0.4 type
_OPENMETRICS_TYPES = {"unknown": "untyped", "info": "gauge", "stateset": "gauge", "gaugehistogram": "histogram"}
_FAMILY_SUFFIXES = {"histogram": ("_bucket", "_sum", "_count", "_created"), "summary": ("_sum", "_count", "_created")}


def _family(name: str, info: dict[str, MetricInfo]) -> str:
    """The metric family a sample belongs to: itself, or a histogram/summary it is a part of."""
    if name in info:
        return name
    for kind, suffixes in _FAMILY_SUFFIXES.items():
        for suffix in suffixes:
            base = name[: -len(suffix)]
            if name.endswith(suffix) and base in info and info[base].type == kind:
                return base
    return name


# ---------------------------------------------------------------------------------------- writing

def format_value(value: float) -> str:
    """A sample value as Prometheus prints it: ``NaN``, ``+Inf``, whole numbers without ``.0``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(value)


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _format_labels(labels: Labels) -> str:
    for key, _ in labels:
        if not _LABEL_NAME.match(key) or key.startswith("__"):
            raise TelemetryFormatError(f"label name {key!r} is not valid in Prometheus; expected [a-zA-Z_][a-zA-Z0-9_]* "
                                       "not starting with __")
    return "{" + ",".join(f'{k}="{_escape_label(v)}"' for k, v in labels) + "}" if labels else ""


def to_prometheus_text(metrics: MetricSet) -> str:
    """The samples as a Prometheus text exposition (0.0.4), families in order of first appearance.

    Timestamps are printed in whole milliseconds. Raises TelemetryFormatError for a metric or label
    name Prometheus would reject.
    """
    info = dict(metrics.info)
    families: dict[str, list[Sample]] = {}
    for sample in metrics:
        if not _METRIC_NAME.match(sample.name):
            raise TelemetryFormatError(f"metric name {sample.name!r} is not valid in Prometheus; expected "
                                       "[a-zA-Z_:][a-zA-Z0-9_:]*")
        families.setdefault(_family(sample.name, info), []).append(sample)
    lines = []
    for family, samples in families.items():
        if family in info:
            if info[family].help:
                lines.append(f"# HELP {family} {_escape_help(info[family].help)}")
            lines.append(f"# TYPE {family} {info[family].type}")
        for s in samples:
            line = f"{s.name}{_format_labels(s.labels)} {format_value(s.value)}"
            if s.timestamp_s is not None:
                line += f" {round(s.timestamp_s * 1000)}"
            lines.append(line)
    return "\n".join(lines) + "\n" if lines else ""


# ---------------------------------------------------------------------------------------- reading

def _error(lineno: int, line: str, why: str, source: str) -> TelemetryFormatError:
    return TelemetryFormatError(f"{source} line {lineno}: {why} in {line.strip()[:120]!r}; expected "
                                'name{label="value",...} value [timestamp_ms] or a # HELP / # TYPE line',
                                hint="pass the text of a /metrics scrape (Prometheus text format 0.0.4)")


def _parse_labels(text: str, pos: int, lineno: int, line: str, source: str) -> tuple[Labels, int]:
    """Labels from ``text[pos] == '{'``; returns them and the position after ``}``."""
    labels: list[tuple[str, str]] = []
    pos += 1
    while True:
        while pos < len(text) and text[pos] in " \t":
            pos += 1
        if pos < len(text) and text[pos] == "}":
            return tuple(labels), pos + 1
        m = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*\"").match(text, pos)
        if m is None:
            raise _error(lineno, line, f"bad label at column {pos + 1}", source)
        pos, value = m.end(), []
        while True:
            if pos >= len(text):
                raise _error(lineno, line, "unterminated label value", source)
            ch = text[pos]
            if ch == "\\" and pos + 1 < len(text):
                nxt = text[pos + 1]
                value.append({"n": "\n", "\\": "\\", '"': '"'}.get(nxt, "\\" + nxt))
                pos += 2
            elif ch == '"':
                pos += 1
                break
            else:
                value.append(ch)
                pos += 1
        labels.append((m[1], "".join(value)))
        while pos < len(text) and text[pos] in " \t":
            pos += 1
        if pos < len(text) and text[pos] == ",":
            pos += 1
        elif pos >= len(text) or text[pos] != "}":
            raise _error(lineno, line, f"expected ',' or '}}' at column {pos + 1}", source)


def _parse_float(token: str) -> float:
    low = token.lower()
    if low in ("nan", "+nan", "-nan"):
        return math.nan
    if low in ("+inf", "inf"):
        return math.inf
    if low == "-inf":
        return -math.inf
    return float(token)


def _sample(line: str, raw: str, lineno: int, source: str, openmetrics: bool) -> Sample:
    """One sample line: name, labels, value, optional timestamp."""
    m = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line)
    if m is None:
        raise _error(lineno, raw, "no metric name", source)
    name, pos = m[0], m.end()
    labels: Labels = ()
    if pos < len(line) and line[pos] == "{":
        labels, pos = _parse_labels(line, pos, lineno, raw, source)
    tokens = (line[pos:].split(" # ", 1)[0] if openmetrics else line[pos:]).split()
    if not 1 <= len(tokens) <= 2 or (pos < len(line) and line[pos] not in " \t"):
        raise _error(lineno, raw, "expected a value and an optional timestamp after the labels", source)
    try:
        value = _parse_float(tokens[0])
        ts = None if len(tokens) < 2 else float(tokens[1]) if openmetrics else int(tokens[1]) / 1000
    except ValueError:
        raise _error(lineno, raw, f"{' '.join(tokens)!r} is not a number", source) from None
    return Sample(name, labels, value, ts)


def parse_prometheus_text(text: str, *, source: str = "Prometheus text", skipped: list[str] | None = None) -> MetricSet:
    """Read a Prometheus text exposition (what ``curl host:9400/metrics`` prints).

    ``# HELP`` and ``# TYPE`` lines fill :attr:`MetricSet.info`; other comments and blank lines
    are skipped; ``# EOF`` (OpenMetrics) ends the text. Timestamps (ms) become ``timestamp_s``.
    A text that ends with ``# EOF`` is OpenMetrics 1.0: its timestamps are seconds, exemplars
    (``# {trace_id="..."} 1``) are dropped, and its ``unknown``/``info``/``stateset``/``gaugehistogram``
    types are read as ``untyped``/``gauge``/``gauge``/``histogram``.

    With ``skipped`` (a list), a sample line that cannot be read is left out and described there (real
    scrapes carry the odd broken row); a text with no readable sample at all is still an error.

    Raises
    ------
    TelemetryFormatError
        For a line that is not a comment or a sample (unless ``skipped`` collects it); the message
        names ``source`` and the line.
    """
    info: dict[str, MetricInfo] = {}
    samples: list[Sample] = []
    bad: list[TelemetryFormatError] = []
    openmetrics = re.search(r"^# EOF\s*$", text, re.MULTILINE) is not None
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line[1:].split(None, 2)
            if parts and parts[0] == "EOF":
                break
            if len(parts) >= 2 and parts[0] in ("HELP", "TYPE"):
                name, rest = parts[1], parts[2] if len(parts) > 2 else ""
                old = info.get(name, MetricInfo())
                if parts[0] == "HELP":
                    help_text = re.sub(r"\\(.)", lambda m: "\n" if m[1] == "n" else m[1], rest)
                    info[name] = MetricInfo(old.type, help_text)
                else:
                    kind = rest.strip().lower()
                    if openmetrics:
                        kind = _OPENMETRICS_TYPES.get(kind, kind)
                    if kind not in METRIC_TYPES:
                        raise _error(lineno, raw, f"unknown metric type {rest.strip()!r}", source)
                    info[name] = MetricInfo(kind, old.help)
            continue
        try:
            samples.append(_sample(line, raw, lineno, source, openmetrics))
        except TelemetryFormatError as err:
            if skipped is None:
                raise
            bad.append(err)
    if bad and not samples:
        raise bad[0]  # nothing readable: not a scrape with a few bad rows but not a scrape at all
    if skipped is not None:
        skipped.extend(str(err) for err in bad)
    return MetricSet.from_samples(samples, info=info)
