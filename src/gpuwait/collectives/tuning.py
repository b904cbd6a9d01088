"""NCCL's own cost model: which algorithm and protocol NCCL picks, and the time it predicts.

This is a re-implementation of ``ncclTopoTuneModel`` / ``ncclTopoGetAlgoTime`` from NCCL's
``src/graph/tuning.cc`` (NVIDIA/nccl tag v2.30.7-1: constants and formulas as in that file) and of
the link constants of ``src/graph/topo.h`` / ``topo.cc`` at the same tag (table in docs/sources.md).
Older releases (2.18 to 2.29) differ in tables, formulas and which algorithms exist: their values are
in :mod:`gpuwait.collectives.nccl_versions`, and ``TuningInputs.release`` selects one.

NCCL predicts a collective's time as ``latency + bytes / bandwidth`` per (algorithm, protocol), from a
handful of *graph* numbers found by its topology search (channels, per-channel bandwidth inside and
between nodes) and static tables. It then runs the cheapest. The model is what NCCL *believes*, not what
the hardware does: use it to explain NCCL's choices and as a first-order estimate, and compare it with
measurements before trusting its absolute numbers.

Units: latencies in microseconds (``_us``), bandwidths in GB/s = 1e9 bytes/s (``_GBps``), sizes in bytes.
Index order of every ``(LL, LL128, Simple)`` triple is :data:`PROTOCOLS`; of every ``(N1, N2, N4)``
triple is 1 node / 2 nodes / more than 2 nodes.

Examples
--------
>>> algo, proto, pred = choose(dgx_h100(), 8 * 2**30)
>>> algo, proto, round(pred.test_busbw_GBps)
('nvls', 'Simple', 476)
>>> choose(dgx_h100(), 8 * 2**30, allowed_algos="Ring")[:2]
('ring', 'Simple')
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from gpuwait.collectives.nccl_versions import DEFAULT_NCCL_VERSION, DEFAULT_RELEASE, NcclRelease
from gpuwait.collectives.nccltests import busbw_factor
from gpuwait.errors import SpecError

# --------------------------------------------------------------------------------------------------
# Names. NCCL's enums (src/include/device.h) in NCCL's order; the order matters: on equal predicted
# time NCCL keeps the first (algorithm, protocol) it saw, iterating algorithms then protocols.

#: The NCCL release whose tuning model this module follows by default; :class:`TuningInputs` may carry
#: another (:mod:`gpuwait.collectives.nccl_versions`, 2.18 to 2.30).
MODEL_NCCL_VERSION = DEFAULT_NCCL_VERSION

ALGORITHMS: tuple[str, ...] = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")
PROTOCOLS: tuple[str, ...] = ("LL", "LL128", "Simple")

#: The spellings NCCL_ALGO / NCCL_PROTO accept (ncclAlgoStr, ncclProtoStr, ncclFuncStr; matched
#: case-insensitively by parseList in tuning.cc).
NCCL_ALGORITHM_NAMES: Mapping[str, str] = MappingProxyType({
    "tree": "Tree", "ring": "Ring", "collnet_direct": "CollNetDirect", "collnet_chain": "CollNetChain",
    "nvls": "NVLS", "nvls_tree": "NVLSTree", "pat": "PAT"})
NCCL_PROTOCOL_NAMES: Mapping[str, str] = MappingProxyType({"LL": "LL", "LL128": "LL128", "Simple": "Simple"})
NCCL_COLLECTIVE_NAMES: Mapping[str, str] = MappingProxyType({
    "broadcast": "Broadcast", "reduce": "Reduce", "all_gather": "AllGather",
    "reduce_scatter": "ReduceScatter", "all_reduce": "AllReduce"})
#: The collectives NCCL's tuning model covers, in ncclFunc_t order (Broadcast, Reduce, AllGather,
#: ReduceScatter, AllReduce).
TUNED_COLLECTIVES: tuple[str, ...] = tuple(NCCL_COLLECTIVE_NAMES)

#: Which algorithms NCCL models for each collective: the ``continue`` filters at the top of the
#: per-collective loop of ncclTopoTuneModel (tuning.cc v2.30.7): Broadcast/Reduce ring only;
#: AllGather/ReduceScatter ring, PAT, NVLS, CollNetDirect; AllReduce everything but PAT. Older
#: releases allow fewer (``NcclRelease.supported_algorithms``).
SUPPORTED_ALGORITHMS: Mapping[str, tuple[str, ...]] = DEFAULT_RELEASE.supported_algorithms
#: NVLS/NVLSTree and PAT are skipped unless Simple; CollNet's LL/LL128 bandwidth is forced to 0 ("Not used").
ALGORITHM_PROTOCOLS: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "tree": PROTOCOLS, "ring": PROTOCOLS, "collnet_direct": ("Simple",), "collnet_chain": ("Simple",),
    "nvls": ("Simple",), "nvls_tree": ("Simple",), "pat": ("Simple",)})

# --------------------------------------------------------------------------------------------------
# Constants of tuning.cc v2.30.7 (the default release; every release's are in nccl_versions.py).
# Triples are (LL, LL128, Simple).

#: baseLatencies[algo][proto], us (tuning.cc v2.30.7).
BASE_LATENCY_US: Mapping[str, tuple[float, float, float]] = DEFAULT_RELEASE.base_latency_us
#: hwLatencies[hw][algo][proto], us, hw in NVLINK / PCI / NET (tuning.cc v2.30.7).
HW_LATENCY_US: Mapping[str, Mapping[str, tuple[float, float, float]]] = DEFAULT_RELEASE.hw_latency_us

#: Compute-capability rows of the per-architecture tables (NCCL_*_COMPCAP_IDX).
ARCHITECTURES: tuple[str, ...] = ("volta", "ampere", "hopper", "blackwell")

#: llMaxBws[row][N1/N2/N4], GB/s (tuning.cc v2.30.7). On one node the row is the GPU architecture;
#: on several nodes NCCL reads row 0 for Intel (or other) CPUs and row 1 for AMD / mixed CPUs.
LL_MAX_BW_GBps: tuple[tuple[float, float, float], ...] = DEFAULT_RELEASE.ll_max_bw_GBps
#: perChMaxRingLL128Bws[arch][N1/N2/N4], GB/s per channel (tuning.cc v2.30.7).
PER_CHANNEL_MAX_RING_LL128_BW_GBps = DEFAULT_RELEASE.per_channel_max_ring_ll128_bw_GBps
#: perChMaxTreeLL128Bws[arch][N1/N2/N4], GB/s per channel (tuning.cc v2.30.7).
PER_CHANNEL_MAX_TREE_LL128_BW_GBps = DEFAULT_RELEASE.per_channel_max_tree_ll128_bw_GBps
#: perChMaxTreeBws[arch][N1/N2/N4], GB/s per channel (tuning.cc v2.30.7).
PER_CHANNEL_MAX_TREE_BW_GBps = DEFAULT_RELEASE.per_channel_max_tree_bw_GBps
#: perChMaxNVLSTreeBws[arch][N1/N2/N4], GB/s per channel (tuning.cc v2.30.7).
PER_CHANNEL_MAX_NVLS_TREE_BW_GBps = DEFAULT_RELEASE.per_channel_max_nvls_tree_bw_GBps
#: nvlsEfficiency[arch] (tuning.cc v2.30.7): NVLink SHARP reaches this fraction of the NVLink graph bandwidth.
NVLS_EFFICIENCY: tuple[float, ...] = DEFAULT_RELEASE.nvls_efficiency

#: treeCorrectionFactor[proto][log2(nBytes/64)], sizes 64 B, 128 B, ... (tuning.cc v2.30.7; the same
#: values since 2.18, a 24th entry from 2.29). Tree AllReduce reads entries 0..22, NVLSTree AllReduce on
#: SM100+ x86 entries 0..23 (2.29+); outside, no correction.
TREE_CORRECTION_FACTOR: Mapping[str, tuple[float, ...]] = MappingProxyType({
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9),
})
TREE_CORRECTION_ENTRIES_TREE = 23
TREE_CORRECTION_ENTRIES_NVLS_TREE = 24

#: getNetOverhead (tuning.cc): per-step cost of posting a network operation, us; x3 for Simple.
NET_OVERHEAD_US: Mapping[tuple[str, str], float] = MappingProxyType({("x86", "intel"): 1.0, ("x86", "amd"): 2.0})
NET_OVERHEAD_DEFAULT_US = 1.0
#: "Plateau effect of ring": Ring/Simple AllReduce across nodes multiplies its latency by this factor.
RING_PLATEAU_FACTOR = {"pre_sm80": 1.9, "sm80_plus": 1.4}
#: CollNetDirect AllReduce adds this per extra local rank ("0.4 us arity serialization latency"; 0.5 in 2.18).
COLLNET_ARITY_LATENCY_US = DEFAULT_RELEASE.collnet_arity_latency_us
#: NCCL_COLLNET_NODE_THRESHOLD default (init.cc): CollNet needs at least this many nodes.
COLLNET_NODE_THRESHOLD = 2
#: CollNetDirect is only modelled for up to this many local GPUs (enqueue.cc updateCollCostTable).
COLLNET_DIRECT_MAX_LOCAL_RANKS = 8

# --------------------------------------------------------------------------------------------------
# Link bandwidths of NCCL's topology model (src/graph/topo.h, topo.cc, v2.30.7), GB/s.

#: Per-NVLink-link bandwidth by SM (SM60/70/80/86/90/100_NVLINK_BW; per release in nccl_versions.py).
NVLINK_BW_PER_LINK_GBps: Mapping[int, float] = DEFAULT_RELEASE.nvlink_bw_per_link_GBps
LOC_BW_GBps = 5000.0
PCI_GEN3_X16_BW_GBps = 12.0  # PCI_BW, "PCI Gen3 x16"
NET_100G_BW_GBps = 12.0  # NET_BW, "100Gbit"
#: INTEL_P2P_OVERHEAD(bw) = bw * 6 / 5: what a GPU path through an Intel x86 root complex (PATH_PHB)
#: costs every PCI link it crosses in NCCL's search (topo.h, search.cc followPath).
INTEL_P2P_OVERHEAD = 6.0 / 5.0
#: The link between two CPU sockets in NCCL's topology (LINK_SYS, one per direction), GB/s, by CPU:
#: ``ncclTopoGetInterCpuBw`` (src/graph/topo.cc) with topo.h's BDW_QPI_BW 6, SKL_QPI_BW 10, SRP_QPI_BW 22,
#: ERP_QPI_BW 40, AMD_BW 16, ARM_BW 6, ZPI_BW 6, YONGFENG_ZPI_BW 9 (NVIDIA/nccl v2.27.3-1 to v2.30.7-1).
#: NCCL tells Intel generations apart by the CPUID model of family 6 (topo.cc ``ncclTopoAddCpu``):
#: >= 0xCF Emerald Rapids, >= 0x8F Sapphire Rapids (so Granite Rapids too), >= 0x55 Skylake (Cascade
#: Lake, Ice Lake), else Broadwell. SRP and ERP first appear in v2.26.2-1; before, NCCL reads both as SKL.
#: The Intel keys of INTER_CPU_BW_GBps (server.cpu_generation's values), oldest first.
INTEL_GENERATIONS = ("broadwell", "skylake", "sapphire-rapids", "emerald-rapids")
INTER_CPU_BW_GBps: Mapping[str, float] = MappingProxyType({
    "broadwell": 6.0, "skylake": 10.0, "sapphire-rapids": 22.0, "emerald-rapids": 40.0,
    "amd": 16.0, "arm": 6.0, "zhaoxin": 6.0, "yongfeng": 9.0})
#: kvDictPciGen: per-lane PCIe speed in units of 100 Mb/s, by generation (2.5, 5, 8, 16, 32, 64 GT/s).
PCI_LANE_SPEED_100Mbps: Mapping[int, int] = MappingProxyType({1: 15, 2: 30, 3: 60, 4: 120, 5: 240, 6: 480})

#: Channel bandwidths NCCL's search tries, fastest first (src/graph/search.cc speedArrayIntra,
#: sm90SpeedArrayIntra, sm100SpeedArrayIntra), GB/s. Used only by the graph helpers below.
SEARCH_SPEEDS_INTRA_GBps: Mapping[str, tuple[float, ...]] = DEFAULT_RELEASE.search_speeds_intra_GBps
SEARCH_MAX_RING_CHANNELS = 32  # MAXCHANNELS/2


def nvlink_bw_GBps(sm: int, n_links: int = 1, release: NcclRelease = DEFAULT_RELEASE) -> float:
    """NVLink bandwidth NCCL assumes for ``n_links`` links of a GPU of compute capability ``sm`` (x10).

    Mirrors ``ncclTopoNVLinkBw`` (topo.h constants of ``release``): SM86 is special-cased, other SMs
    take the constant of their generation; below SM60 NCCL falls back to the SM80 value. Before 2.25
    NCCL had no SM100 constant (a Blackwell GPU got Hopper's), before 2.20 Hopper's was 20.0.

    Examples
    --------
    >>> round(nvlink_bw_GBps(90, 18), 1)  # H100: 18 NVLink4 links
    370.8
    >>> nvlink_bw_GBps(80, 12)  # A100: 12 NVLink3 links
    240.0
    >>> from gpuwait.collectives.nccl_versions import nccl_release
    >>> nvlink_bw_GBps(90, 18, nccl_release("2.19.3"))
    360.0
    """
    if n_links < 0:
        raise SpecError(f"nvlink links: got {n_links}; expected a count >= 0")
    return release.nvlink_per_link_GBps(sm) * n_links


def pci_bw_GBps(gen: int, width: int = 16) -> float:
    """PCIe link bandwidth in NCCL's model: ``width * lane_speed / 80`` (topo.cc, kvDictPciGen).

    Examples
    --------
    >>> pci_bw_GBps(5, 16), pci_bw_GBps(4, 16), pci_bw_GBps(3, 16)
    (48.0, 24.0, 12.0)
    """
    if gen not in PCI_LANE_SPEED_100Mbps:
        raise SpecError(f"PCIe generation: got {gen!r}; expected one of {sorted(PCI_LANE_SPEED_100Mbps)}")
    if width < 1:
        raise SpecError(f"PCIe width: got {width}; expected a lane count >= 1")
    return width * PCI_LANE_SPEED_100Mbps[gen] / 80.0


def net_bw_GBps(speed_Mbps: float) -> float:
    """NIC bandwidth in NCCL's model from the port speed in Mb/s: ``mbps / 8000`` (topo.cc).

    Examples
    --------
    >>> net_bw_GBps(400_000), net_bw_GBps(100_000)
    (50.0, 12.5)
    """
    if speed_Mbps <= 0:
        raise SpecError(f"NIC speed: got {speed_Mbps} Mb/s; expected a positive speed")
    return speed_Mbps / 8000.0


# --------------------------------------------------------------------------------------------------
# Inputs


@dataclass(frozen=True)
class Graph:
    """One of NCCL's search graphs (``ncclTopoGraph``) as the tuning model reads it.

    Parameters
    ----------
    n_channels : int
        Channels the search found (after its channel duplication), ``graph->nChannels``.
    bw_intra_GBps, bw_inter_GBps : float
        Per-channel bandwidth inside a node and between nodes (``bwIntra``, ``bwInter``).
    latency_inter_us : float
        Extra network latency of the graph (``latencyInter``, from the NICs' ``latency``; 0 on IB).
    intra_link : {"nvlink", "pci"}
        ``typeIntra``: NVLink graphs use the NVLINK row of :data:`HW_LATENCY_US`, all others the PCI row.
    same_channels : bool
        ``sameChannels``: every channel takes the same path (only Broadcast/Reduce latency reads it).
    run_channels : int
        Channels NCCL runs the graph on when more than the search found (0: ``n_channels``): a tree
        graph's search channels are the ring search's, and ``ncclTopoPostset`` doubles them for the
        kernels (src/graph/connect.cc, NVIDIA/nccl v2.26.2-1), while the tuning reads the search's
        ``nChannels`` and per-channel bandwidths.

    Examples
    --------
    >>> Graph(n_channels=12, bw_intra_GBps=30.0, bw_inter_GBps=30.0).busbw_GBps
    360.0
    """

    n_channels: int
    bw_intra_GBps: float
    bw_inter_GBps: float
    latency_inter_us: float = 0.0
    intra_link: str = "nvlink"
    same_channels: bool = False
    run_channels: int = 0

    def __post_init__(self) -> None:
        if int(self.n_channels) != self.n_channels or self.n_channels < 1:
            raise SpecError(f"graph n_channels: got {self.n_channels!r}; expected an integer >= 1")
        if int(self.run_channels) != self.run_channels or self.run_channels < 0:
            raise SpecError(f"graph run_channels: got {self.run_channels!r}; expected an integer >= 0")
        for name in ("bw_intra_GBps", "bw_inter_GBps"):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise SpecError(f"graph {name}: got {value!r}; expected a positive bandwidth in GB/s")
        if not (self.latency_inter_us >= 0):
            raise SpecError(f"graph latency_inter_us: got {self.latency_inter_us!r}; expected >= 0")
        if self.intra_link not in ("nvlink", "pci"):
            raise SpecError(f"graph intra_link: got {self.intra_link!r}; expected 'nvlink' or 'pci'")

    @property
    def busbw_GBps(self) -> float:
        """``n_channels * bw_intra_GBps``: the raw bus bandwidth before any refinement."""
        return self.n_channels * self.bw_intra_GBps

    @property
    def channels_run(self) -> int:
        """Channels the kernels run on: ``run_channels`` if set, else the search's ``n_channels``."""
        return self.run_channels or self.n_channels

    def run_bw_GBps(self, inter: bool) -> float:
        """Per-channel bandwidth of one run channel: the search's (``bwInter`` if ``inter`` else
        ``bwIntra``) shared by the run channels that copy each search channel."""
        bw = self.bw_inter_GBps if inter else self.bw_intra_GBps
        return bw * self.n_channels / self.channels_run


@dataclass(frozen=True)
class TuningInputs:
    """Everything NCCL's tuning model reads about one communicator and one collective.

    Parameters
    ----------
    collective : str
        One of :data:`TUNED_COLLECTIVES`.
    n_ranks, n_nodes : int
        Ranks and nodes; every node holds ``ppn = n_ranks / n_nodes`` ranks (NCCL's model assumes so).
    sm : int
        Minimum compute capability x10 (70, 80, 90, 100...); selects the architecture rows.
    ring : Graph
        NCCL's ring graph: what every algorithm without its own graph in ``graphs`` reads, and whose
        ``n_channels`` is the communicator's channel count (:attr:`n_channels`, the ring plateau test).
    graphs : mapping of algorithm name to Graph
        Per-algorithm graphs where they differ from the ring graph (NCCL searches a tree, a CollNet and an
        NVLS graph separately; e.g. the NVLS graph of a DGX H100 has 8 channels, see :func:`dgx_h100`).
    net_overhead_us : float or None
        ``NCCL_NET_OVERHEAD`` in us. ``None`` takes NCCL's default for the CPU: 1.0 for Intel x86,
        2.0 for AMD x86, 1.0 otherwise.
    cpu_arch : {"x86", "power", "arm"}
        POWER makes Tree/Simple over PCI as cheap as Ring/Simple (tuning.cc).
    cpu_vendor : {"intel", "amd", "mixed", "other"}
        Multi-node LL bandwidth cap row: AMD and mixed read row 1 of :data:`LL_MAX_BW_GBps`, the rest row 0.
        This is NCCL's choice (``index1``), kept because the cap differs by 2x (22.5 vs 39 GB/s on 2 nodes).
    nvls_available : bool
        NVLink SHARP usable (SM90+ GPUs on an NVLink4+ NVSwitch, ``NCCL_NVLS_ENABLE`` not 0).
    collnet_available : bool
        CollNet (IB SHARP plugin, ``NCCL_COLLNET_ENABLE=1``) usable, with chain and AllGather /
        ReduceScatter support.
    collnet_heads : int
        CollNet heads per node; NVLS and CollNetDirect AllGather/ReduceScatter across nodes need one per
        local rank.
    nvswitch : bool
        The node has an NVSwitch (CollNetDirect requires one).
    ll128_enabled : bool
        Whether NCCL enables LL128 by default here: NVLink (or NVB) inside the node, NIC at PXB or closer
        (PXN on SM90+), one GPU architecture. An explicit ``NCCL_PROTO`` overrides it, as in NCCL.
    tree_pattern : {"balanced_tree", "split_tree", "tree"}
        ``comm->maxTreePattern``; a plain ``"tree"`` costs Tree 15% of its bandwidth.
    pat_enabled : bool
        ``NCCL_PAT_ENABLE`` not 0 and a host-driven network (PAT is still limited to 1 GPU per node).
    release : NcclRelease
        Whose tables and formulas to use (:func:`gpuwait.collectives.nccl_versions.nccl_release`);
        default NCCL 2.30.7.

    Examples
    --------
    >>> x = TuningInputs("all_reduce", n_ranks=16, n_nodes=2, sm=80, ring=Graph(16, 12.0, 12.0))
    >>> x.ppn, x.graph("tree").n_channels
    (8, 16)
    """

    collective: str
    n_ranks: int
    n_nodes: int
    sm: int
    ring: Graph
    graphs: Mapping[str, Graph] = field(default_factory=dict)
    net_overhead_us: float | None = None
    cpu_arch: str = "x86"
    cpu_vendor: str = "intel"
    nvls_available: bool = False
    collnet_available: bool = False
    collnet_heads: int = 0
    nvswitch: bool = False
    ll128_enabled: bool = True
    tree_pattern: str = "balanced_tree"
    pat_enabled: bool = True
    release: NcclRelease = DEFAULT_RELEASE

    def __post_init__(self) -> None:
        if not isinstance(self.release, NcclRelease):
            raise SpecError(f"release: got {type(self.release).__name__}; expected an NcclRelease "
                            "(gpuwait.collectives.nccl_versions.nccl_release('2.21.5'))")
        if self.collective not in TUNED_COLLECTIVES:
            raise SpecError(f"collective: got {self.collective!r}; expected one of {', '.join(TUNED_COLLECTIVES)}")
        for name in ("n_ranks", "n_nodes"):
            value = getattr(self, name)
            if int(value) != value or value < 1:
                raise SpecError(f"{name}: got {value!r}; expected an integer >= 1")
        if self.n_ranks % self.n_nodes:
            raise SpecError(f"n_ranks: got {self.n_ranks} over {self.n_nodes} nodes; expected the same number of "
                            "ranks on every node, as NCCL's model assumes")
        if int(self.sm) != self.sm or self.sm < 30:
            raise SpecError(f"sm: got {self.sm!r}; expected a compute capability x10 such as 80, 90 or 100")
        if self.cpu_arch not in ("x86", "power", "arm"):
            raise SpecError(f"cpu_arch: got {self.cpu_arch!r}; expected 'x86', 'power' or 'arm'")
        if self.cpu_vendor not in ("intel", "amd", "mixed", "other"):
            raise SpecError(f"cpu_vendor: got {self.cpu_vendor!r}; expected 'intel', 'amd', 'mixed' or 'other'")
        if self.tree_pattern not in ("balanced_tree", "split_tree", "tree"):
            raise SpecError(f"tree_pattern: got {self.tree_pattern!r}; expected 'balanced_tree', 'split_tree' "
                            "or 'tree'")
        if self.net_overhead_us is not None and not self.net_overhead_us >= 0:
            raise SpecError(f"net_overhead_us: got {self.net_overhead_us!r}; expected >= 0 us or None")
        if self.collnet_heads < 0:
            raise SpecError(f"collnet_heads: got {self.collnet_heads}; expected >= 0")
        object.__setattr__(self, "graphs", _checked_graphs(self.ring, self.graphs))

    @property
    def ppn(self) -> int:
        """Ranks per node."""
        return self.n_ranks // self.n_nodes

    @property
    def n_channels(self) -> int:
        """The communicator's channel count: the ring graph's."""
        return self.ring.n_channels

    def graph(self, algorithm: str) -> Graph:
        """The graph NCCL's model reads for ``algorithm``: its own if given, else the ring graph."""
        return self.graphs.get(algorithm, self.ring)

    def with_collective(self, collective: str) -> TuningInputs:
        """The same communicator, another collective."""
        return replace(self, collective=collective)

    @property
    def effective_net_overhead_us(self) -> float:
        """``NCCL_NET_OVERHEAD`` if set, else NCCL's per-CPU default (getNetOverhead)."""
        if self.net_overhead_us is not None:
            return self.net_overhead_us
        return NET_OVERHEAD_US.get((self.cpu_arch, self.cpu_vendor), NET_OVERHEAD_DEFAULT_US)


def _checked_graphs(ring: object, graphs: Mapping[str, Graph]) -> Mapping[str, Graph]:
    """``graphs`` as a read-only mapping, once the ring and every graph are Graphs of known algorithms."""
    if not isinstance(ring, Graph):
        raise SpecError(f"ring: got {type(ring).__name__}; expected a Graph")
    graphs = dict(graphs)
    for algo, graph in graphs.items():
        if algo not in ALGORITHMS:
            raise SpecError(f"graphs: unknown algorithm {algo!r}; expected one of {', '.join(ALGORITHMS)}")
        if not isinstance(graph, Graph):
            raise SpecError(f"graphs[{algo!r}]: got {type(graph).__name__}; expected a Graph")
    return MappingProxyType(graphs)


# --------------------------------------------------------------------------------------------------
# NCCL_ALGO / NCCL_PROTO


def _parse_nccl_list(text: str, variable: str, elements: Mapping[str, str]) -> dict[str, frozenset[str] | None]:
    """parseList (tuning.cc, NCCL >= 2.24): ``list[;func:list]...``, ``^`` negates, case-insensitive.

    Returns, per collective, the enabled elements, or None where the text leaves NCCL's default.
    """
    lookup = {nccl.lower(): ours for ours, nccl in elements.items()}
    funcs = {nccl.lower(): ours for ours, nccl in NCCL_COLLECTIVE_NAMES.items()}
    allowed = ", ".join(elements.values())
    result: dict[str, frozenset[str] | None] = {c: None for c in TUNED_COLLECTIVES}
    if not isinstance(text, str) or not text.strip():
        raise SpecError(f"{variable}: got {text!r}; expected a comma list of {allowed}")
    entries = [e for e in text.split(";") if e != ""]
    if not entries:
        raise SpecError(f"{variable}: got {text!r}; expected a comma list of {allowed}")
    for i, entry in enumerate(entries):
        if ":" in entry:
            prefix, _, element_list = entry.partition(":")
            prefix = prefix.strip()
            if prefix.lower() not in funcs:
                raise SpecError(f"{variable}: got {text!r}; unknown collective {prefix!r} before ':'; expected one "
                                f"of {', '.join(NCCL_COLLECTIVE_NAMES.values())}")
            targets = [funcs[prefix.lower()]]
        else:
            if i > 0:
                raise SpecError(f"{variable}: got {text!r}; every entry after the first needs a "
                                "'collective:' prefix, e.g. 'allreduce:^tree'")
            element_list, targets = entry, list(TUNED_COLLECTIVES)
        negate = element_list.startswith("^")
        tokens = [t.strip() for t in element_list[1:].split(",") if t.strip()] if negate else \
            [t.strip() for t in element_list.split(",") if t.strip()]
        if not tokens:
            raise SpecError(f"{variable}: got {text!r}; an empty list; expected names among {allowed}")
        chosen = set(elements) if negate else set()
        for token in tokens:
            if token.lower() not in lookup:
                raise SpecError(f"{variable}: got {text!r}; unknown name {token!r}; expected {allowed} "
                                "(comma-separated, '^' to exclude)",
                                hint=f"leave {variable} unset to let NCCL choose among all")
            (chosen.discard if negate else chosen.add)(lookup[token.lower()])
        for collective in targets:
            result[collective] = frozenset(chosen)
    return result


def parse_algorithm_list(text: str) -> dict[str, frozenset[str] | None]:
    """Parse ``NCCL_ALGO``: per collective, the algorithms it enables (None: NCCL's default, all).

    Examples
    --------
    >>> sorted(parse_algorithm_list("^NVLS,tree")["all_reduce"])
    ['collnet_chain', 'collnet_direct', 'nvls_tree', 'pat', 'ring']
    >>> spec = parse_algorithm_list("ring;allreduce:tree,ring")
    >>> sorted(spec["all_reduce"]), sorted(spec["all_gather"])
    (['ring', 'tree'], ['ring'])
    """
    return _parse_nccl_list(text, "NCCL_ALGO", NCCL_ALGORITHM_NAMES)


def parse_protocol_list(text: str) -> dict[str, frozenset[str] | None]:
    """Parse ``NCCL_PROTO``: per collective, the protocols it enables (None: NCCL's default).

    Examples
    --------
    >>> sorted(parse_protocol_list("^LL")["all_reduce"])
    ['LL128', 'Simple']
    """
    return _parse_nccl_list(text, "NCCL_PROTO", NCCL_PROTOCOL_NAMES)


def _name(value: str, names: Iterable[str], nccl: Mapping[str, str], what: str) -> str:
    lookup = {n.lower(): n for n in names}
    lookup.update({spelled.lower(): ours for ours, spelled in nccl.items()})
    key = str(value).lower()
    if key not in lookup:
        raise SpecError(f"{what}: got {value!r}; expected one of {', '.join(names)}")
    return lookup[key]


def _restriction(allowed: str | Iterable[str] | None, collective: str, *, parse, names, nccl,
                 what: str) -> frozenset[str] | None:
    if allowed is None:
        return None
    if isinstance(allowed, str):
        return parse(allowed)[collective]
    return frozenset(_name(a, names, nccl, what) for a in allowed)


# --------------------------------------------------------------------------------------------------
# The model


@dataclass(frozen=True)
class Prediction:
    """NCCL's predicted cost of one collective with one (algorithm, protocol).

    ``time_us = latency_us + n_bytes / (1000 * alg_bw_GBps)``. ``alg_bw_GBps`` is NCCL's
    ``bandwidths[coll][algo][proto]`` after the per-size tree correction; ``bus_bw_GBps`` the bus bandwidth
    it was converted from (same value where NCCL applies no bus-to-algorithm ratio). The ``test_*``
    properties are what nccl-tests would print for that time. Unsupported combinations carry
    ``supported=False``, a one-line ``reason`` and an infinite time.

    Examples
    --------
    >>> p = predict(dgx_h100(), "ring", "Simple", 2**30)
    >>> round(p.bus_bw_GBps), round(p.alg_bw_GBps, 1), round(p.test_busbw_GBps, 1)
    (360, 205.7, 356.2)
    """

    collective: str
    algorithm: str
    protocol: str
    n_ranks: int
    n_bytes: int
    time_us: float
    latency_us: float
    bus_bw_GBps: float
    alg_bw_GBps: float
    supported: bool
    reason: str = ""
    #: ``alg_bw_GBps`` before NCCL's per-size tree correction: the plateau NCCL assumes
    plateau_alg_bw_GBps: float = 0.0
    #: ``latency_us`` with every network step at the algorithm's own ``hwLat[NCCL_HW_NET]`` figure; they differ
    #: only under NCCL's one-rank-per-node rule (:attr:`NcclRelease.one_ppn_tree_net_latency`), which prices
    #: the steps at Tree's for its choice
    own_net_latency_us: float = 0.0

    @property
    def test_algbw_GBps(self) -> float:
        """nccl-tests ``algbw``: bytes / time."""
        if not self.supported:
            return 0.0
        return math.inf if self.time_us == 0 else self.n_bytes / (self.time_us * 1e3)

    @property
    def test_busbw_GBps(self) -> float:
        """nccl-tests ``busbw``: algbw times the collective's bus factor (README-busbw.md)."""
        return self.test_algbw_GBps * busbw_factor(self.collective, self.n_ranks)


def _log2i(n: int) -> int:
    """NCCL's log2i: floor(log2(n)), and -1 for 0."""
    return int(n).bit_length() - 1


def _nodes_index(n_nodes: int) -> int:
    return n_nodes - 1 if n_nodes <= 2 else 2


def _n_steps(collective: str, n_ranks: int) -> int:
    if collective == "all_reduce":
        return 2 * (n_ranks - 1)
    if collective in ("all_gather", "reduce_scatter"):
        return n_ranks - 1
    return n_ranks


_GATHERS = ("all_gather", "reduce_scatter")
_NVLS = ("nvls", "nvls_tree")


def _hw_latency_us(inputs: TuningInputs, hw: str, algorithm: str, protocol: str) -> float:
    table = inputs.release.hw_latency_us
    if (inputs.cpu_arch == "power" and hw == "pci" and algorithm == "tree" and protocol == "Simple"):
        # "De-penalize Tree/Simple latency on Power systems to favor Tree than Ring"
        return table["pci"]["ring"][2]
    return table[hw][algorithm][PROTOCOLS.index(protocol)]


def unsupported_reason(inputs: TuningInputs, algorithm: str, protocol: str) -> str:
    """Why NCCL would not consider (``algorithm``, ``protocol``) here; ``""`` if it would.

    Examples
    --------
    >>> unsupported_reason(dgx_h100("all_gather"), "tree", "Simple")
    'tree does not implement all_gather in NCCL (all_gather: ring, collnet_direct, nvls, pat)'
    >>> unsupported_reason(dgx_h100(), "ring", "LL")
    ''
    """
    coll, ppn = inputs.collective, inputs.ppn
    supported = inputs.release.supported_algorithms[coll]
    if algorithm not in supported:
        return (f"{algorithm} does not implement {coll} in NCCL"
                f"{'' if inputs.release is DEFAULT_RELEASE else ' ' + inputs.release.version} "
                f"({coll}: {', '.join(supported)})")
    if protocol not in ALGORITHM_PROTOCOLS[algorithm]:
        return f"{algorithm} runs only the {'/'.join(ALGORITHM_PROTOCOLS[algorithm])} protocol in NCCL"
    reason = ""
    if algorithm in _NVLS:
        reason = _nvls_reason(inputs, algorithm)
    elif algorithm in ("collnet_direct", "collnet_chain"):
        reason = _collnet_reason(inputs, algorithm)
    elif algorithm == "pat":
        reason = _pat_reason(inputs)
    if reason:
        return reason
    multi_node_gather = inputs.n_nodes > 1 and coll in _GATHERS
    if algorithm in inputs.release.gather_heads_algorithms and multi_node_gather and inputs.collnet_heads < ppn:
        return (f"{algorithm} {coll} across nodes needs CollNet with one head per local rank "
                f"({inputs.collnet_heads} heads for {ppn} ranks)")
    return ""


def _nvls_reason(inputs: TuningInputs, algorithm: str) -> str:
    """Why NCCL would not run NVLS or NVLSTree here; ``""`` if it would."""
    if inputs.sm < 90:
        return f"NVLS needs SM90+ GPUs on an NVLink4+ NVSwitch (NVLink SHARP); got SM{inputs.sm}"
    if not inputs.nvls_available:
        return "NVLS unavailable (no NVLink SHARP NVSwitch, or NCCL_NVLS_ENABLE=0)"
    if inputs.graph(algorithm).n_channels < inputs.release.nvls_min_channels:
        return f"{algorithm} needs at least {inputs.release.nvls_min_channels} channels in its graph"
    if algorithm == "nvls_tree" and inputs.n_nodes == 1:
        return "NVLSTree is disabled on a single node (NVLS covers it)"
    if algorithm == "nvls" and inputs.n_nodes > 1 and not inputs.collnet_available:
        return "NVLS across nodes needs CollNet (IB SHARP, NCCL_COLLNET_ENABLE=1)"
    return ""


def _collnet_reason(inputs: TuningInputs, algorithm: str) -> str:
    """Why NCCL would not run CollNetDirect or CollNetChain here; ``""`` if it would."""
    if not inputs.collnet_available:
        return ("CollNet unavailable: it needs SHARP switches that reduce in the network, which gpuwait does "
                "not model (modelled: Ring, Tree, NVLS, NVLSTree, PAT)")
    if inputs.n_nodes < COLLNET_NODE_THRESHOLD:
        return f"CollNet needs at least {COLLNET_NODE_THRESHOLD} nodes (NCCL_COLLNET_NODE_THRESHOLD)"
    if algorithm == "collnet_direct" and not inputs.nvswitch:
        return "CollNetDirect needs an NVSwitch system"
    if algorithm == "collnet_direct" and inputs.ppn > COLLNET_DIRECT_MAX_LOCAL_RANKS:
        return f"CollNetDirect supports up to {COLLNET_DIRECT_MAX_LOCAL_RANKS} local GPUs; got {inputs.ppn}"
    return ""


def _pat_reason(inputs: TuningInputs) -> str:
    """Why NCCL would not run PAT here; ``""`` if it would."""
    if inputs.sm < inputs.release.pat_min_sm:
        return f"PAT needs SM{inputs.release.pat_min_sm}+ (CUDA atomics)"
    if not inputs.pat_enabled:
        return "PAT disabled (NCCL_PAT_ENABLE=0 or network device offload)"
    if inputs.ppn != 1:
        return f"PAT only supports 1 GPU per node; got {inputs.ppn}"
    return ""


def _nvls_bw_GBps(inputs: TuningInputs, algorithm: str, g: Graph, cc: int, nodes: int) -> float:
    """NVLS / NVLSTree bandwidth per channel, by the release's formula (``NcclRelease.nvls_model``)."""
    rel, coll, n_nodes, ppn = inputs.release, inputs.collective, inputs.n_nodes, float(inputs.ppn)
    if rel.nvls_model == "2.28":
        inter = g.bw_inter_GBps * (2.0 if (n_nodes <= 2 and algorithm == "nvls_tree") else 1.0)
        return min(_nvls_kernel_bw_GBps(inputs, algorithm, g, cc, nodes), inter)
    if rel.nvls_model == "2.18":
        return g.bw_intra_GBps if n_nodes <= 2 else g.bw_inter_GBps  # the generic graph bandwidth
    if algorithm == "nvls_tree":
        return min(g.bw_intra_GBps, g.bw_inter_GBps if n_nodes <= 2 else g.bw_inter_GBps / 2)
    if rel.nvls_model == "2.27" and coll != "all_reduce":
        return min(g.bw_intra_GBps * (ppn - 1.0) / ppn, g.bw_inter_GBps * 0.9)
    return min(g.bw_intra_GBps, g.bw_inter_GBps)


def _nvls_kernel_bw_GBps(inputs: TuningInputs, algorithm: str, g: Graph, cc: int, nodes: int) -> float:
    """NVLS / NVLSTree busBw per channel inside the node, by the 2.28+ formula (tuning.cc v2.28.3-1)."""
    rel, ppn = inputs.release, float(inputs.ppn)
    # SHARP efficiency, one channel's worth lost to synchronisation; AllReduce pipelines its
    # reduce-scatter and all-gather halves, the others lose the local share.
    intra = g.bw_intra_GBps * rel.nvls_efficiency[cc] * (g.n_channels - 1) / g.n_channels
    intra *= 2.0 if inputs.collective == "all_reduce" else (ppn - 1) / ppn
    cap = rel.per_channel_max_nvls_tree_bw_GBps[cc][nodes] if algorithm == "nvls_tree" else math.inf
    return min(intra, cap)


def _collnet_direct_bus_GBps(inputs: TuningInputs, g: Graph, bus: float) -> float:
    """CollNetDirect busBw: one head per GPU for AllGather/ReduceScatter, the GPU/NIC ratio otherwise."""
    ppn = float(inputs.ppn)
    if inputs.collective in _GATHERS:
        if inputs.release.collnet_gather_model == "interp":
            # 2.20-2.26: "Measured corrective ratio needed at 1 ppn and 8ppn", interpolated
            w = (ppn - 1) / (8 - 1)
            return ppn * g.bw_intra_GBps * (w * 0.85 + (1 - w) * 0.95)
        return ppn * min(g.bw_intra_GBps, g.bw_inter_GBps * 0.9)
    # Full speed needs one NIC per GPU; soften the GPU/NIC ratio penalty by half.
    factor = ppn / g.n_channels
    factor -= (factor - 1) / 2
    bus /= factor
    if inputs.sm >= 90:
        bus *= 0.85
    return bus


def _bus_to_alg_ratio(inputs: TuningInputs, algorithm: str) -> float:
    """NCCL's bus-to-algorithm bandwidth ratio for ``algorithm`` in this release."""
    rel, coll, n_ranks, n_nodes = inputs.release, inputs.collective, inputs.n_ranks, inputs.n_nodes
    if coll in _GATHERS and algorithm in rel.gather_ratio_exempt:
        return 1.0  # NCCL leaves these as they are
    if algorithm == "ring" or (algorithm in _NVLS and rel.nvls_model == "2.28"):
        return n_ranks / _n_steps(coll, n_ranks)
    if algorithm == "nvls_tree" and rel.nvls_model == "2.18":
        return 0.70 * n_nodes / (2 * max(n_nodes - 1, 1))
    if algorithm in _NVLS:
        return rel.nvls_ratio
    return 0.5


def _bus_bw_and_ratio(inputs: TuningInputs, algorithm: str, protocol: str) -> tuple[float, float]:
    """busBw after the model refinements, and the bus-to-algorithm ratio (tuning.cc of ``inputs.release``)."""
    rel, coll, n_nodes, ppn = inputs.release, inputs.collective, inputs.n_nodes, float(inputs.ppn)
    g = inputs.graph(algorithm)
    cc, nodes = rel.compcap_index(inputs.sm), _nodes_index(n_nodes)
    amd_row = inputs.cpu_vendor == "amd" or (inputs.cpu_vendor == "mixed" and rel.ll_row_mixed_as_amd)
    ll_max = rel.ll_max_bw_GBps[cc if n_nodes == 1 else (1 if amd_row else 0)][nodes]

    bw = g.bw_intra_GBps if (n_nodes <= 2 or algorithm in ("collnet_direct", "collnet_chain")) else g.bw_inter_GBps
    if algorithm in _NVLS:
        bw = _nvls_bw_GBps(inputs, algorithm, g, cc, nodes)
    bus = g.n_channels * bw

    if algorithm == "ring" and protocol == "LL":
        one_node_gather = n_nodes == 1 and coll in ("broadcast", *_GATHERS)
        bus = min(ll_max, bus * (rel.ring_ll_factor_intra_gather if one_node_gather else rel.ring_ll_factor))
    if algorithm == "ring" and protocol == "LL128":
        bus = min(bus * (rel.ring_ll128_factor_one_ppn if ppn < 2 else 0.92),
                  g.n_channels * rel.per_channel_max_ring_ll128_bw_GBps[cc][nodes])
    if algorithm == "tree" and coll == "all_reduce":
        bus = min(bus * 0.92, g.n_channels * rel.per_channel_max_tree_bw_GBps[cc][nodes])
    if algorithm == "tree" and protocol == "LL":
        bus = min(bus / 3.8, ll_max)
    if algorithm == "tree" and protocol == "LL128":
        bus = min(bus * (7.0 / 9.0 if n_nodes == 1 else 120.0 / 128.0),
                  g.n_channels * rel.per_channel_max_tree_ll128_bw_GBps[cc][nodes])
    if algorithm == "tree" and inputs.tree_pattern == "tree":
        bus *= rel.tree_pattern_factor
    if algorithm == "pat":
        bus *= rel.pat_factor
    if algorithm == "collnet_direct":
        bus = _collnet_direct_bus_GBps(inputs, g, bus)
    return bus, _bus_to_alg_ratio(inputs, algorithm)


#: The release whose NVLS/NVLSTree figures describe the kernel of every release. NCCL 2.28.3-1 re-described
#: NVLS and NVLSTree ("Improved NVLS/NVLSTree tuning prediction", "Update tuning data for H100, GB200-NV72":
#: release notes 2.28.3) with ``nvlsEfficiency`` and ``perChMaxNVLSTreeBws`` (src/graph/tuning.cc v2.28.3-1,
#: unchanged for Hopper to v2.30.7-1), while the kernel it describes is the same: RunWorkColl NVLS and
#: NVLS_TREE (src/device/all_reduce.h) differ only in layout from v2.26.2-1 to v2.30.7-1, their warp split is
#: the same since v2.19.3-1, and NVLS_NCHANNELS_SM90 (16) and NCCL_NVLS_CHUNKSIZE (128 KiB) did not change
#: (src/transport/nvls.cc). The newer figures are NVIDIA's measurement of that kernel, so they bound it under
#: every release; older releases' formulas only steer their choice.
NVLS_KERNEL_RELEASE: NcclRelease = DEFAULT_RELEASE


def nvls_kernel_alg_GBps(inputs: TuningInputs, algorithm: str) -> float:
    """The algorithm bandwidth (GB/s) the NVLS or NVLSTree kernel reaches on ``inputs``' graph, whatever
    release ``inputs`` carries: NCCL's description since 2.28.3 (:data:`NVLS_KERNEL_RELEASE`) without its
    network term, which the fabric prices itself. Per graph channel: the NVLS graph's intra speed x
    ``nvlsEfficiency`` x (nCh - 1)/nCh (x 2 for AllReduce's two pipelined halves), NVLSTree at most
    ``perChMaxNVLSTreeBws`` (the kernel's measured rate on 2 and on 4+ nodes); times the channels, bus to
    algorithm bandwidth as NCCL converts it. ``inf`` where the release has no figure (pre-Hopper).

    On one node the intra term is the NVLink traffic of NVLS itself: a GPU's links carry (1 + 1/heads) of
    the buffer each way (multimem ld_reduce, then the multicast store), and x 2 x nRanks/nSteps cancels
    (nCh - 1)/nCh when every GPU is a head. Between nodes NVLSTree's per-channel cap binds (H100: 57.7 GB/s
    on 2 nodes, 45.5 on 4+).

    Examples
    --------
    >>> from gpuwait.collectives.nccl_versions import nccl_release
    >>> x = replace(dgx_h100(), n_ranks=16, n_nodes=2, release=nccl_release("2.26.2"))
    >>> x = replace(x, graphs={**x.graphs, "nvls_tree": Graph(8, 40.0, 60.0, intra_link="nvlink")})
    >>> round(nvls_kernel_alg_GBps(x, "nvls_tree") * busbw_factor("all_reduce", 16), 1)  # busbw: 8 x 57.7
    461.6
    >>> round(nvls_kernel_alg_GBps(dgx_h100(), "nvls"), 1)  # one node: 8 x 40 x 0.85
    272.0
    """
    kernel = replace(inputs, release=NVLS_KERNEL_RELEASE)
    cc = NVLS_KERNEL_RELEASE.compcap_index(inputs.sm)
    if cc >= len(NVLS_KERNEL_RELEASE.nvls_efficiency) or not NVLS_KERNEL_RELEASE.nvls_efficiency[cc]:
        return math.inf
    graph = inputs.graph(algorithm)
    bus = graph.n_channels * _nvls_kernel_bw_GBps(kernel, algorithm, graph, cc, _nodes_index(inputs.n_nodes))
    return bus * _bus_to_alg_ratio(kernel, algorithm)


def _ring_latency_us(inputs: TuningInputs, protocol: str, base: float, intra: float, inter: float) -> float:
    """Ring latency: per step, NVLink/PCI inside a node and the network between nodes."""
    coll, n_nodes, rel = inputs.collective, inputs.n_nodes, inputs.release
    g = inputs.graph("ring")
    n_steps = _n_steps(coll, inputs.n_ranks)
    if coll in ("broadcast", "reduce"):
        hw = ("nvlink" if g.intra_link == "nvlink" else "pci") if n_nodes == 1 else "net"
        step = _hw_latency_us(inputs, hw, "ring", protocol)
        if g.same_channels:
            return base + step
        if protocol == "Simple":
            step = _hw_latency_us(inputs, hw, "tree", protocol)  # chunk latency stand-in
        return base + n_steps * step
    net_overhead = 0.0
    if n_nodes > 1:
        net_overhead = inputs.effective_net_overhead_us * (3.0 if protocol == "Simple" else 1.0)
    intra = max(intra, net_overhead)
    if n_nodes == 1:
        n_inter_steps = 0
    elif coll == "all_reduce":
        n_inter_steps = 2 * n_nodes if rel.ring_inter_steps_legacy else 2 * (n_nodes - 1)
    else:
        n_inter_steps = n_nodes - 1
    return base + (n_steps - n_inter_steps) * intra + n_inter_steps * inter


def _latency_us(inputs: TuningInputs, algorithm: str, protocol: str, net_algorithm: str) -> float:
    """The size-independent latency of tuning.cc (``inputs.release``), before the ring plateau factor, with
    each network step read from ``net_algorithm``'s row of ``hwLat[NCCL_HW_NET]``."""
    rel, n_nodes, n_ranks, ppn = inputs.release, inputs.n_nodes, inputs.n_ranks, inputs.ppn
    g = inputs.graph(algorithm)
    p = PROTOCOLS.index(protocol)
    intra_hw = "nvlink" if g.intra_link == "nvlink" else "pci"
    base = rel.base_latency_us[algorithm][p]
    intra = _hw_latency_us(inputs, intra_hw, algorithm, protocol)
    inter = _hw_latency_us(inputs, "net", net_algorithm, protocol) + g.latency_inter_us
    if protocol == "Simple":
        inter += g.latency_inter_us  # the flush costs another network latency
    log_nodes = _log2i(n_nodes)

    if algorithm == "ring":
        return _ring_latency_us(inputs, protocol, base, intra, inter)
    if algorithm == "tree":
        return base + 2 * ((ppn - 1) * intra + log_nodes * inter)
    if algorithm == "collnet_direct":
        return base + 2 * (min(1, ppn - 1) * intra + (ppn - 1) * rel.collnet_arity_latency_us) + inter
    if algorithm == "collnet_chain":
        return base + 2 * (ppn - 1) * intra + inter
    if algorithm in _NVLS and rel.nvls_model == "2.18":
        # 2.18: base latency plus the network's NVLS latency, once (NVLS) or per node hop (NVLSTree)
        net = _hw_latency_us(inputs, "net", algorithm, protocol)
        return base + (net if algorithm == "nvls" and n_nodes > 1 else 0.0) + \
            (2 * (n_nodes - 1) * net if algorithm == "nvls_tree" else 0.0)
    if algorithm == "nvls":
        return intra + (inter if n_nodes > 1 else 0.0)
    if algorithm == "nvls_tree":
        return base + intra + 2 * log_nodes * inter
    if algorithm == "pat":
        return base + log_nodes * (inter / 3.5) + n_ranks * 2.8
    raise AssertionError(algorithm)


def predict(inputs: TuningInputs, algorithm: str, protocol: str, n_bytes: int) -> Prediction:
    """NCCL's predicted time of ``inputs.collective`` on ``n_bytes`` with one (algorithm, protocol).

    ``n_bytes`` is the nccl-tests ``size``: the whole buffer (for AllGather / ReduceScatter, all ranks'
    parts, which is how NCCL sizes them for tuning). One operation, no aggregation (``latCount = 1``).

    Examples
    --------
    >>> p = predict(dgx_h100(), "ring", "LL", 8)
    >>> p.latency_us  # 6.6 base + 14 steps x 0.6 us NVLink
    15.0
    >>> predict(dgx_h100(), "tree", "LL", 8).supported
    True
    >>> predict(dgx_h100("all_gather"), "tree", "LL", 8).supported
    False

    With one rank per node (2 DGX H100 with one GPU each, NCCL 2.23.4+) NCCL prices both network steps at Tree's
    5.0 us, where ring's own figure is 2.7 us:

    >>> one_per_node = replace(dgx_h100(), n_ranks=2, n_nodes=2)
    >>> p = predict(one_per_node, "ring", "LL", 8)
    >>> round(p.latency_us, 6), round(p.own_net_latency_us, 6)  # 6.6 base + 2 x 5.0, 6.6 + 2 x 2.7
    (16.6, 12.0)
    """
    algorithm = _name(algorithm, ALGORITHMS, NCCL_ALGORITHM_NAMES, "algorithm")
    protocol = _name(protocol, PROTOCOLS, NCCL_PROTOCOL_NAMES, "protocol")
    if int(n_bytes) != n_bytes or n_bytes < 0:
        raise SpecError(f"n_bytes: got {n_bytes!r}; expected a whole number of bytes >= 0")
    n_bytes = int(n_bytes)
    coll = inputs.collective

    def unsupported(reason: str) -> Prediction:
        return Prediction(coll, algorithm, protocol, inputs.n_ranks, n_bytes, math.inf, math.inf, 0.0, 0.0,
                          False, reason, own_net_latency_us=math.inf)

    if inputs.n_ranks == 1:
        # NCCL skips the model and runs a local copy, costed 0, as Ring/Simple.
        if (algorithm, protocol) == ("ring", "Simple"):
            return Prediction(coll, algorithm, protocol, 1, n_bytes, 0.0, 0.0, math.inf, math.inf, True)
        return unsupported("a single rank runs a local copy (Ring/Simple, cost 0)")
    reason = unsupported_reason(inputs, algorithm, protocol)
    if reason:
        return unsupported(reason)
    bus, ratio = _bus_bw_and_ratio(inputs, algorithm, protocol)
    if not bus > 0:
        return unsupported(f"NCCL's model gives {algorithm}/{protocol} no bandwidth on SM{inputs.sm}")
    alg = bus * ratio
    own_latency = latency = _latency_us(inputs, algorithm, protocol, algorithm)
    if inputs.ppn == 1 and inputs.release.one_ppn_tree_net_latency and algorithm != "tree":
        # With one rank per node nothing hides the network latency: use Tree's (2.23+).
        latency = _latency_us(inputs, algorithm, protocol, "tree")
        if algorithm == "pat" and not any(inputs.release.hw_latency_us["net"]["pat"]):
            # hwLat has no PAT row before 2.28.3 (zeros): PAT runs only at one rank per node, where NCCL
            # always prices its network steps at Tree's figure, so that is the only figure PAT has
            own_latency = latency

    log_size = _log2i(n_bytes >> 6)
    if algorithm == "tree" and coll == "all_reduce" and 0 <= log_size < TREE_CORRECTION_ENTRIES_TREE:
        alg *= TREE_CORRECTION_FACTOR[protocol][log_size]
    if (algorithm == "nvls_tree" and coll == "all_reduce" and 0 <= log_size < TREE_CORRECTION_ENTRIES_NVLS_TREE
            and inputs.release.nvls_tree_correction and inputs.sm >= 100 and inputs.cpu_arch == "x86"):
        alg *= TREE_CORRECTION_FACTOR[protocol][log_size]
    if (algorithm == "ring" and protocol == "Simple" and inputs.n_nodes > 1 and coll == "all_reduce"
            and n_bytes // (inputs.n_channels * inputs.n_ranks) >= 64):
        plateau_factor = RING_PLATEAU_FACTOR["pre_sm80" if inputs.sm < 80 else "sm80_plus"]
        latency *= plateau_factor
        own_latency *= plateau_factor
    time = latency + n_bytes / (1000.0 * alg)
    return Prediction(coll, algorithm, protocol, inputs.n_ranks, n_bytes, time, latency, bus, alg, True,
                      plateau_alg_bw_GBps=bus * ratio, own_net_latency_us=own_latency)


def cost_table(inputs: TuningInputs, n_bytes: int) -> dict[tuple[str, str], Prediction]:
    """Every (algorithm, protocol) prediction, supported or not, in NCCL's iteration order.

    Examples
    --------
    >>> table = cost_table(dgx_h100(), 2**20)
    >>> len(table), table["nvls", "LL"].supported
    (21, False)
    """
    return {(a, p): predict(inputs, a, p, n_bytes) for a in ALGORITHMS for p in PROTOCOLS}


def candidates(inputs: TuningInputs, n_bytes: int, allowed_algos: str | Iterable[str] | None = None,
               allowed_protos: str | Iterable[str] | None = None) -> dict[tuple[str, str], Prediction]:
    """Every (algorithm, protocol) NCCL's choice weighs for ``n_bytes`` under the restrictions (as
    :func:`choose` reads them), supported or not, in NCCL's order: :func:`choose` runs the cheapest supported.

    Examples
    --------
    >>> table = candidates(dgx_h100(), 8, allowed_algos="Ring,Tree", allowed_protos="LL")
    >>> list(table), min(table.values(), key=lambda p: p.time_us).algorithm
    ([('tree', 'LL'), ('ring', 'LL')], 'ring')
    """
    algos, protos = _restrictions(inputs, allowed_algos, allowed_protos)
    if inputs.n_ranks == 1:
        return {("ring", "Simple"): predict(inputs, "ring", "Simple", n_bytes)}
    return _weighed(inputs, n_bytes, algos, protos)


def _restrictions(inputs: TuningInputs, allowed_algos: str | Iterable[str] | None,
                  allowed_protos: str | Iterable[str] | None) -> tuple[frozenset[str] | None, frozenset[str] | None]:
    """``NCCL_ALGO`` / ``NCCL_PROTO`` restrictions for ``inputs``' collective (None: NCCL's default)."""
    coll = inputs.collective
    return (_restriction(allowed_algos, coll, parse=parse_algorithm_list, names=ALGORITHMS,
                         nccl=NCCL_ALGORITHM_NAMES, what="NCCL_ALGO"),
            _restriction(allowed_protos, coll, parse=parse_protocol_list, names=PROTOCOLS,
                         nccl=NCCL_PROTOCOL_NAMES, what="NCCL_PROTO"))


def _weighed(inputs: TuningInputs, n_bytes: int, algos: frozenset[str] | None,
             protos: frozenset[str] | None) -> dict[tuple[str, str], Prediction]:
    """The predictions of the pairs the restrictions leave, in NCCL's order (the order breaks ties)."""
    # NCCL 2.18 never lets NCCL_ALGO disable Ring for collectives other than AllReduce.
    keep_ring = inputs.release.ring_kept_for_non_all_reduce and inputs.collective != "all_reduce"
    ll128_default = inputs.ll128_enabled and inputs.release.ll128_default(inputs.sm)
    table = {}
    for algorithm in ALGORITHMS:
        if algos is not None and algorithm not in algos and not (keep_ring and algorithm == "ring"):
            continue
        for protocol in PROTOCOLS:
            if protos is None:
                if protocol == "LL128" and not ll128_default:
                    continue
            elif protocol not in protos:
                continue
            table[algorithm, protocol] = predict(inputs, algorithm, protocol, n_bytes)
    return table


def choose(inputs: TuningInputs, n_bytes: int, allowed_algos: str | Iterable[str] | None = None,
           allowed_protos: str | Iterable[str] | None = None) -> tuple[str, str, Prediction]:
    """The (algorithm, protocol) NCCL's model picks: the cheapest supported, first one on ties.

    ``allowed_algos`` / ``allowed_protos`` restrict the choice like ``NCCL_ALGO`` / ``NCCL_PROTO``: either
    a string in NCCL's syntax (``"Ring"``, ``"^NVLS,Tree"``, ``"ring;allreduce:tree"``, case-insensitive),
    or an iterable of names. Without ``allowed_protos`` LL128 follows ``inputs.ll128_enabled``; an
    explicit protocol list enables LL128 whenever it names it (or excludes others with ``^``), as NCCL does.
    The pairs weighed: :func:`candidates`.

    Raises
    ------
    SpecError
        A malformed restriction, or no supported (algorithm, protocol) left.

    Examples
    --------
    >>> choose(dgx_h100(), 8)[:2]
    ('ring', 'LL')
    >>> choose(dgx_h100(), 64 * 2**20, allowed_algos="^NVLS", allowed_protos="Simple")[:2]
    ('ring', 'Simple')
    """
    algos, protos = _restrictions(inputs, allowed_algos, allowed_protos)
    if inputs.n_ranks == 1:
        pred = predict(inputs, "ring", "Simple", n_bytes)
        return pred.algorithm, pred.protocol, pred
    best: Prediction | None = None
    reasons: list[str] = []
    for pred in _weighed(inputs, n_bytes, algos, protos).values():
        if pred.supported and (best is None or pred.time_us < best.time_us):
            best = pred
        elif not pred.supported and pred.reason and pred.reason not in reasons:
            reasons.append(pred.reason)
    if best is None:
        # say why each allowed pair was out (NCCL_ALGO=CollNetChain: no SHARP), not only that none was left
        why = f": {'; '.join(reasons)}" if reasons else ""
        raise SpecError(f"{inputs.collective}: no algorithm/protocol left (algorithms {_shown(algos)}, protocols "
                        f"{_shown(protos)}){why}; expected at least one supported pair",
                        hint="check NCCL_ALGO / NCCL_PROTO against the collective and the hardware")
    return best.algorithm, best.protocol, best


def _shown(names: frozenset[str] | None) -> str:
    return "all" if names is None else ",".join(sorted(names)) or "none"


# --------------------------------------------------------------------------------------------------
# Graphs of an NVSwitch node, the way NCCL's search finds them


def _speeds(sm: int, release: NcclRelease = DEFAULT_RELEASE) -> tuple[float, ...]:
    return release.search_speeds(sm)


def nvswitch_ring_graph(gpu_nvlink_GBps: float, sm: int, release: NcclRelease = DEFAULT_RELEASE) -> Graph:
    """The ring graph NCCL's search finds inside one NVSwitch node (no NICs), derived from search.cc.

    Every ring channel takes its bandwidth once out of and once into each GPU's NVLink, so ``n`` channels at
    ``s`` GB/s fit while ``n * s <= gpu_nvlink_GBps``. The search starts at the fastest speed, keeps the
    first best total, lowers the speed while the next speed is above 0.49 of the one found, then
    duplicates channels (halving their bandwidth) when ``s >= 25`` unless SM > 80 with ``s < 50`` and more
    than 4 channels (``ncclTopoDupChannels``), and finally tries faster speeds at that channel count.
    This is a derivation of the search's rules, not a measured graph.

    Examples
    --------
    >>> g = nvswitch_ring_graph(nvlink_bw_GBps(90, 18), 90)  # DGX H100
    >>> g.n_channels, g.bw_intra_GBps
    (12, 30.0)
    >>> g = nvswitch_ring_graph(nvlink_bw_GBps(80, 12), 80)  # DGX A100
    >>> g.n_channels, g.bw_intra_GBps
    (12, 20.0)
    """
    speeds = _speeds(sm, release)
    if not [s for s in speeds if s <= gpu_nvlink_GBps]:
        raise SpecError(f"gpu_nvlink_GBps: got {gpu_nvlink_GBps}; below NCCL's slowest search speed {speeds[-1]}")
    n_channels, speed = _ring_search(gpu_nvlink_GBps, sm, release)
    return Graph(n_channels, speed, speed, intra_link="nvlink")


def _ring_search(budget_GBps: float, sm: int, release: NcclRelease = DEFAULT_RELEASE) -> tuple[int, float]:
    """(channels, GB/s per channel) of NCCL's ring search when ``n`` channels at ``s`` GB/s fit while
    ``n * s <= budget_GBps`` (the rules are :func:`nvswitch_ring_graph`'s)."""
    speeds = _speeds(sm, release)
    fitting = [s for s in speeds if s <= budget_GBps]
    first = fitting[0]
    best_n, best_s = min(int(budget_GBps // first), SEARCH_MAX_RING_CHANNELS), first
    if best_n * best_s < budget_GBps:
        for s in fitting[1:]:
            if s / best_s <= 0.49:
                break
            n = min(int(budget_GBps // s), SEARCH_MAX_RING_CHANNELS)
            if n * s > best_n * best_s:
                best_n, best_s = n, s
    if best_s >= 25.0 and not (sm > 80 and best_s < 50.0 and best_n > 4):
        dup = min(best_n * 2, SEARCH_MAX_RING_CHANNELS)
        best_s /= math.ceil(dup / best_n)
        best_n = dup
    for s in sorted(x for x in speeds if x > best_s):
        if best_n * s <= budget_GBps:
            best_s = s
    return best_n, best_s


def inter_cpu_bw_GBps(cpu_vendor: str, cpu_generation: str | None,
                      release: NcclRelease = DEFAULT_RELEASE) -> float | None:
    """NCCL's bandwidth of the link between two CPU sockets (``ncclTopoGetInterCpuBw``,
    :data:`INTER_CPU_BW_GBps`) for a CPU vendor and, on Intel, its generation; None when NCCL's figure is
    not known (an Intel CPU of unstated generation, an unknown vendor: the link is then not charged).
    Releases before 2.26 have no Sapphire or Emerald Rapids entry and read both as Skylake.

    Examples
    --------
    >>> from gpuwait.collectives.nccl_versions import nccl_release
    >>> inter_cpu_bw_GBps("intel", "sapphire-rapids"), inter_cpu_bw_GBps("amd", None)
    (22.0, 16.0)
    >>> inter_cpu_bw_GBps("intel", "sapphire-rapids", nccl_release("2.25.1")), inter_cpu_bw_GBps("intel", None)
    (10.0, None)
    """
    if cpu_vendor in ("amd", "arm"):
        return INTER_CPU_BW_GBps[cpu_vendor]
    if cpu_vendor != "intel" or cpu_generation is None:
        return None
    if cpu_generation not in INTEL_GENERATIONS:
        raise SpecError(f"cpu_generation: got {cpu_generation!r}; expected one of {', '.join(INTEL_GENERATIONS)}")
    version = release.version_key
    if version < (2, 26) and cpu_generation in ("sapphire-rapids", "emerald-rapids"):
        cpu_generation = "skylake"
    return INTER_CPU_BW_GBps[cpu_generation]


def host_staged_net_ring_graph(pci_GBps: float, n_switches: int, sm: int, intel_cpu: bool,
                               release: NcclRelease = DEFAULT_RELEASE, nic_beside_gpu: bool = True) -> Graph:
    """The inter-node ring graph NCCL's search finds when the node's GPUs use P2P (NVLink) among themselves
    but reach their NICs without GPUDirect RDMA (``NCCL_NET_GDR_LEVEL`` below the GPU-NIC path, or no
    peer-memory support).

    paths.cc (v2.30.7, ``ncclTopoComputePaths``) then routes GPU<->NIC through the CPU (``addInterStep``:
    PATH_PHB), so each channel's path from the network into its first GPU and from its last GPU out to the
    network both cross a PCIe switch's uplink to the CPU, each way. search.cc ``followPath`` charges a path
    starting at a GPU ``INTEL_P2P_OVERHEAD`` (6/5) on its PCI links on an Intel x86 CPU, a path starting at
    the NIC its speed ``s``: an uplink carries ``(1 + overhead) x s`` per channel each way. The channels
    spread over the NICs, so over ``n_switches`` switches holding the node's NICs and GPUs: per switch,
    ``n`` channels at ``s`` fit while ``n * s * (1 + overhead) <= pci_GBps`` (the search's rules,
    :func:`nvswitch_ring_graph`), and the node runs ``n_switches`` times that many. A modelling
    simplification: every channel's NIC and GPUs share a switch (DGX-style GPU+NIC pairs).

    ``nic_beside_gpu=False``: the GPUs and NICs hang from different root ports or switches (nvidia-smi's
    NODE or SYS, NCCL's PHB or SYS: the path already runs through the CPU and paths.cc keeps it). Then no
    link carries both of a channel's paths in the same direction: the GPU's own link carries the path out
    at ``overhead x s`` up and the path in at ``s`` down, so ``n`` channels fit while
    ``n * s * overhead <= pci_GBps``, and ``n_switches`` counts the NICs the channels spread over (each
    NIC's link carries its channels the same way; taken no slower than the GPU's).

    Examples
    --------
    >>> g = host_staged_net_ring_graph(pci_bw_GBps(5), 4, 90, intel_cpu=True)  # DGX H100: 4 switches, Gen5
    >>> g.n_channels, g.bw_intra_GBps
    (4, 20.0)
    >>> g = host_staged_net_ring_graph(pci_bw_GBps(4), 1, 89, intel_cpu=True, nic_beside_gpu=False)  # L40S, NODE
    >>> g.n_channels, g.bw_intra_GBps
    (1, 20.0)
    """
    overhead = INTEL_P2P_OVERHEAD if intel_cpu else 1.0
    budget = pci_GBps / ((1.0 if nic_beside_gpu else 0.0) + overhead)
    if budget < _speeds(sm, release)[-1]:
        return Graph(1, 0.1, 0.1, intra_link="pci")
    n_channels, speed = _ring_search(round(budget, 3), sm, release)
    return Graph(min(n_channels * max(n_switches, 1), SEARCH_MAX_RING_CHANNELS), speed, speed, intra_link="pci")


def host_pci_path_GBps(pci_GBps: float, gpus_per_switch: int, intel_cpu: bool, same_socket_hops: bool = True) -> float:
    """NCCL's budget (GB/s, before its search rounds it down to a speed) on the PCI links of a ring's GPU
    paths through the CPU: the PCI bandwidth over the ``gpus_per_switch`` paths sharing a switch's uplink,
    with ``INTEL_P2P_OVERHEAD`` (6/5) on an Intel x86 CPU only when a GPU->GPU hop stays on one socket
    (``same_socket_hops``): search.cc ``followPath`` charges it on PATH_PHB paths starting at a GPU, not on
    a PATH_SYS path between sockets (NVIDIA/nccl v2.27.3-1).

    >>> host_pci_path_GBps(pci_bw_GBps(3), 1, True), host_pci_path_GBps(pci_bw_GBps(4), 1, True, same_socket_hops=False)
    (10.0, 24.0)
    """
    overhead = INTEL_P2P_OVERHEAD if intel_cpu and same_socket_hops else 1.0
    return pci_GBps / (max(gpus_per_switch, 1) * overhead)


def host_path_ring_graph(pci_GBps: float, gpus_per_switch: int, sm: int, intel_cpu: bool,
                         release: NcclRelease = DEFAULT_RELEASE, inter_cpu_GBps: float | None = None,
                         same_socket_hops: bool = True) -> Graph:
    """The ring graph NCCL's search finds inside a node whose GPUs cannot use P2P (``NCCL_P2P_DISABLE=1``,
    or a platform without CUDA peer access): NCCL then stages through host memory (SHM transport).

    paths.cc (v2.30.7, ``ncclTopoComputePaths``) diverts every GPU->GPU path through the CPU local to the
    receiving GPU (``addInterStep``): GPU -> PCIe switch -> CPU -> PCIe switch -> GPU, path type PATH_PHB,
    bandwidth the slowest PCI link. search.cc ``followPath`` charges such a path ``INTEL_P2P_OVERHEAD``
    (6/5, topo.h) on every PCI link when the CPU is Intel x86. A ring channel at ``s`` GB/s sends one path
    out of and one into every GPU, so a PCIe switch with ``k`` of the ring's GPUs carries ``k`` paths up
    and ``k`` down its uplink: ``n`` channels fit while ``n * s * k * overhead <= pci_GBps``. Channel count
    and speed then follow the search's rules (:func:`nvswitch_ring_graph`); when even the slowest speed
    does not fit, NCCL falls back to one channel at 0.1 GB/s ("falling back to simple order").

    ``inter_cpu_GBps`` (:func:`inter_cpu_bw_GBps`) when the ring's GPUs (and, between nodes, its NIC) sit on
    two CPU sockets: the search orders a node's GPUs socket by socket, so each channel crosses the socket
    link once each way (out to the far socket's GPUs, back to the first GPU or the NIC), and ``followPath``
    charges a path forward only -- the reverse link is charged only for paths into a GPU older than SM80
    from a NIC or CPU (``fwBw/8``) and for POWER NVLink (search.cc, v2.27.3-1) -- so ``n * s <= inter_cpu``.
    Intel's 6/5 applies only while some GPU->GPU hop stays on one socket (``same_socket_hops``): followPath
    charges it on PATH_PHB paths, not on a PATH_SYS path between sockets (:func:`host_pci_path_GBps`).

    Examples
    --------
    >>> g = host_path_ring_graph(pci_bw_GBps(3), 2, 75, intel_cpu=True)  # 2 GPUs on one Gen3 switch
    >>> g.n_channels, g.bw_intra_GBps, g.intra_link
    (1, 5.0, 'pci')
    >>> host_path_ring_graph(pci_bw_GBps(3), 2, 75, intel_cpu=False).bw_intra_GBps
    6.0
    >>> [host_path_ring_graph(pci_bw_GBps(4), 1, 89, True, inter_cpu_GBps=bw).bw_intra_GBps for bw in (6, 10, 22, 40)]
    [6.0, 10.0, 20.0, 20.0]
    >>> host_path_ring_graph(pci_bw_GBps(4), 1, 89, True, inter_cpu_GBps=22, same_socket_hops=False).bw_intra_GBps
    20.0
    """
    budget = host_pci_path_GBps(pci_GBps, gpus_per_switch, intel_cpu, same_socket_hops)
    if inter_cpu_GBps is not None:
        budget = min(budget, inter_cpu_GBps)
    if budget < _speeds(sm, release)[-1]:
        return Graph(1, 0.1, 0.1, intra_link="pci")
    n_channels, speed = _ring_search(round(budget, 3), sm, release)  # NCCL rounds link budgets to 1e-3 (SUB_ROUND)
    return Graph(n_channels, speed, speed, intra_link="pci")


#: search.cc ``speedArrayInter`` / ``sm90SpeedArrayInter`` / ``sm100SpeedArrayInter``: the speeds (GB/s per
#: channel) NCCL's search tries when the node has NICs, fastest first. The default and SM90 arrays are the
#: same from v2.19.3-1 to v2.30.7-1 (2.18 lacks SM90's 22.0); SM100 (from 2.25) is SM90's until 2.26, starts
#: at 47.9 in 2.27, then 96, 48, 45.1 (2.28.3-2.29.3), 96, 80, 48, 45.1 (2.29.7), 96, 86, 80, 48, 45.1 (2.30).
_SM90_INTER_TAIL = (42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12)
_INTER_SPEEDS_GBps: Mapping[str, tuple[float, ...]] = MappingProxyType({
    "default": (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2, 0.24,
                0.12),
    "sm90": (48.0, 45.0, *_SM90_INTER_TAIL),
    "sm100_2.27": (47.9, 45.0, *_SM90_INTER_TAIL),
    "sm100_2.28": (96.0, 48.0, 45.1, *_SM90_INTER_TAIL),
    "sm100_2.29.7": (96.0, 80.0, 48.0, 45.1, *_SM90_INTER_TAIL),
    "sm100_2.30": (96.0, 86.0, 80.0, 48.0, 45.1, *_SM90_INTER_TAIL),
})
#: the first release of each SM100 array, newest first
_SM100_INTER_FROM = (((2, 30), "sm100_2.30"), ((2, 29, 7), "sm100_2.29.7"), ((2, 28), "sm100_2.28"),
                     ((2, 27), "sm100_2.27"))


def inter_speeds(sm: int, release: NcclRelease = DEFAULT_RELEASE) -> tuple[float, ...]:
    """The speeds NCCL's search tries on a node with NICs (:data:`_INTER_SPEEDS_GBps`), fastest first.

    Examples
    --------
    >>> from gpuwait.collectives.nccl_versions import nccl_release
    >>> inter_speeds(90)[:4]
    (48.0, 45.0, 42.0, 40.0)
    >>> inter_speeds(100)[:3], inter_speeds(100, nccl_release("2.26.2"))[:2]
    ((96.0, 86.0, 80.0), (48.0, 45.0))
    """
    version = release.version_key
    if sm >= 100:
        key = next((k for first, k in _SM100_INTER_FROM if version >= first), "sm90")
        return _INTER_SPEEDS_GBps[key]
    if sm >= 90:
        speeds = _INTER_SPEEDS_GBps["sm90"]
        return tuple(s for s in speeds if s != 22.0) if version < (2, 19) else speeds
    return _INTER_SPEEDS_GBps["default"]


def search_speed_at_most(GBps: float, sm: int, release: NcclRelease = DEFAULT_RELEASE) -> float:
    """The fastest speed of :func:`inter_speeds` at most ``GBps`` (the slowest if none is): the per-channel
    bandwidth NCCL's search settles on when ``GBps`` is what a channel's path leaves.

    Examples
    --------
    >>> search_speed_at_most(50.0, 90), search_speed_at_most(25.0, 90), search_speed_at_most(0.01, 90)
    (48.0, 24.0, 0.12)
    """
    speeds = inter_speeds(sm, release)
    return next((s for s in speeds if s <= GBps), speeds[-1])


def net_tree_graph(ring_search_channels: int, nics: int, nic_GBps: float, path_GBps: float,
                   gpu_nvlink_GBps: float, sm: int, release: NcclRelease = DEFAULT_RELEASE,
                   latency_inter_us: float = 0.0, intra_link: str = "nvlink") -> Graph:
    """The tree graph NCCL's search finds on a multi-node NVLink node, derived from search.cc and init.cc.

    ``init.cc`` fixes the tree's channel count to the ring search's (``treeGraph->minChannels =
    treeGraph->maxChannels = ringGraph->nChannels``, NVIDIA/nccl v2.18.3-1 to v2.30.7-1), before
    ``ncclTopoPostset`` doubles both for the kernels (``run_channels``). The search then takes the
    fastest speed of :func:`inter_speeds` at which that many channels fit: at most ``path_GBps`` (the
    GPU-NIC path, ``system->maxBw``), each NIC carrying its share of the channels (``ceil(channels /
    nics) * s <= nic_GBps``), each channel's chain crossing every GPU's NVLink once (``channels * s <=
    gpu_nvlink_GBps``). Pass 2 raises ``bwIntra`` one speed at a time while it is below twice ``bwInter``
    and the NVLink still fits ("increase bwIntra for trees"). ``ncclTopoDupChannels`` leaves SM90
    graphs below 50 GB/s with more than 4 channels alone, so no duplication of speed here. A
    derivation of the search's rules, not a measured graph.

    Examples
    --------
    >>> g = net_tree_graph(8, 8, 50.0, 48.0, nvlink_bw_GBps(90, 18), 90)  # DGX H100, 8 x 400G
    >>> g.n_channels, g.bw_intra_GBps, g.bw_inter_GBps, g.channels_run
    (8, 45.0, 45.0, 16)
    """
    n = max(1, int(ring_search_channels))
    per_nic = math.ceil(n / max(1, nics))
    speeds = inter_speeds(sm, release)
    fits = [s for s in speeds if s <= path_GBps and per_nic * s <= nic_GBps and n * s <= gpu_nvlink_GBps]
    inter = fits[0] if fits else speeds[-1]
    intra = inter
    for s in sorted(x for x in speeds if x > inter):
        if intra < 2 * inter and n * s <= gpu_nvlink_GBps:
            intra = s
    return Graph(n, intra, inter, latency_inter_us, intra_link=intra_link,
                 run_channels=min(2 * n, 2 * SEARCH_MAX_RING_CHANNELS))


#: NCCL_MAX_NVLS_ARITY (src/include/device.h, v2.30.7-1): the most NVLS heads, hence NVLS graph channels
NCCL_MAX_NVLS_ARITY = 32


def nvswitch_nvls_graph(gpu_nvlink_GBps: float, sm: int, n_gpus: int, release: NcclRelease = DEFAULT_RELEASE) -> Graph:
    """The NVLS graph NCCL's search finds inside one NVSwitch node, derived from search.cc.

    One channel per GPU, at most 32 (each GPU heads at most one); every channel moves ``s`` through every
    GPU's NVLink and twice that through its head's, so the speed ``s`` fits while
    ``(channels + 1) * s <= gpu_nvlink_GBps``.
    The search then raises ``bwInter`` (which no intra-node path checks) one speed at a time while it is
    below twice ``bwIntra``. A derivation of the search's rules, not a measured graph.

    Examples
    --------
    >>> g = nvswitch_nvls_graph(nvlink_bw_GBps(90, 18), 90, 8)  # DGX H100
    >>> g.n_channels, g.bw_intra_GBps, g.bw_inter_GBps
    (8, 40.0, 60.0)
    """
    speeds = _speeds(sm, release)
    # at most NCCL_MAX_NVLS_ARITY heads (search.cc: maxChannels = min(NCCL_MAX_NVLS_ARITY, GPUs));
    # every channel pulls from every GPU, a head twice, so a GPU's link carries (channels + 1) x s
    n_channels = min(NCCL_MAX_NVLS_ARITY, n_gpus)
    fits = [i for i, s in enumerate(speeds) if (n_channels + 1) * s <= gpu_nvlink_GBps]
    if not fits:
        raise SpecError(f"gpu_nvlink_GBps: got {gpu_nvlink_GBps}; too little for an NVLS graph of {n_gpus} GPUs")
    index = fits[0]
    intra = inter = speeds[index]
    while index > 0 and inter < 2 * intra:
        index -= 1
        inter = speeds[index]
    return Graph(n_channels, intra, inter, intra_link="nvlink")


def dgx_h100(collective: str = "all_reduce") -> TuningInputs:
    """TuningInputs for one DGX H100: 8 H100 SXM (SM90) on NVSwitch, 18 NVLink4 links x 20.6 GB/s each.

    The ring graph (also used for Tree) and the NVLS graph come from :func:`nvswitch_ring_graph` (12
    channels x 30 GB/s = 360 GB/s, within the 370.8 GB/s NVLink total; NCCL 2.19 logs show the same 360
    total as 24 x 15, nccl#1367) and :func:`nvswitch_nvls_graph` (8 channels, 40 / 60 GB/s). Intel x86 host,
    NVLS available, LL128 on (NVLink, SM90).

    Examples
    --------
    >>> x = dgx_h100()
    >>> x.n_ranks, x.n_nodes, x.sm, x.graph("ring").busbw_GBps, x.graph("nvls").n_channels
    (8, 1, 90, 360.0, 8)
    """
    nvlink = nvlink_bw_GBps(90, 18)
    ring = nvswitch_ring_graph(nvlink, 90)
    nvls = nvswitch_nvls_graph(nvlink, 90, 8)
    return TuningInputs(collective, n_ranks=8, n_nodes=1, sm=90, ring=ring, graphs={"nvls": nvls}, cpu_arch="x86", cpu_vendor="intel",
                        nvls_available=True, nvswitch=True, ll128_enabled=True)
