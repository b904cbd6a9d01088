"""Read a directory of telemetry collected on a real cluster into one :class:`TelemetryBundle`.

Each file is recognized by its extension or its content, never by its full name:

=================  ==========================================================================
kind               recognized by
=================  ==========================================================================
prometheus         ``*.prom``, or text opening with ``# HELP`` / ``# TYPE`` or a sample line
                   (OpenMetrics too: a text ending with ``# EOF``)
prometheus_json    JSON with a ``"resultType"``: a ``/api/v1/query_range`` or ``/api/v1/query`` answer
parquet            ``*.parquet`` (metrics written by :func:`write_metrics_parquet`)
kineto             JSON with ``"traceEvents"``: a PyTorch profiler trace (``*.pt.trace.json``, also gzipped)
ethtool            a ``NIC statistics:`` line, or only indented ``name: integer`` lines
perfquery          a ``# Port counters`` / ``# Port extended counters`` line or ``Name:....value``
nccl_debug         ``host:pid:tid [dev] NCCL INFO`` lines (their rings and trees too)
nccl_tests         nccl-tests comments (``# nThread``, ``#  Rank``, ``# Avg bus bandwidth``)
=================  ==========================================================================

A log with both NCCL INFO lines and an nccl-tests table (nccl-tests run with ``NCCL_DEBUG=INFO``)
is read as both. ``*.gz`` files are read decompressed. Subdirectories are read too (``host1/ethtool-eth0.txt``); files and folders
whose name starts with ``.`` are skipped. Keys are paths relative to the directory.
"""

from __future__ import annotations

import math
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gpuwait.errors import SpecError
from gpuwait.spec.reader import MAX_TEXT_BYTES, read_bytes_checked
from gpuwait.telemetry.errors import TelemetryFormatError
from gpuwait.telemetry.kineto import KinetoTrace, parse_kineto_trace
from gpuwait.telemetry.metricset import MetricSet
from gpuwait.telemetry.nccl_debug import NcclDebugInfo, parse_nccl_debug
from gpuwait.telemetry.nccl_graph import NcclGraph, parse_nccl_graph
from gpuwait.telemetry.nccltests_log import NcclTestsLog, parse_nccl_tests_log
from gpuwait.telemetry.nic_counters import ETHTOOL_LINE, PERFQUERY_BLOCK, parse_ethtool_stats, parse_perfquery
from gpuwait.telemetry.parquet import read_metrics_parquet
from gpuwait.telemetry.prometheus import parse_prometheus_text
from gpuwait.telemetry.promjson import parse_prometheus_json

_EXPECTED = ("Prometheus text or OpenMetrics (*.prom or # HELP/# TYPE lines), Prometheus API JSON (query_range), "
             "metrics Parquet (*.parquet), PyTorch profiler traces (traceEvents JSON), nccl-tests stdout, "
             "NCCL_DEBUG=INFO logs, `ethtool -S` dumps or `perfquery` output")
_PROM_SAMPLE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})?\s+[-+]?(\d|\.\d|nan|inf)\S*(\s+-?\d+)?\s*$", re.IGNORECASE)
_PERFQUERY = re.compile(rf"^{PERFQUERY_BLOCK}|^[A-Za-z][A-Za-z0-9_]*:\.{{3,}}\S", re.IGNORECASE | re.MULTILINE)
# the host starts after a separator: linear on long lines (see nccl_debug._LINE)
_NCCL_LINE = re.compile(r"(?<![^\s:\[\]>])[^\s:\[\]]+:\d+:\d+ \[\d+\] (?:\S+:\d+ )?NCCL (?:INFO|WARN) ")
_NCCL_TESTS = re.compile(r"^(?:\S*:\s*)?#\s*(?:nThread\s|\s*Rank\s+\d+|Avg bus bandwidth|Collective test|nccl-tests version|"
                         r"\s*size\s+count\s)", re.MULTILINE)


@dataclass(frozen=True)
class TelemetryBundle:
    """What :func:`load_telemetry_dir` read, by file (path relative to ``root``)."""

    root: Path
    metric_files: dict[str, MetricSet] = field(default_factory=dict)
    nccl_tests: dict[str, NcclTestsLog] = field(default_factory=dict)
    nccl_debug: dict[str, NcclDebugInfo] = field(default_factory=dict)
    ethtool: dict[str, dict[str, int]] = field(default_factory=dict)
    perfquery: dict[str, dict[str, int]] = field(default_factory=dict)
    kineto: dict[str, KinetoTrace] = field(default_factory=dict)
    nccl_graph: dict[str, NcclGraph] = field(default_factory=dict)
    kinds: dict[str, tuple[str, ...]] = field(default_factory=dict)  # file -> the kinds read from it
    #: unreadable rows left out: one description per row (Prometheus text, Parquet) or one per file that says
    #: how many and names the first (ethtool, perfquery, nccl-tests logs)
    skipped: list[str] = field(default_factory=list)

    @property
    def metrics(self) -> MetricSet:
        """The samples of every Prometheus and Parquet file, in file order; a sample two files both hold
        (a scrape or an export copied twice into the directory) once."""
        merged = MetricSet.concat(self.metric_files.values())
        seen: set[tuple] = set()
        stamps = [None if math.isnan(t) else t for t in merged.timestamp_s.tolist()]  # NaN (none) never equals itself
        keep = []
        for i, row in enumerate(zip(merged.name, merged.labels, merged.value.tolist(), stamps)):
            if row not in seen:
                seen.add(row)
                keep.append(i)
        return merged if len(keep) == len(merged) else merged.take(np.array(keep, dtype=np.int64))

    def run_value(self, name: str) -> float | None:
        """The one value of a run-wide series of gpuwait's export (``gpuwait_step_seconds``...), None
        when no file holds it; files that hold different values are two runs, one error naming them."""
        values = {rel: sorted(set(m.select(name).value.tolist())) for rel, m in self.metric_files.items()
                  if len(m.select(name))}
        distinct = sorted({v for vs in values.values() for v in vs})
        if len(distinct) > 1:
            where = "; ".join(f"{rel}: {', '.join(f'{v:g}' for v in vs)}" for rel, vs in values.items())
            raise TelemetryFormatError(f"{name} differs within the directory ({where}); expected the export of one "
                                       "run", hint="diagnose each run's `gpuwait telemetry export` in its own directory")
        return distinct[0] if distinct else None


def sniff_kinds(path: Path, text: str) -> tuple[str, ...]:
    """What a text file holds (see the module doc); empty when nothing is recognized."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return ()
    first = lines[0].strip()
    if first.startswith(("{", "[")):
        head = text[:4096]
        if '"resultType"' in head:
            return ("prometheus_json",)
        if '"traceEvents"' in text:
            return ("kineto",)
        return ()
    if path.suffix == ".prom" or first.startswith(("# HELP ", "# TYPE ")) or _PROM_SAMPLE.match(first):
        return ("prometheus",)
    content = [ln for ln in lines if not ln.lstrip().startswith("#")]
    if content and (content[0].strip() == "NIC statistics:" or all(ETHTOOL_LINE.match(ln) for ln in content)):
        return ("ethtool",)
    if _PERFQUERY.search(text) and not _NCCL_LINE.search(text):
        return ("perfquery",)
    kinds = []
    if _NCCL_TESTS.search(text):
        kinds.append("nccl_tests")
    if _NCCL_LINE.search(text):
        kinds.append("nccl_debug")
    return tuple(kinds)


def _gunzip(data: bytes, rel: str) -> bytes:
    """A gzip file's content, refused past the checked reader's size limit (a small file can expand
    without bound)."""
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = inflate.decompress(data, MAX_TEXT_BYTES + 1)
    except zlib.error as err:
        raise TelemetryFormatError(f"{rel}: not a gzip file ({err}); expected {_EXPECTED}") from None
    if len(out) > MAX_TEXT_BYTES or inflate.unconsumed_tail:
        raise TelemetryFormatError(f"{rel}: expands past {MAX_TEXT_BYTES:,} bytes; expected a telemetry file "
                                   "within the reader's limit", hint="split the file, or keep only the part to read")
    return out


def _read_text(file: Path, rel: str) -> str:
    """The text of one telemetry file through the checked reader (regular file, size limit, UTF-8)."""
    try:
        data = read_bytes_checked(file, "a telemetry file")
    except SpecError as err:
        raise TelemetryFormatError(f"{rel}: {str(err).split(': ', 1)[-1]}", hint=err.hint) from None
    if file.suffix == ".gz":
        data = _gunzip(data, rel)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise TelemetryFormatError(f"{rel}: cannot read as text (byte 0x{data[err.start]:02x} on line {line} is not "
                                   f"UTF-8); expected {_EXPECTED}") from None


def load_telemetry_dir(path: str | Path) -> TelemetryBundle:
    """Read every telemetry file under ``path`` (see the module doc for what is recognized).

    Raises
    ------
    TelemetryFormatError
        When ``path`` is not a directory, holds no file, or a file cannot be read or is not
        recognized; the message names the file and what was expected.
    """
    root = Path(path)
    if not root.is_dir():
        raise TelemetryFormatError(f"{root}: not a directory; expected a directory of telemetry files ({_EXPECTED})")
    files = sorted(p for p in root.rglob("*")
                   if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts))
    if not files:
        raise TelemetryFormatError(f"{root}: no files; expected {_EXPECTED}")
    bundle = TelemetryBundle(root)
    for file in files:
        rel = file.relative_to(root).as_posix()
        if file.suffix == ".parquet":
            bundle.metric_files[rel] = read_metrics_parquet(file, skipped=bundle.skipped)
            bundle.kinds[rel] = ("parquet",)
            continue
        text = _read_text(file, rel)
        kinds = sniff_kinds(file, text)
        if not kinds:
            raise TelemetryFormatError(f"{rel}: not a telemetry file gpuwait recognizes; expected {_EXPECTED}",
                                       hint="move other files out of the directory")
        read = [kind for kind in kinds if _read(bundle, kind, kinds, rel, text)]
        bundle.kinds[rel] = tuple(read)
    for rel, metrics in bundle.metric_files.items():
        bundle.metric_files[rel] = _with_values(metrics, rel, bundle.skipped)
    return bundle


def _with_values(metrics: MetricSet, rel: str, skipped: list[str]) -> MetricSet:
    """The samples that carry a reading. NaN is Prometheus's value for none (a rate over an empty
    window, a recording rule dividing by zero) and an infinity is no reading of a counter or a ratio
    either: each is left out and the file's are named once in ``skipped``. Read as numbers they made a
    GPU 100 % busy (``min(1, nan)`` is 1) and every comparison over ports false."""
    bad = ~np.isfinite(metrics.value)
    if not bad.any():
        return metrics
    first = int(np.flatnonzero(bad)[0])
    labels = ",".join(f'{k}="{v}"' for k, v in metrics.labels[first])
    skipped.append(f"{rel}: {int(bad.sum())} sample(s) without a finite value (NaN or Inf) left out, the first "
                   f"{metrics.name[first]}{{{labels}}} {metrics.value[first]}")
    return metrics.take(np.flatnonzero(~bad))


def _read(bundle: TelemetryBundle, kind: str, kinds: tuple[str, ...], rel: str, text: str) -> bool:
    """Read ``text`` as ``kind`` into ``bundle``; False when it turns out not to hold that kind."""
    if kind == "prometheus":
        bundle.metric_files[rel] = parse_prometheus_text(text, source=rel, skipped=bundle.skipped)
    elif kind == "prometheus_json":
        bundle.metric_files[rel] = parse_prometheus_json(text, source=rel)
    elif kind == "kineto":
        bundle.kineto[rel] = parse_kineto_trace(text, source=rel)
    elif kind == "ethtool":
        bundle.ethtool[rel] = parse_ethtool_stats(text, source=rel, skipped=bundle.skipped)
    elif kind == "perfquery":
        bundle.perfquery[rel] = parse_perfquery(text, source=rel, skipped=bundle.skipped)
    elif kind == "nccl_debug":
        bundle.nccl_debug[rel] = parse_nccl_debug(text, source=rel)
        bundle.nccl_graph[rel] = parse_nccl_graph(text)
    else:
        try:
            bundle.nccl_tests[rel] = parse_nccl_tests_log(text, source=rel, skipped=bundle.skipped)
        except SpecError as err:
            if "nccl_debug" in kinds and "no result rows" in str(err):
                return False  # an NCCL_DEBUG log of an nccl-tests run that printed no table
            raise TelemetryFormatError(f"{rel}: {err}", hint=err.hint) from None
    return True
