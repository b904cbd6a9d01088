"""Every setting gpuwait accepts, and how the audit knows it does something (issue 20).

One entry per field of ``gpuwait schema`` (``Model.field``) and per accepted NCCL variable (``env:NAME``):

* :class:`Effect`: changing the setting from ``a`` to ``b`` moves one measured number (``tests/audit/harness.py``)
  in the documented direction (``up`` / ``down``);
* :class:`Refused`: the value is refused with one line saying what is not modelled (and what is);
* :class:`Covered`: an existing test shows the effect (its source names the field);
* :class:`Label`: by design no effect on any result (a name, a record), with why;
* :class:`Section`: a group whose own fields are audited one by one.

``tests/audit/test_settings_audit.py`` walks the schema and :data:`gpuwait.collectives.ncclenv.VARIABLES`
and fails on any setting without an entry, then runs every Effect and Refused entry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gpuwait.collectives.ncclenv import parse_env
from tests.audit import harness as h


@dataclass(frozen=True)
class Effect:
    measure: Callable[..., float]
    a: dict
    b: dict
    direction: str  # "up": measure(**b) > measure(**a); "down": below
    why: str = ""


@dataclass(frozen=True)
class Refused:
    call: Callable[[], object]
    message: str


@dataclass(frozen=True)
class Covered:
    test: str  # "tests/path.py::test_name"


@dataclass(frozen=True)
class Label:
    why: str


@dataclass(frozen=True)
class Section:
    why: str = "a group: its fields are audited one by one"


@dataclass(frozen=True)
class Gap:
    why: str
    extra: dict = field(default_factory=dict)


def perf(a: dict, b: dict, direction: str, why: str = "", **kw) -> Effect:
    """perf's collective time with cluster overrides ``a`` vs ``b`` (``kw``: env, size, gpus)."""
    return Effect(h.perf_s, {"cluster": a, **kw}, {"cluster": b, **kw}, direction, why)


def env(a: tuple[str, ...], b: tuple[str, ...], direction: str, cluster: dict | None = None, **kw) -> Effect:
    return Effect(h.perf_s, {"cluster": cluster or {}, "env": a, **kw}, {"cluster": cluster or {}, "env": b, **kw},
                  direction)


def step(a: dict, b: dict, direction: str, why: str = "") -> Effect:
    """run's mean step time with workload overrides ``a`` vs ``b``."""
    return Effect(h.step_s, {"overrides": {"workload": a}}, {"overrides": {"workload": b}}, direction, why)


def fault(a: str, b: str, direction: str) -> Effect:
    return Effect(h.step_s, {"inject": (a,)}, {"inject": (b,)}, direction)


def serve(a: dict, b: dict, direction: str) -> Effect:
    return Effect(h.serve_s, {"overrides": {"workload": a}}, {"overrides": {"workload": b}}, direction)


def step_on(cluster: dict, a: dict, b: dict, direction: str) -> Effect:
    """run's mean step time on the base job's cluster changed by ``cluster``."""
    return Effect(h.step_s, {"overrides": {"cluster": cluster, "workload": a}},
                  {"overrides": {"cluster": cluster, "workload": b}}, direction)


def leaf_bytes(a: dict, b: dict, fragment: str, direction: str) -> Effect:
    return Effect(h.traffic_link_bytes, {"overrides": a, "fragment": fragment},
                  {"overrides": b, "fragment": fragment}, direction)


def traffic(a: dict, b: dict, direction: str, why: str = "") -> Effect:
    """run's makespan of a traffic scenario with overrides ``a`` vs ``b``."""
    return Effect(h.traffic_s, {"overrides": a}, {"overrides": b}, direction, why)


def _flow(**fields) -> dict:
    return {"traffic": {"flows": [{**h.BASE_TRAFFIC["traffic"]["flows"][0], **fields}]}}


def _pattern(routing: dict | None = None, **fields) -> dict:
    """A pattern on 32 servers (8 leaves), so that ECMP has collisions to make."""
    cluster = {"servers": 32, **({"routing": routing} if routing else {})}
    return {"cluster": cluster, "traffic": {"flows": [], "patterns": [{"kind": "permutation", "size": "64MB", **fields}]}}


def packet(a: dict, b: dict, metric: str, direction: str, **kw) -> Effect:
    return Effect(h.packet_metric, {"params": a, "metric": metric, **kw}, {"params": b, "metric": metric, **kw},
                  direction)


def dcqcn(change: dict) -> Effect:
    """The packet engine's 20 MB incast with DCQCN settings changed: the makespan moves. The direction is
    not asserted: with PFC on, the queue and the pauses mix the rate law's effects."""
    return Effect(h.packet_metric, {"params": {"dcqcn": FAST_DCQCN}, "metric": "makespan_s", "size_bytes": 20e6},
                  {"params": {"dcqcn": {**FAST_DCQCN, **change}}, "metric": "makespan_s", "size_bytes": 20e6},
                  "differs")


def flow(a: dict, b: dict, direction: str, **kw) -> Effect:
    return Effect(h.flow_s, {"cluster": a, **kw}, {"cluster": b, **kw}, direction)


def count(a: dict, b: dict, what: str, direction: str) -> Effect:
    return Effect(h.topo_count, {"cluster": a, "what": what}, {"cluster": b, "what": what}, direction)


def capacity(a: dict, b: dict, network: str, direction: str) -> Effect:
    return Effect(h.topo_capacity_Bps, {"cluster": a, "network": network}, {"cluster": b, "network": network},
                  direction)


def hops(a: dict, b: dict, direction: str, **kw) -> Effect:
    return Effect(h.route_hops, {"cluster": a, **kw}, {"cluster": b, **kw}, direction)


def jobs(a: list[dict], b: list[dict], direction: str, why: str = "", metric: str = "shared_step_s") -> Effect:
    """Job a's step time (or ``metric``) when ``gpuwait run`` runs the base jobs changed by ``a`` vs ``b``."""
    return Effect(h.jobs_metric, {"jobs": a, "metric": metric}, {"jobs": b, "metric": metric}, direction, why)


def placed(a: dict, b: dict, direction: str, why: str = "", **kw) -> Effect:
    return Effect(h.placed, {"spec": a, **kw}, {"spec": b, **kw}, direction, why)


def resolves(change: dict, name: str) -> Effect:
    """An inventory name: the cluster answers to ``name`` only once ``change`` is made."""
    return Effect(h.resolves, {"inventory": {}, "name": name}, {"inventory": change, "name": name}, "up",
                  f"{name} becomes a name every command accepts")


ONE = {"servers": 1}
A100 = {"servers": 1, "server": {"template": "dgx-a100"}}
L40S_GDR = "tests/topology/test_pcipath.py::test_host_staging_slows_the_l40s_roce_cluster_and_the_variables_restore_it"
NO_P2P = {"servers": 1, "server": {"gpu_p2p": False}}
EIGHT = {"servers": 8}
STORAGE = {"storage": {"mode": "separate"}, "server": {"storage_nics": 1}}
STORAGE_READ = {"cluster": STORAGE, "workload": {"data": {"dataset_read_per_gpu": "20GB/s"}}}
MGMT = {"management": {"enabled": True}, "servers": 8}
SMALL = 2**13
NVL72 = {"preset": "gb200-nvl72", "servers": 18}
LOSSY = {"flow_control": "none", "congestion_control": "none"}
PFC = {"congestion_control": "none"}
FAST_DCQCN = {"rate_ai_bps_per_25gbps": 100e6, "fast_recovery_steps": 5, "rp_timer_s": 20e-6}
DEFAULT_BUFFER = {"switch_buffer_bytes": 12 * 2**20}  # PacketParams' default (the harness uses 2 MiB)
# a slow additive step and a short byte counter: recovery is long and reaches hyper increase
RECOVERY_DCQCN = {"rate_ai_bps_per_25gbps": 5e6, "fast_recovery_steps": 5, "rp_timer_s": 55e-6,
                  "byte_counter_bytes": 1e5}
LOSS = {"loss_rate": 1e-3, **LOSSY}
FLOW = _flow()
PATTERN = _pattern()
SMALL_PATTERN = {"cluster": {"servers": 4}, "traffic": {"flows": [], "patterns": [{"kind": "permutation", "size": "64MB"}]}}
TWO_FLOWS = {"traffic": {"flows": [h.BASE_TRAFFIC["traffic"]["flows"][0],
                                   {"name": "b", "src": "s2.gpu0", "dst": "s3.gpu0", "size": "1GB"}]}}
VARIANTS = {**PATTERN, "variants": [{"name": "spray", "routing": {"kind": "spray"}},
                                    {"name": "mtu256", "transport": {"name": "rocev2", "mtu": 256}}]}
PP2 = {"parallel": {"pp": 2, "global_batch": 64}}
#: 31 layers on 2 stages: only one of embedding / loss can count as a layer (32 split evenly)
PP2_ODD = {"model": {"layers": 31}, "parallel": {"pp": 2, "global_batch": 64}}
INV_CABLES = h.BASE_INVENTORY["inventory"]["cables"]
INV_SWITCHES = h.BASE_INVENTORY["inventory"]["switches"]
LEAF_UPLINK = INV_CABLES[2]  # leaf1 -> spine1
MOE = {"model": {"preset": "mixtral-8x7b", "seq_len": 1024, "layers": 4}, "parallel": {"zero": 1, "ep": 8}}


def _schema_fields() -> dict[str, object]:
    return {
        # ---------------------------------------------------------------- Scenario
        "Scenario.name": Label("the scenario's name, printed in reports"),
        "Scenario.cluster": Section(),
        "Scenario.traffic": Section(),
        "Scenario.workload": Section(),
        "Scenario.variants": Covered("tests/engine/test_network.py::test_scenario_variants_share_inputs_and_are_independent"),
        "Scenario.faults": Section("fault kinds: their targets and parameters are audited one by one"),
        "Scenario.packet": Section(),
        # ---------------------------------------------------------------- ClusterSpec
        "ClusterSpec.preset": perf({}, {"preset": "oci-a100-roce"}, "up", "A100 and 100G ports vs H100 and 400G"),
        "ClusterSpec.name": Label("the cluster's name, printed in reports"),
        "ClusterSpec.servers": perf({}, {"servers": 4}, "up", "more ranks: more ring steps"),
        "ClusterSpec.server": Section(),
        "ClusterSpec.nvlink_domain": Section(),
        "ClusterSpec.fabric": Section(),
        "ClusterSpec.storage": Section(),
        "ClusterSpec.management": Section(),
        "ClusterSpec.routing": Section(),
        "ClusterSpec.transport": Section(),
        "ClusterSpec.calibration": Section(),
        "ClusterSpec.nccl": Section(),
        # ---------------------------------------------------------------- ServerSpec
        "ServerSpec.template": perf({}, {"server": {"template": "dgx-a100"}}, "up"),
        "ServerSpec.gpu_model": perf(ONE, {**ONE, "server": {"gpu_model": "A100-SXM4-80GB"}}, "up",
                                     "NCCL's per-link NVLink figure is lower for SM80"),
        "ServerSpec.gpus": perf({}, {"server": {"gpus": 4}}, "up", "half the GPUs per server: half the NICs in use"),
        "ServerSpec.nvlink_bandwidth": perf(ONE, {**ONE, "server": {"nvlink_bandwidth": "300GB/s"}}, "up"),
        "ServerSpec.nvlink_topology": perf(ONE, {**ONE, "server": {"nvlink_topology": "mesh"}}, "up"),
        "ServerSpec.nvlink_latency": flow(ONE, {**ONE, "server": {"nvlink_latency": "5us"}}, "up",
                                          src="s0.gpu0", dst="s0.gpu1"),
        "ServerSpec.pcie_switches": count({}, {"server": {"pcie_switches": 2}}, "nodes", "down"),
        "ServerSpec.pcie_bandwidth": perf(NO_P2P, h.merge(NO_P2P, {"server": {"pcie_bandwidth": "31.5GB/s"}}), "up"),
        "ServerSpec.pcie_latency": flow({}, {"server": {"pcie_latency": "5us"}}, "up"),
        "ServerSpec.gpu_host_bandwidth": perf(NO_P2P, h.merge(NO_P2P, {"server": {"gpu_host_bandwidth": "8GB/s"}}),
                                              "up"),
        "ServerSpec.gpu_p2p": perf(ONE, NO_P2P, "up", "SHM through host memory instead of NVLink"),
        "ServerSpec.gpu_pcie_switch": perf({}, {"server": {"gpu_pcie_switch": [0] * 8, "nic_pcie_switch": [3] * 8}},
                                           "up", "no GPU shares a switch with a NIC: no GPUDirect RDMA"),
        "ServerSpec.nic_pcie_switch": perf({}, {"server": {"nic_pcie_switch": [0] * 8}}, "up",
                                           "GPUs of switches 1-3 lose their local NIC: no GPUDirect RDMA"),
        "ServerSpec.cpus": count({}, {"server": {"cpus": 1}}, "nodes", "down"),
        "ServerSpec.cpu_interconnect_bandwidth": perf(
            NO_P2P, h.merge(NO_P2P, {"server": {"cpu_interconnect_bandwidth": "8GB/s"}}), "up"),
        # one socket: across two, NCCL holds an AMD ring through host memory to its 16 GB/s socket link (topo.h AMD_BW)
        "ServerSpec.cpu_vendor": perf(h.merge(NO_P2P, {"server": {"cpus": 1}}),
                                      h.merge(NO_P2P, {"server": {"cpus": 1, "cpu_vendor": "amd"}}), "down",
                                      "NCCL charges Intel CPUs a 6/5 PCI overhead through the CPU (paths.cc)"),
        "ServerSpec.cpu_generation": perf(NO_P2P, h.merge(NO_P2P, {"server": {"cpu_generation": "broadwell"}}), "up",
                                          "NCCL's socket link on Broadwell (topo.h BDW_QPI_BW, 6 GB/s) bounds a "
                                          "ring through host memory that crosses sockets"),
        "ServerSpec.nics": perf({}, {"server": {"nics": 4}}, "up"),
        "ServerSpec.nic_speed": perf({}, {"server": {"nic_speed": "200Gbps"}}, "up"),
        "ServerSpec.nic_ports": perf({}, {"server": {"nic_ports": 2}}, "up",
                                     "two ports share the NIC's line rate on one plane's fabric"),
        "ServerSpec.storage_nics": capacity(STORAGE, h.merge(STORAGE, {"server": {"storage_nics": 2}}), "storage", "up"),
        "ServerSpec.storage_nic_speed": capacity(STORAGE, h.merge(STORAGE, {"server": {"storage_nic_speed": "10Gbps"}}),
                                                 "storage", "down"),
        "ServerSpec.mgmt_nic_speed": capacity(MGMT, h.merge(MGMT, {"server": {"mgmt_nic_speed": "100Gbps"}}),
                                              "management", "up"),
        # ---------------------------------------------------------------- NvlinkDomainSpec
        "NvlinkDomainSpec.servers": perf(NVL72, {**NVL72, "nvlink_domain": {"servers": 9}}, "up"),
        "NvlinkDomainSpec.switch_latency": flow(NVL72, {**NVL72, "nvlink_domain": {"switch_latency": "2us"}}, "up"),
        # ---------------------------------------------------------------- FabricSpec
        "FabricSpec.kind": count(ONE, {**ONE, "fabric": {"kind": "none"}}, "links", "down"),
        "FabricSpec.tiers": count(EIGHT, {**EIGHT, "fabric": {"tiers": 3}}, "switches", "up"),
        "FabricSpec.switch_radix": count(EIGHT, {**EIGHT, "fabric": {"switch_radix": 16}}, "switches", "down"),
        "FabricSpec.switch_speed": count(EIGHT, {**EIGHT, "fabric": {"switch_speed": "800Gbps"}}, "links", "down"),
        # a ring's bandwidth is the fabric's: NCCL's default choice here (NVLSTree over 8 nodes) is bound by its
        # proxy's step cycle (7.5 ms), above even the oversubscribed fabric's 6.9 ms
        "FabricSpec.leaf_downlinks": perf(EIGHT, {**EIGHT, "fabric": {"leaf_downlinks": 8}}, "up",
                                          env=("NCCL_ALGO=Ring",)),
        "FabricSpec.oversubscription": perf(EIGHT, {**EIGHT, "fabric": {"oversubscription": 4}}, "up"),
        "FabricSpec.spine_oversubscription": capacity({**EIGHT, "fabric": {"tiers": 3}},
                                                      {**EIGHT, "fabric": {"tiers": 3, "spine_oversubscription": 4}},
                                                      "compute", "down"),
        "FabricSpec.rail_optimized": hops(EIGHT, {**EIGHT, "fabric": {"rail_optimized": True}}, "up",
                                          src="s0.gpu0", dst="s1.gpu1"),
        "FabricSpec.servers_per_unit": hops({**EIGHT, "fabric": {"rail_optimized": True}},
                                            {**EIGHT, "fabric": {"rail_optimized": True, "servers_per_unit": 2}}, "up",
                                            src="s0.gpu0", dst="s3.gpu0"),
        "FabricSpec.planes": count({"server": {"nic_ports": 2}}, {"server": {"nic_ports": 2}, "fabric": {"planes": 2}},
                                   "switches", "up"),
        "FabricSpec.dual_tor": count({"server": {"nic_ports": 2}}, {"server": {"nic_ports": 2}, "fabric": {"dual_tor": True}},
                                     "links", "up"),
        "FabricSpec.cable_latency": flow({}, {"fabric": {"cable_latency": "1us"}}, "up"),
        "FabricSpec.switch_latency": flow({}, {"fabric": {"switch_latency": "2us"}}, "up"),
        # ---------------------------------------------------------------- StorageNetworkSpec
        "StorageNetworkSpec.mode": capacity({}, STORAGE, "storage", "up"),
        "StorageNetworkSpec.storage_servers": count(STORAGE, h.merge(STORAGE, {"storage": {"storage_servers": 8}}),
                                                    "nodes", "up"),
        "StorageNetworkSpec.storage_server_speed": capacity(
            STORAGE, h.merge(STORAGE, {"storage": {"storage_server_speed": "10Gbps"}}), "storage", "down"),
        "StorageNetworkSpec.switch_radix": count(h.merge(STORAGE, EIGHT), h.merge(STORAGE, {**EIGHT, "storage": {"switch_radix": 8}}),
                                                 "switches", "up"),
        "StorageNetworkSpec.oversubscription": capacity(
            h.merge(STORAGE, {**EIGHT, "storage": {"switch_radix": 8}}),
            h.merge(STORAGE, {**EIGHT, "storage": {"switch_radix": 8, "oversubscription": 4}}), "storage", "down"),
        # ---------------------------------------------------------------- ManagementNetworkSpec
        "ManagementNetworkSpec.enabled": capacity({}, MGMT, "management", "up"),
        "ManagementNetworkSpec.switch_radix": count(MGMT, h.merge(MGMT, {"management": {"switch_radix": 4}}),
                                                    "switches", "up"),
        "ManagementNetworkSpec.uplink_speed": capacity(
            h.merge(MGMT, {"management": {"switch_radix": 4}}),
            h.merge(MGMT, {"management": {"switch_radix": 4, "uplink_speed": "400Gbps"}}), "management", "up"),
        # ---------------------------------------------------------------- RoutingSpec
        "RoutingSpec.kind": traffic(PATTERN, _pattern(routing={"kind": "spray"}), "down",
                                    "spraying removes ECMP collisions"),
        "RoutingSpec.hash": traffic(PATTERN, _pattern(routing={"hash": "xor-fold"}), "differs",
                                    "another hash: other ECMP collisions"),
        "RoutingSpec.seed": traffic(PATTERN, _pattern(routing={"seed": 99}), "differs", "other ECMP collisions"),
        "RoutingSpec.per_switch_seed": Covered(
            "tests/routing/test_paths.py::test_same_seed_everywhere_polarizes_a_three_tier_fabric"),
        "RoutingSpec.qps_per_connection": Covered(
            "tests/fabric/test_qps_owner.py::test_perf_uses_the_cluster_files_qps_unless_the_nccl_env_sets_them"),
        # ---------------------------------------------------------------- TransportSpec
        "TransportSpec.name": perf({}, {"transport": {"name": "tcp"}}, "up"),
        "TransportSpec.mtu": Effect(h.flow_s, {"cluster": {}, "size_bytes": 1e9},
                                    {"cluster": {"transport": {"mtu": 1024}}, "size_bytes": 1e9}, "up",
                                    "more header bytes per payload byte"),
        "TransportSpec.message_overhead": perf({}, {"transport": {"message_overhead": "50us"}}, "up", size=2**26),
        "TransportSpec.rate_cap": perf({}, {"transport": {"rate_cap": "5Gbps"}}, "up"),
        "TransportSpec.host_ceiling": perf({}, {"transport": {"host_ceiling": "5Gbps"}}, "up"),
        "TransportSpec.net_plugin": Covered(
            "tests/transport/test_socket.py::test_the_l40s_ib_disable_table_floor_is_an_rdma_floor"),
        "TransportSpec.platform": Covered("tests/transport/test_platforms.py::test_p4de_without_proto_is_the_table_with_proto_simple"),
        "TransportSpec.message_curve": Covered("tests/transport/test_socket_curve.py::test_alps_no_cxi_ring_ll_sizes_from_cscs_osu_bw"),
        "TransportSpec.message_curve_stack": Covered(
            "tests/transport/test_socket_curve.py::test_socket_reading_is_the_curve_and_mpi_reading_is_loggp"),
        "TransportSpec.rendezvous_threshold": Covered(
            "tests/transport/test_cxi_rendezvous.py::test_a_cluster_file_sets_its_sites_threshold"),
        # ---------------------------------------------------------------- CalibrationSpec
        "CalibrationSpec.launch_latency": perf({}, {"calibration": {"launch_latency": "20us"}}, "up", size=SMALL),
        "CalibrationSpec.net_step_latency": perf({}, {"calibration": {"net_step_latency": "5us"}}, "up", size=SMALL),
        "CalibrationSpec.intra_step_latency": perf(ONE, {**ONE, "calibration": {"intra_step_latency": "5us"}}, "up",
                                                   size=SMALL),
        "CalibrationSpec.net_message_overhead": perf({}, {"calibration": {"net_message_overhead": "50us"}}, "up",
                                                     size=2**26),
        "CalibrationSpec.nic_efficiency": perf({}, {"calibration": {"nic_efficiency": 0.5}}, "up"),
        "CalibrationSpec.nvlink_efficiency": perf(ONE, {**ONE, "calibration": {"nvlink_efficiency": 0.5}}, "up"),
        "CalibrationSpec.sm80_step_latency": perf(A100, {**A100, "calibration": {"sm80_step_latency": "5us"}}, "up",
                                                  "every step of an A100's latency chain", size=SMALL),
        "CalibrationSpec.fitted_on": Label("a record of the logs a fit used; the model never reads it"),
        "CalibrationSpec.nccl_env": Covered(
            "tests/cli/test_calibrate.py::test_the_overlay_records_the_nccl_env_and_perf_run_diagnose_say_when_theirs_differs"),
        # ---------------------------------------------------------------- NcclSpec
        "NcclSpec.version": perf(ONE, {**ONE, "nccl": {"version": "2.18.3"}}, "up",
                                 "NCCL 2.18's LL bandwidth and latency tables", size=2**20, op="all_gather"),
        # ---------------------------------------------------------------- traffic
        "TrafficSpec.flows": Section(),
        "TrafficSpec.patterns": Section(),
        "FlowSpec.name": Label("names a flow for `after` and the output"),
        "FlowSpec.src": traffic(FLOW, _flow(src="s1.gpu1"), "down", "the same server: NVLink, not the network"),
        "FlowSpec.dst": traffic(FLOW, _flow(dst="s0.gpu1"), "down", "the same server: NVLink, not the network"),
        "FlowSpec.size": traffic(FLOW, _flow(size="2GB"), "up"),
        "FlowSpec.start": traffic(FLOW, _flow(start="5ms"), "up"),
        "FlowSpec.after": traffic(TWO_FLOWS, {"traffic": {"flows": [TWO_FLOWS["traffic"]["flows"][0],
                                                                   {**TWO_FLOWS["traffic"]["flows"][1], "after": ["a"]}]}},
                                  "up"),
        "FlowSpec.rate_cap": traffic(FLOW, _flow(rate_cap="10Gbps"), "up"),
        # 4 servers: an all-to-all of 32 GPUs is 992 flows (on 32 servers, 65,280 took 15 minutes)
        "PatternSpec.kind": traffic(SMALL_PATTERN, h.merge(SMALL_PATTERN, {"traffic": {"patterns": [
            {"kind": "all-to-all", "size": "64MB"}]}}), "up"),
        "PatternSpec.size": traffic(PATTERN, _pattern(size="128MB"), "up"),
        "PatternSpec.count": traffic(_pattern(kind="incast", count=2), _pattern(kind="incast", count=6), "up"),
        "PatternSpec.src_leaf": leaf_bytes(_pattern(kind="leaf-to-leaf", count=4, src_leaf=0, dst_leaf=1),
                                           _pattern(kind="leaf-to-leaf", count=4, src_leaf=2, dst_leaf=1),
                                           "leaf2->spine", "up"),
        "PatternSpec.dst_leaf": leaf_bytes(_pattern(kind="leaf-to-leaf", count=4, src_leaf=0, dst_leaf=1),
                                           _pattern(kind="leaf-to-leaf", count=4, src_leaf=0, dst_leaf=2),
                                           "->leaf2", "up"),
        "PatternSpec.seed": traffic(PATTERN, _pattern(seed=5), "differs"),
        "PatternSpec.start": traffic(PATTERN, _pattern(start="5ms"), "up"),
        "VariantSpec.name": Label("labels the variant in the comparison table"),
        "VariantSpec.routing": Effect(h.traffic_s, {"overrides": VARIANTS, "variant": 0},
                                      {"overrides": VARIANTS, "variant": 1}, "down", "spraying: no ECMP collision"),
        "VariantSpec.transport": Effect(h.traffic_s, {"overrides": VARIANTS, "variant": 0},
                                        {"overrides": VARIANTS, "variant": 2}, "up", "256 B MTU: more headers"),
        # ---------------------------------------------------------------- workload
        "WorkloadSpec.mode": Section("training vs inference: the inference fields below are audited on serving"),
        "WorkloadSpec.gpus": step({}, {"gpus": 8}, "up", "half the data-parallel ranks: twice the samples each"),
        "WorkloadSpec.model": Section(),
        "WorkloadSpec.parallel": Section(),
        "WorkloadSpec.compute": Section(),
        "WorkloadSpec.data": Section(),
        "WorkloadSpec.inference": Section(),
        "WorkloadSpec.steps": Effect(h.steps_run, {"overrides": {}}, {"overrides": {"workload": {"steps": 3}}}, "up"),
        "ModelSpec.preset": step({}, {"model": {"preset": "llama-70b", "layers": 40}, "parallel": {"zero": 3}}, "up"),
        "ModelSpec.layers": step({}, {"model": {"layers": 16}}, "down"),
        "ModelSpec.hidden": step({}, {"model": {"hidden": 2048}}, "down"),
        "ModelSpec.ffn_hidden": step({}, {"model": {"ffn_hidden": 4096}}, "down"),
        "ModelSpec.heads": step({"model": {"kv_heads": 8}}, {"model": {"heads": 16, "kv_heads": 8}}, "up",
                                "fewer query heads, the same KV heads: a larger share of KV projections"),
        "ModelSpec.kv_heads": step({}, {"model": {"kv_heads": 32}}, "up"),
        "ModelSpec.vocab": step({}, {"model": {"vocab": 256000}}, "up"),
        "ModelSpec.hidden_dropout": Covered(
            "tests/workload/test_workload_model.py::test_activations_are_korthikanti_for_gpt"),  # memory only
        "ModelSpec.experts": step(MOE, h.merge(MOE, {"model": {"experts": 16}}), "up"),
        "ModelSpec.top_k": step(MOE, h.merge(MOE, {"model": {"top_k": 4}}), "up"),
        "ModelSpec.expert_ffn_hidden": step(MOE, h.merge(MOE, {"model": {"expert_ffn_hidden": 4096}}), "down"),
        "ModelSpec.shared_experts": step(MOE, h.merge(MOE, {"model": {"shared_experts": 2}}), "up"),
        "ModelSpec.dense_layers": step(MOE, h.merge(MOE, {"model": {"dense_layers": 2}}), "down"),
        "ModelSpec.seq_len": step({}, {"model": {"seq_len": 4096}}, "up"),
        "ModelSpec.precision": step({}, {"model": {"precision": "fp8"}}, "down"),
        "ParallelSpec.tp": step({}, {"parallel": {"tp": 8}}, "up"),
        "ParallelSpec.pp": step({}, {"parallel": {"pp": 2}}, "up"),
        "ParallelSpec.dp": step({}, {"parallel": {"dp": 8}, "gpus": 8}, "up"),
        "ParallelSpec.ep": step(MOE, h.merge(MOE, {"parallel": {"ep": 1}}), "differs",
                                "experts replicated: no all-to-all, larger gradient reductions"),
        "ParallelSpec.zero": step({}, {"parallel": {"zero": 3}}, "differs",
                                  "FSDP: weight all-gathers and gradient reduce-scatters instead of all-reduces"),
        "ParallelSpec.sequence_parallel": step({"parallel": {"tp": 8, "sequence_parallel": True}},
                                               {"parallel": {"tp": 8, "sequence_parallel": False}}, "up"),
        "ParallelSpec.micro_batch": step({}, {"parallel": {"micro_batch": 2, "global_batch": 32}}, "up"),
        "ParallelSpec.global_batch": step({}, {"parallel": {"global_batch": 32}}, "up"),
        "ParallelSpec.bucket": step({}, {"parallel": {"bucket": 2**20}}, "up", "more buckets: more latency-bound calls"),
        "ParallelSpec.overlap_grad_reduce": step({}, {"parallel": {"overlap_grad_reduce": False}}, "up"),
        "ParallelSpec.schedule": step({"parallel": {"pp": 2, "global_batch": 64}},
                                      {"parallel": {"pp": 2, "global_batch": 64, "schedule": "interleaved-1f1b"}}, "down",
                                      "interleaving shrinks the pipeline bubble"),
        "ParallelSpec.virtual_stages": step({"parallel": {"pp": 2, "global_batch": 64, "schedule": "interleaved-1f1b"}},
                                            {"parallel": {"pp": 2, "global_batch": 64, "schedule": "interleaved-1f1b",
                                                          "virtual_stages": 4}}, "down"),
        "ParallelSpec.allow_tp_across_servers": Refused(
            lambda: h.step_s({"workload": {"parallel": {"tp": 16}}}), "tp"),
        "ComputeSpec.gpu": step({}, {"compute": {"gpu": "A100"}}, "up"),
        "ComputeSpec.peak_flops": step({}, {"compute": {"peak_flops": 400e12}}, "up"),
        "ComputeSpec.efficiency": step({}, {"compute": {"efficiency": 0.25}}, "up"),
        "ComputeSpec.memory": Refused(lambda: h.step_s({"workload": {"compute": {"memory": "16GiB"}}}),
                                      "GiB per GPU but the GPU has 16.0 GiB"),
        "ComputeSpec.hbm_bandwidth": serve({}, {"compute": {"hbm_bandwidth": "1TB/s"}}, "up"),
        "ComputeSpec.jitter_cv": step({}, {"compute": {"jitter_cv": 0.3}}, "up", "the slowest rank sets the step"),
        "ComputeSpec.slow_gpus": step({}, {"compute": {"slow_gpus": [{"rank": 3, "factor": 2.0}]}}, "up"),
        "ComputeSpec.seed": Effect(h.step_s, {"overrides": {"workload": {"compute": {"jitter_cv": 0.3, "seed": 0}}}},
                                   {"overrides": {"workload": {"compute": {"jitter_cv": 0.3, "seed": 7}}}}, "differs"),
        "SlowGpuSpec.rank": Covered("tests/faults/test_faults.py::test_scenario_level_faults"),  # which GPU is slow
        "SlowGpuSpec.factor": step({}, {"compute": {"slow_gpus": [{"rank": 0, "factor": 3.0}]}}, "up"),
        "DataSpec.dataset_read_per_gpu": step_on(STORAGE, {}, {"data": {"dataset_read_per_gpu": "20GB/s"}}, "up"),
        "DataSpec.loader_samples_per_s_per_server": step({}, {"data": {"loader_samples_per_s_per_server": 1}}, "up"),
        "DataSpec.loader_samples_per_s_by_server": step({}, {"data": {"loader_samples_per_s_by_server": {"s0": 1}}}, "up"),
        "DataSpec.checkpoint_size": step_on(STORAGE, {"data": {"checkpoint_interval_steps": 1}},
                                            {"data": {"checkpoint_interval_steps": 1, "checkpoint_size": "10TB"}}, "up"),
        "DataSpec.checkpoint_interval_steps": step_on(STORAGE, {}, {"data": {"checkpoint_interval_steps": 1}}, "up"),
        "InferenceSpec.batch": serve({}, {"inference": {"batch": 32}}, "up"),
        "InferenceSpec.prompt_tokens": serve({}, {"inference": {"prompt_tokens": 4096}}, "up"),
        "InferenceSpec.output_tokens": serve({}, {"inference": {"output_tokens": 512}}, "up"),
        "InferenceSpec.tp": serve({}, {"inference": {"tp": 2}}, "up"),
        "InferenceSpec.pp": serve({"inference": {"tp": 4}}, {"inference": {"tp": 4, "pp": 2}}, "up"),
        "InferenceSpec.engine": serve({}, {"inference": {"engine": "vllm"}}, "up"),
        "InferenceSpec.decode_layer_overhead": serve({}, {"inference": {"decode_layer_overhead": 100e-6}}, "up"),
        "InferenceSpec.decode_step_overhead": serve({}, {"inference": {"decode_step_overhead": 1e-3}}, "up"),
        "InferenceSpec.allow_tp_across_servers": Refused(lambda: h.serve_s({"workload": {"inference": {"tp": 16}}}),
                                                         "tp"),
        # ---------------------------------------------------------------- faults (kind/target/params per kind)
        **_fault_fields(),
        "LinkDegradeParams.factor": fault("link-degrade:s0.nic0->leaf0:factor=0.5",
                                          "link-degrade:s0.nic0->leaf0:factor=0.05", "up"),
        "LinkFlapParams.down_fraction": fault("link-flap:s0.nic0->leaf0:down_fraction=0.1",
                                              "link-flap:s0.nic0->leaf0:down_fraction=0.9", "up"),
        "LinkFlapParams.period_s": Label("the flap's cycle: the flow engine charges the time-average "
                                         "(1 - down_fraction) of the speed, so the period cannot move its result"),
        "LinkLossParams.loss_rate": fault("link-loss:s0.nic0->leaf0:loss_rate=1e-5",
                                          "link-loss:s0.nic0->leaf0:loss_rate=1e-2", "up"),
        "SlowGpuParams.factor": fault("slow-gpu:s0.gpu1:factor=1.1", "slow-gpu:s0.gpu1:factor=3", "up"),
        "GpuThrottleParams.clock_fraction": fault("gpu-throttle:s0.gpu1:clock_fraction=0.9",
                                                  "gpu-throttle:s0.gpu1:clock_fraction=0.3", "up"),
        "GpuThrottleParams.reasons": Covered(
            "tests/faults/test_gpu_faults.py::test_throttled_gpu_computes_at_its_clock_share_and_reports_why"),
        "PcieDowntrainedParams.lanes": fault("pcie-downtrained:s0.gpu1:lanes=16", "pcie-downtrained:s0.gpu1:lanes=1", "up"),
        "PcieDowntrainedParams.generation": fault("pcie-downtrained:s0.gpu1:generation=6",
                                                  "pcie-downtrained:s0.gpu1:generation=1", "up"),
        "StorageContentionParams.read_rate_per_gpu_Bps": fault("storage-contention:all:read_rate_per_gpu_Bps=1e8",
                                                               "storage-contention:all:read_rate_per_gpu_Bps=2e10",
                                                               "up"),
        "DataloaderStarvationParams.samples_per_s_per_server": fault(
            "dataloader-starvation:all:samples_per_s_per_server=1000",
            "dataloader-starvation:all:samples_per_s_per_server=1", "up"),
        "NoisyNeighborParams.load_fraction": fault("noisy-neighbor:s0.nic0->leaf0:load_fraction=0.1",
                                                   "noisy-neighbor:s0.nic0->leaf0:load_fraction=0.9", "up"),
        # ---------------------------------------------------------------- packet engine
        "PacketParams.flow_control": packet(PFC, LOSSY, "drops", "up"),
        "PacketParams.congestion_control": packet({"dcqcn": FAST_DCQCN}, {"dcqcn": FAST_DCQCN, **PFC}, "pause_frames",
                                                  "up"),
        "PacketParams.ecn": packet({"dcqcn": FAST_DCQCN}, {"dcqcn": FAST_DCQCN, "ecn": False}, "cnp", "down"),
        "PacketParams.switch_buffer_bytes": packet(LOSSY, {**LOSSY, "switch_buffer_bytes": 8 * 2**20}, "drops", "down"),
        "PacketParams.buffer_alpha": packet(LOSSY, {**LOSSY, "buffer_alpha": 8.0}, "drops", "differs"),
        "PacketParams.ecn_kmin_bytes": packet({"dcqcn": FAST_DCQCN, "ecn_kmax_bytes": 400e3},
                                              {"dcqcn": FAST_DCQCN, "ecn_kmin_bytes": 5e3, "ecn_kmax_bytes": 400e3},
                                              "queue_bytes", "down"),
        "PacketParams.ecn_kmax_bytes": packet({"dcqcn": FAST_DCQCN}, {"dcqcn": FAST_DCQCN, "ecn_kmin_bytes": 5e3,
                                                                      "ecn_kmax_bytes": 10e3}, "queue_bytes", "down"),
        "PacketParams.ecn_pmax": packet({"dcqcn": FAST_DCQCN, "ecn_pmax": 0.01}, {"dcqcn": FAST_DCQCN, "ecn_pmax": 1.0},
                                        "queue_bytes", "down"),
        "PacketParams.pfc_xoff_bytes": packet(PFC, {**PFC, "pfc_xoff_bytes": 20e3, "pfc_xon_bytes": 10e3},
                                              "pause_frames", "differs"),
        "PacketParams.pfc_xon_bytes": packet({**PFC, "pfc_xoff_bytes": 60e3, "pfc_xon_bytes": 50e3},
                                             {**PFC, "pfc_xoff_bytes": 60e3, "pfc_xon_bytes": 5e3}, "paused_s", "up"),
        "PacketParams.pfc_dynamic_alpha": packet(PFC, {**PFC, "pfc_dynamic_alpha": 1.0}, "pause_frames", "down"),
        "PacketParams.pfc_xon_offset_bytes": packet(PFC, {**PFC, "pfc_xon_offset_bytes": 60e3}, "paused_s", "up"),
        "PacketParams.pfc_headroom_bytes": packet(PFC, {**PFC, "pfc_headroom_bytes": 100e3}, "queue_bytes", "down"),
        "PacketParams.cable_length_m": packet(PFC, {**PFC, "cable_length_m": 300.0}, "pause_frames", "differs"),
        "PacketParams.pause_quanta": packet(PFC, {**PFC, "pause_quanta": 512}, "pause_frames", "up"),
        "PacketParams.credit_buffer_bytes": packet({}, {"credit_buffer_bytes": 20e3}, "xmit_wait_s", "differs",
                                                   transport="infiniband"),
        "PacketParams.dcqcn": Section(),
        "PacketParams.loss_rate": packet(LOSSY, LOSS, "retransmitted", "up"),
        "PacketParams.retransmit_timeout_s": packet(LOSS, {**LOSS, "retransmit_timeout_s": 1e-3}, "makespan_s", "differs"),
        "PacketParams.ack_every_packets": packet(LOSS, {**LOSS, "ack_every_packets": 256}, "makespan_s", "up"),
        "PacketParams.host_queue_packets": packet(PFC, {**PFC, "host_queue_packets": 64}, "queue_bytes", "up"),
        "PacketParams.data_priority": packet(PFC, {**PFC, "data_priority": 5}, "pause_priority", "up"),
        "PacketParams.queue_sample_interval_s": packet({}, {"queue_sample_interval_s": 50e-6}, "queue_samples", "down"),
        "PacketParams.max_time_s": Refused(lambda: h.packet_metric({"max_time_s": 1e-4}, "makespan_s"), "max_time_s"),
        "PacketParams.max_packets": Refused(lambda: h.packet_metric({"max_packets": 10}, "makespan_s"), "packets"),
        "PacketParams.max_memory_bytes": Refused(lambda: h.packet_metric({"max_memory_bytes": 1000}, "makespan_s"),
                                                 "memory"),
        "DcqcnSettings.g": dcqcn({"g": 0.5}),
        "DcqcnSettings.alpha_resume_interval_s": packet({"dcqcn": FAST_DCQCN},
                                                        {"dcqcn": {**FAST_DCQCN, "alpha_resume_interval_s": 1e-3}},
                                                        "queue_bytes", "differs"),
        "DcqcnSettings.rate_decrease_interval_s": dcqcn({"rate_decrease_interval_s": 1e-3}),
        "DcqcnSettings.rp_timer_s": dcqcn({"rp_timer_s": 1e-3}),
        "DcqcnSettings.byte_counter_bytes": dcqcn({"byte_counter_bytes": 1e4}),
        "DcqcnSettings.fast_recovery_steps": dcqcn({"fast_recovery_steps": 1}),
        "DcqcnSettings.rate_ai_bps_per_25gbps": dcqcn({"rate_ai_bps_per_25gbps": 1e9}),
        "DcqcnSettings.rate_hai_bps_per_25gbps": Effect(
            h.packet_recovery_makespan_s, {"dcqcn": RECOVERY_DCQCN},
            {"dcqcn": {**RECOVERY_DCQCN, "rate_hai_bps_per_25gbps": 1e9}}, "down",
            "a faster hyper increase brings a deeply cut flow back to line rate sooner once its competitors end"),
        "DcqcnSettings.min_rate_bps": dcqcn({"min_rate_bps": 50e9}),
        "DcqcnSettings.clamp_target_rate": Effect(
            h.packet_metric, {"params": DEFAULT_BUFFER, "metric": "makespan_s"},
            {"params": {**DEFAULT_BUFFER, "dcqcn": {"clamp_target_rate": True}}, "metric": "makespan_s"}, "up",
            "clamping the target at every cut of a burst leaves the incast's senders far below their share "
            "(the default buffer: the queue reaches ECN's thresholds before PFC pauses it)"),
        "DcqcnSettings.cnp_interval_s": Effect(h.packet_metric, {"params": {"dcqcn": FAST_DCQCN}, "metric": "cnp",
                                                                 "size_bytes": 20e6},
                                               {"params": {"dcqcn": {**FAST_DCQCN, "cnp_interval_s": 1e-3}},
                                                "metric": "cnp", "size_bytes": 20e6}, "down"),
        "StorageSlowParams.throughput_fraction": Effect(
            h.step_s, {"overrides": STORAGE_READ, "inject": ("storage-slow:all:throughput_fraction=0.9",)},
            {"overrides": STORAGE_READ, "inject": ("storage-slow:all:throughput_fraction=0.01",)}, "up"),
        "NoParams": Label("kinds without parameters"),
    }


def _layout_fields() -> dict[str, object]:
    """Compute overrides, pipeline splits, layouts and overlap switches."""
    return {
        "ComputeSpec.gemm_efficiency": Covered("tests/workload/test_compute.py::test_overrides_per_op_class"),
        "ComputeSpec.attention_efficiency": step({}, {"compute": {"attention_efficiency": 0.1}}, "up",
                                                 "flash attention at a tenth of the bf16 peak"),
        "ComputeSpec.hbm_efficiency": step({}, {"compute": {"hbm_efficiency": 0.2}}, "up",
                                           "element-wise kernels at a fifth of the HBM bandwidth"),
        "ComputeSpec.layer_forward_time": Covered("tests/workload/test_compute.py::test_measured_layer_times_replace_the_model"),
        "ComputeSpec.layer_backward_time": Covered(
            "tests/workload/test_compute.py::test_measured_layer_times_replace_the_model"),
        "ParallelSpec.recompute": Covered("tests/workload/test_compute.py::test_full_recompute_costs_a_third_more_compute"),
        "ParallelSpec.first_stage_layers": step(PP2, h.merge(PP2, {"parallel": {"first_stage_layers": 20}}), "up",
                                                "20 of 32 layers on the first stage: the slowest stage is slower"),
        "ParallelSpec.last_stage_layers": step(PP2, h.merge(PP2, {"parallel": {"last_stage_layers": 20}}), "up",
                                               "20 of 32 layers on the last stage, beside the LM head"),
        "ParallelSpec.account_for_embedding": step(
            h.merge(PP2_ODD, {"parallel": {"account_for_loss": True}}),
            h.merge(PP2_ODD, {"parallel": {"account_for_embedding": True}}), "up",
            "the layer the embedding stands for comes off the first stage, so the last (LM head) stage keeps 16"),
        "ParallelSpec.account_for_loss": step(
            h.merge(PP2_ODD, {"parallel": {"account_for_embedding": True}}),
            h.merge(PP2_ODD, {"parallel": {"account_for_loss": True}}), "down",
            "the LM head's stage holds one layer fewer (15 vs 16)"),
        "ParallelSpec.cp": Covered(
            "tests/workload/test_layouts.py::test_context_parallel_splits_the_sequence_and_its_activations"),
        "ParallelSpec.rank_order": step({"parallel": {"tp": 2}}, {"parallel": {"tp": 2, "rank_order": "dp-tp-pp"}}, "up",
                                        "TP pairs 8 ranks apart: on two servers, over the network"),
        "ParallelSpec.placement": Covered("tests/workload/test_layouts.py::test_a_job_across_two_pods_reduces_gradients_slower"),
        "ParallelSpec.tp_comm_overlap": Covered("tests/workload/test_layouts.py::test_tp_comm_overlap_shortens_the_step"),
        "ParallelSpec.prefetch_depth": Covered("tests/workload/test_overlap.py::test_zero3_prefetch_hides_gathers"),
        "ParallelSpec.overlap_p2p_comm": Covered("tests/workload/test_overlap.py::test_p2p_overlap_shortens_a_pipeline_step"),
        "ParallelSpec.ep_comm_overlap": Covered("tests/workload/test_overlap.py::test_ep_all_to_all_overlap_hides_dispatch"),
        "ParallelSpec.fp8_param_gather": Covered("tests/workload/test_fp8_params.py::test_dense_gather_is_one_byte_per_matrix_weight"),
        "ParallelSpec.grad_reduce_in_fp32": Covered("tests/workload/test_grad_fp32.py::test_reduce_scatter_moves_four_bytes_per_parameter"),
        "ParallelSpec.microbatch_group_size_per_vp_stage": Covered(
            "tests/workload/test_schedule.py::test_microbatch_group_size_checks"),
        "CalibrationSpec.net_step_cycle": perf({}, {"calibration": {"net_step_cycle": "20us"}}, "up",
                                               "every network step waits a 20 us proxy pass", size=2**26),
    }


def _jobs_fields() -> dict[str, object]:
    """Several jobs on one fabric and their placement policies."""
    return {
        "Scenario.jobs": Covered(
            "tests/runner/test_jobs.py::test_co_located_jobs_slow_the_communication_heavier_one_by_5_to_20_percent"),
        "JobSpec.name": Label("names the job in the output; a name given twice is refused "
                              "(tests/runner/test_jobs.py::test_bad_jobs_are_one_clear_error)"),
        "JobSpec.arrival": jobs([{}, {}], [{}, {"arrival": 10.0}], "down",
                                "b arrives after a's two steps: a runs alone, its uplinks unshared"),
        "JobSpec.gpus": jobs([{"servers": None, "gpus": 8, "placement": [0]}, {}],
                             [{"servers": None, "gpus": 16}, {}], "down", "16 GPUs share the batch of 32",
                             metric="alone_step_s"),
        "JobSpec.servers": jobs([{"servers": 1, "placement": [0]}, {}], [{}, {}], "down",
                                "2 servers share the batch of 32", metric="alone_step_s"),
        "JobSpec.priority": Covered("tests/runner/test_jobs.py::test_policies_place_the_jobs_in_priority_order"),
        "JobSpec.placement": Covered("tests/runner/test_jobs.py::test_fragmented_across_racks_is_slower_than_packed_on_ecmp"),
        "JobSpec.workload": Section("a scenario's workload: its fields are audited under WorkloadSpec"),
        "PlacementSpec.policy": Covered("tests/placement/test_policies.py::test_topology_unaware_baselines_span_more_leaves"),
        "PlacementSpec.servers": Covered(
            "tests/runner/test_jobs.py::test_fragmented_across_racks_is_slower_than_packed_on_ecmp"),
        "PlacementSpec.seed": placed({"policy": "random"}, {"policy": "random", "seed": 3}, "differs",
                                     "another random draw of servers", metric="which"),
        "PlacementSpec.switches": Covered("tests/placement/test_policies.py::test_slurm_tree_lowest_switch_then_best_fit_leaves"),
        "PlacementSpec.block_size": placed({"policy": "slurm-block"}, {"policy": "slurm-block", "block_size": 8}, "up",
                                           "a base block of two leaves: a 3-server job may straddle them", servers=3),
        "PlacementSpec.segment": Covered("tests/placement/test_policies.py::test_slurm_block_lowest_aggregate_and_segments"),
        "PlacementSpec.mode": Covered("tests/placement/test_policies.py::test_kueue_required_balanced_and_least_free"),
        "PlacementSpec.level": Covered("tests/placement/test_policies.py::test_volcano_hard_mode_caps_the_tier"),
        "PlacementSpec.algorithm": Covered("tests/placement/test_policies.py::test_kueue_required_balanced_and_least_free"),
        "PlacementSpec.ranks": Covered("tests/placement/test_mincut.py::test_placement_ranks_mincut_reorders_an_explicit_placement"),
    }


def _inventory_fields() -> dict[str, object]:
    """An imported cluster's real names and cables: names are checked by resolving them."""
    extra_uplink = {"a": "leaf2", "b": "spine1"}
    return {
        "ClusterSpec.inventory": Covered("tests/inventory/test_names.py::test_cli_import_then_every_command_reads_the_file"),
        "InventorySpec.hosts": Covered("tests/inventory/test_names.py::test_fault_targets_take_host_names"),
        "InventorySpec.nics": Covered("tests/inventory/test_names.py::test_real_names_are_node_names"),
        "InventorySpec.switches": Effect(h.topo_count, {"cluster": h.inventory_cluster({}), "what": "switches"},
                                         {"cluster": h.inventory_cluster({"switches": [*INV_SWITCHES, {
                                             "name": "spine2", "tier": 2}]}), "what": "switches"}, "up"),
        "InventorySpec.cables": Effect(h.inventory_capacity_Bps, {"inventory": {}, "fragment": "leaf1->"},
                                       {"inventory": {"cables": [*INV_CABLES, LEAF_UPLINK]}, "fragment": "leaf1->"},
                                       "up", "a second leaf1 uplink"),
        "InventorySpec.aliases": resolves({"aliases": {"ib-leaf-a": "leaf1"}}, "ib-leaf-a"),
        "InventorySpec.sources": Label("the files the inventory was imported from, for the record; the model never reads it"),
        "InventorySwitch.name": Covered("tests/inventory/test_names.py::test_real_names_are_node_names"),
        "InventorySwitch.tier": Effect(h.inventory_pods, {"inventory": {}},
                                       {"inventory": {"switches": [INV_SWITCHES[0], {"name": "leaf2", "tier": 2},
                                                                   INV_SWITCHES[2]]}}, "up",
                                       "a host under a tier-2 switch is in a pod of its own for placement"),
        "InventorySwitch.guid": resolves({"switches": [{**INV_SWITCHES[0], "guid": "0x1234"}, *INV_SWITCHES[1:]]},
                                         "0x1234"),
        "InventorySwitch.lid": resolves({"switches": [{**INV_SWITCHES[0], "lid": 7}, *INV_SWITCHES[1:]]}, "lid7"),
        "InventoryCable.a": Effect(h.inventory_capacity_Bps,
                                   {"inventory": {"cables": [*INV_CABLES, extra_uplink]}, "fragment": "leaf1->"},
                                   {"inventory": {"cables": [*INV_CABLES, LEAF_UPLINK]}, "fragment": "leaf1->"}, "up",
                                   "the fifth cable leaves leaf1 instead of leaf2"),
        "InventoryCable.b": Effect(h.inventory_hops, {"inventory": {}},
                                   {"inventory": {"cables": [INV_CABLES[0], {"a": "n2.mlx5_0", "b": "leaf1"},
                                                             *INV_CABLES[2:]]}}, "down",
                                   "both hosts on leaf1: no spine on the route"),
        "InventoryCable.a_port": resolves({"cables": [*INV_CABLES[:2], {**LEAF_UPLINK, "a_port": 17}, INV_CABLES[3]]},
                                          "leaf1[17]"),
        "InventoryCable.b_port": resolves({"cables": [*INV_CABLES[:2], {**LEAF_UPLINK, "b_port": 5}, INV_CABLES[3]]},
                                          "spine1[5]"),
        "InventoryCable.speed": Effect(h.inventory_capacity_Bps, {"inventory": {}, "fragment": "n1"},
                                       {"inventory": {"cables": [{**INV_CABLES[0], "speed": "100Gbps"}, *INV_CABLES[1:]]},
                                        "fragment": "n1"}, "down"),
    }


_FAULT_MODELS = ("DataloaderStarvationFault", "EcmpPolarizationFault", "LinkDegradeFault", "LinkFlapFault",
                 "LinkLossFault", "NicAffinityFault", "NicDownFault", "NoGdrFault", "NoisyNeighborFault",
                 "SlowGpuFault", "StorageContentionFault", "StorageSlowFault", "TcpFallbackFault", "GpuThrottleFault",
                 "PcieDowntrainedFault")


def _fault_fields() -> dict[str, object]:
    out: dict[str, object] = {}
    for model in _FAULT_MODELS:
        out[f"{model}.kind"] = Covered("tests/diagnosis/test_accuracy.py::test_the_suite_covers_every_kind_on_several_fabrics")
        out[f"{model}.target"] = Covered("tests/faults/test_faults.py::test_a_target_the_kind_cannot_use_is_refused")
        out[f"{model}.params"] = Section("each kind's parameters are audited below")
    return out


def _env_entries() -> dict[str, object]:

    return {
        "env:NCCL_ALGO": env((), ("NCCL_ALGO=Tree",), "up", size=2**30),
        "env:NCCL_PROTO": env((), ("NCCL_PROTO=LL",), "up", size=2**26),
        "env:NCCL_MIN_NCHANNELS": env(("NCCL_ALGO=Ring",), ("NCCL_ALGO=Ring", "NCCL_MIN_NCHANNELS=32"), "differs",
                                      size=2**22),
        "env:NCCL_MAX_NCHANNELS": env(("NCCL_ALGO=Ring",), ("NCCL_ALGO=Ring", "NCCL_MAX_NCHANNELS=2"), "up",
                                      cluster=ONE),
        "env:NCCL_MIN_CTAS": Covered("tests/fabric/test_qps_owner.py::test_min_ctas_raise_the_channels_nccl_runs"),
        "env:NCCL_MAX_CTAS": env((), ("NCCL_MAX_CTAS=2",), "up", cluster=ONE),
        "env:NCCL_NVLS_NCHANNELS": env((), ("NCCL_NVLS_NCHANNELS=8",), "up", cluster=ONE),
        "env:NCCL_IB_QPS_PER_CONNECTION": Covered(
            "tests/fabric/test_qps_owner.py::test_perf_uses_the_cluster_files_qps_unless_the_nccl_env_sets_them"),
        "env:NCCL_IB_SPLIT_DATA_ON_QPS": Refused(lambda: parse_env({"NCCL_IB_SPLIT_DATA_ON_QPS": "1"}),
                                                 "only NCCL's default 0 is modelled"),
        "env:NCCL_NET_GDR_LEVEL": Covered(L40S_GDR),
        "env:NCCL_IB_GDR_LEVEL": Covered("tests/collectives/test_ncclenv.py::test_legacy_gdr_forms_and_alias"),
        "env:NCCL_NET_GDR_READ": Covered(L40S_GDR),
        "env:NCCL_IB_DISABLE": env((), ("NCCL_IB_DISABLE=1",), "up"),
        "env:NCCL_NET": env((), ("NCCL_NET=Socket",), "up"),
        "env:NCCL_IBEXT_DISABLE": Covered(
            "tests/transport/test_socket.py::test_the_l40s_ib_disable_table_floor_is_an_rdma_floor"),
        "env:NCCL_NVLS_ENABLE": env((), ("NCCL_NVLS_ENABLE=0",), "up", cluster=ONE),
        "env:NCCL_MNNVL_ENABLE": env((), ("NCCL_MNNVL_ENABLE=0",), "up", cluster=NVL72),
        "env:NCCL_COLLNET_ENABLE": Refused(lambda: parse_env({"NCCL_COLLNET_ENABLE": "1"}),
                                           "CollNet (SHARP in-network reduction) is not modelled"),
        "env:NCCL_P2P_DISABLE": env((), ("NCCL_P2P_DISABLE=1",), "up", cluster=ONE),
        "env:NCCL_SHM_DISABLE": Refused(lambda: parse_env({"NCCL_SHM_DISABLE": "1"}), "SHM transport is not modelled"),
        "env:NCCL_PXN_DISABLE": Refused(lambda: parse_env({"NCCL_PXN_DISABLE": "1"}), "PXN"),
        "env:NCCL_SOCKET_NTHREADS": Covered("tests/transport/test_socket.py::test_socket_profile_from_env_and_platform"),
        "env:NCCL_NSOCKS_PERTHREAD": Covered("tests/transport/test_socket.py::test_socket_profile_from_env_and_platform"),
        "env:NCCL_NET_OVERHEAD": env(("NCCL_ALGO=Ring",), ("NCCL_ALGO=Ring", "NCCL_NET_OVERHEAD=100000"), "up",
                                     size=SMALL),
        "env:NCCL_P2P_LEVEL": env((), ("NCCL_P2P_LEVEL=LOC",), "up", cluster=ONE),
        "env:UNKNOWN": Refused(lambda: __import__("gpuwait.collectives.ncclenv", fromlist=["x"]).parse_env_pairs(
            ["NCCL_IB_HCA=mlx5_0"]), "NCCL_IB_HCA is not modelled"),
    }


#: every audited setting -> its entry
REGISTRY: dict[str, object] = {**_schema_fields(), **_layout_fields(), **_jobs_fields(), **_inventory_fields(),
                               **_env_entries()}
