"""The inventory readers on real samples (tests/data/inventory/README.md cites each one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwait.errors import SpecError
from gpuwait.inventory.explicit import read_links
from gpuwait.inventory.fabric import infer_tiers, inventory_section
from gpuwait.inventory.ibnetdiscover import link_rate_bps, read_ibnetdiscover, read_name_map
from gpuwait.inventory.lldp import read_lldp
from gpuwait.inventory.nccl_topo import read_nccl_topo, read_nccl_topo_dir
from gpuwait.inventory.slurm import expand_hostlist, read_slurm_topology

DATA = Path(__file__).resolve().parents[1] / "data" / "inventory"
X5 = str(DATA / "x5.ibnetdiscover")
X5_MAP = str(DATA / "x5.map")
X5_SLURM = str(DATA / "x5-topology.conf")


def _x5():
    return read_ibnetdiscover(X5, name_map=read_name_map(X5_MAP))


def test_ib_rates_are_the_ibta_data_rates():
    # IBTA effective throughput of a 4x link: QDR 32 Gb/s (8b/10b), EDR 100, HDR 200, NDR 400 Gb/s (64b/66b)
    assert [link_rate_bps(f"4x{s}") / 1e9 for s in ("SDR", "DDR", "QDR", "EDR", "HDR", "NDR", "XDR")] == \
        [8, 16, 32, 100, 200, 400, 800]
    assert link_rate_bps("1xHDR") / 1e9 == 50 and link_rate_bps("lid 383 ") is None


def test_x5_ibnetdiscover_counts():
    found = _x5()
    assert len(found.switches) == 11
    assert len(found.hosts) == 89  # every HCA of the dump, 87 of them named by X5.map
    assert all(len(nics) == 1 for nics in found.hosts.values())
    # the DDR HCAs of the r422 nodes keep their 4xDDR rate, the rest 4xQDR
    rates = {c.rate_bps for c in found.cables if c.a.host == "r422node2" or c.b.host == "r422node2"}
    assert rates == {16e9}


def test_x5_tiers_agree_with_the_slurm_file_written_from_the_same_dump():
    """X5.topology.conf was written by another tool (ibmap2slurm.py) from the same fabric: its leaves
    (switches with Nodes=) must be our tier-1 switches, and every leaf must hold the same hosts."""
    found = _x5()
    tiers = infer_tiers(found)
    guid_of = {name: guid for name, guid in found.guid.items() if name in found.switches}
    ours_by_guid = {guid_of[name]: tier for name, tier in tiers.items()}
    slurm = read_slurm_topology(X5_SLURM)
    slurm_tiers = infer_tiers(slurm)
    theirs = {f"0x{name[2:].lower()}": tier for name, tier in slurm_tiers.items()}
    assert {g for g, t in ours_by_guid.items() if t == 1} == {g for g, t in theirs.items() if t == 1}
    assert {g for g, t in ours_by_guid.items() if t == 2} == {g for g, t in theirs.items() if t == 2}

    def hosts_by_leaf(collected, key):
        out: dict[str, set[str]] = {}
        for cable in collected.cables:
            if cable.a.host is not None:
                out.setdefault(key(cable.b.switch), set()).add(cable.a.host)
            elif cable.b.host is not None:
                out.setdefault(key(cable.a.switch), set()).add(cable.b.host)
        return out

    ours = hosts_by_leaf(found, lambda s: guid_of[s])
    theirs_hosts = hosts_by_leaf(slurm, lambda s: f"0x{s[2:].lower()}")
    assert ours == theirs_hosts


def test_switch_names_from_descriptions():
    found = _x5()
    # "Voltaire 4036 # hoibp0013" -> hoibp0013; a description shared by several switches -> S-<guid>
    assert "hoibp0013" in found.switches and "4036-8C5C" in found.switches
    assert "S-0002c90200417670" in found.switches


def test_nccl_topo_h200_dump():
    fields, nics = read_nccl_topo(str(DATA / "nccl-topo-h200" / "fs-207.xml"))
    assert nics == ["mlx5_0", "mlx5_1", "mlx5_2"]
    assert fields["gpu_model"] == "H200-SXM5-141GB" and fields["gpus"] == 3
    # each GPU shares its PCIe switch with one ConnectX-7, as the dump nests them
    assert fields["gpu_pcie_switch"] == fields["nic_pcie_switch"] == [0, 1, 2]
    # 5+5+4+4 = 18 NVLink4 links to NVSwitches x 25 GB/s = 450 GB/s per direction (H200: 900 GB/s bidirectional)
    assert fields["nvlink_topology"] == "nvswitch" and fields["nvlink_bandwidth"] == "450GB/s"
    assert fields["nic_speed"] == "400Gbps" and fields["pcie_bandwidth"] == "63.02GB/s"  # Gen5 x16
    assert fields["cpu_vendor"] == "intel"
    assert fields["cpu_generation"] == "emerald-rapids"  # familyid 6, modelid 207 = 0xCF (NCCL's ERP)


def test_nccl_topo_file_without_gpu_elements():
    fields, nics = read_nccl_topo(str(DATA / "nccl-topo-p4de" / "p4de-24xl-topo.xml"))
    # the file's own comment: "2 groups of PCIe hierarchy under each socket. Each group has 2 GPUs and 1 NIC"
    assert fields["gpus"] == 8 and fields["nics"] == 4 and fields["cpus"] == 2 and fields["pcie_switches"] == 4
    assert fields["gpu_pcie_switch"] == [0, 0, 1, 1, 2, 2, 3, 3] and fields["nic_pcie_switch"] == [0, 1, 2, 3]
    assert fields["gpu_model"] == "A100-SXM4-80GB"  # PCI device 0x20b2
    assert fields["pcie_bandwidth"] == "15.75GB/s"  # 8 GT/s x16, Gen3
    assert "nvlink_bandwidth" not in fields  # NCCL reads NVLink from NVML; the file says nothing
    assert nics == ["nic0", "nic1", "nic2", "nic3"]
    assert fields["cpu_generation"] == "skylake"  # modelid 85 = 0x55: Cascade Lake, NCCL's SKL class


def test_hostlists():
    assert expand_hostlist("sl390lin[1-3,7],H-78e7d1030024535c") == ["sl390lin1", "sl390lin2", "sl390lin3", "sl390lin7",
                                                                        "H-78e7d1030024535c"]
    assert expand_hostlist("node[08-10]") == ["node08", "node09", "node10"]
    with pytest.raises(SpecError, match="expected a ']'"):
        expand_hostlist("node[1-3")


def test_lldp_hosts_and_switch_files():
    files = sorted(str(p) for p in (DATA / "lldp").glob("*.json"))
    found = read_lldp(files)
    section, implied = inventory_section(found)
    assert section["hosts"] == ["gpu-a01", "gpu-a02"] and section["nics"] == ["ens1f0np0", "ens2f0np0"]
    assert [(s["name"], s["tier"]) for s in section["switches"]] == [("roce-leaf-01", 1), ("roce-leaf-02", 1), ("roce-spine-01", 2)]
    assert {"a": "gpu-a02.ens2f0np0", "b": "roce-leaf-02", "b_port": "Ethernet4"} in section["cables"]
    assert found.transport == "rocev2" and implied["nics"] == 2


def test_explicit_yaml_and_csv():
    section, implied = inventory_section(read_links(str(DATA / "links.yaml")))
    assert section["hosts"] == ["node01", "node02"] and len(section["cables"]) == 8
    assert implied["nic_speed"] == 400e9 and implied["switch_speed"] == 400e9
    section, _ = inventory_section(read_links(str(DATA / "links.csv")))
    assert section["cables"][2] == {"a": "leaf1", "b": "spine1", "a_port": 33, "b_port": 1, "speed": "400Gbps"}


@pytest.mark.parametrize(("name", "text", "message"), [
    ("bad.ibnet", 'Switch 36 "S-0008f10500200b50" # "sw" lid 9\n[1]\t"S-0008f10500108c5c"[15]\t# "x" lid 16 4xQDR\nbogus line here\n',
     r"bad.ibnet:3: got 'bogus line here'; expected a node header"),
    ("links.yaml", "hosts: [node01]\nlinks:\n  - {a: node01/mlx5_0, b: leaf1}\n  - {a: node10/mlx5_0, b: leaf1}\n",
     r"links.yaml:4: link end 'node10/mlx5_0': host 'node10' is not in hosts: \(close: node01\)"),
    ("links.csv", "a,a_port,b,b_port,speed\nnode01/mlx5_0,,leaf1,1,fast\n", r"links.csv:2: speed 'fast'; expected a rate"),
    ("nogpu.xml", '<system version="1"><cpu numaid="0"><pci busid="0000:01:00.0" class="0x020000"><nic><net name="mlx5_0"/></nic></pci></cpu></system>',
     r"nogpu.xml: no GPU found"),
    ("broken.xml", '<system version="1">\n<cpu>\n</system>\n', r"broken.xml:3: not well-formed XML"),
    ("topology.conf", "SwitchName=s0 Nodes=tux[0-3]\nNodes=tux[4-7]\n", r"topology.conf:2: got 'Nodes=tux\[4-7\]'; expected SwitchName="),
])
def test_bad_input_is_one_line_naming_file_and_line(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text)
    readers = {".ibnet": read_ibnetdiscover, ".yaml": read_links, ".csv": read_links, ".xml": read_nccl_topo,
               ".conf": read_slurm_topology}
    with pytest.raises(SpecError, match=message) as err:
        readers[path.suffix](str(path))
    assert "\n" not in str(err.value)


def test_hosts_with_different_nic_counts_are_refused(tmp_path):
    path = tmp_path / "links.yaml"
    path.write_text("links:\n  - {a: n1/mlx5_0, b: leaf1}\n  - {a: n1/mlx5_1, b: leaf1}\n  - {a: n2/mlx5_0, b: leaf1}\n"
                    "  - {a: n3/mlx5_0, b: leaf1}\n")
    with pytest.raises(SpecError, match=r"host n1 has 2 NIC\(s\) \(mlx5_0, mlx5_1\); expected 1 like the other hosts"):
        inventory_section(read_links(str(path)))


def test_nccl_dumps_that_disagree_are_refused(tmp_path):
    for src, host in (("nccl-topo-h200/fs-207.xml", "a.xml"), ("nccl-topo-p4de/p4de-24xl-topo.xml", "b.xml")):
        (tmp_path / host).write_text((DATA / src).read_text())
    with pytest.raises(SpecError, match=r"b.xml: \w+ is .*; expected .* as in .*a.xml \(gpuwait models one server template\)"):
        read_nccl_topo_dir(str(tmp_path))


def test_nccl_topo_net_without_a_name_is_named_by_its_place(tmp_path):
    # a hand-written NCCL_TOPO_FILE may leave out <net name=...>: the NIC is named like one with no <net>,
    # not None (which broke the import with a traceback when the names were sorted)
    path = tmp_path / "host.xml"
    path.write_text((DATA / "nccl-topo-h200" / "fs-207.xml").read_text().replace('<net name="mlx5_1" ', "<net "))
    fields, nics = read_nccl_topo(str(path))
    assert nics == ["mlx5_0", "nic1", "mlx5_2"] and fields["nics"] == 3


def test_ibnetdiscover_ports_report():
    """`ibnetdiscover -p` (what infiniband_exporter reads): one line per port, both ends and their LIDs.
    Before: refused at its first line as not a node header."""
    found = read_ibnetdiscover(str(DATA / "infiniband-exporter-edr.ports"))
    assert set(found.hosts) == {"o0001", "o0002", "p0001"} and found.hosts["o0001"].keys() == {"HCA-1"}
    assert set(found.switches) == {"ib-i1l1s01", "ib-i1l2s01", "ib-i4l1s01"}  # unconnected ports add no switch
    assert found.lid["ib-i1l1s01"] == 1719 and found.lid["ib-i4l1s01"] == 2052 and found.lid["ib-i1l2s01"] == 1516
    assert found.guid["ib-i1l1s01"] == "0x7cfe9003009ce5b0"
    cables = {(c.a.host or c.a.switch, c.a.port, c.b.host or c.b.switch, c.b.port, c.rate_bps) for c in found.cables}
    assert cables == {("o0001", 1, "ib-i1l1s01", 10, 100e9), ("o0002", 1, "ib-i1l1s01", 11, 100e9),
                      ("p0001", 1, "ib-i4l1s01", 35, 100e9), ("ib-i1l1s01", 1, "ib-i1l2s01", 1, 100e9)}


def test_sharp_aggregation_nodes_are_no_hosts(tmp_path):
    """A Quantum switch's SHARP Aggregation Node is a CA of the fabric, not a server. Before (both formats):
    a host 'H-<guid>' with one HCA."""
    found = read_ibnetdiscover(str(DATA / "infiniband-exporter-hdr-sharp.ports"))
    assert set(found.hosts) == {"worker20"} and found.hosts["worker20"].keys() == {"mlx5_3"}
    assert [(c.a.host, c.b.switch, c.b.port, c.rate_bps) for c in found.cables] == [("worker20", "5FB0405-leaf-IB01", 79, 200e9)]
    # the same node in the topology format (lines built here in ibnetdiscover's form): left out too
    topo = tmp_path / "sharp.topo"
    topo.write_text('Switch 41 "S-b8599f0300fc6de4" # "MF0;ib-leaf-01:MQM8700/U1" enhanced port 0 lid 13 lmc 0\n'
                    '[1] "H-0c42a10300aa0001"[1](c42a10300aa0001) # "gpu01 mlx5_0" lid 9 4xHDR\n'
                    '[41] "H-b8599f0300fc6dec"[1](b8599f0300fc6dec) # "Mellanox Technologies Aggregation Node" lid 14 4xHDR\n\n'
                    'Ca 1 "H-b8599f0300fc6dec" # "Mellanox Technologies Aggregation Node"\n'
                    '[1](b8599f0300fc6dec) "S-b8599f0300fc6de4"[41] # lid 14 lmc 0 "MF0;ib-leaf-01:MQM8700/U1" lid 13 4xHDR\n')
    found = read_ibnetdiscover(str(topo))
    assert set(found.hosts) == {"gpu01"} and [c.b.port for c in found.cables] == [1]


def test_a_switch_management_port_is_not_a_fabric_cable(tmp_path):
    """A real SONiC leaf's LLDP file: its eth0 (the management port; front-panel ports are EthernetN) faces a
    management switch. Before: that switch became a tier-2 'spine' of the fabric, cabled to the leaf's eth0.
    The host file facing the leaf is built here."""
    host = tmp_path / "gpu-b01.json"
    host.write_text('{"lldp": {"interface": {"ens1f0np0": {"chassis": {"SONIC-Leaf301": {"capability": '
                    '{"type": "Bridge", "enabled": true}}}, "port": {"id": {"type": "ifname", "value": "Ethernet0"}}}}}}')
    found = read_lldp([str(host), str(DATA / "lldp-sonic" / "SONIC-Leaf301.json")])
    assert set(found.switches) == {"SONIC-Leaf301"}
    assert [(c.a.host, c.a.nic, c.b.switch, c.b.port) for c in found.cables] == [("gpu-b01", "ens1f0np0", "SONIC-Leaf301", "Ethernet0")]
    assert any("management" in note and "SONIC-Leaf301 eth0" in note for note in found.notes)
