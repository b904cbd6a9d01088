"""The misses of the 11,000,000 fresh score (issue 14): each fix on a small case the old rule got wrong."""

from __future__ import annotations

from gpuwait.diagnosis import run
from gpuwait.diagnosis.observe import Observation
from gpuwait.diagnosis.rules import Candidate, RuleOutput
from gpuwait.spec import ClusterSpec
from gpuwait.topology.presets import build_cluster

TOPO = build_cluster(ClusterSpec.model_validate({
    "servers": 4, "server": {"gpus": 4, "nics": 4, "nic_speed": "100Gbps", "pcie_switches": 2, "cpus": 2},
    "fabric": {"tiers": 2, "switch_radix": 8}}))


def _ranked(monkeypatch, *candidates: Candidate) -> list[str]:
    monkeypatch.setattr(run, "evaluate", lambda obs: RuleOutput(list(candidates)))
    diagnosis = run.diagnose_observation(Observation(TOPO, step_time_s=1.0, baseline_step_time_s=1.0))
    return [f.kind for f in diagnosis.findings]


def test_direct_evidence_margin_is_relative(monkeypatch):
    """A direct 0.3 % cause no longer ranks above an inferred 2 % one (an absolute 2 % of the step
    did), while a direct cause still wins a near tie of large costs."""
    small_direct = Candidate("link-loss", "leaf0->spine0", 1.0, {}, "", "", direct=True, lost_s=0.003)
    inferred = Candidate("ecmp-collision", "leaf1->spine1", 1.0, {}, "", "", lost_s=0.02)
    assert _ranked(monkeypatch, small_direct, inferred) == ["ecmp-collision", "link-loss"]
    near_tie = Candidate("link-loss", "leaf0->spine0", 1.0, {}, "", "", direct=True, lost_s=0.09)
    larger = Candidate("ecmp-collision", "leaf1->spine1", 1.0, {}, "", "", lost_s=0.10)
    assert _ranked(monkeypatch, near_tie, larger) == ["link-loss", "ecmp-collision"]
