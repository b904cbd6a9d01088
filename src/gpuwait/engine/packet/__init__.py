"""Packet-level engine: queues, PFC, ECN, DCQCN, InfiniBand credits, loss and retransmission.

The same inputs as the flow engine (topology, routes, transport, a flow table) and the same
per-flow and per-link results, plus what only packets show: queue depth over time, pause
frames and paused time, ECN marks, CNPs, drops, retransmissions, reordering and FCT tails.

Modules: :mod:`.params` (validated knobs), :mod:`.events` (the event queue), :mod:`.core` (the
numba event loop), :mod:`.run` (arrays in, :class:`PacketRun` out).

What is simplified: ACK/NACK/CNP packets are not queued hop by hop — they reach the sender
after the path latency; one data priority (PFC and queues per port carry it; counters are
reported under ``data_priority``); IB congestion control (FECN/BECN) is not modelled —
InfiniBand senders run at line rate under credits; DCQCN's alpha timer is applied lazily at
each CNP; pause frames are XOFF transitions plus one refresh per half quanta (512 bit times each at
the paused port's own speed) while paused, up to the run's end for a pause still open then.
"""

from gpuwait.engine.packet.params import DcqcnSettings, PacketParams, packet_params
from gpuwait.engine.packet.run import PacketProgress, PacketRun, estimate, simulate_packets

__all__ = ["DcqcnSettings", "PacketParams", "PacketProgress", "PacketRun", "estimate", "packet_params", "simulate_packets"]
