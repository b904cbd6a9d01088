"""``gpuwait route``: the hops of one flow's QPs, or the load a scenario's flows put on each link."""

from __future__ import annotations

import typer
from rich.console import Console

from gpuwait.cli.common import JSON_OPTION, SERVERS_OPTION, options_named

CLUSTER_ARGUMENT = typer.Argument(..., metavar="PRESET|FILE", help="A preset name or a cluster/scenario file.")
SRC_OPTION = typer.Option(None, "--src", help="Source node, e.g. s0.gpu0.")
DST_OPTION = typer.Option(None, "--dst", help="Destination node, e.g. s4.gpu0.")
TOP_OPTION = typer.Option(15, "--top", min=1, help="Links to list for a flow set.")
ROUTING_OPTION = typer.Option(None, "--routing", help="ecmp, static, adaptive or spray (default: the cluster's).")
QPS_OPTION = typer.Option(None, "--qps", min=1, help="QPs per connection.")
SEED_OPTION = typer.Option(None, "--seed", min=0, help="ECMP hash seed.")


def route(cluster: str = CLUSTER_ARGUMENT, src: str | None = SRC_OPTION, dst: str | None = DST_OPTION,
          top: int = TOP_OPTION, servers: int | None = SERVERS_OPTION, routing: str | None = ROUTING_OPTION,
          qps: int | None = QPS_OPTION, seed: int | None = SEED_OPTION, json_out: bool = JSON_OPTION) -> None:
    """Show the links one flow crosses, or the load a scenario's flows put on each link.

    With --src and --dst: the path of each QP hop by hop, with the share of its bytes. Without
    them: the bytes and flows each network link gets from the scenario's traffic, before any simulation.

    Examples: `gpuwait route rocev2-400g-2tier --servers 8 --src s0.gpu0 --dst s4.gpu0 --qps 4`,
    `gpuwait route examples/ecmp-collision.yaml`
    """
    from gpuwait.cli.output import Output
    from gpuwait.errors import SpecError
    from gpuwait.runner.inputs import load_cluster, load_scenario, looks_like_file
    from gpuwait.runner.routes import flow_path_document, link_load_document, routing_with
    from gpuwait.topology import build_topology
    from gpuwait.transport import resolve_transport

    with options_named(preset="PRESET|FILE"):
        spec = load_cluster(cluster, servers)
    routing_spec = routing_with(spec.routing, routing, qps, seed)
    topo = build_topology(spec)
    if (src is None) != (dst is None):
        raise SpecError("--src/--dst: got only one of them; expected both (one flow) or neither (a scenario's flows)")
    transport = resolve_transport(spec.transport).name
    if src is None or dst is None:  # both None: the check above
        if not looks_like_file(cluster):
            raise SpecError(f"--src/--dst: {cluster} is a preset and has no traffic; expected --src and --dst",
                            hint="or give a scenario file to see the load of its flows")
        doc = link_load_document(topo, routing_spec, load_scenario(cluster), transport, top, source=cluster)
        Output(json_out).emit(doc, lambda c: _render_link_load(c, doc))
        return
    doc = flow_path_document(topo, routing_spec, src, dst, transport)
    Output(json_out).emit(doc, lambda c: _render_flow_path(c, doc, topo.name, transport))


def _render_flow_path(console: Console, doc: dict, cluster: str, transport: str) -> None:
    from gpuwait.units import format_rate, format_time

    routing = doc["routing"]
    console.print(f"[bold]{doc['src']} -> {doc['dst']}[/] on {cluster} ({routing['kind']}"
                  f"{', ' + routing['hash'] if routing['kind'] == 'ecmp' else ''})")
    if doc["source_port_note"] is not None:
        console.print(f"  [dim]note: {doc['source_port_note']}[/]")
    for r in doc["qps"]:
        port = f", {doc['source_port']} {r['udp_sport']}" if r["udp_sport"] is not None else ""
        console.print(f"  QP {r['qp']}{port}, path latency {format_time(r['latency_s'])}:")
        for hop in r["hops"]:
            share = "" if hop["share"] == 1 else f"  ({hop['share']:.1%} of the bytes)"
            console.print(f"    {hop['link']}  [dim]{format_rate(hop['capacity_Bps'])}[/]{share}")


def _render_link_load(console: Console, doc: dict) -> None:
    from rich.table import Table

    from gpuwait.units import format_size, format_time

    table = Table(title=f"{doc['scenario']}: load per network link as routed ({doc['routing']['kind']})",
                  title_justify="left")
    for col in ("link", "flows", "bytes", "time at line rate"):
        table.add_column(col, justify="left" if col == "link" else "right")
    for r in doc["links"]:
        table.add_row(r["link"], str(r["flows"]), format_size(r["bytes"]), format_time(r["seconds_at_line_rate"]))
    console.print(table)
