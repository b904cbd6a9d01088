"""Running a sweep's cases on all cores (``local``) or on a Ray cluster (``ray``), keeping every
finished case on disk as it finishes, so a killed sweep resumes where it stopped.

The store is a directory of Parquet files, one per case, named by the case id and written to a
temporary name then renamed (``os.replace`` is atomic on POSIX): a file is either whole or absent,
and a case written twice (a retry, two sweeps racing) is still one file. Only the parent process
writes, so killing it loses at most the cases in flight, and those rerun; killing a worker breaks
the pool, and its cases are sent again (``max_retries`` times, then recorded as failed).

Workers run one numba/BLAS thread each (``NUMBA_NUM_THREADS``, ``OMP_NUM_THREADS``,
``OPENBLAS_NUM_THREADS``, ``MKL_NUM_THREADS`` = 1, set before numpy loads): the pool already uses
every core, and nested thread pools would only oversubscribe them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from gpuwait.errors import SpecError

#: Environment of a worker: one thread per library, so N workers use N cores.
WORKER_ENV = {"NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
#: Times a case is sent again after its worker died before it is recorded as failed.
MAX_RETRIES = 2
EXECUTORS = ("local", "ray")


def _init_worker() -> None:
    # runs in a fresh (spawned) worker before gpuwait imports numpy or numba
    os.environ.update(WORKER_ENV)


def work(payload: tuple[str, dict, dict, float | None]) -> dict:
    """Run one case in a worker (local process or Ray task): ``(case_id, doc, axes, max_memory_bytes)`` -> row."""
    os.environ.update(WORKER_ENV)  # a Ray worker has no initializer; numpy may not have loaded yet
    from gpuwait.runner.sweep import run_case

    case_id, doc, axes, max_memory_bytes = payload
    return run_case(case_id, doc, axes, max_memory_bytes=max_memory_bytes)


class ResultStore:
    """The sweep directory: ``cases/<id>.parquet`` per case, ``compact-*.parquet`` merged ones."""

    def __init__(self, directory: str | Path) -> None:
        self.root = Path(directory)
        self.cases = self.root / "cases"

    def create(self) -> None:
        try:
            self.cases.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise SpecError(f"--out {self.root}: cannot create the directory ({err.strerror})") from None

    def files(self) -> list[Path]:
        if not self.root.exists():
            return []
        return sorted(self.root.glob("compact-*.parquet")) + sorted(self.cases.glob("*.parquet"))

    def statuses(self) -> dict[str, str]:
        """case id -> status of every stored case (the latest row where a case was retried)."""
        import pyarrow.parquet as pq

        latest: dict[str, tuple[float, str]] = {}
        for path in self.files():
            table = pq.read_table(path, columns=["case_id", "status", "finished_at"])
            for cid, status, at in zip(*(table.column(c).to_pylist() for c in ("case_id", "status", "finished_at"))):
                if cid not in latest or at >= latest[cid][0]:
                    latest[cid] = (at, status)
        return {cid: status for cid, (_, status) in latest.items()}

    def write(self, row: dict) -> Path:
        """Write one case's row atomically: a temporary name in the same directory, then rename."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = self.cases / f"{row['case_id']}.parquet"
        tmp = self.cases / f".{row['case_id']}.{os.getpid()}.tmp"
        pq.write_table(pa.Table.from_pylist([row]), tmp)
        os.replace(tmp, path)
        return path


@dataclass
class SweepSummary:
    """What a sweep run did: cases in the plan, skipped as already done, run, and per status."""

    n_cases: int
    skipped: int = 0
    ran: int = 0
    by_status: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0
    workers: int = 0
    executor: str = "local"

    def to_dict(self) -> dict:
        return self.__dict__.copy()


def run_sweep(plan, directory: str | Path, executor: str = "local", workers: int | None = None,
              address: str | None = None, retry_failed: bool = False,
              progress: Callable[[int, int], None] | None = None,
              max_memory_bytes: float | None = None,
              renamed: Callable[[str], str] | None = None) -> SweepSummary:
    """Run every case of ``plan`` not already stored in ``directory`` and store its row.

    ``retry_failed`` runs again the cases stored as invalid or failed. ``progress(done, total)`` is
    called as cases finish. ``max_memory_bytes`` bounds each case's estimated allocation (default half
    the memory of the machine that runs it); a case over it is stored as invalid, not run. ``renamed``
    rewrites a row's error before it is stored, so the row names what the caller set: a case's errors
    name the Python API's arguments (`` `max_memory` ``), and the command line passes its options'
    names (``--max-memory``: :func:`gpuwait.cli.common.renamed`).
    """
    if executor not in EXECUTORS:
        raise SpecError(f"--executor: got {executor!r}; expected one of {', '.join(EXECUTORS)}")
    store = ResultStore(directory)
    store.create()
    _write_plan(store, plan)
    done = store.statuses()
    todo = [c for c in plan.cases if c.case_id not in done or (retry_failed and done[c.case_id] != "ok")]
    todo = list({c.case_id: c for c in todo}.values())  # two axis combinations may resolve to one case
    summary = SweepSummary(len(plan.cases), skipped=len(plan.cases) - len(todo), executor=executor)
    start = time.perf_counter()
    payloads = [(c.case_id, c.doc, c.axes, max_memory_bytes) for c in todo]

    def finished(row: dict) -> None:
        if renamed is not None and row.get("error"):
            row["error"] = renamed(row["error"])
        store.write(row)
        summary.ran += 1
        summary.by_status[row["status"]] = summary.by_status.get(row["status"], 0) + 1
        if progress is not None:
            progress(summary.ran, len(todo))

    if payloads:
        run = _run_ray if executor == "ray" else _run_local
        summary.workers = run(payloads, finished, workers, address)
    summary.wall_s = time.perf_counter() - start
    return summary


def _write_plan(store: ResultStore, plan) -> None:
    import json

    tmp = store.root / f".sweep.json.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(plan.spec_dict(), indent=2))
    os.replace(tmp, store.root / "sweep.json")


def _died(payload: tuple[str, dict, dict, float | None], attempts: int, reason: str) -> dict:
    import json

    case_id, doc, axes, _ = payload
    return {"case_id": case_id, **axes, "kind": doc["kind"], "engine": doc["engine"], "status": "failed",
            "error": f"{reason} ({attempts} attempts)", "wall_s": 0.0, "peak_rss_bytes": 0,
            "finished_at": time.time(), "case_json": json.dumps(doc, sort_keys=True, default=str)}


def _run_local(payloads: list, finished: Callable[[dict], None], workers: int | None, address: str | None) -> int:
    """A process pool over all cores; a dead worker breaks the pool, so its cases go to a new one."""
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    if address is not None:
        raise SpecError("--address: applies to --executor ray only")
    n = workers or os.cpu_count() or 1
    # spawn, not fork: a fresh interpreter reads WORKER_ENV before numpy/numba start their threads
    context = multiprocessing.get_context("spawn")
    queue = list(reversed(payloads))
    attempts: dict[str, int] = {}
    while queue:
        with ProcessPoolExecutor(max_workers=n, mp_context=context, initializer=_init_worker) as pool:
            running: dict = {}
            try:
                while queue or running:
                    while queue and len(running) < 2 * n:  # a short queue: a killed parent loses little
                        # submit before taking the case off the queue: a pool a worker's death broke
                        # refuses the submit, and the case must still be there to send again
                        running[pool.submit(work, queue[-1])] = queue[-1]
                        queue.pop()
                    ready, _ = wait(running, return_when=FIRST_COMPLETED)
                    for future in ready:
                        finished(future.result())
                        del running[future]
            except BrokenProcessPool:
                _requeue(running, queue, attempts, finished)
    return n


def _requeue(running: dict, queue: list, attempts: dict[str, int], finished: Callable[[dict], None]) -> None:
    """Cases in flight when a worker died: finished ones are kept, the others sent again or failed."""
    for future, payload in running.items():
        if future.done() and future.exception() is None:
            finished(future.result())
            continue
        attempts[payload[0]] = attempts.get(payload[0], 0) + 1
        if attempts[payload[0]] > MAX_RETRIES:
            finished(_died(payload, attempts[payload[0]], "the worker process died"))
        else:
            queue.append(payload)


def _run_ray(payloads: list, finished: Callable[[dict], None], workers: int | None, address: str | None) -> int:
    """One Ray task per case, results stored as each finishes (``ray.wait``); Ray retries a task
    whose worker died ``MAX_RETRIES`` times."""
    try:
        import ray
    except ImportError:
        raise SpecError("--executor ray: the ray package is not installed",
                        hint="pip install 'gpuwait[ray]' (plain ray; the dashboard is not needed)") from None
    if not ray.is_initialized():
        # num_cpus=None (ray's default) lets ray count the machine's CPUs; a cluster brings its own
        ray.init(address=address, include_dashboard=False, log_to_driver=False,
                 num_cpus=workers if workers and address is None else None)
    task = ray.remote(num_cpus=1, max_retries=MAX_RETRIES)(work)
    in_flight = int(ray.available_resources().get("CPU", 1))
    pending: dict = {}
    queue = list(reversed(payloads))
    while queue or pending:
        while queue and len(pending) < 2 * in_flight:
            payload = queue.pop()
            pending[task.remote(payload)] = payload
        ready, _ = ray.wait(list(pending), num_returns=1)
        for ref in ready:
            payload = pending.pop(ref)
            try:
                finished(ray.get(ref))
            except Exception as err:  # noqa: BLE001 — a task that died past its retries is a failed row
                finished(_died(payload, MAX_RETRIES + 1, f"ray task failed: {type(err).__name__}"))
    return in_flight


def rows_equal_ignoring(rows: Iterable[dict], ignore: Iterable[str] = ("wall_s", "peak_rss_bytes", "finished_at")) -> list[dict]:
    """Rows without the columns that differ from run to run (for comparing two executors)."""
    skip = set(ignore)
    return sorted(({k: v for k, v in r.items() if k not in skip} for r in rows), key=lambda r: r["case_id"])
