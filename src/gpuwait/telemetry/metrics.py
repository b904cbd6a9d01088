"""A simulated run as the metrics a real cluster's exporters would show (dcgm-exporter, mlx5 ethtool, perfquery, node_exporter; docs/sources.md).

:func:`metrics_from_result` turns a :class:`~gpuwait.steps.result.RunResult` into samples under
the exporters' own names and label conventions, so the diagnosis reads a simulation and a
Prometheus scrape of a real cluster with the same code:

* dcgm-exporter, one sample per GPU of the job, labels ``gpu, device, modelName, Hostname``
  (``UUID`` and ``pci_bus_id`` are left out: a simulated GPU has neither). Gauges averaged over
  the mean step:

  - ``DCGM_FI_DEV_GPU_UTIL`` (percent): the part of the step a kernel runs. By default only
    compute kernels count; real NVML also counts NCCL kernels, which spin while they wait, so
    real clusters read higher during exposed communication (``gpu_util_counts_nccl=True``
    imitates that).
  - ``DCGM_FI_PROF_SM_ACTIVE`` (0..1): compute fraction x ``sm_active_per_busy`` (default 0.9:
    large GEMMs keep nearly every SM busy, launch gaps and tail waves do not). NCCL kernels hold a
    few SMs (one block per channel) and are left out.
  - ``DCGM_FI_PROF_NVLINK_TX_BYTES`` / ``_RX_`` and ``DCGM_FI_PROF_PCIE_TX_BYTES`` / ``_RX_``
    (bytes/s): bytes per step on the GPU's NVLink or PCIe links out of (TX) and into (RX) it,
    divided by the step time. Payload only: DCGM's PCIe figure also counts TLP headers.

* NIC ports (every compute NIC port of the topology; RDMA device ``mlx5_<k>``, one per port as
  ConnectX exposes them, port ``1``; labels ``instance`` (server), ``device``, ``port`` and
  ``node``, gpuwait's name of the NIC). Counters are totals over the run (``steps`` steps) and
  count wire bytes: payload plus per-packet headers, with packets = ceil(payload / MTU) (full
  packets; ACKs and CNPs are not modelled, so receive packet counts are a lower bound):

  - InfiniBand: PMA ``PortXmitData``/``PortRcvData`` in **4-byte words** (LRH+BTH+ICRC counted,
    VCRC not, as the IBA defines them), ``PortXmitPkts``/``PortRcvPkts``, and node_exporter's
    ``node_infiniband_port_data_{transmitted,received}_bytes_total`` (words x 4) and
    ``..._packets_{transmitted,received}_total``.
  - RoCEv2: mlx5 ``ethtool -S`` counters on netdev ``eth<k>``: ``tx_bytes_phy``/``rx_bytes_phy``,
    ``tx_packets_phy``/``rx_packets_phy`` (Ethernet, IPv4, UDP, BTH, ICRC and FCS counted) and the
    same on the RoCE priority, ``tx_prio<p>_bytes``...
  - TCP: node_exporter ``node_network_{transmit,receive}_{bytes,packets}_total`` on ``eth<k>``.

  ``PortXmitWait``, PFC pause frames, ECN marks, CNPs and drops are **not** emitted: the flow
  engine has no queues or credits, so any number would be invented. A model that has them (the
  packet engine, a fault) passes them in ``extra_counters`` under their real names
  (``rx_prio3_pause``, ``np_ecn_marked_roce_packets``, ``PortXmitWait``...).

* gpuwait's own: ``gpuwait_step_seconds``, ``gpuwait_step_ideal_seconds``,
  ``gpuwait_step_phase_seconds{rank,Hostname,gpu,phase}`` (seconds per step in each
  breakdown category), ``gpuwait_exposed_comm_seconds{communication}``,
  ``gpuwait_collective_seconds{name,group,collective,algorithm,protocol}`` (one call),
  ``gpuwait_collective_bus_bandwidth_bytes_per_second{...}``,
  ``gpuwait_link_utilization{link,tier}`` and ``gpuwait_link_transmit_bytes_total{link,tier}``.
"""

from __future__ import annotations

import math

import numpy as np

from gpuwait.errors import SpecError
from gpuwait.steps.result import BREAKDOWN_CATEGORIES, RunResult
from gpuwait.telemetry.metricset import Labels, MetricInfo, MetricSet, Sample, as_labels
from gpuwait.telemetry.nic_counters import PMA_WORD_BYTES
from gpuwait.topology.model import LinkKind, Topology
from gpuwait.transport import resolve_transport

__all__ = ["PMA_WORD_BYTES", "SM_ACTIVE_PER_BUSY", "MetricInfo", "MetricSet", "Sample", "metrics_from_result"]

#: Fraction of cycles SMs have a warp while compute kernels run (training GEMMs: 0.85-0.95).
SM_ACTIVE_PER_BUSY = 0.9
# Header bytes per packet each counter sees, beyond the payload.
_IB_PMA_HEADER_BYTES = 8 + 12 + 4           # LRH + BTH + ICRC; the VCRC is outside PortXmitData
_ROCE_PHY_HEADER_BYTES = 14 + 20 + 8 + 12 + 4 + 4  # Ethernet + IPv4 + UDP + BTH + ICRC + FCS
_TCP_NETDEV_HEADER_BYTES = 14 + 20 + 32     # Ethernet + IPv4 + TCP with timestamps; netdevs count no FCS

_INFO = {
    "DCGM_FI_DEV_GPU_UTIL": MetricInfo("gauge", "GPU utilization (in %)."),
    "DCGM_FI_PROF_SM_ACTIVE": MetricInfo("gauge", "The ratio of cycles an SM has at least 1 warp assigned."),
    "DCGM_FI_PROF_NVLINK_TX_BYTES": MetricInfo("gauge", "The rate of data transmitted over NVLink, in bytes per second."),
    "DCGM_FI_PROF_NVLINK_RX_BYTES": MetricInfo("gauge", "The rate of data received over NVLink, in bytes per second."),
    "DCGM_FI_PROF_PCIE_TX_BYTES": MetricInfo("gauge", "The rate of data transmitted over the PCIe bus - including "
                                             "both protocol headers and data payloads - in bytes per second."),
    "DCGM_FI_PROF_PCIE_RX_BYTES": MetricInfo("gauge", "The rate of data received over the PCIe bus - including "
                                             "both protocol headers and data payloads - in bytes per second."),
    "PortXmitData": MetricInfo("counter", "PMA: data octets transmitted, divided by 4."),
    "PortRcvData": MetricInfo("counter", "PMA: data octets received, divided by 4."),
    "PortXmitPkts": MetricInfo("counter", "PMA: packets transmitted."),
    "PortRcvPkts": MetricInfo("counter", "PMA: packets received."),
    "node_infiniband_port_data_transmitted_bytes_total": MetricInfo(
        "counter", "Number of data octets transmitted on all links"),
    "node_infiniband_port_data_received_bytes_total": MetricInfo("counter", "Number of data octets received on all links"),
    "node_infiniband_port_packets_transmitted_total": MetricInfo("counter", "Number of packets transmitted on all VLs by this port"),
    "node_infiniband_port_packets_received_total": MetricInfo("counter", "Number of packets received on all VLs by this port"),
    "node_network_transmit_bytes_total": MetricInfo("counter", "Network device statistic transmit_bytes."),
    "node_network_receive_bytes_total": MetricInfo("counter", "Network device statistic receive_bytes."),
    "node_network_transmit_packets_total": MetricInfo("counter", "Network device statistic transmit_packets."),
    "node_network_receive_packets_total": MetricInfo("counter", "Network device statistic receive_packets."),
    "gpuwait_step_seconds": MetricInfo("gauge", "Mean step time of the simulated run."),
    "gpuwait_step_ideal_seconds": MetricInfo("gauge", "Step time on a network of infinite bandwidth and zero latency."),
    "gpuwait_step_phase_seconds": MetricInfo("gauge", "Seconds per step a GPU spends in each phase; phases add up "
                                             "to the step time."),
    "gpuwait_exposed_comm_seconds": MetricInfo("gauge", "Exposed (not hidden by compute) communication per step, "
                                               "job mean."),
    "gpuwait_collective_seconds": MetricInfo("gauge", "Time of one call of a collective, with the step's traffic."),
    "gpuwait_collective_bus_bandwidth_bytes_per_second": MetricInfo("gauge", "nccl-tests bus bandwidth of one call."),
    "gpuwait_link_utilization": MetricInfo("gauge", "Busiest utilization of a link during communication, 0..1."),
    "gpuwait_link_transmit_bytes_total": MetricInfo("counter", "Bytes carried by a link over the run."),
}
for _p in range(8):
    for _d, _word in (("tx", "transmitted"), ("rx", "received")):
        _INFO[f"{_d}_prio{_p}_bytes"] = MetricInfo("counter", f"Bytes {_word} on priority {_p} (ethtool -S).")
        _INFO[f"{_d}_prio{_p}_packets"] = MetricInfo("counter", f"Packets {_word} on priority {_p} (ethtool -S).")
for _d, _word in (("tx", "transmitted"), ("rx", "received")):
    _INFO[f"{_d}_bytes_phy"] = MetricInfo("counter", f"Bytes {_word} on the physical port (ethtool -S).")
    _INFO[f"{_d}_packets_phy"] = MetricInfo("counter", f"Packets {_word} on the physical port (ethtool -S).")


class _Samples:
    """Rows collected before they become a MetricSet."""

    def __init__(self) -> None:
        self.rows: list[Sample] = []

    def add(self, name: str, labels: Labels | dict, value: float) -> None:
        self.rows.append(Sample(name, as_labels(labels), float(value)))


def _per_node_bytes(topo: Topology, bytes_per_step: np.ndarray, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """Bytes per step on links of ``kind`` out of (TX) and into (RX) each node."""
    on = topo.link_kind == LinkKind.of(kind)
    tx = np.bincount(topo.link_src[on], weights=bytes_per_step[on], minlength=topo.n_nodes)
    rx = np.bincount(topo.link_dst[on], weights=bytes_per_step[on], minlength=topo.n_nodes)
    return tx, rx


def _host(node_name: str) -> str:
    return node_name.split(".", 1)[0]


def _dcgm(out: _Samples, result: RunResult, topo: Topology, gpu_nodes: np.ndarray, *, sm_active_per_busy: float,
          gpu_util_counts_nccl: bool) -> None:
    per_gpu, step_s = result.breakdown.per_gpu_s, result.breakdown.step_time_s
    b = np.asarray(result.links.bytes_per_step, dtype=float)
    nvl_tx, nvl_rx = _per_node_bytes(topo, b, "nvlink")
    pcie_tx, pcie_rx = _per_node_bytes(topo, b, "pcie")
    model = topo.spec.server.gpu_model
    for rank, node in enumerate(gpu_nodes.tolist()):
        local = rank % topo.gpus_per_server  # rank r is gpu_node.ravel()[r]
        labels = {"gpu": local, "device": f"nvidia{local}", "modelName": model, "Hostname": _host(topo.node_name[node])}
        busy_s = per_gpu["compute"][rank]
        if gpu_util_counts_nccl:
            busy_s = busy_s + per_gpu["exposed_comm"][rank] + per_gpu["straggler_wait"][rank]
        compute = per_gpu["compute"][rank] / step_s if step_s > 0 else 0.0
        out.add("DCGM_FI_DEV_GPU_UTIL", labels, min(100.0, 100.0 * busy_s / step_s) if step_s > 0 else 0.0)
        out.add("DCGM_FI_PROF_SM_ACTIVE", labels, min(1.0, compute * sm_active_per_busy))
        for name, arr in (("NVLINK_TX", nvl_tx), ("NVLINK_RX", nvl_rx), ("PCIE_TX", pcie_tx), ("PCIE_RX", pcie_rx)):
            out.add(f"DCGM_FI_PROF_{name}_BYTES", labels, arr[node] / step_s if step_s > 0 else 0.0)


def _nic_ports(out: _Samples, result: RunResult, topo: Topology, *, roce_priority: int) -> None:
    profile = resolve_transport(topo.spec.transport)
    b = np.asarray(result.links.bytes_per_step, dtype=float) * result.steps
    n_servers, n_nics, n_ports = topo.nic_uplink.shape
    for server in range(n_servers):
        for nic in range(n_nics):
            for port in range(n_ports):
                up = int(topo.nic_uplink[server, nic, port])
                if up < 0:
                    continue
                down = topo.reverse_link(up)
                tx_payload = float(b[up])
                rx_payload = float(b[down]) if down is not None else 0.0
                k = nic * n_ports + port
                node = str(topo.node_name[topo.link_src[up]])
                base = {"instance": _host(node)}
                tx_pkts = math.ceil(tx_payload / profile.mtu_bytes)
                rx_pkts = math.ceil(rx_payload / profile.mtu_bytes)
                if profile.name == "infiniband":
                    labels = {**base, "device": f"mlx5_{k}", "port": "1", "node": node}
                    tx_words = int((tx_payload + tx_pkts * _IB_PMA_HEADER_BYTES) // PMA_WORD_BYTES)
                    rx_words = int((rx_payload + rx_pkts * _IB_PMA_HEADER_BYTES) // PMA_WORD_BYTES)
                    out.add("PortXmitData", labels, tx_words)
                    out.add("PortRcvData", labels, rx_words)
                    out.add("PortXmitPkts", labels, tx_pkts)
                    out.add("PortRcvPkts", labels, rx_pkts)
                    out.add("node_infiniband_port_data_transmitted_bytes_total", labels, tx_words * PMA_WORD_BYTES)
                    out.add("node_infiniband_port_data_received_bytes_total", labels, rx_words * PMA_WORD_BYTES)
                    out.add("node_infiniband_port_packets_transmitted_total", labels, tx_pkts)
                    out.add("node_infiniband_port_packets_received_total", labels, rx_pkts)
                elif profile.name == "rocev2":
                    labels = {**base, "device": f"eth{k}", "node": node}
                    tx_bytes = tx_payload + tx_pkts * _ROCE_PHY_HEADER_BYTES
                    rx_bytes = rx_payload + rx_pkts * _ROCE_PHY_HEADER_BYTES
                    for prefix in ("", f"prio{roce_priority}_"):
                        suffix = "_phy" if not prefix else ""
                        out.add(f"tx_{prefix}bytes{suffix}", labels, round(tx_bytes))
                        out.add(f"rx_{prefix}bytes{suffix}", labels, round(rx_bytes))
                        out.add(f"tx_{prefix}packets{suffix}", labels, tx_pkts)
                        out.add(f"rx_{prefix}packets{suffix}", labels, rx_pkts)
                else:  # kernel TCP (and any non-RDMA transport): the netdev sees every byte
                    labels = {**base, "device": f"eth{k}", "node": node}
                    out.add("node_network_transmit_bytes_total", labels, round(tx_payload + tx_pkts * _TCP_NETDEV_HEADER_BYTES))
                    out.add("node_network_receive_bytes_total", labels, round(rx_payload + rx_pkts * _TCP_NETDEV_HEADER_BYTES))
                    out.add("node_network_transmit_packets_total", labels, tx_pkts)
                    out.add("node_network_receive_packets_total", labels, rx_pkts)


def _gpuwait(out: _Samples, result: RunResult, topo: Topology, gpu_nodes: np.ndarray) -> None:
    bd = result.breakdown
    out.add("gpuwait_step_seconds", {}, bd.step_time_s)
    out.add("gpuwait_step_ideal_seconds", {}, bd.ideal_step_time_s)
    for rank, node in enumerate(gpu_nodes.tolist()):
        name = str(topo.node_name[node])
        gpu = rank % topo.gpus_per_server
        for phase in BREAKDOWN_CATEGORIES:
            if phase in bd.per_gpu_s:
                out.add("gpuwait_step_phase_seconds", {"rank": rank, "Hostname": _host(name), "gpu": gpu, "phase": phase},
                        bd.per_gpu_s[phase][rank])
    for what, seconds in bd.exposed_comm_s.items():
        out.add("gpuwait_exposed_comm_seconds", {"communication": what}, seconds)
    for c in result.collectives:
        labels = {"name": c.label, "group": c.group, "collective": c.collective, "algorithm": c.algorithm,
                  "protocol": c.protocol}
        out.add("gpuwait_collective_seconds", labels, c.time_s)
        out.add("gpuwait_collective_bus_bandwidth_bytes_per_second", labels, c.busbw_GBps * 1e9)
    links = result.links
    total = np.asarray(links.bytes_per_step, dtype=float) * result.steps
    for link, (name, tier) in enumerate(zip(links.name, links.tier.tolist())):
        out.add("gpuwait_link_utilization", {"link": name, "tier": tier}, links.utilization[link])
        out.add("gpuwait_link_transmit_bytes_total", {"link": name, "tier": tier}, total[link])


def metrics_from_result(result: RunResult, topo: Topology, *, extra_counters: MetricSet | None = None,
                        sm_active_per_busy: float = SM_ACTIVE_PER_BUSY, roce_priority: int = 3,
                        gpu_util_counts_nccl: bool = False) -> MetricSet:
    """The metrics exporters on the simulated cluster would show for ``result`` (see the module doc).

    Parameters
    ----------
    result : RunResult
        The run; rank ``r`` ran on GPU ``topo.gpu_node.ravel()[r]``.
    topo : Topology
        The topology the run used (its link ids index ``result.links``).
    extra_counters : MetricSet, optional
        Counters the flow engine cannot give (PFC pauses, ECN marks, ``PortXmitWait``, drops) from
        a model that has them, appended as they are; a sample that repeats a generated one raises.
    sm_active_per_busy : float
        ``DCGM_FI_PROF_SM_ACTIVE`` per unit of compute fraction.
    roce_priority : int
        The PFC priority RoCE traffic is mapped to (``tx_prio3_bytes``...).
    gpu_util_counts_nccl : bool
        Count exposed communication and straggler waits (NCCL kernels running) in
        ``DCGM_FI_DEV_GPU_UTIL``, as real NVML does.

    Raises
    ------
    SpecError
        When the result does not belong to the topology (more ranks than GPUs, another link count),
        or ``extra_counters`` repeats a generated sample.
    """
    n_gpus = result.breakdown.n_gpus
    if n_gpus > topo.n_gpus:
        raise SpecError(f"metrics_from_result: the run has {n_gpus} GPU ranks but topology {topo.name} has "
                        f"{topo.n_gpus} GPUs", hint="pass the topology the run was simulated on")
    if len(result.links.bytes_per_step) != topo.n_links:
        raise SpecError(f"metrics_from_result: the run has statistics for {len(result.links.bytes_per_step)} links "
                        f"but topology {topo.name} has {topo.n_links}", hint="pass the topology the run was simulated on")
    if not 0 <= roce_priority <= 7:
        raise SpecError(f"roce_priority: got {roce_priority}; expected a PFC priority 0..7")
    gpu_nodes = topo.gpu_node.ravel()[:n_gpus]
    out = _Samples()
    _dcgm(out, result, topo, gpu_nodes, sm_active_per_busy=sm_active_per_busy, gpu_util_counts_nccl=gpu_util_counts_nccl)
    _nic_ports(out, result, topo, roce_priority=roce_priority)
    _gpuwait(out, result, topo, gpu_nodes)
    first = {name: i for i, name in reversed(list(enumerate(s.name for s in out.rows)))}
    rows = sorted(out.rows, key=lambda s: first[s.name])  # one family together, as exporters print them
    metrics = MetricSet.from_samples(rows, info=_INFO)
    used = {k: v for k, v in _INFO.items() if k in set(metrics.names())}
    metrics = MetricSet(metrics.name, metrics.labels, metrics.value, metrics.timestamp_s, used)
    if extra_counters is None or len(extra_counters) == 0:
        return metrics
    clash = metrics.to_dict().keys() & extra_counters.to_dict().keys()
    if clash:
        name, labels = min(clash)
        raise SpecError(f"extra_counters: {len(clash)} samples repeat generated ones, e.g. {name}{dict(labels)}",
                        hint="extra_counters is for counters the flow engine does not produce (pauses, ECN marks, drops)")
    return MetricSet.concat([metrics, extra_counters])
