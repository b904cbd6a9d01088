"""Placements exported for the schedulers, read back the way each scheduler's documentation defines
its format: Slurm topology.conf(5) (https://slurm.schedmd.com/topology.conf.html, read back with
gpuwait's own topology.conf reader), Kueue's Topology levels and node labels
(https://kueue.sigs.k8s.io/docs/concepts/topology_aware_scheduling/), Volcano's HyperNode tiers
(https://volcano.sh/en/docs/network_topology_aware_scheduling/)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from gpuwait.cli.main import main
from gpuwait.errors import UnknownNameError
from gpuwait.inventory.slurm import expand_hostlist
from gpuwait.placement import fabric_tree
from gpuwait.placement.export import export_placement, kueue_objects, volcano_objects
from gpuwait.spec import Scenario, load_model
from gpuwait.topology.presets import build_cluster, resolve_cluster

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tree():
    # two pods of four 32-server units (examples/job-across-two-pods.yaml)
    scenario = load_model(Scenario, ROOT / "examples" / "job-across-two-pods.yaml")
    return fabric_tree(build_cluster(resolve_cluster(scenario.cluster)))


def _leaf_sets(tree):
    return sorted(tuple(tree.server_names[s] for s in np.flatnonzero(tree.leaf_of_server == k))
                  for k in range(tree.leaf_of_server.max() + 1))


def test_slurm_topology_conf_lists_every_leaf_pod_and_the_core(tree):
    text = export_placement("slurm", tree, list(range(32)) + list(range(128, 160)), "x")
    switches = {}
    for line in text.splitlines():
        if line.startswith("SwitchName="):
            fields = dict(f.split("=", 1) for f in line.split())
            switches[fields["SwitchName"]] = expand_hostlist(fields.get("Nodes") or fields["Switches"])
    leaves = {k: v for k, v in switches.items() if k.startswith("leaf")}
    assert sorted(tuple(v) for v in leaves.values()) == _leaf_sets(tree)  # one SU of 32 servers each
    assert len(leaves) == 8 and switches["pod1"] == ["leaf4", "leaf5", "leaf6", "leaf7"]
    assert switches["core"] == ["pod0", "pod1"]
    assert "--nodelist=s[0-31,128-159] --switches=2" in text


def test_kueue_topology_levels_node_labels_and_the_jobs_annotation(tree):
    objects = kueue_objects(tree, list(range(32)), "x")
    topology, flavor = objects[0], objects[1]
    assert [lv["nodeLabel"] for lv in topology["spec"]["levels"]] == [
        "cloud.provider.com/topology-block", "cloud.provider.com/topology-rack", "kubernetes.io/hostname"]
    assert flavor["spec"]["topologyName"] == topology["metadata"]["name"]
    nodes = [o for o in objects if o["kind"] == "Node"]
    assert len(nodes) == 256
    racks = {}
    for n in nodes:
        racks.setdefault(n["metadata"]["labels"]["cloud.provider.com/topology-rack"], []).append(n["metadata"]["name"])
    assert sorted(tuple(v) for v in racks.values()) == _leaf_sets(tree)
    annotations = objects[-1]["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {"kueue.x-k8s.io/podset-required-topology": "cloud.provider.com/topology-rack"}
    inside_pod = kueue_objects(tree, list(range(64)), "x", "preferred")[-1]["spec"]["template"]["metadata"]["annotations"]
    assert inside_pod == {"kueue.x-k8s.io/podset-preferred-topology": "cloud.provider.com/topology-block"}
    across = kueue_objects(tree, list(range(32)) + [128], "x")[-1]["spec"]["template"]["metadata"]["annotations"]
    assert across == {"kueue.x-k8s.io/podset-unconstrained-topology": "true"}


def test_volcano_hypernodes_by_tier_and_the_jobs_network_topology(tree):
    objects = volcano_objects(tree, list(range(64)), "x")
    hyper = [o for o in objects if o["kind"] == "HyperNode"]
    tier1 = {o["metadata"]["name"]: [m["selector"]["exactMatch"]["name"] for m in o["spec"]["members"]]
             for o in hyper if o["spec"]["tier"] == 1}
    tier2 = [o for o in hyper if o["spec"]["tier"] == 2]
    assert sorted(tuple(v) for v in tier1.values()) == _leaf_sets(tree)
    assert len(tier2) == 2 and all(m["type"] == "HyperNode" for o in tier2 for m in o["spec"]["members"])
    assert objects[-1]["spec"]["networkTopology"] == {"mode": "hard", "highestTierAllowed": 2}
    assert volcano_objects(tree, [0, 1], "x", "soft")[-1]["spec"]["networkTopology"] == {"mode": "soft"}
    with pytest.raises(UnknownNameError, match="expected one of slurm, kueue, volcano"):
        export_placement("lsf", tree, [0])


def test_place_export_prints_yaml_a_scheduler_reads(capsys):
    example = str(ROOT / "examples" / "two-jobs-shared-uplinks.yaml")
    assert main(["place", example, "--job", "a", "--policy", "volcano", "--export", "volcano"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert docs[-1]["kind"] == "Job" and docs[-1]["spec"]["minAvailable"] == 8
    assert main(["place", example, "--policy", "first-fit", "--export", "slurm"]) == 0
    assert "SwitchName=leaf0 Nodes=s[0-3]" in capsys.readouterr().out
    assert main(["place", example, "--export", "pbs"]) == 2
    assert capsys.readouterr().err.startswith("error: --export: got 'pbs'")
