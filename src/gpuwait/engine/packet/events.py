"""The event queue: an array-based 4-ary min-heap ordered by (time in ps, sequence number).

The heap is one int64 array of three rows, struct-of-arrays: ``heap[TIME]`` the event times,
``heap[SEQ]`` the sequence numbers, ``heap[DATA]`` the payload ``kind|a|b`` (``kind`` in the
top 5 bits, ``a`` and ``b`` in 29 bits each: ids and byte counts below 536,870,912). ``seq``
increases with every push, so events at the same picosecond run in the order they were
scheduled and a run is deterministic; (time, seq) is unique, so the pop order does not depend
on the heap's shape. Four children per node keep the sift-down short (half the levels of a
binary heap) and the four children's times in one cache line. No Python object per event.
Entries are read as ``heap[row, i]``, never through a row view: a view costs two reference-count
calls, and these functions run a few times per event. The caller owns the array and grows it (:func:`grow_heap`) before a push could overflow;
``ctr[0]`` is the heap size, ``ctr[1]`` the next sequence number.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

SIZE, SEQ = 0, 1
TIME, DATA = 0, 2  # rows of the heap (SEQ = 1 is the sequence row)
ROWS = 3
_BITS = 29
_MASK = (1 << _BITS) - 1


@intrinsic
def prefetch(typingctx, arr, row, col):
    """Ask the CPU to start loading ``arr[row, col]`` into cache; changes no value.

    The event loop calls it for the next event's packet and link rows while it handles the
    current event, so their cache misses overlap the work instead of stalling it.
    """
    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer2(context, builder, ary.data, cgutils.unpack_tuple(builder, ary.shape),
                                        cgutils.unpack_tuple(builder, ary.strides), aryty.layout,
                                        [args[1], args[2]], wraparound=False)
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                            "llvm.prefetch.p0")
        builder.call(fn, [builder.bitcast(ptr, i8p), i32(0), i32(3), i32(1)])  # read, keep in all levels, data
        return context.get_dummy_value()
    return types.void(arr, row, col), codegen


@njit(cache=True, inline="always")
def push(heap, ctr, time_ps, kind, a, b):
    """Schedule event ``kind(a, b)`` at ``time_ps``."""
    seq = ctr[SEQ]
    ctr[SEQ] = seq + 1
    data = (np.int64(kind) << (2 * _BITS)) | (np.int64(a) << _BITS) | np.int64(b)
    i = ctr[SIZE]
    ctr[SIZE] = i + 1
    while i > 0:
        parent = (i - 1) >> 2
        pt = heap[TIME, parent]
        if pt < time_ps or (pt == time_ps and heap[SEQ, parent] < seq):
            break
        heap[TIME, i] = pt
        heap[SEQ, i] = heap[SEQ, parent]
        heap[DATA, i] = heap[DATA, parent]
        i = parent
    heap[TIME, i] = time_ps
    heap[SEQ, i] = seq
    heap[DATA, i] = data


@njit(cache=True, inline="always")
def pop(heap, ctr):
    """Remove the earliest event; returns (time, kind, a, b). The heap must not be empty."""
    time_ps = heap[TIME, 0]
    data = heap[DATA, 0]
    n = ctr[SIZE] - 1
    ctr[SIZE] = n
    if n > 0:
        t = heap[TIME, n]
        s = heap[SEQ, n]
        i = 0
        while True:
            c = 4 * i + 1
            if c >= n:
                break
            # the earliest of the (up to four) children
            best = c
            bt = heap[TIME, c]
            end = min(c + 4, n)
            for k in range(c + 1, end):
                tk = heap[TIME, k]
                if tk < bt or (tk == bt and heap[SEQ, k] < heap[SEQ, best]):
                    best = k
                    bt = tk
            if bt > t or (bt == t and heap[SEQ, best] > s):
                break
            heap[TIME, i] = bt
            heap[SEQ, i] = heap[SEQ, best]
            heap[DATA, i] = heap[DATA, best]
            i = best
        heap[TIME, i] = t
        heap[SEQ, i] = s
        heap[DATA, i] = heap[DATA, n]
    return time_ps, data >> (2 * _BITS), (data >> _BITS) & _MASK, data & _MASK


@njit(cache=True, inline="always")
def peek_data(heap):
    """The payload of the earliest event (the heap must not be empty): (kind, a, b)."""
    data = heap[DATA, 0]
    return data >> (2 * _BITS), (data >> _BITS) & _MASK, data & _MASK


@njit(cache=True)
def new_heap(capacity):
    """An empty heap with room for ``capacity`` events."""
    return np.zeros((ROWS, capacity), np.int64)


@njit(cache=True)
def grow_heap(heap, capacity):
    """A copy of ``heap`` with room for ``capacity`` events (at least as many as it holds)."""
    out = np.zeros((ROWS, capacity), np.int64)
    out[:, : heap.shape[1]] = heap
    return out


@njit(cache=True)
def grow_rows(arr, rows):
    """A copy of 2-D ``arr`` with ``rows`` rows (at least as many as it has)."""
    out = np.empty((rows, arr.shape[1]), arr.dtype)
    out[: arr.shape[0]] = arr
    return out
