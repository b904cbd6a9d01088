"""QPs per connection have one owner (issue 20): NCCL's environment, else the cluster file, else NCCL's 1.

``oci-a100-roce`` declares 4 QPs per connection (OCI's published RoCE setting: NCCL_IB_QPS_PER_CONNECTION=4
in OCI's "Running RDMA network workloads" HPC guide); before this fix ``perf`` replaced it with NCCL's
default 1 while ``run`` kept 4.
"""

from __future__ import annotations

import pytest

from gpuwait.collectives.communicator import Communicator
from gpuwait.collectives.ncclenv import parse_env, parse_env_pairs, qps_setting
from gpuwait.fabric.perf import CollectivePredictor
from gpuwait.runner.inputs import load_cluster
from gpuwait.runner.perf import SweepArgs, make_predictor, perf_sweep
from gpuwait.spec import RoutingSpec
from gpuwait.topology import build_topology
from gpuwait.transport import resolve_transport

ARGS = SweepArgs(min_bytes="1G", max_bytes="1G")


def _busbw(env=()):
    sweep = perf_sweep("all_reduce", ARGS, cluster="oci-a100-roce", servers=2, env=list(env))
    return sweep.rows[0].oop_busbw_GBps, sweep.settings[0]


def test_perf_uses_the_cluster_files_qps_unless_the_nccl_env_sets_them(monkeypatch):
    monkeypatch.delenv("NCCL_IB_QPS_PER_CONNECTION", raising=False)
    file_bw, file_qps = _busbw()
    env4_bw, env4 = _busbw(["NCCL_IB_QPS_PER_CONNECTION=4"])
    env1_bw, env1 = _busbw(["NCCL_IB_QPS_PER_CONNECTION=1"])
    assert str(file_qps) == "4 (from: cluster file)" and str(env4) == "4 (from: NCCL env)"
    assert str(env1) == "1 (from: NCCL env)"
    assert file_bw == pytest.approx(env4_bw)
    # two servers under one leaf: no ECMP choice to collide on, and one QP still reaches both of a GPU's NICs
    # (NCCL spreads channels over them: routing.paths.connection_rows), so the QP count does not move busbw
    assert env1_bw == pytest.approx(file_bw)


def test_run_and_perf_resolve_qps_in_the_same_place(monkeypatch):
    monkeypatch.delenv("NCCL_IB_QPS_PER_CONNECTION", raising=False)
    spec = load_cluster("oci-a100-roce", 2)
    comm = Communicator.world(build_topology(spec))
    # gpuwait run builds its predictors with an empty NCCL environment (runner.workload)
    run = CollectivePredictor.create(comm, parse_env({}), spec.routing, resolve_transport(spec.transport))
    perf = make_predictor("oci-a100-roce", 2, None)
    assert run.routing.qps_per_connection == perf.routing.qps_per_connection == 4
    assert str(run.qps) == str(perf.qps) == "4 (from: cluster file)"


def test_without_a_file_value_nccls_default_applies():
    assert str(qps_setting(parse_env({}), RoutingSpec())) == "1 (from: NCCL default)"
    assert qps_setting(parse_env_pairs(["NCCL_IB_QPS_PER_CONNECTION=8"]), RoutingSpec(qps_per_connection=2)).value == 8


def test_json_and_report_algo_print_where_each_setting_came_from(monkeypatch):
    monkeypatch.delenv("NCCL_ALGO", raising=False)
    sweep = perf_sweep("all_reduce", ARGS, cluster="oci-a100-roce", servers=2, env=["NCCL_ALGO=Ring"])
    settings = sweep.to_dict()["settings"]
    assert settings["qps_per_connection"] == "4 (from: cluster file)"
    assert settings["NCCL_ALGO"] == "Ring (from: NCCL env)"
    assert settings["NCCL_PROTO"] == "auto (from: NCCL tuning model)"
    assert settings["gpu_arch"] == "A100 (sm80) (from: cluster file: server.gpu_model)"
    from gpuwait.report.perf import sweep_text
    assert "# qps_per_connection: 4 (from: cluster file)" in sweep_text(sweep, report_algo=True)


def test_unmodelled_variables_of_the_process_environment_are_listed(monkeypatch):
    monkeypatch.setenv("NCCL_IB_TC", "41")
    monkeypatch.setenv("NCCL_DEBUG", "INFO")  # no effect on timing: listed apart
    settings = perf_sweep("all_reduce", SweepArgs(), cluster="dgx-h100").to_dict()["settings"]
    assert settings["ignored"].startswith("NCCL_IB_TC")
    assert settings["no_timing_effect"].startswith("NCCL_DEBUG")


def test_min_ctas_raise_the_channels_nccl_runs(monkeypatch):
    monkeypatch.delenv("NCCL_MIN_CTAS", raising=False)
    base = make_predictor("dgx-h100", 2, None, ["NCCL_ALGO=Ring"]).estimate("all_reduce", 2**30)
    more = make_predictor("dgx-h100", 2, None, ["NCCL_ALGO=Ring", "NCCL_MIN_CTAS=32"]).estimate("all_reduce", 2**30)
    assert base.n_channels < 32 == more.n_channels


def test_fewer_channels_than_nccls_graph_slow_the_plateau(monkeypatch):
    # NCCL prices its searched graph (tuning.cc busBw = nChannels x bw) but runs NCCL_MAX_NCHANNELS channels
    # (connect.cc, v2.30.7-1); a channel carries at most the graph's per-channel bandwidth
    monkeypatch.delenv("NCCL_MAX_NCHANNELS", raising=False)
    full = make_predictor("dgx-h100", 1, None, ["NCCL_ALGO=Ring"]).estimate("all_reduce", 2**30)
    two = make_predictor("dgx-h100", 1, None, ["NCCL_ALGO=Ring", "NCCL_MAX_NCHANNELS=2"]).estimate("all_reduce", 2**30)
    assert two.n_channels == 2 < full.n_channels
    assert two.time_s > 0.8 * full.time_s * full.n_channels / 2
    # NVLS channels follow only the CTA limits (transport/nvls.cc)
    nvls = make_predictor("dgx-h100", 1, None, ["NCCL_MAX_NCHANNELS=2"]).estimate("all_reduce", 2**30)
    assert nvls.algorithm == "nvls" and nvls.n_channels > 2


@pytest.mark.parametrize("transport, env, label", [
    # NCCL_IB_DISABLE=1 moves an RDMA cluster's job onto NCCL's sockets: the environment owns the transport
    ("rocev2", ["NCCL_IB_DISABLE=1"], "socket (from: NCCL env)"),
    # a cluster naming tcp runs on sockets with or without the variable (the same prediction): the file owns it
    ("tcp", ["NCCL_IB_DISABLE=1"], "socket (from: cluster file)"),
    ("tcp", ["NCCL_NET=Socket"], "socket (from: cluster file)"),
    ("tcp", [], "socket (from: cluster file)"),
])
def test_the_transport_is_owned_by_what_decides_it(monkeypatch, tmp_path, transport, env, label):
    for name in ("NCCL_IB_DISABLE", "NCCL_NET"):
        monkeypatch.delenv(name, raising=False)
    cluster = tmp_path / "c.yaml"
    cluster.write_text(f"preset: rocev2-400g-2tier\nservers: 2\ntransport: {{name: {transport}}}\n")
    sweep = perf_sweep("all_reduce", ARGS, cluster=str(cluster), env=env)
    assert sweep.to_dict()["settings"]["transport"] == label
    if transport == "tcp":
        assert sweep.rows == perf_sweep("all_reduce", ARGS, cluster=str(cluster)).rows
