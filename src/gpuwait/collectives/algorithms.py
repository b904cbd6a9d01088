"""Collective algorithms compiled into phases of concurrent flows.

A phase is a set of flows that run at the same time, repeated ``repeat`` times: a ring
all-reduce over n ranks and C channels is one phase of n*C flows of S/(n*C) bytes each, repeated
2(n-1) times — never 2n(n-1) separate transfers, so a 100k-rank collective stays as cheap as its
largest phase. Algorithms register themselves in :data:`ALGORITHMS`.

Rings follow NCCL's layout: every channel is its own ring; inside a server the ring visits the
GPUs in order starting at a channel-dependent GPU (on a mesh of direct links, in an order that spreads
the channels over every link: :func:`channel_local_orders`), and between servers it is rail-aligned — with
NVLink the last GPU of a server hands its chunk over NVLink to the channel's rail GPU, whose NIC
sends it to the same rail on the next server (PXN); without NVLink the last GPU sends directly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from gpuwait.collectives.communicator import Communicator
from gpuwait.errors import SpecError


@dataclass(frozen=True, eq=False)
class Phase:
    """Concurrent flows (GPU node ids) and how many times the phase repeats back to back.

    ``pair_sets`` are all-to-alls kept whole: ``(gpus, bytes)`` stands for a flow of ``bytes`` from
    every GPU of ``gpus`` to every other one, beside the listed flows, so an all-to-all over n GPUs
    is not n(n-1) array entries until something asks for them (:meth:`expanded`).
    """

    name: str
    src: np.ndarray
    dst: np.ndarray
    bytes_per_flow: np.ndarray
    repeat: int
    pair_sets: tuple[tuple[np.ndarray, float], ...] = ()

    @property
    def n_flows(self) -> int:
        return len(self.src) + sum(len(gpus) * (len(gpus) - 1) for gpus, _ in self.pair_sets)

    @property
    def max_bytes(self) -> float:
        """The largest flow's bytes (0 for none)."""
        listed = float(self.bytes_per_flow.max(initial=0.0))
        return max([listed] + [float(b) for gpus, b in self.pair_sets if len(gpus) > 1])

    def expanded(self) -> Phase:
        """The same phase with every flow of its pair sets listed (n(n-1) entries per set)."""
        if not self.pair_sets:
            return self
        src, dst, size = [self.src], [self.dst], [self.bytes_per_flow]
        for gpus, n_bytes in self.pair_sets:
            a, b = all_pairs(len(gpus))
            src.append(np.asarray(gpus)[a])
            dst.append(np.asarray(gpus)[b])
            size.append(np.full(len(a), float(n_bytes)))
        return Phase(self.name, np.concatenate(src), np.concatenate(dst), np.concatenate(size), self.repeat)


def all_pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Every ordered pair (i, j) of 0..n-1 with i != j, by i then j."""
    a, b = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    keep = a != b
    return a[keep], b[keep]


@dataclass(frozen=True, eq=False)
class Plan:
    """A collective compiled for one communicator, size, algorithm and channel count."""

    collective: str
    algorithm: str
    n_bytes: float
    n_channels: int
    phases: tuple[Phase, ...]


COLLECTIVE_NAMES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "alltoall", "sendrecv")
ALGORITHMS: dict[str, Callable[..., tuple[Phase, ...]]] = {}
SUPPORTS: dict[str, tuple[str, ...]] = {}


def register_algorithm(name: str, collectives: tuple[str, ...]):
    """Decorator: ``fn(comm, collective, n_bytes, n_channels, root) -> tuple[Phase, ...]``."""

    def wrap(fn):
        ALGORITHMS[name] = fn
        SUPPORTS[name] = collectives
        return fn

    return wrap


def _has_nvlink(comm: Communicator) -> bool:
    return comm.topo.spec.server.nvlink_bandwidth > 0 and comm.topo.gpus_per_server > 1


def channel_local_orders(comm: Communicator, n_channels: int) -> np.ndarray:
    """(C, ppn) the order in which channel c's ring (or tree chain) visits a node's GPUs, as local GPU indices.

    Every order starts at local GPU c mod ppn, the channel's rail GPU. Behind an NVSwitch (or NVLink bridges
    between pairs) every order is the next GPU in index order, rotated. Where the server's GPUs are a mesh of
    direct links (``nvlink_topology: mesh``, GH200 quads) one order would load the same ppn links with every
    channel and leave the others idle; NCCL's graph search instead places each channel on links that still
    have bandwidth (ncclTopoCompute / ncclTopoSearchRec, src/graph/search.cc), so channel c takes, from each
    GPU, the unvisited GPU whose link the channels before it used least (lowest index offset on a tie: the
    first channel is the plain order).

    >>> from gpuwait.topology import build_preset
    >>> from gpuwait.collectives.communicator import Communicator
    >>> channel_local_orders(Communicator.world(build_preset("dgx-h100", servers=1)), 2).tolist()
    [[0, 1, 2, 3, 4, 5, 6, 7], [1, 2, 3, 4, 5, 6, 7, 0]]
    >>> from gpuwait.spec import ClusterSpec
    >>> from gpuwait.topology import build_topology
    >>> quad = build_topology(ClusterSpec(servers=1, server={"template": "gh200-quad"}, fabric={"kind": "clos"}))
    >>> channel_local_orders(Communicator.world(quad), 6).tolist()  # each of the 12 links in two rings
    [[0, 1, 2, 3], [1, 3, 2, 0], [2, 1, 0, 3], [3, 1, 2, 0], [0, 2, 3, 1], [1, 3, 0, 2]]
    """
    ppn = comm.ppn
    rotated = (np.arange(n_channels)[:, None] + np.arange(ppn)[None, :]) % ppn
    if comm.topo.spec.server.nvlink_topology != "mesh" or ppn < 3 or comm.spans_servers:
        return rotated
    closed = comm.n_nodes == 1  # one node: the ring's last hop comes back over a link of the mesh
    used = np.zeros((ppn, ppn), np.int64)
    orders = np.empty((n_channels, ppn), np.int64)
    for c in range(n_channels):
        order = [c % ppn]
        left = set(range(ppn)) - {order[0]}
        while left:
            here = order[-1]
            nxt = min(left, key=lambda g: (used[here, g], (g - here) % ppn))
            used[here, nxt] += 1
            order.append(nxt)
            left.discard(nxt)
        if closed:
            used[order[-1], order[0]] += 1
        orders[c] = order
    return orders


def ring_orders(comm: Communicator, n_channels: int) -> np.ndarray:
    """(C, n) rank order of each channel's ring (see the module docstring)."""
    per_node = comm.node_ranks[:, np.argsort(comm.local_gpu_index(comm.node_ranks[0]))]  # by local GPU index
    return np.array([per_node[:, order].ravel() for order in channel_local_orders(comm, n_channels)])


def ring_edges(comm: Communicator, n_channels: int) -> tuple[np.ndarray, np.ndarray]:
    """(src GPU, dst GPU) of every hop of every channel's ring, inter-server hops made rail-aligned."""
    orders = ring_orders(comm, n_channels)
    src_rank = orders.ravel()
    dst_rank = np.roll(orders, -1, axis=1).ravel()
    src, dst = comm.rank_gpu[src_rank], comm.rank_gpu[dst_rank]
    crossing = comm.rank_node[src_rank] != comm.rank_node[dst_rank]
    if crossing.any() and _has_nvlink(comm) and comm.ppn > 1:
        # PXN: the chunk moves over NVLink to the GPU on the receiver's rail, whose NIC sends it
        topo = comm.topo
        dst_local = dst - topo.gpu_node[topo.node_server[dst], 0]
        proxy = topo.gpu_node[topo.node_server[src], dst_local]
        hop = crossing & (proxy != src)
        extra_src, extra_dst = src[hop], proxy[hop]
        src = np.where(crossing, proxy, src)
        return np.r_[src, extra_src], np.r_[dst, extra_dst]
    return src, dst


def _ring_steps(collective: str, n: int) -> tuple[int, float]:
    """(steps, bytes per step as a fraction of S) of a ring collective over n ranks."""
    if collective == "all_reduce":
        return 2 * (n - 1), 1.0 / n
    if collective in ("all_gather", "reduce_scatter"):
        return n - 1, 1.0 / n
    raise SpecError(f"ring: {collective} is not a ring collective")


@register_algorithm("ring", ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce"))
def ring(comm: Communicator, collective: str, n_bytes: float, n_channels: int, root: int = 0) -> tuple[Phase, ...]:
    """Ring algorithms. AR/AG/RS: one phase of every ring hop, repeated per step. Broadcast and
    reduce: a pipelined chain from (or to) the root, every hop carrying the whole buffer once."""
    n = comm.n_ranks
    if n == 1:
        return ()
    src, dst = ring_edges(comm, n_channels)
    if collective in ("broadcast", "reduce"):
        # the chain is the ring without the hop into the root (broadcast) or out of it (reduce)
        root_gpu = comm.rank_gpu[root]
        keep = dst != root_gpu if collective == "broadcast" else src != root_gpu
        src, dst = src[keep], dst[keep]
        return (Phase(f"{collective}-chain", src, dst, np.full(len(src), n_bytes / n_channels), 1),)
    steps, fraction = _ring_steps(collective, n)
    return (Phase(f"{collective}-ring", src, dst, np.full(len(src), n_bytes * fraction / n_channels), steps),)


def double_binary_trees(n_nodes: int) -> list[np.ndarray]:
    """Parent node index of every node in NCCL's two binary trees (-1 at the root).

    Tree 0 is a binary tree in heap order; tree 1 mirrors it (n even) or shifts it by one (n odd),
    so that a node that is interior in one tree is a leaf in the other.

    >>> [t.tolist() for t in double_binary_trees(4)]
    [[-1, 0, 0, 1], [2, 3, 3, -1]]
    """
    heap_parent = np.array([-1] + [(i - 1) // 2 for i in range(1, n_nodes)])
    relabel = (n_nodes - 1 - np.arange(n_nodes)) if n_nodes % 2 == 0 else (np.arange(n_nodes) + 1) % n_nodes
    second = np.full(n_nodes, -1)
    has_parent = heap_parent >= 0
    second[relabel[has_parent]] = relabel[heap_parent[has_parent]]
    return [heap_parent, second]


@register_algorithm("tree", ("all_reduce",))
def tree(comm: Communicator, collective: str, n_bytes: float, n_channels: int, root: int = 0) -> tuple[Phase, ...]:
    """NCCL's tree all-reduce: a double binary tree across servers, a chain inside each server.

    Each tree carries half the buffer (split over channels); reduce (up) and broadcast (down) are
    pipelined, so every tree and chain edge carries its half once in each direction, concurrently.
    Channel c's tree crosses servers through GPU c mod ppn (its rail).
    """
    if comm.n_ranks == 1:
        return ()
    per_node = comm.node_ranks[:, np.argsort(comm.local_gpu_index(comm.node_ranks[0]))]
    src, dst, size = [], [], []
    trees = double_binary_trees(comm.n_nodes)
    per_tree_channel = n_bytes / 2 / n_channels
    for order in channel_local_orders(comm, n_channels):
        chain = per_node[:, order]  # chain starts at the channel's rail GPU
        heads = chain[:, 0]
        for parent in trees:
            # inside each server: chain links both ways
            a, b = chain[:, :-1].ravel(), chain[:, 1:].ravel()
            child_nodes = np.flatnonzero(parent >= 0)
            up_src, up_dst = heads[child_nodes], heads[parent[child_nodes]]
            for x, y in ((a, b), (b, a), (up_src, up_dst), (up_dst, up_src)):
                src.append(comm.rank_gpu[x])
                dst.append(comm.rank_gpu[y])
                size.append(np.full(len(x), per_tree_channel))
    return (Phase("all_reduce-tree", np.concatenate(src), np.concatenate(dst), np.concatenate(size), 1),)


@register_algorithm("nvls", ("all_reduce", "all_gather", "reduce_scatter"))
def nvls(comm: Communicator, collective: str, n_bytes: float, n_channels: int, root: int = 0) -> tuple[Phase, ...]:
    """NVLink SHARP inside one NVSwitch domain: the switch reduces and multicasts.

    All-reduce = reduce-scatter (each GPU sends its whole buffer to the switch and gets its reduced
    1/ppn shard back) then all-gather (each GPU sends its shard; the switch multicasts every shard to
    every GPU): per GPU S + S/ppn each way, against 2(ppn-1)/ppn x S for a ring.
    """
    topo = comm.topo
    if comm.n_nodes != 1:
        raise SpecError("algorithm: nvls runs inside one NVSwitch domain; expected ranks of one server or NVLink domain",
                        hint="multi-server NVLS (NVLSTree) is not modelled yet")
    if topo.spec.server.nvlink_topology != "nvswitch" or topo.spec.server.nvlink_bandwidth <= 0:
        raise SpecError("algorithm: nvls needs an NVSwitch; this server has none")
    switch = comm.node_nvswitch(int(comm.nodes[0]))
    gpus = comm.rank_gpu
    n = comm.n_ranks
    to_switch = {"all_reduce": n_bytes + n_bytes / n, "reduce_scatter": n_bytes, "all_gather": n_bytes / n}[collective]
    from_switch = {"all_reduce": n_bytes / n + n_bytes, "reduce_scatter": n_bytes / n, "all_gather": n_bytes}[collective]
    src = np.r_[gpus, np.full(n, switch)]
    dst = np.r_[np.full(n, switch), gpus]
    size = np.r_[np.full(n, to_switch), np.full(n, from_switch)]
    return (Phase(f"{collective}-nvls", src, dst, size, 1),)


def _nvls_node_flows(comm: Communicator, gpus: np.ndarray, n_bytes: float) -> tuple[np.ndarray, ...]:
    """NVLS all-reduce inside every node: each GPU sends S + S/ppn to its node's NVSwitch and gets S/ppn + S
    back. ``gpus``: (nodes, ppn), row i the GPUs of ``comm.nodes[i]``. Node after node, each node's GPUs' sends
    then its switch's: built whole, not node by node (16,384 servers: 16,384 small arrays of each kind)."""
    switches = np.array([comm.node_nvswitch(int(node)) for node in comm.nodes], np.int64)
    to_switch = np.broadcast_to(switches[:, None], gpus.shape)
    n = gpus.shape[1]
    src = np.concatenate([gpus, to_switch], axis=1).ravel()
    dst = np.concatenate([to_switch, gpus], axis=1).ravel()
    return src, dst, np.full(len(src), n_bytes + n_bytes / n)


@register_algorithm("nvls_tree", ("all_reduce",))
def nvls_tree(comm: Communicator, collective: str, n_bytes: float, n_channels: int,
              root: int = 0) -> tuple[Phase, ...]:
    """NCCL's NVLSTree all-reduce: NVLS inside each server (reduce-scatter, then all-gather of the
    result), and between servers a double binary tree per local GPU over its 1/ppn shard, through that
    GPU's own NIC. Every phase is pipelined, so all flows run at once in one steady-state phase."""
    topo = comm.topo
    if topo.spec.server.nvlink_topology != "nvswitch" or topo.spec.server.nvlink_bandwidth <= 0:
        raise SpecError("algorithm: nvls_tree needs an NVSwitch in every server")
    per_node = comm.node_ranks[:, np.argsort(comm.local_gpu_index(comm.node_ranks[0]))]
    s_, d_, b_ = _nvls_node_flows(comm, comm.rank_gpu[per_node], n_bytes)
    src, dst, size = [s_], [d_], [b_]
    shard_half = n_bytes / comm.ppn / 2 / n_channels
    for parent in double_binary_trees(comm.n_nodes):
        child = np.flatnonzero(parent >= 0)
        for g in range(comm.ppn):
            heads = comm.rank_gpu[per_node[:, g]]
            for _ in range(n_channels):
                for a, b in ((heads[child], heads[parent[child]]), (heads[parent[child]], heads[child])):
                    src.append(a)
                    dst.append(b)
                    size.append(np.full(len(a), shard_half))
    return (Phase("all_reduce-nvls_tree", np.concatenate(src), np.concatenate(dst), np.concatenate(size), 1),)


@register_algorithm("pat", ("all_gather", "reduce_scatter"))
def pat(comm: Communicator, collective: str, n_bytes: float, n_channels: int, root: int = 0) -> tuple[Phase, ...]:
    """NCCL's PAT (parallel aggregated trees, 2.23+) for one GPU per server: log2(n) rounds; in the
    all-gather's round k every rank sends the 2^k shards it holds to the rank 2^k away (the
    reduce-scatter runs the rounds in reverse, halving). Each shard crosses the network once per
    round it travels, S/n x (n-1) bytes per rank in all, like the ring, in log2(n) steps
    instead of n-1."""
    n = comm.n_ranks
    if n == 1:
        return ()
    ranks = np.arange(n)
    phases = []
    rounds = int(np.ceil(np.log2(n)))
    for k in range(rounds):
        distance = 1 << k
        shards = min(distance, n - distance)  # the last round of a non-power-of-two n sends what is missing
        phases.append(Phase(f"{collective}-pat-{k}", comm.rank_gpu[ranks], comm.rank_gpu[(ranks + distance) % n],
                            np.full(n, n_bytes / n * shards / n_channels), 1))
    if collective == "reduce_scatter":
        phases.reverse()
    # each round's flows are split over the channels, which run side by side
    return tuple(Phase(p.name, np.tile(p.src, n_channels), np.tile(p.dst, n_channels),
                       np.tile(p.bytes_per_flow, n_channels), 1) for p in phases)


@register_algorithm("hierarchical", ("all_reduce",))
def hierarchical(comm: Communicator, collective: str, n_bytes: float, n_channels: int,
                 root: int = 0) -> tuple[Phase, ...]:
    """Two-level all-reduce (Horovod's hierarchical mode, PXN's rail-local idea): reduce-scatter
    inside each server over NVLink, all-reduce of each 1/ppn shard between servers on its own rail
    (one ring per local GPU index), all-gather inside each server. Three phases one after another."""
    if comm.n_ranks == 1:
        return ()
    per_node = comm.node_ranks[:, np.argsort(comm.local_gpu_index(comm.node_ranks[0]))]
    ppn, nodes = comm.ppn, comm.n_nodes
    phases = []
    if ppn > 1:
        src = comm.rank_gpu[per_node].ravel()
        dst = comm.rank_gpu[np.roll(per_node, -1, axis=1)].ravel()
        intra = n_bytes / ppn / n_channels
        phases.append(Phase("all_reduce-hier-rs", np.tile(src, n_channels), np.tile(dst, n_channels),
                            np.full(len(src) * n_channels, intra), ppn - 1))
    if nodes > 1:
        src = comm.rank_gpu[per_node].ravel()
        dst = comm.rank_gpu[np.roll(per_node, -1, axis=0)].ravel()  # same local GPU, next server: one rail
        inter = n_bytes / ppn / nodes / n_channels
        phases.append(Phase("all_reduce-hier-rails", np.tile(src, n_channels), np.tile(dst, n_channels),
                            np.full(len(src) * n_channels, inter), 2 * (nodes - 1)))
    if ppn > 1:
        phases.append(replace(phases[0], name="all_reduce-hier-ag"))
    return tuple(phases)


@register_algorithm("direct", ("alltoall",))
def direct_alltoall(comm: Communicator, collective: str, n_bytes: float, n_channels: int, root: int = 0) -> tuple[Phase, ...]:
    """All-to-all as NCCL runs it: every rank sends S/n to every other rank at once (one pair set:
    the n(n-1) flows are listed only if asked, see :meth:`Phase.expanded`)."""
    n = comm.n_ranks
    none = np.zeros(0, np.int64)
    return (Phase("alltoall-direct", none, none, np.zeros(0), 1, ((np.asarray(comm.rank_gpu, np.int64), n_bytes / n),)),)


@register_algorithm("pairwise", ("alltoall",))
def pairwise_alltoall(comm: Communicator, collective: str, n_bytes: float, n_channels: int,
                      root: int = 0) -> tuple[Phase, ...]:
    """All-to-all in n-1 rounds: in round k rank i sends S/n to rank (i+k) mod n."""
    n = comm.n_ranks
    ranks = np.arange(n)
    phases = []
    for k in range(1, n):
        phases.append(Phase(f"alltoall-pairwise-{k}", comm.rank_gpu[ranks], comm.rank_gpu[(ranks + k) % n],
                            np.full(n, n_bytes / n), 1))
    return tuple(phases)


@register_algorithm("p2p", ("sendrecv",))
def sendrecv(comm: Communicator, collective: str, n_bytes: float, n_channels: int, root: int = 0) -> tuple[Phase, ...]:
    """nccl-tests sendrecv: rank i sends S to rank i+1 and receives from rank i-1, all at once."""
    n = comm.n_ranks
    ranks = np.arange(n)
    return (Phase("sendrecv", comm.rank_gpu[ranks], comm.rank_gpu[(ranks + 1) % n], np.full(n, float(n_bytes)), 1),)


def compile_collective(comm: Communicator, collective: str, n_bytes: float, algorithm: str, n_channels: int = 1,
                       root: int = 0) -> Plan:
    """Compile a collective into phases.

    Examples
    --------
    >>> from gpuwait.topology import build_preset
    >>> comm = Communicator.world(build_preset("rocev2-400g-2tier", servers=2))
    >>> plan = compile_collective(comm, "all_reduce", 2**30, "ring", n_channels=2)
    >>> [(p.n_flows, p.repeat) for p in plan.phases]
    [(36, 30)]
    """
    if collective not in COLLECTIVE_NAMES:
        raise SpecError(f"collective: got {collective!r}; expected one of {', '.join(COLLECTIVE_NAMES)}")
    if algorithm not in ALGORITHMS:
        raise SpecError(f"algorithm: got {algorithm!r}; expected one of {', '.join(ALGORITHMS)}")
    if collective not in SUPPORTS[algorithm]:
        raise SpecError(f"algorithm: {algorithm} does not run {collective}; expected one of "
                        f"{', '.join(a for a, c in SUPPORTS.items() if collective in c)}")
    if n_bytes < 0 or n_channels < 1:
        raise SpecError(f"collective size {n_bytes} / channels {n_channels}: expected size >= 0 and at least 1 channel")
    if not 0 <= root < comm.n_ranks:
        raise SpecError(f"root: got {root}; expected a rank in 0..{comm.n_ranks - 1}")
    phases = ALGORITHMS[algorithm](comm, collective, float(n_bytes), n_channels, root)
    return Plan(collective, algorithm, float(n_bytes), n_channels, phases)
