"""Packet-engine parameters (the scenario's ``packet:`` section): validated, frozen, no logic
beyond checks of their own order.

Defaults: the switch buffer of the HPCC authors' simulator (Li et al., "HPCC: High Precision
Congestion Control", SIGCOMM 2019, github.com/alibaba-edu/High-Precision-Congestion-Control:
12 MiB shared buffer, PFC dynamic threshold 1/8 of the free shared buffer, resume offset 3 KiB),
the mlx5 headroom formula (7 m cables), ECN and DCQCN via the transport profile: the HPCC
simulator's ``dcqcn_paper`` settings (``simulation/run.py``) for DCQCN (Zhu et al., SIGCOMM 2015), whose
own testbed marked far earlier (Kmin 5 KB, Kmax 200 KB, Pmax 1 %; docs/sources.md). ``None`` means "take it from the transport profile or the link
speed": this layer may not import the transport profiles, so the engine fills those in.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from gpuwait.errors import SpecError
from gpuwait.spec.cluster import SpecModel


class DcqcnSettings(SpecModel):
    """DCQCN reaction-point and notification-point parameters.

    The algorithm is Zhu et al., "Congestion Control for Large-Scale RDMA Deployments" (SIGCOMM 2015);
    the defaults are the HPCC simulator's ``dcqcn_paper`` settings, the same as the transport profiles'
    ``DcqcnParams`` (a test keeps them equal).
    """

    g: float = Field(1 / 256, gt=0, lt=1, description="Alpha EWMA gain (dimensionless).")
    alpha_resume_interval_s: float = Field(50e-6, gt=0, description="Alpha update period (seconds).")
    rate_decrease_interval_s: float = Field(50e-6, ge=0, description="At most one rate cut per this interval (seconds).")
    rp_timer_s: float = Field(55e-6, gt=0, description="Rate-increase timer period (seconds).")
    byte_counter_bytes: float = Field(10e6, gt=0, description="Rate-increase byte counter (bytes sent per stage).")
    fast_recovery_steps: int = Field(1, ge=0, description="Fast-recovery stages F before additive increase (count).")
    rate_ai_bps_per_25gbps: float = Field(5e6, ge=0, description="Additive increase (bit/s) per 25 Gb/s of line rate.")
    rate_hai_bps_per_25gbps: float = Field(50e6, ge=0, description="Hyper increase (bit/s) per 25 Gb/s of line rate.")
    min_rate_bps: float = Field(1e9, gt=0, description="Floor of the sending rate (bit/s).")
    cnp_interval_s: float = Field(50e-6, ge=0, description="Receiver sends at most one CNP per QP per this interval (seconds).")
    clamp_target_rate: bool = Field(False, description="Lower the target rate to the current rate at every cut (the DCQCN paper's rule); False: only when a rate-increase stage ran since the previous cut, as the HPCC simulator (CLAMP_TARGET_RATE 0), so fast recovery returns towards the rate before a burst of cuts.")


class PacketParams(SpecModel):
    """Knobs of the packet engine. Every field has a unit in its name and a default."""

    flow_control: Literal["auto", "pfc", "credit", "none"] = Field(
        "auto", description="Link-level flow control at switch ingress: 'auto' = the transport's (InfiniBand credit, "
                            "RoCEv2 PFC, TCP none); 'none' = lossy (drops when the buffer is full).")
    congestion_control: Literal["auto", "dcqcn", "none"] = Field(
        "auto", description="Sender congestion control: 'auto' = DCQCN for RoCEv2, none otherwise (line-rate senders).")
    ecn: bool | None = Field(None, description="RED-style ECN marking at switch egress; default: on when DCQCN runs.")
    switch_buffer_bytes: float = Field(12 * 2**20, gt=0, description="Shared packet buffer of one switch (bytes; HPCC simulator).")
    buffer_alpha: float = Field(1.0, gt=0, description="Dynamic threshold of a lossy egress queue: at most alpha x free shared buffer (dimensionless).")
    ecn_kmin_bytes: float | None = Field(None, ge=0, description="ECN Kmin (bytes); default 100 KB per 25 Gb/s of the port (HPCC simulator).")
    ecn_kmax_bytes: float | None = Field(None, ge=0, description="ECN Kmax (bytes); default 400 KB per 25 Gb/s of the port (HPCC simulator).")
    ecn_pmax: float | None = Field(None, ge=0, le=1, description="Marking probability at Kmax (0..1); default 0.2 (HPCC simulator).")
    pfc_xoff_bytes: float | None = Field(None, gt=0, description="Static per-ingress XOFF threshold (bytes); default: dynamic, pfc_dynamic_alpha x free shared buffer (HPCC simulator).")
    pfc_xon_bytes: float | None = Field(None, ge=0, description="Static XON threshold (bytes); default XOFF - pfc_xon_offset_bytes.")
    pfc_dynamic_alpha: float = Field(1 / 8, gt=0, le=1, description="Share of the free shared buffer one ingress may hold before XOFF (HPCC simulator: shift 3).")
    pfc_xon_offset_bytes: float = Field(3 * 1024, ge=0, description="Resume this far below the XOFF threshold (bytes; HPCC simulator).")
    pfc_headroom_bytes: float | None = Field(None, gt=0, description="Headroom per ingress port (bytes); default: mlx5 formula for the port speed, MTU and cable length (mlx5).")
    cable_length_m: float = Field(7.0, gt=0, description="Cable length for the headroom formula (metres, mlx5 default 7).")
    pause_quanta: int = Field(0xFFFF, ge=1, le=0xFFFF, description="Quanta (512 bit times each) in a pause frame; a paused port's peer refreshes it every half.")
    credit_buffer_bytes: float | None = Field(None, gt=0, description="Receive buffer per port and virtual lane for credit flow control (bytes); default 2 x round-trip BDP + 2 packets.")
    dcqcn: DcqcnSettings | None = Field(None, description="DCQCN parameters; default: the transport profile's (HPCC simulator's dcqcn_paper).")
    loss_rate: float = Field(0.0, ge=0, lt=1, description="Injected random loss per packet per network link (probability).")
    retransmit_timeout_s: float = Field(100e-6, gt=0, description="Sender retransmission timeout, go-back-N (seconds).")
    ack_every_packets: int = Field(16, ge=1, description="The receiver ACKs every this many in-order packets (lossy mode).")
    host_queue_packets: int = Field(4, ge=1, description="Packets a host keeps queued at its first link before its QPs wait.")
    data_priority: int = Field(3, ge=0, le=7, description="Priority (traffic class) of data packets: the lossless one under PFC.")
    queue_sample_interval_s: float = Field(5e-6, gt=0, description="Period of queue-depth and delivered-bytes samples (seconds).")
    max_time_s: float = Field(1.0, gt=0, description="Simulated time limit (seconds); flows unfinished by then have no finish time.")
    max_packets: float = Field(2e8, gt=0, description="Refuse runs with more data packets than this (count).")
    max_memory_bytes: float = Field(4 * 2**30, gt=0, description="Refuse runs whose estimated memory is above this (bytes).")

    @model_validator(mode="after")
    def _order(self) -> PacketParams:
        if self.ecn_kmin_bytes is not None and self.ecn_kmax_bytes is not None and self.ecn_kmin_bytes > self.ecn_kmax_bytes:
            raise SpecError(f"packet.ecn_kmin_bytes: got {self.ecn_kmin_bytes:g} > ecn_kmax_bytes {self.ecn_kmax_bytes:g}; "
                            "expected Kmin <= Kmax", hint="marking starts at Kmin and reaches Pmax at Kmax")
        if self.pfc_xon_bytes is not None:
            if self.pfc_xoff_bytes is None:
                raise SpecError("packet.pfc_xon_bytes: set without pfc_xoff_bytes; expected both (static thresholds) or neither")
            if self.pfc_xon_bytes > self.pfc_xoff_bytes:
                raise SpecError(f"packet.pfc_xon_bytes: got {self.pfc_xon_bytes:g} > pfc_xoff_bytes {self.pfc_xoff_bytes:g}; "
                                "expected XON <= XOFF", hint="a port resumes (XON) below the level where it paused (XOFF)")
        return self


def packet_params(**fields) -> PacketParams:
    """Build :class:`PacketParams`, turning pydantic's error into one :class:`SpecError` naming the field.

    >>> packet_params(ecn_kmin_bytes=5e3, ecn_kmax_bytes=1e3)
    Traceback (most recent call last):
    ...
    gpuwait.errors.SpecError: packet.ecn_kmin_bytes: got 5000 > ecn_kmax_bytes 1000; expected Kmin <= Kmax
    """
    from pydantic import ValidationError

    try:
        return PacketParams(**fields)
    except ValidationError as err:
        first = err.errors()[0]
        cause = first.get("ctx", {}).get("error")
        if isinstance(cause, SpecError):
            raise cause from None
        where = ".".join(str(p) for p in first["loc"])
        raise SpecError(f"packet.{where}: got {first.get('input')!r}; {first['msg']}") from None
