"""Transport profiles: what a byte costs on the wire and what a message costs at the ends.

Header bytes per packet (public protocol layouts):

* InfiniBand: LRH 8 + BTH 12 + ICRC 4 + VCRC 2 = 26 B per packet, path MTU 4096 B.
* RoCEv2: Ethernet 14 + FCS 4 + preamble/SFD 8 + inter-frame gap 12 (= 38 B of L1/L2), IPv4 20,
  UDP 8 (destination port 4791), BTH 12, ICRC 4 = 82 B per packet; RoCE path MTU 4096 B.
* TCP: the same 38 B of Ethernet framing, IPv4 20, TCP 20 + timestamp option 12 = 90 B per
  segment at a 9000 B MTU (MSS 8948 B).
* AWS EFA (SRD, Shalev et al., "A Cloud-Optimized Transport Protocol for Elastic and Scalable HPC",
  IEEE Micro 40(6), 2020): SRD is reliable but not in-order; the NIC sprays each message's packets
  over many paths and retransmits what is lost, so the fabric needs no PFC and has no per-flow path
  (routing kind ``spray`` in a cluster file). SRD's wire format is not published: the per-packet
  header is a modelling choice, the RoCEv2 82 B (Ethernet framing, IPv4, UDP, a 12 B transport
  header, 4 B CRC) beside AWS's 8 KiB SRD payload (modelling choice: 8192 B MTU; the VPC's
  jumbo frame is 9001 B). Per-message overhead: the verbs post-and-complete cost below (the EFA device is
  posted through rdma-core's efa provider like any verbs NIC; no EFA-specific figure is published). ``nccl_net_latency_s``: the 75 us network latency aws-ofi-nccl v1.8.1
  reports to NCCL on p4d/p4de/p5 (``src/platform-aws.c``, ``platform_data_map[].latency``;
  150 us elsewhere), which NCCL's tuning adds per network hop (``latencyInter``).
  ``device_speed_Bps``: one EFA device carries 100 Gbit/s on p4d/p4de and p5 (AWS EC2 instance types:
  4 x 100 and 32 x 100 Gbit/s); a server NIC faster than that is aws-ofi-nccl's multi-rail group of
  devices, one NCCL network device per GPU on p5 (``src/nccl_ofi_topo.c`` groups the devices nearest
  each GPU). aws-ofi-nccl's scheduler
  (``src/nccl_ofi_scheduler.c``, v1.8.1-aws to v1.12.x) sends a message of at most
  ``OFI_NCCL_ROUND_ROBIN_THRESHOLD`` (256 KiB, ``include/nccl_ofi_param.h``) whole on one rail, round
  robin, and stripes a larger one over every rail (``stripe_threshold_bytes``); from v1.13 a message is
  cut into ``ceil(size / OFI_NCCL_MIN_STRIPE_SIZE)`` stripes of at least 128 KiB, at most one per rail.
  The profile follows v1.8.1, the plugin the one published EFA-on-p5 table's image ships. The scheduler
  belongs to the plugin's RDMA protocol, which it picks when a node has more EFA devices than GPUs
  (``src/nccl_ofi_net.c``: p5); p4d/p4de (4 devices, 8 GPUs) run its SENDRECV protocol, one device per
  NIC, which the 100 Gbit/s device speed also gives (one rail).
  ``staged_receive_bytes``: the SENDRECV protocol hands each NCCL step to libfabric as one tagged send and
  receive (``fi_tsend`` / ``fi_trecv``, aws-ofi-nccl ``src/nccl_ofi_sendrecv.c`` v1.8.1-aws), and libfabric's
  EFA provider picks the wire protocol. For CUDA memory it has no medium protocol: a message up to one
  packet goes eagerly, a larger one by the read-based protocols, and of those the runting read while the peer
  has no read in flight and fewer than ``FI_EFA_RUNT_SIZE`` bytes (307200, ``EFA_DEFAULT_RUNT_SIZE``) of runt
  data outstanding, its runt part (the whole message while the peer's runt bytes stay under that budget)
  sent as packets (``prov/efa/src/efa_hmem.c`` ``efa_domain_hmem_info_init_protocol_thresholds``,
  ``src/rdm/efa_rdm_peer.c`` ``efa_rdm_peer_select_readbase_rtm`` / ``efa_rdm_peer_get_runt_size``,
  ofiwg/libfabric v1.19.0 to v1.22.0). Packets land in the receiver's host bounce buffers and are copied into
  the GPU, by a local RDMA read on the same EFA device when it supports reads (p4d) (``efa_rdm_pke_utils.c``
  ``efa_rdm_pke_copy_payload_to_cuda``: preferred over cudaMemcpy, "local read copy is faster"; with gdrcopy the
  first 4 receives are copied by the CPU). So while a peer's bytes in flight stay within the runt budget, the
  receiving device moves each byte twice: from the wire into the bounce buffer, then into the GPU
  (:meth:`TransportProfile.stages_receive`). Once a window overflows it a read stays in flight and later
  messages go by long read, zero-copy. The plugin's RDMA protocol (p5) writes into the posted buffer
  (``src/nccl_ofi_rdma.c``) and copies only eager messages (``OFI_NCCL_EAGER_MAX_SIZE`` 8 KiB, sent eagerly
  only before the receiver's control message arrives): not modelled. Its ``send`` holds a message until the
  receiver's control message (the posted buffer's address and one key per rail) has arrived, then posts
  the write (``fi_writedata``); a receive completes on the control message's send completion and the remote
  write's (aws-ofi-nccl ``src/nccl_ofi_rdma.c`` v1.8.1-aws). NCCL posts its receives up to ``NCCL_STEPS`` (8)
  steps ahead of the GPU (``recvProxyProgress``, src/transport/net.cc v2.30.7-1), so the control message
  travels ahead of the data but for a call's first steps: that round trip is not modelled apart from
  NCCL's latency. The plugin's request limit (``NCCL_OFI_MAX_REQUESTS`` 128 per communicator,
  ``include/nccl_ofi.h`` v1.8.1-aws) is far above NCCL's 8 steps in flight per connection: never the limit.
  What the EFA tables show at mid sizes is a connection's one message in flight, whose step costs and
  one-rail transmission add up (:mod:`gpuwait.collectives.physical` ``pipelined_time_s``).
* HPE Slingshot-11 through libfabric's CXI provider (aws-ofi-nccl's SENDRECV protocol, which it picks unless
  the RDMA protocol reports several NICs per device, ``src/nccl_ofi_net.cpp`` v1.21.1: one ``fi_tsend`` /
  ``fi_trecv`` per NCCL step, ``src/nccl_ofi_sendrecv.cpp``, as on p4d). The provider picks a message's protocol by its length (``fi_cxi.7``,
  "Messaging", ofiwg/libfabric v1.22.0): a send of at most ``FI_CXI_RDZV_THRESHOLD`` + ``FI_CXI_RDZV_GET_MIN``
  bytes (2048 + 2049 by default, ``CXIP_RDZV_THRESHOLD`` in prov/cxi/include/cxip.h, ``rdzv_get_min`` in
  prov/cxi/src/cxip_info.c) goes eagerly, payload with the header; a longer one by rendezvous: the header and
  ``FI_CXI_RDZV_THRESHOLD`` bytes travel with the send and, once the header is matched to a receive, the rest
  "is pulled from the source using an RDMA Get operation" (``issue_rdzv_get``, prov/cxi/src/cxip_msg_hpc.c).
  The rest lands only after the Get has gone to the sender's NIC and its data come back: one more network round
  trip per message (``rendezvous_round_trip_s``), whether the NIC matches in hardware or, under
  ``FI_CXI_RX_MATCH_MODE=software`` (CSCS's hook), the provider's progress engine matches and issues the Get.
  The round trip is two one-way latencies of a small message between two Alps nodes, 2.3 us each (osu_latency,
  CSCS's regression reference: :data:`SLINGSHOT_OSU_LATENCY_S`); the software match's own cost is not
  published and not modelled. (fi_cxi.7: "In the normal case, the Get is performed by hardware and the
  operation completes without software progress"; ``software`` mode "fully onloads" matching, so the Get
  leaves when the receiver's progress engine -- NCCL's proxy thread polling the plugin -- runs: half a proxy
  pass per Get on average, :attr:`TransportProfile.rendezvous_software_match`, set by a platform that sets
  ``FI_CXI_RX_MATCH_MODE=software``, such as CSCS's hook.) LL and LL128 steps are messages of 2x and 128/120x their data, so an LL step of
  more than 2 KiB of data is a rendezvous (:meth:`TransportProfile.rendezvous_s`). A connection with one message
  in flight (a ring's LL step) waits for every round trip; a pipelined one overlaps them with the next
  messages and pays only its first chunk's (:meth:`gpuwait.fabric.perf.CollectivePredictor.estimate`).

Per-message overheads and ceilings (sources in docs/sources.md): ``message_overhead_s`` is LogGP's *o*
(Alexandrov et al., SPAA 1995), the CPU time one message costs at each end (post it, reap its
completion), not its one-way latency *L* (ib_send_lat's 0.8-1.6 us, the 2.5 us acceptance of
Mellanox/ngc_multinode_perf ``common.sh`` ``LAT_PASS_VAL``), which NCCL's latency term and the fill
already carry. The RDMA transports pay one figure, the measured message rate of one core posting to one
verbs QP (:data:`VERBS_MESSAGE_OVERHEAD_S`); the kernel TCP path pays a socket call per message (an
assumption, :data:`SOCKET_MESSAGE_OVERHEAD_S`) and its ceilings (streams, proxy thread) come from NCCL's
socket model in :mod:`gpuwait.transport.socket`.
DCQCN and ECN defaults are the ``dcqcn_paper`` settings of the HPCC authors' simulator
(alibaba-edu/High-Precision-Congestion-Control ``simulation/run.py``); the PFC headroom is the Linux
mlx5 driver's formula (``drivers/net/ethernet/mellanox/mlx5/core/en/port_buffer.c``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TypedDict

from gpuwait.errors import SpecError, UnknownNameError
from gpuwait.spec.cluster import TransportSpec
from gpuwait.transport.platforms import platform_for


@dataclass(frozen=True)
class EcnParams:
    """RED-style ECN marking at a switch queue, scaled per link speed (HPCC simulator ``run.py``: KMIN=100*bw/25 KB ...).

    Probability rises linearly from 0 at ``kmin`` to ``pmax`` at ``kmax``; every packet above ``kmax`` is marked.
    """

    kmin_bytes_per_25gbps: float = 100e3
    kmax_bytes_per_25gbps: float = 400e3
    pmax: float = 0.2

    def thresholds_bytes(self, link_rate_Bps: float) -> tuple[float, float]:
        scale = link_rate_Bps * 8 / 25e9
        return self.kmin_bytes_per_25gbps * scale, self.kmax_bytes_per_25gbps * scale


@dataclass(frozen=True)
class DcqcnParams:
    """DCQCN reaction-point parameters (Zhu et al., SIGCOMM 2015; values of the HPCC simulator's
    ``dcqcn_paper``, byte counter from sc20anonymous/DCQCN-validation)."""

    g: float = 1 / 256
    alpha_resume_interval_s: float = 50e-6
    rate_decrease_interval_s: float = 50e-6
    rp_timer_s: float = 55e-6
    byte_counter_bytes: float = 10e6
    fast_recovery_steps: int = 1
    rate_ai_bps_per_25gbps: float = 5e6
    rate_hai_bps_per_25gbps: float = 50e6
    min_rate_bps: float = 1e9
    cnp_interval_s: float = 50e-6
    # HPCC's CLAMP_TARGET_RATE 0 (rdma-hw.cc CheckRateDecreaseMlx): a cut lowers the target only after
    # an increase stage; the paper lowers it at every cut
    clamp_target_rate: bool = False


@dataclass(frozen=True)
class TransportProfile:
    """Costs of one transport. Units in every name; no logic beyond derived ratios."""

    name: str
    mtu_bytes: float
    header_bytes: float
    message_overhead_s: float
    lossless: bool
    flow_control: str  # "credit" (IB), "pfc" (lossless Ethernet) or "none"
    congestion_control: str  # "ib-cc", "dcqcn" or "cubic"
    link_fraction: float = 1.0  # ceiling of a host's throughput as a fraction of the port rate
    rate_cap_Bps: float | None = None
    rdma: bool = True
    nccl_net_latency_s: float = 0.0  # network latency the NCCL net plugin reports (ncclNetProperties_t.latency)
    host_ceiling_Bps: float | None = None  # per NIC port and direction: what the host's software path can move
    #: one device of a multi-rail NIC group (a NIC faster than this is several rails); None = one rail per NIC
    device_speed_Bps: float | None = None
    stripe_threshold_bytes: float = 0.0  # messages up to this size travel on one rail of the group
    #: bytes in flight to one peer up to which the SENDRECV protocol's messages land in host bounce buffers and
    #: are copied into the GPU by the device (0 = never); see the module docstring
    staged_receive_bytes: float = 0.0
    #: messages longer than this go by the provider's rendezvous protocol: the header and the first bytes travel
    #: with the send, the rest is pulled by a Get from the receiver once the header is matched; see the module
    #: docstring
    rendezvous_threshold_bytes: float = 0.0
    #: what the rendezvous adds to one message: the Get's request and response, one network round trip (0 = no
    #: rendezvous protocol modelled: eager at every size)
    rendezvous_round_trip_s: float = 0.0
    #: the external NCCL net plugin that carries this transport or that the image installs: "none" (NCCL's own
    #: IB/RoCE or socket transport), "ibext" (nccl-rdma-sharp-plugins beside NCCL's IB, from the cluster file), or
    #: the transport's own plugin, without which NCCL cannot reach it ("aws-ofi-nccl" for EFA and Slingshot's CXI,
    #: Google's "gpudirect-tcpx" / "gpudirect-tcpxo"): :func:`gpuwait.transport.socket.runs_on_sockets`
    net_plugin: str = "none"
    #: the provider matches receives in software (libfabric CXI's ``FI_CXI_RX_MATCH_MODE=software``): a rendezvous
    #: Get leaves when the receiver's progress runs, not from the NIC; see the module docstring
    rendezvous_software_match: bool = False
    #: a measured size -> time curve of one message on the host's socket path ((bytes, seconds) pairs, sizes
    #: rising; empty = the flat ``message_overhead_s`` at every size): see :func:`gpuwait.transport.socket.message_time_s`
    message_curve: tuple[tuple[float, float], ...] = ()
    #: what that curve was measured through: "socket" (read as measured) or "mpi" (only its ends, LogGP's o and G)
    message_curve_stack: str = "socket"
    #: data sockets of one NCCL socket connection (``NCCL_SOCKET_NTHREADS`` x ``NCCL_NSOCKS_PERTHREAD``; 0 = the
    #: proxy thread sends on the control socket): how a message splits into tasks, :func:`gpuwait.transport.socket.socket_tasks`
    socket_streams: int = 0
    ecn: EcnParams = field(default_factory=EcnParams)
    dcqcn: DcqcnParams = field(default_factory=DcqcnParams)

    @property
    def wire_efficiency(self) -> float:
        """Payload bytes per byte on the wire for full-MTU packets.

        >>> round(TRANSPORTS["infiniband"].wire_efficiency, 4), round(TRANSPORTS["rocev2"].wire_efficiency, 4)
        (0.9937, 0.9804)
        """
        return self.mtu_bytes / (self.mtu_bytes + self.header_bytes)

    def rails(self, nic_speed_Bps: float) -> int:
        """Devices (rails) behind one NIC of ``nic_speed_Bps``: 1 unless the transport groups devices.

        >>> TRANSPORTS["efa"].rails(50e9), TRANSPORTS["efa"].rails(12.5e9), TRANSPORTS["infiniband"].rails(50e9)
        (4, 1, 1)
        """
        if not self.device_speed_Bps:
            return 1
        return max(1, round(nic_speed_Bps / self.device_speed_Bps))

    def stripes(self, message_bytes: float, rails: int) -> int:
        """Rails one message of ``message_bytes`` travels on: one up to ``stripe_threshold_bytes``, else all.

        >>> TRANSPORTS["efa"].stripes(256 * 1024, 4), TRANSPORTS["efa"].stripes(256 * 1024 + 1, 4)
        (1, 4)
        """
        return 1 if message_bytes <= self.stripe_threshold_bytes else rails

    def stages_receive(self, peer_in_flight_bytes: float, devices: int, gpus: int) -> bool:
        """Whether a peer's messages, ``peer_in_flight_bytes`` in flight, reach the GPU through host bounce
        buffers and a copy by the receiving device. Only aws-ofi-nccl's SENDRECV protocol stages, which it
        runs unless a node has more EFA devices than GPUs (``src/nccl_ofi_net.c`` v1.8.1-aws: p4d's 4 devices
        for 8 GPUs stage, p5's 32 do not).

        >>> efa = TRANSPORTS["efa"]
        >>> efa.stages_receive(4 * 65536, 4, 8), efa.stages_receive(4 * 131072, 4, 8), efa.stages_receive(8192, 32, 8)
        (True, False, False)
        """
        return 0 < peer_in_flight_bytes <= self.staged_receive_bytes and devices <= gpus

    def rendezvous_s(self, message_bytes: float) -> float:
        """What the rendezvous protocol adds to one message of ``message_bytes`` (bytes on the wire): the
        Get's round trip above :attr:`rendezvous_threshold_bytes`, nothing at or below it (eager) nor on a
        transport without one.

        >>> cxi = TRANSPORTS["slingshot"]
        >>> cxi.rendezvous_s(4096), round(cxi.rendezvous_s(8192) * 1e6, 1), TRANSPORTS["infiniband"].rendezvous_s(2**20)
        (0.0, 4.6, 0.0)
        """
        if not self.rendezvous_round_trip_s or message_bytes <= self.rendezvous_threshold_bytes:
            return 0.0
        return self.rendezvous_round_trip_s

    def goodput_Bps(self, line_rate_Bps: float) -> float:
        """Payload rate a host can reach on a port of ``line_rate_Bps``."""
        return line_rate_Bps * self.wire_efficiency * self.link_fraction


TRANSPORTS: dict[str, TransportProfile] = {}

#: libfabric's CXI provider defaults, ofiwg/libfabric v1.22.0: ``FI_CXI_RDZV_THRESHOLD`` (``CXIP_RDZV_THRESHOLD``,
#: prov/cxi/include/cxip.h) and ``FI_CXI_RDZV_GET_MIN`` (``cxip_env.rdzv_get_min``, prov/cxi/src/cxip_info.c)
CXI_RDZV_THRESHOLD_BYTES = 2048
CXI_RDZV_GET_MIN_BYTES = 2049
#: one-way MPI latency of a 256 B message between two Alps nodes over Slingshot-11 (osu_latency, one rank per
#: node): CSCS's regression reference, eth-cscs/cscs-reframe-tests checks/microbenchmarks/mpi/osu/osu_run.py
#: ``OSULatency`` (``latency_256``: 2.3 us)
SLINGSHOT_OSU_LATENCY_S = 2.3e-6
#: LogGP's overhead *o* of one message through a user-space RDMA NIC: the CPU time to post it and reap its
#: completion. One core driving one QP's 1 KiB sends reaches 5.68 M messages/s (``ib_send_bw`` on mlx5,
#: linux-rdma/perftest#65: 0.176 us each); a RoCE write test with batched posts 3.75-7.5 M/s
#: (linux-rdma/perftest#273: 0.13-0.27 us). Not the one-way latency (ib_send_lat 0.8-1.6 us, LogGP's L):
#: that is NCCL's latency term and the fill, not a cost the proxy pays per message
VERBS_MESSAGE_OVERHEAD_S = 0.18e-6
#: LogGP's *o* of one message through the kernel's TCP stack (a send or receive system call and its protocol
#: processing): an assumption, no public per-message figure for NCCL's socket path was found. It is the value
#: the model applied before the figures above were sourced (15 us x the fitted 0.100), so socket predictions
#: keep their footing; GPUDirect-TCPX/TCPXO pay it too: their header split saves the payload's copy (a per-byte
#: cost, the host ceiling), not the system calls and TCP processing each message costs
SOCKET_MESSAGE_OVERHEAD_S = 1.5e-6


def register_transport(profile: TransportProfile) -> TransportProfile:
    """Add a transport profile; a new transport touches no other file."""
    TRANSPORTS[profile.name] = profile
    return profile


register_transport(TransportProfile(
    name="infiniband", mtu_bytes=4096, header_bytes=26, message_overhead_s=VERBS_MESSAGE_OVERHEAD_S, lossless=True,
    flow_control="credit", congestion_control="ib-cc"))
register_transport(TransportProfile(
    name="rocev2", mtu_bytes=4096, header_bytes=82, message_overhead_s=VERBS_MESSAGE_OVERHEAD_S, lossless=True,
    flow_control="pfc", congestion_control="dcqcn"))
# NCCL's socket transport (net_socket.cc): the per-connection ceiling comes from socket_transport(), which reads
# NCCL_SOCKET_NTHREADS / NCCL_NSOCKS_PERTHREAD; the registered profile is that model's default (one stream per
# connection), so a cluster file naming "tcp" and NCCL_IB_DISABLE=1 get the same numbers
register_transport(TransportProfile(
    name="tcp", mtu_bytes=8948, header_bytes=90, message_overhead_s=SOCKET_MESSAGE_OVERHEAD_S, lossless=False, flow_control="none",
    congestion_control="cubic", rdma=False))
# AWS EFA / SRD: reliable in the NIC, no PFC ("lossless" = the sender sees no loss); SRD's own congestion
# control is not DCQCN, and the packet engine has no model of it ("none")
register_transport(TransportProfile(
    name="efa", mtu_bytes=8192, header_bytes=82, message_overhead_s=VERBS_MESSAGE_OVERHEAD_S, lossless=True,
    flow_control="none", congestion_control="srd", nccl_net_latency_s=75e-6, device_speed_Bps=12.5e9,
    stripe_threshold_bytes=256 * 1024, staged_receive_bytes=307200, net_plugin="aws-ofi-nccl"))
# Google GPUDirect-TCPX (A3 High, a3-highgpu-8g: 4 GPU NICs of 200 Gbit/s) and TCPXO (A3 Mega, a3-megagpu-8g:
# 8 GPU NICs of 200 Gbit/s), Google Cloud "GPU machine types" / "Maximize GPU network bandwidth" docs: kernel TCP
# with header split, the payload landing in GPU memory (no host staging, no receive copy); the same TCP
# framing as "tcp". Lossy Ethernet, NCCL through Google's net plugin. Per-message cost: the kernel socket
# path's (SOCKET_MESSAGE_OVERHEAD_S): Google publishes the plugins' NCCL settings (gpuwait.transport.platforms)
# and bandwidths but no per-message cost or per-stream ceiling
register_transport(TransportProfile(
    name="tcpx", mtu_bytes=8192, header_bytes=90, message_overhead_s=SOCKET_MESSAGE_OVERHEAD_S, lossless=False, flow_control="none",
    congestion_control="cubic", rdma=False, net_plugin="gpudirect-tcpx"))
register_transport(TransportProfile(
    name="tcpxo", mtu_bytes=8192, header_bytes=90, message_overhead_s=SOCKET_MESSAGE_OVERHEAD_S, lossless=False, flow_control="none",
    congestion_control="cubic", rdma=False, net_plugin="gpudirect-tcpxo"))
# HPE Slingshot-11 (Cassini NIC, 200 Gbit/s per port; De Sensi et al., "An In-Depth Analysis of the Slingshot
# Interconnect", SC20): "HPC Ethernet" end to end, link-level reliability and hardware congestion control; NCCL
# through aws-ofi-nccl on libfabric's CXI provider. The wire format is not published: RoCEv2's 82 B of framing
# per 4096 B packet (modelling choice); per-message overhead the verbs figure (VERBS_MESSAGE_OVERHEAD_S: a
# CXI NIC is posted from user space by libfabric, no CXI-specific figure is published). Rendezvous
# above FI_CXI_RDZV_THRESHOLD + FI_CXI_RDZV_GET_MIN = 2048 + 2049 B, one round trip of 2 x 2.3 us (module docstring)
register_transport(TransportProfile(
    name="slingshot", mtu_bytes=4096, header_bytes=82, message_overhead_s=VERBS_MESSAGE_OVERHEAD_S, lossless=True,
    flow_control="credit", congestion_control="slingshot", rendezvous_threshold_bytes=CXI_RDZV_THRESHOLD_BYTES
    + CXI_RDZV_GET_MIN_BYTES, rendezvous_round_trip_s=2 * SLINGSHOT_OSU_LATENCY_S, net_plugin="aws-ofi-nccl"))


class _Overrides(TypedDict, total=False):
    """The TransportProfile fields a cluster file's ``transport`` section can override, by their profile names."""

    mtu_bytes: float
    message_overhead_s: float
    rate_cap_Bps: float
    message_curve: tuple[tuple[float, float], ...]
    message_curve_stack: str
    host_ceiling_Bps: float
    net_plugin: str
    rendezvous_software_match: bool
    rendezvous_threshold_bytes: float


def _message_curve_overrides(spec: TransportSpec) -> _Overrides:
    """The spec's measured socket message curve as profile fields: the curve, and its smallest message's time as
    the flat per-message overhead (the one figure every other use of ``message_overhead_s`` reads)."""
    if spec.name != "tcp":
        raise SpecError(f"transport.message_curve: got a curve with {spec.name}; expected it only with tcp "
                        "(a measured size -> time curve of the host's socket path)")
    if spec.message_overhead is not None:
        raise SpecError("transport.message_curve: got it with transport.message_overhead; expected one of the two "
                        "(the curve's smallest message is the per-message overhead)")
    if spec.message_curve_stack is None:
        raise SpecError("transport.message_curve_stack: missing; expected 'socket' (the curve measures socket calls, "
                        "e.g. sockperf) or 'mpi' (an MPI benchmark such as osu_bw over the same path)")
    # resolve_transport calls this only for a spec with a curve
    assert spec.message_curve is not None
    curve = tuple(spec.message_curve)
    return {"message_curve": curve, "message_overhead_s": curve[0][1], "message_curve_stack": spec.message_curve_stack}


def resolve_transport(spec: TransportSpec) -> TransportProfile:
    """The named profile with the spec's overrides applied."""
    try:
        profile = TRANSPORTS[spec.name]
    except KeyError:
        raise UnknownNameError(f"transport.name: unknown transport {spec.name!r}; expected one of {', '.join(TRANSPORTS)}") from None
    overrides: _Overrides = {}
    if spec.mtu is not None:
        overrides["mtu_bytes"] = spec.mtu
    if spec.message_overhead is not None:
        overrides["message_overhead_s"] = spec.message_overhead
    if spec.rate_cap is not None:
        overrides["rate_cap_Bps"] = spec.rate_cap
    if spec.message_curve is not None:
        overrides.update(_message_curve_overrides(spec))
    elif spec.message_curve_stack is not None:
        raise SpecError(f"transport.message_curve_stack: got {spec.message_curve_stack!r} without "
                        "transport.message_curve; expected it only beside a curve")
    if spec.host_ceiling is not None:
        overrides["host_ceiling_Bps"] = spec.host_ceiling
    if spec.net_plugin is not None:
        if profile.net_plugin != "none":
            raise SpecError(f"transport.net_plugin: got {spec.net_plugin!r} with {spec.name}, which NCCL reaches only "
                            f"through its own plugin ({profile.net_plugin}); expected it with infiniband or rocev2")
        if spec.net_plugin == "ibext" and spec.name not in ("infiniband", "rocev2"):
            raise SpecError(f"transport.net_plugin: got 'ibext' with {spec.name}; expected it with infiniband or "
                            "rocev2 (nccl-rdma-sharp-plugins' IBext is an IB/RoCE transport)")
        overrides["net_plugin"] = spec.net_plugin
    platform = platform_for(spec.name, spec.platform)
    if platform is not None and platform.provider.get("FI_CXI_RX_MATCH_MODE") == "software":
        overrides["rendezvous_software_match"] = True
    if spec.rendezvous_threshold is not None:
        if not profile.rendezvous_round_trip_s:
            raise SpecError(f"transport.rendezvous_threshold: got {spec.rendezvous_threshold:g} with {spec.name}; "
                            "expected it only with slingshot (the one transport whose provider's rendezvous is modelled)")
        overrides["rendezvous_threshold_bytes"] = spec.rendezvous_threshold
    return replace(profile, **overrides)


def pfc_xoff_bytes(speed_gbps: float, mtu_bytes: int = 1500, cable_length_m: float = 7.0) -> int:
    """PFC headroom (XOFF threshold) of the mlx5 driver, integer arithmetic as in port_buffer.c.

    ``xoff = (301 + 216 * cable_len / 100) * speed / 1000 + 272 * mtu / 100`` with speed in Mb/s
    (minimum 40 Gb/s) — Linux ``mlx5/core/en/port_buffer.c``, default cable length 7 m (``port_buffer.h``).

    >>> pfc_xoff_bytes(400), pfc_xoff_bytes(100), pfc_xoff_bytes(200, mtu_bytes=9000, cable_length_m=100)
    (130480, 35680, 127880)
    """
    speed_mbps = int(max(speed_gbps, 40) * 1000)
    cable = int(cable_length_m)
    return (301 + 216 * cable // 100) * speed_mbps // 1000 + 272 * int(mtu_bytes) // 100
