"""Routes before any simulation: the hops of one flow's QPs, and the load a scenario's flows put on
each network link as routed (what ``gpuwait route`` shows)."""

from __future__ import annotations

import numpy as np

from gpuwait.errors import SpecError
from gpuwait.routing import route_flows
from gpuwait.routing.paths import EPHEMERAL_PORT_TRANSPORTS
from gpuwait.spec import RoutingSpec, Scenario, validate_data
from gpuwait.topology import Network
from gpuwait.topology.model import Topology
from gpuwait.workload.traffic import traffic_flows


def routing_with(routing: RoutingSpec, kind: str | None = None, qps: int | None = None,
                 seed: int | None = None) -> RoutingSpec:
    """``routing`` with the given router kind, QPs per connection and hash seed (``None`` keeps the field)."""
    updates = {k: v for k, v in (("kind", kind), ("qps_per_connection", qps), ("seed", seed)) if v is not None}
    return validate_data(RoutingSpec, routing.model_dump() | updates, source="--routing/--qps/--seed")


#: The L4 source port a switch hashes, by transport: RoCEv2's UDP port (from the QP numbers) and kernel TCP's
#: ephemeral port. InfiniBand carries none a user could look up (it routes by destination LID; the routes hash a
#: stand-in key there, which is the model's, not the wire's): not shown.
SOURCE_PORT_KIND: dict[str, str] = {"rocev2": "UDP source port", "tcp": "TCP source port"}
NO_SOURCE_PORT = frozenset({"infiniband"})


def source_port(transport: str) -> tuple[str | None, str | None]:
    """What ``gpuwait route`` calls the source port the routes hash for ``transport`` (None: not shown), and a
    note where that port is the model's stand-in rather than one on the wire: the other transports (GPUDirect-TCPX
    and -TCPXO, EFA, Slingshot) are hashed as :data:`~gpuwait.routing.paths.EPHEMERAL_PORT_TRANSPORTS` says.

    >>> source_port("rocev2"), source_port("infiniband")
    (('UDP source port', None), (None, None))
    >>> source_port("tcpx")[1]
    "tcpx is hashed as RoCEv2 is, by a UDP source port from the QP numbers (the model's stand-in for tcpx's own headers)"
    """
    if transport in NO_SOURCE_PORT:
        return None, None
    if transport in SOURCE_PORT_KIND:
        return SOURCE_PORT_KIND[transport], None
    if transport in EPHEMERAL_PORT_TRANSPORTS:
        kind, how = "TCP source port", "as kernel TCP is, by an ephemeral source port"
    else:
        kind, how = "UDP source port", "as RoCEv2 is, by a UDP source port from the QP numbers"
    return kind, f"{transport} is hashed {how} (the model's stand-in for {transport}'s own headers)"


def flow_path_document(topo: Topology, routing: RoutingSpec, src: str, dst: str, transport: str) -> dict:
    """The path of each QP of one flow, hop by hop in path order, with the share of its bytes on each hop.

    ``udp_sport`` is None where the flow has no L4 source port: it stays inside a server, or its transport has
    none (:func:`source_port`); ``source_port`` names it and ``source_port_note`` says where it is the model's.
    """
    kind, note = source_port(transport)
    routes = route_flows(topo, routing, [src], [dst], transport=transport)
    rows = []
    for row in range(routes.n_rows):
        links, weights = routes.ordered_links(row, topo)
        sport = int(routes.udp_sport[row])  # the routes' -1 for "none" stays inside them
        has_port = sport >= 0 and kind is not None
        rows.append({"qp": int(routes.qp_index[row]), "udp_sport": sport if has_port else None,
                     "latency_s": float(routes.path_latency_s[row]),
                     "hops": [{"link": topo.link_name(int(links[i])), "share": float(weights[i]),
                               "capacity_Bps": float(topo.link_capacity_Bps[links[i]])} for i in range(len(links))]})
    ported = any(r["udp_sport"] is not None for r in rows)
    return {"src": src, "dst": dst, "routing": routing.model_dump(), "source_port": kind if ported else None,
            "source_port_note": note if ported else None, "qps": rows}


def link_load_document(topo: Topology, routing: RoutingSpec, scenario: Scenario, transport: str, top: int,
                       source: str) -> dict:
    """Per-link load of a scenario's flows as routed (flows and bytes per network link), hottest first.

    ``source`` names the scenario in the error raised when it has no traffic.
    """
    if not (scenario.traffic.flows or scenario.traffic.patterns):
        raise SpecError(f"{source}: no traffic to route", hint="pass --src and --dst for one flow")
    flows = traffic_flows(topo, scenario.traffic)
    routes = route_flows(topo, routing, flows.src, flows.dst, transport=transport)
    bytes_per_link = routes.bytes_per_link(flows.size_bytes)
    flows_per_link = routes.flows_per_link(topo.n_links)
    network = np.flatnonzero((topo.link_network != Network.SERVER) & (bytes_per_link > 0))
    order = network[np.lexsort((network, -bytes_per_link[network]))][:top]
    rows = [{"link": topo.link_name(int(link)), "flows": int(flows_per_link[link]), "bytes": float(bytes_per_link[link]),
             "capacity_Bps": float(topo.link_capacity_Bps[link]),
             "seconds_at_line_rate": float(bytes_per_link[link] / topo.link_capacity_Bps[link])} for link in order]
    return {"scenario": scenario.name, "routing": routing.model_dump(), "flows": len(flows), "links": rows}
