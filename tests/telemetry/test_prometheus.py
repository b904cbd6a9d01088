"""Prometheus text: round-trips of the exporter and real dcgm-exporter and node_exporter scrapes."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from gpuwait.telemetry.errors import TelemetryFormatError
from gpuwait.telemetry.metrics import metrics_from_result
from gpuwait.telemetry.metricset import MetricInfo, MetricSet
from gpuwait.telemetry.prometheus import parse_prometheus_text, to_prometheus_text
from tests.telemetry.conftest import make_result

DATA = Path(__file__).parent / "data"


def test_round_trip_of_a_simulated_run(ib_topo):
    metrics = metrics_from_result(make_result(ib_topo), ib_topo)
    text = to_prometheus_text(metrics)
    back = parse_prometheus_text(text)
    assert back.to_dict() == metrics.to_dict()
    assert back.labels == metrics.labels  # label order kept
    assert back.info == metrics.info
    assert text.count("# TYPE PortXmitData counter") == 1
    assert to_prometheus_text(back) == text


def test_escapes_special_values_and_timestamps():
    hostile = 'a "quoted" back\\slash\nnewline'
    m = MetricSet.from_samples([
        ("x_total", {"path": hostile}, math.nan, 1700000000.123),
        ("x_total", {"path": "b"}, math.inf),
        ("y", {}, -math.inf),
        ("y", {"k": "v"}, 0.1),
    ], info={"x_total": MetricInfo("counter", "help with \\ and\nnewline")})
    text = to_prometheus_text(m)
    assert 'x_total{path="a \\"quoted\\" back\\\\slash\\nnewline"} NaN 1700000000123' in text
    assert "# HELP x_total help with \\\\ and\\nnewline" in text
    assert 'x_total{path="b"} +Inf' in text and "y -Inf" in text
    back = parse_prometheus_text(text)
    first = next(iter(back))
    assert first.label("path") == hostile and math.isnan(first.value) and first.timestamp_s == pytest.approx(1700000000.123)
    assert back.value_of("x_total", path="b") == math.inf and back.value_of("y", k="v") == 0.1
    assert back.info["x_total"] == MetricInfo("counter", "help with \\ and\nnewline")


def test_histogram_samples_stay_with_their_family():
    text = ('# HELP rpc_seconds RPC latency.\n# TYPE rpc_seconds histogram\n'
            'rpc_seconds_bucket{le="0.1"} 3\nrpc_seconds_bucket{le="+Inf"} 5\nrpc_seconds_sum 0.7\nrpc_seconds_count 5\n')
    m = parse_prometheus_text(text)
    assert m.value_of("rpc_seconds_bucket", le="+Inf") == 5
    assert to_prometheus_text(m) == text


def test_real_dcgm_exporter_scrape():
    m = parse_prometheus_text((DATA / "dcgm-exporter.prom").read_text())
    assert m.names() == ["DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_GPU_UTIL"]
    assert m.info["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] == MetricInfo("gauge", "Ratio of time the graphics engine is active.")
    assert m.value_of("DCGM_FI_PROF_GR_ENGINE_ACTIVE", Hostname="gsrh100-074", GPU_I_ID=7) == 0.0
    sample = next(iter(m))
    assert sample.label("pod") == "text-embedding-predictor-00008-deployment-57946f6c67-vdtjl"
    assert sample.label("modelName") == "NVIDIA H100 80GB HBM3" and len(sample.labels) == 12
    assert m.value_of("DCGM_FI_DEV_GPU_UTIL", Hostname="r6i3n0") == 0
    assert "DCGM_FI_DEV_GPU_UTIL" not in m.info  # no HELP/TYPE in that excerpt


def test_real_node_exporter_lines():
    m = parse_prometheus_text((DATA / "node-exporter.prom").read_text())
    assert m.value_of("node_infiniband_port_data_received_bytes_total", device="mlx4_0", port=1) == 18527668
    assert m.value_of("node_infiniband_port_transmit_wait_total", device="mlx4_0") == 4294967295
    assert m.value_of("node_network_speed_bytes", device="eth0") == 1.25e8


@pytest.mark.parametrize("line", ['up{job="x} 1', "up", "up one", "# TYPE up gauges", "9up 1"])
def test_bad_lines_name_the_line(line):
    # the parser is prometheus-client's; its reason is kept, and the error names the file, the line and its text
    with pytest.raises(TelemetryFormatError, match=f"^scrape.prom line 2: .* in {re.escape(repr(line))}; expected"):
        parse_prometheus_text("ok 1\n" + line, source="scrape.prom")


def test_invalid_names_are_refused_on_export():
    with pytest.raises(TelemetryFormatError, match="metric name"):
        to_prometheus_text(MetricSet.from_samples([("bad-name", {}, 1)]))
    with pytest.raises(TelemetryFormatError, match="label name"):
        to_prometheus_text(MetricSet.from_samples([("ok", {"bad-label": "x"}, 1)]))


def test_a_broken_row_among_good_ones_is_skipped_and_named():
    # issue 15: real scrapes carry the odd broken row; the reader keeps the rest and says what it left out
    text = 'up{job="a"} 1\nup{job="b" 1\nup{job="c"} 0\n'
    with pytest.raises(TelemetryFormatError, match="line 2"):
        parse_prometheus_text(text)
    skipped: list[str] = []
    metrics = parse_prometheus_text(text, skipped=skipped)
    assert len(metrics.select(name="up").labels) == 2
    assert len(skipped) == 1 and "line 2" in skipped[0]


def test_a_text_with_no_readable_row_is_still_an_error():
    with pytest.raises(TelemetryFormatError):
        parse_prometheus_text("not a metric line at all {\n", skipped=[])
