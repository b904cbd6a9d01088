"""NCCL environment variables: NCCL's defaults and value forms (NCCL User Guide,
"Environment Variables", env.rst for NCCL <= 2.30), one-line errors, and their effect on NCCL's choice."""

from __future__ import annotations

import pytest

from gpuwait.collectives.ncclenv import (
    NO_TIMING_EFFECT,
    NcclEnv,
    apply_env,
    choose_with_env,
    defaults,
    parse_env,
    parse_env_pairs,
)
from gpuwait.collectives.tuning import dgx_h100
from gpuwait.errors import SpecError


def test_defaults_are_nccls():
    d = defaults()
    assert d["NCCL_ALGO"] is None and d["NCCL_PROTO"] is None  # l.263-264: unset = auto
    assert d["NCCL_IB_QPS_PER_CONNECTION"] == 1  # l.265
    assert d["NCCL_IB_SPLIT_DATA_ON_QPS"] is False  # l.266: 0 since 2.20
    assert d["NCCL_MIN_NCHANNELS"] is None and d["NCCL_MAX_NCHANNELS"] is None  # l.267-268: platform
    assert d["NCCL_NET_GDR_LEVEL"] is None  # l.270: auto
    assert d["NCCL_IB_DISABLE"] is False  # l.271
    assert d["NCCL_NVLS_ENABLE"] == 2  # l.274
    assert d["NCCL_COLLNET_ENABLE"] is False  # l.275
    assert d["NCCL_PXN_DISABLE"] is False and d["NCCL_P2P_DISABLE"] is False and d["NCCL_SHM_DISABLE"] is False
    assert parse_env({}) == NcclEnv()


def test_values_parse_like_nccl():
    env = parse_env({
        "NCCL_ALGO": "Ring,Tree", "NCCL_PROTO": "^LL128", "NCCL_MIN_NCHANNELS": "4", "NCCL_MAX_NCHANNELS": "0x10",
        "NCCL_IB_QPS_PER_CONNECTION": "16", "NCCL_IB_SPLIT_DATA_ON_QPS": "0", "NCCL_NET_GDR_LEVEL": "pxb",
        "NCCL_NET_GDR_READ": "1", "NCCL_IB_DISABLE": "0", "NCCL_NVLS_ENABLE": "0", "NCCL_COLLNET_ENABLE": "0",
        "NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "0", "NCCL_PXN_DISABLE": "0", "NCCL_SOCKET_NTHREADS": "4",
        "NCCL_NSOCKS_PERTHREAD": "8", "NCCL_NET_OVERHEAD": "1500", "NCCL_MIN_CTAS": "8", "NCCL_MAX_CTAS": "32",
        "NCCL_P2P_LEVEL": "nvl"})
    assert env.algo == "Ring,Tree" and env.allowed_algorithms("all_reduce") == {"ring", "tree"}
    assert env.allowed_protocols("broadcast") == {"LL", "Simple"}
    assert (env.min_nchannels, env.max_nchannels) == (4, 16)
    assert env.ib_qps_per_connection == 16 and not env.ib_split_data_on_qps
    assert env.net_gdr_level == "PXB" and env.net_gdr_read is True
    assert env.nvls_enable == 0 and env.p2p_disable and not (env.collnet_enable or env.shm_disable or env.pxn_disable)
    assert (env.socket_nthreads, env.nsocks_perthread, env.net_overhead_ns) == (4, 8, 1500)
    assert (env.min_ctas, env.max_ctas, env.channel_limits(), env.p2p_level) == (8, 32, (8, 16), "NVL")
    assert env.ignored == () and len(env.explicit) == 20


@pytest.mark.parametrize("name, what", [
    ("NCCL_COLLNET_ENABLE", "CollNet (SHARP in-network reduction) is not modelled"),
    ("NCCL_SHM_DISABLE", "disabling NCCL's SHM transport is not modelled"),
    ("NCCL_PXN_DISABLE", "PXN (sending through a peer GPU's NIC over NVLink) cannot be turned off"),
    ("NCCL_IB_SPLIT_DATA_ON_QPS", "only NCCL's default 0 is modelled"),
])
def test_a_value_gpuwait_cannot_model_is_refused_saying_what_is_modelled(name, what):
    # issue 20: NCCL_COLLNET_ENABLE=1 used to be accepted and to change nothing
    with pytest.raises(SpecError) as err:
        parse_env({name: "1"})
    assert str(err.value).startswith(f"{name}: got 1; {what}") and "\n" not in str(err.value)
    parse_env({name: "0"})  # NCCL's default is what gpuwait models


def test_legacy_gdr_forms_and_alias():
    assert parse_env({"NCCL_NET_GDR_LEVEL": "2"}).net_gdr_level == "PXB"  # LOC=0 PIX=1 PXB=2 PHB=3 SYS=4
    assert parse_env({"NCCL_IB_GDR_LEVEL": "SYS"}).net_gdr_level == "SYS"  # the former name
    both = parse_env({"NCCL_IB_GDR_LEVEL": "SYS", "NCCL_NET_GDR_LEVEL": "LOC"})
    assert both.net_gdr_level == "LOC" and both.explicit == ("NCCL_NET_GDR_LEVEL",)


def test_unknown_nccl_variables_are_kept_and_reported():
    env = parse_env({"NCCL_IB_HCA": "mlx5", "NCCL_IB_TC": "41", "PATH": "/usr/bin", "NCCL_ALGO": "Ring"})
    assert env.ignored == ("NCCL_IB_HCA", "NCCL_IB_TC")
    assert env.extra["NCCL_IB_TC"] == "41" and "PATH" not in env.extra
    assert env.explicit == ("NCCL_ALGO",)


def test_empty_value_is_unset():
    assert parse_env({"NCCL_ALGO": "", "NCCL_IB_QPS_PER_CONNECTION": " "}) == NcclEnv()


@pytest.mark.parametrize("name, value, expected", [
    ("NCCL_IB_QPS_PER_CONNECTION", "0", "an integer from 1 to 128"),
    ("NCCL_IB_QPS_PER_CONNECTION", "129", "an integer from 1 to 128"),
    ("NCCL_MAX_NCHANNELS", "many", "an integer from 1 to 64"),
    ("NCCL_IB_DISABLE", "true", "0 or 1"),
    ("NCCL_PXN_DISABLE", "2", "0 or 1"),
    ("NCCL_NVLS_ENABLE", "3", "0 (off), 1 (on) or 2 (auto)"),
    ("NCCL_NET_GDR_LEVEL", "NEAR", "LOC, PIX, PXB, PHB, SYS"),
    ("NCCL_SOCKET_NTHREADS", "17", "an integer from 1 to 16"),
    ("NCCL_ALGO", "Butterfly", "Tree, Ring, CollNetDirect"),
    ("NCCL_ALGO", "auto", "Tree, Ring"),  # a published RoCE launch script sets it; NCCL >= 2.24 rejects it
    ("NCCL_PROTO", "LL256", "LL, LL128, Simple"),
])
def test_bad_values_name_variable_value_and_expectation(name, value, expected):
    with pytest.raises(SpecError) as err:
        parse_env({name: value})
    message = str(err.value)
    assert message.startswith(f"{name}: got {value!r}") and expected in message and "\n" not in message


def test_cross_variable_checks():
    with pytest.raises(SpecError, match="expected min <= max"):
        parse_env({"NCCL_MIN_NCHANNELS": "16", "NCCL_MAX_NCHANNELS": "8"})
    with pytest.raises(SpecError, match="product of at most 64"):
        parse_env({"NCCL_SOCKET_NTHREADS": "16", "NCCL_NSOCKS_PERTHREAD": "8"})


def test_env_pairs():
    env = parse_env_pairs(["NCCL_ALGO=Tree", "NCCL_PROTO=Simple", "NCCL_ALGO=Ring"])
    assert (env.algo, env.proto, env.ignored) == ("Ring", "Simple", ())
    with pytest.raises(SpecError, match="got '=NVL'"):  # the first '=' splits: the value is '=NVL'
        parse_env_pairs(["NCCL_P2P_LEVEL==NVL"])
    for bad, expected in (("NCCL_ALGO", "expected NAME=VALUE"), ("=Ring", "expected NAME=VALUE"),
                          ("OMP_NUM_THREADS=4", r"expected an NCCL_\* variable"),
                          # issue 20: a variable given on purpose must change the result or be refused
                          ("NCCL_IB_TC=41", "NCCL_IB_TC is not modelled; modelled NCCL variables: NCCL_ALGO"),
                          ("NCCL_IB_HCA=mlx5_0:1", "NCCL_IB_HCA is not modelled"),
                          # the variables read at their default only are named with the value accepted
                          ("NCCL_IB_TC=41", "accepted at NCCL's default only: NCCL_COLLNET_ENABLE=0, "
                                            "NCCL_IB_SPLIT_DATA_ON_QPS=0")):
        with pytest.raises(SpecError, match=expected):
            parse_env_pairs([bad])


def test_env_changes_nccls_choice():
    h100 = dgx_h100()
    assert choose_with_env(parse_env({}), h100, 8 * 2**30)[0] == "nvls"
    assert choose_with_env(parse_env({"NCCL_NVLS_ENABLE": "0"}), h100, 8 * 2**30)[0] != "nvls"
    assert choose_with_env(parse_env({"NCCL_ALGO": "Ring"}), h100, 8 * 2**30)[:2] == ("ring", "Simple")
    assert choose_with_env(parse_env({"NCCL_PROTO": "LL"}), h100, 2**20)[1] == "LL"
    assert apply_env(parse_env({"NCCL_NET_OVERHEAD": "2500"}), h100).net_overhead_us == pytest.approx(2.5)
    assert not apply_env(parse_env({"NCCL_COLLNET_ENABLE": "0"}), h100).collnet_available


def test_collnet_algorithms_alone_are_refused_naming_what_is_modelled():
    # issue 20: NCCL_ALGO=CollNetChain failed with only "no algorithm/protocol left"
    with pytest.raises(SpecError, match=r"CollNet unavailable: it needs SHARP switches .* not model \(modelled: Ring"):
        choose_with_env(parse_env({"NCCL_ALGO": "CollNetChain"}), dgx_h100(), 2**30)


def test_cta_limits_combine_with_the_channel_limits_as_nccl_does():
    # src/graph/connect.cc (v2.30.7-1): min(NCCL_MAX_NCHANNELS, found, maxCTAs), at least max(min, minCTAs)
    assert parse_env({}).channel_limits() == (1, 64)
    assert parse_env({"NCCL_MIN_CTAS": "24"}).channel_limits() == (24, 64)
    assert parse_env({"NCCL_MAX_CTAS": "4", "NCCL_MAX_NCHANNELS": "8"}).channel_limits() == (1, 4)
    assert parse_env({"NCCL_MIN_NCHANNELS": "4", "NCCL_MIN_CTAS": "2"}).channel_limits() == (4, 64)


@pytest.mark.parametrize("name, value", [("NCCL_CUMEM_ENABLE", "1"), ("NCCL_DEBUG", "INFO"),
                                         ("NCCL_SOCKET_IFNAME", "eth0"), ("NCCL_IB_GID_INDEX", "3")])
def test_variables_without_timing_effect_are_accepted_the_same_from_both_paths(name, value):
    """A variable that does not change timing (NCCL env.rst: logging, bootstrap addressing, buffer
    allocation) is accepted from --env as from the process environment, and listed with why."""
    from_env = parse_env({name: value})
    from_flag = parse_env_pairs([f"{name}={value}"])
    assert from_env == from_flag
    assert from_flag.no_timing == (name,) and from_flag.ignored == () and name in NO_TIMING_EFFECT
    assert from_flag.extra[name] == value


def test_variables_without_timing_effect_leave_the_prediction_unchanged(monkeypatch):
    from gpuwait.runner.perf import make_predictor

    for name in NO_TIMING_EFFECT:
        monkeypatch.delenv(name, raising=False)
    base = make_predictor("dgx-h100", 2, None, []).estimate("all_reduce", 2**26)
    flag = make_predictor("dgx-h100", 2, None, ["NCCL_CUMEM_ENABLE=1", "NCCL_DEBUG=INFO"]).estimate("all_reduce", 2**26)
    monkeypatch.setenv("NCCL_CUMEM_ENABLE", "1")
    process = make_predictor("dgx-h100", 2, None, []).estimate("all_reduce", 2**26)
    assert base.time_s == flag.time_s == process.time_s
    assert make_predictor("dgx-h100", 2, None, ["NCCL_CUMEM_ENABLE=0"]).settings()[-1].value == "NCCL_CUMEM_ENABLE"
