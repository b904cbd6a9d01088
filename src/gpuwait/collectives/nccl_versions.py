"""NCCL's tuning model release by release, 2.18 to 2.30, as data.

:mod:`gpuwait.collectives.tuning` re-implements ``ncclTopoTuneModel`` / ``ncclTopoGetAlgoTime``
(NVIDIA/nccl ``src/graph/tuning.cc``). Between releases NCCL changed its tables (``baseLat``,
``hwLat``, ``llMaxBws``, the per-channel caps), which algorithms each collective may use (NVLS for
AllGather/ReduceScatter from 2.19, CollNetDirect for them from 2.20, PAT from 2.23), a few formulas
(ring LL bandwidth 1/4 before 2.21 and 1/2 since; ring LL128 0.7 at one rank per node before 2.23;
NVLS bandwidth from graph ratios before 2.28 and from ``nvlsEfficiency`` since) and the link
constants of ``src/graph/topo.h`` and ``src/graph/search.cc``. Each :class:`NcclRelease` holds one
release's values; ``tuning.py`` reads the selected release instead of module constants.

A release here is the first tag with a given model, and stays in force until the next one: the
file texts were compared tag by tag (``git diff vA vB -- src/graph/tuning.cc src/graph/topo.h
src/graph/search.cc``) and tags whose model parts are identical share an entry (2.18.3 to 2.18.6,
2.30.3 to 2.30.7, ...). :func:`nccl_release` maps any version to the newest release at or below it.

Chunking (``src/enqueue.cc``): NVLSTree's first chunk and its 4-node cap are versioned; the other chunk
rules are 2.21's to 2.30's (2.18 to 2.20 computed NVLS and NVLSTree reductions on the last chunk only,
and reduced Tree/Simple chunks by the tree depth before 2.20).

Not versioned (kept as in 2.30): the NCCL_ALGO/NCCL_PROTO syntax (per-collective lists from 2.24;
older releases ignore unknown names), the LL128 PXN/C2C path rules (2.27.7), multi-node NVLink
(2.20 MNNVL), the ring fallback when nothing else is enabled (2.19-2.23), channel duplication rules
of the search.

Examples
--------
>>> nccl_release("2.21.5+cuda12.4").version
'2.21.5'
>>> nccl_release("2.20.5").version, nccl_release("2.30.7").version
('2.20.3', '2.30.3')
>>> "pat" in nccl_release("2.21").supported_algorithms["all_gather"]
False
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from gpuwait.spec.cluster import OLDEST_NCCL_VERSION, parse_nccl_version

__all__ = ["DEFAULT_NCCL_VERSION", "DEFAULT_RELEASE", "OLDEST_NCCL_VERSION", "RELEASES", "NcclRelease",
           "newer_release_note", "nccl_release", "parse_nccl_version"]

#: Algorithms in NCCL's enum order (src/include/device.h); kept here so the tables below can be
#: checked without importing the model.
_ALGORITHMS = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")

Triple = tuple[float, float, float]
Rows = tuple[Triple, ...]

#: The release whose model gpuwait uses when none is given (``MODEL_NCCL_VERSION`` of tuning.py).
DEFAULT_NCCL_VERSION = "2.30.7"
@dataclass(frozen=True)
class NcclRelease:
    """The tuning-model constants and formula choices of one NCCL release (tuning.cc, topo.h, search.cc).

    Triples are (LL, LL128, Simple); per-architecture rows are Volta, Ampere, Hopper (, Blackwell);
    columns 1 node / 2 nodes / more. ``tags`` are the first and last NVIDIA/nccl tags checked to carry
    this model.
    """

    version: str
    tags: tuple[str, str]
    changes: str
    #: baseLat / baseLatencies [algo], us
    base_latency_us: Mapping[str, Triple]
    #: hwLat / hwLatencies [nvlink|pci|net][algo], us
    hw_latency_us: Mapping[str, Mapping[str, Triple]]
    #: llMaxBws; rows GPU architecture on 1 node, CPU vendor (Intel / AMD) across nodes
    ll_max_bw_GBps: Rows
    per_channel_max_ring_ll128_bw_GBps: Rows
    per_channel_max_tree_ll128_bw_GBps: Rows
    per_channel_max_tree_bw_GBps: Rows
    #: perChMaxNVLSTreeBws (2.28+; empty before: NVLSTree had no per-channel cap)
    per_channel_max_nvls_tree_bw_GBps: Rows
    #: nvlsEfficiency (2.28+; empty before: NVLS used graph ratios)
    nvls_efficiency: tuple[float, ...]
    #: per-architecture rows: 3 before 2.25 (a Blackwell GPU reads the Hopper row), 4 since
    compcap_rows: int
    #: which algorithms each collective's loop keeps (the ``continue`` filters)
    supported_algorithms: Mapping[str, tuple[str, ...]]
    #: ring LL busBw factor; before 2.21 1/4, and 1/3 on one node for Broadcast/AllGather/ReduceScatter
    ring_ll_factor: float
    ring_ll_factor_intra_gather: float
    #: ring LL128 busBw factor at one rank per node (ppn < 2): 0.7 before 2.23, then 0.92 as for others
    ring_ll128_factor_one_ppn: float
    #: inter-node ring steps of AllReduce: 2 * nNodes before 2.23, 2 * (nNodes - 1) since
    ring_inter_steps_legacy: bool
    #: with one rank per node the network latency is Tree's (2.23+)
    one_ppn_tree_net_latency: bool
    #: busBw factor of a plain (unbalanced) tree: 0.85 from 2.18.3, none before
    tree_pattern_factor: float
    #: PAT busBw factor: 0.85 in 2.23, 0.75 from 2.24
    pat_factor: float
    #: PAT needs this SM (CUDA atomics; 2.26+), 0 = no check
    pat_min_sm: int
    #: NVLS/NVLSTree bandwidth formulas: "2.18" graph bandwidth x fixed ratios, "2.19" min(bwIntra, bwInter),
    #: "2.27" as 2.19 with an AllGather/ReduceScatter formula, "2.28" nvlsEfficiency
    nvls_model: str
    #: NVLS bus-to-algorithm ratio before 2.28 (0.75 in 2.18.1, 5/6 after)
    nvls_ratio: float
    #: algorithms whose AllGather/ReduceScatter busBw is not converted by a ratio
    gather_ratio_exempt: tuple[str, ...]
    #: CollNetDirect AllGather/ReduceScatter busBw: "" (unsupported), "interp" (2.20-2.26), "min" (2.27+)
    collnet_gather_model: str
    #: algorithms whose multi-node AllGather/ReduceScatter need one CollNet head per local rank
    gather_heads_algorithms: tuple[str, ...]
    #: CollNetDirect arity serialization latency per extra local rank, us
    collnet_arity_latency_us: float
    #: NVLSTree AllReduce reads treeCorrectionFactor on SM100+ x86 (2.29+)
    nvls_tree_correction: bool
    #: NVLSTree's chunk before the size reductions of enqueue.cc: the Simple step (4 MiB buffer / 8 steps)
    #: before 2.21, ``NCCL_NVLS_CHUNKSIZE`` (128 KiB) since
    nvls_tree_first_chunk_bytes: int
    #: NVLSTree's chunk cap from 4 nodes (``NCCL_NVLSTREE_MAX_CHUNKSIZE`` default, 2.19+); 0 = none (2.18)
    nvls_tree_chunk_4_nodes_bytes: int
    #: NVLS/NVLSTree kernel channels before NCCL_MIN_CTAS/NCCL_MAX_CTAS clamp them (transport/nvls.cc
    #: ``NVLS_NCHANNELS`` default; SM100: across nodes, on one node): 16 for any GPU before 2.25, SM100 32
    #: from 2.25, 24 on one SM100 node from 2.27
    nvls_channels_sm90: int
    nvls_channels_sm100: int
    nvls_channels_sm100_one_node: int
    #: minimum channels of an NVLS graph (the "needs at least 2 channels" check, 2.28+)
    nvls_min_channels: int
    #: SMs on which LL128 may be on by default (a ``switch`` before 2.27); None = any SM >= 70
    ll128_sms: frozenset[int] | None
    #: NCCL_ALGO never disables Ring for collectives other than AllReduce (2.18)
    ring_kept_for_non_all_reduce: bool
    #: AMD *and* mixed-vendor hosts read llMaxBws row 1 (2.24+); before, only AMD
    ll_row_mixed_as_amd: bool
    #: topo.h SM*_NVLINK_BW, GB/s per link; a GPU newer than the highest key takes that key's value
    nvlink_bw_per_link_GBps: Mapping[int, float]
    #: search.cc speedArrayIntra by family ("default", "sm90", "sm100" from 2.25), GB/s
    search_speeds_intra_GBps: Mapping[str, tuple[float, ...]]

    @property
    def version_key(self) -> tuple[int, ...]:
        """The version as integers, for ordering (``(2, 26, 2)``): releases are compared against it."""
        return tuple(int(x) for x in self.version.split("."))

    @property
    def c2c_nic_path(self) -> bool:
        """Whether a superchip GPU's NIC behind its own CPU is NCCL's P2C path, which GPUDirect RDMA
        (``NCCL_NET_GDR_C2C``) and LL128 (``NCCL_LL128_C2C``) admit by default: from v2.27.3-1
        (src/graph/topo.h ``PATH_P2C``, paths.cc, tuning.cc). v2.25.1-1 reads that path as PHB, and v2.26.2-1
        too unless ``NCCL_NET_GDR_C2C=1`` (its default 0).

        >>> nccl_release("2.26.2").c2c_nic_path, nccl_release("2.27.3").c2c_nic_path
        (False, True)
        """
        return self.version_key >= (2, 27)

    @property
    def covers(self) -> str:
        """The NCCL releases this model stands for, first to last checked tag (one release: its version).

        >>> nccl_release("2.30.7").covers, nccl_release("2.27.3").covers
        ('2.30.3 to 2.30.7', '2.27.3')
        """
        first, last = (tag.removeprefix("v").rsplit("-", 1)[0] for tag in self.tags)
        return first if first == last else f"{first} to {last}"

    def compcap_index(self, sm: int) -> int:
        """The per-architecture row NCCL reads for a GPU of compute capability ``sm`` (x10)."""
        index = 3 if sm >= 100 else 2 if sm >= 90 else 1 if sm >= 80 else 0
        return min(index, self.compcap_rows - 1)

    def nvls_channels(self, sm: int, n_nodes: int) -> int:
        """NCCL's default NVLS compute channels (``comm->nvlsChannels`` before the CTA clamp): not the NVLS
        graph's heads (one per GPU) — every compute channel runs every head (connect.cc connectNvls, "NVLS
        compute channels work orthogonally to NVLS search channels"). SM100's multi-node NVLSTree tuning of
        2.30 (ncclNvlsTreeSm100Tuning, by NIC speed and ranks per node) is not modelled.

        >>> from gpuwait.collectives.nccl_versions import nccl_release
        >>> nccl_release("2.30.7").nvls_channels(90, 8), nccl_release("2.30.7").nvls_channels(100, 1)
        (16, 24)
        """
        if sm < 100:
            return self.nvls_channels_sm90
        return self.nvls_channels_sm100 if n_nodes > 1 else self.nvls_channels_sm100_one_node

    def ll128_default(self, sm: int) -> bool:
        """Whether this release may enable LL128 by default on SM ``sm`` (the other conditions, NVLink
        and the NIC path, are the caller's ``ll128_enabled``)."""
        if self.ll128_sms is None:
            return sm >= 70
        return sm in self.ll128_sms

    def nvlink_per_link_GBps(self, sm: int) -> float:
        """``ncclTopoNVLinkBw``: SM86 special-cased, else the newest generation at or below ``sm``;
        below SM60 the SM80 value."""
        table = self.nvlink_bw_per_link_GBps
        if sm == 86:
            return table[86]
        fitting = [k for k in table if k != 86 and k <= sm]
        return table[max(fitting)] if fitting else table[80]

    def search_speeds(self, sm: int) -> tuple[float, ...]:
        """The intra-node speeds NCCL's search tries for SM ``sm``, fastest first."""
        speeds = self.search_speeds_intra_GBps
        if sm >= 100 and "sm100" in speeds:
            return speeds["sm100"]
        return speeds["sm90"] if sm >= 90 else speeds["default"]


def _frozen(table: Mapping) -> Mapping:
    return MappingProxyType({k: _frozen(v) if isinstance(v, Mapping) else v for k, v in table.items()})


def _hw(prev: Mapping[str, Mapping[str, Triple]], **changes: Triple) -> Mapping[str, Mapping[str, Triple]]:
    """``prev`` with entries replaced, named ``hw__algo`` (``nvlink__tree=(...)``)."""
    table = {hw: dict(row) for hw, row in prev.items()}
    for key, value in changes.items():
        hw, algo = key.split("__")
        table[hw][algo] = value
    return _frozen(table)


def _after(prev: NcclRelease, version: str, last_tag: str, changes: str, **fields) -> NcclRelease:
    return replace(prev, version=version, tags=(f"v{version}-1", last_tag), changes=changes, **fields)


_ZERO: Triple = (0.0, 0.0, 0.0)
_RING_ONLY = {"broadcast": ("ring",), "reduce": ("ring",), "all_gather": ("ring",), "reduce_scatter": ("ring",),
              "all_reduce": ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree")}

# v2.18.1-1: src/graph/tuning.cc, topo.h, search.cc.
R2_18_1 = NcclRelease(
    version="2.18.1", tags=("v2.18.1-1", "v2.18.1-1"), changes="oldest release modelled",
    base_latency_us=_frozen({"tree": (6.8, 14.0, 0.0), "ring": (6.6, 14.0, 8.4), "collnet_direct": (6.8, 14.0, 0.0),
                             "collnet_chain": (6.8, 14.0, 0.0), "nvls": (0.0, 0.0, 23.0),
                             "nvls_tree": (0.0, 0.0, 23.0), "pat": _ZERO}),
    hw_latency_us=_frozen({
        "nvlink": {"tree": (0.6, 1.25, 28.0), "ring": (0.6, 1.9, 3.4), "collnet_direct": (0.0, 0.0, 8.0),
                   "collnet_chain": (0.0, 0.0, 4.75), "nvls": _ZERO, "nvls_tree": _ZERO, "pat": _ZERO},
        "pci": {"tree": (1.0, 1.9, 28.0), "ring": (1.0, 2.5, 5.7), "collnet_direct": (0.0, 0.0, 8.0),
                "collnet_chain": (0.0, 0.0, 8.0), "nvls": _ZERO, "nvls_tree": _ZERO, "pat": _ZERO},
        "net": {"tree": (5.0, 8.5, 28.0), "ring": (2.7, 4.0, 14.0), "collnet_direct": (0.0, 0.0, 10.7),
                "collnet_chain": (0.0, 0.0, 14.0), "nvls": (0.0, 0.0, 18.0), "nvls_tree": (0.0, 0.0, 19.0),
                "pat": _ZERO}}),
    ll_max_bw_GBps=((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (87.7, 22.5, 19.0)),
    # one ll128MaxBwPerCh per architecture {20, 20, 36.7}, for ring and tree alike
    per_channel_max_ring_ll128_bw_GBps=((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 36.7)),
    per_channel_max_tree_ll128_bw_GBps=((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 36.7)),
    per_channel_max_tree_bw_GBps=((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 33.0)),
    per_channel_max_nvls_tree_bw_GBps=(), nvls_efficiency=(), compcap_rows=3,
    supported_algorithms=_frozen(_RING_ONLY),
    ring_ll_factor=1.0 / 4.0, ring_ll_factor_intra_gather=1.0 / 3.0, ring_ll128_factor_one_ppn=0.7,
    ring_inter_steps_legacy=True, one_ppn_tree_net_latency=False, tree_pattern_factor=1.0,
    pat_factor=0.0, pat_min_sm=0, nvls_model="2.18", nvls_ratio=0.75, gather_ratio_exempt=(),
    collnet_gather_model="", gather_heads_algorithms=(), collnet_arity_latency_us=0.5,
    nvls_tree_correction=False, nvls_tree_first_chunk_bytes=512 * 1024, nvls_tree_chunk_4_nodes_bytes=0,
    nvls_min_channels=1, ll128_sms=frozenset({70, 80, 90}),
    nvls_channels_sm90=16, nvls_channels_sm100=16, nvls_channels_sm100_one_node=16,
    ring_kept_for_non_all_reduce=True, ll_row_mixed_as_amd=False,
    nvlink_bw_per_link_GBps=_frozen({60: 18.0, 70: 20.0, 80: 20.0, 86: 12.0, 90: 20.0}),
    search_speeds_intra_GBps=_frozen({
        "default": (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0),
        "sm90": (60.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 6.0, 3.0)}),
)

R2_18_3 = _after(
    R2_18_1, "2.18.3", "v2.18.6-1",
    "Tree/Simple hwLat 28 -> 4/6/14 us; per-channel LL128 caps split ring/tree (Hopper tree N4 29); "
    "perChMaxTreeBws Hopper N4 33 -> 36; plain-tree factor 0.85; NVLS ratio 0.75 -> 5/6",
    hw_latency_us=_hw(R2_18_1.hw_latency_us, nvlink__tree=(0.6, 1.25, 4.0), pci__tree=(1.0, 1.9, 6.0),
                      net__tree=(5.0, 8.5, 14.0)),
    per_channel_max_tree_ll128_bw_GBps=((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 29.0)),
    per_channel_max_tree_bw_GBps=((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0)),
    tree_pattern_factor=0.85, nvls_ratio=5.0 / 6.0)

R2_19_1 = _after(
    R2_18_3, "2.19.1", "v2.19.4-1",
    "NVLS for AllGather/ReduceScatter; NVLS bandwidth min(bwIntra, bwInter); NVLS latency from hwLat "
    "(NVLink 23 us); CollNet latencies 3.7/2.8 (NVLink, PCI), 31/30 (net); Tree/Simple hwLat 28 again; "
    "arity latency 0.4 us; sm90 search speeds gain 50",
    base_latency_us=_frozen({**R2_18_3.base_latency_us, "collnet_direct": _ZERO, "collnet_chain": _ZERO,
                             "nvls": _ZERO, "nvls_tree": _ZERO}),
    hw_latency_us=_hw(R2_18_3.hw_latency_us, nvlink__tree=(0.6, 1.25, 28.0), nvlink__collnet_direct=(0.0, 0.0, 3.7),
                      nvlink__collnet_chain=(0.0, 0.0, 2.8), nvlink__nvls=(0.0, 0.0, 23.0),
                      nvlink__nvls_tree=(0.0, 0.0, 23.0), pci__tree=(1.0, 1.9, 28.0),
                      pci__collnet_direct=(0.0, 0.0, 3.7), pci__collnet_chain=(0.0, 0.0, 2.8),
                      net__tree=(5.0, 8.5, 28.0), net__collnet_direct=(0.0, 0.0, 31.0),
                      net__collnet_chain=(0.0, 0.0, 30.0), net__nvls_tree=(0.0, 0.0, 14.0)),
    supported_algorithms=_frozen({**_RING_ONLY, "all_gather": ("ring", "nvls"), "reduce_scatter": ("ring", "nvls")}),
    nvls_model="2.19", collnet_arity_latency_us=0.4, ring_kept_for_non_all_reduce=False,
    nvls_tree_chunk_4_nodes_bytes=64 * 1024,
    search_speeds_intra_GBps=_frozen({**R2_18_3.search_speeds_intra_GBps,
                                      "sm90": (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 6.0, 3.0)}))

R2_20_3 = _after(
    R2_19_1, "2.20.3", "v2.20.5-1",
    "CollNetDirect AllGather/ReduceScatter (ppn x bwIntra, 0.95..0.85 by ppn, one head per rank); "
    "SM90 NVLink 20.0 -> 20.6 GB/s per link",
    supported_algorithms=_frozen({**_RING_ONLY, "all_gather": ("ring", "collnet_direct", "nvls"),
                                  "reduce_scatter": ("ring", "collnet_direct", "nvls")}),
    gather_ratio_exempt=("collnet_direct",), collnet_gather_model="interp",
    gather_heads_algorithms=("collnet_direct",),
    nvlink_bw_per_link_GBps=_frozen({**R2_19_1.nvlink_bw_per_link_GBps, 90: 20.6}))

R2_21_5 = _after(
    R2_20_3, "2.21.5", "v2.21.5-1",
    "ring LL busBw x1/2 (was 1/4, 1/3); Hopper llMaxBws 141/45/35 (was Ampere's); NVLS NVLink hwLat 25 us; "
    "sm90 search speeds gain 11; NVLSTree chunk from NCCL_NVLS_CHUNKSIZE 128 KiB (was the 512 KiB Simple step)",
    nvls_tree_first_chunk_bytes=128 * 1024,
    hw_latency_us=_hw(R2_20_3.hw_latency_us, nvlink__nvls=(0.0, 0.0, 25.0), nvlink__nvls_tree=(0.0, 0.0, 25.0)),
    ll_max_bw_GBps=((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0)),
    ring_ll_factor=0.5, ring_ll_factor_intra_gather=0.5,
    search_speeds_intra_GBps=_frozen({**R2_20_3.search_speeds_intra_GBps,
                                      "sm90": (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0)}))

R2_22_3 = _after(R2_21_5, "2.22.3", "v2.22.3-1", "no change to the model (getNetOverhead reads the communicator)")

R2_23_4 = _after(
    R2_22_3, "2.23.4", "v2.23.4-1",
    "PAT for AllGather/ReduceScatter at 1 GPU per node (x0.85); Tree/Simple base 8.4 us, hwLat 4/4/14; "
    "ring LL128 0.92 at any ppn; AllReduce inter-node ring steps 2(n-1); Tree's net latency at ppn 1; "
    "non-ring AllGather/ReduceScatter keep their busBw",
    base_latency_us=_frozen({**R2_22_3.base_latency_us, "tree": (6.8, 14.0, 8.4), "pat": (8.0, 8.0, 8.0)}),
    hw_latency_us=_hw(R2_22_3.hw_latency_us, nvlink__tree=(0.6, 1.25, 4.0), pci__tree=(1.0, 1.9, 4.0),
                      net__tree=(5.0, 8.5, 14.0)),
    supported_algorithms=_frozen({**_RING_ONLY, "all_gather": ("ring", "collnet_direct", "nvls", "pat"),
                                  "reduce_scatter": ("ring", "collnet_direct", "nvls", "pat")}),
    ring_ll128_factor_one_ppn=0.92, ring_inter_steps_legacy=False, one_ppn_tree_net_latency=True,
    pat_factor=0.85, gather_ratio_exempt=tuple(a for a in _ALGORITHMS if a != "ring"))

R2_24_3 = _after(R2_23_4, "2.24.3", "v2.24.3-1",
                 "PAT x0.75 (was 0.85); mixed-vendor hosts read the AMD llMaxBws row; per-collective NCCL_ALGO",
                 pat_factor=0.75, ll_row_mixed_as_amd=True)

R2_25_1 = _after(
    R2_24_3, "2.25.1", "v2.25.1-1",
    "Blackwell rows (2x Hopper); SM100 NVLink 40.0 GB/s per link and sm100 search speeds; LL128 on SM100/120; "
    "SM100 NVLS channels 32",
    nvls_channels_sm100=32, nvls_channels_sm100_one_node=32,
    ll_max_bw_GBps=(*R2_24_3.ll_max_bw_GBps, (2 * 141.0, 2 * 45.0, 2 * 35.0)),
    per_channel_max_ring_ll128_bw_GBps=(*R2_24_3.per_channel_max_ring_ll128_bw_GBps, (2 * 36.7, 2 * 36.7, 2 * 36.7)),
    per_channel_max_tree_ll128_bw_GBps=(*R2_24_3.per_channel_max_tree_ll128_bw_GBps, (2 * 36.7, 2 * 36.7, 2 * 29.0)),
    per_channel_max_tree_bw_GBps=(*R2_24_3.per_channel_max_tree_bw_GBps, (2 * 38.7, 2 * 41.4, 2 * 36.0)),
    compcap_rows=4, ll128_sms=frozenset({70, 80, 90, 100, 120}),
    nvlink_bw_per_link_GBps=_frozen({**R2_24_3.nvlink_bw_per_link_GBps, 100: 40.0}),
    search_speeds_intra_GBps=_frozen({**R2_24_3.search_speeds_intra_GBps,
                                      "sm100": (90.0, 80.0, 70.0, 60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 19.0)}))

R2_26_2 = _after(R2_25_1, "2.26.2", "v2.26.6-1", "PAT needs SM60+; the plain-tree factor reads maxTreePattern",
                 pat_min_sm=60)

R2_27_3 = _after(
    R2_26_2, "2.27.3", "v2.27.3-1",
    "NVLS AllGather/ReduceScatter min(bwIntra (ppn-1)/ppn, 0.9 bwInter) and one CollNet head per rank across "
    "nodes; CollNetDirect AllGather/ReduceScatter ppn x min(bwIntra, 0.9 bwInter); LL128 on any SM >= 70; "
    "24 NVLS channels on one SM100 node",
    nvls_channels_sm100_one_node=24, nvls_model="2.27", collnet_gather_model="min", gather_heads_algorithms=("collnet_direct", "nvls"),
    ll128_sms=None,
    search_speeds_intra_GBps=_frozen({**R2_26_2.search_speeds_intra_GBps,
                                      "sm100": (90.0, 80.0, 70.0, 60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0)}))

R2_27_5 = _after(R2_27_3, "2.27.5", "v2.27.7-1", "SM100 NVLink 40.0 -> 40.1 GB/s per link; LL128 over PXN/C2C paths",
                 nvlink_bw_per_link_GBps=_frozen({**R2_27_3.nvlink_bw_per_link_GBps, 100: 40.1}))

R2_28_3 = _after(
    R2_27_5, "2.28.3", "v2.28.3-1",
    "NVLS/NVLSTree bandwidth from nvlsEfficiency (Hopper 0.85, Blackwell 0.74), nRanks/nsteps ratio, "
    "perChMaxNVLSTreeBws, at least 2 channels; Blackwell tree caps 55.6/31.67/20 (LL128), 70/42.8/24; "
    "PAT hwLat rows",
    hw_latency_us=_hw(R2_27_5.hw_latency_us, nvlink__pat=(0.0, 0.0, 4.0), pci__pat=(0.0, 0.0, 4.0),
                      net__pat=(0.0, 0.0, 14.0)),
    per_channel_max_tree_ll128_bw_GBps=(*R2_27_5.per_channel_max_tree_ll128_bw_GBps[:3], (55.6, 31.67, 20.0)),
    per_channel_max_tree_bw_GBps=(*R2_27_5.per_channel_max_tree_bw_GBps[:3], (70.0, 42.8, 24.0)),
    per_channel_max_nvls_tree_bw_GBps=((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (0.0, 57.7, 45.5),
                                       (0.0, 96.0, 43.1)),
    nvls_efficiency=(0.0, 0.0, 0.85, 0.74), nvls_model="2.28", nvls_min_channels=2)

R2_28_7 = _after(R2_28_3, "2.28.7", "v2.28.7-1", "Blackwell ring LL128 N2 73.4 -> 34.6",
                 per_channel_max_ring_ll128_bw_GBps=(*R2_28_3.per_channel_max_ring_ll128_bw_GBps[:3],
                                                     (2 * 36.7, 34.6, 2 * 36.7)))

R2_28_9 = _after(
    R2_28_7, "2.28.9", "v2.28.9-1", "NVLSTree net hwLat 14 -> 20.9 us; Blackwell NVLSTree N4 43.1 -> 43.8",
    hw_latency_us=_hw(R2_28_7.hw_latency_us, net__nvls_tree=(0.0, 0.0, 20.9)),
    per_channel_max_nvls_tree_bw_GBps=(*R2_28_7.per_channel_max_nvls_tree_bw_GBps[:3], (0.0, 96.0, 43.8)))

R2_29_2 = _after(
    R2_28_9, "2.29.2", "v2.29.3-1",
    "Blackwell ring LL128 34.5/34.6/34.5; NVLSTree AllReduce tree correction on SM100+ x86; sm100 speeds gain 45",
    per_channel_max_ring_ll128_bw_GBps=(*R2_28_9.per_channel_max_ring_ll128_bw_GBps[:3], (34.5, 34.6, 34.5)),
    nvls_tree_correction=True,
    search_speeds_intra_GBps=_frozen({**R2_28_9.search_speeds_intra_GBps,
                                      "sm100": (90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0,
                                                18.0)}))

R2_29_7 = _after(R2_29_2, "2.29.7", "v2.29.7-1", "Blackwell ring LL128 40/40/40",
                 per_channel_max_ring_ll128_bw_GBps=(*R2_29_2.per_channel_max_ring_ll128_bw_GBps[:3],
                                                     (40.0, 40.0, 40.0)))

R2_30_3 = _after(R2_29_7, "2.30.3", "v2.30.7-1", "Blackwell NVLSTree N4 43.8 -> 80",
                 per_channel_max_nvls_tree_bw_GBps=(*R2_29_7.per_channel_max_nvls_tree_bw_GBps[:3],
                                                    (0.0, 96.0, 80.0)))

#: Every modelled release, oldest first.
RELEASES: tuple[NcclRelease, ...] = (R2_18_1, R2_18_3, R2_19_1, R2_20_3, R2_21_5, R2_22_3, R2_23_4, R2_24_3,
                                     R2_25_1, R2_26_2, R2_27_3, R2_27_5, R2_28_3, R2_28_7,
                                     R2_28_9, R2_29_2, R2_29_7,
                                     R2_30_3)


def nccl_release(version: object = None, what: str = "NCCL version") -> NcclRelease:
    """The modelled release for ``version``: the newest at or below it (None: :data:`DEFAULT_NCCL_VERSION`).

    Raises
    ------
    SpecError
        A malformed version, or one older than 2.18 (the message names ``what``).

    Examples
    --------
    >>> nccl_release("2.18.6").version, nccl_release("2.31.0").version
    ('2.18.3', '2.30.3')
    >>> nccl_release("2.x")
    Traceback (most recent call last):
    ...
    gpuwait.errors.SpecError: NCCL version: got '2.x'; expected a release such as 2.21.5 (major.minor[.patch])
    """
    key = parse_nccl_version(DEFAULT_NCCL_VERSION if version is None else version, what)
    found = RELEASES[0]
    for release in RELEASES:
        if release.version_key <= key:
            found = release
    return found


def newer_release_note(version: object) -> str | None:
    """What to say when ``version`` is newer than the last NCCL tag whose model was checked (``2.30.7``): it is
    predicted as the newest release (:func:`nccl_release`), whose tables a later release may have changed, and
    callers say so rather than predict it silently; None for a release checked.

    >>> newer_release_note("3.0")
    "NCCL 3.0 is newer than the last release gpuwait checked (2.30.7): predicted as 2.30.3 to 2.30.7's algorithm and protocol choices, which a later release may have changed"
    >>> newer_release_note("2.30.7"), newer_release_note("2.21")
    (None, None)
    """
    last = RELEASES[-1].tags[1].removeprefix("v").rsplit("-", 1)[0]
    if parse_nccl_version(version) <= parse_nccl_version(last):
        return None
    return (f"NCCL {version} is newer than the last release gpuwait checked ({last}): predicted as "
            f"{nccl_release(version).covers}'s algorithm and protocol choices, which a later release may have changed")


#: The release gpuwait models by default.
DEFAULT_RELEASE = nccl_release(DEFAULT_NCCL_VERSION)
