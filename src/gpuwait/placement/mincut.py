"""Min-cut rank assignment: which of a job's servers each block of ranks runs on, so that each
parallel group's heavy traffic stays under one leaf switch.

A placement policy chooses *which* servers; Megatron's rank order (TP fastest, then CP, DP, PP)
then puts ranks ``[k g, (k+1) g)`` on the k-th listed server (``g`` GPUs per server). When a
model-parallel group spans servers (TP or CP over the scale-out network) and the servers sit under
several leaves, that order can split a group across leaves, so its per-layer collectives cross the
spines. This module reorders the servers to minimise the traffic that crosses leaves: a graph
partition of the job's *server slots* (rank blocks) into the leaves, sized by how many of the
job's servers each leaf holds.

- The graph: one node per slot; an edge between two slots weighs, lexicographically, the pairs of
  their ranks in one TP group, then one CP group, then neighbouring PP stages, then one DP group
  (each level's weight exceeds the sum of all lower ones: per step a TP group exchanges activations
  every layer of every micro-batch, a CP group K/V blocks every layer, PP one activation per
  micro-batch and stage, DP the gradients once; Narayanan et al., "Efficient Large-Scale Language
  Model Training on GPU Clusters Using Megatron-LM", SC'21, §3).
- The partition: recursive bisection of the leaves (halves by capacity), each cut improved by
  Kernighan-Lin from Megatron's order as the start (``networkx`` ``kernighan_lin_bisection``,
  which keeps the part sizes), so the result never cuts more than Megatron's order.
"""

from __future__ import annotations

import networkx as nx
import numpy as np

from gpuwait.errors import SpecError
from gpuwait.placement.tree import FabricTree

_ORDER = ("tp", "cp", "dp", "pp")  # Megatron-Core's default, fastest first (no EP: it folds into DP)


def _coords(n_ranks: int, sizes: dict[str, int]) -> dict[str, np.ndarray]:
    ranks = np.arange(n_ranks)
    out, stride = {}, 1
    for dim in _ORDER:
        out[dim] = (ranks // stride) % sizes[dim]
        stride *= sizes[dim]
    return out


def slot_traffic(n_slots: int, gpus_per_server: int, tp: int, cp: int = 1, pp: int = 1) -> np.ndarray:
    """(slots, slots) lexicographic traffic weight between server slots (see the module docstring)."""
    n_ranks = n_slots * gpus_per_server
    if n_ranks % (tp * cp * pp):
        raise SpecError(f"mincut: {n_ranks} GPUs are not a multiple of tp x cp x pp = {tp * cp * pp}")
    sizes = {"tp": tp, "cp": cp, "pp": pp, "dp": n_ranks // (tp * cp * pp)}
    c = _coords(n_ranks, sizes)
    in_slot = np.zeros((n_ranks, n_slots))
    in_slot[np.arange(n_ranks), np.arange(n_ranks) // gpus_per_server] = 1.0
    weight = np.zeros((n_slots, n_slots))
    for dim in ("dp", "pp", "cp", "tp"):  # lowest first; each level then outweighs all below it
        together = np.ones((n_ranks, n_ranks), bool)
        for d in _ORDER:
            if d != dim:
                together &= np.equal.outer(c[d], c[d])
        if dim == "pp":
            together &= np.abs(np.subtract.outer(c["pp"], c["pp"])) == 1
        else:
            together &= np.not_equal.outer(c[dim], c[dim])
        counts = in_slot.T @ together @ in_slot  # rank pairs of one group between two slots
        np.fill_diagonal(counts, 0.0)
        weight = weight + counts * (weight.sum() + 1.0)
    return weight


def _bisect(graph: nx.Graph, slots: list[int], leaves: list[tuple[int, int]], out: dict[int, int]) -> None:
    """Assign ``slots`` to ``leaves`` ((leaf, capacity), capacities summing to len(slots))."""
    if len(leaves) == 1:
        for s in slots:
            out[s] = leaves[0][0]
        return
    half = len(leaves) // 2
    left, right = leaves[:half], leaves[half:]
    n_left = sum(c for _, c in left)
    start = (set(slots[:n_left]), set(slots[n_left:]))
    if not start[0] or not start[1]:
        a, b = start
    else:  # Megatron's order: the first slots first
        a, b = nx.algorithms.community.kernighan_lin_bisection(graph.subgraph(slots), partition=start,
                                                               weight="weight", seed=0)
    if len(a) != n_left:  # the sides come back in either order; their sizes are kept
        a, b = b, a
    _bisect(graph, sorted(a), left, out)
    _bisect(graph, sorted(b), right, out)


def cut_weight(weight: np.ndarray, leaf_of_slot: np.ndarray) -> float:
    """Traffic weight between slots on different leaves."""
    return float(weight[np.not_equal.outer(leaf_of_slot, leaf_of_slot)].sum() / 2)


def mincut_order(servers: np.ndarray, tree: FabricTree, tp: int, cp: int = 1, pp: int = 1) -> np.ndarray:
    """``servers`` reordered so that rank block k (Megatron's order) runs on the k-th returned server
    and the traffic crossing leaves is at most Megatron's order's (see the module docstring)."""
    servers = np.asarray(servers, np.int64)
    weight = slot_traffic(len(servers), tree.gpus_per_server, tp, cp, pp)
    graph = nx.Graph()
    graph.add_nodes_from(range(len(servers)))
    rows, cols = np.nonzero(np.triu(weight))
    graph.add_weighted_edges_from((int(i), int(j), float(weight[i, j])) for i, j in zip(rows, cols))
    leaf = tree.leaf_of_server[servers]
    leaves = list(dict.fromkeys(leaf.tolist()))  # in order of first appearance
    capacity = [(lf, int((leaf == lf).sum())) for lf in leaves]
    assigned: dict[int, int] = {}
    _bisect(graph, list(range(len(servers))), capacity, assigned)
    pools = {lf: [int(s) for s in servers if tree.leaf_of_server[s] == lf] for lf in leaves}
    return np.array([pools[assigned[k]].pop(0) for k in range(len(servers))], np.int64)
