"""gpuwait.fabric.memory: the memory a collective's fabric run is estimated to allocate, before it runs, is an
upper bound of what it allocates (tracemalloc's peak over the run) and within a small factor of it
(issue 16, item 4). The counts come from the compiled plan and the topology; the per-entry bytes from the
arrays the code holds (see the module), so this checks them against the code itself, not a fitted table."""

from __future__ import annotations

import tracemalloc

import pytest

from gpuwait.collectives.communicator import Communicator
from gpuwait.collectives.ncclenv import parse_env
from gpuwait.fabric.memory import WALK_ALLOWANCE_BYTES, run_bytes
from gpuwait.fabric.perf import CollectivePredictor
from gpuwait.spec import ClusterSpec
from gpuwait.topology import build_cluster
from gpuwait.transport import TRANSPORTS

GIB = 2**30
#: the estimate may exceed the peak by at most this factor (it counts every array as alive at once, and a
#: splitting router's classes as the leaf pairs present, where a staged route shares them per pod)
MAX_RATIO = 3.0


def _predictor(preset: str, routing: str, gpus: int) -> CollectivePredictor:
    # "rocev2-3tier": the 2-tier RoCE preset with 16-port switches, 3 tiers from 64 servers
    fabric = {"fabric": {"kind": "clos", "switch_radix": 16}} if preset == "rocev2-3tier" else {}
    preset = "rocev2-400g-2tier" if preset == "rocev2-3tier" else preset
    topo = build_cluster(ClusterSpec(preset=preset, servers=gpus // 8, routing={"kind": routing}, **fabric))
    return CollectivePredictor.create(Communicator.world(topo), parse_env({}), topo.spec.routing,
                                      TRANSPORTS[topo.spec.transport.name])


CASES = [
    ("dgx-h100-superpod", "all_reduce", "ecmp", 256),
    ("dgx-h100-superpod", "all_reduce", "adaptive", 1024),
    ("dgx-h100-superpod", "all_reduce", "spray", 512),
    ("rocev2-3tier", "all_reduce", "adaptive", 512),
    ("rocev2-3tier", "all_reduce", "spray", 512),
    ("rocev2-3tier", "all_reduce", "ecmp", 512),
    ("rocev2-3tier", "alltoall", "adaptive", 512),
    ("rocev2-400g-2tier", "all_reduce", "ecmp", 256),
    ("dgx-h100-superpod", "all_gather", "ecmp", 512),
    ("dgx-h100-superpod", "alltoall", "ecmp", 128),
    ("rocev2-400g-2tier", "alltoall", "ecmp", 64),
    ("dgx-h100-superpod", "alltoall", "adaptive", 256),
    ("dgx-h100-superpod", "alltoall", "adaptive", 1024),
    ("dgx-h100-superpod", "alltoall", "spray", 512),
    ("dgx-h100-superpod", "alltoall", "adaptive", 4096),  # the preset's first 3-tier size: grouped per pod
    ("dgx-h100-superpod", "broadcast", "adaptive", 512),  # ring: identical flows inside a server merged
    ("oci-a100-roce", "all_reduce", "ecmp", 256),  # tree, 4 QPs per connection
    ("dual-plane-2x200g", "alltoall", "ecmp", 128),  # NICs of two ports: no leaf-pair classes
    ("dgx-h100-superpod", "alltoall", "adaptive", 8),  # one server: every pair inside it (was a ValueError)
]


@pytest.mark.parametrize(("preset", "collective", "routing", "gpus"), CASES)
def test_estimate_bounds_the_peak(preset: str, collective: str, routing: str, gpus: int) -> None:
    predictor = _predictor(preset, routing, gpus)
    key = predictor.fabric_key(collective, GIB)
    counts = predictor.fabric_counts(key)
    estimate_bytes = run_bytes(counts)[0]
    tracemalloc.start()
    try:
        predictor.estimate(collective, GIB)
        peak_bytes = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # the walk's allowance (not yet derived, see gpuwait.fabric.memory) is part of what perf states
    assert peak_bytes <= estimate_bytes + WALK_ALLOWANCE_BYTES and estimate_bytes <= MAX_RATIO * peak_bytes, (
        f"estimate {estimate_bytes / 1e6:.1f} MB, peak {peak_bytes / 1e6:.1f} MB")


def test_fabric_key_is_the_run_estimate_uses() -> None:
    predictor = _predictor("dgx-h100-superpod", "adaptive", 256)
    for collective in ("all_reduce", "alltoall"):
        key = predictor.fabric_key(collective, GIB)
        predictor.estimate(collective, GIB)
        assert key in predictor._fabric_cache
    assert predictor.fabric_key("all_reduce", 0) is None


def test_perf_refuses_over_the_limit_naming_the_field(capsys) -> None:
    from gpuwait.cli.main import main

    assert main(["perf", "all_reduce", "--cluster", "dgx-h100-superpod", "--servers", "32", "--max-memory", "10MB"]) == 2
    err = capsys.readouterr().err
    assert "over the limit of 10MB" in err and "change --servers" in err and len(err.splitlines()) == 2


def test_perf_json_states_the_estimate(capsys) -> None:
    import json

    from gpuwait.cli.main import main

    assert main(["perf", "all_reduce", "--cluster", "dgx-h100-superpod", "--servers", "4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["memory_estimate_bytes"] > 0
