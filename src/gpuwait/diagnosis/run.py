"""Diagnose a scenario: simulate it (with its faults), observe what telemetry would show, let the
rules propose causes, then prove each proposed fix by simulating the scenario again with it applied.
Findings are ranked by that measured gain.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gpuwait.diagnosis.observe import Observation, observe_run
from gpuwait.diagnosis.rules import MATTERS, NOISE_SIGMAS, RULES, Candidate, evaluate, lost_range_s, same_cable
from gpuwait.errors import SpecError
from gpuwait.runner.workload import WorkloadRun, simulate_workload
from gpuwait.spec.faults import FaultSpec
from gpuwait.spec.scenario import Scenario

SEVERITIES = ("info", "warning", "critical")
#: share of the step a fix gives back: a warning from what matters (1 %, rules.MATTERS), critical
#: from a fifth of the step
CRITICAL_GAIN, WARNING_GAIN = 0.20, MATTERS
#: a cause seen directly (an error counter, a port state, a transport line) ranks above an inferred
#: one unless the inferred one's estimated cost is more than this share larger, when the costs are
#: the rules' estimates (the order fixes are re-simulated in; telemetry-only findings); re-simulated
#: gains rank as measured. Relative, because an inferred cost is uncertain in proportion to itself:
#: the rules read it off byte counts, and a hashed flow is not split, so an imbalance is known to a
#: flow's time on the hot link (two flows where the siblings carry one cost one flow's time, and the
#: floor they are read against is itself one flow's worth either way: about half the estimate).
#: An absolute 2 % of the step ranked a direct 0.3 % cause above an inferred 2 % one and flipped
#: near ties between large costs no more than a small one.
DIRECT_EVIDENCE_MARGIN = 0.5
#: causes that are the fabric as built (how it routes, how many uplinks it has), not a fault on it.
#: A step's loss splits as the fabric's own (the healthy fabric against the same fabric non-blocking
#: with adaptive routing) plus what the faults add to the fabric as it is. So a fault's fix is
#: measured on the faulted run (what removing it gives back from the fabric as built), and a fabric
#: cause's fix on the run with the other findings' fixes applied: re-simulating adaptive routing with a
#: dead NIC still there measures how the two interact (the doubled NIC port no routing can spread),
#: not what the routing costs, and ranked a fabric's 10 % collision below the 3 % the NIC adds.
FABRIC_KINDS = ("ecmp-collision", "oversubscription")


@dataclass(frozen=True)
class Finding:
    kind: str
    component: str
    severity: str
    score: float
    evidence: dict
    explanation: str
    fix: str
    step_time_s: float
    fixed_step_time_s: float | None  # the step re-simulated with the fix applied
    direct: bool = False             # seen in a counter, port state or transport line
    # the step the fix was measured against when it is not step_time_s: for a fabric cause
    # (FABRIC_KINDS), the step with the other findings' fixes applied; fixed_step_time_s is then that
    # step with this fix applied as well
    reference_step_time_s: float | None = None

    @property
    def gain_fraction(self) -> float | None:
        """The share of the step the fix gives back (for a fabric cause, once the faults are fixed)."""
        if self.fixed_step_time_s is None or self.step_time_s <= 0:
            return None
        reference = self.step_time_s if self.reference_step_time_s is None else self.reference_step_time_s
        return (reference - self.fixed_step_time_s) / self.step_time_s


@dataclass(frozen=True, eq=False)
class Diagnosis:
    case: str
    step_time_s: float
    baseline_step_time_s: float | None
    findings: tuple[Finding, ...]
    missing: tuple[str, ...]
    run: WorkloadRun | None = None
    observation: Observation | None = field(default=None, repr=False)
    measure: str = "step"  # what step_time_s measures: a training step, or a packet run's mean flow completion time
    notes: tuple[str, ...] = ()  # the simulated case's notes, as `run` prints them (its NCCL release, its calibration)

    @property
    def top(self) -> Finding | None:
        return self.findings[0] if self.findings else None


def apply_fix(scenario: Scenario, faults: Sequence[FaultSpec], candidate: Candidate) -> tuple[Scenario, list[FaultSpec]]:
    """The scenario and faults with the candidate's fix applied (what re-simulation runs): the fix
    its rule registered (:data:`~gpuwait.diagnosis.rules.RULES`)."""
    fixed, kept = RULES[candidate.kind].fix.scenario(scenario, list(faults), candidate.component)
    return fixed.model_copy(update={"faults": []}), kept


def _severity(share: float) -> str:
    """The severity of a cause costing ``share`` of the step (re-simulated, else estimated)."""
    if share >= CRITICAL_GAIN:
        return "critical"
    if share >= WARNING_GAIN:
        return "warning"
    return "info"


def negligible(finding: Finding, measure: str = "step") -> bool:
    """Whether what is known of a finding's cost puts it below the warning level: rated info with its
    fix re-simulated, or in a step diagnosis (``measure``), where a finding not re-simulated is rated
    from its rule's estimate of the time it costs (a cause with only a bound on its cost is info, no
    time lost being measured). A packet diagnosis rates a finding whose fix it did not re-simulate info
    too; that one's cost is unknown, so it is not negligible.

    A negligible finding is listed with its evidence but never outranks a finding whose cost reaches
    the warning level, whatever its score or direct evidence: the rank says which fix gives the step
    back the most, and a cause costing under MATTERS of the step gives back less than run-to-run
    variation hides (rules.MATTERS), beside one that gives back more. Direct evidence and score order
    findings within each of the two groups, as before (DIRECT_EVIDENCE_MARGIN). The conclusion names
    no negligible finding the main cause (report.conclusion), so the top finding is its main cause."""
    return finding.severity == "info" and (finding.gain_fraction is not None or measure == "step")


def diagnose_scenario(scenario: Scenario, faults: Sequence[FaultSpec] = (), *, steps: int | None = None,
                      measure_gain: bool = True, max_fixes: int = 4, case: int = 0,
                      max_memory_bytes: float | None = None) -> Diagnosis:
    """Simulate ``scenario`` with ``faults`` (and its own), diagnose case ``case`` (0 = the base),
    and re-simulate the ``max_fixes`` most likely fixes to measure their gain; every simulation held to
    ``max_memory_bytes`` (``max_memory``; None: half the machine's memory)."""
    if scenario.workload is None or scenario.workload.mode != "training":
        raise SpecError("diagnose: expected a scenario with a training workload (`workload:` with mode training)")
    all_faults = [*scenario.faults, *faults]
    bare = scenario.model_copy(update={"faults": []})
    run = simulate_workload(bare, steps, faults=all_faults, max_memory_bytes=max_memory_bytes)
    baseline = simulate_workload(bare, steps, max_memory_bytes=max_memory_bytes).results[case] if all_faults else run.results[case]
    result = run.results[case]
    workload = run.scenario.workload
    assert workload is not None  # the scenario simulated: faults change its workload, never remove it
    obs = observe_run(run.topo, result, run.effects, baseline, storage_read=workload.data.dataset_read_per_gpu > 0)
    out = evaluate(obs)
    raw = out.candidates
    step = result.breakdown.step_time_s
    excess = max(step - baseline.breakdown.step_time_s, 0.0) / step if step > 0 else 0.0
    candidates: list[Candidate] = []
    # the fixes re-simulated first are those the evidence says cost the most
    for cand in sorted(raw, key=lambda c: (-_ranked_share(c, step, excess), -c.score)):
        # a cable fails both ways: one finding per cable and kind
        if not any(c.kind == cand.kind and same_cable(c.component, cand.component) for c in candidates):
            candidates.append(cand)
    measured = candidates[:max_fixes] if measure_gain else []
    faults_fixed = _others_fixed(bare, all_faults, measured, steps, case, max_memory_bytes)
    findings = []
    for index, cand in enumerate(candidates):
        fixed = reference = None
        if index < len(measured):
            start = (bare, all_faults)
            if cand.kind in FABRIC_KINDS and faults_fixed is not None:
                start, reference = faults_fixed[:2], faults_fixed[2]
            fixed_scenario, fixed_faults = apply_fix(*start, cand)
            fixed = simulate_workload(fixed_scenario, steps, faults=fixed_faults,
                                      max_memory_bytes=max_memory_bytes).results[case].breakdown.step_time_s
        gain = ((step if reference is None else reference) - fixed) / step if fixed is not None and step > 0 else None
        # a fix not re-simulated: rated from its rule's estimate of the time the cause costs, as
        # from telemetry (exact readings), not from the whole run's excess times the rule's score,
        # which rated a cause estimated at 0 ms a warning whenever anything else slowed the step (a
        # rule that gives no estimate is still rated by that product: _lost_share)
        severity = _severity(gain) if gain is not None else _observed_severity(cand, step, excess)
        findings.append(Finding(cand.kind, cand.component, severity, cand.score,
                                cand.evidence, cand.explanation, cand.fix, step, fixed, cand.direct, reference))
    # re-simulated gains are measured alike whatever the evidence: they rank as measured (direct
    # evidence breaks a tie only); the bonus is for costs estimated from the evidence. A negligible
    # finding ranks below every other (negligible): a measured 0.2 % never tops an estimated 5 %
    findings.sort(key=lambda f: (negligible(f), -(f.gain_fraction if f.gain_fraction is not None else -1.0),
                                 -f.direct, -f.score))
    return Diagnosis(result.case, step, baseline.breakdown.step_time_s, tuple(findings), tuple(out.missing), run, obs,
                     notes=result.notes)


def _others_fixed(scenario: Scenario, faults: list[FaultSpec], measured: Sequence[Candidate], steps: int | None,
                  case: int, max_memory_bytes: float | None) -> tuple[Scenario, list[FaultSpec], float] | None:
    """The scenario with every measured finding's fix applied but the fabric causes' (FABRIC_KINDS), its
    faults, and its step: what a fabric cause's fix is measured against. None when no fabric cause
    is measured or no other finding is."""
    others = [c for c in measured if c.kind not in FABRIC_KINDS]
    if len(others) == len(measured) or not others:
        return None
    for cand in others:
        scenario, faults = apply_fix(scenario, faults, cand)
    step = simulate_workload(scenario, steps, faults=faults,
                             max_memory_bytes=max_memory_bytes).results[case].breakdown.step_time_s
    return scenario, faults, step


def _lost_share(cand: Candidate, step: float, excess: float, exposed: float = 1.0) -> float:
    """The share of the step a candidate costs, from the evidence: the rule's own estimate of the
    time lost, else (a cause whose counters give no duration) how sure the rule is times the share
    of the step the job runs beyond the model (when the telemetry carries it), never more than the
    share its communication is exposed (``exposed``: a network cause cannot cost more)."""
    if cand.lost_s is not None and step > 0:
        return cand.lost_s / step
    return cand.score * min(excess, exposed)


def _ranked_share(cand: Candidate, step: float, excess: float, exposed: float = 1.0) -> float:
    """The share a candidate ranks by before any re-simulation: its estimated cost, a directly seen
    cause's raised by DIRECT_EVIDENCE_MARGIN of itself."""
    return _lost_share(cand, step, excess, exposed) * (1.0 + DIRECT_EVIDENCE_MARGIN * cand.direct)


def _observed_severity(cand: Candidate, step: float, excess: float, exposed: float = 1.0, noise: float = 0.0) -> str:
    """The severity of a cause whose cost is estimated from readings of relative noise ``noise``:
    from the low end of its range (rules.lost_range_s) over the step read at the high end of its
    own, so a warning says the cause costs at least MATTERS of the step given what the readings
    resolve; a cost whose range reaches below that is info, its estimate and range in the evidence.
    A cause with only a bound on its cost (``bound_only``) is info. Exact readings (``noise`` 0)
    rate a step diagnosis's findings whose fixes are not re-simulated."""
    if cand.bound_only:
        return "info"
    if cand.lost_s is None or noise <= 0 or step <= 0:
        return _severity(_lost_share(cand, step, excess, exposed))
    low_s, _ = lost_range_s(cand.lost_s, noise)
    return _severity(low_s / (step * (1.0 + NOISE_SIGMAS * noise)))


def _with_range(cand: Candidate, noise: float) -> dict:
    """The candidate's evidence, with its estimated cost's range where the readings are noisy."""
    if cand.lost_s is None or noise <= 0:
        return cand.evidence
    low_s, high_s = lost_range_s(cand.lost_s, noise)
    return {"lost_ms": round(float(cand.lost_s) * 1e3, 2), **cand.evidence,
            "lost_ms_range": f"{low_s * 1e3:.2f}-{high_s * 1e3:.2f}"}


def diagnose_observation(observation: Observation, case: str = "telemetry") -> Diagnosis:
    """Findings from an observation alone (imported telemetry): no re-simulation, so severity and
    rank come from the time each cause costs as its rule estimates it from the evidence (a direct
    observation ranks first unless an inferred cause's cost is more than DIRECT_EVIDENCE_MARGIN larger).
    A cause whose counters give only a bound on its cost (``bound_only``: a link-down count without
    a duration) is rated info: no time lost was measured. Info findings rank after the others
    (:func:`negligible`), by the same estimate (a bound for a bound-only one)."""
    out = evaluate(observation)
    step = observation.step_time_s or 0.0
    # without a step time the phases and the rules' costs are per second of the run (rules._step), so
    # a cost is rated and ranked as its share of that second, not of an unknown step read as 0
    frame_s = step or 1.0
    base = observation.baseline_step_time_s
    excess = max(step - base, 0.0) / step if step and base is not None else 0.0
    per_gpu = observation.per_gpu_s
    exposed = float(per_gpu["exposed_comm"].mean()) / frame_s if per_gpu is not None else 1.0
    ranked = sorted(out.candidates, key=lambda c: (-_ranked_share(c, frame_s, excess, exposed), -c.score))
    candidates: list[Candidate] = []
    for cand in ranked:
        if not any(c.kind == cand.kind and same_cable(c.component, cand.component) for c in candidates):
            candidates.append(cand)
    noise = observation.reading_noise
    findings = [Finding(c.kind, c.component, _observed_severity(c, frame_s, excess, exposed, noise), c.score,
                        _with_range(c, noise), c.explanation, c.fix, step, None, c.direct) for c in candidates]
    # by estimated cost as ranked above, a negligible finding after every other (negligible): a direct
    # 0.8 % raised by DIRECT_EVIDENCE_MARGIN, or an estimate whose range reaches below MATTERS, no
    # longer tops a cause resolved at 1 % of the step or more
    findings.sort(key=negligible)
    missing = tuple(dict.fromkeys([*observation.missing, *out.missing]))
    return Diagnosis(case, step, base, tuple(findings), missing, None, observation)
