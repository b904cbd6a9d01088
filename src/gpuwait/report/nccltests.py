"""Write results exactly as nccl-tests prints them (``all_reduce_perf`` and friends).

Engineers compare every new cluster against nccl-tests tables and keep regexes and dashboards
that read them, so gpuwait prints simulated runs in the same text, byte for byte. This module
holds the pure pieces: the registry of nccl-tests programs with their bus-bandwidth factors,
the datatypes, the ``-b/-e/-f/-i`` size handling, number formatting and the table lines.
No model logic lives here; callers pass times and get text.

Two print styles exist in real logs, and both are reproduced:

``"current"``
    ``src/util.cu`` of nccl-tests (2.18 and later at least; upstream HEAD 2.19.6): numbers go
    through ``getFloatStr`` (``%.2f``, else ``%.1f``, ``%.0f``, ``%.1e`` to fit the width),
    ``#wrong`` is ``%6g``.
``"legacy"``
    the older ``src/common.cu`` printer that produced most published tables (the DGX H100 and
    OCI A100 tables in ``reference/nccl-tests``): time is ``%7.2f`` below 100 us, ``%7.1f``
    below 10000 us, else ``%7.0f``; bandwidths ``%6.2f``; ``#wrong`` is ``%5g``.

Sources: NVIDIA/nccl-tests ``src/util.cu`` (``getFloatStr``, ``writeDeviceReport``,
``writeResultHeader``, ``writeBenchmarkLinePreamble/Body``, ``writeResultFooter``),
``src/common.cu`` (``parsesize``, the size loop in ``TimeTest``, ``setupArgs``), the per-collective
``*GetCollByteCount`` / ``*GetBw`` functions, and ``doc/PERFORMANCE.md``.

Examples
--------
>>> get_float_str(18289.0, 7)
'18289.0'
>>> busbw_factor("all_reduce", 8)
1.75
>>> len(size_sweep(8, 8 * 2**30, step_factor=2))
31
>>> row = make_row("all_reduce", 2**20, "float", 8, oop_time_s=27.37e-6, ip_time_s=26.93e-6)
>>> format_row(row)
'     1048576        262144     float     sum      -1    27.37   38.31   67.04       0    26.93   38.94   68.14       0'
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from gpuwait.errors import SpecError, UnknownNameError

Style = Literal["current", "legacy"]
STYLES: tuple[str, ...] = ("current", "legacy")

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
    raise UnknownNameError(f"unknown nccl-tests collective {name!r}; expected one of {known}",
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

def get_float_str(value: float, width: int) -> str:
    """nccl-tests' ``getFloatStr``: the most decimals that fit in `width` characters.

    Tries ``%.2f``, ``%.1f``, ``%.0f``, then ``%.1e`` (``%.0e`` below width 7), truncated to the
    width as ``snprintf(str, width+1, ...)`` does. Time uses width 7, algbw and busbw width 6.

    Examples
    --------
    >>> get_float_str(36.47, 7), get_float_str(100.1, 7), get_float_str(18289, 7)
    ('  36.47', ' 100.10', '18289.0')
    >>> get_float_str(123456, 7), get_float_str(1.2e7, 7), get_float_str(1.2e6, 6)
    (' 123456', '1.2e+07', ' 1e+06')
    """
    for fmt in ("%*.2f", "%*.1f", "%*.0f"):
        text = fmt % (width, value)
        if len(text) <= width:
            return text
    return (("%*.1e" if width >= 7 else "%*.0e") % (width, value))[:width]


def legacy_time_str(time_us: float) -> str:
    """Time column of older nccl-tests (``common.cu`` before ``getFloatStr``).

    >>> legacy_time_str(36.47), legacy_time_str(100.1), legacy_time_str(18289.4)
    ('  36.47', '  100.1', '  18289')
    """
    if time_us >= 10000.0:
        return "%7.0f" % time_us
    if time_us >= 100.0:
        return "%7.1f" % time_us
    return "%7.2f" % time_us


def _check_style(style: str) -> None:
    if style not in STYLES:
        raise SpecError(f"style: got {style!r}; expected one of {', '.join(STYLES)}")


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


# --------------------------------------------------------------------------------------------
# Lines
# --------------------------------------------------------------------------------------------

def format_config_line(config: RunConfig) -> str:
    """The ``# nThread ...`` line.

    >>> format_config_line(RunConfig(min_bytes=8, max_bytes=8 * 2**30, step_factor=2, warmup_iters=5, unalign=None))
    '# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0'
    """
    c = config
    if c.step_factor > 1:
        step = f"step: {c.step_factor}(factor)"
    else:
        step = f"step: {DEFAULT_STEP_BYTES if c.step_bytes is None else c.step_bytes}(bytes)"
    line = (f"# nThread {c.n_threads} nGpus {c.n_gpus} minBytes {c.min_bytes} maxBytes {c.max_bytes} {step} "
            f"warmup iters: {c.warmup_iters} iters: {c.iters}")
    if c.agg_iters is not None:
        line += f" agg iters: {c.agg_iters}"
    line += f" validation: {c.validation}"
    for name, value in (("graph", c.graph), ("unalign", c.unalign)):
        if value is not None:
            line += f" {name}: {value}"
    for name, value in c.extra:
        line += f" {name}: {value}"
    return line


def format_device_line(device: Device) -> str:
    """One ``# Using devices`` line (``Group`` left out when ``device.group`` is None).

    >>> format_device_line(Device(0, "lab", 0, "NVIDIA GeForce RTX 5090", pid=2994447, pci="0000:02:00"))
    '#  Rank  0 Group  0 Pid 2994447 on        lab device  0 [0000:02:00] NVIDIA GeForce RTX 5090'
    """
    d = device
    if d.group is None:
        return "#   Rank %2d Pid %6d on %10s device %2d [%s] %s" % (d.rank, d.pid, d.host, d.device, d.pci, d.name)
    return "#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s] %s" % (
        d.rank, d.group, d.pid, d.host, d.device, d.pci, d.name)


def format_column_header(*, style: Style = "current", report_cputime: bool = False,
                         report_timestamps: bool = False) -> list[str]:
    """The three ``#`` lines naming the columns (``writeResultHeader``), trailing spaces included.

    >>> format_column_header()[1]
    '#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong '
    """
    _check_style(style)
    t = "cputime" if report_cputime else "time"
    blanks = ("", "", "", "", "")
    first = "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          " % blanks
    if style == "legacy":
        names = "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s" % (
            "size", "count", "type", "redop", "root", t, "algbw", "busbw", "#wrong", t, "algbw", "busbw", "#wrong")
        units = "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s" % (
            "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "")
        return [first, names, units]
    ts_pad, ts_label, ts_fmt = (19, "timestamp", "%Y-%m-%d %H:%M:%S") if report_timestamps else (0, "", "")
    fmt = "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s"
    names = fmt % ("size", "count", "type", "redop", "root", t, "algbw", "busbw", "#wrong",
                   t, "algbw", "busbw", "#wrong", ts_pad, ts_label)
    units = fmt % ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "",
                   "(us)", "(GB/s)", "(GB/s)", "", ts_pad, ts_fmt)
    return [first, names, units]


def _half(time_us: float, algbw: float, busbw: float, wrong: float | None, style: str) -> str:
    if style == "legacy":
        if wrong is None:
            return "  %7s  %6.2f  %6.2f    N/A" % (legacy_time_str(time_us), algbw, busbw)
        return "  %7s  %6.2f  %6.2f  %5g" % (legacy_time_str(time_us), algbw, busbw, wrong)
    time_str, alg_str, bus_str = get_float_str(time_us, 7), get_float_str(algbw, 6), get_float_str(busbw, 6)
    if wrong is None:
        return "  %7s  %6s  %6s    N/A" % (time_str, alg_str, bus_str)
    return "  %7s  %6s  %6s  %6g" % (time_str, alg_str, bus_str, wrong)


def format_row(row: Row, *, style: Style = "current") -> str:
    """One result line: ``"%12li  %12li  %8s  %6s  %6s"`` then ``"  %7s  %6s  %6s  %6g"`` twice.

    A None ``redop`` or ``root`` prints as a blank field (as builds that left them empty did);
    a ``timestamp`` is appended as ``%21s``. ``extra`` columns are not printed.

    >>> r = Row(134217728, 33554432, "float", "sum", -1, 586.4, 228.88, 400.53, 0, 586.0, 229.05, 400.84, 0)
    >>> format_row(r, style="legacy")
    '   134217728      33554432     float     sum      -1    586.4  228.88  400.53      0    586.0  229.05  400.84      0'
    """
    _check_style(style)
    root = "" if row.root is None else "%6i" % row.root
    redop = "" if row.redop is None else row.redop
    line = "%12d  %12d  %8s  %6s  %6s" % (row.size_bytes, row.count, row.dtype, redop, root)
    line += _half(row.oop_time_us, row.oop_algbw_GBps, row.oop_busbw_GBps, row.oop_wrong, style)
    line += _half(row.ip_time_us, row.ip_algbw_GBps, row.ip_busbw_GBps, row.ip_wrong, style)
    if row.timestamp is not None:
        line += "%21s" % row.timestamp
    return line


def format_header(config: RunConfig, devices: Sequence[Device], *, program: str | None = None,
                  build: BuildInfo | None = None) -> list[str]:
    """The lines before the column header (``writeDeviceReport``).

    Version line when `build` is given, ``# Collective test starting`` when `program` is given,
    the config line, the ``-z`` line, ``#``, ``# Using devices`` and one line per rank.

    >>> format_header(RunConfig(), [Device(0, "node1", 0, "NVIDIA H100 80GB HBM3")], program="all_reduce_perf")[:2]
    ['# Collective test starting: all_reduce_perf', '# nThread 1 nGpus 1 minBytes 33554432 maxBytes 33554432 step: 1048576(bytes) warmup iters: 1 iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0']
    """
    lines = []
    if build is not None:
        lines.append("# nccl-tests version %s nccl-headers=%d nccl-library=%d"
                     % (build.version, build.nccl_headers or 0, build.nccl_library or 0))
    if program is not None:
        lines.append(f"# Collective test starting: {program}")
    lines.append(format_config_line(config))
    if config.blocking == 1:
        lines.append("# Blocking Enabled: wait for completion and barrier after each collective ")
    elif config.blocking > 1:
        lines.append("# Blocking Enabled: wait for completion after each collective (no barrier) ")
    lines += ["#", "# Using devices"]
    lines += [format_device_line(d) for d in devices]
    return lines


def format_footer(avg_busbw_GBps: float, *, out_of_bounds: int = 0, program: str | None = None,
                  min_bw_GBps: float | None = None) -> list[str]:
    """``writeResultFooter``: out-of-bounds count, ``Avg bus bandwidth`` (``%g``), ``#``.

    `min_bw_GBps` plays ``NCCL_TESTS_MIN_BW``: the average prints ``FAILED`` below 0.9 x it.
    With `program`, the ``# Collective test concluded`` line and a closing ``#`` follow.

    >>> format_footer(66.48342)
    ['# Out of bounds values : 0 OK', '# Avg bus bandwidth    : 66.4834 ', '#']
    """
    check = "" if min_bw_GBps is None else ("FAILED" if avg_busbw_GBps < min_bw_GBps * 0.9 else "OK")
    lines = ["# %-20s : %d %s" % ("Out of bounds values", out_of_bounds, "FAILED" if out_of_bounds else "OK"),
             "# %-20s : %g %s" % ("Avg bus bandwidth", avg_busbw_GBps, check),
             "#"]
    if program is not None:
        lines += [f"# Collective test concluded: {program}", "#"]
    return lines


def format_table(rows: Sequence[Row], *, config: RunConfig, devices: Sequence[Device], program: str | None = None,
                 build: BuildInfo | None = None, style: Style = "current", avg_busbw_GBps: float | None = None,
                 out_of_bounds: int = 0, report_cputime: bool = False, min_bw_GBps: float | None = None) -> str:
    """A whole nccl-tests stdout: header, column header, rows, footer; newline-terminated.

    `avg_busbw_GBps` defaults to :func:`average_busbw_GBps` of `rows`; pass the value to print
    when regenerating a log whose rows were already rounded. Timestamps are printed (and the
    column named) when the rows carry them.

    Examples
    --------
    >>> rows = [make_row("all_reduce", s, "float", 2, oop_time_s=1e-3, ip_time_s=1e-3) for s in (2**20, 2**21)]
    >>> text = format_table(rows, config=RunConfig(min_bytes=2**20, max_bytes=2**21, step_factor=2),
    ...                     devices=[Device(r, "node1", r, "NVIDIA H100 80GB HBM3") for r in range(2)])
    >>> print(text)  # doctest: +NORMALIZE_WHITESPACE
    # nThread 1 nGpus 1 minBytes 1048576 maxBytes 2097152 step: 2(factor) warmup iters: 1 iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0
    #
    # Using devices
    #  Rank  0 Group  0 Pid      0 on      node1 device  0 [0000:00:00] NVIDIA H100 80GB HBM3
    #  Rank  1 Group  0 Pid      0 on      node1 device  1 [0000:00:00] NVIDIA H100 80GB HBM3
    #
    #                                                              out-of-place                       in-place
    #       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
    #        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)
         1048576        262144     float     sum      -1  1000.00    1.05    1.05       0  1000.00    1.05    1.05       0
         2097152        524288     float     sum      -1  1000.00    2.10    2.10       0  1000.00    2.10    2.10       0
    # Out of bounds values : 0 OK
    # Avg bus bandwidth    : 1.57286
    #
    """
    _check_style(style)
    timestamps = any(r.timestamp is not None for r in rows)
    lines = format_header(config, devices, program=program, build=build)
    lines.append("#")
    lines += format_column_header(style=style, report_cputime=report_cputime, report_timestamps=timestamps)
    lines += [format_row(r, style=style) for r in rows]
    avg = average_busbw_GBps(rows) if avg_busbw_GBps is None else avg_busbw_GBps
    lines += format_footer(avg, out_of_bounds=out_of_bounds, program=program, min_bw_GBps=min_bw_GBps)
    return "\n".join(lines) + "\n"
