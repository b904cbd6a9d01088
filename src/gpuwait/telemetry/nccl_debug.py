"""Read ``NCCL_DEBUG=INFO`` output: which transport each connection uses (format strings of NCCL ``src/transport/*.cc``).

The transport lines answer the first questions of a slow-network diagnosis: do inter-node
connections use RDMA (``NET/IB``) or fell back to TCP (``NET/Socket``)? Does RDMA go straight to
GPU memory (``/GDRDMA``) or bounce through the host? Do GPUs in a server talk over NVLink/PCIe
P2P (``P2P/CUMEM``, ``P2P/IPC``, ``P2P/direct pointer``) or through host memory (``SHM``)?

Accepted line shapes (any NCCL since 2.4, plus the ``Ring`` lines of older ones)::

    host:pid:tid [dev] NCCL INFO Channel 00/0 : 4[4] -> 11[3] [receive] via NET/IB/3/GDRDMA
    host:pid:tid [dev] NCCL INFO Channel 00 : 3[4a000] -> 6[44000] [send] via NET/IB/0/GDRDMA
    host:pid:tid [dev] NCCL INFO Channel 09 : 6[6] -> 7[7] via SHM/direct/direct
    host:pid:tid [dev] NCCL INFO Ring 00 : 6 -> 2 [receive] via NET/IB/0
    host:pid:tid [dev] NCCL INFO CollNet 00/0 : 1 [send] via COLLNET/SHARP/0/GDRDMA
    host:pid:tid [dev] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_2:1/IB [RO]; OOB ib0:10.0.0.1<0>

with an optional ``[YYYY-MM-DD HH:MM:SS] ``, ``[1,0]<stdout>:``, ``0: `` or ``[155] `` prefix.

Examples
--------
>>> info = parse_nccl_debug('''
... swat1-04:2017630:2017699 [5] NCCL INFO Channel 03/0 : 5[5] -> 12[4] [send] via NET/IB/3
... ubuntu:9621:9692 [7] NCCL INFO Channel 14/0 : 15[7] -> 0[0] [send] via NET/Socket/0
... ''')
>>> [(c.transport, c.net_device, c.gdr, c.socket_fallback) for c in info.connections]
[('NET/IB', 3, False, False), ('NET/Socket', 0, False, True)]
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from gpuwait.telemetry.errors import TelemetryFormatError

#: one NCCL_DEBUG line's header (``host:pid:tid [dev] NCCL INFO``) and message, for every reader of these logs.
#: The host starts after a separator (or the line start): searched from every character, a long run
#: of host characters would be rescanned from each one (quadratic); from separators only it is linear
NCCL_LINE = re.compile(r"(?<![^\s:\[\]>])(?P<host>[^\s:\[\]]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] (?:\S+:\d+ )?NCCL "
                   r"(?P<level>INFO|WARN|TRACE) "
                   r"(?P<msg>.*?)\s*$")
_CHANNEL = re.compile(r"^(?P<kind>Channel|Ring) (?P<ch>\d+)(?:/(?P<sub>\d+))? : (?P<src>\d+)(?:\[(?P<srcdev>[0-9a-fA-F]+)\])?"
                      r" -> (?P<dst>\d+)(?:\[(?P<dstdev>[0-9a-fA-F]+)\])?(?: \[(?P<dir>send|receive)\])? via (?P<via>.+)$")
_COLLNET = re.compile(r"^CollNet (?P<ch>\d+)(?:/(?P<sub>\d+))? : (?P<src>\d+) \[(?P<dir>send|receive)\] via (?P<via>.+)$")
_NET_VIA = re.compile(r"^NET/(?P<net>[^/]+)/(?P<dev>\d+)(?:\((?P<proxy>\d+)\))?(?P<gdr>/GDRDMA)?(?P<pci>\(PCI\))?"
                      r"(?P<shared>/Shared)?")
_P2P_VIA = re.compile(r"^P2P/(?P<p2p>IPC|CUMEM|MNNVL|direct pointer|indirect/\d+\[\d+\])(?P<read>/read)?(?P<ce>/CE)?")
_COLLNET_VIA = re.compile(r"^COLLNET/(?P<net>[^/]+)/(?P<dev>\d+)(?P<gdr>/GDRDMA)?")
_USING = re.compile(r"^NET/(?P<net>[^:]+?) : Using (?P<devs>.*?)(?:\s*;\s*OOB (?P<oob>\S+))?$")
_IB_DEV = re.compile(r"\[(?P<i>\d+)\](?P<name>[^\s:\[\]]+):(?P<port>\d+)(?::(?P<rail>\d+))?(?::(?P<plane>\d+))?"
                     r"/(?P<ll>IB|RoCE)")
_SOCKET_DEV = re.compile(r"\[(?P<i>\d+)\](?P<name>[^\s:\[\]]+):(?P<addr>\S+?)<\d+>")
_GDR_HCA = re.compile(r"^NET/(?P<net>\S+) : GPU Direct RDMA (?P<state>Enabled|Disabled) for HCA (?P<hca>\d+) '(?P<name>[^']*)'")
_GDR_GPU = re.compile(r"^NET/(?P<net>\S+) : GPU Direct RDMA (?P<state>Enabled|Disabled) for GPU (?P<gpu>\S+) / "
                      r"HCA (?P<hca>\d+)(?: \((?P<reason>[^)]*)\))?")
_VERSION = re.compile(r"^NCCL version (?P<v>[0-9][^\s+]*)(?:\+(?P<build>\S+))?")
_NETWORK = re.compile(r"^Using network (?P<net>.+)$")
_INIT = re.compile(r"comm (?P<comm>0x[0-9a-fA-F]+|\S+) rank (?P<rank>\d+) nranks (?P<n>\d+) cudaDev (?P<cuda>\d+)"
                   r"(?: nvmlDev (?P<nvml>\d+))?(?: busId (?P<bus>[0-9a-fA-F]+))?.*Init COMPLETE")
_TUNING = re.compile(r"^(?P<coll>\w+): (?P<bytes>\d+) Bytes -> Algo (?P<algo>\S+) proto (?P<proto>\S+)")
#: the queue pair line of a RoCE connection: NCCL v2.30.7-1 src/transport/net_ib/connect.cc ("NET/IB: %s: %s %d
#: IbDev %d Port %d qp_num %d mtu %d GID %ld (%lX/%lX) ...") and v2.19 src/transport/net_ib.cc ("NET/IB: Dev %d Port %d
#: qpn %d mtu %d query_ece={...} GID %ld (%lX/%lX)"): the GID index and the GID's two 64-bit halves
_GID = re.compile(r"^NET/IB: (?:\w+: )?(?:NCCL (?:Merged)?Dev|Dev) (?P<dev>\d+) (?:IbDev \d+ )?Port (?P<port>\d+) .*?"
                  r"GID (?P<gid>-?\d+) \((?P<prefix>[0-9A-Fa-f]+)/(?P<iid>[0-9A-Fa-f]+)\)")
_NVLS = re.compile(r"NVLS multicast support is available|Connected NVLS|^NVLS comm ")


@dataclass(frozen=True)
class Connection:
    """One channel connection as NCCL logged it.

    ``transport`` is ``NET/<net>`` (``NET/IB``, ``NET/Socket``, ``NET/IBext_v8``...), ``P2P/IPC``,
    ``P2P/CUMEM``, ``P2P/MNNVL``, ``P2P/direct pointer``, ``P2P/indirect``, ``SHM``, ``CollNet`` or,
    for a form gpuwait does not know, the text after ``via``. ``gdr`` is None when the connection
    does not use the network; ``peer_rank`` is None for CollNet lines.
    """

    host: str
    pid: int
    cuda_dev: int
    channel: int
    rank: int
    peer_rank: int | None
    rank_device: str | None   # NVML index, or the PCI busId in hex on old NCCL
    peer_device: str | None
    direction: str | None     # "send", "receive", or None for P2P/SHM
    transport: str
    via: str                  # the text after "via", as logged
    net_device: int | None = None   # NIC index into the NET/<net> : Using list
    proxy_rank: int | None = None   # PXN: the rank whose NIC is used
    gdr: bool | None = None
    p2p_read: bool = False
    shared: bool = False
    lineno: int = 0

    @property
    def is_net(self) -> bool:
        return self.transport.startswith("NET/") or self.transport == "CollNet"

    @property
    def socket_fallback(self) -> bool:
        """TCP sockets instead of RDMA (``NET/Socket``)."""
        return self.transport == "NET/Socket"


@dataclass(frozen=True)
class NetDevice:
    """A device of a ``NET/<net> : Using`` line: ``[0]mlx5_0:1/RoCE`` or ``[0]eth0:10.0.0.1<0>``."""

    net: str                 # "IB", "Socket"
    index: int
    name: str
    port: int | None = None
    link_layer: str | None = None   # "IB" or "RoCE"
    rail: int | None = None
    plane: int | None = None
    address: str | None = None      # Socket devices


@dataclass(frozen=True)
class GdrStatus:
    """A ``GPU Direct RDMA Enabled|Disabled`` line."""

    net: str
    hca: int
    enabled: bool
    hca_name: str | None = None
    gpu: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class RankInfo:
    """An ``Init COMPLETE`` line."""

    rank: int
    n_ranks: int
    host: str
    cuda_dev: int
    bus_id: str | None = None


@dataclass(frozen=True)
class GidUse:
    """The GID a rank's RoCE queue pairs use on NET device ``net_device`` (its index in the Using list)."""

    host: str
    cuda_dev: int
    net_device: int
    port: int
    gid_index: int
    subnet_prefix: int   # the GID's first 8 bytes as NCCL prints them (%lX of a uint64)
    interface_id: int

    @property
    def link_local(self) -> bool:
        """An IPv6 link-local GID (fe80::/64): it cannot be routed past the first L3 hop, and on
        ConnectX's default table it sits at the RoCE v1 and v2 link-local indexes (0, 1). NCCL prints
        the prefix from memory in network order, so fe80:: reads 0x80FE on a little-endian host."""
        return self.subnet_prefix in (0x80FE, 0xFE80000000000000)


def _gid_uses(text: str) -> tuple[GidUse, ...]:
    out: dict[tuple, GidUse] = {}
    for raw in text.splitlines():
        m = NCCL_LINE.search(raw)
        if m is None or (g := _GID.match(m["msg"])) is None:
            continue
        use = GidUse(m["host"], int(m["dev"]), int(g["dev"]), int(g["port"]), int(g["gid"]), int(g["prefix"], 16),
                     int(g["iid"], 16))
        out.setdefault((use.host, use.cuda_dev, use.net_device), use)
    return tuple(out.values())


@dataclass(frozen=True)
class NcclDebugInfo:
    """Everything :func:`parse_nccl_debug` read."""

    version: str | None
    network: str | None                 # "IB", "Socket", "AWS Libfabric"...
    net_devices: tuple[NetDevice, ...]
    relaxed_ordering: bool
    oob: str | None                     # "eth0:10.100.62.64<0>"
    gdr_status: tuple[GdrStatus, ...]
    connections: tuple[Connection, ...]
    ranks: tuple[RankInfo, ...]
    tuning: tuple[tuple[str, int, str, str], ...]  # (collective, bytes, algorithm, protocol)
    nvls: bool
    warnings: tuple[str, ...]
    hosts: tuple[str, ...]
    gids: tuple[GidUse, ...] = ()

    def transports(self) -> Counter:
        """How many logged connections use each transport."""
        return Counter(c.transport for c in self.connections)

    @property
    def socket_fallback(self) -> bool:
        """Some connection goes over TCP sockets, or NCCL chose the Socket network."""
        return self.network == "Socket" or any(c.socket_fallback for c in self.connections)

    def net_without_gdr(self) -> tuple[Connection, ...]:
        """RDMA connections that stage through host memory (no ``/GDRDMA``)."""
        return tuple(c for c in self.connections if c.is_net and not c.socket_fallback and c.gdr is False)

    @property
    def collnet(self) -> bool:
        return any(c.transport == "CollNet" for c in self.connections)


def _classify(via: str) -> dict:
    if (m := _NET_VIA.match(via)) is not None:
        return {"transport": f"NET/{m['net']}", "net_device": int(m["dev"]),
                "proxy_rank": int(m["proxy"]) if m["proxy"] else None, "gdr": m["gdr"] is not None,
                "shared": m["shared"] is not None}
    if (m := _P2P_VIA.match(via)) is not None:
        kind = "indirect" if m["p2p"].startswith("indirect") else m["p2p"]
        return {"transport": f"P2P/{kind}", "p2p_read": m["read"] is not None}
    if via.startswith("SHM/"):
        return {"transport": "SHM"}
    if (m := _COLLNET_VIA.match(via)) is not None:
        return {"transport": "CollNet", "net_device": int(m["dev"]), "gdr": m["gdr"] is not None}
    return {"transport": via.split()[0] if via.split() else via}


def _net_devices(net: str, text: str) -> list[NetDevice]:
    if net == "Socket":
        return [NetDevice(net, int(m["i"]), m["name"], address=m["addr"]) for m in _SOCKET_DEV.finditer(text)]
    return [NetDevice(net, int(m["i"]), m["name"], int(m["port"]), m["ll"], int(m["rail"]) if m["rail"] else None,
                      int(m["plane"]) if m["plane"] else None) for m in _IB_DEV.finditer(text)]


def parse_nccl_debug(text: str, *, source: str = "NCCL_DEBUG log") -> NcclDebugInfo:
    """Read the NCCL INFO/WARN lines of a log (other lines are skipped).

    Raises
    ------
    TelemetryFormatError
        When the text has no NCCL INFO or WARN line at all.
    """
    version = network = oob = None
    relaxed = nvls = False
    devices: dict[tuple[str, int], NetDevice] = {}
    gdr: list[GdrStatus] = []
    conns: list[Connection] = []
    ranks: dict[int, RankInfo] = {}
    tuning: list[tuple[str, int, str, str]] = []
    warnings: list[str] = []
    hosts: dict[str, None] = {}
    seen = 0
    for lineno, raw in enumerate(text.splitlines(), start=1):
        m = NCCL_LINE.search(raw)
        if m is None:
            continue
        seen += 1
        host, msg = m["host"], m["msg"]
        hosts.setdefault(host)
        if m["level"] == "WARN":
            warnings.append(f"{host} [{m['dev']}] {msg}")
            continue
        if (c := _CHANNEL.match(msg) or _COLLNET.match(msg)) is not None:
            via = c["via"].strip()
            peer = c.groupdict().get("dst")
            conns.append(Connection(
                host=host, pid=int(m["pid"]), cuda_dev=int(m["dev"]), channel=int(c["ch"]), rank=int(c["src"]),
                peer_rank=int(peer) if peer is not None else None, rank_device=c.groupdict().get("srcdev"),
                peer_device=c.groupdict().get("dstdev"), direction=c["dir"], via=via, lineno=lineno, **_classify(via)))
        elif (u := _USING.match(msg)) is not None:
            for d in _net_devices(u["net"], u["devs"]):
                devices[(d.net, d.index)] = d
            relaxed = relaxed or "[RO]" in u["devs"]
            oob = u["oob"] or oob
        elif (g := _GDR_GPU.match(msg)) is not None:
            gdr.append(GdrStatus(g["net"], int(g["hca"]), g["state"] == "Enabled", gpu=g["gpu"], reason=g["reason"]))
        elif (g := _GDR_HCA.match(msg)) is not None:
            gdr.append(GdrStatus(g["net"], int(g["hca"]), g["state"] == "Enabled", hca_name=g["name"]))
        elif (v := _VERSION.match(msg)) is not None:
            version = version or v["v"]
        elif (n := _NETWORK.match(msg)) is not None:
            network = n["net"].strip()
        elif (t := _TUNING.match(msg)) is not None:
            tuning.append((t["coll"], int(t["bytes"]), t["algo"], t["proto"]))
        elif (i := _INIT.search(msg)) is not None:
            rank = int(i["rank"])
            ranks.setdefault(rank, RankInfo(rank, int(i["n"]), host, int(i["cuda"]), i["bus"]))
        if _NVLS.search(msg) or "Algo NVLS" in msg:
            nvls = True
    if not seen:
        raise TelemetryFormatError(f"{source}: no NCCL INFO or WARN lines found; expected lines like "
                                   "'host:1234:1240 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM'",
                                   hint="run with NCCL_DEBUG=INFO (NCCL_DEBUG_SUBSYS=INIT,NET shows the transports)")
    return NcclDebugInfo(version=version, network=network, net_devices=tuple(devices.values()),
                         relaxed_ordering=relaxed, oob=oob, gdr_status=tuple(gdr), connections=tuple(conns),
                         ranks=tuple(ranks[r] for r in sorted(ranks)), tuning=tuple(tuning), nvls=nvls,
                         warnings=tuple(warnings), hosts=tuple(hosts), gids=_gid_uses(text))
