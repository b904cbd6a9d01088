"""The sentence a report opens with states numbers read from the results, not made up."""

from __future__ import annotations

import re

import pytest

from gpuwait.diagnosis.run import Diagnosis, Finding
from gpuwait.report.conclusion import diagnosis_conclusion, part_name, step_parts_s, workload_conclusion
from gpuwait.report.html import render_html_report

from .conftest import make_result

_SAVES = re.compile(r"^(?P<after>.+) saves (?P<ms>[\d,.]+) ms per step \((?P<pct>[\d.]+)%\) against (?P<before>.+), "
                    r"of which (?P<part_ms>[\d,.]+) ms in the (?P<part>.+)\.$")


def check_saving_sentence(sentence: str, by_case: dict) -> None:
    """``sentence`` ("X saves A ms per step (B %) against Y, of which C ms in the P") against the results."""
    m = _SAVES.match(sentence)
    assert m, sentence
    before, after = by_case[m["before"]], by_case[m["after"]]
    saved_s = before.breakdown.step_time_s - after.breakdown.step_time_s
    assert float(m["ms"].replace(",", "")) == pytest.approx(saved_s * 1e3, abs=0.051)
    assert float(m["pct"]) == pytest.approx(100 * saved_s / before.breakdown.step_time_s, abs=0.051)
    parts0, parts1 = step_parts_s(before), step_parts_s(after)
    part = next(k for k in parts0 if part_name(k) == m["part"])
    assert float(m["part_ms"].replace(",", "")) == pytest.approx((parts0[part] - parts1[part]) * 1e3, abs=0.051)
    # the part named is the one that moved most
    assert all(parts0[part] - parts1[part] >= parts0[k] - parts1.get(k, 0.0) for k in parts0)


def test_parts_add_up_to_the_step():
    r = make_result()
    assert sum(step_parts_s(r).values()) == pytest.approx(r.breakdown.step_time_s, rel=1e-9)


def test_comparison_names_the_saving_and_its_cause():
    slow, fast = make_result("RoCEv2, ECMP"), make_result("InfiniBand, adaptive routing", comm_scale=0.5)
    c = workload_conclusion([slow, fast])
    assert len(c.sentences) == 1
    check_saving_sentence(c.sentences[0], {r.case: r for r in (slow, fast)})
    assert c.numbers["part"] == "dp all_reduce" and "DP all-reduce" in c.text


def test_a_chain_of_cases_gets_one_sentence_per_change():
    a, b, c = make_result("A"), make_result("B", comm_scale=0.5), make_result("C", comm_scale=0.5)
    conclusion = workload_conclusion([a, b, c])
    by_case = {r.case: r for r in (a, b, c)}
    check_saving_sentence(conclusion.sentences[0], by_case)
    check_saving_sentence(conclusion.sentences[2], by_case)
    assert conclusion.sentences[3].startswith("C makes no difference to the step against B")


def test_a_slower_case_is_said_to_cost():
    text = workload_conclusion([make_result("A", comm_scale=0.5), make_result("B")]).text
    assert text.startswith("B costs ") and "more per step" in text


def test_a_single_case_says_what_the_network_costs():
    r = make_result()
    c = workload_conclusion([r])
    assert c.numbers["network_cost_s"] == r.breakdown.network_cost_s
    assert f"{r.breakdown.network_cost_s * 1e3:,.1f} ms shorter" in c.text


def test_the_html_report_opens_with_the_conclusion():
    slow, fast = make_result("RoCEv2, ECMP"), make_result("InfiniBand, adaptive routing", comm_scale=0.5)
    page = render_html_report([slow, fast])
    sentence = workload_conclusion([slow, fast]).sentences[0]
    assert page.index('id="conclusion"') < page.index("<h2>")
    assert sentence.replace(",", "").split(" against")[0].replace(",", "") in page.replace(",", "")


def _finding(kind: str, component: str, fixed_s: float | None, severity: str = "critical") -> Finding:
    return Finding(kind, component, severity, 1.0, {}, "why", "fix", 1.0, fixed_s)


def test_diagnosis_ranks_causes_with_their_gains():
    d = Diagnosis("dp-only", 1.0, 0.8, (_finding("link-degrade", "leaf0->spine21", 0.85),
                                        _finding("slow-gpu", "gpu3", 0.97), _finding("pfc-storm", "leaf1", None)), ())
    c = diagnosis_conclusion(d)
    assert c.sentences[0] == ("dp-only: the main cause is link degrade on leaf0->spine21 "
                              "(fixing it gives back 150.0 ms per step, 15.0%).")
    assert c.sentences[1] == "Next: slow gpu on gpu3 (fixing it gives back 30.0 ms per step, 3.0%); pfc storm on leaf1."
    assert [x["gain_s"] for x in c.numbers["causes"]] == pytest.approx([0.15, 0.03, None])


def test_an_info_finding_is_never_the_main_cause():
    # `diagnose --inject link-degrade:leaf0->spine0` on a one-leaf cluster: no flow crosses the
    # link, the step is unchanged, yet the conclusion named it "the main cause"
    idle = _finding("link-degrade", "leaf0->spine0", 1.0, severity="info")
    c = diagnosis_conclusion(Diagnosis("dp-only", 1.0, 1.0, (idle,), ()))
    assert c.sentences == ("dp-only: no cause of lost time found.",
                           "Seen, but below the warning level: link degrade on leaf0->spine0.")
    assert c.numbers["causes"] == []
    real = _finding("slow-gpu", "gpu3", 0.9, severity="warning")
    c = diagnosis_conclusion(Diagnosis("dp-only", 1.0, 0.9, (idle, real), ()))
    assert c.sentences == ("dp-only: the main cause is slow gpu on gpu3 (fixing it gives back 100.0 ms per step, 10.0%).",)


def test_inference_reads_as_inference():
    import dataclasses

    from rich.console import Console

    from gpuwait.report.step import breakdown_table, serving_table

    serving = {"ttft_s": 0.2, "ideal_ttft_s": 0.15, "tpot_s": 0.021, "ideal_tpot_s": 0.015,
               "tokens_per_s": 400.0, "ideal_tokens_per_s": 560.0}
    r = dataclasses.replace(make_result("IB"), serving=serving)
    c = workload_conclusion([r])
    assert c.text == ("IB: time to first token 200.0 ms (ideal network 150.0 ms), time per output token 21.0 ms "
                      "(ideal network 15.0 ms): the network adds 40.0% to every output token.")
    console = Console(record=True, width=200)
    console.print(serving_table([r]))
    console.print(breakdown_table([r]))
    text = console.export_text()
    assert text.index("time to first token") < text.index("time per output token") < text.index("batch time")
    assert "200.000 ms (ideal 150.000 ms)" in text and "400 (ideal 560)" in text
    assert "MFU" not in text and "straggler" not in text and "wait fraction" not in text


def test_one_output_token_reads_tpot_as_not_applicable():
    """With one output token there is no decode step, so no time per output token: the table, the HTML
    report and the conclusion say n/a and why, and the network's cost is read off the TTFT instead."""
    import dataclasses

    from rich.console import Console

    from gpuwait.report.step import serving_table

    serving = {"ttft_s": 0.2, "ideal_ttft_s": 0.16, "tpot_s": None, "ideal_tpot_s": None,
               "tpot_undefined": "one output token", "tokens_per_s": 35.0, "ideal_tokens_per_s": 43.75}
    r = dataclasses.replace(make_result("IB"), serving=serving)
    c = workload_conclusion([r])
    assert c.text == ("IB: time to first token 200.0 ms (ideal network 160.0 ms), time per output token n/a "
                      "(one output token, no decode step): the network adds 25.0% to the time to first token.")
    assert c.numbers["ttft_network_fraction"] == pytest.approx(0.25)
    console = Console(record=True, width=200)
    console.print(serving_table([r]))
    assert "n/a (one output token, no decode step)" in console.export_text()
    assert "n/a (one output token, no decode step)" in render_html_report([r])
