"""Expanding a sweep file into cases: axes by dotted path, product/zip, exclusions, content ids."""

from __future__ import annotations

import pytest

from gpuwait.errors import SpecError
from gpuwait.runner.sweep import get_path, load_sweep, plan_sweep, run_case, set_path
from gpuwait.spec import validate_data
from gpuwait.spec.sweep import SweepSpec

from .conftest import N_CASES, N_INVALID


def test_set_path_expands_preset_and_template_shorthand():
    doc = {"cluster": "dgx-h100"}
    set_path(doc, "cluster.server.nics", 4)
    set_path(doc, "cluster.routing.qps_per_connection", 2)
    assert doc == {"cluster": {"preset": "dgx-h100", "server": {"nics": 4}, "routing": {"qps_per_connection": 2}}}
    doc = {"cluster": {"server": "dgx-a100"}}
    set_path(doc, "cluster.server.gpus", 4)
    assert doc["cluster"]["server"] == {"template": "dgx-a100", "gpus": 4}
    assert get_path(doc, "cluster.server.gpus") == 4 and get_path(doc, "cluster.nope.x") is None


def test_set_path_into_a_scalar_is_one_error():
    with pytest.raises(SpecError, match=r"axis name\.x: name is 's'"):
        set_path({"name": "s"}, "name.x", 1)


def test_product_with_exclusions_and_invalid_cases(tiny_sweep):
    plan = plan_sweep(*load_sweep(tiny_sweep))
    assert plan.kind == "perf" and len(plan.cases) == N_CASES
    assert plan.axes == ["cluster_servers", "cluster_routing_kind", "perf_env_NCCL_ALGO"]
    invalid = [c for c in plan.cases if c.error]
    assert len(invalid) == N_INVALID
    # the one-line error `gpuwait validate` prints, naming the field and what was expected
    assert all("cluster.routing.kind: got 'bogus'; input should be" in c.error for c in invalid)
    assert len({c.case_id for c in plan.cases}) == N_CASES
    assert not any(c.axes["cluster_servers"] == 4 and c.axes["perf_env_NCCL_ALGO"] == "Tree" for c in plan.cases)


def test_zip_pairs_values_and_refuses_unequal_axes():
    base = {"cluster": {"preset": "dgx-h100"}}
    spec = validate_data(SweepSpec, {"base": base, "perf": {}, "combine": "zip",
                                     "axes": {"cluster.servers": [2, 4], "cluster.routing.seed": [1, 2]}})
    assert [tuple(c.axes.values()) for c in plan_sweep(spec, base).cases] == [(2, 1), (4, 2)]
    bad = spec.model_copy(update={"axes": [*spec.axes[:1], spec.axes[1].model_copy(update={"values": [1]})]})
    with pytest.raises(SpecError, match="zip needs axes of one length"):
        plan_sweep(bad, base)


def test_an_exclusion_on_a_path_no_axis_varies_is_one_error():
    """It could never match a case, so it would leave out nothing without a word (found by bench/fuzz.py)."""
    base = {"cluster": {"preset": "dgx-h100"}}
    with pytest.raises(SpecError, match=r"exclude: .*entry 0: 'cluster.nope' is not an axis path; expected one of "
                                        r"cluster.servers"):
        validate_data(SweepSpec, {"base": base, "perf": {}, "axes": {"cluster.servers": [2, 4]},
                                  "exclude": [{"cluster.nope": 1}]})


def test_an_empty_exclusion_is_one_error():
    """An entry with no path matches every case and would leave the whole sweep out (found by bench/fuzz.py --seed
    3031: `exclude: [{}]` was accepted)."""
    base = {"cluster": {"preset": "dgx-h100"}}
    with pytest.raises(SpecError, match=r"exclude: .*entry 0: empty; expected at least one axis path and its value "
                                        r"\(cluster.servers\)"):
        validate_data(SweepSpec, {"base": base, "perf": {}, "axes": {"cluster.servers": [2, 4]}, "exclude": [{}]})


def test_an_axis_on_workload_steps_is_one_error():
    """Every case runs the sweep's own `steps` (default 1): an axis `workload.steps: [1, 2]` gave two rows
    with the same one-step time and said nothing. The axis for steps is `steps`."""
    base = {"workload": {"model": {"preset": "llama-8b"}}}
    with pytest.raises(SpecError, match=r'axes\[0\]\.path: .*this axis would change nothing; expected the path "steps"'):
        validate_data(SweepSpec, {"base": base, "axes": {"workload.steps": [1, 2]}})
    assert validate_data(SweepSpec, {"base": base, "axes": {"steps": [1, 2]}}).axes[0].path == "steps"


def test_id_is_the_content_not_the_spelling():
    """A preset's own value given explicitly, the scenario's name and 2 vs 2.0 do not change the id."""
    base = {"name": "a", "cluster": {"preset": "dgx-h100", "servers": 2}}
    spec = validate_data(SweepSpec, {"base": base, "perf": {}, "axes": {"cluster.servers": [2, 2.0, 4]}})
    ids = [c.case_id for c in plan_sweep(spec, base).cases]
    assert ids[0] == ids[1] != ids[2]
    renamed = plan_sweep(spec, base | {"name": "b", "cluster": {"preset": "dgx-h100", "servers": 2,
                                                                "transport": {"name": "infiniband"}}}).cases
    assert renamed[0].case_id == ids[0]  # dgx-h100 is InfiniBand already
    steps = plan_sweep(spec.model_copy(update={"steps": 3}), base).cases
    assert steps[0].case_id != ids[0]  # what decides a result is in the id


def test_unknown_axis_field_is_an_invalid_row_not_a_crash():
    base = {"cluster": {"preset": "dgx-h100", "servers": 2}}
    spec = validate_data(SweepSpec, {"base": base, "perf": {}, "axes": {"cluster.fabric.oversubscriptoin": [2]}})
    case = plan_sweep(spec, base).cases[0]
    assert "cluster.fabric.oversubscriptoin" in case.error and "no such field" in case.error
    row = run_case(case.case_id, case.doc, case.axes)
    assert row["status"] == "invalid" and row["error"] == case.error


def test_validate_checks_run_on_each_case():
    """A case pydantic accepts but `gpuwait validate` refuses (TP larger than the GPUs) is an invalid row."""
    base = {"cluster": {"preset": "dgx-h100", "servers": 2},
            "workload": {"model": {"preset": "llama-8b"}, "parallel": {"tp": 8, "global_batch": 16}}}
    spec = validate_data(SweepSpec, {"base": base, "axes": {"workload.parallel.tp": [16]}})
    case = plan_sweep(spec, base).cases[0]
    assert case.error is None
    row = run_case(case.case_id, case.doc, case.axes)
    assert row["status"] == "invalid" and "tp" in row["error"]


def test_a_case_over_the_memory_limit_is_refused_before_it_runs():
    """As `gpuwait run` refuses a scenario whose estimate exceeds the limit (gpuwait.runner.cost), a sweep case
    does: a billion steps asked for ~119 GiB of step tables and died of a MemoryError (bench/fuzz.py seed 3038).
    The case here asks a thousand times that, over the default limit (half the machine's memory) of any machine:
    at a billion steps a machine of 256 GiB or more would run it."""
    base = {"cluster": {"preset": "dgx-h100", "servers": 2},
            "workload": {"model": {"preset": "llama-8b", "seq_len": 2048}, "parallel": {"tp": 8, "global_batch": 16}}}
    spec = validate_data(SweepSpec, {"base": base, "steps": 10**12, "axes": {"cluster.routing.kind": ["ecmp"]}})
    case = plan_sweep(spec, base).cases[0]
    row = run_case(case.case_id, case.doc, case.axes)
    assert row["status"] == "invalid" and "over the limit" in row["error"] and "steps" in row["error"]
    small = plan_sweep(validate_data(SweepSpec, {"base": base, "steps": 1, "axes": {"cluster.routing.kind": ["ecmp"]}}),
                       base).cases[0]
    row = run_case(small.case_id, small.doc, small.axes, max_memory_bytes=1e3)
    assert row["status"] == "invalid" and "over the limit of 1KB" in row["error"]


def test_example_study_plans_its_32_cases():
    from pathlib import Path

    study = Path(__file__).resolve().parents[2] / "examples" / "sweeps" / "ib-vs-roce.yaml"
    plan = plan_sweep(*load_sweep(study))
    assert plan.kind == "workload" and len(plan.cases) == 32 and not any(c.error for c in plan.cases)
    assert plan.axes == ["transport", "routing", "qps", "oversubscription"]
    assert {(c.axes["transport"], c.axes["routing"]) for c in plan.cases} == {
        ("infiniband", "static"), ("infiniband", "adaptive"), ("rocev2", "ecmp"), ("rocev2", "adaptive")}


def test_the_workload_steps_axis_error_reads_the_same_on_the_command_line(capsys, tmp_path):
    from tests.cli.test_cli import run_cli

    path = tmp_path / "s.yaml"
    path.write_text("base: {workload: {model: {preset: llama-8b}}}\naxes: {workload.steps: [1, 2]}\n")
    code, _, err = run_cli(capsys, "sweep", "run", str(path), "--out", str(tmp_path / "out"))
    assert code == 2 and "expected the path \"steps\"" in err and "--steps" not in err, err


def test_the_base_workload_steps_replaced_by_the_sweeps_steps_is_said():
    """A base with `workload.steps: 3` ran one step per case (the sweep's default `steps`) without a word; the
    sweep's steps decide (docs/sweeps.md), and the plan now says so, naming both fields."""
    base = {"cluster": {"preset": "dgx-h100", "servers": 2},
            "workload": {"model": {"preset": "llama-8b"}, "steps": 3}}
    plan = plan_sweep(validate_data(SweepSpec, {"base": base}), base)
    assert {c.doc["steps"] for c in plan.cases} == {1}
    assert plan.notes == ("workload.steps: the base's 3 is replaced in every case by the sweep's steps (1, its "
                          "default); the sweep file's steps field sets the steps of a sweep",)
    assert plan_sweep(validate_data(SweepSpec, {"base": base, "steps": 3}), base).notes == ()
    by_axis = plan_sweep(validate_data(SweepSpec, {"base": base, "axes": {"steps": [1, 2]}}), base).notes
    assert by_axis == ("workload.steps: the base's 3 is replaced in every case by the sweep's steps axis; "
                       "the sweep file's steps field sets the steps of a sweep",)
    without = {k: v for k, v in base["workload"].items() if k != "steps"}
    assert plan_sweep(validate_data(SweepSpec, {"base": base | {"workload": without}}), base | {"workload": without}).notes == ()


def test_the_steps_note_is_printed_before_the_cases_run(capsys, tmp_path):
    import json

    from tests.cli.test_cli import run_cli

    path = tmp_path / "s.yaml"
    path.write_text("base:\n  cluster: {preset: dgx-h100, servers: 1}\n"
                    "  workload: {model: {preset: llama-8b}, parallel: {tp: 8, global_batch: 8}, steps: 2}\n")
    code, _, err = run_cli(capsys, "sweep", str(path), "--out", str(tmp_path / "out"), "--workers", "1")
    assert code == 0 and err.startswith("note: workload.steps: the base's 2 is replaced in every case by the sweep's "
                                        "steps (1, its default)"), err
    code, out, _ = run_cli(capsys, "sweep", str(path), "--out", str(tmp_path / "out"), "--json")
    assert code == 0 and json.loads(out)["notes"][0].startswith("workload.steps: the base's 2")


def test_sweep_run_takes_max_memory(tmp_path, capsys):
    import yaml

    from gpuwait.cli.main import main

    sweep = {"name": "m", "base": {"cluster": {"preset": "dgx-h100", "servers": 2},
                                   "workload": {"model": {"preset": "llama-8b", "seq_len": 2048},
                                                "parallel": {"tp": 8, "global_batch": 16}}},
             "steps": 1, "axes": [{"path": "cluster.routing.kind", "values": ["ecmp"]}]}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(sweep))
    assert main(["sweep", "run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "o"), "--workers", "1",
                 "--max-memory", "1KB"]) == 2
    assert "over the limit of 1KB" in capsys.readouterr().err
    # the stored row names what the user set, the option, as the command's own error does
    from gpuwait.report.sweep import query

    _, rows = query(str(tmp_path / "o"), "select error from results")
    assert "(--max-memory)" in rows[0][0] and "max_memory" not in rows[0][0], rows
    assert main(["sweep", "run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "o2"), "--max-memory", "1Q"]) == 2
    assert capsys.readouterr().err.startswith("error: --max-memory:")


def test_a_perf_section_on_a_sweep_of_another_kind_is_refused():
    """docs/sweeps.md's example gave `perf:` and a `perf.env.NCCL_ALGO` axis over a base with a workload under
    `kind: auto`: every case ran the workload, the perf arguments changed nothing but the case ids, so each
    workload ran once per NCCL_ALGO value. A setting either changes the result or is refused (docs/model.md)."""
    base = {"cluster": {"preset": "dgx-h100", "servers": 2},
            "workload": {"model": {"preset": "llama-8b"}, "parallel": {"tp": 8, "global_batch": 16}}}
    for extra in ({}, {"axes": {"perf.env.NCCL_ALGO": ["Ring", "Tree"]}}):
        spec = validate_data(SweepSpec, {"base": base, "perf": {"op": "all_reduce"}, **extra})
        with pytest.raises(SpecError, match=r"perf: the sweep is of kind workload .*; expected kind: perf"):
            plan_sweep(spec, base)
    spec = validate_data(SweepSpec, {"base": base, "kind": "perf", "perf": {}, "axes": {"perf.env.NCCL_ALGO": ["Ring", "Tree"]}})
    assert plan_sweep(spec, base).kind == "perf"


def test_true_as_a_perf_size_is_refused_not_read_as_one_byte(tmp_path):
    """`perf: {min_bytes: true}` (a field that takes a number or nccl-tests' text, int | str) was read by
    pydantic as 1 and the sweep ran from 1 byte (review36): a bool is taken as the text the file spells, so
    the case is refused naming the field, as `min_bytes: yes` was."""
    base = {"cluster": {"preset": "dgx-h100", "servers": 2}}
    spec = validate_data(SweepSpec, {"base": base, "perf": {"min_bytes": True, "max_bytes": False},
                                     "axes": {"cluster.servers": [2]}})
    assert (spec.perf.min_bytes, spec.perf.max_bytes) == ("true", "false")
    path = tmp_path / "s.yaml"
    path.write_text("name: s\nbase: {cluster: {preset: dgx-h100, servers: 2}}\n"
                    "perf: {op: all_reduce, min_bytes: true, max_bytes: 16M}\naxes: {cluster.servers: [2]}\n")
    (case,) = plan_sweep(*load_sweep(path)).cases
    row = run_case(case.case_id, case.doc, case.axes)
    assert row["status"] == "invalid" and "min_bytes: cannot read 'true'" in row["error"]
