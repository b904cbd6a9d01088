"""``gpuwait telemetry export``: a simulated run's telemetry under real exporter names."""

from __future__ import annotations

import typer

from gpuwait.cli.common import JSON_OPTION, MAX_MEMORY_OPTION
from gpuwait.cli.faults_help import INJECT_OPTION

FORMAT_OPTION = typer.Option("prometheus", "--format", help="prometheus (text exposition) or parquet.")
OUT_OPTION = typer.Option(None, "--out", metavar="FILE",
                          help="Write here (default: stdout for prometheus, telemetry.parquet).")
STEPS_OPTION = typer.Option(None, "--steps", min=1, max=1_000_000, help="Training steps to simulate.")
SCRAPE_OPTION = typer.Option(None, "--scrape-interval", metavar="TIME",
                             help="Also write every network port's byte counter sampled at this interval (e.g. 10ms, "
                                  "at least 1ms) and the collectives' time windows: diagnose then reads each "
                                  "collective's bytes per port (ECMP collisions within one collective).")


def export(scenario_file: str = typer.Argument(..., metavar="SCENARIO.yaml", help="A scenario with a training workload."), format: str = FORMAT_OPTION,
           out_path: str | None = OUT_OPTION, inject: list[str] | None = INJECT_OPTION,
           steps: int | None = STEPS_OPTION, max_memory: str | None = MAX_MEMORY_OPTION,
           scrape_interval: str | None = SCRAPE_OPTION, json_out: bool = JSON_OPTION) -> None:
    """Simulate a scenario and write its telemetry under real exporter names (DCGM, mlx5/PMA port
    counters, node_exporter, NCCL timings, step phases). With --json (and --out for prometheus, whose
    text is otherwise the output): what was written, as JSON.

    Example: `gpuwait telemetry export examples/dp-only.yaml --inject slow-gpu:s3.gpu2 > scrape.prom`
    """
    from gpuwait.cli.output import Output
    from gpuwait.diagnosis.telemetry import export_metrics
    from gpuwait.errors import SpecError
    from gpuwait.faults import parse_inject
    from gpuwait.report.files import output_file, write_atomically
    from gpuwait.runner.cost import check_scenario_cost, parse_max_memory
    from gpuwait.runner.inputs import load_scenario
    from gpuwait.runner.workload import simulate_workload
    from gpuwait.telemetry.parquet import write_metrics_parquet
    from gpuwait.telemetry.phases import MIN_SCRAPE_INTERVAL_S
    from gpuwait.telemetry.prometheus import to_prometheus_text
    from gpuwait.units import parse_time_s

    interval_s = None
    if scrape_interval is not None:
        try:
            interval_s = parse_time_s(scrape_interval, allow_zero=False)
        except SpecError as err:
            raise SpecError(f"--scrape-interval: {err}", hint="a time such as 10ms or 1s") from None
        if interval_s < MIN_SCRAPE_INTERVAL_S:
            raise SpecError(f"--scrape-interval: got {scrape_interval}; expected at least 1ms (Prometheus timestamps "
                            "are whole milliseconds)")
    if format not in ("prometheus", "parquet"):
        raise SpecError(f"--format: got {format!r}; expected prometheus or parquet")
    target = output_file(out_path if out_path is not None else "telemetry.parquet") if (
        out_path is not None or format == "parquet") else None  # refused before the run, not after it
    if json_out and target is None:
        raise SpecError("--json: the prometheus text goes to stdout; expected --out FILE with --json",
                        hint="--json prints what was written: the file, its format and its samples")
    scenario = load_scenario(scenario_file)
    max_memory_bytes = parse_max_memory(max_memory)
    check_scenario_cost(scenario, max_memory_bytes, steps)
    run = simulate_workload(scenario, steps, faults=[parse_inject(t) for t in (inject or [])],
                            max_memory_bytes=max_memory_bytes)
    metrics = export_metrics(run, scrape_interval_s=interval_s)
    output = Output(json_out)
    if target is None:  # prometheus text to stdout: itself the machine format
        output.text(to_prometheus_text(metrics))
        return
    if format == "prometheus":
        text = to_prometheus_text(metrics)
        path = write_atomically(target, lambda p: p.write_text(text))
    else:
        path = write_atomically(target, lambda p: write_metrics_parquet(metrics, p))

    def render(console) -> None:
        if format == "parquet":  # a prometheus file is written silently, as a redirect of stdout would be
            console.print(f"wrote {path} ({len(metrics)} samples)", markup=False)

    output.emit({"file": str(path), "format": format, "samples": len(metrics)}, render)
