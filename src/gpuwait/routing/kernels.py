"""Compiled loops of the routing walk (numba, ``cache=True`` as the engine's): passes that numpy can only
do by sorting. Imported on first use (:mod:`gpuwait.routing.hashing`), so routing alone loads no numba
until it routes."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def running_count(ids, n_ids):
    """For each element of ``ids`` (each in ``0..n_ids-1``), how many earlier elements share its id: one pass
    with a counter per id, where numpy would sort."""
    seen = np.zeros(n_ids, np.int64)
    rank = np.empty(len(ids), np.int64)
    for i in range(len(ids)):
        rank[i] = seen[ids[i]]
        seen[ids[i]] += 1
    return rank


@njit(cache=True)
def place_entries(cursor, rows, links, weights, indices, data):
    """Entries ``(rows[i], links[i], weights[i])`` into a CSR matrix's ``indices``/``data`` at each row's
    ``cursor`` (advanced): scipy's COO-to-CSR placement (``coo_tocsr``), entry by entry in input order,
    without first joining every piece into one COO array."""
    for i in range(len(rows)):
        k = cursor[rows[i]]
        indices[k] = links[i]
        data[k] = weights[i]
        cursor[rows[i]] = k + 1


@njit(cache=True)
def place_entries_of(cursor, rows, links, weight, indices, data):
    """:func:`place_entries` of entries that all weigh ``weight``."""
    for i in range(len(rows)):
        k = cursor[rows[i]]
        indices[k] = links[i]
        data[k] = weight
        cursor[rows[i]] = k + 1


@njit(cache=True)
def first_link_from(indptr, order, link_src, src, dst):
    """For each ``i`` the first link from ``src[i]`` among ``dst[i]``'s incoming links (``order[indptr[d]:indptr[d
    + 1]]``, in id order: the lowest id), -1 where none: one pass, not one masked pass per incoming link."""
    out = np.full(len(dst), -1, np.int64)
    for i in range(len(dst)):
        for k in range(indptr[dst[i]], indptr[dst[i] + 1]):
            if link_src[order[k]] == src[i]:
                out[i] = order[k]
                break
    return out
