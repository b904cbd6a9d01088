"""libfabric CXI's rendezvous protocol on Slingshot: one more network round trip per message above the threshold.

Sources of the expectations:

* libfabric's CXI provider (ofiwg/libfabric v1.22.0, man/fi_cxi.7.md "Messaging"; defaults in
  prov/cxi/include/cxip.h ``CXIP_RDZV_THRESHOLD`` = 2048 and prov/cxi/src/cxip_info.c ``rdzv_get_min`` = 2049):
  a send of at most FI_CXI_RDZV_THRESHOLD + FI_CXI_RDZV_GET_MIN bytes goes eagerly; a longer one sends its header
  and 2048 bytes, and the receiver pulls the rest with an RDMA Get once the header is matched
  (``issue_rdzv_get``, prov/cxi/src/cxip_msg_hpc.c).
* One-way latency of a small message between two Alps nodes over Slingshot-11: 2.3 us (osu_latency, 256 B, CSCS's
  regression reference, eth-cscs/cscs-reframe-tests checks/microbenchmarks/mpi/osu/osu_run.py ``OSULatency``).
* NCCL's LL protocol sends 8 bytes of flags with every 8 bytes of data (``ncclLLFifoLine``, src/device/prims_ll.h,
  NVIDIA/nccl v2.25.1-1): a step of 2 KiB of data is a 4 KiB message (eager), one of 4 KiB an 8 KiB message
  (rendezvous).
* The published CSCS Alps GH200 all_reduce (eth-cscs/cscs-docs docs/software/communication/nccl.md, "All-reduce
  latency", 2 x 4 GH200 over Slingshot through aws-ofi-nccl): 21.7 us at 2 KiB, 31.6 us at 4 KiB (in place), a
  9.9 us step where the LL message crosses the rendezvous threshold, flat to 32 KiB (37.1 us); ring/LL 164.3 us at
  1 MiB.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwait.runner.perf import make_predictor
from gpuwait.transport.profiles import TRANSPORTS

CLUSTERS = Path(__file__).resolve().parents[1] / "nccltests" / "data" / "reference" / "clusters"
SLINGSHOT = str(CLUSTERS / "alps-gh200-slingshot.yaml")
HOOK_ENV = {"NCCL_PROTO": "^LL128", "NCCL_NET_GDR_LEVEL": "PHB"}


def test_cxi_profile_carries_libfabrics_thresholds_and_one_round_trip():
    cxi = TRANSPORTS["slingshot"]
    assert cxi.rendezvous_threshold_bytes == 2048 + 2049
    assert cxi.rendezvous_round_trip_s == pytest.approx(2 * 2.3e-6)
    assert cxi.rendezvous_s(2048 + 2049) == 0.0  # eager up to the sum
    assert cxi.rendezvous_s(2048 + 2050) == pytest.approx(4.6e-6)
    # transports whose provider protocol is not modelled pay nothing extra
    assert all(TRANSPORTS[name].rendezvous_s(2**20) == 0.0 for name in ("infiniband", "rocev2", "efa", "tcp"))


def test_ll_tree_steps_up_where_its_message_turns_rendezvous():
    predictor = make_predictor(SLINGSHOT, 2, 4, HOOK_ENV)
    eager, rendezvous = predictor.estimate("all_reduce", 2048), predictor.estimate("all_reduce", 4096)
    assert (eager.algorithm, eager.protocol) == (rendezvous.algorithm, rendezvous.protocol) == ("tree", "LL")
    # the 2-node tree's first chunk crosses the network twice (up to the root, back down), each a message
    assert eager.costs.rendezvous_latency_s == 0.0
    assert rendezvous.costs.rendezvous_latency_s == pytest.approx(2 * 4.6e-6)
    step_us = (rendezvous.time_s - eager.time_s) * 1e6
    assert step_us == pytest.approx(31.6 - 21.7, rel=0.25)
    # beyond the threshold the floor stays flat, as measured (37.1 us at 32 KiB)
    assert predictor.estimate("all_reduce", 32768).time_s * 1e6 == pytest.approx(37.1, rel=0.10)


def test_ring_ll_waits_for_every_messages_round_trip():
    predictor = make_predictor(SLINGSHOT, 2, 4, HOOK_ENV)
    estimate = predictor.estimate("all_reduce", 2**20)
    assert (estimate.algorithm, estimate.protocol) == ("ring", "LL")
    costs = estimate.costs
    # one message in flight per connection: each of its messages (its sends and receives, two per message) waits
    # for its Get; the first chunk's two network crossings are in the latency
    messages = costs.serial_messages / 2
    assert messages == pytest.approx(2 * (8 - 1))  # the ring's 2 (n - 1) steps
    assert costs.rendezvous_latency_s == pytest.approx(2 * 4.6e-6)
    assert costs.rendezvous_serial_s == pytest.approx((messages - 2) * 4.6e-6)
    assert estimate.time_s * 1e6 == pytest.approx(164.3, rel=0.25)


def test_other_transports_unchanged():
    predictor = make_predictor("dgx-h100", 2, 8, {})
    for size in (4096, 2**20, 2**27):
        costs = predictor.estimate("all_reduce", size).costs
        assert costs.rendezvous_latency_s == costs.rendezvous_serial_s == 0.0


def test_p2p_pays_the_round_trip_once_above_the_threshold():
    predictor = make_predictor(SLINGSHOT, 2, 4, HOOK_ENV)
    small, large = predictor.estimate("sendrecv", 1024), predictor.estimate("sendrecv", 2**20)
    assert small.costs.rendezvous_latency_s == 0.0  # an LL message of 2 KiB: eager
    assert large.costs.rendezvous_latency_s == pytest.approx(4.6e-6)


def test_a_cluster_file_sets_its_sites_threshold(tmp_path):
    """A site that raises FI_CXI_RDZV_THRESHOLD (GASNet's ofi-conduit sets 16384: its warning quoted in
    StanfordLegion/legion#1657) sends 4 KiB LL steps eagerly."""
    from gpuwait.spec.cluster import TransportSpec
    from gpuwait.transport.profiles import resolve_transport

    raised = resolve_transport(TransportSpec(name="slingshot", rendezvous_threshold="18433"))
    assert raised.rendezvous_s(8192) == 0.0 and raised.rendezvous_s(32768) == pytest.approx(4.6e-6)
    every = resolve_transport(TransportSpec(name="slingshot", rendezvous_threshold=0))
    assert every.rendezvous_s(64) == pytest.approx(4.6e-6)
    cluster = tmp_path / "alps.yaml"
    cluster.write_text(Path(SLINGSHOT).read_text().replace("name: slingshot", "name: slingshot\n  rendezvous_threshold: 16KiB"))
    estimate = make_predictor(str(cluster), 2, 4, HOOK_ENV).estimate("all_reduce", 4096)
    assert estimate.costs.rendezvous_latency_s == 0.0


def test_a_threshold_on_a_transport_without_rendezvous_is_one_line():
    from gpuwait.errors import SpecError
    from gpuwait.spec.cluster import TransportSpec
    from gpuwait.transport.profiles import resolve_transport

    with pytest.raises(SpecError, match=r"^transport.rendezvous_threshold: got 16384 with infiniband; expected it only "
                                        r"with slingshot"):
        resolve_transport(TransportSpec(name="infiniband", rendezvous_threshold="16KiB"))


def test_the_alps_hook_matches_in_software():
    """CSCS's hook sets FI_CXI_RX_MATCH_MODE=software (cscs-docs nccl_env_vars); libfabric's default matches in
    hardware (fi_cxi.7: "In the normal case, message matching is performed by hardware")."""
    from gpuwait.spec.cluster import TransportSpec
    from gpuwait.transport.profiles import resolve_transport

    assert resolve_transport(TransportSpec(name="slingshot")).rendezvous_software_match
    assert not resolve_transport(TransportSpec(name="slingshot", platform="none")).rendezvous_software_match
    assert not resolve_transport(TransportSpec(name="infiniband")).rendezvous_software_match


def test_a_get_issued_in_software_waits_half_a_proxy_pass(tmp_path):
    """fi_cxi.7 ("Messaging", libfabric v1.22.0): in the normal case the rendezvous Get "is performed by hardware
    and the operation completes without software progress"; software matching onloads it to the receiver's
    progress, which aws-ofi-nccl runs when NCCL's proxy thread tests a request, once per pass over the GPU's
    connections (src/transport/net.cc ``recvProxyProgress``, NVIDIA/nccl v2.30.7-1): half a pass per Get."""
    hardware = tmp_path / "alps-hw.yaml"
    hardware.write_text(Path(SLINGSHOT).read_text().replace("name: slingshot", "name: slingshot\n  platform: none"))
    soft, hard = make_predictor(SLINGSHOT, 2, 4, HOOK_ENV), make_predictor(str(hardware), 2, 4, HOOK_ENV)
    one_mib_soft, one_mib_hard = soft.estimate("all_reduce", 2**20), hard.estimate("all_reduce", 2**20)
    assert (one_mib_soft.algorithm, one_mib_soft.protocol) == (one_mib_hard.algorithm, one_mib_hard.protocol) == ("ring", "LL")
    gets = 2 * (8 - 1)  # one per ring step: two on the first chunk's way, the rest in the connection's series
    assert one_mib_soft.costs.connection_steps - one_mib_hard.costs.connection_steps == pytest.approx(0.5 * gets)
    cycle_s = soft.params.net_step_cycle_s * one_mib_soft.costs.proxy_load
    assert one_mib_soft.time_s - one_mib_hard.time_s == pytest.approx(0.5 * gets * cycle_s)
    # an eager message has no Get to wait for
    assert soft.estimate("all_reduce", 2048).time_s == pytest.approx(hard.estimate("all_reduce", 2048).time_s)
    # the published 1 MiB (164.3 us, CSCS Alps) within 20 %
    assert one_mib_soft.time_s * 1e6 == pytest.approx(164.3, rel=0.20)
