"""Predict a collective's time the way nccl-tests measures it: NCCL's model plus the real fabric.

For one collective and size:

1. NCCL's tuning model (:mod:`gpuwait.collectives.tuning`) picks the algorithm and protocol as NCCL
   would (cheapest predicted time, within ``NCCL_ALGO`` / ``NCCL_PROTO``) and gives the latency
   terms and NCCL's own bandwidth ceiling for that choice. The time's latency keeps each network step at
   the algorithm's own figure (``Prediction.own_net_latency_us``): from 2.23.4-1 NCCL prices every network
   step at one rank per node at Tree's ("With ppn=1 latencies are fully exposed, use the Tree network
   latency", src/graph/tuning.cc; ring LL 2.7 -> 5.0 us, LL128 4.0 -> 8.5 us), a rule that came with PAT,
   which runs only at one rank per node and competes with ring exactly there, while the release notes
   announce no latency change. It steers the choice, not the time: a network hop costs what it costs
   whatever the number of GPUs behind the NIC, and the same L40S hosts' NIC at two ranks per node (the RoCE
   table, NCCL 2.27.3, where the rule is off) takes 16.8-19.4 us on its latency-bound ring/LL rows (8-64 B):
   at or above NCCL's ring/LL latency with ring's network figure (16.0 us), below it with Tree's (20.6 us).
2. The algorithm is compiled into phases and run on the flow engine over the real topology and
   routing (ECMP collisions, oversubscription, degraded links all count). NVLink is held to NCCL's
   effective NVLink bandwidth (links x per-link constant, NCCL topo.h v2.30.7), NVLS to
   ``nvlsEfficiency`` of it, and every link to the protocol's payload share (LL 1/2, LL128 120/128).
3. time = latency + max(fabric time, NCCL's ceiling time): the fabric can only make NCCL slower.
   The NVLS and NVLSTree kernels also run no faster than NVIDIA's measured figures for them (NCCL
   2.28.3's, which describe the same kernel under every release: :func:`nvls_kernel_alg_GBps`), part of
   the fabric time whatever release's ceiling steers the choice.
   NCCL's ceiling is its tuning figure where that figure is the bytes; a tree between 2 ranks moves
   the ring's bytes, not the x 0.5 NCCL's choice assumes (:func:`tree_pair_share`), and a tree/Simple
   figure is priced at the GPU's datasheet NVLink rate, not NCCL's planning figure
   (:meth:`CollectivePredictor._tree_plateau_alg_GBps`).
4. NVLS runs each chunk in two stages (reduce through the switch, then the multicast store). They
   overlap only once NCCL's in-flight window is full (NVLS channels x NCCL_STEPS x NVLS chunk,
   16 x 8 x 128 KiB = 16 MiB by default; the channels NCCL runs, 24 under NCCL_MIN_CTAS=24:
   :func:`nvls_window_bytes`), so the first window's bytes cost a second pass:
   bandwidth time x (1 + min(bytes, window) / bytes). This is the mid-size ramp of the DGX H100
   table (nccl-tests/h100-dgx-1node-8gpu-all_reduce.md); NCCL's own model has no such term.
   NVLSTree's bandwidth time is the NICs' (or, on 2 nodes, its kernel's measured rate), not NVLink's,
   so its start-up is instead the first chunks of all its channels crossing the tree between nodes hop
   by hop, sharing each head's NIC
   (:meth:`CollectivePredictor._fill_inter_GBps`).

Phases scale linearly with the bytes in a fluid model, so each (algorithm, protocol, channels) is
simulated once per communicator and reused for every size of a sweep.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from gpuwait.collectives.algorithms import Phase, Plan, compile_collective
from gpuwait.collectives.communicator import Communicator
from gpuwait.collectives.ncclenv import NcclEnv, Setting, apply_env, env_setting, qps_setting
from gpuwait.collectives.nccltests import busbw_factor
from gpuwait.collectives.physical import (
    PhysicalParams,
    PipelineCosts,
    calibration_note,
    generation_steps,
    physical_params,
    pipelined_time_s,
)
from gpuwait.collectives.pipeline import (
    NCCL_STEPS,
    channels_for_size,
    chunk_bytes,
    intra_hop_bytes,
    latency_steps,
    p2p_chunk_bytes,
    pipeline_depth,
    ring_slices,
    tree_channel_split,
    tree_network_peers,
)
from gpuwait.collectives.tuning import (
    NCCL_MAX_NVLS_ARITY,
    NVLS_EFFICIENCY,
    PROTOCOLS,
    Graph,
    TuningInputs,
    choose,
    host_path_ring_graph,
    host_pci_path_GBps,
    host_staged_net_ring_graph,
    inter_cpu_bw_GBps,
    net_bw_GBps,
    net_tree_graph,
    nvlink_bw_GBps,
    nvls_kernel_alg_GBps,
    nvswitch_nvls_graph,
    nvswitch_ring_graph,
    pci_bw_GBps,
    predict,
    search_speed_at_most,
)
from gpuwait.engine.base import effective_capacity_Bps
from gpuwait.errors import SpecError
from gpuwait.fabric.collective import PlanRun, run_plan
from gpuwait.spec.cluster import RoutingSpec
from gpuwait.topology.build import gpu_nic_affinity
from gpuwait.topology.gpus import gpu_arch
from gpuwait.topology.model import LinkKind, NodeKind
from gpuwait.topology.pcipath import distance, gpu_nic_path, node_uses_gdr, sockets, uses_p2p
from gpuwait.transport.profiles import TransportProfile
from gpuwait.transport.socket import message_time_s, runs_on_sockets, socket_transport

PROTOCOL_PAYLOAD = {"LL": 0.5, "LL128": 120.0 / 128.0, "Simple": 1.0}  # payload share of the wire (NCCL device.h, LL128 line)
#: NCCL algorithm -> compiled phases; CollNet (SHARP) reduces inside the switches, which the flow
#: model has no endpoint for, so it keeps NCCL's own bandwidth model
FLOW_ALGORITHMS = {"ring": "ring", "tree": "tree", "nvls": "nvls", "nvls_tree": "nvls_tree", "pat": "pat"}
_REF_BYTES = float(2**30)
BACKGROUND_FLOOR = 0.05  # share of a link's capacity a collective keeps however busy the link is
#: NVLS in-flight window: NCCL_NVLS_NCHANNELS (16) x NCCL_STEPS (8, NCCL device.h) x
#: NCCL_NVLS_CHUNKSIZE (128 KiB); NCCL's defaults in transport/nvls.cc.
NVLS_WINDOW_BYTES = 16 * 8 * 128 * 1024


def nvls_window_bytes(nvls_channels: int) -> int:
    """NCCL's NVLS in-flight window on ``nvls_channels`` compute channels: each channel keeps NCCL_STEPS
    chunks in flight, so the window grows with the channels NCCL runs (``comm->nvlsChannels`` =
    max(NCCL_MIN_CTAS, min(NCCL_MAX_CTAS, 16)) on SM90, src/transport/nvls.cc NVIDIA/nccl v2.27.3-1).

    >>> nvls_window_bytes(16) == NVLS_WINDOW_BYTES, nvls_window_bytes(24) // 2**20
    (True, 24)
    """
    return NVLS_WINDOW_BYTES * nvls_channels // 16


#: The share of its one-way rate that one GPU's PCI path through host memory (GPU -> host memory -> GPU)
#: keeps in each direction when the GPU sends and receives through host memory at once. NVIDIA/nccl issue #384
#: (NCCL 2.4.8, 2 GPUs, PCIe Gen3 x16, NCCL_P2P_DISABLE=1, one channel): broadcast, one way only, 10.31 GB/s
#: (NCCL's one-GPU path figure on Gen3 through an Intel CPU is 12 / (6/5) = 10 GB/s); all_reduce, each GPU
#: sending and receiving, 3.9 GB/s busbw, i.e. 3.9 GB/s each way per GPU; "some components (in particular
#: some CPUs) do not handle bidirectional traffic well" (the maintainer's answer there). The issue does not
#: say whether its GPUs shared a PCIe switch, so the share is read per GPU; a shared uplink is the fabric's
#: (its links at line rate).
SHM_BIDIRECTIONAL_SHARE = 3.9 / 10.31


#: The host's time to issue one collective on one more GPU from the same thread (NCCL's enqueue and the
#: kernel launch). nccl-tests times ``iters`` calls issued back to back and synchronizes once
#: (``BenchTime``, src/common.cu, NVIDIA/nccl-tests); with ``-g N`` one thread issues each call on N GPUs
#: inside ncclGroupStart/End (``startColl``), so a call takes at least N x this however small it is
#: ("the CUDA latency overheads of single process jobs", the maintainer in NVIDIA/nccl-tests#333).
#: The lowest per-GPU figure of the public -g floors: an H200 node, -g 8, NVLS, 1-2 KiB: 0.06/0.12 GB/s
#: busbw = 30 us (Azure ND H200 v5 NCCL benchmark, tests/nccltests/data/reference) = 3.7 us per GPU;
#: B200 -g 2 9 us and -g 4 22 us (NVIDIA/nccl-tests#333) = 4.5 and 5.5 us. The floor is a max, so the
#: lowest figure keeps every source's floor at or below its measurement.
HOST_ISSUE_PER_GPU_S = 3.7e-6


def tree_pair_share(algorithm: str, n_ranks: int) -> float:
    """The share of NCCL's tuning time a tree's bytes take on the wire: 1/2 between 2 ranks, else 1.

    NCCL converts a tree's bus bandwidth to algorithm bandwidth with a flat x 0.5 ("Convert bus BW to
    algorithm BW", src/graph/tuning.cc, NVIDIA/nccl v2.30.7-1): a chain's middle rank sends every byte
    up (reduce) and again down (broadcast). Between 2 ranks the tree has no middle: the root receives,
    reduces and sends back (``directRecvReduceCopyDirectSend``), the leaf sends up and receives down
    (``runTreeSplit``, src/device/all_reduce.h, same tag), so each rank sends the buffer once, as the
    ring does (its own ratio nRanks / nsteps = 2 / 2). NCCL's figure there is a selection heuristic
    (it keeps NCCL_ALGO=Tree from being picked), not the time: NVIDIA/nccl-tests#232 measures a forced
    Tree between 2 H100 servers at 41 GB/s, the ring's rate, not half of it.
    """
    return 0.5 if algorithm == "tree" and n_ranks == 2 else 1.0


def gpu_sm(gpu_model: str) -> int:
    """Compute capability x10 of a GPU model name, from :mod:`gpuwait.topology.gpus` (an unknown name raises)."""
    return gpu_arch(gpu_model).sm


#: PCIe x16 bandwidth per direction after 128b/130b coding, by generation: 8, 16, 32, 64 GT/s per lane
#: x 16 lanes x 128/130 / 8 (PCI-SIG base specifications); Gen1/2 use 8b/10b.
PCIE_X16_Bps = {1: 4.0e9, 2: 8.0e9, 3: 15.75e9, 4: 31.5e9, 5: 63.0e9, 6: 126.0e9}


def pcie_generation(pcie_bandwidth_Bps: float) -> int:
    """The PCIe generation whose x16 rate is nearest ``server.pcie_bandwidth`` (on a log scale).

    >>> pcie_generation(15.75e9), pcie_generation(31.5e9), pcie_generation(63e9)
    (3, 4, 5)
    """
    return min(PCIE_X16_Bps, key=lambda gen: abs(np.log(PCIE_X16_Bps[gen] / pcie_bandwidth_Bps)))


def nvlink_links(server) -> int:
    """NVLink links per GPU: the per-direction bandwidth over the generation's per-link rate.

    25 GB/s per link on NVLink2-4 (A100 300 GB/s = 12, H100 450 GB/s = 18), 50 GB/s on NVLink5
    (B200 900 GB/s = 18).
    """
    return gpu_arch(server.gpu_model).links_for(server.nvlink_bandwidth)


@dataclass(frozen=True, eq=False)
class CollectiveEstimate:
    """One predicted collective: what NCCL would pick and how long it takes, and why."""

    collective: str
    n_bytes: int
    algorithm: str
    protocol: str
    n_channels: int
    time_s: float
    latency_s: float
    model_bandwidth_time_s: float  # NCCL's own ceiling for this choice
    fabric_time_s: float | None  # the flow engine on the real topology (None if not modelled by flows)
    pipeline_fill_s: float = 0.0  # the first chunk crossing the pipeline; NVLS: the window's second pass
    message_s: float = 0.0  # per-message cost of the busiest NIC's steps (proxy and transport)
    chunk_bytes: int = 0  # bytes one step of one channel carries
    costs: PipelineCosts | None = None  # the parts the time is made of (for calibration)

    @property
    def limited_by(self) -> str:
        if self.fabric_time_s is None or self.fabric_time_s <= self.model_bandwidth_time_s:
            return "nccl"
        return "fabric"


@dataclass(eq=False)
class CollectivePredictor:
    """Predicts collectives on one communicator; caches fabric simulations across sizes.

    ``peers`` are other communicators of the same shape that run the same collective at the same
    time (the DP groups of a training job all reduce their gradients together): their flows share
    the fabric with this one's, so the prediction includes the contention between groups.
    ``background_Bps`` is a per-link load of other traffic (storage reads, another job) that keeps
    its rate; the collective gets what is left. ``max_memory_bytes`` is the caller's memory limit
    (``max_memory``; None: half the machine's memory), which a fabric run holds its all-to-alls to
    (:func:`~gpuwait.fabric.collective.run_plan`).
    """

    comm: Communicator
    env: NcclEnv
    routing: RoutingSpec
    transport: TransportProfile
    peers: tuple[Communicator, ...] = ()
    background_Bps: np.ndarray | None = None
    qps: Setting | None = None  # QPs per connection and where they came from (set by :meth:`create`)
    gpus_per_thread: int = 1  # GPUs one host thread drives (nccl-tests -g): :data:`HOST_ISSUE_PER_GPU_S`
    max_memory_bytes: float | None = None
    _fabric_cache: dict = field(default_factory=dict)

    @classmethod
    def create(cls, comm: Communicator, env: NcclEnv, routing: RoutingSpec, transport: TransportProfile,
               peers: tuple[Communicator, ...] = (), background_Bps: np.ndarray | None = None,
               gpus_per_thread: int = 1, max_memory_bytes: float | None = None) -> CollectivePredictor:
        if runs_on_sockets(transport, env.ib_disable, env.ibext_disable, env.net):
            # NCCL's socket transport, one model for NCCL_IB_DISABLE=1 (unless a plugin keeps the network),
            # NCCL_NET=Socket and a cluster (or tcp-fallback) naming tcp
            transport = socket_transport(transport, env.socket_nthreads, env.nsocks_perthread)
        # NCCL_MNNVL_ENABLE=0: a node per server, and GPUs of different servers talk over the NICs
        mnnvl = env.mnnvl_enable != 0
        comm, peers = comm.with_mnnvl(mnnvl), tuple(p.with_mnnvl(mnnvl) for p in peers)
        # one owner for QPs (collectives.ncclenv.qps_setting): NCCL env, else the cluster file, else NCCL's 1
        qps = qps_setting(env, routing)
        routing = routing.model_copy(update={"qps_per_connection": qps.value})
        if not 1 <= gpus_per_thread <= comm.ppn:
            raise SpecError(f"gpus_per_thread (nccl-tests -g): got {gpus_per_thread}; expected 1 to {comm.ppn}, "
                            "the GPUs of one server that one host thread drives")
        return cls(comm, env, routing, transport, tuple(peers), background_Bps, qps=qps, gpus_per_thread=gpus_per_thread,
                   max_memory_bytes=max_memory_bytes)

    def settings(self) -> list[Setting]:
        """The settings this predictor runs with, each with where it came from (printed by
        ``perf --report-algo`` / ``--json`` as "value (from: ...)")."""
        env, server = self.env, self.comm.topo.spec.server
        arch = gpu_arch(server.gpu_model)
        transport = "socket" if self.transport.name == "tcp" else self.transport.name
        asked = env.ib_disable or env.net == "socket"
        # a cluster that names tcp runs on sockets whatever the job sets: the variable changes nothing there
        by_env = asked and transport == "socket" and self.comm.topo.spec.transport.name != "tcp"
        transport_from = "NCCL env" if by_env else "cluster file"
        if env.ib_disable and transport != "socket":
            transport_from = f"cluster file: its net plugin ({self.transport.net_plugin}) ignores NCCL_IB_DISABLE"
        limits = {"NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_MIN_CTAS", "NCCL_MAX_CTAS", "NCCL_NVLS_NCHANNELS"}
        given = sorted(limits & set(env.explicit))
        # the platform's label when its plugin or image set every limit the job runs with, else the job's env
        owners = {env.set_by.get(name, "NCCL env") for name in given}
        channels = (Setting("channels", "{}-{}".format(*env.channel_limits()), owners.pop() if len(owners) == 1 else "NCCL env")
                    if given else Setting("channels", "auto", "NCCL search graph"))
        settings = [self.qps or qps_setting(env, self.routing),
                    env_setting(env, "NCCL_ALGO", "algo", "NCCL tuning model"),
                    env_setting(env, "NCCL_PROTO", "proto", "NCCL tuning model"),
                    channels,
                    Setting("transport", transport, transport_from),
                    Setting("gpu_arch", f"{arch.name} (sm{arch.sm})", "cluster file: server.gpu_model"),
                    # a release's model stands for every tag up to the next change (2.30.7 runs 2.30.3's)
                    Setting("nccl_version", env.release.covers, env.release_from),
                    Setting("ignored", ", ".join(env.ignored) or "none", "process environment: not modelled"),
                    Setting("no_timing_effect", ", ".join(env.no_timing) or "none", "NCCL env: does not change timing")]
        # only when the cluster carries one: a calibrated overlay is otherwise indistinguishable in the output
        if (calibrated := calibration_note(self.comm.topo.spec)) is not None:
            settings.append(Setting("calibration", calibrated, "cluster file: calibration"))
        return settings

    # ----------------------------------------------------------------- NCCL's view of the node
    def tuning_inputs(self, collective: str) -> TuningInputs:
        topo, comm = self.comm.topo, self.comm
        server = topo.spec.server
        sm = gpu_sm(server.gpu_model)
        links = self._node_nvlink_links()
        nvswitch = server.nvlink_topology == "nvswitch" and links > 0
        if comm.n_nodes == 1:
            ring, graphs = self._single_node_graphs(sm, links, nvswitch)
        else:
            ring, graphs = self._multi_node_graphs(sm, links, nvswitch)
        # Pitfall: the ring's net latency (latencyInter) does not reach the tuning, unlike the tree's and
        # nvls_tree's, though NCCL adds it to every algorithm's network hops (tuning.cc, v2.30.7-1). It is
        # 0 on IB, RoCE and TCP; on EFA (75 us) passing it moves the ring's predictions and choices, a
        # model change to score on the published tables before making.
        inputs = TuningInputs(collective, n_ranks=comm.n_ranks, n_nodes=comm.n_nodes, sm=sm,
                              ring=replace(ring, latency_inter_us=0.0), graphs=graphs,
                              nvls_available="nvls" in graphs or "nvls_tree" in graphs,
                              nvswitch=nvswitch,
                              ll128_enabled=bool(links) and self.transport.rdma and self._ll128_net_path(sm),
                              cpu_arch="arm" if server.cpu_vendor == "arm" else "x86",
                              cpu_vendor="other" if server.cpu_vendor == "arm" else server.cpu_vendor)
        return apply_env(self.env, inputs)

    def _ll128_net_path(self, sm: int) -> bool:
        """Whether the network path of NCCL's graphs passes its check for enabling LL128 by default.

        LL128 needs a NIC path that keeps 128-byte stores whole: NCCL enables it by default only when the
        graph's ``typeInter`` is at most PXB, or on Hopper and later at most PXN (src/graph/tuning.cc
        v2.25.1-1 and v2.26.2-1: "Other cases are not tested and may cause silent data corruption"); from
        v2.27.3-1 also a superchip GPU's own NIC behind its CPU (P2C, while ``NCCL_LL128_C2C`` keeps its
        default 1; v2.28.3-1 to v2.30.7-1 order P2C below PXN and keep the rule). Before 2.27 NCCL had no
        P2C type: that GPU reaches the NIC through its CPU's host bridge, PHB (src/graph/topo.h v2.25.1-1),
        so a GH200 node with its NICs on the Grace CPUs (CSCS Alps, JUPITER) runs without LL128 -- what
        CSCS's NCCL_PROTO=^LL128 says for "nccl 2.27" and later (cscs-docs nccl_env_vars). A network
        staged through host memory (no GPUDirect) crosses the CPU as well (paths.cc ``addInterStep``):
        PHB. One node, or a server without NICs: no network path, no condition.
        """
        comm, server = self.comm, self.comm.topo.spec.server
        if comm.n_nodes == 1 or not server.nics:
            return True
        if self.host_staged_network:
            path = "PHB"
        else:
            local = comm.local_gpu_index(comm.node_ranks[0])
            nic_of = gpu_nic_affinity(server)[:, 0]
            path = max((gpu_nic_path(server, int(g), int(nic_of[g])) for g in local), key=distance)
        if path == "P2C" and not self.env.release.c2c_nic_path:
            path = "PHB"
        if sm >= 90:
            return distance(path) < distance("PHB")  # PXB, PXN and (from 2.27) P2C
        return distance(path) <= distance("PXB")

    def _node_nvlink_links(self) -> int:
        """NVLink links per GPU that NCCL's graphs inside a node can use: none without P2P (the SHM
        transport carries every intra-node byte), and none on NVLink-bridged pairs when a node's ranks
        span more than one pair: NCCL's ring and tree searches need every hop of a node's chain, and the
        hops between pairs are PCIe (paths.cc: a GPU pair without NVLink is a PCI path), so the graph
        runs at the PCIe speed."""
        comm, server = self.comm, self.comm.topo.spec.server
        if not self.p2p:
            return 0
        links = nvlink_links(server)
        if links and server.nvlink_topology == "pairs":
            pair = comm.local_gpu_index(comm.node_ranks[0]) // 2
            if len(np.unique(pair)) > 1 or len(np.unique(comm.rank_server[comm.node_ranks[0]])) > 1:
                return 0
        return links

    def _single_node_graphs(self, sm: int, links: int, nvswitch: bool) -> tuple[Graph, dict[str, Graph]]:
        comm = self.comm
        graphs: dict[str, Graph] = {}
        if not self.p2p and comm.ppn > 1:
            return self._host_path_graph(sm), graphs
        if not (links and comm.ppn > 1):
            return Graph(2, 12.0, 12.0, intra_link="pci"), graphs
        total = nvlink_bw_GBps(sm, links, self.env.release)
        if nvswitch and sm >= 90:
            graphs["nvls"] = nvswitch_nvls_graph(total, sm, comm.ppn, self.env.release)
        return nvswitch_ring_graph(total, sm, self.env.release), graphs

    def _node_nics(self) -> int:
        """NICs NCCL's graphs of one node spread channels over: every NIC of a whole server (or, with
        MNNVL, of every server of the domain), else one per rank."""
        topo, comm = self.comm.topo, self.comm
        # distinct NICs, not GPUs with a NIC: GPUs that share a NIC (2 per NIC on p4d/p4de, hgx-h100-4nic)
        # give NCCL's search one network device per pair, not two
        per_server = len(np.unique(topo.gpu_nics[topo.gpu_nics >= 0]))
        if comm.spans_servers:
            return max(1, round(per_server * comm.ppn / topo.gpus_per_server))
        if comm.ppn == topo.gpus_per_server:
            return max(1, per_server)
        mine = topo.gpu_nics[comm.local_gpu_index(comm.node_ranks[0])]
        return max(1, len(np.unique(mine[mine >= 0])))

    def _multi_node_graphs(self, sm: int, links: int, nvswitch: bool) -> tuple[Graph, dict]:
        comm, server, graphs = self.comm, self.comm.topo.spec.server, {}
        nics = self._node_nics()
        # NCCL reads the port speed (ibv port attributes; /sys/class/net/<if>/speed for sockets): its
        # tuning never sees the TCP ceiling, which the fabric applies per connection
        nic_GBps = net_bw_GBps(server.nic_speed * 8 / 1e6 * server.nic_ports)
        channels = min(32, max(2, 2 * nics))
        per_channel = nic_GBps * nics / channels
        nvlink_total = nvlink_bw_GBps(sm, links, self.env.release) if links else 0.0
        if comm.spans_servers:
            # a channel leaves an MNNVL node through one NIC, and a node's channels all cross every GPU's
            # NVLink once each way (the ring search's intra-node rule), so either can cap a channel
            per_channel = min(per_channel, nic_GBps, nvlink_total / channels)
        intra_link = "nvlink" if links else "pci"
        host = None
        if not self.p2p:
            # SHM between the node's GPUs: NCCL's paths run through the CPU (paths.cc addInterStep), and
            # the search fits its channels to the PCI links as for SHM alone
            host = self._host_path_graph(sm)
        elif self.host_staged_network:
            # no GPUDirect (an RDMA NIC too far from the GPU, or NCCL's socket transport, whose NICs take host
            # memory only: net_socket.cc NCCL_PTR_HOST, so ncclTopoCheckGdr turns GDR off): the GPU<->NIC paths
            # go through the CPU, each channel's in and out
            host = self._host_staged_net_graph(sm)
        if host is not None:
            # the search's channels; ncclTopoPostset doubles a ring's for the kernels (src/graph/connect.cc
            # v2.27.3-1), each run channel carrying half a search channel's bandwidth
            run = min(channels, 2 * host.n_channels)
            channels, per_channel = run, min(per_channel, host.bw_intra_GBps * host.n_channels / run)
        net_lat_us = self.transport.nccl_net_latency_s * 1e6  # the net plugin's latency: NCCL's latencyInter
        ring = Graph(channels, per_channel, per_channel, net_lat_us, intra_link=intra_link)
        if host is not None and not (links and comm.ppn > 1):
            # the tuning reads the search's channels, half those the kernels run
            search = max(1, channels // 2)
            graphs["ring"] = Graph(search, per_channel * channels / search, per_channel * channels / search,
                                   intra_link=intra_link, run_channels=channels)
        if links and comm.ppn > 1:
            # NCCL searches the tree separately, on the ring search's channels (half the ring's here, which
            # counts connect.cc's doubling), at the fastest speed they fit (net_tree_graph)
            graphs["tree"] = self._net_tree_graph(max(1, channels // 2), nics, nic_GBps, nvlink_total, sm,
                                                  net_lat_us, intra_link)
            if channels >= 2:
                # NCCL's tuning reads the ring search's channels (half the ring's here: connect.cc doubles them
                # for the kernels), so per-channel caps such as Ring LL128's apply to those; the latency is
                # left as the ring of TuningInputs has it
                search = channels // 2
                graphs["ring"] = Graph(search, per_channel * channels / search, per_channel * channels / search,
                                       intra_link=intra_link, run_channels=channels)
            if nvswitch and sm >= 90:
                # NVLSTree: one channel per local GPU, NVLS inside the node, the GPU's own NIC between nodes
                nvls = nvswitch_nvls_graph(nvlink_total, sm, comm.ppn, self.env.release)
                inter = nic_GBps * nics / nvls.n_channels
                if comm.spans_servers:
                    inter = min(inter, nic_GBps)  # each NVLS head reaches the network through its own NIC
                path_GBps = min(nic_GBps, pci_bw_GBps(pcie_generation(server.pcie_bandwidth)))
                inter = search_speed_at_most(min(inter, path_GBps), sm, self.env.release)  # a speed the search tries
                graphs["nvls_tree"] = Graph(nvls.n_channels, nvls.bw_intra_GBps, inter, net_lat_us, intra_link="nvlink")
        return ring, graphs

    def _net_tree_graph(self, search_channels: int, nics: int, nic_GBps: float, nvlink_total_GBps: float, sm: int,
                        net_lat_us: float, intra_link: str) -> Graph:
        """NCCL's tree graph on this node (:func:`gpuwait.collectives.tuning.net_tree_graph`) for an NVLink
        budget of ``nvlink_total_GBps`` per GPU."""
        path_GBps = min(nic_GBps, pci_bw_GBps(pcie_generation(self.comm.topo.spec.server.pcie_bandwidth)))
        return net_tree_graph(search_channels, nics, nic_GBps, path_GBps, nvlink_total_GBps, sm, self.env.release,
                              net_lat_us, intra_link)

    def _tree_plateau_alg_GBps(self, inputs: TuningInputs, protocol: str, n_bytes: int, nccl_GBps: float) -> float:
        """The tree's plateau the hardware can reach: NCCL's own tree estimate (tuning.cc: channels x
        per-channel speed x 0.92, at most ``perChMaxTreeBws`` per channel, x 0.5 bus to algorithm), with the
        graph's per-channel speed searched against the GPU's datasheet NVLink rate instead of NCCL's
        planning figure (topo.h v2.30.7-1: ``SM80_NVLINK_BW`` 20 GB/s per link, against NVLink 3's
        25 GB/s per direction, NVIDIA A100 datasheet; ``SM90_NVLINK_BW`` 20.6 against NVLink 4's 25).

        NCCL's search stops raising a tree's intra-node speed when its channels would exceed the planning
        figure; the figure steers NCCL's choice, not the links: an A100 tree between 2 nodes of 16 x 100G
        RoCE runs at 238 GB/s busbw where NCCL's estimate says 207 (oracle-quickstart/oci-hpc-oke
        README, BM.GPU4.8). The measured per-channel caps and the 0.92 stay: they are NCCL's measured
        throughput of one channel's kernel. Nodes with only the planning figure (no NVLink, or one node)
        keep NCCL's estimate, and so do LL and LL128 (the caller asks for Simple only): their threads poll
        a flag in every line, which bounds a channel below the link (NCCL's own /3.8 and 120/128 and
        per-channel LL128 caps); the same OCI run's tree/LL128 goes from 128 to 256 MiB at 89 GB/s algbw,
        under even NCCL's planning estimate of 103.5."""
        server, comm = self.comm.topo.spec.server, self.comm
        graph = inputs.graphs.get("tree")
        links = self._node_nvlink_links()
        if graph is None or comm.n_nodes < 2 or not links or comm.spans_servers or server.nvlink_topology == "mesh":
            return nccl_GBps
        sm = gpu_sm(server.gpu_model)
        datasheet_GBps = server.nvlink_bandwidth / 1e9
        if datasheet_GBps <= nvlink_bw_GBps(sm, links, self.env.release):
            return nccl_GBps
        nic_GBps = net_bw_GBps(server.nic_speed * 8 / 1e6 * server.nic_ports)
        searched = self._net_tree_graph(graph.n_channels, self._node_nics(), nic_GBps, datasheet_GBps, sm,
                                        graph.latency_inter_us, graph.intra_link)
        physical = replace(graph, bw_intra_GBps=max(graph.bw_intra_GBps, searched.bw_intra_GBps))
        found = predict(replace(inputs, graphs={**inputs.graphs, "tree": physical}), "tree", protocol, n_bytes)
        return max(nccl_GBps, found.plateau_alg_bw_GBps) if found.supported else nccl_GBps

    @property
    def p2p(self) -> bool:
        """Whether NCCL's P2P transport links the node's GPUs: the server allows CUDA peer access
        (``server.gpu_p2p``), ``NCCL_P2P_DISABLE`` is not set and every pair of the node's GPUs is within
        ``NCCL_P2P_LEVEL`` (:func:`gpuwait.topology.pcipath.uses_p2p`). Otherwise NCCL uses SHM through host memory."""
        server = self.comm.topo.spec.server
        if not server.gpu_p2p or self.env.p2p_disable:
            return False
        local = self.comm.local_gpu_index(self.comm.node_ranks[0])
        if len(np.unique(self.comm.rank_server[self.comm.node_ranks[0]])) > 1:
            return True  # an MNNVL node: its GPUs meet on the domain's NVSwitch
        return uses_p2p(server, local, self.env.p2p_level)

    @property
    def gdr(self) -> bool:
        """Whether the NICs read and write the node's GPUs directly (GPUDirect RDMA), both ways, as NCCL's
        ``ncclTopoCheckGdr`` decides from the GPU-NIC path (:func:`gpuwait.topology.pcipath.node_uses_gdr`);
        otherwise the proxy stages the network through host memory. Sockets never use it. A superchip GPU's NIC
        on its own CPU counts as C2C (GPUDirect at the default level) from v2.27.3-1 (``NCCL_NET_GDR_C2C``
        default 1); v2.25.1-1 has no such case and v2.26.2-1 has it off by default (``NET_GDR_C2C`` 0), so
        there the path is PHB and needs ``NCCL_NET_GDR_LEVEL=PHB`` (what CSCS's Alps settings set)."""
        if not self.transport.rdma:
            return False
        return node_uses_gdr(self.comm.topo.spec.server, self.comm.local_gpu_index(self.comm.node_ranks[0]),
                             self.env.net_gdr_level, self.env.net_gdr_read,
                             gdr_c2c=self.env.release.c2c_nic_path)

    @property
    def host_staged_network(self) -> bool:
        """Whether the network bytes stop in host memory: NCCL's socket transport (net_socket.cc
        declares ``NCCL_PTR_HOST`` only) or an RDMA NIC without GPUDirect to the node's GPUs (net.cc puts
        the buffers in host memory, paths.cc routes the GPU<->NIC path through the GPU's CPU). The GPU's
        kernel writes and reads those buffers itself (no extra copy), so each byte crosses the GPU's PCIe
        once; what changes is the path: a PCIe switch holding both the GPU and its NIC carries it twice.
        GPUDirect-TCPX/TCPXO land the payload in GPU memory and are not staged."""
        return self.transport.name == "tcp" or (self.transport.rdma and not self.gdr)

    def _shm_time_s(self, collective: str, n_bytes: int, algorithm: str = "direct", protocol: str = "Simple") -> float:
        """The time a node's GPUs without P2P take to move their bytes to each other through host memory
        (SHM). Each GPU's bytes to a local peer go up its PCIe link into the CPU and down again: one GPU's
        PCI path through the CPU at NCCL's figure for it (:func:`host_pci_path_GBps`: its PCI bandwidth, with
        Intel's 6/5 only while a hop stays on one socket, as search.cc ``followPath`` charges it; not the
        speed the search rounds that down to, which plans channels and is no rate) bounds every GPU's bytes
        per second one way; the fabric charges the links, a PCIe switch's shared uplink among them, at their
        line rate. A GPU that sends and receives through host memory at once keeps ``SHM_BIDIRECTIONAL_SHARE``
        of that each way (NVIDIA/nccl#384, a GPU's path into its CPU): every p2p call and ring collective here
        but a two-rank Broadcast or Reduce, whose bytes flow one way. When the ring crosses sockets, NCCL's
        socket link (:func:`inter_cpu_bw_GBps`) caps it too, per direction (followPath charges a path forward
        only; shm.cc v2.27.3-1 puts the buffer on the receiver's socket, NCCL_SHM_LOCALITY, so each byte
        crosses once). A ring's SHM hop carries what every
        hop carries, the bus bytes (nccl-tests' busbw factor x size), in the protocol's lines: SHM's LL and
        LL128 buffers sit in host memory like Simple's (``shmRecvSetup`` sizes one buffer per protocol,
        src/transport/shm.cc v2.27.3-1), so their flags cross the PCIe links with the data (LL 8 of 16 bytes,
        LL128 120 of 128: :data:`PROTOCOL_PAYLOAD`), as the fabric's links already count them. A ring with one
        GPU per node and its network staged through host memory (:meth:`_staged_ring_alone`) pays the same:
        that GPU's path carries the ring both ways too. 0 otherwise when the GPUs use P2P, or for algorithms
        other than ring and the p2p path."""
        comm, server = self.comm, self.comm.topo.spec.server
        staged_alone = self._staged_ring_alone(algorithm)
        if (not staged_alone and (self.p2p or comm.ppn < 2)) or n_bytes <= 0:
            return 0.0
        local_bytes: float
        if collective == "sendrecv":
            # rank r sends to r + 1 (nccl-tests sendrecv): with two or more GPUs per node, on any node count,
            # some pair is local and moves all its bytes through host memory
            local_bytes = n_bytes
        elif algorithm == "direct":
            local_bytes = n_bytes * (comm.ppn - 1) / comm.n_ranks
        elif algorithm == "ring":
            local_bytes = n_bytes * busbw_factor(collective, comm.n_ranks)
        else:
            return 0.0
        one_way = collective in ("broadcast", "reduce") and comm.n_ranks == 2
        share = 1.0 if one_way else SHM_BIDIRECTIONAL_SHARE
        # a lone GPU's hops go to and from its NIC: through one socket (PATH_PHB) unless the NIC is on the other
        same_socket = not self._crosses_sockets() if staged_alone else self._same_socket_hops()
        # NCCL's figure for one GPU's PCI path, not the speed its search rounds it down to (a plan, not a rate)
        rate_GBps = share * host_pci_path_GBps(pci_bw_GBps(pcie_generation(server.pcie_bandwidth)), 1,
                                               server.cpu_vendor == "intel", same_socket)
        inter_cpu = inter_cpu_bw_GBps(server.cpu_vendor, server.cpu_generation, self.env.release)
        if inter_cpu is not None and self._crosses_sockets():
            rate_GBps = min(rate_GBps, inter_cpu)  # NCCL's socket link, each direction (followPath: forward only)
        wire_bytes = local_bytes / PROTOCOL_PAYLOAD[protocol]
        return wire_bytes / (rate_GBps * 1e9)

    def _staged_ring_alone(self, algorithm: str) -> bool:
        """Whether a ring's only GPU per node both receives the ring from the network and sends it on
        through host memory (the network staged without GPUDirect, or NCCL's socket transport): its PCI path
        into the CPU then carries the ring's bytes both ways, as SHM's does (NVIDIA/nccl#384's condition). A
        GPU reaching its CPU over NVLink-C2C (``gpu_host_bandwidth``) has no PCIe path there."""
        comm, server = self.comm, self.comm.topo.spec.server
        return (algorithm == "ring" and comm.ppn == 1 and comm.n_nodes > 1 and self.host_staged_network
                and not server.gpu_host_bandwidth)

    def _first_node_gpu_switches(self) -> np.ndarray:
        """The PCIe switch above each GPU of this communicator's first node (its PCIe uplink's end)."""
        topo = self.comm.topo
        gpus = self.comm.rank_gpu[self.comm.rank_node == self.comm.nodes[0]]
        return topo.link_dst[(topo.link_kind == LinkKind.PCIE) & np.isin(topo.link_src, gpus)]

    def _host_staged_net_graph(self, sm: int) -> Graph:
        """NCCL's inter-node ring graph without GPUDirect RDMA (:func:`host_staged_net_ring_graph`) for this
        communicator's first node: PCI bandwidth from the server's PCIe generation, over the PCIe switches
        that hold both its GPUs and NICs, or, when none does (GPUs and NICs on separate root ports), over
        the node's NICs, each channel's paths then sharing no link in the same direction."""
        topo, server = self.comm.topo, self.comm.topo.spec.server
        pcie = topo.link_kind == LinkKind.PCIE
        gpu_switches = np.unique(self._first_node_gpu_switches())
        nic_switches = np.unique(topo.link_dst[pcie & (topo.node_kind[topo.link_src] == NodeKind.NIC)])
        switches = np.intersect1d(gpu_switches, nic_switches)
        groups = len(switches) or min(self._node_nics(), self.comm.ppn)
        # a superchip's GPU reaches its CPU over NVLink-C2C (gpu_host_bandwidth), not through the NIC's
        # switch: only the NIC's PCIe link carries both of a channel's paths, one each way
        shared_uplink = len(switches) > 0 and not server.gpu_host_bandwidth
        return host_staged_net_ring_graph(pci_bw_GBps(pcie_generation(server.pcie_bandwidth)), max(groups, 1),
                                          sm, intel_cpu=server.cpu_vendor == "intel", release=self.env.release,
                                          nic_beside_gpu=shared_uplink)

    def _host_path_graph(self, sm: int) -> Graph:
        """NCCL's ring graph through the CPU (:func:`host_path_ring_graph`) for the GPUs of this
        communicator's first node: PCI bandwidth from the server's PCIe generation, ``k`` = most of
        them behind one PCIe switch, and NCCL's socket link
        (:func:`inter_cpu_bw_GBps`) when the ring crosses sockets (:meth:`_crosses_sockets`)."""
        server = self.comm.topo.spec.server
        per_switch = np.unique(self._first_node_gpu_switches(), return_counts=True)[1]
        inter_cpu = inter_cpu_bw_GBps(server.cpu_vendor, server.cpu_generation, self.env.release)
        return host_path_ring_graph(pci_bw_GBps(pcie_generation(server.pcie_bandwidth)), int(max(per_switch, default=1)),
                                    sm, intel_cpu=server.cpu_vendor == "intel", release=self.env.release,
                                    inter_cpu_GBps=inter_cpu if self._crosses_sockets() else None,
                                    same_socket_hops=self._same_socket_hops())

    def _same_socket_hops(self) -> bool:
        """Whether a GPU->GPU hop of the first node's ring stays on one CPU socket (a PATH_PHB path, which
        NCCL charges Intel's 6/5): some socket holds two of its GPUs. With one GPU per socket every hop is
        PATH_SYS (:func:`host_pci_path_GBps`)."""
        local = self.comm.local_gpu_index(self.comm.node_ranks[0])
        return sockets(self.comm.topo.spec.server, local) < len(local)

    def _crosses_sockets(self) -> bool:
        """Whether a ring channel of the first node crosses between CPU sockets: its GPUs hang from more
        than one socket, or (between nodes) a GPU and its NIC do -- without GPUDirect every network byte
        goes through the GPU's own CPU (paths.cc ``addInterStep``), so a NIC on the other socket adds the
        crossing. One server's GPUs only (an MNNVL node spans servers and never comes here)."""
        comm, server = self.comm, self.comm.topo.spec.server
        if len(np.unique(comm.rank_server[comm.node_ranks[0]])) > 1:
            return False
        local = comm.local_gpu_index(comm.node_ranks[0])
        nics: tuple[int, ...] | np.ndarray = ()  # the first node's NICs, when the ring leaves the node
        if comm.n_nodes > 1 and server.nics:
            nics = np.unique(gpu_nic_affinity(server)[local, 0])
        return sockets(server, local, nics) > 1

    def _channels(self, graph_channels: int, algorithm: str = "ring") -> int:
        """The channels a call runs on: the graph's, clamped by the channel limits; NVLS and NVLSTree run
        NCCL's NVLS compute channels instead (``NCCL_NVLS_NCHANNELS``, else the release's default for the GPU, clamped to
        [NCCL_MIN_CTAS, NCCL_MAX_CTAS]: transport/nvls.cc; enqueue.cc ``nc = comm->nvlsChannels``,
        NVIDIA/nccl v2.18.1-1 to v2.30.7-1), whatever the graph's head count."""
        nvls = algorithm in ("nvls", "nvls_tree")
        lo, hi = self.env.channel_limits(nvls=nvls)
        if nvls:
            graph_channels = self.env.nvls_nchannels or self.env.release.nvls_channels(
                gpu_sm(self.comm.topo.spec.server.gpu_model), self.comm.n_nodes)
        return max(lo, min(hi, graph_channels))

    @staticmethod
    def channel_shortfall(graph_channels: int, channels: int) -> float:
        """How much slower NCCL's plateau runs on ``channels`` than on the ``graph_channels`` its search
        found: each channel (one CUDA block) carries at most the graph's per-channel bandwidth, and NCCL's
        cost model (tuning.cc: busBw = nChannels x bw) prices the found graph, not the channel limit
        (NCCL_MAX_NCHANNELS / NCCL_MAX_CTAS apply later, src/graph/connect.cc v2.30.7-1). Extra channels
        above the graph's share its links, so they never speed it up."""
        return max(1.0, graph_channels / max(channels, 1))

    # ----------------------------------------------------------------- the fabric
    def _capacity_Bps(self, algorithm: str, protocol: str) -> np.ndarray:
        topo = self.comm.topo
        capacity = effective_capacity_Bps(topo, self.transport)
        server = topo.spec.server
        links = nvlink_links(server)
        nvlink = topo.link_kind == LinkKind.NVLINK
        if links:
            sm = gpu_sm(server.gpu_model)
            nccl_Bps = nvlink_bw_GBps(sm, links, self.env.release) * 1e9
            if server.nvlink_topology == "mesh":
                nccl_Bps /= max(topo.gpus_per_server - 1, 1)
            if algorithm in ("nvls", "nvls_tree"):
                nccl_Bps *= NVLS_EFFICIENCY[2 if sm < 100 else 3]
            capacity[nvlink] = np.minimum(capacity[nvlink], nccl_Bps)
        if self.background_Bps is not None:
            # other traffic keeps its rate; never below a sliver, so a saturated link stays finite
            capacity = np.maximum(capacity - self.background_Bps, BACKGROUND_FLOOR * capacity)
        return capacity * PROTOCOL_PAYLOAD[protocol]

    def _plan(self, collective: str, n_bytes: float, algorithm: str, n_channels: int) -> Plan:
        """The collective compiled for this communicator and its peers, phase by phase together."""
        plans = [compile_collective(c, collective, n_bytes, algorithm, n_channels) for c in (self.comm, *self.peers)]
        if len(plans) == 1:
            return plans[0]
        phases = tuple(Phase(group[0].name, np.concatenate([p.src for p in group]),
                             np.concatenate([p.dst for p in group]),
                             np.concatenate([p.bytes_per_flow for p in group]), group[0].repeat,
                             sum((p.pair_sets for p in group), ()))
                       for group in zip(*(p.phases for p in plans)))
        return replace(plans[0], phases=phases)

    def fabric_run(self, collective: str, algorithm: str, protocol: str, n_channels: int) -> tuple[float, PlanRun]:
        """(seconds per byte, the phases' run) of one compiled collective, simulated once and cached."""
        key = (collective, algorithm, protocol, n_channels)
        if key not in self._fabric_cache:
            plan = self._plan(collective, _REF_BYTES, algorithm, n_channels)
            run = run_plan(self.comm.topo, plan, self.routing, self.transport, self._capacity_Bps(algorithm, protocol),
                           via_host=not self.p2p, nvlink_domains=self.comm.mnnvl, stage_network=self.host_staged_network,
                           max_memory_bytes=self.max_memory_bytes)
            self._fabric_cache[key] = (run.bandwidth_time_s / _REF_BYTES, run)
        return self._fabric_cache[key]

    def fabric_key(self, collective: str, n_bytes: int) -> tuple[str, str, str, int] | None:
        """The (collective, algorithm, protocol, channels) :meth:`estimate` runs on the fabric for one call,
        or None: NCCL's choice alone, for counting a sweep's memory before any run (gpuwait.fabric.memory)."""
        if self.comm.n_ranks < 2 or n_bytes <= 0:
            return None
        if collective in ("alltoall", "sendrecv"):
            return collective, "p2p" if collective == "sendrecv" else "direct", self._p2p_protocol(collective, n_bytes)[1], 1
        inputs, algorithm, protocol, _ = self._choice(collective, n_bytes)
        if algorithm not in FLOW_ALGORITHMS:
            return None
        return collective, FLOW_ALGORITHMS[algorithm], protocol, self._channels(inputs.graph(algorithm).channels_run,
                                                                                algorithm)

    def fabric_counts(self, key: tuple[str, str, str, int]) -> list:
        """Per phase, what :meth:`fabric_run` of ``key`` allocates (:func:`gpuwait.fabric.memory.plan_counts`)."""
        from gpuwait.fabric.memory import plan_counts

        collective, algorithm, _, n_channels = key
        flags = {"via_host": not self.p2p, "nvlink_domains": self.comm.mnnvl, "stage_network": self.host_staged_network}
        return plan_counts(self.comm.topo, self._plan(collective, _REF_BYTES, algorithm, n_channels), self.routing,
                           self.transport.name, flags)

    def fabric_time_s(self, collective: str, n_bytes: float, algorithm: str, protocol: str, n_channels: int) -> float:
        return self.fabric_run(collective, algorithm, protocol, n_channels)[0] * n_bytes

    def link_bytes(self, estimate: CollectiveEstimate) -> np.ndarray:
        """Bytes each link carries during one call of ``estimate`` (this group and its peers)."""
        algorithm = estimate.algorithm if estimate.algorithm in ("direct", "p2p") else FLOW_ALGORITHMS.get(estimate.algorithm)
        if algorithm is None or estimate.fabric_time_s is None:
            return np.zeros(self.comm.topo.n_links)
        return self._link_bytes_per_ref(estimate.collective, algorithm, estimate.protocol, estimate.n_channels) * (
            estimate.n_bytes / _REF_BYTES)

    def _link_bytes_per_ref(self, collective: str, algorithm: str, protocol: str, n_channels: int) -> np.ndarray:
        """Bytes each link carries in the cached simulation of a reference-size call."""
        _, run = self.fabric_run(collective, algorithm, protocol, n_channels)
        return sum((p.link_bytes() for p in run.phases), np.zeros(self.comm.topo.n_links))

    def link_peak_Bps(self, estimate: CollectiveEstimate) -> np.ndarray | None:
        """Per link, the highest rate it carries in any phase of ``estimate`` (None if not simulated)."""
        algorithm = estimate.algorithm if estimate.algorithm in ("direct", "p2p") else FLOW_ALGORITHMS.get(estimate.algorithm)
        if algorithm is None or estimate.fabric_time_s is None:
            return None
        per_byte_s, run = self.fabric_run(estimate.collective, algorithm, estimate.protocol, estimate.n_channels)
        if not run.phases:
            return np.zeros(self.comm.topo.n_links)
        # a fluid phase's rates do not depend on its size; NCCL's own ceiling or the SHM path (both in the
        # estimate's times, not in the run) may slow it further
        slowdown = max(estimate.fabric_time_s, estimate.model_bandwidth_time_s) / max(per_byte_s * estimate.n_bytes,
                                                                                     1e-30)
        return np.max([p.link_load_Bps() for p in run.phases], axis=0) / slowdown

    def nic_bytes_per_byte(self, collective: str, algorithm: str, protocol: str, n_channels: int) -> float:
        """Bytes the busiest compute-network NIC port sends plus receives per byte of the collective."""
        key = ("nic", collective, algorithm, protocol, n_channels)
        if key not in self._fabric_cache:
            topo = self.comm.topo
            per_link = self._link_bytes_per_ref(collective, algorithm, protocol, n_channels)
            # a NIC's port is two links (out to its switch, back in): add them per NIC
            src_nic = topo.node_kind[topo.link_src] == NodeKind.NIC
            dst_nic = topo.node_kind[topo.link_dst] == NodeKind.NIC
            nic = np.where(src_nic, topo.link_src, np.where(dst_nic, topo.link_dst, -1))
            nic[topo.link_kind != LinkKind.HOST] = -1
            busiest = 0.0
            if (nic >= 0).any():
                busiest = float(np.bincount(nic[nic >= 0], weights=per_link[nic >= 0]).max())
            self._fabric_cache[key] = busiest / _REF_BYTES
        return self._fabric_cache[key]

    @property
    def params(self) -> PhysicalParams:
        """The cluster's physical parameters (:mod:`gpuwait.collectives.physical`)."""
        return physical_params(self.comm.topo.spec, self.transport)

    # ----------------------------------------------------------------- one collective
    def estimate(self, collective: str, n_bytes: int) -> CollectiveEstimate:
        """What one call costs: NCCL's choice, then the hardware's time for it, pipelined.

        time = latency (NCCL's hop latencies + the calibrated extra per step) + the slowest of: NCCL's
        plateau, the flow engine on the real fabric, and the per-message cost of the busiest NIC's steps
        (LogGP's overhead *o* per message, which overlaps the previous message's transmission:
        Alexandrov et al., SPAA 1995; NCCL's one proxy thread per GPU posts every network step) + the
        first chunk's trip through the pipeline.
        """
        if collective in ("alltoall", "sendrecv"):
            return self._p2p_estimate(collective, n_bytes)
        inputs, algorithm, protocol, prediction = self._choice(collective, n_bytes)
        comm = self.comm
        plateau = prediction.plateau_alg_bw_GBps or prediction.alg_bw_GBps
        if algorithm == "tree" and protocol == "Simple":
            # LL/LL128 channels are bounded by their flag polling, not the link (_tree_plateau_alg_GBps)
            plateau = self._tree_plateau_alg_GBps(inputs, protocol, n_bytes, plateau)
        model_s = n_bytes / (plateau * 1e9) if n_bytes > 0 and comm.n_ranks > 1 else 0.0
        model_s *= tree_pair_share(algorithm, comm.n_ranks)
        graph = inputs.graph(algorithm)
        channels = self._channels(graph.channels_run, algorithm)
        reference = graph.channels_run  # NCCL_MAX_NCHANNELS below the graph's slows NCCL's plateau
        if algorithm in ("nvls", "nvls_tree"):
            # NVLS's compute channels are not its graph's heads: its cost model assumes NCCL's default
            # count (nvls.cc), so only CTA limits below that slow it
            reference = self.env.release.nvls_channels(inputs.sm, comm.n_nodes)
        model_s *= self.channel_shortfall(reference, channels)
        fabric_s = None
        if algorithm in FLOW_ALGORITHMS and comm.n_ranks > 1 and n_bytes > 0:
            # the SHM path through host memory is part of the hardware the bytes cross, as for p2p calls
            fabric_s = max(self.fabric_time_s(collective, n_bytes, FLOW_ALGORITHMS[algorithm], protocol, channels),
                           self._shm_time_s(collective, n_bytes, algorithm, protocol),
                           self._nvls_kernel_time_s(inputs, algorithm, n_bytes) * self.channel_shortfall(reference,
                                                                                                       channels))
        # small calls run on fewer channels, so each step carries more
        size_channels = channels_for_size(algorithm, protocol, n_bytes, channels, comm.n_ranks)
        # NVLS heads: one per NVLS graph channel, at most NCCL_MAX_NVLS_ARITY of a node's (or MNNVL domain's)
        # GPUs (search.cc maxChannels; connect.cc connectNvls nHeads), so a 72-GPU domain has 32, not 72
        chunk = chunk_bytes(collective, algorithm, protocol, n_bytes, n_channels=size_channels, n_ranks=comm.n_ranks,
                            n_nodes=comm.n_nodes, nvls_heads=min(comm.ppn, NCCL_MAX_NVLS_ARITY),
                            nvls_tree_chunk=(self.env.release.nvls_tree_first_chunk_bytes,
                                             self.env.release.nvls_tree_chunk_4_nodes_bytes))
        nic_messages = connection_steps = 0.0
        if fabric_s is not None and comm.n_nodes > 1:
            nic_messages = self.nic_bytes_per_byte(collective, FLOW_ALGORITHMS[algorithm], protocol, channels) * n_bytes / chunk
            # the busiest NIC carries a send and a receive connection for each channel NCCL puts on it
            connection_steps = nic_messages / (2 * max(1.0, size_channels / self._node_nics()))
        fill_intra_s, fill_inter_s, window = self._fill_s(inputs, collective, algorithm, protocol, n_bytes, chunk,
                                                          channels)
        intra_steps, inter_steps = latency_steps(algorithm, collective, comm.n_ranks, comm.n_nodes)
        if nic_messages:
            nic_messages = max(nic_messages, self._chain_messages(inter_steps)) * self._message_cost_factor(chunk,
                                                                                                          protocol)
        load = self._proxy_load(algorithm, size_channels, graph.channels_run)
        if algorithm == "ring" and connection_steps:
            connection_steps = ring_connection_steps(intra_steps + inter_steps, n_bytes, size_channels, comm.n_ranks,
                                                     chunk, ring_slices(collective, protocol), load)
        else:
            # any other pattern's first chunk is NCCL's latency term
            connection_steps = max(0.0, connection_steps - 1)
        wire_s = max(model_s, fabric_s or 0.0)
        if nic_messages:
            wire_s = max(wire_s, self._rail_bound_s(collective, n_bytes, algorithm, protocol, channels, size_channels,
                                                    chunk),
                         self._staged_receive_s(collective, n_bytes, algorithm, protocol, channels, size_channels, chunk))
        serial_s = serial_messages = 0.0
        if nic_messages:
            serial_s = self._connection_serial_s(collective, n_bytes, algorithm, protocol, channels, size_channels,
                                                 chunk)
            # one connection's sends and receives: the NIC's over the connections that share it
            serial_messages = nic_messages / self._nic_in_flight(collective, n_bytes, algorithm, protocol,
                                                                 size_channels, chunk)[0] if serial_s else 0.0
        rendezvous_latency_s, rendezvous_serial_s, match_passes = self._rendezvous_s(
            protocol, chunk, inter_steps, serial_messages) if nic_messages else (0.0, 0.0, 0.0)
        connection_steps += match_passes
        # the time's network steps cost the algorithm's own figure, not NCCL's ppn=1 rule (module docstring, 1.)
        costs = PipelineCosts(prediction.own_net_latency_us * 1e-6, intra_steps, inter_steps, wire_s,
                              nic_messages, fill_intra_s, fill_inter_s, window, comm.n_nodes > 1, connection_steps, load,
                              serial_s=serial_s, serial_messages=serial_messages,
                              rendezvous_latency_s=rendezvous_latency_s, rendezvous_serial_s=rendezvous_serial_s,
                              sm80_steps=generation_steps(inputs.sm, intra_steps, inter_steps))
        return self._estimate(collective, n_bytes, algorithm, protocol, channels, model_s, fabric_s, chunk, costs)

    def _fill_s(self, inputs: TuningInputs, collective: str, algorithm: str, protocol: str, n_bytes: int, chunk: int,
                channels: int) -> tuple[float, float, float]:
        """The first chunk's trip through the pipeline's hops inside servers and across the network (s), and the
        share of the call NVLS's window pays a second time (0 for every other algorithm)."""
        comm = self.comm
        if n_bytes <= 0 or comm.n_ranks <= 1:
            return 0.0, 0.0, 0.0
        depth_intra, depth_inter = pipeline_depth(algorithm, collective, comm.n_ranks, comm.n_nodes)
        fill_intra_s = depth_intra * intra_hop_bytes(algorithm, protocol, chunk) / (
            self._fill_intra_GBps(inputs, algorithm, protocol) * 1e9)
        fill_inter_s = depth_inter * chunk / (self._fill_inter_GBps(inputs.graph(algorithm), algorithm, channels) * 1e9)
        # NVLS's window pays a second pass on NVLink (module docstring, 4.); NVLSTree's wire term is
        # the NICs' or its kernel's rate, never NVLink's, so that pass is not charged: its start-up is the
        # tree's fill above
        window = min(n_bytes, nvls_window_bytes(channels)) / n_bytes if algorithm == "nvls" else 0.0
        return fill_intra_s, fill_inter_s, window

    def _chain_messages(self, inter_steps: int) -> int:
        """The socket calls on the first chunk's way across the network: a ``send`` by the proxy on one side
        and a ``recv`` by the proxy on the other for each of NCCL's ``inter_steps`` network crossings, one
        after the other (the next crossing waits for this one's data). LogGP's one-way time of a message is
        o + L + o (Alexandrov et al., SPAA 1995), so they count whatever the busiest NIC's share of the call's
        bytes (a tree's 8 B call is half a message on each NIC by bytes, yet every crossing is a whole message).

        0 on RDMA transports: NCCL's network hop latencies (``hwLat[NCCL_HW_NET]``, src/graph/tuning.cc) are
        its own IB transport's, whose verbs post and completion poll they already hold; NCCL's socket
        transport pays a system call at each end instead (``ncclNetSocketIsend`` / ``ncclNetSocketTest``,
        src/transport/net_socket.cc v2.27.3-1), which its latency table does not price.
        """
        return 0 if self.transport.rdma else 2 * inter_steps

    def _message_cost_factor(self, chunk: int, protocol: str) -> float:
        """What one network message of this call costs in units of the transport's flat per-message overhead:
        1 unless the cluster file carries a measured size -> time curve of its socket path
        (:func:`gpuwait.transport.socket.message_time_s`), read at the message's bytes on the wire (an LL line
        carries 8 B of flags with each 8 B of data: ``PROTOCOL_PAYLOAD``). The counts of messages scale by it,
        so every term that prices them (the busiest NIC's, one connection's series) pays the curve."""
        if not self.transport.message_curve or chunk <= 0:
            return 1.0
        wire_bytes = chunk / PROTOCOL_PAYLOAD[protocol]
        return message_time_s(self.transport, wire_bytes) / self.transport.message_overhead_s

    @staticmethod
    def _nvls_kernel_time_s(inputs: TuningInputs, algorithm: str, n_bytes: int) -> float:
        """The NVLS / NVLSTree kernel's own time for ``n_bytes`` at the rate NVIDIA measured for it
        (:func:`gpuwait.collectives.tuning.nvls_kernel_alg_GBps`: NCCL 2.28.3's figures, which describe the
        kernel of every release since 2.19); 0 for other algorithms. The flow run prices the NVLink bytes
        of NVLS; what else holds an NVLSTree channel below its links (its warps split four ways between
        scatter, gather, the NVLS reduce and the network) only this measured rate carries."""
        if algorithm not in ("nvls", "nvls_tree"):
            return 0.0
        return n_bytes / (nvls_kernel_alg_GBps(inputs, algorithm) * 1e9)

    def _rendezvous_s(self, protocol: str, chunk: int, inter_steps: int,
                      serial_messages: float) -> tuple[float, float, float]:
        """The transport's rendezvous round trips (:meth:`TransportProfile.rendezvous_s`, per message of one step:
        the chunk and, for LL and LL128, its flags) on the first chunk's way across the network and in one
        connection's series of messages: (latency, serial) seconds, and the proxy passes the Gets wait for.

        Every network crossing of the first chunk (``inter_steps``, NCCL's latency chain) is a message and pays
        one. A connection that keeps several messages in flight overlaps the later ones' round trips with the
        next messages; one with a single message in flight (``serial_messages``: its sends and receives, two
        per message) waits for each of its other messages' too before its next step.

        A provider that matches in software (:attr:`TransportProfile.rendezvous_software_match`) issues each of
        those Gets only when the receiver's progress runs: aws-ofi-nccl progresses libfabric when NCCL's proxy
        thread tests a request, once per pass over the GPU's connections (``recvProxyProgress``,
        src/transport/net.cc v2.30.7-1), so a header that lands at a random point of the pass waits half a
        pass for its Get. Those half passes join the connection's step cycles (``connection_steps``, in passes:
        :func:`gpuwait.collectives.physical.pipelined_time_s`).
        """
        round_trip_s = self.transport.rendezvous_s(chunk / PROTOCOL_PAYLOAD[protocol])
        # the connection's other messages (two calls each), whose Gets it waits for one after the other
        serial_gets = max(0.0, serial_messages / 2 - inter_steps)
        return inter_steps * round_trip_s, serial_gets * round_trip_s, self._match_passes(inter_steps + serial_gets,
                                                                                           round_trip_s)

    def _match_passes(self, gets: float, round_trip_s: float) -> float:
        """The receiver's proxy passes ``gets`` rendezvous Gets wait for: half a pass each when the provider
        matches in software (:meth:`_rendezvous_s`), none when the NIC issues them or there is no rendezvous."""
        return 0.5 * gets if round_trip_s and self.transport.rendezvous_software_match else 0.0

    def _fill_intra_GBps(self, inputs: TuningInputs, algorithm: str, protocol: str) -> float:
        """The rate the first chunk crosses one hop inside a node at: for a tree over NVLink, one channel's
        ceiling in NCCL's model (``perChMaxTreeBws``, ``perChMaxTreeLL128Bws`` for LL128; src/graph/tuning.cc,
        NVIDIA/nccl v2.18.3-1 to v2.30.7-1), else the graph's per-run-channel intra speed.

        The search's intra speed is a bandwidth it reserves on the node's links for the channel, and for a
        tree it stops near the NIC's speed class (``net_tree_graph``: 6 GB/s beside a 25 Gbit/s NIC). The
        first chunk crosses an idle NVLink hop alone, at what one channel moves, which NCCL's model caps
        at the per-channel figure; on a PCI node the hop is the PCI path the graph already prices. LL's tree
        figure is a whole-call cap (``llMaxBws``), not a channel's, so LL keeps the graph's speed.
        """
        graph = inputs.graph(algorithm)
        tables = {"Simple": inputs.release.per_channel_max_tree_bw_GBps,
                  "LL128": inputs.release.per_channel_max_tree_ll128_bw_GBps}
        if algorithm != "tree" or graph.intra_link != "nvlink" or protocol not in tables:
            return graph.run_bw_GBps(inter=False)
        nodes = min(self.comm.n_nodes, 3) - 1  # NCCL's index2: nNodes <= 2 ? nNodes - 1 : 2
        return tables[protocol][inputs.release.compcap_index(inputs.sm)][nodes]

    @staticmethod
    def _fill_inter_GBps(graph: Graph, algorithm: str, channels: int) -> float:
        """The rate one channel's first chunk crosses a network hop at: the NIC's share for that channel.

        A ring or tree channel leaves the node through one NIC, which the graph's run channels share
        (:meth:`Graph.run_bw_GBps`). An NVLSTree channel crosses the network through every head: each
        rank is the head of its own slice of every channel's loop, and ``connectNvls`` gives each of the
        ``nvlsChannels`` channels a tree connection on every head (``channel->nvls.treeUp = treeUp[c % 2]``,
        src/graph/connect.cc, NVIDIA/nccl v2.27.3-1 to v2.30.7-1). So the first chunks of all the call's
        channels cross a hop on one head's NIC together, each at the NIC's rate over the channels (the NVLS
        graph's ``bwInter`` is one head's NIC), and a network step leaves only once complete (the proxy posts
        whole steps, src/transport/net.cc).
        """
        if algorithm == "nvls_tree":
            return graph.bw_inter_GBps / max(channels, 1)
        return graph.run_bw_GBps(inter=True)

    def _proxy_load(self, algorithm: str, size_channels: int, graph_channels: int = 0) -> float:
        """Network connections the busiest GPU's proxy thread serves, per send-and-receive pair of one channel.

        NCCL's proxy thread (one per GPU) passes over every active network connection in turn and moves
        each by at most one state per pass (``progressOps``, src/proxy.cc; ``sendProxyProgress`` /
        ``recvProxyProgress``, src/transport/net.cc, NVIDIA/nccl v2.30.7-1), so a connection's step
        cycle grows with the connections the proxy serves: the channels on the GPU's NIC times the
        network peers of each (a ring's next and previous rank: 1; a tree's parent and children between
        nodes, the busiest node's average over NCCL's two trees: :func:`tree_network_peers`, 1 at 2 nodes,
        1.5 at 3, 2 from 4 with the channels split evenly). Tree channels above the doubled search
        channels (``graph_channels``) copy the first ones, all on tree 0 (:func:`tree_channel_split`);
        NVLSTree puts channel c on tree c mod 2 (``connectNvls``, src/graph/connect.cc v2.30.7-1).
        """
        per_nic = max(1.0, size_channels / self._node_nics())
        # NVLSTree is counted as a tree here (a NIC's share of the channels, the connection's steps from the
        # NIC's messages), though NCCL gives every channel a tree connection on every head (connectNvls) and
        # each connection one proxy step per loop (calcCollChunking: nstepsPerLoop 1, chunkSteps 1; src/enqueue.cc
        # v2.27.3-1): a head's proxy serves channels x tree peers pairs. Both agree at 2 nodes but for the first
        # pass; from 4 nodes this count charges a loop tree_network_peers times more (8 nodes: 59.5 us a round,
        # 52.4 with NCCL's count, 54.1 measured). NCCL's count was measured and not kept: the 8-node tables lose
        # the time that stands in for a start-up the model does not price (offset 271 us measured, 245 with it),
        # and the fitted step cycle they held falls when the forced-Ring table is left out (leave one table out,
        # H100 IB 6.73 / 16.46 % -> 6.85 / 20.81 %; docs/calibrate.md)
        if algorithm in ("tree", "nvls_tree") and self.comm.n_nodes > 1:
            share = tree_channel_split(size_channels, graph_channels or size_channels) if algorithm == "tree" else 0.5
            return per_nic * tree_network_peers(self.comm.n_nodes, share)
        return per_nic

    def _rail_bound_s(self, collective: str, n_bytes: int, algorithm: str, protocol: str, channels: int,
                      size_channels: int, chunk: int) -> float:
        """The busiest NIC's time when its messages keep only some of its rails busy (0 when all are).

        A NIC that is a group of rails (aws-ofi-nccl's multi-rail EFA device: :meth:`TransportProfile.rails`)
        runs at full rate only while its messages in flight cover every rail. A message up to the
        plugin's stripe threshold travels on one rail (:meth:`TransportProfile.stripes`); in flight per
        direction are the NIC's connections (a channel's send and receive each sit on one NIC) times the
        messages each has outstanding: a ring step's slices (the next step waits for the previous rank,
        src/device/prims_simple.h / prims_ll128.h, NVIDIA/nccl v2.30.7-1), or for pipelined trees and
        NVLSTree up to ``NCCL_STEPS`` chunks. Rate = min(1, in flight x stripes / rails) of the NIC's.
        """
        server = self.comm.topo.spec.server
        nic_Bps = server.nic_speed * server.nic_ports
        rails = self.transport.rails(nic_Bps)
        if rails <= 1:
            return 0.0
        message = chunk / PROTOCOL_PAYLOAD[protocol]  # bytes on the wire: LL and LL128 carry their flags
        connections, outstanding = self._nic_in_flight(collective, n_bytes, algorithm, protocol, size_channels, chunk)
        share = min(1.0, connections * outstanding * self.transport.stripes(message, rails) / rails)
        if share >= 1.0:
            return 0.0
        nic_bytes = self.nic_bytes_per_byte(collective, FLOW_ALGORITHMS[algorithm], protocol, channels) * n_bytes / 2
        return nic_bytes / (self.transport.goodput_Bps(nic_Bps) * PROTOCOL_PAYLOAD[protocol] * share)

    def _connection_serial_s(self, collective: str, n_bytes: int, algorithm: str, protocol: str, channels: int,
                             size_channels: int, chunk: int) -> float:
        """One network connection's messages back to back at the rate one message gets, shared by the
        messages it keeps in flight (:meth:`_nic_in_flight`).

        A message travels on the rails it is striped over (:meth:`TransportProfile.stripes`: one rail up to
        aws-ofi-nccl's round-robin threshold, the whole NIC otherwise and on single-rail NICs). A connection
        with one message in flight (a ring step waits for the previous rank) pays each step's proxy cycle and
        then that message's transmission, in series: :func:`gpuwait.collectives.physical.pipelined_time_s`.
        """
        connections, outstanding = self._nic_in_flight(collective, n_bytes, algorithm, protocol, size_channels, chunk)
        if outstanding > 1:
            return 0.0  # the proxy posts the next message while one is on the wire: the NIC's wire term covers it
        server = self.comm.topo.spec.server
        nic_Bps = server.nic_speed * server.nic_ports
        rails = self.transport.rails(nic_Bps)
        message = chunk / PROTOCOL_PAYLOAD[protocol]
        rate_Bps = (self.transport.goodput_Bps(nic_Bps) * PROTOCOL_PAYLOAD[protocol]
                    * min(1.0, self.transport.stripes(message, rails) / rails))
        nic_bytes = self.nic_bytes_per_byte(collective, FLOW_ALGORITHMS[algorithm], protocol, channels) * n_bytes / 2
        return nic_bytes / connections / rate_Bps

    def _nic_in_flight(self, collective: str, n_bytes: int, algorithm: str, protocol: str, size_channels: int,
                       chunk: int) -> tuple[float, int]:
        """The busiest NIC's connections per direction and the messages each has outstanding: a ring step's
        slices (the next step waits for the previous rank, src/device/prims_simple.h / prims_ll128.h, NVIDIA/nccl
        v2.30.7-1), for pipelined trees and NVLSTree up to ``NCCL_STEPS`` chunks."""
        per_channel = n_bytes / max(size_channels, 1)
        outstanding = ring_slices(collective, protocol) if algorithm == "ring" else max(
            1, min(NCCL_STEPS, math.ceil(per_channel / max(chunk, 1))))
        return max(1.0, size_channels / self._node_nics()), outstanding

    def _staged(self, collective: str, n_bytes: int, algorithm: str, protocol: str, size_channels: int,
                chunk: int) -> bool:
        """Whether the busiest NIC's received messages are staged (:meth:`_staged_receive_s`)."""
        if not self.transport.staged_receive_bytes:
            return False
        server = self.comm.topo.spec.server
        connections, outstanding = self._nic_in_flight(collective, n_bytes, algorithm, protocol, size_channels, chunk)
        in_flight = connections * outstanding * chunk / PROTOCOL_PAYLOAD[protocol]
        devices = server.nics * self.transport.rails(server.nic_speed * server.nic_ports)
        return self.transport.stages_receive(in_flight, devices, server.gpus)

    def _staged_receive_s(self, collective: str, n_bytes: int, algorithm: str, protocol: str, channels: int,
                          size_channels: int, chunk: int) -> float:
        """The busiest NIC's time when its received bytes reach the GPU through host bounce buffers (0 when not).

        aws-ofi-nccl's SENDRECV protocol (p4d) leaves the wire protocol to libfabric's EFA provider, which
        sends a peer's messages as packets into the receiver's bounce buffers while its bytes in flight stay
        within the runt budget and copies them into the GPU by a local read on the same device
        (:meth:`TransportProfile.stages_receive`). A NIC's channels beyond the search's are NCCL's copies of
        them (``ncclTopoPostset``, src/graph/connect.cc v2.30.7-1): the same GPU pair, NIC and proxy thread,
        so one libfabric endpoint and one peer, whose bytes in flight are the NIC's connections x outstanding
        messages x message (:meth:`_nic_in_flight`). The device then moves each received byte twice, in
        series: time = bytes / goodput + bytes / the device's rate.
        """
        server = self.comm.topo.spec.server
        nic_Bps = server.nic_speed * server.nic_ports
        if not self._staged(collective, n_bytes, algorithm, protocol, size_channels, chunk):
            return 0.0
        nic_bytes = self.nic_bytes_per_byte(collective, FLOW_ALGORITHMS[algorithm], protocol, channels) * n_bytes / 2
        return nic_bytes / (self.transport.goodput_Bps(nic_Bps) * PROTOCOL_PAYLOAD[protocol]) + nic_bytes / nic_Bps

    def _estimate(self, collective: str, n_bytes: int, algorithm: str, protocol: str, channels: int, model_s: float,
                  fabric_s: float | None, chunk: int, costs: PipelineCosts) -> CollectiveEstimate:
        params = self.params
        if self.gpus_per_thread > 1:
            costs = replace(costs, host_floor_s=self.gpus_per_thread * HOST_ISSUE_PER_GPU_S)
        time_s = pipelined_time_s(costs, params)
        latency_s = float(costs.latency_with(params))  # one collective's costs and params: a scalar
        fill_s = float(costs.fill_with(params))
        message_s = costs.nic_messages * params.net_message_overhead_s
        return CollectiveEstimate(collective, n_bytes, algorithm, protocol, channels, time_s, latency_s, model_s,
                                  fabric_s, fill_s, message_s, chunk, costs)

    def _choice(self, collective: str, n_bytes: int):
        """NCCL's choice for one call: (tuning inputs, algorithm, protocol, its prediction)."""
        inputs = self.tuning_inputs(collective)
        algorithm, protocol, prediction = choose(inputs, n_bytes, allowed_algos=self.env.algo,
                                                 allowed_protos=self.env.proto)
        return inputs, algorithm, protocol, prediction

    def _p2p_protocol(self, collective: str, n_bytes: int) -> tuple[int, str]:
        """An all-to-all's or a send/recv's bytes per peer, and the protocol NCCL's p2p path picks for them."""
        per_peer = n_bytes if collective == "sendrecv" else n_bytes // max(self.comm.n_ranks, 1)
        return per_peer, p2p_protocol(per_peer, self.env.allowed_protocols("all_gather"))

    def _p2p_estimate(self, collective: str, n_bytes: int) -> CollectiveEstimate:
        """All-to-all and send/recv go through NCCL's p2p path, outside the tuning model: the fabric
        time, NCCL's ring base latency once plus a ring step's hop latency per direction (in the protocol
        the p2p path picks: :func:`p2p_protocol`), and the per-message cost of the p2p chunks through the busiest NIC."""
        comm = self.comm
        per_peer, protocol = self._p2p_protocol(collective, n_bytes)
        inputs = self.tuning_inputs("all_gather")
        ring = choose(inputs, 0, allowed_algos="ring", allowed_protos=protocol)[2]
        steps = max(comm.n_ranks - 1, 1)
        # NCCL's ring latency is baseLat, once per call (the kernel's), plus hwLat per step (tuning.cc):
        # a p2p call pays the base once and a step's hop per direction (send/recv: one; all-to-all: a
        # send and a receive), each hop at ring's own network figure, as the collectives' time takes it
        # (module docstring, item 1: NCCL's one-rank-per-node figure is a rule of its choice, not a time)
        base_us = inputs.release.base_latency_us["ring"][PROTOCOLS.index(protocol)]
        step_us = max(ring.own_net_latency_us - base_us, 0.0) / steps
        latency_s = (base_us + step_us * (1 if collective == "sendrecv" else 2)) * 1e-6
        algorithm = "p2p" if collective == "sendrecv" else "direct"
        fabric_s, nic_messages, chunk = 0.0, 0.0, 0
        if n_bytes > 0 and comm.n_ranks > 1:
            fabric_s = max(self.fabric_time_s(collective, n_bytes, algorithm, protocol, 1),
                           self._shm_time_s(collective, n_bytes, protocol=protocol))
            chunk = p2p_chunk_bytes(per_peer, over_network=comm.n_nodes > 1)
            if comm.n_nodes > 1:
                nic_messages = self.nic_bytes_per_byte(collective, algorithm, protocol, 1) * n_bytes / chunk
                nic_messages *= self._message_cost_factor(min(chunk, per_peer), protocol)
        # the first message's crossing pays the transport's rendezvous (the others overlap it: NCCL_STEPS in flight)
        rendezvous_s = self.transport.rendezvous_s(min(chunk, per_peer) / PROTOCOL_PAYLOAD[protocol]) \
            if nic_messages else 0.0
        # a Get issued by software waits half a pass of the receiver's proxy (_rendezvous_s)
        match_passes = self._match_passes(1, rendezvous_s)
        costs = PipelineCosts(latency_s, int(comm.n_nodes == 1), int(comm.n_nodes > 1), fabric_s, nic_messages,
                              0.0, 0.0, 0.0, comm.n_nodes > 1, match_passes, rendezvous_latency_s=rendezvous_s,
                              sm80_steps=generation_steps(inputs.sm, int(comm.n_nodes == 1), int(comm.n_nodes > 1)))
        return self._estimate(collective, n_bytes, algorithm, protocol, 1, 0.0, fabric_s, chunk, costs)


#: NCCL_P2P_LL_THRESHOLD default (src/enqueue.cc, NVIDIA/nccl v2.18.3-1 to v2.30.7-1): a p2p operation of at most
#: this many bytes per channel runs on the LL protocol, a larger one on Simple
P2P_LL_THRESHOLD_BYTES = 16384


def ring_connection_steps(loop_steps: int, n_bytes: int, channels: int, n_ranks: int, step_bytes: int, slices: int,
                          proxy_load: float) -> float:
    """Steps of one ring network connection that its proxy's passes time, in units of a full pass.

    The connection carries every step of every loop (``loop_steps``, 2 (n - 1) for AllReduce), a message
    per slice of each rank's per-channel share. After the first loop each step waits for a whole pass
    over the ``proxy_load`` connection pairs the GPU's proxy serves (``progressOps``, src/proxy.cc;
    ``sendProxyProgress`` / ``recvProxyProgress`` move a step one state per call, src/transport/net.cc,
    NVIDIA/nccl v2.30.7-1). In the first loop the ring advances step by step as a chain whose hop
    latencies NCCL's latency term counts, with the connection's own visit of each pass among them; what
    it does not count is the proxy's visits to the other ``proxy_load - 1`` pairs, which every step of
    that loop also waits for (the ring's steps follow each other: the next rank forwards a slice once it
    has it, src/device/prims_simple.h / prims_ll128.h). So a proxy serving one pair adds nothing to the
    first loop (the floors), and three pairs (24 channels on 8 NICs) add two visits per step.

    >>> round(ring_connection_steps(30, 2**20, 24, 16, 2731, 1, 3.0), 6)  # one loop: 30 steps x 2/3 of a pass
    20.0
    >>> ring_connection_steps(30, 2**20, 1, 16, 65536, 1, 1.0)
    0.0
    >>> ring_connection_steps(30, 2**30, 24, 16, 1048576 // 2, 2, 3.0)  # later loops pay whole passes
    160.0
    """
    messages = math.ceil(math.ceil(n_bytes / (max(channels, 1) * max(n_ranks, 1))) / max(step_bytes, 1))
    first_loop = min(messages, slices)
    return loop_steps * (messages - first_loop / max(proxy_load, 1.0))


def p2p_protocol(bytes_per_peer: int, allowed: frozenset[str] | None = None) -> str:
    """The protocol of one NCCL send/recv (all-to-all: per peer): LL up to ``P2P_LL_THRESHOLD_BYTES``
    per channel, Simple above (enqueue.cc ``protoLL[dir] &= bytes <= nChannels * P2pLLThreshold``, v2.30.7-1).
    A small operation runs on one channel (its parts are at least ``p2pChunkSize / 8``), so the threshold is
    per operation. LL needs the connection's LL buffers, which ``NCCL_PROTO`` without LL leaves out
    (``allowed``: the protocols NCCL_PROTO leaves, None = all). An empty operation (0 bytes: an all-to-all
    of fewer elements than ranks, which nccl-tests prints as size 0) is still a task NCCL enqueues, and
    0 bytes pass the test (only a direction with no task, ``bytes[dir] == -1``, skips it): LL.

    >>> p2p_protocol(8), p2p_protocol(16384), p2p_protocol(16385), p2p_protocol(8, frozenset({"Simple"}))
    ('LL', 'LL', 'Simple', 'Simple')
    >>> p2p_protocol(0)
    'LL'
    """
    ll_ok = allowed is None or "LL" in allowed
    return "LL" if ll_ok and 0 <= bytes_per_peer <= P2P_LL_THRESHOLD_BYTES else "Simple"
