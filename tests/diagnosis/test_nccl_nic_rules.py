"""NCCL on the wrong HCA or GID (issue 14, part 2), from NCCL_DEBUG=INFO lines in NCCL's own formats:
``Channel %02d/%d : %d[%d] -> %d[%d] [send] via NET/%s/%d%s`` (src/transport/net.cc, v2.30.7-1; the
bracket is the GPU's nvmlDev), ``NET/IB : Using [0]mlx5_0:1/RoCE ...`` and the RoCE queue pair line
``NET/IB: %s: %s %d IbDev %d Port %d qp_num %d mtu %d GID %ld (%lX/%lX) ...``
(src/transport/net_ib/connect.cc, v2.30.7-1). The lines below are built from those format strings;
the cluster is an inventory-style one with real host and mlx5_K names."""

from __future__ import annotations

import numpy as np
import pytest

from gpuwait.diagnosis.randomcases import _renamed, _scenario
from gpuwait.diagnosis.run import diagnose_observation
from gpuwait.diagnosis.telemetry import observe_telemetry
from gpuwait.telemetry.bundle import load_telemetry_dir
from gpuwait.telemetry.nccl_debug import parse_nccl_debug
from gpuwait.topology.presets import build_cluster, resolve_cluster

USING = " ".join(f"[{k}]mlx5_{k}:1/RoCE" for k in range(8))


@pytest.fixture(scope="module")
def topo():
    scenario = _renamed(_scenario({"preset": "rocev2-400g-2tier", "servers": 2}, "dp-8b", np.random.default_rng(1)),
                        np.random.default_rng(3))
    return build_cluster(resolve_cluster(scenario.cluster))


def _log(host: str, gpu: int, dev: int, gid: str = "3 (0/C0A80A0BFFFF0000)", proxy: str = "") -> str:
    return "\n".join([
        f"{host}:4242:4300 [{gpu}] NCCL INFO NET/IB : Using {USING} [RO]; OOB eth0:10.0.0.1<0>",
        f"{host}:4242:4300 [{gpu}] NCCL INFO Channel 00/0 : {gpu}[{gpu}] -> {8 + gpu}[{gpu}] [send] via NET/IB/{dev}{proxy}/GDRDMA",
        f"{host}:4242:4300 [{gpu}] NCCL INFO NET/IB: ncclIbConnect: NCCL Dev {dev} IbDev {dev} Port 1 qp_num 4711 mtu 5 "
        f"GID {gid} ctsFifoRkey=0x1 ctsFifoLkey=0x2", ""])


def test_gid_lines_are_read_and_link_local_is_told_apart():
    info = parse_nccl_debug(_log("h1", 0, 0, gid="0 (80FE/1A2B3C4D5E6F7081)") + _log("h1", 1, 1))
    assert [(g.net_device, g.gid_index, g.link_local) for g in info.gids] == [(0, 0, True), (1, 3, False)]
    old = parse_nccl_debug("h1:1:2 [0] NCCL INFO NET/IB: Dev 2 Port 1 qpn 77 mtu 5 query_ece={supported=0, vendor_id=0x0, "
                           "options=0x0, comp_mask=0x0} GID 1 (80FE/99)")  # NCCL 2.19's src/transport/net_ib.cc
    assert [(g.net_device, g.gid_index, g.link_local) for g in old.gids] == [(2, 1, True)]


def test_a_gpu_sending_through_a_nic_off_its_pcie_switch_is_named(topo, tmp_path):
    host = topo.server_name(1)
    local = int(topo.gpu_nics[2][0])
    wrong = (local + 4) % topo.nic_node.shape[1]
    (tmp_path / "nccl.log").write_text(_log(host, 2, wrong) + _log(host, 3, int(topo.gpu_nics[3][0])))
    obs = observe_telemetry(load_telemetry_dir(tmp_path), topo)
    gpu = int(topo.gpu_node[1, 2])
    assert obs.nccl_nic_use[gpu] == (int(topo.nic_node[1, wrong]),)
    findings = [f for f in diagnose_observation(obs).findings if f.kind == "nccl-wrong-hca"]
    assert [f.component for f in findings] == [f"{host}.gpu2"]
    assert findings[0].evidence["nccl_uses"] == f"{host}.mlx5_{wrong}" and f"mlx5_{local}" in findings[0].evidence["local_nic"]
    assert "NCCL_IB_HCA" in findings[0].fix


def test_a_pxn_proxy_is_not_a_wrong_hca(topo, tmp_path):
    host = topo.server_name(0)
    (tmp_path / "nccl.log").write_text(_log(host, 2, 6, proxy="(6)"))
    obs = observe_telemetry(load_telemetry_dir(tmp_path), topo)
    assert not [f for f in diagnose_observation(obs).findings if f.kind == "nccl-wrong-hca"]


def test_a_link_local_gid_names_the_nic_and_the_variable(topo, tmp_path):
    host = topo.server_name(0)
    (tmp_path / "nccl.log").write_text(_log(host, 1, int(topo.gpu_nics[1][0]), gid="1 (80FE/1A2B3C4D5E6F7081)"))
    obs = observe_telemetry(load_telemetry_dir(tmp_path), topo)
    [finding] = [f for f in diagnose_observation(obs).findings if f.kind == "nccl-gid"]
    assert finding.component == f"{host}.mlx5_{int(topo.gpu_nics[1][0])}" and finding.evidence["gid_index"] == 1
    assert "NCCL_IB_GID_INDEX" in finding.fix
