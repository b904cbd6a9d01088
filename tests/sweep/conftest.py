"""A small perf sweep: cheap cases (a 2- or 4-server nccl-tests prediction at a few sizes)."""

from __future__ import annotations

from pathlib import Path

import pytest

SWEEP = """
name: tiny
base: {cluster: {preset: dgx-h100, servers: 2}}
perf: {op: all_reduce, min_bytes: 1M, max_bytes: 16M, step_factor: 4}
axes:
  cluster.servers: [2, 4]
  cluster.routing.kind: [ecmp, adaptive, bogus]
  perf.env.NCCL_ALGO: [Ring, Tree]
exclude:
  - {cluster.servers: 4, perf.env.NCCL_ALGO: Tree}
"""
#: 2 x 3 x 2 = 12 combinations, 3 excluded (4 servers with Tree), 3 of the rest invalid (routing bogus)
N_CASES, N_INVALID = 9, 3


def many_cases(n_seeds: int) -> str:
    """A sweep of ``2 * n_seeds`` valid cases (ECMP seeds x QPs), for the kill tests."""
    seeds = ", ".join(str(s) for s in range(n_seeds))
    return f"""
name: many
base: {{cluster: {{preset: rocev2-400g-2tier, servers: 4}}}}
perf: {{op: all_reduce, min_bytes: 1M, max_bytes: 64M, step_factor: 2}}
axes:
  cluster.routing.seed: [{seeds}]
  cluster.routing.qps_per_connection: [1, 2]
"""


@pytest.fixture
def tiny_sweep(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(SWEEP)
    return path
