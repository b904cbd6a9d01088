"""The fault kinds: one block per kind, its effect registered beside it.

Each block says what the kind does to the fluid model and what it leaves for telemetry to show;
its parameters (defaults, ranges, units) are its model in :mod:`gpuwait.spec.faults`. Kinds are
listed to users in the order they are registered here.

A fabric effect changes the :class:`~gpuwait.faults.apply.FabricDamage` of one built topology; a
scenario effect returns a changed copy of the scenario (nothing is mutated).
"""

from __future__ import annotations

import numpy as np

from gpuwait.errors import SpecError
from gpuwait.faults.apply import DOWN_CAPACITY_FRACTION, LOSS_RTT_S, FabricDamage
from gpuwait.faults.registry import register_fault
from gpuwait.faults.targets import cable_links, fabric_links, host_links, links_of, node_of_kind, server_index
from gpuwait.spec.faults import (
    DataloaderStarvationFault,
    EcmpPolarizationFault,
    GpuThrottleFault,
    LinkDegradeFault,
    LinkFlapFault,
    LinkLossFault,
    NicAffinityFault,
    NicDownFault,
    NoGdrFault,
    NoisyNeighborFault,
    PcieDowntrainedFault,
    SlowGpuFault,
    StorageContentionFault,
    StorageSlowFault,
    TcpFallbackFault,
)
from gpuwait.spec.scenario import Scenario
from gpuwait.spec.workload import SlowGpuSpec, WorkloadSpec
from gpuwait.topology.model import LinkKind, Topology


def _workload(scenario: Scenario, kind: str) -> WorkloadSpec:
    if scenario.workload is None:
        raise SpecError(f"fault {kind}: the scenario has no workload; expected a `workload:` section")
    return scenario.workload


# link-degrade: the cable (both directions) runs at ``factor`` of its speed; its port reports the lower rate.
def _link_degrade(damage: FabricDamage, fault: LinkDegradeFault) -> None:
    for link in cable_links(damage.topo, fault.target):
        damage.capacity_Bps[link] *= fault.params.factor
        damage.port_rate_Bps[link] *= fault.params.factor


register_fault(LinkDegradeFault, "link", on_fabric=_link_degrade)


# link-flap: down ``down_fraction`` of the time, so a fluid model sees that share of its capacity
# gone; ``LinkDownedCounter`` counts the cycles.
def _link_flap(damage: FabricDamage, fault: LinkFlapFault) -> None:
    for link in cable_links(damage.topo, fault.target):
        damage.capacity_Bps[link] *= 1.0 - fault.params.down_fraction
        damage.flap_cycles_per_s[link] = 1.0 / fault.params.period_s


register_fault(LinkFlapFault, "link", on_fabric=_link_flap)


# link-loss: go-back-N resends the window in flight after each loss, so goodput is
# ``1 / (1 + p * W)`` with ``W`` the bandwidth-delay product in packets (Zhu et al., "Congestion
# control for large-scale RDMA deployments", SIGCOMM 2015, on RoCE's go-back-N); symbol errors and
# out-of-sequence packets are counted.
def _link_loss(damage: FabricDamage, fault: LinkLossFault) -> None:
    for link in cable_links(damage.topo, fault.target):
        window_packets = max(1.0, damage.capacity_Bps[link] * LOSS_RTT_S / damage.mtu_bytes)
        damage.capacity_Bps[link] /= 1.0 + fault.params.loss_rate * window_packets
        damage.loss_rate[link] = fault.params.loss_rate


register_fault(LinkLossFault, "link", on_fabric=_link_loss)


def _slower_gpu(scenario: Scenario, kind: str, gpu: str, factor: float, topo: Topology) -> Scenario:
    workload = _workload(scenario, kind)
    rank = int(np.flatnonzero(topo.gpu_node.ravel() == topo.node_id(gpu))[0])
    slow = [*workload.compute.slow_gpus, SlowGpuSpec(rank=rank, factor=factor)]
    workload = workload.model_copy(update={"compute": workload.compute.model_copy(update={"slow_gpus": slow})})
    return scenario.model_copy(update={"workload": workload})


# slow-gpu: the GPU's compute time is multiplied by ``factor`` (a slow GPU of the workload).
def _slow_gpu(scenario: Scenario, fault: SlowGpuFault, topo: Topology) -> Scenario:
    return _slower_gpu(scenario, fault.kind, fault.target, fault.params.factor, topo)


register_fault(SlowGpuFault, "gpu", on_scenario=_slow_gpu)


# gpu-throttle: a thermal or power limit holds the GPU's clocks at ``clock_fraction``; its kernels
# take 1 / clock_fraction as long (math-bound kernels scale with the SM clock; memory-bound ones
# less, so this is the slowdown's upper end), and dcgm-exporter's
# DCGM_FI_DEV_CLOCK_THROTTLE_REASONS carries ``reasons`` (NVML clocks throttle reasons).
def _throttled_compute(scenario: Scenario, fault: GpuThrottleFault, topo: Topology) -> Scenario:
    return _slower_gpu(scenario, fault.kind, fault.target, 1.0 / fault.params.clock_fraction, topo)


def _throttle_reasons(damage: FabricDamage, fault: GpuThrottleFault) -> None:
    gpu = node_of_kind(damage.topo, fault.target, "gpu")
    damage.gpu_throttle[gpu] = damage.gpu_throttle.get(gpu, 0) | fault.params.reasons


register_fault(GpuThrottleFault, "gpu", on_scenario=_throttled_compute, on_fabric=_throttle_reasons)


#: PCIe data rate per lane by generation, bytes/s: 2.5, 5, 8, 16, 32, 64 GT/s times the line code
#: (8b/10b for generations 1-2, 128b/130b for 3-5, 242/256 FLIT for 6) over 8 bits (PCI-SIG, PCI
#: Express Base Specification 6.0;
#: diagnosis.rules.PCIE_LANE_GBps reads it in GB/s)
PCIE_LANE_Bps = {1: 2.5e9 * 0.8 / 8, 2: 5e9 * 0.8 / 8, 3: 8e9 * 128 / 130 / 8, 4: 16e9 * 128 / 130 / 8,
                 5: 32e9 * 128 / 130 / 8, 6: 64e9 * 242 / 256 / 8}
PCIE_FULL_LANES = 16


def server_pcie_generation(topo: Topology) -> int:
    """The generation whose x16 link is nearest the server's PCIe bandwidth (what its GPUs train at)."""
    pcie_Bps = topo.spec.server.pcie_bandwidth
    return min(PCIE_LANE_Bps, key=lambda g: abs(PCIE_LANE_Bps[g] * PCIE_FULL_LANES - pcie_Bps))


# pcie-downtrained: the GPU's PCIe link trained at ``lanes`` lanes of ``generation`` (0: the
# server's own): both directions of its PCIe link carry at most that rate, which GPUDirect RDMA
# traffic to its NIC crosses; DCGM_FI_DEV_PCIE_LINK_GEN / _WIDTH report it.
def _downtrained(damage: FabricDamage, fault: PcieDowntrainedFault) -> None:
    topo = damage.topo
    gpu = node_of_kind(topo, fault.target, "gpu")
    generation = fault.params.generation or server_pcie_generation(topo)
    rate_Bps = PCIE_LANE_Bps[generation] * fault.params.lanes
    pcie = links_of(topo, gpu)
    pcie = pcie[topo.link_kind[pcie] == LinkKind.PCIE]
    damage.capacity_Bps[pcie] = np.minimum(damage.capacity_Bps[pcie], rate_Bps)
    damage.gpu_pcie[gpu] = (float(generation), float(fault.params.lanes))


register_fault(PcieDowntrainedFault, "gpu", on_fabric=_downtrained)


# nic-down: the NIC's links carry nothing. A GPU with another NIC of its own (two NICs per GPU, as
# on OCI's BM.GPU4.8) moves its traffic there; a GPU whose only NIC died moves to the next NIC on
# the same PCIe switch (or the next NIC of the server), which then carries two GPUs' traffic.
def _nic_down(damage: FabricDamage, fault: NicDownFault) -> None:
    topo = damage.topo
    nic = node_of_kind(topo, fault.target, "nic")
    # down: nothing is routed through it any more; a sliver keeps the solver's capacities positive
    dead = links_of(topo, nic)
    damage.capacity_Bps[dead] *= DOWN_CAPACITY_FRACTION
    damage.port_rate_Bps[dead] *= DOWN_CAPACITY_FRACTION
    damage.down_nics.append(nic)
    s = int(topo.node_server[nic])
    nics = topo.nic_node[s]
    local = int(np.flatnonzero(nics == nic)[0])
    neighbour = int(nics[local ^ 1] if len(nics) > 1 and (local ^ 1) < len(nics) else nics[(local + 1) % len(nics)])
    for g, own in enumerate(topo.gpu_nics):
        own = own[own >= 0]
        if local not in own:
            continue
        alive = [int(n) for n in own if n != local and int(nics[n]) not in damage.down_nics]
        damage.nic_override[topo.gpu_node[s, g]] = int(nics[alive[0]]) if alive else neighbour


register_fault(NicDownFault, "nic", on_fabric=_nic_down)


# tcp-fallback: NCCL runs on its socket transport: the cluster (and every variant) uses the TCP
# profile, and NCCL's transport lines say NET/Socket. What belonged to the RDMA transport (its net plugin,
# its provider's rendezvous threshold, the platform whose plugin sets NCCL variables) does not carry over.
def _tcp_transport(scenario: Scenario, fault: TcpFallbackFault, topo: Topology) -> Scenario:
    cluster = scenario.cluster
    tcp = cluster.transport.model_copy(update={"name": "tcp", "net_plugin": None, "rendezvous_threshold": None,
                                               "platform": None})
    variants = [v.model_copy(update={"transport": tcp}) for v in scenario.variants]
    return scenario.model_copy(update={"cluster": cluster.model_copy(update={"transport": tcp}), "variants": variants})


def _tcp_socket(damage: FabricDamage, fault: TcpFallbackFault) -> None:
    damage.socket_transport = True


register_fault(TcpFallbackFault, "all", on_scenario=_tcp_transport, on_fabric=_tcp_socket)


# no-gdr: network data bounces through host memory, crossing the PCIe switch's uplink twice: a
# GPU's network rate is held to half the PCIe bandwidth.
def _no_gdr(damage: FabricDamage, fault: NoGdrFault) -> None:
    topo = damage.topo
    pcie_Bps = topo.spec.server.pcie_bandwidth
    for s in range(topo.n_servers) if fault.target == "all" else [server_index(topo, fault.target)]:
        damage.no_gdr_servers.append(s)
        for nic in topo.nic_node[s]:
            host = host_links(topo, nic)
            damage.capacity_Bps[host] = np.minimum(damage.capacity_Bps[host], pcie_Bps / 2)


register_fault(NoGdrFault, "server-or-all", on_fabric=_no_gdr)


# nic-affinity: the GPU's NIC sits behind the other socket; without GPUDirect across sockets the
# data bounces through host memory and crosses the CPU interconnect: the rate is held to half of
# the smaller of the PCIe and the socket-interconnect bandwidths.
def _nic_affinity(damage: FabricDamage, fault: NicAffinityFault) -> None:
    topo = damage.topo
    server = topo.spec.server
    gpu = node_of_kind(topo, fault.target, "gpu")
    s = int(topo.node_server[gpu])
    local = int(gpu - topo.gpu_node[s, 0])
    host = host_links(topo, int(topo.nic_node[s, topo.gpu_nic[local]]))
    limit_Bps = min(server.pcie_bandwidth, server.cpu_interconnect_bandwidth) / 2
    damage.capacity_Bps[host] = np.minimum(damage.capacity_Bps[host], limit_Bps)
    damage.remote_nic_gpus.append(gpu)


register_fault(NicAffinityFault, "gpu", on_fabric=_nic_affinity)


# ecmp-polarization: one ECMP hash seed on every switch (no per-switch seed), so the tiers pick alike.
def _one_seed(scenario: Scenario, fault: EcmpPolarizationFault, topo: Topology) -> Scenario:
    cluster = scenario.cluster
    if cluster.routing.kind != "ecmp":
        raise SpecError(f"fault ecmp-polarization: the cluster routes with {cluster.routing.kind!r}; expected ecmp")
    if not topo.uplinks(2).size:
        # polarization is a second hashing stage repeating the first one's choice; with one stage
        # (a leaf-spine) there is nothing to repeat it
        raise SpecError("fault ecmp-polarization: the fabric has one hashing stage (leaf to spine, no uplinks above "
                        "the spines), so one seed everywhere cannot polarize it; expected a fabric of 3 tiers "
                        "(fabric.tiers: 3)")
    routing = cluster.routing.model_copy(update={"per_switch_seed": False})
    return scenario.model_copy(update={"cluster": cluster.model_copy(update={"routing": routing})})


register_fault(EcmpPolarizationFault, "all", on_scenario=_one_seed)


# storage-contention: the job reads its dataset at ``read_rate_per_gpu_Bps`` times its GPU count over the
# compute fabric (storage converged onto it), on the GPUs that read data (Layout.reader_ranks).
def _storage_reads(scenario: Scenario, fault: StorageContentionFault, topo: Topology) -> Scenario:
    workload = _workload(scenario, fault.kind)
    cluster = scenario.cluster
    data = workload.data.model_copy(update={"dataset_read_per_gpu": fault.params.read_rate_per_gpu_Bps})
    workload = workload.model_copy(update={"data": data})
    if cluster.storage.mode != "converged":
        cluster = cluster.model_copy(update={"storage": cluster.storage.model_copy(update={"mode": "converged"})})
    return scenario.model_copy(update={"cluster": cluster, "workload": workload})


register_fault(StorageContentionFault, "all", on_scenario=_storage_reads)


# dataloader-starvation: the CPU loaders of the target server (or of every server) deliver only
# ``samples_per_s_per_server``. Loaders run only where the job reads data (a pipeline's first and last
# stage, :meth:`gpuwait.workload.layout.Layout.data_readers`), so a server holding neither is not slowed;
# the step model then shows who waits for what (its GPUs for data, the others for them).
def _slow_loader(scenario: Scenario, fault: DataloaderStarvationFault, topo: Topology) -> Scenario:
    workload = _workload(scenario, fault.kind)
    rate = fault.params.samples_per_s_per_server
    # a fault slows a loader, never speeds one up: a server already slower than the fault's rate (its own
    # rate, or the scenario's per-server one) stays as it is
    default = min(rate, workload.data.loader_samples_per_s_per_server or rate)
    by_server = dict(workload.data.loader_samples_per_s_by_server)
    if fault.target == "all":
        slower = {name: min(r, rate) for name, r in by_server.items()}
        update = {"loader_samples_per_s_per_server": default, "loader_samples_per_s_by_server": slower}
    else:
        name = topo.server_name(server_index(topo, fault.target))
        by_server[name] = min(by_server.get(name, default), rate)
        update = {"loader_samples_per_s_by_server": by_server}
    data = workload.data.model_copy(update=update)
    return scenario.model_copy(update={"workload": workload.model_copy(update={"data": data})})


register_fault(DataloaderStarvationFault, "server-or-all", on_scenario=_slow_loader)


# noisy-neighbor: ``load_fraction`` of each target link is taken by another job's traffic
# (``all``: every switch-to-switch link of the compute fabric).
def _foreign_load(damage: FabricDamage, fault: NoisyNeighborFault) -> None:
    links = fabric_links(damage.topo) if fault.target == "all" else cable_links(damage.topo, fault.target)
    damage.foreign_Bps[links] += fault.params.load_fraction * damage.capacity_Bps[links]


register_fault(NoisyNeighborFault, "link", on_fabric=_foreign_load, target_all=True)


# storage-slow: the storage servers' backend (disks, file system) delivers only
# ``throughput_fraction`` of what their network ports carry: their ports' capacity is held to it
# while the negotiated rate stays, and node_exporter on them shows the disks busy all the time.
def _needs_reads(scenario: Scenario, fault: StorageSlowFault, topo: Topology) -> Scenario:
    workload = _workload(scenario, fault.kind)
    if workload.data.dataset_read_per_gpu <= 0 or not len(topo.storage_server_node):
        raise SpecError("fault storage-slow: the job reads no dataset from storage servers, so a slow backend cannot "
                        "slow it; expected workload.data.dataset_read_per_gpu > 0 and storage servers (cluster.storage)")
    return scenario


def _slow_backend(damage: FabricDamage, fault: StorageSlowFault) -> None:
    topo = damage.topo
    nodes = topo.storage_server_node if fault.target == "all" else [node_of_kind(topo, fault.target, "storage_server")]
    for node in nodes:
        out = np.flatnonzero(topo.link_src == node)
        damage.capacity_Bps[out] *= fault.params.throughput_fraction
        damage.slow_storage_nodes.append(int(node))


register_fault(StorageSlowFault, "storage-or-all", on_scenario=_needs_reads, on_fabric=_slow_backend)
