"""The Python API: the same documents as the CLI's --json, the same errors, Arrow and Parquet tables."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import gpuwait as g
from gpuwait.errors import GpuwaitError, SpecError
from tests.cli.test_cli import run_cli


def test_the_done_when_line():
    s = g.load_scenario("examples/dp-only.yaml")
    assert g.simulate(s).to_dict().keys() == {"scenario", "conclusion", "cases", "report"}


def test_simulate_gives_the_cli_document(capsys, tmp_path):
    # a limit above the estimate (about 211 MB) changes nothing
    result = g.simulate("examples/dp-only.yaml", max_memory="16GiB")
    code, out, _ = run_cli(capsys, "run", "examples/dp-only.yaml", "--max-memory", "16GiB", "--json")
    assert code == 0 and json.loads(out) == json.loads(_json(result.to_dict()))
    tables = result.to_arrow()
    assert tables["tasks"].num_rows > 0 and set(tables["links"].column("case").to_pylist()) == {r.case for r in result.results}
    written = result.to_parquet(tmp_path)
    assert [p.name for p in written] == ["tasks.parquet", "links.parquet"]
    assert pq.read_table(written[0]).num_rows == tables["tasks"].num_rows


def test_traffic_scenario_document_and_flows_table(capsys, tmp_path):
    result = g.simulate("examples/ecmp-collision.yaml")
    code, out, _ = run_cli(capsys, "run", "examples/ecmp-collision.yaml", "--json")
    assert json.loads(out) == json.loads(_json(result.to_dict()))
    flows = result.to_arrow()["flows"]
    assert flows.num_rows == sum(len(r.flows) for r in result.runs)
    assert pq.read_table(result.to_parquet(tmp_path)[0]).num_rows == flows.num_rows


def test_perf_rows_are_the_cli_rows(capsys):
    sweep = g.perf("all_reduce", cluster="dgx-h100", servers=2, sizes=("1M", "16M"), step_factor=4)
    code, out, _ = run_cli(capsys, "perf", "all_reduce", "--cluster", "dgx-h100", "--servers", "2",
                           "-b", "1M", "-e", "16M", "-f", "4", "--json")
    assert json.loads(out) == json.loads(_json(sweep.to_dict()))
    assert [r["size_bytes"] for r in sweep.to_arrow().to_pylist()] == [1 << 20, 4 << 20, 16 << 20]


def test_diagnose_names_the_injected_fault(capsys):
    result = g.diagnose("examples/dp-only.yaml", inject=["slow-gpu:s1.gpu3"], measure_gain=False, max_memory="16GiB")
    code, out, _ = run_cli(capsys, "diagnose", "examples/dp-only.yaml", "--inject", "slow-gpu:s1.gpu3", "--no-gain",
                           "--max-memory", "16GiB", "--json")
    assert json.loads(out) == json.loads(_json(result.to_dict()))
    assert result.diagnosis.findings[0].component.startswith("s1.gpu3")
    assert result.to_arrow()["findings"].num_rows == len(result.diagnosis.findings)


def test_build_cluster_from_a_preset_a_file_and_a_spec():
    topo = g.build_cluster("rocev2-400g-2tier", servers=8)
    assert topo.n_gpus == 64
    assert g.build_cluster("examples/dp-only.yaml").n_gpus == g.load_scenario("examples/dp-only.yaml").cluster.servers * 8
    spec = g.load_scenario("examples/dp-only.yaml").cluster
    assert g.build_cluster(spec, servers=2).n_servers == 2


@pytest.mark.parametrize("call, message", [
    (lambda: g.load_scenario("examples/nope.yaml"), "nope.yaml"),
    (lambda: g.build_cluster("no-such-preset"), "no-such-preset"),
    (lambda: g.simulate("examples/dp-only.yaml", engine="packet"), "traffic"),
    # the API names its argument, sizes=(min, max); the CLI names -b / --minbytes (tests/cli/test_perf.py)
    (lambda: g.perf("all_reduce", sizes=("64M", "1M")), "sizes[0]: got 67108864 bytes"),
    (lambda: g.perf("all_reduce", sizes=("x", "1M")), "sizes[0]: cannot read 'x'"),
    (lambda: g.perf("all_reduce", sizes=("1M", "-8")), "sizes[1]: got '-8'; expected zero or more bytes"),
    # three sizes would silently sweep from the first to the last: refused, as none or a bare string
    (lambda: g.perf("all_reduce", sizes=("1M", "2M", "4M")), "sizes: got ('1M', '2M', '4M'); expected (min, max)"),
    (lambda: g.perf("all_reduce", sizes=()), "sizes: got (); expected (min, max)"),
    (lambda: g.perf("all_reduce", sizes=("x",)), "sizes[0]: cannot read 'x'"),
    (lambda: g.perf("all_reduce", sizes="1M"), "sizes: got '1M'; expected (min, max)"),
    (lambda: g.diagnose("examples/ecmp-collision.yaml", inject=["slow-gpu:s1.gpu3"]), "inject: applies to training"),
    # the command line refuses --steps 0 itself (its option's minimum)
    (lambda: g.simulate("examples/dp-only.yaml", steps=0), "steps: got 0; expected a whole number, 1 or more"),
    # counts the command line's options type themselves: a float or a string was a TypeError or pydantic's
    # ValidationError from deep inside, and True passed as 1 (audit36)
    (lambda: g.simulate("examples/dp-only.yaml", steps=1.5), "steps: got 1.5; expected a whole number, 1 or more"),
    (lambda: g.diagnose("examples/dp-only.yaml", steps="2"), "steps: got '2'; expected a whole number, 1 or more"),
    (lambda: g.perf("all_reduce", servers=2.5), "servers: got 2.5; expected a whole number, 1 or more"),
    (lambda: g.perf("all_reduce", servers="2"), "servers: got '2'; expected a whole number, 1 or more"),
    (lambda: g.perf("all_reduce", servers=True), "servers: got True; expected a whole number, 1 or more"),
    (lambda: g.perf("all_reduce", servers=2, gpus=2.5), "gpus: got 2.5; expected a whole number, 1 or more"),
    (lambda: g.perf("all_reduce", gpus_per_thread="2"), "gpus_per_thread: got '2'; expected a whole number, 1 or more"),
    (lambda: g.build_cluster("examples/dp-only.yaml", servers="3"), "servers: got '3'; expected a whole number"),
    (lambda: g.diagnose(telemetry="examples/telemetry", cluster="rocev2-400g-2tier", servers=2.5),
     "servers: got 2.5; expected a whole number, 1 or more"),
    # a bare string where a list belongs was read character by character: "fault kind: unknown 's'"
    (lambda: g.diagnose("examples/dp-only.yaml", inject="slow-gpu:s1.gpu3"),
     "inject: got the string 'slow-gpu:s1.gpu3'; expected a list, e.g. ['slow-gpu:s1.gpu3']"),
    (lambda: g.perf("all_reduce", env="NCCL_ALGO=Ring"), "env: got the string 'NCCL_ALGO=Ring'; expected a list"),
    # the command line's -f, -n, -w, -c and -r hold these bounds themselves (their options' minimum); the
    # API took step_factor=-2 or iters=0 and printed them in the table's header
    (lambda: g.perf("all_reduce", sizes=("1M", "8M"), step_factor=-2), "step_factor: got -2; expected a whole number, 1 or more"),
    (lambda: g.perf("all_reduce", iters=0), "iters: got 0; expected a whole number, 1 or more"),
    (lambda: g.perf("all_reduce", warmup_iters=-1), "warmup_iters: got -1; expected a whole number, 0 or more"),
    (lambda: g.perf("all_reduce", check=-3), "check: got -3; expected a whole number, 0 or more"),
    (lambda: g.perf("broadcast", root=-1), "root: got -1; expected a whole number, 0 or more"),
])
def test_bad_input_raises_the_cli_errors(call, message):
    with pytest.raises(GpuwaitError, match=re.escape(message)) as raised:
        call()
    assert "\n" not in str(raised.value)


PERF = ("all_reduce", "--servers", "2")
API_NAMES = {"env": "env", "nccl_version": "nccl_version", "gpus_per_thread": "gpus_per_thread",
             "max_memory": "max_memory", "inject": "inject", "limit": "`max_memory`", "steps": "steps"}
CLI_NAMES = {"env": "--env", "nccl_version": "--nccl-version", "gpus_per_thread": "--gpus-per-thread",
             "max_memory": "--max-memory", "inject": "--inject", "limit": "--max-memory", "steps": "--steps"}
#: examples/dp-only.yaml's estimate (runner.cost: 128 ranks x 4 micro-batches x 1 chunk x 2 steps x 1 KiB + 200 MiB)
DP_ONLY_ESTIMATE = "128 ranks x 4 micro-batches x 1 chunks x 2 steps; about 210.8MB"


# Each case from both sides: the API's error names its argument, the command line's the option the user typed
# (cli.common.API_OPTIONS, renamed in one place: cli.main.main); the rest of the line is the same. Hints as
# (API, command line).
@pytest.mark.parametrize("call, cli, message, hints", [
    (lambda: g.perf("all_reduce", servers=2, env=["FOO=1"]), ["perf", *PERF, "--env", "FOO=1"],
     "{env}: got 'FOO=1'; expected an NCCL_* variable, e.g. NCCL_ALGO=Ring", None),
    (lambda: g.perf("all_reduce", servers=2, env={"NCCL_IB_HCA": "mlx5_0"}), ["perf", *PERF, "--env", "NCCL_IB_HCA=mlx5_0"],
     "{env}: NCCL_IB_HCA is not modelled; modelled NCCL variables:", None),
    (lambda: g.perf("all_reduce", servers=2, nccl_version="latest"), ["perf", *PERF, "--nccl-version", "latest"],
     "{nccl_version}: got 'latest'; expected a release such as 2.21.5", None),
    (lambda: g.perf("all_reduce", servers=2, gpus_per_thread=9), ["perf", *PERF, "--gpus-per-thread", "9"],
     "{gpus_per_thread} (nccl-tests -g): got 9; expected 1 to 8", None),
    (lambda: g.perf("all_reduce", servers=2, max_memory="16QB"), ["perf", *PERF, "--max-memory", "16QB"],
     "{max_memory}: ", ("e.g. max_memory='16GiB'", "e.g. --max-memory 16GiB")),
    (lambda: g.perf("all_reduce", servers=2, max_memory="1KB"), ["perf", *PERF, "--max-memory", "1KB"],
     "the run would allocate", ("raise the limit (e.g. max_memory='64GiB')", "raise the limit (e.g. --max-memory 64GiB)")),
    # simulate and diagnose refuse a scenario over the limit before building it, as run and diagnose do
    (lambda: g.simulate("examples/dp-only.yaml", max_memory="1MB"), ["run", "examples/dp-only.yaml", "--max-memory", "1MB"],
     f"the run would allocate {DP_ONLY_ESTIMATE}, over the limit of 1MB ({{limit}}); expected less (change "
     "workload.parallel.global_batch)", ("raise the limit (e.g. max_memory='64GiB')", "raise the limit (e.g. --max-memory 64GiB)")),
    (lambda: g.diagnose("examples/dp-only.yaml", max_memory="1MB"), ["diagnose", "examples/dp-only.yaml", "--max-memory", "1MB"],
     f"the run would allocate {DP_ONLY_ESTIMATE}, over the limit of 1MB ({{limit}})", None),
    (lambda: g.simulate("examples/dp-only.yaml", max_memory="16QB"), ["run", "examples/dp-only.yaml", "--max-memory", "16QB"],
     "{max_memory}: ", ("e.g. max_memory='16GiB'", "e.g. --max-memory 16GiB")),
    (lambda: g.diagnose("examples/dp-only.yaml", max_memory="16QB"),
     ["diagnose", "examples/dp-only.yaml", "--max-memory", "16QB"], "{max_memory}: ", None),
    (lambda: g.diagnose("examples/dp-only.yaml", inject=["slow-gpu:s1.gpu3:factor"]),
     ["diagnose", "examples/dp-only.yaml", "--inject", "slow-gpu:s1.gpu3:factor"],
     "{inject} slow-gpu:s1.gpu3:factor: parameter 'factor' is not NAME=VALUE", None),
    (lambda: g.diagnose("examples/ecmp-collision.yaml", inject=["slow-gpu:s1.gpu3"]),
     ["diagnose", "examples/ecmp-collision.yaml", "--inject", "slow-gpu:s1.gpu3"],
     "{inject}: applies to training workloads; expected a scenario with a `workload:`", None),
    # one check (runner.workload.refuse_steps_without_workload): the API's hint said "steps apply", the CLI's
    # "--steps applies", from two copies
    (lambda: g.simulate("examples/ecmp-collision.yaml", steps=2), ["run", "examples/ecmp-collision.yaml", "--steps", "2"],
     "{steps}: the scenario has no workload; expected a `workload:` section",
     ("`steps` applies to training and inference scenarios", "--steps applies to training and inference scenarios")),
    # and diagnose's: the API ran a traffic scenario's packet diagnosis as if steps were not given
    (lambda: g.diagnose("examples/ecmp-collision.yaml", steps=2), ["diagnose", "examples/ecmp-collision.yaml", "--steps", "2"],
     "{steps}: the scenario has no workload; expected a `workload:` section", None),
])
def test_an_error_names_the_api_argument_and_the_cli_option(capsys, call, cli, message, hints):
    with pytest.raises(GpuwaitError) as raised:
        call()
    assert str(raised.value).startswith(message.format(**API_NAMES))
    code, _, err = run_cli(capsys, *cli)
    lines = err.splitlines()
    assert code == 2 and lines[0].startswith("error: " + message.format(**CLI_NAMES))
    if hints:
        assert hints[0] in raised.value.hint and lines[1].startswith("hint: " + hints[1])


def test_an_estimate_over_the_limit_names_what_to_change_as_the_caller_spells_it(capsys):
    """The Python API names its arguments (``servers``, ``env``, ``sizes``), the command line its options."""
    with pytest.raises(GpuwaitError) as raised:
        g.perf("all_reduce", servers=2, max_memory="1KB")
    change = "expected less (change {}, or fewer algorithms: NCCL_ALGO in {} or a narrower {} range)"
    assert str(raised.value).endswith(change.format("`servers`", "`env`", "`sizes`"))
    code, _, err = run_cli(capsys, *["perf", *PERF, "--max-memory", "1KB"])
    assert code == 2 and err.splitlines()[0].endswith(change.format("--servers", "--env", "-b / -e"))
    from gpuwait.runner.cost import check_cost, estimate_scenario

    with pytest.raises(GpuwaitError, match=r"change workload\.steps or `steps`\)$"):  # the CLI's: tests/cli/test_cost.py
        check_cost(estimate_scenario(g.load_scenario("examples/dp-only.yaml"), steps=10**6), 1e6)


@pytest.mark.parametrize("call", [
    lambda: g.simulate("examples/dp-only.yaml", steps=10**6, max_memory="64GiB"),  # 524.5 GB: the reported OOM
    lambda: g.simulate("examples/dp-only.yaml", max_memory="1MiB"),
    lambda: g.simulate("examples/ecmp-collision.yaml", max_memory="1MiB"),
    lambda: g.simulate("examples/ecmp-collision.yaml", engine="packet", max_memory="1MiB"),
    lambda: g.diagnose("examples/dp-only.yaml", inject=["slow-gpu:s1.gpu3"], max_memory="1MiB"),
    lambda: g.diagnose("examples/ecmp-collision.yaml", max_memory="1MiB"),
])
def test_a_run_over_max_memory_is_refused_before_anything_runs(monkeypatch, call):
    """Every API entry that simulates a scenario estimates it first (runner.cost.check_scenario_cost, as
    the commands do): over ``max_memory`` it is one SpecError line naming ``max_memory``, and no run starts."""
    import gpuwait.api as api

    def never(*args, **kwargs):
        pytest.fail("ran a scenario over max_memory")

    for runner in ("run_workload", "run_traffic", "diagnose_run"):
        monkeypatch.setattr(api, runner, never)
    with pytest.raises(SpecError) as raised:
        call()
    message = str(raised.value)
    assert message.startswith("the run would allocate ") and "(`max_memory`); expected less (change " in message
    assert "\n" not in message and "max_memory='64GiB'" in raised.value.hint


def test_where_a_setting_came_from_names_the_api_argument_and_the_cli_option(capsys):
    """A release the caller asked for is "from: nccl_version" to the Python API and "from: --nccl-version" on
    the command line (cli.common.API_OPTIONS), in perf's settings and in --compare's ``nccl.source``."""
    api = {s.name: str(s) for s in g.perf("all_reduce", servers=2, nccl_version="2.21.5").settings}
    assert api["nccl_version"] == "2.21.5 (from: nccl_version)"
    code, out, _ = run_cli(capsys, "perf", *PERF, "--nccl-version", "2.21.5", "--json")
    assert code == 0 and json.loads(out)["settings"]["nccl_version"] == "2.21.5 (from: --nccl-version)"
    from gpuwait.report.perf import compare_log

    log = Path(__file__).resolve().parent / "nccltests" / "data" / "h100-2node-16gpu-large-sizes.log"
    assert compare_log("all_reduce", log, "dgx-h100", 2, nccl_version="2.21.5").nccl["source"] == "nccl_version"


def test_the_runner_names_the_engine_argument_and_the_cli_its_option():
    from gpuwait.cli.common import API_OPTIONS, options_named
    from gpuwait.runner.traffic import run_traffic

    with pytest.raises(GpuwaitError, match=r"^engine='flow': runs a scenario's `traffic:` only") as raised:
        run_traffic(g.load_scenario("examples/dp-only.yaml"), "flow")
    with pytest.raises(GpuwaitError, match=r"^--engine flow: runs a scenario's `traffic:` only"):
        with options_named(**API_OPTIONS):
            raise raised.value
    # the packet engine's hint, and a field with no option of that name, kept
    with pytest.raises(GpuwaitError) as renamed:
        with options_named(**API_OPTIONS):
            raise SpecError("limits.max_packets: got 1e12", hint="or the flow engine (engine='flow')")
    assert (str(renamed.value), renamed.value.hint) == ("limits.max_packets: got 1e12", "or the flow engine (--engine flow)")


def test_the_package_face_lists_its_names():
    assert {"simulate", "perf", "diagnose", "build_cluster", "load_scenario"} <= set(dir(g)) & set(g.__all__)
    with pytest.raises(AttributeError):
        g.no_such_name  # noqa: B018


def _json(doc: dict) -> str:
    from gpuwait.cli.output import _plain

    return json.dumps(_plain(doc))


def test_diagnose_stays_the_function_once_the_diagnosis_package_loads():
    import gpuwait.diagnosis.run  # noqa: F401  (a subpackage becomes an attribute of gpuwait when imported)
    from gpuwait import diagnose

    assert diagnose is g.diagnose and g.diagnose.__module__ == "gpuwait.api"


def test_simulate_refuses_a_jobs_scenario_in_one_line():
    """A scenario with `jobs:` (a shared cluster: examples/two-jobs-shared-uplinks.yaml) is not a traffic or workload
    scenario: simulate says so and where such scenarios run, instead of failing on its empty traffic section."""
    with pytest.raises(SpecError) as err:
        g.simulate("examples/two-jobs-shared-uplinks.yaml")
    assert str(err.value).startswith("scenario: has `jobs:`") and "\n" not in str(err.value)
    assert "gpuwait run" in err.value.hint


def test_diagnose_refuses_a_jobs_scenario_in_one_line():
    """As simulate: diagnose's API names the `jobs:` section and where such scenarios are diagnosed, instead of
    failing on the empty traffic section ("traffic: no flows and no patterns")."""
    with pytest.raises(SpecError) as err:
        g.diagnose("examples/two-jobs-shared-uplinks.yaml")
    assert str(err.value).startswith("scenario: has `jobs:`") and "\n" not in str(err.value)
    assert "gpuwait diagnose FILE" in err.value.hint


def test_a_traffic_diagnosis_is_estimated_as_the_packet_run_it_makes(capsys):
    """diagnose runs a traffic scenario on the packet engine (its pauses, marks and queues), so the estimate it
    refuses by counts the packets, as `gpuwait run --engine packet` does."""
    with pytest.raises(SpecError, match=r"packets; about .*over the limit of 1MB"):
        g.diagnose("examples/ecmp-collision.yaml", max_memory="1MB")
    code, _, err = run_cli(capsys, "diagnose", "examples/ecmp-collision.yaml", "--max-memory", "1MB")
    assert code != 0 and "packets; about" in err


def test_max_memory_governs_a_listed_alltoall_too(monkeypatch, capsys):
    """One limit for the whole run: an all-to-all that ECMP lists flow by flow is held to the caller's
    ``max_memory`` (a machine with 64 KiB would refuse it by default), in the API and the command line."""
    import os

    sysconf = os.sysconf
    monkeypatch.setattr(os, "sysconf", lambda name: 16 if name == "SC_PHYS_PAGES" else sysconf(name))
    sweep = g.perf("alltoall", cluster="rocev2-400g-2tier", servers=2, max_memory="64GiB")
    assert sweep.rows[0].oop_busbw_GBps > 0
    code, out, err = run_cli(capsys, "perf", "alltoall", "--cluster", "rocev2-400g-2tier", "--servers", "2",
                             "--max-memory", "64GiB", "--json")
    assert code == 0, err
    moe = "examples/moe-expert-parallel.yaml"  # ECMP: its expert all-to-alls are listed flow by flow
    assert g.simulate(moe, max_memory="64GiB").results[0].breakdown.step_time_s > 0
    code, out, err = run_cli(capsys, "run", moe, "--max-memory", "64GiB", "--json")
    assert code == 0, err


@pytest.mark.parametrize("call, message", [
    # docs/python.md promises load_scenario(path): a dict was read as a file name, "{'name': 'x'}: cannot read the file"
    (lambda: g.load_scenario({"name": "x"}), "path: got dict {'name': 'x'}; expected the path of a scenario file"),
    (lambda: g.load_scenario(None), "path: got NoneType None; expected the path of a scenario file"),
    (lambda: g.simulate({"name": "x"}), "scenario: got dict {'name': 'x'}; expected a Scenario (gpuwait.load_scenario)"),
    (lambda: g.diagnose({"name": "x"}), "scenario: got dict {'name': 'x'}; expected a Scenario"),
    (lambda: g.build_cluster({"preset": "dgx-h100"}), "preset_or_file: got dict {'preset': 'dgx-h100'}; expected a preset"),
    # an AttributeError traceback ('dict' object has no attribute 'endswith')
    (lambda: g.perf("all_reduce", cluster={"preset": "dgx-h100"}), "cluster: got dict {'preset': 'dgx-h100'}; expected"),
    # SweepArgs' own TypeError: "SweepArgs.__init__() got an unexpected keyword argument 'foo'"
    (lambda: g.perf("all_reduce", foo=1), "perf: unknown argument 'foo'; expected one of op, cluster, servers, sizes, "
                                          "env, gpus, step_factor, dtype, nccl_version, gpus_per_thread, max_memory, "
                                          "step_bytes, iters, warmup_iters, check, redop, root"),
    (lambda: g.perf("all_reduce", min_bytes=8), "min_bytes: perf takes the sizes as sizes=(min, max), not min_bytes="),
])
def test_a_loose_argument_is_one_spec_error_naming_it(call, message):
    with pytest.raises(SpecError, match=re.escape(message)):
        call()


def test_a_path_object_and_the_nccl_tests_keywords_still_work():
    assert g.load_scenario(Path("examples/dp-only.yaml")).name == "dp-only-llama-8b"
    sweep = g.perf("all_reduce", sizes=("1M",), iters=5, warmup_iters=0, step_bytes="1M")
    assert [row.size_bytes for row in sweep.rows] == [2**20]
