"""Several jobs on one fabric: each job's step alone and beside its co-tenants, against the
published effects of inter-job contention and fragmented placement."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np
import pytest

from gpuwait.errors import SpecError
from gpuwait.runner.jobs import run_jobs
from gpuwait.spec import Scenario, load_model
from gpuwait.steps.training import run_training

ROOT = Path(__file__).resolve().parents[2]


def _dp_job(name: str, servers, global_batch: int) -> dict:
    return {"name": name, "servers": len(servers) if isinstance(servers, list) else servers, "placement": servers,
            "workload": {"model": {"preset": "llama-8b", "seq_len": 4096},
                         "parallel": {"tp": 1, "pp": 1, "zero": 1, "micro_batch": 1, "global_batch": global_batch},
                         "compute": {"gpu": "H100-SXM", "jitter_cv": 0}}}


def _scenario(jobs, servers=16, **fabric) -> Scenario:
    return Scenario.model_validate({"cluster": {"preset": "rocev2-400g-2tier", "servers": servers, "fabric": fabric},
                                    "jobs": jobs})


@pytest.fixture(scope="module")
def shared_uplinks():
    return run_jobs(load_model(Scenario, ROOT / "examples" / "two-jobs-shared-uplinks.yaml"))


def test_co_located_jobs_slow_the_communication_heavier_one_by_5_to_20_percent(shared_uplinks):
    # Crux (Cao et al., "Crux: GPU-Efficient Communication Scheduling for Deep Learning Training",
    # SIGCOMM 2024): a job co-located with another went from 1.53 s to 1.70 s per iteration (+11 %)
    jobs = {j.name: j for j in shared_uplinks.jobs}
    heavier = max(jobs.values(), key=lambda j: j.exposed_comm_alone_s / j.alone_step_s)
    assert heavier.name == "a"
    assert 0.05 <= heavier.slowdown <= 0.20
    assert jobs["a"].shares["b"] and jobs["b"].shares["a"]  # the leaf uplinks, named both ways
    assert all(j.exposed_comm_shared_s > j.exposed_comm_alone_s for j in jobs.values())


def test_a_job_alone_keeps_its_alone_step_time():
    run = run_jobs(_scenario([_dp_job("solo", [0, 1, 4, 5], 32)]), steps=2)
    job = run.jobs[0]
    assert job.shared_step_s == pytest.approx(job.alone_step_s, rel=1e-9)
    assert job.alone_step_s == pytest.approx(float(job.alone.step_times_s[0]), rel=1e-9)
    assert job.shares == {} and job.slowed_s == 0


def test_fragmented_across_racks_is_slower_than_packed_on_ecmp():
    # Meta (Gangidi et al., "RDMA over Ethernet for Distributed AI Training at Meta Scale", SIGCOMM
    # 2024): fragmented placement with ECMP path collisions degraded training by more than 30 %.
    # The job `x` (4 servers) packed in one rack meets no other job; spread over four racks its
    # all-gathers and reduce-scatters cross spines that two other jobs also use.
    def x_step(x, b, c):
        run = run_jobs(_scenario([_dp_job("x", x, 32), _dp_job("b", b, 48), _dp_job("c", c, 48)]), steps=3)
        return run.jobs[0]

    packed = x_step([0, 1, 2, 3], [4, 5, 8, 9, 12, 13], [6, 7, 10, 11, 14, 15])
    fragmented = x_step([0, 4, 8, 12], [1, 2, 5, 6, 9, 10], [3, 7, 11, 13, 14, 15])
    assert packed.leaves == 1 and packed.shares == {} and packed.slowdown == pytest.approx(0.0, abs=1e-9)
    assert fragmented.leaves == 4
    assert fragmented.shared_step_s / packed.shared_step_s - 1 >= 0.10  # gpuwait: +24 %


def test_policies_place_the_jobs_in_priority_order():
    jobs = [_dp_job("low", 4, 32), _dp_job("high", 4, 32)]
    jobs[0]["placement"], jobs[1]["placement"] = "first-fit", "slurm-tree"
    jobs[1]["priority"] = 1
    run = run_jobs(_scenario(jobs), steps=1)
    by = {j.name: j for j in run.jobs}
    assert by["high"].leaves == 1 and by["high"].hostlist == "s[0-3]"  # placed first, one leaf
    assert by["low"].hostlist == "s[4-7]"


def test_bad_jobs_are_one_clear_error():
    with pytest.raises(SpecError, match="expected each name once"):
        run_jobs(_scenario([_dp_job("a", [0], 8), _dp_job("a", [1], 8)]))
    with pytest.raises(SpecError, match="needs 20 servers"):
        run_jobs(_scenario([_dp_job("big", 20, 160) | {"placement": "first-fit"}]))


def test_a_job_larger_than_the_cluster_says_so():
    # placed after another job, it was "needs 20 servers; 8 of 16 are free", as if waiting would help
    jobs = [_dp_job("a", [0, 1, 2, 3, 4, 5, 6, 7], 64), _dp_job("big", 20, 160) | {"placement": "first-fit"}]
    with pytest.raises(SpecError, match=r"^jobs\[big\]: needs 20 servers; the cluster has 16$"):
        run_jobs(_scenario(jobs))


def test_a_jobs_workload_error_names_the_job():
    # the workload's own checks know only its fields; among several jobs the message must say whose
    jobs = [_dp_job("fine", [0, 1], 16), _dp_job("odd", [2, 3], 12)]
    with pytest.raises(SpecError, match=r"^jobs\[odd\]: workload\.parallel\.global_batch: 12 is not a multiple") as err:
        run_jobs(_scenario(jobs))
    assert err.value.problems and all(p.startswith("jobs[odd]: ") for p in err.value.problems)


def test_a_repeated_job_name_is_named():
    jobs = [_dp_job("a", [0], 8), _dp_job("b", [1], 8), _dp_job("a", [2], 8)]
    with pytest.raises(SpecError, match=r"jobs: name 'a' given 2 times \(jobs\[0\], jobs\[2\]\); expected each name once"):
        run_jobs(_scenario(jobs))


def test_a_repeated_id_in_a_long_trace_is_named_at_once():
    # schedule checks a trace's job ids with the same function; public traces hold 10^4-10^6 jobs, and the
    # first repeated id was found by counting every id over the whole list (40,000 ids: 26 s on this machine)
    import time

    from gpuwait.spec.jobs import refuse_repeated_names

    ids = [str(i) for i in range(40_000)] + ["39999"]
    start = time.perf_counter()
    with pytest.raises(SpecError, match=r"trace.csv: job id '39999' given 2 times; expected each job id once"):
        refuse_repeated_names(ids, "trace.csv", noun="job id")
    assert time.perf_counter() - start < 2.0


def test_dense_max_min_equals_the_sparse_solver():
    # the dense solve for a few jobs must give the engine's max-min allocation (the unique weighted
    # max-min fair point, Bertsekas & Gallager, "Data Networks", §6.5.2) on random problems
    import numpy as np
    import scipy.sparse as sp

    from gpuwait.engine.flow import max_min_rates
    from gpuwait.runner.jobs import dense_max_min

    rng = np.random.default_rng(7)
    for _ in range(200):
        n, links = int(rng.integers(1, 6)), int(rng.integers(1, 40))
        w = rng.random((n, links)) * (rng.random((n, links)) < 0.4)
        w[:, 0] += 0.1  # every flow crosses a link
        cap = rng.uniform(1, 10, links)
        rate_cap = np.where(rng.random(n) < 0.3, rng.uniform(0.1, 5, n), np.inf)
        sparse, _ = max_min_rates(sp.csr_matrix(w), cap, rate_cap)
        assert dense_max_min(w, cap, rate_cap) == pytest.approx(sparse, rel=1e-9)


def test_jobs_that_share_no_link_are_slowed_by_zero_not_minus_zero():
    # alone and shared add the same phases in another order; their last-bit difference once printed
    # "-0.0 %" in run/place and -2.2e-16 in --json
    from rich.console import Console

    from gpuwait.cli.place import jobs_dict, jobs_table

    run = run_jobs(_scenario([_dp_job("a", [0, 1], 16), _dp_job("b", [14, 15], 32)]), steps=1)
    assert all(not j.shares for j in run.jobs)
    assert [j["slowdown"] for j in jobs_dict(run)["jobs"]] == [0.0, 0.0]
    assert all(str(j.slowdown) == "0.0" for j in run.jobs)  # not -0.0 either
    console = Console(width=200, record=True)
    console.print(jobs_table(run))
    text = console.export_text()
    assert "-0.0 %" not in text and text.count("+0.0 %") == 2


def test_a_loader_bound_job_runs_at_its_loaders_pace_alone_and_shared():
    """A job whose CPU loaders are slower than its GPUs trains at the loaders' pace (Megatron-LM reads a
    batch per micro-batch, pretrain_gpt.py get_batch): 8 GPUs of a server, one sample each per step,
    sharing 2 samples/s make a step of 8 / 2 = 4 s. The jobs' programs are timed from a step of a
    running job, so the shared run sees that pace too; it took the job's first step, whose batch the
    loaders had made before training began, and reported 0.48 s."""
    job = _dp_job("slow", [0, 1, 4, 5], 32)
    job["workload"]["data"] = {"loader_samples_per_s_per_server": 2}
    run = run_jobs(_scenario([job]), steps=1)
    assert run.jobs[0].alone_step_s == pytest.approx(4.0, rel=1e-9)
    assert run.jobs[0].shared_step_s == pytest.approx(4.0, rel=1e-9)


def test_a_checkpoint_every_other_step_is_in_the_jobs_program():
    """A jobs run times each job over the run's steps, not its first step alone: with a checkpoint every
    2 steps, the job's mean step alone is its workload run's mean step (the same simulation), half a
    checkpoint above a step without one. The first step alone had left every checkpoint out."""
    job = _dp_job("ckpt", [0, 1, 4, 5], 32)
    job["workload"]["data"] = {"checkpoint_interval_steps": 2}
    scenario = Scenario.model_validate({"cluster": {"preset": "rocev2-400g-2tier", "servers": 16,
                                                    "storage": {"mode": "converged", "storage_servers": 2}},
                                        "jobs": [job]})
    run = run_jobs(scenario, steps=2)
    times = run.jobs[0].alone.step_times_s
    assert len(times) == 2 and times[1] > 1.1 * times[0]  # the second step writes the checkpoint
    assert run.jobs[0].alone_step_s == pytest.approx(float(times.mean()), rel=1e-9)
    assert run.jobs[0].shared_step_s == pytest.approx(run.jobs[0].alone_step_s, rel=1e-9)


def test_a_jobs_program_is_the_steps_its_task_table_holds_whole(monkeypatch):
    """A large job's task table stops at max_tasks rows (2,000,000: 13 steps of the 512-GPU llama-70b
    demo). Its program is the steps the table holds whole, repeated; a step past them had segments
    without the network work the table no longer showed, so its co-tenants never slowed it there."""
    import gpuwait.runner.jobs as jobs_module

    scenario = _scenario([_dp_job("a", [0, 1, 4, 5], 32)])
    full = run_jobs(scenario, steps=3).jobs[0]
    rows_per_step = len(full.alone.tasks) / 3
    assert full.alone.tasks_whole_steps is None and full.program.steps == 3
    monkeypatch.setattr(jobs_module, "run_training", partial(run_training, max_tasks=int(2.5 * rows_per_step)))
    cut = run_jobs(scenario, steps=3).jobs[0]
    assert cut.alone.tasks_whole_steps == 2
    program = cut.program
    assert program.steps == 2
    step_of_segment = np.concatenate([[0], np.cumsum(program.ends_step)[:-1]])
    for k in range(program.steps):  # every step of the program has its network work
        assert (program.pace[step_of_segment == k] > 0).any()
    assert program.step_s == pytest.approx(float(full.alone.step_times_s[:2].mean()), rel=1e-9)
    assert cut.shared_step_s == pytest.approx(cut.alone_step_s, rel=1e-9)
