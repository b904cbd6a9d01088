"""What the readers collect, and how it becomes a cluster file.

Every reader (ibnetdiscover, LLDP, Slurm, the explicit node/link file) fills one :class:`Collected`:
hosts with their NIC devices, switches, and cables with the file and line they came from. The
cluster file is then written from it: hosts in name order (natural: ``node2`` before ``node10``),
switch tiers inferred from the cabling (a switch cabled to a host is a leaf, tier 1; every other
switch takes one more than its nearest leaf), the server's NIC count and ports from the hosts.
"""

from __future__ import annotations

import re
from collections import Counter, deque
from dataclasses import dataclass, field

from gpuwait.errors import SpecError


@dataclass(frozen=True)
class Where:
    """A place in an input file, printed ``FILE:LINE``."""

    file: str
    line: int = 0

    def __str__(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file


@dataclass
class End:
    """One end of a cable: a host NIC (``host``, ``nic``) or a switch (``switch``), with its port."""

    host: str | None = None
    nic: str | None = None
    switch: str | None = None
    port: int | str | None = None

    @property
    def name(self) -> str:
        return f"{self.host}.{self.nic}" if self.host is not None else str(self.switch)

    @property
    def key(self) -> tuple:
        return (self.name, str(self.port))


@dataclass
class Cable:
    a: End
    b: End
    rate_bps: float | None  # bits per second, data rate per direction
    where: Where


@dataclass
class Collected:
    """Hosts, switches and cables read so far (readers add; :func:`cluster_document` writes)."""

    hosts: dict[str, dict[str, Where]] = field(default_factory=dict)  # host -> NIC device -> where first seen
    switches: dict[str, Where] = field(default_factory=dict)
    switch_tier: dict[str, int] = field(default_factory=dict)  # given by a source (Slurm level, explicit file)
    guid: dict[str, str] = field(default_factory=dict)  # node name (switch or HOST.NIC) -> GUID
    lid: dict[str, int] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)
    cables: list[Cable] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    transport: str | None = None
    notes: list[str] = field(default_factory=list)
    seen: set = field(default_factory=set, repr=False)  # cables already added, by their two (end, port) keys

    def add_host_nic(self, host: str, nic: str, where: Where) -> None:
        self.hosts.setdefault(host, {}).setdefault(nic, where)

    def add_switch(self, name: str, where: Where) -> None:
        self.switches.setdefault(name, where)

    def add_cable(self, a: End, b: End, rate_bps: float | None, where: Where) -> None:
        """Add a cable once: a source listing it from both ends (ibnetdiscover does) adds it once."""
        for end in (a, b):
            if end.host is not None:
                self.add_host_nic(end.host, end.nic or "nic0", where)
            else:
                self.add_switch(str(end.switch), where)
        key = frozenset((a.key, b.key))
        if key in self.seen:
            return
        self.seen.add(key)
        self.cables.append(Cable(a, b, rate_bps, where))


def natural_key(name: str) -> tuple:
    """Sort ``node2`` before ``node10``."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


def keep_hosts(found: Collected, hosts: list[str] | None) -> Collected:
    """Only the hosts named in ``hosts`` (when given) stay servers; cables of the others are dropped."""
    if not hosts:
        return found
    wanted = set(hosts)
    # a leaf stays a leaf when its hosts are not the job's: tiers come from the whole cabling
    found.switch_tier = infer_tiers(found) | found.switch_tier
    missing = sorted(wanted - set(found.hosts), key=natural_key)
    if missing:
        found.notes.append(f"{len(missing)} host(s) listed for the job are not in the cabling: {', '.join(missing[:8])}"
                           + (" ..." if len(missing) > 8 else ""))
    found.hosts = {h: nics for h, nics in found.hosts.items() if h in wanted}
    found.cables = [c for c in found.cables if all(e.host is None or e.host in wanted for e in (c.a, c.b))]
    return found


def infer_tiers(found: Collected) -> dict[str, int]:
    """Tier of every switch reachable from a host: leaves (cabled to a host) 1, then one more per switch hop."""
    tier: dict[str, int] = {}
    neighbours: dict[str, set[str]] = {}
    for cable in found.cables:
        ends = (cable.a, cable.b)
        switches = [e.name for e in ends if e.host is None]  # a switch end's name, as add_cable lists it
        if len(switches) == 1:
            tier[switches[0]] = 1
        elif len(switches) == 2:
            neighbours.setdefault(switches[0], set()).add(switches[1])
            neighbours.setdefault(switches[1], set()).add(switches[0])
    queue = deque(tier)
    while queue:
        name = queue.popleft()
        for other in sorted(neighbours.get(name, ())):
            if other not in tier:
                tier[other] = tier[name] + 1
                queue.append(other)
    for name, given in found.switch_tier.items():
        if name in tier:
            tier[name] = given
    deep = {n: t for n, t in tier.items() if t > 3}
    if deep:
        name = min(deep, key=natural_key)
        raise SpecError(f"{found.switches[name]}: switch {name} is {deep[name] - 1} switch hops above the nearest host; "
                        "expected at most 3 tiers (leaf, spine, core)")
    return tier


def host_nics(found: Collected, nic_names: list[str] | None) -> list[str]:
    """The NIC device names every host carries, in NIC index order; one error naming a host that differs."""
    counts = Counter(tuple(sorted(nics, key=natural_key)) for nics in found.hosts.values())
    common = tuple(nic_names) if nic_names else counts.most_common(1)[0][0]
    told = " as the NCCL topology dump lists them" if nic_names else " like the other hosts"
    for host, nics in sorted(found.hosts.items(), key=lambda kv: natural_key(kv[0])):
        if len(nics) != len(common):
            first = next(iter(nics.values()))
            raise SpecError(f"{first}: host {host} has {len(nics)} NIC(s) ({', '.join(sorted(nics))}); expected "
                            f"{len(common)}{told} ({', '.join(common)})",
                            hint="leave hosts out with --hosts (or --slurm); NCCL lists only the NICs it can use")
    return list(common)


def _rename_nics(found: Collected, nics: list[str]) -> dict[str, str]:
    """A host whose NIC devices are named otherwise (HCA-1 vs mlx5_0) keeps them as aliases, matched by order."""
    rename: dict[str, str] = {}
    for host, own in found.hosts.items():
        ordered = sorted(own, key=natural_key)
        if ordered == sorted(nics, key=natural_key):
            continue
        for theirs, ours in zip(ordered, nics, strict=False):
            rename[f"{host}.{theirs}"] = f"{host}.{ours}"
    return rename


def _cable_entry(cable: Cable, rename: dict[str, str]) -> dict:
    entry: dict = {"a": rename.get(cable.a.name, cable.a.name), "b": rename.get(cable.b.name, cable.b.name)}
    if cable.a.port is not None:
        entry["a_port"] = cable.a.port
    if cable.b.port is not None:
        entry["b_port"] = cable.b.port
    if cable.rate_bps:
        entry["speed"] = _gbps(cable.rate_bps)
    return entry


def _gbps(rate_bps: float) -> str:
    return f"{rate_bps / 1e9:g}Gbps"


def _median(values: list[float]) -> float | None:
    values = sorted(v for v in values if v)
    return values[len(values) // 2] if values else None


def inventory_section(found: Collected, nic_names: list[str] | None = None) -> tuple[dict, dict]:
    """The ``inventory:`` section and the server/fabric fields the cabling implies (nics, nic_ports, speeds)."""
    if not found.hosts:
        raise SpecError(f"{', '.join(found.sources) or 'inventory'}: no host found; expected at least one host with a NIC "
                        "(an HCA in ibnetdiscover, an LLDP file, a node in topology.conf or a link in the node/link file)")
    tiers = infer_tiers(found)
    unreachable = sorted(set(found.switches) - set(tiers), key=natural_key)
    if unreachable:
        found.notes.append(f"{len(unreachable)} switch(es) reach no host and are left out: {', '.join(unreachable[:6])}"
                           + (" ..." if len(unreachable) > 6 else ""))
    nics = host_nics(found, nic_names)
    rename = _rename_nics(found, nics)
    hosts = sorted(found.hosts, key=natural_key)
    cables = [c for c in found.cables if all(e.host is not None or e.switch in tiers for e in (c.a, c.b))]
    ports = Counter(c.a.name if c.a.host is not None else c.b.name for c in cables if c.a.host is not None or c.b.host is not None)
    switches = []
    for name in sorted(tiers, key=lambda n: (tiers[n], natural_key(n))):
        entry: dict = {"name": name, "tier": tiers[name]}
        if name in found.guid:
            entry["guid"] = found.guid[name]
        if name in found.lid:
            entry["lid"] = found.lid[name]
        switches.append(entry)
    kept = set(tiers) | {f"{h}.{n}" for h, nics in found.hosts.items() for n in nics}
    aliases = {other: name for other, name in found.aliases.items() if name in kept}
    aliases |= {old: new for old, new in rename.items()}
    for name, guid in found.guid.items():
        if name not in tiers and name in kept:  # a NIC's GUID
            aliases[guid] = rename.get(name, name)
    for name, lid in found.lid.items():
        if name not in tiers and name in kept:
            aliases[f"lid{lid}"] = rename.get(name, name)
    section = {"hosts": hosts, "nics": nics, "switches": switches,
               "cables": [_cable_entry(c, rename) for c in cables], "aliases": aliases, "sources": found.sources}
    host_rates = [c.rate_bps for c in cables if (c.a.host is not None or c.b.host is not None) and c.rate_bps]
    switch_rates = [c.rate_bps for c in cables if c.a.host is None and c.b.host is None and c.rate_bps]
    implied = {"nics": len(nics), "nic_ports": max(ports.values(), default=1),
               "nic_speed": _median(host_rates), "switch_speed": _median(switch_rates)}
    return section, implied
