"""``gpuwait perf``: nccl-tests tables predicted for a cluster, and set beside a real log."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from gpuwait.cli.common import JSON_OPTION, load_cluster
from gpuwait.cli.output import Output
from gpuwait.collectives.communicator import Communicator
from gpuwait.collectives.ncclenv import parse_env
from gpuwait.collectives.nccltests import (
    COLLECTIVES,
    Device,
    RunConfig,
    get_collective,
    make_row,
    parse_size_arg,
    size_and_count,
    size_sweep,
)
from gpuwait.errors import SpecError
from gpuwait.fabric.perf import CollectivePredictor
from gpuwait.report.nccltests import format_table
from gpuwait.telemetry.nccltests_log import parse_nccl_tests_log
from gpuwait.topology import build_topology, resolve_server
from gpuwait.transport import resolve_transport


def _predictor(cluster: str, servers: int | None, gpus: int | None, env_pairs: list[str]) -> CollectivePredictor:
    spec = load_cluster(cluster, servers)
    topo = build_topology(spec)
    env = dict(os.environ)
    for pair in env_pairs:
        name, eq, value = pair.partition("=")
        if not eq or not name:
            raise SpecError(f"--env: got {pair!r}; expected NAME=VALUE, e.g. NCCL_ALGO=Ring")
        env[name] = value
    comm = Communicator.world(topo, gpus_per_server=gpus)
    return CollectivePredictor.create(comm, parse_env(env), spec.routing, resolve_transport(spec.transport))


def _devices(predictor: CollectivePredictor) -> list[Device]:
    comm, topo = predictor.comm, predictor.comm.topo
    local = comm.local_gpu_index(np.arange(comm.n_ranks))
    return [Device(r, f"s{int(comm.rank_server[r])}", int(local[r]), topo.spec.server.gpu_model)
            for r in range(comm.n_ranks)]


def register(app: typer.Typer) -> None:
    @app.command()
    def perf(op: str = typer.Argument(..., metavar="OP", help=f"Collective: {', '.join(COLLECTIVES)}."),
             cluster: str = typer.Option("dgx-h100", "--cluster", help="A preset name or a cluster/scenario file."),
             servers: int | None = typer.Option(None, "--servers", min=1, help="Servers (default: the preset's)."),
             min_bytes: str = typer.Option("32M", "-b", "--minbytes", help="Smallest size (K/M/G suffixes, binary)."),
             max_bytes: str = typer.Option("32M", "-e", "--maxbytes", help="Largest size."),
             step_factor: int = typer.Option(1, "-f", "--stepfactor", min=1, help="Multiply the size by this each step."),
             step_bytes: str = typer.Option("1M", "-i", "--stepbytes", help="Add this each step when -f is 1."),
             iters: int = typer.Option(20, "-n", "--iters", min=1, help="Timed iterations (printed in the header)."),
             warmup: int = typer.Option(1, "-w", "--warmup_iters", min=0, help="Warmup iterations (header only)."),
             gpus: int | None = typer.Option(None, "-g", "--ngpus", min=1, help="GPUs per server (default: all)."),
             check: int = typer.Option(1, "-c", "--check", min=0, help="0 prints N/A in #wrong, as nccl-tests -c 0."),
             redop: str = typer.Option("sum", "-o", "--op", help="Reduction op (printed)."),
             dtype: str = typer.Option("float", "-d", "--datatype", help="Datatype: float, half, bfloat16, int8..."),
             root: int = typer.Option(0, "-r", "--root", min=0, help="Root rank of broadcast/reduce."),
             env: list[str] = typer.Option([], "--env", help="NCCL variable NAME=VALUE (repeatable); the environment counts too."),
             report_algo: bool = typer.Option(False, "--report-algo", help="Add the algorithm/protocol/channels chosen per size."),
             compare: Path | None = typer.Option(None, "--compare", help="A real nccl-tests log: predict its sizes and compare."),
             json_out: bool = JSON_OPTION) -> None:
        """Predict an nccl-tests table (`all_reduce_perf -b 8 -e 8G -f 2 -g 8`) for a cluster.

        Times come from NCCL's tuning model (algorithm, protocol, latency) and the flow engine on the
        real topology and routing (bandwidth). With --compare LOG the log's collective, sizes and rank
        count are predicted and set beside the measured busbw and time.

        Example: `gpuwait perf all_reduce -b 8 -e 8G -f 2 --cluster dgx-h100`
        """
        if compare is not None:
            _compare(op, compare, cluster, servers, gpus, env, json_out)
            return
        coll = get_collective(op)
        lo, hi = parse_size_arg(min_bytes), parse_size_arg(max_bytes)
        if lo > hi:
            raise SpecError(f"-b: got {lo} bytes, larger than -e {hi}; expected -b <= -e")
        predictor = _predictor(cluster, servers, gpus, env)
        n = predictor.comm.n_ranks
        rows, choices, rounded = [], [], []
        for size in size_sweep(lo, hi, step_factor if step_factor > 1 else None, parse_size_arg(step_bytes)):
            sc = size_and_count(coll.name, size, dtype, n)
            if sc.rounded:
                rounded.append((size, sc.size_bytes))
            est = predictor.estimate(coll.name, sc.size_bytes)
            rows.append(make_row(coll.name, size, dtype, n, oop_time_s=est.time_s, ip_time_s=est.time_s,
                                 redop=redop if coll.has_redop else None, root=root if coll.has_root else None,
                                 wrong=0 if check else None))
            choices.append({"size_bytes": sc.size_bytes, "algorithm": est.algorithm, "protocol": est.protocol,
                            "channels": est.n_channels, "limited_by": est.limited_by, "latency_s": est.latency_s})
        config = RunConfig(n_gpus=gpus or predictor.comm.ppn, min_bytes=lo, max_bytes=hi, step_factor=step_factor,
                           step_bytes=parse_size_arg(step_bytes), warmup_iters=warmup, iters=iters, validation=check)
        doc = {"collective": coll.name, "n_ranks": n, "cluster": predictor.comm.topo.name,
               "rows": [r.__dict__ for r in rows], "choices": choices,
               "rounded_sizes": [{"requested": a, "run": b} for a, b in rounded]}

        def render(console: Console) -> None:
            text = format_table(rows, config=config, devices=_devices(predictor), program=coll.program)
            out = text.splitlines()
            if report_algo:
                out.append("# size  algorithm  protocol  channels  limited by")
                out += [f"# {c['size_bytes']:>12}  {c['algorithm']:>8}  {c['protocol']:>6}  {c['channels']:>3}  {c['limited_by']}"
                        for c in choices]
            if rounded:
                out.append(f"# note: {len(rounded)} size(s) rounded down to whole {dtype} elements per rank, as nccl-tests does")
            print("\n".join(out))

        Output(json_out).emit(doc, render)


def _compare(op: str, log_path: Path, cluster: str, servers: int | None, gpus: int | None, env: list[str],
             json_out: bool) -> None:
    try:
        text = log_path.read_text()
    except OSError as err:
        raise SpecError(f"--compare: cannot read {log_path} ({err.strerror})", hint="check the path") from None
    log = parse_nccl_tests_log(text)
    collective = log.collective or get_collective(op).name
    if log.n_ranks is None:
        raise SpecError(f"--compare: {log_path} does not say how many ranks ran", hint="keep the '# Using devices' lines")
    per_server = gpus or (log.config.n_gpus if log.config and log.config.n_gpus > 1 else None)
    gpus_in_server = resolve_server(load_cluster(cluster, 1).server).gpus
    per_server = per_server or min(log.n_ranks, gpus_in_server)
    if log.n_ranks % per_server:
        raise SpecError(f"--compare: {log.n_ranks} ranks do not fill servers of {per_server} GPUs", hint="pass -g")
    predictor = _predictor(cluster, servers or log.n_ranks // per_server, per_server, env)
    if predictor.comm.n_ranks != log.n_ranks:
        raise SpecError(f"--compare: the log has {log.n_ranks} ranks but the cluster gives {predictor.comm.n_ranks}",
                        hint="use --servers and -g to match the run")
    rows = []
    for row in log.rows:
        est = predictor.estimate(collective, row.size_bytes)
        pred = make_row(collective, row.size_bytes, row.dtype, log.n_ranks, oop_time_s=est.time_s, ip_time_s=est.time_s)
        rows.append({"size_bytes": row.size_bytes, "measured_time_us": row.oop_time_us, "predicted_time_us": pred.oop_time_us,
                     "measured_busbw_GBps": row.oop_busbw_GBps, "predicted_busbw_GBps": pred.oop_busbw_GBps,
                     "time_error_pct": 100 * (pred.oop_time_us - row.oop_time_us) / row.oop_time_us,
                     "algorithm": est.algorithm, "protocol": est.protocol})
    doc = {"log": str(log_path), "collective": collective, "n_ranks": log.n_ranks, "rows": rows}

    def render(console: Console) -> None:
        table = Table(title=f"{collective} on {log.n_ranks} ranks: {log_path.name} vs {predictor.comm.topo.name}",
                      title_justify="left")
        for col in ("size (B)", "measured us", "predicted us", "time err", "measured busbw", "predicted busbw", "choice"):
            table.add_column(col, justify="right")
        for r in rows:
            table.add_row(str(r["size_bytes"]), f"{r['measured_time_us']:.2f}", f"{r['predicted_time_us']:.2f}",
                          f"{r['time_error_pct']:+.1f} %", f"{r['measured_busbw_GBps']:.2f}", f"{r['predicted_busbw_GBps']:.2f}",
                          f"{r['algorithm']}/{r['protocol']}")
        console.print(table)

    Output(json_out).emit(doc, render)
