"""``gpuwait demo``: the embedded training scenario, RoCEv2/ECMP, RoCEv2/adaptive and InfiniBand/adaptive routing."""

from __future__ import annotations

import typer

from gpuwait.cli.common import JSON_OPTION

REPORT_OPTION = typer.Option("gpuwait-report", "--report", metavar="DIR",
                             help="Directory for the HTML report, Perfetto traces and Parquet tables.")


def demo(report: str = REPORT_OPTION, json_out: bool = JSON_OPTION) -> None:
    """Train a 70B-class model on 64 DGX H100 servers, changing one thing at a time: RoCEv2 with ECMP,
    RoCEv2 with adaptive routing, InfiniBand with adaptive routing. Opens with the conclusion (which
    change saves how much per step, and where), then where each step's time goes and how long the GPUs wait.

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
