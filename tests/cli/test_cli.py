"""The CLI: thin commands, --json everywhere, one-line errors with a hint, no tracebacks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuwait import __version__
from gpuwait.cli.main import main


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_version(capsys):
    code, out, _ = run_cli(capsys, "--version")
    assert code == 0 and out.strip() == f"gpuwait {__version__}"


def test_demo_is_the_training_job(capsys, tmp_path):
    """The main job: a 70B-class model on 64 H100 servers, RoCEv2/ECMP beside InfiniBand/adaptive routing."""
    code, out, _ = run_cli(capsys, "demo", "--report", str(tmp_path), "--json")
    assert code == 0
    doc = json.loads(out)
    cases = doc["cases"]
    # one change per case: routing first, then transport
    assert [c["case"] for c in cases] == ["RoCEv2, ECMP", "RoCEv2 + adaptive routing", "InfiniBand + adaptive routing"]
    assert cases[2]["cluster"].startswith("InfiniBand on the ") and cases[0]["cluster"].startswith("rocev2-400g-2tier")
    for case in cases:
        assert case["n_gpus"] == 512 and "llama-70b" in case["workload"]
        assert sum(case["breakdown_s"].values()) == pytest.approx(case["step_time_s"], rel=1e-9)
        assert case["ideal_step_time_s"] < case["step_time_s"] and 0.2 < case["mfu"] < 0.6
    # ECMP collisions on the leaf uplinks cost time that adaptive routing gets back
    assert cases[0]["exposed_comm_s"]["dp all_reduce"] > 1.2 * cases[1]["exposed_comm_s"]["dp all_reduce"]
    # the conclusion's numbers are the results': the best case's saving and the DP all-reduce's share of it
    saved_s = cases[0]["step_time_s"] - cases[2]["step_time_s"]
    dp_s = cases[0]["exposed_comm_s"]["dp all_reduce"] - cases[2]["exposed_comm_s"]["dp all_reduce"]
    assert doc["conclusion"].startswith(
        f"InfiniBand + adaptive routing saves {saved_s * 1e3:,.1f} ms per step ({saved_s / cases[0]['step_time_s']:.1%}) "
        f"against RoCEv2, ECMP, of which {dp_s * 1e3:,.1f} ms in the DP all-reduce.")
    routing_s = cases[0]["step_time_s"] - cases[1]["step_time_s"]
    assert f"RoCEv2 + adaptive routing saves {routing_s * 1e3:,.1f} ms per step" in doc["conclusion"]
    written = {p.name for p in tmp_path.iterdir()}
    assert {"report.html", "tasks.parquet", "links.parquet"} <= written and len(written) == 6
    assert doc["conclusion"].split(" One change")[0] in (tmp_path / "report.html").read_text()
    code, out, _ = run_cli(capsys, "demo", "--report", str(tmp_path))
    assert code == 0 and "Where the step goes" in out and "report.html" in out
    assert out.startswith("InfiniBand + adaptive routing saves ")  # the conclusion comes first


def test_ecmp_example_tells_the_collision_story(capsys):
    code, out, _ = run_cli(capsys, "run", "examples/ecmp-collision.yaml", "--json")
    doc = json.loads(out)
    times = [r["summary"]["makespan_s"] for r in doc["runs"]]
    labels = [r["summary"]["label"] for r in doc["runs"]]
    assert labels[2:] == ["spray", "adaptive"]
    # utilization over time of the hottest links: the two collided uplinks stay full for the whole run
    timeline = doc["runs"][0]["link_timeline"]
    hottest = doc["runs"][0]["hot_links"][0]["link"]
    assert timeline["time_s"][0] == 0 and timeline["utilization"][hottest] == pytest.approx([1.0, 1.0])
    assert times[0] > times[1] > times[2] == pytest.approx(times[3])
    assert times[0] / times[2] == pytest.approx(2.0, rel=0.01)


def test_topo_list_and_formats(capsys):
    code, out, _ = run_cli(capsys, "topo", "--list")
    assert code == 0 and "dgx-h100-superpod" in out and "oci-a100-roce" in out
    code, out, _ = run_cli(capsys, "topo", "rocev2-400g-2tier", "--servers", "8", "--json")
    doc = json.loads(out)
    assert doc["gpus"] == 64
    code, out, _ = run_cli(capsys, "topo", "rocev2-400g-2tier", "--servers", "8", "--format", "slurm")
    assert "SwitchName=leaf0" in out
    code, out, _ = run_cli(capsys, "topo", "dgx-h100-superpod", "--servers", "32", "--format", "dot")
    assert out.lstrip().startswith(("graph", "strict graph"))


def test_route_shows_hops_in_path_order(capsys):
    code, out, _ = run_cli(capsys, "route", "rocev2-400g-2tier", "--servers", "8", "--src", "s0.gpu0", "--dst", "s4.gpu0", "--json")
    assert code == 0
    hops = [h["link"] for h in json.loads(out)["qps"][0]["hops"]]
    assert hops[0] == "s0.gpu0->s0.pcie0" and hops[-1] == "s4.pcie0->s4.gpu0"
    for a, b in zip(hops, hops[1:]):
        assert a.split("->")[1] == b.split("->")[0]


def test_route_inside_a_server_has_no_source_port(capsys):
    """Two GPUs of one server talk over NVLink, no UDP: --json said "udp_sport": -1 (the routes' sentinel)."""
    args = ("route", "rocev2-400g-2tier", "--servers", "2", "--src", "s0.gpu0")
    code, out, _ = run_cli(capsys, *args, "--dst", "s0.gpu1", "--json")
    assert code == 0 and [qp["udp_sport"] for qp in json.loads(out)["qps"]] == [None]
    code, out, _ = run_cli(capsys, *args, "--dst", "s0.gpu1")
    assert code == 0 and "source port" not in out and "-1" not in out
    # between servers RoCEv2 has its port, in both outputs
    code, out, _ = run_cli(capsys, *args, "--dst", "s1.gpu0", "--json")
    sport = json.loads(out)["qps"][0]["udp_sport"]
    assert isinstance(sport, int) and 0 <= sport < 65536
    code, out, _ = run_cli(capsys, *args, "--dst", "s1.gpu0")
    assert f"UDP source port {sport}," in out


def test_route_over_infiniband_has_no_source_port(capsys):
    """InfiniBand routes by destination LID (the subnet manager's forwarding tables): no UDP or TCP port is on
    the wire. --json printed the stand-in key the routes hash ("udp_sport": 55855) while the text showed none."""
    args = ("route", "dgx-h100", "--servers", "4", "--src", "s0.gpu0", "--dst", "s3.gpu0")
    code, out, _ = run_cli(capsys, *args, "--json")
    assert code == 0 and [qp["udp_sport"] for qp in json.loads(out)["qps"]] == [None]
    code, out, _ = run_cli(capsys, *args)
    assert code == 0 and "source port" not in out


def test_route_a_flow_set_shows_the_collided_uplinks(capsys):
    code, out, _ = run_cli(capsys, "route", "examples/ecmp-collision.yaml", "--json")
    links = json.loads(out)["links"]
    assert code == 0 and links[0]["flows"] == 2 and links[0]["link"].startswith("leaf0->spine")
    code, out, _ = run_cli(capsys, "route", "examples/ecmp-collision.yaml", "--routing", "spray", "--top", "100", "--json")
    assert max(row["flows"] for row in json.loads(out)["links"] if row["link"].startswith("leaf0->spine")) == 8


def test_run_example_and_validate(capsys, tmp_path):
    code, out, _ = run_cli(capsys, "run", "examples/ecmp-collision.yaml", "--json")
    assert code == 0 and len(json.loads(out)["runs"]) >= 2
    code, out, _ = run_cli(capsys, "validate", "examples/ecmp-collision.yaml")
    assert code == 0 and out.startswith("ok")


@pytest.mark.parametrize("args, message", [
    (["topo", "no-such-preset"], "unknown preset 'no-such-preset'"),
    (["route", "rocev2-400g-2tier", "--src", "s0.gpu0", "--dst", "s99.gpu0"], "node 's99.gpu0' does not exist"),
    (["topo", "rocev2-400g-2tier", "--servers", "10000"], "cluster.servers"),
    (["topo", "rocev2-400g-2tier", "--format", "svg"], "--format"),
])
def test_bad_input_is_one_line_and_a_hint(capsys, args, message):
    code, out, err = run_cli(capsys, *args)
    assert code == 2
    lines = err.strip().splitlines()
    assert lines[0].startswith("error: ") and message in lines[0]
    assert len(lines) <= 2 and all("Traceback" not in line for line in lines)


@pytest.mark.parametrize("args, message", [
    (["run"], "Missing argument"), (["frobnicate"], "No such command"), (["topo", "dgx-h100", "--servers", "0"], "--servers"),
    (["topo", "dgx-h100", "--bogus"], "No such option"), (["run", "x.yaml", "--flows", "abc"], "--flows"),
    # a negative count used to list all but the last flows and say "13 more flows" of 8
    (["run", "examples/ecmp-collision.yaml", "--flows", "-5"], "Invalid value for '--flows'"),
])
def test_usage_errors_are_one_line_and_a_hint(capsys, args, message):
    code, out, err = run_cli(capsys, *args)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 2 and message in lines[0] and lines[1].startswith("hint: ")


def test_validate_lists_every_problem_with_its_path(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster:\n  servers: -2\n  fabric: {oversubscription: 0.5, colour: red}\n"
                   "traffic:\n  flows:\n    - {src: s0.gpu0, dst: s1.gpu0, size: -1GB}\n")
    code, out, err = run_cli(capsys, "validate", str(bad))
    assert code == 2
    for path in ("cluster.servers", "cluster.fabric.oversubscription", "cluster.fabric.colour", "traffic.flows[0].size"):
        assert path in err
    code, out, _ = run_cli(capsys, "validate", str(bad), "--json")
    assert code == 1 and len(json.loads(out)["problems"]) == 4


def test_schema_is_json_schema(capsys):
    code, out, _ = run_cli(capsys, "schema")
    schema = json.loads(out)
    assert "cluster" in schema["properties"]
    assert "description" in schema["$defs"]["FabricSpec"]["properties"]["oversubscription"]


def test_debug_variable_shows_the_traceback(tmp_path):
    env = {"GPUWAIT_DEBUG": "1", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-m", "gpuwait.cli.main", "topo", "nope"], capture_output=True, text=True,
                          env=env | {"PYTHONPATH": ":".join(sys.path)})
    assert proc.returncode != 0 and "Traceback" in proc.stderr


@pytest.mark.parametrize("text, message", [
    ("cluster:\n  server: {nic_speed: 400}\n", "bare number has no unit"),
    ("cluster: {preset: rocev2-400g-2tier, servers: 8}\ntraffic:\n  flows:\n"
     "    - {name: a, src: s0.gpu0, dst: s4.gpu0, size: 1GB, after: [b]}\n"
     "    - {name: b, src: s0.gpu1, dst: s4.gpu1, size: 1GB, after: [a]}\n", "wait for each other"),
    ("cluster: {preset: rocev2-400g-2tier, servers: 8}\ntraffic:\n  flows:\n"
     "    - {name: a, src: s0.gpu0, dst: s4.gpu0, size: 1GB, after: [a]}\n", "'a' waits for itself"),
    ("cluster: {preset: rocev2-400g-2tier, servers: 8, routing: {hash: md5}}\n"
     "traffic: {flows: [{src: s0.gpu0, dst: s4.gpu0, size: 1GB}]}\n", "routing.hash: unknown hash 'md5'"),
    ("cluster: {preset: rocev2-400g-2tier, servers: 8}\ntraffic: {flows: [{src: s0.gpu0, dst: s0.gpu0, size: 1GB}]}\n",
     "both s0.gpu0"),
    ("cluster: {preset: rocev2-400g-2tier, servers: 8}\ntraffic: {flows: [{src: spine0, dst: s0.gpu0, size: 1GB}]}\n",
     "is a switch"),
    ("cluster: {preset: dgx-h100-superpod, servers: 2}\ntraffic: {flows: [{src: s0.snic0, dst: s1.gpu0, size: 1GB}]}\n",
     "no path from s0.snic0 to s1.gpu0"),
    ("cluster: {transport: {mtu: 0B}}\n", "transport.mtu"),
    ("cluster: {routing: {seed: 99999999999999999999}}\n", "cluster.routing.seed"),
])
def test_validate_refuses_what_run_would_refuse(capsys, tmp_path, text, message):
    path = tmp_path / "s.yaml"
    path.write_text(text)
    code, _, err = run_cli(capsys, "validate", str(path))
    assert code == 2 and message in err.splitlines()[0], err


@pytest.mark.parametrize("where, message", [
    ("", "--report: got ''; expected a directory"),
    ("a-file", "which is a file; expected a directory"),
    ("a-file/inside", "inside the file"),
])
def test_report_path_refused_before_the_run(capsys, tmp_path, monkeypatch, where, message):
    """A --report that cannot hold the report files is one error line, before the run (not a traceback
    after it, nor exit 0 with nothing written)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-file").write_text("not a directory")
    example = str(Path(__file__).resolve().parents[2] / "examples" / "dp-only.yaml")
    for command in (("run", example), ("diagnose", example, "--no-gain"), ("demo",)):
        code, _, err = run_cli(capsys, *command, "--report", where)
        assert code == 2 and message in err.splitlines()[0], (command, err)


@pytest.mark.parametrize("command", ["validate", "run", "place", "schedule"])
@pytest.mark.parametrize("old, new, message", [
    ("preset: rocev2-400g-2tier", "preset: rocev2-999", "cluster.preset: unknown preset 'rocev2-999'"),
    ("preset: rocev2-400g-2tier", "preset: rocev2-400g-2tier\n  server: {template: dgx-h999}",
     "cluster.server.template: unknown template 'dgx-h999'"),
])
def test_an_unknown_name_in_a_file_names_the_file_and_its_yaml_path(capsys, tmp_path, command, old, new, message):
    """Like every other field of a file: the file, then the YAML path (it said 'preset: ...' or
    'server.template: ...' with neither the file nor the cluster section)."""
    text = Path("examples/two-jobs-shared-uplinks.yaml").read_text()
    assert old in text
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace(old, new, 1))
    code, _, err = run_cli(capsys, command, str(bad))
    assert code == 2 and err.splitlines()[0].startswith(f"error: {bad}: {message}; expected one of ")


LOG = str(Path(__file__).resolve().parents[1] / "nccltests" / "data" / "reference" / "a100-dgx-4gpu-all_reduce.log")
TRACE = str(Path(__file__).resolve().parents[1] / "data" / "traces" / "helios-sample.csv")


@pytest.mark.parametrize("args, option", [
    (["perf", "all_reduce", "--cluster", "nope"], "--cluster"),
    (["perf", "all_reduce", "--cluster", "nope", "--compare", LOG], "--cluster"),
    (["calibrate", LOG, "--cluster", "nope"], "--cluster"),
    (["diagnose", "--telemetry", "tests", "--cluster", "nope"], "--cluster"),
    (["place", "examples/two-jobs-shared-uplinks.yaml", "--cluster", "nope"], "--cluster"),
    (["schedule", TRACE, "--cluster", "nope"], "--cluster"),
    (["schedule", "examples/two-jobs-shared-uplinks.yaml", "--cluster", "nope"], "--cluster"),
    (["topo", "nope"], "PRESET|FILE"),
    (["route", "nope", "--src", "s0.gpu0", "--dst", "s1.gpu0"], "PRESET|FILE"),
])
def test_an_unknown_preset_names_the_option_the_user_typed(capsys, args, option):
    """The Python API names its field (`preset: unknown preset`); the command line names the option
    or argument the user typed, which `--help` lists (it said `preset:` on every command)."""
    code, _, err = run_cli(capsys, *args)
    assert code == 2 and err.splitlines()[0].startswith(f"error: {option}: unknown preset 'nope'; expected one of ")


def test_an_unknown_collective_names_the_op_argument(capsys):
    code, _, err = run_cli(capsys, "perf", "allreduce", "--cluster", "dgx-h100", "--servers", "1")
    assert code == 2 and err.splitlines()[0].startswith("error: OP: unknown nccl-tests collective 'allreduce'")


@pytest.mark.parametrize("command, options", [("place", ["--export", "slurm"]), ("schedule", ["--servers", "16"])])
def test_cluster_option_replaces_a_file_whose_own_preset_is_unknown(capsys, tmp_path, command, options):
    """`--cluster` replaces the file's cluster, so the file's preset is never used and not looked up
    (it was refused first, naming a field the command would have thrown away)."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(Path("examples/two-jobs-shared-uplinks.yaml").read_text().replace(
        "preset: rocev2-400g-2tier", "preset: rocev2-999", 1))
    code, _, err = run_cli(capsys, command, str(bad), *options, "--cluster", "rocev2-400g-2tier")
    assert code == 0, err
    code, _, err = run_cli(capsys, command, str(bad), *options, "--cluster", "nope")
    assert code == 2 and err.startswith("error: --cluster: unknown preset 'nope'")


def test_compare_refuses_an_op_the_log_did_not_run(capsys):
    """The log's collective is the one compared: another OP was silently dropped."""
    code, _, err = run_cli(capsys, "perf", "broadcast", "--cluster", "dgx-a100", "--compare", LOG)
    assert code == 2 and err.splitlines()[0] == f"error: OP: got 'broadcast', but {LOG} ran all_reduce; expected all_reduce"


@pytest.mark.parametrize("option", [["-b", "1M"], ["--datatype", "half"], ["--max-memory", "1GiB"], ["--report-algo"]])
def test_compare_refuses_the_sweep_options_it_would_drop(capsys, option):
    """The log's sizes, datatype and root are compared; these options were silently dropped."""
    code, _, err = run_cli(capsys, "perf", "all_reduce", "--cluster", "dgx-a100", "--compare", LOG, *option)
    first = err.splitlines()[0]
    assert code == 2 and first.startswith("error: --compare: got ") and option[0] in first and "expected none" in first


def test_a_validation_error_not_from_pydantic_propagates_as_itself(monkeypatch):
    # the one-line handler matched pydantic's error by class name: another library's ValueError named
    # ValidationError (no .errors()) then broke inside the handler with an AttributeError
    import gpuwait.cli.main as cli_main

    class ValidationError(ValueError):
        pass

    def fail(**_):
        raise ValidationError("not pydantic's")

    monkeypatch.setattr(cli_main, "app", fail)
    with pytest.raises(ValidationError, match="not pydantic's"):
        main([])


@pytest.mark.parametrize("example, section", [("examples/dp-only.yaml", "a `workload:`"),
                                              ("examples/two-jobs-shared-uplinks.yaml", "`jobs:`")])
def test_flows_on_a_scenario_without_traffic_is_refused(capsys, example, section):
    """`run workload.yaml --flows 5` printed the workload's tables as if --flows were not there."""
    code, out, err = run_cli(capsys, "run", example, "--flows", "5")
    assert code == 2 and out == "" and len(err.strip().splitlines()) <= 2, err
    assert err.startswith(f"error: --flows: lists a traffic scenario's flows; this one has {section}"), err


def test_run_and_validate_say_an_nccl_version_newer_than_checked_is_predicted_as_the_newest(capsys, tmp_path):
    """perf said "NCCL 2.31.0 is newer than the last release gpuwait checked"; run and validate said nothing."""
    from gpuwait.collectives.nccl_versions import newer_release_note

    note = newer_release_note("2.31.0")
    path = tmp_path / "s.yaml"
    path.write_text("cluster: {preset: dgx-h100, servers: 2, nccl: {version: 2.31.0}}\n"
                    "workload: {model: {preset: llama-8b}, parallel: {tp: 8, global_batch: 16}}\n")
    code, out, _ = run_cli(capsys, "validate", str(path), "--json")
    assert code == 0 and json.loads(out)["notes"] == [note]
    code, out, _ = run_cli(capsys, "validate", str(path))
    assert code == 0 and "note: NCCL 2.31.0 is newer than the last release gpuwait checked" in out
    code, out, _ = run_cli(capsys, "run", str(path), "--json")
    assert code == 0 and all(case["notes"] == [note] for case in json.loads(out)["cases"])
    code, out, _ = run_cli(capsys, "run", str(path))
    assert code == 0 and "NCCL 2.31.0 is newer than the last release gpuwait checked" in out
    path.write_text(path.read_text().replace("2.31.0", "2.30.7"))  # a release checked: nothing to say
    code, out, _ = run_cli(capsys, "validate", str(path), "--json")
    assert code == 0 and json.loads(out)["notes"] == []


@pytest.mark.parametrize("cluster, transport", [("gcp-a3-high-tcpx", "tcpx"), ("gcp-a3-mega-tcpxo", "tcpxo"),
                                                ("aws-p5-efa", "efa")])
def test_route_shows_the_source_port_the_model_hashes_for_every_transport(capsys, cluster, transport):
    """tcpx, tcpxo and efa rows are hashed by a RoCEv2-style UDP port like RoCEv2's, but route showed no port
    for them (only rocev2 and tcp had one): the path it printed came from a key it did not show."""
    from gpuwait.routing import route_flows
    from gpuwait.runner.inputs import load_cluster
    from gpuwait.topology import build_topology

    path = str(Path(__file__).resolve().parents[1] / "nccltests" / "data" / "reference" / "clusters" / f"{cluster}.yaml")
    args = ("route", path, "--servers", "2", "--routing", "ecmp", "--qps", "2", "--src", "s0.gpu0", "--dst", "s1.gpu0")
    spec = load_cluster(path, 2)
    routes = route_flows(build_topology(spec), spec.routing.model_copy(update={"kind": "ecmp", "qps_per_connection": 2}),
                         ["s0.gpu0"], ["s1.gpu0"], transport=transport)
    hashed = [int(p) for p in routes.udp_sport]
    code, out, _ = run_cli(capsys, *args, "--json")
    doc = json.loads(out)
    assert code == 0 and [qp["udp_sport"] for qp in doc["qps"]] == hashed
    assert doc["source_port"] == "UDP source port" and "stand-in" in doc["source_port_note"]
    code, out, _ = run_cli(capsys, *args)
    assert code == 0 and f"QP 0, UDP source port {hashed[0]}," in out and f"note: {transport} is hashed as RoCEv2" in out


def test_true_or_false_where_a_number_belongs_is_refused_under_its_path(capsys, tmp_path):
    """YAML's true read as 1: `pp: true` validated and ran one pipeline stage, `gpus: true` one GPU (audit36).
    Unit fields already refused a bool, naming their unit; a field that takes a bool keeps it."""
    path = tmp_path / "s.yaml"
    path.write_text("name: x\ncluster: {preset: dgx-h100, servers: 2, server: {template: dgx-h100, gpus: true}}\n"
                    "workload:\n  model: {preset: llama-8b}\n"
                    "  parallel: {tp: 8, pp: true, overlap_grad_reduce: false}\n"
                    "  compute: {gpu: H100-SXM, efficiency: false}\n  steps: 1\n")
    for command in ("validate", "run"):
        code, _, err = run_cli(capsys, command, str(path))
        assert code != 0 and "Traceback" not in err
        assert "cluster.server.gpus: got 'true'; input should be a valid integer" in err
        assert "workload.parallel.pp: got 'true'; input should be a valid integer" in err
        assert "workload.compute.efficiency: got 'false'; input should be a valid number" in err
        assert "overlap_grad_reduce" not in err and err.startswith(f"error: {path}: 3 problems")


def test_booleans_belong_to_yes_no_fields_only(capsys, tmp_path):
    """The rule of the test above, two more ways: true in a list of numbers (`placement: [true, 0]` put rank 0's
    server at index 1; `gpu_pcie_switch: [0, false]`) and a number or a quoted word in a yes/no field
    (`sequence_parallel: 1` turned sequence parallelism on, though to a reader of tools that give SP a degree
    1 means off; `overlap_grad_reduce: 'no'` read as false), each refused under its path."""
    path = tmp_path / "s.yaml"
    path.write_text("name: x\ncluster: {preset: dgx-h100, servers: 2, server: {template: dgx-h100, "
                    "gpu_pcie_switch: [0, false, 1, 1, 2, 2, 3, 3]}}\n"
                    "workload:\n  model: {preset: llama-8b}\n"
                    "  parallel: {tp: 8, placement: [true, 0], sequence_parallel: 1, overlap_grad_reduce: 'no'}\n"
                    "  compute: {gpu: H100-SXM}\n  steps: 1\n")
    code, _, err = run_cli(capsys, "validate", str(path))
    assert code != 0 and "Traceback" not in err
    assert "cluster.server.gpu_pcie_switch[1]: got 'false'; input should be a valid integer" in err
    assert "workload.parallel.placement[0]: got 'true'; input should be a valid integer" in err
    assert "workload.parallel.sequence_parallel: got 1; input should be a valid boolean" in err
    assert "workload.parallel.overlap_grad_reduce: got 'no'; input should be a valid boolean" in err
    path.write_text(path.read_text().replace("[0, false,", "[0, 0,").replace("[true, 0]", "[1, 0]")
                    .replace("sequence_parallel: 1", "sequence_parallel: true").replace("'no'", "no"))
    code, _, err = run_cli(capsys, "validate", str(path))
    assert code == 0, err


def test_true_in_a_mapping_of_numbers_is_refused_under_its_key(capsys, tmp_path):
    """The same rule for a mapping of names to numbers: `loader_samples_per_s_by_server: {s1: true}` validated
    and gave server s1's loaders 1 sample/s (review36); 2 there runs."""
    path = tmp_path / "s.yaml"
    path.write_text("name: x\ncluster: {preset: dgx-h100, servers: 2}\n"
                    "workload:\n  model: {preset: llama-8b}\n  parallel: {tp: 8}\n  compute: {gpu: H100-SXM}\n"
                    "  data: {loader_samples_per_s_by_server: {s1: true}}\n  steps: 1\n")
    code, _, err = run_cli(capsys, "validate", str(path))
    assert code != 0 and "Traceback" not in err
    assert "workload.data.loader_samples_per_s_by_server.s1: got 'true'; input should be a valid number" in err
    path.write_text(path.read_text().replace("{s1: true}", "{s1: 2}"))
    code, _, err = run_cli(capsys, "validate", str(path))
    assert code == 0, err


def test_a_wrong_key_of_a_mapping_is_named_as_a_key(capsys, tmp_path):
    """`loader_samples_per_s_by_server: {3: 10}` (a server index where a name belongs) read
    'loader_samples_per_s_by_server[3].[key]: got 3', as if item 3 of a list were wrong (review36)."""
    path = tmp_path / "s.yaml"
    path.write_text("name: x\ncluster: {preset: dgx-h100, servers: 4}\n"
                    "workload:\n  model: {preset: llama-8b}\n  parallel: {tp: 8}\n  compute: {gpu: H100-SXM}\n"
                    "  data: {loader_samples_per_s_by_server: {3: 10}}\n  steps: 1\n")
    code, _, err = run_cli(capsys, "validate", str(path))
    assert code != 0 and "[key]" not in err
    assert "workload.data.loader_samples_per_s_by_server (a key): got 3; input should be a valid string" in err
