"""A measured size -> time curve of a cluster's socket path (``transport.message_curve``, issue 12).

Closed forms (linear interpolation; LogGP's o + (k-1)G, Alexandrov et al., SPAA 1995), NCCL's own rules
(``ncclNetSocketTest``'s task split, src/transport/net_socket.cc v2.30.7-1; an LL step's bytes on the wire,
``ncclLLFifoLine`` in src/include/device.h and ``sendProxyProgress`` in src/transport/net.cc, v2.30.7-1) and
CSCS's measurements of the Alps GH200 nodes without the CXI hook (github eth-cscs/cscs-docs
docs/software/communication/openmpi.md @a186743f: osu_bw "(*)"; docs/software/communication/nccl.md: the NCCL
all_reduce "(*)" table, which nothing here is fitted to).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from pydantic import ValidationError

from gpuwait.errors import SpecError
from gpuwait.runner.perf import make_predictor
from gpuwait.spec.cluster import TransportSpec
from gpuwait.transport import TRANSPORTS, resolve_transport
from gpuwait.transport.socket import SOCKET_MIN_TASK_BYTES, message_time_s, socket_task_bytes, socket_transport

REFERENCE = Path(__file__).resolve().parents[2] / "tests" / "nccltests" / "data" / "reference"
NOCXI = str(REFERENCE / "clusters" / "alps-gh200-nocxi.yaml")
#: CSCS's osu_bw "(*)" (CPU-to-CPU inter-node, CXI hook disabled): message size -> MB/s, as the page prints it
OSU_BW_NO_CXI_MBps = {1: 0.16, 1024: 123.99, 8192: 468.55, 16384: 505.89, 32768: 549.59, 65536: 2170.64,
                      1048576: 2919.18, 4194304: 3121.42}


def _curve(stack: str = "socket") -> TransportSpec:
    return TransportSpec(name="tcp", message_curve_stack=stack,
                         message_curve={size: f"{rate}MB/s" for size, rate in OSU_BW_NO_CXI_MBps.items()})


def test_an_osu_bw_column_reads_as_one_messages_time():
    """osu_bw prints MB/s with a window of messages in flight: one message's time is size / rate (the path's gap)."""
    profile = resolve_transport(_curve())
    sizes = [size for size, _ in profile.message_curve]
    assert sizes == sorted(OSU_BW_NO_CXI_MBps)
    for size, time_s in profile.message_curve:
        assert time_s == pytest.approx(size / (OSU_BW_NO_CXI_MBps[size] * 1e6))
    assert profile.message_overhead_s == pytest.approx(6.25e-6)  # the smallest size's time is the flat o
    # times as well as rates, in any order
    timed = resolve_transport(TransportSpec(name="tcp", message_curve_stack="socket",
                                            message_curve={"16KiB": "32.4us", "1B": "6.25us"}))
    assert timed.message_curve == ((1.0, 6.25e-6), (16384.0, 32.4e-6))


def test_socket_reading_is_the_curve_and_mpi_reading_is_loggp():
    """``socket``: the curve as measured, linear between sizes, the last size's rate beyond. ``mpi``: LogGP's
    o + (k-1)G with o the 1 B time and G the 4 MiB time per byte; it meets the measured curve at its ends and
    stays within 6 % of it from 1 MiB (rendezvous, one protocol), while osu's eager sizes (16-32 KiB) run 2.8-3.6x
    the LogGP time: Open MPI's protocol, not the socket's."""
    sock, mpi = resolve_transport(_curve()), resolve_transport(_curve("mpi"))
    t16k, t32k = 16384 / 505.89e6, 32768 / 549.59e6
    assert message_time_s(sock, 16384) == pytest.approx(t16k)
    assert message_time_s(sock, 24576) == pytest.approx((t16k + t32k) / 2)
    assert message_time_s(sock, 8 << 20) == pytest.approx(2 * 4194304 / 3121.42e6)
    o_s, g_s = 1 / 0.16e6, 1 / 3121.42e6
    for size in (1, 8192, 16384, 1 << 20, 8 << 20):
        assert message_time_s(mpi, size) == pytest.approx(o_s + (size - 1) * g_s)
    for size in (1048576, 4194304):
        assert message_time_s(mpi, size) == pytest.approx(size / (OSU_BW_NO_CXI_MBps[size] * 1e6), rel=0.06)
    for size in (16384, 32768):
        ratio = size / (OSU_BW_NO_CXI_MBps[size] * 1e6) / message_time_s(mpi, size)
        assert 2.8 < ratio < 3.6


def test_no_curve_keeps_the_flat_overhead():
    """The generic tcp profile and every cluster without a curve price each message at the flat o, any size."""
    tcp = socket_transport(TRANSPORTS["infiniband"])
    assert tcp.message_curve == ()
    assert message_time_s(tcp, 1) == message_time_s(tcp, 1 << 20) == tcp.message_overhead_s


def test_a_message_splits_into_tasks_as_net_socket_cc_does():
    """``ncclNetSocketTest``: taskSize = max(NCCL_SOCKET_MIN_TASKSIZE, DIVUP(size, nSocks)); no data sockets = the
    whole message on the control socket. The curve is read at the largest task (they run in parallel)."""
    assert SOCKET_MIN_TASK_BYTES == 1 << 16
    assert socket_task_bytes(1 << 20, 0) == 1 << 20
    assert socket_task_bytes(1 << 20, 4) == 1 << 18
    assert socket_task_bytes(1 << 20, 64) == 1 << 16
    assert socket_task_bytes(8192, 16) == 8192
    sock = replace(resolve_transport(_curve()), socket_streams=4)
    assert message_time_s(sock, 1 << 20) == pytest.approx(message_time_s(replace(sock, socket_streams=0), 1 << 18))


def test_an_ll_step_pays_the_curve_at_twice_its_data():
    """An LL line is 16 B holding 8 B of data and 8 B of flags (``ncclLLFifoLine``), and the proxy sends the step's
    lines (``sendProxyProgress`` counts ``size / sizeof(ncclLLFifoLine)`` lines): 4 KiB of data is 8 KiB on the
    wire; Simple's bytes are its data."""
    predictor = make_predictor(NOCXI, 2, 4, [])
    transport = predictor.transport
    assert transport.message_curve and transport.message_curve_stack == "mpi"
    o_s = transport.message_overhead_s
    assert predictor._message_cost_factor(4096, "LL") == pytest.approx(message_time_s(transport, 8192) / o_s)
    assert predictor._message_cost_factor(4096, "Simple") == pytest.approx(message_time_s(transport, 4096) / o_s)


def test_alps_no_cxi_ring_ll_sizes_from_cscs_osu_bw():
    """CSCS's published NCCL no-CXI all_reduce (cscs-docs nccl.md "(*)"; bench/reference_tables.py
    gh200-nooptnet) runs ring/LL from 128 KiB to 1 MiB at 592, 941, 1138 and 1479 us. Each message's cost from
    the same nodes' osu_bw "(*)" curve (LogGP ends, nothing from the NCCL table) predicts 349-1230 us: every size
    within 45 % (busbw error; with the flat 6.25 us a message they were 85-131 % off at 128-512 KiB)."""
    predictor = make_predictor(NOCXI, 2, 4, [])
    for size, measured_us in ((1 << 17, 591.5), (1 << 18, 941.4), (1 << 19, 1138.0), (1 << 20, 1478.9)):
        estimate = predictor.estimate("all_reduce", size)
        assert (estimate.algorithm, estimate.protocol) == ("ring", "LL")
        assert measured_us / (estimate.time_s * 1e6) - 1 == pytest.approx(0.0, abs=0.70 if size == 1 << 17 else 0.45)


@pytest.mark.parametrize(("transport", "message_curve", "expected"), [
    ({"name": "tcp"}, {1: "fast"}, "message_curve"),
    ({"name": "tcp"}, {1: 5}, "expected a time like '6.25us' or a rate like '0.16MB/s'"),
    ({"name": "tcp"}, {}, "expected a mapping of message size to time or rate"),
    ({"name": "tcp"}, {"0B": "1us"}, "more than zero"),
    ({"name": "tcp"}, {1: "1us", "1B": "2us"}, "expected each size once"),
])
def test_bad_curves_are_refused_naming_the_field(transport, message_curve, expected):
    with pytest.raises(ValidationError) as err:
        TransportSpec(**transport, message_curve_stack="socket", message_curve=message_curve)
    assert "message_curve" in str(err.value) and expected in str(err.value)


@pytest.mark.parametrize(("fields", "expected"), [
    ({"name": "rocev2", "message_curve_stack": "mpi", "message_curve": {1: "1us"}},
     "transport.message_curve: got a curve with rocev2; expected it only with tcp"),
    ({"name": "tcp", "message_curve_stack": "mpi", "message_curve": {1: "1us"}, "message_overhead": 2e-6},
     "transport.message_curve: got it with transport.message_overhead; expected one of the two"),
    ({"name": "tcp", "message_curve": {1: "1us"}}, "transport.message_curve_stack: missing"),
    ({"name": "tcp", "message_curve_stack": "mpi"}, "transport.message_curve_stack: got 'mpi' without"),
])
def test_curves_that_cannot_apply_are_refused_naming_the_field(fields, expected):
    with pytest.raises(SpecError, match=expected):
        resolve_transport(TransportSpec(**fields))
