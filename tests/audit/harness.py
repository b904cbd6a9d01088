"""Small measurements the settings audit changes one setting against (issue 20).

Each function takes overrides deep-merged into one small base input and returns one number, so an audit
entry is "this setting, value a -> value b, moves this number up / down". Built to be cheap: a 2-server
RoCE cluster for perf, a llama-8b job on it for run, an incast of four 100 Gb/s hosts for the packet engine,
two 2-server jobs on a 16-server leaf-spine for ``jobs:``, a two-host imported inventory for real names.
"""

from __future__ import annotations

import copy
from functools import lru_cache

import numpy as np

from gpuwait.collectives.communicator import Communicator
from gpuwait.collectives.ncclenv import parse_env_pairs
from gpuwait.fabric.perf import CollectivePredictor
from gpuwait.spec import ClusterSpec, Scenario, validate_data
from gpuwait.topology import build_topology
from gpuwait.topology.presets import resolve_cluster
from gpuwait.transport import resolve_transport

#: perf's base: two RoCEv2 DGX H100 servers on a 2-tier leaf-spine (a published preset)
BASE_CLUSTER = {"preset": "rocev2-400g-2tier", "servers": 2}
#: run's base: llama-8b, ZeRO-1 data parallel over the 16 GPUs of the same cluster
BASE_JOB = {"cluster": BASE_CLUSTER, "workload": {
    "model": {"preset": "llama-8b", "seq_len": 2048}, "parallel": {"zero": 1, "global_batch": 16},
    "compute": {"jitter_cv": 0.0}, "steps": 2}}
BASE_SERVING = {"cluster": BASE_CLUSTER, "workload": {
    "mode": "inference", "model": {"preset": "llama-8b"}, "inference": {"batch": 8, "tp": 8}, "steps": 1}}


def merge(base: dict, overrides: dict) -> dict:
    """``base`` with ``overrides`` merged in, nested mappings key by key (a copy)."""
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def cluster_spec(overrides: dict) -> ClusterSpec:
    return resolve_cluster(validate_data(ClusterSpec, merge(BASE_CLUSTER, overrides), source="audit",
                                         require_units=False))


def predictor(cluster: dict, env: tuple[str, ...] = (), gpus: int | None = None) -> CollectivePredictor:
    spec = cluster_spec(cluster)
    comm = Communicator.world(build_topology(spec), gpus_per_server=gpus)
    nccl = parse_env_pairs(env).with_version(spec.nccl.version, "nccl.version")
    return CollectivePredictor.create(comm, nccl, spec.routing, resolve_transport(spec.transport))


def perf_s(cluster: dict | None = None, env: tuple[str, ...] = (), size: int = 2**30, op: str = "all_reduce",
           gpus: int | None = None) -> float:
    """Predicted time of one collective (what ``gpuwait perf`` prints)."""
    return predictor(cluster or {}, env, gpus).estimate(op, size).time_s


def topo_capacity_Bps(cluster: dict, network: str, kind: str | None = None) -> float:
    """Summed capacity of the links of one network (``compute``, ``storage``, ``management``) whose
    endpoint names contain ``kind`` (a tier or node name fragment)."""
    from gpuwait.topology import Network

    topo = build_topology(cluster_spec(cluster))
    keep = topo.link_network == getattr(Network, network.upper())
    if kind is not None:
        names = np.array([topo.link_name(i) for i in range(topo.n_links)])
        keep &= np.char.find(names, kind) >= 0
    return float(topo.link_capacity_Bps[keep].sum())


def topo_count(cluster: dict, what: str) -> float:
    """Nodes or links of the built cluster (``nodes``, ``links``, ``switches``)."""
    from gpuwait.topology.model import NodeKind

    topo = build_topology(cluster_spec(cluster))
    if what == "switches":
        return float((topo.node_kind == NodeKind.SWITCH).sum())
    return float(topo.n_links if what == "links" else len(topo.node_kind))


def _scenario(base: dict, overrides: dict) -> Scenario:
    return validate_data(Scenario, merge(base, overrides), source="audit", require_units=False)


def step_s(overrides: dict | None = None, inject: tuple[str, ...] = (), base: dict = BASE_JOB) -> float:
    """Mean step time of ``gpuwait run`` on the base job (inference: the mean time of a served batch)."""
    from gpuwait.faults import parse_inject
    from gpuwait.runner.workload import simulate_workload

    run = simulate_workload(_scenario(base, overrides or {}), None, None, [parse_inject(i) for i in inject])
    return float(np.mean(run.results[0].step_times_s))


def serve_s(overrides: dict | None = None) -> float:
    return step_s(overrides, base=BASE_SERVING)


def steps_run(overrides: dict) -> float:
    """Steps ``gpuwait run`` simulated."""
    from gpuwait.runner.workload import simulate_workload

    return float(len(simulate_workload(_scenario(BASE_JOB, overrides), None, None, []).results[0].step_times_s))


@lru_cache(maxsize=1)
def _incast_fabric():
    from gpuwait.topology.presets import build_cluster

    spec = ClusterSpec.model_validate({
        "servers": 8, "server": {"gpus": 1, "nics": 1, "nic_speed": "100Gbps", "pcie_switches": 1, "cpus": 1},
        "fabric": {"tiers": 2, "switch_radix": 8}})
    return build_cluster(spec)


def packet_metric(params: dict, metric: str, transport: str = "rocev2", routing: dict | None = None,
                  size_bytes: float = 4e6) -> float:
    """One number of a packet-engine incast: s1, s2, s3 -> s0 on one leaf (and s1 -> s4 beside it),
    ``size_bytes`` each (4 MB: long enough for PFC and ECN, 20 MB for DCQCN's rate recovery)."""
    from gpuwait.engine.packet import PacketParams, simulate_packets
    from gpuwait.spec import RoutingSpec
    from gpuwait.transport import TRANSPORTS
    from gpuwait.workload.traffic import FlowTable

    topo = _incast_fabric()
    nics = topo.nic_node[:, 0].astype(np.int64)
    src, dst = np.r_[nics[1:4], nics[1]], np.r_[np.full(3, nics[0]), nics[4]]
    n = len(src)
    flows = FlowTable([f"f{i}" for i in range(n)], src, dst, np.full(n, size_bytes), np.zeros(n), np.full(n, np.inf),
                      [[] for _ in range(n)])
    base = {"switch_buffer_bytes": 2 * 2**20}
    run = simulate_packets(topo, flows, RoutingSpec(**(routing or {})), TRANSPORTS[transport],
                           PacketParams(**merge(base, params)))
    bottleneck = topo.link_id("leaf0->s0.nic0")
    upstream = topo.link_id("s1.nic0->leaf0")
    counters = run.qp_counter_table()
    values = {
        "makespan_s": lambda: float(run.makespan_s),
        "drops": lambda: float(run.drops.sum()),
        "pause_frames": lambda: float(run.pause_frames.sum()),
        "paused_s": lambda: float(run.paused_s[upstream].sum()),
        "pause_priority": lambda: float(np.argmax(run.pause_frames.sum(axis=0))),
        "queue_bytes": lambda: float(run.link_mean_queue_bytes[bottleneck]),
        "cnp": lambda: float(counters["np_cnp_sent"].sum()),
        "retransmitted": lambda: float(counters["retransmitted_packets"].sum()),
        "xmit_wait_s": lambda: float(run.xmit_wait_s.sum()),
        "queue_samples": lambda: float(len(run.queue_depth("leaf0->s0.nic0")[0])),
        "unfinished": lambda: float((~np.isfinite(run.flow_finish_s)).sum()),
    }
    return values[metric]()


def packet_recovery_makespan_s(dcqcn: dict) -> float:
    """Makespan of a 7-to-1 packet-engine incast whose first flow (40 MB) outlives the six others (4 MB):
    DCQCN cuts it deep while they run, and once they are gone it climbs back to line rate through fast
    recovery, additive and then hyper increase (Zhu et al., "Congestion Control for Large-Scale RDMA
    Deployments", SIGCOMM 2015, section 3.1). Hyper increase needs both the timer and the byte-counter
    stages past F, so a byte counter of 100 KB is set; with the paper's 10 MB (too slow to pass F
    while 40 MB drain) no incast shows it."""
    from gpuwait.engine.packet import PacketParams, simulate_packets
    from gpuwait.spec import RoutingSpec
    from gpuwait.transport import TRANSPORTS
    from gpuwait.workload.traffic import FlowTable

    topo = _incast_fabric()
    nics = topo.nic_node[:, 0].astype(np.int64)
    sources = 7
    sizes_bytes = np.full(sources, 4e6)
    sizes_bytes[0] = 40e6
    flows = FlowTable([f"f{i}" for i in range(sources)], nics[1:sources + 1], np.full(sources, nics[0]), sizes_bytes,
                      np.zeros(sources), np.full(sources, np.inf), [[] for _ in range(sources)])
    params = PacketParams(switch_buffer_bytes=2 * 2**20, dcqcn=dcqcn)
    return float(simulate_packets(topo, flows, RoutingSpec(), TRANSPORTS["rocev2"], params).makespan_s)


def flow_s(cluster: dict, src: str = "s0.gpu0", dst: str = "s1.gpu0", size_bytes: float = 4096.0) -> float:
    """Flow-engine completion time of one transfer (what ``gpuwait run`` gives a traffic flow): small
    transfers are latency, large ones bandwidth."""
    from gpuwait.engine.flow_run import simulate_flows
    from gpuwait.workload.traffic import FlowTable

    spec = cluster_spec(cluster)
    topo = build_topology(spec)
    ids = topo.node_ids([src, dst])
    flows = FlowTable(["f0"], ids[:1], ids[1:], np.array([size_bytes]), np.zeros(1), np.full(1, np.inf), [[]])
    return float(simulate_flows(topo, flows, spec.routing, resolve_transport(spec.transport)).flow_time_s[0])


def route_hops(cluster: dict, src: str = "s0.gpu0", dst: str = "s1.gpu1") -> float:
    """Links on the route of one flow (what ``gpuwait route`` shows)."""
    from gpuwait.routing import route_flows

    spec = cluster_spec(cluster)
    topo = build_topology(spec)
    routes = route_flows(topo, spec.routing, [src], [dst], transport=spec.transport.name)
    return float(len(routes.ordered_links(0, topo)[0]))


#: traffic's base: one 1 GB flow between two servers of an 8-server RoCE cluster
BASE_TRAFFIC = {"cluster": {"preset": "rocev2-400g-2tier", "servers": 8},
                "traffic": {"flows": [{"name": "a", "src": "s0.gpu0", "dst": "s1.gpu0", "size": "1GB"}]}}


def traffic_s(overrides: dict, variant: int = 0) -> float:
    """Makespan of ``gpuwait run`` on a traffic scenario (flow engine); ``variant`` picks a case."""
    from gpuwait.runner.traffic import run_traffic

    return float(run_traffic(_scenario(BASE_TRAFFIC, overrides))[variant].makespan_s)


def traffic_link_bytes(overrides: dict, fragment: str) -> float:
    """Bytes the links whose names contain ``fragment`` carry in ``gpuwait run`` on a traffic scenario."""
    from gpuwait.runner.traffic import run_traffic
    from gpuwait.topology.presets import build_cluster

    scenario = _scenario(BASE_TRAFFIC, overrides)
    topo = build_cluster(resolve_cluster(scenario.cluster))
    run = run_traffic(scenario)[0]
    names = np.array([topo.link_name(i) for i in range(topo.n_links)])
    return float(np.asarray(run.link_bytes)[np.char.find(names, fragment) >= 0].sum())


def _job(name: str, servers: list[int]) -> dict:
    return {"name": name, "servers": len(servers), "placement": servers,
            "workload": {"model": {"preset": "llama-8b", "seq_len": 2048},
                         "parallel": {"zero": 1, "global_batch": 32}, "compute": {"jitter_cv": 0.0}}}


#: jobs' base: two 2-server data-parallel llama-8b jobs on a 16-server leaf-spine (4 servers a leaf),
#: each split over two leaves so that both cross the same leaf uplinks (``gpuwait run`` on ``jobs:``)
BASE_JOBS = {"cluster": {"preset": "rocev2-400g-2tier", "servers": 16}, "jobs": [_job("a", [0, 4]), _job("b", [1, 5])]}


def jobs_metric(jobs: list[dict], metric: str = "shared_step_s", job: int = 0) -> float:
    """One number of job ``job`` when ``gpuwait run`` runs ``jobs`` (each merged into the base job of the
    same index) together on the base cluster for 2 steps: ``shared_step_s``, ``alone_step_s``, ``leaves``."""
    from gpuwait.runner.jobs import run_jobs

    base = BASE_JOBS["jobs"]
    merged = [merge(base[i] if i < len(base) else base[0], j) for i, j in enumerate(jobs)]
    run = run_jobs(_scenario({**BASE_JOBS, "jobs": []}, {"jobs": merged}), steps=2)
    return float(getattr(run.jobs[job], metric))


def placed(spec: dict, servers: int = 6, busy: tuple[int, ...] = (0, 1, 2, 5), metric: str = "leaves") -> float:
    """Where one placement policy puts a job of ``servers`` servers on the 16-server leaf-spine (4 a
    leaf) with the ``busy`` servers taken: ``leaves`` it spans, or ``which`` (a number naming the set)."""
    from gpuwait.placement import place
    from gpuwait.spec.jobs import PlacementSpec

    tree = _placement_tree()
    free = np.ones(tree.n_servers, bool)
    free[list(busy)] = False
    chosen = place(free, tree, servers, PlacementSpec(**spec))
    return float(tree.spans(chosen)[0]) if metric == "leaves" else float(sum(2**int(s) for s in chosen))


@lru_cache(maxsize=1)
def _placement_tree():
    from gpuwait.placement import fabric_tree
    from gpuwait.topology.presets import build_preset

    return fabric_tree(build_preset("rocev2-400g-2tier", servers=16))


#: an imported cluster: two one-NIC hosts on two leaves under one spine, as `gpuwait inventory import` writes it
BASE_INVENTORY = {"servers": 2, "server": {"template": "dgx-h100", "nics": 1}, "fabric": {"kind": "inventory"},
                  "inventory": {"hosts": ["n1", "n2"], "nics": ["mlx5_0"],
                                "switches": [{"name": "leaf1", "tier": 1}, {"name": "leaf2", "tier": 1},
                                             {"name": "spine1", "tier": 2}],
                                "cables": [{"a": "n1.mlx5_0", "b": "leaf1"}, {"a": "n2.mlx5_0", "b": "leaf2"},
                                           {"a": "leaf1", "b": "spine1"}, {"a": "leaf2", "b": "spine1"}]}}


def inventory_cluster(inventory: dict) -> dict:
    """The base inventory cluster with ``inventory`` fields replacing the base's (lists whole)."""
    return merge(BASE_INVENTORY, {"inventory": inventory})


def resolves(inventory: dict, name: str) -> float:
    """1 if the built inventory cluster answers to node or link ``name``, else 0 (what every command
    that takes a name, ``--src``, ``--inject`` targets, does)."""
    from gpuwait.errors import UnknownNameError

    topo = build_topology(cluster_spec(inventory_cluster(inventory)))
    for lookup in (topo.node_id, topo.link_id):
        try:
            lookup(name)
            return 1.0
        except UnknownNameError:
            pass
    return 0.0


def inventory_capacity_Bps(inventory: dict, fragment: str) -> float:
    """Summed capacity of the inventory cluster's compute links whose names contain ``fragment``."""
    return topo_capacity_Bps(inventory_cluster(inventory), "compute", fragment)


def inventory_hops(inventory: dict, src: str = "n1.gpu0", dst: str = "n2.gpu0") -> float:
    return route_hops(inventory_cluster(inventory), src, dst)


def inventory_pods(inventory: dict) -> float:
    """Pods the placement policies see in the inventory cluster (hosts grouped under their tier-2 switch)."""
    from gpuwait.placement import fabric_tree

    topo = build_topology(cluster_spec(inventory_cluster(inventory)))
    return float(len(np.unique(fabric_tree(topo).pod_of_server)))
