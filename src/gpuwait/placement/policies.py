"""Placement policies named after the schedulers that implement them, each a pure function
``(free, tree, n_servers, spec) -> servers`` (server indices in rank order).

``free`` is a boolean per server; ``tree`` the :class:`~gpuwait.placement.tree.FabricTree`. A policy
never changes its inputs and raises :class:`PlacementError` (naming the policy, the request and
what was free) when it cannot place the job. Servers come back grouped by leaf domain, so a job's
consecutive ranks (its TP, then DP neighbours) share a leaf wherever the policy allows.

Sources of each algorithm (public documentation; no scheduler's code is copied):

- Slurm ``topology/tree``: "identify the lowest level switch in the hierarchy that can satisfy a
  job's request and then allocate resources on its underlying leaf switches using a best-fit
  algorithm"; ``--switches=N`` caps the leaf switches (Slurm Topology Guide,
  https://slurm.schedmd.com/topology.html).
- Slurm ``topology/block``: base blocks of ``BlockSizes[0]`` nodes aggregated in powers of two into
  higher block levels; a job goes to the lowest level that holds it; ``--segment=N`` allocates
  segments of N nodes each inside one base block (topology.conf(5), topology.yaml(5),
  https://slurm.schedmd.com/topology.conf.html).
- Kueue topology-aware scheduling: ``podset-required-topology`` / ``podset-preferred-topology`` /
  ``podset-unconstrained-topology`` at a topology level; BestFit (the default profile: fewest
  domains, the last domain the one that fits tightest), LeastFreeCapacity (fullest domains first),
  Balanced placement (fewest domains, pods split evenly) (Kueue docs, "Topology Aware Scheduling",
  https://kueue.sigs.k8s.io/docs/concepts/topology_aware_scheduling/).
- Volcano network-topology-aware scheduling: HyperNode tiers (tier 1 a leaf switch, tier 2 the
  spine above it), ``networkTopology.mode`` hard (inside one HyperNode of tier at most
  ``highestTierAllowed``) or soft, and bin-packing onto the HyperNode already most allocated
  (https://volcano.sh/en/docs/network_topology_aware_scheduling/).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from gpuwait.errors import SpecError, UnknownNameError
from gpuwait.placement.tree import LEVELS, FabricTree
from gpuwait.rng import as_generator
from gpuwait.spec.jobs import PlacementSpec

Policy = Callable[[np.ndarray, FabricTree, int, PlacementSpec], np.ndarray]
POLICIES: dict[str, Policy] = {}


class PlacementError(SpecError):
    """A job the policy cannot place on the free servers."""


def register_policy(name: str) -> Callable[[Policy], Policy]:
    def add(fn: Policy) -> Policy:
        POLICIES[name] = fn
        return fn
    return add


def place(free: np.ndarray, tree: FabricTree, n_servers: int, spec: PlacementSpec) -> np.ndarray:
    """Servers (rank order) for a job of ``n_servers`` under ``spec.policy``; ``free`` is not changed."""
    if spec.policy not in POLICIES:
        raise UnknownNameError(f"placement.policy: got {spec.policy!r}; expected one of {', '.join(POLICIES)}")
    free = np.asarray(free, bool)
    if n_servers > int(free.sum()):
        raise PlacementError(f"placement: the job needs {n_servers} servers; {int(free.sum())} of "
                             f"{tree.n_servers} are free")
    servers = np.asarray(POLICIES[spec.policy](free, tree, n_servers, spec), np.int64)
    assert len(servers) == n_servers and free[servers].all() and len(set(servers.tolist())) == n_servers
    return servers


def _by_leaf(tree: FabricTree, servers: np.ndarray) -> np.ndarray:
    """The servers grouped by leaf domain (domains in first-seen order, servers by index inside)."""
    servers = np.asarray(servers, np.int64)
    first: dict[int, int] = {}  # leaf domain -> its order of first appearance
    for s in servers.tolist():
        first.setdefault(int(tree.leaf_of_server[s]), len(first))
    key = np.array([first[int(tree.leaf_of_server[s])] for s in servers.tolist()])
    return servers[np.lexsort((servers, key))]


@register_policy("explicit")
def explicit(free: np.ndarray, tree: FabricTree, n: int, spec: PlacementSpec) -> np.ndarray:
    listed = list(spec.servers or [])
    bad = [s for s in listed if not 0 <= s < tree.n_servers or not free[s]]
    if len(listed) != n or bad or len(set(listed)) != n:
        raise PlacementError(f"placement.servers: got {listed}; expected {n} distinct free server indices "
                             f"in 0..{tree.n_servers - 1}")
    return np.array(listed, np.int64)


@register_policy("random")
def random_policy(free: np.ndarray, tree: FabricTree, n: int, spec: PlacementSpec) -> np.ndarray:
    """Any ``n`` free servers, uniformly (a scheduler that ignores topology entirely)."""
    return as_generator(spec.seed).choice(np.flatnonzero(free), size=n, replace=False)


@register_policy("first-fit")
def first_fit(free: np.ndarray, tree: FabricTree, n: int, spec: PlacementSpec) -> np.ndarray:
    """The ``n`` lowest-indexed free servers (Slurm's select/linear without a topology plugin)."""
    return np.flatnonzero(free)[:n]


@register_policy("spread")
def spread(free: np.ndarray, tree: FabricTree, n: int, spec: PlacementSpec) -> np.ndarray:
    """One free server from each leaf domain in turn (a least-allocated scheduler's spreading)."""
    idx = np.flatnonzero(free)
    leaf = tree.leaf_of_server[idx]
    turn = np.zeros(len(idx), np.int64)
    for d in np.unique(leaf):
        turn[leaf == d] = np.arange(int((leaf == d).sum()))
    return idx[np.lexsort((leaf, turn))][:n]


def _fill(free: np.ndarray, tree: FabricTree, within: np.ndarray, n: int, order: str) -> np.ndarray:
    """``n`` free servers of ``within`` (a server mask) taken leaf by leaf.

    order "best-fit": a leaf that holds all that is left, the tightest such; else the leaf with
    the most free servers (fewest leaves). "least-free": the fullest leaves first.
    """
    avail = free & within
    leaves = tree.leaf_of_server
    out: list[int] = []
    left = n
    while left:
        counts = np.bincount(leaves[avail], minlength=leaves.max() + 1)
        if order == "least-free":
            d = int(np.argmin(np.where(counts > 0, counts, np.iinfo(np.int64).max)))
        else:
            fits = np.flatnonzero(counts >= left)
            d = int(fits[np.argmin(counts[fits])]) if len(fits) else int(np.argmax(counts))
        take = np.flatnonzero(avail & (leaves == d))[:left]
        out += take.tolist()
        avail[take] = False
        left -= len(take)
    return np.array(out, np.int64)


def _tightest_domain(free: np.ndarray, tree: FabricTree, level: str, n: int) -> int | None:
    """The domain of ``level`` with the fewest free servers that still holds ``n`` (None: none)."""
    dom = tree.domain_of(level)
    counts = np.bincount(dom[free], minlength=dom.max() + 1)
    fits = np.flatnonzero(counts >= n)
    return int(fits[np.argmin(counts[fits])]) if len(fits) else None


@register_policy("slurm-tree")
def slurm_tree(free: np.ndarray, tree: FabricTree, n: int, spec: PlacementSpec) -> np.ndarray:
    """Slurm ``topology/tree``: the lowest switch level holding the job, then its leaves best-fit."""
    for level in ("leaf", "pod", "cluster"):
        d = _tightest_domain(free, tree, level, n)
        if d is not None:
            servers = _fill(free, tree, tree.domain_of(level) == d, n, "best-fit")
            break
    leaves = tree.spans(servers)[0]
    if spec.switches is not None and leaves > spec.switches:
        raise PlacementError(f"placement.switches: the job needs {leaves} leaf switches on the free servers; "
                             f"--switches={spec.switches}", hint="Slurm would hold the job until its wait time runs out")
    return _by_leaf(tree, servers)


@register_policy("slurm-block")
def slurm_block(free: np.ndarray, tree: FabricTree, n: int, spec: PlacementSpec) -> np.ndarray:
    """Slurm ``topology/block``: base blocks of ``block_size`` consecutive servers (default a leaf
    domain), aggregated 2, 4, 8 ... at a time; the lowest level with an aggregate that holds the job
    (the tightest one), filled block by block, in whole ``segment``s."""
    size = spec.block_size or int(np.bincount(tree.leaf_of_server).max())
    seg = spec.segment or 1
    if seg > size:
        raise PlacementError(f"placement.segment: {seg} servers do not fit a base block of {size}")
    if n % seg:
        raise PlacementError(f"placement.segment: the job's {n} servers are not whole segments of {seg}")
    block = np.arange(tree.n_servers) // size
    n_blocks = int(block.max()) + 1
    usable = np.array([(int(free[block == b].sum()) // seg) * seg for b in range(n_blocks)])
    width = 1
    while True:
        groups = np.arange(n_blocks) // width
        cap = np.bincount(groups, weights=usable).astype(int)
        fits = np.flatnonzero(cap >= n)
        if len(fits):
            g = int(fits[np.argmin(cap[fits])])
            break
        if width >= n_blocks:
            raise PlacementError(f"placement: no aggregate of blocks of {size} holds {n} servers in segments of {seg}")
        width *= 2
    out: list[int] = []
    for b in sorted(np.flatnonzero(groups == g), key=lambda b: -usable[b]):
        take = min(usable[b], n - len(out))
        out += np.flatnonzero(free & (block == b))[:take].tolist()
        if len(out) == n:
            break
    return _by_leaf(tree, np.array(out, np.int64))


def _balanced(free: np.ndarray, tree: FabricTree, within: np.ndarray, n: int) -> np.ndarray:
    """The fewest leaves that hold ``n``, the servers split as evenly as they allow (8:8, not 15:1)."""
    avail = free & within
    counts = np.bincount(tree.leaf_of_server[avail], minlength=tree.leaf_of_server.max() + 1)
    order = np.argsort(-counts, kind="stable")
    k = int(np.searchsorted(np.cumsum(counts[order]), n) + 1)
    chosen = order[:k]
    share = np.zeros(k, int)
    left = n
    for j, i in enumerate(np.argsort(counts[chosen], kind="stable")):  # smallest first: its even share or all it has
        share[i] = min(int(counts[chosen[i]]), -(-left // (k - j)))
        left -= share[i]
    out = [np.flatnonzero(avail & (tree.leaf_of_server == d))[:s] for d, s in zip(chosen, share)]
    return np.concatenate(out)


@register_policy("kueue")
def kueue(free: np.ndarray, tree: FabricTree, n: int, spec: PlacementSpec) -> np.ndarray:
    """Kueue topology-aware scheduling at ``spec.level`` with ``spec.mode`` and ``spec.algorithm``."""
    start = LEVELS.index("cluster" if spec.mode == "unconstrained" else spec.level)
    tried = LEVELS[start:] if spec.mode != "required" else (LEVELS[start],)
    for level in tried:
        d = _tightest_domain(free, tree, level, n)
        if d is None:
            continue
        within = tree.domain_of(level) == d
        if spec.algorithm == "Balanced":
            return _by_leaf(tree, _balanced(free, tree, within, n))
        order = "least-free" if spec.algorithm == "LeastFreeCapacity" else "best-fit"
        return _by_leaf(tree, _fill(free, tree, within, n, order))
    raise PlacementError(f"placement: no free {spec.level} domain holds {n} servers "
                         "(kueue.x-k8s.io/podset-required-topology)", hint="use mode: preferred to allow a wider domain")


@register_policy("volcano")
def volcano(free: np.ndarray, tree: FabricTree, n: int, spec: PlacementSpec) -> np.ndarray:
    """Volcano HyperNodes: the lowest tier with a HyperNode that holds the job (hard mode: at most
    tier ``level``), the most allocated such HyperNode, its tier-1 children fullest first."""
    top = LEVELS.index(spec.level) if spec.mode == "required" else LEVELS.index("cluster")
    for level in LEVELS[1:top + 1]:
        d = _tightest_domain(free, tree, level, n)
        if d is not None:
            return _by_leaf(tree, _fill(free, tree, tree.domain_of(level) == d, n, "least-free"))
    raise PlacementError(f"placement: no HyperNode of tier <= {top} holds {n} free servers "
                         "(networkTopology mode: hard)", hint="use mode: preferred (soft) to allow a higher tier")
