"""Commands: diagnose, telemetry export."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gpuwait.cli.common import JSON_OPTION, SERVERS_OPTION, load_cluster, load_scenario
from gpuwait.cli.output import Output
from gpuwait.diagnose.report import diagnosis_dict
from gpuwait.diagnose.run import Diagnosis, diagnose_observation, diagnose_scenario
from gpuwait.errors import SpecError
from gpuwait.faults import FAULT_KINDS, parse_inject

_KINDS_HELP = "; ".join(
    f"{k.name} ({k.target}" + (", " + ", ".join(k.params) if k.params else "") + ")" for k in FAULT_KINDS.values())

INJECT_OPTION = typer.Option(None, "--inject", metavar="KIND:TARGET[:PARAM=VALUE,...]",
                             help=f"Inject a fault (repeatable). Kinds (target, parameters): {_KINDS_HELP}.")


def render_diagnosis(console: Console, diagnosis: Diagnosis, limit: int = 8) -> None:
    step, base = diagnosis.step_time_s, diagnosis.baseline_step_time_s
    head = (f"[bold]{escape(diagnosis.case)}[/]: {diagnosis.measure} {step * 1e3:.3f} ms" if step
            else f"[bold]{escape(diagnosis.case)}[/]")
    if base:
        head += f", healthy model {base * 1e3:.1f} ms ({100 * (step - base) / step:+.1f} % of the step lost)"
    console.print(head)
    if not diagnosis.findings:
        console.print("no findings")
    table = Table(title="Findings, by the gain of their fix (direct evidence first when close)", title_justify="left")
    for column in ("#", "severity", "kind", "component", "gain if fixed", "evidence"):
        table.add_column(column, overflow="fold")
    for i, f in enumerate(diagnosis.findings[:limit], 1):
        gain = f.gain_fraction
        color = {"critical": "red", "warning": "yellow"}.get(f.severity, "dim")
        evidence = ", ".join(f"{k}={v}" for k, v in f.evidence.items())
        table.add_row(str(i), f"[{color}]{f.severity}[/]", f.kind, escape(f.component),
                      "-" if gain is None else f"{100 * gain:.1f} %", escape(evidence))
    if diagnosis.findings:
        console.print(table)
    for i, f in enumerate(diagnosis.findings[:3], 1):
        console.print(f"[bold]{i}. {f.kind} on {escape(f.component)}[/]: {escape(f.explanation)}\n   fix: {escape(f.fix)}")
    if diagnosis.missing:
        console.print("[dim]not available: " + "; ".join(diagnosis.missing) + "[/]")


def register(app: typer.Typer) -> None:
    telemetry_app = typer.Typer(help="Telemetry under real exporter names.", no_args_is_help=True)
    app.add_typer(telemetry_app, name="telemetry")

    @app.command()
    def diagnose(scenario_file: str | None = typer.Argument(None, metavar="[SCENARIO.yaml]",
                                                             help="A scenario with a training workload."),
                 inject: list[str] | None = INJECT_OPTION,
                 telemetry: str | None = typer.Option(None, "--telemetry", metavar="DIR",
                                                      help="Diagnose imported telemetry (Prometheus text, Parquet, NCCL_DEBUG logs, nccl-tests logs, ethtool -S, perfquery)."),
                 cluster: str | None = typer.Option(None, "--cluster", metavar="PRESET|FILE",
                                                    help="With --telemetry: the cluster the telemetry comes from."),
                 servers: int | None = SERVERS_OPTION,
                 steps: int | None = typer.Option(None, "--steps", min=1, help="Training steps to simulate."),
                 no_gain: bool = typer.Option(False, "--no-gain", help="Skip re-simulating the fixes."),
                 report: str | None = typer.Option(None, "--report", metavar="DIR",
                                                   help="Write the HTML report with the findings here."),
                 json_out: bool = JSON_OPTION) -> None:
        """Name the root cause of lost step time, where it is, the evidence, and a fix whose gain is
        measured by simulating the scenario again with the fix applied.

        A scenario with only `traffic:` runs on the packet engine and is diagnosed from its pauses,
        ECN marks and queues (head-of-line blocking, PFC storms, ECN thresholds above PFC's).

        Examples: `gpuwait diagnose examples/dp-only.yaml --inject link-degrade:leaf0->spine21:factor=0.25`,
        `gpuwait diagnose --telemetry scrapes/ --cluster rocev2-400g-2tier --servers 16`
        """
        out = Output(json_out)
        if telemetry is not None:
            if scenario_file is not None or inject:
                raise SpecError("--telemetry: expected either a scenario (with --inject) or --telemetry DIR --cluster, not both")
            if cluster is None:
                raise SpecError("--telemetry: expected --cluster PRESET|FILE naming the cluster the telemetry comes from")
            from gpuwait.diagnose.telemetry import observe_telemetry
            from gpuwait.telemetry.bundle import load_telemetry_dir
            from gpuwait.topology import build_topology

            topo = build_topology(load_cluster(cluster, servers))
            diagnosis = diagnose_observation(observe_telemetry(load_telemetry_dir(telemetry), topo), case=telemetry)
            out.emit(diagnosis_dict(diagnosis), lambda c: render_diagnosis(c, diagnosis))
            return
        if scenario_file is None:
            raise SpecError("diagnose: expected SCENARIO.yaml, or --telemetry DIR --cluster PRESET|FILE")
        scenario = load_scenario(scenario_file)
        if scenario.workload is None:
            # a traffic scenario: queues, pauses and marks tell, so it runs packet by packet
            if inject:
                raise SpecError("--inject: applies to training workloads; expected a scenario with a `workload:`")
            from gpuwait.diagnose.packet import diagnose_packets
            from gpuwait.runner.traffic import run_traffic

            packet_diagnosis = diagnose_packets(run_traffic(scenario, "packet")[0], measure_gain=not no_gain)
            out.emit(diagnosis_dict(packet_diagnosis), lambda c: render_diagnosis(c, packet_diagnosis))
            return
        faults = [parse_inject(text) for text in (inject or [])]
        diagnosis = diagnose_scenario(scenario, faults, steps=steps, measure_gain=not no_gain)
        paths = []
        if report:
            from gpuwait.cli.workload_cmds import write_reports

            paths = write_reports(diagnosis.run.results, report, scenario.name, diagnoses=[diagnosis])
        document = diagnosis_dict(diagnosis) | {"report": [str(p) for p in paths]}
        out.emit(document, lambda c: render_diagnosis(c, diagnosis))

    @telemetry_app.command("export")
    def telemetry_export(scenario_file: str = typer.Argument(..., metavar="SCENARIO.yaml"),
                         format: str = typer.Option("prometheus", "--format", help="prometheus (text exposition) or parquet."),
                         out_path: str | None = typer.Option(None, "--out", metavar="FILE",
                                                             help="Write here (default: stdout for prometheus, telemetry.parquet)."),
                         inject: list[str] | None = INJECT_OPTION,
                         steps: int | None = typer.Option(None, "--steps", min=1, help="Training steps to simulate.")) -> None:
        """Simulate a scenario and write its telemetry under real exporter names (DCGM, mlx5/PMA port
        counters, node_exporter, NCCL timings, step phases).

        Example: `gpuwait telemetry export examples/dp-only.yaml --inject slow-gpu:s3.gpu2 > scrape.prom`
        """
        if format not in ("prometheus", "parquet"):
            raise SpecError(f"--format: got {format!r}; expected prometheus or parquet")
        from gpuwait.diagnose.telemetry import export_metrics
        from gpuwait.runner.workload import simulate_workload
        from gpuwait.telemetry.parquet import write_metrics_parquet
        from gpuwait.telemetry.prometheus import to_prometheus_text

        scenario = load_scenario(scenario_file)
        run = simulate_workload(scenario, steps, faults=[parse_inject(t) for t in (inject or [])])
        metrics = export_metrics(run)
        output = Output(False)
        if format == "prometheus":
            text = to_prometheus_text(metrics)
            if out_path:
                Path(out_path).write_text(text)
            else:
                output.text(text)
        else:
            path = write_metrics_parquet(metrics, out_path or "telemetry.parquet")
            output.console.print(f"wrote {path} ({len(metrics)} samples)")
