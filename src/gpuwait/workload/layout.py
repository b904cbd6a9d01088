"""Where each rank of a parallel job sits, and which ranks form its TP, DP, PP and EP groups.

Ranks follow Megatron-LM's default order, tensor-parallel fastest, then data-parallel, then
pipeline (``rank = tp_i + tp * (dp_i + dp * pp_i)``), and rank r runs on the job's r-th GPU in
server order. So a TP group of 8 fills one 8-GPU server, a DP group takes the same GPU index on
``dp`` servers (one rail), and pipeline stages are blocks of ``tp * dp`` GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from gpuwait.errors import SpecError


@dataclass(frozen=True, eq=False)
class Layout:
    """A ``tp x dp x pp`` job (``ep`` splits each DP group) on GPUs ``rank_gpu`` (topology node ids).

    Examples
    --------
    >>> lay = Layout(tp=2, dp=2, pp=2, ep=1, rank_gpu=np.arange(8))
    >>> lay.groups("tp").tolist()
    [[0, 1], [2, 3], [4, 5], [6, 7]]
    >>> lay.groups("dp").tolist()
    [[0, 2], [1, 3], [4, 6], [5, 7]]
    >>> lay.groups("pp").tolist()
    [[0, 4], [1, 5], [2, 6], [3, 7]]
    """

    tp: int
    dp: int
    pp: int
    ep: int
    rank_gpu: np.ndarray

    def __post_init__(self) -> None:
        if min(self.tp, self.dp, self.pp, self.ep) < 1:
            raise SpecError(f"parallel degrees: got tp={self.tp} dp={self.dp} pp={self.pp} ep={self.ep}; expected >= 1")
        if self.tp * self.dp * self.pp != len(self.rank_gpu):
            raise SpecError(f"parallel degrees: tp*dp*pp = {self.tp * self.dp * self.pp}; expected the job's "
                            f"{len(self.rank_gpu)} GPUs")
        if self.dp % self.ep:
            raise SpecError(f"workload.parallel.ep: {self.ep} does not divide dp = {self.dp}")

    @property
    def n_ranks(self) -> int:
        return len(self.rank_gpu)

    @cached_property
    def _grid(self) -> np.ndarray:
        """Ranks as a (pp, dp, tp) array."""
        return np.arange(self.n_ranks).reshape(self.pp, self.dp, self.tp)

    def groups(self, kind: str) -> np.ndarray:
        """(n_groups, group_size) ranks of every group of ``kind``: "tp", "dp", "pp", "ep" (``ep``
        consecutive DP ranks) or "expert_dp" (the ranks holding the same experts, dp / ep of them)."""
        g = self._grid
        if kind == "tp":
            return g.reshape(-1, self.tp)
        if kind == "dp":
            return g.transpose(0, 2, 1).reshape(-1, self.dp)
        if kind == "pp":
            return g.transpose(1, 2, 0).reshape(-1, self.pp)
        experts = g.reshape(self.pp, self.dp // self.ep, self.ep, self.tp)
        if kind == "ep":
            return experts.transpose(0, 1, 3, 2).reshape(-1, self.ep)
        if kind == "expert_dp":
            return experts.transpose(0, 2, 3, 1).reshape(-1, self.dp // self.ep)
        raise SpecError(f"group kind: got {kind!r}; expected tp, dp, pp, ep or expert_dp")

    def stage_of(self) -> np.ndarray:
        """Pipeline stage of every rank."""
        return np.repeat(np.arange(self.pp), self.dp * self.tp)

    def replica_of(self) -> np.ndarray:
        """Data-parallel index of every rank."""
        return np.broadcast_to(np.arange(self.dp)[None, :, None], self._grid.shape).ravel()

    def tp_group_of(self) -> np.ndarray:
        """Index of every rank's TP group (= stage * dp + replica)."""
        return np.arange(self.n_ranks) // self.tp
