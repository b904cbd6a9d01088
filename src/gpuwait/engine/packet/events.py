"""The event queue: FIFO bins of equal-time events, the bins in a 4-ary min-heap of their times.

Events pop in (time in ps, order of scheduling) order, so a run is deterministic. A packet
fabric runs in lockstep: every 100 Gb/s port serializes an MTU in the same picoseconds and
every pipe delays by the same latency, so the ~10,000 pending events of the 1,024-host
permutation sit at a few dozen distinct times. The queue keeps one **bin** per distinct time,
a FIFO of its events (push appends, pop takes the head, both O(1); FIFO *is* the order of
scheduling within one time). Only the bins' times go into the heap, and a hash table (linear
probing, backward-shift deletion) finds the bin of a pushed time. When times do not repeat,
every bin holds one event and this is a plain 4-ary heap plus one hash probe.

A bin's payloads lie in **chunks** of ``CHUNK`` int64: ``CHUNK - 1`` payloads in order, then the
index of the bin's next chunk. Popping walks a chunk sequentially, so the events after the
current one are in the same cache line and the event loop can look ahead at them to prefetch
their packet and link rows.

Storage (int64 numpy arrays, no Python object per event; the caller grows them between runs of
the event loop, :func:`grow_queue`):

* ``qchunk[C, CHUNK]``: the chunks; a free chunk's last column links the free list;
* ``qbin[B, 4]``: per bin its time, the position of its next event to pop and of its next free
  payload (``B_TIME``, ``B_HEAD``, ``B_TAIL``; a position is ``chunk * CHUNK + column``); a
  free bin's ``B_HEAD`` links the free list;
* ``qheap[2, B]``: the heap of bins, their times (``H_TIME``, distinct, so no tie-break) and ids;
* ``qhash[H, 2]``: time -> bin, ``-1`` marks an empty entry (times are never negative);
* ``qctr``: counts and free-list heads (``Q_*``).

The payload packs ``kind|a|b``: ``kind`` in the top 5 bits, ``a`` and ``b`` in 29 bits each (ids
and byte counts below 536,870,912). The event loop (:mod:`.core`) writes push and pop out in
place for speed; :func:`push` and :func:`pop` here are the same steps for everything else.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

_BITS = 29
_MASK = (1 << _BITS) - 1
CHUNK = 16  # int64 per chunk (two cache lines): 15 payloads, then the next chunk
CHUNK_SHIFT = 4
LINK = CHUNK - 1  # the column of a chunk's link; also the mask of a position's column
B_TIME, B_HEAD, B_TAIL = 0, 1, 2
B_COLS = 4
H_TIME, H_BIN = 0, 1
# qctr columns: events held, chunks in use, free chunk, bins in the heap, free bin, log2 of the hash size
Q_EVENTS, Q_CHUNKS, Q_FREE_CHUNK, Q_BINS, Q_FREE_BIN, Q_HASH_BITS = range(6)
Q_COLS = 6
HASH_MUL = 0x9E3779B97F4A7C15  # Fibonacci hashing: a time's bits spread over the top of the product


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
def hash_slot(time_ps, hash_bits):
    """The home entry of ``time_ps`` in a hash table of ``2**hash_bits`` entries."""
    return np.int64((np.uint64(time_ps) * np.uint64(HASH_MUL)) >> np.uint64(64 - hash_bits))


@njit(cache=True)
def new_queue(chunk_capacity, bin_capacity):
    """An empty queue with room for ``chunk_capacity`` chunks in ``bin_capacity`` distinct times."""
    qchunk = np.zeros((chunk_capacity, CHUNK), np.int64)
    qchunk[:, LINK] = np.arange(1, chunk_capacity + 1)
    qchunk[chunk_capacity - 1, LINK] = -1
    qbin = np.zeros((bin_capacity, B_COLS), np.int64)
    qbin[:, B_HEAD] = np.arange(1, bin_capacity + 1)
    qbin[bin_capacity - 1, B_HEAD] = -1
    qheap = np.zeros((2, bin_capacity), np.int64)
    hash_bits = 4
    while (1 << hash_bits) < 2 * bin_capacity:
        hash_bits += 1
    qhash = np.full((1 << hash_bits, 2), -1, np.int64)
    qctr = np.zeros(Q_COLS, np.int64)
    qctr[Q_HASH_BITS] = hash_bits
    return qchunk, qbin, qheap, qhash, qctr


@njit(cache=True)
def grow_queue(qchunk, qbin, qheap, qhash, qctr, chunk_capacity, bin_capacity):
    """A copy of the queue with room for ``chunk_capacity`` chunks and ``bin_capacity`` bins
    (at least what it has); the hash table is rebuilt at twice the bin capacity or more."""
    c_old = qchunk.shape[0]
    chunks = np.zeros((chunk_capacity, CHUNK), np.int64)
    chunks[:c_old] = qchunk
    if chunk_capacity > c_old:
        chunks[c_old:, LINK] = np.arange(c_old + 1, chunk_capacity + 1)
        chunks[chunk_capacity - 1, LINK] = qctr[Q_FREE_CHUNK]
        qctr[Q_FREE_CHUNK] = c_old
    b_old = qbin.shape[0]
    bins = np.zeros((bin_capacity, B_COLS), np.int64)
    bins[:b_old] = qbin
    heap = np.zeros((2, bin_capacity), np.int64)
    heap[:, :b_old] = qheap
    if bin_capacity > b_old:
        bins[b_old:, B_HEAD] = np.arange(b_old + 1, bin_capacity + 1)
        bins[bin_capacity - 1, B_HEAD] = qctr[Q_FREE_BIN]
        qctr[Q_FREE_BIN] = b_old
    hash_bits = qctr[Q_HASH_BITS]
    while (1 << hash_bits) < 2 * bin_capacity:
        hash_bits += 1
    table = np.full((1 << hash_bits, 2), -1, np.int64)
    for k in range(qctr[Q_BINS]):
        t = heap[H_TIME, k]
        slot = hash_slot(t, hash_bits)
        while table[slot, 0] >= 0:
            slot = (slot + 1) & ((1 << hash_bits) - 1)
        table[slot, 0] = t
        table[slot, 1] = heap[H_BIN, k]
    qctr[Q_HASH_BITS] = hash_bits
    return chunks, bins, heap, table, qctr


@njit(cache=True)
def push(qchunk, qbin, qheap, qhash, qctr, time_ps, data):
    """Schedule the event with payload ``data`` at ``time_ps`` (after those already at that time).

    The caller keeps room: a free chunk and a free bin.
    """
    qctr[Q_EVENTS] += 1
    hmask = qhash.shape[0] - 1
    slot = hash_slot(time_ps, qctr[Q_HASH_BITS])
    while qhash[slot, 0] >= 0 and qhash[slot, 0] != time_ps:
        slot = (slot + 1) & hmask
    if qhash[slot, 0] == time_ps:
        bn = qhash[slot, 1]
        f = qbin[bn, B_TAIL]
        if f & LINK == LINK:  # the tail chunk is full: chain a fresh one
            c = qctr[Q_FREE_CHUNK]
            qctr[Q_FREE_CHUNK] = qchunk[c, LINK]
            qctr[Q_CHUNKS] += 1
            qchunk[f >> CHUNK_SHIFT, LINK] = c
            f = c << CHUNK_SHIFT
        qchunk[f >> CHUNK_SHIFT, f & LINK] = data
        qbin[bn, B_TAIL] = f + 1
        return
    c = qctr[Q_FREE_CHUNK]
    qctr[Q_FREE_CHUNK] = qchunk[c, LINK]
    qctr[Q_CHUNKS] += 1
    qchunk[c, 0] = data
    bn = qctr[Q_FREE_BIN]
    qctr[Q_FREE_BIN] = qbin[bn, B_HEAD]
    qhash[slot, 0] = time_ps
    qhash[slot, 1] = bn
    qbin[bn, B_TIME] = time_ps
    qbin[bn, B_HEAD] = c << CHUNK_SHIFT
    qbin[bn, B_TAIL] = (c << CHUNK_SHIFT) + 1
    i = qctr[Q_BINS]
    qctr[Q_BINS] = i + 1
    while i > 0:
        parent = (i - 1) >> 2
        if qheap[H_TIME, parent] < time_ps:
            break
        qheap[H_TIME, i] = qheap[H_TIME, parent]
        qheap[H_BIN, i] = qheap[H_BIN, parent]
        i = parent
    qheap[H_TIME, i] = time_ps
    qheap[H_BIN, i] = bn


@njit(cache=True)
def pop(qchunk, qbin, qheap, qhash, qctr):
    """Remove the earliest event; returns (time_ps, data). The queue must not be empty."""
    bn = qheap[H_BIN, 0]
    time_ps = qheap[H_TIME, 0]
    f = qbin[bn, B_HEAD]
    data = qchunk[f >> CHUNK_SHIFT, f & LINK]
    qctr[Q_EVENTS] -= 1
    f += 1
    if f != qbin[bn, B_TAIL]:
        if f & LINK == LINK:  # the head chunk is spent: on to the next, this one to the free list
            c = f >> CHUNK_SHIFT
            f = qchunk[c, LINK] << CHUNK_SHIFT
            qchunk[c, LINK] = qctr[Q_FREE_CHUNK]
            qctr[Q_FREE_CHUNK] = c
            qctr[Q_CHUNKS] -= 1
        qbin[bn, B_HEAD] = f
        return time_ps, data
    # the bin is empty: its chunk to the free list; out of the hash table (backward shift) and the heap
    c = (f - 1) >> CHUNK_SHIFT
    qchunk[c, LINK] = qctr[Q_FREE_CHUNK]
    qctr[Q_FREE_CHUNK] = c
    qctr[Q_CHUNKS] -= 1
    hbits = qctr[Q_HASH_BITS]
    hmask = qhash.shape[0] - 1
    i = hash_slot(time_ps, hbits)
    while qhash[i, 0] != time_ps:
        i = (i + 1) & hmask
    j = (i + 1) & hmask
    while qhash[j, 0] >= 0:
        home = hash_slot(qhash[j, 0], hbits)
        # entry j may fill the hole at i unless its home lies cyclically in (i, j]
        if (i < j and (home <= i or home > j)) or (i > j and home <= i and home > j):
            qhash[i, 0] = qhash[j, 0]
            qhash[i, 1] = qhash[j, 1]
            i = j
        j = (j + 1) & hmask
    qhash[i, 0] = -1
    qbin[bn, B_HEAD] = qctr[Q_FREE_BIN]
    qctr[Q_FREE_BIN] = bn
    n = qctr[Q_BINS] - 1
    qctr[Q_BINS] = n
    if n > 0:
        t = qheap[H_TIME, n]
        b = qheap[H_BIN, n]
        i = 0
        while True:
            c = 4 * i + 1
            if c >= n:
                break
            best = c
            for k in range(c + 1, min(c + 4, n)):
                if qheap[H_TIME, k] < qheap[H_TIME, best]:
                    best = k
            if qheap[H_TIME, best] > t:
                break
            qheap[H_TIME, i] = qheap[H_TIME, best]
            qheap[H_BIN, i] = qheap[H_BIN, best]
            i = best
        qheap[H_TIME, i] = t
        qheap[H_BIN, i] = b
    return time_ps, data


@njit(cache=True, inline="always")
def pack(kind, a, b):
    """An event payload: ``kind`` in the top bits, ``a`` and ``b`` below."""
    return (np.int64(kind) << (2 * _BITS)) | (np.int64(a) << _BITS) | np.int64(b)


@njit(cache=True, inline="always")
def unpack(data):
    """(kind, a, b) of a payload."""
    return data >> (2 * _BITS), (data >> _BITS) & _MASK, data & _MASK


@njit(cache=True)
def grow_rows(arr, rows):
    """A copy of 2-D ``arr`` with ``rows`` rows (at least as many as it has)."""
    out = np.empty((rows, arr.shape[1]), arr.dtype)
    out[: arr.shape[0]] = arr
    return out
