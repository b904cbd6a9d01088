"""``gpuwait calibrate``: fit the collective model to a cluster's own nccl-tests logs."""

from __future__ import annotations

from pathlib import Path

import typer

from gpuwait.cli.common import JSON_OPTION, as_option, options_named

LOGS_ARGUMENT = typer.Argument(..., metavar="LOG",
                               help="nccl-tests logs (the stdout of e.g. all_reduce_perf, or the JSON file of -J).")
CLUSTER_OPTION = typer.Option(..., "--cluster", metavar="PRESET|FILE",
                              help="The cluster the logs ran on: a preset name or a cluster/scenario file.")
SERVERS_OPTION = typer.Option(None, "--servers", min=1, help="Servers the logs ran on (default: as the logs' '# Rank' "
                              "lines place the ranks when neither this nor -g is given, else the cluster's; a log of "
                              "another rank count: on the servers its ranks fill, as perf --compare places it).")
GPUS_OPTION = typer.Option(None, "-g", "--ngpus", min=1, help="GPUs per server the logs used (default: as the logs' "
                           "'# Rank' lines place the ranks when neither this nor --servers is given, else all).")
ENV_OPTION = typer.Option([], "--env", help="NCCL variable NAME=VALUE the logs ran with (repeatable).")
OUT_OPTION = typer.Option(None, "--out", metavar="FILE",
                          help="Write the calibrated cluster (the preset or file plus a `calibration:` section) here.")
NCCL_VERSION_OPTION = typer.Option(
    None, "--nccl-version", metavar="X.Y.Z",
    help="Predict the logs as this NCCL release (2.18 or later; default: the version each log prints, "
         "else the cluster's nccl.version, else 2.30.7), as perf --compare does.")
PARAMS_OPTION = typer.Option(None, "--params", metavar="a,b,...",
                             help="Parameters the selection may free (default: all): launch_latency_s, net_step_latency_s, "
                                  "intra_step_latency_s, net_message_overhead_s, nic_efficiency, nvlink_efficiency, net_step_cycle_s.")


def calibrate(logs: list[Path] = LOGS_ARGUMENT, cluster: str = CLUSTER_OPTION, servers: int | None = SERVERS_OPTION,
              gpus: int | None = GPUS_OPTION, env: list[str] = ENV_OPTION, out: Path | None = OUT_OPTION,
              params: str | None = PARAMS_OPTION, nccl_version: str | None = NCCL_VERSION_OPTION,
              json_out: bool = JSON_OPTION) -> None:
    """Fit the collective model's physical parameters to nccl-tests logs and write a calibrated cluster.

    Each log's collective and sizes are predicted on the cluster (as --servers and -g describe it; without
    them, as the logs' '# Rank' lines place the ranks, and a log of another rank count than the cluster's,
    e.g. logs of 2 and 4 nodes, on the servers its ranks fill), as the NCCL release the log prints (or
    --nccl-version), as `perf --compare` does. Starting from the model as shipped,
    forward selection frees a parameter (per-step
    latencies, per-message overhead, NIC and NVLink efficiency, step cycle) only if fitting it lowers the
    error on sizes the fit did not see; the others keep their shipped values. The error before (as
    shipped) and after is printed, cross-validated (leave-one-log-out with two or more logs, alternate
    sizes with one), with every candidate's held-out error. The --out file is accepted by `perf`, `run`
    and `diagnose` wherever the cluster was.

    Example: `gpuwait calibrate my-2node.log --cluster dgx-h100 --servers 2 --out my-cluster.yaml`
    """
    from dataclasses import replace

    from gpuwait.cli.output import Output
    from gpuwait.report.calibrate import closing_lines, error_table, params_table, run_calibrate, selection_table

    names = None if params is None else params.split(",")
    with options_named(preset="--cluster"):
        report = run_calibrate(logs, cluster, servers, gpus, env, names, out, nccl_version=nccl_version)
    logs_as_run = [replace(r, nccl_source=as_option(r.nccl_source)) for r in report.calibration.logs]
    report = replace(report, calibration=replace(report.calibration, logs=logs_as_run))

    def render(console) -> None:
        console.print(error_table(report))
        console.print(selection_table(report))
        console.print(params_table(report))
        for line in closing_lines(report):
            console.print(line, markup=False, highlight=False)

    Output(json_out).emit(report.to_dict(), render)
