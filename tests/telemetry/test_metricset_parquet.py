"""MetricSet selection and the Parquet long format."""

from __future__ import annotations

import math

import pyarrow.parquet as pq
import pytest

from gpuwait.errors import SpecError, UnknownNameError
from gpuwait.telemetry.errors import TelemetryFormatError
from gpuwait.telemetry.metrics import metrics_from_result
from gpuwait.telemetry.metricset import MetricSet
from gpuwait.telemetry.parquet import read_metrics_parquet, write_metrics_parquet
from tests.telemetry.conftest import make_result


def _small() -> MetricSet:
    return MetricSet.from_samples([
        ("PortXmitData", (("device", "mlx5_0"), ("port", "1")), 10),
        ("PortXmitData", {"device": "mlx5_1", "port": "1"}, 20, 5.0),
        ("PortRcvData", {"device": "mlx5_0", "port": "1"}, 30),
    ])


def test_select_and_value_of():
    m = _small()
    assert len(m.select("PortXmitData")) == 2 and len(m.select(device="mlx5_0")) == 2
    assert len(m.select(["PortXmitData", "PortRcvData"], port=1)) == 3
    assert m.value_of("PortXmitData", device="mlx5_1") == 20
    assert [s.timestamp_s for s in m] == [None, 5.0, None]
    with pytest.raises(UnknownNameError, match="no sample"):
        m.value_of("PortXmitData", device="mlx5_9")
    with pytest.raises(SpecError, match="2 samples"):
        m.value_of("PortXmitData")
    both = MetricSet.concat([m, m.select("PortRcvData")])
    assert len(both) == 4 and both.label_values("device") == ["mlx5_0", "mlx5_1"]


def test_parquet_round_trip(tmp_path, roce_topo):
    metrics = MetricSet.concat([metrics_from_result(make_result(roce_topo), roce_topo), _small()])
    path = write_metrics_parquet(metrics, tmp_path / "m.parquet")
    table = pq.read_table(path)
    assert table.column_names == ["name", "labels", "value", "timestamp_s"] and table.num_rows == len(metrics)
    back = read_metrics_parquet(path)
    assert back.to_dict() == metrics.to_dict() and back.labels == metrics.labels
    assert back.info == metrics.info
    assert [s.timestamp_s for s in back][-2] == 5.0 and math.isnan(back.timestamp_s[0])


def test_parquet_of_something_else(tmp_path):
    import pyarrow as pa

    pq.write_table(pa.table({"x": [1]}), tmp_path / "x.parquet")
    with pytest.raises(TelemetryFormatError, match="lacks column"):
        read_metrics_parquet(tmp_path / "x.parquet")
    (tmp_path / "y.parquet").write_text("not parquet")
    with pytest.raises(TelemetryFormatError, match="cannot read as Parquet"):
        read_metrics_parquet(tmp_path / "y.parquet")
