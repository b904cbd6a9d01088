"""``gpuwait inventory import``: a cluster file from what a real cluster's operators already collect."""

from __future__ import annotations

import typer

from gpuwait.cli.common import JSON_OPTION

IBNET_OPTION = typer.Option(None, "--ibnetdiscover", metavar="FILE", help="`ibnetdiscover` output (InfiniBand): switches, HCAs, cables with width and speed.")
LLDP_OPTION = typer.Option(None, "--lldp", metavar="DIR|FILE", help="`lldpctl -f json` per host (RoCE), named HOST.json: a directory of them, or one file (repeatable); switches' own files add switch-to-switch cables.")
NCCL_OPTION = typer.Option(None, "--nccl-topo", metavar="DIR|FILE", help="NCCL_TOPO_DUMP_FILE XML per host (HOST.xml): GPUs, NICs, PCIe switches, NVLink -> the server.")
SLURM_OPTION = typer.Option(None, "--slurm", metavar="FILE", help="Slurm topology.conf (tree): the cabling when nothing else gives it, else the hosts to keep.")
LINKS_OPTION = typer.Option(None, "--links", metavar="FILE", help="Explicit node/link file (YAML or CSV a,a_port,b,b_port,speed; HOST/NIC for a host end).")
MAP_OPTION = typer.Option(None, "--node-name-map", metavar="FILE", help="GUID -> name lines (ibnetdiscover/opensm node-name-map) for nodes whose description has no name.")
HOSTS_OPTION = typer.Option(None, "--hosts", metavar="GLOB", help="Keep only the hosts matching this glob (repeatable), e.g. 'gpu*'.")
TEMPLATE_OPTION = typer.Option("dgx-h100", "--server-template", metavar="NAME", help="Server template when no --nccl-topo is given (`gpuwait topo --list`).")
NAME_OPTION = typer.Option("imported", "--name", help="Cluster name written in the file.")
OUT_OPTION = typer.Option(None, "--out", metavar="FILE", help="Write the cluster file here (default: print it).")
#: --out's spelling in 0.1.0, as calibrate, telemetry export and sweep never spelled it: kept working for
#: one release, out of --help, so a script written for it does not break
OLD_OUT_OPTION = typer.Option(None, "--output", metavar="FILE", hidden=True)


def import_(ibnetdiscover: str | None = IBNET_OPTION, lldp: list[str] | None = LLDP_OPTION,
            nccl_topo: str | None = NCCL_OPTION, slurm: str | None = SLURM_OPTION, links: str | None = LINKS_OPTION,
            node_name_map: str | None = MAP_OPTION, hosts: list[str] | None = HOSTS_OPTION,
            server_template: str = TEMPLATE_OPTION, name: str = NAME_OPTION, output: str | None = OUT_OPTION,
            old_output: str | None = OLD_OUT_OPTION, json_out: bool = JSON_OPTION) -> None:
    """Write a cluster file from ibnetdiscover, LLDP, NCCL topology dumps, Slurm topology.conf or a node/link file.

    Real names are kept: hosts, switches, NIC devices (`node01.mlx5_0`), GUIDs and `lidN` as aliases,
    switch ports as `SWITCH[PORT]`. Every command takes the file and the names (`--inject
    link-degrade:ib-leaf-03->ib-spine-01`, `route --src node01.gpu0`). See docs/inventory.md.

    Examples: `gpuwait inventory import --ibnetdiscover ib.txt --nccl-topo dumps/ --out cluster.yaml`,
    `gpuwait inventory import --slurm topology.conf --server-template dgx-a100`
    """
    from pathlib import Path

    import yaml

    from gpuwait.cli.output import Output
    from gpuwait.errors import SpecError
    from gpuwait.inventory import Sources, import_inventory

    if old_output is not None:
        if output is not None:
            raise SpecError("--output: the old spelling of --out; expected one of them, not both")
        typer.echo("note: --output is now --out (as in calibrate, telemetry export and sweep); "
                   "--output goes in the next release", err=True)
        output = old_output

    files = [str(f) for item in lldp or [] for f in (sorted(Path(item).glob("*.json")) if Path(item).is_dir() else [Path(item)])]
    result = import_inventory(Sources(ibnetdiscover=ibnetdiscover, lldp=files, nccl_topo=nccl_topo, slurm=slurm,
                                      links=links, node_name_map=node_name_map, hosts=list(hosts or []),
                                      server_template=server_template, name=name))
    header = "".join(f"# {line}\n" for line in [
        "written by `gpuwait inventory import` from " + ", ".join(result.summary["sources"]),
        *(f"note: {n}" for n in result.notes)])
    text = header + yaml.safe_dump(result.document, sort_keys=False, width=120, default_flow_style=None)
    if output:
        Path(output).write_text(text)
    elif not json_out:
        typer.echo(text, nl=False)
        return
    doc = result.summary | {"file": output, "notes": result.notes}
    Output(json_out).emit(doc, lambda c: _render(c, doc))


def _render(console, doc: dict) -> None:
    tiers = ", ".join(f"{n} {t}" for t, n in doc["switches_by_tier"].items())
    console.print(f"[green]wrote[/] {doc['file']}: {doc['hosts']} hosts ({doc['gpus']} GPUs, {doc['nics_per_host']} NIC(s) each), "
                  f"switches {tiers}, {doc['cables']} cables")
    for note in doc["notes"]:
        console.print(f"  note: {note}")
