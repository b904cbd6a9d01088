"""Run a compiled collective's phases on the flow engine: the bandwidth part of its time.

Each distinct phase is routed and simulated once on the real topology (with its routing, QPs and
link capacities); a phase repeated k times takes k times as long, because its steps are identical
and NCCL runs them back to back. Latency terms come from NCCL's model, not from here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuwait.collectives.algorithms import Phase, Plan
from gpuwait.engine.network import NetworkRun, simulate_flows
from gpuwait.spec.cluster import RoutingSpec
from gpuwait.topology.model import Topology
from gpuwait.transport.profiles import TransportProfile
from gpuwait.workload.traffic import FlowTable


@dataclass(frozen=True, eq=False)
class PhaseRun:
    phase: Phase
    step_time_s: float  # one repetition: until the phase's last byte is sent
    run: NetworkRun

    @property
    def time_s(self) -> float:
        return self.step_time_s * self.phase.repeat


@dataclass(frozen=True, eq=False)
class PlanRun:
    plan: Plan
    phases: tuple[PhaseRun, ...]

    @property
    def bandwidth_time_s(self) -> float:
        return float(sum(p.time_s for p in self.phases))


def _phase_flows(phase: Phase) -> FlowTable:
    n = phase.n_flows
    return FlowTable([f"{phase.name}.{i}" for i in range(n)], phase.src.astype(np.int64), phase.dst.astype(np.int64),
                     phase.bytes_per_flow.astype(float), np.zeros(n), np.full(n, np.inf), [[] for _ in range(n)])


def run_plan(topo: Topology, plan: Plan, routing: RoutingSpec, transport: TransportProfile,
             capacity_Bps: np.ndarray) -> PlanRun:
    """Simulate every phase of a plan and return its bandwidth time.

    ``capacity_Bps`` is the payload capacity per link the collective can use (wire efficiency and
    protocol efficiency already applied by the caller).
    """
    runs = []
    for phase in plan.phases:
        if phase.n_flows == 0 or float(phase.bytes_per_flow.max(initial=0.0)) == 0.0:
            continue
        run = simulate_flows(topo, _phase_flows(phase), routing, transport, capacity_Bps=capacity_Bps)
        step = float(run.result.tx_end_s.max() - run.result.start_s.min())
        runs.append(PhaseRun(phase, step, run))
    return PlanRun(plan, tuple(runs))
