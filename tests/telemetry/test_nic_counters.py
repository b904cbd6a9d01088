"""ethtool -S and perfquery dumps (Linux mlx5 counters.rst; perfquery(8))."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwait.telemetry.errors import TelemetryFormatError
from gpuwait.telemetry.nic_counters import (
    ethtool_prometheus_name,
    parse_ethtool_stats,
    parse_perfquery,
    pma_data_bytes,
)

DATA = Path(__file__).parent / "data"


def test_real_perfquery_extended():
    c = parse_perfquery((DATA / "perfquery-extended.txt").read_text())
    assert c["PortXmitData"] == 36298026860928 and c["PortRcvData"] == 12279028775751
    assert pma_data_bytes(c["PortXmitData"]) == 145192107443712  # 4-byte words
    assert c["PortXmitWait"] == 22730501 and c["PortMulticastRcvPkts"] == 5584846741
    assert c["CounterSelect2"] == 0 and len(c) == 25


def test_real_perfquery_classic():
    c = parse_perfquery((DATA / "perfquery-classic.txt").read_text())
    assert (c["PortXmitData"], c["PortRcvData"], c["PortXmitPkts"], c["PortRcvPkts"], c["PortXmitWait"]) == (
        6465317, 427938, 41531, 130792613, 2)
    assert next(iter(c)) == "PortSelect" and len(c) == 20


def test_real_perfquery_of_a_switch_port_that_went_down():
    c = parse_perfquery((DATA / "perfquery-extended-lid2052.txt").read_text())
    assert (c["LinkDownedCounter"], c["PortXmitDiscards"], c["PortXmitWait"]) == (1, 20046, 41864608)
    assert pma_data_bytes(c["PortXmitData"]) == 4 * 178791657177235 and len(c) == 25


def test_real_perfquery_error_details():
    """`perfquery -E`: its own header and counter names, read as the other dumps are."""
    c = parse_perfquery((DATA / "perfquery-rcv-error-details.txt").read_text())
    assert c["PortSelect"] == 2 and c["PortLocalPhysicalErrors"] == 0 and len(c) == 8


@pytest.mark.parametrize("name, port, queue", [
    ("ethtool-bnx2x-per-queue.txt", {}, {"[0]: rx_bytes": 209487403324, "[1]: tx_bcast_packets": 8249}),
    ("ethtool-be2net-rxq.txt", {"roce_drops_crc": 0}, {"rxq0: rx_bytes": 176801887745990, "rxq0: rx_drops_no_frags": 3885606854}),
])
def test_real_per_queue_ethtool_lines(name, port, queue):
    """Drivers that print per-queue counters as '[0]: rx_bytes: N' (bnx2x, bnxt_en) or 'rxq0: rx_bytes: N'
    (be2net): kept under the name as printed, prefix and all, apart from the port's own counters. Before: every
    such line was unreadable (the bnx2x dump an error, no counter read; be2net's a warning per file)."""
    skipped: list[str] = []
    c = parse_ethtool_stats((DATA / name).read_text(), source=name, skipped=skipped)
    assert skipped == [] and all(c[k] == v for k, v in {**port, **queue}.items())
    assert "rx_bytes" not in c  # a queue's bytes are not the port's


def test_real_mlx5_dump_of_2018():  # isc-projects/ethq#8
    c = parse_ethtool_stats((DATA / "ethtool-mlx5-ethq-2018.txt").read_text())
    assert (c["rx_bytes"], c["tx_bytes"], c["rx_csum_none"]) == (2195783498134, 2655285206479, 49455) and len(c) == 23


def test_ethtool_dump():
    # constructed from the kernel's mlx5 counters.rst names (no real dump was found)
    c = parse_ethtool_stats((DATA / "ethtool-mlx5-constructed.txt").read_text())
    assert c["rx_prio3_pause"] == 1523 and c["tx_bytes_phy"] == 1843968431808
    assert parse_ethtool_stats("     rx_prio3_pause: 1523") == {"rx_prio3_pause": 1523}  # the kernel doc's example line
    assert parse_ethtool_stats("rx_discards_phy: 7\n") == {"rx_discards_phy": 7}  # a grep that lost the indent


@pytest.mark.parametrize("parse, text, match", [
    (parse_ethtool_stats, "NIC statistics:\n     rx_bytes: lots\n", "eth0.txt line 2"),
    (parse_ethtool_stats, "NIC statistics:\n", "no counters"),
    (parse_perfquery, "PortXmitData:....xyz\n", "eth0.txt line 1"),
    (parse_perfquery, "PortXmitData:....1\nPortXmitData:....2\n", "appears twice"),
    (parse_perfquery, "# Port counters: Lid 7 port 1\n", "no counters"),
])
def test_errors_name_file_and_line(parse, text, match):
    with pytest.raises(TelemetryFormatError, match=match):
        parse(text, source="eth0.txt")


def test_node_exporter_names_for_ethtool_counters():
    assert ethtool_prometheus_name("rx_discards_phy") == "node_ethtool_received_discards_phy"
    assert ethtool_prometheus_name("tx_prio3_pause") == "node_ethtool_transmitted_prio3_pause"
    assert ethtool_prometheus_name("rx_vport_rdma_unicast_bytes") == "node_ethtool_received_vport_rdma_unicast_bytes"
