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
#: the type names prometheus-client gives (OpenMetrics 1.0's, for both formats) that Prometheus text
#: 0.0.4 lacks, as the nearest 0.0.4 type
_CLIENT_TYPES = {"unknown": "untyped", "info": "gauge", "stateset": "gauge", "gaugehistogram": "histogram"}
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
# The parsing itself is prometheus-client's (the Prometheus project's own Python parser for both formats);
# this part maps its metric families onto a MetricSet and turns its errors into one line naming the line.

_EOF = re.compile(r"^# EOF\s*$", re.MULTILINE)  # an OpenMetrics text's last line
_HINT = "pass the text of a /metrics scrape (Prometheus text format 0.0.4)"


def _error(lineno: int, line: str, why: str, source: str) -> TelemetryFormatError:
    return TelemetryFormatError(f"{source} line {lineno}: {why} in {line.strip()[:120]!r}; expected "
                                'name{label="value",...} value [timestamp_ms] or a # HELP / # TYPE line', hint=_HINT)


def _context_error(err: ValueError, source: str) -> TelemetryFormatError:
    """A text whose lines each read but not together (their order or context is wrong)."""
    return TelemetryFormatError(f"{source}: {err}; expected a Prometheus text or OpenMetrics exposition", hint=_HINT)


def _read(text: str, openmetrics: bool) -> MetricSet:
    """The MetricSet of a whole text (ValueError, or TelemetryFormatError, where it does not read)."""
    return _metric_set(_parse_families(text, openmetrics), _counters_without_total(text, openmetrics), openmetrics)


def _parse_families(text: str, openmetrics: bool) -> list:
    """prometheus-client's metric families of ``text`` (ValueError on the first line it cannot read)."""
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
    from prometheus_client.parser import text_string_to_metric_families as parse_text

    if not openmetrics:
        return list(parse_text(text))
    try:
        return list(parse_openmetrics(text))
    except ValueError:
        pass
    # prometheus-client's OpenMetrics parser refuses some texts the OpenMetrics spec itself shows (its
    # counter example has a timestamped foo_total beside a foo_created without one: "mix of timestamp
    # presence"); read such a family's descriptors and samples one by one, exemplars dropped
    families = []
    for block in _family_blocks(text):
        try:
            families += list(parse_openmetrics("\n".join(block) + "\n# EOF\n"))
            continue
        except ValueError:
            pass
        header = [line for line in block if line.startswith("#")]
        family = list(parse_openmetrics("\n".join(header) + "\n# EOF\n")) if header else []
        samples = [x for line in block if not line.startswith("#")
                   for f in parse_openmetrics(line.split(" # ", 1)[0] + "\n# EOF\n") for x in f.samples]
        if family:
            family[0].samples = samples
            families += family
        else:
            families += list(parse_openmetrics("\n".join(block) + "\n# EOF\n"))  # raises: nothing to fall back on
    return families


def _family_blocks(text: str) -> list[list[str]]:
    """OpenMetrics lines grouped by family: a new block at each descriptor (# TYPE/HELP/UNIT) of another name."""
    blocks: list[list[str]] = []
    name = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line == "# EOF":
            continue
        parts = line.split(None, 3)
        if line.startswith("#") and len(parts) >= 3 and parts[1] in ("TYPE", "HELP", "UNIT"):
            if parts[2] != name or not blocks:
                blocks.append([])
                name = parts[2]
        elif not blocks:
            blocks.append([])
        blocks[-1].append(line)
    return blocks


def _line_error(lineno: int, raw: str, openmetrics: bool, source: str) -> TelemetryFormatError | None:
    """The error of one line read on its own, or None when it reads (the text's context is what fails)."""
    line = raw.strip()
    if not line or (line.startswith("#") and not line.startswith(("# TYPE", "# HELP"))):
        return None
    try:
        _parse_families(line + ("\n# EOF\n" if openmetrics else "\n"), openmetrics)
    except ValueError as err:
        return _error(lineno, raw, str(err) or "unreadable", source)
    return None


def _without_bad_lines(text: str, openmetrics: bool, source: str) -> tuple[str, list[TelemetryFormatError]]:
    """``text`` without the lines that do not read on their own, and their errors (line numbers kept)."""
    keep, bad = [], []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        err = _line_error(lineno, raw, openmetrics, source)
        if err is None:
            keep.append(raw)
        else:
            bad.append(err)
    return "\n".join(keep) + "\n", bad


def _counters_without_total(text: str, openmetrics: bool) -> set[str]:
    """Counters a text-format ``# TYPE`` line declares without '_total' (prometheus-client's text parser
    appends it to their samples; in OpenMetrics the samples carry it themselves)."""
    if openmetrics:
        return set()
    return {m[1] for m in re.finditer(r"^#\s*TYPE\s+(\S+)\s+counter\s*$", text, re.MULTILINE)
            if not m[1].endswith("_total")}


def _info_names(family, kind: str, openmetrics: bool) -> set[str]:
    """The names a family's ``# TYPE`` / ``# HELP`` describe: none for a family no line declared (the
    client's 'unknown' without help); else the # TYPE line's name, which is the family's except that the
    text parser drops a counter's '_total', which its samples keep (so there the samples' names, unless
    the family's samples carry suffixes of their own, _FAMILY_SUFFIXES)."""
    if family.type == "unknown" and not family.documentation:
        return set()
    if openmetrics or kind in _FAMILY_SUFFIXES:
        return {family.name}
    return {x.name for x in family.samples} or {family.name}


def _metric_set(families: list, bare_counters: set[str], openmetrics: bool) -> MetricSet:
    info: dict[str, MetricInfo] = {}
    samples: list[Sample] = []
    for family in families:
        if family.type == "counter" and family.name in bare_counters:  # back to the name the exporter printed
            family.samples = [x._replace(name=family.name) if x.name == family.name + "_total" else x
                              for x in family.samples]
        kind = _CLIENT_TYPES.get(family.type, family.type)
        if kind not in METRIC_TYPES:
            raise TelemetryFormatError(f"metric {family.name!r}: unknown metric type {family.type!r}; expected one of "
                                       f"{', '.join(sorted(METRIC_TYPES))}")
        for name in _info_names(family, kind, openmetrics):
            info[name] = MetricInfo(kind, family.documentation)
        for x in family.samples:
            ts = None if x.timestamp is None else float(x.timestamp)
            samples.append(Sample(x.name, tuple(x.labels.items()), float(x.value), ts))
    return MetricSet.from_samples(samples, info=info)


def parse_prometheus_text(text: str, *, source: str = "Prometheus text", skipped: list[str] | None = None) -> MetricSet:
    """Read a Prometheus text exposition (what ``curl host:9400/metrics`` prints).

    Parsed by prometheus-client, with its leniency (a value written right after ``}`` without a
    space is read as a sample). ``# HELP`` and ``# TYPE`` lines fill :attr:`MetricSet.info`; other
    comments and blank lines are skipped. Timestamps (ms) become ``timestamp_s``. A text that ends with
    ``# EOF`` is OpenMetrics 1.0: its timestamps are seconds, exemplars (``# {trace_id="..."} 1``) are
    dropped, and its ``unknown``/``info``/``stateset``/``gaugehistogram`` types are read as
    ``untyped``/``gauge``/``gauge``/``histogram``.

    With ``skipped`` (a list), a line that cannot be read is left out and described there (real
    scrapes carry the odd broken row); a text with no readable sample at all is still an error.

    Raises
    ------
    TelemetryFormatError
        For a line that is not a comment or a sample (unless ``skipped`` collects it); the message
        names ``source`` and the line.
    """
    eof = _EOF.search(text)
    openmetrics = eof is not None
    if eof is not None:
        text = text[: eof.end()] + "\n"  # nothing after # EOF is read
    try:
        return _read(text, openmetrics)
    except ValueError as whole_err:
        cleaned, bad = _without_bad_lines(text, openmetrics, source)
        if not bad:  # every line reads alone: the text's order or context is wrong
            raise _context_error(whole_err, source) from None
        if skipped is None:
            raise bad[0] from None
    try:
        metrics = _read(cleaned, openmetrics)
    except ValueError as err:
        raise _context_error(err, source) from None
    if not len(metrics):
        raise bad[0]  # nothing readable: not a scrape with a few bad rows but not a scrape at all
    skipped.extend(str(err) for err in bad)
    return metrics
