"""parse_nccl_debug on real NCCL_DEBUG=INFO lines from public GitHub issues (one file per source)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwait.telemetry.errors import TelemetryFormatError
from gpuwait.telemetry.nccl_debug import GdrStatus, NetDevice, parse_nccl_debug

DATA = Path(__file__).parent / "data"


def _read(name: str):
    return parse_nccl_debug((DATA / name).read_text(), source=name)


def test_ib_with_gdr_and_p2p_ipc_read():  # NVIDIA/nccl#687, old busId form 3[4a000]
    info = _read("nccl-debug-ib-gdr-p2p.log")
    net, p2p = info.connections
    assert (net.transport, net.net_device, net.gdr, net.direction, net.channel) == ("NET/IB", 0, True, "send", 0)
    assert (net.rank, net.rank_device, net.peer_rank, net.peer_device) == (3, "4a000", 6, "44000")
    assert (net.host, net.pid, net.cuda_dev) == ("cosmos-hpc-100a45", 985927, 3)
    assert (p2p.transport, p2p.p2p_read, p2p.gdr, p2p.is_net) == ("P2P/IPC", True, None, False)
    assert not info.socket_fallback and info.net_without_gdr() == ()


def test_multirail_ib_uses_several_nics():
    info = _read("nccl-debug-multirail-ib.log")
    assert [c.net_device for c in info.connections if c.is_net] == [3, 5]
    assert info.connections[0].direction == "receive" and info.connections[0].channel == 11
    assert info.transports() == {"NET/IB": 2, "P2P/IPC": 1}


def test_ib_without_gdr_old_ring_lines():  # Mellanox/nv_peer_memory#56
    info = _read("nccl-debug-ib-no-gdr-old.log")
    (conn,) = info.connections
    assert (conn.rank, conn.peer_rank, conn.rank_device, conn.direction) == (6, 2, None, "receive")
    assert conn.transport == "NET/IB" and conn.gdr is False
    assert info.net_without_gdr() == (conn,)
    assert info.gdr_status == (GdrStatus("IB", 0, False, gpu="2[2]", reason="distance 3 >= 2"),)


def test_ib_without_gdr_and_p2p_direct_pointer():  # NVIDIA/nccl#1412
    info = _read("nccl-debug-ib-no-gdr.log")
    net, p2p = info.connections
    assert (net.transport, net.net_device, net.gdr) == ("NET/IB", 3, False)
    assert (p2p.transport, p2p.p2p_read, p2p.direction) == ("P2P/direct pointer", True, None)


def test_cumem_and_ib_plugin():  # NVIDIA/nccl#1814
    info = _read("nccl-debug-cumem-ibext.log")
    cumem, plugin = info.connections
    assert (cumem.transport, cumem.rank, cumem.peer_rank) == ("P2P/CUMEM", 34, 35)
    assert (plugin.transport, plugin.net_device, plugin.gdr, plugin.socket_fallback) == ("NET/IBext_v8", 4, False, False)


def test_mixed_ib_roce_hca_listing():  # NVIDIA/nccl#302, with the "[155] " rank prefix
    info = _read("nccl-debug-mixed-ib-roce.log")
    assert [(d.index, d.name, d.link_layer) for d in info.net_devices] == [
        (0, "mlx5_1", "IB"), (1, "mlx5_3", "IB"), (2, "mlx5_0", "IB"), (3, "mlx5_2", "RoCE"), (4, "mlx5_4", "IB")]
    assert info.oob == "eth0:10.100.62.64<0>" and not info.relaxed_ordering
    assert info.hosts == ("crow-ib-new-nccl-256-info-19",)
    assert info.connections[0].transport == "P2P/IPC" and info.connections[0].rank == 155


def test_roce_hcas_network_and_gdr():
    info = _read("nccl-debug-roce.log")
    assert info.net_devices == (NetDevice("IB", 0, "mlx5_0", 1, "RoCE"), NetDevice("IB", 1, "mlx5_2", 1, "IB"))
    assert info.relaxed_ordering and info.oob == "ibp209s0f0:10.128.3.13<0>"
    assert info.network == "IB"
    assert info.gdr_status == (GdrStatus("IB", 0, True, hca_name="mlx5_0"),)


def test_sharp_plugin_device_listing():  # NVIDIA/nccl#1357: "[0]mlx5_0:1/IB/SHARP", network IBext
    info = _read("nccl-debug-sharp-plugin.log")
    assert [(d.name, d.port, d.link_layer) for d in info.net_devices] == [
        ("mlx5_0", 1, "IB"), ("mlx5_1", 1, "IB"), ("mlx5_4", 1, "IB"), ("mlx5_5", 1, "IB")]
    assert info.network == "IBext" and info.relaxed_ordering and info.hosts == ("qh100-gpu19", "qh100-gpu20")
    assert not info.socket_fallback


def test_socket_and_shm():  # NVIDIA/nccl-tests#166
    info = _read("nccl-debug-socket-shm.log")
    sock, shm = info.connections
    assert (sock.transport, sock.socket_fallback, sock.gdr, sock.net_device) == ("NET/Socket", True, False, 0)
    assert (shm.transport, shm.channel, shm.rank, shm.peer_rank) == ("SHM", 9, 6, 7)
    assert info.socket_fallback and info.net_without_gdr() == ()


def test_socket_selection():  # NVIDIA/nccl#1053
    info = _read("nccl-debug-socket-select.log")
    assert info.network == "Socket" and info.socket_fallback
    assert info.net_devices == (NetDevice("Socket", 0, "lo", address="127.0.0.1"),)
    assert info.gdr_status[0].enabled is False and info.gdr_status[0].hca_name == "lo"


def test_other_line_forms():
    """Forms NCCL's source gives only as format strings (no verbatim example): version, PXN, CollNet,
    MNNVL, rail:plane devices, Init COMPLETE, TUNING; and the timestamp and MPI prefixes."""
    info = parse_nccl_debug("""
[1,0]<stdout>:node1:10:20 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
[2024-05-01 10:00:00] node1:10:20 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1:0:1/IB [1]mlx5_1:1:1:1/IB ; OOB ib0:10.0.0.1<0>
0: node1:10:20 [0] NCCL INFO Channel 02/1 : 0[0] -> 8[0] [send] via NET/IB/1(1)/GDRDMA/Shared
node1:10:20 [0] NCCL INFO Channel 00/0 : 0[0] -> 16[0] via P2P/MNNVL/read
node1:10:20 [0] NCCL INFO CollNet 00/0 : 0 [send] via COLLNET/SHARP/0/GDRDMA
node1:10:20 [0] NCCL INFO comm 0x55d5c0 rank 0 nranks 16 cudaDev 0 nvmlDev 0 busId 18000 commId 0x1234 - Init COMPLETE
node1:10:20 [0] NCCL INFO AllReduce: 1048576 Bytes -> Algo NVLS proto Simple channel{Lo..Hi}={0..15}
node1:10:21 [0] misc/socket.cc:50 NCCL WARN socket timeout
node2:11:21 [3] some unrelated line
""")
    assert info.version == "2.21.5"
    assert [(d.name, d.rail, d.plane) for d in info.net_devices] == [("mlx5_0", 0, 1), ("mlx5_1", 1, 1)]
    pxn, mnnvl, collnet = info.connections
    assert (pxn.proxy_rank, pxn.gdr, pxn.shared, pxn.net_device) == (1, True, True, 1)
    assert mnnvl.transport == "P2P/MNNVL" and mnnvl.p2p_read
    assert (collnet.transport, collnet.peer_rank, collnet.gdr) == ("CollNet", None, True) and info.collnet
    assert info.ranks[0].n_ranks == 16 and info.ranks[0].bus_id == "18000"
    assert info.tuning == (("AllReduce", 1048576, "NVLS", "Simple"),) and info.nvls
    assert len(info.warnings) == 1 and "socket timeout" in info.warnings[0]


def test_no_nccl_lines():
    with pytest.raises(TelemetryFormatError, match="x.log: no NCCL INFO"):
        parse_nccl_debug("hello\nworld\n", source="x.log")
