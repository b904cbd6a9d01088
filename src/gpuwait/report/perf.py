"""Predicted nccl-tests runs as text, and set beside a real nccl-tests log (``gpuwait perf``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.table import Table

from gpuwait.collectives.nccltests import get_collective, make_row
from gpuwait.errors import SpecError
from gpuwait.report.nccltests import format_table
from gpuwait.runner.inputs import load_cluster
from gpuwait.runner.perf import PerfSweep, make_predictor
from gpuwait.telemetry.nccltests_log import parse_nccl_tests_log
from gpuwait.topology import resolve_server


def sweep_text(sweep: PerfSweep, report_algo: bool = False) -> str:
    """The nccl-tests stdout of a sweep; with ``report_algo``, the choice per size in ``#`` lines after it."""
    out = format_table(sweep.rows, config=sweep.config, devices=sweep.devices, program=sweep.collective.program)
    lines = out.splitlines()
    if report_algo:
        lines.append("# size  algorithm  protocol  channels  limited by")
        lines += [f"# {c['size_bytes']:>12}  {c['algorithm']:>8}  {c['protocol']:>6}  {c['channels']:>3}  {c['limited_by']}"
                  for c in sweep.choices]
    if sweep.rounded:
        lines.append(f"# note: {len(sweep.rounded)} size(s) rounded down to whole {sweep.dtype} elements per rank, "
                     "as nccl-tests does")
    return "\n".join(lines)


@dataclass(frozen=True, eq=False)
class PerfComparison:
    """A real nccl-tests log's sizes predicted on a cluster, beside the measured time and busbw."""

    log: Path
    collective: str
    n_ranks: int
    cluster: str
    rows: list[dict]

    def to_dict(self) -> dict:
        return {"log": str(self.log), "collective": self.collective, "n_ranks": self.n_ranks, "rows": self.rows}


def compare_log(op: str, log_path: Path, cluster: str, servers: int | None = None, gpus: int | None = None,
                env=()) -> PerfComparison:
    """Predict the collective, sizes and rank count of the nccl-tests log at ``log_path`` on ``cluster``."""
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
    predictor = make_predictor(cluster, servers or log.n_ranks // per_server, per_server, env)
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
    return PerfComparison(log_path, collective, log.n_ranks, predictor.comm.topo.name, rows)


def comparison_table(comparison: PerfComparison) -> Table:
    """Measured against predicted time and busbw per size, with NCCL's choice."""
    c = comparison
    table = Table(title=f"{c.collective} on {c.n_ranks} ranks: {c.log.name} vs {c.cluster}", title_justify="left")
    for col in ("size (B)", "measured us", "predicted us", "time err", "measured busbw", "predicted busbw", "choice"):
        table.add_column(col, justify="right")
    for r in c.rows:
        table.add_row(str(r["size_bytes"]), f"{r['measured_time_us']:.2f}", f"{r['predicted_time_us']:.2f}",
                      f"{r['time_error_pct']:+.1f} %", f"{r['measured_busbw_GBps']:.2f}", f"{r['predicted_busbw_GBps']:.2f}",
                      f"{r['algorithm']}/{r['protocol']}")
    return table
