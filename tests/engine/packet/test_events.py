"""The packet engine's event queue pops in (time, order of scheduling) order, as a heap of
(time, sequence number) does: checked against Python's heapq on random schedules, including
lockstep ones (few distinct times, so bins open and fill) and scattered ones (many distinct times,
so the 64-entry cache of pushed times evicts bins that still hold events)."""

from __future__ import annotations

import heapq

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwait.engine.packet.events import Q_BINS, Q_CHUNKS, Q_SIZE, grow_queue, new_queue, pop, push

lockstep = st.sampled_from([0, 1, 7, 333, 333, 660, 10_000, 55_000_000])
scattered = st.integers(min_value=0, max_value=5_000)
# a schedule: per step, the delays (ps) of the events pushed, then whether one pops
steps = st.lists(st.tuples(st.lists(st.one_of(lockstep, scattered), max_size=6), st.booleans()),
                 min_size=1, max_size=300)


def _run_against_heapq(schedule, capacity):
    queue = new_queue(capacity)
    reference: list[tuple[int, int]] = []
    now = seq = 0
    for delays, pops in schedule:
        for delay in delays:
            counts = queue[-1]
            if max(counts[Q_SIZE], counts[Q_CHUNKS], counts[Q_BINS]) + 2 >= queue[2].shape[0]:
                queue = grow_queue(*queue, 2 * queue[2].shape[0] + 2)
            push(*queue, now + delay, seq)
            heapq.heappush(reference, (now + delay, seq))
            seq += 1
        if pops and reference:
            expected = heapq.heappop(reference)
            got = pop(*queue)
            assert (int(got[0]), int(got[1])) == expected
            now = expected[0]
    while reference:
        assert tuple(int(x) for x in pop(*queue)) == heapq.heappop(reference)
    counts = queue[-1]
    assert counts[Q_SIZE] == counts[Q_CHUNKS] == counts[Q_BINS] == 0  # nothing held


@settings(max_examples=200, deadline=None)
@given(steps, st.integers(min_value=1, max_value=8))
def test_pops_in_time_then_scheduling_order(schedule, capacity):
    _run_against_heapq(schedule, capacity)


def test_many_times_in_lockstep_with_cache_evictions():
    # 200 distinct times, each pushed 20 times round-robin: bins open, fill across chunks and are
    # evicted from the cache while they hold events; the order must still be exact
    schedule = [([t for t in range(200)], False) for _ in range(20)] + [([], True)] * 10
    _run_against_heapq(schedule, 4)


def test_equal_times_keep_their_order_across_chunks():
    queue = new_queue(8)
    pushed = [(5, d) for d in range(40)] + [(9, 100), (5, 41)]  # 42 events at 5 ps: a bin of three chunks
    for t, d in pushed:
        push(*queue, t, d)
    expected = sorted(pushed, key=lambda e: (e[0], pushed.index(e)))
    assert [tuple(int(x) for x in pop(*queue)) for _ in range(len(pushed))] == expected
    push(*queue, 9, 4)  # a time pushed again after its bin emptied
    assert tuple(int(x) for x in pop(*queue)) == (9, 4)
    counts = queue[-1]
    assert counts[Q_SIZE] == counts[Q_CHUNKS] == counts[Q_BINS] == 0  # nothing held
