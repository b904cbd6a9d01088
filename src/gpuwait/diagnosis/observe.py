"""What the diagnosis looks at: the numbers an engineer lays side by side, gathered from a
simulated run or from imported telemetry. Every field may be missing (None); rules that need a
missing series are skipped and the missing series are reported.

From a simulation the observation carries only what real telemetry would show: per-GPU step
phases (DCGM utilization and step markers), per-port bytes and negotiated rate (ibstat /
ethtool), port error counters (``SymbolErrorCounter``, ``LinkDownedCounter``, ``out_of_sequence``),
NCCL's transport lines (``NET/Socket`` vs ``NET/IB``, ``GDRDMA``, the NIC's NUMA node) and
traffic that belongs to other jobs (port bytes the job's own flows do not account for).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpuwait.faults.kinds import PCIE_FULL_LANES, server_pcie_generation
from gpuwait.steps.result import CollectiveStat, RunResult
from gpuwait.topology.model import Topology

#: bytes per RoCE packet, to turn port bytes into packets (RoCE's largest MTU): the simulated
#: counters (here) and the rules that read them (rules_counters) must divide by the same number
ROCE_PACKET_BYTES = 4096.0

#: Congestion counters a real cluster's exporters give per link (keys of ``Observation.counters``):
#: ``xmit_wait`` (PMA PortXmitWait ticks on the sending port), ``pause_received`` / ``pause_sent`` (PFC
#: pause frames; ``_s``: the time they held the link, seconds), ``pause_storm_events`` (the receiving
#: NIC's PFC storm prevention fired), ``ecn_marked`` and ``cnp_sent`` (on the link into the receiving
#: NIC), ``cnp_handled`` (on the sending NIC's uplink). The simulator's flow engine has no queues, so
#: it leaves them empty.
CONGESTION_COUNTERS = ("xmit_wait", "pause_received", "pause_received_s", "pause_sent", "pause_sent_s",
                       "pause_storm_events", "ecn_marked", "cnp_sent", "cnp_handled")

#: Seconds of telemetry an operator's reading averages over: Prometheus' usual ``rate(x[5m])``, 10
#: scrapes at the 30 s NVIDIA's "Configure Prometheus for DCGM Exporter" sets (a rate wants at least
#: 4 scrapes: https://www.robustperception.io/what-range-should-i-use-with-rate). A per-GPU busy
#: share or a port's rate is a mean over the steps this window holds.
TELEMETRY_WINDOW_S = 300.0

#: Relative noise (one standard deviation) of an imported reading: a port's bytes per step, a GPU's
#: busy share, the step time. Counters are exact to the byte (PortXmitData counts 4-byte words in 64
#: bits), so the error is the sampling's: a rate over a window whose edges fall at random points of
#: a step is off by up to half a step's bytes at each edge, two independent errors uniform over +-1/2
#: step, so its standard deviation is 1 / (N sqrt 6) for a window of N steps. The window
#: (TELEMETRY_WINDOW_S) over training steps of up to 7 s holds N >= 43 steps: 1 / (43 sqrt 6) =
#: 0.95 %, so 1 %. A simulation's readings are exact (noise 0). The rules carry it into a range per
#: cost estimate (rules.Lost) and telemetry-only severity reads the range's low end.
TELEMETRY_READING_NOISE = 0.01


@dataclass(frozen=True, eq=False)
class Observation:
    topo: Topology
    step_time_s: float | None = None
    baseline_step_time_s: float | None = None
    gpu_names: list[str] | None = None
    per_gpu_s: dict[str, np.ndarray] | None = None          # breakdown category -> per GPU, seconds per step
    exposed_comm_s: dict[str, float] = field(default_factory=dict)
    link_util: np.ndarray | None = None                     # 0..1 of the port's current rate
    link_bytes: np.ndarray | None = None                    # bytes per step
    link_rate_Bps: np.ndarray | None = None                 # current (negotiated) rate
    link_nominal_Bps: np.ndarray | None = None              # the rate the port should run at
    link_users: dict[int, list[str]] = field(default_factory=dict)
    link_foreign_Bps: np.ndarray | None = None              # other jobs' traffic
    counters: dict[str, np.ndarray] = field(default_factory=dict)  # per link: symbol_errors, link_downed, out_of_sequence
    #: training steps the error counters' increases cover (a scrape window holds several steps while
    #: ``link_bytes`` is per step): a loss rate is errors over the packets sent in the same window
    counter_steps: float = 1.0
    #: bytes each port's own counters saw over the window its congestion counters (CONGESTION_COUNTERS) cover:
    #: a stall is weighed against the sending it held up in the same window; None = not collected
    link_window_bytes: np.ndarray | None = None
    #: collective label (as in ``collectives``) -> bytes per link per step while that collective runs:
    #: port counters read over each collective's phase (a profiler's phase markers with counters sampled
    #: fast enough, or PortXmitData per phase); None = only per-step totals were collected
    link_phase_bytes: dict[str, np.ndarray] | None = None
    #: GPU node id -> the NIC node ids NCCL's ``[send] via NET/IB/<dev>`` lines say it uses; None = no such lines
    nccl_nic_use: dict[int, tuple[int, ...]] | None = None
    #: NIC node id -> the IPv6 link-local GID index NCCL's RoCE queue pairs use on it
    nccl_link_local_gids: dict[int, int] = field(default_factory=dict)
    socket_transport: bool | None = None                    # NCCL's NET/Socket
    #: socket_transport was read off the ports' counters (the kernel counts the job's bytes), not NCCL's lines
    socket_from_counters: bool = False
    gdr_off_servers: tuple[int, ...] | None = None
    remote_nic_gpus: tuple[int, ...] | None = None          # GPU node ids whose NIC is on the other socket
    collectives: tuple[CollectiveStat, ...] = ()
    storage_read: bool = False
    #: storage servers whose backend (disks, file system) is busy all the time: node_exporter's
    #: ``node_disk_io_time_seconds_total`` rising one second per second; None = not collected
    storage_busy: tuple[str, ...] | None = None
    #: GPU node id -> DCGM_FI_DEV_CLOCK_THROTTLE_REASONS (NVML bit mask); None = not collected
    gpu_throttle: dict[int, int] | None = None
    #: GPU node id -> (PCIe generation, lanes) the GPU's link trained at while the job ran; None = not collected
    gpu_pcie: dict[int, tuple[float, float]] | None = None
    #: relative noise of each reading (TELEMETRY_READING_NOISE for imported telemetry, 0 for a simulation)
    reading_noise: float = 0.0
    missing: tuple[str, ...] = ()


def observe_run(topo: Topology, result: RunResult, effects, baseline: RunResult | None = None,
                storage_read: bool = False) -> Observation:
    """The observation of one simulated case, with the telemetry its faults would leave.
    ``storage_read``: the job reads its dataset over the network while it trains."""
    # what ibstat / ethtool report: the line rate each port negotiated, whatever the transport
    rate = (effects.port_rate_Bps if effects.port_rate_Bps is not None else topo.link_capacity_Bps).astype(float)
    nominal = effects.nominal_capacity_Bps if effects.nominal_capacity_Bps is not None else rate
    step = result.breakdown.step_time_s
    n_links = topo.n_links
    counters: dict[str, np.ndarray] = {}
    if effects.loss_rate:
        errors = np.zeros(n_links)
        for link, p in effects.loss_rate.items():
            packets = result.links.bytes_per_step[link] * result.steps / ROCE_PACKET_BYTES
            errors[link] = packets * p
        counters["out_of_sequence"] = errors
        counters["symbol_errors"] = errors  # a dirty fibre shows as symbol errors on the receiving port
    if effects.flap_cycles_per_s:
        downed = np.zeros(n_links)
        for link, per_s in effects.flap_cycles_per_s.items():
            downed[link] = max(1.0, np.floor(per_s * step * result.steps))
        counters["link_downed"] = downed
    ranks = topo.gpu_node.ravel()[: result.breakdown.n_gpus]
    # what DCGM shows: GPUs at their clocks on x16 links of the server's generation, but where a fault says otherwise
    nominal_pcie = (float(server_pcie_generation(topo)), float(PCIE_FULL_LANES))
    return Observation(
        topo=topo, step_time_s=step,
        baseline_step_time_s=baseline.breakdown.step_time_s if baseline is not None else None,
        gpu_names=[topo.node_name[g] for g in ranks], per_gpu_s=result.breakdown.per_gpu_s,
        exposed_comm_s=result.breakdown.exposed_comm_s, link_util=result.links.utilization,
        link_bytes=result.links.bytes_per_step, link_rate_Bps=rate, link_nominal_Bps=nominal,
        link_phase_bytes=dict(result.links.phase_bytes) or None, link_users=result.links.users, link_foreign_Bps=effects.foreign_Bps, counters=counters,
        counter_steps=float(result.steps),
        socket_transport=effects.socket_transport, gdr_off_servers=effects.no_gdr_servers,
        remote_nic_gpus=effects.remote_nic_gpus, collectives=result.collectives,
        storage_read=storage_read, storage_busy=tuple(topo.node_name[n] for n in effects.slow_storage_nodes),
        gpu_throttle={int(g): effects.gpu_throttle.get(int(g), 0) for g in ranks},
        gpu_pcie={int(g): effects.gpu_pcie.get(int(g), nominal_pcie) for g in ranks})
