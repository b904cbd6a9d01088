"""NCCL's tuning model release by release (2.18 to 2.30): the tables against each tag's text, the choices
each release's source implies, and version input.

References (public sources, see docs/sources.md): NVIDIA/nccl ``src/graph/tuning.cc``, ``src/graph/topo.h``
and ``src/graph/search.cc`` at the tags named in each test (v2.18.1-1 ... v2.30.7-1).
"""

from __future__ import annotations

import pytest

from gpuwait.collectives import tuning as t
from gpuwait.collectives.nccl_versions import DEFAULT_RELEASE, RELEASES, nccl_release
from gpuwait.collectives.ncclenv import NcclEnv
from gpuwait.collectives.tuning import Graph, TuningInputs, choose, predict, unsupported_reason
from gpuwait.errors import SpecError
from tests.collectives.inputs import tuning_inputs

GiB, MiB = 2**30, 2**20


def at(version: str, **fields) -> TuningInputs:
    """2 x 8 A100 (SM80) over 16 NICs, the ring graph 16 x 12 GB/s, under NCCL ``version``."""
    base = dict(collective="all_reduce", n_ranks=16, n_nodes=2, sm=80, n_channels=16, bw_intra_GBps=12.0,
                bw_inter_GBps=12.0, nvswitch=True, release=nccl_release(version))
    base.update(fields)
    return tuning_inputs(**base)


# ---------------------------------------------------------------------------------------------- versions

@pytest.mark.parametrize(("version", "release"), [
    ("2.18.1", "2.18.1"), ("2.18.0", "2.18.1"), ("2.18.6", "2.18.3"), ("2.19.3", "2.19.1"), ("2.20.5", "2.20.3"),
    ("2.21.5+cuda12.4", "2.21.5"), ("2.22", "2.21.5"), ("v2.23.4-1", "2.23.4"), ("2.26.2+cuda12.8", "2.26.2"),
    ("2.27.3", "2.27.3"), ("2.27.6", "2.27.5"), ("2.29.3", "2.29.2"), ("2.30.7", "2.30.3"), ("2.31.0", "2.30.3"),
    ("3.0", "2.30.3")])
def test_any_version_maps_to_the_newest_release_at_or_below_it(version, release):
    assert nccl_release(version).version == release


@pytest.mark.parametrize(("value", "message"), [
    ("2.17.1", "NCCL version: got '2.17.1'; expected NCCL 2.18 or later"),
    ("2.16", "expected NCCL 2.18 or later"),
    ("two.21", "expected a release such as 2.21.5"),
    ("2.21.5.1", "expected a release such as 2.21.5"),
    ("", "expected a release such as 2.21.5"),
    (2.21, "expected a release such as 2.21.5"),
])
def test_bad_version_is_one_clear_error(value, message):
    with pytest.raises(SpecError, match=message):
        nccl_release(value)
    with pytest.raises(SpecError, match="^--nccl-version: got"):
        NcclEnv().with_version(value, "--nccl-version")


def test_releases_are_ordered_and_cite_their_tags():
    keys = [tuple(map(int, r.version.split("."))) for r in RELEASES]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    for release in RELEASES:
        assert release.tags[0] == f"v{release.version}-1" and release.tags[1].startswith("v2.")
        assert release.changes
    assert nccl_release(None) is DEFAULT_RELEASE is RELEASES[-1]
    assert t.MODEL_NCCL_VERSION == "2.30.7"


def test_the_default_release_is_the_2_30_model():
    # the module constants tests/collectives/test_tuning.py checks against tuning.cc v2.30.7 are this release's
    assert t.BASE_LATENCY_US is DEFAULT_RELEASE.base_latency_us
    assert t.HW_LATENCY_US is DEFAULT_RELEASE.hw_latency_us
    assert t.SUPPORTED_ALGORITHMS is DEFAULT_RELEASE.supported_algorithms
    assert TuningInputs("all_reduce", 8, 1, 90, Graph(12, 30.0, 30.0)).release is DEFAULT_RELEASE


# ---------------------------------------------------------------------------------------------- tables

def test_2_18_tables_match_the_tag():
    r = nccl_release("2.18.1")  # tuning.cc v2.18.1-1
    assert r.base_latency_us["tree"] == (6.8, 14.0, 0.0) and r.base_latency_us["nvls"] == (0.0, 0.0, 23.0)
    assert r.hw_latency_us["nvlink"]["tree"] == (0.6, 1.25, 28.0)  # "latency a 256kB chunk"
    assert r.per_channel_max_tree_bw_GBps[2] == (38.7, 41.4, 33.0)
    assert r.ll_max_bw_GBps[2] == (87.7, 22.5, 19.0)  # Hopper row = Ampere's
    r = nccl_release("2.18.3")  # tuning.cc v2.18.3-1 (same text to v2.18.6-1)
    assert [r.hw_latency_us[hw]["tree"][2] for hw in ("nvlink", "pci", "net")] == [4.0, 6.0, 14.0]
    assert r.hw_latency_us["net"]["collnet_direct"] == (0.0, 0.0, 10.7)
    assert r.per_channel_max_tree_ll128_bw_GBps[2] == (36.7, 36.7, 29.0)
    assert r.nvls_ratio == pytest.approx(5.0 / 6.0) and r.collnet_arity_latency_us == 0.5
    assert r.nvlink_per_link_GBps(90) == 20.0  # topo.h v2.18.3-1 SM90_NVLINK_BW


def test_2_19_to_2_24_tables_match_the_tags():
    r = nccl_release("2.19.4")  # tuning.cc v2.19.4-1
    assert r.hw_latency_us["nvlink"]["nvls"] == (0.0, 0.0, 23.0)
    assert r.hw_latency_us["net"]["collnet_chain"] == (0.0, 0.0, 30.0)
    assert r.hw_latency_us["pci"]["tree"][2] == 28.0
    assert r.search_speeds(90)[:3] == (60.0, 50.0, 40.0)  # search.cc sm90SpeedArrayIntra
    assert nccl_release("2.20.3").nvlink_per_link_GBps(90) == 20.6  # topo.h v2.20.3-1
    r = nccl_release("2.21.5")  # tuning.cc v2.21.5-1
    assert r.ll_max_bw_GBps[2] == (141.0, 45.0, 35.0) and r.hw_latency_us["nvlink"]["nvls"][2] == 25.0
    r = nccl_release("2.23.4")  # tuning.cc v2.23.4-1
    assert r.base_latency_us["tree"] == (6.8, 14.0, 8.4) and r.hw_latency_us["net"]["tree"][2] == 14.0
    assert r.pat_factor == 0.85 and nccl_release("2.24.3").pat_factor == 0.75


def test_2_25_to_2_30_tables_match_the_tags():
    r = nccl_release("2.25.1")  # tuning.cc v2.25.1-1: Blackwell = 2 x Hopper; topo.h SM100_NVLINK_BW 40.0
    assert r.ll_max_bw_GBps[3] == (282.0, 90.0, 70.0)
    assert r.per_channel_max_tree_bw_GBps[3] == pytest.approx((77.4, 82.8, 72.0))
    assert r.nvlink_per_link_GBps(100) == 40.0 and nccl_release("2.27.5").nvlink_per_link_GBps(100) == 40.1
    assert nccl_release("2.24.3").nvlink_per_link_GBps(100) == 20.6  # no SM100 constant yet: Hopper's
    r = nccl_release("2.28.3")  # tuning.cc v2.28.3-1
    assert r.nvls_efficiency == (0.0, 0.0, 0.85, 0.74) and r.per_channel_max_nvls_tree_bw_GBps[3] == (0.0, 96.0, 43.1)
    assert r.hw_latency_us["net"]["nvls_tree"][2] == 14.0
    assert nccl_release("2.28.9").hw_latency_us["net"]["nvls_tree"][2] == 20.9  # v2.28.9-1
    assert nccl_release("2.29.2").per_channel_max_ring_ll128_bw_GBps[3] == (34.5, 34.6, 34.5)  # v2.29.2-1
    assert nccl_release("2.29.7").per_channel_max_ring_ll128_bw_GBps[3] == (40.0, 40.0, 40.0)  # v2.29.7-1
    assert nccl_release("2.30.3").per_channel_max_nvls_tree_bw_GBps[3] == (0.0, 96.0, 80.0)  # v2.30.3-1


# ---------------------------------------------------------------------------------------------- choices

def test_pat_only_from_2_23():
    """tuning.cc v2.23.4-1 adds PAT for AllGather/ReduceScatter at one GPU per node; v2.22.3-1 has no PAT."""
    one_per_node = dict(collective="all_gather", n_ranks=8, n_nodes=8, n_channels=2, bw_intra_GBps=24.0,
                        bw_inter_GBps=24.0)
    assert "does not implement all_gather in NCCL 2.22.3" in unsupported_reason(at("2.22.3", **one_per_node), "pat",
                                                                                "Simple")
    p23, p24 = predict(at("2.23.4", **one_per_node), "pat", "Simple", GiB), predict(at("2.24.3", **one_per_node),
                                                                                     "pat", "Simple", GiB)
    assert p23.supported and p23.bus_bw_GBps == pytest.approx(2 * 24.0 * 0.85)
    assert p24.bus_bw_GBps == pytest.approx(2 * 24.0 * 0.75)


def test_ring_ll128_at_one_rank_per_node_2_18():
    """2.18-2.22: ring LL128 busBw x (ppn < 2 ? 0.7 : 0.92); 2.23+: 0.92 always (tuning.cc v2.18.3-1, v2.23.4-1)."""
    one = dict(n_ranks=2, n_nodes=2, n_channels=4, bw_intra_GBps=12.0, bw_inter_GBps=12.0)
    assert predict(at("2.18.3", **one), "ring", "LL128", GiB).bus_bw_GBps == pytest.approx(4 * 12.0 * 0.7)
    assert predict(at("2.23.4", **one), "ring", "LL128", GiB).bus_bw_GBps == pytest.approx(4 * 12.0 * 0.92)
    assert predict(at("2.18.3"), "ring", "LL128", GiB).bus_bw_GBps == pytest.approx(16 * 12.0 * 0.92)


def test_ring_ll_bandwidth_quarter_before_2_21():
    """Ring LL busBw: 1/4 (1/3 on one node for AllGather) before 2.21, 1/2 since (tuning.cc v2.20.5-1, v2.21.5-1)."""
    slow = dict(bw_intra_GBps=4.0, bw_inter_GBps=4.0)  # below the llMaxBws cap (39 GB/s, Intel, 2 nodes)
    assert predict(at("2.20.3", **slow), "ring", "LL", GiB).bus_bw_GBps == pytest.approx(16 * 4.0 / 4)
    assert predict(at("2.21.5", **slow), "ring", "LL", GiB).bus_bw_GBps == pytest.approx(16 * 4.0 / 2)
    one_node = dict(collective="all_gather", n_ranks=8, n_nodes=1, n_channels=8, bw_intra_GBps=2.0, bw_inter_GBps=2.0)
    assert predict(at("2.20.3", **one_node), "ring", "LL", GiB).bus_bw_GBps == pytest.approx(8 * 2.0 / 3)
    assert predict(at("2.21.5", **one_node), "ring", "LL", GiB).bus_bw_GBps == pytest.approx(8 * 2.0 / 2)


def test_ring_latency_counts_2n_network_steps_before_2_23():
    """AllReduce ring inter-node steps: 2 nNodes before 2.23, 2 (nNodes - 1) since (tuning.cc v2.22.3-1, v2.23.4-1)."""
    # 30 steps; LL intra = max(0.6 NVLink, 1.0 net overhead), inter = 2.7 (net ring LL)
    assert predict(at("2.22.3"), "ring", "LL", 8).latency_us == pytest.approx(6.6 + 26 * 1.0 + 4 * 2.7)
    assert predict(at("2.23.4"), "ring", "LL", 8).latency_us == pytest.approx(6.6 + 28 * 1.0 + 2 * 2.7)


def test_nvls_all_gather_from_2_19_and_its_bandwidth_per_release():
    h100 = dict(collective="all_gather", n_ranks=8, n_nodes=1, sm=90, n_channels=12, bw_intra_GBps=30.0,
                bw_inter_GBps=30.0, nvls_available=True, graphs={"nvls": Graph(8, 40.0, 60.0)})
    assert not predict(at("2.18.3", **h100), "nvls", "Simple", GiB).supported
    # 2.19-2.22: min(bwIntra, bwInter) x 5/6; 2.23-2.27: no ratio for AllGather; 2.27: (ppn-1)/ppn of bwIntra
    assert predict(at("2.19.1", **h100), "nvls", "Simple", GiB).alg_bw_GBps == pytest.approx(8 * 40.0 * 5 / 6)
    assert predict(at("2.23.4", **h100), "nvls", "Simple", GiB).alg_bw_GBps == pytest.approx(8 * 40.0)
    assert predict(at("2.27.3", **h100), "nvls", "Simple", GiB).alg_bw_GBps == pytest.approx(8 * 40.0 * 7 / 8)
    # 2.28+: nvlsEfficiency 0.85 x 7/8 channels x 7/8 local share
    assert predict(at("2.28.3", **h100), "nvls", "Simple", GiB).alg_bw_GBps == pytest.approx(
        8 * 40.0 * 0.85 * 7 / 8 * 7 / 8)


def test_nvls_latency_2_18_is_its_base_latency():
    """2.18: NVLS latency = baseLat 23 us (+ the network's 18 us across nodes); 2.19+: hwLat (tuning.cc)."""
    h100 = dict(n_ranks=8, n_nodes=1, sm=90, n_channels=12, bw_intra_GBps=30.0, bw_inter_GBps=30.0,
                nvls_available=True, graphs={"nvls": Graph(8, 40.0, 60.0)})
    assert predict(at("2.18.3", **h100), "nvls", "Simple", 8).latency_us == pytest.approx(23.0)
    assert predict(at("2.19.1", **h100), "nvls", "Simple", 8).latency_us == pytest.approx(23.0)
    assert predict(at("2.21.5", **h100), "nvls", "Simple", 8).latency_us == pytest.approx(25.0)


def test_ll128_default_on_sm86_only_from_2_27():
    """Before 2.27 LL128 is on by default only for SM70/80/90 (and 100/120 from 2.25): ``switch (minCompCap)``
    in tuning.cc v2.26.6-1; from v2.27.3-1 any SM >= 70."""
    sm86 = dict(n_ranks=8, n_nodes=1, sm=86, n_channels=8, bw_intra_GBps=20.0, bw_inter_GBps=20.0)
    protos = {v: {choose(at(v, **sm86), s, allowed_algos="Ring")[1] for s in (2**k for k in range(10, 28))}
              for v in ("2.26.2", "2.27.3")}
    assert "LL128" not in protos["2.26.2"] and "LL128" in protos["2.27.3"]
    assert not nccl_release("2.26.2").ll128_default(103) and nccl_release("2.26.2").ll128_default(100)


def test_nccl_algo_never_disables_ring_for_other_collectives_in_2_18():
    """tuning.cc v2.18.3-1: "Never disable ring for non-allreduce operations"; removed in v2.19.1-1."""
    x = dict(collective="all_gather")
    assert choose(at("2.18.3", **x), MiB, allowed_algos="Tree")[0] == "ring"
    with pytest.raises(SpecError, match="no algorithm/protocol left"):
        choose(at("2.19.1", **x), MiB, allowed_algos="Tree")


def test_blackwell_reads_the_hopper_rows_before_2_25():
    assert nccl_release("2.24.3").compcap_index(100) == 2
    assert nccl_release("2.25.1").compcap_index(100) == 3
    b200 = dict(n_ranks=8, n_nodes=1, sm=100, n_channels=16, bw_intra_GBps=40.0, bw_inter_GBps=40.0)
    assert predict(at("2.24.3", **b200), "ring", "LL", GiB).bus_bw_GBps == 141.0  # Hopper N1 llMaxBw
    assert predict(at("2.25.1", **b200), "ring", "LL", GiB).bus_bw_GBps == 282.0


def test_graph_helpers_take_the_release_link_constants():
    """SM90 NVLink 20.0 GB/s per link before 2.20 (topo.h v2.19.4-1): 18 links = 360 GB/s."""
    old = nccl_release("2.19.4")
    assert t.nvlink_bw_GBps(90, 18, old) == 360.0
    ring = t.nvswitch_ring_graph(t.nvlink_bw_GBps(90, 18, old), 90, old)
    assert ring.busbw_GBps <= 360.0


def test_cluster_field_checks_the_version_on_load():
    from gpuwait.spec.cluster import ClusterSpec

    assert ClusterSpec(nccl={"version": "2.21.5+cuda12.4"}).nccl.version == "2.21.5+cuda12.4"
    assert ClusterSpec().nccl.version is None
    with pytest.raises(ValueError, match="expected NCCL 2.18 or later"):
        ClusterSpec(nccl={"version": "2.17.1"})
    with pytest.raises(ValueError, match="expected a release such as 2.21.5"):
        ClusterSpec(nccl={"version": "newest"})
