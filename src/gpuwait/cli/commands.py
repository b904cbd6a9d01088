"""Commands: demo, run, route, validate, schema."""

from __future__ import annotations

import json
from importlib import resources

import numpy as np
import typer
from rich.console import Console

from gpuwait.cli.common import JSON_OPTION, SERVERS_OPTION, load_cluster, load_scenario, looks_like_file
from gpuwait.cli.output import Output
from gpuwait.cli.workload_cmds import emit_workload, simulate, write_reports
from gpuwait.engine.flow_run import FlowRun
from gpuwait.errors import GpuwaitError, SpecError
from gpuwait.report.flows import (
    comparison_table,
    flow_rows,
    flows_table,
    hot_links,
    hot_links_table,
    link_timeline,
    routing_label,
    run_summary,
    uplink_loads,
    uplink_table,
)
from gpuwait.runner.traffic import check_scenario, run_traffic
from gpuwait.spec import RoutingSpec, Scenario, validate_data
from gpuwait.spec.load import read_yaml
from gpuwait.topology import Network, build_topology
from gpuwait.transport import resolve_transport
from gpuwait.units import format_rate, format_size, format_time


def _run_document(scenario: Scenario, runs: list[FlowRun]) -> dict:
    return {
        "scenario": scenario.name,
        "cluster": runs[0].topo.name,
        "runs": [_run_entry(r) for r in runs],
    }


def _run_entry(run: FlowRun) -> dict:
    hottest = hot_links(run, 10)
    return {"summary": run_summary(run), "hot_links": hottest, "flows": flow_rows(run),
            "link_timeline": link_timeline(run, [run.topo.link_id(h["link"]) for h in hottest])}


def _sending_leaf(run: FlowRun) -> str | None:
    """The leaf whose uplinks carry the most bytes: where ECMP collisions show first."""
    topo = run.topo
    up = topo.uplinks(1)
    if not len(up):
        return None
    bytes_by_leaf = np.bincount(topo.link_src[up], weights=run.link_bytes[up], minlength=topo.n_nodes)
    leaf = int(np.argmax(bytes_by_leaf))
    return topo.node_name[leaf] if bytes_by_leaf[leaf] > 0 else None


def _render_runs(console: Console, scenario: Scenario, runs: list[FlowRun], flows_limit: int) -> None:
    base = runs[0]
    console.print(f"[bold]{scenario.name}[/] on [bold]{base.topo.name}[/]: {base.topo.n_servers} servers, "
                  f"{base.topo.n_gpus} GPUs, {len(base.flows)} flows, {format_size(float(base.flows.size_bytes.sum()))} "
                  f"over {base.transport.name}")
    if len(runs) > 1:
        console.print(comparison_table([run_summary(r) for r in runs]))
    leaf = _sending_leaf(base)
    if leaf is not None:
        for run in runs:
            console.print(uplink_table(run.labels.get("name", routing_label(run)), uplink_loads(run, leaf)))
    console.print(flows_table(flow_rows(base), flows_limit))
    console.print(hot_links_table(hot_links(base, 10)))


def _demo_scenario() -> Scenario:
    text = resources.files("gpuwait.data").joinpath("demo-training.yaml").read_text()
    import yaml

    return validate_data(Scenario, yaml.safe_load(text), source="embedded demo scenario")


def register(app: typer.Typer) -> None:
    @app.command()
    def demo(report: str = typer.Option("gpuwait-report", "--report", metavar="DIR",
                                        help="Directory for the HTML report, Perfetto traces and Parquet tables."),
             json_out: bool = JSON_OPTION) -> None:
        """Train a 70B-class model on 64 DGX H100 servers, on RoCEv2 with ECMP and on InfiniBand with
        adaptive routing side by side: where each step's time goes and how long the GPUs wait.

        Writes `DIR/report.html` (open it in a browser), one Perfetto trace per case and Parquet tables.

        Example: `gpuwait demo`, then open `gpuwait-report/report.html`
        """
        scenario = _demo_scenario()
        results = simulate(scenario, None, not json_out)
        paths = write_reports(results, report, scenario.name)
        emit_workload(Output(json_out), scenario, results, paths)

    @app.command()
    def run(scenario_file: str = typer.Argument(..., metavar="SCENARIO.yaml", help="Scenario file."),
            steps: int | None = typer.Option(None, "--steps", min=1, help="Training steps to simulate (default: the file's)."),
            report: str | None = typer.Option(None, "--report", metavar="DIR",
                                              help="Write the HTML report, Perfetto traces and Parquet tables here."),
            flows_limit: int = typer.Option(20, "--flows", help="Flows to list in the table (traffic scenarios)."),
            engine: str = typer.Option("flow", "--engine", metavar="flow|packet",
                                       help="Traffic scenarios: 'flow' (fluid, max-min) or 'packet' (queues, PFC, ECN, DCQCN, credits)."),
            json_out: bool = JSON_OPTION) -> None:
        """Simulate a scenario and its variants.

        A scenario with a `workload:` runs training or inference steps: the breakdown of the step
        (compute, exposed communication, waiting on data, on stragglers, pipeline bubble), MFU, the
        same step on an ideal network, the collectives and the hottest links. A scenario with
        `traffic:` runs its flows: completion times and link loads.

        Examples: `gpuwait run examples/dp-only.yaml --report out/`, `gpuwait run examples/ecmp-collision.yaml`,
        `gpuwait run examples/ecmp-collision.yaml --engine packet`
        """
        if engine not in ("flow", "packet"):
            raise SpecError(f"--engine: got {engine!r}; expected flow or packet")
        scenario = load_scenario(scenario_file)
        out = Output(json_out)
        if scenario.workload is not None:
            if engine == "packet":
                raise SpecError("--engine packet: runs `traffic:` scenarios only; this one has a `workload:`",
                                hint="training and inference steps run on the flow engine")
            results = simulate(scenario, steps, not json_out)
            paths = write_reports(results, report, scenario.name) if report else []
            emit_workload(out, scenario, results, paths)
            return
        if steps is not None or report is not None:
            raise SpecError("--steps/--report: the scenario has no workload; expected a `workload:` section",
                            hint="they apply to training and inference scenarios")
        if engine == "packet":
            packet_runs = run_traffic(scenario, "packet")
            doc = {"scenario": scenario.name, "cluster": packet_runs[0].topo.name, "engine": "packet",
                   "runs": [{"summary": run_summary(r), "hot_links": hot_links(r, 10), "flows": flow_rows(r),
                             "fct_s": r.fct_percentiles_s(), "counters": r.totals()} for r in packet_runs]}

            def render_packets(console: Console) -> None:
                if len(packet_runs) > 1:
                    console.print(comparison_table([run_summary(r) for r in packet_runs]))
                for r in packet_runs:
                    t, fct = r.totals(), r.fct_percentiles_s()
                    console.print(f"[bold]{r.labels.get('name', routing_label(r))}[/]: FCT p50 {format_time(fct['p50'])}, "
                                  f"p99 {format_time(fct['p99'])}, p99.9 {format_time(fct['p99.9'])}; "
                                  f"pause frames {t[f'rx_prio{r.params.data_priority}_pause']:,.0f} "
                                  f"(paused {format_time(t['paused_s'])}), ECN marks {t['ecn_marked_packets']:,.0f}, "
                                  f"CNPs {t['np_cnp_sent']:,.0f}, drops {t['PortXmitDiscards']:,.0f}, "
                                  f"retransmitted {t['retransmitted_packets']:,.0f}, out_of_sequence {t['out_of_sequence']:,.0f}")
                console.print(flows_table(flow_rows(packet_runs[0]), flows_limit))
                console.print(hot_links_table(hot_links(packet_runs[0], 10)))

            out.emit(doc, render_packets)
            return
        runs = run_traffic(scenario)
        out.emit(_run_document(scenario, runs), lambda c: _render_runs(c, scenario, runs, flows_limit))

    @app.command()
    def route(cluster: str = typer.Argument(..., metavar="PRESET|FILE", help="A preset name or a cluster/scenario file."),
              src: str | None = typer.Option(None, "--src", help="Source node, e.g. s0.gpu0."),
              dst: str | None = typer.Option(None, "--dst", help="Destination node, e.g. s4.gpu0."),
              top: int = typer.Option(15, "--top", min=1, help="Links to list for a flow set."),
              servers: int | None = SERVERS_OPTION,
              routing: str | None = typer.Option(None, "--routing", help="ecmp, static, adaptive or spray (default: the cluster's)."),
              qps: int | None = typer.Option(None, "--qps", min=1, help="QPs per connection."),
              seed: int | None = typer.Option(None, "--seed", min=0, help="ECMP hash seed."),
              json_out: bool = JSON_OPTION) -> None:
        """Show the links one flow crosses, or the load a scenario's flows put on each link.

        With --src and --dst: the path of each QP hop by hop, with the share of its bytes. Without
        them: the bytes and flows each network link gets from the scenario's traffic, before any simulation.

        Examples: `gpuwait route rocev2-400g-2tier --servers 8 --src s0.gpu0 --dst s4.gpu0 --qps 4`,
        `gpuwait route examples/ecmp-collision.yaml`
        """
        spec = load_cluster(cluster, servers)
        updates = {k: v for k, v in (("kind", routing), ("qps_per_connection", qps), ("seed", seed)) if v is not None}
        routing_spec = validate_data(RoutingSpec, spec.routing.model_dump() | updates, source="--routing/--qps/--seed")
        topo = build_topology(spec)
        from gpuwait.routing import route_flows

        if (src is None) != (dst is None):
            raise SpecError("--src/--dst: got only one of them; expected both (one flow) or neither (a scenario's flows)")
        if src is None:
            if not looks_like_file(cluster):
                raise SpecError(f"--src/--dst: {cluster} is a preset and has no traffic; expected --src and --dst",
                                hint="or give a scenario file to see the load of its flows")
            _route_flow_set(cluster, topo, routing_spec, resolve_transport(spec.transport).name, top, json_out)
            return

        transport_name = resolve_transport(spec.transport).name
        routes = route_flows(topo, routing_spec, [src], [dst], transport=transport_name)
        rows = []
        for row in range(routes.n_rows):
            links, weights = routes.ordered_links(row, topo)
            rows.append({"qp": int(routes.qp_index[row]), "udp_sport": int(routes.udp_sport[row]),
                         "latency_s": float(routes.path_latency_s[row]),
                         "hops": [{"link": topo.link_name(int(links[i])), "share": float(weights[i]),
                                   "capacity_Bps": float(topo.link_capacity_Bps[links[i]])} for i in range(len(links))]})
        doc = {"src": src, "dst": dst, "routing": routing_spec.model_dump(), "qps": rows}

        def render(console: Console) -> None:
            console.print(f"[bold]{src} -> {dst}[/] on {topo.name} ({routing_spec.kind}"
                          f"{', ' + routing_spec.hash if routing_spec.kind == 'ecmp' else ''})")
            for r in rows:
                kind = {"rocev2": "UDP source port", "tcp": "TCP source port"}.get(transport_name)
                port = f", {kind} {r['udp_sport']}" if kind and r["udp_sport"] >= 0 else ""
                console.print(f"  QP {r['qp']}{port}, path latency {format_time(r['latency_s'])}:")
                for hop in r["hops"]:
                    share = "" if hop["share"] == 1 else f"  ({hop['share']:.1%} of the bytes)"
                    console.print(f"    {hop['link']}  [dim]{format_rate(hop['capacity_Bps'])}[/]{share}")

        Output(json_out).emit(doc, render)

    @app.command()
    def validate(file: str = typer.Argument(..., metavar="FILE", help="Scenario file to check."),
                 json_out: bool = JSON_OPTION) -> None:
        """Check a scenario file: every problem with its YAML path, value and what was expected.

        Example: `gpuwait validate examples/ecmp-collision.yaml`
        """
        try:
            scenario = validate_data(Scenario, read_yaml(file), source=file)
            runs = check_scenario(scenario)
        except GpuwaitError as err:
            if json_out:
                problems = getattr(err, "problems", None) or [str(err)]
                Output(True).emit({"file": file, "valid": False, "problems": problems, "hint": err.hint}, lambda c: None)
                raise typer.Exit(1) from None
            raise
        Output(json_out).emit(
            {"file": file, "valid": True} | runs,
            lambda c: c.print(f"[green]ok[/] {file}: {runs['servers']} servers, {runs['gpus']} GPUs, "
                              + (f"workload {runs['workload']}, " if "workload" in runs else f"{runs['flows']} flows, ")
                              + f"{runs['routed_cases']} case(s) checked"))

    @app.command()
    def schema() -> None:
        """Print the JSON Schema of scenario files: every field, its unit, default and description."""
        Output().text(json.dumps(Scenario.model_json_schema(), indent=2))


def _route_flow_set(scenario_file: str, topo, routing_spec: RoutingSpec, transport: str, top: int, json_out: bool) -> None:
    """Per-link load of a scenario's flows as routed (flows and bytes per link), hottest first."""
    from gpuwait.routing import route_flows
    from gpuwait.workload.traffic import traffic_flows

    scenario = load_scenario(scenario_file)
    if not (scenario.traffic.flows or scenario.traffic.patterns):
        raise SpecError(f"{scenario_file}: no traffic to route", hint="pass --src and --dst for one flow")
    flows = traffic_flows(topo, scenario.traffic)
    routes = route_flows(topo, routing_spec, flows.src, flows.dst, transport=transport)
    bytes_per_link = routes.bytes_per_link(flows.size_bytes)
    flows_per_link = routes.flows_per_link(topo.n_links)
    network = np.flatnonzero((topo.link_network != Network.SERVER) & (bytes_per_link > 0))
    order = network[np.lexsort((network, -bytes_per_link[network]))][:top]
    rows = [{"link": topo.link_name(int(link)), "flows": int(flows_per_link[link]), "bytes": float(bytes_per_link[link]),
             "capacity_Bps": float(topo.link_capacity_Bps[link]),
             "seconds_at_line_rate": float(bytes_per_link[link] / topo.link_capacity_Bps[link])} for link in order]
    doc = {"scenario": scenario.name, "routing": routing_spec.model_dump(), "flows": len(flows), "links": rows}

    def render(console: Console) -> None:
        from rich.table import Table

        table = Table(title=f"{scenario.name}: load per network link as routed ({routing_spec.kind})", title_justify="left")
        for col in ("link", "flows", "bytes", "time at line rate"):
            table.add_column(col, justify="left" if col == "link" else "right")
        for r in rows:
            table.add_row(r["link"], str(r["flows"]), format_size(r["bytes"]), format_time(r["seconds_at_line_rate"]))
        console.print(table)

    Output(json_out).emit(doc, render)
