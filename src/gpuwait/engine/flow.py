"""Flow-level (fluid) engine: event-driven, max-min fair sharing, vectorised.

A flow is a fluid that crosses a weighted set of directional links. Between two events (a
flow starts, a flow stops transmitting) every rate is constant and equal to the weighted
max-min fair allocation of the flows transmitting at that moment. The engine jumps from
event to event; nothing here models packets, queues or congestion control — that is the
packet engine's job.

Where the time goes, and what keeps it down (no Python loop ever runs over flows or links):

- The flow x link incidence matrix (CSR, one weight per flow and link) drives the rate
  solve. Each water-filling iteration is a few gathers and scatters over its nonzeros, and
  one iteration freezes every independent bottleneck at once, so a solve takes a handful of
  iterations rather than one per distinct rate level.
- Between events most rates do not move. After an event the engine (``reallocation="levels"``,
  the default) re-solves only what the event can move: progressive filling reaches rates in
  increasing order, so flows below the lowest level the event changes keep their rates, and
  above it only flows connected to the event through saturated links can move
  (``_Run._reallocate_levels``). That search and the group's filling run compiled
  (``engine/maxmin_incremental.py``, numba), one call per event. ``reallocation="local"``
  instead re-solves the flows that share a link with the change, holding the others as
  background load, checks the max-min conditions around every rate that moved, and widens
  the group or falls back to a full solve when the check fails. All give the same allocation;
  ``counters["resolved_flows"]`` counts the flows re-solved (``reallocation="full"`` re-solves
  all at every event).
- A splitting router's middle hops are shared by every flow between two leaves
  (:class:`SharedWeights`, ``FlowSet.shared``): solved and logged once per class, never
  joined into each flow's row. Such a run re-solves every event in full.
- The flow x flow dependency matrix (CSR, row ``f`` lists the flows ``f`` waits for) is
  resolved with scatters over the rows of the flows that just finished.
- Rates over time are stored as *change logs* (:class:`StepLog`): an entry only when a
  flow's or a link's rate changes. Dense per-interval matrices are built on demand, because
  for thousands of flows they can hold hundreds of millions of entries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from gpuwait.arrays import unique_sorted
from gpuwait.engine.maxmin_fill import progressive_fill
from gpuwait.engine.maxmin_incremental import Scratch, reallocate_levels
from gpuwait.errors import SimulationError

__all__ = [
    "FlowEngine",
    "FlowResult",
    "FlowSet",
    "LinkTable",
    "MaxMinSolution",
    "MaxMinSolver",
    "SharedWeights",
    "StepLog",
    "max_min_rates",
]

# Bottleneck codes in the per-flow bottleneck arrays (link ids are >= 0).
CAP_LIMITED = -1
NOT_TRANSMITTING = -2

# Two link levels closer than this (relative) saturate in the same filling iteration; it only
# merges levels that differ by rounding, so it never changes an allocation measurably.
_LEVEL_RTOL = 1e-12

# Incremental reallocation in the event loop: re-solve only the flows near a change and
# check the max-min conditions around it; fall back to a full solve when the group passes
# this share of the active flows or this many rounds.
_LOCAL_MAX_SHARE = 0.3
_LOCAL_MAX_ROUNDS = 4
# Relative slack of that check (a link counts as saturated, a rate as the largest on a link).
_CHECK_RTOL = 1e-9

# Largest (link change, flow on that link) expansion built at once when deriving link rates.
_LINK_LOG_CHUNK = 1 << 22

# Level-based reallocation: flows within this share below the lowest level an event can move are
# re-solved too, so rounding in the old rates never leaves a flow fixed that the event moves.
_LEVEL_MARGIN = 1e-9
_REALLOCATIONS = ("levels", "local", "full")

# Flow states in the event loop.
_WAITING, _SCHEDULED, _ACTIVE, _DONE = 0, 1, 2, 3


# --------------------------------------------------------------------------------------------
# input validation helpers


def _frozen(arr: np.ndarray) -> np.ndarray:
    arr.setflags(write=False)
    return arr


def _vector(name: str, value: object, n: int | None, *, dtype: type = np.float64) -> np.ndarray:
    """A private, read-only 1-D copy of ``value``; ``n=None`` accepts any length."""
    try:
        arr: np.ndarray = np.array(value, dtype=dtype, copy=True)
    except (TypeError, ValueError) as err:
        raise SimulationError(f"{name}: cannot be read as an array of {np.dtype(dtype).name} ({err})") from err
    if arr.ndim != 1 or (n is not None and arr.shape[0] != n):
        expected = "a 1-D array" if n is None else f"shape ({n},)"
        raise SimulationError(f"{name}: got shape {arr.shape}; expected {expected}")
    return _frozen(arr)


def _require(name: str, arr: np.ndarray, ok: np.ndarray, expected: str) -> None:
    if not np.all(ok):
        i = int(np.flatnonzero(~ok)[0])
        raise SimulationError(f"{name}[{i}] = {arr[i].item()!r}: expected {expected}")  # item(): 3, not np.int64(3)


def _csr(name: str, value: object, shape: tuple[int | None, int | None], *, dtype: type,
         borrow: bool = False) -> sp.csr_matrix:
    """A private canonical CSR copy (sorted indices, no duplicates) of a sparse or dense 2-D input;
    ``borrow``: the input itself where it already is a canonical CSR matrix of ``dtype``.

    ``None`` in ``shape`` accepts any size along that axis.
    """
    if value is None:
        raise SimulationError(f"{name}: missing; expected a scipy.sparse matrix of shape {shape}")
    given = value if isinstance(value, sp.csr_matrix) else None
    canonical = borrow and given is not None and given.dtype == dtype and given.has_canonical_format
    try:
        mat = given if canonical and given is not None else sp.csr_matrix(value, dtype=dtype, copy=True)
    except (TypeError, ValueError) as err:
        raise SimulationError(f"{name}: cannot be read as a sparse matrix ({err})") from err
    rows, cols = shape
    if (rows is not None and mat.shape[0] != rows) or (cols is not None and mat.shape[1] != cols):
        want = f"({'F' if rows is None else rows}, {'L' if cols is None else cols})"
        raise SimulationError(f"{name}: got shape {mat.shape}; expected {want}")
    mat.sum_duplicates()  # also sorts indices, so every later solve sums in the same order
    return mat


def _row_positions(indptr: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions into ``indices``/``data`` of the given CSR rows, concatenated, and each row's length."""
    starts = indptr[rows]
    lengths = indptr[rows + 1] - starts
    if rows.size <= 1:  # the common case in the event loop: one flow or one link
        return (np.arange(starts[0], starts[0] + lengths[0]) if rows.size else np.zeros(0, dtype=np.int64)), lengths
    ends = np.cumsum(lengths)
    return np.arange(ends[-1]) + np.repeat(starts - ends + lengths, lengths), lengths


# --------------------------------------------------------------------------------------------
# inputs


@dataclass(frozen=True, eq=False)
class LinkTable:
    """The per-link numbers the flow engine needs; the topology layer builds it.

    Parameters
    ----------
    capacity_Bps : numpy.ndarray
        ``(L,)`` capacity of each directional link in bytes/s, finite and > 0.
    latency_s : numpy.ndarray
        ``(L,)`` propagation latency in s, >= 0. Informational: a flow's latency comes with
        the flow (``FlowSet.path_latency_s``) because the router knows the path.

    The arrays are copied and made read-only, so a table can be shared between runs.

    Examples
    --------
    >>> import numpy as np
    >>> links = LinkTable(capacity_Bps=np.array([50e9, 50e9]), latency_s=np.array([1e-6, 1e-6]))
    >>> links.n_links
    2
    """

    capacity_Bps: np.ndarray
    latency_s: np.ndarray

    def __post_init__(self) -> None:
        capacity_Bps = _vector("capacity_Bps", self.capacity_Bps, None)
        _require("capacity_Bps", capacity_Bps, np.isfinite(capacity_Bps) & (capacity_Bps > 0),
                 "a finite capacity > 0 bytes/s")
        latency_s = _vector("latency_s", self.latency_s, capacity_Bps.shape[0])
        _require("latency_s", latency_s, np.isfinite(latency_s) & (latency_s >= 0), "a finite latency >= 0 s")
        object.__setattr__(self, "capacity_Bps", capacity_Bps)
        object.__setattr__(self, "latency_s", latency_s)

    @property
    def n_links(self) -> int:
        return int(self.capacity_Bps.shape[0])


@dataclass(frozen=True, eq=False)
class FlowSet:
    """The flows of one run, as parallel arrays.

    Parameters
    ----------
    size_bytes : numpy.ndarray
        ``(F,)`` bytes to send, finite and >= 0. A zero-size flow takes only its path latency.
    link_weights : scipy.sparse.csr_matrix
        ``(F, L)``; entry ``(f, l)`` is the fraction of flow ``f``'s rate that crosses link
        ``l``: 1.0 on every link of a single path, 0.25 on each of 4 equal-cost paths when
        the flow is sprayed evenly. Stored entries must be finite and > 0; a weight above 1
        means the flow crosses the link more than once.
    release_time_s : numpy.ndarray, optional
        ``(F,)`` earliest start in s, >= 0. Default 0.
    rate_cap_Bps : numpy.ndarray, optional
        ``(F,)`` rate ceiling in bytes/s, > 0 (``inf`` = none), e.g. a NIC or a
        per-QP limit. Default ``inf``.
    path_latency_s : numpy.ndarray, optional
        ``(F,)`` latency of the last byte from source to destination in s, >= 0. Default 0.
    depends_on : scipy.sparse.csr_matrix, optional
        ``(F, F)`` boolean; row ``f`` is True at column ``g`` when ``f`` may start only
        after ``g`` has finished (last byte delivered).
    shared : SharedWeights, optional
        More link weights that classes of flows share, added to ``link_weights`` (see
        :class:`SharedWeights`): a sprayed or adaptive route's middle hops, stored once per
        (source leaf, destination leaf) class instead of once per flow. The engine solves and
        logs link rates per class; results equal the joined matrix's to rounding.

    Every field is replaced by a private canonical copy (float64 read-only arrays, CSR
    matrices with sorted indices), so the caller's arrays are never shared or mutated.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> flows = FlowSet(size_bytes=np.array([1e6, 2e6]),
    ...                 link_weights=sp.csr_matrix(np.array([[1.0, 0.0], [0.5, 0.5]])))
    >>> flows.n_flows, flows.n_links, flows.rate_cap_Bps.tolist()
    (2, 2, [inf, inf])
    """

    size_bytes: np.ndarray
    link_weights: sp.csr_matrix
    # None = the default; __post_init__ replaces it with the checked array, so readers never see None
    release_time_s: np.ndarray = None  # type: ignore[assignment]
    rate_cap_Bps: np.ndarray = None  # type: ignore[assignment]
    path_latency_s: np.ndarray = None  # type: ignore[assignment]
    depends_on: sp.csr_matrix = None
    shared: SharedWeights | None = None

    def __post_init__(self) -> None:
        size_bytes = _vector("size_bytes", self.size_bytes, None)
        n_flows = size_bytes.shape[0]
        _require("size_bytes", size_bytes, np.isfinite(size_bytes) & (size_bytes >= 0), "a finite size >= 0 bytes")

        weights = _csr("link_weights", self.link_weights, (n_flows, None), dtype=np.float64)
        bad = ~(np.isfinite(weights.data) & (weights.data > 0))
        if bad.any():
            pos = int(np.flatnonzero(bad)[0])
            row = int(np.searchsorted(weights.indptr, pos, side="right") - 1)
            raise SimulationError(
                f"link_weights[{row}, {int(weights.indices[pos])}] = {weights.data[pos]!r}: "
                "expected a finite weight > 0 (the fraction of the flow's rate on that link)",
                hint="leave links a flow does not use out of the sparse matrix instead of storing 0",
            )

        def optional(name: str, value: object, default: float) -> np.ndarray:
            if value is None:
                return _frozen(np.full(n_flows, default))
            return _vector(name, value, n_flows)

        release_time_s = optional("release_time_s", self.release_time_s, 0.0)
        _require("release_time_s", release_time_s, np.isfinite(release_time_s) & (release_time_s >= 0),
                 "a finite time >= 0 s")
        rate_cap_Bps = optional("rate_cap_Bps", self.rate_cap_Bps, np.inf)
        _require("rate_cap_Bps", rate_cap_Bps, rate_cap_Bps > 0, "a rate cap > 0 bytes/s (inf for none)")
        path_latency_s = optional("path_latency_s", self.path_latency_s, 0.0)
        _require("path_latency_s", path_latency_s, np.isfinite(path_latency_s) & (path_latency_s >= 0),
                 "a finite latency >= 0 s")

        if self.depends_on is None:
            depends_on = sp.csr_matrix((n_flows, n_flows), dtype=bool)
        else:
            depends_on = _csr("depends_on", self.depends_on, (n_flows, n_flows), dtype=bool)
            depends_on.eliminate_zeros()

        shared = None if self.shared is None else _checked_shared(self.shared, n_flows, weights.shape[1])
        for name, value in (("size_bytes", size_bytes), ("link_weights", weights),
                            ("release_time_s", release_time_s), ("rate_cap_Bps", rate_cap_Bps),
                            ("path_latency_s", path_latency_s), ("depends_on", depends_on), ("shared", shared)):
            object.__setattr__(self, name, value)

    def links_per_flow(self) -> np.ndarray:
        """``(F,)`` number of links each flow crosses (own and its class's)."""
        count = np.diff(self.link_weights.indptr)
        if self.shared is None:
            return count
        member = self.shared.row_class >= 0
        class_count = np.diff(self.shared.class_weights.indptr)
        return count + np.where(member, class_count[np.where(member, self.shared.row_class, 0)], 0)

    @property
    def n_flows(self) -> int:
        return int(self.size_bytes.shape[0])

    @property
    def n_links(self) -> int:
        return int(self.link_weights.shape[1])


def _checked_shared(shared: object, n_flows: int, n_links: int) -> SharedWeights:
    """A canonical, read-only copy of ``shared`` for ``n_flows`` flows over ``n_links`` links."""
    if not isinstance(shared, SharedWeights):
        raise SimulationError(f"shared: got {type(shared).__name__}; expected a SharedWeights")
    if shared.members is not None:  # the event loop logs and re-solves one class per flow
        raise SimulationError("shared.members: the event engine takes one class per flow (row_class); "
                              "join a part with several classes per flow into the flows' own weights")
    class_weights = _csr("shared.class_weights", shared.class_weights, (None, n_links), dtype=np.float64)
    if not np.all(np.isfinite(class_weights.data) & (class_weights.data > 0)):
        raise SimulationError("shared.class_weights: expected every stored weight finite and > 0")
    row_class = _vector("shared.row_class", shared.row_class, n_flows, dtype=np.int64)
    _require("shared.row_class", row_class, (row_class >= -1) & (row_class < class_weights.shape[0]),
             f"a class id in [0, {class_weights.shape[0]}) or -1 for none")
    row_scale = _vector("shared.row_scale", shared.row_scale, n_flows)
    _require("shared.row_scale", row_scale, np.isfinite(row_scale) & (row_scale > 0), "a finite scale > 0")
    return SharedWeights(row_class, row_scale, class_weights)


# --------------------------------------------------------------------------------------------
# one max-min fair solve


@dataclass(frozen=True, eq=False)
class MaxMinSolution:
    """The outcome of one weighted max-min fair solve.

    Attributes
    ----------
    rate_Bps : numpy.ndarray
        ``(F,)`` rate of each flow in bytes/s, 0 for inactive flows.
    bottleneck_link : numpy.ndarray
        ``(F,)`` int64: the saturated link that froze the flow (the lowest id if several
        saturated at once), ``-1`` if its own rate cap froze it, ``-2`` if it is inactive.
    iterations : int
        Water-filling iterations. Each freezes every bottleneck that no lower one can
        affect, so this is at most — and usually far below — the number of distinct rates.
    """

    rate_Bps: np.ndarray
    bottleneck_link: np.ndarray
    iterations: int


def _progressive_fill(
    flow_of: np.ndarray,
    link_of: np.ndarray,
    weight: np.ndarray,
    capacity_Bps: np.ndarray,
    cap_Bps: np.ndarray,
    unfrozen: np.ndarray,
) -> MaxMinSolution:
    """Weighted max-min fair rates of the ``unfrozen`` flows, compiled (:mod:`gpuwait.engine.maxmin_fill`):
    the iterations of :func:`_progressive_fill_arrays`, bit for bit, in two passes over the triplets per
    iteration instead of a dozen array passes. Reads its inputs only."""
    indptr = np.zeros(cap_Bps.shape[0] + 1, np.int64)
    np.cumsum(np.bincount(flow_of, minlength=cap_Bps.shape[0]), out=indptr[1:])
    return _progressive_fill_rows(indptr, link_of, weight, capacity_Bps, cap_Bps, unfrozen)


def _progressive_fill_rows(indptr: np.ndarray, link_of: np.ndarray, weight: np.ndarray, capacity_Bps: np.ndarray,
                           cap_Bps: np.ndarray, unfrozen: np.ndarray) -> MaxMinSolution:
    """:func:`_progressive_fill` over the rows of a CSR matrix (``indptr``, its indices and data): no
    per-triplet flow ids to build."""
    rate_Bps, bottleneck, iterations = progressive_fill(indptr, link_of, weight, capacity_Bps, cap_Bps, unfrozen,
                                                        _LEVEL_RTOL, NOT_TRANSMITTING)
    if iterations < 0:  # the caller's checks rule this out: a flow with neither links nor a cap
        raise SimulationError("max-min filling: an iteration froze no flow (a flow crosses no link and has no cap)")
    return MaxMinSolution(rate_Bps=rate_Bps, bottleneck_link=bottleneck, iterations=iterations)


def _progressive_fill_arrays(
    flow_of: np.ndarray,
    link_of: np.ndarray,
    weight: np.ndarray,
    capacity_Bps: np.ndarray,
    cap_Bps: np.ndarray,
    unfrozen: np.ndarray,
) -> MaxMinSolution:
    """Weighted max-min fair rates of the ``unfrozen`` flows; consumes ``unfrozen``. The reference
    :func:`_progressive_fill` (compiled) is held to bit for bit (tests/engine/test_fill_compiled.py).

    The incidence comes as (flow, link, weight) triplets, one per nonzero of the CSR
    matrix, so ``flow_of`` must be sorted (CSR row order). Every step is a gather, a
    scatter (``bincount``), a segment reduction over each flow's run of triplets
    (``reduceat``) or an elementwise operation over the triplets, the flows or the links;
    the only Python loop is over filling iterations. Scatters beat sparse mat-vecs here
    (measured), and the engine's many small residual problems need no matrix objects
    built. The algorithm is described in :func:`max_min_rates`.

    Only the triplets of unfrozen flows are kept from one iteration to the next: a frozen
    flow's triplets only ever added exact zeros to the sums, so dropping them changes no
    bit of the result, and a 131,072-GPU collective's later iterations touch a fraction of
    its 11 million triplets.
    """
    n_flows, n_links = cap_Bps.shape[0], capacity_Bps.shape[0]
    rate_Bps = np.zeros(n_flows)
    bottleneck = np.full(n_flows, NOT_TRANSMITTING, dtype=np.int64)
    frozen_load_Bps = np.zeros(n_links)
    iterations = 0
    keep = unfrozen[flow_of]
    flow_of, link_of, weight = flow_of[keep], link_of[keep], weight[keep]
    while unfrozen.any():
        iterations += 1
        # each unfrozen flow's triplets are one contiguous run
        run_start = np.flatnonzero(np.r_[True, flow_of[1:] != flow_of[:-1]]) if len(flow_of) else np.zeros(0, np.intp)
        run_flow = flow_of[run_start]
        # Recomputed rather than decremented so a link left with no unfrozen flow reads exactly 0.
        unfrozen_weight = np.bincount(link_of, weights=weight, minlength=n_links)
        crossed = unfrozen_weight > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            link_level_Bps = np.where(crossed, (capacity_Bps - frozen_load_Bps) / unfrozen_weight, np.inf)
        triplet_level_Bps = link_level_Bps[link_of]
        flow_link_level_Bps = np.full(n_flows, np.inf)
        if len(run_start):
            flow_link_level_Bps[run_flow] = np.minimum.reduceat(triplet_level_Bps, run_start)
        flow_level_Bps = np.minimum(flow_link_level_Bps, cap_Bps)

        # A link is final when no unfrozen flow on it stops below its level: its level is not
        # above (1 + rtol) x the lowest flow level on it, i.e. not above that of any flow on it.
        below = triplet_level_Bps > (flow_level_Bps * (1.0 + _LEVEL_RTOL))[flow_of]
        final_link = crossed & (np.bincount(link_of, weights=below, minlength=n_links) == 0)
        cap_frozen = unfrozen & (cap_Bps <= flow_link_level_Bps * (1.0 + _LEVEL_RTOL))
        on_final_link = final_link[link_of]
        link_frozen = unfrozen & ~cap_frozen & (np.bincount(flow_of, weights=on_final_link, minlength=n_flows) > 0)
        newly = cap_frozen | link_frozen

        # flow_level is at most the level of every link the flow crosses, so freezing many
        # flows at their own levels in one step never overfills a link.
        newly_rate_Bps = np.where(newly, flow_level_Bps, 0.0)
        rate_Bps += newly_rate_Bps
        bottleneck[cap_frozen] = CAP_LIMITED
        lowest_final = np.full(n_flows, n_links, dtype=np.int64)
        if len(run_start):
            lowest_final[run_flow] = np.minimum.reduceat(np.where(on_final_link, link_of, n_links), run_start)
        bottleneck[link_frozen] = lowest_final[link_frozen]
        unfrozen &= ~newly
        frozen_load_Bps += np.bincount(link_of, weights=weight * newly_rate_Bps[flow_of], minlength=n_links)
        keep = unfrozen[flow_of]
        flow_of, link_of, weight = flow_of[keep], link_of[keep], weight[keep]
    return MaxMinSolution(rate_Bps=rate_Bps, bottleneck_link=bottleneck, iterations=iterations)


@dataclass(frozen=True, eq=False)
class SharedWeights:
    """A part of the flow x link weights that classes of flows share (see :class:`~gpuwait.routing.paths.Routes`).

    Flow ``f`` of class ``c = row_class[f]`` (``-1``: none) also crosses ``class_weights[c]``, scaled
    by ``row_scale[f]`` (how many identical flows the row stands for). The solve works on the class
    rows, never on their per-flow copies: a link's load from a class is its weight times the sum of
    its flows' scaled rates, and a flow's levels on the class's links are the class's.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> shared = SharedWeights(np.array([0, 0, -1]), np.ones(3), sp.csr_matrix(np.array([[1.0]])))
    >>> max_min_rates(sp.csr_matrix((3, 1)), np.array([10.0]), np.array([np.inf, np.inf, 1.0]), shared=shared)[0].tolist()
    [5.0, 5.0, 1.0]
    """

    row_class: np.ndarray
    row_scale: np.ndarray
    class_weights: sp.csr_matrix
    # (flows, classes) each flow's scale in every class of this part it crosses, for a part where a flow
    # crosses several classes (an all-to-all group's last hops: one class per switch above the pod,
    # scaled by the fraction that reaches it); row_class and row_scale are then unused
    members: sp.csr_matrix | None = None

    @classmethod
    def of_members(cls, members: sp.spmatrix, class_weights: sp.csr_matrix) -> SharedWeights:
        """A part whose flows may cross several of its classes: ``members[f, c]`` is flow f's scale in class c."""
        members = sp.csr_matrix(members)
        n = members.shape[0]
        return cls(np.full(n, -1, np.int64), np.ones(n), class_weights, members)

    def memberships(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(flow, class, scale) of every membership, sorted by flow."""
        if self.members is None:
            member = np.flatnonzero(self.row_class >= 0)
            return member, self.row_class[member].astype(np.intp), np.asarray(self.row_scale, float)[member]
        members = self.members.tocsr()
        members.sort_indices()
        return (np.repeat(np.arange(members.shape[0], dtype=np.intp), np.diff(members.indptr)),
                members.indices.astype(np.intp), members.data.astype(float))

    def triplets(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(class, link, weight) of every class entry, in class and link order. The link and weight
        arrays may be the class weights' own (:func:`_memberships` copies them into its arrays)."""
        weights = self.class_weights
        if not (sp.issparse(weights) and weights.format == "csr" and weights.dtype == np.float64
                and weights.has_canonical_format):  # a canonical CSR is read as it is: no private copy
            weights = _csr("class_weights", weights, (None, None), dtype=np.float64)
        if not np.all(np.isfinite(weights.data) & (weights.data > 0)):
            raise SimulationError("class_weights: expected every stored weight finite and > 0")
        return (np.repeat(np.arange(weights.shape[0], dtype=np.intp), np.diff(weights.indptr)),
                weights.indices, weights.data)


def _run_starts(owner: np.ndarray) -> np.ndarray:
    """Where each run of equal values of ``owner`` (sorted) starts."""
    if not len(owner):
        return np.zeros(0, np.intp)
    return np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])


def _run_reduce(ufunc: np.ufunc, values: np.ndarray, owner: np.ndarray, n_owners: int, empty: float,
                start: np.ndarray | None = None) -> np.ndarray:
    """``ufunc`` over each owner's contiguous run of ``values`` (``owner`` sorted); ``empty`` for owners
    without any. ``start``: the runs' starts (:func:`_run_starts`), when the caller reuses them."""
    out = np.full(n_owners, empty)
    if len(owner):
        start = _run_starts(owner) if start is None else start
        out[owner[start]] = ufunc.reduceat(values, start)
    return out


def _memberships(parts: tuple[SharedWeights, ...]) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray],
                                                               tuple[np.ndarray, np.ndarray, np.ndarray], int]:
    """((row, class, scale) memberships sorted by row, (class, link, weight) triplets, classes) of
    shared parts, the classes of part k numbered after those of parts 0..k-1: a row may belong to one
    class of each part (an all-to-all group crosses its leaves' split, its sources' and its
    destinations' averaged sides)."""
    rows, classes, scales = [], [], []
    parts_triplets = [part.triplets() for part in parts]
    # the class triplets written into one set of arrays part by part (no per-part copies to concatenate)
    n_entries = sum(len(of) for of, _, _ in parts_triplets)
    triplets = (np.empty(n_entries, np.intp), np.empty(n_entries, np.intp), np.empty(n_entries))
    offset = at = 0
    for part, (of, link, w) in zip(parts, parts_triplets, strict=True):
        member, of_class, scale = part.memberships()
        rows.append(member)
        classes.append(of_class + offset)
        scales.append(scale)
        np.add(of, offset, out=triplets[0][at:at + len(of)])
        triplets[1][at:at + len(of)], triplets[2][at:at + len(of)] = link, w
        offset += int(part.class_weights.shape[0])
        at += len(of)
    if len(parts) == 1:  # each part's memberships are in row order already
        return (rows[0], classes[0], scales[0]), triplets, offset
    # merged in row order, a row's memberships part by part (a stable sort of the parts' concatenation), by
    # counting: each membership's place is its row's start, plus the row's memberships in earlier parts,
    # plus its rank among its row's in its own part
    n_rows = len(parts[0].row_class)
    counts = [np.bincount(row, minlength=n_rows) for row in rows]
    total = np.sum(counts, axis=0)
    earlier = np.cumsum(total) - total
    m_row = np.repeat(np.arange(n_rows, dtype=np.intp), total)
    m_class, m_scale = np.empty(len(m_row), np.intp), np.empty(len(m_row))
    for row, of_class, scale, count in zip(rows, classes, scales, counts, strict=True):
        at = earlier[row] + np.arange(len(row)) - (np.cumsum(count) - count)[row]
        m_class[at], m_scale[at] = of_class, scale
        earlier += count
    return (m_row, m_class, m_scale), triplets, offset


def _progressive_fill_shared(own: tuple[np.ndarray, np.ndarray, np.ndarray],
                             members: tuple[np.ndarray, np.ndarray, np.ndarray],
                             class_triplets: tuple[np.ndarray, np.ndarray, np.ndarray], n_classes: int,
                             capacity_Bps: np.ndarray, cap_Bps: np.ndarray, unfrozen: np.ndarray) -> MaxMinSolution:
    """:func:`_progressive_fill` over own triplets plus the classes' shared ones; consumes ``unfrozen``.

    The same iteration, with each class's sums taken once: a link's unfrozen weight gets the
    class weight x the scale of the class's unfrozen flows; a flow's lowest link level is the
    lower of its own links' and its classes'; a link is final unless a flow on it stops below its
    level, and on a class link that is the class's lowest unfrozen flow level. Only the summation
    order differs from the expanded solve, so rates agree to rounding. ``members``: (row, class,
    scale) sorted by row (see :func:`_memberships`).
    """
    flow_of, link_of, weight = own
    m_row, m_class, m_scale = members
    c_of, c_link, c_w = class_triplets
    n_flows, n_links = cap_Bps.shape[0], capacity_Bps.shape[0]
    rate_Bps = np.zeros(n_flows)
    bottleneck = np.full(n_flows, NOT_TRANSMITTING, dtype=np.int64)
    frozen_load_Bps = np.zeros(n_links)
    iterations = 0
    while unfrozen.any():
        iterations += 1
        keep = unfrozen[flow_of]
        if not keep.all():  # the first iteration keeps every triplet: no copies of millions
            flow_of, link_of, weight = flow_of[keep], link_of[keep], weight[keep]
        live = unfrozen[m_row]
        if not live.all():
            m_row, m_class, m_scale = m_row[live], m_class[live], m_scale[live]
        class_scale = np.bincount(m_class, weights=m_scale, minlength=n_classes)
        live_class = np.bincount(m_class, minlength=n_classes) > 0
        keep_c = live_class[c_of]
        if not keep_c.all():
            c_of, c_link, c_w = c_of[keep_c], c_link[keep_c], c_w[keep_c]
        # each owner's runs found once per iteration, for both reductions over it
        flow_start, m_start, c_start = _run_starts(flow_of), _run_starts(m_row), _run_starts(c_of)
        unfrozen_weight = (np.bincount(link_of, weights=weight, minlength=n_links)
                           + np.bincount(c_link, weights=c_w * class_scale[c_of], minlength=n_links))
        crossed = unfrozen_weight > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            link_level_Bps = np.where(crossed, (capacity_Bps - frozen_load_Bps) / unfrozen_weight, np.inf)
        triplet_level_Bps, c_level_Bps = link_level_Bps[link_of], link_level_Bps[c_link]
        class_level_Bps = _run_reduce(np.minimum, c_level_Bps, c_of, n_classes, np.inf, c_start)
        flow_link_level_Bps = np.minimum(
            _run_reduce(np.minimum, triplet_level_Bps, flow_of, n_flows, np.inf, flow_start),
            _run_reduce(np.minimum, class_level_Bps[m_class], m_row, n_flows, np.inf, m_start))
        flow_level_Bps = np.minimum(flow_link_level_Bps, cap_Bps)

        class_min_level_Bps = np.full(n_classes, np.inf)
        np.minimum.at(class_min_level_Bps, m_class, flow_level_Bps[m_row])
        # a link with a flow (or class) on it that stops below the link's level is not final yet
        below = np.zeros(n_links, bool)
        below[link_of[triplet_level_Bps > (flow_level_Bps * (1.0 + _LEVEL_RTOL))[flow_of]]] = True
        below[c_link[c_level_Bps > (class_min_level_Bps * (1.0 + _LEVEL_RTOL))[c_of]]] = True
        final_link = crossed & ~below
        cap_frozen = unfrozen & (cap_Bps <= flow_link_level_Bps * (1.0 + _LEVEL_RTOL))
        class_final = _run_reduce(np.minimum, np.where(final_link[c_link], c_link, n_links), c_of, n_classes, n_links,
                                  c_start)
        lowest_final = np.minimum(
            _run_reduce(np.minimum, np.where(final_link[link_of], link_of, n_links), flow_of, n_flows, n_links,
                        flow_start),
            _run_reduce(np.minimum, class_final[m_class], m_row, n_flows, n_links, m_start)).astype(np.int64)
        link_frozen = unfrozen & ~cap_frozen & (lowest_final < n_links)
        newly = cap_frozen | link_frozen

        newly_rate_Bps = np.where(newly, flow_level_Bps, 0.0)
        rate_Bps += newly_rate_Bps
        bottleneck[cap_frozen] = CAP_LIMITED
        bottleneck[link_frozen] = lowest_final[link_frozen]
        unfrozen &= ~newly
        if not unfrozen.any():
            break  # the links' frozen load is read only by a next iteration
        class_rate_Bps = np.bincount(m_class, weights=m_scale * newly_rate_Bps[m_row], minlength=n_classes)
        frozen_load_Bps += (np.bincount(link_of, weights=weight * newly_rate_Bps[flow_of], minlength=n_links)
                            + np.bincount(c_link, weights=c_w * class_rate_Bps[c_of], minlength=n_links))
    return MaxMinSolution(rate_Bps=rate_Bps, bottleneck_link=bottleneck, iterations=iterations)


class MaxMinSolver:
    """Weighted max-min fair rates over a fixed flow x link incidence matrix.

    Validates the matrix once and keeps its nonzeros as (flow, link, weight) triplets, so
    repeated solves — with different active flows or caps — pay nothing but the filling.
    The filling freezes every independent bottleneck in the same iteration (see the notes
    of :func:`max_min_rates`); an iteration costs a few scatters over the nonzeros.

    Parameters
    ----------
    link_weights_csr : scipy.sparse matrix
        ``(F, L)`` weights, as in :attr:`FlowSet.link_weights`.
    capacity_Bps : numpy.ndarray
        ``(L,)`` link capacities in bytes/s, > 0.
    shared : SharedWeights or a sequence of them, optional
        More weights that classes of flows share, solved per class (see :class:`SharedWeights`);
        with several parts a flow may belong to one class of each.
    borrow : bool
        Read ``link_weights_csr`` in place when it already is a canonical float64 CSR matrix (sorted
        indices, no duplicates) instead of copying it: for a one-shot solve (:func:`max_min_rates`), whose
        caller does not change the matrix while the solver lives (84 M entries at 131,072 GPUs: 1 GB).

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> solver = MaxMinSolver(sp.csr_matrix(np.ones((2, 1))), np.array([10.0]))
    >>> solution = solver.solve()
    >>> solution.rate_Bps.tolist(), solution.bottleneck_link.tolist(), solution.iterations
    ([5.0, 5.0], [0, 0], 1)
    """

    def __init__(self, link_weights_csr: sp.spmatrix, capacity_Bps: np.ndarray,
                 shared: SharedWeights | Sequence[SharedWeights] | None = None, *, borrow: bool = False) -> None:
        capacity_Bps = _vector("capacity_Bps", capacity_Bps, None)
        _require("capacity_Bps", capacity_Bps, np.isfinite(capacity_Bps) & (capacity_Bps > 0),
                 "a finite capacity > 0 bytes/s")
        weights = _csr("link_weights", link_weights_csr, (None, capacity_Bps.shape[0]), dtype=np.float64,
                       borrow=borrow)
        if not np.all(np.isfinite(weights.data) & (weights.data > 0)):
            raise SimulationError("link_weights: expected every stored weight finite and > 0")
        row_lengths = np.diff(weights.indptr)
        # the matrix's own arrays: the compiled filling reads CSR rows (4-byte link ids), the shared one
        # triplets (built below only for it)
        self._indptr, self._link_of, self._weight = weights.indptr, weights.indices, weights.data
        self._capacity_Bps = capacity_Bps
        self._has_links = row_lengths > 0
        self._shape = weights.shape
        parts = () if shared is None else (shared,) if isinstance(shared, SharedWeights) else tuple(shared)
        self._shared: tuple[tuple[np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray],
                            int] | None = None
        for part in parts:
            n_classes = int(part.class_weights.shape[0])
            if part.class_weights.shape[1] != capacity_Bps.shape[0] or np.shape(part.row_class) != (weights.shape[0],) \
                    or np.shape(part.row_scale) != (weights.shape[0],) \
                    or (part.members is not None and part.members.shape != (weights.shape[0], n_classes)):
                raise SimulationError(f"shared: expected row_class and row_scale of shape ({weights.shape[0]},), "
                                      f"members of shape ({weights.shape[0]}, classes) and "
                                      f"class_weights of {capacity_Bps.shape[0]} columns")
            if (part.row_class >= n_classes).any():
                raise SimulationError(f"shared.row_class: expected class ids below {n_classes} (or -1)")
            class_links = np.diff(part.class_weights.indptr) > 0
            m_row, m_class, m_scale = part.memberships()
            if not np.all(np.isfinite(m_scale) & (m_scale > 0)):
                raise SimulationError("shared.members: expected every stored scale finite and > 0")
            self._has_links[m_row[class_links[m_class]]] = True
        if parts:
            self._shared = _memberships(parts)
            self._flow_of = np.repeat(np.arange(weights.shape[0], dtype=np.intp), row_lengths)
            self._link_of = self._link_of.astype(np.intp)

    @property
    def n_flows(self) -> int:
        return int(self._shape[0])

    @property
    def n_links(self) -> int:
        return int(self._shape[1])

    def solve(self, rate_cap_Bps: np.ndarray | None = None, active: np.ndarray | None = None) -> MaxMinSolution:
        """Solve for the flows in ``active`` (default all) under ``rate_cap_Bps`` (default none).

        Raises
        ------
        SimulationError
            If an active flow crosses no link and has no cap: its rate would be infinite.
        """
        n_flows = self.n_flows
        if rate_cap_Bps is None:
            cap_Bps = np.full(n_flows, np.inf)
        else:
            cap_Bps = _vector("rate_cap_Bps", rate_cap_Bps, n_flows)
            _require("rate_cap_Bps", cap_Bps, cap_Bps > 0, "a rate cap > 0 bytes/s (inf for none)")
        if active is None:
            unfrozen = np.ones(n_flows, dtype=bool)
        else:
            unfrozen = np.array(active, dtype=bool, copy=True)
            if unfrozen.shape != (n_flows,):
                raise SimulationError(f"active: got shape {unfrozen.shape}; expected ({n_flows},)")
        unbounded = unfrozen & ~self._has_links & np.isinf(cap_Bps)
        if unbounded.any():
            f = int(np.flatnonzero(unbounded)[0])
            raise SimulationError(
                f"flow {f} crosses no link and has no rate cap: its rate would be infinite",
                hint="give the flow a path (link_weights row) or a finite rate_cap_Bps, or make its size 0",
            )
        return self._solve(cap_Bps, unfrozen)

    def _solve(self, cap_Bps: np.ndarray, unfrozen: np.ndarray) -> MaxMinSolution:
        """:meth:`solve` without input checks; consumes ``unfrozen``."""
        if self._shared is not None:
            members, class_triplets, n_classes = self._shared
            return _progressive_fill_shared((self._flow_of, self._link_of, self._weight), members, class_triplets,
                                            n_classes, self._capacity_Bps, cap_Bps, unfrozen)
        return _progressive_fill_rows(self._indptr, self._link_of, self._weight, self._capacity_Bps, cap_Bps,
                                      unfrozen)


def max_min_rates(
    link_weights_csr: sp.spmatrix,
    capacity_Bps: np.ndarray,
    rate_cap_Bps: np.ndarray | None = None,
    active: np.ndarray | None = None,
    shared: SharedWeights | Sequence[SharedWeights] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """One weighted max-min fair solve.

    Link ``l`` carries ``sum_f w_fl * r_f <= c_l``. All unfrozen flows rise together; a
    link that saturates freezes every flow crossing it, a cap that is reached freezes its
    flow. The result is the unique allocation in which every flow below its cap crosses a
    saturated link on which no flow has a higher rate (compare rates ``r_f``, not
    ``w_fl * r_f``: a flow split over four paths is as fair as one on a single path).

    Parameters
    ----------
    link_weights_csr : scipy.sparse matrix
        ``(F, L)`` weight of each flow on each link (see :class:`FlowSet`).
    capacity_Bps : numpy.ndarray
        ``(L,)`` link capacities in bytes/s.
    rate_cap_Bps : numpy.ndarray, optional
        ``(F,)`` per-flow rate caps in bytes/s (``inf`` = none).
    active : numpy.ndarray, optional
        ``(F,)`` boolean mask of the flows that take part; the others get rate 0.
    shared : SharedWeights or a sequence of them, optional
        Weights shared by classes of flows, added to ``link_weights_csr`` (see :class:`SharedWeights`);
        with several parts a flow may belong to one class of each.

    Returns
    -------
    rate_Bps : numpy.ndarray
        ``(F,)`` rates in bytes/s, 0 for inactive flows.
    bottleneck_link : numpy.ndarray
        ``(F,)`` int64 link id that limited each flow, ``-1`` if its own cap did, ``-2`` if inactive.

    See Also
    --------
    MaxMinSolver : the same solve, reusable, and reporting the iteration count.

    Notes
    -----
    The *level* of a link is ``(c_l - load of frozen flows) / (weight of unfrozen flows)``:
    the rate its unfrozen flows reach when it saturates, unless one of them freezes first.
    Levels only rise as flows freeze. So a link whose level is not above the level of any
    link or cap that its unfrozen flows touch saturates at exactly that level, and a flow
    whose cap is not above any of its links' levels stops at its cap. Each iteration freezes
    all of those at once; classic progressive filling freezes only the global minimum and
    needs one iteration per distinct rate. Levels within a relative ``1e-12`` of each other
    count as equal, which only absorbs rounding.

    Examples
    --------
    The classic example: A crosses l0 and l1, B only l0, C only l1.

    >>> import numpy as np, scipy.sparse as sp
    >>> weights = sp.csr_matrix(np.array([[1.0, 1.0], [1.0, 0.0], [0.0, 1.0]]))
    >>> rate_Bps, bottleneck = max_min_rates(weights, np.array([10.0, 4.0]))
    >>> rate_Bps.tolist(), bottleneck.tolist()
    ([2.0, 8.0, 2.0], [1, 0, 1])
    """
    solution = MaxMinSolver(link_weights_csr, capacity_Bps, shared, borrow=True).solve(rate_cap_Bps, active)
    return solution.rate_Bps, solution.bottleneck_link


# --------------------------------------------------------------------------------------------
# results


@dataclass(frozen=True, eq=False)
class StepLog:
    """Piecewise-constant rates of many columns (flows or links), stored as changes.

    Entry ``i`` says: from interval ``interval[i]`` on, column ``index[i]`` runs at
    ``rate_Bps[i]``, until that column's next entry or the end of the timeline. A column
    with no entry runs at 0 throughout. Within a column, entries are in interval order.

    Examples
    --------
    >>> import numpy as np
    >>> log = StepLog(np.array([0, 1]), np.array([0, 0]), np.array([4.0, 0.0]))
    >>> timeline_s = np.array([0.0, 2.0, 3.0])
    >>> log.to_csr(2, 1).toarray().ravel().tolist(), log.integral_bytes(timeline_s, 1).tolist()
    ([4.0, 0.0], [8.0])
    """

    interval: np.ndarray
    index: np.ndarray
    rate_Bps: np.ndarray

    def _spans(self, n_intervals: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(index, first interval, stop interval, rate)`` of each entry, sorted by column."""
        order = np.argsort(self.index, kind="stable")  # stable: keeps interval order per column
        index = self.index[order]
        first = self.interval[order]
        stop = np.full(first.shape, n_intervals, dtype=np.int64)
        same_column = index[1:] == index[:-1]
        stop[:-1] = np.where(same_column, first[1:], n_intervals)
        return index, first, stop, self.rate_Bps[order]

    def to_csr(self, n_intervals: int, n_columns: int) -> sp.csr_matrix:
        """The ``(n_intervals, n_columns)`` matrix of rates, one row per interval."""
        index, first, stop, rate_Bps = self._spans(n_intervals)
        keep = (rate_Bps != 0) & (stop > first)
        index, first, stop, rate_Bps = index[keep], first[keep], stop[keep], rate_Bps[keep]
        lengths = stop - first
        total = int(lengths.sum())
        offsets = np.cumsum(lengths) - lengths
        rows = np.arange(total, dtype=np.int64) + np.repeat(first - offsets, lengths)
        matrix = sp.csr_matrix(
            (np.repeat(rate_Bps, lengths), (rows, np.repeat(index, lengths))),
            shape=(n_intervals, n_columns),
        )
        matrix.sort_indices()
        return matrix

    def integral_bytes(
        self, timeline_s: np.ndarray, n_columns: int, t0_s: float | None = None, t1_s: float | None = None
    ) -> np.ndarray:
        """``(n_columns,)`` integral of each column's rate over ``[t0_s, t1_s]`` (default: the whole timeline)."""
        n_intervals = timeline_s.shape[0] - 1
        index, first, stop, rate_Bps = self._spans(n_intervals)
        lo_s = timeline_s[0] if t0_s is None else t0_s
        hi_s = timeline_s[-1] if t1_s is None else t1_s
        overlap_s = np.clip(np.minimum(timeline_s[stop], hi_s) - np.maximum(timeline_s[first], lo_s), 0.0, None)
        return np.bincount(index, weights=rate_Bps * overlap_s, minlength=n_columns)

    def peak_Bps(self, n_columns: int) -> np.ndarray:
        """``(n_columns,)`` highest rate of each column."""
        peak = np.zeros(n_columns)
        np.maximum.at(peak, self.index, self.rate_Bps)
        return peak


@dataclass(frozen=True, eq=False)
class FlowResult:
    """What a :class:`FlowEngine` run produced. Pure data; every metric is post-processing.

    Attributes
    ----------
    start_s, tx_end_s, finish_s : numpy.ndarray
        ``(F,)`` when each flow started transmitting, sent its last byte, and had its last
        byte delivered (``tx_end_s + path_latency_s``).
    mean_rate_Bps : numpy.ndarray
        ``(F,)`` ``size / (tx_end - start)``; 0 for flows that took no time.
    bottleneck_link : numpy.ndarray
        ``(F,)`` int64 link that limited the flow for the largest share of its bytes;
        ``-1`` = its own rate cap, ``-2`` = it never transmitted (zero size).
    link_bytes : numpy.ndarray
        ``(L,)`` bytes that crossed each link (the integral of its rate).
    timeline_s : numpy.ndarray
        ``(T+1,)`` event times bounding the ``T`` intervals of constant rates, from the
        first start to the last end of transmission.
    link_rate_log, flow_rate_log : StepLog
        Changes of each link's and each flow's rate, per interval. The ``(T, L)`` and
        ``(T, F)`` matrices :attr:`link_rate_Bps` and :attr:`flow_rate_Bps` are built from
        them on first use; :attr:`flow_bytes` and the utilization methods read them directly.
        In the interval where a flow ends, its rate is exactly what sends its last bytes.
    counters : dict
        Work the engine did: ``intervals``, ``rate_updates``, ``local_updates`` (updates
        settled by a local re-solve), ``local_rounds``, ``full_solves``,
        ``full_solve_iterations``. For profiling; not part of the simulated outcome.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> links = LinkTable(np.array([10.0]), np.array([0.0]))
    >>> result = FlowEngine(links).run(FlowSet(np.array([10.0]), sp.csr_matrix(np.ones((1, 1)))))
    >>> result.link_mean_utilization(links.capacity_Bps, 0.0, 2.0).tolist(), result.makespan_s
    ([0.5], 1.0)
    """

    start_s: np.ndarray
    tx_end_s: np.ndarray
    finish_s: np.ndarray
    mean_rate_Bps: np.ndarray
    bottleneck_link: np.ndarray
    link_bytes: np.ndarray
    timeline_s: np.ndarray
    link_rate_log: StepLog
    flow_rate_log: StepLog
    counters: dict[str, int] = field(default_factory=dict)

    @property
    def n_intervals(self) -> int:
        return int(self.timeline_s.shape[0] - 1)

    @property
    def n_flows(self) -> int:
        return int(self.start_s.shape[0])

    @property
    def n_links(self) -> int:
        return int(self.link_bytes.shape[0])

    @property
    def makespan_s(self) -> float:
        """Time the last byte of the last flow is delivered (0 with no flows)."""
        return float(self.finish_s.max(initial=0.0))

    @cached_property
    def link_rate_Bps(self) -> sp.csr_matrix:
        """``(T, L)`` rate of each link in each interval. Built on first use: it can be large."""
        return self.link_rate_log.to_csr(self.n_intervals, self.n_links)

    @cached_property
    def flow_rate_Bps(self) -> sp.csr_matrix:
        """``(T, F)`` rate of each flow in each interval. Built on first use: it can be large."""
        return self.flow_rate_log.to_csr(self.n_intervals, self.n_flows)

    @property
    def flow_bytes(self) -> np.ndarray:
        """``(F,)`` bytes each flow sent (the integral of its rate); equals its size."""
        return self.flow_rate_log.integral_bytes(self.timeline_s, self.n_flows)

    def link_utilization(self, capacity_Bps: np.ndarray) -> sp.csr_matrix:
        """``(T, L)`` link rate / capacity in each interval."""
        inverse = sp.diags(1.0 / _vector("capacity_Bps", capacity_Bps, self.n_links))
        return (self.link_rate_Bps @ inverse).tocsr()

    def link_peak_utilization(self, capacity_Bps: np.ndarray) -> np.ndarray:
        """``(L,)`` highest rate / capacity of each link over the run."""
        return self.link_rate_log.peak_Bps(self.n_links) / _vector("capacity_Bps", capacity_Bps, self.n_links)

    def link_mean_utilization(
        self, capacity_Bps: np.ndarray, t0_s: float | None = None, t1_s: float | None = None
    ) -> np.ndarray:
        """``(L,)`` bytes carried in ``[t0_s, t1_s]`` / (capacity x duration); default: the whole timeline."""
        capacity_Bps = _vector("capacity_Bps", capacity_Bps, self.n_links)
        lo_s = float(self.timeline_s[0]) if t0_s is None else float(t0_s)
        hi_s = float(self.timeline_s[-1]) if t1_s is None else float(t1_s)
        if hi_s <= lo_s:
            return np.zeros(self.n_links)
        carried_bytes = self.link_rate_log.integral_bytes(self.timeline_s, self.n_links, lo_s, hi_s)
        return carried_bytes / (capacity_Bps * (hi_s - lo_s))


# --------------------------------------------------------------------------------------------
# the engine


def _check_acyclic(depends_on: sp.csr_matrix) -> None:
    """Raise naming a flow on a dependency cycle, if there is one."""
    n_flows = depends_on.shape[0]
    if depends_on.nnz == 0:
        return
    self_loops = np.flatnonzero(depends_on.diagonal())
    n_components, label = connected_components(depends_on, directed=True, connection="strong")
    component_size = np.bincount(label, minlength=n_components)
    on_cycle = np.flatnonzero(component_size[label] > 1)
    if self_loops.size == 0 and on_cycle.size == 0:
        return
    if self_loops.size and (on_cycle.size == 0 or self_loops[0] < on_cycle[0]):
        f = int(self_loops[0])
        raise SimulationError(f"flow {f} depends on itself, so it can never start",
                              hint="remove the diagonal entry of depends_on")
    f = int(on_cycle[0])
    members = np.flatnonzero(label == label[f])
    shown = ", ".join(str(int(g)) for g in members[:8]) + (", ..." if members.size > 8 else "")
    raise SimulationError(
        f"flow {f} is on a dependency cycle (flows {shown} wait for each other) and can never start",
        hint=f"depends_on must be acyclic; {n_flows} flows, {members.size} in this cycle",
    )


def _columns_to_links(log: StepLog, n_intervals: int, weights: sp.csr_matrix, weights_t: sp.csr_matrix) -> StepLog:
    """Link rate changes implied by the rate changes of ``weights``' rows (flows or classes).

    A link's rate can change only in an interval where one of its rows' rates does. At each
    such (link, interval) point the rate is summed afresh over the link's rows — never
    accumulated from differences — so an idle link reads exactly 0.
    """
    stride = n_intervals + 1
    by_flow = np.lexsort((log.interval, log.index))
    flow_key = log.index[by_flow] * stride + log.interval[by_flow]
    flow_rate_Bps = log.rate_Bps[by_flow]

    positions, lengths = _row_positions(weights.indptr, log.index)
    points = unique_sorted(weights.indices[positions].astype(np.int64) * stride + np.repeat(log.interval, lengths))
    point_link, point_interval = points // stride, points % stride
    link_rate_Bps = np.zeros(points.size)
    # Chunks bound the memory of the (point, row on its link) expansion.
    expansion = np.cumsum(np.diff(weights_t.indptr)[point_link])
    bounds = np.searchsorted(expansion, np.arange(_LINK_LOG_CHUNK, expansion[-1] if expansion.size else 0,
                                                  _LINK_LOG_CHUNK), side="right")
    for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, points.size]):
        if hi <= lo:
            continue
        positions_t, lengths_t = _row_positions(weights_t.indptr, point_link[lo:hi])
        flows = weights_t.indices[positions_t].astype(np.int64)
        # Each flow's rate at the point: its last logged change at or before that interval.
        entry = np.searchsorted(flow_key, flows * stride + np.repeat(point_interval[lo:hi], lengths_t),
                                side="right") - 1
        entry_ok = entry >= 0
        entry_ok[entry_ok] = flow_key[entry[entry_ok]] // stride == flows[entry_ok]
        rate_Bps = np.where(entry_ok, flow_rate_Bps[np.maximum(entry, 0)], 0.0)
        link_rate_Bps[lo:hi] = np.add.reduceat(weights_t.data[positions_t] * rate_Bps,
                                               np.cumsum(lengths_t) - lengths_t)
    previous_Bps = np.zeros(points.size)
    same_link = point_link[1:] == point_link[:-1]
    previous_Bps[1:] = np.where(same_link, link_rate_Bps[:-1], 0.0)
    keep = link_rate_Bps != previous_Bps
    return StepLog(point_interval[keep], point_link[keep], link_rate_Bps[keep])


def _value_at(log_key: np.ndarray, log_rate_Bps: np.ndarray, key: np.ndarray, stride: int) -> np.ndarray:
    """Rate of a log (``log_key`` = column x stride + interval, sorted) at each ``key``: its last entry at or before it, else 0."""
    if log_key.size == 0:
        return np.zeros(key.shape)
    entry = np.searchsorted(log_key, key, side="right") - 1
    ok = entry >= 0
    ok[ok] = log_key[entry[ok]] // stride == key[ok] // stride
    return np.where(ok, log_rate_Bps[np.maximum(entry, 0)], 0.0)


def _sum_logs(a: StepLog, b: StepLog, n_intervals: int) -> StepLog:
    """The column-wise sum of two logs over the same columns, summed afresh at every change point."""
    stride = n_intervals + 1
    keys_a = a.index.astype(np.int64) * stride + a.interval
    keys_b = b.index.astype(np.int64) * stride + b.interval
    order_a, order_b = np.argsort(keys_a, kind="stable"), np.argsort(keys_b, kind="stable")
    keys_a, rate_a_Bps, keys_b, rate_b_Bps = keys_a[order_a], a.rate_Bps[order_a], keys_b[order_b], b.rate_Bps[order_b]
    points = unique_sorted(np.r_[keys_a, keys_b])
    total_Bps = _value_at(keys_a, rate_a_Bps, points, stride) + _value_at(keys_b, rate_b_Bps, points, stride)
    column = points // stride
    previous_Bps = np.zeros(points.size)
    previous_Bps[1:] = np.where(column[1:] == column[:-1], total_Bps[:-1], 0.0)
    keep = total_Bps != previous_Bps
    return StepLog(points[keep] % stride, column[keep], total_Bps[keep])


class FlowEngine:
    """Event-driven fluid simulation of flows over directional links with max-min fair sharing.

    A flow starts at ``max(release time, latest finish of the flows it depends on)``,
    transmits at its max-min fair rate (recomputed whenever any flow starts or stops
    transmitting) until its bytes are sent, and finishes ``path_latency_s`` later. Its bytes
    occupy links only while it transmits. Events closer than ``time_rtol`` (relative) are
    processed together at the latest of them, so a flow never starts before it may and
    rounding never makes a flow's last bytes an event of their own.

    A plain object with no global state; one engine can run many flow sets, and runs never
    depend on each other. There is no randomness: identical inputs give bit-identical results.

    Parameters
    ----------
    links : LinkTable
        Capacities (and latencies) of the links that ``FlowSet.link_weights`` columns index.
    time_rtol : float, optional
        Relative tolerance for merging event times. Default ``1e-12``.
    reallocation : {"levels", "local", "full"}, optional
        How rates are updated at an event. ``"levels"`` (default) re-solves only the flows at or
        above the lowest level the event can move, connected to it (see
        :meth:`_Run._reallocate_levels`; compiled, one call per event); ``"local"`` re-solves a
        neighbourhood and checks the max-min conditions around it, falling back to a full solve;
        ``"full"`` solves every active flow at every event. All three give the same allocation to rounding; they
        differ in cost only (``counters["resolved_flows"]`` counts the flows re-solved).

    Examples
    --------
    Two flows share a 10 B/s link; the 10-byte one finishes at 2 s, the other then runs alone.

    >>> import numpy as np, scipy.sparse as sp
    >>> links = LinkTable(capacity_Bps=np.array([10.0]), latency_s=np.array([0.0]))
    >>> flows = FlowSet(size_bytes=np.array([10.0, 30.0]), link_weights=sp.csr_matrix(np.ones((2, 1))),
    ...                 path_latency_s=np.array([0.5, 0.5]))
    >>> result = FlowEngine(links).run(flows)
    >>> result.tx_end_s.tolist(), result.finish_s.tolist(), result.timeline_s.tolist()
    ([2.0, 4.0], [2.5, 4.5], [0.0, 2.0, 4.0])
    """

    def __init__(self, links: LinkTable, *, time_rtol: float = 1e-12, reallocation: str = "levels") -> None:
        if not isinstance(links, LinkTable):
            raise SimulationError(f"links: got {type(links).__name__}; expected a LinkTable")
        if not (0.0 <= time_rtol < 1e-3):
            raise SimulationError(f"time_rtol = {time_rtol!r}: expected a small relative tolerance in [0, 1e-3)")
        if reallocation not in _REALLOCATIONS:
            raise SimulationError(f"reallocation = {reallocation!r}: expected one of {', '.join(_REALLOCATIONS)}")
        self.links = links
        self.time_rtol = float(time_rtol)
        self.reallocation = reallocation

    def run(self, flows: FlowSet) -> FlowResult:
        """Simulate ``flows`` to completion.

        Raises
        ------
        SimulationError
            If the flow set indexes a different number of links than the table holds, if
            dependencies form a cycle, or if a flow with bytes to send crosses no link and
            has no rate cap.
        """
        if not isinstance(flows, FlowSet):
            raise SimulationError(f"flows: got {type(flows).__name__}; expected a FlowSet")
        if flows.n_links != self.links.n_links:
            raise SimulationError(
                f"link_weights: has {flows.n_links} columns but the LinkTable holds {self.links.n_links} links",
                hint="build the FlowSet and the LinkTable from the same topology",
            )
        unbounded = (flows.links_per_flow() == 0) & np.isinf(flows.rate_cap_Bps) & (flows.size_bytes > 0)
        if unbounded.any():
            f = int(np.flatnonzero(unbounded)[0])
            raise SimulationError(
                f"flow {f} crosses no link and has no rate cap: its rate would be infinite",
                hint="give the flow a path (link_weights row) or a finite rate_cap_Bps, or make its size 0",
            )
        _check_acyclic(flows.depends_on)
        return _Run(flows, self.links, self.time_rtol, self.reallocation).result()


class _Run:
    """The mutable state of one run; lives only inside :meth:`FlowEngine.run`.

    Rates are kept up to date incrementally (the default ``"levels"``: :meth:`_reallocate_levels`).
    The ``"local"`` scheme re-solves the flows near an event (their neighbours' rates held
    fixed as background load), then checks the max-min conditions on every flow that shares a
    link with a rate that moved. A flow failing the check joins the re-solved group with its
    neighbours, and when the group grows past :data:`_LOCAL_MAX_SHARE` of the active flows a
    full solve takes over. The accepted allocation always passes the check, and the check
    characterises the (unique) weighted max-min allocation, so the shortcut changes cost, never
    results beyond ``_CHECK_RTOL``. Runs with classes (``FlowSet.shared``) re-solve in full.
    """

    def __init__(self, flows: FlowSet, links: LinkTable, time_rtol: float, reallocation: str = "levels") -> None:
        self.time_rtol = time_rtol
        self.reallocation = reallocation
        self.n_flows = flows.n_flows
        self.n_links = links.n_links
        self.size_bytes = flows.size_bytes
        self.rate_cap_Bps = flows.rate_cap_Bps
        self.path_latency_s = flows.path_latency_s

        # Solve over the links some flow uses only: a big fabric with a small job would
        # otherwise pay for every idle link at every full solve.
        weights = flows.link_weights
        shared = flows.shared
        self.used_links = unique_sorted(weights.indices if shared is None
                                    else np.r_[weights.indices, shared.class_weights.indices]).astype(np.int64)
        self.weights = self._compact(weights)
        self.capacity_Bps = links.capacity_Bps[self.used_links]
        self.weights_t = self.weights.T.tocsr()
        # Classes (see SharedWeights): solved per class, every event re-solved in full (the local
        # shortcut below walks per-flow neighbourhoods, which a class's links would make huge).
        self.shared: SharedWeights | None = None
        if shared is not None:
            self.shared = SharedWeights(shared.row_class, shared.row_scale, self._compact(shared.class_weights))
            self.class_weights_t = self.shared.class_weights.T.tocsr()
            member = np.flatnonzero(shared.row_class >= 0)
            order = np.argsort(shared.row_class[member], kind="stable")
            n_classes = shared.class_weights.shape[0]
            # members_of: row c lists the flows of class c
            self.members_of = sp.csr_matrix(
                (shared.row_scale[member[order]], member[order],
                 np.r_[0, np.cumsum(np.bincount(shared.row_class[member], minlength=n_classes))]),
                shape=(n_classes, self.n_flows))
            self.recorded_class_rate_Bps = np.zeros(n_classes)
            self.class_log: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.solver = MaxMinSolver(self.weights, self.capacity_Bps, self.shared)
        self.in_group = np.zeros(self.n_flows, dtype=bool)  # scratch mask, always left all False
        # The level search's CSR arrays (flow -> links, link -> flows) and marks, in the types its
        # compiled code is built for.
        self.flow_links = (self.weights.indptr.astype(np.int64), self.weights.indices.astype(np.int64),
                           self.weights.data.astype(np.float64))
        self.link_flows = (self.weights_t.indptr.astype(np.int64), self.weights_t.indices.astype(np.int64),
                           self.weights_t.data.astype(np.float64))
        self.scratch = Scratch(self.n_flows, self.used_links.shape[0])

        # dependents_of: row g lists the flows waiting for g.
        self.dependents_of = flows.depends_on.T.tocsr()
        self.pending_deps = np.diff(flows.depends_on.indptr).astype(np.int64)
        self.ready_s = flows.release_time_s.copy()

        self.state = np.full(self.n_flows, _WAITING, dtype=np.int8)
        self.active = np.zeros(self.n_flows, dtype=bool)
        self.rate_Bps = np.zeros(self.n_flows)
        self.bottleneck = np.full(self.n_flows, NOT_TRANSMITTING, dtype=np.int64)
        self.start_s = np.full(self.n_flows, np.nan)
        self.tx_end_s = np.full(self.n_flows, np.nan)
        self.finish_s = np.full(self.n_flows, np.nan)
        self.remaining_bytes = flows.size_bytes.copy()

        self.timeline_s: list[float] = []
        self.flow_log: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self.dirty: list[np.ndarray] = []  # flows whose rate or bottleneck changed since the last record
        self.recorded_rate_Bps = np.zeros(self.n_flows)
        self.recorded_bottleneck = np.full(self.n_flows, NOT_TRANSMITTING, dtype=np.int64)
        self.counters = {"intervals": 0, "rate_updates": 0, "local_updates": 0, "local_rounds": 0,
                         "full_solves": 0, "full_solve_iterations": 0, "level_updates": 0,
                         "resolved_flows": 0, "max_resolved_flows": 0, "changed_flows": 0}

    def _compact(self, weights: sp.csr_matrix) -> sp.csr_matrix:
        """``weights`` with columns renumbered to :attr:`used_links` positions."""
        return sp.csr_matrix((weights.data, np.searchsorted(self.used_links, weights.indices), weights.indptr),
                             shape=(weights.shape[0], self.used_links.shape[0]))

    # -- neighbourhoods ------------------------------------------------------------------------

    def _links_of(self, flows: np.ndarray) -> np.ndarray:
        positions, _ = _row_positions(self.weights.indptr, flows)
        return unique_sorted(self.weights.indices[positions])

    def _active_flows_on(self, links: np.ndarray) -> np.ndarray:
        positions, _ = _row_positions(self.weights_t.indptr, links)
        flows = unique_sorted(self.weights_t.indices[positions])
        return flows[self.active[flows]]

    # -- rates -------------------------------------------------------------------------------

    def _solve_group(self, group: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Max-min rates of ``group`` in the capacity the other active flows leave.

        Also returns the active flows that share a link with the group: the only flows
        whose max-min condition the new rates can break.
        """
        positions, lengths = _row_positions(self.weights.indptr, group)
        if group.size == 1:  # a CSR row is sorted and duplicate-free already
            links, local_link = self.weights.indices[positions], None
        else:
            links, local_link = np.unique(self.weights.indices[positions], return_inverse=True)
        residual_Bps = self.capacity_Bps[links].copy()
        neighbours = group
        if links.size:
            positions_t, lengths_t = _row_positions(self.weights_t.indptr, links)
            on_link = self.weights_t.indices[positions_t]
            self.in_group[group] = True
            outside = self.active[on_link] & ~self.in_group[on_link]
            self.in_group[group] = False
            load_Bps = np.where(outside, self.weights_t.data[positions_t] * self.rate_Bps[on_link], 0.0)
            residual_Bps -= np.add.reduceat(load_Bps, np.cumsum(lengths_t) - lengths_t)
            # Rounding can leave a saturated link a hair below zero; the check catches the rest.
            np.maximum(residual_Bps, 0.0, out=residual_Bps)
            neighbours = np.union1d(group, on_link[outside])
        if group.size == 1:  # alone, a flow takes the tightest of its links and its cap
            level_Bps = (residual_Bps / self.weights.data[positions]).min(initial=np.inf)
            return np.minimum(self.rate_cap_Bps[group], level_Bps), neighbours
        assert local_link is not None  # set by np.unique for a group of more than one
        flow_of = np.repeat(np.arange(group.size, dtype=np.intp), lengths)
        solution = _progressive_fill(flow_of, local_link.ravel().astype(np.intp), self.weights.data[positions],
                                     residual_Bps, self.rate_cap_Bps[group], np.ones(group.size, dtype=bool))
        return solution.rate_Bps, neighbours

    def _check(self, flows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For active ``flows``: does each satisfy the max-min condition, and its bottleneck.

        The condition: the flow is at its cap (bottleneck -1), or it crosses a saturated link
        on which no flow runs faster (bottleneck: the lowest such link).
        """
        positions, lengths = _row_positions(self.weights.indptr, flows)
        flow_links = self.weights.indices[positions].astype(np.int64)
        links, local_link = np.unique(flow_links, return_inverse=True)
        local_link = local_link.ravel()
        saturated = np.zeros(0, dtype=bool)
        top_rate_Bps = np.zeros(0)
        if links.size:
            positions_t, lengths_t = _row_positions(self.weights_t.indptr, links)
            offsets_t = np.cumsum(lengths_t) - lengths_t
            on_link = self.weights_t.indices[positions_t]
            rate_on_link_Bps = self.rate_Bps[on_link]  # 0 for inactive flows
            load_Bps = np.add.reduceat(self.weights_t.data[positions_t] * rate_on_link_Bps, offsets_t)
            top_rate_Bps = np.maximum.reduceat(rate_on_link_Bps, offsets_t)
            saturated = load_Bps >= self.capacity_Bps[links] * (1.0 - _CHECK_RTOL)
        rate_Bps = self.rate_Bps[flows]
        rate_per_link_Bps = np.repeat(rate_Bps, lengths)
        valid = saturated[local_link] & (rate_per_link_Bps >= top_rate_Bps[local_link] * (1.0 - _CHECK_RTOL))
        no_link = self.n_links  # larger than any compact link id
        bottleneck = np.full(flows.size, no_link, dtype=np.int64)
        has_links = lengths > 0
        if has_links.any():
            offsets = np.cumsum(lengths) - lengths
            bottleneck[has_links] = np.minimum.reduceat(np.where(valid, flow_links, no_link), offsets[has_links])
        capped = rate_Bps >= self.rate_cap_Bps[flows] * (1.0 - _CHECK_RTOL)
        ok = capped | (bottleneck < no_link)
        return ok, np.where(capped, CAP_LIMITED, bottleneck)

    def _reallocate(self, departed: np.ndarray, arrived: np.ndarray) -> np.ndarray:
        """Max-min rates after ``departed`` stopped and ``arrived`` started.

        Returns the flows whose rate or bottleneck changed.
        """
        self.active[departed] = False
        self.active[arrived] = True
        if departed.size == 0 and arrived.size == 0:
            return departed
        self.counters["rate_updates"] += 1
        if self.reallocation == "levels" and self.shared is None:
            # Compiled; reads the rates from before the event, so no copy of every flow's rate.
            return self._reallocate_levels(departed, arrived)
        old_rate_Bps = self.rate_Bps.copy()
        old_bottleneck = self.bottleneck.copy()
        self.rate_Bps[departed] = 0.0
        self.bottleneck[departed] = NOT_TRANSMITTING
        n_active = int(np.count_nonzero(self.active))
        if n_active == 0:
            return departed

        if self.shared is not None or self.reallocation == "full":
            return self._full_solve(old_rate_Bps, old_bottleneck)
        group = np.union1d(arrived, self._active_flows_on(self._links_of(np.concatenate([departed, arrived]))))
        if group.size == 0:  # the departed flows shared no link with a flow still sending
            self.counters["local_updates"] += 1
            return departed
        for _ in range(_LOCAL_MAX_ROUNDS):
            if group.size > _LOCAL_MAX_SHARE * n_active:
                break
            self.counters["local_rounds"] += 1
            self.counters["resolved_flows"] += int(group.size)
            self.counters["max_resolved_flows"] = max(self.counters["max_resolved_flows"], int(group.size))
            # Checking every neighbour of the group covers every flow on a link where a rate
            # moved: the departed flows' active neighbours are in the group from the start.
            self.rate_Bps[group], checked = self._solve_group(group)
            ok, bottleneck = self._check(checked)
            if ok.all():
                self.counters["local_updates"] += 1
                self.bottleneck[checked] = bottleneck
                candidates = np.concatenate([departed, checked])
                changed = (self.rate_Bps[candidates] != old_rate_Bps[candidates]) | (
                    self.bottleneck[candidates] != old_bottleneck[candidates])
                return candidates[changed]
            # The next round re-solves a larger group against the *old* rates of the rest.
            self.rate_Bps[group] = old_rate_Bps[group]
            failing = checked[~ok]
            grown = np.union1d(np.union1d(group, failing), self._active_flows_on(self._links_of(failing)))
            if grown.size == group.size:
                break
            group = grown
        return self._full_solve(old_rate_Bps, old_bottleneck)

    # -- level-based reallocation -------------------------------------------------------------

    def _reallocate_levels(self, departed: np.ndarray, arrived: np.ndarray) -> np.ndarray:
        """Re-solve only what the event can move; returns the flows whose rate or bottleneck changed.

        Progressive filling reaches every rate in increasing order. Below the level ``lam`` at
        which the event first changes the filling — the level of a saturated link a departed flow
        crossed (its own bottleneck's is its rate), or the level at which an arrival's link first
        saturates (the largest root of its concave load's linear pieces) — every trajectory is the
        old one, so every flow whose old rate is below ``lam`` keeps it. What is left is the
        max-min problem of the flows at or above ``lam`` in the capacity the others leave, and
        only flows connected to the event through saturated links can move in it (a breadth-first
        search from the event's links over links saturated before it).
        Those are solved in the capacity the rest leave. The result is the max-min allocation if
        every flow still meets the max-min condition (it crosses a saturated link on which no
        flow is faster, or runs at its cap): inside the group the solve makes it so; a flow
        outside keeps its rate and its saturated bottleneck, which no group flow crosses (it
        would have been reached). Only a link the new rates saturate that was not saturated
        before can break it, for a faster flow outside on it: such flows join and the group is
        solved again.
        """
        scratch = self.scratch
        group, rate_Bps, bottleneck, solved = reallocate_levels(
            departed, arrived, *self.flow_links, *self.link_flows, self.rate_Bps, self.active, self.capacity_Bps,
            self.rate_cap_Bps, scratch.in_group, scratch.visited, scratch.link_local, scratch.group, scratch.queue,
            _LEVEL_MARGIN, _LEVEL_RTOL, _CHECK_RTOL)
        self.counters["level_updates"] += 1
        self.counters["resolved_flows"] += solved
        self.counters["max_resolved_flows"] = max(self.counters["max_resolved_flows"], int(group.size))
        # A departed flow was sending (rate > 0): its rate and bottleneck always change.
        self.rate_Bps[departed] = 0.0
        self.bottleneck[departed] = NOT_TRANSMITTING
        if group.size == 0:
            return departed
        # A re-solved rate within the filling's own rounding tolerance of the old one (levels closer
        # than _LEVEL_RTOL are one level) is the old rate summed in another order: the flow keeps it,
        # so neither the rate logs nor the links' rates see a change that is only rounding.
        old_Bps = self.rate_Bps[group]
        rate_Bps = np.where(np.abs(rate_Bps - old_Bps) <= _LEVEL_RTOL * old_Bps, old_Bps, rate_Bps)
        moved = old_Bps != rate_Bps
        changed = moved | (self.bottleneck[group] != bottleneck)
        self.counters["changed_flows"] += int(np.count_nonzero(moved))
        self.rate_Bps[group], self.bottleneck[group] = rate_Bps, bottleneck
        return np.concatenate([departed, group[changed]])

    def _full_solve(self, old_rate_Bps: np.ndarray, old_bottleneck: np.ndarray) -> np.ndarray:
        """Solve every active flow afresh; returns the flows whose rate or bottleneck changed."""
        self.counters["full_solves"] += 1
        n_active = int(np.count_nonzero(self.active))
        self.counters["resolved_flows"] += n_active
        self.counters["max_resolved_flows"] = max(self.counters["max_resolved_flows"], n_active)
        solution = self.solver._solve(self.rate_cap_Bps, self.active.copy())
        self.counters["full_solve_iterations"] += solution.iterations
        self.rate_Bps = solution.rate_Bps
        self.bottleneck = solution.bottleneck_link
        return np.flatnonzero((self.rate_Bps != old_rate_Bps) | (self.bottleneck != old_bottleneck))

    # -- dependencies and starts ------------------------------------------------------------

    def _release_dependents(self, done_idx: np.ndarray) -> None:
        positions, lengths = _row_positions(self.dependents_of.indptr, done_idx)
        if positions.size == 0:
            return
        dependents = self.dependents_of.indices[positions]
        np.subtract.at(self.pending_deps, dependents, 1)
        np.maximum.at(self.ready_s, dependents, np.repeat(self.finish_s[done_idx], lengths))
        candidates = unique_sorted(dependents)
        now_ready = candidates[(self.pending_deps[candidates] == 0) & (self.state[candidates] == _WAITING)]
        self.state[now_ready] = _SCHEDULED

    def _finish_transmission(self, idx: np.ndarray, t_s: float) -> None:
        self.state[idx] = _DONE
        self.remaining_bytes[idx] = 0.0
        self.tx_end_s[idx] = t_s
        self.finish_s[idx] = t_s + self.path_latency_s[idx]

    def _process_events(self, t_s: float, done_idx: np.ndarray) -> np.ndarray:
        """Release the dependents of ``done_idx``, start every flow due by ``t_s``.

        Returns the started flows that have bytes to send. Loops because a zero-size flow
        started now finishes now and may release more flows due now; each pass is one level
        of such a chain, never one flow.
        """
        arrived = []
        while True:
            if done_idx.size:
                self._release_dependents(done_idx)
            starting = np.flatnonzero((self.state == _SCHEDULED) & (self.ready_s <= t_s))
            if starting.size == 0:
                break
            self.start_s[starting] = t_s
            self.state[starting] = _ACTIVE
            empty = self.size_bytes[starting] == 0
            arrived.append(starting[~empty])
            done_idx = starting[empty]
            if done_idx.size == 0:
                break
            self._finish_transmission(done_idx, t_s)
        return np.concatenate(arrived) if arrived else np.zeros(0, dtype=np.int64)

    def _next_start_s(self) -> tuple[float, np.ndarray]:
        scheduled_start_s = np.where(self.state == _SCHEDULED, self.ready_s, np.inf)
        return float(scheduled_start_s.min(initial=np.inf)), scheduled_start_s

    # -- recording ---------------------------------------------------------------------------

    def _record_interval(self, t_next_s: float, ending: np.ndarray, dt_s: float) -> None:
        """Close the interval ending at ``t_next_s``; ``ending`` flows send their last bytes in it.

        Only flow rates are logged here; link rates follow from them after the run
        (:meth:`_link_log`), in a few large operations instead of many small ones per event.
        """
        interval = len(self.timeline_s) - 1
        self.timeline_s.append(t_next_s)
        self.counters["intervals"] += 1
        candidates = unique_sorted(np.concatenate([*self.dirty, ending]))
        self.dirty.clear()
        if candidates.size == 0:
            return
        rate_Bps = self.rate_Bps[candidates]
        if ending.size:
            # What sends exactly the last bytes in dt. Merged events are taken at the latest of
            # them, so this is at most the solved rate — except that dt itself is rounded to the
            # resolution of t, which matters for a tiny last interval late in a run: never
            # exceed the solved rate (and so a link's capacity) for it.
            ending_at = np.searchsorted(candidates, ending)
            rate_Bps[ending_at] = np.minimum(rate_Bps[ending_at], self.remaining_bytes[ending] / dt_s)
        bottleneck = self.bottleneck[candidates]
        changed = (rate_Bps != self.recorded_rate_Bps[candidates]) | (
            bottleneck != self.recorded_bottleneck[candidates])
        if changed.any():
            self.flow_log.append((np.full(int(changed.sum()), interval, dtype=np.int64), candidates[changed],
                                  rate_Bps[changed], bottleneck[changed]))
        self.recorded_rate_Bps[candidates] = rate_Bps
        self.recorded_bottleneck[candidates] = bottleneck
        if self.shared is not None and changed.any():
            self._record_classes(interval, candidates[changed])

    def _record_classes(self, interval: int, changed: np.ndarray) -> None:
        """Log the summed rate (x scale) of every class one of the ``changed`` flows belongs to.

        Summed afresh over the class's flows, never from differences, so an idle class reads 0.
        """
        assert self.shared is not None
        classes = unique_sorted(self.shared.row_class[changed])
        classes = classes[classes >= 0]
        if classes.size == 0:
            return
        positions, lengths = _row_positions(self.members_of.indptr, classes)
        scaled_Bps = self.members_of.data[positions] * self.recorded_rate_Bps[self.members_of.indices[positions]]
        class_rate_Bps = np.add.reduceat(scaled_Bps, np.cumsum(lengths) - lengths)  # every class has a member
        moved = class_rate_Bps != self.recorded_class_rate_Bps[classes]
        if moved.any():
            self.class_log.append((np.full(int(moved.sum()), interval, dtype=np.int64), classes[moved],
                                   class_rate_Bps[moved]))
            self.recorded_class_rate_Bps[classes[moved]] = class_rate_Bps[moved]

    def _link_log(self, flow_log: StepLog, n_intervals: int) -> StepLog:
        """Link rate changes (compact link ids) implied by the flow (and class) rate changes."""
        own = _columns_to_links(flow_log, n_intervals, self.weights, self.weights_t)
        if self.shared is None:
            return own
        parts = self.class_log
        class_log = StepLog(*(np.concatenate([p[k] for p in parts]) if parts else np.zeros(0, dtype)
                              for k, dtype in enumerate((np.int64, np.int64, np.float64))))
        return _sum_logs(own, _columns_to_links(class_log, n_intervals, self.shared.class_weights,
                                                self.class_weights_t), n_intervals)

    # -- the loop ----------------------------------------------------------------------------

    def _window_s(self, t_min_s: float) -> float:
        return t_min_s + self.time_rtol * abs(t_min_s)

    def simulate(self) -> None:
        self.state[self.pending_deps == 0] = _SCHEDULED
        t_s, _ = self._next_start_s()
        if not np.isfinite(t_s):
            return
        self.timeline_s.append(t_s)
        ended = np.zeros(0, dtype=np.int64)
        while True:
            arrived = self._process_events(t_s, ended)
            self.dirty.append(self._reallocate(ended, arrived))
            next_start_s, scheduled_start_s = self._next_start_s()
            active_idx = np.flatnonzero(self.active)

            if active_idx.size == 0:
                if not np.isfinite(next_start_s):
                    break
                # Nothing transmits until the next release or dependency finish.
                t_next_s = float(scheduled_start_s[scheduled_start_s <= self._window_s(next_start_s)].max())
                self._record_interval(t_next_s, np.zeros(0, dtype=np.int64), t_next_s - t_s)
                t_s, ended = t_next_s, np.zeros(0, dtype=np.int64)
                continue

            rate_Bps = self.rate_Bps[active_idx]
            if not np.all(rate_Bps > 0):  # capacities and caps are > 0, so this is a bug
                f = int(active_idx[np.flatnonzero(~(rate_Bps > 0))[0]])
                raise SimulationError(f"flow {f} got rate {self.rate_Bps[f]!r}: internal error in the flow engine")
            remaining_bytes = self.remaining_bytes[active_idx]
            end_s = t_s + remaining_bytes / rate_Bps
            window_s = self._window_s(min(float(end_s.min()), next_start_s))
            # The latest event in the window becomes the event time: flows that would end a
            # hair earlier are slowed a hair, so no link ever exceeds its capacity and no
            # flow starts before it may.
            t_next_s = max(float(end_s[end_s <= window_s].max(initial=-np.inf)),
                           float(scheduled_start_s[scheduled_start_s <= window_s].max(initial=-np.inf)))
            dt_s = t_next_s - t_s
            remaining_after_bytes = remaining_bytes - rate_Bps * dt_s
            ended = active_idx[(end_s <= window_s) | (remaining_after_bytes <= 0)]
            if dt_s > 0:
                self._record_interval(t_next_s, ended, dt_s)
            self.remaining_bytes[active_idx] = remaining_after_bytes
            self._finish_transmission(ended, t_next_s)
            t_s = t_next_s

        if not np.all(self.state == _DONE):  # cycles are rejected up front, so this is a bug
            f = int(np.flatnonzero(self.state != _DONE)[0])
            raise SimulationError(f"flow {f} never ran: internal error in the flow engine")

    # -- result ------------------------------------------------------------------------------

    def _dominant_bottleneck(self, flow_log: StepLog, bottleneck_entries: np.ndarray,
                             timeline_s: np.ndarray) -> np.ndarray:
        """Per flow, the bottleneck under which it sent the most bytes (ties: lowest id)."""
        result = np.full(self.n_flows, NOT_TRANSMITTING, dtype=np.int64)
        n_intervals = timeline_s.shape[0] - 1
        order = np.argsort(flow_log.index, kind="stable")
        flow = flow_log.index[order]
        first = flow_log.interval[order]
        stop = np.full(first.shape, n_intervals, dtype=np.int64)
        stop[:-1] = np.where(flow[1:] == flow[:-1], first[1:], n_intervals)
        sent_bytes = flow_log.rate_Bps[order] * (timeline_s[stop] - timeline_s[first])
        bottleneck = bottleneck_entries[order]
        keep = bottleneck != NOT_TRANSMITTING
        flow, bottleneck, sent_bytes = flow[keep], bottleneck[keep], sent_bytes[keep]
        if flow.size == 0:
            return result
        # Sum bytes per (flow, bottleneck), then keep each flow's largest sum.
        pairs, inverse = np.unique(np.stack([flow, bottleneck]), axis=1, return_inverse=True)
        pair_bytes = np.bincount(inverse.ravel(), weights=sent_bytes, minlength=pairs.shape[1])
        order = np.lexsort((pairs[1], -pair_bytes, pairs[0]))
        pair_flow = pairs[0][order]
        first_of_flow = np.ones(pair_flow.shape, dtype=bool)
        first_of_flow[1:] = pair_flow[1:] != pair_flow[:-1]
        result[pair_flow[first_of_flow]] = pairs[1][order][first_of_flow]
        return result

    def result(self) -> FlowResult:
        self.simulate()
        timeline_s = np.array(self.timeline_s if self.timeline_s else [0.0])

        def concat(parts: Sequence[tuple[np.ndarray, ...]], column: int, dtype: type) -> np.ndarray:
            return np.concatenate([p[column] for p in parts]).astype(dtype) if parts else np.zeros(0, dtype=dtype)

        flow_log = StepLog(concat(self.flow_log, 0, np.int64), concat(self.flow_log, 1, np.int64),
                           concat(self.flow_log, 2, np.float64))
        bottleneck = self._dominant_bottleneck(flow_log, concat(self.flow_log, 3, np.int64), timeline_s)
        on_link = bottleneck >= 0
        bottleneck[on_link] = self.used_links[bottleneck[on_link]]

        compact_link_log = self._link_log(flow_log, timeline_s.shape[0] - 1)
        link_log = StepLog(compact_link_log.interval, self.used_links[compact_link_log.index],
                           compact_link_log.rate_Bps)
        duration_s = self.tx_end_s - self.start_s
        with np.errstate(divide="ignore", invalid="ignore"):
            mean_rate_Bps = np.where(duration_s > 0, self.size_bytes / duration_s, 0.0)
        arrays = dict(
            start_s=self.start_s, tx_end_s=self.tx_end_s, finish_s=self.finish_s,
            mean_rate_Bps=mean_rate_Bps, bottleneck_link=bottleneck,
            link_bytes=link_log.integral_bytes(timeline_s, self.n_links), timeline_s=timeline_s,
        )
        for arr in (*arrays.values(), flow_log.interval, flow_log.index, flow_log.rate_Bps,
                    link_log.interval, link_log.index, link_log.rate_Bps):
            _frozen(arr)
        return FlowResult(**arrays, link_rate_log=link_log, flow_rate_log=flow_log, counters=dict(self.counters))
