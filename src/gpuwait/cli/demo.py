"""``gpuwait demo``: the embedded training scenario, RoCEv2/ECMP beside InfiniBand/adaptive routing."""

from __future__ import annotations

import typer

from gpuwait.cli.common import JSON_OPTION

REPORT_OPTION = typer.Option("gpuwait-report", "--report", metavar="DIR",
                             help="Directory for the HTML report, Perfetto traces and Parquet tables.")


def demo(report: str = REPORT_OPTION, json_out: bool = JSON_OPTION) -> None:
    """Train a 70B-class model on 64 DGX H100 servers, on RoCEv2 with ECMP and on InfiniBand with
    adaptive routing side by side: where each step's time goes and how long the GPUs wait.

    Writes `DIR/report.html` (open it in a browser), one Perfetto trace per case and Parquet tables.

    Example: `gpuwait demo`, then open `gpuwait-report/report.html`
    """
    from gpuwait.cli.output import Output
    from gpuwait.cli.progress import simulate
    from gpuwait.cli.views import render_workload
    from gpuwait.report.files import report_directory, write_reports
    from gpuwait.report.results import WorkloadResult
    from gpuwait.runner.inputs import demo_scenario

    report_directory(report)  # refused before the run, not after it
    scenario = demo_scenario()
    results = simulate(scenario, None, not json_out)
    result = WorkloadResult(scenario.name, results, write_reports(results, report, scenario.name))
    Output(json_out).emit(result.to_dict(), lambda c: render_workload(c, result))
