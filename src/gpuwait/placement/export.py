"""A fabric's switch tree and a job's placement in the formats the schedulers read.

- **Slurm** (``topology/tree``; topology.conf(5), https://slurm.schedmd.com/topology.conf.html):
  one ``SwitchName=... Nodes=<hostlist>`` line per leaf domain, one ``SwitchName=...
  Switches=<leaves>`` per pod, and a top switch over the pods when there are several; the job as the
  ``sbatch`` options that pin it (``--nodelist=<hostlist>``, ``--switches=<leaf domains it spans>``).
- **Kueue** topology-aware scheduling (https://kueue.sigs.k8s.io/docs/concepts/topology_aware_scheduling/):
  a ``Topology`` object (``kueue.x-k8s.io/v1alpha1``) whose ``spec.levels`` are node labels from the
  widest level to ``kubernetes.io/hostname``, a ``ResourceFlavor`` naming it (``spec.topologyName``),
  the nodes' labels (``Node`` objects carrying only ``metadata.labels``, for ``kubectl apply``
  or ``kubectl label``), and the job (a ``batch/v1`` Job in a LocalQueue ``user-queue``) whose pod
  template carries ``kueue.x-k8s.io/podset-required-topology`` (or ``-preferred-``) at the narrowest
  level that holds its placement (``podset-unconstrained-topology`` when none does).
- **Volcano** network-topology-aware scheduling (https://volcano.sh/en/docs/network_topology_aware_scheduling/):
  ``HyperNode`` objects (``topology.volcano.sh/v1alpha1``): tier 1 one per leaf domain whose members
  are ``Node`` s (``selector.exactMatch.name``), tier 2 one per pod whose members are the tier-1
  HyperNodes; the job's ``spec.networkTopology`` (``mode: hard``, ``highestTierAllowed`` the tier
  that holds its placement).

Level names: a leaf domain is Kueue's *rack* and Volcano's tier 1, a pod Kueue's *block* and tier 2
(:mod:`gpuwait.placement.tree`). The label keys are the examples Kueue's documentation uses
(``cloud.provider.com/topology-block``, ``cloud.provider.com/topology-rack``); pass others for a real
cluster.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import yaml

from gpuwait.errors import UnknownNameError
from gpuwait.placement.tree import FabricTree, hostlist

FORMATS = ("slurm", "kueue", "volcano")
KUEUE_BLOCK_LABEL = "cloud.provider.com/topology-block"
KUEUE_RACK_LABEL = "cloud.provider.com/topology-rack"
HOSTNAME_LABEL = "kubernetes.io/hostname"


def _members(tree: FabricTree, level: np.ndarray, index: int) -> list[str]:
    return [tree.server_names[s] for s in np.flatnonzero(level == index)]


def _narrowest(tree: FabricTree, servers: np.ndarray) -> str:
    """'leaf', 'pod' or 'cluster': the narrowest level one domain of which holds all ``servers``."""
    leaves, pods = tree.spans(servers)
    return "leaf" if leaves == 1 else "pod" if pods == 1 else "cluster"


def slurm_topology(tree: FabricTree, servers: Sequence[int] | np.ndarray, job: str = "job") -> str:
    """topology.conf lines for the fabric and the sbatch options of the job's placement."""
    server_ids = np.asarray(servers, np.int64)
    lines = ["# topology.conf (TopologyPlugin=topology/tree), written by gpuwait"]
    n_leaves, n_pods = int(tree.leaf_of_server.max()) + 1, int(tree.pod_of_server.max()) + 1
    for leaf in range(n_leaves):
        lines.append(f"SwitchName=leaf{leaf} Nodes={hostlist(_members(tree, tree.leaf_of_server, leaf))}")
    for pod in range(n_pods):
        leaves = sorted(set(tree.leaf_of_server[tree.pod_of_server == pod].tolist()))
        lines.append(f"SwitchName=pod{pod} Switches={hostlist([f'leaf{k}' for k in leaves])}")
    if n_pods > 1:
        lines.append(f"SwitchName=core Switches={hostlist([f'pod{k}' for k in range(n_pods)])}")
    n_job_leaves, _ = tree.spans(server_ids)
    lines += ["", f"# {job}: sbatch options that pin its placement",
              f"#SBATCH --nodes={len(server_ids)} --nodelist={hostlist([tree.server_names[s] for s in server_ids])} "
              f"--switches={n_job_leaves}"]
    return "\n".join(lines) + "\n"


def kueue_objects(tree: FabricTree, servers: Sequence[int] | np.ndarray, job: str = "job", mode: str = "required",
                  block_label: str = KUEUE_BLOCK_LABEL, rack_label: str = KUEUE_RACK_LABEL) -> list[dict]:
    """Kueue's Topology and ResourceFlavor, the nodes' labels and the job's pod-set annotation."""
    server_ids = np.asarray(servers, np.int64)
    objects: list[dict] = [
        {"apiVersion": "kueue.x-k8s.io/v1alpha1", "kind": "Topology", "metadata": {"name": "gpuwait"},
         "spec": {"levels": [{"nodeLabel": block_label}, {"nodeLabel": rack_label}, {"nodeLabel": HOSTNAME_LABEL}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor", "metadata": {"name": "gpuwait"},
         "spec": {"nodeLabels": {}, "topologyName": "gpuwait"}},
    ]
    for s, name in enumerate(tree.server_names):
        objects.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
            block_label: f"pod{int(tree.pod_of_server[s])}", rack_label: f"leaf{int(tree.leaf_of_server[s])}",
            HOSTNAME_LABEL: name}}})
    level = _narrowest(tree, server_ids)
    if mode == "unconstrained":
        annotations = {"kueue.x-k8s.io/podset-unconstrained-topology": "true"}
    else:
        # a job across pods fits no single domain of the Topology: it can only be unconstrained
        label = {"leaf": rack_label, "pod": block_label}.get(level)
        annotations = ({f"kueue.x-k8s.io/podset-{mode}-topology": label} if label is not None
                       else {"kueue.x-k8s.io/podset-unconstrained-topology": "true"})
    objects.append({"apiVersion": "batch/v1", "kind": "Job",
                    "metadata": {"name": job, "labels": {"kueue.x-k8s.io/queue-name": "user-queue"}},
                    "spec": {"parallelism": len(server_ids), "completions": len(server_ids), "completionMode": "Indexed",
                             "template": {"metadata": {"annotations": annotations}}}})
    return objects


def volcano_objects(tree: FabricTree, servers: Sequence[int] | np.ndarray, job: str = "job", mode: str = "hard") -> list[dict]:
    """Volcano's HyperNodes (tier 1 per leaf domain, tier 2 per pod) and the job's networkTopology."""
    server_ids = np.asarray(servers, np.int64)
    objects: list[dict] = []
    n_leaves, n_pods = int(tree.leaf_of_server.max()) + 1, int(tree.pod_of_server.max()) + 1
    for leaf in range(n_leaves):
        objects.append({"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode", "metadata": {"name": f"leaf{leaf}"},
                        "spec": {"tier": 1, "members": [{"type": "Node", "selector": {"exactMatch": {"name": n}}}
                                                        for n in _members(tree, tree.leaf_of_server, leaf)]}})
    for pod in range(n_pods):
        leaves = sorted(set(tree.leaf_of_server[tree.pod_of_server == pod].tolist()))
        objects.append({"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode", "metadata": {"name": f"pod{pod}"},
                        "spec": {"tier": 2, "members": [{"type": "HyperNode", "selector": {"exactMatch": {"name": f"leaf{k}"}}}
                                                        for k in leaves]}})
    topology: dict = {"mode": mode}
    tier = {"leaf": 1, "pod": 2}.get(_narrowest(tree, server_ids))
    if mode == "hard":
        # a job across pods has no HyperNode above tier 2 here: allow tier 3 (the whole cluster)
        topology["highestTierAllowed"] = tier if tier is not None else 3
    objects.append({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": job},
                    "spec": {"minAvailable": len(server_ids), "schedulerName": "volcano", "networkTopology": topology}})
    return objects


def check_export_format(fmt: str) -> None:
    """Refuse a ``fmt`` not in :data:`FORMATS` with one line naming them (callers check before
    building a fabric: a typo costs nothing)."""
    if fmt not in FORMATS:
        raise UnknownNameError(f"--export: got {fmt!r}; expected one of {', '.join(FORMATS)}")


def export_placement(fmt: str, tree: FabricTree, servers: Sequence[int] | np.ndarray, job: str = "job",
                     mode: str | None = None) -> str:
    """The fabric and the job's placement as text in ``fmt`` (slurm, kueue or volcano)."""
    check_export_format(fmt)
    if fmt == "slurm":
        return slurm_topology(tree, servers, job)
    if fmt == "kueue":
        return yaml.safe_dump_all(kueue_objects(tree, servers, job, mode or "required"), sort_keys=False)
    return yaml.safe_dump_all(volcano_objects(tree, servers, job, mode or "hard"), sort_keys=False)
