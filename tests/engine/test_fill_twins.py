"""Links a twin decides for (engine/maxmin_fill.py ``_shadowed_links``): dropping them changes no bit.

Two links crossed by exactly the same flows with the same weights sum the same terms every filling
iteration, so the one of larger capacity (or of equal capacity and higher id) never decides a freeze
or a bottleneck. Held here against the array filling, which keeps every link, bit for bit; the
filling itself is checked against the textbook one (Bertsekas & Gallager, *Data Networks*, 2nd ed.,
section 6.5.2) in test_flow.py.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from gpuwait.engine import maxmin_fill
from gpuwait.engine.flow import _progressive_fill, _progressive_fill_arrays


def _host_like(rng: np.random.Generator, n_nics: int, flows_per_nic: int, n_core: int):
    """Each NIC's flows cross its PCIe hop, its port (twins: the same flows) and two core links at random."""
    rows, capacity_Bps = [], []
    for nic in range(n_nics):
        pcie, port = 3 * nic, 3 * nic + 1  # a third link per NIC stays unused
        for _ in range(flows_per_nic):
            core = 3 * n_nics + rng.choice(n_core, size=2, replace=False)
            rows.append(np.r_[pcie, port, core])
    n_links = 3 * n_nics + n_core
    capacity_Bps = np.empty(n_links)
    capacity_Bps[0:3 * n_nics:3] = 64e9  # PCIe above the port: shadowed
    capacity_Bps[1:3 * n_nics:3] = 50e9
    capacity_Bps[2:3 * n_nics:3] = 50e9
    capacity_Bps[3 * n_nics:] = rng.choice([50e9, 100e9, 400e9 / 3], size=n_core)
    capacity_Bps[0] = 50e9  # NIC 0: equal twins, the lower id decides
    capacity_Bps[3] = 50e9 * (1 + 1e-9)  # NIC 1: within the margin, kept
    indptr = np.r_[0, np.cumsum([len(r) for r in rows])]
    weights = sp.csr_matrix((np.ones(indptr[-1]), np.concatenate(rows), indptr), shape=(len(rows), n_links))
    weights.sort_indices()
    return weights, capacity_Bps


def _fills(weights: sp.csr_matrix, capacity_Bps: np.ndarray, cap_Bps: np.ndarray):
    n = weights.shape[0]
    flow_of = np.repeat(np.arange(n, dtype=np.intp), np.diff(weights.indptr))
    link_of = weights.indices.astype(np.intp)
    return (_progressive_fill(flow_of, link_of, weights.data, capacity_Bps, cap_Bps, np.ones(n, bool)),
            _progressive_fill_arrays(flow_of, link_of, weights.data, capacity_Bps, cap_Bps, np.ones(n, bool)))


def test_shadowed_twins_are_found_and_change_no_bit():
    rng = np.random.default_rng(11)
    weights, capacity_Bps = _host_like(rng, n_nics=40, flows_per_nic=6, n_core=30)
    twin = maxmin_fill._shadowed_links(weights.indptr.astype(np.int64), weights.indices.astype(np.int32),
                                       weights.data, np.ones(weights.shape[0], bool), capacity_Bps)
    pcie = np.arange(0, 120, 3)
    assert twin[pcie[2:]].tolist() == (pcie[2:] + 1).tolist()  # each PCIe hop: shadowed by its port
    assert twin[1] == 0  # equal twins: the higher id is shadowed by the lower
    assert twin[3] == -1 and twin[4] == -1  # within the margin: both kept
    assert (twin[120:] == -1).all()
    # a frozen flow's links are not counted: with NIC 2's flows all inactive, its hops are no twins
    inactive = np.ones(weights.shape[0], bool)
    inactive[12:18] = False
    twin = maxmin_fill._shadowed_links(weights.indptr.astype(np.int64), weights.indices.astype(np.int32),
                                       weights.data, inactive, capacity_Bps)
    assert twin[6] == -1 and twin[9] == 10
    caps = [np.full(weights.shape[0], np.inf), np.where(rng.random(weights.shape[0]) < 0.3, 5e9, np.inf)]
    for cap_Bps in caps:
        compiled, arrays = _fills(weights, capacity_Bps, cap_Bps)
        np.testing.assert_array_equal(compiled.rate_Bps, arrays.rate_Bps)
        np.testing.assert_array_equal(compiled.bottleneck_link, arrays.bottleneck_link)
        assert compiled.iterations == arrays.iterations


def test_a_twin_with_other_weights_is_not_shadowed():
    # the same flows on both links, but one flow puts half its bytes on link 1: not the same column
    weights = sp.csr_matrix(np.array([[1.0, 1.0, 1.0], [1.0, 0.5, 0.0]]))
    capacity_Bps = np.array([10e9, 20e9, 7e9])
    twin = maxmin_fill._shadowed_links(weights.indptr.astype(np.int64), weights.indices.astype(np.int32),
                                       weights.data, np.ones(2, bool), capacity_Bps)
    assert twin.tolist() == [-1, -1, -1]
    compiled, arrays = _fills(weights, capacity_Bps, np.full(2, np.inf))
    np.testing.assert_array_equal(compiled.rate_Bps, arrays.rate_Bps)
    np.testing.assert_array_equal(compiled.bottleneck_link, arrays.bottleneck_link)
