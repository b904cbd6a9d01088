"""Read NIC counter dumps: ``ethtool -S <netdev>`` (mlx5) and ``perfquery [-x]`` (InfiniBand PMA).

Names stay as the tools print them (Linux mlx5 ``counters.rst``; IBA PortCounters via ``perfquery(8)``): ``rx_prio3_pause``,
``PortXmitData``... Mind the units: ``PortXmitData``/``PortRcvData`` count **4-byte words**
(:func:`pma_data_bytes` converts); ethtool byte counters are bytes.

Examples
--------
>>> parse_ethtool_stats('''NIC statistics:
...      rx_prio3_pause: 1523
...      tx_bytes_phy: 9000''')
{'rx_prio3_pause': 1523, 'tx_bytes_phy': 9000}
>>> c = parse_perfquery('''# Port counters: Lid 7 port 1 (CapMask: 0x1400)
... CounterSelect2:..................0x00
... PortXmitData:....................6465317''')
>>> c["PortXmitData"], pma_data_bytes(c["PortXmitData"]), c["CounterSelect2"]
(6465317, 25861268, 0)
"""

from __future__ import annotations

import re

from gpuwait.telemetry.errors import TelemetryFormatError

PMA_WORD_BYTES = 4
_ETHTOOL_HEADER = re.compile(r"^\s*NIC statistics:\s*$")
#: a counter line; drivers with per-queue counters prefix them with the queue, "[0]: rx_bytes: N" (bnx2x,
#: bnxt_en) or "rxq0: rx_bytes: N" (be2net), kept in the name so a queue's counter never stands for the port's
ETHTOOL_LINE = re.compile(r"^\s+(?P<name>(?:(?:\[\d+\]|[A-Za-z]+\d+):\s)?[A-Za-z0-9_\[\]\.\-]+):\s+(?P<value>-?\d+)\s*$")
_PERFQUERY_LINE = re.compile(r"^(?P<name>[A-Za-z][A-Za-z0-9_]*):\.*\s*(?P<value>\S+)\s*$")
#: the header of every perfquery(8) block: ``# Port counters``, ``# Port extended counters`` (-x) and the named
#: attribute blocks, ``# PortRcvErrorDetails counters`` (-E), ``# PortXmitDiscardDetails counters`` (-D) ...
PERFQUERY_BLOCK = r"#\s*Port\w*(?: extended)? counters:"
#: a block's header with the LID and port it reports (the file sniffer reads the block pattern alone)
PERFQUERY_HEADER = re.compile(PERFQUERY_BLOCK + r"\s*Lid (\d+) port (\d+)", re.IGNORECASE)


def pma_data_bytes(words: int) -> int:
    """Bytes from a ``PortXmitData``/``PortRcvData`` (or sysfs ``port_*_data``) count of 4-byte words."""
    return int(words) * PMA_WORD_BYTES


def skipped_summary(source: str, bad: list[tuple[int, str]], expected: str) -> str:
    """One warning for a file's unreadable lines: how many, and the first by number and text."""
    lineno, line = bad[0]
    return (f"{source}: {len(bad)} unreadable line(s) skipped, the first line {lineno}: {line.strip()[:100]!r} "
            f"(expected {expected})")


def _finish(counters: dict[str, int], bad: list[tuple[int, str]], source: str, expected: str, hint: str,
            skipped: list[str] | None) -> dict[str, int]:
    """The counters read; unreadable lines skipped and reported once (in ``skipped``), or the error
    when there is no list to report them in or nothing was readable."""
    if bad and (skipped is None or not counters):
        lineno, line = bad[0]
        more = f" ({len(bad)} unreadable lines, no counter read)" if not counters and len(bad) > 1 else ""
        raise TelemetryFormatError(f"{source} line {lineno}: cannot read {line.strip()[:100]!r}{more}; expected {expected}",
                                   hint=hint)
    if not counters:
        raise TelemetryFormatError(f"{source}: no counters found; expected {expected}")
    if bad:
        assert skipped is not None  # bad lines without a list to report them in raised above
        skipped.append(skipped_summary(source, bad, expected))
    return counters


_ETHTOOL_EXPECTED = "'NIC statistics:' and lines '     <counter>: <integer>' (e.g. '     rx_prio3_pause: 1523')"
_PERFQUERY_EXPECTED = "lines like 'PortXmitData:....................36298026860928'"


def parse_ethtool_stats(text: str, *, source: str = "ethtool -S output", skipped: list[str] | None = None) -> dict[str, int]:
    """Counters of an ``ethtool -S <netdev>`` dump, in the order printed.

    The ``NIC statistics:`` header is optional (a ``grep`` of the dump is accepted); counter lines
    are indented ``name: integer``; ``#`` lines are skipped. A repeated name keeps its last value.
    With ``skipped`` (a list), lines that cannot be read (a dump cut short, a line mangled in a copy)
    are left out and reported there as one warning naming the file, how many and the first.

    Raises
    ------
    TelemetryFormatError
        For a line that is neither the header nor a counter (without ``skipped``), or when no counter is found.
    """
    counters: dict[str, int] = {}
    bad: list[tuple[int, str]] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip() or _ETHTOOL_HEADER.match(raw) or raw.lstrip().startswith("#"):
            continue  # '#' lines are not ethtool's: notes people add to saved dumps
        m = ETHTOOL_LINE.match(raw if raw[:1].isspace() else " " + raw)
        if m is None:
            bad.append((lineno, raw))
            continue
        counters[m["name"]] = int(m["value"])
    return _finish(counters, bad, source, _ETHTOOL_EXPECTED, "pass the output of `ethtool -S <netdev>` unchanged", skipped)


def parse_perfquery(text: str, *, source: str = "perfquery output", skipped: list[str] | None = None) -> dict[str, int]:
    """Counters of one ``perfquery`` or ``perfquery -x`` block (``Name:....value``), PMA names.

    Hex values (``CounterSelect:...0x0000``) are read as integers. The ``# Port counters`` header
    is optional; ``#`` lines are skipped. With ``skipped`` (a list), unreadable lines are left out
    and reported there as one warning (see :func:`parse_ethtool_stats`).

    Raises
    ------
    TelemetryFormatError
        For an unreadable line (without ``skipped``), a counter printed twice (several blocks in one
        text: split them) or no counter at all.
    """
    counters: dict[str, int] = {}
    bad: list[tuple[int, str]] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue  # the '# Port counters: Lid 7 port 1 ...' header, or a note
        m = _PERFQUERY_LINE.match(line)
        try:
            value = int(m["value"], 0) if m is not None else None
        except ValueError:
            value = None
        if m is None or value is None:
            bad.append((lineno, raw))
            continue
        if m["name"] in counters:
            raise TelemetryFormatError(f"{source} line {lineno}: {m['name']} appears twice; expected one perfquery "
                                       "block (one port) per text", hint="save each port's perfquery output to its own file")
        counters[m["name"]] = value
    return _finish(counters, bad, source, _PERFQUERY_EXPECTED,
                   "pass the output of `perfquery [-x] <lid> <port>` unchanged", skipped)


def ethtool_prometheus_name(counter: str) -> str:
    """node_exporter's name for an ethtool counter (``--collector.ethtool``, node_exporter ``collector/ethtool_linux.go``).

    >>> ethtool_prometheus_name("rx_prio3_pause"), ethtool_prometheus_name("tx_pause_ctrl_phy")
    ('node_ethtool_received_prio3_pause', 'node_ethtool_transmitted_pause_ctrl_phy')
    """
    name = re.sub(r"[^a-z0-9_]", "_", counter.lower())
    name = re.sub(r"(^|_)rx(?=_|$)", r"\1received", name)
    name = re.sub(r"(^|_)tx(?=_|$)", r"\1transmitted", name)
    return f"node_ethtool_{name}"
