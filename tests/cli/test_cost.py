"""A cost estimate before any allocation: validate and run state it and refuse alike over --max-memory,
naming the field to change; count fields carry bounds with readable errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuwait.cli.main import main
from gpuwait.runner.cost import estimate_scenario
from gpuwait.runner.inputs import load_scenario

EXAMPLES = Path(__file__).parents[2] / "examples"


def _scenario(tmp_path, old, new):
    path = tmp_path / "s.yaml"
    path.write_text((EXAMPLES / "dp-only.yaml").read_text().replace(old, new))
    return str(path)


@pytest.mark.parametrize("command", ["validate", "run"])
def test_huge_global_batch_is_refused_before_allocating(tmp_path, capsys, command):
    path = _scenario(tmp_path, "global_batch: 512", "global_batch: 1000000000")
    assert main([command, path]) == 2
    err = capsys.readouterr().err
    assert "7,812,500 micro-batches" in err and "change workload.parallel.global_batch" in err
    assert "--max-memory" in err and len(err.splitlines()) == 2


def test_max_memory_raises_the_limit_and_validate_states_the_estimate(tmp_path, capsys):
    assert main(["validate", str(EXAMPLES / "dp-only.yaml")]) == 0
    assert "run allocates 128 ranks x 4 micro-batches x 1 chunks x 2 steps" in capsys.readouterr().out
    assert main(["validate", str(EXAMPLES / "dp-only.yaml"), "--max-memory", "1MB"]) == 2
    assert "over the limit of 1MB" in capsys.readouterr().err
    assert main(["run", str(EXAMPLES / "dp-only.yaml"), "--steps", "1000000"]) == 2
    assert "change workload.steps or --steps" in capsys.readouterr().err


@pytest.mark.parametrize("json_out", [False, True])
def test_validate_names_runs_steps_option_as_text_and_as_json(tmp_path, capsys, json_out):
    """The estimate names the Python API's `steps` argument; validate, which has no --steps, names run's, in its
    one-line error and in --json's problems alike (not the API's backquoted name)."""
    path = _scenario(tmp_path, "steps: 2", "steps: 100000")
    code = main(["validate", path, "--max-memory", "1KB", *(["--json"] if json_out else [])])
    captured = capsys.readouterr()
    message = json.loads(captured.out)["problems"][0] if json_out else captured.err.splitlines()[0]
    assert code == (1 if json_out else 2) and message.endswith("(change workload.steps or run's --steps)")


def test_traffic_estimate_counts_flows():
    estimate = estimate_scenario(load_scenario(EXAMPLES / "oversubscribed-all-to-all.yaml"), engine="packet")
    assert estimate.counts["flows"] == 16 * 8 and estimate.counts["packets"] > 0  # 16 GPUs x 8 on the other server


@pytest.mark.parametrize("old, new, field", [
    ("servers: 16", "servers: 1000000", "cluster.servers"),
    ("steps: 2", "steps: 100000000", "workload.steps"),
    ("global_batch: 512", "global_batch: -4", "workload.parallel.global_batch"),
])
def test_count_fields_have_bounds(tmp_path, capsys, old, new, field):
    assert main(["validate", _scenario(tmp_path, old, new)]) == 2
    err = capsys.readouterr().err
    assert f"{field}: got" in err and "Traceback" not in err


def test_perf_counts_are_checked(capsys):
    assert main(["perf", "broadcast", "-b", "8", "-e", "64", "-r", "1000000000"]) == 2
    assert "-r: got 1000000000; expected a root rank from 0 to 7" in capsys.readouterr().err
    assert main(["perf", "all_reduce", "--servers", "1000000"]) == 2
    assert "less than or equal to 100000" in capsys.readouterr().err


def test_traffic_estimate_bounds_the_flow_engines_measured_peak():
    # Issue 16 item 4: the memory a traffic run states before it starts must bound what it allocates.
    # A mid-size run with many events (ECMP collisions give many distinct rates; staggered patterns of
    # several sizes end at their own times): the Python allocations tracemalloc sees at their peak
    # (topology, routes, engine) plus the interpreter with its imports (84 MiB resident, measured
    # after importing the runner) must stay within the estimate.
    import tracemalloc

    from gpuwait.runner.traffic import run_traffic
    from gpuwait.spec import Scenario, validate_data

    patterns = [{"kind": "permutation", "size": f"{16 + 8 * k}MiB", "seed": k, "start": f"{0.2 * k}ms"}
                for k in range(6)]
    doc = {"name": "memory-bound", "cluster": {"preset": "rocev2-400g-2tier", "servers": 16, "routing": {"kind": "ecmp"}},
           "traffic": {"patterns": patterns}}
    scenario = validate_data(Scenario, doc, source="test", require_units=False)
    estimate = estimate_scenario(scenario)
    tracemalloc.start()
    try:
        runs = run_traffic(scenario)
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert runs[0].result.counters["rate_updates"] > 100  # many events, so the rate logs grow
    interpreter_bytes = 100 * 2**20
    assert peak_bytes + interpreter_bytes < estimate.bytes, (peak_bytes, estimate.describe())


def test_run_reads_max_memory_once(monkeypatch, capsys):
    """`run` checks the estimate and states it against one limit: --max-memory is parsed once."""
    import gpuwait.runner.cost as cost

    parsed = []

    def counting(text, **kwargs):
        parsed.append(text)
        return parse(text, **kwargs)

    parse = cost.parse_size_bytes
    monkeypatch.setattr(cost, "parse_size_bytes", counting)
    assert main(["run", str(EXAMPLES / "ecmp-collision.yaml"), "--max-memory", "16GiB"]) == 0
    assert parsed == ["16GiB"]


def test_a_jobs_scenario_is_estimated_by_its_jobs_work():
    """Several jobs on one fabric: each job's step alone (ranks x micro-batches x chunks) and the shared
    run's segments for every step are counted, not a traffic estimate of no flows."""
    scenario = load_scenario(EXAMPLES / "two-jobs-shared-uplinks.yaml")
    estimate = estimate_scenario(scenario)
    assert estimate.counts["jobs"] == 2 and estimate.counts["steps"] == 3
    assert estimate.counts["rank x micro-batch x chunk cells"] == 64 * 1 + 64 * 2  # global_batch 64 and 128 over 64 GPUs
    bigger = scenario.model_copy(update={"jobs": [scenario.jobs[0].model_copy(update={"workload": scenario.jobs[0].workload.model_copy(
        update={"parallel": scenario.jobs[0].workload.parallel.model_copy(update={"global_batch": 65536})})}), scenario.jobs[1]]})
    more = estimate_scenario(bigger)  # job a: 64 ranks x 1,024 micro-batches, 1 KiB each; its segments stay 8 (DP only)
    assert more.counts["rank x micro-batch x chunk cells"] == 64 * 1024 + 64 * 2
    assert more.bytes - estimate.bytes == (64 * 1024 - 64) * 1024
    assert estimate_scenario(scenario, steps=10**6).bytes > estimate.bytes + 10**6 * 16 * 100  # 16 segments a step


@pytest.mark.parametrize("command", ["diagnose", "run", "place"])
def test_a_jobs_scenario_over_max_memory_is_refused_before_it_runs(monkeypatch, capsys, command):
    import gpuwait.diagnosis.placement as placement
    import gpuwait.runner.jobs as jobs

    def never(*args, **kwargs):
        pytest.fail("ran a jobs scenario over --max-memory")

    monkeypatch.setattr(placement, "diagnose_jobs", never)
    monkeypatch.setattr(jobs, "run_jobs", never)
    assert main([command, str(EXAMPLES / "two-jobs-shared-uplinks.yaml"), "--max-memory", "1MB"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the run would allocate 2 jobs, ") and "over the limit of 1MB (--max-memory)" in err


def test_place_holds_its_run_to_max_memory(monkeypatch, capsys):
    """`place` reads --max-memory once and passes the same bytes to the shared run (whose all-to-alls
    listed flow by flow are held to it), as `run` does."""
    import gpuwait.runner.cost as cost
    import gpuwait.runner.jobs as jobs

    parsed, limits = [], []
    parse, run_jobs = cost.parse_size_bytes, jobs.run_jobs
    monkeypatch.setattr(cost, "parse_size_bytes", lambda text, **kw: parsed.append(text) or parse(text, **kw))
    monkeypatch.setattr(jobs, "run_jobs", lambda s, steps, max_memory_bytes=None: limits.append(max_memory_bytes)
                        or run_jobs(s, steps, max_memory_bytes))
    assert main(["place", str(EXAMPLES / "two-jobs-shared-uplinks.yaml"), "--max-memory", "16GiB", "--json"]) == 0
    assert parsed == ["16GiB"] and limits == [16 * 2**30]
    assert main(["place", str(EXAMPLES / "two-jobs-shared-uplinks.yaml"), "--max-memory", "1Q"]) == 2
    assert capsys.readouterr().err.startswith("error: --max-memory: ")


def test_max_memory_and_perf_sizes_follow_their_documented_rules(capsys):
    """--max-memory and max_memory= read sizes as every scenario field does (units.py: 1GB SI, 1GiB binary, a bare
    1G refused with both spellings); perf -b/-e alone read nccl-tests' parsesize (K/M/G in powers of 1024,
    NVIDIA/nccl-tests src/common.cu), so 1G there is 2^30 bytes."""
    import gpuwait
    from gpuwait.errors import SpecError

    assert main(["run", str(EXAMPLES / "dp-only.yaml"), "--max-memory", "1G"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == ("error: --max-memory: unit 'G' in '1G' has no B (bytes) or b (bits), and tools read a bare G "
                      "as 10^9 or 2^30; write '1GB' (SI, 10^9) or '1GiB' (binary, 2^30)"), err
    assert main(["run", str(EXAMPLES / "dp-only.yaml"), "--max-memory", "-1G"]) == 2
    assert capsys.readouterr().err.splitlines()[0] == "error: --max-memory: got '-1G'; expected a size of more than zero"
    with pytest.raises(SpecError, match="max_memory: unit 'G' in '1G' has no B"):
        gpuwait.simulate(str(EXAMPLES / "dp-only.yaml"), max_memory="1G")
    assert main(["perf", "all_reduce", "-b", "1G", "-e", "1G", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"][0]["size_bytes"] == 2**30
