"""Findings as plain data (for --json, Parquet and the HTML report)."""

from __future__ import annotations

from gpuwait.diagnosis.run import Diagnosis, Finding


def finding_dict(finding: Finding, rank: int) -> dict:
    gain = finding.gain_fraction
    return {"rank": rank, "kind": finding.kind, "component": finding.component, "severity": finding.severity,
            "score": round(finding.score, 3), "evidence": finding.evidence, "explanation": finding.explanation,
            "fix": finding.fix, "step_time_s": finding.step_time_s, "fixed_step_time_s": finding.fixed_step_time_s,
            "expected_gain_fraction": None if gain is None else round(gain, 4), "direct_evidence": finding.direct}


def diagnosis_dict(diagnosis: Diagnosis) -> dict:
    return {"case": diagnosis.case, "measure": diagnosis.measure, "step_time_s": diagnosis.step_time_s,
            "baseline_step_time_s": diagnosis.baseline_step_time_s,
            "findings": [finding_dict(f, i + 1) for i, f in enumerate(diagnosis.findings)],
            "missing": list(diagnosis.missing), "notes": list(diagnosis.notes)}
