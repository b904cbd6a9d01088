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

from gpuwait.diagnosis.observe import Observation, observe_run
from gpuwait.runner.workload import WorkloadRun
from gpuwait.steps.result import BREAKDOWN_CATEGORIES
from gpuwait.telemetry.bundle import TelemetryBundle
from gpuwait.telemetry.metrics import metrics_from_result
from gpuwait.telemetry.metricset import MetricInfo, MetricSet
from gpuwait.topology.model import Topology

_INFO = {
    "SymbolErrorCounter": MetricInfo("counter", "PMA SymbolErrorCounter of the port receiving on the link"),
    "LinkDownedCounter": MetricInfo("counter", "PMA LinkDownedCounter: times the link went down"),
    "out_of_sequence": MetricInfo("counter", "mlx5 out_of_sequence: packets received out of order (losses)"),
    "gpuwait_link_rate_bytes_per_second": MetricInfo("gauge", "negotiated rate of the port sending on the link (ibstat/ethtool)"),
    "gpuwait_link_foreign_bytes_per_second": MetricInfo("gauge", "traffic on the link the job's own flows do not account for"),
    "gpuwait_nccl_transport_info": MetricInfo("gauge", "NCCL's network transport per server (NCCL_DEBUG=INFO lines)"),
    "gpuwait_nic_numa_remote": MetricInfo("gauge", "1 where a GPU's NIC sits behind the other CPU socket (NCCL topology)"),
}


def export_metrics(run: WorkloadRun, case: int = 0) -> MetricSet:
    """Every metric of case ``case`` of a simulated run, fault evidence included."""
    result = run.results[case]
    topo = run.topo
    observation = observe_run(topo, result, run.effects)
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
        samples.append(("gpuwait_nccl_transport_info", {"Hostname": f"s{server}", "transport": transport, "gdr": gdr}, 1.0))
    for gpu in run.effects.remote_nic_gpus:
        samples.append(("gpuwait_nic_numa_remote", {"gpu": topo.node_name[gpu]}, 1.0))
    extra = MetricSet.from_samples(samples, info=_INFO)
    return metrics_from_result(result, topo, extra_counters=extra)


def observe_telemetry(bundle: TelemetryBundle, topo: Topology) -> Observation:
    """An observation from imported telemetry on the cluster ``topo`` describes (names must match)."""
    metrics = bundle.metrics
    missing: list[str] = []
    names = set(metrics.names()) if len(metrics) else set()
    step = float(metrics.value_of("gpuwait_step_seconds")) if "gpuwait_step_seconds" in names else None
    ideal = float(metrics.value_of("gpuwait_step_ideal_seconds")) if "gpuwait_step_ideal_seconds" in names else None
    gpu_names, per_gpu = None, None
    if "gpuwait_step_phase_seconds" in names:
        phases = metrics.select(name="gpuwait_step_phase_seconds")
        ranks = sorted({int(dict(lab)["rank"]) for lab in phases.labels})
        per_gpu = {c: np.zeros(len(ranks)) for c in BREAKDOWN_CATEGORIES}
        for labels, value in zip(phases.labels, phases.value):
            lab = dict(labels)
            if lab.get("phase") in per_gpu:
                per_gpu[lab["phase"]][int(lab["rank"])] = value
        gpu_names = [topo.node_name[g] for g in topo.gpu_node.ravel()[: len(ranks)]]
    else:
        missing.append("per-GPU step phases (gpuwait_step_phase_seconds or step markers)")
    nominal = topo.link_capacity_Bps.astype(float)  # the cluster description's line rates
    rate = None
    if "gpuwait_link_rate_bytes_per_second" in names:
        rate = nominal.copy()
        for labels, value in _by_link(metrics, "gpuwait_link_rate_bytes_per_second", topo):
            rate[labels] = value
    else:
        missing.append("negotiated port rates (ibstat / ethtool)")
    util = _link_vector(metrics, names, "gpuwait_link_utilization", topo)
    if util is None:
        missing.append("per-port utilization")
    link_bytes = _link_vector(metrics, names, "gpuwait_link_transmit_bytes_total", topo)
    counters = {}
    for metric, key in (("SymbolErrorCounter", "symbol_errors"), ("LinkDownedCounter", "link_downed"),
                        ("out_of_sequence", "out_of_sequence")):
        values = _link_vector(metrics, names, metric, topo)
        if values is not None:
            counters[key] = values
    foreign = _link_vector(metrics, names, "gpuwait_link_foreign_bytes_per_second", topo)
    socket, gdr_off = None, None
    if "gpuwait_nccl_transport_info" in names:
        info = metrics.select(name="gpuwait_nccl_transport_info")
        labels = [dict(lab) for lab in info.labels]
        socket = any(lab.get("transport") == "NET/Socket" for lab in labels)
        gdr_off = tuple(sorted(int(lab["Hostname"][1:]) for lab in labels if lab.get("gdr") == "0" and not socket))
    for log in bundle.nccl_debug.values():
        socket = bool(socket) or log.socket_fallback
    if socket is None:
        missing.append("NCCL_DEBUG=INFO transport lines")
    if bundle.skipped:  # the reader left unreadable rows out; say how many and name the first few
        missing.append(f"{len(bundle.skipped)} unreadable row(s) skipped: " + "; ".join(bundle.skipped[:3]))
    remote = None
    if "gpuwait_nic_numa_remote" in names:
        remote = tuple(topo.node_id(dict(lab)["gpu"]) for lab in metrics.select(name="gpuwait_nic_numa_remote").labels)
    elif socket is not None:
        remote = ()
    users = {}
    return Observation(topo=topo, step_time_s=step, baseline_step_time_s=ideal, gpu_names=gpu_names, per_gpu_s=per_gpu, link_util=util,
                       link_bytes=link_bytes, link_rate_Bps=rate, link_nominal_Bps=nominal if rate is not None else None,
                       link_users=users, link_foreign_Bps=foreign, counters=counters, socket_transport=socket,
                       gdr_off_servers=gdr_off, remote_nic_gpus=remote, missing=tuple(missing))


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
