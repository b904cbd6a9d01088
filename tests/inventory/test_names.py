"""An imported cluster keeps its real names everywhere gpuwait takes or prints a name."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from gpuwait.cli.main import main
from gpuwait.errors import TopologyError, UnknownNameError
from gpuwait.faults.targets import server_index
from gpuwait.inventory import Sources, import_inventory
from gpuwait.runner.inputs import load_cluster
from gpuwait.spec import ClusterSpec
from gpuwait.topology import build_topology

DATA = Path(__file__).resolve().parents[1] / "data" / "inventory"


@pytest.fixture(scope="module")
def x5():
    """Part of the X5 cluster (sl390lin101-124 and r815lin104-114), as H100 servers with one HCA each."""
    result = import_inventory(Sources(ibnetdiscover=str(DATA / "x5.ibnetdiscover"), node_name_map=str(DATA / "x5.map"),
                                      hosts=["sl390lin1??", "r815lin1*"], name="x5"))
    return result, build_topology(ClusterSpec.model_validate(result.document["cluster"]))


def test_real_names_are_node_names(x5):
    result, topo = x5
    assert result.summary["hosts"] == 33
    assert topo.node_name[topo.node_id("sl390lin101.gpu0")] == "sl390lin101.gpu0"
    assert topo.node_id("s0.gpu0") == topo.node_id("r815lin104.gpu0")  # gpuwait's own names stay aliases
    assert topo.kind_of(topo.node_id("sl390lin101.hca")) == "nic"
    leaf = topo.node_id("hoibp0013")
    assert topo.node_tier[leaf] == 1 and topo.node_id("0x0008f105002036b4") == leaf  # its GUID
    assert topo.node_id("lid10") == leaf  # its LID (ibnetdiscover: "enhanced port 0 lid 10")


def test_switch_ports_name_their_links(x5):
    _, topo = x5
    # X5.topofile: hoibp0013 port 19 is cabled to 4036-8C5C port 4
    out, back = topo.link_id("hoibp0013[19]"), topo.link_id("4036-8C5C[4]")
    assert topo.node_name[topo.link_src[out]] == "hoibp0013" and topo.node_name[topo.link_dst[out]] == "4036-8C5C"
    assert (topo.link_src[back], topo.link_dst[back]) == (topo.link_dst[out], topo.link_src[out])
    # the three cables between the two switches are three links, A->B, A->B#1, A->B#2
    names = {topo.link_name(topo.link_id(f"hoibp0013[{p}]")) for p in (1, 19, 20)}
    assert names == {"hoibp0013->4036-8C5C", "hoibp0013->4036-8C5C#1", "hoibp0013->4036-8C5C#2"}
    assert topo.link_capacity_Bps[out] == pytest.approx(32e9 / 8)  # 4xQDR


def test_unknown_names_list_near_matches(x5):
    _, topo = x5
    with pytest.raises(UnknownNameError, match=r"node 'sl390lin1O1.gpu0' does not exist in x5 \(close: sl390lin1\d\d.gpu0"):
        topo.node_id("sl390lin1O1.gpu0")
    with pytest.raises(UnknownNameError, match=r"close: hoibp0013\[19\]"):
        topo.link_id("hoibp013[19]")


def test_fault_targets_take_host_names(x5):
    _, topo = x5
    i = topo.spec.inventory.hosts.index("sl390lin105")  # hosts in natural order: r815lin104.. first
    assert server_index(topo, "sl390lin105") == topo.server_id(f"s{i}") == i == 13
    assert topo.server_name(i) == "sl390lin105"
    assert server_index(topo, "sl390lin105.gpu3") == i


def test_cable_to_an_unknown_switch_is_refused():
    spec = ClusterSpec.model_validate({
        "servers": 1, "server": {"template": "dgx-h100", "nics": 1}, "fabric": {"kind": "inventory"},
        "inventory": {"hosts": ["n1"], "nics": ["mlx5_0"], "switches": [{"name": "leaf1", "tier": 1}],
                      "cables": [{"a": "n1.mlx5_0", "b": "leaf-1"}]}})
    with pytest.raises(TopologyError, match=r"inventory.cables\[0\].b: 'leaf-1' is neither a host NIC \(HOST.NIC\) nor a listed switch \(close: leaf1\)"):
        build_topology(spec)


def test_cli_import_then_every_command_reads_the_file(tmp_path, capsys):
    out = tmp_path / "cluster.yaml"
    assert main(["inventory", "import", "--links", str(DATA / "links.yaml"), "--nccl-topo",
                 str(DATA / "nccl-topo-h200"), "--out", str(out)]) == 2  # the H200 dump has 3 NICs, the links 2
    assert "host node01 has 2 NIC(s) (mlx5_0, mlx5_1); expected 3 as the NCCL topology dump lists them" in capsys.readouterr().err
    assert main(["inventory", "import", "--links", str(DATA / "links.yaml"), "--name", "two-hosts", "--out", str(out)]) == 0
    assert "2 hosts (16 GPUs, 2 NIC(s) each)" in capsys.readouterr().out
    assert main(["validate", str(out)]) == 0
    capsys.readouterr()
    assert main(["route", str(out), "--src", "node01.gpu0", "--dst", "node02.gpu7", "--json"]) == 0
    hops = [h["link"] for qp in json.loads(capsys.readouterr().out)["qps"] for h in qp["hops"]]
    assert hops[2:6] == ["node01.mlx5_0->leaf1", "leaf1->spine1", "spine1->leaf2#1", "leaf2->node02.mlx5_1"]
    spec = load_cluster(str(out))
    assert spec.inventory.hosts == ["node01", "node02"] and spec.fabric.kind == "inventory"


def test_diagnose_names_the_real_link(tmp_path, capsys):
    result = import_inventory(Sources(links=str(DATA / "links.yaml"), name="two-hosts"))
    scenario = result.document | {"workload": {
        "model": {"preset": "llama-8b", "seq_len": 4096}, "parallel": {"tp": 8, "pp": 1, "zero": 1, "micro_batch": 1, "global_batch": 16},
        "compute": {"gpu": "H100-SXM", "efficiency": 0.5}, "steps": 1}}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(scenario))
    assert main(["diagnose", str(path), "--inject", "nic-down:node02.mlx5_0", "--json"]) in (0, 1)
    doc = json.loads(capsys.readouterr().out)
    top = doc["findings"][0] if "findings" in doc else doc["runs"][0]["findings"][0]
    assert top["component"].startswith("node02")


def test_clusters_without_an_inventory_keep_their_names():
    spec = ClusterSpec(servers=2, server={"template": "dgx-h100"})
    topo = build_topology(spec)
    assert topo.node_name[0] == "s0.gpu0" and topo.server_name(1) == "s1" and not topo.node_alias
    assert np.all(topo.nic_uplink >= 0)


@pytest.mark.parametrize("target", ["sl390lin101", "s0", "no-such-node"])
def test_an_alias_that_names_no_node_is_refused(x5, target):
    """An alias of a host, a server or nothing used to be dropped without a word and fail later as
    "does not exist" (found by the settings audit, issue 20)."""
    from gpuwait.errors import SpecError

    document = json.loads(json.dumps(x5[0].document["cluster"]))
    document["inventory"]["aliases"] = {"other-name": target}
    with pytest.raises(SpecError, match=r"inventory\.aliases: 'other-name' -> .*expected the name of a switch, GPU or NIC"):
        build_topology(ClusterSpec.model_validate(document))
    document["inventory"]["aliases"] = {"other-name": "sl390lin101.gpu0"}
    topo = build_topology(ClusterSpec.model_validate(document))
    assert topo.node_id("other-name") == topo.node_id("sl390lin101.gpu0")
