"""``gpuwait perf``: nccl-tests tables predicted for a cluster, and set beside a real log."""

from __future__ import annotations

from pathlib import Path

import typer

from gpuwait.cli.common import JSON_OPTION, MAX_MEMORY_OPTION, SERVERS_OPTION, as_option, options_named
from gpuwait.collectives.nccltests import COLLECTIVES

OP_ARGUMENT = typer.Argument(..., metavar="OP", help=f"Collective: {', '.join(COLLECTIVES)}.")
CLUSTER_OPTION = typer.Option("dgx-h100", "--cluster", help="A preset name or a cluster/scenario file.")
MIN_OPTION = typer.Option("32M", "-b", "--minbytes",
                          help="Smallest size, read as nccl-tests reads it: bytes, or a K/M/G suffix in powers of "
                               "1024 (only its first letter counts: 8G = 8GB = 8GiB = 2^33 bytes).")
MAX_OPTION = typer.Option("32M", "-e", "--maxbytes", help="Largest size (as -b).")
FACTOR_OPTION = typer.Option(1, "-f", "--stepfactor", min=1, help="Multiply the size by this each step.")
STEP_OPTION = typer.Option("1M", "-i", "--stepbytes", help="Add this each step when -f is 1 (as -b).")
ITERS_OPTION = typer.Option(20, "-n", "--iters", min=1, help="Timed iterations (printed in the header).")
WARMUP_OPTION = typer.Option(1, "-w", "--warmup_iters", min=0, help="Warmup iterations (header only).")
GPUS_OPTION = typer.Option(None, "-g", "--ngpus", min=1,
                           help="GPUs per server (default: all; with --compare, as the log's '# Rank' lines place the ranks).")
THREAD_GPUS_OPTION = typer.Option(
    1, "--gpus-per-thread", min=1,
    help="GPUs one host thread drives, as nccl-tests -g in one process (default 1: a process per GPU, "
         "mpirun -np N); every call then costs at least this many launches.")
CHECK_OPTION = typer.Option(1, "-c", "--check", min=0, help="0 prints N/A in #wrong, as nccl-tests -c 0.")
REDOP_OPTION = typer.Option("sum", "-o", "--op", help="Reduction op (printed).")
DTYPE_OPTION = typer.Option("float", "-d", "--datatype", help="Datatype: float, half, bfloat16, int8...")
ROOT_OPTION = typer.Option(0, "-r", "--root", min=0, help="Root rank of broadcast/reduce.")
ENV_OPTION = typer.Option([], "--env", help="NCCL variable NAME=VALUE (repeatable); the environment counts too.")
ALGO_OPTION = typer.Option(False, "--report-algo", help="Add the algorithm/protocol/channels chosen per size.")
COMPARE_OPTION = typer.Option(None, "--compare", help="A real nccl-tests log (its stdout, or the JSON file of -J): predict its sizes and set them beside each size's faster measured column.")
NCCL_VERSION_OPTION = typer.Option(
    None, "--nccl-version", metavar="X.Y.Z",
    help="Predict this NCCL release's algorithm/protocol choices (2.18 or later; one newer than 2.30.7 is "
         "predicted as 2.30.7, with a note; default: the cluster's nccl.version, with --compare the version the log "
         "prints, else 2.30.7).")


# SweepArgs' fields as perf's options: an error of the Python API names the field, the command line the option
SWEEP_OPTIONS = {"min_bytes": "-b / --minbytes", "max_bytes": "-e / --maxbytes", "step_bytes": "-i / --stepbytes",
                 "dtype": "-d / --datatype", "redop": "-o / --op", "root": "-r"}

# the options of a predicted sweep that a --compare run takes from the log, or does not have (no memory estimate)
SWEEP_ONLY = ("min_bytes", "max_bytes", "step_factor", "step_bytes", "iters", "warmup", "check", "redop", "dtype",
              "root", "report_algo", "gpus_per_thread", "max_memory")


def given_options(ctx: typer.Context, names: tuple[str, ...]) -> list[str]:
    """Those of the parameters ``names`` the user set (on the command line or by an environment variable),
    spelled as `--help` prints them."""
    given = []
    for param in ctx.command.params:
        source = ctx.get_parameter_source(param.name) if param.name in names else None
        if source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT"):
            given.append("/".join(param.opts))
    return given


def perf(ctx: typer.Context, op: str = OP_ARGUMENT, cluster: str = CLUSTER_OPTION, servers: int | None = SERVERS_OPTION,
         min_bytes: str = MIN_OPTION, max_bytes: str = MAX_OPTION, step_factor: int = FACTOR_OPTION,
         step_bytes: str = STEP_OPTION, iters: int = ITERS_OPTION, warmup: int = WARMUP_OPTION,
         gpus: int | None = GPUS_OPTION, check: int = CHECK_OPTION, redop: str = REDOP_OPTION,
         dtype: str = DTYPE_OPTION, root: int = ROOT_OPTION, env: list[str] = ENV_OPTION,
         report_algo: bool = ALGO_OPTION, compare: Path | None = COMPARE_OPTION,
         nccl_version: str | None = NCCL_VERSION_OPTION, gpus_per_thread: int = THREAD_GPUS_OPTION,
         max_memory: str | None = MAX_MEMORY_OPTION, json_out: bool = JSON_OPTION) -> None:
    """Predict an nccl-tests table (`all_reduce_perf -b 8 -e 8G -f 2 -g 8`) for a cluster.

    Times come from NCCL's tuning model (algorithm, protocol, latency) and the flow engine on the
    real topology and routing (bandwidth). With --compare LOG the log's sizes and rank count are
    predicted (OP is the collective the log ran) and set beside the measured busbw and time (each size's faster column,
    out-of-place or in-place: a one-off cost in the timed loop only adds time), as the NCCL release
    the log prints (or --nccl-version) would choose; the sweep's own options (-b, -e, -f, -i, -n, -w, -c,
    -o, -d, -r, --report-algo, --gpus-per-thread, --max-memory) are refused with it. Before any fabric run the memory the sweep needs is
    estimated (route rows and link entries of each algorithm NCCL would pick, see
    docs/performance.md), stated on a terminal and in --json (memory_estimate_bytes), and a sweep
    over --max-memory is refused.

    Example: `gpuwait perf all_reduce -b 8 -e 8G -f 2 --cluster dgx-h100`
    """
    from dataclasses import replace

    from gpuwait.cli.output import Output

    out = Output(json_out)
    if compare is not None:
        from gpuwait.errors import SpecError
        from gpuwait.report.perf import compare_log, comparison_table, summary_lines

        ignored = given_options(ctx, SWEEP_ONLY)
        if ignored:  # the log's sizes, datatype, root and GPUs per thread are compared: these would be dropped
            raise SpecError(f"--compare: got {', '.join(ignored)}; expected none of them: the log gives the sizes, "
                            "datatype, root and GPUs per thread, and a comparison has no memory estimate")

        with options_named(collective="OP", preset="--cluster"):
            comparison = compare_log(op, compare, cluster, servers, gpus, env, nccl_version)
        comparison = replace(comparison, nccl={**comparison.nccl, "source": as_option(comparison.nccl["source"])})

        def render(console) -> None:
            console.print(comparison_table(comparison))
            for line in summary_lines(comparison):
                console.print(line, markup=False, highlight=False)

        out.emit(comparison.to_dict(), render)
        return
    from gpuwait.report.perf import sweep_text
    from gpuwait.runner.cost import parse_max_memory
    from gpuwait.runner.perf import SweepArgs, estimated_sweep

    with options_named(**SWEEP_OPTIONS):
        args = SweepArgs(min_bytes, max_bytes, step_factor, step_bytes, iters, warmup, check, redop, dtype, root)
    max_memory_bytes = parse_max_memory(max_memory)

    def state(estimate) -> None:
        if not json_out:
            from gpuwait.cli.progress import state_estimate

            state_estimate(estimate, max_memory_bytes)

    with options_named(collective="OP", preset="--cluster", servers="--servers", sizes="-b / -e", **SWEEP_OPTIONS):
        sweep = estimated_sweep(op, args, cluster, servers, gpus, env, nccl_version, gpus_per_thread, max_memory_bytes,
                                state)
    sweep = replace(sweep, settings=[replace(s, source=as_option(s.source)) for s in sweep.settings])
    out.emit(sweep.to_dict(), lambda c: print(sweep_text(sweep, report_algo)))
