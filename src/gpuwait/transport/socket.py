"""NCCL's socket transport (``NET/Socket``) as a physical model: what one connection can carry.

NCCL falls back to its socket transport when no RDMA network is usable (``NCCL_IB_DISABLE=1``, no
HCA visible, no net plugin). Its path, from NCCL ``src/transport/net_socket.cc`` (tag v2.30.7-1):

* **Host staging, no GPUDirect.** The transport declares ``ptrSupport = NCCL_PTR_HOST``: NCCL's
  kernels write each step into pinned host memory (GPU -> host over PCIe), the proxy hands that
  buffer to the kernel TCP stack (``send``: a CPU copy into socket buffers), the receiver's stack
  copies it out (``recv``) into its host buffer and the GPU reads it back (host -> GPU). The two
  PCIe crossings run at the GPU's PCIe rate (25-63 GB/s for Gen4/Gen5 x16) and overlap the
  network in NCCL's step pipeline, so they do not bind at socket rates; they are not modelled.
* **Interfaces.** ``ncclFindInterfaces`` (``src/misc/socket.cc``) takes ``NCCL_SOCKET_IFNAME`` if set, else
  interfaces named ``ib*``, else every interface but ``docker*`` and ``lo`` (``virbr*`` too from v2.28.3-1), at
  most ``MAX_IFS`` = 16: on a node with four Slingshot ``hsn`` interfaces and no ``NCCL_SOCKET_IFNAME`` all
  four are network devices, placed by their PCI path like any NIC. ``ncclNetSocketGetProperties`` reads
  each one's speed from ``/sys/class/net/<if>/speed`` (10 Gbit/s when unreadable) and leaves its
  ``latency`` 0 ("Not set"), so NCCL's tuning adds no network latency for sockets (the ``tcp``
  profile's ``nccl_net_latency_s`` is 0). ``NCCL_IB_DISABLE=1`` only turns off NCCL's own IB transport:
  an installed net plugin (``libnccl-net.so``, tried first, ``src/plugin/net.cc``) still carries the
  traffic, and nccl-rdma-sharp-plugins' IBext reads ``NCCL_IBEXT_DISABLE`` instead (NVIDIA/nccl-tests#227).
* **Streams.** Each NCCL connection (one per channel and peer) has a control socket and
  ``nSocks = NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD`` data sockets served by that many helper
  threads. With ``nSocks = 0`` the proxy thread sends the data itself on the control socket: one
  TCP stream. A message is split into ``nSocks`` tasks of at least ``NCCL_SOCKET_MIN_TASKSIZE``
  (64 KiB), so the streams of a connection run in parallel. Defaults
  (``ncclNetSocketGetNsockNthread``): 0 threads x 1 socket in general, 2 x 8 on AWS ENA/EFA
  interfaces (PCI vendor 0x1d0f), 4 x 1 on Google gVNIC (0x1ae0); threads at most 16, sockets at
  most 64 (``MAX_THREADS``, ``MAX_SOCKETS``).
* **Messages in flight.** A connection posts at most ``NCCL_STEPS`` (8) steps ahead (``src/include/device.h``);
  the socket plugin holds up to ``NCCL_NET_MAX_REQUESTS`` requests (8 in v2.18, 32 from v2.19,
  ``nccl_net.h``) and receives one message per request (``maxRecvs`` 1). Each message first sends its
  size on the control socket; from v2.27.3-1 a message of at most ``NCCL_SOCKET_INLINE`` (128 B) travels
  inside that header, so an LL step of a small call is one ``send`` and one ``recv``. Helper threads,
  when there are any, sleep on a condition variable and are woken per task (``pthread_cond_signal``).
* **A TCP stream's ceiling.** One kernel TCP stream is bounded by the core that processes its
  receive side: about 42 Gbit/s with every stack optimisation on (TSO/GRO, jumbo frames, aRFS),
  the receiver's data copy being the bottleneck (Cai et al., "Understanding Host Network Stack
  Overheads", ACM SIGCOMM 2021). NCCL's maintainers describe the consequence: NCCL splits data
  evenly, so it gets the slowest socket's speed times the number of sockets (NVIDIA/nccl-tests
  issue #83, NVIDIA/nccl issue #438).
* **The proxy thread.** With no helper threads (``NCCL_SOCKET_NTHREADS`` 0, the default outside AWS
  and Google) the GPU's proxy thread makes every ``send`` and ``recv`` call itself, so one core
  copies all of that GPU's network bytes, both directions. Its budget is one core's memory-copy
  bandwidth, ``PROXY_COPY_Bps`` = 20 GB/s (an assumption: the order of one server core's STREAM
  copy rate), half per direction, per NIC port. With helper threads each connection has its own
  threads and this ceiling is not applied. A cluster file's ``transport.host_ceiling`` (a host path's
  measured rate per NIC port and direction, e.g. CSCS's osu_bw over the Alps nodes' IP path without the
  CXI hook) binds as well, whichever is lower.
* **A per-message cost.** Every network step NCCL posts (Simple protocol: ``DEFAULT_BUFFSIZE``
  4 MiB / ``NCCL_STEPS`` 8 = 512 KiB, ``src/init.cc``, ``src/include/device.h``) exchanges its size on
  the control socket, splits into tasks and is completed by polling: ``SOCKET_STEP_ROUND_TRIP_S``
  (15 us; an assumption of the order of one kernel TCP round trip: a latency, not the profile's
  ``message_overhead_s``, which is the CPU time of one call), paid once per message and not overlapped
  with that connection's data.

* **Small calls.** A call too small to fill a message still crosses the network as whole messages: each
  network step of NCCL's latency chain is a ``send`` on one proxy and a ``recv`` on the other, one after the
  other (LogGP's o + L + o). NCCL's network hop latencies are its IB transport's (verbs post and poll
  inside), so the model charges a socket call's cost (the profile's ``message_overhead_s``) for both calls
  of every such step (:meth:`gpuwait.fabric.perf.CollectivePredictor._chain_messages`). What a call costs
  is the host's: a cluster file's ``transport.message_overhead`` gives a measured figure (CSCS's osu_bw at
  1 B over the Alps nodes' IP path: 6.25 us a message, ``alps-gh200-nocxi.yaml``).
* **A call's cost by size.** A cluster file may carry a measured size -> time curve of its socket path
  (``transport.message_curve``: osu_bw or sockperf output) instead of one figure; every message NCCL's proxy
  sends or receives then pays it at the bytes of its largest task on the wire (:func:`message_time_s`): an LL
  step's bytes are twice its data (each 16 B line holds 8 B of data and 8 B of flags, ``ncclLLFifoLine``,
  ``src/include/device.h``), and with helper sockets a message splits into tasks of at least 64 KiB
  (:func:`socket_task_bytes`). A curve measured through MPI is read at its ends only (LogGP's o and G).
  Without a curve every size pays the flat figure, as before.

So one connection carries ``M / (overhead + M / (streams x stream_Bps))`` bytes/s for messages of
``M`` bytes, and a NIC port carries at most its wire goodput. Nothing here is fitted to a table.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from gpuwait.errors import SpecError
from gpuwait.transport.profiles import TRANSPORTS, TransportProfile

#: one kernel TCP stream, all optimisations on (Cai et al., SIGCOMM 2021: ~42 Gbit/s per core)
TCP_STREAM_CEILING_Bps = 42e9 / 8
#: NCCL's Simple-protocol network step: DEFAULT_BUFFSIZE (4 MiB, src/init.cc) / NCCL_STEPS (8, src/include/device.h)
NCCL_SIMPLE_STEP_BYTES = (1 << 22) // 8
#: ncclNetSocketGetNsockNthread (net_socket.cc v2.30.7-1): (threads, sockets per thread) by NIC vendor
SOCKET_DEFAULTS: dict[str, tuple[int, int]] = {"generic": (0, 1), "aws": (2, 8), "gcp": (4, 1)}
#: one core's memory-copy budget for the proxy thread (an assumption, see the module text)
PROXY_COPY_Bps = 20e9
#: one Simple step's fixed cost on a socket connection: its size exchanged on the control socket, then
#: completion polled (an assumption of the order of one kernel TCP round trip, see the module text)
SOCKET_STEP_ROUND_TRIP_S = 15e-6
#: net_socket.cc NCCL_SOCKET_MIN_TASKSIZE (v2.30.7-1): a message's pieces over the data sockets are at least this
SOCKET_MIN_TASK_BYTES = 64 * 1024
MAX_SOCKET_THREADS = 16  # net_socket.cc MAX_THREADS
MAX_SOCKETS = 64  # net_socket.cc MAX_SOCKETS
#: the cloud whose NICs a transport implies (what NCCL reads from /sys/class/net/<if>/device/vendor)
PLATFORM_OF_TRANSPORT = {"efa": "aws", "tcpx": "gcp", "tcpxo": "gcp"}


def socket_threads_and_sockets(nthreads: int | None = None, nsocks_perthread: int | None = None,
                               platform: str = "generic") -> tuple[int, int]:
    """(threads, data sockets) of one NCCL socket connection, as ``ncclNetSocketGetNsockNthread`` decides.

    ``None`` = the variable is unset (NCCL's -2): the platform's default.

    >>> socket_threads_and_sockets(), socket_threads_and_sockets(platform="aws"), socket_threads_and_sockets(4, 32)
    ((0, 0), (2, 16), (4, 64))
    """
    if platform not in SOCKET_DEFAULTS:
        raise SpecError(f"platform: got {platform!r}; expected one of {', '.join(SOCKET_DEFAULTS)}")
    for name, value in (("NCCL_SOCKET_NTHREADS", nthreads), ("NCCL_NSOCKS_PERTHREAD", nsocks_perthread)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise SpecError(f"{name}: got {value!r}; expected an integer >= 1")
    auto_threads, auto_socks = SOCKET_DEFAULTS[platform]
    threads = min(auto_threads if nthreads is None else nthreads, MAX_SOCKET_THREADS)
    per_thread = auto_socks if nsocks_perthread is None else nsocks_perthread
    if threads * per_thread > MAX_SOCKETS:
        per_thread = MAX_SOCKETS // threads  # NCCL warns and lowers NCCL_NSOCKS_PERTHREAD
    return threads, threads * per_thread


def socket_connection_Bps(streams: int, message_overhead_s: float, message_bytes: float = NCCL_SIMPLE_STEP_BYTES,
                          stream_Bps: float = TCP_STREAM_CEILING_Bps) -> float:
    """Payload rate of one NCCL socket connection: ``streams`` TCP streams in parallel per message,
    plus the message's fixed cost.

    >>> round(socket_connection_Bps(1, 15e-6) / 1e9, 3)   # one stream, 512 KiB steps
    4.564
    >>> round(socket_connection_Bps(16, 15e-6) / 1e9, 2)  # AWS's 2 x 8 sockets
    24.68
    """
    if streams < 1:
        raise SpecError(f"streams: got {streams!r}; expected an integer >= 1")
    return message_bytes / (message_overhead_s + message_bytes / (streams * stream_Bps))


def socket_task_bytes(message_bytes: float, streams: int) -> float:
    """The largest piece of one socket message on one stream: with data sockets, ``ncclNetSocketTest``
    (net_socket.cc v2.30.7-1) cuts a message into tasks of max(``NCCL_SOCKET_MIN_TASKSIZE`` (64 KiB), size /
    ``streams``), served in parallel by the helper threads; with none the proxy thread sends the whole message on
    the control socket.

    >>> socket_task_bytes(8192, 0), socket_task_bytes(8192, 16), socket_task_bytes(4 << 20, 16)
    (8192, 8192, 262144)
    """
    if streams < 1:
        return message_bytes
    return min(message_bytes, max(SOCKET_MIN_TASK_BYTES, math.ceil(message_bytes / streams)))


def message_time_s(profile: TransportProfile, message_bytes: float) -> float:
    """What one socket message of ``message_bytes`` on the wire costs on ``profile``'s host path.

    Without a measured curve, the flat ``message_overhead_s`` (the wire term prices the bytes). With one (a
    cluster file's ``transport.message_curve``), the time of the message's largest task (:func:`socket_task_bytes`;
    the tasks run in parallel) read from it by what the measurement ran through
    (``transport.message_curve_stack``):

    * ``socket`` (the socket calls themselves, e.g. sockperf): the curve as measured, linear between sizes, the
      smallest size's time below them, the largest size's rate beyond them.
    * ``mpi`` (an MPI benchmark such as osu_bw over the same path): only its two ends, as LogGP reads a
      long-message rate (Alexandrov et al., SPAA 1995: a k-byte message costs o + (k-1)G): o the smallest size's
      time, G the largest size's time per byte. Between them an MPI library switches protocols (eager copies
      below a limit, rendezvous above: Open MPI's TCP BTL eager limit, 64 KiB by default,
      opal/mca/btl/tcp/btl_tcp_component.c), so its middle sizes
      carry costs NCCL's socket transport, which sends a size header then the bytes at every size, does not pay.

    osu_bw and sockperf keep a window of messages in flight, so their time per message is the path's gap at that
    size: the CPU time of one message through the stack, copies included, which NCCL's proxy pays per call too.

    >>> from gpuwait.transport.profiles import TRANSPORTS
    >>> points = ((1.0, 6.25e-6), (16384.0, 32.4e-6), (4194304.0, 1343.7e-6))  # CSCS's osu_bw "(*)", three sizes
    >>> sock = replace(TRANSPORTS["tcp"], message_curve=points)
    >>> [round(message_time_s(sock, size) * 1e6, 2) for size in (1, 8192, 16384, 8 << 20)]
    [6.25, 19.32, 32.4, 2687.4]
    >>> mpi = replace(sock, message_curve_stack="mpi")
    >>> [round(message_time_s(mpi, size) * 1e6, 2) for size in (1, 8192, 16384, 8 << 20)]
    [6.25, 8.87, 11.5, 2693.65]
    >>> message_time_s(TRANSPORTS["tcp"], 1 << 20) == TRANSPORTS["tcp"].message_overhead_s
    True
    """
    curve = profile.message_curve
    if not curve:
        return profile.message_overhead_s
    task_bytes = socket_task_bytes(message_bytes, profile.socket_streams)
    (first_bytes, first_s), (last_bytes, last_s) = curve[0], curve[-1]
    if profile.message_curve_stack == "mpi":
        return first_s + max(0.0, task_bytes - first_bytes) * last_s / last_bytes
    if task_bytes >= last_bytes:
        return last_s * task_bytes / last_bytes
    return float(np.interp(task_bytes, [size for size, _ in curve], [time_s for _, time_s in curve]))


def runs_on_sockets(base: TransportProfile, ib_disable: bool, ibext_disable: bool = False,
                    net: str | None = None) -> bool:
    """Whether NCCL's socket transport carries a job's network on a cluster whose transport is ``base``.

    A cluster naming ``tcp`` always does, and ``NCCL_NET=Socket`` (``net``) asks for it by name; a plugin's name
    keeps the plugin's transport. Otherwise
    ``NCCL_IB_DISABLE=1`` turns off NCCL's own IB transport, but NCCL tries an external net plugin first
    (``src/plugin/net.cc`` v2.27.3-1): a transport carried by its own plugin (``base.net_plugin``: aws-ofi-nccl on
    EFA and Slingshot, Google's on TCPX/TCPXO) stays, and
    nccl-rdma-sharp-plugins' IBext (``base.net_plugin == "ibext"``) reads ``NCCL_IBEXT_DISABLE`` instead
    (``src/ib_plugin.c``; NVIDIA/nccl-tests#227, #373: "NCCL_IB_DISABLE=1 not work", the log showing
    ``Using network IBext``): with it installed the job reaches sockets only with both set.

    >>> from gpuwait.transport.profiles import TRANSPORTS
    >>> from dataclasses import replace
    >>> roce, hpcx = TRANSPORTS["rocev2"], replace(TRANSPORTS["rocev2"], net_plugin="ibext")
    >>> runs_on_sockets(roce, True), runs_on_sockets(hpcx, True), runs_on_sockets(hpcx, True, True)
    (True, False, True)
    >>> runs_on_sockets(TRANSPORTS["efa"], True), runs_on_sockets(TRANSPORTS["efa"], False, net="socket")
    (False, True)
    """
    own_plugin = base.net_plugin not in ("none", "ibext")
    if net == "ib" and (ib_disable or own_plugin or base.name == "tcp"):
        reason = "NCCL_IB_DISABLE=1 turns it off" if ib_disable else f"a {base.name} cluster has no IB device"
        raise SpecError(f"NCCL_NET: got IB, but {reason}; expected Socket or NCCL_NET unset")
    if base.name == "tcp" or net == "socket":
        return True
    if net not in (None, "ib") and base.net_plugin == "none":
        raise SpecError(f"NCCL_NET: got {net!r}, a net plugin's name, but this {base.name} cluster installs no "
                        "net plugin (transport.net_plugin); expected IB, Socket or NCCL_NET unset")
    if own_plugin:
        return False
    return ib_disable and (base.net_plugin != "ibext" or ibext_disable)


def socket_transport(base: TransportProfile, nthreads: int | None = None, nsocks_perthread: int | None = None,
                     platform: str | None = None) -> TransportProfile:
    """The transport NCCL runs on when it falls back to sockets from ``base``.

    The wire and the per-message cost are the ``tcp`` profile's (``base`` itself when it is ``tcp``,
    so a cluster file's overrides stay); the per-connection ceiling (``rate_cap_Bps``) comes from the
    stream count and :func:`socket_connection_Bps`, unless the cluster file set ``rate_cap`` itself.
    ``platform`` defaults to the cloud ``base`` implies (EFA: AWS; TCPX/TCPXO: Google).
    """
    platform = platform or PLATFORM_OF_TRANSPORT.get(base.name, "generic")
    tcp = base if base.name == "tcp" else TRANSPORTS["tcp"]
    if tcp.rate_cap_Bps is not None:
        return tcp
    threads, sockets = socket_threads_and_sockets(nthreads, nsocks_perthread, platform)
    streams = max(1, sockets)  # no helper sockets: the proxy thread sends on the control socket
    proxy = PROXY_COPY_Bps / 2 if threads == 0 else None  # send and recv copies share the proxy's core
    # a cluster file's host_ceiling (a measured IP path) binds too: the lower of the two
    ceilings = [c for c in (proxy, tcp.host_ceiling_Bps) if c is not None]
    return replace(tcp, rate_cap_Bps=socket_connection_Bps(streams, SOCKET_STEP_ROUND_TRIP_S),
                   host_ceiling_Bps=min(ceilings) if ceilings else None, socket_streams=sockets)
