"""The event queue: an array-based binary heap ordered by (time in ps, sequence number).

Each entry is one row ``(time_ps, seq, kind|a|b)`` of an int64 array (``kind`` in the top 5 bits,
``a`` and ``b`` in 29 bits each: ids and byte counts below 536,870,912); ``seq`` increases with
every push, so events at the same picosecond run in the order they were scheduled and a run
is deterministic. No Python object per event. The caller owns the arrays and grows them
(:func:`grow_rows`) before a push could overflow; ``ctr[0]`` is the heap size, ``ctr[1]`` the
next sequence number.
"""

from __future__ import annotations

import numpy as np
from numba import njit

SIZE, SEQ = 0, 1
COLS = 3
_BITS = 29
_MASK = (1 << _BITS) - 1


@njit(cache=True)
def push(heap, ctr, time_ps, kind, a, b):
    """Schedule event ``kind(a, b)`` at ``time_ps``."""
    seq = ctr[SEQ]
    ctr[SEQ] = seq + 1
    data = (np.int64(kind) << (2 * _BITS)) | (np.int64(a) << _BITS) | np.int64(b)
    i = ctr[SIZE]
    ctr[SIZE] = i + 1
    while i > 0:
        parent = (i - 1) >> 1
        pt = heap[parent, 0]
        if pt < time_ps or (pt == time_ps and heap[parent, 1] < seq):
            break
        heap[i, 0] = pt
        heap[i, 1] = heap[parent, 1]
        heap[i, 2] = heap[parent, 2]
        i = parent
    heap[i, 0] = time_ps
    heap[i, 1] = seq
    heap[i, 2] = data


@njit(cache=True)
def pop(heap, ctr, out):
    """Remove the earliest event into ``out`` (time, seq, kind, a, b). The heap must not be empty."""
    out[0] = heap[0, 0]
    out[1] = heap[0, 1]
    data = heap[0, 2]
    out[2] = data >> (2 * _BITS)
    out[3] = (data >> _BITS) & _MASK
    out[4] = data & _MASK
    n = ctr[SIZE] - 1
    ctr[SIZE] = n
    if n == 0:
        return
    t = heap[n, 0]
    s = heap[n, 1]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        r = c + 1
        if r < n and (heap[r, 0] < heap[c, 0] or (heap[r, 0] == heap[c, 0] and heap[r, 1] < heap[c, 1])):
            c = r
        if heap[c, 0] > t or (heap[c, 0] == t and heap[c, 1] > s):
            break
        heap[i, 0] = heap[c, 0]
        heap[i, 1] = heap[c, 1]
        heap[i, 2] = heap[c, 2]
        i = c
    heap[i, 0] = t
    heap[i, 1] = s
    heap[i, 2] = heap[n, 2]


@njit(cache=True)
def grow_rows(arr, rows):
    """A copy of 2-D ``arr`` with ``rows`` rows (at least as many as it has)."""
    out = np.empty((rows, arr.shape[1]), arr.dtype)
    out[: arr.shape[0]] = arr
    return out
