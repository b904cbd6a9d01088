"""Read Slurm's tree topology (``topology.conf``, topology/tree plugin) and expand Slurm host lists.

One line per switch (Slurm ``topology.conf(5)``): ``SwitchName=<name> [Switches=<hostlist>]
[Nodes=<hostlist>] [LinkSpeed=<n>]``; ``#`` starts a comment. A switch with ``Nodes=`` is a leaf; the
tree gives no NIC names, ports or cable counts, so each host gets one cable per NIC to its leaf
(the NICs ``--nccl-topo`` lists, else one, ``nic0``: not the server template's count, which with one
cable per switch pair would make every leaf oversubscribed by the template's NICs per host) and each
parent/child switch pair one cable.
"""

from __future__ import annotations

import re

from gpuwait.errors import SpecError
from gpuwait.inventory.fabric import Collected, End, Where
from gpuwait.spec.reader import read_text_checked

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def expand_hostlist(text: str, where: str = "hostlist") -> list[str]:
    """Slurm host list syntax: ``node[01-03,7],gpu5`` -> node01, node02, node03, node7, gpu5.

    >>> expand_hostlist("sl390lin[1-3,7],r422node1")
    ['sl390lin1', 'sl390lin2', 'sl390lin3', 'sl390lin7', 'r422node1']
    >>> expand_hostlist("a[1-2]b[08-09]")
    ['a1b08', 'a1b09', 'a2b08', 'a2b09']
    """
    names: list[str] = []
    for item in _split_top(text.strip(), where):
        names.extend(_expand_one(item, where))
    return names


def _split_top(text: str, where: str) -> list[str]:
    items, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth < 0 or depth > 1:
            raise SpecError(f"{where}: got {text!r}; expected balanced brackets as in node[01-04,7]")
        if char == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    if depth:
        raise SpecError(f"{where}: got {text!r}; expected a ']' to close the range")
    items.append(text[start:])
    return [item for item in items if item]


def _expand_one(item: str, where: str) -> list[str]:
    match = re.search(r"\[([^\]]*)\]", item)
    if not match:
        return [item]
    head, tail = item[:match.start()], item[match.end():]
    out = []
    for part in match[1].split(","):
        bounds = _RANGE.match(part.strip())
        if not bounds:
            raise SpecError(f"{where}: range {part!r} in {item!r}; expected N or N-M (e.g. 01-16)")
        low, high = bounds[1], bounds[2] or bounds[1]
        width = len(low) if low.startswith("0") else 0
        if int(high) < int(low):
            raise SpecError(f"{where}: range {part!r} in {item!r} runs backwards; expected N-M with N <= M")
        out += [f"{head}{n:0{width}d}" for n in range(int(low), int(high) + 1)]
    return [name for prefix in out for name in _expand_one(prefix + tail, where)]


def read_slurm_topology(path: str, found: Collected | None = None, nics: list[str] | None = None) -> Collected:
    """Add the switches, hosts and (one per NIC) cables of a Slurm ``topology.conf`` to ``found``."""
    found = found or Collected()
    found.sources.append(path)
    nics = nics or ["nic0"]
    lines = read_text_checked(path, "a Slurm topology.conf").splitlines()
    for number, raw in enumerate(lines, 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = Where(path, number)
        fields = {}
        for token in line.split():
            key, eq, value = token.partition("=")
            if not eq:
                raise SpecError(f"{where}: got {token!r}; expected KEY=VALUE (SwitchName=, Switches=, Nodes=, LinkSpeed=)")
            fields[key.lower()] = value
        if "switchname" not in fields:
            if "blockname" in fields:
                raise SpecError(f"{where}: BlockName= is Slurm's block topology; expected the tree topology (SwitchName=)")
            raise SpecError(f"{where}: got {line[:60]!r}; expected SwitchName=<name> with Switches= or Nodes=")
        switch = fields["switchname"]
        found.add_switch(switch, where)
        for child in expand_hostlist(fields.get("switches", ""), str(where)):
            found.add_cable(End(switch=child), End(switch=switch), None, where)
        for host in expand_hostlist(fields.get("nodes", ""), str(where)):
            for nic in nics:
                found.add_cable(End(host=host, nic=nic), End(switch=switch), None, where)
    return found


def slurm_hosts(path: str) -> list[str]:
    """Every host ``Nodes=`` names in a ``topology.conf`` (the hosts Slurm can place a job on)."""
    return sorted(read_slurm_topology(path).hosts)
