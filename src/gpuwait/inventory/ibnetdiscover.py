"""Read ``ibnetdiscover`` output (infiniband-diags): switches, HCAs and the cables between their ports.

The format (ibnetdiscover(8)): a node header ``Switch 36 "S-<guid>"  # "<node description>" ... lid 9``
or ``Ca 1 "H-<guid>"  # "<description>"``, then one line per connected port,
``[<port>](<port guid>)  "<peer id>"[<peer port>](<peer port guid>)  # "<peer description>" lid <n> <width><speed>``.
Every cable appears twice (once from each end); :class:`~gpuwait.inventory.fabric.Collected` keeps it once.
``ibnetdiscover -p`` (the ports report that infiniband_exporter reads) is read too: one line per port,
``CA 134 1 0x7cfe9003003b4bde 4x EDR - SW 1719 10 0x7cfe9003009ce5b0 ( 'o0001 HCA-1' - 'ib-i1l1s01' )``
(type, LID, port, GUID, width, speed, then the peer's, then both node descriptions); a port with no peer
ends after its speed and description and is skipped. Its GUIDs are port GUIDs: a node-name map of
HCAs' node GUIDs may not match them (switches' port and node GUIDs are one).

A switch's SHARP Aggregation Node (a CA inside a Quantum switch, described ``"Mellanox Technologies
Aggregation Node"``) is no server: it and its cable are left out, like routers.

Names. An HCA's node description is ``"<hostname> <device>"`` (``"node01 mlx5_0"``, set by the driver
from the host name); one without a host name (``"MT25408 ConnectX Mellanox Technologies"``, old firmware)
keeps ibnetdiscover's id ``H-<guid>`` as host name and ``hca`` as device. A switch takes, in order: the
name in a managed switch's description (``"MF0;ib-leaf-03:MQM9700/U1"`` -> ``ib-leaf-03``), the name after
``#`` (``"Voltaire 4036 # hoibp0013"`` -> ``hoibp0013``), a description of one word that no other switch
shares, else its id ``S-<guid>`` (the name Slurm's topology tools write). A node-name map
(``--node-name-map``: ``<guid> <name>`` per line, the ibnetdiscover/opensm format, or ``H-<guid> <name>``)
overrides both.

Link rates: the data rate of the active width x speed, per direction, after line coding (IBTA
InfiniBand Architecture Specification Vol. 2, "Physical Layer"; the "effective throughput" column of
the InfiniBand rate table): per lane SDR 2, DDR 4, QDR 8 Gb/s (8b/10b), FDR10 10, FDR 13.64, EDR 25,
HDR 50, NDR 100, XDR 200 Gb/s (64b/66b and later codings), so 4xNDR = 400 Gb/s, 4xQDR = 32 Gb/s.
"""

from __future__ import annotations

import re

from gpuwait.errors import SpecError
from gpuwait.inventory.fabric import Collected, End, Where
from gpuwait.spec.reader import read_text_checked

#: data rate per lane, bits/s (see the module docstring for the source)
LANE_RATE_bps = {"SDR": 2e9, "DDR": 4e9, "QDR": 8e9, "FDR10": 10e9, "FDR": 13.64e9, "EDR": 25e9, "HDR": 50e9,
                 "NDR": 100e9, "XDR": 200e9}

_NODE = re.compile(r'^(Switch|Ca|Rt)\s+(\d+)\s+"([SHR]-[0-9a-fA-F]+)"\s*(?:#\s*"([^"]*)"(.*))?$')
_PORT = re.compile(r'^\[(\d+)\](?:\(([0-9a-fA-F]+)\))?\s+"([SHR]-[0-9a-fA-F]+)"\[(\d+)\](?:\(([0-9a-fA-F]+)\))?\s*(?:#(.*))?$')
_RATE = re.compile(r"\b(\d+)x(SDR|DDR|QDR|FDR10|FDR|EDR|HDR|NDR|XDR)\b")
_LID = re.compile(r"\blid\s+(\d+)")
_PORTS_LINE = re.compile(r"^(CA|SW|RT)\s+(\d+)\s+(\d+)\s+0x([0-9a-fA-F]+)\s+(\d+)x\s*(\S+)\s*"
                         r"(?:-\s*(CA|SW|RT)\s+(\d+)\s+(\d+)\s+0x([0-9a-fA-F]+)\s*\(\s*'([^']*)'\s*-\s*'([^']*)'\s*\)"
                         r"|'[^']*')?\s*$")
_PORTS_KIND = {"CA": ("Ca", "H"), "SW": ("Switch", "S"), "RT": ("Rt", "R")}
_AGGREGATION_NODE = re.compile(r"^\s*Mellanox Technologies Aggregation Node\s*$", re.IGNORECASE)


def link_rate_bps(text: str) -> float | None:
    """Data rate per direction of ``4xHDR`` and the like (None when the line names no rate).

    >>> link_rate_bps("4xNDR") / 1e9, link_rate_bps("4xQDR") / 1e9, link_rate_bps('"x" lid 3 2xHDR') / 1e9
    (400.0, 32.0, 100.0)
    """
    matches = list(_RATE.finditer(text))
    match = matches[-1] if matches else None  # the width and speed are the last thing on a port line
    return int(match[1]) * LANE_RATE_bps[match[2]] if match else None


def read_name_map(path: str) -> dict[str, str]:
    """``guid name`` lines (``0x0008f105...  "name"`` or ``H-0008f105... name``) as {id: name}."""
    out = {}
    for number, line in enumerate(read_text_checked(path, "a GUID -> name map (ibnetdiscover --node-name-map)").splitlines(), 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        parts = text.split(None, 1)
        if len(parts) != 2:
            raise SpecError(f"{path}:{number}: got {line.strip()!r}; expected '<guid> <name>' (e.g. 0x0002c903000e0b72 node01)")
        key, name = parts[0].lower(), parts[1].strip().strip('"')
        try:
            out[_guid(key)] = name
        except ValueError:
            raise SpecError(f"{path}:{number}: GUID {parts[0][:40]!r} is not hexadecimal; expected '<guid> <name>' "
                            "(e.g. 0x0002c903000e0b72 node01)") from None
    return out


def _guid(text: str) -> str:
    """``S-0008f1...``, ``0x8f1...`` and ``8f1...`` as one 16-digit form ``0x0008f1...``."""
    text = text.lower()
    if text[:2] in ("s-", "h-", "r-"):
        text = text[2:]
    return f"0x{int(text, 16):016x}"


def _switch_name(description: str, node_id: str, shared: set[str]) -> str:
    managed = re.match(r"^MF0;([^:]+):", description)
    if managed:
        return managed[1]
    if "#" in description:
        tail = description.rsplit("#", 1)[1].strip()
        if tail:
            return tail
    if description and " " not in description and description not in shared:
        return description
    return node_id


def _host_nic(description: str, node_id: str) -> tuple[str, str]:
    parts = description.split()
    if len(parts) == 2 and not re.search(r"mellanox|connectx|technologies", description, re.I):
        return parts[0], parts[1]
    return node_id, "hca"


def _scan(path: str, lines: list[str]) -> tuple[dict, list]:
    """Node headers {id: (kind, description, lid, line)} and cabled ports (line, own id, own port, peer id,
    peer port, the rest of the line: peer description, lid, width x speed)."""
    if any(_PORTS_LINE.match(raw.strip()) for raw in lines[:50] if raw.strip() and not raw.startswith("#")):
        return _scan_ports_report(path, lines)
    nodes: dict[str, tuple[str, str, int | None, int]] = {}
    ports = []
    current = None
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#") or "=" in line.split()[0]:
            continue
        node = _NODE.match(line)
        if node:
            lid = _LID.search(node[5] or "")
            current = node[3]
            nodes[current] = (node[1], node[4] or "", int(lid[1]) if lid else None, number)
            continue
        port = _PORT.match(line)
        if port and current is not None:
            ports.append((number, current, int(port[1]), port[3], int(port[4]), port[6] or ""))
            continue
        raise SpecError(f"{path}:{number}: got {line[:60]!r}; expected a node header (Switch/Ca N \"S-<guid>\" # \"desc\") "
                        "or a port line ([port] \"<peer>\"[peer port] # ...) as ibnetdiscover writes them")
    if not nodes:
        raise SpecError(f"{path}: no Switch or Ca line; expected ibnetdiscover output")
    return nodes, ports


def _scan_ports_report(path: str, lines: list[str]) -> tuple[dict, list]:
    """:func:`_scan` of an ``ibnetdiscover -p`` report: the nodes are those with a cabled port."""
    nodes: dict[str, tuple[str, str, int | None, int]] = {}
    ports = []
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _PORTS_LINE.match(line)
        if m is None:
            raise SpecError(f"{path}:{number}: got {line[:60]!r}; expected an ibnetdiscover -p port line "
                            "(CA 134 1 0x7cfe9003003b4bde 4x EDR - SW 1719 10 0x7cfe9003009ce5b0 ( 'o0001 HCA-1' - 'ib-i1l1s01' ))")
        if m[7] is None:
            continue  # a port with no peer
        ends = []
        for kind, lid, guid, description in ((m[1], m[2], m[4], m[11]), (m[7], m[8], m[10], m[12])):
            node_kind, prefix = _PORTS_KIND[kind]
            node_id = f"{prefix}-{guid.lower()}"
            nodes.setdefault(node_id, (node_kind, description.strip(), int(lid), number))
            ends.append((node_id, description.strip(), lid))
        ports.append((number, ends[0][0], int(m[3]), ends[1][0], int(m[9]), f' "{ends[1][1]}" lid {ends[1][2]} {m[5]}x{m[6]}'))
    if not nodes:
        raise SpecError(f"{path}: no cabled port; expected ibnetdiscover output")
    return nodes, ports


def read_ibnetdiscover(path: str, found: Collected | None = None, name_map: dict[str, str] | None = None) -> Collected:
    """Add the switches, HCAs and cables of an ``ibnetdiscover`` output file to ``found``."""
    found = found or Collected()
    found.sources.append(path)
    found.transport = found.transport or "infiniband"
    name_map = name_map or {}
    lines = read_text_checked(path, "an ibnetdiscover output file").splitlines()
    nodes, ports = _scan(path, lines)
    descriptions = [d for kind, d, _, _ in nodes.values() if kind == "Switch"]
    shared = {d for d in descriptions if descriptions.count(d) > 1}
    names: dict[str, tuple[str | None, str]] = {}  # id -> (host or None, nic or switch name)
    for node_id, (kind, description, lid, number) in nodes.items():
        mapped = name_map.get(_guid(node_id))
        if kind == "Switch":
            name = mapped or _switch_name(description, node_id, shared)
            names[node_id] = (None, name)
            found.add_switch(name, Where(path, number))
            found.guid[name] = _guid(node_id)
            found.aliases[node_id] = name
            if lid is not None:
                found.lid[name] = lid
        elif kind == "Ca" and not _AGGREGATION_NODE.match(description):
            host, nic = _host_nic(description, node_id)
            names[node_id] = (mapped or host, nic)
            found.aliases.setdefault(node_id, f"{mapped or host}.{nic}")
            found.guid.setdefault(f"{mapped or host}.{nic}", _guid(node_id))
    for number, own, own_port, peer, peer_port, rest in ports:
        if own not in names or peer not in names:
            missing = peer if peer not in names else own
            description = re.match(r'\s*"([^"]*)"', rest)
            if missing.startswith("R-") or nodes.get(own, ("",))[0] == "Rt" or missing in nodes \
                    or (description and _AGGREGATION_NODE.match(description[1])):
                continue  # routers and SHARP aggregation nodes are not part of a compute fabric
            # a peer with no header of its own (a partial dump): name it from the comment on this line
            if missing.startswith("S-"):
                names[missing] = (None, name_map.get(_guid(missing)) or _switch_name(description[1] if description else "", missing, shared))
            else:
                host, nic = _host_nic(description[1] if description else "", missing)
                names[missing] = (name_map.get(_guid(missing)) or host, nic)
        where = Where(path, number)
        ends = []
        for node_id, port_no in ((own, own_port), (peer, peer_port)):
            owner, end_name = names[node_id]
            ends.append(End(host=owner, nic=end_name, port=port_no) if owner is not None
                        else End(switch=end_name, port=port_no))
        found.add_cable(ends[0], ends[1], link_rate_bps(rest), where)
    return found
