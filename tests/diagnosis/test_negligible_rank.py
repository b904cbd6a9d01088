"""A finding's severity and rank come from what it costs the step (session 31, diagrule): a finding
whose cost, re-simulated or estimated by its rule, is under MATTERS of the step is info and ranks
below every finding whose cost reaches it, whatever its rule's score or direct evidence; it stays
listed with its evidence. Hand-built candidates stand in for the rules (``evaluate``), so the
ranking is tested alone."""

from __future__ import annotations

import numpy as np
import pytest

from gpuwait.diagnosis import run
from gpuwait.diagnosis.observe import Observation
from gpuwait.diagnosis.rules import Candidate, RuleOutput
from gpuwait.faults import parse_inject
from gpuwait.report.conclusion import diagnosis_conclusion
from gpuwait.spec import ClusterSpec
from gpuwait.topology.presets import build_cluster

from .test_issue14 import _roce_dp


def _storage(lost_s: float | None, direct: bool = True) -> Candidate:
    return Candidate("storage-contention", "all", 0.9, {"data_wait_ms": 0.0}, "reads share the network", "separate it",
                     direct=direct, lost_s=lost_s)


def _collision(lost_s: float) -> Candidate:
    return Candidate("ecmp-collision", "leaf0->spine1", 1.0, {"lost_ms": round(lost_s * 1e3, 2)}, "two flows hash",
                     "adaptive routing", lost_s=lost_s)


@pytest.fixture
def rules_propose(monkeypatch):
    """Make the rules propose exactly the candidates given."""
    def propose(*candidates: Candidate) -> None:
        monkeypatch.setattr(run, "evaluate", lambda obs: RuleOutput(list(candidates)))
    return propose


def test_a_storage_finding_costing_nothing_beside_a_5_percent_collision_leaves_the_collision_the_main_cause(
        rules_propose):
    """Fixes not re-simulated: the storage finding, seen directly, estimated at 0 ms, was rated from
    the run's whole excess times its score (a warning) and ranked first on its direct evidence. Its
    cost is estimated, and it is nothing: info, listed below the collision's 5 % of the step."""
    scenario = _roce_dp()
    fault = parse_inject("slow-gpu:s0.gpu0:factor=1.3")  # the step runs beyond the healthy one
    probe = run.diagnose_scenario(scenario, [fault], measure_gain=False)
    step = probe.step_time_s
    assert step > probe.baseline_step_time_s * 1.05
    rules_propose(_storage(0.0), _collision(0.05 * step))
    diagnosis = run.diagnose_scenario(scenario, [fault], measure_gain=False)
    assert [(f.kind, f.severity) for f in diagnosis.findings] == [("ecmp-collision", "warning"),
                                                                   ("storage-contention", "info")]
    assert diagnosis.findings[1].evidence == {"data_wait_ms": 0.0}  # still listed, with its evidence
    conclusion = diagnosis_conclusion(diagnosis)
    assert [c["kind"] for c in conclusion.numbers["causes"]] == ["ecmp-collision"]  # the top is the main cause


TOPO = build_cluster(ClusterSpec.model_validate({
    "servers": 4, "server": {"gpus": 4, "nics": 2, "nic_speed": "100Gbps", "pcie_switches": 2, "cpus": 2},
    "fabric": {"tiers": 2, "switch_radix": 8}}))


def _obs() -> Observation:
    n = TOPO.n_gpus
    phases = {"compute": np.full(n, 0.8), "exposed_comm": np.full(n, 0.2), "straggler_wait": np.zeros(n),
              "data_wait": np.zeros(n), "bubble": np.zeros(n)}
    return Observation(TOPO, step_time_s=1.0, per_gpu_s=phases)


def test_from_telemetry_a_direct_cause_under_one_percent_ranks_below_an_inferred_one_over_it(rules_propose):
    """Direct evidence raises an estimated cost by half for ranking (DIRECT_EVIDENCE_MARGIN): a
    direct 0.8 % ranked as 1.2 %, above an inferred 1.1 %, though the first is info and the second a
    warning. The negligible one now ranks after."""
    rules_propose(_storage(0.008), _collision(0.011))
    diagnosis = run.diagnose_observation(_obs())
    assert [(f.kind, f.severity) for f in diagnosis.findings] == [("ecmp-collision", "warning"),
                                                                   ("storage-contention", "info")]
    # both above the warning level: direct evidence still wins within its margin
    rules_propose(_storage(0.03), _collision(0.04))
    assert run.diagnose_observation(_obs()).top.kind == "storage-contention"


def test_negligible_is_info_with_a_known_cost():
    """A packet diagnosis's info finding with no re-simulated gain has an unknown cost: not negligible."""
    def finding(severity: str, fixed: float | None) -> run.Finding:
        return run.Finding("ecmp-collision", "leaf0->spine1", severity, 1.0, {}, "", "", 1.0, fixed)

    assert run.negligible(finding("info", 0.999)) and run.negligible(finding("info", None))
    assert not run.negligible(finding("warning", 0.9))
    assert run.negligible(finding("info", 0.999), "mean flow completion time")
    assert not run.negligible(finding("info", None), "mean flow completion time")
