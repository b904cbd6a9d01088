"""Traffic of a scenario as a flow table: explicit flows plus generated patterns.

Every generated pattern is a pure function of the topology and its seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuwait.errors import SpecError
from gpuwait.rng import as_generator
from gpuwait.spec.scenario import PatternSpec, TrafficSpec
from gpuwait.topology.model import NodeKind, Topology


@dataclass(frozen=True)
class FlowTable:
    """Flows to run: endpoints (node ids), sizes, release times, dependencies, caps."""

    name: list[str]
    src: np.ndarray
    dst: np.ndarray
    size_bytes: np.ndarray
    start_s: np.ndarray
    rate_cap_Bps: np.ndarray  # inf = no cap
    after: list[list[int]]  # indices of the flows each flow waits for

    def __len__(self) -> int:
        return len(self.src)

    @staticmethod
    def concat(tables: list[FlowTable]) -> FlowTable:
        offset, after = 0, []
        for t in tables:
            after += [[a + offset for a in deps] for deps in t.after]
            offset += len(t)
        cat = lambda attr: np.concatenate([getattr(t, attr) for t in tables]) if tables else np.zeros(0)  # noqa: E731
        return FlowTable(sum((t.name for t in tables), []), cat("src").astype(np.int64), cat("dst").astype(np.int64),
                         cat("size_bytes").astype(float), cat("start_s").astype(float), cat("rate_cap_Bps").astype(float),
                         after)


def _table(topo: Topology, prefix: str, src: np.ndarray, dst: np.ndarray, size_bytes: float, start_s: float
           ) -> FlowTable:
    n = len(src)
    return FlowTable([f"{prefix}{i}" for i in range(n)], np.asarray(src, np.int64), np.asarray(dst, np.int64),
                     np.full(n, float(size_bytes)), np.full(n, float(start_s)), np.full(n, np.inf),
                     [[] for _ in range(n)])


def _nics_on_leaf(topo: Topology, leaf_index: int, field: str) -> np.ndarray:
    leaves = topo.switches("compute")
    leaves = leaves[topo.node_tier[leaves] == 1]
    if not 0 <= leaf_index < len(leaves):
        raise SpecError(f"traffic.patterns.{field}: got {leaf_index}; expected a leaf index in 0..{len(leaves) - 1}")
    leaf = leaves[leaf_index]
    into_leaf = topo.link_dst == leaf
    nic = NodeKind.NIC
    return np.unique(topo.link_src[into_leaf & (topo.node_kind[topo.link_src] == nic)])


_PATTERN_FIELDS = {
    "permutation": {"seed"}, "all-to-all": set(), "rail-ring": set(), "incast": {"count"},
    "leaf-to-leaf": {"count", "src_leaf", "dst_leaf"},
}


def pattern_flows(topo: Topology, pattern: PatternSpec, index: int = 0) -> FlowTable:
    """Generate one pattern's flows.

    >>> from gpuwait.topology import build_preset
    >>> from gpuwait.spec import PatternSpec
    >>> topo = build_preset("rocev2-400g-2tier", servers=8)
    >>> len(pattern_flows(topo, PatternSpec(kind="permutation", size="1MB")))
    64
    """
    unused = pattern.model_fields_set - _PATTERN_FIELDS[pattern.kind] - {"kind", "size", "start"}
    if unused:
        raise SpecError(f"traffic.patterns[{index}]: {', '.join(sorted(unused))} not used by kind {pattern.kind}; "
                        f"expected only {', '.join(sorted(_PATTERN_FIELDS[pattern.kind] | {'size', 'start'}))}")
    rng = as_generator(pattern.seed)
    gpus = topo.gpu_node
    S, G = gpus.shape
    prefix = f"{pattern.kind}{index}."
    if pattern.kind != "leaf-to-leaf" and S < 2:
        raise SpecError(f"traffic.patterns[{index}].kind: {pattern.kind} needs at least 2 servers; the cluster has {S}")
    if pattern.kind == "permutation":
        # a random server derangement (a shuffled cycle) and a random GPU order per server: every GPU
        # sends once and receives once, never to its own server
        order = rng.permutation(S)
        target_server = np.empty(S, np.int64)
        target_server[order] = np.roll(order, -1)
        perm = np.argsort(rng.random((S, G)), axis=1)
        src = gpus.ravel()
        dst = gpus[np.repeat(target_server, G), perm.ravel()]
    elif pattern.kind == "all-to-all":
        s_a, g_a, s_b, g_b = np.meshgrid(np.arange(S), np.arange(G), np.arange(S), np.arange(G), indexing="ij")
        keep = s_a != s_b
        src, dst = gpus[s_a[keep], g_a[keep]], gpus[s_b[keep], g_b[keep]]
    elif pattern.kind == "rail-ring":
        src = gpus.ravel()
        dst = gpus[(np.repeat(np.arange(S), G) + 1) % S, np.tile(np.arange(G), S)]
    elif pattern.kind == "incast":
        count = pattern.count or S - 1
        if count > S - 1:
            raise SpecError(f"traffic.patterns[{index}].count: got {count}; expected at most {S - 1} senders (one per other server)")
        src = gpus[1:count + 1, 0]
        dst = np.full(count, gpus[0, 0])
    else:  # leaf-to-leaf
        a = _nics_on_leaf(topo, pattern.src_leaf, "src_leaf")
        b = _nics_on_leaf(topo, pattern.dst_leaf, "dst_leaf")
        if pattern.src_leaf == pattern.dst_leaf:
            raise SpecError(f"traffic.patterns[{index}].dst_leaf: got {pattern.dst_leaf}; expected a leaf other than src_leaf")
        count = pattern.count or min(len(a), len(b))
        if count > min(len(a), len(b)):
            raise SpecError(f"traffic.patterns[{index}].count: got {count}; leaves {pattern.src_leaf} and {pattern.dst_leaf} "
                            f"have {len(a)} and {len(b)} NICs; expected at most {min(len(a), len(b))}")
        src, dst = a[:count], b[:count]
    return _table(topo, prefix, src, dst, pattern.size, pattern.start)


def _check_dependencies(names: list[str], after: list[list[int]]) -> None:
    """Refuse a flow that waits for itself or a ring of flows that wait for each other."""
    import networkx as nx

    graph = nx.DiGraph()
    graph.add_nodes_from(range(len(names)))
    graph.add_edges_from((dep, i) for i, deps in enumerate(after) for dep in deps)
    try:
        cycle = nx.find_cycle(graph)
    except nx.NetworkXNoCycle:
        return
    members = [names[a] for a, _ in cycle]
    what = f"{members[0]!r} waits for itself" if len(members) == 1 else \
        " -> ".join(repr(m) for m in members + members[:1]) + " wait for each other"
    raise SpecError(f"traffic.flows.after: {what}; expected dependencies without a cycle",
                    hint="remove one of the names from an `after` list")


def traffic_flows(topo: Topology, traffic: TrafficSpec) -> FlowTable:
    """All flows of a scenario's traffic section, explicit flows first."""
    tables = []
    if traffic.flows:
        names = [f.name or f"f{i}" for i, f in enumerate(traffic.flows)]
        index = {n: i for i, n in enumerate(names)}
        if len(index) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise SpecError(f"traffic.flows: the name {dup!r} is used twice; expected unique flow names",
                            hint="give every flow its own `name`")
        src: list[int] = []
        dst: list[int] = []
        after: list[list[int]] = []
        for i, f in enumerate(traffic.flows):
            for field, name in (("src", f.src), ("dst", f.dst)):
                try:
                    (src if field == "src" else dst).append(topo.node_id(name))
                except Exception as err:  # the topology names what exists
                    raise SpecError(f"traffic.flows[{i}].{field}: {err}", hint=getattr(err, "hint", None)) from None
            deps = []
            for dep in f.after:
                if dep not in index:
                    raise SpecError(f"traffic.flows[{i}].after: got {dep!r}; expected the name of another flow",
                                    hint=f"flow names here: {', '.join(names[:6])}{' ...' if len(names) > 6 else ''}")
                deps.append(index[dep])
            after.append(deps)
        _check_dependencies(names, after)
        tables.append(FlowTable(names, np.array(src, np.int64), np.array(dst, np.int64),
                                np.array([f.size for f in traffic.flows], float), np.array([f.start for f in traffic.flows], float),
                                np.array([f.rate_cap if f.rate_cap else np.inf for f in traffic.flows], float), after))
    for i, pattern in enumerate(traffic.patterns):
        tables.append(pattern_flows(topo, pattern, i))
    if not tables:
        raise SpecError("traffic: no flows and no patterns; expected at least one", hint="add traffic.flows or traffic.patterns")
    return FlowTable.concat(tables)
