"""Write a topology for other tools: Graphviz DOT, Slurm ``topology.conf``, Slurm hostlists.

Each writer returns a string; writing it to a file is the caller's job.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable

import numpy as np

from gpuwait.errors import SpecError, TopologyError, UnknownNameError
from gpuwait.topology.model import NETWORKS, TIER_NAMES, Network, NodeKind, Topology

# --------------------------------------------------------------------------------------- hostlists
_FORBIDDEN = re.compile(r"[\[\],\s]")
_TRAILING_NUMBER = re.compile(r"^(.*?)(\d+)$")


def _check_hostname(name: str) -> None:
    if not name or _FORBIDDEN.search(name):
        raise SpecError(f"hostlist: got name {name!r}; expected a non-empty name without brackets, commas or spaces")


def _ranges(numbers: Iterable[int], width: int) -> str:
    """``[0, 1, 2, 3, 8]`` -> ``0-3,8`` (each number zero-padded to ``width``)."""
    runs: list[list[int]] = []
    for number in sorted(numbers):  # plain ints: digit runs longer than int64 still work
        if runs and number == runs[-1][1] + 1:
            runs[-1][1] = number
        else:
            runs.append([number, number])
    return ",".join(f"{lo:0{width}d}" if lo == hi else f"{lo:0{width}d}-{hi:0{width}d}" for lo, hi in runs)


def hostlist(names: Iterable[str]) -> str:
    """Compress host or switch names into a Slurm hostlist expression.

    Names are grouped by the text before their trailing number; the numbers become ranges.
    Duplicates are dropped and the result is sorted, so the output depends only on the set of
    names. Zero padding is kept: ``node01, node02`` give ``node[01-02]``.

    Parameters
    ----------
    names : iterable of str
        Names without ``[``, ``]``, ``,`` or white space.

    Returns
    -------
    str
        E.g. ``node[0-3,8-11]``; a single name stays as it is.

    See Also
    --------
    expand_hostlist : the inverse.

    Examples
    --------
    >>> hostlist(["node0", "node1", "node2", "node3", "node8", "node9", "node10", "node11"])
    'node[0-3,8-11]'
    >>> hostlist(["p0.leaf1", "p0.leaf0", "mgmt.core", "node7"])
    'mgmt.core,node7,p0.leaf[0-1]'
    """
    groups: dict[tuple[str, int], set[int]] = defaultdict(set)
    literals: set[str] = set()
    for name in set(names):
        _check_hostname(name)
        match = _TRAILING_NUMBER.match(name)
        if match is None:
            literals.add(name)
            continue
        prefix, digits = match.groups()
        width = len(digits) if len(digits) > 1 and digits[0] == "0" else 0  # 0 = not zero-padded
        groups[(prefix, width)].add(int(digits))
    # an unpadded number as long as a padded group's width prints the same inside that group (node[08-10])
    for (prefix, width) in [key for key in groups if key[1]]:
        plain = groups.get((prefix, 0), set())
        fits = {n for n in plain if len(str(n)) == width}
        if fits:
            groups[(prefix, width)] |= fits
            plain -= fits
            if not plain:
                del groups[(prefix, 0)]
    items = [((name, 0, 0), name) for name in literals]
    for (prefix, width), numbers in groups.items():
        body = _ranges(numbers, width)
        text = f"{prefix}{body}" if len(numbers) == 1 else f"{prefix}[{body}]"
        items.append(((prefix, 1, width), text))
    return ",".join(text for _, text in sorted(items))


def _split_top_level(expression: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, char in enumerate(expression):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(expression[start:i])
            start = i + 1
    parts.append(expression[start:])
    return parts


def _expand_ranges(body: str, expression: str) -> list[str]:
    out: list[str] = []
    for part in body.split(","):
        lo, dash, hi = part.partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            raise SpecError(f"hostlist: cannot read {part!r} in {expression!r}; expected a number or a range like 0-3")
        first, last = int(lo), int(hi) if dash else int(lo)
        if last < first:
            raise SpecError(f"hostlist: range {part!r} in {expression!r} runs backwards; expected low-high")
        out.extend(f"{n:0{len(lo)}d}" for n in range(first, last + 1))  # the low bound sets the zero padding
    return out


def _expand_item(item: str, expression: str) -> list[str]:
    start = item.find("[")
    if start < 0:
        if "]" in item or not item:
            raise SpecError(f"hostlist: cannot read {item!r} in {expression!r}; expected name[ranges] or a name")
        return [item]
    end = item.find("]", start)
    if end < 0:
        raise SpecError(f"hostlist: unclosed '[' in {expression!r}")
    prefix, body, rest = item[:start], item[start + 1:end], item[end + 1:]
    tails = _expand_item(rest, expression) if rest else [""]
    return [prefix + number + tail for number in _expand_ranges(body, expression) for tail in tails]


def expand_hostlist(expression: str) -> list[str]:
    """Expand a Slurm hostlist expression into names, in the order written.

    Parameters
    ----------
    expression : str
        E.g. ``node[0-3,8]``, ``rack[1-2]-n[01-02]``, ``leaf0,spine[0-1]``.

    Returns
    -------
    list of str

    Examples
    --------
    >>> expand_hostlist("node[0-2,8],leaf[08-10]")
    ['node0', 'node1', 'node2', 'node8', 'leaf08', 'leaf09', 'leaf10']
    """
    expression = expression.strip()
    if not expression:
        return []
    names: list[str] = []
    for item in _split_top_level(expression):
        names.extend(_expand_item(item.strip(), expression))
    return names


# --------------------------------------------------------------------------------------- Slurm
_SLURM_HEADER = """\
##################################################################
# Slurm's network topology configuration file for use with the
# topology/tree plugin
##################################################################
"""


def to_slurm_topology_conf(topo: Topology, hostname_prefix: str = "node") -> str:
    """Slurm ``topology/tree`` configuration (``topology.conf``) of the compute fabric.

    Leaves list their servers (``SwitchName=leaf0 Nodes=node[0-3]``), upper tiers their child
    switches (``SwitchName=spine0 Switches=leaf[0-7]``), leaves first. Server ``sI`` is host
    ``{hostname_prefix}I``. On a rail-optimized, dual-ToR or multi-plane fabric a server sits
    under several leaves, which Slurm accepts. Leaves holding no GPU server (converged storage
    only) are left out, and so are switches left with no children. Pair it with
    ``TopologyPlugin=topology/tree`` in ``slurm.conf``.

    Parameters
    ----------
    topo : Topology
    hostname_prefix : str
        Slurm node names are this prefix plus the server index.

    Returns
    -------
    str
        The file's text, ending with a newline.

    Examples
    --------
    >>> from gpuwait.topology import build_preset
    >>> text = to_slurm_topology_conf(build_preset("rocev2-400g-2tier", 8))
    >>> print("\\n".join(line for line in text.splitlines()[:9] if not line.startswith("#")))
    SwitchName=leaf0 Nodes=node[0-3]
    SwitchName=leaf1 Nodes=node[4-7]
    SwitchName=spine0 Switches=leaf[0-1]
    """
    if not hostname_prefix or _FORBIDDEN.search(hostname_prefix):
        raise SpecError(f"hostname_prefix: got {hostname_prefix!r}; expected a non-empty name without brackets, "
                        "commas or spaces, e.g. node")
    compute = Network.COMPUTE
    is_switch = (topo.node_kind == NodeKind.SWITCH) & (topo.node_network == compute)
    if not is_switch.any():
        raise TopologyError(f"fabric.kind: {topo.name} has no compute fabric; expected fabric.kind: clos for a Slurm "
                            "topology", hint="a single server needs no topology.conf")
    src, dst = topo.link_src, topo.link_dst
    compute_link = topo.link_network == compute
    to_leaf = compute_link & (topo.node_kind[src] == NodeKind.NIC) & is_switch[dst]
    # children of each switch: servers under leaves, lower-tier switches under the rest
    pairs = np.unique(dst[to_leaf].astype(np.int64) * topo.n_servers + topo.node_server[src[to_leaf]])
    leaf_of, server_of = pairs // topo.n_servers, pairs % topo.n_servers
    written = np.zeros(topo.n_nodes, bool)
    lines = []
    tiers = topo.node_tier[is_switch]

    leaves = np.unique(leaf_of)
    starts = np.searchsorted(leaf_of, leaves)
    for leaf, servers in zip(leaves.tolist(), np.split(server_of, starts[1:])):
        lines.append(f"SwitchName={topo.node_name[leaf]} Nodes={hostlist(f'{hostname_prefix}{s}' for s in servers.tolist())}")
    written[leaves] = True
    counts = {"leaf": len(leaves)}

    for tier in range(2, int(tiers.max()) + 1):
        down = compute_link & is_switch[src] & (topo.node_tier[src] == tier) & (topo.node_tier[dst] == tier - 1) & written[dst]
        pairs = np.unique(src[down].astype(np.int64) * topo.n_nodes + dst[down])
        parent_of, child_of = pairs // topo.n_nodes, pairs % topo.n_nodes
        parents = np.unique(parent_of)
        starts = np.searchsorted(parent_of, parents)
        for parent, children in zip(parents.tolist(), np.split(child_of, starts[1:])):
            lines.append(f"SwitchName={topo.node_name[parent]} Switches={hostlist(topo.node_name[children].tolist())}")
        written[parents] = True
        counts[TIER_NAMES[tier]] = len(parents)

    plural = {"leaf": "leaves", "spine": "spines", "core": "cores"}
    summary = ", ".join(f"{n} {tier if n == 1 else plural[tier]}" for tier, n in counts.items())
    planes = len(np.unique(topo.node_plane[is_switch]))
    header = [
        f"# Generated by gpuwait from cluster {topo.name!r}: {topo.n_servers} servers "
        f"{hostlist(f'{hostname_prefix}{s}' for s in range(topo.n_servers))} ({hostname_prefix}<i> is server s<i>), {summary}"
        + (f", {planes} planes" if planes > 1 else "") + ".",
        "# slurm.conf: TopologyPlugin=topology/tree",
    ]
    return _SLURM_HEADER + "\n".join(header + lines) + "\n"


# --------------------------------------------------------------------------------------- Graphviz
def _quote(name: str) -> str:
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _speed_label(capacity_Bps: float) -> str:
    return f"{capacity_Bps * 8 / 1e9:g}G"


def to_dot(topo: Topology, network: str = "compute", max_servers: int | None = None) -> str:
    """Graphviz DOT of one network: switches, and each server collapsed into one node ``sI``.

    One undirected edge per cable, labelled with its speed (``400G``); a server with eight NICs
    on one leaf has eight parallel edges to it. Each switch tier is one ``rank=same`` row, the
    upper tiers on top, servers at the bottom. Render with ``dot -Tsvg``.

    Parameters
    ----------
    topo : Topology
    network : {"compute", "storage", "management"}
    max_servers : int, optional
        Draw only servers ``s0 .. s{max_servers-1}`` and the switches above them (a switch is
        kept when it is cabled to a kept node of a lower tier). Storage servers are always drawn.

    Returns
    -------
    str

    Examples
    --------
    >>> from gpuwait.topology import build_preset
    >>> dot = to_dot(build_preset("rocev2-400g-2tier", 8), max_servers=2)
    >>> dot.count(" -- "), '"spine0" -- "leaf0" [label="400G"];' in dot
    (48, True)
    """
    if network not in NETWORKS[1:]:
        raise UnknownNameError(f"network: unknown network {network!r}; expected one of {', '.join(NETWORKS[1:])}")
    if max_servers is not None and max_servers < 0:
        raise SpecError(f"max_servers: got {max_servers}; expected 0 or more")
    n, S = topo.n_nodes, topo.n_servers
    in_server = topo.node_server >= 0
    # display ids: a node outside the servers keeps its id; server s becomes n + s
    display = np.where(in_server, n + topo.node_server, np.arange(n))
    tier = np.r_[topo.node_tier, np.zeros(S, topo.node_tier.dtype)]
    cable = (topo.link_network == Network.of(network)) & (topo.link_src < topo.link_dst)  # one link per cable
    u, v = display[topo.link_src[cable]], display[topo.link_dst[cable]]
    capacity = topo.link_capacity_Bps[cable]

    on_net = np.zeros(n + S, bool)
    on_net[np.flatnonzero((topo.node_network == Network.of(network)) & ~in_server)] = True
    on_net[u] = True
    on_net[v] = True
    kept = on_net.copy()
    if max_servers is not None:
        kept[n + min(max_servers, S):] = False
        kept[:n] &= tier[:n] == 0  # switches come back below when they sit above a kept node
        for t in range(1, len(TIER_NAMES)):
            up = np.r_[u[(tier[u] == t) & (tier[v] < t) & kept[v]], v[(tier[v] == t) & (tier[u] < t) & kept[u]]]
            kept[up] = True
    edge = kept[u] & kept[v]
    u, v, capacity = u[edge], v[edge], capacity[edge]
    swap = tier[u] < tier[v]  # upper tier first, so dot draws it above
    u, v = np.where(swap, v, u), np.where(swap, u, v)

    def name(i: int) -> str:
        return topo.server_name(i - n) if i >= n else topo.node_name[i]

    nodes = np.flatnonzero(kept)
    lines = [f"graph {_quote(topo.name)} {{",
             f"  // gpuwait {network} network of {topo.name}: servers {int((nodes >= n).sum())} (one node each), "
             f"switches {int((tier[nodes] > 0).sum())}, cables {len(u)}",
             "  node [shape=box];"]
    for t in range(len(TIER_NAMES) - 1, -1, -1):
        row = nodes[tier[nodes] == t]
        if len(row) == 0:
            continue
        if t == 0:
            shapes = ["ellipse" if i >= n else "cylinder" for i in row.tolist()]
            body = " ".join(f"{_quote(name(i))} [shape={shape}];" for i, shape in zip(row.tolist(), shapes))
        else:
            body = " ".join(f"{_quote(name(i))};" for i in row.tolist())
        lines.append(f"  {{ rank=same; {body} }}")
    lines.extend(f"  {_quote(name(a))} -- {_quote(name(b))} [label={_quote(_speed_label(c))}];"
                 for a, b, c in zip(u.tolist(), v.tolist(), capacity.tolist()))
    lines.append("}")
    return "\n".join(lines) + "\n"
