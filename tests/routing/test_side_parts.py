"""The stages' last stage as a side part per leaf-pair class (``Routes.side_classes``), and the consumers
that know one shared part only (the flow engine's ``simulate_flows``, the all-to-all groups) joining it.

Reference: the per-leaf-pair walk (one walk per class, no stages, no side parts), which the stages
equal to rounding (tests/routing/test_stages.py).
"""

from __future__ import annotations

import numpy as np
import pytest

import gpuwait.routing.paths as paths
from gpuwait.engine.flow_run import simulate_flows
from gpuwait.spec import PatternSpec, RoutingSpec
from gpuwait.transport import TRANSPORTS
from gpuwait.workload.traffic import pattern_flows
from tests.routing.test_walk_pins import _flows, _topo


def _route(topo, kind: str, src, dst, staged: bool) -> paths.Routes:
    old = paths._STAGES_MIN_CLASSES
    paths._STAGES_MIN_CLASSES = 0 if staged else 1 << 60
    try:
        return paths.route_flows(topo, RoutingSpec(kind=kind), src, dst)
    finally:
        paths._STAGES_MIN_CLASSES = old


@pytest.mark.parametrize("kind", ["spray", "adaptive"])
def test_staged_side_parts_equal_the_walk(kind: str) -> None:
    topo = _topo("clos-3tier-degraded")
    src, dst = _flows(topo, "permutation")
    staged, walked = _route(topo, kind, src, dst, True), _route(topo, kind, src, dst, False)
    # the last stage per leaf-pair class, and the way up per source group (it follows the row's class)
    assert len(staged.side_classes) == 2 and staged.class_sides == (1,) and not walked.side_classes
    side_of, side_weights = staged.side_classes[0]
    assert side_weights.shape[0] < staged.n_rows  # one per leaf-pair class, not per row
    up_of, up_weights = staged.side_classes[1]
    assert up_weights.shape[0] < staged.class_weights.shape[0]  # one per source group, not per (group, pod)
    joined = staged.sides_joined()
    assert not joined.side_classes and not joined.class_sides
    kept = staged.sides_joined(keep_class_sides=True)
    assert len(kept.side_classes) == 1 and kept.class_sides == (0,)
    np.testing.assert_array_equal(kept.link_weights.toarray(), staged.link_weights.toarray())
    np.testing.assert_allclose(staged.link_weights.toarray(), walked.link_weights.toarray(), rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(joined.link_weights.toarray(), staged.link_weights.toarray())
    np.testing.assert_allclose(staged.path_latency_s, walked.path_latency_s, rtol=1e-12)
    size_bytes = np.linspace(1.0, 2.0, len(src)) * 2**20
    np.testing.assert_allclose(staged.bytes_per_link(size_bytes), walked.bytes_per_link(size_bytes), rtol=1e-12,
                               atol=1e-6)


def test_simulate_flows_joins_side_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    """simulate_flows hands the engine one shared part: the side parts join the rows' own links, so a
    staged route simulates like the per-class walk (before, the last stage would have been dropped)."""
    topo = _topo("clos-3tier-degraded")
    flows = pattern_flows(topo, PatternSpec(kind="rail-ring", size="64MB"))
    runs = []
    for staged in (True, False):
        monkeypatch.setattr(paths, "_STAGES_MIN_CLASSES", 0 if staged else 1 << 60)
        runs.append(simulate_flows(topo, flows, RoutingSpec(kind="adaptive"), TRANSPORTS["rocev2"]))
    staged_run, walked_run = runs
    assert not staged_run.routes.side_classes
    # the staged route has a last stage: it is in the simulated routes
    assert staged_run.routes.link_weights.nnz == walked_run.routes.link_weights.nnz
    np.testing.assert_allclose(staged_run.flow_finish_s, walked_run.flow_finish_s, rtol=1e-9)
    size = staged_run.routes.per_qp(flows.size_bytes)
    np.testing.assert_allclose(staged_run.routes.link_load(size), walked_run.routes.link_load(size), rtol=1e-9,
                               atol=1e-3)
