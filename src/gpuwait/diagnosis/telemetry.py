"""Telemetry in, observation out: the diagnosis of a real (or exported) cluster.

Exporting a simulated run writes the metrics :mod:`gpuwait.telemetry.metrics` names after the
real exporters, plus what the faults leave behind: port error counters under their PMA / ethtool
names (``SymbolErrorCounter``, ``LinkDownedCounter``, ``out_of_sequence``), each port's negotiated
rate (what ``ibstat`` / ``ethtool`` report), NCCL's transport per server (what the ``NET/IB`` /
``NET/Socket`` and ``GDRDMA`` lines of ``NCCL_DEBUG=INFO`` say) and traffic on the job's links that
its own flows do not account for. Reading telemetry back turns those series into an
:class:`~gpuwait.diagnosis.observe.Observation`; series that are absent are listed as missing and
the rules that need them stay silent.
"""

from __future__ import annotations

import numpy as np

from gpuwait.diagnosis.observe import CONGESTION_COUNTERS, TELEMETRY_READING_NOISE, Observation, observe_run
from gpuwait.diagnosis.rules import NOISE_SIGMAS, RATE_DOWNSHIFT, equal_cost_groups
from gpuwait.faults.kinds import PCIE_FULL_LANES, server_pcie_generation
from gpuwait.runner.workload import WorkloadRun
from gpuwait.steps.result import BREAKDOWN_CATEGORIES
from gpuwait.telemetry.bundle import TelemetryBundle
from gpuwait.telemetry.mapping import MappedSeries, host_of, map_series, nic_port_link, sample_host
from gpuwait.telemetry.metrics import metrics_from_result
from gpuwait.telemetry.metricset import MetricInfo, MetricSet
from gpuwait.telemetry.nic_counters import PMA_WORD_BYTES
from gpuwait.telemetry.phases import phase_bytes_from_metrics, port_byte_series
from gpuwait.topology.model import LinkKind, Network, Topology

_INFO = {
    "SymbolErrorCounter": MetricInfo("counter", "PMA SymbolErrorCounter of the port receiving on the link"),
    "LinkDownedCounter": MetricInfo("counter", "PMA LinkDownedCounter: times the link went down"),
    "out_of_sequence": MetricInfo("counter", "mlx5 out_of_sequence: packets received out of order (losses)"),
    "gpuwait_link_rate_bytes_per_second": MetricInfo("gauge", "negotiated rate of the port sending on the link (ibstat/ethtool)"),
    "gpuwait_link_foreign_bytes_per_second": MetricInfo("gauge", "traffic on the link the job's own flows do not account for"),
    "gpuwait_nccl_transport_info": MetricInfo("gauge", "NCCL's network transport per server (NCCL_DEBUG=INFO lines)"),
    "gpuwait_nic_numa_remote": MetricInfo("gauge", "1 where a GPU's NIC sits behind the other CPU socket (NCCL topology)"),
    "gpuwait_steps_total": MetricInfo("counter", "training steps the run's counters cover (the scrape window in steps)"),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": MetricInfo("gauge", "Throttling reasons bitmask (NVML clocks throttle reasons)"),
    "DCGM_FI_DEV_PCIE_LINK_GEN": MetricInfo("gauge", "PCIe current link generation"),
    "DCGM_FI_DEV_PCIE_LINK_WIDTH": MetricInfo("gauge", "PCIe current link width"),
}


def export_metrics(run: WorkloadRun, case: int = 0, scrape_interval_s: float | None = None) -> MetricSet:
    """Every metric of case ``case`` of a simulated run, fault evidence included. With
    ``scrape_interval_s``, also the network ports' byte counters sampled at that interval and the
    collectives' time windows (:mod:`gpuwait.telemetry.phases`): what per-collective port bytes are
    read from."""
    result = run.results[case]
    topo = run.topo
    observation = observe_run(topo, result, run.effects)
    # a simulated run has every series: observe_run sets the rates and phases it reads off the run
    assert observation.link_rate_Bps is not None and observation.per_gpu_s is not None
    samples = []
    network = topo.network_links
    for link in np.flatnonzero(network):
        name = topo.link_name(int(link))
        samples.append(("gpuwait_link_rate_bytes_per_second", {"link": name}, float(observation.link_rate_Bps[link])))
    for counter, values in observation.counters.items():
        metric = {"symbol_errors": "SymbolErrorCounter", "link_downed": "LinkDownedCounter",
                  "out_of_sequence": "out_of_sequence"}[counter]
        for link in np.flatnonzero(values > 0):
            receiver = topo.node_name[topo.link_dst[link]]
            samples.append((metric, {"node": receiver, "link": topo.link_name(int(link))}, float(values[link])))
    if run.effects.foreign_Bps is not None:
        for link in np.flatnonzero(run.effects.foreign_Bps > 0):
            samples.append(("gpuwait_link_foreign_bytes_per_second", {"link": topo.link_name(int(link))},
                            float(run.effects.foreign_Bps[link])))
    transport = "NET/Socket" if run.effects.socket_transport else "NET/IB"
    for server in range(topo.n_servers):
        gdr = "0" if run.effects.socket_transport or server in run.effects.no_gdr_servers else "1"
        samples.append(("gpuwait_nccl_transport_info", {"Hostname": topo.server_name(server), "transport": transport, "gdr": gdr}, 1.0))
    # every GPU's placement, local ones at 0 (as `nvidia-smi topo -m` lists every GPU-NIC pair): a
    # series written only where a NIC is remote reads, once lost, as every NIC local
    remote = set(run.effects.remote_nic_gpus)
    for gpu in topo.gpu_node.ravel():
        samples.append(("gpuwait_nic_numa_remote", {"gpu": topo.node_name[gpu]}, float(int(gpu) in remote)))
    samples.append(("gpuwait_steps_total", {}, float(result.steps)))
    samples += _disk_busy(topo, observation, result.steps * result.breakdown.step_time_s)
    samples += _dcgm_gpu_state(topo, observation)
    extra = MetricSet.from_samples(samples, info=_INFO)
    if scrape_interval_s is not None:
        extra = MetricSet.concat([extra, port_byte_series(result, topo, scrape_interval_s)])
    return metrics_from_result(result, topo, extra_counters=extra)


#: the disk node_exporter reports a storage server's backend on (its busy time is the backend's)
STORAGE_DEVICE = "nvme0n1"


def _disk_busy(topo: Topology, observation: Observation, run_s: float) -> list:
    """What node_exporter's ``node_disk_io_time_seconds_total`` shows on each storage server over the
    run: a slow backend busy the whole run, one that keeps up no longer than its port sends."""
    samples = []
    assert observation.link_bytes is not None  # a simulated run's (export_metrics): observe_run sets it
    busy = set(observation.storage_busy or ())
    for node in topo.storage_server_node:
        name = topo.node_name[node]
        ports = np.flatnonzero(topo.link_src == node)
        port_s = float((observation.link_bytes[ports] / np.maximum(topo.link_capacity_Bps[ports], 1e-30)).max(initial=0.0))
        seconds = run_s if name in busy else min(port_s * run_s / max(observation.step_time_s or run_s, 1e-30), run_s)
        samples.append(("node_disk_io_time_seconds_total", {"instance": name, "device": STORAGE_DEVICE}, seconds))
    return samples


def _storage_busy(metrics, names: set[str], step: float | None, steps: float | None) -> tuple[str, ...] | None:
    """Storage servers whose disk was busy one second per second over the run of ``steps`` steps
    (``RATE_DOWNSHIFT`` of it, for sampling): node_exporter's ``node_disk_io_time_seconds_total`` over
    the run's duration."""
    if "node_disk_io_time_seconds_total" not in names or steps is None or not step:
        return None
    run_s = steps * step
    disks = metrics.select("node_disk_io_time_seconds_total")
    return tuple(sorted({str(dict(lab).get("instance", "")).split(":")[0] for lab, v in zip(disks.labels, disks.value)
                         if v >= RATE_DOWNSHIFT * run_s}))


def _dcgm_gpu_state(topo: Topology, observation: Observation) -> list:
    """What dcgm-exporter reports of each modelled GPU's clocks and PCIe link: the throttle reasons and
    link a fault left (gpu-throttle, pcie-downtrained), else none and the server's x16 link (a
    slow-gpu fault says nothing of why)."""
    samples = []
    for server in range(topo.n_servers):
        for index in range(topo.gpu_node.shape[1]):
            gpu = int(topo.gpu_node[server, index])
            labels = {"Hostname": topo.server_name(server), "gpu": str(index)}
            gen, width = (observation.gpu_pcie or {}).get(gpu, (float(server_pcie_generation(topo)), float(PCIE_FULL_LANES)))
            samples += [("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", labels, float((observation.gpu_throttle or {}).get(gpu, 0))),
                        ("DCGM_FI_DEV_PCIE_LINK_GEN", labels, gen), ("DCGM_FI_DEV_PCIE_LINK_WIDTH", labels, width)]
    return samples


def _left_out(what: str, items: list[str], shown: int = 3) -> list[str]:
    """One `missing` entry naming the first ``shown`` of ``items`` after ``what``; none when there are none."""
    if not items:
        return []
    more = f"; and {len(items) - shown} more" if len(items) > shown else ""
    return [f"{what}: " + "; ".join(items[:shown]) + more]


def observe_telemetry(bundle: TelemetryBundle, topo: Topology) -> Observation:
    """An observation from imported telemetry on the cluster ``topo`` describes (names must match).

    gpuwait's own series (``gpuwait_*``, from ``gpuwait telemetry export``) are read first; what they
    do not give comes from the exporters' series placed on the cluster by
    :func:`~gpuwait.telemetry.mapping.map_series` (DCGM, node_exporter, perfquery, ethtool, NCCL logs)
    and from PyTorch profiler traces (step time and per-rank phases)."""
    metrics = bundle.metrics
    missing: list[str] = []
    names = set(metrics.names()) if len(metrics) else set()
    step = bundle.run_value("gpuwait_step_seconds")
    ideal = bundle.run_value("gpuwait_step_ideal_seconds")
    steps = bundle.run_value("gpuwait_steps_total")  # the steps the counters cover (one run's, as the step)
    real = map_series(bundle, topo)  # the exporters' own series (DCGM, node_exporter, perfquery, ethtool)
    traces = [t for t in bundle.kineto.values() if t.steps]
    if step is None and traces:
        step = float(np.mean([t.step_time_s for t in traces]))
    if step is None:  # the rules then read every time per second of the run (rules._step)
        missing.append("step time (a PyTorch profiler trace's ProfilerStep events): the times below are per "
                       "second of the run, not per step")
    gpu_names, per_gpu = _phases(metrics, names, real, traces, topo, step)
    if per_gpu is None:
        missing.append("per-GPU step phases (DCGM_FI_PROF_SM_ACTIVE / DCGM_FI_DEV_GPU_UTIL, Kineto traces or "
                       "gpuwait_step_phase_seconds)")
    nominal = topo.link_capacity_Bps.astype(float)  # the cluster description's line rates
    rate = _rates(metrics, names, real, topo)
    if rate is None:
        missing.append("negotiated port rates (ibstat / ethtool / node_infiniband_rate_bytes_per_second)")
    util = _link_vector(metrics, names, "gpuwait_link_utilization", topo)
    if util is None and real.link_tx_Bps:
        util = _on_links(topo, real.link_tx_Bps) / (rate if rate is not None else nominal)
    if util is None:
        missing.append("per-port utilization")
    link_bytes = _per_step_bytes(metrics, names, real, topo, step, steps)
    counters = {}
    for metric, key in (("SymbolErrorCounter", "symbol_errors"), ("LinkDownedCounter", "link_downed"),
                        ("out_of_sequence", "out_of_sequence")):
        values = _link_vector(metrics, names, metric, topo)
        if values is None and real.counters.get(key):
            values = _on_links(topo, real.counters[key])
        if values is not None:
            counters[key] = values
    for key in CONGESTION_COUNTERS:  # congestion counters (PMA, mlx5 ethtool and hw_counters)
        if real.counters.get(key):
            counters[key] = _on_links(topo, real.counters[key])
    foreign = _foreign(metrics, names, real, topo, link_bytes, step)
    socket, gdr_off, remote = _nccl_transport(bundle, metrics, names, topo)
    socket_from_counters = False
    if socket is None and (share := _kernel_counted_share(metrics, names, topo)) is not None \
            and share >= KERNEL_COUNTED_SOCKETS:
        socket, socket_from_counters = True, True
    if socket is None:
        missing.append("NCCL_DEBUG=INFO transport lines")
    phased = phase_bytes_from_metrics(metrics, topo, step) if link_bytes is not None else None
    if phased is None:
        missing.append("per-collective port bytes (port counters sampled over time with the collectives' windows)")
    missing += _left_out_all(bundle, metrics, names, real, topo)
    # the job reads its dataset when the storage servers' ports send (their transmit counters)
    reads = link_bytes is not None and bool(link_bytes[np.isin(topo.link_src, topo.storage_server_node)].sum() > 0)
    return Observation(topo=topo, step_time_s=step, baseline_step_time_s=ideal, gpu_names=gpu_names, per_gpu_s=per_gpu, link_util=util,
                       link_bytes=link_bytes, link_phase_bytes=phased[0] if phased else None,
                       collectives=phased[1] if phased else (), exposed_comm_s=_exposed_by_collective(metrics, names),
                       link_rate_Bps=rate, link_nominal_Bps=nominal if rate is not None else None,
                       link_users=dict(real.link_users), link_foreign_Bps=foreign, counters=counters, socket_transport=socket,
                       socket_from_counters=socket_from_counters,
                       counter_steps=steps if steps is not None else 1.0,
                       reading_noise=TELEMETRY_READING_NOISE,
                       gdr_off_servers=gdr_off, remote_nic_gpus=remote, storage_read=reads,
                       storage_busy=_storage_busy(metrics, names, step, steps),
                       gpu_throttle=dict(real.gpu_throttle) or None, gpu_pcie=dict(real.gpu_pcie) or None,
                       link_window_bytes=_on_links(topo, {**real.link_tx_bytes, **real.window_bytes})
                       if real.link_tx_bytes or real.window_bytes else None,
                       nccl_nic_use={g: tuple(sorted(n)) for g, n in real.nic_use.items()} or None,
                       nccl_link_local_gids=dict(real.link_local_gids),
                       missing=tuple(missing))


def _left_out_all(bundle: TelemetryBundle, metrics: MetricSet, names: set[str], real: MappedSeries,
                  topo: Topology) -> list[str]:
    """What the readers could not read, and the series whose host, GPU or port the cluster does not
    have (named, never guessed): the first few of each."""
    out: list[str] = []
    out += _left_out("unreadable rows skipped", bundle.skipped)
    out += _left_out("series naming nothing in the cluster, left out", real.unmatched)
    out += _left_out("port byte counters without a rate over the window (one sample), left out",
                     _without_rate(metrics, names, real, topo))
    out += _left_out("DCGM fields with no reading (DCGM's blank value), left out", real.blank)
    out += _left_out("GPU busy readings above their full scale (a 0-1 ratio written as a percentage?), left out",
                     real.out_of_range)
    out += _left_out("port byte rates above the port's line rate (counters in bits?), left out", real.above_line_rate)
    out += _left_out("PFC pause time above its window's length (durations not in microseconds?), left out",
                     real.pause_over_window)
    return out


#: The kernel's network-device counters (node_exporter's ``node_network_transmit_bytes_total``, what
#: ``ip -s link`` prints) count what crosses the TCP/IP stack; RDMA bypasses the kernel, so its bytes
#: show in the port's own counters only (InfiniBand PMA ``PortXmitData``; on mlx5 Ethernet the
#: ``*_phy`` and ``vport_rdma_*`` counters: Linux Documentation/networking/device_drivers/ethernet/
#: mellanox/mlx5/counters.rst). When most of the NIC ports' bytes are counted by the kernel, NCCL
#: sends through sockets whatever its log would say: the midpoint between an RDMA job (the kernel
#: sees management traffic only, ~0) and a socket job (the kernel sees every byte, ~1).
KERNEL_COUNTED_SOCKETS = 0.5
_NETDEV_TX = "node_network_transmit_bytes_total"
#: the port's own transmit counters (bytes per unit): every byte on the wire, RDMA or not
_PORT_TX = {"node_infiniband_port_data_transmitted_bytes_total": 1.0, "PortXmitData": float(PMA_WORD_BYTES),
            "tx_bytes_phy": 1.0, "node_ethtool_transmitted_bytes_phy": 1.0}


def _nic_port_totals(metrics: MetricSet, name: str, topo: Topology) -> dict[int, float]:
    """Compute NIC uplink -> the largest value counter ``name`` reports for it (a counter's largest
    reading is its count since it was cleared); ports that name no NIC of the cluster are left out."""
    chosen = metrics.select(name=name)
    totals: dict[int, float] = {}
    for labels, value in zip(chosen.labels, chosen.value):
        lab = dict(labels)
        server = sample_host(topo, lab)
        up = nic_port_link(topo, server, lab["device"], lab.get("port")) if server is not None and "device" in lab else None
        if up is not None:
            totals[up] = max(totals.get(up, 0.0), float(value))
    return totals


def _kernel_counted_share(metrics: MetricSet, names: set[str], topo: Topology) -> float | None:
    """The share of the compute NIC ports' transmitted bytes the kernel's netdev counters count
    (KERNEL_COUNTED_SOCKETS); None without netdev counters on those ports or without bytes. A port
    without its own counters is weighed by the netdev count alone (an exporter of netdev counters
    only, where the kernel then saw all the port's bytes that anyone counted)."""
    if _NETDEV_TX not in names:
        return None
    kernel = _nic_port_totals(metrics, _NETDEV_TX, topo)
    if not kernel:
        return None
    wire: dict[int, float] = {}
    for name, scale in _PORT_TX.items():
        if name in names:
            for link, value in _nic_port_totals(metrics, name, topo).items():
                wire[link] = max(wire.get(link, 0.0), value * scale)
    total = sum(max(kernel.get(link, 0.0), wire.get(link, 0.0)) for link in set(kernel) | set(wire))
    return sum(kernel.values()) / total if total > 0 else None


def _exposed_by_collective(metrics: MetricSet, names: set[str]) -> dict[str, float]:
    """Exposed seconds per step of each collective (``gpuwait_exposed_comm_seconds{communication}``; a
    profiler's NCCL kernels with no compute beside them, per process group); empty when absent."""
    if "gpuwait_exposed_comm_seconds" not in names:
        return {}
    chosen = metrics.select(name="gpuwait_exposed_comm_seconds")
    return {dict(lab)["communication"]: float(v) for lab, v in zip(chosen.labels, chosen.value) if "communication" in dict(lab)}


def _per_step_bytes(metrics: MetricSet, names: set[str], real: MappedSeries, topo: Topology,
                    step_s: float | None, steps: float | None) -> np.ndarray | None:
    """Bytes per link per step: counters cover a window of several steps, and the rules weigh a
    step's bytes at a port's rate. gpuwait's own totals over the ``steps`` they count; an exporter's
    rate over its query window times the step time (a second of the run without one, the frame the
    rules then read in); else counter increases of unknown window (the rules then bound each cost by
    the exposed communication, which needs no window).

    Where some ports have a rate, a port without one (a counter whose window kept one sample, a dump's
    count since the counter was cleared) is left out (:func:`_without_rate` names it): its count
    covers another span, and beside the others' it read as the busiest port of the cluster."""
    total = _link_vector(metrics, names, "gpuwait_link_transmit_bytes_total", topo)
    if total is not None:
        return total / max(steps if steps is not None else 1.0, 1.0)
    if real.link_tx_Bps:
        return _on_links(topo, real.link_tx_Bps) * (step_s or 1.0)
    return _on_links(topo, real.link_tx_bytes) if real.link_tx_bytes else None


def _without_rate(metrics: MetricSet, names: set[str], real: MappedSeries, topo: Topology) -> list[str]:
    """The links whose byte counter :func:`_per_step_bytes` leaves out for want of a rate."""
    if "gpuwait_link_transmit_bytes_total" in names or not real.link_tx_Bps:
        return []
    return [topo.link_name(link) for link in sorted(set(real.link_tx_bytes) - set(real.link_tx_Bps))]


def _foreign(metrics: MetricSet, names: set[str], real: MappedSeries, topo: Topology, link_bytes: np.ndarray | None,
             step_s: float | None) -> np.ndarray | None:
    """Other tenants' bytes per second per link: gpuwait's own series where exported, else (no real
    exporter has one) read off the port counters (:func:`foreign_beyond_sources`)."""
    foreign = _link_vector(metrics, names, "gpuwait_link_foreign_bytes_per_second", topo)
    if foreign is None and link_bytes is not None:
        foreign = foreign_beyond_sources(topo, link_bytes, step_s or 1.0, TELEMETRY_READING_NOISE,
                                         _counted_links(metrics, names, real, topo))
    return foreign


def _counted_links(metrics: MetricSet, names: set[str], real: MappedSeries, topo: Topology) -> np.ndarray:
    """The links whose transmit bytes were read, from the source :func:`_per_step_bytes` reads: a port
    without a reading is not a port that sent nothing."""
    counted = np.zeros(topo.n_links, bool)
    if "gpuwait_link_transmit_bytes_total" in names:
        counted[[link for link, _ in _by_link(metrics, "gpuwait_link_transmit_bytes_total", topo)]] = True
    else:
        counted[list(real.link_tx_Bps or real.link_tx_bytes)] = True
    return counted


def foreign_beyond_sources(topo: Topology, link_bytes: np.ndarray, step_s: float, noise: float,
                           counted: np.ndarray | None = None) -> np.ndarray:
    """Bytes per second on each switch-to-switch link that the job's own traffic cannot account for
    (at least), read off the port counters alone: another tenant's traffic.

    A tiered fabric routes up, then down, never up again after coming down (minimal, valley-free
    routing: the only kind a fat tree's up*/down* ECMP and adaptive routing use), so every byte a
    switch sends up one of its uplinks entered it from below, and every byte that comes down to it
    from above leaves it downwards. Counted on the ports of the job's own cluster, one uplink cannot
    carry more of the job's bytes than the switch received from below on all its ports together, nor
    one link from above more than the switch sends below: what exceeds that came from (or goes to) a
    port the cluster's description does not list, a host that is not the job's. Tier by tier from the
    hosts up, so what a lower link carries for another tenant does not feed the links above it. Only
    an excess beyond ``NOISE_SIGMAS`` standard deviations of the readings' relative ``noise``
    counts. On a link found loaded, the job's own bytes are then taken as its equal-cost siblings'
    mean, where some sibling carries none of another tenant's bytes. ``link_bytes`` are per step of
    ``step_s`` seconds; ``counted`` marks the links that have a reading (None: all), and a link is
    weighed only when it and every link below its switch have one (an unread port reads 0 bytes,
    which would leave its switch's uplinks fed by nothing)."""
    foreign_bytes = np.zeros(topo.n_links)
    compute = topo.link_network == Network.COMPUTE
    tier = topo.node_tier
    src_tier, dst_tier = tier[topo.link_src], tier[topo.link_dst]
    fabric = compute & (topo.link_kind == LinkKind.FABRIC) & (src_tier >= 1) & (dst_tier >= 1) & (src_tier != dst_tier)
    for level in range(1, int(tier.max(initial=0)) + 1):  # by the link's lower end: its feeders are settled
        for link in np.flatnonzero(fabric & (np.minimum(src_tier, dst_tier) == level)):
            src, dst = int(topo.link_src[link]), int(topo.link_dst[link])
            if dst_tier[link] > src_tier[link]:  # up: fed by what ``src`` received from below
                below = compute & (topo.link_dst == src) & (src_tier < level)
            else:                                # down: drained by what ``dst`` sends below
                below = compute & (topo.link_src == dst) & (dst_tier < level)
            if not below.any() or (counted is not None and not (counted[link] and counted[below].all())):
                continue
            fed = link_bytes[below] - foreign_bytes[below]
            excess = float(link_bytes[link] - fed.sum())
            if excess > NOISE_SIGMAS * noise * float(np.hypot(link_bytes[link], np.linalg.norm(link_bytes[below]))):
                foreign_bytes[link] = excess
    # the bound leaves the job up to everything its switch received on the loaded link; a hash spreads
    # the job's flows over equal-cost links alike, so the job's own share of the loaded link is what
    # its siblings without another tenant's bytes carry (as balanced, the collision rule's reading)
    for links in equal_cost_groups(topo):
        loaded, clean = links[foreign_bytes[links] > 0], links[foreign_bytes[links] == 0]
        if len(loaded) and len(clean):
            own = float(link_bytes[clean].mean())
            foreign_bytes[loaded] = np.maximum(foreign_bytes[loaded], link_bytes[loaded] - own)
    return foreign_bytes / step_s


def _on_links(topo: Topology, values: dict[int, float]) -> np.ndarray:
    out = np.zeros(topo.n_links)
    for link, value in values.items():
        out[link] = value
    return out


def _rates(metrics: MetricSet, names: set[str], real: MappedSeries, topo: Topology) -> np.ndarray | None:
    """Negotiated rate per link: the nominal one where nothing was reported."""
    if "gpuwait_link_rate_bytes_per_second" not in names and not real.link_rate_Bps:
        return None
    rate = topo.link_capacity_Bps.astype(float)
    for link, value in real.link_rate_Bps.items():
        rate[link] = value
    for link, value in _by_link(metrics, "gpuwait_link_rate_bytes_per_second", topo):
        rate[link] = value
    return rate


#: ``gpuwait_nic_numa_remote`` is 1 for a GPU whose NIC sits behind the other socket and 0 for a local
#: one; read with noise, the midpoint tells them apart
REMOTE_NIC_READ = 0.5


def _nccl_transport(bundle: TelemetryBundle, metrics: MetricSet, names: set[str], topo: Topology):
    """(NCCL on sockets?, servers without GPUDirect RDMA, GPUs with a remote NIC); None where unknown."""
    socket, gdr_off = None, None
    if "gpuwait_nccl_transport_info" in names:
        info = metrics.select(name="gpuwait_nccl_transport_info")
        labels = [dict(lab) for lab in info.labels]
        socket = any(lab.get("transport") == "NET/Socket" for lab in labels)
        gdr_off = tuple(sorted(topo.server_id(lab["Hostname"]) for lab in labels if lab.get("gdr") == "0" and not socket))
    for log in bundle.nccl_debug.values():
        socket = bool(socket) or log.socket_fallback
    net = [c for log in bundle.nccl_debug.values() for c in log.connections if c.is_net and not c.socket_fallback]
    if gdr_off is None and net:  # NET/IB lines without /GDRDMA: that host stages through host memory
        gdr_off = tuple(sorted({s for c in net if c.gdr is False and (s := host_of(topo, c.host)) is not None}))
    remote = None
    if "gpuwait_nic_numa_remote" in names:
        placed = metrics.select(name="gpuwait_nic_numa_remote")
        # 1 remote, 0 local; a noisy reading rounds (REMOTE_NIC_READ)
        remote = tuple(topo.node_id(dict(lab)["gpu"]) for lab, v in zip(placed.labels, placed.value) if v >= REMOTE_NIC_READ)
    elif bundle.nccl_debug:
        # NCCL's own lines name each GPU's NIC (``[send] via NET/IB/<dev>``): nccl-wrong-hca reads the
        # placement from them. gpuwait's transport series alone says nothing of where a NIC sits, so
        # without the placement series it stays unknown and is listed as missing
        remote = ()
    return socket, gdr_off, remote


def _phases(metrics: MetricSet, names: set[str], real: MappedSeries, traces: list, topo: Topology,
            step_s: float | None):
    """(GPU names, per-GPU phases): gpuwait's own, else from DCGM's compute share, else from Kineto traces."""
    if "gpuwait_step_phase_seconds" in names:
        phases = metrics.select(name="gpuwait_step_phase_seconds")
        ranks = sorted({int(dict(lab)["rank"]) for lab in phases.labels})
        per_gpu = {c: np.zeros(len(ranks)) for c in BREAKDOWN_CATEGORIES}
        for labels, value in zip(phases.labels, phases.value):
            lab = dict(labels)
            if lab.get("phase") in per_gpu:
                per_gpu[lab["phase"]][int(lab["rank"])] = value
        return [topo.node_name[g] for g in topo.gpu_node.ravel()[: len(ranks)]], per_gpu
    if real.gpu_busy:
        return _phases_from_busy(real, topo, step_s)
    ranked = {t.rank: t for t in traces if t.rank is not None and 0 <= t.rank < topo.n_gpus}
    if len(ranked) < 2:
        return None, None
    ranks = sorted(ranked)
    compute = np.array([ranked[r].compute_s for r in ranks])
    per_gpu = {c: np.zeros(len(ranks)) for c in BREAKDOWN_CATEGORIES}
    per_gpu["compute"] = compute
    # a rank that computes less than the slowest one waits the difference inside its NCCL kernels
    per_gpu["straggler_wait"] = np.minimum(compute.max() - compute, [ranked[r].exposed_comm_s for r in ranks])
    per_gpu["exposed_comm"] = np.array([ranked[r].exposed_comm_s for r in ranks]) - per_gpu["straggler_wait"]
    gpus = topo.gpu_node.ravel()
    return [topo.node_name[gpus[r]] for r in ranks], per_gpu


def _phases_from_busy(real: MappedSeries, topo: Topology, step_s: float | None):
    """Per-GPU phases from each GPU's compute share: a GPU that computes less than the busiest one
    waits the difference for it at the next collective (straggler wait). Without a step time the
    phases are shares of one second.

    The exposed communication is what is left of the step once the busiest GPU's compute is taken
    out, ``(1 - busy_max) x step``, the same on every GPU: a synchronous step ends when its slowest
    rank's last collective does, so the time the busiest GPU does not compute is time every rank
    waits on something other than a peer's compute. DCGM names no cause for it; network bytes are
    the usual one in a training step, but a data wait, a pipeline bubble or host overhead count too,
    so this is an upper bound, which is what the rules use it as (no network cause costs more)."""
    gpus = [int(g) for g in topo.gpu_node.ravel() if int(g) in real.gpu_busy]
    busy = np.array([real.gpu_busy[g] for g in gpus])
    scale = step_s if step_s else 1.0
    per_gpu = {c: np.zeros(len(gpus)) for c in BREAKDOWN_CATEGORIES}
    per_gpu["compute"] = busy * scale
    per_gpu["straggler_wait"] = (busy.max() - busy) * scale
    per_gpu["exposed_comm"] = np.full(len(gpus), max(1.0 - float(busy.max()), 0.0) * scale)
    return [topo.node_name[g] for g in gpus], per_gpu


def _link_vector(metrics: MetricSet, names: set[str], name: str, topo: Topology) -> np.ndarray | None:
    """Per link id, the value of metric ``name`` (0 where absent); None if the metric is absent."""
    if name not in names:
        return None
    values = np.zeros(topo.n_links)
    for link, value in _by_link(metrics, name, topo):
        values[link] = value
    return values


def _by_link(metrics: MetricSet, name: str, topo: Topology):
    """(link id, value) of every sample of ``name`` with a ``link`` label naming a link of ``topo``."""
    chosen = metrics.select(name=name)
    for labels, value in zip(chosen.labels, chosen.value):
        link_name = dict(labels).get("link")
        if link_name is None:
            continue
        yield topo.link_id(link_name), float(value)
