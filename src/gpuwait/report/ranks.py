"""Which GPUs a timeline shows, and how: ranks the workload makes alike are drawn as one group.

A timeline of 512 GPUs is 512 rows of stripes nobody can read, yet a 3D-parallel job has only a
few kinds of rank: every GPU of one pipeline stage runs the same phases at the same moments, and
only a straggler or a rank behind a slow link breaks ranks. :func:`rank_groups` groups ranks by
that *phase pattern* (the sequence of their tasks and when each starts, at screen resolution),
so a timeline shows one row per group (its median member) with the group's spread, and lets the
reader drill down to its members. The HTML report and the Perfetto trace both call it, so they
show the same groups.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuwait.steps.result import RunResult

#: Categories in which a GPU is busy on its own account; the others (straggler wait, bubble,
#: exposed communication) are time it spends waiting for somebody else.
_OWN_TIME = ("compute", "data_wait", "checkpoint")

#: Task kinds the workload schedules (the rest, waits, depend on who is slowest).
_STRUCTURE_KINDS = ("compute", "comm", "bubble", "checkpoint")


def own_time_s(result: RunResult) -> np.ndarray:
    """Per rank, seconds per step a GPU is busy on its own account: what its groups wait for."""
    per_gpu = result.breakdown.per_gpu_s
    return sum((np.asarray(per_gpu[c], dtype=float) for c in _OWN_TIME if c in per_gpu),
               np.zeros(result.breakdown.n_gpus))


@dataclass(frozen=True)
class RankGroup:
    """Ranks with one phase pattern. ``ranks`` ascending; ``median_rank`` is the member whose own
    time (:func:`own_time_s`) is the median, the one a timeline draws for the group; ``slowest_rank``
    the member with the most own time (ties to the lower rank); ``own_s`` the members' own times."""

    index: int
    ranks: np.ndarray
    median_rank: int
    slowest_rank: int
    own_s: np.ndarray

    @property
    def label(self) -> str:
        n = len(self.ranks)
        return f"group {self.index + 1}: {n} GPU{'s' if n != 1 else ''} ({rank_ranges(self.ranks)})"

    @property
    def spread_text(self) -> str:
        lo_ms, hi_ms = 1e3 * float(self.own_s.min()), 1e3 * float(self.own_s.max())
        return (f"own time {lo_ms:.2f}-{hi_ms:.2f} ms/step, median rank {self.median_rank}, "
                f"slowest rank {self.slowest_rank}")

    def shown_members(self, limit: int) -> np.ndarray:
        """At most ``limit`` members to drill down to: the median and the slowest first, then the
        lowest ranks; returned ascending."""
        first = [self.median_rank, self.slowest_rank] + [int(r) for r in self.ranks]
        picked = list(dict.fromkeys(first))[: max(1, limit)]
        return np.array(sorted(picked), dtype=int)


def rank_ranges(ranks: np.ndarray, max_ranges: int = 4) -> str:
    """``"0-7, 16-23"``: runs of consecutive ranks; past ``max_ranges`` runs, the first ones and a count."""
    ranks = np.sort(np.asarray(ranks, dtype=int))
    if not len(ranks):
        return "none"
    breaks = np.flatnonzero(np.diff(ranks) != 1)
    starts = np.concatenate([[ranks[0]], ranks[breaks + 1]])
    ends = np.concatenate([ranks[breaks], [ranks[-1]]])
    parts = [f"{a}" if a == b else f"{a}-{b}" for a, b in zip(starts, ends)]
    if len(parts) > max_ranges:
        return ", ".join(parts[:max_ranges - 1]) + f", ... ({len(parts)} runs)"
    return ", ".join(parts)


def _pattern_keys(result: RunResult, with_comm: bool) -> list[bytes]:
    """Per rank, a key equal for ranks whose compute phases come in the same order (a pipeline
    stage's schedule: stage 0 runs more forwards before its first backward than the last stage)
    and, with ``with_comm``, that have the same tasks of every kind, in any order (a stage's sends
    and receives, a replica's collectives), waits left out. Times and waits are left out on purpose:
    jitter moves every rank a little, and who waits depends on who is slowest; the timeline shows
    the group's spread and its slowest member instead."""
    t = result.tasks
    n = result.breakdown.n_gpus
    if len(t) == 0:
        return [b""] * n
    _, code = np.unique(np.char.add(np.asarray(t.kind, dtype=str), np.asarray(t.name, dtype=str)), return_inverse=True)
    code = code.astype(np.int64)
    is_compute = np.asarray(t.kind) == "compute"
    order = np.lexsort((code, t.start_s, t.rank))
    bounds = np.searchsorted(t.rank[order], np.arange(n + 1))
    by_code = np.lexsort((code, t.rank))
    by_code = by_code[np.isin(np.asarray(t.kind)[by_code], _STRUCTURE_KINDS)]
    code_bounds = np.searchsorted(t.rank[by_code], np.arange(n + 1))
    keys = []
    for r in range(n):
        mine = order[bounds[r]:bounds[r + 1]]
        key = code[mine[is_compute[mine]]].tobytes()
        if with_comm:
            key += b"|" + code[by_code[code_bounds[r]:code_bounds[r + 1]]].tobytes()
        keys.append(key)
    return keys


def _group_by_keys(keys: list[bytes]) -> list[np.ndarray]:
    members: dict[bytes, list[int]] = {}
    for r, k in enumerate(keys):
        members.setdefault(k, []).append(r)
    return sorted((np.array(v, dtype=int) for v in members.values()), key=lambda g: int(g[0]))


def _blocks(n: int, max_groups: int) -> list[np.ndarray]:
    return [b for b in np.array_split(np.arange(n), min(n, max_groups)) if len(b)]


def rank_groups(result: RunResult, max_groups: int = 16) -> tuple[list[RankGroup], str]:
    """The ranks in at most ``max_groups`` groups of one phase pattern, ordered by lowest member,
    and a sentence saying how they were grouped.

    Tried in order, the first that leaves at most ``max_groups`` groups wins: same compute order
    and same tasks; same compute order; consecutive rank blocks (no pattern groups the job).
    """
    n = result.breakdown.n_gpus
    groups, how = None, ""
    for with_comm, text in ((True, "same compute order and tasks"), (False, "same compute order")):
        found = _group_by_keys(_pattern_keys(result, with_comm))
        if len(found) <= max_groups:
            groups, how = found, text
            break
    if groups is None:
        groups, how = _blocks(n, max_groups), "consecutive ranks (no common pattern)"
    own = own_time_s(result)
    out = []
    for i, members in enumerate(groups):
        mine = own[members]
        by_own = members[np.lexsort((members, mine))]
        slowest = int(members[np.lexsort((members, -mine))][0])
        out.append(RankGroup(index=i, ranks=members, median_rank=int(by_own[(len(members) - 1) // 2]),
                             slowest_rank=slowest, own_s=mine))
    return out, f"{n} GPUs in {len(out)} group{'s' if len(out) != 1 else ''} ({how})"
