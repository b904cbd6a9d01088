"""Real exporters' series placed on the components of a cluster: which GPU, which port, which cable.

A real cluster's exporters name things their own way: dcgm-exporter a GPU by ``Hostname`` and ``gpu``
index, node_exporter an RDMA port by ``device="mlx5_3"``, ``port="1"`` (and the host only through
the ``instance`` label Prometheus adds, or the file the scrape was saved in), ``perfquery`` a switch
port by its LID and port number, ``ethtool -S`` by the netdev the dump was taken on. With the
cluster's topology (ideally from ``gpuwait inventory import``, whose hosts, ``mlx5_X`` devices,
switch names and LIDs are the real ones) :func:`map_series` turns them into per-GPU and per-link
values the diagnosis reads.

Hosts
    the ``Hostname``, ``hostname``, ``host``, ``instance`` (``:port`` dropped) or ``nodename`` label;
    else the sample's file: a folder or a file name that contains a host name of the cluster
    (``node01/node-exporter.prom``, ``ethtool-node01-mlx5_0.txt``). A fully qualified name matches its
    first label (``node01.cluster.local`` is ``node01``).
NIC ports
    ``device`` (``mlx5_3``, ``mlx4_0``, ``eth2``) names the NIC node ``HOST.mlx5_3`` when the inventory
    has it; otherwise its number ``k`` is the k-th RDMA port of the host in the cluster's NIC order
    (one RDMA device per port, as ConnectX exposes them; a ``port`` label above 1 picks the port of a
    dual-port device such as ``mlx4_0``). A port's transmit counters are its uplink (host -> leaf), its
    receive counters and receive errors the downlink (leaf -> host).
Switch ports
    ``perfquery`` prints ``# Port counters: Lid L port P``: the LID is the switch's (``lidL`` alias from
    the inventory) and ``SWITCH[P]`` the link leaving that port.
Rates
    a counter with two or more timestamped samples (a Prometheus range query, OpenMetrics, repeated
    scrapes) gives a rate: the increase over the window (resets skipped) over its length. One sample
    gives only the value since the counter was last cleared. A rate no port can have is no reading and
    is left out, named (:data:`SAMPLING_TOLERANCE`): bytes above the port's line rate (a counter in
    bits), PFC pause time above the window's length (a duration not in microseconds).

InfiniBand port rates in sysfs (and so node_exporter's ``node_infiniband_rate_bytes_per_second``) are
signalling rates: ``40 Gb/sec (4X QDR)``. The data rate is 8/10 of that for SDR/DDR/QDR (8b/10b
coding) and 64/66 for FDR (IBTA InfiniBand Architecture Specification Vol. 2, Physical Layer); later generations report their
data rate. A 40 Gb/s port is read as QDR (FDR10 reports the same number).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gpuwait.errors import SpecError, UnknownNameError
from gpuwait.telemetry.bundle import TelemetryBundle
from gpuwait.telemetry.metrics import SM_ACTIVE_PER_BUSY
from gpuwait.telemetry.metricset import MetricSet
from gpuwait.telemetry.nic_counters import PERFQUERY_HEADER, PMA_WORD_BYTES
from gpuwait.topology.model import Topology
from gpuwait.units import format_rate

#: 8b/10b line coding (SDR, DDR, QDR) and 64b/66b (FDR): data bits per signalled bit (IBTA Vol. 2, Physical Layer).
IB_8B10B = 0.8
IB_64B66B = 64 / 66
_8B10B_SIGNAL_GBPS = {w * lane for w in (1, 2, 4, 8, 12) for lane in (2.5, 5.0, 10.0)}
_FDR_LANE_GBPS = 14.0

#: Per-GPU compute share, best first: the first metric every GPU of a host reports is used. NVML's
#: utilization (DCGM_FI_DEV_GPU_UTIL) and the graphics-engine activity count NCCL kernels, which spin
#: while they wait for a slow peer, so they come last: on a real cluster they read near 100 % everywhere.
GPU_BUSY_METRICS: tuple[tuple[str, float], ...] = (
    ("DCGM_FI_PROF_SM_ACTIVE", 1 / SM_ACTIVE_PER_BUSY),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 1.0),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 1.0),
    ("DCGM_FI_DEV_GPU_UTIL", 0.01),
)
#: the most each busy field can read: the DCGM_FI_PROF_* fields are ratios (0-1), NVML's utilization a
#: percentage. A ratio above 1 is no reading of it (a recording rule or dashboard that made it a
#: percentage): clipped to 1 it made every GPU fully busy and left no exposed communication to cost
_BUSY_FULL_SCALE = {"DCGM_FI_DEV_GPU_UTIL": 100.0}

# Counter families: (metric names, bytes per unit) by what they measure and on which side of the port.
_TX_BYTES = {"node_infiniband_port_data_transmitted_bytes_total": 1, "PortXmitData": PMA_WORD_BYTES,
             "tx_bytes_phy": 1, "node_ethtool_transmitted_bytes_phy": 1, "node_network_transmit_bytes_total": 1}
_RX_BYTES = {"node_infiniband_port_data_received_bytes_total": 1, "PortRcvData": PMA_WORD_BYTES,
             "rx_bytes_phy": 1, "node_ethtool_received_bytes_phy": 1, "node_network_receive_bytes_total": 1}
#: receive-side errors: corrupt packets seen by the port at the far end of the cable they crossed
_RX_ERRORS = ("SymbolErrorCounter", "PortRcvErrors", "node_infiniband_port_errors_received_total",
              "rx_symbol_err_phy", "rx_crc_errors_phy", "node_ethtool_received_symbol_err_phy",
              "node_ethtool_received_crc_errors_phy")
_LINK_DOWNED = ("LinkDownedCounter", "node_infiniband_link_downed_total", "link_down_events_phy",
                "node_ethtool_link_down_events_phy")
#: node_exporter's names for the RDMA hw_counters are its collector/infiniband_linux.go's (since 2025-11,
#: prometheus/node_exporter#2827); the shorter ones are kept for exports that renamed them
_OUT_OF_SEQUENCE = ("out_of_sequence", "node_infiniband_out_of_sequence_packets_received_total",
                    "node_infiniband_out_of_sequence_total")
_XMIT_WAIT = ("PortXmitWait", "node_infiniband_port_transmit_wait_total")
#: PFC pause frames and the time they held the port (mlx5 ``rx_prio<p>_pause``, ``tx_prio<p>_pause`` and their
#: ``_duration``, in microseconds; Linux Documentation/networking/device_drivers/ethernet/mellanox/mlx5/counters.rst),
#: as ``ethtool -S`` prints them or node_exporter's ethtool collector renames them (rx_ -> received_, tx_ -> transmitted_)
_PAUSE = re.compile(r"^(?:node_ethtool_)?(?P<side>rx|tx|received|transmitted)_prio\d_pause(?P<duration>_duration)?$")
#: the port kept pausing its peer long enough for the NIC's PFC storm prevention to warn or give up (counters.rst)
_PAUSE_STORM = re.compile(r"^(?:node_ethtool_)?(?:tx|transmitted)_pause_storm_(?:warning|error)_events$")
PAUSE_DURATION_UNIT_S = 1e-6
#: How far a rate over a window may read above what the port can do before it is no reading of it.
#: Bytes counted cannot exceed the line's data rate over the time they took, nor pause time the time
#: itself; what can is the window: the rate divides by the interval between the samples' timestamps,
#: and Prometheus stamps a sample when its scrape starts while the exporter reads the counter during
#: the scrape, which lasts at most its scrape_timeout, itself at most the scrape interval (Prometheus
#: configuration docs, scrape_config). A rate over at least four scrape intervals (what Grafana's
#: $__rate_interval asks, and the range Prometheus's docs advise for rate()) then errs by at most a
#: quarter of the window: at most 4/3 of the true rate. A counter in bits reads 8 times its bytes.
SAMPLING_TOLERANCE = 4 / 3
_ECN = ("np_ecn_marked_roce_packets", "node_infiniband_np_ecn_marked_roce_packets_received_total",
        "node_infiniband_np_ecn_marked_roce_packets_total")
#: DCQCN's congestion notifications: sent by the receiving NIC (notification point) for ECN-marked packets,
#: handled by the sending NIC (reaction point), which cuts its rate (mlx5 RDMA hw_counters, NVIDIA
#: "Understanding mlx5 Linux Counters and Status Parameters")
_CNP_SENT = ("np_cnp_sent", "node_infiniband_np_cnp_packets_sent_total", "node_infiniband_np_cnp_sent_total")
_CNP_HANDLED = ("rp_cnp_handled", "node_infiniband_rp_cnp_packets_handled_total", "node_infiniband_rp_cnp_handled_total")
_HOST_LABELS = ("Hostname", "hostname", "host", "instance", "nodename")
_DEVICE_NUMBER = re.compile(r"^(?:mlx\d+_|eth|ib|hca|bnxt_re|irdma)(\d+)$")
_THROTTLE = ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS")
#: DCGM writes a blank where a field has no reading (not found, not supported, not permitted): from
#: DCGM_INT32_BLANK 0x7ffffff0, DCGM_INT64_BLANK 0x7ffffffffffffff0 or DCGM_FP64_BLANK 2**47 up (DCGM
#: ``dcgm_structs.h``), and dcgm-exporter prints it as a number (its README: ``DCGM_FI_DEV_MEMORY_TEMP``
#: 9223372036854775794). Every field read here (a percentage, a ratio, a bit mask of a few bits, a PCIe
#: generation or width) stays far below the smallest, so anything from it up is no reading.
DCGM_BLANK_MIN = 0x7FFFFFF0


@dataclass
class MappedSeries:
    """What the real series say about the cluster's components (ids of ``topo``)."""

    gpu_busy: dict[int, float] = field(default_factory=dict)       # GPU node id -> share of time computing
    gpu_busy_metric: str | None = None
    gpu_throttle: dict[int, int] = field(default_factory=dict)     # GPU node id -> clock throttle reasons (bits)
    gpu_pcie: dict[int, tuple[float, float]] = field(default_factory=dict)  # GPU node id -> (generation, width)
    link_rate_Bps: dict[int, float] = field(default_factory=dict)   # negotiated data rate
    link_tx_Bps: dict[int, float] = field(default_factory=dict)     # measured rate over the window
    link_tx_bytes: dict[int, float] = field(default_factory=dict)   # bytes counted (window, or since clear)
    #: bytes a dump (perfquery, ethtool) counted beside its own congestion counters: the same window,
    #: where link_tx_bytes may come from another source (a range query) over another one
    window_bytes: dict[int, float] = field(default_factory=dict)
    counters: dict[str, dict[int, float]] = field(default_factory=dict)  # symbol_errors, link_downed, ...
    link_users: dict[int, list[str]] = field(default_factory=dict)  # NIC uplink -> ranks NCCL sends on it
    nic_use: dict[int, set[int]] = field(default_factory=dict)      # GPU node id -> NIC node ids NCCL sends through
    link_local_gids: dict[int, int] = field(default_factory=dict)   # NIC node id -> the link-local GID index NCCL uses
    unmatched: list[str] = field(default_factory=list)              # what named nothing in the cluster
    blank: list[str] = field(default_factory=list)                  # DCGM fields with no reading (a blank), left out
    out_of_range: list[str] = field(default_factory=list)           # busy readings above their full scale, left out
    above_line_rate: list[str] = field(default_factory=list)        # byte rates no port can send (bits?), left out
    pause_over_window: list[str] = field(default_factory=list)      # pause time above the window's, left out

    def add_counter(self, key: str, link: int, value: float) -> None:
        per_link = self.counters.setdefault(key, {})
        per_link[link] = per_link.get(link, 0.0) + value


# ------------------------------------------------------------------------------------------ names

def host_of(topo: Topology, name: str | None) -> int | None:
    """The server a host name (``node01``, ``node01.example.org``, ``node01:9100``, ``s3``) names."""
    if not name:
        return None
    name = re.sub(r":\d+$", "", name.strip())
    for candidate in (name, name.split(".", 1)[0]):
        try:
            return topo.server_id(candidate)
        except (UnknownNameError, SpecError, KeyError):
            continue
    return None


def host_of_path(topo: Topology, rel: str) -> int | None:
    """The server a file's folder or name names (the longest host name found between separators)."""
    parts = Path(rel).parts
    for part in parts[:-1]:
        server = host_of(topo, part)
        if server is not None:
            return server
    stem = parts[-1] if parts else rel
    best = None
    for server in range(topo.n_servers):
        host = topo.server_name(server)
        if re.search(rf"(?:^|[^A-Za-z0-9]){re.escape(host)}(?:$|[^A-Za-z0-9])", stem) and (
                best is None or len(host) > len(topo.server_name(best))):
            best = server
    return best


def sample_host(topo: Topology, labels: dict[str, str], file_host: int | None = None) -> int | None:
    """The server a sample's labels name (exporters' host labels, then gpuwait's own ``node``), else ``file_host``."""
    for key in _HOST_LABELS:
        if key in labels:
            server = host_of(topo, labels[key])
            if server is not None:
                return server
    node = labels.get("node")  # gpuwait's own export: the NIC's node name
    if node:
        server = host_of(topo, node.split(".", 1)[0])
        if server is not None:
            return server
    return file_host


def nic_port_link(topo: Topology, server: int, device: str, port: str | int | None = None) -> int | None:
    """The uplink (host -> switch) of RDMA device ``device`` (port ``port``) of ``server``; None if unknown."""
    n_nics, n_ports = topo.nic_uplink.shape[1:]
    node = topo._node_index.get(f"{topo.server_name(server)}.{device}")
    port_no = int(port) if port not in (None, "") and str(port).isdigit() else 1
    if node is not None:
        hits = np.argwhere(topo.nic_node[server] == node)
        if len(hits):
            nic, p = int(hits[0][0]), min(max(port_no - 1, 0), n_ports - 1)
            up = int(topo.nic_uplink[server, nic, p])
            return up if up >= 0 else None
    m = _DEVICE_NUMBER.match(device)
    if m is None:
        return None
    k = int(m[1])
    nic, p = (k, port_no - 1) if port_no > 1 else divmod(k, n_ports)
    if not (0 <= nic < n_nics and 0 <= p < n_ports):
        return None
    up = int(topo.nic_uplink[server, nic, p])
    return up if up >= 0 else None


def ib_data_rate_Bps(signal_Bps: float) -> float:
    """Data rate of an InfiniBand port from the signalling rate sysfs reports (see the module doc)."""
    gbps = signal_Bps * 8 / 1e9
    if any(math.isclose(gbps, s, rel_tol=1e-3) for s in _8B10B_SIGNAL_GBPS):
        return signal_Bps * IB_8B10B
    if gbps < 200 and math.isclose(gbps / _FDR_LANE_GBPS, round(gbps / _FDR_LANE_GBPS), abs_tol=0.01):
        return signal_Bps * IB_64B66B  # FDR: sysfs prints 14 Gb/s a lane (14, 28, 56, 112, 168)
    return signal_Bps


# ------------------------------------------------------------------------------------------ counters

def counter_window(values: np.ndarray, stamps_s: np.ndarray) -> tuple[float, float | None]:
    """``(increase, rate per second)`` of one counter series; the rate is None without two timestamps.

    Samples are ordered by time; a drop is a reset (the counter was cleared or wrapped) and the
    increase after it counts from zero.
    """
    ok = ~np.isnan(stamps_s)
    if ok.sum() < 2:
        return float(values[-1]), None
    order = np.argsort(stamps_s[ok], kind="stable")
    v, t = values[ok][order], stamps_s[ok][order]
    steps = np.diff(v)
    increase = float(np.where(steps >= 0, steps, v[1:]).sum())
    span = float(t[-1] - t[0])
    return increase, (increase / span if span > 0 else None)


def _series(metrics: MetricSet, names: Iterable[str]) -> dict[tuple[str, tuple], tuple[np.ndarray, np.ndarray]]:
    """Samples of ``names`` grouped by (name, labels): (values, timestamps)."""
    chosen = metrics.select(name=list(names))
    groups: dict[tuple[str, tuple], list[int]] = {}
    for i, (name, labels) in enumerate(zip(chosen.name, chosen.labels)):
        groups.setdefault((str(name), tuple(sorted(labels))), []).append(i)
    return {key: (chosen.value[idx], chosen.timestamp_s[idx]) for key, idx in groups.items()}


def _port_counters(out: MappedSeries, topo: Topology, metrics: MetricSet, file_host: int | None) -> None:
    names = set(metrics.names())
    wanted = [n for n in names if n in _TX_BYTES or n in _RX_BYTES or n in _RX_ERRORS or n in _LINK_DOWNED
              or n in _OUT_OF_SEQUENCE or n in _XMIT_WAIT or n in _ECN or n in _CNP_SENT or n in _CNP_HANDLED
              or _PAUSE.match(n) or _PAUSE_STORM.match(n)]
    for (name, labels), (values, stamps) in _series(metrics, wanted).items():
        lab = dict(labels)
        server = sample_host(topo, lab, file_host)
        device = lab.get("device")
        up = nic_port_link(topo, server, device, lab.get("port")) if server is not None and device else None
        if up is None:
            out.unmatched.append(f"{name}{{{', '.join(f'{k}={v}' for k, v in labels)}}}")
            continue
        _add_port_counter(out, topo, name, up, *counter_window(values, stamps))


def _add_port_counter(out: MappedSeries, topo: Topology, name: str, up: int, increase: float,
                      rate: float | None) -> None:
    """One counter of the port whose transmit side is link ``up`` (its receive side is the reverse link)."""
    down = topo.reverse_link(up)
    if name in _TX_BYTES or name in _RX_BYTES:
        link = up if name in _TX_BYTES else down
        scale = _TX_BYTES[name] if name in _TX_BYTES else _RX_BYTES[name]
        if link is None or link in out.link_tx_bytes:
            return  # one byte counter per direction is enough (PortXmitData and node_infiniband_* agree)
        out.link_tx_bytes[link] = increase * scale
        if rate is not None:
            out.link_tx_Bps[link] = rate * scale
    elif name in _RX_ERRORS and down is not None:
        out.add_counter("symbol_errors", down, increase)
    elif name in _LINK_DOWNED:
        out.add_counter("link_downed", up, increase)
    elif name in _OUT_OF_SEQUENCE and down is not None:
        out.add_counter("out_of_sequence", down, increase)
    elif name in _XMIT_WAIT:
        out.add_counter("xmit_wait", up, increase)
    elif name in _ECN and down is not None:
        out.add_counter("ecn_marked", down, increase)
    elif name in _CNP_SENT and down is not None:
        out.add_counter("cnp_sent", down, increase)     # the port received marked packets on its downlink
    elif name in _CNP_HANDLED:
        out.add_counter("cnp_handled", up, increase)    # the port's own sending was slowed
    elif _PAUSE_STORM.match(name) and down is not None:
        out.add_counter("pause_storm_events", down, increase)
    elif (m := _PAUSE.match(name)) is not None:
        _add_pause(out, topo, m, up, down, increase, rate)


def _add_pause(out: MappedSeries, topo: Topology, m: re.Match, up: int, down: int | None, increase: float,
               rate: float | None) -> None:
    """Pauses the port received stop its own sending: they stall its uplink. Pauses it sent stop its
    peer (the switch) sending to it: they stall its downlink. Durations are kept in seconds; a duration
    that grows faster than time over its window (:data:`SAMPLING_TOLERANCE`) is left out and named."""
    received = m["side"] in ("rx", "received")
    link = up if received else down
    if link is None:
        return
    key = "pause_received" if received else "pause_sent"
    if m["duration"] and rate is not None and rate * PAUSE_DURATION_UNIT_S > SAMPLING_TOLERANCE:
        out.pause_over_window.append(f"{m[0]} of {topo.link_name(link)}: {rate * PAUSE_DURATION_UNIT_S:.3g} s "
                                     "paused per second of the window")
    elif m["duration"]:
        out.add_counter(key + "_s", link, increase * PAUSE_DURATION_UNIT_S)
    else:
        out.add_counter(key, link, increase)


def _port_rates(out: MappedSeries, topo: Topology, metrics: MetricSet, file_host: int | None) -> None:
    for name, convert in (("node_infiniband_rate_bytes_per_second", ib_data_rate_Bps),
                          ("node_network_speed_bytes", float)):
        chosen = metrics.select(name=name)
        for labels, value in zip(chosen.labels, chosen.value):
            lab = dict(labels)
            server = sample_host(topo, lab, file_host)
            up = nic_port_link(topo, server, lab.get("device", ""), lab.get("port")) if server is not None else None
            if up is None:
                continue
            for link in (up, topo.reverse_link(up)):
                if link is not None:
                    out.link_rate_Bps[link] = convert(float(value))  # a port trains both directions at once


def _dcgm_readings(out: MappedSeries, topo: Topology, metrics: MetricSet, name: str,
                   file_host: int | None) -> Iterable[tuple[dict[str, str], int | None, float]]:
    """(labels, GPU node or None, value) of each ``name`` sample but DCGM's blanks, which are noted in ``out.blank``."""
    chosen = metrics.select(name=name)
    for labels, value in zip(chosen.labels, chosen.value):
        lab = dict(labels)
        gpu = _gpu_node(topo, lab, file_host)
        if float(value) >= DCGM_BLANK_MIN:
            where = topo.node_name[gpu] if gpu is not None else f"Hostname={lab.get('Hostname')}, gpu={lab.get('gpu')}"
            out.blank.append(f"{name}{{{where}}} {float(value):.17g}")
            continue
        yield lab, gpu, float(value)


def _gpus(out: MappedSeries, topo: Topology, metrics: MetricSet, file_host: int | None) -> None:
    names = set(metrics.names())
    per_gpu: dict[int, dict[str, list[float]]] = {}
    for name, _scale in GPU_BUSY_METRICS:
        if name not in names:
            continue
        for lab, gpu, value in _dcgm_readings(out, topo, metrics, name, file_host):
            if gpu is None:
                out.unmatched.append(f"{name}{{Hostname={lab.get('Hostname')}, gpu={lab.get('gpu')}}}")
                continue
            if value > _BUSY_FULL_SCALE.get(name, 1.0):
                out.out_of_range.append(f"{name}{{{topo.node_name[gpu]}}} {value:g}")
                continue
            per_gpu.setdefault(gpu, {}).setdefault(name, []).append(value)
    for name, scale in GPU_BUSY_METRICS:
        if per_gpu and all(name in m for m in per_gpu.values()):
            out.gpu_busy = {g: min(1.0, float(np.mean(m[name])) * scale) for g, m in per_gpu.items()}
            out.gpu_busy_metric = name
            break
    for metric in _THROTTLE:
        for _lab, gpu, value in _dcgm_readings(out, topo, metrics, metric, file_host):
            if gpu is not None:
                # a bit mask and (below) a generation and a lane count are integers: a resampled or
                # averaged series (a range query's mean, a rate() gone wrong) is read at its nearest
                out.gpu_throttle[gpu] = out.gpu_throttle.get(gpu, 0) | int(round(value))
    link: dict[int, dict[str, float]] = {}
    for metric in ("DCGM_FI_DEV_PCIE_LINK_GEN", "DCGM_FI_DEV_PCIE_LINK_WIDTH"):
        for _lab, gpu, value in _dcgm_readings(out, topo, metrics, metric, file_host):
            if gpu is not None:
                link.setdefault(gpu, {})[metric] = float(round(value))
    for gpu, fields in link.items():
        out.gpu_pcie[gpu] = (fields.get("DCGM_FI_DEV_PCIE_LINK_GEN", math.nan), fields.get("DCGM_FI_DEV_PCIE_LINK_WIDTH", math.nan))


def _gpu_node(topo: Topology, labels: dict[str, str], file_host: int | None) -> int | None:
    server = sample_host(topo, labels, file_host)
    index = labels.get("gpu", "")
    if server is None or not index.isdigit() or int(index) >= topo.gpu_node.shape[1]:
        return None
    return int(topo.gpu_node[server, int(index)])


# ------------------------------------------------------------------------------------------ files

def _perfquery(out: MappedSeries, topo: Topology, bundle: TelemetryBundle) -> None:
    for rel, counters in bundle.perfquery.items():
        text = (bundle.root / rel).read_text(encoding="utf-8", errors="replace")
        m = PERFQUERY_HEADER.search(text)
        link = None
        if m is not None:
            lid, port = m.groups()
            node = topo._node_index.get(f"lid{lid}")
            if node is not None:
                link = topo.link_alias.get(f"{topo.node_name[node]}[{port}]")
        if link is None:
            out.unmatched.append(f"{rel}: perfquery of " + (f"LID {m[1]} port {m[2]}" if m else "an unnamed port")
                                 + " names no switch port of the cluster")
            continue
        for name, value in counters.items():
            _add_port_counter(out, topo, name, int(link), float(value), None)
        _dump_window_bytes(out, topo, int(link), counters)


def _ethtool(out: MappedSeries, topo: Topology, bundle: TelemetryBundle) -> None:
    for rel, counters in bundle.ethtool.items():
        server = host_of_path(topo, rel)
        device = next((tok for tok in re.split(r"[^A-Za-z0-9_]+", Path(rel).stem)
                       if _DEVICE_NUMBER.match(tok) or (server is not None
                                                        and f"{topo.server_name(server)}.{tok}" in topo._node_index)), None)
        up = nic_port_link(topo, server, device) if server is not None and device else None
        if up is None:
            out.unmatched.append(f"{rel}: ethtool dump of no known host/device (name it HOST/ethtool-mlx5_0.txt)")
            continue
        for name, value in counters.items():
            _add_port_counter(out, topo, name, up, float(value), None)
        _dump_window_bytes(out, topo, up, counters)


def _dump_window_bytes(out: MappedSeries, topo: Topology, up: int, counters: dict) -> None:
    """The bytes a dump counted on the port's two directions, kept beside its congestion counters."""
    down = topo.reverse_link(up)
    for link, table in ((up, _TX_BYTES), (down, _RX_BYTES)):
        for name, scale in table.items():
            if link is not None and name in counters:
                out.window_bytes[link] = float(counters[name]) * scale
                break


def _nccl_users(out: MappedSeries, topo: Topology, bundle: TelemetryBundle) -> None:
    """Which ranks send over which NIC: NCCL's ``[send] via NET/IB/<dev>`` lines and its device list."""
    for info in bundle.nccl_debug.values():
        names = {d.index: d.name for d in info.net_devices}
        for conn in info.connections:
            if not conn.is_net or conn.direction != "send" or conn.net_device is None:
                continue
            server = host_of(topo, conn.host)
            device = names.get(conn.net_device)
            up = nic_port_link(topo, server, device) if server is not None and device else None
            if server is not None and up is not None:  # up is found only on a known server
                users = out.link_users.setdefault(up, [])
                if f"rank{conn.rank}" not in users:
                    users.append(f"rank{conn.rank}")
                _note_nic_use(out, topo, server, conn, up)
        for gid in info.gids:
            server = host_of(topo, gid.host)
            device = names.get(gid.net_device)
            up = nic_port_link(topo, server, device) if server is not None and device and gid.link_local else None
            if up is not None:
                out.link_local_gids[int(topo.link_src[up])] = gid.gid_index


def _note_nic_use(out: MappedSeries, topo: Topology, server: int, conn, up: int) -> None:
    """The GPU (``[nvmlDev]`` after the rank, else the line's CUDA device) sends through the NIC of ``up``;
    through a PXN proxy (``NET/IB/3(5)``) the NIC is the proxy GPU's own, not this one's choice."""
    if conn.proxy_rank is not None and conn.proxy_rank != conn.rank:
        return
    dev = conn.rank_device
    index = int(dev) if dev is not None and dev.isdigit() and len(dev) <= 3 else conn.cuda_dev
    if 0 <= index < topo.gpu_node.shape[1]:
        out.nic_use.setdefault(int(topo.gpu_node[server, index]), set()).add(int(topo.link_src[up]))


def map_series(bundle: TelemetryBundle, topo: Topology) -> MappedSeries:
    """Every exporter series of ``bundle`` that names a component of ``topo``, on that component."""
    out = MappedSeries()
    for rel, metrics in bundle.metric_files.items():
        file_host = host_of_path(topo, rel)
        _gpus_file = MappedSeries()
        _gpus(_gpus_file, topo, metrics, file_host)
        if _gpus_file.gpu_busy and (out.gpu_busy_metric in (None, _gpus_file.gpu_busy_metric)):
            out.gpu_busy.update(_gpus_file.gpu_busy)
            out.gpu_busy_metric = _gpus_file.gpu_busy_metric
        out.gpu_throttle.update(_gpus_file.gpu_throttle)
        out.gpu_pcie.update(_gpus_file.gpu_pcie)
        out.unmatched.extend(_gpus_file.unmatched)
        out.blank.extend(_gpus_file.blank)
        out.out_of_range.extend(_gpus_file.out_of_range)
        _port_counters(out, topo, metrics, file_host)
        _port_rates(out, topo, metrics, file_host)
    _perfquery(out, topo, bundle)
    _ethtool(out, topo, bundle)
    _nccl_users(out, topo, bundle)
    _drop_rates_above_line(out, topo)  # once every file's negotiated rates are read
    return out


def _drop_rates_above_line(out: MappedSeries, topo: Topology) -> None:
    """Leave out (and name) each link's byte rate above what its port can send, the higher of its nominal
    and negotiated rate (:data:`SAMPLING_TOLERANCE`): a counter in bits, not bytes, reads 8 times too
    high, and read as bytes it made the port the cluster's busiest. The unit is not guessed."""
    for link in sorted(out.link_tx_Bps):
        line_Bps = max(float(topo.link_capacity_Bps[link]), out.link_rate_Bps.get(link, 0.0))
        rate_Bps = out.link_tx_Bps[link]
        if rate_Bps > SAMPLING_TOLERANCE * line_Bps:
            out.above_line_rate.append(f"{topo.link_name(link)} {format_rate(rate_Bps)} over a line rate of "
                                       f"{format_rate(line_Bps)}")
            del out.link_tx_Bps[link]
            out.link_tx_bytes.pop(link, None)  # the same counter's increase: as wrong as its rate
    if out.above_line_rate and not out.link_tx_Bps:
        # no rate is left: the bytes are counts, where a dump's (perfquery, ethtool) count of a left-out
        # port is what would have been read without the bad counter (beside rates it is not read at all)
        for link, count in out.window_bytes.items():
            out.link_tx_bytes.setdefault(link, count)
