"""What a fault can target, and the parts of a topology a target names.

A kind declares the sort of target it takes (``link``, ``gpu``, ``nic``, ``server-or-all``, ``all``);
:func:`check_target` checks a fault's target against a topology before anything is simulated, with
one clear error naming the target and what was expected (close matches come from the topology's
name index).
"""

from __future__ import annotations

import numpy as np

from gpuwait.errors import SpecError, UnknownNameError
from gpuwait.topology.model import LinkKind, Network, NodeKind, Topology

TARGET_SORTS = ("link", "gpu", "nic", "server-or-all", "storage-or-all", "all")


def node_of_kind(topo: Topology, name: str, kind: str) -> int:
    """The node ``name``, which must be a ``kind`` ("gpu", "nic")."""
    node = topo.node_id(name)
    if topo.kind_of(node) != kind:
        raise SpecError(f"fault target {name!r} is a {topo.kind_of(node)}; expected a {kind} (e.g. "
                        f"{topo.node_name[topo.gpu_node[0, 0]] if kind == 'gpu' else topo.node_name[topo.nic_node[0, 0]]})")
    return node


def server_index(topo: Topology, name: str) -> int:
    """The server ``name`` (a host name, ``s3``) or the server of the node ``name``."""
    return topo.server_id(name)


def cable_links(topo: Topology, name: str) -> list[int]:
    """A link and its reverse: a cable fails both ways."""
    link = topo.link_id(name)
    back = topo.reverse_link(link)
    return [link] + ([back] if back is not None else [])


def links_of(topo: Topology, node: int) -> np.ndarray:
    """Every link into or out of ``node``."""
    return np.flatnonzero((topo.link_src == node) | (topo.link_dst == node))


def host_links(topo: Topology, nic: int) -> np.ndarray:
    """The PCIe links between a NIC and its switch (the host side of the NIC)."""
    links = links_of(topo, nic)
    return links[topo.link_kind[links] == LinkKind.PCIE]


def fabric_links(topo: Topology) -> np.ndarray:
    """Switch-to-switch links of the compute fabric."""
    switch = topo.node_kind == NodeKind.SWITCH
    return np.flatnonzero(switch[topo.link_src] & switch[topo.link_dst] & (topo.link_network == Network.COMPUTE))


def check_target(topo: Topology, kind: str, sort: str, target: str, *, all_allowed: bool = False) -> None:
    """Raise a clear error unless ``target`` names a ``sort`` of thing in ``topo`` (for fault ``kind``).

    ``all_allowed``: a link kind that also takes ``all`` (every switch-to-switch link)."""
    try:
        _check_target(topo, kind, sort, target, all_allowed)
    except UnknownNameError as err:
        # the topology's lookup names the link or node but not that a fault's target asked for it:
        # a scenario can name links and nodes in several places (faults, flows, jobs)
        raise UnknownNameError(f"fault {kind}: target: {err}", hint=err.hint) from None


def _check_target(topo: Topology, kind: str, sort: str, target: str, all_allowed: bool) -> None:
    if sort == "link" and target != "all":
        topo.link_id(target)
    elif sort == "link" and not all_allowed:
        example = fabric_links(topo)
        raise SpecError(f"fault {kind}: target 'all' is not allowed; expected a link name such as "
                        f"{topo.link_name(int(example[0])) if len(example) else 's0.nic0->leaf0'}")
    elif sort in ("gpu", "nic"):
        node_of_kind(topo, target, sort)
    elif sort == "server-or-all" and target != "all":
        server_index(topo, target)
    elif sort == "storage-or-all" and target != "all":
        node_of_kind(topo, target, "storage_server")
    elif sort == "all" and target != "all":
        # a kind that acts on the whole job or fabric would silently apply everywhere (issue 20)
        raise SpecError(f"fault {kind}: target {target!r} is not used; this kind acts on the whole job or fabric, "
                        f"so expected no target (or 'all')")
