"""The one seed helper: every random choice in gpuwait goes through :func:`as_generator`.

Nothing touches global random state; the same seed gives the same stream bit for bit.
"""

from __future__ import annotations

import numpy as np

from gpuwait.errors import GpuwaitError

SeedLike = int | None | np.random.Generator


def as_generator(seed: SeedLike) -> np.random.Generator:
    """Return a ``numpy.random.Generator`` for an int seed, ``None`` (seed 0) or a Generator.

    ``None`` means seed 0, not "fresh entropy": a rerun must reproduce the last run.

    >>> bool(as_generator(3).integers(0, 100) == as_generator(3).integers(0, 100))
    True
    """
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is None:
        seed = 0
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise GpuwaitError(f"seed: got {seed!r}; expected a non-negative integer")
    return np.random.default_rng(int(seed))
