"""Put the readers together: the cluster document `gpuwait inventory import` writes.

Cabling comes from ibnetdiscover, LLDP or the explicit node/link file (any together); Slurm's
``topology.conf`` is the cabling when none of those is given, and otherwise says which hosts are
the job's (Slurm only lists hosts it schedules on). The server comes from the NCCL topology dumps
when given, else from ``--server-template`` with the NIC count and ports the cabling shows. The
document is checked by building its topology before it is returned, so a file that imports is a
file every command accepts.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field

from gpuwait.errors import SpecError
from gpuwait.inventory.explicit import read_links
from gpuwait.inventory.fabric import Collected, inventory_section, keep_hosts, natural_key
from gpuwait.inventory.ibnetdiscover import read_ibnetdiscover, read_name_map
from gpuwait.inventory.lldp import read_lldp
from gpuwait.inventory.nccl_topo import read_nccl_topo_dir
from gpuwait.inventory.slurm import read_slurm_topology, slurm_hosts


@dataclass
class Sources:
    """The files given to `gpuwait inventory import`."""

    ibnetdiscover: str | None = None
    lldp: list[str] = field(default_factory=list)
    nccl_topo: str | None = None
    slurm: str | None = None
    links: str | None = None
    node_name_map: str | None = None
    hosts: list[str] = field(default_factory=list)  # glob patterns of the hosts to keep
    server_template: str = "dgx-h100"
    name: str = "imported"


@dataclass
class Imported:
    document: dict
    notes: list[str]
    summary: dict


def _collect(src: Sources, nccl_nics: list[str]) -> Collected:
    found = Collected()
    if src.ibnetdiscover:
        name_map = read_name_map(src.node_name_map) if src.node_name_map else None
        read_ibnetdiscover(src.ibnetdiscover, found, name_map)
    if src.lldp:
        read_lldp(src.lldp, found)
    if src.links:
        read_links(src.links, found)
    cabled = bool(found.cables)
    if src.slurm and not cabled:
        read_slurm_topology(src.slurm, found, nics=nccl_nics or None)
    elif src.slurm:
        found = keep_hosts(found, slurm_hosts(src.slurm))
        found.sources.append(src.slurm)
    if not (src.ibnetdiscover or src.lldp or src.links or src.slurm):
        raise SpecError("inventory import: no cabling given; expected --ibnetdiscover, --lldp, --slurm or --links",
                        hint="`gpuwait inventory import --help` lists the formats")
    if src.hosts:
        keep = [h for h in found.hosts if any(fnmatch.fnmatch(h, pattern) for pattern in src.hosts)]
        if not keep:
            raise SpecError(f"--hosts: {', '.join(src.hosts)} matches none of the {len(found.hosts)} hosts "
                            f"(e.g. {', '.join(sorted(found.hosts, key=natural_key)[:3])}); expected a glob such as 'gpu*'")
        found = keep_hosts(found, keep)
    return found


def _server(src: Sources, nccl: dict, nccl_nics: list[str], implied: dict) -> dict:
    if nccl:
        server = dict(nccl)
        if implied["nics"] != server["nics"]:
            raise SpecError(f"{src.nccl_topo}: the NCCL dump lists {server['nics']} NIC(s) ({', '.join(nccl_nics)}) but the "
                            f"cabling shows {implied['nics']} per host; expected the same NICs in both",
                            hint="NCCL lists only the NICs it can use; leave the others out of the cabling (--hosts) or the dump")
    else:
        server = {"template": src.server_template, "nics": implied["nics"]}
    if implied["nic_ports"] > 1:
        server["nic_ports"] = implied["nic_ports"]
    if implied["nic_speed"]:
        server["nic_speed"] = f"{implied['nic_speed'] / 1e9:g}Gbps"
    return server


def import_inventory(src: Sources) -> Imported:
    """Read every source and return the cluster document (a scenario with a ``cluster:`` section)."""
    from gpuwait.spec import ClusterSpec
    from gpuwait.topology import build_topology

    nccl, nccl_nics, nccl_hosts = read_nccl_topo_dir(src.nccl_topo) if src.nccl_topo else ({}, [], {})
    found = _collect(src, nccl_nics)
    section, implied = inventory_section(found, nccl_nics if nccl_nics and nccl_nics[0] != "nic0" else None)
    cluster: dict = {"name": src.name, "servers": len(section["hosts"]),
                     "server": _server(src, nccl, nccl_nics, implied), "fabric": {"kind": "inventory"},
                     "transport": {"name": found.transport or "infiniband"}, "inventory": section}
    if implied["switch_speed"]:
        cluster["fabric"]["switch_speed"] = f"{implied['switch_speed'] / 1e9:g}Gbps"
    if src.nccl_topo:
        section["sources"] = [*section["sources"], src.nccl_topo]
    notes = list(found.notes)
    missing = sorted(set(nccl_hosts) - set(section["hosts"]), key=natural_key)
    if nccl_hosts and len(missing) < len(nccl_hosts) and missing:
        notes.append(f"NCCL dumps of hosts not in the cabling: {', '.join(missing)}")
    spec = ClusterSpec.model_validate(cluster)
    topo = build_topology(spec)
    uncabled = int((topo.nic_uplink[:, :, 0] < 0).sum())
    if uncabled:
        notes.append(f"{uncabled} NIC(s) have no cable in the sources; traffic from their GPUs has no path")
    tiers: dict[int, int] = {}  # tier -> switches in it
    for switch in section["switches"]:
        tiers[switch["tier"]] = tiers.get(switch["tier"], 0) + 1
    summary = {"hosts": len(section["hosts"]), "gpus": topo.n_gpus, "nics_per_host": implied["nics"],
               "switches_by_tier": {["", "leaf", "spine", "core"][t]: n for t, n in sorted(tiers.items())},
               "cables": len(section["cables"]), "server": cluster["server"], "sources": section["sources"]}
    return Imported({"name": src.name, "cluster": cluster}, notes, summary)
