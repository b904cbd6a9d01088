"""The explicit node/link file, for cabling no tool above reports (a spreadsheet, a cabling plan).

YAML::

    hosts: [node01, node02]          # optional: server order; default: every host the links name
    switches:                        # optional: tiers; default: inferred (leaves touch hosts)
      - {name: leaf1, tier: 1}
    links:
      - {a: node01/mlx5_0, b: leaf1, b_port: 1, speed: 400Gbps}
      - {a: leaf1, a_port: 33, b: spine1, b_port: 1}

or CSV with the header ``a,a_port,b,b_port,speed`` (ports and speed may be empty). An end written
``HOST/NIC`` is a host's NIC; any other name is a switch. With ``hosts:`` or ``switches:`` given, a link
to a name they do not list is an error naming the file and line, with close matches.
"""

from __future__ import annotations

import csv
import difflib

import yaml

from gpuwait.errors import SpecError, UnitError
from gpuwait.inventory.fabric import Collected, End, Where
from gpuwait.spec.reader import read_text_checked
from gpuwait.units import parse_rate_Bps

_COLUMNS = ("a", "a_port", "b", "b_port", "speed")


def _end(text: str, port: object, where: Where, hosts: set[str], switches: set[str]) -> End:
    text = str(text).strip()
    port_id = None if port in (None, "") else (int(str(port)) if str(port).isdigit() else str(port))
    if "/" in text:
        host, nic = text.split("/", 1)
        if hosts and host not in hosts:
            near = difflib.get_close_matches(host, sorted(hosts), n=3, cutoff=0.6)
            raise SpecError(f"{where}: link end {text!r}: host {host!r} is not in hosts:"
                            + (f" (close: {', '.join(near)})" if near else "") + "; expected a listed host")
        return End(host=host, nic=nic, port=port_id)
    if switches and text not in switches:
        near = difflib.get_close_matches(text, sorted(switches), n=3, cutoff=0.6)
        raise SpecError(f"{where}: link end {text!r} is neither HOST/NIC nor a switch in switches:"
                        + (f" (close: {', '.join(near)})" if near else ""))
    return End(switch=text, port=port_id)


def _rate(value: object, where: Where) -> float | None:
    if value in (None, ""):
        return None
    try:
        if not isinstance(value, (str, int, float)):
            raise TypeError  # a list or a mapping in the file: not a rate either
        return parse_rate_Bps(value) * 8  # bytes/s -> bits/s
    except (UnitError, ValueError, TypeError):
        raise SpecError(f"{where}: speed {value!r}; expected a rate such as 400Gbps or 50GB/s") from None


def _yaml_rows(path: str, text: str) -> tuple[dict, list[tuple[int, dict]]]:
    try:
        node = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        raise SpecError(f"{path}:{mark.line + 1 if mark else 0}: not YAML ({getattr(err, 'problem', err)}); "
                        "expected hosts:, switches: and links:") from None
    if not isinstance(data, dict) or not isinstance(data.get("links"), list):
        raise SpecError(f"{path}: no links: list; expected links: [{{a: HOST/NIC, b: SWITCH}}, ...]")
    lines = {}
    for key, value in node.value:
        if key.value == "links":
            lines = {i: item.start_mark.line + 1 for i, item in enumerate(value.value)}
    rows = []
    for i, item in enumerate(data["links"]):
        if not isinstance(item, dict) or "a" not in item or "b" not in item:
            raise SpecError(f"{path}:{lines.get(i, 0)}: links[{i}] is {item!r}; expected a mapping with a: and b:")
        unknown = set(item) - set(_COLUMNS)
        if unknown:
            raise SpecError(f"{path}:{lines.get(i, 0)}: links[{i}]: unknown field {sorted(unknown)[0]!r}; expected {', '.join(_COLUMNS)}")
        rows.append((lines.get(i, 0), item))
    return data, rows


def _csv_rows(path: str, text: str) -> list[tuple[int, dict]]:
    reader = csv.DictReader(text.splitlines())
    try:
        header = [h.strip() for h in reader.fieldnames or []]
        if "a" not in header or "b" not in header:
            raise SpecError(f"{path}:1: header {','.join(header)[:200]!r}; expected a,a_port,b,b_port,speed")
        return [(number, {k.strip(): (v or "").strip() for k, v in row.items() if k}) for number, row in enumerate(reader, 2)]
    except csv.Error as err:  # a field past the csv module's limit (128 KiB); its line_num can lag a line
        limit = csv.field_size_limit()
        line = next((n for n, ln in enumerate(text.splitlines(), 1) if len(ln) > limit), reader.line_num)
        raise SpecError(f"{path}:{line}: cannot read the row ({err}); expected a,a_port,b,b_port,speed "
                        "rows of names and numbers") from None


def read_links(path: str, found: Collected | None = None) -> Collected:
    """Add the hosts, switches and links of an explicit node/link file (YAML or CSV) to ``found``."""
    found = found or Collected()
    found.sources.append(path)
    text = read_text_checked(path, "a node/link file (YAML or CSV)")
    data: dict = {}
    if path.endswith(".csv"):
        rows = _csv_rows(path, text)
    else:
        data, rows = _yaml_rows(path, text)
    hosts = {str(h) for h in data.get("hosts", []) or []}
    switches = set()
    for entry in data.get("switches", []) or []:
        if not isinstance(entry, dict) or "name" not in entry:
            raise SpecError(f"{path}: switches: got {entry!r}; expected {{name: SWITCH, tier: 1|2|3}}")
        switches.add(str(entry["name"]))
        if "tier" in entry:
            found.switch_tier[str(entry["name"])] = int(entry["tier"])
    for number, row in rows:
        where = Where(path, number)
        a = _end(row["a"], row.get("a_port"), where, hosts, switches)
        b = _end(row["b"], row.get("b_port"), where, hosts, switches)
        if a.host is not None and b.host is not None:
            raise SpecError(f"{where}: link {row['a']} - {row['b']} joins two hosts; expected a host NIC to a switch or two switches")
        if a.host is None and b.host is not None:
            a, b = b, a
        found.add_cable(a, b, _rate(row.get("speed"), where), where)
    for host in hosts - set(found.hosts):
        found.notes.append(f"host {host} is listed but has no link")
    return found
