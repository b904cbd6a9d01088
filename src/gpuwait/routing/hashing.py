"""ECMP hashing as switches do it, vectorised over many flows at once.

A switch picks one of its equal-cost next hops by hashing a packet's 5-tuple and
reducing the hash to an index. This module holds the pieces of that pipeline, each a
pure function over numpy arrays (one element per flow):

1. :class:`FiveTuple` -> :meth:`FiveTuple.key_bytes`: the 13-byte hash key per flow.
2. A registry of hash functions (:data:`HASH_FUNCTIONS`, :func:`register_hash`,
   :func:`get_hash`): ``crc32``, ``crc32c``, ``crc16-ccitt``, ``crc16-arc``, ``xor-fold``.
3. :func:`ecmp_select`: hash -> next-hop index (modulo, optionally on a bit slice).
4. RoCEv2 specifics: :func:`rocev2_udp_sport` (the UDP source port Linux derives from
   the QP numbers) and :func:`qp_numbers` (deterministic QP numbers of both ends of each QP).

The switch seed
---------------
Real ASICs mix a configurable per-switch seed into the hash state so that different
switches can make different choices for the same flow. Here the seed is defined as
``initial CRC state = standard init XOR seed`` (for 16-bit CRCs only the low 16 bits
of the seed are used; for ``xor-fold`` the seed is XORed into the 32-bit word before
folding). A seed of 0 gives exactly the standard CRC, so ``crc32`` with seed 0 equals
:func:`zlib.crc32`. The same seed on every switch reproduces *hash polarization*: a
flow's hash, hence its choice, is the same at every hop.

.. warning::
   CRCs and ``xor-fold`` are affine over GF(2) (linear up to a constant), so for keys of equal length the seeded
   hash is ``hash(key, 0) XOR c(seed)``: the seed XORs the same constant into every
   flow's hash. With a power-of-two number of next hops and modulo selection,
   ``(h ^ c) % 2**k == (h % 2**k) ^ (c % 2**k)``, i.e. the seed only *relabels* the
   next hops: flows that collide on one switch collide on every switch, whatever
   their seeds. Re-seeding does not break polarization for power-of-two fan-outs;
   a different bit slice (``ecmp_select(..., bit_offset=...)``) or a different hash
   function per tier does. With a non-power-of-two fan-out the seed does change which
   flows collide.

Uniformity (measured in tests/routing/test_hashing.py)
------------------------------------------------------
8 flows onto 8 next hops, 20,000 trials: on random 5-tuples, and on one IP pair with
random source ports, every hash here matches balls-into-bins (empty bins
8·(7/8)^8 = 2.749, exact max-load distribution). On *structured* keys none does,
because all are affine: 8 consecutive source ports give xor-fold a perfect 1-per-hop
spread every time, and ports strided by 8 put all 8 flows on one hop every time;
CRCs on consecutive ports give ~1.2 (crc32) to ~4.6 (crc16-arc) empty hops instead
of 2.75. With the Linux RoCEv2 source ports of sequential QP pairs, the CRCs look
random again, but xor-fold's max-load distribution stays measurably off
(P(max load = 2) ~0.54 vs 0.50).

Speed
-----
Table-driven CRCs loop over the 13 key bytes (not over flows). Measured with
``time.perf_counter`` on one core (numpy 2.4, Python 3.11), :func:`hash_flows` on
1,000,000 random tuples, serialisation included, warm: ``crc32`` ~0.15 s,
``crc32c`` / ``crc16-*`` ~0.10 s, ``xor-fold`` ~0.08 s; serialising alone ~0.04 s,
and the 13-step CRC loop itself ~0.05 s.

Examples
--------
>>> import numpy as np
>>> flows = FiveTuple(src_ip=0x0A000001, dst_ip=0x0A000102,
...                   src_port=np.array([49152, 49153, 49154]), dst_port=ROCEV2_UDP_DPORT,
...                   protocol=IPPROTO_UDP)
>>> h = hash_flows(flows, "crc32", seed=0)
>>> ecmp_select(h, 4).tolist()  # next hop per flow
[3, 2, 0]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
from numpy.typing import ArrayLike, NDArray

from gpuwait.arrays import rank_within_groups
from gpuwait.errors import RoutingError, UnknownNameError
from gpuwait.rng import SeedLike, as_generator

__all__ = [
    "FIVE_TUPLE_KEY_BYTES",
    "HASH_FUNCTIONS",
    "IPPROTO_TCP",
    "IPPROTO_UDP",
    "ROCEV2_UDP_DPORT",
    "CrcParams",
    "FiveTuple",
    "HashFunction",
    "ecmp_select",
    "get_hash",
    "hash_flows",
    "qp_numbers",
    "register_crc",
    "register_hash",
    "roce_flow_label",
    "flow_label_to_udp_sport",
    "rocev2_udp_sport",
]

#: Length of the serialised 5-tuple: 4 + 4 + 2 + 2 + 1 bytes.
FIVE_TUPLE_KEY_BYTES = 13
#: IANA-assigned UDP destination port of RoCEv2.
ROCEV2_UDP_DPORT = 4791
IPPROTO_TCP = 6
IPPROTO_UDP = 17

# Bounds from include/rdma/ib_verbs.h (IB_ROCE_UDP_ENCAP_VALID_PORT_MIN, IB_GRH_FLOWLABEL_MASK).
_ROCE_UDP_SPORT_MIN = 0xC000
_GRH_FLOW_LABEL_MASK = 0xFFFFF
_QPN_BITS = 24
_QPN_MASK = (1 << _QPN_BITS) - 1
# a NIC's random QPN base leaves room for this many QPs below the top of the 24-bit space
_QPN_ROOM = 1 << 16
# the remote end of a NIC's j-th accepted QP is numbered base + 7 + j (see qp_numbers)
_REMOTE_QPN_SKIP = 7
# QPN 0 (SMI) and 1 (GSI) are reserved by the InfiniBand spec; allocation starts above them.
_QPN_FIRST_ALLOCATABLE = 2


# --------------------------------------------------------------------------- 5-tuples


def _as_unsigned(name: str, values: ArrayLike, bits: int, dtype: type[np.unsignedinteger]) -> NDArray:
    """Check ``values`` fit in ``bits`` unsigned bits, then cast; a silent wrap would hide a bug."""
    arr = np.asarray(values)
    if arr.dtype.kind not in "iub":
        raise RoutingError(f"{name}: got dtype {arr.dtype}; expected integers")
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= 1 << bits):
        raise RoutingError(
            f"{name}: got values in [{int(arr.min())}, {int(arr.max())}]; expected 0..{(1 << bits) - 1}",
            hint=f"{name} is a {bits}-bit field",
        )
    return arr.astype(dtype, copy=False)


@dataclass(frozen=True)
class FiveTuple:
    """Arrays of IPv4 5-tuples, one element per flow.

    Scalars broadcast against arrays, so a constant field (``dst_port=4791``) need not be
    repeated. After construction every field is a 1-D array of the same length with the
    dtype of its header field.

    Parameters
    ----------
    src_ip, dst_ip : array_like of int
        IPv4 addresses as 32-bit integers (``10.0.0.1`` is ``0x0A000001``).
    src_port, dst_port : array_like of int
        16-bit L4 ports.
    protocol : array_like of int
        8-bit IP protocol number (:data:`IPPROTO_UDP` for RoCEv2).

    Examples
    --------
    >>> t = FiveTuple(src_ip=[0x0A000001, 0x0A000002], dst_ip=0x0A000003,
    ...               src_port=49152, dst_port=ROCEV2_UDP_DPORT, protocol=IPPROTO_UDP)
    >>> len(t), t.dst_ip.dtype.name, t.src_port.dtype.name
    (2, 'uint32', 'uint16')
    """

    src_ip: NDArray[np.uint32]
    dst_ip: NDArray[np.uint32]
    src_port: NDArray[np.uint16]
    dst_port: NDArray[np.uint16]
    protocol: NDArray[np.uint8]

    def __post_init__(self) -> None:
        fields_ = {
            "src_ip": _as_unsigned("src_ip", self.src_ip, 32, np.uint32),
            "dst_ip": _as_unsigned("dst_ip", self.dst_ip, 32, np.uint32),
            "src_port": _as_unsigned("src_port", self.src_port, 16, np.uint16),
            "dst_port": _as_unsigned("dst_port", self.dst_port, 16, np.uint16),
            "protocol": _as_unsigned("protocol", self.protocol, 8, np.uint8),
        }
        try:
            shaped = np.broadcast_arrays(*fields_.values())
        except ValueError as err:
            shapes = {k: v.shape for k, v in fields_.items()}
            raise RoutingError(f"5-tuple fields have incompatible shapes {shapes}") from err
        for name, arr in zip(fields_, shaped, strict=True):
            # Frozen dataclass: object.__setattr__ is the sanctioned way to normalise in __post_init__.
            object.__setattr__(self, name, np.ascontiguousarray(arr).reshape(-1))

    def __len__(self) -> int:
        return int(self.src_ip.shape[0])

    def key_bytes(self) -> NDArray[np.uint8]:
        """Serialise to the hash key: shape ``(N, 13)``, network byte order.

        Layout: src ip (4 bytes), dst ip (4), src port (2), dst port (2), protocol (1),
        each big-endian, which is the order the fields appear on the wire.

        Examples
        --------
        >>> t = FiveTuple(src_ip=0x0A000001, dst_ip=0xC0A80102, src_port=0xC000,
        ...               dst_port=4791, protocol=17)
        >>> bytes(t.key_bytes()[0]).hex()
        '0a000001c0a80102c00012b711'
        """
        n_flows = len(self)
        key = np.empty((n_flows, FIVE_TUPLE_KEY_BYTES), dtype=np.uint8)
        # '>u4' views give big-endian bytes without a per-byte shift loop.
        key[:, 0:4] = self.src_ip.astype(">u4").view(np.uint8).reshape(n_flows, 4)
        key[:, 4:8] = self.dst_ip.astype(">u4").view(np.uint8).reshape(n_flows, 4)
        key[:, 8:10] = self.src_port.astype(">u2").view(np.uint8).reshape(n_flows, 2)
        key[:, 10:12] = self.dst_port.astype(">u2").view(np.uint8).reshape(n_flows, 2)
        key[:, 12] = self.protocol
        return key


# --------------------------------------------------------------------------- registry

#: A hash kernel: ``(key_bytes (N, K) uint8, seed_u32 (N,) uint32) -> (N,) uint32``.
HashKernel = Callable[[NDArray[np.uint8], NDArray[np.uint32]], NDArray[np.uint32]]


@dataclass(frozen=True)
class HashFunction:
    """A named switch hash: a vectorised kernel plus what callers need to know about it.

    Call it as ``fn(key_bytes, seed_u32=0)``; ``key_bytes`` is ``(N, K)`` uint8 (or a
    1-D array / ``bytes`` for a single key) and ``seed_u32`` a scalar or one seed per row.

    Attributes
    ----------
    name : str
        Registry name.
    output_bits : int
        Width of the hash; values are below ``2**output_bits`` (returned as uint32).
    kernel : HashKernel
        The vectorised implementation; receives validated, broadcast inputs.
    description : str
        One line for listings.
    """

    name: str
    output_bits: int
    kernel: HashKernel = field(repr=False)
    description: str = ""
    # For a hash affine in its seed (a CRC): (seed_u32 (N,), key length in bytes) -> what XOR-ing the
    # seed into the state adds to the unseeded hash, so ``fn(keys, s) == fn(keys, 0) ^ seed_term(s, K)``
    seed_term: Callable[[NDArray[np.uint32], int], NDArray[np.uint32]] | None = field(default=None, repr=False)

    def __call__(self, key_bytes: ArrayLike | bytes, seed_u32: ArrayLike = 0) -> NDArray[np.uint32]:
        if isinstance(key_bytes, (bytes, bytearray)):
            key_bytes = np.frombuffer(bytes(key_bytes), dtype=np.uint8)
        keys = np.asarray(key_bytes)
        if keys.dtype != np.uint8:
            raise RoutingError(f"key_bytes: got dtype {keys.dtype}; expected uint8")
        if keys.ndim == 1:
            keys = keys[np.newaxis, :]
        if keys.ndim != 2:
            raise RoutingError(f"key_bytes: got shape {keys.shape}; expected (n_flows, n_bytes)")
        seeds = _as_unsigned("seed_u32", seed_u32, 32, np.uint32)
        try:
            seeds = np.broadcast_to(seeds, (keys.shape[0],))
        except ValueError as err:
            raise RoutingError(
                f"seed_u32: got shape {seeds.shape}; expected a scalar or one seed per flow ({keys.shape[0]})"
            ) from err
        return self.kernel(keys, seeds)


#: Every known hash by name. Add one with :func:`register_hash` or :func:`register_crc`.
HASH_FUNCTIONS: dict[str, HashFunction] = {}


def register_hash(name: str, *, output_bits: int, description: str = "") -> Callable[[HashKernel], HashKernel]:
    """Decorator: register a vectorised hash kernel under ``name``.

    The kernel receives ``key_bytes`` as ``(N, K)`` uint8 and ``seed_u32`` as ``(N,)``
    uint32 (already validated and broadcast) and returns ``(N,)`` uint32 hashes below
    ``2**output_bits``. Registering adds the hash everywhere a hash name is accepted;
    no other file changes.

    Examples
    --------
    >>> @register_hash("doc-first-byte", output_bits=8, description="demo only")
    ... def _first_byte(key_bytes, seed_u32):
    ...     return (key_bytes[:, 0].astype(np.uint32) ^ seed_u32) & 0xFF
    >>> get_hash("doc-first-byte")(b"\\x07abc").tolist()
    [7]
    >>> del HASH_FUNCTIONS["doc-first-byte"]
    """
    if name in HASH_FUNCTIONS:
        # Silently replacing a hash would change results of every scenario naming it.
        raise ValueError(f"hash {name!r} is already registered")

    def decorate(kernel: HashKernel) -> HashKernel:
        HASH_FUNCTIONS[name] = HashFunction(name, output_bits, kernel, description)
        return kernel

    return decorate


def get_hash(name: str) -> HashFunction:
    """Look up a registered hash by name.

    Raises
    ------
    UnknownNameError
        If ``name`` is not registered; the hint lists the known names.

    Examples
    --------
    >>> hex(int(get_hash("crc32")(b"123456789")[0]))
    '0xcbf43926'
    """
    try:
        return HASH_FUNCTIONS[name]
    except KeyError:
        raise UnknownNameError(
            f"unknown hash {name!r}", hint="known hashes: " + ", ".join(sorted(HASH_FUNCTIONS))
        ) from None


# --------------------------------------------------------------------------- CRCs


@dataclass(frozen=True)
class CrcParams:
    """A CRC in the Rocksoft/RevEng parameter model (``refin == refout`` only).

    Attributes
    ----------
    width_bits : int
        8..32.
    poly : int
        Generator polynomial. For ``reflected`` CRCs give it bit-reversed (``0xEDB88320``
        for CRC-32), which is the form a right-shifting table uses.
    init, xorout : int
        Initial register value and final XOR. For ``reflected`` CRCs ``init`` is the
        register of the right-shifting form, i.e. the catalogue init bit-reversed (all
        catalogue CRCs here use 0 or all-ones, for which the two agree).
    reflected : bool
        Bytes enter LSB first and the register shifts right (refin = refout = true).
    """

    width_bits: int
    poly: int
    init: int
    xorout: int
    reflected: bool

    def table(self) -> NDArray[np.uint32]:
        """The 256-entry byte-at-a-time table for this CRC."""
        mask = (1 << self.width_bits) - 1
        top_bit = 1 << (self.width_bits - 1)
        entries = []
        for byte in range(256):
            if self.reflected:
                reg = byte
                for _ in range(8):
                    reg = (reg >> 1) ^ self.poly if reg & 1 else reg >> 1
            else:
                reg = byte << (self.width_bits - 8)
                for _ in range(8):
                    reg = ((reg << 1) ^ self.poly) & mask if reg & top_bit else (reg << 1) & mask
            entries.append(reg)
        table = np.array(entries, dtype=np.uint32)
        table.flags.writeable = False
        return table


def _crc_seed_term(params: CrcParams) -> Callable[[NDArray[np.uint32], int], NDArray[np.uint32]]:
    """A table-driven CRC is linear over GF(2) in its state and its bytes together (each step XORs
    table entries, and the table is linear), so the state after a key from ``init ^ seed`` is the
    state after it from ``init`` XOR the state after as many zero bytes from ``seed``: this term."""
    table = params.table()
    mask = np.uint32((1 << params.width_bits) - 1)
    top_shift = np.uint32(params.width_bits - 8)
    eight = np.uint32(8)

    def seed_term(seed_u32: NDArray[np.uint32], n_bytes: int) -> NDArray[np.uint32]:
        state = np.asarray(seed_u32, np.uint32) & mask
        for _ in range(n_bytes):
            if params.reflected:
                state = table[state & 0xFF] ^ (state >> eight)
            else:
                state = table[(state >> top_shift) & 0xFF] ^ ((state << eight) & mask)
        return state

    return seed_term


def _crc_kernel(params: CrcParams) -> HashKernel:
    """Build a vectorised table-driven kernel; the table is computed once, here."""
    table = params.table()
    mask = np.uint32((1 << params.width_bits) - 1)
    init = np.uint32(params.init)
    xorout = np.uint32(params.xorout)
    top_shift = np.uint32(params.width_bits - 8)
    eight = np.uint32(8)

    def kernel(key_bytes: NDArray[np.uint8], seed_u32: NDArray[np.uint32]) -> NDArray[np.uint32]:
        # One contiguous uint32 row per key byte: the per-byte loop then touches
        # contiguous memory and never mixes dtypes.
        columns = np.ascontiguousarray(key_bytes.T, dtype=np.uint32)
        state = (init ^ seed_u32) & mask
        if params.reflected:
            for column in columns:
                state = table[(state ^ column) & 0xFF] ^ (state >> eight)
        else:
            for column in columns:
                state = table[((state >> top_shift) ^ column) & 0xFF] ^ ((state << eight) & mask)
        return state ^ xorout

    return kernel


def register_crc(name: str, params: CrcParams, description: str = "") -> None:
    """Register a table-driven CRC as a hash.

    The seed is XORed into ``params.init`` (masked to the CRC width), so seed 0 is the
    standard CRC.

    Examples
    --------
    >>> register_crc("doc-crc16-xmodem", CrcParams(16, 0x1021, 0x0000, 0x0000, reflected=False))
    >>> hex(int(get_hash("doc-crc16-xmodem")(b"123456789")[0]))  # RevEng check value
    '0x31c3'
    >>> del HASH_FUNCTIONS["doc-crc16-xmodem"]
    """
    register_hash(name, output_bits=params.width_bits, description=description)(_crc_kernel(params))
    HASH_FUNCTIONS[name] = replace(HASH_FUNCTIONS[name], seed_term=_crc_seed_term(params))


# Parameters and check values (CRC of b"123456789") from the CRC RevEng catalogue,
# https://reveng.sourceforge.io/crc-catalogue/ .
register_crc(
    "crc32",
    CrcParams(32, 0xEDB88320, 0xFFFFFFFF, 0xFFFFFFFF, reflected=True),
    "CRC-32/ISO-HDLC (IEEE 802.3, zlib); check 0xCBF43926",
)
register_crc(
    "crc32c",
    CrcParams(32, 0x82F63B78, 0xFFFFFFFF, 0xFFFFFFFF, reflected=True),
    "CRC-32/ISCSI (Castagnoli); check 0xE3069283",
)
register_crc(
    "crc16-ccitt",
    CrcParams(16, 0x1021, 0xFFFF, 0x0000, reflected=False),
    "CRC-16/CCITT-FALSE (IBM-3740); check 0x29B1",
)
register_crc(
    "crc16-arc",
    CrcParams(16, 0xA001, 0x0000, 0x0000, reflected=True),
    "CRC-16/ARC (IBM); check 0xBB3D",
)


@register_hash("xor-fold", output_bits=16, description="XOR of 32-bit big-endian key words, folded to 16 bits")
def _xor_fold(key_bytes: NDArray[np.uint8], seed_u32: NDArray[np.uint32]) -> NDArray[np.uint32]:
    """XOR-fold: the cheap hash of some switches.

    Precisely: zero-pad the key at the end to a multiple of 4 bytes; read it as
    big-endian 32-bit words ``w_0 .. w_{m-1}``; ``x = w_0 ^ ... ^ w_{m-1} ^ seed``;
    hash ``= (x >> 16) ^ (x & 0xFFFF)``. For the 13-byte 5-tuple key the words are
    ``src_ip``, ``dst_ip``, ``src_port << 16 | dst_port`` and ``protocol << 24``, so the
    hash is the XOR of the 16-bit halves of the IPs and both ports (and the protocol
    in the high byte).

    Pitfall: it is linear and symmetric (swapping src/dst, or XORing the same value
    into both IPs, leaves the hash unchanged) and the low bits of the ports go straight
    to the low bits of the hash, so structured traffic (sequential ports, ports
    strided by the fan-out) maps to next hops in a structured, non-random way.
    """
    n_flows, n_bytes = key_bytes.shape
    n_words = -(-n_bytes // 4)
    padded = np.zeros((n_flows, 4 * n_words), dtype=np.uint8)
    padded[:, :n_bytes] = key_bytes
    words = padded.view(">u4").astype(np.uint32)
    x = np.bitwise_xor.reduce(words, axis=1) ^ seed_u32 if n_words else seed_u32.copy()
    return ((x >> np.uint32(16)) ^ (x & np.uint32(0xFFFF))).astype(np.uint32)


# --------------------------------------------------------------------------- selection


def ecmp_select(
    hash_u32: ArrayLike, n_choices: ArrayLike, bits: int | None = None, *, bit_offset: ArrayLike = 0
) -> NDArray[np.int64]:
    """Reduce hashes to next-hop indices: ``((hash >> bit_offset) & (2**bits - 1)) % n``.

    Parameters
    ----------
    hash_u32 : array_like of uint32
        One hash per flow.
    n_choices : int or array_like of int
        Number of equal-cost next hops (>= 1), a scalar or one per flow.
    bits : int, optional
        Use only ``bits`` bits of the hash, as ASICs that index an ECMP member table of
        ``2**bits`` entries do. ``None`` (default) uses the whole hash: plain modulo.
        Pitfall: when ``2**bits`` is not a multiple of ``n``, the low indices get
        ``ceil(2**bits / n)`` of the ``2**bits`` hash values and the others
        ``floor(...)``: a real load imbalance (e.g. ``bits=4, n=6``: 3/16 vs 2/16).
    bit_offset : int or array_like of int, keyword-only
        Drop this many low bits first (a scalar or one offset per flow). Taking different bit slices at different tiers
        is how some ASICs break polarization that re-seeding cannot (see module doc).

    Returns
    -------
    ndarray of int64
        Index in ``[0, n_choices)`` per flow.

    Examples
    --------
    >>> ecmp_select(np.array([10, 11, 12], dtype=np.uint32), 4).tolist()
    [2, 3, 0]
    >>> ecmp_select(np.array([10, 11, 12], dtype=np.uint32), [2, 3, 5]).tolist()
    [0, 2, 2]
    >>> ecmp_select(np.array([0xF0], dtype=np.uint32), 6, bits=4, bit_offset=4).tolist()
    [3]
    """
    hashes = _as_unsigned("hash_u32", hash_u32, 32, np.uint32).astype(np.int64)
    n = np.asarray(n_choices)
    if n.dtype.kind not in "iu" or (n.size and int(n.min()) < 1):
        raise RoutingError(
            f"n_choices: got {n_choices!r}; expected integers >= 1", hint="a switch with no next hop cannot forward"
        )
    offset = np.asarray(bit_offset)
    if offset.dtype.kind not in "iu" or (offset.size and not 0 <= int(offset.min()) <= int(offset.max()) < 32):
        raise RoutingError(f"bit_offset: got {bit_offset!r}; expected 0..31")
    # no copies of int64 inputs, and hashes (a copy of its own) shifted and reduced in place unless offset or n
    # widens it: a walk's hop selects among the candidates of millions of states
    offset = offset.astype(np.int64, copy=False)
    n = n.astype(np.int64, copy=False)
    out = hashes if hashes.ndim and np.broadcast_shapes(hashes.shape, offset.shape, n.shape) == hashes.shape else None
    hashes = np.right_shift(hashes, offset, out=out)
    if bits is not None:
        if not 1 <= bits <= 32 - int(offset.max(initial=0)):
            top = 32 - int(offset.max(initial=0))
            raise RoutingError(f"bits: got {bits}; expected 1..{top} with bit_offset={bit_offset!r}")
        hashes &= (1 << bits) - 1
    return np.remainder(hashes, n, out=out)


def hash_flows(tuples: FiveTuple, hash_name: str = "crc32", seed: ArrayLike = 0) -> NDArray[np.uint32]:
    """Hash every flow's 5-tuple with a registered hash and a switch seed.

    Parameters
    ----------
    tuples : FiveTuple
        The flows.
    hash_name : str
        A key of :data:`HASH_FUNCTIONS`.
    seed : int or array_like of int
        32-bit switch seed (``init XOR seed``; 0 = standard CRC), scalar or one per flow.

    Returns
    -------
    ndarray of uint32
        One hash per flow.

    Examples
    --------
    >>> t = FiveTuple(src_ip=0x0A000001, dst_ip=0x0A000002, src_port=[50000, 50001],
    ...               dst_port=ROCEV2_UDP_DPORT, protocol=IPPROTO_UDP)
    >>> hash_flows(t, "crc16-ccitt", seed=0).dtype.name
    'uint32'
    >>> bool((hash_flows(t, "crc32", seed=7) != hash_flows(t, "crc32", seed=0)).all())
    True
    """
    return get_hash(hash_name)(tuples.key_bytes(), seed)


# --------------------------------------------------------------------------- RoCEv2


def roce_flow_label(local_qpn: ArrayLike, remote_qpn: ArrayLike) -> NDArray[np.uint32]:
    """The 20-bit flow label Linux derives from a QP pair (``rdma_calc_flow_label``).

    ``v = (u64)lqpn * rqpn; v ^= v >> 20; v ^= v >> 40; label = v & 0xFFFFF`` — from
    ``include/rdma/ib_verbs.h`` (added in "IB/core: Add rdma_calc_flow_label", Linux
    5.5; the same code is copied into drivers such as irdma's ``kc_rdma_calc_flow_label``).
    Symmetric in the two QPNs so both ends compute the same label. The product of two
    32-bit values fits in 64 bits, so there is no wraparound to emulate.

    Examples
    --------
    >>> hex(int(roce_flow_label(0x101, 0x102)))  # 257 * 258 = 0x10302, nothing to fold
    '0x10302'
    """
    lqpn = _as_unsigned("local_qpn", local_qpn, 32, np.uint32).astype(np.uint64)
    rqpn = _as_unsigned("remote_qpn", remote_qpn, 32, np.uint32).astype(np.uint64)
    v = lqpn * rqpn
    v ^= v >> np.uint64(20)
    v ^= v >> np.uint64(40)
    return (v & np.uint64(_GRH_FLOW_LABEL_MASK)).astype(np.uint32)


def flow_label_to_udp_sport(flow_label: ArrayLike) -> NDArray[np.uint16]:
    """RoCEv2 UDP source port from a 20-bit flow label (``rdma_flow_label_to_udp_sport``).

    ``low = fl & 0x3FFF; high = fl & 0xFC000; low ^= high >> 14; sport = low | 0xC000`` —
    from ``include/rdma/ib_verbs.h`` (Linux 5.5+). The result is always in
    ``0xC000..0xFFFF``: only 14 bits of entropy reach the switch.

    Examples
    --------
    >>> hex(int(flow_label_to_udp_sport(0x10302)))
    '0xc306'
    """
    fl = _as_unsigned("flow_label", flow_label, 32, np.uint32)
    low = fl & np.uint32(0x03FFF)
    high = fl & np.uint32(0xFC000)
    low ^= high >> np.uint32(14)
    return (low | np.uint32(_ROCE_UDP_SPORT_MIN)).astype(np.uint16)


def rocev2_udp_sport(local_qpn: ArrayLike, remote_qpn: ArrayLike, flow_label: ArrayLike = 0) -> NDArray[np.uint16]:
    """UDP source port of a RoCEv2 QP as Linux picks it (``rdma_get_udp_sport``).

    A non-zero GRH ``flow_label`` is used as is; a zero one is computed from the QP pair
    with :func:`roce_flow_label`. Vectorised over arrays of QPNs (broadcasting).

    Parameters
    ----------
    local_qpn, remote_qpn : array_like of int
        24-bit QP numbers of the two ends.
    flow_label : array_like of int
        20-bit GRH flow label; 0 (default) means "derive from the QPNs".

    Returns
    -------
    ndarray of uint16
        Source ports in ``0xC000..0xFFFF``; the destination port is :data:`ROCEV2_UDP_DPORT`.

    Examples
    --------
    >>> rocev2_udp_sport([0x101, 0x102], [0x102, 0x101]).tolist()  # symmetric
    [49926, 49926]
    """
    computed = roce_flow_label(local_qpn, remote_qpn)
    given = _as_unsigned("flow_label", flow_label, 20, np.uint32)
    return flow_label_to_udp_sport(np.where(given != 0, given, computed))


# From this many QPs their opening ranks are counted in compiled code (below, numpy's stable sort)
_COMPILED_MIN_IDS = 1 << 18


def _opening_rank(ids: NDArray[np.int64], n_ids: int) -> NDArray[np.int64]:
    """:func:`~gpuwait.arrays.rank_within_groups` of ids in ``0..n_ids-1``: how many earlier elements share
    each one's id, counted in one compiled pass with a counter per id (8.4 M QPs at 131,072 GPUs: no sort).
    Fewer ids are ranked by numpy's sort, which loads no numba."""
    if len(ids) < _COMPILED_MIN_IDS or n_ids > 1 << 32:
        return rank_within_groups(ids)
    from gpuwait.routing.kernels import running_count  # numba, loaded on first use

    return running_count(np.ascontiguousarray(ids, np.int64), n_ids)


def qp_numbers(local_nic: ArrayLike, remote_nic: ArrayLike, n_nics: int,
               seed: SeedLike = None) -> tuple[NDArray[np.uint32], NDArray[np.uint32]]:
    """24-bit QP numbers of both ends of QPs opened in array order, one QP per element.

    Models the QPs NCCL opens per connection (``NCCL_IB_QPS_PER_CONNECTION``). An HCA's QPN
    allocator hands out consecutive free numbers after whatever the NIC used before, so QPNs
    are allocated *sequentially from a random base* per NIC: the base, uniform over
    ``[2, 2**24 - 2**16)`` (above the QPNs 0 and 1 the InfiniBand spec reserves, with room for
    65,536 QPs before the 24-bit wrap), stands for that unknown history. QP ``i`` is the k-th
    QP its local NIC opens (counting in array order) and gets ``base[local_nic[i]] + k``; it is
    the j-th QP its remote NIC accepts and gets ``base[remote_nic[i]] + 7 + j`` there. The
    skip of 7 has no hardware source: it only keeps a NIC's j-th accepted QP from taking the
    number of its j-th opened one (the two sides are numbered independently).

    Parameters
    ----------
    local_nic, remote_nic : array_like of int
        The NIC (any id below ``n_nics``) at each end of each QP.
    n_nics : int
        Number of NIC ids; one base is drawn per id, in id order, whether used or not.
    seed : int, None or numpy.random.Generator
        Passed to :func:`gpuwait.rng.as_generator`; a Generator is advanced by ``n_nics`` draws.

    Returns
    -------
    (local_qpn, remote_qpn) : ndarrays of uint32
        QP numbers below ``2**24``, one per QP.

    Examples
    --------
    >>> local, remote = qp_numbers([0, 0, 0], [1, 1, 1], n_nics=2, seed=1)
    >>> bool((np.diff(local) == 1).all() and (np.diff(remote) == 1).all()), bool(local.max() < 2**24)
    (True, True)
    """
    local_ids = np.asarray(local_nic, np.int64)
    remote_ids = np.asarray(remote_nic, np.int64)
    if local_ids.shape != remote_ids.shape or local_ids.ndim != 1:
        raise RoutingError(f"qp_numbers: got local_nic {local_ids.shape} and remote_nic {remote_ids.shape}; "
                           "expected two 1-D arrays of the same length")
    if local_ids.size and (min(local_ids.min(), remote_ids.min()) < 0
                           or max(local_ids.max(), remote_ids.max()) >= n_nics):
        raise RoutingError(f"qp_numbers: NIC ids must lie in 0..{n_nics - 1}")
    base = as_generator(seed).integers(_QPN_FIRST_ALLOCATABLE, (1 << _QPN_BITS) - _QPN_ROOM, size=n_nics)
    local_qpn = (base[local_ids] + _opening_rank(local_ids, n_nics)) & _QPN_MASK
    remote_qpn = (base[remote_ids] + _opening_rank(remote_ids, n_nics) + _REMOTE_QPN_SKIP) & _QPN_MASK
    return local_qpn.astype(np.uint32), remote_qpn.astype(np.uint32)
