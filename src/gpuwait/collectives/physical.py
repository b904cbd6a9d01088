"""The named physical parameters of the collective model, resolved for one cluster.

Defaults come from datasheets and NCCL's source (nothing extra: NCCL's hop latencies, the transport's
per-message overhead, full NIC and NVLink rates); a cluster file's ``calibration`` section, written by
``gpuwait calibrate``, refines them from measurements. The model that uses them is
:meth:`gpuwait.fabric.perf.CollectivePredictor.estimate`.

>>> from gpuwait.spec.cluster import ClusterSpec
>>> from gpuwait.transport.profiles import TRANSPORTS
>>> physical_params(ClusterSpec(), TRANSPORTS["infiniband"], public_fit=False).net_message_overhead_s
1.8e-07
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from gpuwait.spec.cluster import CalibrationSpec, ClusterSpec
from gpuwait.transport.profiles import TransportProfile

#: one time per entry of stacked costs or params (:func:`stack_costs`, :func:`stack_params`)
FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class PhysicalParams:
    """Resolved parameters; see :class:`gpuwait.spec.cluster.CalibrationSpec` for their meaning."""

    launch_latency_s: float = 0.0
    net_step_latency_s: float = 0.0
    intra_step_latency_s: float = 0.0
    net_message_overhead_s: float = 1e-6
    nic_efficiency: float = 1.0
    nvlink_efficiency: float = 1.0
    net_step_cycle_s: float = 0.0
    #: extra latency of every step of NCCL's latency chain (inside servers and across the network, every
    #: protocol) on an A100-generation GPU (compute capability 8.0: A100, A800); no public source prices a
    #: per-step cost by GPU generation, so it is fitted across the published tables, where only the A100
    #: tables inform it (:func:`generation_steps`)
    sm80_step_latency_s: float = 0.0


#: PhysicalParams field -> CalibrationSpec field (the YAML name carries no unit suffix)
SPEC_NAMES = {f.name: f.name.removesuffix("_s") for f in fields(PhysicalParams)}


#: Moves from the physical defaults fitted across the published nccl-tests tables in
#: tests/nccltests/data/reference/ (``python bench/reference_tables.py``; leave-one-table-out scores in
#: docs/validation-reference.md). Kinds as :func:`adjust`.
PUBLIC_TABLE_FIT: dict[str, float] = {
    "launch_latency_s": 1.58e-6, "net_step_latency_s": 0.00e-6, "intra_step_latency_s": 0.00e-6,
    "net_message_overhead_s": 1.284, "net_step_cycle_s": 0.93e-6, "sm80_step_latency_s": 0.70e-6}


def adjust(params: PhysicalParams, moves: dict[str, float]) -> PhysicalParams:
    """``params`` moved by ``moves``: latencies are added seconds, ``net_message_overhead_s`` a factor on
    the transport's overhead, the efficiencies the share itself. Works on array-valued params too."""
    changes = {}
    for name, value in moves.items():
        if name == "net_message_overhead_s":
            changes[name] = params.net_message_overhead_s * value
        elif name in ("nic_efficiency", "nvlink_efficiency"):
            changes[name] = value
        else:
            changes[name] = getattr(params, name) + value
    return replace(params, **changes)


def physical_defaults(transport: TransportProfile) -> PhysicalParams:
    """The parameters from datasheets and NCCL's source alone (the transport's per-message overhead,
    nothing extra, full rates): what every fit starts from."""
    return PhysicalParams(net_message_overhead_s=transport.message_overhead_s)


def physical_params(cluster: ClusterSpec, transport: TransportProfile, *, public_fit: bool = True) -> PhysicalParams:
    """The parameters a cluster's collectives use: the physical defaults (the transport's per-message
    overhead, nothing extra), moved by :data:`PUBLIC_TABLE_FIT` unless ``public_fit`` is false, then
    every field the cluster's ``calibration`` section sets."""
    params = physical_defaults(transport)
    if public_fit:
        params = adjust(params, PUBLIC_TABLE_FIT)
    spec: CalibrationSpec = cluster.calibration
    given = {name: getattr(spec, spec_name) for name, spec_name in SPEC_NAMES.items()
             if spec_name in spec.model_fields_set and getattr(spec, spec_name) is not None}
    return replace(params, **given)


def calibration_note(cluster: ClusterSpec) -> str | None:
    """What the cluster's ``calibration`` section says of itself, for output that must show it was used
    (``fitted to a.log``, or the fields it sets when it names no log); None when it sets nothing.

    >>> from gpuwait.spec import ClusterSpec
    >>> calibration_note(ClusterSpec(preset="dgx-h100", calibration={"nic_efficiency": 0.9}))
    'nic_efficiency set'
    """
    spec: CalibrationSpec = cluster.calibration
    set_fields = sorted(spec.model_fields_set - {"fitted_on", "nccl_env"})
    if not set_fields:
        return None
    return f"fitted to {', '.join(spec.fitted_on)}" if spec.fitted_on else f"{', '.join(set_fields)} set"


def stack_costs(costs: list[PipelineCosts]) -> PipelineCosts:
    """One PipelineCosts whose fields are arrays over ``costs`` (for fast elementwise evaluation)."""
    # arrays stand in for the scalar fields: the methods and pipelined_times_s compute elementwise, which the
    # fields' annotations (those of one collective) cannot say
    columns: list[Any] = [np.array([getattr(c, f.name) for c in costs]) for f in fields(PipelineCosts)]
    return PipelineCosts(*columns)


def stack_params(params: list[PhysicalParams]) -> PhysicalParams:
    """One PhysicalParams whose fields are arrays over ``params``."""
    # arrays stand in for the scalar fields, as in stack_costs
    columns: list[Any] = [np.array([getattr(p, f.name) for p in params]) for f in fields(PhysicalParams)]
    return PhysicalParams(*columns)


def calibration_section(params: PhysicalParams, fitted_on: list[str] | None = None,
                        nccl_env: Mapping[str, str] | None = None) -> dict:
    """The ``calibration`` section of a cluster file holding ``params`` (plain YAML-able values), with the
    logs it was ``fitted_on`` and the NCCL variables they ran with (``nccl_env``; None: not recorded)."""
    section: dict[str, float | list[str] | dict[str, str]] = {spec_name: float(getattr(params, name))
                                                              for name, spec_name in SPEC_NAMES.items()}
    if fitted_on:
        section["fitted_on"] = list(fitted_on)
    if nccl_env is not None:
        section["nccl_env"] = dict(sorted(nccl_env.items()))
    return section


@dataclass(frozen=True)
class PipelineCosts:
    """The parts one collective's time is made of, before the physical parameters are applied.

    ``latency_s``: NCCL's latency for the choice (hop latencies along the pipeline); ``intra_steps`` /
    ``inter_steps``: the steps inside servers / across the network that latency adds up;
    ``wire_s``: the steady-state time at full rate (the slower of NCCL's plateau and the fabric);
    ``nic_messages``: network steps (messages) the busiest NIC sends and receives; ``fill_intra_s`` /
    ``fill_inter_s``: the first chunk's trip through the pipeline's hops inside servers / across the
    network; ``connection_steps``: the steps one network connection (one channel's send or receive on
    the busiest NIC) carries beyond what NCCL's latency counts, in whole proxy passes (after the first
    pass; a ring's first loop as the share of a pass its other connections take); ``window_share``:
    NVLS only, the share of the bytes in NCCL's first in-flight window, which pays a second pass
    (:mod:`gpuwait.fabric.perf`); ``multi_node``:
    the network is the bottleneck; ``proxy_load``: the network connections the busiest GPU's proxy
    thread serves, per send-and-receive pair of one channel (its step cycle grows with them).
    """

    latency_s: float
    intra_steps: int
    inter_steps: int
    wire_s: float
    nic_messages: float
    fill_intra_s: float
    fill_inter_s: float
    window_share: float
    multi_node: bool
    connection_steps: float = 0.0
    proxy_load: float = 1.0
    host_floor_s: float = 0.0  # the host's time to issue one call on every GPU it drives (fabric.perf)
    #: one network connection's own messages back to back, at the rate one message gets, over the messages it
    #: keeps in flight: in series with its step cycles (a connection that waits for a step before its next
    #: cannot hide one behind the other); 0 where not modelled
    serial_s: float = 0.0
    #: the sends and receives of that connection's messages (each pays the per-message overhead in the same
    #: series); 0 where not modelled
    serial_messages: float = 0.0
    #: the transport's rendezvous round trips (:meth:`gpuwait.transport.profiles.TransportProfile.rendezvous_s`)
    #: on the first chunk's way across the network, and in the series of one connection's messages (above)
    rendezvous_latency_s: float = 0.0
    rendezvous_serial_s: float = 0.0
    #: the latency steps that pay the GPU generation's step latency (:func:`generation_steps`)
    sm80_steps: int = 0

    # Each method works elementwise: on stacked costs or params (stack_costs, stack_params) it returns an array.

    def latency_with(self, params: PhysicalParams) -> float | FloatArray:
        return (self.latency_s + params.launch_latency_s + self.intra_steps * params.intra_step_latency_s
                + self.inter_steps * params.net_step_latency_s + self.sm80_steps * params.sm80_step_latency_s
                + self.rendezvous_latency_s)

    def wire_with(self, params: PhysicalParams) -> float | FloatArray:
        """The wire time at the reached share of the bottleneck's rate (NICs between servers, NVLink inside)."""
        return self.wire_s / np.where(self.multi_node, params.nic_efficiency, params.nvlink_efficiency)

    def fill_with(self, params: PhysicalParams) -> float | FloatArray:
        return (self.fill_intra_s / params.nvlink_efficiency + self.fill_inter_s / params.nic_efficiency
                + self.window_share * self.wire_with(params))


def generation_steps(sm: int, intra_steps: int, inter_steps: int) -> int:
    """The steps of NCCL's latency chain that pay ``sm80_step_latency_s``: every one (inside servers and across
    the network) on a GPU of compute capability 8.0, none on another.

    The two published A100 tables with small sizes run the same time per latency step above the model
    (0.66 us) with nothing else in common: OCI's 2 x 8 A100 (AMD host, RoCE, NCCL 2.19.3, tree/LL, 16 steps)
    and AWS p4de's (Intel host, EFA, ring/Simple, 30 steps), where the H100 tables of every host and
    transport sit 0.05-0.11 us per step below it: a cost of the GPU generation, paid per step whatever the
    protocol. Both tables' steps are mostly NVLink hops (14 + 2 and 28 + 2), so they cannot tell a step inside
    a server from one across the network: every step pays it. Other generations pay none (their tables fit
    the shared parameters).

    >>> generation_steps(80, 14, 2), generation_steps(90, 14, 2), generation_steps(86, 14, 2)
    (16, 0, 0)
    """
    return intra_steps + inter_steps if sm == 80 else 0


def pipelined_time_s(costs: PipelineCosts, params: PhysicalParams) -> float:
    """One collective's time: latency + the slowest of the wire, the NIC's per-message work and the
    connections' step cycles + the fill.

    The proxy posts the next message while the NIC sends the current one, so per-message overhead and
    wire time overlap (LogGP, Alexandrov et al., SPAA 1995): a step costs max(o, bytes / rate). One
    network connection's steps also follow each other through NCCL's proxy, which moves a step by at
    most one state (posted, sent, completed) per pass over the GPU's active connections
    (``sendProxyProgress`` / ``recvProxyProgress``, src/transport/net.cc, NVIDIA/nccl v2.30.7-1): after
    the first pass (a tree's first chunk, which NCCL's latency term already counts step by step), a
    connection carries a step at most every ``proxy_load`` x ``net_step_cycle_s``, whatever its size: a
    pass grows with the network connections the GPU's proxy serves (``proxy_load``: per
    send-and-receive pair of one channel, :mod:`gpuwait.fabric.perf`). A ring's first loop is a chain
    NCCL's latency counts too, except the proxy's visits to its other ``proxy_load - 1`` pairs, which
    ``connection_steps`` carries as a fraction of a pass per step (``ring_connection_steps``,
    :mod:`gpuwait.fabric.perf`).
    Small chunks (trees and NVLSTree at mid sizes, NVLSTree's 64 KiB chunk from 4 nodes) therefore run
    below the NIC's rate. A connection with one message in flight (a ring's LL/LL128 step waits for the
    previous rank) has no next message to post while one is on the wire, so its step cycles, its messages'
    send and receive overheads (``serial_messages`` x o) and their transmission (``serial_s``) add up:
    LogGP's o + (k - 1) G + o per message; a message the transport sends by rendezvous adds its Get's round
    trip to that series (``rendezvous_serial_s``), and to the first chunk's way across the network
    (``rendezvous_latency_s``, part of the latency) where messages overlap.
    :func:`pipelined_times_s` evaluates stacked costs or params (one entry per size or observation) at once.

    >>> costs = PipelineCosts(20e-6, 14, 2, 100e-6, 200, 5e-6, 3e-6, 0.0, True, 30)
    >>> round(pipelined_time_s(costs, PhysicalParams(net_message_overhead_s=1e-6)) * 1e6, 1)
    228.0
    >>> round(pipelined_time_s(costs, PhysicalParams(net_message_overhead_s=0.0, net_step_cycle_s=5e-6)) * 1e6, 1)
    178.0
    >>> serial = PipelineCosts(20e-6, 14, 2, 100e-6, 0, 0.0, 0.0, 0.0, True, 30, serial_s=80e-6)
    >>> round(pipelined_time_s(serial, PhysicalParams(net_message_overhead_s=0.0, net_step_cycle_s=1e-6)) * 1e6, 1)
    130.0
    >>> rendezvous = replace(serial, rendezvous_serial_s=14 * 4.6e-6, rendezvous_latency_s=9.2e-6)
    >>> round(pipelined_time_s(rendezvous, PhysicalParams(net_message_overhead_s=0.0, net_step_cycle_s=1e-6)) * 1e6, 1)
    203.6
    """
    return float(_pipelined(costs, params))


def pipelined_times_s(costs: PipelineCosts, params: PhysicalParams) -> FloatArray:
    """:func:`pipelined_time_s` of every entry of stacked costs or params (:func:`stack_costs`,
    :func:`stack_params`; either may be one collective's, which numpy broadcasts)."""
    return np.asarray(_pipelined(costs, params))


def _pipelined(costs: PipelineCosts, params: PhysicalParams) -> float | FloatArray:
    # The step cycle and o are two costs in this series, not one read twice: the cycle is a step's wait for the
    # proxy's next visit (each ``op->progress`` call moves a connection by one action, then ``continue``s:
    # sendProxyProgress posts the buffer, or isends, or tests; recvProxyProgress returns after an irecv, test or
    # flush; src/transport/net.cc, progressOps src/proxy.cc, NVIDIA/nccl v2.30.7-1), so it grows with the
    # connections the proxy serves; o is the work of the isend / irecv call and its completion at that visit,
    # once per message whatever the proxy's load (LogGP's o). The fit prices the cycle with o charged apart.
    cycles = costs.connection_steps * costs.proxy_load * params.net_step_cycle_s
    serial = (costs.serial_s / np.where(costs.multi_node, params.nic_efficiency, 1.0)
              + costs.serial_messages * params.net_message_overhead_s + costs.rendezvous_serial_s)
    steady = np.maximum(np.maximum(costs.wire_with(params), costs.nic_messages * params.net_message_overhead_s),
                        cycles + serial)
    total = costs.latency_with(params) + steady + costs.fill_with(params)
    # back-to-back calls run no faster than one host thread issues them (nccl-tests -g N: fabric.perf)
    return np.maximum(total, costs.host_floor_s)
