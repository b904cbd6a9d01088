"""storage-contention stands aside for storage-slow only when a storage server's backend is seen busy
(node_exporter's disk busy time): then the storage tier alone holds the reads back. With storage ports
full and the GPUs waiting, the reads' paths over the compute fabric may hold them back too, and both
rules propose: the fixes' measured gains decide.

With reads on the GPUs that read data (a 3D job's TP rank 0 of its first and last stage), a few large
flows fill the storage ports and the readers' NICs at once: the accuracy suite's roce-ecmp/3d-8b case
filled 3 of 4 ports, one at 67 %, and a separate storage network gave back 29 % of the step, more
storage servers 12 %; dev seed 30,000,224 filled all 4, and a separate network gave back 2.4 % while
more servers made the step 38 % longer (more reads delivered into the readers' NICs). Before, any full
port silenced storage-contention and both were named storage-slow at info.
"""

from __future__ import annotations

import numpy as np

from gpuwait.diagnosis.observe import Observation
from gpuwait.diagnosis.rules import RULES, RuleOutput
from gpuwait.spec import ClusterSpec
from gpuwait.topology.presets import build_cluster

TOPO = build_cluster(ClusterSpec.model_validate({
    "servers": 4, "server": {"gpus": 4, "nics": 4, "nic_speed": "100Gbps", "pcie_switches": 2, "cpus": 2},
    "fabric": {"tiers": 2, "switch_radix": 8}, "storage": {"mode": "converged", "storage_servers": 4}}))
N = TOPO.gpu_node.size
RATE = TOPO.link_capacity_Bps.astype(float)
PORTS = np.flatnonzero(np.isin(TOPO.link_src, TOPO.storage_server_node))


def _kinds(port_share: list[float], busy: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """Each storage rule's candidates on a 1 s step whose GPUs wait 0.2 s for data, the storage servers'
    ports sending ``port_share`` of their rate x the step (one share per server)."""
    sent = np.zeros(TOPO.n_links)
    for node, share in zip(TOPO.storage_server_node, port_share):
        ports = PORTS[TOPO.link_src[PORTS] == node]
        sent[ports] = share * RATE[ports]
    per_gpu = {"compute": np.full(N, 0.8), "straggler_wait": np.zeros(N), "data_wait": np.full(N, 0.2),
               "exposed_comm": np.zeros(N)}
    obs = Observation(TOPO, step_time_s=1.0, per_gpu_s=per_gpu, storage_read=True, storage_busy=busy,
                      link_bytes=sent, link_rate_Bps=RATE, link_nominal_Bps=RATE,
                      gpu_names=[TOPO.node_name[g] for g in TOPO.gpu_node.ravel()])
    found = {}
    for name in ("storage-contention", "storage-slow"):
        out = RuleOutput()
        RULES[name].check(obs, out)
        found[name] = [c.component for c in out.candidates]
    return found


def test_full_storage_ports_propose_both_causes():
    assert len(TOPO.storage_server_node) == 4 and len(PORTS) >= 4
    both = {"storage-contention": ["all"], "storage-slow": ["storage"]}
    assert _kinds([1.0, 1.0, 0.67, 1.0]) == both
    assert _kinds([1.0, 1.0, 1.0, 1.0]) == both


def test_a_busy_disk_is_the_storage_tier_alone():
    busy = str(TOPO.node_name[TOPO.storage_server_node[2]])
    assert _kinds([0.5, 0.5, 0.5, 0.5], busy=(busy,)) == {"storage-contention": [], "storage-slow": [busy]}


def test_more_storage_servers_for_the_jobs_reads_not_the_clusters_gpus():
    """storage-slow's fix adds servers for the job's total reads: dataset_read_per_gpu x the job's GPUs
    (16 of the cluster's 64 at 20 GB/s: 320 GB/s, 7 servers of 50 GB/s), not x every GPU of the cluster."""
    from gpuwait.diagnosis.rules import _faster_storage
    from gpuwait.spec import Scenario, validate_data

    scenario = validate_data(Scenario, {
        "cluster": {"preset": "dgx-h100", "servers": 8, "storage": {"mode": "converged", "storage_servers": 4,
                                                                     "storage_server_speed": 50e9}},
        "workload": {"gpus": 16, "model": {"preset": "llama-8b"}, "parallel": {"tp": 8},
                     "data": {"dataset_read_per_gpu": 20e9}}}, require_units=False)
    fixed, _ = _faster_storage(scenario, [], "storage")
    assert fixed.cluster.storage.storage_servers == 7
