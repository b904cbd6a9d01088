"""TuningInputs built flat, shared by the collective tests (a helper module, not a conftest: it holds no fixtures)."""

from __future__ import annotations

from dataclasses import fields

from gpuwait.collectives.tuning import Graph, TuningInputs

_RING_FIELDS = frozenset(f.name for f in fields(Graph))


def tuning_inputs(**values) -> TuningInputs:
    """TuningInputs with its ring graph's fields given flat (``n_channels=16, bw_intra_GBps=12.0``...),
    so a test can vary one field of either the communicator or its ring graph by keyword."""
    ring = Graph(**{k: values.pop(k) for k in list(values) if k in _RING_FIELDS})
    return TuningInputs(ring=ring, **values)
