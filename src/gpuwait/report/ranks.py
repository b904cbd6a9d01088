"""Which GPUs a timeline shows when a job is too big to show them all.

A timeline of 16k GPUs is unreadable and huge; the first ranks show the pattern and the slowest
ones show who the rest wait for, so timelines show those and say which they are.
"""

from __future__ import annotations

import numpy as np

from gpuwait.steps.result import RunResult

#: Categories in which a GPU is busy on its own account; the others (straggler wait, bubble,
#: exposed communication) are time it spends waiting for somebody else.
_OWN_TIME = ("compute", "data_wait", "checkpoint")


def own_time_s(result: RunResult) -> np.ndarray:
    """Per rank, seconds per step a GPU is busy on its own account: what its groups wait for."""
    per_gpu = result.breakdown.per_gpu_s
    return sum((np.asarray(per_gpu[c], dtype=float) for c in _OWN_TIME if c in per_gpu),
               np.zeros(result.breakdown.n_gpus))


def timeline_ranks(result: RunResult, max_ranks: int = 36, slowest: int = 4) -> tuple[np.ndarray, str]:
    """Ranks to draw, ascending, and a sentence saying which they are.

    All ranks if there are at most ``max_ranks``; otherwise the first ``max_ranks - slowest`` plus the
    ``slowest`` ranks after them with the most :func:`own_time_s` (ties to the lower rank).
    """
    n_gpus = result.breakdown.n_gpus
    if n_gpus <= max_ranks:
        return np.arange(n_gpus), f"all {n_gpus} GPUs"
    slowest = max(0, min(slowest, max_ranks))
    first = max_ranks - slowest
    rest = np.arange(first, n_gpus)
    own = own_time_s(result)[rest]
    slow = np.sort(rest[np.lexsort((rest, -own))][:slowest])
    text = f"ranks 0-{first - 1}" if first else "no leading ranks"
    if len(slow):
        text += f" and the {len(slow)} slowest ({', '.join(str(r) for r in slow)})"
    return np.concatenate([np.arange(first), slow]).astype(int), f"{text} of {n_gpus} GPUs"
