"""A splitting router's leaf-pair classes routed by stages: the part every destination pod shares
walked once per source leaf, the rest composed from small walks.

Between two pods of a 3-tier fat tree a class's route is its source leaf's way up to the cores,
the cores' one link down to the destination pod's spines, and each spine's link down to the
destination leaf. Walking one representative per (source leaf, destination leaf) repeats the way
up for every destination leaf (262,144 walks of 2,000 states at 16,384 GPUs). Here:

1. **Shared stage**, walked per (source leaf, demand, hops to the destination): until a state
   reaches a switch whose equal-cost next hops differ between the destination classes the group
   serves (a class: the leaves cabled to one set of switches, a pod) or that is cabled to one of
   them, every destination walks the same states (the next hops depend on the node and the class
   only, see ``paths._Keys``). Walked with the router itself, rounds and all: exact for any
   per-leaf-pair router.
2. **Class stage**, per (stop node, destination class): on to the switches cabled to the class.
3. **Leaf stage**, per (switch cabled to the class, destination leaf): down to the leaf.

Stages 2 and 3 are walked with a unit fraction and scaled by the fraction that arrives: exact for
spraying (its split does not depend on the fraction) and for any router where those stages have
one next hop per state (adaptive routing on a fat tree: every hop down). Otherwise (parallel
cables down, a fabric where the split comes after the classes part) :class:`NotStaged` sends the
caller back to the per-leaf-pair walk. Fractions are summed in another order than the walk's
merges: equal to rounding.

Results are stored as the walk's :class:`~gpuwait.routing.paths.Routes` parts: each row's class is
its (shared-stage group, destination class) pair, whose middle part is stage 2 (the way down from
the cores, 1,024 links on a 16,384-GPU SuperPOD); stage 1 (the way up, 1,050 links) is a side part
per shared-stage group that follows the row's class (``Routes.class_sides``: a consumer of one
shared part gets it joined into the class's part), and stage 3 (one link per spine) a side part
(``Routes.side_classes``) per leaf-pair class.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import scipy.sparse as sp

from gpuwait.errors import RoutingError
from gpuwait.routing.paths import _Distances, _LeafPairClasses, _unique_pairs, _walk_chunks
from gpuwait.routing.routers import Hop, NextHops, Router
from gpuwait.spec.cluster import RoutingSpec
from gpuwait.topology.model import Topology

# (destination class, switch) pairs whose next hops are compared at most (about 70 bytes each per next hop)
_MAX_SIGNATURES = 1 << 22


class NotStaged(Exception):
    """A stage the composition cannot scale linearly (a load-dependent split after the shared stage)."""


def _linear(router: Router) -> Router:
    """``router`` for stages 2 and 3: spraying as is; another router only where it has one next hop."""
    if router.name == "spray":
        return router

    def choose(hop: Hop) -> NextHops:
        if (hop.count > 1).any():
            raise NotStaged
        return router.choose(hop)

    return dataclasses.replace(router, choose=choose)


def _concat(parts: list, n: int) -> tuple[np.ndarray, ...]:
    if not parts:
        return tuple(np.zeros(0, np.int64) if i < n - 1 else np.zeros(0) for i in range(n))
    return tuple(np.concatenate(x) for x in zip(*parts, strict=True))


def _walk(topo: Topology, spec: RoutingSpec, router: Router, start: np.ndarray, target: np.ndarray, per_row: dict,
          name_row, stop, memo: dict | None = None) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]]:
    """((row, link, weight) triplets, stopped (row, node, fraction) states) of a walk (``memo``: kept
    between the rounds of the same walk, see :func:`gpuwait.routing.paths._walk_fabric`)."""
    stopped: list = []
    hook = None if stop is None else (stop, stopped)
    triplets = _concat(list(_walk_chunks(topo, spec, router, start, target, per_row, name_row, hook, memo)), 3)
    return triplets, _concat(stopped, 3)


def _unit_rows(n: int, background_Bps) -> dict:
    """Hop fields of rows walked with a unit fraction (stages 2 and 3 never read them but the fraction)."""
    return dict(key_bytes=np.zeros((n, 0), np.uint8), qp=np.zeros(n, np.int64), dest_index=np.zeros(n, np.int64),
                demand_Bps=np.ones(n), background_Bps=background_Bps)


class _PairStage:
    """Stage 2 or 3: walks per (start node, destination) pair, done once per pair as pairs appear."""

    def __init__(self, topo: Topology, spec: RoutingSpec, router: Router, stop_at_class: bool) -> None:
        self.topo, self.spec, self.router, self.stop_at_class = topo, spec, _linear(router), stop_at_class
        self.codes, self.code_ids = np.zeros(0, np.int64), np.zeros(0, np.int64)  # pair codes walked, sorted; their ids
        self.start, self.target = np.zeros(0, np.int64), np.zeros(0, np.int64)
        self.trip: list = []
        self.stops: list = []
        self.last: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # the last call's (a, b, ids)

    def ids(self, a: np.ndarray, b: np.ndarray, n_b: int, start: np.ndarray, target: np.ndarray,
            name_row) -> np.ndarray:
        """Pair id of each (a, b) pair (``0 <= b < n_b``; it starts at ``start``, heads for ``target``),
        walking the new pairs."""
        if self.last is not None and np.array_equal(self.last[0], a) and np.array_equal(self.last[1], b):
            return self.last[2]  # an adaptive round meets the pairs of the round before, in the same order
        ids = self._ids(a, b, n_b, start, target, name_row)
        self.last = (a, b, ids)
        return ids

    def _ids(self, a: np.ndarray, b: np.ndarray, n_b: int, start: np.ndarray, target: np.ndarray,
             name_row) -> np.ndarray:
        uniq, inv = _unique_pairs(a, b, n_b)  # millions of pairs of few distinct values: no sort
        first = np.zeros(len(uniq), np.int64)
        first[inv] = np.arange(len(inv))  # any member stands for its pair
        # the pairs walked before, looked up in their sorted codes (a round meets the same pairs again)
        at = np.minimum(np.searchsorted(self.codes, uniq), max(len(self.codes) - 1, 0))
        found = self.codes[at] == uniq if len(self.codes) else np.zeros(len(uniq), bool)
        known = np.where(found, self.code_ids[at] if len(self.codes) else -1, -1)
        new = np.flatnonzero(~found)
        if len(new):
            base = len(self.start)
            known[new] = base + np.arange(len(new))
            codes, ids = np.r_[self.codes, uniq[new]], np.r_[self.code_ids, known[new]]
            order = np.argsort(codes, kind="stable")
            self.codes, self.code_ids = codes[order], ids[order]
            s, t = start[first[new]], target[first[new]]
            self._run(s, t, base, name_row)
            self.start, self.target = np.r_[self.start, s], np.r_[self.target, t]
        return known[inv]

    def _run(self, start: np.ndarray, target: np.ndarray, base: int, name_row) -> None:
        topo = self.topo

        def at_class(keys, row, node, hops_done, row_offset):
            sw = keys.dist.switch_index[node]
            out = sw >= 0
            out[out] = keys.dist.adjacent_to_class(keys.slot[row[out]], sw[out])
            return out

        (rows, links, w), (s_row, s_node, s_frac) = _walk(
            topo, self.spec, self.router, start, target, _unit_rows(len(start), None), name_row,
            at_class if self.stop_at_class else None)
        if self.stop_at_class and (topo.link_dst[links] == target[rows]).any():
            raise NotStaged  # reached a destination before the switches cabled to its class
        self.trip.append((rows + base, links, w))
        self.stops.append((s_row + base, s_node, s_frac))

    def matrices(self) -> tuple[sp.csr_matrix, sp.csr_matrix]:
        """(pairs x links) weights and (pairs x nodes) stopped fractions."""
        n = len(self.start)
        rows, links, w = _concat(self.trip, 3)
        s_row, s_node, s_frac = _concat(self.stops, 3)
        return (sp.csr_matrix((w, (rows, links)), shape=(n, self.topo.n_links)),
                sp.csr_matrix((s_frac, (s_row, s_node)), shape=(n, self.topo.n_nodes)))


@dataclasses.dataclass(frozen=True, eq=False)
class _Plan:
    """How the leaf-pair classes share stages."""

    group_of_class: np.ndarray  # (C,) shared-stage group of each class
    group_rep: np.ndarray  # (G,) a class standing for each group
    up_of_class: np.ndarray  # (C,) (group, destination class) of each class
    group_of_up: np.ndarray  # (U,)
    dclass_of_up: np.ndarray  # (U,) destination class (a distance-matrix row)
    goes_on: np.ndarray  # (class sets, switches): the shared stage goes on through the switch
    set_of_group: np.ndarray  # (G,)


def _signatures(dist: _Distances, class_rows: np.ndarray) -> np.ndarray:
    """(K, switches) an id of each switch's equal-cost next hops (and distance) towards each class;
    -1 where the switch is cabled to the class or cannot reach it."""
    n_sw = dist.matrix.shape[1]
    if len(class_rows) * n_sw > _MAX_SIGNATURES:
        raise NotStaged  # classes of one leaf each (a fabric without cables both ways): nothing to share
    switch_node = np.full(n_sw, -1, np.int64)
    idx = dist.switch_index
    switch_node[idx[idx >= 0]] = np.flatnonzero(idx >= 0)
    k_of, sw_of = np.divmod(np.arange(len(class_rows) * n_sw), n_sw)
    to_leaf = dist.matrix[class_rows[k_of], sw_of]
    # the class's representative leaf (0 in its own row) reaches the class's other leaves in two hops,
    # through the switches all of them are cabled to, like every other leaf of the class
    to_leaf = np.where(to_leaf == 0, 2.0, to_leaf)
    ok = np.isfinite(to_leaf) & (to_leaf >= 2) & (switch_node[sw_of] >= 0)
    k_of, sw_of, distance = k_of[ok], sw_of[ok], to_leaf[ok].astype(float) + 1.0
    owner, links = dist.next_hops(class_rows[k_of][:, None], switch_node[sw_of], distance)
    count = np.bincount(owner, minlength=len(k_of))
    width = int(count.max(initial=0))
    table = np.full((len(k_of), width + 1), -1, np.int64)
    table[:, 0] = distance.astype(np.int64)
    position = np.arange(len(owner)) - np.repeat(np.cumsum(count) - count, count)
    table[owner, 1 + position] = links
    sig = np.full(len(class_rows) * n_sw, -1, np.int64)
    sig[np.flatnonzero(ok)] = _row_ids(table)
    return sig.reshape(len(class_rows), n_sw)


# odd 64-bit multipliers of a table's columns (fixed: a row's hash is the same in every run)
_ROW_HASH = np.random.default_rng(0x5EED).integers(0, 1 << 63, 4096, dtype=np.uint64) * np.uint64(2) + np.uint64(1)


def _row_ids(table: np.ndarray) -> np.ndarray:
    """An id per row of an integer table, equal where the rows are equal (``np.unique(table, axis=0)``'s
    inverse up to numbering): rows hashed to one integer, each checked against the first of its hash; a
    sort of the rows as bytes (35,000 rows of 33 links at 16,384 GPUs) costs ten times more."""
    width = table.shape[1]
    if width > len(_ROW_HASH):
        return np.unique(table, axis=0, return_inverse=True)[1].ravel()
    hashed = (table.astype(np.uint64) * _ROW_HASH[:width]).sum(axis=1, dtype=np.uint64)  # modulo 2**64
    _, first, ids = np.unique(hashed, return_index=True, return_inverse=True)
    ids = ids.ravel()
    if (table != table[first[ids]]).any():  # two rows of one hash: sort them as bytes
        return np.unique(table, axis=0, return_inverse=True)[1].ravel()
    return ids


def _plan(topo: Topology, classes: _LeafPairClasses, s_rep: np.ndarray, d_rep: np.ndarray,
          demand_Bps: np.ndarray) -> _Plan:
    dist = _Distances(topo, d_rep)
    slot = np.arange(len(d_rep))
    dclass = dist.class_rows.reshape(len(d_rep), -1)[:, 0]
    hops = dist(slot, s_rep)
    leaf_s = topo.link_dst[classes.up_link[classes.rep]]
    _, demand_id = np.unique(demand_Bps, return_inverse=True)
    _, group_rep, group_of_class = np.unique(np.c_[leaf_s, demand_id.ravel(), hops], axis=0, return_index=True,
                                             return_inverse=True)
    group_of_class = group_of_class.ravel()
    k_ids, k_of_class = np.unique(dclass, return_inverse=True)
    k_of_class = k_of_class.ravel()
    up, up_of_class = np.unique(group_of_class * len(k_ids) + k_of_class, return_inverse=True)
    group_of_up, k_of_up = np.divmod(up, len(k_ids))
    # each group's destination classes, as a set id; the stage goes on where all their signatures agree
    member = np.zeros((len(group_rep), len(k_ids)), bool)
    member[group_of_up, k_of_up] = True
    sets, set_of_group = np.unique(member, axis=0, return_inverse=True)
    sig = _signatures(dist, k_ids)
    goes_on = np.zeros((len(sets), sig.shape[1]), bool)
    for i, in_set in enumerate(sets):
        s = sig[in_set]
        goes_on[i] = (s >= 0).all(axis=0) & (s == s[0]).all(axis=0)
    return _Plan(group_of_class, group_rep, up_of_class.ravel(), group_of_up, k_ids[k_of_up], goes_on,
                 set_of_group.ravel())


def _expand(matrix: sp.csr_matrix, rows: np.ndarray, cache: dict | None = None
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(i, column, value, start of each i's run) of ``matrix[rows[i]]`` for every i, without building the
    stacked matrix. ``cache``: kept between calls; an adaptive round whose matrix has the structure of
    the round before (the same states stopped, 8.9 M entries at 16,384 GPUs) only gathers the values."""
    if cache is not None and "rows" in cache and np.array_equal(cache["rows"], rows) \
            and np.array_equal(cache["indptr"], matrix.indptr) and np.array_equal(cache["indices"], matrix.indices):
        return cache["owner"], cache["column"], matrix.data[cache["position"]], cache["indptr_out"]
    counts = np.diff(matrix.indptr)[rows]
    owner = np.repeat(np.arange(len(rows)), counts)
    position = np.arange(counts.sum()) + np.repeat(matrix.indptr[rows] - (np.cumsum(counts) - counts), counts)
    column = matrix.indices[position].astype(np.int64)
    indptr_out = np.r_[0, np.cumsum(counts)]
    if cache is not None:
        cache.update(rows=rows, indptr=matrix.indptr.copy(), indices=matrix.indices.copy(), owner=owner,
                     column=column, position=position, indptr_out=indptr_out)
    return owner, column, matrix.data[position], indptr_out


def _sorted_csr(data: np.ndarray, columns: np.ndarray, indptr: np.ndarray, shape: tuple[int, int], cache: dict
                ) -> sp.csr_matrix:
    """The CSR matrix of rows already in order, columns sorted in each row (as a conversion from
    triplets gives: the products' sums in the same order); the sorting permutation is kept in
    ``cache`` for the next adaptive round with the same columns (the same pair ids)."""
    if cache.get("columns") is not columns:
        order = sp.csr_matrix((np.arange(len(columns), dtype=np.float64), columns, indptr), shape=shape)
        order.sort_indices()
        cache.update(columns=columns, permutation=order.data.astype(np.int64), sorted_columns=order.indices)
    matrix = sp.csr_matrix((data[cache["permutation"]], cache["sorted_columns"], indptr), shape=shape)
    matrix.has_sorted_indices = True
    return matrix


@dataclasses.dataclass(frozen=True, eq=False)
class _Distinct:
    """The (group, destination class) pairs whose rows from stage 2 on are equal: their groups' stopped
    states are equal bit for bit (a 16,384-GPU SuperPOD's 512 groups bound for other pods all stop at
    the same 1,024 cores with 1/1,024 each: 16 distinct pairs stand for 7,680) and so is the class."""

    rep_up: np.ndarray  # (D,) the last pair of each, in increasing order
    of_up: np.ndarray  # (U,) the distinct pair of each (group, destination class) pair


def _distinct_ups(stops: sp.csr_matrix, plan: _Plan) -> _Distinct:
    """The distinct (group, destination class) pairs of one round (see :class:`_Distinct`).

    Each stands for its members by the last: ordered so, a (stop node, destination class) pair of
    stage 2 is last met in the member it was last met in when every pair was expanded, so it walks
    towards the same target."""
    seen: dict[tuple[bytes, bytes], int] = {}
    row_of_group = np.empty(stops.shape[0], np.int64)
    for g in range(stops.shape[0]):
        lo, hi = stops.indptr[g], stops.indptr[g + 1]
        row_of_group[g] = seen.setdefault((stops.indices[lo:hi].tobytes(), stops.data[lo:hi].tobytes()), len(seen))
    key = row_of_group[plan.group_of_up] * (int(plan.dclass_of_up.max(initial=0)) + 1) + plan.dclass_of_up
    _, of_key = np.unique(key, return_inverse=True)
    of_key = of_key.ravel()
    last = np.zeros(int(of_key.max(initial=-1)) + 1, np.int64)
    np.maximum.at(last, of_key, np.arange(len(of_key)))
    order = np.argsort(last)
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    return _Distinct(last[order], rank[of_key])


def _column_sums(f1: sp.csr_matrix, of_up: np.ndarray, up_demand: np.ndarray) -> np.ndarray:
    """``F.T @ up_demand`` where row u of F is ``f1[of_up[u]]``, summed as scipy sums it (over u in
    order, from 0), without building F (8.9 M entries at 16,384 GPUs).

    Where every column is in one row of ``f1`` only, the columns of a row that hold the same value
    get the same sum: each (row, value) is summed once over the row's members (bincount adds in
    order). Otherwise the members' rows interleave in a column's sum: F is built."""
    n_rows, n_cols = f1.shape
    if (np.bincount(f1.indices, minlength=n_cols) > 1).any():
        return np.asarray(f1[of_up].T @ up_demand).ravel()
    counts = np.diff(f1.indptr)
    entry_row = np.repeat(np.arange(n_rows), counts)
    order = np.lexsort((f1.data, entry_row))
    row_s, value_s = entry_row[order], f1.data[order]
    new = np.r_[True, (row_s[1:] != row_s[:-1]) | (value_s[1:] != value_s[:-1])][:len(order)]  # none if empty
    segment_s = np.cumsum(new) - 1
    seg_row, seg_value = row_s[new], value_s[new]
    seg_count = np.bincount(seg_row, minlength=n_rows)
    seg_first = np.cumsum(seg_count) - seg_count
    # every member u once per value of its row, in u order
    terms = seg_count[of_up]
    member = np.repeat(np.arange(len(of_up)), terms)
    segment = np.arange(len(member)) + np.repeat(seg_first[of_up] - (np.cumsum(terms) - terms), terms)
    sums = np.bincount(segment, weights=seg_value[segment] * up_demand[member], minlength=len(seg_row))
    out = np.zeros(n_cols)
    out[f1.indices[order]] = sums[segment_s]
    return out


def route_leaf_pairs_staged(topo: Topology, spec: RoutingSpec, router: Router, s_ep: np.ndarray, d_ep: np.ndarray,
                            per_row: dict, classes: _LeafPairClasses, name_row) -> tuple:
    """:func:`gpuwait.routing.paths._route_leaf_pairs`'s result by stages (see the module); raises
    :class:`NotStaged` where the stages do not compose exactly."""
    rep = classes.rep
    demand_Bps = per_row["demand_Bps"]
    class_demand_Bps = demand_Bps[rep] * classes.count
    plan = _plan(topo, classes, s_ep[rep], d_ep[rep], demand_Bps[rep])
    walk = _StagedWalk(topo, spec, router, classes, plan, s_ep, d_ep, name_row)
    g_rows = {k: v if k == "background_Bps" else v[walk.g_rep] for k, v in per_row.items()}
    for round_ in range(router.rounds):
        last_round = round_ == router.rounds - 1
        stage1 = walk.shared_stage(g_rows)
        f1, t2, beta, distinct = walk.class_stage(stage1.stops)
        if last_round:
            up_weights = _class_middle_parts(f1, t2, distinct)
        ends = walk.leaf_stage(beta, distinct, stage1)
        if last_round:
            break  # the load only feeds the next round's adaptive choices
        load = _round_load_Bps(topo, classes, plan, stage1, f1, t2, distinct, ends, class_demand_Bps, demand_Bps)
        background = g_rows["background_Bps"]
        g_rows["background_Bps"] = load if background is None else 0.5 * (background + load)
    return _staged_parts(classes, plan, stage1, up_weights, ends)


@dataclasses.dataclass(frozen=True, eq=False)
class _SharedStage:
    """One round's walk of the shared stage, a row per group."""

    first_w: np.ndarray  # (G,) the fraction on the group's first hop
    last_w: np.ndarray  # (G,) the fraction on its last hop, for a group that reached its destination
    middle: sp.csr_matrix  # (G, L) its links but the first and last hop
    complete: np.ndarray  # (G,) whether the group reached its destination in this stage
    stops: sp.csr_matrix  # (G, nodes) the fraction of the group that stopped at each node


@dataclasses.dataclass(frozen=True, eq=False)
class _ClassEnds:
    """Each leaf-pair class's way from the switches cabled to its destination class (stage 3), and the
    fractions on its rows' own first and last hops."""

    down: sp.csr_matrix  # (C, L) stage 3's links but the last hop into the destination leaf
    first_w: np.ndarray  # (C,)
    last_w: np.ndarray  # (C,)


def _shared_stop(plan: _Plan, switch_index: np.ndarray) -> Callable[..., np.ndarray]:
    """The shared stage's stop rule for :func:`_walk`: a state stops at a switch where its group's
    destination classes part (``plan.goes_on``), unless its next hop is its last (the row's own)."""
    goes_on, set_of_group = plan.goes_on, plan.set_of_group

    def stop(keys, row, node, hops_done, row_offset):
        sw = switch_index[node]
        out = (sw >= 0) & (keys.start_distance[row] - hops_done > 1)  # the last hop is the row's own
        out[out] = ~goes_on[set_of_group[row[out] + row_offset], sw[out]]
        return out

    return stop


class _StagedWalk:
    """The three stages of one staged routing, with what they keep between the adaptive rounds: the
    shared stage's structure, the stage 2 and 3 walks of the pairs met so far, and the expansions."""

    def __init__(self, topo: Topology, spec: RoutingSpec, router: Router, classes: _LeafPairClasses, plan: _Plan,
                 s_ep: np.ndarray, d_ep: np.ndarray, name_row) -> None:
        self.topo, self.spec, self.router, self.classes, self.plan = topo, spec, router, classes, plan
        rep = classes.rep
        self.g_rep = rep[plan.group_rep]  # (G,) a row standing for each shared-stage group
        self.s_group, self.d_group = s_ep[self.g_rep], d_ep[self.g_rep]
        self.d_rep = d_ep[rep]
        self.d_leaf = topo.link_src[classes.down_link[rep]]  # (C,) each class's destination leaf
        self.stop = _shared_stop(plan, _Distances(topo, self.d_rep[:1]).switch_index)
        self.name_row = name_row
        self.stage2 = _PairStage(topo, spec, router, stop_at_class=True)
        self.stage3 = _PairStage(topo, spec, router, stop_at_class=False)
        # (U,) a class of each (group, destination class) pair
        self.up_class_rep = np.zeros(len(plan.group_of_up), np.int64)
        self.up_class_rep[plan.up_of_class] = np.arange(len(rep))
        self.stops_cache: dict = {}
        self.walk_memo: dict = {}  # the shared stage's structure, the same every round

    def name_group(self, i: int, err: RoutingError) -> RoutingError:
        """The walk's error of group ``i`` named by the row standing for it."""
        return self.name_row(int(self.g_rep[i]), err)

    def shared_stage(self, g_rows: dict) -> _SharedStage:
        """Stage 1: each group walked until its destination classes' next hops part, or to its destination;
        :class:`NotStaged` where some of a group's states arrive and others stop, or a group that
        arrives serves several leaves."""
        topo, n_groups = self.topo, len(self.g_rep)
        (rows, links, w), (st_row, st_node, st_frac) = _walk(topo, self.spec, self.router, self.s_group, self.d_group,
                                                            g_rows, self.name_group, self.stop, self.walk_memo)
        first = topo.link_src[links] == self.s_group[rows]
        last = topo.link_dst[links] == self.d_group[rows]
        first_w, last_w = np.zeros(n_groups), np.zeros(n_groups)
        first_w[rows[first]] = w[first]
        last_w[rows[last]] = w[last]
        middle = ~first & ~last
        m1 = sp.csr_matrix((w[middle], (rows[middle], links[middle])), shape=(n_groups, topo.n_links))
        complete = np.bincount(rows[last], minlength=n_groups) > 0
        if (complete & (np.bincount(st_row, minlength=n_groups) > 0)).any():
            raise NotStaged  # some states of a group stopped, others reached the destination
        ends = np.unique(np.c_[self.plan.group_of_class, self.d_leaf], axis=0)[:, 0]
        if (np.bincount(ends, minlength=n_groups)[complete] > 1).any():
            raise NotStaged  # a group that reached its destination serves several leaves
        stops = sp.csr_matrix((st_frac, (st_row, st_node)), shape=(n_groups, topo.n_nodes))
        return _SharedStage(first_w, last_w, m1, complete, stops)

    def class_stage(self, stops: sp.csr_matrix) -> tuple[sp.csr_matrix, sp.csr_matrix, sp.csr_matrix, _Distinct]:
        """Stage 2: every (group, destination class) pair on from its group's stop states to the switches
        cabled to the class. (f1: (distinct pairs, stage-2 walks) the fraction entering each walk, t2: (walks,
        L) the walks' links, beta: (distinct pairs, nodes) the fraction reaching each switch cabled to the
        class, the distinct pairs)."""
        plan = self.plan
        # once per distinct (group, destination class) pair, not per pair (8.9 M stopped states)
        distinct = _distinct_ups(stops, plan)
        d_i, x, f, f1_indptr = _expand(stops, plan.group_of_up[distinct.rep_up], self.stops_cache)
        up_i = distinct.rep_up[d_i]
        kk = plan.dclass_of_up[up_i]
        p2 = self.stage2.ids(x, kk, int(kk.max(initial=0)) + 1, x, self.d_rep[self.up_class_rep[up_i]],
                             lambda i, err: err)
        f1 = _sorted_csr(f, p2, f1_indptr, (len(distinct.rep_up), len(self.stage2.start)), self.stops_cache)
        t2, b2 = self.stage2.matrices()
        return f1, t2, (f1 @ b2).tocsr(), distinct

    def leaf_stage(self, beta: sp.csr_matrix, distinct: _Distinct, stage1: _SharedStage) -> _ClassEnds:
        """Stage 3: each class's leaf from the switches cabled to its destination class (``beta``, stage 2's
        arrivals), and its rows' first and last hop fractions."""
        topo, plan, stage3 = self.topo, self.plan, self.stage3
        c_i, b, bf, _ = _expand(beta, distinct.of_up[plan.up_of_class])
        p3 = stage3.ids(b, self.d_leaf[c_i], topo.n_nodes, b, self.d_rep[c_i], lambda i, err: err)
        f3 = sp.csr_matrix((bf, (c_i, p3)), shape=(len(self.d_rep), len(stage3.start)))
        t3 = stage3.matrices()[0].tocoo()
        into_leaf = topo.link_dst[t3.col] == stage3.target[t3.row]  # the row's own last hop
        down3 = sp.csr_matrix((t3.data[~into_leaf], (t3.row[~into_leaf], t3.col[~into_leaf])), shape=t3.shape)
        last3_w = np.bincount(t3.row[into_leaf], weights=t3.data[into_leaf], minlength=t3.shape[0])
        group = plan.group_of_class
        last_w = np.where(stage1.complete[group], stage1.last_w[group], f3 @ last3_w)
        return _ClassEnds((f3 @ down3).tocsr(), stage1.first_w[group], last_w)


def _class_middle_parts(f1: sp.csr_matrix, t2: sp.csr_matrix, distinct: _Distinct) -> sp.csr_matrix:
    """(U, L) the middle part past stage 1 of each (group, destination class) pair (stage 1 is kept once
    per group)."""
    up_weights = (f1 @ t2).tocsr()
    up_weights.sort_indices()  # as the routes keep it: copied sorted into every pair's row
    return up_weights[distinct.of_up]


def _round_load_Bps(topo: Topology, classes: _LeafPairClasses, plan: _Plan, stage1: _SharedStage, f1: sp.csr_matrix,
                    t2: sp.csr_matrix, distinct: _Distinct, ends: _ClassEnds, class_demand_Bps: np.ndarray,
                    demand_Bps: np.ndarray) -> np.ndarray:
    """(L,) what one round's routes load each link with (every row's demand on its links), the adaptive
    router's background in the next round. The middle parts' load is summed without building them:
    stage 1 per group, stage 2 per pair."""
    up_demand = np.bincount(plan.up_of_class, weights=class_demand_Bps, minlength=len(plan.group_of_up))
    load = (stage1.middle.T @ np.bincount(plan.group_of_up, weights=up_demand, minlength=stage1.middle.shape[0])
            + t2.T @ _column_sums(f1, distinct.of_up, up_demand) + ends.down.T @ class_demand_Bps)
    row_demand = demand_Bps * classes.multiplicity
    for hop_w, end_link in ((ends.first_w, classes.up_link), (ends.last_w, classes.down_link)):
        load += np.bincount(end_link, weights=hop_w[classes.of_row] * row_demand, minlength=topo.n_links)
    return load


def _staged_parts(classes: _LeafPairClasses, plan: _Plan, stage1: _SharedStage, up_weights: sp.csr_matrix,
                  ends: _ClassEnds) -> tuple:
    """The last round's routes as :func:`gpuwait.routing.paths._route_leaf_pairs` gives them, with stages 1
    and 3 as side parts."""
    n = len(classes.of_row)
    own = (np.r_[np.arange(n), np.arange(n)], np.r_[classes.up_link, classes.down_link],
           np.r_[ends.first_w[classes.of_row], ends.last_w[classes.of_row]])
    # stage 3 (the switches' links down to the destination leaf, 32 per class on a 16,384-GPU SuperPOD)
    # is the same for every row of a leaf-pair class: a side part per class, not copied into each row
    class_down = ends.down
    class_down.sort_indices()
    # stage 1 (the source leaf's way up, ~1,050 links to the cores of a 16,384-GPU SuperPOD) is the same
    # for every destination class its group serves: a side part per group that follows the row's class
    # (Routes.class_sides), not copied into each (group, destination class) middle part (9 M entries)
    m1 = stage1.middle
    m1.sum_duplicates()
    m1.sort_indices()
    return own, up_weights, plan.up_of_class[classes.of_row], ((classes.of_row, class_down, False),
                                                            (plan.group_of_class[classes.of_row], m1, True))
