"""Issue 14: per-collective port bytes from port counters sampled at a scrape interval, aligned with
the collectives' time windows (gpuwait.telemetry.phases), and the ECMP collision the rules read per
collective named from telemetry alone.

Hash collisions are found within one collective's phase (Al-Fares et al., "Hedera", NSDI 2010,
section 2); a port counter only counts bytes, so the phase's bytes come from sampling the counter
faster than the phases change and attributing each interval's increase to the phases running in it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpuwait.diagnosis.observe import observe_run
from gpuwait.diagnosis.rules import RULES, RuleOutput
from gpuwait.diagnosis.telemetry import export_metrics, observe_telemetry
from gpuwait.errors import SpecError
from gpuwait.runner.workload import simulate_workload
from gpuwait.spec import Scenario, validate_data
from gpuwait.telemetry.bundle import TelemetryBundle
from gpuwait.telemetry.phases import (
    PORT_BYTES_METRIC,
    phase_bytes_from_metrics,
    phase_bytes_from_series,
    phase_windows,
    port_byte_series,
)
from gpuwait.telemetry.prometheus import parse_prometheus_text, to_prometheus_text

#: a 3D-parallel job (TP 8 in a server, 2 pipeline stages, DP across) on a 3-tier RoCE fabric of radix-8
#: switches hashed by ECMP (the case of tests/diagnosis/test_collision_timing.py)
SCENARIO = {"name": "3d-on-3-tiers",
            "cluster": {"preset": "rocev2-400g-2tier", "servers": 8, "server": {"template": "hgx-h100-4nic"},
                        "fabric": {"kind": "clos", "tiers": 3, "switch_radix": 8, "leaf_downlinks": 4},
                        "transport": {"name": "rocev2"}, "routing": {"kind": "ecmp", "seed": 473, "per_switch_seed": True}},
            "workload": {"model": {"preset": "llama-8b", "seq_len": 4096},
                         "parallel": {"tp": 8, "pp": 2, "micro_batch": 1, "global_batch": 64},
                         "compute": {"gpu": "H100-SXM", "efficiency": 0.5, "jitter_cv": 0.0, "seed": 1}, "steps": 1}}


@pytest.fixture(scope="module")
def run():
    return simulate_workload(validate_data(Scenario, SCENARIO, source="test", require_units=False))


@pytest.mark.parametrize("interval_s", [0.001, 0.01, 0.1])
def test_reconstructed_phase_bytes_match_the_simulator_within_the_sampling_bound(run, interval_s):
    """Per collective and network port, the bytes read back from the sampled counters are the
    simulator's exact ones (LinkStats.phase_bytes) to the counters' rounding, even at 100 ms where
    the 4 ms tensor-parallel windows never fill an interval alone: the collectives run at a steady
    rate in the series, and least squares over the intervals separates them exactly then."""
    result, topo = run.results[0], run.topo
    metrics = port_byte_series(result, topo, interval_s)
    phased, stats = phase_bytes_from_metrics(metrics, topo, result.breakdown.step_time_s)
    net = topo.network_links
    windows = phase_windows(result)
    n_samples = len(metrics.select(name=PORT_BYTES_METRIC)) // int(net.sum())
    assert {c.label for c in stats} == set(result.links.phase_bytes)
    for label, exact in result.links.phase_bytes.items():
        # counters are whole bytes: each sample rounds by half a byte at most
        assert np.abs(phased[label] - exact)[net].max() <= n_samples, label
        stat = next(c for c in stats if c.label == label)
        assert stat.time_s == pytest.approx(sum(b - a for w in windows[label] for a, b in w))
    stamps = np.unique(metrics.select(name=PORT_BYTES_METRIC).timestamp_s)
    assert np.diff(stamps).max() == pytest.approx(interval_s)


def test_uneven_rates_stay_within_the_reported_bound():
    """Two collectives whose windows interleave and overlap, each sending its bytes in the first half
    of every window (not steady): on every port the error is within the bytes of the intervals a
    phase shares (what the reader reports as uncertain), which last at most the phases' overlap plus
    two intervals per window."""
    rng = np.random.default_rng(7)
    windows = {"a": [(0.10 + 0.5 * k, 0.30 + 0.5 * k) for k in range(8)],
               "b": [(0.25 + 0.5 * k, 0.45 + 0.5 * k) for k in range(8)]}
    ports = 6
    rate = {"a": rng.uniform(0, 1e9, ports), "b": rng.uniform(0, 1e9, ports)}

    def sent_by(t: np.ndarray) -> np.ndarray:  # cumulative bytes at times t: first half of each window
        out = np.zeros((len(t), ports))
        for lab, w in windows.items():
            for a, b in w:
                half = (b - a) / 2
                out += np.outer(np.clip(t - a, 0, half) / half, rate[lab] * (b - a))
        return out

    exact = {lab: sum(rate[lab] * (b - a) for a, b in w) for lab, w in windows.items()}
    for dt in (0.05, 0.005):
        t = np.arange(0.0, 4.0 + dt / 2, dt)
        got = phase_bytes_from_series(t, sent_by(t), windows)
        for lab in windows:
            err = np.abs(got.bytes[lab] - exact[lab])
            assert (err <= got.uncertain[lab] * (1 + 1e-9) + 1e-3).all(), (dt, lab)
            # closed form: the overlap (8 x 50 ms) and two intervals per window, at the port's peak rate
            # (each phase sends at twice its mean in the first half of its windows)
            shared_s = 8 * 0.05 + 2 * len(windows[lab]) * dt
            assert (got.uncertain[lab] <= shared_s * 2 * (rate["a"] + rate["b"])).all()


def test_a_collision_is_named_from_telemetry_only(run):
    """The 3D job hashed by ECMP: from the exported series alone (Prometheus text, read back), with
    the port counters scraped every 10 ms, the collision rule reads per collective and finds what it
    finds on the simulator's own per-phase bytes: the same lost time, on a link as hot in that phase
    as the simulator's pick (ECMP loads several links alike). Without the sampled counters the
    observation says per-collective bytes are missing."""
    result, topo = run.results[0], run.topo
    sim = observe_run(topo, result, run.effects)
    out_sim = RuleOutput()
    RULES["ecmp-collision"].check(sim, out_sim)
    (expected,) = out_sim.candidates
    text = to_prometheus_text(export_metrics(run, scrape_interval_s=0.01))
    bundle = TelemetryBundle(root=Path("."), metric_files={"export.prom": parse_prometheus_text(text)})
    obs = observe_telemetry(bundle, topo)
    assert obs.link_phase_bytes is not None and not any("per-collective" in m for m in obs.missing)
    out = RuleOutput()
    RULES["ecmp-collision"].check(obs, out)
    (found,) = out.candidates
    assert found.kind == "ecmp-collision"
    assert found.lost_s == pytest.approx(expected.lost_s, rel=1e-3)
    label = found.evidence["collective"]
    assert label == expected.evidence["collective"]
    rate = sim.link_rate_Bps
    busy = sim.link_phase_bytes[label] / rate
    assert busy[topo.link_id(found.component)] == pytest.approx(busy[topo.link_id(expected.component)], rel=1e-6)

    plain = TelemetryBundle(root=Path("."), metric_files={"export.prom": export_metrics(run)})
    without = observe_telemetry(plain, topo)
    assert without.link_phase_bytes is None
    assert any("per-collective port bytes" in m for m in without.missing)


@pytest.mark.parametrize("bad", [0.0, -1.0, 1e-4, float("nan"), "1s"])
def test_a_bad_scrape_interval_is_one_clear_error(run, bad):
    with pytest.raises(SpecError, match="scrape interval"):
        port_byte_series(run.results[0], run.topo, bad)
