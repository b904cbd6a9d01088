"""Tests for gpuwait.routing.hashing: CRC correctness, seeds and polarization, RoCEv2 ports, uniformity.

Sources cited in the tests:

* CRC parameters and check values (CRC of b"123456789"): the CRC RevEng catalogue,
  https://reveng.sourceforge.io/crc-catalogue/ (CRC-32/ISO-HDLC, CRC-32/ISCSI,
  CRC-16/IBM-3740 a.k.a. CCITT-FALSE, CRC-16/ARC).
* RoCEv2 source port: Linux include/rdma/ib_verbs.h, ``rdma_calc_flow_label`` and
  ``rdma_flow_label_to_udp_sport`` (also copied verbatim into e.g. the irdma driver).
* Balls into bins: with m balls in n bins, E[empty bins] = n (1 - 1/n)^m, and
  P(max load <= k) = m!/n^m [x^m] (sum_{j<=k} x^j/j!)^n (exponential generating
  functions; e.g. Flajolet & Sedgewick, *Analytic Combinatorics*, II.3).
"""

from __future__ import annotations

import doctest
import zlib
from fractions import Fraction
from math import factorial

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwait.errors import RoutingError, UnknownNameError
from gpuwait.routing import hashing
from gpuwait.routing.hashing import (
    HASH_FUNCTIONS,
    IPPROTO_UDP,
    ROCEV2_UDP_DPORT,
    CrcParams,
    FiveTuple,
    ecmp_select,
    flow_label_to_udp_sport,
    get_hash,
    hash_flows,
    qp_numbers,
    register_hash,
    roce_flow_label,
    rocev2_udp_sport,
)

# RevEng catalogue: (width, poly as catalogued i.e. not reflected, init, refin/refout, xorout, check).
REVENG = {
    "crc32": (32, 0x04C11DB7, 0xFFFFFFFF, True, 0xFFFFFFFF, 0xCBF43926),
    "crc32c": (32, 0x1EDC6F41, 0xFFFFFFFF, True, 0xFFFFFFFF, 0xE3069283),
    "crc16-ccitt": (16, 0x1021, 0xFFFF, False, 0x0000, 0x29B1),
    "crc16-arc": (16, 0x8005, 0x0000, True, 0x0000, 0xBB3D),
}
CRC_NAMES = sorted(REVENG)


def _reflect(value: int, width: int) -> int:
    return int(f"{value:0{width}b}"[::-1], 2)


def crc_bitwise(data: bytes, name: str, seed: int = 0) -> int:
    """Independent reference: bit-at-a-time, MSB-first Rocksoft model straight from the catalogue.

    Shares no code (no table, no reflected polynomial) with the module under test. Seeding
    follows the module's definition: the initial register is ``init XOR seed`` (seed masked
    to the width); for reflected CRCs that register is the reflected one, hence the reflect.
    """
    width, poly, init, refl, xorout, _ = REVENG[name]
    mask = (1 << width) - 1
    seed &= mask
    reg = init ^ (_reflect(seed, width) if refl else seed)
    for byte in data:
        if refl:
            byte = _reflect(byte, 8)
        reg ^= byte << (width - 8)
        for _ in range(8):
            reg = ((reg << 1) ^ poly) & mask if reg & (1 << (width - 1)) else (reg << 1) & mask
    if refl:
        reg = _reflect(reg, width)
    return reg ^ xorout


def xor_fold_scalar(data: bytes, seed: int = 0) -> int:
    """The xor-fold definition from its docstring, one key at a time."""
    data = data + b"\0" * (-len(data) % 4)
    x = seed
    for i in range(0, len(data), 4):
        x ^= int.from_bytes(data[i : i + 4], "big")
    return (x >> 16) ^ (x & 0xFFFF)


def random_tuples(rng: np.random.Generator, n_flows: int) -> FiveTuple:
    return FiveTuple(
        src_ip=rng.integers(0, 2**32, n_flows),
        dst_ip=rng.integers(0, 2**32, n_flows),
        src_port=rng.integers(0, 2**16, n_flows),
        dst_port=rng.integers(0, 2**16, n_flows),
        protocol=rng.integers(0, 2**8, n_flows),
    )


# --------------------------------------------------------------------------- CRC correctness


@pytest.mark.parametrize("name", CRC_NAMES)
def test_check_value_matches_reveng_catalogue(name):
    """Check value = CRC of b"123456789", from the RevEng catalogue (see module docstring)."""
    assert int(get_hash(name)(b"123456789")[0]) == REVENG[name][-1]


@pytest.mark.parametrize("name", CRC_NAMES)
def test_bitwise_reference_reproduces_catalogue(name):
    """Guards the reference itself: it must give the catalogue check value too."""
    assert crc_bitwise(b"123456789", name) == REVENG[name][-1]


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=0, max_size=64))
def test_crc32_equals_zlib(data):
    """CRC-32/ISO-HDLC is what zlib.crc32 computes; seed 0 must be the standard CRC."""
    assert int(get_hash("crc32")(np.frombuffer(data, dtype=np.uint8).reshape(1, -1), 0)[0]) == zlib.crc32(data)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(CRC_NAMES), st.binary(min_size=1, max_size=32), st.integers(0, 2**32 - 1))
def test_table_driven_equals_bitwise_reference_with_seed(name, data, seed):
    """Table-driven, seeded CRC equals the bit-at-a-time catalogue definition with init ^= seed."""
    assert int(get_hash(name)(data, seed)[0]) == crc_bitwise(data, name, seed)


@pytest.mark.parametrize("name", sorted(HASH_FUNCTIONS))
def test_vectorised_equals_per_row(name):
    """Hashing N keys at once equals hashing each row alone (and the scalar reference)."""
    rng = np.random.default_rng(11)
    tuples = random_tuples(rng, 257)
    seeds = rng.integers(0, 2**32, 257)
    keys = tuples.key_bytes()
    batch = hash_flows(tuples, name, seeds)
    scalar = crc_bitwise if name in REVENG else None
    for row, seed, h in zip(keys, seeds, batch, strict=True):
        assert int(get_hash(name)(row, int(seed))[0]) == int(h)
        if scalar is not None:
            assert scalar(bytes(row), name, int(seed)) == int(h)
        else:
            assert xor_fold_scalar(bytes(row), int(seed)) == int(h)
    assert batch.dtype == np.uint32
    assert int(batch.max()) < 2 ** HASH_FUNCTIONS[name].output_bits


def test_xor_fold_by_hand():
    """xor-fold of one tuple, worked out from the definition in its docstring.

    words: 0x0A000001, 0x0A000002, (0xC001 << 16 | 0x12B7) = 0xC00112B7, 0x11000000
    XOR: 0x0A000001 ^ 0x0A000002 = 0x00000003; ^ 0xC00112B7 = 0xC00112B4; ^ 0x11000000 = 0xD10112B4
    fold: 0xD101 ^ 0x12B4 = 0xC3B5
    """
    t = FiveTuple(0x0A000001, 0x0A000002, 0xC001, ROCEV2_UDP_DPORT, IPPROTO_UDP)
    assert int(hash_flows(t, "xor-fold")[0]) == 0xC3B5


# --------------------------------------------------------------------------- 5-tuple and registry


def test_key_bytes_layout_is_network_order():
    t = FiveTuple(
        src_ip=[0x01020304, 0xFFFFFFFF], dst_ip=0x05060708, src_port=0x090A, dst_port=0x0B0C, protocol=0x0D
    )
    keys = t.key_bytes()
    assert keys.shape == (2, 13) and keys.dtype == np.uint8
    assert bytes(keys[0]) == bytes(range(1, 14))
    assert bytes(keys[1][:4]) == b"\xff\xff\xff\xff"


def test_five_tuple_rejects_out_of_range_fields():
    with pytest.raises(RoutingError, match="src_port"):
        FiveTuple(1, 2, 70000, 4791, 17)
    with pytest.raises(RoutingError, match="protocol"):
        FiveTuple(1, 2, 3, 4791, -1)
    with pytest.raises(RoutingError, match="shapes"):
        FiveTuple([1, 2], [1, 2, 3], 3, 4, 5)


def test_unknown_hash_name_lists_known_ones():
    with pytest.raises(UnknownNameError) as info:
        get_hash("crc64")
    assert "crc64" in str(info.value)
    assert "crc32" in info.value.hint


def test_new_hash_registers_itself_and_duplicates_are_refused():
    @register_hash("test-src-port-low", output_bits=16)
    def _kernel(key_bytes, seed_u32):
        return (key_bytes[:, 9].astype(np.uint32) ^ seed_u32) & np.uint32(0xFFFF)

    try:
        t = FiveTuple(1, 2, [0x0102, 0x0103], 4, 5)
        assert hash_flows(t, "test-src-port-low").tolist() == [2, 3]
        with pytest.raises(ValueError, match="already registered"):
            register_hash("test-src-port-low", output_bits=16)(_kernel)
    finally:
        del HASH_FUNCTIONS["test-src-port-low"]


def test_seed_must_broadcast_to_flows():
    t = FiveTuple(1, 2, [3, 4, 5], 4, 5)
    with pytest.raises(RoutingError, match="seed_u32"):
        hash_flows(t, "crc32", seed=[1, 2])


# --------------------------------------------------------------------------- seeds and polarization


def test_seed_zero_is_standard_crc():
    data = b"gpuwait ecmp"
    assert int(get_hash("crc32")(data, 0)[0]) == zlib.crc32(data)


def test_different_seeds_give_different_selections():
    rng = np.random.default_rng(5)
    tuples = random_tuples(rng, 64)
    for name in HASH_FUNCTIONS:
        a = ecmp_select(hash_flows(tuples, name, seed=0x1234), 8)
        b = ecmp_select(hash_flows(tuples, name, seed=0x5678), 8)
        assert (a != b).any(), name


def test_same_seed_on_two_switches_gives_identical_choices():
    """Hash polarization: two switches with the same hash and seed pick the same index for every flow."""
    rng = np.random.default_rng(6)
    tuples = random_tuples(rng, 1000)
    leaf = ecmp_select(hash_flows(tuples, "crc32", seed=42), 8)
    spine = ecmp_select(hash_flows(tuples, "crc32", seed=42), 8)
    np.testing.assert_array_equal(leaf, spine)


def test_per_flow_seeds_equal_scalar_seeds():
    rng = np.random.default_rng(7)
    tuples = random_tuples(rng, 50)
    seeds = rng.integers(0, 2**32, 50)
    batch = hash_flows(tuples, "crc32c", seeds)
    for i in range(50):
        assert int(hash_flows(tuples, "crc32c", int(seeds[i]))[i]) == int(batch[i])


def test_crc16_uses_low_16_bits_of_seed():
    """Documented: the seed is masked to the CRC width (init XOR seed & 0xFFFF)."""
    t = random_tuples(np.random.default_rng(8), 10)
    for name in ("crc16-ccitt", "crc16-arc"):
        np.testing.assert_array_equal(hash_flows(t, name, 0x0001_0000 | 0x77), hash_flows(t, name, 0x77))


@pytest.mark.parametrize("name", sorted(HASH_FUNCTIONS))
def test_seed_xors_one_constant_into_every_hash(name):
    """Finding: these hashes are GF(2)-linear, so for equal-length keys
    hash(key, seed) == hash(key, 0) ^ c(seed), the same c for every flow."""
    tuples = random_tuples(np.random.default_rng(9), 500)
    diff = hash_flows(tuples, name, 0xDEADBEEF) ^ hash_flows(tuples, name, 0)
    assert np.unique(diff).size == 1


@pytest.mark.parametrize("name", sorted(HASH_FUNCTIONS))
@pytest.mark.parametrize("n_bytes", [0, 1, 13, 37])
def test_seed_term_is_the_seeds_share_of_the_hash(name, n_bytes):
    # routers._ecmp hashes each row's key once unseeded and XORs in each switch's seed term: the
    # same bits as hashing the key with the seed, for every key length (CRCs only: xor-fold has none).
    fn = get_hash(name)
    if fn.seed_term is None:
        assert not name.startswith("crc")
        return
    rng = np.random.default_rng(n_bytes)
    keys = rng.integers(0, 256, (400, n_bytes), dtype=np.uint8)
    seeds = rng.integers(0, 2**32, 400, dtype=np.uint32)
    np.testing.assert_array_equal(fn(keys, seeds), fn(keys, 0) ^ fn.seed_term(seeds, n_bytes))


def _collision_partition(selection: np.ndarray) -> set[frozenset[int]]:
    return {frozenset(np.flatnonzero(selection == b).tolist()) for b in np.unique(selection)}


@pytest.mark.parametrize("name", sorted(HASH_FUNCTIONS))
def test_reseeding_does_not_break_polarization_for_power_of_two_fanout(name):
    """Finding: with 2**k next hops and modulo, (h ^ c) % 2**k = (h % 2**k) ^ (c % 2**k): the seed
    only relabels next hops. The same flows collide on every switch whatever its seed."""
    tuples = random_tuples(np.random.default_rng(10), 40)
    sel_a = ecmp_select(hash_flows(tuples, name, seed=1), 8)
    sel_b = ecmp_select(hash_flows(tuples, name, seed=0x9E3779B9), 8)
    assert (sel_a != sel_b).any()
    assert np.unique(sel_a ^ sel_b).size == 1
    assert _collision_partition(sel_a) == _collision_partition(sel_b)


def test_reseeding_changes_collisions_for_other_fanouts_and_bit_slices_break_polarization():
    """Contrast to the finding above: n=6 (not a power of two) or another bit slice of the hash
    does give a different set of colliding flows."""
    tuples = random_tuples(np.random.default_rng(10), 40)
    h_a = hash_flows(tuples, "crc32", seed=1)
    h_b = hash_flows(tuples, "crc32", seed=0x9E3779B9)
    assert _collision_partition(ecmp_select(h_a, 6)) != _collision_partition(ecmp_select(h_b, 6))
    assert _collision_partition(ecmp_select(h_a, 8)) != _collision_partition(ecmp_select(h_a, 8, bit_offset=3))


# --------------------------------------------------------------------------- ecmp_select


def test_ecmp_select_modulo_and_per_flow_fanout():
    h = np.array([0, 7, 8, 0xFFFFFFFF], dtype=np.uint32)
    assert ecmp_select(h, 8).tolist() == [0, 7, 0, 0xFFFFFFFF % 8]
    assert ecmp_select(h, [1, 2, 3, 5]).tolist() == [0, 1, 2, 0xFFFFFFFF % 5]


def test_ecmp_select_bits_bias_is_exact():
    """A 16-entry member table over 6 next hops: hops 0-3 get 3 entries, hops 4-5 get 2."""
    h = np.arange(2**16, dtype=np.uint32)
    counts = np.bincount(ecmp_select(h, 6, bits=4), minlength=6)
    assert counts.tolist() == [3 * 4096] * 4 + [2 * 4096] * 2


def test_ecmp_select_bit_offset_takes_a_slice():
    assert ecmp_select(np.array([0xABCD], dtype=np.uint32), 16, bits=4, bit_offset=8).tolist() == [0xB]


def test_ecmp_select_rejects_bad_arguments():
    h = np.array([1], dtype=np.uint32)
    with pytest.raises(RoutingError):
        ecmp_select(h, 0)
    with pytest.raises(RoutingError):
        ecmp_select(h, 4, bits=0)
    with pytest.raises(RoutingError):
        ecmp_select(h, 4, bits=8, bit_offset=30)


# --------------------------------------------------------------------------- RoCEv2


def test_udp_sport_known_values_by_hand():
    """Worked through the ib_verbs.h formulas (rdma_calc_flow_label, rdma_flow_label_to_udp_sport).

    (a) lqpn=0x101, rqpn=0x102: v = 257*258 = 0x10302; v>>20 = 0, v>>40 = 0 -> fl = 0x10302;
        low = 0x0302, high = 0x10000, high>>14 = 0x4; low ^ 4 = 0x0306 -> sport 0xC306.
    (b) lqpn=0xABCDEF, rqpn=0x123456: v = 0xC379A59BA4A; v ^= v>>20 (0xC379A5) -> 0xC379A9AC3EF;
        v ^= v>>40 (0xC) -> 0xC379A9AC3E3; fl = 0xAC3E3; low = 0x03E3, high>>14 = 0x2B;
        0x3E3 ^ 0x2B = 0x3C8 -> sport 0xC3C8.
    (c) lqpn=rqpn=0xFFFFFF (exercises the >>40 fold): v = 0xFFFFFE000001; v ^= 0xFFFFFE0
        -> 0xFFFFF1FFFFE1; v ^= 0xFF -> 0xFFFFF1FFFF1E; fl = 0xFFF1E; low = 0x3F1E,
        high>>14 = 0x3F; 0x3F1E ^ 0x3F = 0x3F21 -> sport 0xFF21.
    """
    lqpn = np.array([0x101, 0xABCDEF, 0xFFFFFF])
    rqpn = np.array([0x102, 0x123456, 0xFFFFFF])
    assert roce_flow_label(lqpn, rqpn).tolist() == [0x10302, 0xAC3E3, 0xFFF1E]
    assert rocev2_udp_sport(lqpn, rqpn).tolist() == [0xC306, 0xC3C8, 0xFF21]


def test_udp_sport_uses_a_nonzero_flow_label_as_is():
    """rdma_get_udp_sport: a non-zero GRH flow label wins over the QPN-derived one."""
    assert rocev2_udp_sport([0x101, 0x101], [0x102, 0x102], flow_label=[0x1, 0]).tolist() == [0xC001, 0xC306]
    assert int(rocev2_udp_sport(0x101, 0x102, flow_label=0x2)) == 0xC002
    assert int(flow_label_to_udp_sport(0)) == 0xC000


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**24 - 1), st.integers(0, 2**24 - 1))
def test_udp_sport_matches_python_ints_symmetric_and_in_range(lqpn, rqpn):
    """numpy uint64 path equals arbitrary-precision Python ints; symmetric; in 0xC000..0xFFFF."""
    v = lqpn * rqpn
    v ^= v >> 20
    v ^= v >> 40
    fl = v & 0xFFFFF
    expected = ((fl & 0x3FFF) ^ ((fl & 0xFC000) >> 14)) | 0xC000
    got = rocev2_udp_sport(lqpn, rqpn)
    assert got.dtype == np.uint16
    assert int(got) == expected == int(rocev2_udp_sport(rqpn, lqpn))
    assert 0xC000 <= expected <= 0xFFFF


def test_udp_sports_spread_over_ports():
    """4096 connections x 4 QPs between two NICs (sequential QPNs): the ports spread widely."""
    local, remote = qp_numbers(np.zeros(4096 * 4, int), np.ones(4096 * 4, int), n_nics=2, seed=1)
    sports = rocev2_udp_sport(local, remote)
    assert int(sports.min()) >= 0xC000
    # 16384 pairs into 2**14 ports: a uniform map leaves ~(1 - 1/e) = 63% distinct.
    assert np.unique(sports).size > 0.55 * sports.size
    # ...and all 8 values of the low 3 bits (the bits a modulo-8 choice sees) are about equally used.
    low_counts = np.bincount(sports & 7, minlength=8)
    assert low_counts.min() > 0.9 * sports.size / 8


def test_qp_numbers_are_sequential_per_nic_from_a_seeded_base():
    local_nic, remote_nic = np.array([0, 1, 0, 0, 1]), np.array([1, 0, 1, 1, 0])
    local, remote = qp_numbers(local_nic, remote_nic, n_nics=2, seed=123)
    assert local.dtype == remote.dtype == np.uint32
    # NIC 0 opens QPs 0, 2, 3 and accepts 1, 4; it numbers each side consecutively from its base
    assert (np.diff(local[[0, 2, 3]]) == 1).all() and remote[4] == remote[1] + 1
    assert int(remote[1]) == int(local[0]) + 7  # the first accepted QP: base + 7
    assert 2 <= int(min(local.min(), remote.min())) and int(max(local.max(), remote.max())) < 2**24
    again = qp_numbers(local_nic, remote_nic, n_nics=2, seed=123)
    np.testing.assert_array_equal(local, again[0])
    assert int(qp_numbers(local_nic, remote_nic, n_nics=2, seed=124)[0][0]) != int(local[0])
    with pytest.raises(RoutingError):
        qp_numbers([0, 1], [1], n_nics=2)
    with pytest.raises(RoutingError):
        qp_numbers([0, 2], [1, 0], n_nics=2)


def test_ecmp_select_takes_one_bit_offset_per_flow():
    h = np.array([0xF0, 0xF0, 0xF0], dtype=np.uint32)
    assert ecmp_select(h, 16, bit_offset=np.array([0, 4, 6])).tolist() == [0, 0xF, 0x3]
    with pytest.raises(RoutingError):
        ecmp_select(h, 4, bit_offset=np.array([0, 32, 1]))


# --------------------------------------------------------------------------- balls into bins

N_TRIALS = 20_000
N_FLOWS = 8
N_HOPS = 8
EMPTY_BINS_CLOSED_FORM = N_HOPS * (1 - 1 / N_HOPS) ** N_FLOWS  # 2.7487
# Chi-square critical value, 4 degrees of freedom, alpha = 0.001 (standard chi-square table).
CHI2_4DOF_ALPHA_0001 = 18.467


def max_load_pmf_exact(n_balls: int, n_bins: int) -> list[Fraction]:
    """P(max load = k), k = 0..n_balls, by the EGF formula in the module docstring."""
    cdf = []
    for k in range(n_balls + 1):
        term = [Fraction(1, factorial(j)) if j <= k else Fraction(0) for j in range(n_balls + 1)]
        poly = [Fraction(1)] + [Fraction(0)] * n_balls
        for _ in range(n_bins):
            poly = [sum(poly[i] * term[d - i] for i in range(d + 1)) for d in range(n_balls + 1)]
        cdf.append(poly[n_balls] * factorial(n_balls) / Fraction(n_bins) ** n_balls)
    return [cdf[0]] + [cdf[k] - cdf[k - 1] for k in range(1, n_balls + 1)]


MAX_LOAD_PMF = [float(p) for p in max_load_pmf_exact(N_FLOWS, N_HOPS)]
# Cells for the chi-square test: max load 1, 2, 3, 4, >=5 (max load 0 is impossible).
CELL_EDGES = [1, 2, 3, 4, 5]


def _cells(pmf_or_freq) -> np.ndarray:
    p = np.asarray(pmf_or_freq, dtype=float)
    return np.array([p[1], p[2], p[3], p[4], p[5:].sum()])


def bins_statistics(selection: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean empty bins and the max-load frequency (index = load) over trials of N_FLOWS flows."""
    trial = np.repeat(np.arange(N_TRIALS), N_FLOWS)
    counts = np.bincount(trial * N_HOPS + selection, minlength=N_TRIALS * N_HOPS).reshape(N_TRIALS, N_HOPS)
    empty_mean = float((counts == 0).sum(axis=1).mean())
    max_load_freq = np.bincount(counts.max(axis=1), minlength=N_FLOWS + 1) / N_TRIALS
    return empty_mean, max_load_freq


def chi_square(max_load_freq: np.ndarray) -> float:
    observed = _cells(max_load_freq) * N_TRIALS
    expected = _cells(MAX_LOAD_PMF) * N_TRIALS
    return float(((observed - expected) ** 2 / expected).sum())


def total_variation(max_load_freq: np.ndarray) -> float:
    return 0.5 * float(np.abs(max_load_freq - np.asarray(MAX_LOAD_PMF)).sum())


def test_exact_max_load_distribution_agrees_with_closed_form_and_monte_carlo():
    """Validates the reference itself: sums to 1, E[max load] in (2, 3), and a numpy PRNG
    balls-into-bins run passes the same chi-square test the hashes must pass."""
    assert sum(max_load_pmf_exact(N_FLOWS, N_HOPS)) == 1
    assert 2 < sum(k * p for k, p in enumerate(MAX_LOAD_PMF)) < 3
    rng = np.random.default_rng(2024)
    empty_mean, freq = bins_statistics(rng.integers(0, N_HOPS, N_TRIALS * N_FLOWS))
    assert empty_mean == pytest.approx(EMPTY_BINS_CLOSED_FORM, rel=0.02)
    assert chi_square(freq) < CHI2_4DOF_ALPHA_0001


def _trial_seeds(rng: np.random.Generator) -> np.ndarray:
    # One switch seed per trial, shared by that trial's flows.
    return np.repeat(rng.integers(0, 2**32, N_TRIALS), N_FLOWS)


@pytest.mark.parametrize("name", sorted(HASH_FUNCTIONS))
@pytest.mark.parametrize("shape", ["random-5-tuples", "one-ip-pair-random-sports"])
def test_hash_is_balls_into_bins_on_random_flows(name, shape):
    """8 flows onto 8 next hops, 20,000 trials: empty bins match 8 (7/8)^8 = 2.7487 within 2%,
    and the max-load distribution passes a chi-square test against the exact distribution."""
    rng = np.random.default_rng(31)
    n = N_TRIALS * N_FLOWS
    if shape == "random-5-tuples":
        tuples = random_tuples(rng, n)
    else:  # RoCEv2 between two NICs: only the source port differs
        tuples = FiveTuple(0x0A000001, 0x0A000102, rng.integers(0, 2**16, n), ROCEV2_UDP_DPORT, IPPROTO_UDP)
    empty_mean, freq = bins_statistics(ecmp_select(hash_flows(tuples, name, _trial_seeds(rng)), N_HOPS))
    assert empty_mean == pytest.approx(EMPTY_BINS_CLOSED_FORM, rel=0.02)
    assert chi_square(freq) < CHI2_4DOF_ALPHA_0001


def _rocev2_sequential_qpn_flows(rng: np.random.Generator) -> FiveTuple:
    """Per trial: one NIC pair, 8 QPs with sequential QPNs on both ends (a NCCL connection)."""
    qp_index = np.tile(np.arange(N_FLOWS), N_TRIALS)
    local = np.repeat(rng.integers(2, 2**24 - N_FLOWS, N_TRIALS), N_FLOWS) + qp_index
    remote = np.repeat(rng.integers(2, 2**24 - N_FLOWS, N_TRIALS), N_FLOWS) + qp_index
    return FiveTuple(
        src_ip=np.repeat(rng.integers(0, 2**32, N_TRIALS), N_FLOWS),
        dst_ip=np.repeat(rng.integers(0, 2**32, N_TRIALS), N_FLOWS),
        src_port=rocev2_udp_sport(local, remote),
        dst_port=ROCEV2_UDP_DPORT,
        protocol=IPPROTO_UDP,
    )


@pytest.mark.parametrize("name", CRC_NAMES)
def test_crc_is_balls_into_bins_on_rocev2_sequential_qpns(name):
    """Realistic RoCEv2 sports (Linux QPN-derived, sequential QPNs): every CRC behaves like random."""
    rng = np.random.default_rng(32)
    tuples = _rocev2_sequential_qpn_flows(rng)
    empty_mean, freq = bins_statistics(ecmp_select(hash_flows(tuples, name, _trial_seeds(rng)), N_HOPS))
    assert empty_mean == pytest.approx(EMPTY_BINS_CLOSED_FORM, rel=0.02)
    assert chi_square(freq) < CHI2_4DOF_ALPHA_0001


def test_xor_fold_is_measurably_not_random_on_rocev2_sequential_qpns():
    """Finding: xor-fold passes the sport's low bits straight to the choice, and the Linux sports of
    sequential QP pairs are themselves slightly structured. Max load 2 comes out ~0.54 instead of
    0.498 and max load 3 ~0.365 instead of 0.409 (total variation ~0.04; crc32 on the same flows
    ~0.005). Empty bins are barely affected (+1%)."""
    rng = np.random.default_rng(32)
    tuples = _rocev2_sequential_qpn_flows(rng)
    seeds = _trial_seeds(rng)
    empty_xor, freq_xor = bins_statistics(ecmp_select(hash_flows(tuples, "xor-fold", seeds), N_HOPS))
    _, freq_crc = bins_statistics(ecmp_select(hash_flows(tuples, "crc32", seeds), N_HOPS))
    assert empty_xor == pytest.approx(EMPTY_BINS_CLOSED_FORM, rel=0.03)
    assert chi_square(freq_xor) > 5 * CHI2_4DOF_ALPHA_0001
    assert total_variation(freq_xor) > 0.025
    assert total_variation(freq_crc) < 0.015
    assert freq_xor[2] > MAX_LOAD_PMF[2] + 0.02


def _sequential_sport_flows(rng: np.random.Generator, stride: int) -> FiveTuple:
    """Per trial: one IP pair, sports base, base + stride, ..., base + 7*stride (random base)."""
    base = np.repeat(rng.integers(0, 2**16 - N_FLOWS * stride, N_TRIALS), N_FLOWS)
    sports = base + stride * np.tile(np.arange(N_FLOWS), N_TRIALS)
    return FiveTuple(0x0A000001, 0x0A000102, sports, ROCEV2_UDP_DPORT, IPPROTO_UDP)


def test_xor_fold_on_sequential_sports_is_perfectly_balanced():
    """Finding: 8 consecutive sports differ in their low 3 bits, which xor-fold passes through, so
    every next hop gets exactly one flow, every time: not random, better than random."""
    rng = np.random.default_rng(33)
    empty_mean, freq = bins_statistics(
        ecmp_select(hash_flows(_sequential_sport_flows(rng, 1), "xor-fold", _trial_seeds(rng)), N_HOPS)
    )
    assert empty_mean == 0.0
    assert freq[1] == 1.0


def test_xor_fold_on_sports_strided_by_fanout_all_collide():
    """Finding: sports that differ by a multiple of the fan-out (stride 8) share their low 3 bits,
    so all 8 flows land on one next hop, every time."""
    rng = np.random.default_rng(34)
    empty_mean, freq = bins_statistics(
        ecmp_select(hash_flows(_sequential_sport_flows(rng, 8), "xor-fold", _trial_seeds(rng)), N_HOPS)
    )
    assert empty_mean == N_HOPS - 1
    assert freq[N_FLOWS] == 1.0


@pytest.mark.parametrize("name", CRC_NAMES)
def test_crcs_are_not_random_on_sequential_sports_either(name):
    """Finding: CRCs are linear too. On 8 consecutive sports the low 3 bits of the hash are an
    affine image of the sports' low bits, so empty bins are far from 2.7487 — below it for crc32
    (~1.2), above it for crc32c (~3.9), crc16-ccitt (~3.3) and crc16-arc (~4.6)."""
    rng = np.random.default_rng(35)
    empty_mean, _ = bins_statistics(
        ecmp_select(hash_flows(_sequential_sport_flows(rng, 1), name, _trial_seeds(rng)), N_HOPS)
    )
    assert abs(empty_mean - EMPTY_BINS_CLOSED_FORM) > 0.15 * EMPTY_BINS_CLOSED_FORM


# --------------------------------------------------------------------------- docs


def test_docstring_examples_run():
    """The numpydoc Examples in the module are executable documentation."""
    result = doctest.testmod(hashing, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 10
    assert result.failed == 0


def test_public_names_exist():
    for name in hashing.__all__:
        assert hasattr(hashing, name), name
    assert isinstance(CrcParams(8, 0x07, 0, 0, reflected=False).table(), np.ndarray)
