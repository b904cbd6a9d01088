"""Routers: how a switch (or a NIC) picks among the equal-cost next hops of a flow.

:func:`gpuwait.routing.paths.route_flows` walks every flow hop by hop. At each hop it finds
each walking state's equal-cost next hops (:class:`Hop`) and hands them to the chooser the
routing kind registered here; the chooser returns the links taken and the fraction of the
state's bytes on each (:class:`NextHops`). Adding a router is one :func:`register_router`
call in this file (and its name in ``RoutingSpec.kind``, which validates scenarios).

* ``ecmp``: the switch hashes the flow's 5-tuple with its own seed (or the same seed
  everywhere, which reproduces polarization) and reduces the hash with
  :func:`~gpuwait.routing.hashing.ecmp_select`. RoCEv2 QPs differ in UDP source port, so
  several QPs per connection are several differently hashed flows.
* ``static``: an InfiniBand subnet manager's D-mod-k fat-tree routes: going up, the k-th
  choice is ``(destination index / product of earlier up-choices) mod k``; destination-based,
  so every QP of a connection takes the same path.
* ``spray``: even split over every equal-cost next hop (per-packet spraying).
* ``adaptive``: per-packet least-loaded choice, in its fluid limit: the flow is split over the
  next hops in proportion to their capacity left after the other flows' expected load
  (a few Jacobi rounds), so a degraded or busy link gets less.

Everywhere, a NIC with several ports (several equal-cost first hops) spreads a connection's
QPs over them round-robin: QP q takes port ``q mod ports``, and arrives on the receiving NIC's port
``q mod ports`` where parallel cables join it to its leaf (:func:`gpuwait.routing.paths._last_links`).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpuwait.errors import UnknownNameError
from gpuwait.routing.hashing import HashFunction, ecmp_select, get_hash
from gpuwait.spec.cluster import RoutingSpec
from gpuwait.topology.model import Topology

# Per-switch seeds: the base seed and the switch id mixed with 32-bit odd constants, the
# golden-ratio multiplier of Knuth's multiplicative hashing (TAOCP vol. 3, 6.4) and xxHash32's
# PRIME32_2 and PRIME32_5 (xxhash.h, XXH_PRIME32_2 / XXH_PRIME32_5).
_SEED_MULTIPLIER = 0x9E3779B1
_NODE_MULTIPLIER = 0x85EBCA77
_SEED_INCREMENT = 0x165667B1
# a seeded switch takes its hash bits from offset (seed mod 8): one of 8 bit slices
_HASH_OFFSETS = 8
#: Jacobi rounds of the adaptive router's fixed point (each reacts to the previous round's load)
ADAPTIVE_ROUNDS = 4


@dataclass(frozen=True, eq=False)
class Hop:
    """The walking states at one hop and their equal-cost next hops.

    A state is a (route row, node, fraction of the row's bytes) triple; a single-path router
    has one state per row. State ``i``'s candidate links are
    ``links[first[i]:first[i] + count[i]]``, in link id order.
    """

    topo: Topology
    spec: RoutingSpec
    row: np.ndarray  # (S,) route row of each state
    node: np.ndarray  # (S,) node each state is at
    frac: np.ndarray  # (S,) fraction of the row's bytes in the state
    stride: np.ndarray  # (S,) D-mod-k: product of the state's earlier up-choices
    first: np.ndarray  # (S,) where the state's candidates start in ``links``
    count: np.ndarray  # (S,) number of candidates, >= 1
    links: np.ndarray  # candidate links, grouped by candidate set
    link_set: np.ndarray  # (len(links),) candidate set of each link
    set_node: np.ndarray  # node of each candidate set
    state_set: np.ndarray  # (S,) candidate set of each state
    # per route row:
    key_bytes: np.ndarray  # (R, 13) serialized 5-tuple ((R, 0) for a per-leaf-pair router)
    qp: np.ndarray  # (R,) QP number within the connection
    dest_index: np.ndarray  # (R,) fat-tree index of the destination endpoint
    demand_Bps: np.ndarray  # (R,) the row's expected rate
    background_Bps: np.ndarray | None  # (n_links,) load of the previous round, None in the first


@dataclass(frozen=True)
class NextHops:
    """What a router chose: state ``owner[i]`` sends ``weight[i]`` of its row's bytes on ``links[i]``."""

    owner: np.ndarray
    links: np.ndarray
    weight: np.ndarray
    stride: np.ndarray | None = None  # single-path routers: each state's stride after the hop


Chooser = Callable[[Hop], NextHops]


@dataclass(frozen=True)
class Router:
    """A routing kind: its chooser and how the walk must treat it.

    Attributes
    ----------
    name : str
        The ``RoutingSpec.kind`` it serves.
    choose : Chooser
        Picks the next hop(s) of every state at one hop.
    single_path : bool
        One next hop per state, in state order (``NextHops.owner`` is ``0..S-1``): rows never split,
        so the walk needs no merging of branches and routes all rows in one pass. A splitting router
        is walked in chunks of rows.
    rounds : int
        Walks of the whole traffic; from the second on, ``Hop.background_Bps`` holds the
        damped load of the one before.
    validate : callable, optional
        Checks the spec before any walking (e.g. that the hash exists).
    label : str
        Words for reports.
    per_leaf_pair : bool
        The choice depends only on the state (node, candidates, fraction), the row's demand and the
        previous round's load, never on the row's 5-tuple, QP or destination index. Then rows
        between the same two leaves with the same demand split identically between the leaves, and
        the walk routes one row per such class instead of every row (see
        :func:`gpuwait.routing.paths.route_flows`). Its hops get ``key_bytes`` of width 0: the
        5-tuples are not serialized for a router that promises not to hash them.
    """

    name: str
    choose: Chooser
    single_path: bool
    rounds: int = 1
    validate: Callable[[RoutingSpec], None] | None = None
    label: str = ""
    per_leaf_pair: bool = False


#: Every routing kind by name. Add one with :func:`register_router`.
ROUTERS: dict[str, Router] = {}


def register_router(name: str, *, single_path: bool, rounds: int = 1, label: str = "",
                    validate: Callable[[RoutingSpec], None] | None = None,
                    per_leaf_pair: bool = False) -> Callable[[Chooser], Chooser]:
    """Decorator: register ``choose(hop) -> NextHops`` as routing kind ``name``."""
    if name in ROUTERS:
        # silently replacing a router would change every scenario naming it
        raise ValueError(f"router {name!r} is already registered")

    def decorate(choose: Chooser) -> Chooser:
        ROUTERS[name] = Router(name, choose, single_path, rounds, validate, label, per_leaf_pair)
        return choose

    return decorate


def get_router(name: str) -> Router:
    """The router of a routing kind; the hint lists the known ones."""
    try:
        return ROUTERS[name]
    except KeyError:
        raise UnknownNameError(f"routing.kind: unknown router {name!r}",
                               hint="known routers: " + ", ".join(sorted(ROUTERS))) from None


def _one_each(hop: Hop, choice: np.ndarray, stride: np.ndarray | None = None) -> NextHops:
    """Single path: state i takes its ``choice[i]``-th candidate with all its bytes."""
    return NextHops(np.arange(len(hop.node)), hop.links[hop.first + choice], hop.frac, stride)


def _fan_out(hop: Hop) -> tuple[np.ndarray, np.ndarray]:
    """Every candidate of every state: (owner state, link)."""
    owner = np.repeat(np.arange(len(hop.node)), hop.count)
    offsets = np.arange(len(owner)) - np.repeat(np.cumsum(hop.count) - hop.count, hop.count)
    return owner, hop.links[hop.first[owner] + offsets]


# ------------------------------------------------------------------------------------ ecmp
def switch_seeds(spec: RoutingSpec, nodes: np.ndarray) -> np.ndarray:
    """The 32-bit hash seed of each switch: ``spec.seed`` everywhere, or mixed with the switch id."""
    if not spec.per_switch_seed:
        return np.full(len(nodes), spec.seed, np.uint32)
    mixed = (np.uint64(spec.seed) * np.uint64(_SEED_MULTIPLIER) + nodes.astype(np.uint64) * np.uint64(_NODE_MULTIPLIER)
             + np.uint64(_SEED_INCREMENT))
    return (mixed & np.uint64(0xFFFFFFFF)).astype(np.uint32)


def _check_hash(spec: RoutingSpec) -> None:
    try:
        get_hash(spec.hash)
    except UnknownNameError as err:
        raise UnknownNameError(f"routing.hash: {err}", hint=err.hint) from None


class _UnseededHashes:
    """The unseeded hash of every row of the last routing's keys, kept while that key array lives:
    a walk's hops hash the same rows' keys again and again, each hop with its switches' seeds.

    One instance serves the process (a global): the walk hands a router only a :class:`Hop`, rebuilt
    at every hop, and a routing's rows are sliced into chunks, so nothing that lives as long as one
    routing reaches :func:`_hashes`. Its entry is therefore one (keys, hash name, hashes) tuple,
    replaced whole and read once, so two routings that interleave (threads) each get their own
    keys' hashes, never the other's.
    """

    def __init__(self) -> None:
        self._last: tuple[weakref.ref[np.ndarray], str, np.ndarray] | None = None

    def __call__(self, fn: HashFunction, key_bytes: np.ndarray) -> np.ndarray:
        last = self._last
        if last is not None and last[0]() is key_bytes and last[1] == fn.name:
            return last[2]
        hashes = fn(key_bytes, 0)
        self._last = (weakref.ref(key_bytes), fn.name, hashes)
        return hashes


_unseeded_hashes = _UnseededHashes()


def _hashes(hop: Hop, seeds: np.ndarray) -> np.ndarray:
    """Each state's hash of its row's key with its switch's seed. For a hash affine in the seed (a
    CRC) the rows' unseeded hashes are taken once per routing and each seed's term once per node:
    the same bits as hashing each state's key with its seed."""
    fn = get_hash(hop.spec.hash)
    if fn.seed_term is None:
        return fn(hop.key_bytes[hop.row], seeds)
    n_bytes = hop.key_bytes.shape[1]
    if hop.spec.per_switch_seed:
        term = _node_seed_terms(fn, hop.spec, hop.topo.n_nodes, n_bytes)[hop.node]
    else:
        term = fn.seed_term(np.full(1, hop.spec.seed, np.uint32), n_bytes)[0]
    return _unseeded_hashes(fn, hop.key_bytes)[hop.row] ^ term


@functools.lru_cache(maxsize=8)
def _node_seed_terms(fn: HashFunction, spec: RoutingSpec, n_nodes: int, n_bytes: int) -> np.ndarray:
    """Every node's seed term (:attr:`HashFunction.seed_term`), for per-switch seeds."""
    assert fn.seed_term is not None  # only asked for hashes that have one (_hashes)
    terms = fn.seed_term(switch_seeds(spec, np.arange(n_nodes)), n_bytes)
    terms.flags.writeable = False
    return terms


@functools.lru_cache(maxsize=8)
def _node_seeds(spec: RoutingSpec, n_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Every node's :func:`switch_seeds` and its hash offset (seed mod 8): a gather per hop instead of the
    seed arithmetic on every state (8.4 M at 131,072 GPUs)."""
    seeds = switch_seeds(spec, np.arange(n_nodes))
    offsets = (seeds % _HASH_OFFSETS).astype(np.int64)
    seeds.flags.writeable = offsets.flags.writeable = False
    return seeds, offsets


@register_router("ecmp", single_path=True, label="ECMP", validate=_check_hash)
def _ecmp(hop: Hop) -> NextHops:
    node_seeds, node_offsets = _node_seeds(hop.spec, hop.topo.n_nodes)
    seeds = node_seeds[hop.node]
    hashes = _hashes(hop, seeds)
    # A CRC is affine: XOR-ing a seed into its state only relabels the 2^k next hops, so seeds
    # alone never break polarization. Seeded switches also pick a seed-dependent slice of the
    # hash bits (the "hash offset" of merchant ASICs), which does.
    offset = node_offsets[hop.node] if hop.spec.per_switch_seed else 0
    is_switch = hop.topo.switch_nodes[hop.node]
    hashed = ecmp_select(hashes, hop.count, bit_offset=offset)
    if is_switch.all():  # every hop but a NIC's first: no port choice to make
        return _one_each(hop, hashed)
    return _one_each(hop, np.where(is_switch, hashed, hop.qp[hop.row] % hop.count))


# ------------------------------------------------------------------------------------ static
@register_router("static", single_path=True, label="static routes")
def _static(hop: Hop) -> NextHops:
    topo = hop.topo
    goes_up = topo.node_tier[topo.link_dst[hop.links]] > topo.node_tier[hop.set_node[hop.link_set]]
    set_up = np.bincount(hop.link_set, weights=goes_up, minlength=len(hop.set_node)) > 0
    up = set_up[hop.state_set]
    choice = np.where(up, (hop.dest_index[hop.row] // hop.stride) % hop.count, hop.qp[hop.row] % hop.count)
    return _one_each(hop, choice, np.where(up, hop.stride * hop.count, hop.stride))


# ------------------------------------------------------------------------------------ spray
@register_router("spray", single_path=False, label="packet spraying", per_leaf_pair=True)
def _spray(hop: Hop) -> NextHops:
    owner, links = _fan_out(hop)
    return NextHops(owner, links, hop.frac[owner] * (1.0 / hop.count[owner]))


# ------------------------------------------------------------------------------------ adaptive
@register_router("adaptive", single_path=False, rounds=ADAPTIVE_ROUNDS, label="adaptive routing", per_leaf_pair=True)
def _adaptive(hop: Hop) -> NextHops:
    if (hop.count == 1).all():
        # one next hop each (every hop down from the top tier): nothing to split
        return NextHops(np.arange(len(hop.node)), hop.links[hop.first], hop.frac)
    owner, links = _fan_out(hop)
    split = adaptive_split(hop, hop.demand_Bps[hop.row] * hop.frac)
    return NextHops(owner, links, hop.frac[owner] * split)


def adaptive_split(hop: Hop, demand_Bps: np.ndarray) -> np.ndarray:
    """Split each state's traffic over its candidate links by water-filling on their utilization.

    The fluid limit of "send each packet to the least-utilized next hop": state ``i``'s demand
    ``demand_Bps[i]`` fills the candidates to a common level ``lam`` of (load / capacity), giving
    link l ``max(0, lam * c_l - b_l)`` where ``b_l`` is the other flows' load. With no background
    load this is a split in proportion to capacity, so a degraded link gets its share and no more.

    Returns the fraction on each candidate, in :func:`_fan_out`'s order (state by state, each
    state's candidates in id order). The states of one candidate set see the same links and loads,
    so the candidates are ordered by utilization and summed once per set (a 3-tier hop has
    thousands of states per set); only the water level depends on the state's demand.
    """
    topo = hop.topo
    capacity_Bps = topo.link_capacity_Bps[hop.links]
    # the previous round's load includes this flow's own share; in the fixed point every flow
    # sees the same levels, so keeping it only shifts the water level, not the split
    load_Bps = np.zeros(len(hop.links)) if hop.background_Bps is None else hop.background_Bps[hop.links]
    level = load_Bps / capacity_Bps
    # candidate sets are contiguous in ``hop.links``: order each by utilization, ties in id order
    order = np.lexsort((level, hop.link_set))
    s_cap, s_bg, s_level = capacity_Bps[order], load_Bps[order], level[order]
    set_count = np.bincount(hop.link_set, minlength=len(hop.set_node))
    set_start = np.cumsum(set_count) - set_count
    csum_cap, csum_bg = np.cumsum(s_cap), np.cumsum(s_bg)
    base_cap = np.where(set_start > 0, csum_cap[set_start - 1], 0.0)[hop.link_set]
    base_bg = np.where(set_start > 0, csum_bg[set_start - 1], 0.0)[hop.link_set]
    cum_cap, cum_bg = csum_cap - base_cap, csum_bg - base_bg  # within the set, candidates 0..k
    set_cap = cum_cap[set_start + set_count - 1]
    # every candidate of every state, as a position p in the sorted candidates of its set
    n_states = len(hop.node)
    entry_start = np.cumsum(hop.count) - hop.count
    owner = np.repeat(np.arange(n_states), hop.count)
    p = np.arange(len(owner)) + np.repeat(hop.first - entry_start, hop.count)
    # the level reached if the demand fills candidates 0..k of the set (in order of utilization);
    # the water level is that of the last candidate the water reaches
    lam = (demand_Bps[owner] + cum_bg[p]) / cum_cap[p]
    reached = np.where(lam >= s_level[p], np.arange(len(owner)), entry_start[owner])
    final_lam = lam[np.maximum.reduceat(reached, entry_start)] if n_states else np.zeros(0)
    fill = np.maximum(final_lam[owner] * s_cap[p] - s_bg[p], 0.0)
    total = np.add.reduceat(fill, entry_start)[owner] if n_states else np.zeros(0)
    split_sorted = np.where(total > 0, fill / np.where(total > 0, total, 1.0),
                            s_cap[p] / set_cap[hop.state_set][owner])
    split = np.empty(len(owner))
    split[entry_start[owner] + order[p] - hop.first[owner]] = split_sorted
    return split
