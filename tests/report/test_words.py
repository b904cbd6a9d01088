"""Findings in plain words: evidence with units, code spans instead of backticks, still escaped."""

from __future__ import annotations

from gpuwait.report.words import code_spans, evidence_item, evidence_text


def test_evidence_reads_in_words_with_units():
    assert evidence_item("lost_ms", 159.35) == "lost 159.3ms"
    assert evidence_item("utilization", 0.915) == "utilization 91.5%"
    assert evidence_item("port_rate_Bps", 50e9) == "port rate 400Gbps"
    assert evidence_item("ecn_kmin_bytes", 1e5) == "ecn kmin 100KB"
    assert evidence_item("delivered_GBps", 36.2) == "delivered 36.2 GB/s"
    assert evidence_item("hottest_uplink_vs_typical", 2.0) == "hottest uplink vs typical 2x"
    assert evidence_item("negotiated", "100 Gb/s") == "negotiated 100 Gb/s"
    assert evidence_text({"a_s": 0.002, "n": 3}) == "a 2ms, n 3"
    assert "_" not in evidence_text({"step_time_s": 1.0, "data_wait_ms": 3.0})


def test_code_spans_replace_backticks_and_escape():
    html = str(code_spans("set `NCCL_IB_QPS_PER_CONNECTION=4` on <b>all</b> `x`"))
    assert "`" not in html
    assert html == ("set <code>NCCL_IB_QPS_PER_CONNECTION=4</code> on &lt;b&gt;all&lt;/b&gt; <code>x</code>")
    assert "`" not in str(code_spans("an odd ` backtick")) and "<script>" not in str(code_spans("`<script>`"))
