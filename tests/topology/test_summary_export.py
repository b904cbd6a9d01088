"""Tests for gpuwait.topology.summary and gpuwait.topology.export.

* Bisection bandwidth is checked against a real minimum cut (networkx ``minimum_cut``) between
  the two halves of the servers on small 2- and 3-tier fabrics.
* The Slurm ``topology.conf`` texts below are written by hand from the fabric shapes, in the
  format of the topology.conf(5) man page (https://slurm.schedmd.com/topology.conf.html).
* DOT output is read back by a small parser here (pydot is not a dependency).
"""

from __future__ import annotations

import json
import re
import time

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwait.errors import SpecError, TopologyError, UnknownNameError
from gpuwait.spec import ClusterSpec
from gpuwait.topology import build_cluster, build_preset
from gpuwait.topology.export import expand_hostlist, hostlist, to_dot, to_slurm_topology_conf
from gpuwait.topology.summary import (
    bisection_bandwidth_Bps,
    cut_capacity_Bps,
    diameter_link_hops,
    oversubscription_by_tier,
    summarize,
)

GBPS_400 = 50e9  # bytes/s


def tiny(servers: int = 6, name: str = "tiny", nics: int = 1, **fabric):
    """A small fabric of single-NIC 400G servers on radix-8 switches (4 down, 4 up) unless overridden."""
    fabric = {"switch_radix": 8} | fabric
    return build_cluster(ClusterSpec(name=name, servers=servers, server={"template": "generic", "nics": nics},
                                     fabric=fabric))


def tiny3(**fabric):
    """8 single-NIC servers, 3 tiers of radix-4 switches: 4 leaves (2 servers each), 2 pods of 2 spines, 4 cores."""
    return tiny(8, "tiny3", tiers=3, switch_radix=4, **fabric)


# ------------------------------------------------------------------------------------------- summary
def _plain(value) -> bool:
    if isinstance(value, dict):
        return all(type(k) is str and _plain(v) for k, v in value.items())
    return value is None or type(value) in (int, float, str)


def test_summary_of_a_64_server_superpod():
    s = summarize(build_preset("dgx-h100-superpod", 64))
    assert (s.name, s.preset, s.servers, s.gpus, s.gpus_per_server) == ("dgx-h100-superpod", "dgx-h100-superpod", 64, 512, 8)
    assert s.switches_by_tier == {"leaf": 16, "spine": 32, "core": 0}
    # storage: 64 x 2 storage NICs + 4 storage servers = 132 ports -> 3 leaves of 64 down / 64 up, and
    # 2 spines of radix 128 hold their 192 uplinks;
    # management: 64 servers / 48 ports -> 2 switches + 1 core
    assert s.switches_by_network == {"compute": 48, "storage": 5, "management": 3}
    assert s.nodes_by_kind["gpu"] == 512 and s.nodes_by_kind["nic"] == 512 and s.nodes_by_kind["switch"] == 56
    assert s.links == 2 * s.cables and sum(s.links_by_kind.values()) == s.links
    assert s.links_by_kind["nvlink"] == 2 * 512
    assert (s.tiers, s.planes, s.nic_ports_per_server, s.nic_ports, s.nic_port_speed_Bps) == (2, 1, 8, 512, GBPS_400)
    assert s.host_injection_Bps == 512 * GBPS_400
    assert s.bisection_Bps == 256 * GBPS_400
    assert s.oversubscription_by_tier == {"leaf": 1.0}
    assert (s.diameter_link_hops, s.diameter_switch_hops) == (4, 3)
    assert s.nvlink_per_gpu_Bps == 450e9 and s.scale_out_per_gpu_Bps == GBPS_400


def test_summary_to_dict_is_plain_json():
    d = summarize(build_preset("dual-plane-2x200g", 8)).to_dict()
    assert _plain(d)
    assert json.loads(json.dumps(d)) == d
    assert d["planes"] == 2 and d["nic_ports_per_server"] == 16 and d["scale_out_per_gpu_Bps"] == GBPS_400


def test_summary_of_a_single_server():
    s = summarize(build_preset("dgx-h100"))
    assert (s.servers, s.gpus, s.tiers, s.planes) == (1, 8, 0, 0)
    assert s.bisection_Bps is None and s.diameter_link_hops is None and s.oversubscription_by_tier == {}
    assert s.scale_out_per_gpu_Bps == GBPS_400  # the NICs exist even with no fabric to cable them to


def test_nvlink_per_gpu_is_the_same_for_a_mesh():
    mesh = build_cluster(ClusterSpec(server={"template": "dgx-a100", "nvlink_topology": "mesh"}, fabric={"kind": "none"}))
    assert summarize(mesh).nvlink_per_gpu_Bps == pytest.approx(300e9)


# ------------------------------------------------------------------------------------------- bisection
def test_bisection_of_non_blocking_and_oversubscribed_two_tier():
    full = build_preset("rocev2-400g-2tier", 8)
    half = build_cluster(ClusterSpec(preset="rocev2-400g-2tier", servers=8, fabric={"oversubscription": 2}))
    injection_Bps = 8 * 8 * GBPS_400
    assert summarize(full).host_injection_Bps == injection_Bps
    assert bisection_bandwidth_Bps(full) == injection_Bps / 2
    assert bisection_bandwidth_Bps(half) == injection_Bps / 4


@pytest.mark.parametrize("oversubscription", [1, 2])
def test_bisection_agrees_with_a_real_min_cut_two_tier(oversubscription):
    topo = build_cluster(ClusterSpec(preset="rocev2-400g-2tier", servers=8, fabric={"oversubscription": oversubscription}))
    # the worst halves split along the leaves: servers 0-3 on leaf0, 4-7 on leaf1
    assert cut_capacity_Bps(topo, range(4)) == bisection_bandwidth_Bps(topo)
    # any other balanced split can only do better
    rng = np.random.default_rng(1)
    for _ in range(5):
        side = rng.permutation(8)[:4]
        assert cut_capacity_Bps(topo, side) >= bisection_bandwidth_Bps(topo) - 1


@pytest.mark.parametrize("spine_oversubscription, expected_Bps", [(1, 4 * GBPS_400), (2, 2 * GBPS_400)])
def test_bisection_agrees_with_a_real_min_cut_three_tier(spine_oversubscription, expected_Bps):
    topo = tiny3(spine_oversubscription=spine_oversubscription)
    # pods hold servers 0-3 and 4-7; between them only the spine->core links of a pod
    assert bisection_bandwidth_Bps(topo) == expected_Bps
    assert cut_capacity_Bps(topo, range(4), range(4, 8)) == expected_Bps


def test_cut_capacity_on_a_rail_optimized_fabric():
    topo = build_preset("dgx-h100", 4)  # 8 rails; every server on every rail leaf
    assert cut_capacity_Bps(topo, [0, 1]) == bisection_bandwidth_Bps(topo) == 16 * GBPS_400


# ------------------------------------------------------------------------------------------- oversubscription, diameter
def test_oversubscription_per_tier():
    topo = build_cluster(ClusterSpec(preset="rocev2-400g-2tier", servers=8, fabric={"oversubscription": 2}))
    assert oversubscription_by_tier(topo) == {"leaf": 2.0}
    assert oversubscription_by_tier(build_preset("rocev2-400g-2tier", 8)) == {"leaf": 1.0}
    assert oversubscription_by_tier(tiny3(spine_oversubscription=2)) == {"leaf": 1.0, "spine": 2.0}
    # read from the cables: a half-filled leaf tier has half as much down as up
    assert oversubscription_by_tier(build_preset("rocev2-400g-2tier", 2)) == {"leaf": 0.5}


def test_diameter_in_link_hops():
    assert diameter_link_hops(build_preset("rocev2-400g-2tier", 8)) == 4  # NIC-leaf-spine-leaf-NIC
    assert diameter_link_hops(build_preset("rocev2-400g-2tier", 4)) == 2  # one leaf
    assert diameter_link_hops(build_preset("dual-plane-2x200g", 8)) == 4  # planes are not joined
    assert diameter_link_hops(tiny3()) == 6  # NIC-leaf-spine-core-spine-leaf-NIC
    assert diameter_link_hops(build_preset("dgx-h100")) is None


def test_summary_of_the_2048_server_superpod():
    topo = build_preset("dgx-h100-superpod", 2048)
    start = time.perf_counter()
    s = summarize(topo)
    elapsed_s = time.perf_counter() - start
    print(f"summarize(dgx-h100-superpod, 2048 servers): {elapsed_s:.3f} s")
    assert s.switches_by_tier == {"leaf": 512, "spine": 512, "core": 1024} and s.gpus == 16_384
    assert s.diameter_link_hops == 6 and s.tiers == 3
    assert s.bisection_Bps == s.host_injection_Bps / 2 == 8192 * GBPS_400
    assert s.oversubscription_by_tier == {"leaf": 1.0, "spine": 1.0}


# ------------------------------------------------------------------------------------------- Slurm
HEADER = """\
##################################################################
# Slurm's network topology configuration file for use with the
# topology/tree plugin
##################################################################
"""


def test_slurm_two_tier_top_of_rack():
    # 6 servers, 4 per leaf: leaf0 holds 0-3, leaf1 holds 4-5; 4 spines above both leaves
    expected = HEADER + """\
# Generated by gpuwait from cluster 'tiny': 6 servers node[0-5] (node<i> is server s<i>), 2 leaves, 4 spines.
# slurm.conf: TopologyPlugin=topology/tree
SwitchName=leaf0 Nodes=node[0-3]
SwitchName=leaf1 Nodes=node[4-5]
SwitchName=spine0 Switches=leaf[0-1]
SwitchName=spine1 Switches=leaf[0-1]
SwitchName=spine2 Switches=leaf[0-1]
SwitchName=spine3 Switches=leaf[0-1]
"""
    assert to_slurm_topology_conf(tiny()) == expected


def test_slurm_rail_optimized_puts_a_server_under_every_rail():
    topo = tiny(3, "rail", nics=2, rail_optimized=True)
    expected = HEADER + """\
# Generated by gpuwait from cluster 'rail': 3 servers gpu-[0-2] (gpu-<i> is server s<i>), 2 leaves, 4 spines.
# slurm.conf: TopologyPlugin=topology/tree
SwitchName=leaf0 Nodes=gpu-[0-2]
SwitchName=leaf1 Nodes=gpu-[0-2]
SwitchName=spine0 Switches=leaf[0-1]
SwitchName=spine1 Switches=leaf[0-1]
SwitchName=spine2 Switches=leaf[0-1]
SwitchName=spine3 Switches=leaf[0-1]
"""
    assert to_slurm_topology_conf(topo, hostname_prefix="gpu-") == expected


def test_slurm_three_tier():
    # spine j of each pod goes to core group j: cores 0-1 above spines 0 and 2, cores 2-3 above 1 and 3
    expected = HEADER + """\
# Generated by gpuwait from cluster 'tiny3': 8 servers node[0-7] (node<i> is server s<i>), 4 leaves, 4 spines, 4 cores.
# slurm.conf: TopologyPlugin=topology/tree
SwitchName=leaf0 Nodes=node[0-1]
SwitchName=leaf1 Nodes=node[2-3]
SwitchName=leaf2 Nodes=node[4-5]
SwitchName=leaf3 Nodes=node[6-7]
SwitchName=spine0 Switches=leaf[0-1]
SwitchName=spine1 Switches=leaf[0-1]
SwitchName=spine2 Switches=leaf[2-3]
SwitchName=spine3 Switches=leaf[2-3]
SwitchName=core0 Switches=spine[0,2]
SwitchName=core1 Switches=spine[0,2]
SwitchName=core2 Switches=spine[1,3]
SwitchName=core3 Switches=spine[1,3]
"""
    assert to_slurm_topology_conf(tiny3()) == expected


def _slurm_lines(text: str) -> dict[str, tuple[str, list[str]]]:
    out = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        match = re.fullmatch(r"SwitchName=(\S+) (Nodes|Switches)=(\S+)", line)
        assert match, line
        out[match[1]] = (match[2], expand_hostlist(match[3]))
    return out


def test_slurm_superpod_2048_and_dual_plane():
    topo = build_preset("dgx-h100-superpod", 2048)
    start = time.perf_counter()
    text = to_slurm_topology_conf(topo)
    print(f"to_slurm_topology_conf(2048 servers): {time.perf_counter() - start:.3f} s")
    lines = _slurm_lines(text)
    assert len(lines) == 512 + 512 + 1024
    assert lines["leaf0"] == ("Nodes", [f"node{i}" for i in range(32)])
    assert lines["leaf15"] == ("Nodes", [f"node{i}" for i in range(32, 64)])  # SU 1, rail 7
    assert lines["spine0"] == ("Switches", [f"leaf{i}" for i in range(32)])  # pod 0
    assert lines["core0"] == ("Switches", [f"spine{32 * p}" for p in range(16)])
    plane = _slurm_lines(to_slurm_topology_conf(build_preset("dual-plane-2x200g", 8)))
    assert plane["p0.leaf1"] == plane["p1.leaf1"] == ("Nodes", [f"node{i}" for i in range(4, 8)])
    assert plane["p1.spine31"] == ("Switches", ["p1.leaf0", "p1.leaf1"])


def test_slurm_bad_input():
    with pytest.raises(SpecError, match="hostname_prefix"):
        to_slurm_topology_conf(tiny(), hostname_prefix="node[")
    with pytest.raises(TopologyError, match="fabric.kind"):
        to_slurm_topology_conf(build_preset("dgx-h100"))


# ------------------------------------------------------------------------------------------- hostlists
def test_hostlist_examples():
    assert hostlist([f"node{i}" for i in (0, 1, 2, 3, 8, 9, 10, 11)]) == "node[0-3,8-11]"
    assert hostlist([f"leaf{i}" for i in range(32)]) == "leaf[0-31]"
    assert hostlist(["node5"]) == "node5"
    assert hostlist(["node08", "node09", "node10"]) == "node[08-10]"
    assert hostlist(["spine2", "spine0", "spine0"]) == "spine[0,2]"
    assert hostlist([]) == ""
    assert expand_hostlist("dev[0-2],s3") == ["dev0", "dev1", "dev2", "s3"]
    assert expand_hostlist("rack[1-2]-n[01-02]") == ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]
    assert expand_hostlist("") == []


@pytest.mark.parametrize("bad", ["node[1-", "node[a-b]", "node[3-1]", "node]", "a,,b"])
def test_expand_hostlist_rejects_bad_expressions(bad):
    with pytest.raises(SpecError, match="hostlist"):
        expand_hostlist(bad)


@pytest.mark.parametrize("bad", ["", "a b", "a,b", "x[1]"])
def test_hostlist_rejects_bad_names(bad):
    with pytest.raises(SpecError, match="hostlist"):
        hostlist([bad])


_numbered = st.builds(lambda prefix, number, width: f"{prefix}{number:0{width}d}",
                      st.sampled_from(["node", "leaf", "p0.leaf", "gpu-", "", "a1b"]),
                      st.integers(0, 130), st.integers(0, 4))
_any_name = st.text(alphabet="ab.-_0123456789", min_size=1, max_size=6)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(_numbered, _any_name), max_size=40))
def test_hostlist_round_trip(names):
    expression = hostlist(names)
    expanded = expand_hostlist(expression)
    assert sorted(expanded) == sorted(set(names))
    assert hostlist(expanded) == expression


# ------------------------------------------------------------------------------------------- DOT
_EDGE = re.compile(r'"([^"]+)" -- "([^"]+)" \[label="([0-9.]+G)"\];')
_RANK = re.compile(r"\{ rank=same; (.*) \}")


def parse_dot(text: str) -> tuple[list[list[str]], nx.MultiGraph]:
    """Rows of ``rank=same`` node names (top first) and the multigraph of the edges."""
    lines = [line.strip() for line in text.strip().splitlines()]
    assert re.fullmatch(r'graph "[^"]+" \{', lines[0]) and lines[-1] == "}"
    rows, graph = [], nx.MultiGraph()
    for line in lines[1:-1]:
        if line.startswith("//") or line == "node [shape=box];":
            continue
        if match := _RANK.fullmatch(line):
            rows.append(re.findall(r'"([^"]+)"', match[1]))
        elif match := _EDGE.fullmatch(line):
            graph.add_edge(match[1], match[2], label=match[3])
        else:
            raise AssertionError(f"unexpected DOT line: {line}")
    declared = [name for row in rows for name in row]
    assert len(declared) == len(set(declared)) and set(graph.nodes) <= set(declared)
    return rows, graph


def test_dot_compute_network_one_edge_per_cable():
    topo = build_preset("rocev2-400g-2tier", 8)
    rows, graph = parse_dot(to_dot(topo))
    assert [len(row) for row in rows] == [32, 2, 8]  # spines, leaves, servers
    assert graph.number_of_edges() == 8 * 8 + 2 * 32  # NIC cables + leaf-spine cables
    assert graph.number_of_edges("s0", "leaf0") == 8 and graph.degree("leaf1") == 64
    assert {label for *_, label in graph.edges(data="label")} == {"400G"}


def test_dot_max_servers_keeps_the_switches_above_them():
    rows, graph = parse_dot(to_dot(tiny3(), max_servers=2))
    assert rows == [["core0", "core1", "core2", "core3"], ["spine0", "spine1"], ["leaf0"], ["s0", "s1"]]
    assert graph.number_of_edges() == 2 + 2 + 4
    rows, graph = parse_dot(to_dot(build_preset("dgx-h100-superpod", 2048), max_servers=4))
    assert [len(row) for row in rows] == [1024, 32, 8, 4]  # one pod's spines reach every core group
    assert graph.number_of_edges() == 4 * 8 + 8 * 32 + 32 * 32


def test_dot_side_networks_and_speeds():
    topo = build_preset("dgx-h100-superpod", 4)
    _, storage = parse_dot(to_dot(topo, network="storage"))
    assert storage.number_of_edges() == 4 * 2 + 2  # 2 storage NICs per server + 2 storage servers
    assert storage.number_of_edges("stor.leaf0", "stor1") == 1
    _, mgmt = parse_dot(to_dot(topo, network="management"))
    assert sorted(mgmt.edges(data="label")) == [("mgmt.sw0", f"s{i}", "10G") for i in range(4)]
    _, oci = parse_dot(to_dot(build_preset("oci-a100-roce", 2)))
    assert {label for *_, label in oci.edges(data="label")} == {"100G"}


def test_dot_bad_input():
    with pytest.raises(UnknownNameError, match="network"):
        to_dot(tiny(), network="storage-area")
    with pytest.raises(SpecError, match="max_servers"):
        to_dot(tiny(), max_servers=-1)


def test_a_server_without_nics_shows_none_not_a_default_port_speed(capsys):
    """The RTX 2080 Ti workstation (no compute NIC) showed "nic port speed 400Gbps" in `topo` and
    "0 x 1 port | 400Gbps" in `topo --list`: the template's unused default speed."""
    from pathlib import Path

    from tests.cli.test_cli import run_cli

    cluster = Path(__file__).resolve().parents[1] / "nccltests" / "data" / "reference" / "clusters" / "rtx2080ti-pcie-2gpu.yaml"
    code, out, _ = run_cli(capsys, "topo", str(cluster), "--json")
    doc = json.loads(out)
    assert code == 0 and doc["nic_ports"] == 0 and doc["nic_port_speed_Bps"] is None
    code, out, _ = run_cli(capsys, "topo", str(cluster))
    assert code == 0 and "400Gbps" not in out and re.search(r"nic port speed\s*│\s*-\s*│", out), out
    code, out, _ = run_cli(capsys, "topo", "--list")
    row = next(line for line in out.splitlines() if "rtx2080ti-pcie-2gpu" in line)
    assert [c.strip() for c in row.split("│")[1:-1]] == ["rtx2080ti-pcie-2gpu", "2x RTX-2080Ti", "none (PCIe)", "none", "-"]
