"""Apply faults: to the scenario (transport, routing, workload) and to the built topology (link
capacities, a NIC's traffic moved to its neighbour, another job's load).

Each kind's effect on the fluid model, and what it leaves for telemetry to show:

- link-degrade: the cable (both directions) runs at ``factor`` of its speed; its port reports the lower rate.
- link-flap: down ``down_fraction`` of the time, so a fluid model sees that share of its capacity
  gone; ``LinkDownedCounter`` counts the cycles.
- link-loss: go-back-N resends the window in flight after each loss, so goodput is
  ``1 / (1 + p * W)`` with ``W`` the bandwidth-delay product in packets (Zhu et al., "Congestion
  control for large-scale RDMA deployments", SIGCOMM 2015, on RoCE's go-back-N); symbol errors and
  out-of-sequence packets are counted.
- nic-down: the NIC's links carry nothing; its GPU's traffic moves to the next NIC on the same PCIe
  switch (or the next NIC of the server), which then carries two GPUs' traffic.
- no-gdr: network data bounces through host memory, crossing the PCIe switch's uplink twice: a
  GPU's network rate is held to half the PCIe bandwidth.
- nic-affinity: the GPU's NIC sits behind the other socket; without GPUDirect across sockets the
  data bounces through host memory and crosses the CPU interconnect: the rate is held to half of
  the smaller of the PCIe and the socket-interconnect bandwidths.
- noisy-neighbor: ``load_fraction`` of each target link is taken by another job's traffic.
- tcp-fallback, ecmp-polarization, slow-gpu, storage-contention, dataloader-starvation change the
  scenario itself (transport, routing seeds, compute, storage and loader).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from gpuwait.errors import SpecError
from gpuwait.faults.registry import FaultKind, resolve_fault
from gpuwait.spec.faults import FaultSpec
from gpuwait.spec.scenario import Scenario
from gpuwait.spec.workload import SlowGpuSpec
from gpuwait.topology.model import LinkKind, Network, NodeKind, Topology

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


@dataclass(frozen=True)
class Perturbation:
    """The topology-level faults of a scenario, applied to each built topology."""

    faults: tuple[tuple[FaultKind, str, dict], ...] = ()
    socket_transport: bool = False

    def apply(self, topo: Topology, mtu_bytes: float = 4096.0) -> tuple[Topology, FaultEffects]:
        capacity = topo.link_capacity_Bps.astype(float).copy()
        loss, flaps = {}, {}
        foreign = np.zeros(topo.n_links)
        down, no_gdr, remote = [], [], []
        override = np.full(topo.n_nodes, -1, np.int64)
        server = topo.spec.server
        for kind, target, params in self.faults:
            if kind.name in ("link-degrade", "link-flap", "link-loss"):
                for link in _cable(topo, target):
                    if kind.name == "link-degrade":
                        capacity[link] *= params["factor"]
                    elif kind.name == "link-flap":
                        capacity[link] *= 1.0 - params["down_fraction"]
                        flaps[link] = 1.0 / params["period_s"]
                    else:
                        window_packets = max(1.0, capacity[link] * LOSS_RTT_S / mtu_bytes)
                        capacity[link] /= 1.0 + params["loss_rate"] * window_packets
                        loss[link] = params["loss_rate"]
            elif kind.name == "noisy-neighbor":
                links = _fabric_links(topo) if target == "all" else _cable(topo, target)
                foreign[links] += params["load_fraction"] * capacity[links]
            elif kind.name == "nic-down":
                nic = _node(topo, target, "nic")
                # down: nothing is routed through it any more; a sliver keeps the solver's capacities positive
                capacity[_links_of(topo, nic)] *= DOWN_CAPACITY_FRACTION
                down.append(nic)
                s = int(topo.node_server[nic])
                nics = topo.nic_node[s]
                local = int(np.flatnonzero(nics == nic)[0])
                neighbour = int(nics[local ^ 1] if len(nics) > 1 and (local ^ 1) < len(nics) else nics[(local + 1) % len(nics)])
                for g in np.flatnonzero(topo.nic_node[s, topo.gpu_nic] == nic):
                    override[topo.gpu_node[s, g]] = neighbour
            elif kind.name == "no-gdr":
                servers = range(topo.n_servers) if target == "all" else [_server(topo, target)]
                for s in servers:
                    no_gdr.append(s)
                    for nic in topo.nic_node[s]:
                        host = _host_links(topo, nic)
                        capacity[host] = np.minimum(capacity[host], server.pcie_bandwidth / 2)
            elif kind.name == "nic-affinity":
                gpu = _node(topo, target, "gpu")
                s = int(topo.node_server[gpu])
                local = int(gpu - topo.gpu_node[s, 0])
                nic = int(topo.nic_node[s, topo.gpu_nic[local]])
                host = _host_links(topo, nic)
                capacity[host] = np.minimum(capacity[host], min(server.pcie_bandwidth, server.cpu_interconnect_bandwidth) / 2)
                remote.append(gpu)
        if (override >= 0).any():
            topo = dataclasses.replace(topo, gpu_nic_override=override)
        effects = FaultEffects(loss, flaps, topo.link_capacity_Bps.astype(float), tuple(down), tuple(no_gdr),
                               tuple(remote), self.socket_transport, foreign if foreign.any() else None)
        return dataclasses.replace(topo, link_capacity_Bps=capacity), effects


def _node(topo: Topology, name: str, kind: str) -> int:
    node = topo.node_id(name)
    if topo.kind_of(node) != kind:
        raise SpecError(f"fault target {name!r} is a {topo.kind_of(node)}; expected a {kind} (e.g. "
                        f"{topo.node_name[topo.gpu_node[0, 0]] if kind == 'gpu' else topo.node_name[topo.nic_node[0, 0]]})")
    return node


def _server(topo: Topology, name: str) -> int:
    if name.startswith("s") and name[1:].isdigit() and int(name[1:]) < topo.n_servers:
        return int(name[1:])
    return int(topo.node_server[topo.node_id(name)])


def _cable(topo: Topology, name: str) -> list[int]:
    """A link and its reverse: a cable fails both ways."""
    link = topo.link_id(name)
    back = topo.links_between(np.array([topo.link_dst[link]]), np.array([topo.link_src[link]]))[0]
    return [link] + ([int(back)] if back >= 0 else [])


def _links_of(topo: Topology, node: int) -> np.ndarray:
    return np.flatnonzero((topo.link_src == node) | (topo.link_dst == node))


def _host_links(topo: Topology, nic: int) -> np.ndarray:
    """The PCIe links between a NIC and its switch (the host side of the NIC)."""
    links = _links_of(topo, nic)
    return links[topo.link_kind[links] == LinkKind.PCIE]


def _fabric_links(topo: Topology) -> np.ndarray:
    """Switch-to-switch links of the compute fabric."""
    switch = topo.node_kind == NodeKind.SWITCH
    return np.flatnonzero(switch[topo.link_src] & switch[topo.link_dst] & (topo.link_network == Network.COMPUTE))


def apply_faults(scenario: Scenario, faults: list[FaultSpec], topo: Topology) -> tuple[Scenario, Perturbation]:
    """The scenario with the scenario-level faults applied, and the topology-level ones to apply to
    each topology built from it. Targets are checked against ``topo`` (one clear error each)."""
    topology_faults = []
    socket = False
    for fault in faults:
        kind, params = resolve_fault(fault)
        if kind.target == "link" and fault.target != "all":
            topo.link_id(fault.target)
        elif kind.target == "link" and kind.name != "noisy-neighbor":
            raise SpecError(f"fault {kind.name}: target 'all' is not allowed; expected a link name such as "
                            f"{topo.link_name(int(_fabric_links(topo)[0])) if len(_fabric_links(topo)) else 's0.nic0->leaf0'}")
        elif kind.target == "gpu":
            _node(topo, fault.target, "gpu")
        elif kind.target == "nic":
            _node(topo, fault.target, "nic")
        elif kind.target == "server-or-all" and fault.target != "all":
            _server(topo, fault.target)
        scenario, is_topology = _apply_to_scenario(scenario, kind, fault.target, params, topo)
        if kind.name == "tcp-fallback":
            socket = True
        if is_topology:
            topology_faults.append((kind, fault.target, params))
    return scenario, Perturbation(tuple(topology_faults), socket)


def _apply_to_scenario(scenario: Scenario, kind: FaultKind, target: str, params: dict,
                       topo: Topology) -> tuple[Scenario, bool]:
    cluster = scenario.cluster
    workload = scenario.workload
    if kind.name == "tcp-fallback":
        tcp = cluster.transport.model_copy(update={"name": "tcp"})
        variants = [v.model_copy(update={"transport": tcp}) for v in scenario.variants]
        return scenario.model_copy(update={"cluster": cluster.model_copy(update={"transport": tcp}),
                                           "variants": variants}), False
    if kind.name == "ecmp-polarization":
        if cluster.routing.kind != "ecmp":
            raise SpecError(f"fault ecmp-polarization: the cluster routes with {cluster.routing.kind!r}; expected ecmp")
        routing = cluster.routing.model_copy(update={"per_switch_seed": False})
        return scenario.model_copy(update={"cluster": cluster.model_copy(update={"routing": routing})}), False
    if kind.name in ("slow-gpu", "storage-contention", "dataloader-starvation"):
        if workload is None:
            raise SpecError(f"fault {kind.name}: the scenario has no workload; expected a `workload:` section")
        if kind.name == "slow-gpu":
            rank = int(np.flatnonzero(topo.gpu_node.ravel() == topo.node_id(target))[0])
            slow = [*workload.compute.slow_gpus, SlowGpuSpec(rank=rank, factor=params["factor"])]
            compute = workload.compute.model_copy(update={"slow_gpus": slow})
            workload = workload.model_copy(update={"compute": compute})
        elif kind.name == "storage-contention":
            data = workload.data.model_copy(update={"dataset_read_per_gpu": params["read_rate_per_gpu_Bps"]})
            workload = workload.model_copy(update={"data": data})
            if cluster.storage.mode != "converged":
                storage = cluster.storage.model_copy(update={"mode": "converged"})
                cluster = cluster.model_copy(update={"storage": storage})
        else:
            data = workload.data.model_copy(update={"loader_samples_per_s_per_server": params["samples_per_s_per_server"]})
            workload = workload.model_copy(update={"data": data})
        return scenario.model_copy(update={"cluster": cluster, "workload": workload}), False
    return scenario, True
