"""Read the rings and trees NCCL prints at ``NCCL_DEBUG=INFO`` (format strings of NCCL v2.30.7-1
``src/graph/rings.cc``, ``Channel %02d/%02d : %d %d ...``, and ``src/init.cc``, ``Trees [%d] %d/%d/%d->%d->%d ...``).

* ``host:pid:tid [dev] NCCL INFO Channel 00/08 :    0   7   6   5 ...`` is ring 0 of 8, ranks in the
  order data flows (each rank sends to the next, the last to the first); NCCL prints it once, from
  rank 0, and long rings are cut at the line's end.
* ``host:pid:tid [dev] NCCL INFO Trees [0] 3/-1/-1->0->-1 [1] -1/-1/-1->0->3`` is, per channel, the
  rank's up to three children (``-1``: none), the rank itself, and its parent (``-1``: the root).
  NCCL 2.4 and 2.5 wrote it parent first, ``Trees [0] 22->23->-1/-1/-1`` (read too).

With the ``[send] via NET/IB/<k>`` connection lines (:mod:`~gpuwait.telemetry.nccl_debug`) this says
which ranks talk to which over the network, and so over which NIC.

Examples
--------
>>> g = parse_nccl_graph('''
... h1:1:2 [0] NCCL INFO Channel 00/02 :    0   1   3   2
... h1:1:2 [0] NCCL INFO Trees [0] 1/-1/-1->0->-1 [1] -1/-1/-1->0->2''')
>>> g.rings[0], sorted(g.ring_neighbours())[:2], g.trees[(0, 1)]
((0, 1, 3, 2), [(0, 1), (1, 3)], (2, ()))
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpuwait.telemetry.nccl_debug import NCCL_LINE

_RING = re.compile(r"^Channel (?P<ch>\d+)/(?P<n>\d+) :(?P<ranks>(?:\s+\d+)+)$")
_TREES = re.compile(r"^Trees((?:\s*\[\d+\] -?\d+/-?\d+/-?\d+->\d+->-?\d+)+)")
_TREE = re.compile(r"\[(?P<ch>\d+)\] (?P<c0>-?\d+)/(?P<c1>-?\d+)/(?P<c2>-?\d+)->(?P<rank>\d+)->(?P<parent>-?\d+)")
#: NCCL 2.4 and 2.5 printed each node parent first, ``[c] up->rank->down0/down1/down2`` (2.5 adds
#: ``|`` and the same for its second tree; the first is read)
_TREES_OLD = re.compile(r"^Trees((?:\s*\[\d+\] -?\d+->\d+->-?\d+/-?\d+/-?\d+(?:\|-?\d+->\d+->-?\d+/-?\d+/-?\d+)?)+)")
_TREE_OLD = re.compile(r"\[(?P<ch>\d+)\] (?P<parent>-?\d+)->(?P<rank>\d+)->(?P<c0>-?\d+)/(?P<c1>-?\d+)/(?P<c2>-?\d+)")


@dataclass(frozen=True)
class NcclGraph:
    """Rings by channel (rank order) and trees by (rank, channel): (parent or -1, children)."""

    rings: dict[int, tuple[int, ...]] = field(default_factory=dict)
    n_channels: int | None = None
    trees: dict[tuple[int, int], tuple[int, tuple[int, ...]]] = field(default_factory=dict)
    hosts: dict[int, str] = field(default_factory=dict)   # rank -> host, for ranks that printed a tree line

    def ring_neighbours(self) -> set[tuple[int, int]]:
        """(sender, receiver) pairs of every ring (a cut ring closes on its last printed rank)."""
        pairs = set()
        for ranks in self.rings.values():
            pairs |= {(a, b) for a, b in zip(ranks, ranks[1:] + ranks[:1]) if a != b}
        return pairs


def parse_nccl_graph(text: str) -> NcclGraph:
    """Rings and trees of a ``NCCL_DEBUG=INFO`` log (other lines are skipped; none found is an empty graph)."""
    rings: dict[int, tuple[int, ...]] = {}
    trees: dict[tuple[int, int], tuple[int, tuple[int, ...]]] = {}
    hosts: dict[int, str] = {}
    n_channels = None
    for raw in text.splitlines():
        m = NCCL_LINE.search(raw)
        if m is None or m["level"] != "INFO":
            continue
        msg = m["msg"]
        if (r := _RING.match(msg)) is not None:
            rings.setdefault(int(r["ch"]), tuple(int(x) for x in r["ranks"].split()))
            n_channels = int(r["n"])
        elif (t := _TREES.match(msg) or _TREES_OLD.match(msg)) is not None:
            for node in (_TREE if t.re is _TREES else _TREE_OLD).finditer(t[1]):
                rank = int(node["rank"])
                children = tuple(int(node[c]) for c in ("c0", "c1", "c2") if int(node[c]) >= 0)
                trees[(rank, int(node["ch"]))] = (int(node["parent"]), children)
                hosts[rank] = m["host"]
    return NcclGraph(rings, n_channels, trees, hosts)
