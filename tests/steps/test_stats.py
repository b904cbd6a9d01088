"""Per-link and per-collective statistics of a run (steps/stats.py) against sums done by hand.

- Bytes per step on a link: each family's bytes per call times its calls per step, plus the steady
  background (storage reads) times the step time.
- Utilization: the busiest family's rate on the link plus the background, over the link's effective
  capacity (``engine.base.effective_capacity_Bps``), held to [0, 1].
- algbw = bytes / time and busbw = algbw x nccl-tests' bus factor: 2(n-1)/n for all_reduce, (n-1)/n for
  all_gather and reduce_scatter, 1 for sendrecv (NVIDIA/nccl-tests doc/PERFORMANCE.md).
"""

from __future__ import annotations

import numpy as np
import pytest

from gpuwait.collectives.ncclenv import parse_env
from gpuwait.engine.base import effective_capacity_Bps
from gpuwait.fabric.groups import FabricModel, FamilyRun
from gpuwait.fabric.perf import CollectiveEstimate
from gpuwait.steps.stats import collective_stats, link_stats, link_tiers
from gpuwait.topology.model import LINK_KINDS
from gpuwait.topology.presets import build_preset, preset_spec
from gpuwait.transport.profiles import TRANSPORTS

PRESET = "rocev2-400g-2tier"


@pytest.fixture(scope="module")
def fabric() -> FabricModel:
    spec = preset_spec(PRESET, servers=4)
    return FabricModel(build_preset(PRESET, servers=4), spec.routing, TRANSPORTS[spec.transport.name], parse_env({}))


def _estimate(collective: str, n_bytes: int, time_s: float) -> CollectiveEstimate:
    return CollectiveEstimate(collective, n_bytes, "ring", "Simple", 4, time_s, 0.0, time_s, None)


def _family(fabric: FabricModel, links: dict[int, tuple[float, float]], collective="all_reduce",
            n_bytes=2**20, time_s=1e-3) -> FamilyRun:
    """A family that puts (bytes per call, rate) on the given links and nothing elsewhere."""
    n = fabric.topo.n_links
    link_bytes, peak = np.zeros(n), np.zeros(n)
    for link, (b, rate) in links.items():
        link_bytes[link], peak[link] = b, rate
    return FamilyRun(_estimate(collective, n_bytes, time_s), link_bytes, peak)


def _network_links(fabric: FabricModel, tier: str) -> np.ndarray:
    return np.flatnonzero(link_tiers(fabric.topo) == tier)


def test_link_tiers_follow_link_kind_and_switch_level(fabric):
    topo = fabric.topo
    tiers = link_tiers(topo)
    kinds = np.asarray(LINK_KINDS, dtype=object)[topo.link_kind]
    assert len(tiers) == topo.n_links
    assert set(tiers[kinds == "nvlink"]) == {"nvlink"}
    # a 2-tier Clos: NIC-leaf and leaf-spine links, both directions, and no core
    assert {"host-leaf", "leaf-spine"} <= set(tiers)
    assert "spine-core" not in set(tiers)
    for link in _network_links(fabric, "leaf-spine")[:4]:
        names = (topo.node_name[topo.link_src[link]], topo.node_name[topo.link_dst[link]])
        assert any("spine" in str(name) for name in names)


def test_bytes_per_step_sum_families_times_calls_plus_background(fabric):
    n = fabric.topo.n_links
    a, b = _network_links(fabric, "leaf-spine")[:2]
    fam1 = _family(fabric, {a: (1e6, 10e9)})
    fam2 = _family(fabric, {a: (3e6, 20e9), b: (5e5, 5e9)})
    background = np.zeros(n)
    background[b] = 2e9
    busy = fabric.with_background(background)
    step_s = 0.25
    stats = link_stats(busy, [("dp all_reduce", fam1, 7), ("tp all_reduce", fam2, 3)], step_s)
    assert stats.bytes_per_step[a] == pytest.approx(7 * 1e6 + 3 * 3e6)
    assert stats.bytes_per_step[b] == pytest.approx(3 * 5e5 + 2e9 * step_s)
    others = np.setdiff1d(np.arange(n), [a, b])
    assert not stats.bytes_per_step[others].any()


def test_utilization_is_busiest_family_plus_background_over_capacity(fabric):
    n = fabric.topo.n_links
    capacity = effective_capacity_Bps(fabric.topo, fabric.transport)
    a, b = _network_links(fabric, "leaf-spine")[:2]
    fam1 = _family(fabric, {a: (1e6, 0.2 * capacity[a])})
    fam2 = _family(fabric, {a: (1e6, 0.3 * capacity[a]), b: (1e6, 0.9 * capacity[b])})
    background = np.zeros(n)
    background[a] = 0.1 * capacity[a]
    background[b] = 0.5 * capacity[b]
    stats = link_stats(fabric.with_background(background), [("x", fam1, 1), ("y", fam2, 1)], 1.0)
    # families on one link do not add: each runs at its own time; the peak is the busiest one
    assert stats.utilization[a] == pytest.approx(0.3 + 0.1)
    assert stats.utilization[b] == pytest.approx(1.0)  # 0.9 + 0.5, held to 1
    assert stats.utilization.min() >= 0.0 and stats.utilization.max() <= 1.0


def test_users_of_the_hottest_links(fabric):
    n = fabric.topo.n_links
    capacity = effective_capacity_Bps(fabric.topo, fabric.transport)
    a, b = _network_links(fabric, "leaf-spine")[:2]
    fam1 = _family(fabric, {a: (1e6, 0.7 * capacity[a])})
    fam2 = _family(fabric, {a: (1e6, 0.2 * capacity[a]), b: (1e6, 0.4 * capacity[b])})
    background = np.zeros(n)
    background[b] = 0.1 * capacity[b]
    stats = link_stats(fabric.with_background(background), [("dp all_reduce", fam1, 1), ("pp sendrecv", fam2, 1)],
                       1.0, top=2)
    assert stats.hottest(2).tolist() == [a, b]
    assert stats.users == {a: ["dp all_reduce", "pp sendrecv"], b: ["pp sendrecv", "storage read"]}


@pytest.mark.parametrize(("collective", "n", "factor"), [
    ("all_reduce", 8, 2 * 7 / 8), ("all_gather", 4, 3 / 4), ("reduce_scatter", 16, 15 / 16), ("sendrecv", 2, 1.0),
])
def test_collective_stats_algbw_and_busbw(fabric, collective, n, factor):
    n_bytes, time_s = 256 * 2**20, 4e-3
    run = _family(fabric, {}, collective, n_bytes, time_s)
    (stat,) = collective_stats([(f"dp {collective}", run, 5)], {"dp": n})
    algbw = n_bytes / time_s / 1e9
    assert stat.group == "dp" and stat.n_ranks == n and stat.count_per_step == 5
    assert stat.algbw_GBps == pytest.approx(algbw)
    assert stat.busbw_GBps == pytest.approx(algbw * factor)
    assert (stat.algorithm, stat.protocol) == ("ring", "Simple")


def test_collective_stats_zero_time_and_unknown_group(fabric):
    run = _family(fabric, {}, "all_reduce", 1024, 0.0)
    (stat,) = collective_stats([("ep all_to_all", run, 1)], {"dp": 8})
    assert stat.n_ranks == 1
    assert stat.algbw_GBps == 0.0 and stat.busbw_GBps == 0.0
