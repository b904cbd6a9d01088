"""MetricSet: samples of named, labelled metrics in columns, as a Prometheus scrape holds them.

One row per sample: metric name, labels (ordered ``(name, value)`` string pairs), value, and an
optional timestamp in seconds (NaN when absent). ``info`` maps a metric name to its type and help
text (``# TYPE`` / ``# HELP``). Names and label conventions are the exporters' own
(``DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="s0"}``), so simulated and scraped metrics are read by the
same code.

Examples
--------
>>> m = MetricSet.from_samples([
...     ("DCGM_FI_DEV_GPU_UTIL", {"gpu": "0", "Hostname": "s0"}, 87.0),
...     ("DCGM_FI_DEV_GPU_UTIL", {"gpu": "1", "Hostname": "s0"}, 41.0),
... ], info={"DCGM_FI_DEV_GPU_UTIL": MetricInfo("gauge", "GPU utilization (in %).")})
>>> m.value_of("DCGM_FI_DEV_GPU_UTIL", gpu=1)
41.0
>>> len(m.select(Hostname="s0")), m.label_values("gpu")
(2, ['0', '1'])
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

from gpuwait.errors import SpecError, UnknownNameError

#: Labels of one sample: ``(label name, value)`` pairs in the order they are printed.
Labels = tuple[tuple[str, str], ...]

METRIC_TYPES: tuple[str, ...] = ("counter", "gauge", "histogram", "summary", "untyped")


@dataclass(frozen=True)
class MetricInfo:
    """What ``# TYPE`` and ``# HELP`` say about a metric."""

    type: str = "untyped"
    help: str = ""


@dataclass(frozen=True)
class Sample:
    """One row of a :class:`MetricSet`."""

    name: str
    labels: Labels
    value: float
    timestamp_s: float | None = None

    def label(self, key: str, default: str | None = None) -> str | None:
        return dict(self.labels).get(key, default)


def as_labels(labels: Mapping[str, object] | Iterable[tuple[str, object]] | None) -> Labels:
    """Labels as ordered string pairs, from a dict or pairs; values become strings (``0`` -> ``"0"``)."""
    if labels is None:
        return ()
    pairs = labels.items() if isinstance(labels, Mapping) else labels
    return tuple((str(k), str(v)) for k, v in pairs)


@dataclass(frozen=True, eq=False)
class MetricSet:
    """Samples in columns. Build one with :meth:`from_samples`; combine with :meth:`concat`."""

    name: np.ndarray                 # object array of str
    labels: tuple[Labels, ...]
    value: np.ndarray                # float64
    timestamp_s: np.ndarray          # float64, NaN where the sample has none
    info: Mapping[str, MetricInfo] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.name)
        if not len(self.labels) == len(self.value) == len(self.timestamp_s) == n:
            raise SpecError(f"MetricSet columns differ in length: name {n}, labels {len(self.labels)}, "
                            f"value {len(self.value)}, timestamp_s {len(self.timestamp_s)}")

    # ------------------------------------------------------------------ building
    @classmethod
    def from_samples(cls, samples: Iterable[Sample | tuple], info: Mapping[str, MetricInfo] | None = None) -> MetricSet:
        """From ``Sample`` objects or ``(name, labels, value[, timestamp_s])`` tuples (labels a dict or pairs)."""
        names, labels, values, stamps = [], [], [], []
        for s in samples:
            if isinstance(s, Sample):
                name, lab, value, ts = s.name, s.labels, s.value, s.timestamp_s
            else:
                name, lab, value, ts = (*s, None) if len(s) == 3 else s
            names.append(str(name))
            labels.append(as_labels(lab))
            values.append(float(value))
            stamps.append(math.nan if ts is None else float(ts))
        return cls(np.array(names, dtype=object), tuple(labels), np.array(values, dtype=np.float64),
                   np.array(stamps, dtype=np.float64), dict(info or {}))

    @classmethod
    def empty(cls) -> MetricSet:
        return cls.from_samples([])

    @classmethod
    def concat(cls, sets: Iterable[MetricSet]) -> MetricSet:
        """All samples of ``sets`` in order; the first set that describes a metric gives its info."""
        sets = list(sets)
        info: dict[str, MetricInfo] = {}
        for s in sets:
            for k, v in s.info.items():
                info.setdefault(k, v)
        if not sets:
            return cls.empty()
        return cls(np.concatenate([s.name for s in sets]).astype(object), tuple(lab for s in sets for lab in s.labels),
                   np.concatenate([s.value for s in sets]), np.concatenate([s.timestamp_s for s in sets]), info)

    # ------------------------------------------------------------------ reading
    def __len__(self) -> int:
        return len(self.name)

    def __iter__(self) -> Iterator[Sample]:
        for i in range(len(self)):
            ts = float(self.timestamp_s[i])
            yield Sample(str(self.name[i]), self.labels[i], float(self.value[i]), None if math.isnan(ts) else ts)

    def names(self) -> list[str]:
        """Distinct metric names, in order of first appearance."""
        return list(dict.fromkeys(self.name.tolist()))

    def _mask(self, name: str | Collection[str] | None, labels: Mapping[str, object]) -> np.ndarray:
        mask = np.ones(len(self), dtype=bool)
        if name is not None:
            wanted = {name} if isinstance(name, str) else set(name)
            mask &= np.fromiter((n in wanted for n in self.name), dtype=bool, count=len(self))
        for key, want in labels.items():
            want = str(want)
            mask &= np.fromiter((dict(lab).get(key) == want for lab in self.labels), dtype=bool, count=len(self))
        return mask

    def select(self, name: str | Collection[str] | None = None, labels: Mapping[str, object] | None = None,
               **label_values: object) -> MetricSet:
        """Samples of metric ``name`` (or any of several names) whose labels have the given values.

        Label values compare as strings, so ``gpu=0`` matches ``gpu="0"``; pass ``labels={...}``
        for label names that are not Python identifiers.
        """
        idx = np.flatnonzero(self._mask(name, {**(labels or {}), **label_values}))
        return self.take(idx)

    def take(self, idx: np.ndarray) -> MetricSet:
        """The samples at positions ``idx``."""
        idx = np.asarray(idx, dtype=np.int64)
        return MetricSet(self.name[idx], tuple(self.labels[i] for i in idx.tolist()), self.value[idx],
                         self.timestamp_s[idx], self.info)

    def value_of(self, name: str, labels: Mapping[str, object] | None = None, **label_values: object) -> float:
        """The value of the one sample that matches; an error if none or several do."""
        found = self.select(name, labels, **label_values)
        wanted = {**(labels or {}), **label_values}
        if len(found) == 0:
            raise UnknownNameError(f"no sample of {name} with labels {wanted}",
                                   hint=f"metrics here: {', '.join(self.names()[:8])}")
        if len(found) > 1:
            raise SpecError(f"{len(found)} samples of {name} match labels {wanted}; add labels to pick one "
                            f"(e.g. {dict(found.labels[0])})")
        return float(found.value[0])

    def label_values(self, key: str, name: str | None = None) -> list[str]:
        """Distinct values of label ``key`` (among samples of ``name``), in order of appearance."""
        rows = self if name is None else self.select(name)
        return list(dict.fromkeys(v for lab in rows.labels for k, v in lab if k == key))

    def to_dict(self) -> dict[tuple[str, Labels], float]:
        """``{(name, sorted labels): value}``: handy to compare sets whose label order differs."""
        return {(str(n), tuple(sorted(lab))): float(v) for n, lab, v in zip(self.name, self.labels, self.value)}
