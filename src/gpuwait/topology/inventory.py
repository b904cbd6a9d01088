"""The compute fabric of ``cluster.inventory``: real switches and cables, and real names on every node.

:func:`build_inventory_fabric` adds the listed switches and cables to the node and link tables (in
place of a generated Clos); :func:`with_real_names` then renames the servers' nodes after their host
(``s3.gpu0`` -> ``node004.gpu0``, ``s3.nic1`` -> ``node004.mlx5_1``) and records every other name a
node or link answers to: gpuwait's own names, GUIDs and ``lidN`` from the inventory, and a switch port
``SWITCH[PORT]`` (ibnetdiscover's notation) for the link leaving that port.

Pitfall: cables are oriented lower tier -> upper tier (host -> leaf -> spine) before they are added, so
the k-th cable between the same two switches is the link ``A->B#k`` whatever end the source listed first.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from gpuwait.errors import SpecError, TopologyError
from gpuwait.spec.cluster import ClusterSpec, ServerSpec
from gpuwait.spec.inventory import InventoryCable, InventorySpec


def nic_names(inventory: InventorySpec, server: ServerSpec) -> list[str]:
    """The device name of each compute NIC (``inventory.nics``, default ``nic0``...), checked against ``server.nics``."""
    names = list(inventory.nics) or [f"nic{k}" for k in range(server.nics)]
    if len(names) != server.nics:
        raise TopologyError(f"inventory.nics: got {len(names)} names ({', '.join(names)}); expected server.nics = {server.nics}")
    return names


def real_names(inventory: InventorySpec, server: ServerSpec) -> dict[str, str]:
    """gpuwait's name of every host node -> its real name: ``s{i}.`` becomes ``HOST.``, ``nicK`` the NIC's device."""
    out = {}
    nics = nic_names(inventory, server)
    for i, host in enumerate(inventory.hosts):
        out[f"s{i}"] = host
        for k, nic in enumerate(nics):
            out[f"s{i}.nic{k}"] = f"{host}.{nic}"
    return out


def _check_hosts(spec: ClusterSpec, inventory: InventorySpec) -> None:
    if len(inventory.hosts) != spec.servers:
        raise TopologyError(f"inventory.hosts: got {len(inventory.hosts)} hosts; expected cluster.servers = {spec.servers}",
                            hint="set servers to the number of hosts the inventory lists")
    seen: set[str] = set()
    for name in [*inventory.hosts, *(s.name for s in inventory.switches)]:
        if name in seen:
            raise TopologyError(f"inventory: the name {name!r} is listed twice; expected every host and switch name once")
        seen.add(name)


def _endpoint(name: str, index: dict[str, int], field: str) -> int:
    try:
        return index[name]
    except KeyError:
        import difflib

        near = difflib.get_close_matches(name, list(index), n=3, cutoff=0.6)
        raise TopologyError(f"inventory.{field}: {name!r} is neither a host NIC (HOST.NIC) nor a listed switch"
                            + (f" (close: {', '.join(near)})" if near else "")) from None


def oriented_cables(inventory: InventorySpec) -> list[InventoryCable]:
    """The cables with end a at the lower tier (a host NIC, tier 0) and end b at the higher (ties: by name)."""
    tier = {s.name: s.tier for s in inventory.switches}
    out = []
    for cable in inventory.cables:
        ka, kb = (tier.get(cable.a, 0), cable.a), (tier.get(cable.b, 0), cable.b)
        if ka > kb:
            cable = cable.model_copy(update={"a": cable.b, "b": cable.a, "a_port": cable.b_port, "b_port": cable.a_port})
        out.append(cable)
    return out


def build_inventory_fabric(t, spec: ClusterSpec, server: ServerSpec, nodes: dict) -> np.ndarray:
    """Add the inventory's switches and cables to the tables ``t``; returns the leaf of each (server, nic, port), -1 if uncabled."""
    inventory = spec.inventory
    if inventory is None:
        raise TopologyError("fabric.kind: inventory needs a cluster.inventory section; expected hosts, switches and cables",
                            hint="`gpuwait inventory import` writes one")
    _check_hosts(spec, inventory)
    nic_leaf = np.full((spec.servers, server.nics, server.nic_ports), -1, np.int64)
    index: dict[str, int] = {}
    nics = nic_names(inventory, server)
    for i, host in enumerate(inventory.hosts):
        for k, nic in enumerate(nics):
            index[f"{host}.{nic}"] = int(nodes["nic"][i, k])
    for tier in (1, 2, 3):
        names = [s.name for s in inventory.switches if s.tier == tier]
        ids = t.add_nodes(names, "switch", tier=tier, plane=0, network="compute") if names else []
        index.update(zip(names, (int(i) for i in ids), strict=True))
    fabric = spec.fabric
    latency_to_switch_s = fabric.cable_latency + fabric.switch_latency
    switch_Bps = fabric.switch_speed or server.nic_speed
    nic_local = {int(nodes["nic"][i, k]): (i, k) for i in range(spec.servers) for k in range(server.nics)}
    ports_used: dict[int, int] = {}
    host_cables: list[tuple] = []
    switch_cables: list[tuple] = []
    for j, cable in enumerate(inventory.cables):  # name the field as the file has it, before orienting
        _endpoint(cable.a, index, f"cables[{j}].a")
        _endpoint(cable.b, index, f"cables[{j}].b")
    for cable in oriented_cables(inventory):
        a, b = index[cable.a], index[cable.b]
        if a in nic_local:
            i, k = nic_local[a]
            port = ports_used.get(a, 0)
            if port >= server.nic_ports:
                raise TopologyError(f"inventory.cables: {cable.a} has more cables than server.nic_ports ({server.nic_ports})")
            ports_used[a] = port + 1
            nic_leaf[i, k, port] = b
            host_cables.append((a, b, cable.speed or server.nic_speed))
        else:
            switch_cables.append((a, b, cable.speed or switch_Bps))
    for cables, kind, host_latency_s in ((host_cables, "host", fabric.cable_latency), (switch_cables, "fabric", latency_to_switch_s)):
        if cables:
            ends_a, ends_b, rate = (np.array(col) for col in zip(*cables, strict=True))
            t.add_cables(ends_a, ends_b, rate.astype(float), latency_to_switch_s, host_latency_s, kind, "compute", 0)
    return nic_leaf


def with_real_names(topo):
    """``topo`` with its hosts' nodes under real names and every alias of nodes and switch ports recorded."""
    inventory = topo.spec.inventory
    if inventory is None:
        return topo
    canonical = topo.node_name.tolist()
    mapping = real_names(inventory, topo.spec.server)
    renamed = []
    for name in canonical:
        head, dot, tail = name.partition(".")
        if name in mapping:
            renamed.append(mapping[name])
        elif dot and head in mapping:
            renamed.append(f"{mapping[head]}.{tail}")
        else:
            renamed.append(name)
    position = {name: i for i, name in enumerate(renamed)}
    alias = {old: i for i, old in enumerate(canonical) if old != renamed[i]}
    for switch in inventory.switches:
        if switch.guid:
            alias[switch.guid] = position[switch.name]
        if switch.lid is not None:
            alias[f"lid{switch.lid}"] = position[switch.name]
    for other, name in inventory.aliases.items():
        if name not in position:  # a host is not one node, and a dropped alias would fail later as "does not exist"
            raise SpecError(f"inventory.aliases: {other!r} -> {name!r}; expected the name of a switch, GPU or NIC "
                            "of the inventory", hint="a host's GPUs and NICs can be aliased one by one "
                            "(e.g. 'slurm-n1.gpu0: n1.gpu0')")
        alias[other] = position[name]
    alias = {k: v for k, v in alias.items() if v >= 0 and k not in position}
    out = dataclasses.replace(topo, node_name=np.array(renamed, dtype=object), node_alias=alias)
    return dataclasses.replace(out, link_alias=_port_aliases(out, inventory))


def _port_aliases(topo, inventory: InventorySpec) -> dict[str, int]:
    """``SWITCH[PORT]`` -> the link leaving that switch port (and ``HOST.NIC[PORT]`` for HCA ports)."""
    aliases: dict[str, int] = {}
    parallel: dict[tuple[str, str], int] = {}
    for cable in oriented_cables(inventory):
        k = parallel.get((cable.a, cable.b), 0)
        parallel[(cable.a, cable.b)] = k + 1
        suffix = f"#{k}" if k else ""
        for end, port, src, dst in ((cable.a, cable.a_port, cable.a, cable.b), (cable.b, cable.b_port, cable.b, cable.a)):
            if port is None:
                continue
            try:
                aliases[f"{end}[{port}]"] = topo.link_id(f"{src}->{dst}{suffix}")
            except KeyError:
                continue
    return aliases
