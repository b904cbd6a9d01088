"""Weighted max-min progressive filling in compiled code: the same iterations as the array version.

:func:`gpuwait.engine.flow._progressive_fill_arrays` runs each filling iteration as a dozen whole-array
passes (gathers, ``bincount`` scatters, ``reduceat`` segment minima) over every unfrozen flow's
(flow, link, weight) triplets; a 16,384-GPU NVLSTree all_reduce has 10.4 M of them and 51
iterations, 4.5 s. Here one iteration is two passes over the triplets (numba, ``cache=True`` as the
packet engine): the first takes each flow's lowest link level and counts, per link, the flows that
stop below its level; the second freezes the flows on a final link (or at their cap), adds their
load, and compacts the unfrozen flows' triplets while summing the next iteration's weights.

The passes gather per-link values at random (a flow's links are spread over the fabric), so what
they touch is kept small: only the links some unfrozen flow crosses are numbered (in link order, so
the lowest id still names a bottleneck), as 4-byte ids, and the second pass reads one byte per link
(final or not) instead of a level and a mark. The 51 iterations of that all_reduce visit 76 M
triplets in all.

Bit for bit the array version's result: every sum runs over the same terms in the same (triplet)
order, starting from 0.0 as ``bincount`` does — terms the array version adds as exact zeros (frozen
or not newly frozen flows) are skipped, which changes no bit of a sum of positive terms — and a
link's frozen load takes the iteration's sum in one addition, as ``frozen += bincount(...)`` does.
Minima do not depend on order. The algorithm is described in :func:`gpuwait.engine.flow.max_min_rates`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["progressive_fill", "run_level"]

# Same meanings as in engine/flow.py (kept equal by tests/engine/test_fill_compiled.py).
_CAP_LIMITED = -1


@njit(cache=True)
def run_level(lo, hi, link_of, link_level, cap, rtol, below):
    """A flow's lowest link level over its run of triplets ``lo:hi``, and its level (that, or its
    ``cap`` if lower); marks in ``below`` the run's links whose level is above the flow's (by more
    than ``rtol``): links on which this flow stops first. The one kernel of both fillings, this one
    and the event engine's (:mod:`gpuwait.engine.maxmin_incremental`)."""
    lowest = np.inf
    for i in range(lo, hi):
        level = link_level[link_of[i]]
        if level < lowest:
            lowest = level
    flow_level = min(lowest, cap)
    threshold = flow_level * (1.0 + rtol)
    for i in range(lo, hi):
        if link_level[link_of[i]] > threshold:
            below[link_of[i]] = True
    return lowest, flow_level


@njit(cache=True)
def _link_levels(capacity, frozen_load, added, unweighted, link_level, below, exact_sums):
    """Every link's level in this iteration (inf where no unfrozen flow crosses it), after adding the
    last iteration's newly frozen load; clears the marks, and the unfrozen weights (the compaction sums
    them again) unless ``exact_sums`` (the freezing subtracts the frozen flows' instead)."""
    for link in range(capacity.shape[0]):
        if added[link] != 0.0:
            frozen_load[link] += added[link]
            added[link] = 0.0
        below[link] = False
        if unweighted[link] > 0:
            link_level[link] = (capacity[link] - frozen_load[link]) / unweighted[link]
        else:
            link_level[link] = np.inf
        if not exact_sums:
            unweighted[link] = 0.0


@njit(cache=True)
def _final_links(link_level, below, final):
    """A link is final when it is crossed (a finite level) and no unfrozen flow on it stops below its level."""
    for link in range(link_level.shape[0]):
        final[link] = not below[link] and link_level[link] < np.inf


@njit(cache=True)
def _lowest_final_link(lo, hi, link_of, final, none):
    """The lowest-numbered final link among a run's triplets ``lo:hi`` (its flow's bottleneck), or ``none``."""
    lowest_final = none
    for i in range(lo, hi):
        link = link_of[i]
        if final[link] and link < lowest_final:
            lowest_final = link
    return lowest_final


@njit(cache=True)
def _freeze_runs(n_runs, run_flow, run_ptr, link_of, weight, final, flow_level, newly, bottleneck, added,
                 unweighted):
    """Freeze every run's flow not yet frozen at its cap that crosses a final link (the lowest one is its
    bottleneck), add the frozen flows' load to ``added``; compact the others' runs in place, summing their
    weights into ``unweighted``. Returns the runs kept and the flows frozen here."""
    n_links = final.shape[0]
    n_newly = 0
    r_kept = 0
    i_kept = 0
    for r in range(n_runs):
        f = run_flow[r]
        start, end = run_ptr[r], run_ptr[r + 1]
        if not newly[f]:
            lowest_final = _lowest_final_link(start, end, link_of, final, n_links)
            if lowest_final < n_links:
                newly[f] = True
                bottleneck[f] = lowest_final
                n_newly += 1
        if newly[f]:
            for i in range(start, end):
                added[link_of[i]] += weight[i] * flow_level[f]
        else:  # kept: compacted in place, its weights summed for the next iteration
            run_flow[r_kept] = f
            run_ptr[r_kept] = i_kept
            for i in range(start, end):
                link_of[i_kept] = link_of[i]
                weight[i_kept] = weight[i]
                unweighted[link_of[i_kept]] += weight[i_kept]
                i_kept += 1
            r_kept += 1
    # run_ptr[r_kept] is written after the loop: run_ptr[r + 1] was still read as run r's end
    run_ptr[r_kept] = i_kept
    return r_kept, n_newly


@njit(cache=True)
def _reset_levels(active, n_active, cap, flow_link_level, flow_level):
    """Each active flow's levels before its run is read: flows without triplets keep an infinite link
    level and their cap."""
    for k in range(n_active):
        flow_link_level[active[k]] = np.inf
        flow_level[active[k]] = cap[active[k]]


@njit(cache=True)
def _cap_decisions(active, n_active, cap, flow_link_level, rtol, newly, bottleneck):
    """Marks the active flows whose cap is reached at or below their lowest link level (bottleneck: the
    cap); returns how many."""
    n_newly = 0
    for k in range(n_active):
        f = active[k]
        newly[f] = cap[f] <= flow_link_level[f] * (1.0 + rtol)
        if newly[f]:
            bottleneck[f] = _CAP_LIMITED
            n_newly += 1
    return n_newly


@njit(cache=True)
def _retire_frozen(active, n_active, newly, rate, flow_level):
    """The flows frozen this iteration take their level as their rate and leave ``active`` (kept in
    order); returns how many stay active."""
    k_kept = 0
    for k in range(n_active):
        f = active[k]
        if newly[f]:
            rate[f] = flow_level[f]
            newly[f] = False
        else:
            active[k_kept] = f
            k_kept += 1
    return k_kept


@njit(cache=True)
def _fill(run_flow, run_ptr, link_of, weight, active, capacity, cap, rate, bottleneck, rtol):
    """Progressive filling of the ``active`` flows (sorted ids, each with its run of triplets
    ``run_ptr[r]:run_ptr[r + 1]`` for ``run_flow[r]``, runs in flow order; flows with no triplets have
    no run). Overwrites the arrays it is given (they are the caller's copies). Returns the iterations,
    or -iterations if an iteration froze nothing (a flow without links or cap: never with checked input).
    :func:`_fill_exact` is its faster twin where every sum of weights is exact."""
    n_links = capacity.shape[0]
    n_flows = cap.shape[0]
    unweighted = np.zeros(n_links)
    for i in range(run_ptr[len(run_flow)]):
        unweighted[link_of[i]] += weight[i]
    frozen_load = np.zeros(n_links)
    added = np.zeros(n_links)
    link_level = np.empty(n_links)
    below = np.zeros(n_links, dtype=np.bool_)
    final = np.zeros(n_links, dtype=np.bool_)
    flow_link_level = np.full(n_flows, np.inf)
    flow_level = np.full(n_flows, np.inf)
    newly = np.zeros(n_flows, dtype=np.bool_)
    n_runs, n_active = len(run_flow), len(active)
    iterations = 0
    while n_active > 0:
        iterations += 1
        _link_levels(capacity, frozen_load, added, unweighted, link_level, below, False)
        _reset_levels(active, n_active, cap, flow_link_level, flow_level)
        for r in range(n_runs):
            f = run_flow[r]
            flow_link_level[f], flow_level[f] = run_level(run_ptr[r], run_ptr[r + 1], link_of, link_level, cap[f],
                                                          rtol, below)
        _final_links(link_level, below, final)
        # the active flows' decisions: at their cap, or on a final link (the lowest one names the bottleneck)
        n_newly = _cap_decisions(active, n_active, cap, flow_link_level, rtol, newly, bottleneck)
        n_runs, n_link_frozen = _freeze_runs(n_runs, run_flow, run_ptr, link_of, weight, final, flow_level, newly,
                                             bottleneck, added, unweighted)
        if n_newly + n_link_frozen == 0:
            return -iterations
        n_active = _retire_frozen(active, n_active, newly, rate, flow_level)
    return iterations


@njit(cache=True)
def _run_candidate(lo, hi, link_of, link_level, cap, rtol, below):
    """:func:`run_level`, and the one link of the run that can be final for its flow: a final link is at
    most its flows' thresholds, so only the links this flow does not mark can be. Returns (lowest link
    level, flow level, that link, or -1 for several, -2 for none)."""
    lowest = np.inf
    for i in range(lo, hi):
        level = link_level[link_of[i]]
        if level < lowest:
            lowest = level
    flow_level = min(lowest, cap)
    threshold = flow_level * (1.0 + rtol)
    n_candidates = 0
    candidate = -1
    for i in range(lo, hi):
        if link_level[link_of[i]] > threshold:
            below[link_of[i]] = True
        else:
            n_candidates += 1
            candidate = link_of[i]
    if n_candidates != 1:
        candidate = -1 if n_candidates > 1 else -2
    return lowest, flow_level, candidate


@njit(cache=True)
def _freeze_runs_in_place(n_runs, run_flow, run_lo, run_hi, candidate, link_of, weight, final, flow_level, newly,
                          bottleneck, added, unweighted):
    """:func:`_freeze_runs` with exact sums: a run with one candidate link (:func:`_run_candidate`) is decided
    by that link alone; the frozen flows' weights leave ``unweighted``; the kept runs stay where they are (only
    the run list is compacted). Returns the runs kept, the flows frozen here and the kept runs' triplets."""
    n_links = final.shape[0]
    n_newly = 0
    r_kept = 0
    kept_triplets = 0
    for r in range(n_runs):
        f = run_flow[r]
        lo, hi = run_lo[r], run_hi[r]
        if not newly[f]:
            lowest_final = n_links
            c = candidate[r]
            if c >= 0:
                if final[c]:
                    lowest_final = c
            elif c == -1:
                lowest_final = _lowest_final_link(lo, hi, link_of, final, n_links)
            if lowest_final < n_links:
                newly[f] = True
                bottleneck[f] = lowest_final
                n_newly += 1
        if newly[f]:
            for i in range(lo, hi):
                added[link_of[i]] += weight[i] * flow_level[f]
                unweighted[link_of[i]] -= weight[i]
        else:
            run_flow[r_kept] = f
            run_lo[r_kept] = lo
            run_hi[r_kept] = hi
            r_kept += 1
            kept_triplets += hi - lo
    return r_kept, n_newly, kept_triplets


@njit(cache=True)
def _compact_runs(n_runs, run_lo, run_hi, link_of, weight):
    """Move the runs' triplets to the front, in order (each run moves left: in place). Returns the span."""
    k = 0
    for r in range(n_runs):
        lo, hi = run_lo[r], run_hi[r]
        run_lo[r] = k
        for i in range(lo, hi):
            link_of[k] = link_of[i]
            weight[k] = weight[i]
            k += 1
        run_hi[r] = k
    return k


@njit(cache=True)
def _fill_exact(run_flow, run_ptr, link_of, weight, active, capacity, cap, rate, bottleneck, rtol):
    """:func:`_fill` when every sum of weights is exact: each link's unfrozen weight is kept by subtraction,
    a flow with one candidate link is decided without a pass over its run, and the triplets are compacted
    only once the frozen runs' leave them less than half full (a 131,072-GPU all_reduce freezes a tenth of
    its flows per iteration). The same decisions, sums in the same order: the same bits."""
    n_links = capacity.shape[0]
    n_flows = cap.shape[0]
    n_runs, n_active = len(run_flow), len(active)
    run_lo = run_ptr[:n_runs].copy()
    run_hi = run_ptr[1:n_runs + 1].copy()
    candidate = np.empty(n_runs, np.int64)
    span = run_ptr[n_runs]
    unweighted = np.zeros(n_links)
    for i in range(span):
        unweighted[link_of[i]] += weight[i]
    frozen_load = np.zeros(n_links)
    added = np.zeros(n_links)
    link_level = np.empty(n_links)
    below = np.zeros(n_links, dtype=np.bool_)
    final = np.zeros(n_links, dtype=np.bool_)
    flow_link_level = np.full(n_flows, np.inf)
    flow_level = np.full(n_flows, np.inf)
    newly = np.zeros(n_flows, dtype=np.bool_)
    iterations = 0
    while n_active > 0:
        iterations += 1
        _link_levels(capacity, frozen_load, added, unweighted, link_level, below, True)
        _reset_levels(active, n_active, cap, flow_link_level, flow_level)
        for r in range(n_runs):
            f = run_flow[r]
            flow_link_level[f], flow_level[f], candidate[r] = _run_candidate(
                run_lo[r], run_hi[r], link_of, link_level, cap[f], rtol, below)
        _final_links(link_level, below, final)
        n_newly = _cap_decisions(active, n_active, cap, flow_link_level, rtol, newly, bottleneck)
        n_runs, n_link_frozen, kept_triplets = _freeze_runs_in_place(
            n_runs, run_flow, run_lo, run_hi, candidate, link_of, weight, final, flow_level, newly, bottleneck,
            added, unweighted)
        if n_newly + n_link_frozen == 0:
            return -iterations
        if 2 * kept_triplets < span:
            span = _compact_runs(n_runs, run_lo, run_hi, link_of, weight)
        n_active = _retire_frozen(active, n_active, newly, rate, flow_level)
    return iterations


@njit(cache=True)
def _kept_runs(indptr, link_of, weight, unfrozen, twin):
    """The unfrozen flows' triplets but the shadowed links' (copies: the filling compacts them in place)
    with their links numbered among the links they cross (in link order), their runs, and those links'
    ids, in one pass to count and mark and one to copy (no masks or copies of every triplet array)."""
    n_links = twin.shape[0]
    local = np.full(n_links, -1, np.int32)
    n_kept = 0
    n_runs = 0
    for f in range(len(indptr) - 1):
        if unfrozen[f] and indptr[f + 1] > indptr[f]:
            n_runs += 1
            for i in range(indptr[f], indptr[f + 1]):
                if twin[link_of[i]] < 0:
                    local[link_of[i]] = 0
                    n_kept += 1
    n_used = 0
    for link in range(n_links):
        if local[link] == 0:
            n_used += 1
    used = np.empty(n_used, np.int64)
    n_used = 0
    for link in range(n_links):
        if local[link] == 0:
            local[link] = n_used
            used[n_used] = link
            n_used += 1
    run_flow = np.empty(n_runs, np.intp)
    run_ptr = np.empty(n_runs + 1, np.intp)
    link_kept = np.empty(n_kept, np.int32)
    weight_kept = np.empty(n_kept, np.float64)
    k = 0
    r = 0
    for f in range(len(indptr) - 1):
        if unfrozen[f] and indptr[f + 1] > indptr[f]:
            run_flow[r] = f
            run_ptr[r] = k
            r += 1
            for i in range(indptr[f], indptr[f + 1]):
                if twin[link_of[i]] < 0:
                    link_kept[k] = local[link_of[i]]
                    weight_kept[k] = weight[i]
                    k += 1
    run_ptr[n_runs] = n_kept
    return run_flow, run_ptr, link_kept, weight_kept, used


@njit(cache=True)
def _copy_kept(indptr, link_of, weight, has_run, local, n_kept, n_runs):
    """:func:`_kept_runs`' copy pass alone, its counts known (:func:`_kept_layout`): the triplets of the flows
    with a run on the links numbered in ``local`` (-1: shadowed), one pass."""
    run_flow = np.empty(n_runs, np.intp)
    run_ptr = np.empty(n_runs + 1, np.intp)
    link_kept = np.empty(n_kept, np.int32)
    weight_kept = np.empty(n_kept, np.float64)
    k = 0
    r = 0
    for f in range(len(indptr) - 1):
        if has_run[f]:
            run_flow[r] = f
            run_ptr[r] = k
            r += 1
            for i in range(indptr[f], indptr[f + 1]):
                kept = local[link_of[i]]
                if kept >= 0:
                    link_kept[k] = kept
                    weight_kept[k] = weight[i]
                    k += 1
    run_ptr[n_runs] = n_kept
    return run_flow, run_ptr, link_kept, weight_kept


def _kept_layout(indptr: np.ndarray, link_of: np.ndarray, weight: np.ndarray, unfrozen: np.ndarray, twin: np.ndarray,
                 count: np.ndarray | None) -> tuple[np.ndarray, ...]:
    """:func:`_kept_runs`' result. With each link's count of unfrozen triplets (:func:`_twin_keys`') the links
    used and the triplets kept are counted per link, so one pass over the triplets copies them (a 131,072-GPU
    all_reduce has 84 M)."""
    if count is None:
        return _kept_runs(indptr, link_of, weight, unfrozen, twin)
    used = np.flatnonzero((count > 0) & (twin < 0))  # in link order, as _kept_runs numbers them
    local = np.full(len(twin), -1, np.int32)
    local[used] = np.arange(len(used), dtype=np.int32)
    has_run = unfrozen & (indptr[1:] > indptr[:-1])
    n_kept = int(count[used].sum(dtype=np.int64))
    run_flow, run_ptr, link_kept, weight_kept = _copy_kept(indptr, link_of, weight, has_run, local, n_kept,
                                                           int(has_run.sum()))
    return run_flow, run_ptr, link_kept, weight_kept, used


# A link crossed by exactly the flows another crosses, with the same weights, but of a capacity larger by
# more than this share (or equal and a higher id), never decides anything (see _shadowed_links)
_SHADOW_RTOL = 1e-6
_MIX = np.uint64(0x9E3779B97F4A7C15)  # odd 64-bit multiplier (2^64 / golden ratio): scatters flow ids


@njit(cache=True)
def _twin_keys(indptr, link_of, unfrozen, n_links):
    """Each link's twin key (a sum of its unfrozen flows' mixed ids, and their count): links crossed by
    the same flows share both. Returns whether every row's links are sorted (the check of
    :func:`_shadowed_links` searches them; without, no link is shadowed), the keys and the counts."""
    # a link's key and count side by side: one cache line per triplet's update, not two (the links are
    # visited at random: 2.4 M of them at 131,072 GPUs)
    key_count = np.zeros((n_links, 2), np.uint64)
    sorted_rows = True
    for f in range(len(indptr) - 1):
        if not unfrozen[f]:
            continue
        mixed = (np.uint64(f) + np.uint64(1)) * _MIX
        mixed ^= mixed >> np.uint64(29)
        for i in range(indptr[f], indptr[f + 1]):
            if i > indptr[f] and link_of[i] <= link_of[i - 1]:
                sorted_rows = False
                break
            key_count[link_of[i], 0] += mixed
            key_count[link_of[i], 1] += np.uint64(1)
        if not sorted_rows:
            break
    return sorted_rows, key_count[:, 0].copy(), key_count[:, 1].astype(np.int32)


@njit(cache=True)
def _in_run(lo, hi, link_of, weight, link, w):
    """Whether the sorted run ``lo:hi`` holds ``link`` with weight ``w``."""
    end = hi
    while lo < hi:
        mid = (lo + hi) // 2
        if link_of[mid] < link:
            lo = mid + 1
        else:
            hi = mid
    return lo < end and link_of[lo] == link and weight[lo] == w


@njit(cache=True)
def _lowest_twin(order, start, end, capacity):
    """The link of ``order[start:end]`` of the lowest capacity, the lowest id among equals."""
    a = order[start]
    for j in range(start + 1, end):
        b = order[j]
        if capacity[b] < capacity[a] or (capacity[b] == capacity[a] and b < a):
            a = b
    return a


def _shadowed_links(indptr, link_of, weight, unfrozen, capacity):
    """Per link, the twin that shadows it (-1: none). Link B is shadowed by link A when both carry the
    same unfrozen flows with the same weights (the same column of the weights: the hops of one NIC's
    flows through its PCIe switch and its port) and B's capacity is the larger by more than
    ``_SHADOW_RTOL``, or the same and B's id the higher. Both then sum the same terms in the same order
    every iteration, so B's level is never below A's, nor within the filling's tolerance of it where
    larger: B is never a flow's lowest link unless A is too at the same level, never final where A is
    not, and never the lower id of two final links. Dropping B's triplets changes no decision and no bit
    (two fifths of a 16,384-GPU all_reduce's). Twins are found by a key per link and checked triplet by
    triplet, before the filling copies the triplets (it copies none of theirs)."""
    return _twins_and_counts(indptr, link_of, weight, unfrozen, capacity)[0]


def _twins_and_counts(indptr, link_of, weight, unfrozen, capacity) -> tuple[np.ndarray, np.ndarray | None]:
    """:func:`_shadowed_links`, and each link's count of unfrozen triplets (None where the rows' links are
    not sorted: no twins, and the counts were not finished)."""
    n_links = capacity.shape[0]
    sorted_rows, key, count = _twin_keys(indptr, link_of, unfrozen, n_links)
    if not sorted_rows:
        return np.full(n_links, -1, np.int32), None
    # sorted by numpy, not in compiled code: a compiled sort costs seconds of cold compilation
    return _checked_twins(indptr, link_of, weight, unfrozen, capacity, np.argsort(key), key, count), count


@njit(cache=True)
def _checked_twins(indptr, link_of, weight, unfrozen, capacity, order, key, count):
    """:func:`_shadowed_links` once the links are sorted by key: each key's links of one flow count
    shadowed by the lowest capacity's (lowest id) among them, then checked triplet by triplet."""
    n_links = capacity.shape[0]
    twin = np.full(n_links, -1, np.int32)
    start = 0
    while start < len(order):
        end = start + 1
        while end < len(order) and key[order[end]] == key[order[start]]:
            end += 1
        a = _lowest_twin(order, start, end, capacity)
        for j in range(start, end):
            b = order[j]
            if b != a and count[a] > 0 and count[b] == count[a] and (
                    capacity[b] > capacity[a] * (1.0 + _SHADOW_RTOL) or capacity[b] == capacity[a]):
                twin[b] = a
        start = end
    for f in range(len(indptr) - 1):  # the check: each of B's triplets has A's beside it, same weight
        if not unfrozen[f]:
            continue
        for i in range(indptr[f], indptr[f + 1]):
            a = twin[link_of[i]]
            if a >= 0 and not _in_run(indptr[f], indptr[f + 1], link_of, weight, a, weight[i]):
                twin[link_of[i]] = -1
    return twin


# Weights that are whole multiples of 2^-_EXACT_FRACTION_BITS sum exactly in float64 while the total stays
# below 2^53 of those units (every partial sum is then an integer number of units, held exactly)
_EXACT_FRACTION_BITS = 20


@njit(cache=True)
def _exact_weight_sums(weight):
    """Whether every sum and difference of these weights is exact in float64: then a link's sum of its
    unfrozen flows' weights is the same bits in any order, kept by subtraction (ECMP's and static routes'
    weights of one, a merged flow's multiplicity, spraying's 1/2^k splits). Not adaptive splits. One
    pass, no temporaries (50 M weights at 131,072 GPUs)."""
    scale = float(2**_EXACT_FRACTION_BITS)
    total = 0.0
    for w in weight:
        units = w * scale  # exact: a power of two
        if units != np.floor(units):
            return False
        total += units
    return total < 2.0**53


def progressive_fill(indptr: np.ndarray, link_of: np.ndarray, weight: np.ndarray, capacity_Bps: np.ndarray,
                     cap_Bps: np.ndarray, unfrozen: np.ndarray, rtol: float,
                     not_transmitting: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(rate, bottleneck, iterations) of the ``unfrozen`` flows over the rows of a CSR matrix (flow f's
    links ``link_of[indptr[f]:indptr[f + 1]]``, with ``weight``); iterations < 0 if one froze nothing.
    Reads its inputs only."""
    n_flows = cap_Bps.shape[0]
    capacity_Bps = np.ascontiguousarray(capacity_Bps, dtype=np.float64)
    # one compiled signature: 8-byte row pointers, 4-byte link ids (as scipy's CSR matrices hold them)
    indptr = np.ascontiguousarray(indptr, dtype=np.int64)
    link_of = np.ascontiguousarray(link_of, dtype=np.int32)
    weight = np.ascontiguousarray(weight, dtype=np.float64)
    unfrozen = np.ascontiguousarray(unfrozen, dtype=np.bool_)
    twin, count = _twins_and_counts(indptr, link_of, weight, unfrozen, capacity_Bps)
    run_flow, run_ptr, link_kept, weight_kept, used = _kept_layout(indptr, link_of, weight, unfrozen, twin, count)
    rate = np.zeros(n_flows)
    bottleneck = np.full(n_flows, not_transmitting, dtype=np.int64)
    active = np.flatnonzero(unfrozen).astype(np.intp)
    # exact sums (ECMP's, static routes', spraying's weights): the faster kernel, the same bits
    fill = _fill_exact if _exact_weight_sums(weight_kept) else _fill
    iterations = fill(run_flow, run_ptr, link_kept, weight_kept, active, capacity_Bps[used],
                      np.ascontiguousarray(cap_Bps, dtype=np.float64), rate, bottleneck, float(rtol))
    linked = bottleneck >= 0  # numbered among the used links: back to link ids
    bottleneck[linked] = used[bottleneck[linked]]
    return rate, bottleneck, int(iterations)
