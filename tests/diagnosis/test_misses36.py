"""Misses of the 29,000,000 score (session 36): what telemetry without gpuwait's own series must still show."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpuwait.diagnosis.accuracy import FABRICS, Case, scenario_for
from gpuwait.diagnosis.observe import TELEMETRY_READING_NOISE
from gpuwait.diagnosis.rules import same_cable
from gpuwait.diagnosis.run import diagnose_observation
from gpuwait.diagnosis.telemetry import export_metrics, foreign_beyond_sources, observe_telemetry
from gpuwait.faults import parse_inject
from gpuwait.runner.workload import simulate_workload
from gpuwait.telemetry.bundle import TelemetryBundle
from gpuwait.telemetry.metricset import MetricSet
from gpuwait.topology.model import LinkKind

FOREIGN = "gpuwait_link_foreign_bytes_per_second"


def _observed_without_foreign(run, seed: int = 0):
    """The run's export with 1 % noise on every reading and no foreign-traffic series (no real exporter has one)."""
    metrics = export_metrics(run)
    noise = np.random.default_rng(seed).normal(1.0, TELEMETRY_READING_NOISE, len(metrics.value))
    kept = [(n, dict(lab), float(v) * k) for n, lab, v, k in zip(metrics.name, metrics.labels, metrics.value, noise)
            if n != FOREIGN]
    bundle = TelemetryBundle(root=Path("."), metric_files={"export.prom": MetricSet.from_samples(kept, info=metrics.info)})
    return observe_telemetry(bundle, run.topo)


def test_another_tenants_bytes_on_one_uplink_are_read_off_the_port_counters():
    """Seed 29,000,097: another job holding 90 % of one leaf uplink (69.9 % of the step), its
    foreign-traffic series dropped, was named as an ECMP collision on a downlink beside it. The port
    counters still count the other job's bytes: one uplink sending more than its leaf received from
    all its hosts together cannot carry only the job's bytes (valley-free routing), so the excess is
    another tenant's. Built here with a 3D-parallel job (the seed's was data parallel); the job's own
    bytes on the loaded uplink are read as its siblings' (a hash spreads flows alike)."""
    scenario = scenario_for(Case("roce-3tier", "3d-8b", None, None))
    healthy = simulate_workload(scenario)
    topo = healthy.topo
    uplinks = np.flatnonzero((topo.link_kind == LinkKind.FABRIC) & (topo.node_tier[topo.link_src] == 1)
                             & (healthy.results[0].links.bytes_per_step > 0))
    target = topo.link_name(int(uplinks[0]))
    run = simulate_workload(scenario, faults=[parse_inject(f"noisy-neighbor:{target}:load_fraction=0.7")])
    obs = _observed_without_foreign(run)
    link = topo.link_id(target)
    true_Bps = float(run.effects.foreign_Bps[link])
    assert obs.link_foreign_Bps is not None
    assert 0.8 * true_Bps < obs.link_foreign_Bps[link] < 1.25 * true_Bps
    top = diagnose_observation(obs).top
    assert top is not None and top.kind == "noisy-neighbor" and same_cable(top.component, target)
    assert top.severity in ("warning", "critical")


@pytest.mark.parametrize("fabric", sorted(FABRICS))
def test_a_healthy_jobs_own_bytes_never_read_as_another_tenants(fabric):
    """On every fabric of the suite (ECMP and adaptive, 2 and 3 tiers, rail-optimized, oversubscribed),
    a healthy run's port counters, with 1 % noise, put no byte beyond what the job's hosts sent: its
    routing is valley-free, so the bound of foreign_beyond_sources holds for the job's own traffic."""
    workload = "3d-8b" if fabric == "ib-rail-ar" else "dp-8b"
    run = simulate_workload(scenario_for(Case(fabric, workload, None, None)))
    obs = _observed_without_foreign(run, seed=1)
    assert obs.link_foreign_Bps is not None and not obs.link_foreign_Bps.any()


def test_the_bound_tier_by_tier_on_a_hand_built_count():
    """Closed form on the 3-tier suite fabric. Hosts send 10 GB into a leaf; one uplink carries 40 GB,
    its siblings 2 GB each: at least 30 GB are not the job's (the bound), and as its siblings the job
    has 2 GB on it, so 38 GB are another tenant's. The spine above received 2 GB of the job's from
    that leaf and nothing else; one of its core uplinks carries 35 GB, its siblings 1 GB: at least
    33 GB (the bound, tier by tier), 34 GB as its siblings say."""
    topo = simulate_workload(scenario_for(Case("roce-3tier", "dp-8b", None, None))).topo
    tier = topo.node_tier
    fabric = topo.link_kind == LinkKind.FABRIC
    up1 = int(np.flatnonzero(fabric & (tier[topo.link_src] == 1) & (tier[topo.link_dst] == 2))[0])
    leaf, spine = int(topo.link_src[up1]), int(topo.link_dst[up1])
    leaf_up = np.flatnonzero(fabric & (topo.link_src == leaf) & (tier[topo.link_dst] == 2))
    spine_up = np.flatnonzero(fabric & (topo.link_src == spine) & (tier[topo.link_dst] == 3))
    up2 = int(spine_up[0])
    host_in = np.flatnonzero((topo.link_dst == leaf) & (tier[topo.link_src] == 0))
    counted = np.zeros(topo.n_links)
    counted[host_in] = 10e9 / len(host_in)
    counted[leaf_up], counted[spine_up] = 2e9, 1e9
    counted[up1], counted[up2] = 40e9, 35e9
    foreign = foreign_beyond_sources(topo, counted, step_s=2.0, noise=0.0)
    assert len(leaf_up) > 1 and len(spine_up) > 1
    assert foreign[up1] == pytest.approx(38e9 / 2.0)
    assert foreign[up2] == pytest.approx(34e9 / 2.0)
    assert np.count_nonzero(foreign) == 2
    # a host port without a reading is not one that sent nothing: the leaf's uplinks are not weighed,
    # and the spine above is fed by the whole 40 GB
    read = np.ones(topo.n_links, bool)
    read[host_in[0]] = False
    assert not foreign_beyond_sources(topo, np.where(read, counted, 0.0), 2.0, 0.0, read).any()
    # an excess within the readings' noise is not counted
    counted[up1], counted[up2] = 10.2e9, 1e9
    assert not foreign_beyond_sources(topo, counted, 2.0, TELEMETRY_READING_NOISE).any()


def test_the_jobs_own_reads_over_the_compute_fabric_are_a_cause_of_the_case():
    """Seed 29,000,060: a storage-slow case gets dataset reads over the compute fabric (storage can
    only slow a job that reads), and those reads cost the healthy step 2.0 % (a separate storage
    network gives that back) where the injected slowdown costs nothing and the fabric's own collision
    1.4 %. The harness expected the collision, and the diagnosis's measured storage-contention warning
    counted a miss. The scenario's own reads are now one of its own causes, weighed as the fabric's is:
    the larger of the two, when it matters and the fault costs less. Built on the suite's MoE job
    (reads 3 % of its step, fabric 0.4 %) and its 3-tier data-parallel job (reads 5 %, fabric 11 %)."""
    from gpuwait.diagnosis.randomcases import RandomCase, _own_reads_share, _with_reads, score_case

    inject = "storage-slow:all:throughput_fraction=0.9"  # a backend at 90 % of its ports: costs nothing here
    reads = _with_reads(scenario_for(Case("roce-ecmp", "moe-ep64", None, None)), 2.5e9)
    healthy_s = simulate_workload(reads).results[0].breakdown.step_time_s
    assert _own_reads_share(reads, healthy_s) > 0.02
    assert _own_reads_share(scenario_for(Case("roce-ecmp", "moe-ep64", None, None)), healthy_s) == 0.0
    outcome = score_case(RandomCase(1, "roce-ecmp", "moe-ep64", inject, "storage-slow", False, reads))
    assert outcome.cost < 0.01 and outcome.intrinsic < 0.01
    assert outcome.expect_kind == "storage-contention" and outcome.component_ok
    collided = _with_reads(scenario_for(Case("roce-3tier", "dp-8b", None, None)), 2.5e9)
    outcome = score_case(RandomCase(2, "roce-3tier", "dp-8b", inject, "storage-slow", False, collided))
    assert outcome.expect_kind == "ecmp-collision"  # the fabric's own collision costs more than the reads
