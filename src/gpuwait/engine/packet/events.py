"""The event queue: a 4-ary min-heap on (time in ps, sequence number), with FIFO bins for lockstep.

Events pop in (time, order of scheduling) order, so a run is deterministic. The heap is int64
struct-of-arrays ``qheap[3, N]``: ``TIME``, ``SEQ`` (increases with every push) and ``DATA``, the
payload ``kind|a|b`` (``kind`` in the top 5 bits, ``a`` and ``b`` in 29 bits each: ids and byte
counts below 536,870,912).

A packet fabric runs in lockstep: every 100 Gb/s port serializes an MTU in the same picoseconds
and every pipe delays by the same latency, so the ~10,000 pending events of the 1,024-host
permutation sit at a few dozen distinct times. For those the heap holds a **bin** instead of each
event: one heap entry (kind ``BIN_KIND``, ``a`` the bin) standing for a FIFO of events at its time,
appended in O(1) and popped in O(1) without touching the heap until the bin is empty. A small
direct-mapped **cache** remembers recently pushed times: a time pushed once goes into the heap as
a plain event (so a time that never repeats costs what a plain heap costs); pushed again while
remembered, it opens a bin, and later pushes of that time append to it.

Why the order stays exact: a bin takes the sequence number of its first event, and events are
appended only while its time is in the cache. Every other entry at that time was pushed either
before the bin opened (smaller sequence numbers: they pop first) or after its time left the cache
(larger than all of the bin's: they pop after it). So popping the bin's events one by one from
the heap's top is the (time, sequence) order.

A bin's payloads lie in **chunks** of ``CHUNK`` int64: ``CHUNK - 1`` payloads in order, then the
index of the next chunk. Popping walks a chunk sequentially, so the events after the current one
are in the same cache line and the event loop looks ahead at them to prefetch their rows.

Storage (int64 numpy arrays, no Python object per event; the caller grows them between runs of
the event loop, :func:`grow_queue`): ``qheap``; ``qchunk[C, CHUNK]`` (a free chunk's last column
links the free list); ``qbin[B, 4]`` per bin the position of its next event to pop and of its next
free payload (``B_HEAD``, ``B_TAIL``; a position is ``chunk * CHUNK + column``; a free bin's
``B_HEAD`` links the free list); ``qcache[CACHE, 2]`` time -> bin, ``-1``
for "seen once, no bin" (an empty entry has time ``-1``; times are never negative); ``qctr``
counts and free-list heads (``Q_*``). The event loop (:mod:`.core`) writes push and pop out in
place for speed; :func:`push` and :func:`pop` here are the same steps for everything else.
Both are checked against ``heapq``: these functions in ``tests/engine/packet/test_events.py``, the
loop's own copy (which logs its pushes and pops on request) in ``test_loop_queue.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

_BITS = 29
_MASK = (1 << _BITS) - 1
TIME, SEQ, DATA = 0, 1, 2  # rows of the heap
BIN_KIND = 31  # a heap entry whose payload is a bin
CHUNK = 16  # int64 per chunk (two cache lines): 15 payloads, then the next chunk
CHUNK_SHIFT = 4
LINK = CHUNK - 1  # the column of a chunk's link; also the mask of a position's column
B_HEAD, B_TAIL = 0, 1
B_COLS = 2
CACHE_BITS = 6  # 64 remembered times: the few a lockstep fabric pushes to at once
# qctr columns: heap entries, next sequence number, chunks in use, free chunk, bins in use, free bin
Q_SIZE, Q_SEQ, Q_CHUNKS, Q_FREE_CHUNK, Q_BINS, Q_FREE_BIN = range(6)
Q_COLS = 6
HASH_MUL = 0x9E3779B97F4A7C15  # Fibonacci hashing: a time's bits spread over the top of the product


@intrinsic
def _prefetch(typingctx, arr, row, col):
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


# what callers see: numba passes the typing context itself, so the call takes (arr, row, col)
prefetch = cast(Callable[[np.ndarray, "int | np.integer", "int | np.integer"], None], _prefetch)


@njit(cache=True, inline="always")
def hash_slot(time_ps, hash_bits):
    """The entry of ``time_ps`` in a table of ``2**hash_bits`` entries."""
    return np.int64((np.uint64(time_ps) * np.uint64(HASH_MUL)) >> np.uint64(64 - hash_bits))


@njit(cache=True)
def _with_free_rows(table, capacity, link_col, qctr, head_col):
    """A copy of ``table`` with ``capacity`` rows; the added rows join the free list that starts at
    ``qctr[head_col]`` and is linked through column ``link_col``."""
    old = table.shape[0]
    out = np.zeros((max(capacity, old), table.shape[1]), np.int64)
    out[:old] = table
    if capacity > old:
        out[old:, link_col] = np.arange(old + 1, capacity + 1)
        out[capacity - 1, link_col] = qctr[head_col]
        qctr[head_col] = old
    return out


@njit(cache=True)
def new_queue(capacity):
    """An empty queue with room for ``capacity`` heap entries, bins and chunks."""
    qctr = np.zeros(Q_COLS, np.int64)
    qctr[Q_FREE_CHUNK] = -1
    qctr[Q_FREE_BIN] = -1
    qchunk = _with_free_rows(np.zeros((0, CHUNK), np.int64), capacity, LINK, qctr, Q_FREE_CHUNK)
    qbin = _with_free_rows(np.zeros((0, B_COLS), np.int64), capacity, B_HEAD, qctr, Q_FREE_BIN)
    qcache = np.full((1 << CACHE_BITS, 2), -1, np.int64)
    return np.zeros((3, capacity), np.int64), qchunk, qbin, qcache, qctr


@njit(cache=True)
def grow_queue(qheap, qchunk, qbin, qcache, qctr, capacity):
    """A copy of the queue with room for ``capacity`` heap entries, bins and chunks (at least
    what it has)."""
    heap = np.zeros((3, max(capacity, qheap.shape[1])), np.int64)
    heap[:, : qheap.shape[1]] = qheap
    chunks = _with_free_rows(qchunk, capacity, LINK, qctr, Q_FREE_CHUNK)
    bins = _with_free_rows(qbin, capacity, B_HEAD, qctr, Q_FREE_BIN)
    return heap, chunks, bins, qcache, qctr


@njit(cache=True, inline="always")
def _heap_push(qheap, qctr, time_ps, data):
    seq = qctr[Q_SEQ]
    qctr[Q_SEQ] = seq + 1
    i = qctr[Q_SIZE]
    qctr[Q_SIZE] = i + 1
    while i > 0:
        parent = (i - 1) >> 2
        pt = qheap[TIME, parent]
        if pt < time_ps or (pt == time_ps and qheap[SEQ, parent] < seq):
            break
        qheap[TIME, i] = pt
        qheap[SEQ, i] = qheap[SEQ, parent]
        qheap[DATA, i] = qheap[DATA, parent]
        i = parent
    qheap[TIME, i] = time_ps
    qheap[SEQ, i] = seq
    qheap[DATA, i] = data


@njit(cache=True)
def push(qheap, qchunk, qbin, qcache, qctr, time_ps, data):
    """Schedule the event with payload ``data`` at ``time_ps`` (after those already at that time).

    The caller keeps room: a free heap entry, bin and chunk.
    """
    slot = hash_slot(time_ps, CACHE_BITS)
    if qcache[slot, 0] != time_ps:  # not remembered: a plain event, and remember the time
        qcache[slot, 0] = time_ps
        qcache[slot, 1] = -1
        _heap_push(qheap, qctr, time_ps, data)
        return
    bn = qcache[slot, 1]
    if bn < 0:  # pushed once before: open a bin with an empty chunk
        c = qctr[Q_FREE_CHUNK]
        qctr[Q_FREE_CHUNK] = qchunk[c, LINK]
        qctr[Q_CHUNKS] += 1
        bn = qctr[Q_FREE_BIN]
        qctr[Q_FREE_BIN] = qbin[bn, B_HEAD]
        qctr[Q_BINS] += 1
        qbin[bn, B_HEAD] = c << CHUNK_SHIFT
        qbin[bn, B_TAIL] = c << CHUNK_SHIFT
        qcache[slot, 1] = bn
        _heap_push(qheap, qctr, time_ps, pack(BIN_KIND, bn, 0))
    f = qbin[bn, B_TAIL]
    if f & LINK == LINK:  # the tail chunk is full: chain a fresh one
        c = qctr[Q_FREE_CHUNK]
        qctr[Q_FREE_CHUNK] = qchunk[c, LINK]
        qctr[Q_CHUNKS] += 1
        qchunk[f >> CHUNK_SHIFT, LINK] = c
        f = c << CHUNK_SHIFT
    qchunk[f >> CHUNK_SHIFT, f & LINK] = data
    qbin[bn, B_TAIL] = f + 1


@njit(cache=True)
def pop(qheap, qchunk, qbin, qcache, qctr):
    """Remove the earliest event; returns (time_ps, data). The queue must not be empty."""
    time_ps = qheap[TIME, 0]
    data = qheap[DATA, 0]
    if data >> (2 * _BITS) == BIN_KIND:
        bn = (data >> _BITS) & _MASK
        f = qbin[bn, B_HEAD]
        data = qchunk[f >> CHUNK_SHIFT, f & LINK]
        f += 1
        if f != qbin[bn, B_TAIL]:
            if f & LINK == LINK:  # the head chunk is spent: on to the next, this one to the free list
                c = f >> CHUNK_SHIFT
                f = qchunk[c, LINK] << CHUNK_SHIFT
                qchunk[c, LINK] = qctr[Q_FREE_CHUNK]
                qctr[Q_FREE_CHUNK] = c
                qctr[Q_CHUNKS] -= 1
            qbin[bn, B_HEAD] = f
            return time_ps, data  # the bin stays on top: its next event is the next in order
        # the bin is empty: its chunk and itself to the free lists, forgotten by the cache
        c = (f - 1) >> CHUNK_SHIFT
        qchunk[c, LINK] = qctr[Q_FREE_CHUNK]
        qctr[Q_FREE_CHUNK] = c
        qctr[Q_CHUNKS] -= 1
        qbin[bn, B_HEAD] = qctr[Q_FREE_BIN]
        qctr[Q_FREE_BIN] = bn
        qctr[Q_BINS] -= 1
        slot = hash_slot(time_ps, CACHE_BITS)
        if qcache[slot, 0] == time_ps:
            qcache[slot, 0] = -1
    n = qctr[Q_SIZE] - 1
    qctr[Q_SIZE] = n
    if n > 0:
        t = qheap[TIME, n]
        s = qheap[SEQ, n]
        i = 0
        while True:
            c = 4 * i + 1
            if c >= n:
                break
            best = c
            for k in range(c + 1, min(c + 4, n)):
                tk = qheap[TIME, k]
                if tk < qheap[TIME, best] or (tk == qheap[TIME, best] and qheap[SEQ, k] < qheap[SEQ, best]):
                    best = k
            bt = qheap[TIME, best]
            if bt > t or (bt == t and qheap[SEQ, best] > s):
                break
            qheap[TIME, i] = bt
            qheap[SEQ, i] = qheap[SEQ, best]
            qheap[DATA, i] = qheap[DATA, best]
            i = best
        qheap[TIME, i] = t
        qheap[SEQ, i] = s
        qheap[DATA, i] = qheap[DATA, n]
    return time_ps, data


@njit(cache=True, inline="always")
def pack(kind, a, b):
    """An event payload: ``kind`` in the top bits, ``a`` and ``b`` below."""
    return (np.int64(kind) << (2 * _BITS)) | (np.int64(a) << _BITS) | np.int64(b)


@njit(cache=True)
def grow_rows(arr, rows):
    """A copy of 2-D ``arr`` with ``rows`` rows (at least as many as it has)."""
    out = np.empty((rows, arr.shape[1]), arr.dtype)
    out[: arr.shape[0]] = arr
    return out
