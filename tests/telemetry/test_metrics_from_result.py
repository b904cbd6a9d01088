"""metrics_from_result: exporter names, label conventions and units, checked by hand on a toy run."""

from __future__ import annotations

import math

import pytest

from gpuwait.errors import SpecError
from gpuwait.telemetry.metrics import SM_ACTIVE_PER_BUSY, metrics_from_result
from gpuwait.telemetry.metricset import MetricSet
from tests.telemetry.conftest import (
    COMPUTE_S,
    NIC_BYTES,
    NVLINK_BYTES,
    PCIE_BYTES,
    STEP_S,
    STEPS,
    make_result,
)

PACKETS = math.ceil(NIC_BYTES * STEPS / 4096)  # 4096 B MTU on IB and RoCE


def test_dcgm_gauges_per_gpu(roce_topo):
    m = metrics_from_result(make_result(roce_topo), roce_topo)
    util = m.select("DCGM_FI_DEV_GPU_UTIL")
    assert len(util) == 16
    assert dict(util.labels[9]) == {"gpu": "1", "device": "nvidia1", "modelName": "H100-SXM5-80GB", "Hostname": "s1"}
    assert m.value_of("DCGM_FI_DEV_GPU_UTIL", Hostname="s0", gpu=3) == pytest.approx(100 * COMPUTE_S / STEP_S)
    assert m.value_of("DCGM_FI_PROF_SM_ACTIVE", Hostname="s1", gpu=0) == pytest.approx(COMPUTE_S / STEP_S * SM_ACTIVE_PER_BUSY)
    # bytes per step / step time, TX out of the GPU, RX into it
    assert m.value_of("DCGM_FI_PROF_NVLINK_TX_BYTES", Hostname="s0", gpu=1) == pytest.approx(NVLINK_BYTES / STEP_S)
    assert m.value_of("DCGM_FI_PROF_NVLINK_RX_BYTES", Hostname="s0", gpu=2) == pytest.approx(NVLINK_BYTES / STEP_S)
    assert m.value_of("DCGM_FI_PROF_NVLINK_RX_BYTES", Hostname="s0", gpu=1) == 0
    assert m.value_of("DCGM_FI_PROF_PCIE_TX_BYTES", Hostname="s0", gpu=0) == pytest.approx(PCIE_BYTES / STEP_S)
    assert m.value_of("DCGM_FI_PROF_PCIE_RX_BYTES", Hostname="s0", gpu=0) == 0
    assert m.info["DCGM_FI_PROF_PCIE_TX_BYTES"].type == "gauge"


def test_gpu_util_can_count_nccl_kernels(roce_topo):
    m = metrics_from_result(make_result(roce_topo), roce_topo, gpu_util_counts_nccl=True)
    assert m.value_of("DCGM_FI_DEV_GPU_UTIL", Hostname="s0", gpu=0) == pytest.approx(90.0)  # compute 60 + exposed 30


def test_only_the_jobs_gpus_get_dcgm_samples(roce_topo):
    m = metrics_from_result(make_result(roce_topo, n_gpus=8), roce_topo)
    assert m.label_values("Hostname", "DCGM_FI_DEV_GPU_UTIL") == ["s0"]


def test_infiniband_pma_counts_4_byte_words(ib_topo):
    m = metrics_from_result(make_result(ib_topo), ib_topo)
    wire_bytes = NIC_BYTES * STEPS + PACKETS * 24  # LRH + BTH + ICRC per packet
    port = {"instance": "s0", "device": "mlx5_0", "port": "1"}
    assert m.value_of("PortXmitData", port) == wire_bytes / 4
    assert m.value_of("PortXmitData", port) * 4 == m.value_of("node_infiniband_port_data_transmitted_bytes_total", port)
    assert m.value_of("PortXmitPkts", port) == PACKETS
    assert m.value_of("PortRcvData", instance="s1", device="mlx5_0") == wire_bytes / 4
    assert m.value_of("PortRcvData", port) == 0
    assert m.value_of("PortXmitData", node="s0.nic0") == wire_bytes / 4  # gpuwait's name travels along
    assert len(m.select("PortXmitData")) == 16  # every NIC port of both servers
    assert "PortXmitWait" not in m.names()  # no queues, no credits: not derivable
    assert not [n for n in m.names() if n.startswith(("tx_", "rx_", "node_network_"))]


def test_each_port_of_a_two_port_nic_on_one_leaf_receives_on_its_own_cable():
    from gpuwait.spec import ClusterSpec
    from gpuwait.topology import build_cluster

    topo = build_cluster(ClusterSpec(servers=2, server={"template": "dgx-h100", "nic_ports": 2}))  # InfiniBand
    result = make_result(topo)
    result.links.bytes_per_step[topo.link_id("leaf0->s0.nic0#1")] = NIC_BYTES  # into the second port only
    m = metrics_from_result(result, topo)
    wire_bytes = NIC_BYTES * STEPS + PACKETS * 24
    assert m.value_of("PortRcvData", instance="s0", device="mlx5_1") == wire_bytes / 4  # nic0's port 2
    assert m.value_of("PortRcvData", instance="s0", device="mlx5_0") == 0


def test_roce_ethtool_counters(roce_topo):
    m = metrics_from_result(make_result(roce_topo), roce_topo)
    wire_bytes = NIC_BYTES * STEPS + PACKETS * 62  # Ethernet + IPv4 + UDP + BTH + ICRC + FCS
    assert m.value_of("tx_bytes_phy", instance="s0", device="eth0") == wire_bytes
    assert m.value_of("tx_prio3_bytes", instance="s0", device="eth0") == wire_bytes
    assert m.value_of("rx_bytes_phy", instance="s1", device="eth0") == wire_bytes
    assert m.value_of("tx_packets_phy", instance="s0", device="eth0") == PACKETS
    assert not [n for n in m.names() if "pause" in n or "ecn" in n or "discard" in n or n.startswith("Port")]
    other = metrics_from_result(make_result(roce_topo), roce_topo, roce_priority=5)
    assert other.value_of("tx_prio5_bytes", instance="s0", device="eth0") == wire_bytes


def test_tcp_shows_in_netdev_counters(tcp_topo):
    m = metrics_from_result(make_result(tcp_topo), tcp_topo)
    packets = math.ceil(NIC_BYTES * STEPS / 8948)
    assert m.value_of("node_network_transmit_bytes_total", instance="s0", device="eth0") == NIC_BYTES * STEPS + packets * 66
    assert m.value_of("node_network_transmit_packets_total", instance="s0", device="eth0") == packets


def test_gpuwait_metrics(roce_topo):
    result = make_result(roce_topo)
    m = metrics_from_result(result, roce_topo)
    assert m.value_of("gpuwait_step_seconds") == STEP_S
    phases = m.select("gpuwait_step_phase_seconds", rank=5)
    assert sum(phases.value) == pytest.approx(STEP_S)
    assert m.value_of("gpuwait_step_phase_seconds", rank=5, phase="compute") == COMPUTE_S
    assert m.value_of("gpuwait_collective_seconds", group="dp", collective="all_reduce") == 0.02
    assert m.value_of("gpuwait_collective_bus_bandwidth_bytes_per_second", group="dp") == pytest.approx(24e9)
    link = roce_topo.link_id("s0.nic0->leaf0")
    assert m.value_of("gpuwait_link_utilization", link="s0.nic0->leaf0") == result.links.utilization[link]
    assert m.value_of("gpuwait_link_transmit_bytes_total", link="s0.nic0->leaf0") == NIC_BYTES * STEPS


def test_extra_counters_are_appended_not_invented(roce_topo):
    pauses = MetricSet.from_samples([("rx_prio3_pause", {"instance": "s0", "device": "eth0"}, 1523)])
    m = metrics_from_result(make_result(roce_topo), roce_topo, extra_counters=pauses)
    assert m.value_of("rx_prio3_pause", instance="s0", device="eth0") == 1523
    clash = MetricSet.from_samples([("gpuwait_step_seconds", {}, 1.0)])
    with pytest.raises(SpecError, match="repeat generated"):
        metrics_from_result(make_result(roce_topo), roce_topo, extra_counters=clash)


def test_result_of_another_topology_is_refused(roce_topo):
    from gpuwait.topology.presets import build_preset

    small = build_preset("dgx-h100")
    with pytest.raises(SpecError, match="16 GPU ranks"):
        metrics_from_result(make_result(roce_topo), small)
