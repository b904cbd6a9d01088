"""Per-link and per-collective statistics of a run, from the communication families it timed."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpuwait.collectives.nccltests import busbw_factor
from gpuwait.engine.base import effective_capacity_Bps
from gpuwait.fabric.groups import FabricModel, FamilyRun
from gpuwait.steps.result import CollectiveStat, LinkStats
from gpuwait.topology.model import LINK_KINDS, Topology

#: (label such as "dp all_reduce", the family's run, calls per step)
Family = tuple[str, FamilyRun, int]

# one vocabulary across commands: a tier is named by the switch levels it joins (Tier's labels), undirected;
# the link's own name (leaf0->spine6) carries its direction
_TIER_OF_LEVELS = {(0, 1): "host-leaf", (1, 2): "leaf-spine", (2, 3): "spine-core"}


def link_tiers(topo: Topology) -> np.ndarray:
    """A short label per link for heatmap rows: nvlink, pcie, host-leaf, leaf-spine, spine-core,
    storage, network."""
    kind = np.asarray(LINK_KINDS, dtype=object)[topo.link_kind]
    lo = np.minimum(topo.node_tier[topo.link_src], topo.node_tier[topo.link_dst])
    hi = np.maximum(topo.node_tier[topo.link_src], topo.node_tier[topo.link_dst])
    tier = np.where(kind == "nvlink", "nvlink", "pcie").astype(object)
    network = np.isin(kind, ("host", "fabric"))
    for (a, b), label in _TIER_OF_LEVELS.items():
        tier[network & (lo == a) & (hi == b)] = label
    storage_node = np.char.find(topo.node_name.astype(str), "stor") >= 0
    storage = storage_node[topo.link_src] | storage_node[topo.link_dst]
    tier[storage] = "storage"
    tier[network & ~storage & ~np.isin(tier, list(_TIER_OF_LEVELS.values()))] = "network"
    return tier.astype(str)


def link_stats(fabric: FabricModel, families: Sequence[Family], step_time_s: float, top: int = 20) -> LinkStats:
    """Bytes per step and busiest utilization of every link; who shares the ``top`` hottest."""
    topo = fabric.topo
    capacity = effective_capacity_Bps(topo, fabric.transport)
    n = topo.n_links
    bytes_per_step = np.zeros(n)
    peak = np.zeros(n)
    phase_bytes: dict[str, np.ndarray] = {}
    for label, run, calls in families:
        bytes_per_step += run.link_bytes * calls
        phase_bytes[label] = phase_bytes.get(label, 0.0) + run.link_bytes * calls
        peak = np.maximum(peak, run.link_peak_Bps)
    background = fabric.background_Bps if fabric.background_Bps is not None else np.zeros(n)
    bytes_per_step += background * step_time_s
    peak = peak + background
    util = np.divide(peak, capacity, out=np.zeros(n), where=capacity > 0).clip(0, 1)
    stats = LinkStats(topo.link_names(), link_tiers(topo), util, bytes_per_step, capacity_Bps=np.asarray(capacity, dtype=float))
    users = {}
    # the grouped links table reads 8 ranked links per row it shows
    for link in dict.fromkeys(stats.hottest(top).tolist() + stats.costliest(top * 8).tolist()):
        names = {label for label, run, _calls in families if run.link_bytes[link] > 0}
        if background[link] > 0:
            names.add("storage read")
        users[link] = sorted(names)
    return LinkStats(stats.name, stats.tier, util, bytes_per_step, users, stats.capacity_Bps, phase_bytes)


def collective_stats(families: Sequence[Family], group_sizes: dict[str, int]) -> tuple[CollectiveStat, ...]:
    """One row per family, with nccl-tests' algbw and busbw for one group's call."""
    out = []
    for label, run, calls in families:
        e = run.estimate
        group = label.split()[0]
        n = group_sizes.get(group, 1)
        algbw = e.n_bytes / e.time_s / 1e9 if e.time_s > 0 else 0.0
        out.append(CollectiveStat(label, group, e.collective, n, float(e.n_bytes), calls, e.time_s, algbw,
                                  algbw * busbw_factor(e.collective, n), e.algorithm, e.protocol))
    return tuple(out)
