"""``--executor ray`` gives the same rows as ``local`` on the same sweep (a local Ray instance)."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from gpuwait.runner.sweep import load_sweep, plan_sweep
from gpuwait.runner.sweep_exec import rows_equal_ignoring, run_sweep

ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'gpuwait[ray]'; .ci/run installs it)")


def _rows(out):
    return [pq.read_table(p).to_pylist()[0] for p in sorted((out / "cases").glob("*.parquet"))]


def test_ray_rows_equal_local_rows(tmp_path, tiny_sweep):
    plan = plan_sweep(*load_sweep(tiny_sweep))
    run_sweep(plan, tmp_path / "local", workers=2)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        summary = run_sweep(plan, tmp_path / "ray", executor="ray")
    finally:
        ray.shutdown()
    assert summary.ran == len(plan.cases) and summary.executor == "ray"
    local, remote = rows_equal_ignoring(_rows(tmp_path / "local")), rows_equal_ignoring(_rows(tmp_path / "ray"))
    assert len(local) == len(plan.cases) and local == remote
