"""Read LLDP neighbours (``lldpctl -f json``, lldpd) of each host: which switch port each NIC port faces.

One file per host, named after it (``node01.json``). lldpd's JSON (lldpd ``src/client/json_writer.c``;
the shapes its own tests expect, lldpd ``tests/integration/test_lldpcli.py``) is
``{"lldp": {"interface": ...}}`` where ``interface`` is one ``{"<ifname>": {...}}`` mapping, or a
list of them when there are several. Each interface holds ``chassis: {"<system name>": {...}}`` (the
switch) and ``port: {"id": {"type": ..., "value": "<port>"}, "descr": ...}`` (its port).

The host's interface name (``ens1f0np0``) becomes the NIC's device name; a switch seen from hosts is
a leaf. Switches' own LLDP files (SONiC, Cumulus and others run lldpd) add switch-to-switch cables:
a file is a switch's when its name is a neighbour advertising the Bridge or Router capability. A
switch's management port (``eth0`` on SONiC and Cumulus, whose front-panel ports are ``EthernetN`` /
``swpN``; ``mgmt0``, ``Management1``, ``ma1`` elsewhere) faces the management network, not the fabric:
its neighbour is left out and named in the notes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from gpuwait.errors import SpecError
from gpuwait.inventory.fabric import Collected, End, Where
from gpuwait.spec.reader import loads_json, read_text_checked

#: a switch's out-of-band management port (see the module doc)
_MANAGEMENT_PORT = re.compile(r"^(?:eth\d+|mgmt\d*|management\d*|ma\d+)$", re.IGNORECASE)


def _interfaces(path: str, data: object) -> list[tuple[str, dict]]:
    lldp = data.get("lldp") if isinstance(data, dict) else None
    if isinstance(lldp, list):  # json0 wraps every level in a list
        raise SpecError(f"{path}: this is lldpctl's json0 format; expected `lldpctl -f json` (mappings keyed by name)")
    if not isinstance(lldp, dict):
        raise SpecError(f"{path}: no top-level \"lldp\" mapping; expected the output of `lldpctl -f json`")
    raw = lldp.get("interface", [])
    items = raw if isinstance(raw, list) else [raw]
    out = []
    for item in items:
        if not isinstance(item, dict):
            raise SpecError(f"{path}: lldp.interface holds {type(item).__name__}; expected {{\"<ifname>\": {{...}}}}")
        out += [(name, body) for name, body in item.items() if isinstance(body, dict)]
    return out


def _neighbour(path: str, ifname: str, body: dict) -> tuple[str, str | None, bool]:
    chassis = body.get("chassis")
    if not isinstance(chassis, dict) or not chassis:
        raise SpecError(f"{path}: interface {ifname}: no chassis; expected chassis: {{\"<switch name>\": {{...}}}}")
    name, info = next(iter(chassis.items()))
    if name == "id" and isinstance(info, dict):  # a neighbour that sends no system name: its chassis id
        name = str(info.get("value"))
    port = body.get("port", {})
    port_id = port.get("id", {}) if isinstance(port, dict) else {}
    value = port_id.get("value") if isinstance(port_id, dict) else None
    # a switch port named by its MAC says nothing people read; the description usually holds the name
    if isinstance(port_id, dict) and port_id.get("type") == "mac" and isinstance(port, dict) and port.get("descr"):
        value = port["descr"]
    caps = info.get("capability", []) if isinstance(info, dict) else []
    caps = caps if isinstance(caps, list) else [caps]
    bridge = any(isinstance(c, dict) and c.get("type") in ("Bridge", "Router") and c.get("enabled") for c in caps)
    return name, value, bridge


def read_lldp(paths: list[str], found: Collected | None = None) -> Collected:
    """Add the cables of per-host (and per-switch) ``lldpctl -f json`` files to ``found``."""
    found = found or Collected()
    found.transport = found.transport or "rocev2"
    parsed = []
    for path in paths:
        try:
            data = loads_json(read_text_checked(path, "an lldpctl JSON file"))
        except json.JSONDecodeError as err:
            raise SpecError(f"{path}:{err.lineno}: not JSON ({err.msg}); expected the output of `lldpctl -f json`") from None
        found.sources.append(path)
        parsed.append((path, Path(path).stem, [(ifname, *_neighbour(path, ifname, body)) for ifname, body in _interfaces(path, data)]))
    # a neighbour advertising the Bridge or Router capability is a switch (hosts advertise Station); one
    # that advertises nothing is a switch unless it has an LLDP file of its own among the hosts'
    devices = {device for _, device, _ in parsed}
    bridge: dict[str, bool] = {}
    for _, _, neighbours in parsed:
        for _, name, _, caps in neighbours:
            bridge[name] = bridge.get(name, False) or caps
    advertised = {name for _, _, neighbours in parsed for _, name, _, _ in neighbours}
    switches = {name for name in advertised if bridge[name]} | {name for name in advertised - devices if not bridge[name]}
    for path, device, neighbours in parsed:
        if device in switches:
            for ifname, name, port, _ in neighbours:
                if _MANAGEMENT_PORT.match(ifname):
                    found.notes.append(f"{device} {ifname} is a management port: its neighbour {name} is left out")
                elif name in switches:
                    found.add_cable(End(switch=device, port=ifname), End(switch=name, port=port), None, Where(path))
            continue
        for ifname, name, port, _ in neighbours:
            found.add_cable(End(host=device, nic=ifname), End(switch=name, port=port), None, Where(path))
    return found
