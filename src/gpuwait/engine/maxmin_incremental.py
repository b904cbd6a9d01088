"""Incremental weighted max-min in compiled code: the event engine's level-based reallocation.

After an event (flows stop, flows start) progressive filling changes nothing below the lowest
level the event moves, and above it only flows connected to the event through saturated links
can move. :func:`reallocate_levels` finds that level, searches the group and re-solves it in the
capacity the other active flows leave, in one compiled call (numba, ``cache=True`` as the packet
engine): the work per event grows with the flows and links the search touches, never with all
active flows, and no Python object is touched in the loop. The reasoning is written out in
``gpuwait.engine.flow._Run._reallocate_levels``; the water-filling is the one of
:func:`gpuwait.engine.flow.max_min_rates` (Bertsekas & Gallager, *Data Networks*, 2nd ed.,
section 6.5.2), on the group only.

The incidence comes twice, as CSR arrays with compact link ids: flow -> links (``f_ptr``,
``f_link``, ``f_w``) and link -> flows (``l_ptr``, ``l_flow``, ``l_w``). ``rate`` holds the rates
before the event (a departed flow still its old rate, an arrival 0): flows other than the
departed ones keep their rates outside the group, so one array serves as old and current rates.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from gpuwait.engine.maxmin_fill import run_level

__all__ = ["Scratch", "reallocate_levels"]

# Same meanings as in engine/flow.py (kept equal by tests/engine/test_incremental.py).
_CAP_LIMITED = -1
_NOT_TRANSMITTING = -2


class Scratch:
    """Marks reused across events, all left cleared by every call: flows in the group, links
    visited by the search, a link's position in the group's problem (-1: none), and buffers."""

    def __init__(self, n_flows: int, n_links: int) -> None:
        self.in_group = np.zeros(n_flows, dtype=np.bool_)
        self.visited = np.zeros(n_links, dtype=np.bool_)
        self.link_local = np.full(n_links, -1, dtype=np.int64)
        self.group = np.empty(n_flows, dtype=np.int64)
        self.queue = np.empty(n_links, dtype=np.int64)


@njit(cache=True)
def _old_load(link, l_ptr, l_flow, l_w, rate):
    """``link``'s load at the rates before the event, and its level (the largest of those rates)."""
    load = 0.0
    top = 0.0
    for j in range(l_ptr[link], l_ptr[link + 1]):
        r = rate[l_flow[j]]
        load += l_w[j] * r
        top = max(top, r)
    return load, top


@njit(cache=True)
def _saturated(link, l_ptr, l_flow, l_w, rate, capacity, rtol):
    """Was ``link`` saturated before the event (load of the old rates within ``rtol``)?"""
    return _old_load(link, l_ptr, l_flow, l_w, rate)[0] >= capacity[link] * (1.0 - rtol)


@njit(cache=True)
def _departure_level(departed, f_ptr, f_link, l_ptr, l_flow, l_w, rate, capacity, visited, queue, rtol):
    """Push the departed flows' saturated links on ``queue`` (marked visited); return their count
    and the lowest old level among them (a saturated link's level: its largest old rate)."""
    n = 0
    level = np.inf
    for f in departed:
        for k in range(f_ptr[f], f_ptr[f + 1]):
            link = f_link[k]
            if visited[link]:
                continue
            load, top = _old_load(link, l_ptr, l_flow, l_w, rate)
            if load >= capacity[link] * (1.0 - rtol):
                visited[link] = True
                queue[n] = link
                n += 1
                level = min(level, top)
    return n, level


@njit(cache=True)
def _arrival_level(arrived, f_ptr, f_link, l_ptr, l_flow, l_w, rate, active, in_group, capacity):
    """The fill level up to which the arrivals (marked ``in_group``) change no trajectory: the
    lowest over their links of the first saturation of ``sum_f w_f min(t, r_f) + t * w_arrivals``,
    the largest root of that concave load's linear pieces (taken in rate order)."""
    level = np.inf
    for f in arrived:
        for k in range(f_ptr[f], f_ptr[f + 1]):
            link = f_link[k]
            start, end = l_ptr[link], l_ptr[link + 1]
            arrival_w = 0.0
            n_old = 0
            for j in range(start, end):
                g = l_flow[j]
                if in_group[g]:
                    arrival_w += l_w[j]
                elif active[g]:
                    n_old += 1
            old_rate = np.empty(n_old)
            old_w = np.empty(n_old)
            i = 0
            for j in range(start, end):
                g = l_flow[j]
                if active[g] and not in_group[g]:
                    old_rate[i] = rate[g]
                    old_w[i] = l_w[j]
                    i += 1
            order = np.argsort(old_rate, kind="mergesort")
            load = 0.0
            weight = 0.0
            for i in range(n_old):
                load += old_w[i] * old_rate[i]
                weight += old_w[i]
            root = (capacity[link] - load) / arrival_w  # above every old flow's rate
            below = 0.0
            above_w = weight
            for i in order:
                root = max(root, (capacity[link] - below) / (above_w + arrival_w))
                below += old_w[i] * old_rate[i]
                above_w -= old_w[i]
            level = min(level, root)
    return level


@njit(cache=True)
def _grow(queue, head, n_queued, n_forced, group, n_group, f_ptr, f_link, l_ptr, l_flow, l_w, rate, active,
          in_group, visited, capacity, threshold, rtol):
    """Breadth-first search from ``queue[head:n_queued]``: every active flow at or above
    ``threshold`` on a link saturated before the event (or on one of the first ``n_forced``
    queued links, the event's own) joins the group, its unvisited links join the queue.
    Returns the new queue length and group size."""
    while head < n_queued:
        link = queue[head]
        if head >= n_forced and not _saturated(link, l_ptr, l_flow, l_w, rate, capacity, rtol):
            head += 1
            continue
        head += 1
        n_queued, n_group = _join_flows_on(link, threshold, group, n_group, queue, n_queued, f_ptr, f_link, l_ptr,
                                           l_flow, rate, active, in_group, visited)
    return n_queued, n_group


@njit(cache=True)
def _join_flows_on(link, threshold, group, n_group, queue, n_queued, f_ptr, f_link, l_ptr, l_flow, rate, active,
                   in_group, visited):
    """Every active flow on ``link`` outside the group whose old rate is at or above ``threshold`` joins
    it (appended to ``group``), its unvisited links join the queue. Returns the new queue length and
    group size."""
    for j in range(l_ptr[link], l_ptr[link + 1]):
        g = l_flow[j]
        if active[g] and not in_group[g] and rate[g] >= threshold:
            in_group[g] = True
            group[n_group] = g
            n_group += 1
            n_queued = _push_links(g, f_ptr, f_link, visited, queue, n_queued)
    return n_queued, n_group


@njit(cache=True)
def _push_links(flow, f_ptr, f_link, visited, queue, n_queued):
    """Queue ``flow``'s links not yet visited (marked visited); returns the new queue length."""
    for k in range(f_ptr[flow], f_ptr[flow + 1]):
        link = f_link[k]
        if not visited[link]:
            visited[link] = True
            queue[n_queued] = link
            n_queued += 1
    return n_queued


@njit(cache=True)
def _link_levels(t_ptr, t_link, t_w, live, n_live, residual, frozen_load, weight, level, below):
    """The unfrozen weight and level (the rate at which its unfrozen flows fill it) of every link
    an unfrozen flow crosses; clears ``below`` on them. Touches those links only."""
    for i in range(n_live):
        g = live[i]
        for t in range(t_ptr[g], t_ptr[g + 1]):
            weight[t_link[t]] = 0.0
            below[t_link[t]] = False
    for i in range(n_live):
        g = live[i]
        for t in range(t_ptr[g], t_ptr[g + 1]):
            weight[t_link[t]] += t_w[t]
    for i in range(n_live):
        g = live[i]
        for t in range(t_ptr[g], t_ptr[g + 1]):
            link = t_link[t]
            level[link] = (residual[link] - frozen_load[link]) / weight[link] if weight[link] > 0 else np.inf


@njit(cache=True)
def _flow_levels(t_ptr, t_link, cap, live, n_live, level, level_rtol, flow_level, capped, below):
    """Each unfrozen flow's level (its lowest link's or its cap), whether its cap freezes it, and
    the links on which some unfrozen flow stops below the link's level (the progressive filling's
    kernel, :func:`gpuwait.engine.maxmin_fill.run_level`, over the flow's run of local links)."""
    for i in range(n_live):
        g = live[i]
        lowest, flow_level[g] = run_level(t_ptr[g], t_ptr[g + 1], t_link, level, cap[g], level_rtol, below)
        capped[g] = cap[g] <= lowest * (1.0 + level_rtol)


@njit(cache=True)
def _freeze(t_ptr, t_link, t_w, live, n_live, capped, weight, below, flow_level, rate, bottleneck, frozen_load):
    """Freeze every flow at its cap or on a final link (one no unfrozen flow stops below): at its
    own level, bottleneck the lowest final link. Keeps the others at the front of ``live`` (in
    order) and returns their count."""
    n_links = weight.shape[0]
    for i in range(n_live):
        g = live[i]
        lowest_final = _CAP_LIMITED if capped[g] else n_links
        if not capped[g]:
            for t in range(t_ptr[g], t_ptr[g + 1]):
                link = t_link[t]
                if weight[link] > 0 and not below[link] and link < lowest_final:
                    lowest_final = link
        capped[g] = lowest_final < n_links  # now: frozen in this iteration
        bottleneck[g] = lowest_final if capped[g] else bottleneck[g]
    # Loads added only after every flow is decided: this iteration's levels saw none of them.
    kept = 0
    for i in range(n_live):
        g = live[i]
        if not capped[g]:
            live[kept] = g
            kept += 1
            continue
        rate[g] = flow_level[g]
        for t in range(t_ptr[g], t_ptr[g + 1]):
            frozen_load[t_link[t]] += t_w[t] * flow_level[g]
    return kept


@njit(cache=True)
def _fill(t_ptr, t_link, t_w, residual, cap, level_rtol):
    """Weighted max-min rates of the group in ``residual`` capacity: the water-filling of
    ``engine/flow.py``'s ``_progressive_fill`` (every bottleneck no lower one can affect frozen
    per iteration), flow ``g``'s links ``t_link[t_ptr[g]:t_ptr[g+1]]`` in local ids. Each
    iteration walks the unfrozen flows' links only, as the numpy filling drops frozen triplets.
    Returns the rates and bottlenecks (local link id, or -1 for the cap)."""
    n_flows, n_links = cap.shape[0], residual.shape[0]
    rate = np.zeros(n_flows)
    bottleneck = np.full(n_flows, _NOT_TRANSMITTING, dtype=np.int64)
    live = np.arange(n_flows)
    capped = np.zeros(n_flows, dtype=np.bool_)
    frozen_load = np.zeros(n_links)
    weight = np.zeros(n_links)
    level = np.empty(n_links)
    below = np.zeros(n_links, dtype=np.bool_)
    flow_level = np.empty(n_flows)
    n_live = n_flows
    while n_live > 0:
        _link_levels(t_ptr, t_link, t_w, live, n_live, residual, frozen_load, weight, level, below)
        _flow_levels(t_ptr, t_link, cap, live, n_live, level, level_rtol, flow_level, capped, below)
        n_live = _freeze(t_ptr, t_link, t_w, live, n_live, capped, weight, below, flow_level, rate, bottleneck,
                         frozen_load)
    return rate, bottleneck


@njit(cache=True)
def _solve_group(group, f_ptr, f_link, f_w, l_ptr, l_flow, l_w, rate, active, in_group, link_local, capacity,
                 rate_cap, level_rtol, check_rtol):
    """Max-min rates and bottlenecks (compact link ids) of the sorted ``group`` in the capacity the
    other active flows leave, and the group's links (sorted) with whether the new rates saturate them."""
    n_triplets = 0
    for f in group:
        n_triplets += f_ptr[f + 1] - f_ptr[f]
    links = np.empty(n_triplets, dtype=np.int64)
    n_links = 0
    for f in group:
        for k in range(f_ptr[f], f_ptr[f + 1]):
            if link_local[f_link[k]] < 0:
                link_local[f_link[k]] = 0
                links[n_links] = f_link[k]
                n_links += 1
    links = np.sort(links[:n_links])  # local ids in link order: the lowest id wins a tie, as in a full solve
    residual = np.empty(n_links)
    for i in range(n_links):
        link = links[i]
        link_local[link] = i
        load = 0.0
        for j in range(l_ptr[link], l_ptr[link + 1]):
            g = l_flow[j]
            if active[g] and not in_group[g]:
                load += l_w[j] * rate[g]
        residual[i] = max(capacity[link] - load, 0.0)  # a saturated link can read a hair below zero
    t_ptr = np.empty(group.size + 1, dtype=np.int64)
    t_link = np.empty(n_triplets, dtype=np.int64)
    t_w = np.empty(n_triplets)
    t_ptr[0] = 0
    t = 0
    for i in range(group.size):
        f = group[i]
        for k in range(f_ptr[f], f_ptr[f + 1]):
            t_link[t] = link_local[f_link[k]]
            t_w[t] = f_w[k]
            t += 1
        t_ptr[i + 1] = t
    new_rate, bottleneck = _fill(t_ptr, t_link, t_w, residual, rate_cap[group], level_rtol)
    group_load = np.zeros(n_links)
    for i in range(group.size):
        if bottleneck[i] >= 0:
            bottleneck[i] = links[bottleneck[i]]
        for t in range(t_ptr[i], t_ptr[i + 1]):
            group_load[t_link[t]] += t_w[t] * new_rate[i]
    saturated = np.empty(n_links, dtype=np.bool_)
    for i in range(n_links):
        saturated[i] = group_load[i] >= residual[i] - capacity[links[i]] * check_rtol
        link_local[links[i]] = -1
    return new_rate, bottleneck, links, saturated


@njit(cache=True)
def reallocate_levels(departed, arrived, f_ptr, f_link, f_w, l_ptr, l_flow, l_w, rate, active, capacity,
                      rate_cap, in_group, visited, link_local, group_buf, queue, level_margin, level_rtol,
                      check_rtol):
    """The level-based reallocation of one event (``active`` already updated, ``rate`` the rates
    before it). Returns the re-solved group (sorted), its new rates and bottlenecks, and the flows
    solved in all (the group is solved again when its new rates saturate a link with a faster
    flow outside: those join with what they reach). Leaves ``in_group``, ``visited`` and
    ``link_local`` cleared."""
    n_queued, level = _departure_level(departed, f_ptr, f_link, l_ptr, l_flow, l_w, rate, capacity, visited,
                                       queue, check_rtol)
    n_group = 0
    for f in arrived:
        in_group[f] = True
        group_buf[n_group] = f
        n_group += 1
    level = min(level, _arrival_level(arrived, f_ptr, f_link, l_ptr, l_flow, l_w, rate, active, in_group, capacity))
    threshold = level * (1.0 - level_margin)
    for f in arrived:
        n_queued = _push_links(f, f_ptr, f_link, visited, queue, n_queued)
    n_queued, n_group = _grow(queue, 0, n_queued, n_queued, group_buf, n_group, f_ptr, f_link, l_ptr, l_flow, l_w,
                              rate, active, in_group, visited, capacity, threshold, check_rtol)
    solved = 0
    group = np.sort(group_buf[:n_group])
    new_rate = np.zeros(0)
    bottleneck = np.zeros(0, dtype=np.int64)
    while n_group > 0:
        new_rate, bottleneck, links, saturated = _solve_group(group, f_ptr, f_link, f_w, l_ptr, l_flow, l_w, rate,
                                                              active, in_group, link_local, capacity, rate_cap,
                                                              level_rtol, check_rtol)
        solved += n_group
        head, before = n_queued, n_group
        for i in range(links.size):
            if saturated[i]:  # the new rates may now hold a faster flow outside the group below its max-min rate
                n_queued, n_group = _join_flows_on(links[i], threshold, group_buf, n_group, queue, n_queued, f_ptr,
                                                   f_link, l_ptr, l_flow, rate, active, in_group, visited)
        if n_group == before:
            break
        n_queued, n_group = _grow(queue, head, n_queued, head, group_buf, n_group, f_ptr, f_link, l_ptr, l_flow,
                                  l_w, rate, active, in_group, visited, capacity, threshold, check_rtol)
        group = np.sort(group_buf[:n_group])
    for f in group:
        in_group[f] = False
    for i in range(n_queued):
        visited[queue[i]] = False
    return group, new_rate, bottleneck, solved
