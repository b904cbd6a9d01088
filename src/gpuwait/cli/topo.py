"""``gpuwait topo``: what a cluster is made of, as a table, JSON, DOT or Slurm topology.conf."""

from __future__ import annotations

import typer
from rich.console import Console

from gpuwait.cli.common import JSON_OPTION, SERVERS_OPTION, options_named

_FORMATS = ("table", "json", "dot", "slurm")

CLUSTER_ARGUMENT = typer.Argument(None, metavar="PRESET|FILE", help="A preset name or a cluster/scenario file.")
FORMAT_OPTION = typer.Option("table", "--format", help="table, json, dot (Graphviz) or slurm (topology.conf).")
LIST_OPTION = typer.Option(False, "--list", help="List presets and server templates.")


def topo(cluster: str = CLUSTER_ARGUMENT, servers: int | None = SERVERS_OPTION, fmt: str = FORMAT_OPTION,
         list_presets: bool = LIST_OPTION, json_out: bool = JSON_OPTION) -> None:
    """Describe a cluster: counts, bisection bandwidth, oversubscription per tier, diameter.

    Also exports Graphviz DOT (--format dot) and a Slurm topology.conf (--format slurm).

    Examples: `gpuwait topo dgx-h100-superpod --servers 64`,
    `gpuwait topo rocev2-400g-2tier --servers 16 --format slurm > topology.conf`
    """
    from gpuwait.cli.output import Output
    from gpuwait.errors import SpecError
    from gpuwait.runner.inputs import load_cluster
    from gpuwait.topology import PRESET_DOCS, SERVER_TEMPLATES, build_topology, export, summary

    out = Output(json_out or fmt == "json")
    if list_presets:
        out.emit({"presets": PRESET_DOCS, "templates": {k: v.model_dump() for k, v in SERVER_TEMPLATES.items()}},
                 _render_list)
        return
    if cluster is None:
        raise SpecError("PRESET|FILE: missing; expected a preset name or a file", hint="`gpuwait topo --list` shows presets")
    if fmt not in _FORMATS:
        raise SpecError(f"--format: got {fmt!r}; expected one of {', '.join(_FORMATS)}")
    if json_out and fmt in ("dot", "slurm"):
        raise SpecError(f"--json: not available with --format {fmt}, which prints its own text format")
    with options_named(preset="PRESET|FILE"):
        spec = load_cluster(cluster, servers)
    topology = build_topology(spec)
    if fmt == "dot":
        out.text(export.to_dot(topology))
    elif fmt == "slurm":
        out.text(export.to_slurm_topology_conf(topology))
    else:
        doc = summary.summarize(topology).to_dict()
        out.emit(doc, lambda c: _render_summary(c, doc))


def _render_list(console: Console) -> None:
    from rich.table import Table

    from gpuwait.topology import PRESET_DOCS, SERVER_TEMPLATES
    from gpuwait.topology.presets import DEFAULT_SERVERS
    from gpuwait.units import format_rate

    table = Table(title="Cluster presets (use with --servers N)", title_justify="left")
    table.add_column("preset")
    table.add_column("servers if not given", justify="right")
    table.add_column("what")
    for name, doc in PRESET_DOCS.items():
        table.add_row(name, str(DEFAULT_SERVERS.get(name, 32)), doc)
    console.print(table)
    table = Table(title="Server templates (server: {template: NAME})", title_justify="left")
    for col in ("template", "GPUs", "NVLink/GPU", "NICs", "port speed"):
        table.add_column(col)
    for name, spec in SERVER_TEMPLATES.items():
        nvlink = format_rate(spec.nvlink_bandwidth, bits=False) if spec.nvlink_bandwidth else "none (PCIe)"
        # a server with no compute NIC has no port to count or rate (its template keeps the default speed)
        nics, speed = ((f"{spec.nics} x {spec.nic_ports} port", format_rate(spec.nic_speed)) if spec.nics
                       else ("none", "-"))
        table.add_row(name, f"{spec.gpus}x {spec.gpu_model}", nvlink, nics, speed)
    console.print(table)


def _render_summary(console: Console, doc: dict) -> None:
    from rich.table import Table

    from gpuwait.units import format_rate

    table = Table(title=f"{doc['name']}", title_justify="left", show_header=False)
    table.add_column("what")
    table.add_column("value")
    for key, value in doc.items():
        label = key.replace("_", " ")
        if key.endswith("_Bps"):
            label = label[:-4]
            value = "-" if value is None else format_rate(value, bits="port_speed" in key)
        elif isinstance(value, dict):
            value = ", ".join(f"{k} {v}" for k, v in value.items() if v) or "-"
        elif value is None:
            value = "-"
        table.add_row(label, str(value))
    console.print(table)
