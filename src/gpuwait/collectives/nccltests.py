"""What nccl-tests measures: its programs, bus-bandwidth factors, datatypes, size sweeps and records.

Engineers compare every new cluster against nccl-tests tables, so gpuwait predicts, parses and
prints them. This module holds the definitions every layer shares: the registry of nccl-tests
programs with their bus-bandwidth factors (``doc/PERFORMANCE.md``), the datatypes, the
``-b/-e/-f/-i`` size handling, and the records of one run (config line, devices, result rows).
How a table is printed lives in :mod:`gpuwait.report.nccltests`.

Sources: NVIDIA/nccl-tests ``src/common.cu`` (``parsesize``, the size loop in ``TimeTest``,
``setupArgs``), the per-collective ``*GetCollByteCount`` / ``*GetBw`` functions, and
``doc/PERFORMANCE.md``.

Examples
--------
>>> busbw_factor("all_reduce", 8)
1.75
>>> len(size_sweep(8, 8 * 2**30, step_factor=2))
31
>>> make_row("all_reduce", 2**20, "float", 8, oop_time_s=27.37e-6, ip_time_s=26.93e-6).oop_busbw_GBps
67.04...
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gpuwait.errors import SpecError, UnknownNameError

# nccl-tests defaults (upstream HEAD): -b 32M -e 32M -i 1M, -f off, -w 1 (5 before Aug 2025), -n 20.
DEFAULT_MIN_BYTES = 32 * 2**20
DEFAULT_MAX_BYTES = 32 * 2**20
DEFAULT_STEP_BYTES = 2**20
# AllGather/ReduceScatter/AlltoAll round the per-rank count down to 16-byte multiples (upstream
# ``(count/nranks) & -(16/eltSize)``); builds before that used plain ``count/nranks``.
DEFAULT_ALIGN_BYTES = 16


# --------------------------------------------------------------------------------------------
# Registry of nccl-tests programs
# --------------------------------------------------------------------------------------------

def _factor_allreduce(n_ranks: int) -> float:
    # AllReduceGetBw: ((double)(2*(nranks-1)))/((double)nranks)
    return float(2 * (n_ranks - 1)) / float(n_ranks)


def _factor_n_minus_1_over_n(n_ranks: int) -> float:
    # AllGather/ReduceScatter/AlltoAll GetBw: ((double)(nranks-1))/((double)nranks)
    return float(n_ranks - 1) / float(n_ranks)


def _factor_one(n_ranks: int) -> float:
    return 1.0


@dataclass(frozen=True)
class NcclTestsCollective:
    """One nccl-tests program: how it prints and how it turns time into bandwidth.

    Attributes
    ----------
    name : str
        gpuwait's name, e.g. ``"all_reduce"``.
    program : str
        The nccl-tests binary, e.g. ``"all_reduce_perf"`` (MPI builds add ``_mpi``).
    has_root : bool
        Whether the ``root`` column holds a rank (broadcast, reduce) rather than ``-1``.
    has_redop : bool
        Whether the ``redop`` column holds a reduction (``sum``...) rather than ``none``.
    busbw_factor : callable
        ``n_ranks -> busbw / algbw``, as the program's ``*GetBw`` computes it.
    size_is_total : bool
        True when the printed ``size`` is ``count * typesize * n_ranks`` and ``count`` is per
        rank (all_gather, reduce_scatter, alltoall); False when ``size = count * typesize``.
    validates_in_place : bool
        False for alltoall, whose in-place ``#wrong`` always prints ``N/A``.
    """

    name: str
    program: str
    has_root: bool
    has_redop: bool
    busbw_factor: Callable[[int], float]
    size_is_total: bool
    validates_in_place: bool = True


COLLECTIVES: dict[str, NcclTestsCollective] = {}


def register_collective(collective: NcclTestsCollective) -> NcclTestsCollective:
    """Add a program to :data:`COLLECTIVES` (new programs register here; nothing else changes)."""
    COLLECTIVES[collective.name] = collective
    return collective


for _c in (
    NcclTestsCollective("all_reduce", "all_reduce_perf", False, True, _factor_allreduce, False),
    NcclTestsCollective("all_gather", "all_gather_perf", False, False, _factor_n_minus_1_over_n, True),
    NcclTestsCollective("reduce_scatter", "reduce_scatter_perf", False, True, _factor_n_minus_1_over_n, True),
    NcclTestsCollective("alltoall", "alltoall_perf", False, False, _factor_n_minus_1_over_n, True,
                        validates_in_place=False),
    NcclTestsCollective("broadcast", "broadcast_perf", True, False, _factor_one, False),
    NcclTestsCollective("reduce", "reduce_perf", True, True, _factor_one, False),
    NcclTestsCollective("sendrecv", "sendrecv_perf", False, False, _factor_one, False),
):
    register_collective(_c)


def get_collective(name: str) -> NcclTestsCollective:
    """Look a program up by gpuwait name (``all_reduce``) or binary (``all_reduce_perf_mpi``).

    >>> get_collective("all_gather_perf_mpi").name
    'all_gather'
    """
    if name in COLLECTIVES:
        return COLLECTIVES[name]
    base = name.rsplit("/", 1)[-1]
    base = re.sub(r"(_mpi)?$", "", base)
    for coll in COLLECTIVES.values():
        if base in (coll.program, coll.program.removesuffix("_perf")):
            return coll
    known = ", ".join(COLLECTIVES)
    raise UnknownNameError(f"collective: unknown nccl-tests collective {name!r}; expected one of {known}",
                           hint="program names like all_reduce_perf or all_reduce_perf_mpi also work")


def busbw_factor(collective: str, n_ranks: int) -> float:
    """Bus bandwidth / algorithm bandwidth of `collective` on `n_ranks` ranks (doc/PERFORMANCE.md).

    >>> busbw_factor("all_reduce", 16), busbw_factor("all_gather", 8), busbw_factor("broadcast", 8)
    (1.875, 0.875, 1.0)
    """
    if n_ranks < 1:
        raise SpecError(f"n_ranks: got {n_ranks}; expected 1 or more")
    return get_collective(collective).busbw_factor(n_ranks)


# --------------------------------------------------------------------------------------------
# Datatypes, sizes, counts
# --------------------------------------------------------------------------------------------

DTYPES: dict[str, int] = {
    "int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8,
    "half": 2, "float": 4, "double": 8, "bfloat16": 2, "f8e4m3": 1, "f8e5m2": 1,
}
"""nccl-tests ``-d`` datatype names and their sizes in bytes."""

#: nccl-tests ``-o`` reduction names (``test_opnames``, src/common.cu, NVIDIA/nccl-tests: avg from NCCL 2.10,
#: mulsum from 2.11); its ``all`` runs the sweep once per operation, a prediction's rows would be the same
REDOPS: tuple[str, ...] = ("sum", "prod", "max", "min", "avg", "mulsum")


def dtype_bytes(dtype: str) -> int:
    """Size of one element of an nccl-tests datatype.

    >>> dtype_bytes("bfloat16")
    2
    """
    try:
        return DTYPES[dtype]
    except KeyError:
        raise UnknownNameError(f"unknown nccl-tests datatype {dtype!r}; expected one of {' '.join(DTYPES)}") from None


_SIZE_ARG = re.compile(r"\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(\S?)")
_SIZE_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}


def parse_size_arg(text: str | int) -> int:
    """Read a ``-b``/``-e`` size the way nccl-tests' ``parsesize`` does.

    ``sscanf("%lf %1s")``: a number, then optionally one suffix letter ``K M G`` (either case,
    binary: ``K`` = 1024). Only the first letter after the number counts, so ``8GB`` and ``8GiB``
    are 8 GiB here, unlike :func:`gpuwait.units.parse_size_bytes` where ``GB`` is SI. Fractions
    are allowed and the product is truncated to whole bytes (``size_t`` cast).

    Examples
    --------
    >>> parse_size_arg("8G"), parse_size_arg("128M"), parse_size_arg("0.5k"), parse_size_arg("8")
    (8589934592, 134217728, 512, 8)
    """
    if isinstance(text, int) and not isinstance(text, bool):
        value, unit = float(text), ""
    else:
        match = _SIZE_ARG.match(str(text))
        if not match:
            raise SpecError(f"size: cannot read {text!r}; expected a number of bytes with an optional K, M or G suffix",
                            hint="nccl-tests sizes look like 8, 64K, 128M or 8G (binary units)")
        value, unit = float(match[1]), match[2].lower()
        if unit not in _SIZE_UNITS:
            raise SpecError(f"size: unknown suffix {match[2]!r} in {text!r}; expected K, M or G (binary)",
                            hint="nccl-tests sizes look like 8, 64K, 128M or 8G")
    size = value * _SIZE_UNITS[unit]
    if size < 0:
        raise SpecError(f"size: got {text!r}; expected zero or more bytes")
    if not size < 2.0**63:  # nccl-tests holds sizes in a size_t; inf and nan land here too
        raise SpecError(f"size: got {str(text)[:40]!r}; expected at most 8E (2**63 bytes)")
    return int(size)


def size_sweep(min_bytes: int, max_bytes: int, step_factor: int | None = None, step_bytes: int | None = None,
               *, max_sizes: int = 100_000) -> list[int]:
    """The message sizes nccl-tests runs for ``-b min -e max`` and ``-f`` or ``-i``.

    Mirrors ``for (size = min; size <= max; size = stepfactor > 1 ? size*stepfactor : size+stepbytes)``:
    the factor wins when it is above 1, otherwise the fixed step is used (1 MiB by default, as in
    nccl-tests). These are requested sizes; :func:`size_and_count` gives what is actually printed.

    Parameters
    ----------
    min_bytes, max_bytes : int
        ``-b`` and ``-e`` in bytes (see :func:`parse_size_arg`).
    step_factor : int, optional
        ``-f``; a whole number, as nccl-tests reads it with ``strtol``.
    step_bytes : int, optional
        ``-i``; used when `step_factor` is absent or at most 1.
    max_sizes : int
        Refuse sweeps longer than this (``-i 1 -e 8G`` would be 8 billion rows).

    Examples
    --------
    >>> size_sweep(8, 128, step_factor=2)
    [8, 16, 32, 64, 128]
    >>> size_sweep(1000, 3000, step_bytes=1000)
    [1000, 2000, 3000]
    """
    for name, value in (("min_bytes", min_bytes), ("max_bytes", max_bytes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise SpecError(f"{name}: got {value!r}; expected a whole number of bytes, zero or more")
    if min_bytes > max_bytes:
        raise SpecError(f"invalid sizes for minbytes and maxbytes: {min_bytes} > {max_bytes}",
                        hint="-b must not exceed -e")
    if step_factor is not None and not (isinstance(step_factor, (int, float)) and not isinstance(step_factor, bool)
                                        and math.isfinite(step_factor) and float(step_factor).is_integer()):
        raise SpecError(f"step_factor: got {step_factor!r}; expected a whole number "
                        "(nccl-tests reads -f as an integer)")
    if step_factor is not None and step_factor > 1:
        if min_bytes == 0:
            raise SpecError("step_factor: a multiplicative sweep cannot start at 0 bytes (it would never grow)",
                            hint="start at -b 8 or more, or use a fixed step -i")
        sizes, size = [], min_bytes
        while size <= max_bytes:
            sizes.append(size)
            size *= int(step_factor)
        return sizes
    step = DEFAULT_STEP_BYTES if step_bytes is None else step_bytes
    if isinstance(step, bool) or not isinstance(step, int) or step <= 0:
        raise SpecError(f"step_bytes: got {step!r}; expected a whole number of bytes, more than zero",
                        hint="nccl-tests would loop forever on -i 0")
    count = (max_bytes - min_bytes) // step + 1
    if count > max_sizes:
        raise SpecError(f"size sweep: {count} sizes from {min_bytes} to {max_bytes} by {step} bytes; "
                        f"expected at most {max_sizes}", hint="use a factor (-f 2) or a larger step (-i)")
    return list(range(min_bytes, max_bytes + 1, step))


@dataclass(frozen=True)
class SizeCount:
    """A requested message size and what nccl-tests really runs and prints for it.

    Attributes
    ----------
    requested_bytes : int
        The size from the sweep.
    size_bytes : int
        The printed ``size`` column (whole elements; for all_gather, reduce_scatter and alltoall the
        total over ranks of a per-rank count rounded down).
    count : int
        The printed ``count`` column (per rank for all_gather, reduce_scatter, alltoall).
    """

    requested_bytes: int
    size_bytes: int
    count: int

    @property
    def rounded(self) -> bool:
        """True when nccl-tests runs fewer bytes than requested."""
        return self.size_bytes != self.requested_bytes


def size_and_count(collective: str, size_bytes: int, dtype: str, n_ranks: int,
                   *, align_bytes: int = DEFAULT_ALIGN_BYTES) -> SizeCount:
    """Round a requested size to whole elements exactly as nccl-tests' ``setupArgs`` does.

    ``count = size / typesize`` (integer division), then the program's ``GetCollByteCount``:
    all_gather, reduce_scatter and alltoall use ``base = (count / nranks)`` rounded down to a
    multiple of ``align_bytes / typesize`` elements (16 bytes upstream; pass ``align_bytes=1`` for
    older builds), print ``count = base`` and ``size = base * nranks * typesize``; the others print
    ``count`` and ``count * typesize``.

    Examples
    --------
    >>> size_and_count("all_reduce", 1000, "double", 8)
    SizeCount(requested_bytes=1000, size_bytes=1000, count=125)
    >>> sc = size_and_count("all_gather", 1000, "float", 8)
    >>> sc.size_bytes, sc.count, sc.rounded
    (896, 28, True)
    """
    coll = get_collective(collective)
    typesize = dtype_bytes(dtype)
    if n_ranks < 1:
        raise SpecError(f"n_ranks: got {n_ranks}; expected 1 or more")
    if size_bytes < 0:
        raise SpecError(f"size_bytes: got {size_bytes}; expected zero or more")
    count = size_bytes // typesize
    if not coll.size_is_total:
        return SizeCount(size_bytes, count * typesize, count)
    per_rank = count // n_ranks
    align_elems = max(1, align_bytes // typesize) if align_bytes > 0 else 1
    per_rank -= per_rank % align_elems
    return SizeCount(size_bytes, per_rank * n_ranks * typesize, per_rank)


def bandwidths_GBps(collective: str, count: int, dtype: str, time_s: float, n_ranks: int) -> tuple[float, float]:
    """``(algbw, busbw)`` in GB/s (1e9 bytes/s) as the program's ``*GetBw`` computes them.

    `count` is the printed count column (per rank where :attr:`NcclTestsCollective.size_is_total`).

    >>> bandwidths_GBps("all_reduce", 2**18, "float", 27.37e-6, 8)  # doctest: +ELLIPSIS
    (38.31..., 67.04...)
    """
    coll = get_collective(collective)
    if not time_s > 0:
        raise SpecError(f"time_s: got {time_s!r}; expected a time of more than zero seconds")
    nbytes = count * dtype_bytes(dtype) * (n_ranks if coll.size_is_total else 1)
    algbw = float(nbytes) / 1.0e9 / time_s
    return algbw, algbw * coll.busbw_factor(n_ranks)


# --------------------------------------------------------------------------------------------
# Numbers
# --------------------------------------------------------------------------------------------

# --------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RunConfig:
    """The ``# nThread ...`` line: how nccl-tests was run. Defaults are upstream's.

    A field set to None is left out of the line, which reproduces older builds (no ``agg iters``
    or ``graph`` before 2022, no ``unalign`` up to 2.18).

    Attributes
    ----------
    n_threads, n_gpus : int
        ``-t`` and ``-g``; ranks = processes x threads x GPUs.
    min_bytes, max_bytes : int
        ``-b`` and ``-e``.
    step_factor : int
        ``-f``; used when above 1, else `step_bytes`.
    step_bytes : int or None
        ``-i``; None when the log only says ``step: 2(factor)``.
    warmup_iters, iters : int
        ``-w`` and ``-n``.
    agg_iters, graph, unalign : int or None
        ``-m``, ``-G``, ``-u``.
    validation : int
        ``-c``; 0 prints ``N/A`` in ``#wrong``.
    blocking : int
        ``-z``; above 0 adds a ``# Blocking Enabled`` line.
    extra : tuple of (str, int)
        Fields that forks add to the line (``single_test: 0``...), in order.
    """

    n_threads: int = 1
    n_gpus: int = 1
    min_bytes: int = DEFAULT_MIN_BYTES
    max_bytes: int = DEFAULT_MAX_BYTES
    step_factor: int = 1
    step_bytes: int | None = DEFAULT_STEP_BYTES
    warmup_iters: int = 1
    iters: int = 20
    agg_iters: int | None = 1
    validation: int = 1
    graph: int | None = 0
    unalign: int | None = 0
    blocking: int = 0
    extra: tuple[tuple[str, int], ...] = ()

    @property
    def process_gpus(self) -> int:
        """GPUs one process drives: each of its ``-t`` threads drives ``-g`` GPUs.

        >>> RunConfig(n_threads=2, n_gpus=4).process_gpus
        8
        """
        return self.n_threads * self.n_gpus


@dataclass(frozen=True)
class Device:
    """One ``#  Rank r Group g Pid p on host device d [pci] name`` line.

    ``group`` is None for old builds whose lines have no ``Group``; ``pci`` is the text between
    the brackets (``0x0f`` in older builds, ``0000:02:00`` = domain:bus:device in newer ones).
    """

    rank: int
    host: str
    device: int
    name: str
    group: int | None = 0
    pid: int = 0
    pci: str = "0000:00:00"


@dataclass(frozen=True)
class BuildInfo:
    """``# nccl-tests version 2.18.0 nccl-headers=22907 nccl-library=22907`` (2.18 and later)."""

    version: str
    nccl_headers: int | None = None
    nccl_library: int | None = None

    @property
    def library_version(self) -> str | None:
        """The NCCL release that ran (``nccl-library``, what ``ncclGetVersion`` returned), as ``X.Y.Z``;
        None when not printed. The code is NCCL's ``NCCL_VERSION(X,Y,Z)``: ``X*1000 + Y*100 + Z`` up to 2.8,
        ``X*10000 + Y*100 + Z`` from 2.9 (src/nccl.h.in, v2.30.7-1).

        >>> BuildInfo("2.18.0", 22907, 22907).library_version, BuildInfo("2.17.4", 2708, 2708).library_version
        ('2.29.7', '2.7.8')
        """
        code = self.nccl_library
        if not code:
            return None
        major, rest = divmod(code, 10000) if code >= 10000 else divmod(code, 1000)
        return f"{major}.{rest // 100}.{rest % 100}"


@dataclass(frozen=True)
class Row:
    """One result line: a size, then out-of-place (``oop_``) and in-place (``ip_``) results.

    Attributes
    ----------
    size_bytes, count : int
        The ``size`` and ``count`` columns (see :class:`NcclTestsCollective.size_is_total`).
    dtype : str
        ``float``, ``bfloat16``...
    redop : str or None
        ``sum``..., ``none`` for non-reductions; None when the column is absent (old builds).
    root : int or None
        ``-1`` for rootless collectives; None when the column is absent or blank.
    oop_time_us, ip_time_us : float
        Average time per operation, microseconds (CPU time with ``-C``).
    oop_algbw_GBps, oop_busbw_GBps, ip_algbw_GBps, ip_busbw_GBps : float
        Bandwidths in GB/s = 1e9 bytes/s.
    oop_wrong, ip_wrong : float or None
        ``#wrong`` (elements that failed validation); None for ``N/A`` or no column. Very old
        logs print an ``error`` column (largest deviation) instead; it lands here too.
    timestamp : str or None
        The ``-S`` column, ``%Y-%m-%d %H:%M:%S``.
    extra : tuple of (str, str)
        Other columns by name, e.g. ``("oop i_p99", "25.10")`` from ``-I``.
    """

    size_bytes: int
    count: int
    dtype: str
    redop: str | None
    root: int | None
    oop_time_us: float
    oop_algbw_GBps: float
    oop_busbw_GBps: float
    oop_wrong: float | None
    ip_time_us: float
    ip_algbw_GBps: float
    ip_busbw_GBps: float
    ip_wrong: float | None
    timestamp: str | None = None
    extra: tuple[tuple[str, str], ...] = ()

    @property
    def _steady_in_place(self) -> bool:
        # NaN and 0.00 (below the printed resolution) in-place times compare False: out-of-place stays
        return 0 < self.ip_time_us < self.oop_time_us

    @property
    def steady_time_us(self) -> float:
        """The faster of the row's two timings of the same operation (out-of-place, in-place): what a
        warmed-up call costs, which is what gpuwait predicts.

        Each column is the average of ``iters`` calls after one untimed call (``BenchTime``, src/common.cu,
        NVIDIA/nccl-tests); until nccl-tests commit f2015cb (2025-08-25, "Modified warmup to run for more
        message sizes") only the smallest and largest sizes were warmed up, and published tables carry
        one-off costs in one column of a row: the first NVLSTree size of an 8-node H100 table (NVIDIA/
        nccl-tests#309) takes 1272 us out-of-place and 321 us in-place right after; a GH200 table's 512 KiB
        takes 170 us out-of-place and 350 us in-place. A one-off cost only adds time, so the faster average
        is the one it inflated less. Out-of-place when the in-place time is missing or printed as 0.

        >>> row = Row(8388608, 2097152, "float", "sum", -1, 1272.4, 6.59, 12.98, 0, 321.4, 26.1, 51.4, 0)
        >>> row.steady_time_us, row.steady_busbw_GBps
        (321.4, 51.4)
        """
        return self.ip_time_us if self._steady_in_place else self.oop_time_us

    @property
    def steady_busbw_GBps(self) -> float:
        """The busbw of :attr:`steady_time_us`'s column."""
        return self.ip_busbw_GBps if self._steady_in_place else self.oop_busbw_GBps


def make_row(collective: str, size_bytes: int, dtype: str, n_ranks: int, *, oop_time_s: float, ip_time_s: float,
             redop: str | None = None, root: int | None = None, wrong: int | None = 0,
             align_bytes: int = DEFAULT_ALIGN_BYTES) -> Row:
    """Build the row nccl-tests would print for a requested size and two measured times.

    Rounds the size (:func:`size_and_count`), computes algbw and busbw (:func:`bandwidths_GBps`)
    and fills ``redop``/``root`` like the program does (``sum``/``none``; root 0 for broadcast and
    reduce, ``-1`` otherwise). ``wrong=None`` means validation off (``-c 0``).

    Examples
    --------
    >>> r = make_row("all_gather", 2**20, "float", 8, oop_time_s=20e-6, ip_time_s=19e-6)
    >>> r.size_bytes, r.count, r.redop, r.root, round(r.oop_busbw_GBps, 2)
    (1048576, 32768, 'none', -1, 45.88)
    """
    coll = get_collective(collective)
    sc = size_and_count(coll.name, size_bytes, dtype, n_ranks, align_bytes=align_bytes)
    oop_alg, oop_bus = bandwidths_GBps(coll.name, sc.count, dtype, oop_time_s, n_ranks)
    ip_alg, ip_bus = bandwidths_GBps(coll.name, sc.count, dtype, ip_time_s, n_ranks)
    if redop is None:
        redop = "sum" if coll.has_redop else "none"
    if root is None:
        root = 0 if coll.has_root else -1
    ip_wrong = wrong if coll.validates_in_place else None
    return Row(sc.size_bytes, sc.count, dtype, redop, root,
               oop_time_s * 1.0e6, oop_alg, oop_bus, wrong, ip_time_s * 1.0e6, ip_alg, ip_bus, ip_wrong)


def average_busbw_GBps(rows: Iterable[Row]) -> float:
    """``Avg bus bandwidth``: the mean busbw over all out-of-place **and** in-place results.

    nccl-tests adds ``busBw`` to one sum for both halves of every row (``args->bw[0] += busBw``),
    so a sweep from 8 bytes averages in many tiny, latency-bound sizes.

    >>> average_busbw_GBps([make_row("sendrecv", 10**9, "float", 2, oop_time_s=0.1, ip_time_s=0.05)])
    15.0
    """
    values = [v for r in rows for v in (r.oop_busbw_GBps, r.ip_busbw_GBps)]
    if not values:
        raise SpecError("average bus bandwidth: no rows; expected at least one result row")
    return sum(values) / len(values)
