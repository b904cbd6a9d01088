"""The switch tree a placement policy sees: every server's leaf domain and pod, and Slurm hostlists.

A *leaf domain* is the set of servers whose NICs reach the same leaf switches: one top-of-rack
switch on a leaf-spine fabric, one scalable unit of rail leaves on a rail-optimized one (each of
its servers has one NIC on every rail leaf). A *pod* is the set of servers whose leaves reach the
same tier-2 switches (one pod per 2-tier fabric, several in a 3-tier fat tree). These are the
levels schedulers name: Slurm's leaf switches (``topology/tree``), Kueue's rack and block
topology levels, Volcano's HyperNode tiers 1 and 2.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import groupby

import numpy as np

from gpuwait.topology.model import Topology
from gpuwait.workload.steps import server_pods

#: level names, lowest first: a domain of level k holds whole domains of level k - 1
LEVELS = ("server", "leaf", "pod", "cluster")


@dataclass(frozen=True, eq=False)
class FabricTree:
    """Servers grouped by leaf domain and pod (indices, 0-based, in server order)."""

    server_names: tuple[str, ...]
    leaf_of_server: np.ndarray  # (servers,) leaf-domain index
    pod_of_server: np.ndarray   # (servers,) pod index
    gpus_per_server: int

    @property
    def n_servers(self) -> int:
        return len(self.server_names)

    def domain_of(self, level: str) -> np.ndarray:
        """(servers,) index of each server's domain at ``level`` (server, leaf, pod or cluster)."""
        if level == "server":
            return np.arange(self.n_servers)
        if level == "leaf":
            return self.leaf_of_server
        if level == "pod":
            return self.pod_of_server
        return np.zeros(self.n_servers, np.int64)

    def spans(self, servers: np.ndarray) -> tuple[int, int]:
        """(leaf domains, pods) the servers occupy."""
        servers = np.asarray(servers, np.int64)
        return len(np.unique(self.leaf_of_server[servers])), len(np.unique(self.pod_of_server[servers]))


def fabric_tree(topo: Topology) -> FabricTree:
    """The leaf domains and pods of ``topo`` (servers without a fabric form one leaf and one pod)."""
    n = topo.n_servers
    leaves = np.zeros(n, np.int64)
    if topo.nic_node.size:
        keys = []
        for server in range(n):
            nics = topo.nic_node[server]
            mask = np.isin(topo.link_src, nics) & (topo.node_tier[topo.link_dst] == 1)
            keys.append(tuple(sorted(set(topo.link_dst[mask].tolist()))))
        order = {key: i for i, key in enumerate(dict.fromkeys(keys))}  # numbered in server order
        leaves = np.array([order[k] for k in keys], np.int64)
    names = tuple(topo.server_name(s) for s in range(n))
    return FabricTree(names, leaves, server_pods(topo), topo.gpus_per_server)


def hostlist(names: list[str] | tuple[str, ...]) -> str:
    """Slurm's compressed hostlist of ``names`` (``s0 s1 s2 s5`` -> ``s[0-2,5]``), names sharing a
    prefix folded into one bracket, in the order first seen (scontrol show hostlist).

    >>> hostlist(["s0", "s1", "s2", "s5", "gpu-a7"])
    's[0-2,5],gpu-a7'
    >>> hostlist(["node03", "node04"])
    'node[03-04]'
    """
    groups: dict[tuple[str, int], list[int]] = {}
    plain: list[str] = []
    for name in names:
        match = re.fullmatch(r"(.*?)(\d+)", name)
        if match is None:
            plain.append(name)
            continue
        prefix, digits = match.groups()
        width = len(digits) if digits.startswith("0") and len(digits) > 1 else 0
        groups.setdefault((prefix, width), []).append(int(digits))
    parts = []
    for (prefix, width), numbers in groups.items():
        ranges = []
        # consecutive numbers keep (number - position) constant: each group is one run
        for _, pairs in groupby(enumerate(sorted(set(numbers))), key=lambda pair: pair[1] - pair[0]):
            run = [number for _, number in pairs]
            a, b = f"{run[0]:0{width}d}", f"{run[-1]:0{width}d}"
            ranges.append(a if len(run) == 1 else f"{a}-{b}")
        parts.append(f"{prefix}{ranges[0]}" if len(ranges) == 1 and "-" not in ranges[0] else f"{prefix}[{','.join(ranges)}]")
    return ",".join(parts + plain)
