"""The NCCL settings a platform's net plugin or image applies (gpuwait.transport.platforms): each value as its
public source states it, the job's own environment winning, and one clear error for a bad platform."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest

from gpuwait.collectives.ncclenv import VARIABLES, cluster_env, parse_env
from gpuwait.errors import SpecError
from gpuwait.runner.inputs import load_cluster
from gpuwait.runner.perf import SweepArgs, make_predictor, perf_sweep
from gpuwait.spec.cluster import TransportSpec
from gpuwait.transport.platforms import NO_PLATFORM, PLATFORMS, cluster_platform, platform_for

CLUSTERS = Path(__file__).resolve().parents[1] / "nccltests" / "data" / "reference" / "clusters"
P4DE = str(CLUSTERS / "aws-p4de-efa.yaml")
ARGS = SweepArgs(min_bytes=8, max_bytes=1 << 28, step_factor=8)

#: each platform's modelled settings as its public source states them
CITED = {
    # aws-ofi-nccl src/platform-aws.c (v1.7.4-aws .. v1.16.0): NCCL_PROTO=simple when the p4d/p4de endpoint lacks
    # 128-byte in-order writes (configure_nccl_proto); on p5 with the RDMA protocol the plugin leaves it to NCCL
    "p4d.24xlarge": {"NCCL_PROTO": "Simple"},
    "p4de.24xlarge": {"NCCL_PROTO": "Simple"},
    "p5.48xlarge": {},
    "p5e.48xlarge": {},
    # GoogleCloudPlatform/container-engine-accelerators gpudirect-tcpx/nccl-config-latest.yaml
    "a3-highgpu-8g": {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple", "NCCL_MIN_NCHANNELS": "8",
                      "NCCL_MAX_NCHANNELS": "8", "NCCL_SOCKET_NTHREADS": "1", "NCCL_NSOCKS_PERTHREAD": "4",
                      "NCCL_NET_GDR_LEVEL": "PIX"},
    # the same repository, gpudirect-tcpxo/README.md, release of Jan 9, 2026 (plugin v1.0.15)
    "a3-megagpu-8g": {"NCCL_PROTO": "Simple,LL128", "NCCL_MIN_NCHANNELS": "4", "NCCL_NET_GDR_LEVEL": "PIX",
                      "NCCL_NVLS_ENABLE": "1"},
    # eth-cscs/cscs-docs docs/software/communication/nccl_env_vars (the container hook)
    "cscs-alps": {"NCCL_PROTO": "^LL128", "NCCL_NET_GDR_LEVEL": "PHB", "NCCL_NET": "AWS Libfabric"},
}


def _cluster(tmp_path: Path, transport: str, platform: str | None = None, server: str = "p4de-24xlarge") -> str:
    lines = ["name: t", "servers: 2", f"server: {server}", "transport:", f"  name: {transport}"]
    lines += [f"  platform: {platform}"] if platform else []
    path = tmp_path / "cluster.yaml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_each_platform_value_is_the_cited_one():
    assert {name: dict(p.env) for name, p in PLATFORMS.items()} == CITED
    for platform in PLATFORMS.values():
        assert platform.source and platform.label
        # modelled settings change the prediction; the rest are only listed, never passed to the model
        assert set(platform.env) <= set(VARIABLES) and not set(platform.not_modelled) & set(VARIABLES)
        parse_env(dict(platform.env))  # every value is one NCCL accepts


def test_spec_names_every_platform():
    choices = typing.get_args(typing.get_args(TransportSpec.model_fields["platform"].annotation)[0])
    assert set(choices) == {*PLATFORMS, NO_PLATFORM}


def test_transport_implies_its_platform():
    assert platform_for("efa", server_template="p4de-24xlarge").name == "p4de.24xlarge"
    assert platform_for("efa", server_template="p5-48xlarge").name == "p5.48xlarge"
    assert platform_for("efa", server_template=None) is None  # an unknown instance: no settings assumed
    assert platform_for("rocev2", server_template="p4de-24xlarge") is None  # an AWS server off EFA: no plugin
    assert [platform_for(t).name for t in ("tcpx", "tcpxo", "slingshot")] == ["a3-highgpu-8g", "a3-megagpu-8g",
                                                                                "cscs-alps"]
    assert platform_for("infiniband") is None and platform_for("slingshot", "none") is None


def test_a_variant_on_another_transport_has_that_transports_platform(tmp_path):
    spec = load_cluster(_cluster(tmp_path, "efa", "p4d.24xlarge"))
    assert cluster_platform(spec).name == "p4d.24xlarge"
    assert cluster_platform(spec, "rocev2") is None and cluster_platform(spec, "tcpxo").name == "a3-megagpu-8g"


def test_p4de_without_proto_is_the_table_with_proto_simple(tmp_path):
    """The reference table of AWS p4de passed NCCL_PROTO=Simple by hand; the platform now supplies it."""
    implied = perf_sweep("all_reduce", ARGS, P4DE, 2, 8, {})
    by_hand = perf_sweep("all_reduce", ARGS, _cluster(tmp_path, "efa", "none"), 2, 8, {"NCCL_PROTO": "Simple"})
    assert [r.oop_time_us for r in implied.rows] == [r.oop_time_us for r in by_hand.rows]
    assert {c["protocol"] for c in implied.choices} == {"Simple"}
    assert implied.to_dict()["settings"]["NCCL_PROTO"] == "Simple (from: aws-ofi-nccl on p4de)"
    assert implied.to_dict()["settings"]["platform"].startswith("p4de.24xlarge: NCCL_PROTO=Simple; not modelled:")
    # without the platform NCCL would pick LL/LL128 at small sizes on A100
    bare = perf_sweep("all_reduce", ARGS, _cluster(tmp_path, "efa", "none"), 2, 8, {})
    assert {c["protocol"] for c in bare.choices} != {"Simple"}


def test_the_jobs_env_wins():
    sweep = perf_sweep("all_reduce", ARGS, P4DE, 2, 8, {"NCCL_PROTO": "LL128"})
    assert {c["protocol"] for c in sweep.choices} == {"LL128"}
    assert sweep.to_dict()["settings"]["NCCL_PROTO"] == "LL128 (from: NCCL env)"
    assert "nothing (the job sets it all)" in sweep.to_dict()["settings"]["platform"]
    # a name the job gives, even empty (NCCL: unset), keeps the plugin from setting it
    assert parse_env({"NCCL_PROTO": ""}, PLATFORMS["p4de.24xlarge"]).proto is None
    env = parse_env({"NCCL_ALGO": "Tree"}, PLATFORMS["a3-highgpu-8g"])
    assert (env.algo, env.proto, env.min_nchannels) == ("Tree", "Simple", 8)


def test_tcpx_runs_as_google_configures_it(tmp_path):
    predictor = make_predictor(_cluster(tmp_path, "tcpx", server="p5-48xlarge"), None, None)
    env = predictor.env
    assert (env.algo, env.proto, env.channel_limits(), env.net_gdr_level) == ("Ring", "Simple", (8, 8), "PIX")
    sweep = perf_sweep("all_reduce", ARGS, predictor=predictor)
    assert {(c["algorithm"], c["protocol"]) for c in sweep.choices} == {("ring", "Simple")}
    # perf's header says the platform set the channel limits, not the job's env
    channels = next(s for s in predictor.settings() if s.name == "channels")
    assert (channels.value, channels.source) == ("8-8", "GPUDirect-TCPX config on a3-highgpu-8g")


@pytest.mark.parametrize("platform, message", [
    ("p9.48xlarge", "transport.platform: got 'p9.48xlarge'"),
    ("a3-highgpu-8g", "transport.platform: got 'a3-highgpu-8g', a platform of transport tcpx; expected one of "
                      "p4d.24xlarge, p4de.24xlarge, p5.48xlarge, p5e.48xlarge, none for transport efa"),
])
def test_bad_platform_is_one_clear_error(tmp_path, platform, message):
    with pytest.raises(SpecError) as err:
        make_predictor(_cluster(tmp_path, "efa", platform), None, None)
    assert message in str(err.value) and "\n" not in str(err.value).split("hint")[0].strip()


def test_a_jobs_env_comes_through_the_clusters_platform():
    """``cluster_env``, which perf, run, multi-job runs, schedule and sweeps read: a p4de cluster's job gets
    the plugin's NCCL_PROTO=Simple unless it sets its own, and a variant on RoCE gets none of it."""
    spec = load_cluster(P4DE)
    assert cluster_env(spec).proto == "Simple"
    assert cluster_env(spec, {"NCCL_PROTO": "LL128"}).proto == "LL128"
    assert cluster_env(spec, transport="rocev2").proto is None
