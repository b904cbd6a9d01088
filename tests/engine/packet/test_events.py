"""The packet engine's event queue pops in (time, order of scheduling) order, as a heap of
(time, sequence number) does: checked against Python's heapq on random schedules."""

from __future__ import annotations

import heapq

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwait.engine.packet.events import Q_BINS, Q_CHUNKS, Q_EVENTS, grow_queue, new_queue, pop, push

# a schedule: per step, the delays (ps) of the events pushed, then whether one pops
steps = st.lists(st.tuples(st.lists(st.sampled_from([0, 1, 7, 333, 333, 660, 10_000, 55_000_000]), max_size=5),
                           st.booleans()), min_size=1, max_size=200)


@settings(max_examples=150, deadline=None)
@given(steps, st.integers(min_value=1, max_value=8))
def test_pops_in_time_then_scheduling_order(schedule, capacity):
    queue = new_queue(capacity, capacity)
    reference: list[tuple[int, int]] = []
    now = seq = 0
    for delays, pops in schedule:
        for delay in delays:
            counts = queue[-1]
            if counts[Q_CHUNKS] + 1 >= queue[0].shape[0] or counts[Q_BINS] + 1 >= queue[1].shape[0]:
                queue = grow_queue(*queue, 2 * queue[0].shape[0] + 2, 2 * queue[1].shape[0] + 2)
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
    assert queue[-1][Q_EVENTS] == 0


def test_equal_times_keep_their_order_across_chunks():
    queue = new_queue(8, 4)
    pushed = [(5, d) for d in range(40)] + [(9, 100), (5, 41)]  # 41 events at 5 ps: three chunks
    for t, d in pushed:
        push(*queue, t, d)
    expected = sorted(pushed, key=lambda e: (e[0], pushed.index(e)))
    assert [tuple(int(x) for x in pop(*queue)) for _ in range(len(pushed))] == expected
    push(*queue, 9, 4)  # a time pushed again after its bin emptied
    assert tuple(int(x) for x in pop(*queue)) == (9, 4)
    counts = queue[-1]
    assert counts[Q_EVENTS] == 0 and counts[Q_CHUNKS] == 0 and counts[Q_BINS] == 0
