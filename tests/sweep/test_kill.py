"""Kill safety: SIGKILL to the sweep's parent, or to one of its workers, mid-run; a rerun then
loses no case and duplicates none."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuwait.report.sweep import query
from gpuwait.runner.sweep import load_sweep, plan_sweep
from gpuwait.runner.sweep_exec import run_sweep

from .conftest import many_cases

N_SEEDS = 20  # 40 cases of ~0.2 s each on 2 workers: several seconds to land a kill in


def _start(sweep: Path, out: Path, stderr=subprocess.DEVNULL) -> subprocess.Popen:
    env = os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    # a session of its own, so the test can end the orphaned workers of a killed parent (and only them)
    # SIGINT as a terminal leaves it (Python then raises KeyboardInterrupt): a shell starts a background job
    # with SIGINT ignored, and a child inherits that, so under `cmd &` a Ctrl-C test would see the sweep finish
    return subprocess.Popen([sys.executable, "-m", "gpuwait", "sweep", str(sweep), "--out", str(out), "--workers", "2"],
                            env=env, stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _wait_for_files(out: Path, n: int, proc: subprocess.Popen, timeout_s: float = 120.0) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        count = len(list((out / "cases").glob("*.parquet"))) if (out / "cases").exists() else 0
        if count >= n:
            return count
        assert proc.poll() is None, "the sweep ended before the kill"
        time.sleep(0.05)
    pytest.fail(f"fewer than {n} cases finished in {timeout_s} s")


def _workers(parent: int) -> list[int]:
    """The pool's worker processes (spawned children running spawn_main, not the resource tracker)."""
    found = []
    for task in Path(f"/proc/{parent}/task").iterdir():
        for pid in (task / "children").read_text().split():
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            if b"spawn_main" in cmdline:
                found.append(int(pid))
    return found


def _check_complete(sweep: Path, out: Path) -> None:
    plan = plan_sweep(*load_sweep(sweep))
    summary = run_sweep(plan, out, workers=2)
    assert summary.skipped > 0, "the killed run stored nothing"
    files = sorted(p.stem for p in (out / "cases").glob("*.parquet"))
    assert files == sorted(c.case_id for c in plan.cases)  # none lost, none twice
    _, rows = query(out, "select count(*), count(distinct case_id), count(*) filter (where status = 'ok') from all_rows")
    assert rows == [(len(plan.cases),) * 3]


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc to find the pool's workers")
@pytest.mark.parametrize("victim", ["parent", "worker"])
def test_sigkill_mid_run_then_rerun_loses_and_duplicates_nothing(tmp_path, victim):
    sweep, out = tmp_path / "many.yaml", tmp_path / "out"
    sweep.write_text(many_cases(N_SEEDS))
    proc = _start(sweep, out)
    try:
        _wait_for_files(out, 3, proc)
        if victim == "parent":
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        else:
            workers = _workers(proc.pid)
            assert workers, "no worker process found"
            os.kill(workers[0], signal.SIGKILL)
            assert proc.wait(timeout=300) == 0  # the sweep sends the dead worker's cases again
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the orphans of a killed parent, started by this test
        except ProcessLookupError:
            pass
    n_cases = 2 * N_SEEDS
    stored = len(list((out / "cases").glob("*.parquet")))
    assert (stored < n_cases) if victim == "parent" else (stored == n_cases)
    _check_complete(sweep, out)


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc to find the pool's workers")
def test_ctrl_c_says_what_is_stored_and_how_to_resume(tmp_path):
    # Ctrl-C sends SIGINT to the terminal's whole process group: the parent and its workers
    sweep, out = tmp_path / "many.yaml", tmp_path / "out"
    sweep.write_text(many_cases(N_SEEDS))
    proc = _start(sweep, out, stderr=subprocess.PIPE)
    try:
        _wait_for_files(out, 3, proc)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    stored = len(list((out / "cases").glob("*.parquet")))
    assert proc.returncode == 130
    assert "Traceback" not in err
    assert f"interrupted: {stored} of {2 * N_SEEDS} cases are stored in {out}" in err
    assert "run the same command again" in err
    _check_complete(sweep, out)
