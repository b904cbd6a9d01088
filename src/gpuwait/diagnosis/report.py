"""Findings as plain data (for --json, Parquet and the HTML report)."""

from __future__ import annotations

from gpuwait.diagnosis.run import Diagnosis, Finding


def finding_dict(finding: Finding, rank: int) -> dict:
    """A finding as plain data. ``reference_step_time_s`` is the step its fix was measured against: the
    step itself, or for a fabric cause the step with the other findings' fixes applied (run.FABRIC_KINDS), so
    (reference - fixed) / step is ``expected_gain_fraction`` whichever it is."""
    gain = finding.gain_fraction
    reference = finding.step_time_s if finding.reference_step_time_s is None else finding.reference_step_time_s
    return {"rank": rank, "kind": finding.kind, "component": finding.component, "severity": finding.severity,
            "score": round(finding.score, 3), "evidence": finding.evidence, "explanation": finding.explanation,
            "fix": finding.fix, "step_time_s": finding.step_time_s,
            "reference_step_time_s": None if finding.fixed_step_time_s is None else reference,
            "fixed_step_time_s": finding.fixed_step_time_s,
            "expected_gain_fraction": None if gain is None else round(gain, 4), "direct_evidence": finding.direct}


def diagnosis_dict(diagnosis: Diagnosis) -> dict:
    return {"case": diagnosis.case, "measure": diagnosis.measure, "step_time_s": diagnosis.step_time_s,
            "baseline_step_time_s": diagnosis.baseline_step_time_s,
            "findings": [finding_dict(f, i + 1) for i, f in enumerate(diagnosis.findings)],
            "missing": list(diagnosis.missing), "notes": list(diagnosis.notes)}
