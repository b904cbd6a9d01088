"""The event loop's own queue code pops in (time, order of scheduling) order.

The loop writes the queue's push and pop out in place for speed (:mod:`gpuwait.engine.packet.core`),
so :mod:`test_events`, which checks :func:`~gpuwait.engine.packet.events.pop`, does not cover it.
Here the loop logs its first pushes and pops while it runs real traffic, and the log is replayed
against Python's ``heapq`` on (time, sequence number): every pop must be the heap's.
"""

from __future__ import annotations

import heapq

import numpy as np
import pytest

from gpuwait.engine.packet import core as C
from gpuwait.engine.packet.params import PacketParams
from gpuwait.engine.packet.run import engine_inputs, resolve
from gpuwait.routing.paths import route_flows
from gpuwait.spec import RoutingSpec
from gpuwait.spec.cluster import ClusterSpec
from gpuwait.topology.presets import build_cluster
from gpuwait.transport import TRANSPORTS
from gpuwait.workload.traffic import FlowTable


def _logged_run(jitter_s: float, routing: str, transport: str, rows: int = 400_000):
    topo = build_cluster(ClusterSpec.model_validate({
        "servers": 32, "server": {"gpus": 1, "nics": 1, "nic_speed": "100Gbps", "pcie_switches": 1, "cpus": 1},
        "fabric": {"tiers": 2, "switch_radix": 8}}))
    nics = topo.nic_node[:, 0].astype(np.int64)
    n = len(nics)
    rng = np.random.default_rng(3)
    dst = nics[np.roll(np.arange(n), 5)]
    flows = FlowTable([f"f{i}" for i in range(n)], nics, dst, np.full(n, 2e5), rng.uniform(0, jitter_s, n),
                      np.full(n, np.inf), [[] for _ in range(n)])
    spec = RoutingSpec(kind=routing)
    tp = TRANSPORTS[transport]
    routes = route_flows(topo, spec, flows.src, flows.dst, transport=tp.name)
    params = PacketParams()
    res = resolve(params, tp, spec)
    inp = engine_inputs(topo, flows, routes, spec, tp, params, res, seed=7)
    total = int(inp.qp_int[:, C.Q_NPKTS].sum())
    # a small pool and queue, so the loop also stops short and resumes with grown arrays
    return C.simulate(inp, total if res.out_of_order else 0, 64, 16, np.zeros((rows, 3), np.int64) if rows else None)


@pytest.mark.parametrize(("jitter_s", "routing", "transport"), [
    (0.0, "ecmp", "rocev2"),  # lockstep: bins open, fill and empty
    (20e-6, "ecmp", "rocev2"),  # scattered times: the cache of pushed times evicts bins that hold events
    (5e-6, "spray", "infiniband"),  # credits, out-of-order receivers
])
def test_loop_pops_in_heapq_order(jitter_s, routing, transport):
    got = _logged_run(jitter_s, routing, transport)
    log = got.queue_log
    assert (log[:, 2] == C.LOG_POP).sum() > 10_000  # the whole run: ~20,000 events
    heap: list[tuple[int, int, int]] = []
    seq = 0
    for time_ps, data, op in log.tolist():
        if op == C.LOG_PUSH:
            heapq.heappush(heap, (time_ps, seq, data))
            seq += 1
        else:
            t, _, d = heapq.heappop(heap)
            assert (time_ps, data) == (t, d), f"pop {seq}: the loop gave ({time_ps}, {data}), heapq ({t}, {d})"


def test_log_changes_no_result():
    logged = _logged_run(20e-6, "ecmp", "rocev2", rows=1000)
    plain = _logged_run(20e-6, "ecmp", "rocev2", rows=0)
    assert len(plain.queue_log) == 0 and len(logged.queue_log) == 1000
    for field in logged._fields:
        if field != "queue_log":
            np.testing.assert_array_equal(getattr(logged, field), getattr(plain, field))
