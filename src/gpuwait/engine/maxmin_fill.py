"""Weighted max-min progressive filling in compiled code: the same iterations as the array version.

:func:`gpuwait.engine.flow._progressive_fill_arrays` runs each filling iteration as a dozen whole-array
passes (gathers, ``bincount`` scatters, ``reduceat`` segment minima) over every unfrozen flow's
(flow, link, weight) triplets; a 16,384-GPU NVLSTree all_reduce has 10.4 M of them and 51
iterations, 4.5 s. Here one iteration is two passes over the triplets (numba, ``cache=True`` as the
packet engine): the first takes each flow's lowest link level and counts, per link, the flows that
stop below its level; the second freezes the flows on a final link (or at their cap), adds their
load, and compacts the unfrozen flows' triplets while summing the next iteration's weights.

Bit for bit the array version's result: every sum runs over the same terms in the same (triplet)
order, starting from 0.0 as ``bincount`` does — terms the array version adds as exact zeros (frozen
or not newly frozen flows) are skipped, which changes no bit of a sum of positive terms — and a
link's frozen load takes the iteration's sum in one addition, as ``frozen += bincount(...)`` does.
Minima do not depend on order. The algorithm is described in :func:`gpuwait.engine.flow.max_min_rates`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["progressive_fill"]

# Same meanings as in engine/flow.py (kept equal by tests/engine/test_fill_compiled.py).
_CAP_LIMITED = -1


@njit(cache=True)
def _levels(n_runs, run_flow, run_ptr, link_of, link_level, cap, flow_link_level, flow_level, below, rtol):
    """Each run's flow's lowest link level and level (capped); per link, whether an unfrozen flow on
    it stops below the link's level."""
    for r in range(n_runs):
        f = run_flow[r]
        lowest = np.inf
        for i in range(run_ptr[r], run_ptr[r + 1]):
            level = link_level[link_of[i]]
            if level < lowest:
                lowest = level
        flow_link_level[f] = lowest
        flow_level[f] = min(lowest, cap[f])
        threshold = flow_level[f] * (1.0 + rtol)
        for i in range(run_ptr[r], run_ptr[r + 1]):
            if link_level[link_of[i]] > threshold:
                below[link_of[i]] = True


@njit(cache=True)
def _final(link, below, link_level):
    """A link is final when it is crossed (a finite level) and no unfrozen flow on it stops below its level."""
    return not below[link] and link_level[link] < np.inf


@njit(cache=True)
def _fill(run_flow, run_ptr, link_of, weight, active, capacity, cap, rate, bottleneck, rtol):  # noqa: C901
    """Progressive filling of the ``active`` flows (sorted ids, each with its run of triplets
    ``run_ptr[r]:run_ptr[r + 1]`` for ``run_flow[r]``, runs in flow order; flows with no triplets have
    no run). Overwrites the arrays it is given (they are the caller's copies). Returns the iterations,
    or -iterations if an iteration froze nothing (a flow without links or cap: never with checked input)."""
    n_links = capacity.shape[0]
    n_flows = cap.shape[0]
    unweighted = np.zeros(n_links)
    for i in range(run_ptr[len(run_flow)]):
        unweighted[link_of[i]] += weight[i]
    frozen_load = np.zeros(n_links)
    added = np.zeros(n_links)
    link_level = np.empty(n_links)
    below = np.zeros(n_links, dtype=np.bool_)
    flow_link_level = np.full(n_flows, np.inf)
    flow_level = np.full(n_flows, np.inf)
    newly = np.zeros(n_flows, dtype=np.bool_)
    n_runs, n_active = len(run_flow), len(active)
    iterations = 0
    while n_active > 0:
        iterations += 1
        for link in range(n_links):
            below[link] = False
            if unweighted[link] > 0:
                link_level[link] = (capacity[link] - frozen_load[link]) / unweighted[link]
            else:
                link_level[link] = np.inf
        for k in range(n_active):  # flows without triplets keep an infinite link level
            flow_link_level[active[k]] = np.inf
            flow_level[active[k]] = cap[active[k]]
        _levels(n_runs, run_flow, run_ptr, link_of, link_level, cap, flow_link_level, flow_level, below, rtol)
        # the active flows' decisions: at their cap, or on a final link (the lowest one names the bottleneck)
        n_newly = 0
        for k in range(n_active):
            f = active[k]
            newly[f] = cap[f] <= flow_link_level[f] * (1.0 + rtol)
            if newly[f]:
                bottleneck[f] = _CAP_LIMITED
                n_newly += 1
        r_kept = 0
        i_kept = 0
        for link in range(n_links):
            unweighted[link] = 0.0
        for r in range(n_runs):
            f = run_flow[r]
            start, end = run_ptr[r], run_ptr[r + 1]
            if not newly[f]:
                lowest_final = n_links
                for i in range(start, end):
                    link = link_of[i]
                    if _final(link, below, link_level) and link < lowest_final:
                        lowest_final = link
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
        if n_newly == 0:
            return -iterations
        # run_ptr[r_kept] is written after the loop: run_ptr[r + 1] was still read as run r's end
        run_ptr[r_kept] = i_kept
        n_runs = r_kept
        for link in range(n_links):
            if added[link] != 0.0:
                frozen_load[link] += added[link]
                added[link] = 0.0
        k_kept = 0
        for k in range(n_active):
            f = active[k]
            if newly[f]:
                rate[f] = flow_level[f]
                newly[f] = False
            else:
                active[k_kept] = f
                k_kept += 1
        n_active = k_kept
    return iterations


@njit(cache=True)
def _kept_runs(flow_of, link_of, weight, unfrozen):
    """The unfrozen flows' triplets (copies: the filling compacts them in place) and their runs, in one
    pass each to count and to copy, instead of masks and copies of every triplet array."""
    n_kept = 0
    n_runs = 0
    last = -1
    for i in range(len(flow_of)):
        if unfrozen[flow_of[i]]:
            n_kept += 1
            if flow_of[i] != last:
                n_runs += 1
                last = flow_of[i]
    run_flow = np.empty(n_runs, np.intp)
    run_ptr = np.empty(n_runs + 1, np.intp)
    link_kept = np.empty(n_kept, np.intp)
    weight_kept = np.empty(n_kept, np.float64)
    k = 0
    r = 0
    last = -1
    for i in range(len(flow_of)):
        f = flow_of[i]
        if unfrozen[f]:
            if f != last:
                run_flow[r] = f
                run_ptr[r] = k
                r += 1
                last = f
            link_kept[k] = link_of[i]
            weight_kept[k] = weight[i]
            k += 1
    run_ptr[n_runs] = n_kept
    return run_flow, run_ptr, link_kept, weight_kept


def progressive_fill(flow_of: np.ndarray, link_of: np.ndarray, weight: np.ndarray, capacity_Bps: np.ndarray,
                     cap_Bps: np.ndarray, unfrozen: np.ndarray, rtol: float,
                     not_transmitting: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(rate, bottleneck, iterations) of the ``unfrozen`` flows over (flow, link, weight) triplets
    sorted by flow; iterations < 0 if one froze nothing. Reads its inputs only."""
    n_flows = cap_Bps.shape[0]
    run_flow, run_ptr, link_kept, weight_kept = _kept_runs(np.ascontiguousarray(flow_of, dtype=np.intp),
                                                           np.ascontiguousarray(link_of, dtype=np.intp),
                                                           np.ascontiguousarray(weight, dtype=np.float64),
                                                           np.ascontiguousarray(unfrozen, dtype=np.bool_))
    rate = np.zeros(n_flows)
    bottleneck = np.full(n_flows, not_transmitting, dtype=np.int64)
    active = np.flatnonzero(unfrozen).astype(np.intp)
    iterations = _fill(run_flow, run_ptr, link_kept, weight_kept, active,
                       np.ascontiguousarray(capacity_Bps, dtype=np.float64),
                       np.ascontiguousarray(cap_Bps, dtype=np.float64), rate, bottleneck, float(rtol))
    return rate, bottleneck, int(iterations)
