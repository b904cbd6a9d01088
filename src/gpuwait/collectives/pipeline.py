"""How NCCL cuts a collective into pipelined steps: the bytes of one step, and how deep the pipeline is.

NCCL moves a collective through per-channel FIFOs of ``NCCL_STEPS`` (8) slots. Each step of a
connection carries one *chunk* (a *slice* for ring Simple, two per chunk); a step pays the hop's
latency and the transport's per-message cost, and the first chunk crosses the whole pipeline before
the last link is busy. This module gives the chunk a step carries for a given size, as NCCL v2.30.7
computes it, and the pipeline depth of each algorithm, so :mod:`gpuwait.fabric.perf` can turn a
steady-state bandwidth time into a time that ramps from the latency floor to the plateau.

Sources (NVIDIA/nccl tag v2.30.7-1): buffer sizes ``src/init.cc`` (``DEFAULT_LL_BUFFSIZE`` = 8 lines x
512 threads x 8 steps x 16 B; ``DEFAULT_LL128_BUFFSIZE`` = 120 elements x 640 threads x 8 steps x 8 B;
``DEFAULT_BUFFSIZE`` 4 MiB), ``NCCL_STEPS`` 8 (``src/include/device.h``), chunk and slice steps
(``src/include/collectives.h``: ``ALLREDUCE_CHUNKSTEPS`` = NCCL_STEPS/2, ``ALLREDUCE_SLICESTEPS`` =
NCCL_STEPS/4, the same for AllGather and ReduceScatter, 1 for the rest), the chunk-size reductions of
``calcCollChunking`` (``src/enqueue.cc``), the ring kernels' per-loop chunk
``min(chunkSize, divUp(size - offset, nChannels * nRanks))`` (``src/device/all_reduce.h``), NVLS chunk
128 KiB (``NCCL_NVLS_CHUNKSIZE``, ``src/transport/nvls.cc``; 64 KiB NVLSTree chunk from 4 nodes) and the
p2p chunk sizes (``NCCL_P2P_NET_CHUNKSIZE`` 128 KiB, ``NCCL_P2P_NVL_CHUNKSIZE`` 512 KiB, ``src/init.cc``).

Examples
--------
>>> chunk_bytes("all_reduce", "ring", "Simple", 2**30, n_channels=16, n_ranks=16, n_nodes=2)
1048576
>>> chunk_bytes("all_reduce", "ring", "Simple", 2**20, n_channels=16, n_ranks=16, n_nodes=2)
2048
>>> chunk_bytes("all_reduce", "tree", "LL128", 16 * 2**20, n_channels=16, n_ranks=64, n_nodes=8)
72000
"""

from __future__ import annotations

import functools
import math

NCCL_STEPS = 8
LL_BUFFER_BYTES = 8 * 512 * NCCL_STEPS * 16
LL128_BUFFER_BYTES = 120 * 640 * NCCL_STEPS * 8
SIMPLE_BUFFER_BYTES = 4 * 2**20
BUFFER_BYTES = {"LL": LL_BUFFER_BYTES, "LL128": LL128_BUFFER_BYTES, "Simple": SIMPLE_BUFFER_BYTES}
#: LL carries 8 payload bytes in every 16-byte line; LL128 120 of every 128 (NCCL device.h)
LL128_LINE_ELEMS, LL128_DATA_ELEMS = 16, 15
NVLS_CHUNK_BYTES = 128 * 1024
NVLS_TREE_CHUNK_BYTES_4_NODES = 64 * 1024
P2P_NET_CHUNK_BYTES = 128 * 1024
P2P_NVL_CHUNK_BYTES = 512 * 1024
#: chunk steps and slice steps of the ring kernels (collectives.h); every other pattern uses 1 and 1
RING_STEPS = {"all_reduce": (NCCL_STEPS // 2, NCCL_STEPS // 4), "all_gather": (NCCL_STEPS // 2, NCCL_STEPS // 4),
              "reduce_scatter": (NCCL_STEPS // 2, NCCL_STEPS // 4)}


def ring_slices(collective: str, protocol: str) -> int:
    """Slices (network messages) per chunk of a ring step: 2 for Simple AllReduce, AllGather and
    ReduceScatter (``*_CHUNKSTEPS`` / ``*_SLICESTEPS``, collectives.h v2.30.7), else 1.

    >>> ring_slices("all_reduce", "Simple"), ring_slices("all_reduce", "LL128")
    (2, 1)
    """
    if protocol != "Simple" or collective not in RING_STEPS:
        return 1
    chunk_steps, slice_steps = RING_STEPS[collective]
    return chunk_steps // slice_steps


def _log2i(n: int) -> int:
    return int(n).bit_length() - 1


def _buffer_chunk(collective: str, algorithm: str, protocol: str) -> tuple[int, int]:
    """(chunk bytes before any size reduction, slices per chunk)."""
    step = BUFFER_BYTES[protocol] // NCCL_STEPS
    chunk_steps, slice_steps = 1, 1
    if protocol == "Simple" and algorithm == "ring":
        chunk_steps, slice_steps = RING_STEPS.get(collective, (1, 1))
    chunk = step * chunk_steps
    if protocol == "LL":
        chunk //= 2
    elif protocol == "LL128":
        chunk = chunk // LL128_LINE_ELEMS * LL128_DATA_ELEMS
    return chunk, chunk_steps // slice_steps


def _reduced_chunk(algorithm: str, protocol: str, collective: str, n_bytes: int, chunk: int, n_channels: int,
                   n_ranks: int, n_nodes: int, nvls_heads: int,
                   nvls_tree_chunk: tuple[int, int] = (NVLS_CHUNK_BYTES, NVLS_TREE_CHUNK_BYTES_4_NODES)) -> int:
    """calcCollChunking's size-dependent reductions (enqueue.cc v2.30.7); ``nvls_tree_chunk`` is NVLSTree's
    first chunk and its cap from 4 nodes (0: none), which changed in 2.19 and 2.21."""
    if algorithm == "nvls":
        chunk = min(chunk, NVLS_CHUNK_BYTES)
        ops = n_channels * nvls_heads
        for factor, floor in ((64, 65536), (8, 32768), (2, 16384)):
            if n_bytes < factor * ops * chunk and chunk > floor:
                chunk = floor
    elif algorithm == "nvls_tree":
        ops = n_channels * nvls_heads
        chunk = nvls_tree_chunk[0]
        if n_nodes >= 4 and nvls_tree_chunk[1]:
            chunk = min(chunk, nvls_tree_chunk[1])
        for factor, floor in ((32, 262144), (16, 131072), (4, 65536), (1, 32768)):
            if n_bytes < factor * ops * chunk and chunk > floor:
                chunk = floor
    elif algorithm == "tree" and protocol == "LL128":
        ppn = n_ranks / n_nodes
        steps = 1 + _log2i(n_nodes) + 0.1 * ppn
        while n_bytes // (n_channels * chunk) < steps * 64 / ppn and chunk > 131072:
            chunk //= 2
        while n_bytes // (n_channels * chunk) < steps * 16 / ppn and chunk > 32768:
            chunk //= 2
    elif algorithm == "collnet_chain":
        chunk = min(256 * 1024, SIMPLE_BUFFER_BYTES // NCCL_STEPS)
    elif algorithm == "pat" and collective in ("all_gather", "reduce_scatter"):
        factor = 32 if collective == "all_gather" else 16
        while chunk * n_channels * factor > n_bytes and chunk > 65536:
            chunk //= 2
    return chunk


def chunk_bytes(collective: str, algorithm: str, protocol: str, n_bytes: int, *, n_channels: int, n_ranks: int,
                n_nodes: int, nvls_heads: int = 1,
                nvls_tree_chunk: tuple[int, int] = (NVLS_CHUNK_BYTES, NVLS_TREE_CHUNK_BYTES_4_NODES)) -> int:
    """Payload bytes one step of one channel's connection carries (at least 1 for a non-empty call).

    Ring kernels split each rank's share into per-loop chunks no larger than the data they have, and
    Simple splits a chunk into slices: the step is the slice. ``n_bytes`` is the nccl-tests size.
    ``nvls_tree_chunk``: NVLSTree's first chunk and 4-node cap of the NCCL release
    (:class:`gpuwait.collectives.nccl_versions.NcclRelease`); 2.21 to 2.30's by default.

    >>> chunk_bytes("all_reduce", "nvls_tree", "Simple", 2**30, n_channels=8, n_ranks=16, n_nodes=2)
    131072
    >>> chunk_bytes("all_reduce", "nvls_tree", "Simple", 2**30, n_channels=8, n_ranks=16, n_nodes=2,
    ...             nvls_tree_chunk=(512 * 1024, 65536))
    524288
    """
    if n_bytes <= 0:
        return 0
    chunk, slices = _buffer_chunk(collective, algorithm, protocol)
    chunk = _reduced_chunk(algorithm, protocol, collective, n_bytes, chunk, max(n_channels, 1), max(n_ranks, 1),
                           max(n_nodes, 1), max(nvls_heads, 1), nvls_tree_chunk)
    if algorithm == "ring":
        share = math.ceil(n_bytes / (max(n_channels, 1) * max(n_ranks, 1)))
        chunk = min(chunk, share)
        return max(1, math.ceil(chunk / slices))
    per_channel = math.ceil(n_bytes / max(n_channels, 1))
    if algorithm == "nvls_tree":
        # a channel's loop gives each of the nvls_heads heads a chunk, and its last loop splits what is left
        # evenly between them (``lastChunkCount = divUp(remCount, nHeads)``, NVLS_TREE AllReduce,
        # src/device/all_reduce.h v2.27.3-1 to v2.30.7-1): a head's step carries at most its share
        per_channel = math.ceil(per_channel / max(nvls_heads, 1))
    return max(1, min(chunk, per_channel))


def p2p_chunk_bytes(n_bytes_per_peer: int, over_network: bool) -> int:
    """The step of NCCL's p2p path (send/recv, all-to-all): its chunk size, or the message if smaller."""
    chunk = P2P_NET_CHUNK_BYTES if over_network else P2P_NVL_CHUNK_BYTES
    return max(1, min(chunk, int(n_bytes_per_peer)))


def pipeline_depth(algorithm: str, collective: str, n_ranks: int, n_nodes: int) -> tuple[int, int]:
    """(intra-node, inter-node) hops the first chunk crosses in sequence before the pipeline is full.

    Ring: its steps are already its bandwidth term (each rank sends every step), so nothing extra.
    Tree: up the chain inside the node and the tree between nodes, then back down. NVLSTree: the switch
    reduce and multicast, and the tree between nodes up and down. CollNet chain: the chain up and down.
    NVLS and PAT: the per-window model of :mod:`gpuwait.fabric.perf` or none.

    >>> pipeline_depth("tree", "all_reduce", 64, 8)
    (14, 6)
    >>> pipeline_depth("ring", "all_reduce", 64, 8)
    (0, 0)
    """
    ppn = max(n_ranks // max(n_nodes, 1), 1)
    levels = _log2i(max(n_nodes, 1))
    up_down = 2 if collective == "all_reduce" else 1
    if algorithm == "tree":
        return up_down * (ppn - 1), up_down * levels
    if algorithm == "nvls_tree":
        return 2, up_down * levels
    if algorithm == "collnet_chain":
        return up_down * (ppn - 1), 1
    return 0, 0


#: payload bytes one thread moves per loop pass of the line protocols' primitives: LL one 16-byte line,
#: 8 of them data (``LLGenericOp``, src/device/prims_ll.h); LL128 ``NCCL_LL128_SHMEM_ELEMS_PER_THREAD`` (8)
#: 8-byte words, 15 of every 16 data (``GenericOp``, src/device/prims_ll128.h; ``ncclProtoGrainSize``,
#: src/include/device.h: 1920 bytes per warp), NVIDIA/nccl v2.30.7-1
LINE_BYTES_PER_THREAD = {"LL": 8, "LL128": 8 * 8 * LL128_DATA_ELEMS // LL128_LINE_ELEMS}
WARP_SIZE = 32


def tree_split_threads(protocol: str) -> tuple[int, int]:
    """(reduce-up, broadcast-down) threads of one channel of an LL or LL128 tree AllReduce: ``runTreeSplit``
    gives 70 % of the warps to the reduce ("Receiving from up to 3 sources is more compute intensive than
    sending to 3 dests"), src/device/all_reduce.h v2.30.7-1, of the protocol's ``MAX_THREADS``.

    >>> tree_split_threads("LL128"), tree_split_threads("LL")
    ((448, 192), (352, 160))
    """
    threads = MAX_THREADS[protocol]
    up = threads * 7 // (10 * WARP_SIZE) * WARP_SIZE
    return up, threads - up


def intra_hop_bytes(algorithm: str, protocol: str, chunk: int) -> float:
    """Bytes an intra-node hop of the pipeline holds back before the next GPU can work on them.

    Simple hands a whole step over (the receiver waits for the sender's step counter: prims_simple.h), so
    a hop holds a chunk. LL and LL128 carry a flag in every line and the receiver polls each line as it
    lands (``readLL`` / ``readLL128``, prims_ll.h / prims_ll128.h v2.30.7-1): inside a node the next GPU
    starts on the first lines of a step while the sender writes the rest, one loop pass of the sending
    threads behind. A tree's LL/LL128 reduce-up and broadcast-down halves run on their own threads
    (:func:`tree_split_threads`), so a hop up holds ``min(chunk, up threads x line bytes)`` and a hop down
    ``min(chunk, down threads x line bytes)``; this is their mean (a tree AllReduce crosses as many hops
    each way). Across the network a step leaves only once it is complete (the proxy posts whole steps,
    src/transport/net.cc), so network hops hold the chunk whatever the protocol.

    >>> intra_hop_bytes("tree", "LL128", 72000), intra_hop_bytes("tree", "LL128", 4096)
    (19200.0, 4096.0)
    >>> intra_hop_bytes("tree", "Simple", 72000), intra_hop_bytes("ring", "LL128", 72000)
    (72000.0, 72000.0)
    """
    if algorithm != "tree" or protocol not in LINE_BYTES_PER_THREAD:
        return float(chunk)
    up, down = tree_split_threads(protocol)
    line = LINE_BYTES_PER_THREAD[protocol]
    return (min(chunk, up * line) + min(chunk, down * line)) / 2


def latency_steps(algorithm: str, collective: str, n_ranks: int, n_nodes: int) -> tuple[int, int]:
    """(intra-node, inter-node) steps whose latencies add up in NCCL's latency model (tuning.cc v2.30.7).

    The same composition as :func:`gpuwait.collectives.tuning.predict`'s latency: ring ``nsteps`` with
    ``2 (nNodes - 1)`` of them across the network for AllReduce; tree ``2 (ppn - 1)`` and ``2 log2 nNodes``;
    NVLS one switch step (+ one network step); NVLSTree one and ``2 log2 nNodes``; CollNet one network step.

    >>> latency_steps("ring", "all_reduce", 16, 2), latency_steps("tree", "all_reduce", 64, 8)
    ((28, 2), (14, 6))
    """
    ppn = max(n_ranks // max(n_nodes, 1), 1)
    levels = _log2i(max(n_nodes, 1))
    if algorithm == "ring":
        steps = 2 * (n_ranks - 1) if collective == "all_reduce" else (
            n_ranks - 1 if collective in ("all_gather", "reduce_scatter") else n_ranks)
        inter = 0 if n_nodes == 1 else (2 * (n_nodes - 1) if collective == "all_reduce" else n_nodes - 1)
        return steps - inter, inter
    if algorithm == "tree":
        return 2 * (ppn - 1), 2 * levels
    if algorithm == "collnet_direct":
        return 2 * min(1, ppn - 1), 1
    if algorithm == "collnet_chain":
        return 2 * (ppn - 1), 1
    if algorithm == "nvls":
        return 1, int(n_nodes > 1)
    if algorithm == "nvls_tree":
        return 1, 2 * levels
    if algorithm == "pat":
        return n_ranks - n_nodes, levels
    return int(n_nodes == 1), int(n_nodes > 1)  # p2p: one step


def _btree_peers(n: int, rank: int) -> set[int]:
    """Parent and children of ``rank`` in NCCL's binary tree over ``n`` nodes (``ncclGetBtree``, src/graph/trees.cc
    v2.30.7-1: a rank's lowest set bit is its level; rank 0 is the root with one child)."""
    bit = 1
    while bit < n and not bit & rank:
        bit <<= 1
    if rank == 0:
        return {bit >> 1} if n > 1 else set()
    parent = (rank ^ bit) | (bit << 1)
    if parent >= n:
        parent = rank ^ bit
    low = bit >> 1
    peers = {parent}
    if low:
        peers.add(rank - low)
        while low and rank + low >= n:
            low >>= 1
        if low:
            peers.add(rank + low)
    return peers


@functools.lru_cache(maxsize=256)
def tree_network_peers(n_nodes: int, first_tree_share: float = 0.5) -> float:
    """Network peers per channel of the busiest node of NCCL's double binary tree, averaged over the
    channels: ``first_tree_share`` of them run the first tree, the rest the second (``ncclGetDtree``,
    src/graph/trees.cc v2.30.7-1: the second tree mirrors the first for an even node count and shifts it
    by one for an odd one; :func:`tree_channel_split` gives the share).

    >>> [tree_network_peers(n) for n in (1, 2, 3, 4, 8, 64)]
    [0.0, 1.0, 1.5, 2.0, 2.0, 2.0]
    >>> round(tree_network_peers(8, 2 / 3), 3)
    2.333
    """
    n = max(int(n_nodes), 1)
    if n == 1:
        return 0.0
    share = min(max(float(first_tree_share), 0.0), 1.0)
    busiest = 0.0
    for rank in range(n):
        if n % 2:
            second = {(p + 1) % n for p in _btree_peers(n, (rank - 1) % n)}
        else:
            second = {n - 1 - p for p in _btree_peers(n, n - 1 - rank)}
        busiest = max(busiest, share * len(_btree_peers(n, rank)) + (1 - share) * len(second))
    return busiest


def tree_channel_split(n_channels: int, graph_channels: int) -> float:
    """The share of a tree call's channels on NCCL's first tree.

    NCCL doubles its search channels, the first copies on tree 0 and the second on tree 1
    (``connectTrees``: ``channel0`` / ``channel1 = channel0 + nChannels``), then adds channels above
    that count (NCCL_MIN_CTAS / NCCL_MIN_NCHANNELS, Hopper's 2x below 16 channels) as copies of the
    first ones (``copyChannels``: channel c copies channel c - start), src/graph/connect.cc
    NVIDIA/nccl v2.18.3-1 to v2.30.7-1; a call runs on the first ``n_channels``. ``graph_channels`` is the
    doubled count. So NCCL_MIN_CTAS=24 over 16 channels puts 16 on tree 0 and 8 on tree 1.

    >>> tree_channel_split(16, 16), round(tree_channel_split(24, 16), 3), tree_channel_split(6, 16)
    (0.5, 0.667, 1.0)
    """
    half = max(int(graph_channels) // 2, 1)
    n = max(int(n_channels), 1)
    first = sum(1 for c in range(n) if c % (2 * half) < half)
    return first / n


#: threads per channel (NCCL_{LL,LL128,SIMPLE}_MAX_NTHREADS, device.h) and bytes per thread below
#: which NCCL drops a channel (NCCL_*_THREAD_THRESHOLD, comm.h), v2.30.7
MAX_THREADS = {"LL": 512, "LL128": 640, "Simple": 512}
THREAD_THRESHOLD_BYTES = {"LL": 8, "LL128": 8, "Simple": 64}


def thread_threshold_bytes(algorithm: str, protocol: str, n_ranks: int) -> int:
    """Bytes per thread below which NCCL runs a ring or tree call on one channel fewer
    (``comm->threadThresholds``, ``ncclTopoTuneModel``, src/graph/tuning.cc, NVIDIA/nccl v2.18.3-1 to
    v2.30.7-1): the protocol's ``NCCL_*_THREAD_THRESHOLD``, times the rank count for ring LL
    (``threadThresholds[NCCL_ALGO_RING][NCCL_PROTO_LL] *= nRanks``).

    >>> thread_threshold_bytes("ring", "LL", 16), thread_threshold_bytes("tree", "LL", 16)
    (128, 8)
    """
    threshold = THREAD_THRESHOLD_BYTES[protocol]
    if algorithm == "ring" and protocol == "LL":
        threshold *= max(int(n_ranks), 1)
    return threshold


def channels_for_size(algorithm: str, protocol: str, n_bytes: int, n_channels: int, n_ranks: int = 1) -> int:
    """The channels NCCL runs a ring or tree call on: one fewer while every thread would get less than
    its threshold (:func:`thread_threshold_bytes`; ``topoGetAlgoInfo``, src/enqueue.cc v2.30.7-1, the same
    loop since 2.18); other algorithms keep theirs.

    >>> channels_for_size("ring", "LL", 1024, 16), channels_for_size("ring", "Simple", 2**30, 16)
    (1, 16)
    >>> channels_for_size("ring", "LL", 256 * 1024, 16, n_ranks=8), channels_for_size("tree", "LL", 256 * 1024, 16, n_ranks=8)
    (8, 16)
    """
    if algorithm not in ("ring", "tree"):
        return n_channels
    per_channel = MAX_THREADS[protocol] * thread_threshold_bytes(algorithm, protocol, n_ranks)
    nc = n_channels
    while n_bytes < nc * per_channel and nc >= 2:
        nc -= 1
    return nc
