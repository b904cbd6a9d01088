"""Trace importers, the sampler and the trace job -> workload mapping, on the shipped samples
(tests/data/traces: Lingjun's real topo.csv; job rows constructed in each trace's published schema
by bench/make_trace_samples.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwait.errors import SpecError
from gpuwait.spec import Scenario
from gpuwait.workload.traces import link_sharing, read_trace, sample, trace_jobs, trace_workload

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"


def test_lingjun_topology_is_the_published_three_tier_clos():
    # Lingjun 2023 README: "more than 800 hosts interconnected by a three-layer Clos network"
    trace = read_trace(TRACES / "lingjun" / "worker-sample.csv", topo_csv=TRACES / "lingjun" / "topo.csv")
    assert trace.source == "alibaba-lingjun-2023" and len(trace.topo) == 847
    assert len({t[0] for t in trace.topo.values()}) == 48 and len({t[2] for t in trace.topo.values()}) == 1
    first = trace.jobs[0]
    assert first.arrival_s == 0 and first.gpus == 16 and len(first.hosts) == 2 and first.duration_s == 56 * 60


def test_lingjun_replay_reports_the_share_of_jobs_sharing_a_link():
    # Crux (SIGCOMM 2024) on the full Lingjun trace: 36 % of jobs (51 % of GPUs) contend with
    # another job. The shipped sample's rows are constructed (half packed under one ToR, half
    # scattered), so only the band is checked: sharing exists and larger jobs share more.
    trace = read_trace(TRACES / "lingjun" / "worker-sample.csv", topo_csv=TRACES / "lingjun" / "topo.csv")
    share = link_sharing(trace)
    assert 0.1 < share["shared_jobs"] < 0.9 and share["shared_gpus"] > share["shared_jobs"]


def test_pai_and_helios_samples_read_as_jobs():
    pai = read_trace(TRACES / "pai-task-sample.csv")  # headerless, as released
    assert pai.source == "alibaba-pai-2020" and len(pai.jobs) == 40 and all(j.gpus % 8 == 0 for j in pai.jobs)
    helios = read_trace(TRACES / "helios-sample.csv")
    assert helios.source == "sensetime-helios" and len(helios.jobs) == 60 and helios.jobs[0].arrival_s == 0


def test_philly_job_log_reads_attempts_per_machine():
    # msr-fiddle/philly-traces README (cluster_job_log): a job's attempts, each with its machines
    # ("ip") and their GPUs; an attempt without an end time was still running or not logged
    trace = read_trace(TRACES / "philly-job-log-sample.json")  # guessed: JSON
    assert trace.source == "microsoft-philly" and len(trace.jobs) == 40 and trace.jobs[0].arrival_s == 0
    first = trace.jobs[0]
    assert first.gpus == 16 and first.hosts == ("m331", "m162")
    # two attempts: 00:09:39-05:51:21 and a retry; the duration is their run times, not the gap
    assert first.duration_s == pytest.approx(20502 + 1748)


def test_philly_attempt_rules(tmp_path):
    log = tmp_path / "cluster_job_log"
    log.write_text("""[{"jobid": "j1", "submitted_time": "2017-10-07 01:11:39", "status": "Pass", "attempts": [
        {"start_time": "2017-10-07 01:12:09", "end_time": "2017-10-07 01:13:23", "detail": [{"ip": "m47", "gpus": ["gpu0"]}]},
        {"start_time": "2017-10-07 01:13:30", "end_time": "2017-10-07 02:13:30",
         "detail": [{"ip": "m412", "gpus": ["gpu0", "gpu1"]}, {"ip": "m5", "gpus": ["gpu0", "gpu1"]}]},
        {"start_time": "2017-10-07 03:00:00", "end_time": "None", "detail": [{"ip": "m6", "gpus": ["gpu0"]}]}]},
      {"jobid": "j2", "submitted_time": "2017-10-07 01:20:00", "attempts": []}]""")
    (job,) = read_trace(log).jobs
    assert job.name == "j1" and job.gpus == 4 and job.hosts == ("m412", "m5") and job.duration_s == 74 + 3600


def test_acme_trace_reads_gpu_jobs_with_offsets():
    # InternLM/AcmeTrace README: trace_seren.csv columns, times with a UTC offset, duration in s
    trace = read_trace(TRACES / "acme-seren-sample.csv")  # guessed: gpu_time column
    assert trace.source == "shanghai-ai-lab-acme" and trace.jobs[0].arrival_s == 0
    assert len(trace.jobs) == 57  # 60 rows, 3 CPU-only
    assert trace.jobs[1].arrival_s == 717 and trace.jobs[1].gpus == 32 and trace.jobs[1].duration_s == 809
    jobs, durations = trace_jobs(sample(trace, max_jobs=10, max_gpus=64))
    Scenario.model_validate({"cluster": {"preset": "rocev2-400g-2tier", "servers": 8}, "jobs": jobs})


def test_sampler_windows_scales_and_rounds_to_servers():
    trace = read_trace(TRACES / "helios-sample.csv")
    s = sample(trace, start_s=3600, window_s=7200, gpu_scale=2, time_scale=10, max_gpus=32)
    assert s.jobs and all(0 <= j.arrival_s < 720 for j in s.jobs)
    assert all(j.gpus <= 8 or j.gpus % 8 == 0 for j in s.jobs) and max(j.gpus for j in s.jobs) <= 32
    assert len(sample(trace, max_jobs=5).jobs) == 5
    with pytest.raises(SpecError, match=r"^trace sample --gpu-scale: got 0; expected a number > 0$"):
        sample(trace, gpu_scale=0)
    with pytest.raises(SpecError, match=r"^trace sample --window: got -5; expected a number > 0$"):
        sample(trace, window_s=-5)
    with pytest.raises(SpecError, match=r"^trace sample --start: got -1; expected seconds >= 0"):
        sample(trace, start_s=-1)


def test_trace_jobs_map_to_workloads_that_validate_and_fit():
    jobs, durations = trace_jobs(sample(read_trace(TRACES / "helios-sample.csv"), max_jobs=10))
    Scenario.model_validate({"cluster": {"preset": "rocev2-400g-2tier", "servers": 32}, "jobs": jobs})
    assert set(durations) == {j["name"] for j in jobs}
    assert trace_workload(128)["model"] == {"preset": "llama-70b"} and trace_workload(128)["parallel"]["pp"] == 4
    assert trace_workload(2)["model"]["layers"] == 16


def test_bad_trace_files_are_one_clear_error(tmp_path):
    bad = tmp_path / "t.csv"
    bad.write_text("job_id,gpu_num\n1,8\n")
    with pytest.raises(SpecError, match="no column submit_time, duration"):
        read_trace(bad, "helios")
    with pytest.raises(SpecError, match="expected one of lingjun, pai, helios, philly, acme"):
        read_trace(bad, "venus")
    with pytest.raises(SpecError, match="no column submit_time, duration"):
        read_trace(bad, "acme")
    log = tmp_path / "cluster_job_log"
    log.write_text('[{"jobid": "a", "attempts": []}]')
    with pytest.raises(SpecError, match="first job has no submitted_time"):
        read_trace(log)
    log.write_text('{"jobid": ')
    with pytest.raises(SpecError, match="not JSON"):
        read_trace(log, "philly")
