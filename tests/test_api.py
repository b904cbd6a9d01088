"""The Python API: the same documents as the CLI's --json, the same errors, Arrow and Parquet tables."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

import gpuwait as g
from gpuwait.errors import GpuwaitError
from tests.cli.test_cli import run_cli


def test_the_done_when_line():
    s = g.load_scenario("examples/dp-only.yaml")
    assert g.simulate(s).to_dict().keys() == {"scenario", "conclusion", "cases", "report"}


def test_simulate_gives_the_cli_document(capsys, tmp_path):
    result = g.simulate("examples/dp-only.yaml")
    code, out, _ = run_cli(capsys, "run", "examples/dp-only.yaml", "--json")
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
    result = g.diagnose("examples/dp-only.yaml", inject=["slow-gpu:s1.gpu3"], measure_gain=False)
    code, out, _ = run_cli(capsys, "diagnose", "examples/dp-only.yaml", "--inject", "slow-gpu:s1.gpu3", "--no-gain", "--json")
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
    # the API names its field; the CLI maps it to -b / --minbytes (tests/cli/test_perf.py)
    (lambda: g.perf("all_reduce", sizes=("64M", "1M")), "min_bytes: got 67108864 bytes"),
    (lambda: g.diagnose("examples/ecmp-collision.yaml", inject=["slow-gpu:s1.gpu3"]), "--inject"),
])
def test_bad_input_raises_the_cli_errors(call, message):
    with pytest.raises(GpuwaitError, match=message.replace(".", r"\.")):
        call()


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
