"""Where each rank of a parallel job sits, and which ranks form its TP, CP, DP, PP and EP groups.

Ranks follow Megatron-Core's order, by default ``tp-cp-ep-dp-pp``: tensor-parallel fastest, then
context-parallel, then data-parallel (an expert-parallel group is ``ep`` consecutive cp x dp ranks), then
pipeline (``rank = tp_i + tp * (cp_i + cp * (dp_i + dp * pp_i))``); ``order`` names another one. Rank r
runs on ``rank_gpu[r]``: with the default placement the job's r-th GPU in server order, so a TP group of
8 fills one 8-GPU server, a DP group takes the same GPU index on ``dp`` servers (one rail), and pipeline
stages are blocks of ``tp * cp * dp`` GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from gpuwait.errors import SpecError

#: the dimensions a rank order names, and Megatron-Core's default order (fastest first)
DIMENSIONS = ("tp", "cp", "dp", "pp")
DEFAULT_ORDER = ("tp", "cp", "dp", "pp")


def parse_rank_order(text: str, path: str = "workload.parallel.rank_order") -> tuple[str, ...]:
    """Megatron-Core's order string (``"tp-cp-ep-dp-pp"``, fastest first) as the order of tp, cp, dp, pp.

    ``ep`` may appear right before ``dp`` (expert parallelism splits data parallelism here); ``cp`` may be
    left out (it then comes right after tp).

    >>> parse_rank_order("tp-pp-dp")
    ('tp', 'cp', 'pp', 'dp')
    >>> parse_rank_order("tp-dp-tp")
    Traceback (most recent call last):
    ...
    gpuwait.errors.SpecError: workload.parallel.rank_order: got 'tp-dp-tp'; expected each of tp, cp, dp, pp once, fastest first (e.g. tp-cp-ep-dp-pp)
    """
    tokens = [t.strip().lower() for t in text.split("-")]
    if "ep" in tokens:
        at = tokens.index("ep")
        if at + 1 >= len(tokens) or tokens[at + 1] != "dp":
            raise SpecError(f"{path}: got {text!r}; expected ep right before dp (experts split data parallelism)")
        tokens.pop(at)
    if "cp" not in tokens and "tp" in tokens:
        tokens.insert(tokens.index("tp") + 1, "cp")
    if sorted(tokens) != sorted(DIMENSIONS):
        raise SpecError(f"{path}: got {text!r}; expected each of tp, cp, dp, pp once, fastest first (e.g. tp-cp-ep-dp-pp)")
    return tuple(tokens)


@dataclass(frozen=True, eq=False)
class Layout:
    """A ``tp x cp x dp x pp`` job (``ep`` splits each DP group) on GPUs ``rank_gpu`` (topology node ids).

    Examples
    --------
    >>> lay = Layout(tp=2, dp=2, pp=2, ep=1, rank_gpu=np.arange(8))
    >>> lay.groups("tp").tolist()
    [[0, 1], [2, 3], [4, 5], [6, 7]]
    >>> lay.groups("dp").tolist()
    [[0, 2], [1, 3], [4, 6], [5, 7]]
    >>> lay.groups("pp").tolist()
    [[0, 4], [1, 5], [2, 6], [3, 7]]
    >>> Layout(tp=2, dp=2, pp=2, ep=1, rank_gpu=np.arange(8), order=("tp", "cp", "pp", "dp")).groups("pp").tolist()
    [[0, 2], [1, 3], [4, 6], [5, 7]]
    """

    tp: int
    dp: int
    pp: int
    ep: int
    rank_gpu: np.ndarray
    cp: int = 1
    order: tuple[str, ...] = DEFAULT_ORDER

    def __post_init__(self) -> None:
        if min(self.tp, self.dp, self.pp, self.ep, self.cp) < 1:
            raise SpecError(f"parallel degrees: got tp={self.tp} cp={self.cp} dp={self.dp} pp={self.pp} ep={self.ep}; "
                            "expected >= 1")
        if self.tp * self.cp * self.dp * self.pp != len(self.rank_gpu):
            raise SpecError(f"parallel degrees: tp*cp*dp*pp = {self.tp * self.cp * self.dp * self.pp}; expected the "
                            f"job's {len(self.rank_gpu)} GPUs")
        if (self.dp * self.cp) % self.ep:  # the expert groups split a stage's dp x cp ranks (groups())
            raise SpecError(f"workload.parallel.ep: {self.ep} does not divide dp*cp = {self.dp * self.cp}")
        if sorted(self.order) != sorted(DIMENSIONS):
            raise SpecError(f"rank order: got {self.order}; expected a permutation of {DIMENSIONS}")

    @property
    def n_ranks(self) -> int:
        return len(self.rank_gpu)

    @property
    def expert_dp(self) -> int:
        """Ranks holding the same experts, the size of an "expert_dp" group: dp x cp / ep (the cp ranks
        of a dp rank hold its experts too)."""
        return self.dp * self.cp // self.ep

    @cached_property
    def _grid(self) -> np.ndarray:
        """Ranks as a (pp, dp, cp, tp) array, numbered in ``order`` (first fastest)."""
        sizes = {"tp": self.tp, "cp": self.cp, "dp": self.dp, "pp": self.pp}
        slowest_first = list(reversed(self.order))
        numbered = np.arange(self.n_ranks).reshape([sizes[d] for d in slowest_first])
        return numbered.transpose([slowest_first.index(d) for d in ("pp", "dp", "cp", "tp")])

    def groups(self, kind: str) -> np.ndarray:
        """(n_groups, group_size) ranks of every group of ``kind``: "tp", "cp", "dp", "pp", "dp_cp" (the
        ranks holding the same weights, which reduce gradients together: dp x cp), "ep" (``ep`` ranks
        consecutive in rank order among a stage's cp x dp ranks of one tp rank: ``ep`` consecutive DP ranks
        when cp = 1, Megatron-Core's expert order) or "expert_dp" (the ranks holding the same experts,
        dp x cp / ep of them)."""
        g = self._grid
        pp, dp, cp, tp = g.shape
        if kind == "tp":
            return g.reshape(-1, tp)
        if kind == "cp":
            return g.transpose(0, 1, 3, 2).reshape(-1, cp)
        if kind == "dp":
            return g.transpose(0, 2, 3, 1).reshape(-1, dp)
        if kind == "dp_cp":
            return g.transpose(0, 3, 1, 2).reshape(-1, dp * cp)
        if kind == "pp":
            return g.transpose(1, 2, 3, 0).reshape(-1, pp)
        # Megatron-Core's expert rank generator (parallel_state.initialize_model_parallel, NVIDIA/Megatron-LM
        # @d98e8a64) numbers the same ranks 'tp-ep-dp-pp' with cp = 1: the cp x dp ranks of a (stage, tp
        # rank), in rank order, are ep x expert_dp with ep fastest. So with cp > 1 an EP group takes a dp
        # rank's cp ranks first (sizes as before; with cp = 1 the same groups in the same order as ep
        # consecutive dp ranks)
        data = np.sort(g.transpose(0, 3, 1, 2).reshape(pp, tp, dp * cp), axis=2)
        experts = data.reshape(pp, tp, self.expert_dp, self.ep)
        if kind == "ep":
            return experts.transpose(0, 2, 1, 3).reshape(-1, self.ep)
        if kind == "expert_dp":
            return experts.transpose(0, 3, 1, 2).reshape(-1, self.expert_dp)
        raise SpecError(f"group kind: got {kind!r}; expected tp, cp, dp, dp_cp, pp, ep or expert_dp")

    def lane_ranks(self) -> np.ndarray:
        """(pp, dp, cp*tp) ranks of each (stage, replica) lane: the GPUs that compute one micro-batch's
        layers together and wait for each other every layer (TP collectives, CP's K/V ring)."""
        pp, dp, cp, tp = self._grid.shape
        return self._grid.reshape(pp, dp, cp * tp)

    @cached_property
    def _lane(self) -> np.ndarray:
        lane = np.empty(self.n_ranks, np.int64)
        lane[self.lane_ranks().reshape(self.pp * self.dp, -1)] = np.arange(self.pp * self.dp)[:, None]
        return lane

    def data_readers(self) -> tuple[tuple[int, ...], np.ndarray]:
        """The stages that read the data, and (stages, dp, cp) the ranks of theirs that do.

        Megatron-LM reads batches on the first pipeline stage (tokens, position ids) and the last (labels,
        loss mask), never on the stages between (``get_batch`` returns ``None`` there, pretrain_gpt.py;
        ``is_dataset_built_on_rank`` builds no loader there), and on TP rank 0 alone, which broadcasts the
        batch to its TP group (``get_batch_on_this_tp_rank``, megatron/core/utils.py; both NVIDIA/Megatron-LM
        @d98e8a64). Every CP rank reads its replica's samples and keeps its slice (``get_batch_on_this_cp_rank``).

        >>> stages, ranks = Layout(tp=2, dp=1, pp=3, ep=1, rank_gpu=np.arange(6)).data_readers()
        >>> stages, ranks.ravel().tolist()
        ((0, 2), [0, 4])
        """
        stages = tuple(sorted({0, self.pp - 1}))
        return stages, self._grid[list(stages), :, :, 0]

    def reader_ranks(self) -> np.ndarray:
        """The ranks that read the dataset (:meth:`data_readers`), flat: ``len(set(0, pp - 1)) x dp x cp``
        of the job's ranks, every rank when pp = tp = 1.

        >>> Layout(tp=8, dp=2, pp=4, ep=1, rank_gpu=np.arange(64)).reader_ranks().tolist()
        [0, 8, 48, 56]
        """
        return self.data_readers()[1].ravel()

    def lane_of(self) -> np.ndarray:
        """(stage * dp + replica) lane of every rank."""
        return self._lane

    def stage_of(self) -> np.ndarray:
        """Pipeline stage of every rank."""
        return self._lane // self.dp

    def replica_of(self) -> np.ndarray:
        """Data-parallel index of every rank."""
        return self._lane % self.dp

    def tp_group_of(self) -> np.ndarray:
        """Index of every rank's lane (= stage * dp + replica; its TP group when cp = 1)."""
        return self._lane
