"""NCCL's PCI path types inside a server, and the two decisions it takes from them: P2P and GPUDirect RDMA.

NCCL classifies the path between two devices of a node by the farthest element it crosses
(``src/graph/topo.h``, NVIDIA/nccl v2.27.3-1, in increasing distance): LOC, NVL (NVLink), NVB (NVLink
through a GPU), C2C (NVLink-C2C, a superchip's GPU to its own CPU), PIX (one PCIe switch), PXB (several
PCIe switches, no host bridge), PXN (a GPU's NIC reached through an NVLink peer), P2C (a C2C GPU to a NIC
on its CPU's PCIe), PHB (through a CPU's host bridge), SYS (across the CPUs' interconnect, UPI/xGMI).

From a server description (``gpu_pcie_switch``, ``nic_pcie_switch``, switches spread over CPUs, NVLink
topology, ``gpu_host_bandwidth`` for C2C superchips) this module gives those types, and then:

* **P2P** (``ncclTopoCheckP2p``, ``src/graph/paths.cc`` v2.27.3-1): two GPUs of a node use the P2P
  transport when their path is at most ``NCCL_P2P_LEVEL`` -- by default PXB ("don't use P2P across CPU
  Host Bridges and further apart"), raised to SYS on AMD x86 hosts with at most 2 GPUs. Otherwise NCCL
  uses its SHM transport through host memory. ``NCCL_P2P_DISABLE=1`` makes the level LOC.
* **GPUDirect RDMA** (``ncclTopoCheckGdr``, same file): the NIC reads (sends) and writes (receives) GPU
  memory directly when the GPU-NIC path is at most ``NCCL_NET_GDR_LEVEL`` (default PXB); a P2C path
  counts as C2C while ``NCCL_NET_GDR_C2C`` is 1 (its default from v2.27.3-1; ``gdr_c2c=False`` reads an older
  release, where that path is PHB). For reads, ``NCCL_NET_GDR_READ=0``
  disables it, and left unset it is disabled on GPUs before SM80 that have no NVLink peer ("Disable
  GDR Reads pre-Ampere when we have other PCI flows"). Without GPUDirect NCCL diverts the GPU<->NIC path
  through the CPU local to the GPU (``ncclTopoComputePaths``: ``addInterStep(... CPU, localCpu ...)``):
  the proxy stages every network byte in host memory, exactly the path shape of SHM.

Levels may be given as names or as NCCL's old integers 0-4 (``levelsOldToNew``: LOC, PIX, PXB, PHB, SYS).
"""

from __future__ import annotations

import numpy as np

from gpuwait.errors import SpecError
from gpuwait.spec.cluster import ServerSpec
from gpuwait.topology.build import _local_map, _spread, gpu_nic_affinity
from gpuwait.topology.gpus import gpu_arch

#: NCCL's path types in increasing distance (src/graph/topo.h, v2.27.3-1 ``topoPathTypeStr``)
PATH_TYPES: tuple[str, ...] = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "PXN", "P2C", "PHB", "SYS")
#: NCCL_P2P_LEVEL / NCCL_NET_GDR_LEVEL as integers before 2.9 (paths.cc ``levelsOldToNew``)
OLD_LEVELS: tuple[str, ...] = ("LOC", "PIX", "PXB", "PHB", "SYS")
DEFAULT_P2P_LEVEL = "PXB"
DEFAULT_GDR_LEVEL = "PXB"


def distance(path: str) -> int:
    """Rank of a path type (larger = farther)."""
    return PATH_TYPES.index(path)


def parse_level(value: str | None, name: str) -> str | None:
    """An NCCL path-level variable as a path type name; None when unset.

    >>> parse_level("phb", "NCCL_NET_GDR_LEVEL"), parse_level("2", "NCCL_P2P_LEVEL"), parse_level("7", "x")
    ('PHB', 'PXB', 'SYS')
    """
    if value is None:
        return None
    text = str(value).strip().upper()
    if text in PATH_TYPES:
        return text
    if text.isdigit():
        return OLD_LEVELS[min(int(text), len(OLD_LEVELS) - 1)]  # NCCL clamps to the last old level
    raise SpecError(f"{name}: got {value!r}; expected one of {', '.join(PATH_TYPES)} or an integer 0-4")


def _layout(server: ServerSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    gpu_sw = _local_map(server.gpu_pcie_switch, server.gpus, server.pcie_switches, "gpu_pcie_switch")
    nic_sw = _local_map(server.nic_pcie_switch, server.nics, server.pcie_switches, "nic_pcie_switch")
    return gpu_sw, nic_sw, _spread(server.pcie_switches, server.cpus)


def _nvlinked(server: ServerSpec, a: int, b: int) -> bool:
    if server.nvlink_bandwidth <= 0:
        return False
    if server.nvlink_topology == "pairs":
        return a // 2 == b // 2
    return True  # an NVSwitch or a full mesh joins every pair


def gpu_gpu_path(server: ServerSpec, a: int, b: int) -> str:
    """NCCL's path type between local GPUs ``a`` and ``b`` of ``server``.

    >>> from gpuwait.topology.servers import resolve_server
    >>> r760 = resolve_server(ServerSpec(template="pcie-8gpu", gpus=2, nics=1))  # one GPU per socket
    >>> gpu_gpu_path(r760, 0, 1), gpu_gpu_path(resolve_server(ServerSpec(template="dgx-h100")), 0, 7)
    ('SYS', 'NVL')
    """
    if a == b:
        return "LOC"
    if _nvlinked(server, a, b):
        return "NVL"
    gpu_sw, _, sw_cpu = _layout(server)
    if gpu_sw[a] == gpu_sw[b]:
        return "PIX"
    return "PHB" if sw_cpu[gpu_sw[a]] == sw_cpu[gpu_sw[b]] else "SYS"


def gpu_nic_path(server: ServerSpec, gpu: int, nic: int) -> str:
    """NCCL's path type between local GPU ``gpu`` and compute NIC ``nic`` of ``server``.

    A superchip GPU (``gpu_host_bandwidth`` set: NVLink-C2C to its CPU) reaches a NIC on its own CPU's
    PCIe as P2C; every other GPU through its PCIe switch (PIX) or the CPU (PHB, SYS across sockets).

    >>> from gpuwait.topology.servers import resolve_server
    >>> gpu_nic_path(resolve_server(ServerSpec(template="dgx-h100")), 0, 0)
    'PIX'
    >>> gpu_nic_path(resolve_server(ServerSpec(template="gh200-quad")), 2, 2)
    'P2C'
    """
    gpu_sw, nic_sw, sw_cpu = _layout(server)
    if gpu_sw[gpu] == nic_sw[nic]:
        return "P2C" if server.gpu_host_bandwidth else "PIX"
    return "PHB" if sw_cpu[gpu_sw[gpu]] == sw_cpu[nic_sw[nic]] else "SYS"


def sockets(server: ServerSpec, local_gpus, local_nics=()) -> int:
    """How many CPU sockets the given local GPUs and compute NICs hang from (their PCIe switches' CPUs).

    >>> from gpuwait.topology.servers import resolve_server
    >>> r760 = resolve_server(ServerSpec(template="pcie-8gpu", gpus=2, nics=1, pcie_switches=3,
    ...                                  gpu_pcie_switch=[0, 2], nic_pcie_switch=[1]))
    >>> sockets(r760, [0]), sockets(r760, [0, 1]), sockets(r760, [1], [0])
    (1, 2, 2)
    """
    gpu_sw, nic_sw, sw_cpu = _layout(server)
    switches = [gpu_sw[int(g)] for g in local_gpus] + [nic_sw[int(n)] for n in local_nics]
    return len({int(sw_cpu[sw]) for sw in switches})


def p2p_level(server: ServerSpec, node_gpus: int, user_level: str | None = None) -> str:
    """The farthest GPU-GPU path NCCL still runs P2P over (``ncclTopoCheckP2p``).

    >>> from gpuwait.topology.servers import resolve_server
    >>> p2p_level(resolve_server(ServerSpec(template="pcie-8gpu")), 2), p2p_level(ServerSpec(cpu_vendor="amd"), 2)
    ('PXB', 'SYS')
    """
    if user_level is not None:
        return user_level
    # "Allow P2P between pairs of GPUs on AMD systems"
    return "SYS" if server.cpu_vendor == "amd" and node_gpus <= 2 else DEFAULT_P2P_LEVEL


def uses_p2p(server: ServerSpec, local_gpus, user_level: str | None = None) -> bool:
    """Whether every pair of a node's GPUs (local indices) is within NCCL's P2P level.

    One pair beyond it makes that hop SHM; gpuwait then stages the whole node through host memory
    (a simplification: NCCL decides per pair).
    """
    gpus = sorted({int(g) for g in local_gpus})
    level = distance(p2p_level(server, len(gpus), user_level))
    return all(distance(gpu_gpu_path(server, a, b)) <= level for i, a in enumerate(gpus) for b in gpus[i + 1:])


def gdr_enabled(server: ServerSpec, gpu: int, nic: int, *, read: bool, user_level: str | None = None,
                gdr_read: bool | None = None, gdr_c2c: bool = True, node_gpus=()) -> bool:
    """NCCL's GPUDirect RDMA decision for one GPU and NIC (``ncclTopoCheckGdr``, paths.cc v2.27.3-1).

    ``read`` asks for the send side. ``node_gpus``: the node's local GPU indices (for the pre-Ampere
    read rule's NVLink-peer test; a node of one GPU counts as having one).

    >>> from gpuwait.topology.servers import resolve_server
    >>> r760 = resolve_server(ServerSpec(template="pcie-8gpu", gpus=2, nics=1, pcie_switches=3,  # NIC "NODE"
    ...                                  gpu_pcie_switch=[0, 2], nic_pcie_switch=[1]))
    >>> gdr_enabled(r760, 0, 0, read=False), gdr_enabled(r760, 0, 0, read=False, user_level="PHB")
    (False, True)
    >>> gdr_enabled(resolve_server(ServerSpec(template="dgx-h100")), 0, 0, read=True)
    True
    """
    if read:
        if gdr_read is False:
            return False
        if gdr_read is None and gpu_arch(server.gpu_model).sm < 80:
            peers = [g for g in node_gpus if g != gpu]
            if peers and not any(gpu_gpu_path(server, gpu, g) == "NVL" for g in peers):
                return False
    path = gpu_nic_path(server, gpu, nic)
    if gdr_c2c and path == "P2C":
        path = "C2C"
    return distance(path) <= distance(user_level or DEFAULT_GDR_LEVEL)


def node_uses_gdr(server: ServerSpec, local_gpus, user_level: str | None = None, gdr_read: bool | None = None,
                  gdr_c2c: bool = True) -> bool:
    """Whether every GPU of a node (local indices) gets GPUDirect RDMA both ways with its NIC (the
    one on its PCIe switch, :func:`gpuwait.topology.build.gpu_nic_affinity`); True without NICs.

    >>> from gpuwait.topology.servers import resolve_server
    >>> node_uses_gdr(resolve_server(ServerSpec(template="dgx-h100")), range(8))
    True
    """
    if server.nics == 0:
        return True
    nic_of = gpu_nic_affinity(server)[:, 0]
    gpus = [int(g) for g in local_gpus]
    return all(gdr_enabled(server, g, int(nic_of[g]), read=read, user_level=user_level, gdr_read=gdr_read,
                           gdr_c2c=gdr_c2c, node_gpus=gpus) for g in gpus for read in (False, True))
