"""Routes before any simulation: the hops of one flow's QPs, and the load a scenario's flows put on
each network link as routed (what ``gpuwait route`` shows)."""

from __future__ import annotations

import numpy as np

from gpuwait.errors import SpecError
from gpuwait.routing import route_flows
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
#: ephemeral port. Other transports carry none a user could look up (InfiniBand routes by destination LID; the
#: routes hash a stand-in key there, which is the model's, not the wire's).
SOURCE_PORT_KIND: dict[str, str] = {"rocev2": "UDP source port", "tcp": "TCP source port"}


def flow_path_document(topo: Topology, routing: RoutingSpec, src: str, dst: str, transport: str) -> dict:
    """The path of each QP of one flow, hop by hop in path order, with the share of its bytes on each hop.

    ``udp_sport`` is None where the flow has no L4 source port: it stays inside a server, or its transport has
    none (:data:`SOURCE_PORT_KIND`).
    """
    routes = route_flows(topo, routing, [src], [dst], transport=transport)
    rows = []
    for row in range(routes.n_rows):
        links, weights = routes.ordered_links(row, topo)
        sport = int(routes.udp_sport[row])  # the routes' -1 for "none" stays inside them
        has_port = sport >= 0 and transport in SOURCE_PORT_KIND
        rows.append({"qp": int(routes.qp_index[row]), "udp_sport": sport if has_port else None,
                     "latency_s": float(routes.path_latency_s[row]),
                     "hops": [{"link": topo.link_name(int(links[i])), "share": float(weights[i]),
                               "capacity_Bps": float(topo.link_capacity_Bps[links[i]])} for i in range(len(links))]})
    return {"src": src, "dst": dst, "routing": routing.model_dump(), "qps": rows}


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
