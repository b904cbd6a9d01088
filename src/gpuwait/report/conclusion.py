"""The sentence a report opens with: what the results say, computed from them.

A comparison of cases names the best case, how much it saves per step against the first case,
and the part of the step that saving comes from (a communication group's exposed time, or a
breakdown category such as the pipeline bubble). When the cases form a chain that changes one
thing at a time (RoCEv2 + ECMP -> RoCEv2 + adaptive routing -> InfiniBand + adaptive routing), each
link of the chain gets its own sentence, so the reader sees which change mattered. A single case
says how much of its step the network costs and where. A diagnosis lists its causes, ranked by the
step time their fix gives back.

Every number in a sentence is also returned in :attr:`Conclusion.numbers` (SI units), so a test
can hold the words to the results.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gpuwait.diagnosis.run import negligible
from gpuwait.report.words import part_name
from gpuwait.steps.result import BREAKDOWN_CATEGORIES, RunResult

__all__ = ["Conclusion", "diagnosis_conclusion", "part_name", "step_parts_s", "workload_conclusion"]

#: A difference below this share of the step is reported as no difference.
NEGLIGIBLE_FRACTION = 1e-3

@dataclass(frozen=True)
class Conclusion:
    """The opening sentences (plain text, no markup) and the numbers they state."""

    sentences: tuple[str, ...]
    numbers: dict = field(default_factory=dict)

    @property
    def text(self) -> str:
        return " ".join(self.sentences)


def _ms(time_s: float) -> str:
    return f"{abs(time_s) * 1e3:,.1f} ms"


def step_parts_s(result: RunResult) -> dict[str, float]:
    """The step split into parts that add up to it: each communication group's exposed time and every
    other breakdown category (job means, seconds per step)."""
    b = result.breakdown
    means = b.job_mean_s()
    parts = {c: means.get(c, 0.0) for c in BREAKDOWN_CATEGORIES if c != "exposed_comm"}
    groups = dict(b.exposed_comm_s)
    parts |= groups
    # what the groups do not account for of the exposed communication stays one part
    rest = means.get("exposed_comm", 0.0) - sum(groups.values())
    if abs(rest) > 1e-12:
        parts["exposed_comm"] = rest
    return parts


def _saving(before: RunResult, after: RunResult) -> dict:
    """What ``after`` saves per step against ``before``, and the part that moved most in that direction."""
    saved_s = before.breakdown.step_time_s - after.breakdown.step_time_s
    p0, p1 = step_parts_s(before), step_parts_s(after)
    deltas = {k: p0.get(k, 0.0) - p1.get(k, 0.0) for k in set(p0) | set(p1)}
    sign = 1.0 if saved_s >= 0 else -1.0
    # the part that moved most in the step's direction; ties go to the name, so the choice is stable
    part = max(sorted(deltas), key=lambda k: sign * deltas[k])
    step_s = before.breakdown.step_time_s
    return {"saved_s": saved_s, "saved_fraction": saved_s / step_s if step_s > 0 else 0.0,
            "part": part, "part_saved_s": deltas[part]}


def _saving_sentence(before: RunResult, after: RunResult, s: dict) -> str:
    if abs(s["saved_fraction"]) < NEGLIGIBLE_FRACTION:
        return (f"{after.case} makes no difference to the step against {before.case} "
                f"({_ms(s['saved_s'])}, under {NEGLIGIBLE_FRACTION:.1%}).")
    verb = "saves" if s["saved_s"] > 0 else "costs"
    more = "" if s["saved_s"] > 0 else " more"
    return (f"{after.case} {verb} {_ms(s['saved_s'])}{more} per step ({abs(s['saved_fraction']):.1%}) against "
            f"{before.case}, of which {_ms(s['part_saved_s'])} in the {part_name(s['part'])}.")


def _serving_case(result: RunResult) -> Conclusion:
    s = dict(result.serving or {})
    if s["tpot_s"] is None:  # one output token: no decode step, the batch is its prefill
        extra = s["ttft_s"] / s["ideal_ttft_s"] - 1 if s["ideal_ttft_s"] else 0.0
        return Conclusion((f"{result.case}: time to first token {_ms(s['ttft_s'])} (ideal network "
                           f"{_ms(s['ideal_ttft_s'])}), time per output token n/a (one output token, no decode "
                           f"step): the network adds {extra:.1%} to the time to first token.",),
                          s | {"ttft_network_fraction": extra})
    extra = s["tpot_s"] / s["ideal_tpot_s"] - 1 if s.get("ideal_tpot_s") else 0.0
    numbers = s | {"tpot_network_fraction": extra}
    return Conclusion((f"{result.case}: time to first token {_ms(s['ttft_s'])} (ideal network {_ms(s['ideal_ttft_s'])}), "
                       f"time per output token {_ms(s['tpot_s'])} (ideal network {_ms(s['ideal_tpot_s'])}): "
                       f"the network adds {extra:.1%} to every output token.",), numbers)


def _single_case(result: RunResult) -> Conclusion:
    b = result.breakdown
    step_s, cost_s = b.step_time_s, b.network_cost_s
    groups = dict(b.exposed_comm_s)
    numbers: dict[str, float | str] = {"step_time_s": step_s, "network_cost_s": cost_s, "wait_fraction": b.wait_fraction}
    text = (f"{result.case}: the step takes {_ms(step_s)}; an ideal network would make it {_ms(cost_s)} shorter "
            f"({cost_s / step_s if step_s > 0 else 0.0:.1%}).")
    sentences = [text]
    if groups:
        top = max(sorted(groups), key=lambda g: groups[g])
        numbers |= {"top_group": top, "top_group_s": groups[top]}
        sentences.append(f"The most exposed communication is the {part_name(top)} ({_ms(groups[top])} per step).")
    return Conclusion(tuple(sentences), numbers)


def workload_conclusion(results: Sequence[RunResult]) -> Conclusion:
    """The opening of a workload report: the best case against the first with its main cause and,
    for three or more cases, what each case changes against the one before it."""
    results = list(results)
    if not results:
        return Conclusion(())
    if len(results) == 1:
        return _serving_case(results[0]) if results[0].serving else _single_case(results[0])
    base = results[0]
    best = min(results[1:], key=lambda r: r.breakdown.step_time_s)
    head = _saving(base, best)
    sentences = [_saving_sentence(base, best, head)]
    numbers = {"base": base.case, "best": best.case, **head, "steps": []}
    if len(results) > 2:
        sentences.append("One change at a time:")
        for before, after in zip(results, results[1:]):
            s = _saving(before, after)
            numbers["steps"].append({"before": before.case, "after": after.case, **s})
            sentences.append(_saving_sentence(before, after, s))
    return Conclusion(tuple(sentences), numbers)


#: The costs of a healthy step that are its design, not a fault (a diagnosis compares against a healthy model of
#: the same design, so it finds none of them), as `run` measures them: its words for each.
DESIGN_COSTS = {"network_s": "exposed communication against an ideal network",
                "bubble_s": "pipeline bubble", "data_wait_s": "data wait"}


def design_costs_s(diagnosis) -> dict[str, float]:
    """A step diagnosis's design costs, seconds per step, those above 0 (in :data:`DESIGN_COSTS` order): the
    diagnosed run's network cost against an ideal network and its job-mean pipeline bubble and data wait, the
    figures `gpuwait run` prints for the same case. Empty without a simulated step (telemetry, packet runs)."""
    run = getattr(diagnosis, "run", None)
    if diagnosis.measure != "step" or run is None or not diagnosis.step_time_s:
        return {}
    result = next((r for r in run.results if r.case == diagnosis.case), None)
    if result is None:
        return {}
    means = result.breakdown.job_mean_s()
    costs = {"network_s": result.breakdown.network_cost_s, "bubble_s": means.get("bubble", 0.0),
             "data_wait_s": means.get("data_wait", 0.0)}
    # below a millionth of the step is rounding, not a cost
    return {k: v for k, v in costs.items() if v > 1e-6 * diagnosis.step_time_s}


def diagnosis_conclusion(diagnosis, limit: int = 3) -> Conclusion:
    """The causes of a diagnosis, ranked, each with the time its fix gives back."""
    # a negligible finding (diagnosis.run.negligible: a degraded link no flow crosses, a fix that
    # gives nothing back) is listed, never named the main cause
    findings, below = [], []
    for f in diagnosis.findings:
        if negligible(f, diagnosis.measure):
            below.append(f"{f.kind.replace('-', ' ')} on {f.component}")
        else:
            findings.append(f)
    if not findings:
        sentences = [f"{diagnosis.case}: no cause of lost time found."]
        if below:
            sentences.append("Seen, but below the warning level: " + "; ".join(below[:limit]) + ".")
        costs = design_costs_s(diagnosis)
        step_s = diagnosis.step_time_s
        for name, cost_s in costs.items():
            sentences.append(f"Design cost, not a fault: {DESIGN_COSTS[name]}, {_ms(cost_s)} per step "
                             f"({cost_s / step_s:.1%}).")
        if costs:
            sentences.append("What changing the design would give back is a what-if run: `gpuwait run` with variants, "
                             "or `gpuwait sweep` over layouts, routing and fabrics (docs/sweeps.md).")
        return Conclusion(tuple(sentences), {"causes": [], "design_costs_s": costs})
    unit = "per step" if diagnosis.measure == "step" else f"of the {diagnosis.measure}"
    causes, parts = [], []
    for f in findings[:limit]:
        gain = f.gain_fraction
        gain_s = None if gain is None else gain * f.step_time_s
        causes.append({"kind": f.kind, "component": f.component, "gain_s": gain_s, "gain_fraction": gain})
        what = f"{f.kind.replace('-', ' ')} on {f.component}"
        parts.append(what if gain_s is None else f"{what} (fixing it gives back {_ms(gain_s)} {unit}, {gain:.1%})")
    first = f"{diagnosis.case}: the main cause is {parts[0]}."
    sentences = [first]
    if len(parts) > 1:
        sentences.append("Next: " + "; ".join(parts[1:]) + ".")
    return Conclusion(tuple(sentences), {"causes": causes})
