"""Apply faults: each fault's registered effect on the scenario (transport, routing, workload), then
on every topology built from it (link capacities, a NIC's traffic moved to its neighbour, another
job's load). What each kind does is registered beside it in :mod:`gpuwait.faults.kinds`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from gpuwait.faults.registry import fault_kind
from gpuwait.faults.targets import check_target
from gpuwait.spec.faults import FaultSpec
from gpuwait.spec.scenario import Scenario
from gpuwait.topology.model import Topology

#: Round-trip time used for the window in flight of a lossy link (a few switch hops and the NICs).
LOSS_RTT_S = 10e-6
DOWN_CAPACITY_FRACTION = 1e-9


@dataclass(frozen=True)
class FaultEffects:
    """What the faults did, for telemetry and for the diagnosis to check itself against."""

    loss_rate: dict[int, float] = field(default_factory=dict)        # link id -> packet loss probability
    flap_cycles_per_s: dict[int, float] = field(default_factory=dict)  # link id -> down/up cycles per second
    nominal_capacity_Bps: np.ndarray | None = None                     # before the faults
    down_nics: tuple[int, ...] = ()                                    # NIC node ids
    no_gdr_servers: tuple[int, ...] = ()
    remote_nic_gpus: tuple[int, ...] = ()                              # GPU node ids using a NIC on the other socket
    socket_transport: bool = False                                     # NCCL on NET/Socket (TCP)
    foreign_Bps: np.ndarray | None = None                              # other jobs' load per link
    #: per link, the rate its port negotiated (what ``ibstat`` / ``ethtool`` report): lanes down or a
    #: dead port lower it; losses and flaps cost goodput but leave the negotiated rate alone
    port_rate_Bps: np.ndarray | None = None
    slow_storage_nodes: tuple[int, ...] = ()                           # storage servers whose backend is the limit
    gpu_throttle: dict[int, int] = field(default_factory=dict)         # GPU node id -> NVML throttle reason bits
    gpu_pcie: dict[int, tuple[float, float]] = field(default_factory=dict)  # GPU node id -> (generation, lanes) trained at


@dataclass(eq=False)
class FabricDamage:
    """The changes the faults make to one built topology, gathered fault by fault: each kind's
    fabric effect (:mod:`gpuwait.faults.kinds`) changes these in place, in the order the faults
    are listed (a loss on a degraded link sees the degraded rate)."""

    topo: Topology
    mtu_bytes: float
    capacity_Bps: np.ndarray                                   # per link, starts at the built capacity
    foreign_Bps: np.ndarray                                    # per link, other jobs' load
    port_rate_Bps: np.ndarray                                  # per link, the negotiated rate
    nic_override: np.ndarray                                   # per node: the NIC a GPU uses instead, -1 = its own
    loss_rate: dict[int, float] = field(default_factory=dict)
    flap_cycles_per_s: dict[int, float] = field(default_factory=dict)
    down_nics: list[int] = field(default_factory=list)
    no_gdr_servers: list[int] = field(default_factory=list)
    remote_nic_gpus: list[int] = field(default_factory=list)
    socket_transport: bool = False
    slow_storage_nodes: list[int] = field(default_factory=list)
    gpu_throttle: dict[int, int] = field(default_factory=dict)
    gpu_pcie: dict[int, tuple[float, float]] = field(default_factory=dict)

    @classmethod
    def of(cls, topo: Topology, mtu_bytes: float) -> FabricDamage:
        return cls(topo, mtu_bytes, topo.link_capacity_Bps.astype(float).copy(), np.zeros(topo.n_links),
                   topo.link_capacity_Bps.astype(float).copy(), np.full(topo.n_nodes, -1, np.int64))

    def result(self) -> tuple[Topology, FaultEffects]:
        """The damaged topology and what telemetry can see of the damage."""
        topo = self.topo
        if (self.nic_override >= 0).any():
            topo = dataclasses.replace(topo, gpu_nic_override=self.nic_override)
        effects = FaultEffects(self.loss_rate, self.flap_cycles_per_s, topo.link_capacity_Bps.astype(float),
                               tuple(self.down_nics), tuple(self.no_gdr_servers), tuple(self.remote_nic_gpus),
                               self.socket_transport, self.foreign_Bps if self.foreign_Bps.any() else None,
                               self.port_rate_Bps, tuple(self.slow_storage_nodes),
                               dict(self.gpu_throttle), dict(self.gpu_pcie))
        return dataclasses.replace(topo, link_capacity_Bps=self.capacity_Bps), effects


@dataclass(frozen=True)
class Perturbation:
    """The fabric-level faults of a scenario, applied to each topology built from it."""

    faults: tuple[FaultSpec, ...] = ()

    def apply(self, topo: Topology, mtu_bytes: float = 4096.0) -> tuple[Topology, FaultEffects]:
        damage = FabricDamage.of(topo, mtu_bytes)
        for fault in self.faults:
            effect = fault_kind(fault).on_fabric
            if effect is not None:
                effect(damage, fault)
        return damage.result()


def apply_faults(scenario: Scenario, faults: Sequence[FaultSpec], topo: Topology) -> tuple[Scenario, Perturbation]:
    """The scenario with the scenario-level faults applied, and the fabric-level ones to apply to
    each topology built from it. Targets are checked against ``topo`` (one clear error each)."""
    fabric_faults = []
    for fault in faults:
        kind = fault_kind(fault)
        check_target(topo, kind.name, kind.target, fault.target, all_allowed=kind.target_all)
        if kind.on_scenario is not None:
            scenario = kind.on_scenario(scenario, fault, topo)
        if kind.on_fabric is not None:
            fabric_faults.append(fault)
    return scenario, Perturbation(tuple(fabric_faults))
