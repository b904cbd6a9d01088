"""Parquet tables of tasks and links round-trip through pyarrow."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq

from gpuwait.report.parquet import LINK_SCHEMA, TASK_SCHEMA, write_link_parquet, write_task_parquet


def test_tasks_round_trip(tmp_path, result):
    table = pq.read_table(write_task_parquet(result, tmp_path / "tasks.parquet"))
    assert table.schema.equals(TASK_SCHEMA)
    assert table.num_rows == len(result.tasks)
    assert set(table.column("case").to_pylist()) == {"RoCEv2, ECMP"}
    for name, column in result.tasks.columns().items():
        got = table.column(name).to_numpy(zero_copy_only=False)
        if column.dtype.kind in "iuf":
            np.testing.assert_array_equal(got, column)
        else:
            assert got.tolist() == column.tolist()


def test_cases_share_one_file(tmp_path, two_cases):
    table = pq.read_table(write_task_parquet(two_cases, tmp_path / "tasks.parquet"))
    assert table.num_rows == sum(len(r.tasks) for r in two_cases)
    assert sorted(set(table.column("case").to_pylist())) == sorted(r.case for r in two_cases)


def test_links_round_trip(tmp_path, two_cases):
    table = pq.read_table(write_link_parquet(two_cases, tmp_path / "links.parquet"))
    assert table.schema.equals(LINK_SCHEMA)
    first = two_cases[0].links
    rows = [r for r in table.to_pylist() if r["case"] == two_cases[0].case]
    assert [r["link"] for r in rows] == first.name
    np.testing.assert_array_equal([r["peak_utilization"] for r in rows], first.utilization)
    assert rows[8]["users"] == ["dp all_reduce", "storage read"] and rows[0]["users"] == []
