"""Scenario files: frozen, unknown fields rejected, every problem listed with its YAML path."""

from __future__ import annotations

import pydantic
import pytest

from gpuwait.errors import SpecError, UnknownNameError
from gpuwait.spec import ClusterSpec, Scenario, ServerSpec, load_model, validate_data
from gpuwait.topology import preset_spec, resolve_cluster, resolve_server


def test_quantities_are_parsed_into_si_units():
    spec = validate_data(ClusterSpec, {"server": {"nic_speed": "200Gbps", "nvlink_bandwidth": "300GB/s"},
                                       "fabric": {"switch_latency": "450ns"}})
    assert spec.server.nic_speed == 25e9 and spec.server.nvlink_bandwidth == 300e9
    assert spec.fabric.switch_latency == pytest.approx(450e-9)


def test_models_are_frozen():
    spec = ClusterSpec()
    with pytest.raises(pydantic.ValidationError):
        spec.servers = 4


def test_every_problem_is_reported_with_path_value_and_expectation():
    with pytest.raises(SpecError) as info:
        validate_data(Scenario, {"cluster": {"servers": 0, "fabric": {"oversubscription": 0.5, "tiers": 4, "typo": 1},
                                             "server": {"nic_speed": "fast"}},
                                 "traffic": {"patterns": [{"kind": "zigzag", "size": "1MB"}]}})
    problems = info.value.problems
    paths = [p.split(":")[0] for p in problems]
    assert paths == ["cluster.servers", "cluster.server.nic_speed", "cluster.fabric.tiers", "cluster.fabric.oversubscription",
                     "cluster.fabric.typo", "traffic.patterns[0].kind"]
    assert "got 0.5" in problems[3] and "greater than or equal to 1" in problems[3]
    assert "no such field" in problems[4]
    assert "cannot read 'fast'" in problems[1]


def test_template_fields_fill_only_what_the_user_left_out():
    server = resolve_server(ServerSpec(template="dgx-a100", nics=4))
    assert server.nics == 4 and server.nic_speed == 25e9 and server.nvlink_bandwidth == 300e9
    with pytest.raises(UnknownNameError, match="unknown template 'dgx-z'"):
        resolve_server(ServerSpec(template="dgx-z"))


def test_preset_with_overrides():
    spec = resolve_cluster(validate_data(ClusterSpec, {"preset": "rocev2-400g-2tier", "servers": 8,
                                                       "routing": {"seed": 3}, "fabric": {"oversubscription": 2}}))
    assert spec.servers == 8 and spec.routing.seed == 3 and spec.routing.kind == "ecmp"
    assert spec.fabric.oversubscription == 2 and spec.fabric.switch_radix == 64
    with pytest.raises(UnknownNameError, match="unknown preset"):
        preset_spec("dgx-b300")


def test_yaml_errors_name_the_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster:\n  servers: [1,\n")
    with pytest.raises(SpecError, match="not valid YAML at line"):
        load_model(Scenario, bad)
    with pytest.raises(SpecError, match="cannot read the file"):
        load_model(Scenario, tmp_path / "missing.yaml")


def test_schema_documents_every_field():
    schema = Scenario.model_json_schema()

    def walk(node):
        for name, prop in node.get("properties", {}).items():
            assert prop.get("description"), name
    for definition in schema["$defs"].values():
        walk(definition)


def test_two_variants_of_one_name_are_refused():
    # the comparison table, the traffic conclusion and the report key cases by name: a second "ar" took the
    # first's place, and the conclusion paired one run's p99 with another's (review of session 31)
    data = {"cluster": {"preset": "rocev2-400g-2tier", "servers": 2},
            "variants": [{"name": "ar", "routing": {"kind": "adaptive"}}, {"name": "ar", "routing": {"kind": "spray"}}]}
    with pytest.raises(SpecError, match="variant name 'ar' appears twice"):
        validate_data(Scenario, data)
    data["variants"][1]["name"] = "spray"
    assert [v.name for v in validate_data(Scenario, data).variants] == ["ar", "spray"]
