"""Findings in plain words: evidence keys as phrases with the value in its unit, code spans in HTML.

Rules write evidence as ``{"lost_ms": 159.35, "utilization": 0.915, "ecn_kmin_bytes": 1e5}``; an
operator reads ``lost 159.35 ms, utilization 91.5%, ecn kmin 100KB``. The unit comes from the key's
suffix (the project names numbers with their unit), so a new rule's evidence reads right unedited.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from markupsafe import Markup, escape

from gpuwait.steps.result import BREAKDOWN_CATEGORIES, RunResult
from gpuwait.units import format_rate, format_size, format_time

# suffix -> how its value reads; the longest suffix that matches wins
_SUFFIXES = {
    "_GBps": lambda v: f"{v:,.4g} GB/s",
    "_Gbps": lambda v: f"{v:,.4g} Gb/s",
    "_Bps": lambda v: format_rate(v),
    "_bytes": lambda v: format_size(v),
    "_ms": lambda v: format_time(v * 1e-3),
    "_us": lambda v: format_time(v * 1e-6),
    "_ns": lambda v: format_time(v * 1e-9),
    "_s": lambda v: format_time(v),
    "_fraction": lambda v: f"{v:.1%}",
    "_pct": lambda v: f"{v:.1f}%",
}
# keys that are a share of something without saying so in a suffix
_SHARES = ("utilization", "share", "rate")


def _number(value: float) -> str:
    return f"{value:,.4g}"


def evidence_item(key: str, value: object) -> str:
    """One evidence entry in words: ``("lost_ms", 159.35)`` -> ``"lost 159.4 ms"``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{key.replace('_', ' ')} {value}"
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if key.endswith(suffix) and len(key) > len(suffix):
            return f"{key[: -len(suffix)].replace('_', ' ')} {_SUFFIXES[suffix](float(value))}"
    words = key.replace("_", " ")
    if "_vs_" in key:
        return f"{words} {_number(value)}x"
    if words.split()[-1] in _SHARES and 0 <= value <= 1:
        return f"{words} {value:.1%}"
    return f"{words} {_number(value)}"


def evidence_text(evidence: dict) -> str:
    """All of a finding's evidence in words, comma-separated."""
    return ", ".join(evidence_item(k, v) for k, v in evidence.items())


_CODE = re.compile(r"`([^`]+)`")


def code_spans(text: str) -> Markup:
    """``text`` HTML-escaped, with each `span` in backticks set as ``<code>`` (no literal backticks)."""
    out, last = [], 0
    for m in _CODE.finditer(text):
        out.append(escape(text[last:m.start()]))
        out.append(Markup("<code>") + escape(m.group(1)) + Markup("</code>"))
        last = m.end()
    out.append(escape(text[last:].replace("`", "")))
    return Markup("").join(out)


_COLLECTIVE_WORDS = {"all_reduce": "all-reduce", "all_gather": "all-gather", "reduce_scatter": "reduce-scatter",
                     "all_to_all": "all-to-all", "alltoall": "all-to-all", "sendrecv": "send/recv",
                     "broadcast": "broadcast", "reduce": "reduce"}


def part_name(part: str) -> str:
    """A breakdown category or communication group in words: ``"dp all_reduce"`` -> ``"DP all-reduce"``,
    ``"expert_dp all_gather"`` -> ``"EXPERT-DP all-gather"``, ``"straggler_wait"`` -> ``"straggler wait"``."""
    if part in BREAKDOWN_CATEGORIES:
        return {"bubble": "pipeline bubble", "exposed_comm": "exposed communication"}.get(part, part.replace("_", " "))
    words = part.split()
    if len(words) == 2:
        group, op = words
        return f"{group.upper().replace('_', '-')} {_COLLECTIVE_WORDS.get(op, op.replace('_', ' '))}"
    return part.replace("_", " ")


def group_sizes(results: Sequence[RunResult]) -> dict[str, int]:
    """GPUs per communication group (``{"dp": 16, "tp": 8}``), from the collectives the runs timed."""
    sizes: dict[str, int] = {}
    for r in results:
        for c in r.collectives:
            sizes.setdefault(c.group, c.n_ranks)
    return sizes


def part_label(part: str, sizes: dict[str, int]) -> str:
    """A breakdown row's label: :func:`part_name` plus the group's size when known:
    ``"dp all_reduce"`` -> ``"DP all-reduce (16 GPUs)"``. JSON keeps the machine key."""
    name = part_name(part)
    n = sizes.get(part.split()[0]) if " " in part else None
    return f"{name} ({n} GPUs)" if n else name
