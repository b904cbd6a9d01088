"""Small vectorised array idioms shared by the model layers."""

from __future__ import annotations

import numpy as np


def rank_within_groups(keys: np.ndarray) -> np.ndarray:
    """For each element, how many earlier elements (in array order) share its key.

    >>> rank_within_groups(np.array([5, 3, 5, 5, 3])).tolist()
    [0, 0, 1, 2, 1]
    """
    keys = np.asarray(keys)
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    rank = np.empty(len(keys), np.int64)
    rank[order] = np.arange(len(keys)) - np.searchsorted(sorted_keys, sorted_keys, "left")
    return rank
