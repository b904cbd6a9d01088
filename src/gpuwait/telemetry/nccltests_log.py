"""Read nccl-tests output from real clusters: the stdout table and the ``-J`` JSON file.

A measured nccl-tests run is the usual starting point of a diagnosis ("busbw is 160 GB/s, it
should be 190"), so gpuwait must read whatever engineers paste: any nccl-tests version since
2019, with or without the MPI tag prefix, with NCCL INFO lines mixed in.

What varies between versions, and is accepted (nccl-tests src/util.cu, src/common.cu):

* ``[1,0]<stdout>:`` (``mpirun --tag-output``) and ``0: `` (``srun --label``) prefixes;
* the ``# nccl-tests version``, ``# Collective test starting/concluded`` lines (2.18+);
* config lines with or without ``agg iters``/``graph``/``unalign``, or with fork-specific fields;
* device lines with or without ``Group``, ``[0x0f]`` or ``[0000:02:00]``;
* no ``redop`` or no ``root`` column (or a blank root), ``#wrong`` or ``error`` (or none at all, as
  in hand-made summary tables), ``N/A`` when validation is off;
* numbers as ``36.47``, ``100.1``, ``18289``, ``1.2e+07``;
* ``-I`` per-iteration columns and the ``-S`` timestamp column;
* a footer with or without ``#`` and ``OK``/``FAILED``.

Refused with one error: the layout nccl-tests printed before its NCCL 2.4 resync (commit cbe7f65,
March 2019), whose header reads ``bytes N type op`` and whose rows, shaped like today's, give the time in
ms (common.cu at b188a15: ``deltaSec * 1.0E3``), which would read as us.

Columns are told apart by shape, not position: after ``size count type``, a token that is not a
number is the ``redop``; what remains holds out-of-place then in-place results of equal width,
so an odd count means a ``root`` column comes first. Column names from the header line only
label extra columns.

Examples
--------
>>> log = parse_nccl_tests_log('''
... #  Rank  0 Group  0 Pid     43 on node-0 device  0 [0x0f] NVIDIA A100-SXM4-40GB
... #  Rank  1 Group  0 Pid     44 on node-0 device  1 [0x15] NVIDIA A100-SXM4-40GB
...   8589934592    2147483648     float     sum      -1    67689  126.90  126.90      0    67811  126.68  126.68      0
... # Avg bus bandwidth    : 126.79
... ''')
>>> log.collective, log.collective_from, log.n_ranks, log.rows[0].oop_busbw_GBps
('all_reduce', 'rows', 2, 126.9)
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from statistics import median

from gpuwait.collectives.nccltests import (
    COLLECTIVES,
    DTYPES,
    BuildInfo,
    Device,
    NcclTestsCollective,
    Row,
    RunConfig,
    average_busbw_GBps,
    get_collective,
)
from gpuwait.errors import SpecError, UnknownNameError
from gpuwait.spec.reader import loads_json

_ROW_SHAPE = "size count type [redop] [root], then time algbw busbw #wrong for out-of-place and for in-place"


@dataclass(frozen=True)
class NcclTestsLog:
    """Everything read from one nccl-tests output.

    Attributes
    ----------
    rows : tuple of Row
        The result lines, in order.
    collective : str or None
        gpuwait's name (``all_reduce``...), or None when it cannot be told.
    collective_from : str or None
        Where `collective` came from: ``"parameter"``, ``"program"`` (the ``# Collective test``
        line or the JSON ``args``), or ``"rows"`` (guessed from the columns, see
        :func:`guess_collective`).
    program : str or None
        The binary as printed, e.g. ``all_reduce_perf_mpi``.
    build : BuildInfo or None
        The ``# nccl-tests version`` line.
    config : RunConfig or None
        The ``# nThread`` line; fields it lacks are None.
    devices : tuple of Device
        The ``# Using devices`` lines (one per rank, all processes under MPI).
    n_ranks : int or None
        Number of ranks, and `n_ranks_from` says how it was found: ``"parameter"``,
        ``"devices"`` (highest rank + 1), ``"size/count"`` (exact for all_gather, reduce_scatter,
        alltoall) or ``"busbw/algbw"`` (the bus-bandwidth factor inverted, only when one rank count
        fits every row).
    avg_busbw_GBps : float or None
        The printed ``# Avg bus bandwidth``; compare with :meth:`mean_busbw_GBps`.
    out_of_bounds : int or None
        The printed ``# Out of bounds values``.
    runs : int
        How many runs the text holds: its ``# nThread`` lines (one per run; ``-d all`` prints one for all its
        tables), at least 1.
    time_column : str
        ``time``, or ``cputime`` with ``-C``.
    wrong_column : str or None
        ``#wrong``, ``error`` (old builds: largest deviation), or None when the table has none.
    """

    rows: tuple[Row, ...]
    collective: str | None = None
    collective_from: str | None = None
    program: str | None = None
    build: BuildInfo | None = None
    config: RunConfig | None = None
    devices: tuple[Device, ...] = ()
    n_ranks: int | None = None
    n_ranks_from: str | None = None
    avg_busbw_GBps: float | None = None
    out_of_bounds: int | None = None
    runs: int = 1
    time_column: str = "time"
    wrong_column: str | None = "#wrong"

    def mean_busbw_GBps(self) -> float:
        """The average nccl-tests prints, recomputed from the (rounded) rows."""
        return average_busbw_GBps(self.rows)


# --------------------------------------------------------------------------------------------
# Text
# --------------------------------------------------------------------------------------------

_PREFIXES = re.compile(r"^(?:\[\d+,\d+\]<(?:stdout|stderr)>:|\d+: )")
_VERSION = re.compile(r"^#\s*nccl-tests version (\S+)(?:\s+nccl-headers=(\d+))?(?:\s+nccl-library=(\d+))?")
_PROGRAM = re.compile(r"^#\s*Collective test (?:starting|concluded):\s*(\S+)")
_CONFIG = re.compile(r"^#\s*nThread\s+(\d+)\s+nGpus\s+(\d+)\s+minBytes\s+(\d+)\s+maxBytes\s+(\d+)\s+"
                     r"step:\s*(\d+)\((factor|bytes)\)(.*)$")
_CONFIG_FIELD = re.compile(r"([A-Za-z_][A-Za-z_ ]*?):\s*(-?\d+)")
_DEVICE = re.compile(r"^#\s*Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+"
                     r"\[([^\]]*)\]\s*(.*?)\s*$")
_OUT_OF_BOUNDS = re.compile(r"^#?\s*Out of bounds values\s*:\s*(\d+)")
_AVG_BUSBW = re.compile(r"^#?\s*Avg bus bandwidth\s*:\s*(\S+)")
_DATA_ROW = re.compile(r"^\s*\d+\s+\d+\s+\S")
#: under a column header, a line of one or two whole numbers alone: a row cut after its size or count (a job
#: killed mid-row), which _DATA_ROW, wanting a third field, would pass over in silence
_CUT_ROW = re.compile(r"^\s*\d+(?:\s+\d+)?$")
_NUMBER = re.compile(r"^[-+]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf)$", re.IGNORECASE)
_INT = re.compile(r"^[-+]?\d+$")
_DATE, _CLOCK = re.compile(r"^\d{4}-\d\d-\d\d$"), re.compile(r"^\d\d:\d\d:\d\d$")
_HEADER_NOISE = {"|", "oop", "ip"}


def _column_names(tokens: list[str]) -> tuple[str, list[str], int] | None:
    """From a column-header comment: the time column's name, the names of one result half and how many
    columns come before the results (``size count type redop root``: 5)."""
    names = [t for t in tokens if t not in _HEADER_NOISE]
    if "size" not in names[:2] or "count" not in names:
        return None
    times = [i for i, t in enumerate(names) if t in ("time", "cputime")]
    if not times:
        return None
    first = times[0]
    rest = [t for t in names[first:] if t != "timestamp"]
    half = rest[: times[1] - first] if len(times) > 1 else rest
    return names[first], half, first


def _parse_half(tokens: list[str], names: Sequence[str], prefix: str) -> tuple[float, float, float, float | None,
                                                                               list[tuple[str, str]]]:
    time_us, algbw, busbw = (float(t) for t in tokens[:3])
    wrong = None
    if len(tokens) > 3 and tokens[3] != "N/A":
        wrong = float(tokens[3])
    extra = []
    for k, tok in enumerate(tokens[4:], start=4):
        name = names[k] if len(names) == len(tokens) else f"col{k + 1}"
        extra.append((f"{prefix} {name}", tok))
    return time_us, algbw, busbw, wrong, extra


def _row_error(lineno: int, line: str, why: str) -> SpecError:
    return SpecError(f"nccl-tests log line {lineno}: cannot read result row {line.strip()!r}: {why}; "
                     f"expected {_ROW_SHAPE}",
                     hint="result rows must come straight from nccl-tests stdout (any version)")


def _parse_row(line: str, lineno: int, half_names: Sequence[str], header_width: int | None,
               header_lead: int | None = None) -> tuple[Row, int]:
    tokens = line.split()
    timestamp = None
    if len(tokens) >= 2 and _DATE.match(tokens[-2]) and _CLOCK.match(tokens[-1]):
        timestamp = " ".join(tokens[-2:])
        tokens = tokens[:-2]
    if len(tokens) < 9:
        raise _row_error(lineno, line, f"{len(tokens)} fields")
    size_bytes, count, dtype = int(tokens[0]), int(tokens[1]), tokens[2]
    redop, start = (None, 3) if _NUMBER.match(tokens[3]) else (tokens[3], 4)
    rest = tokens[start:]
    root = None
    if len(rest) % 2:
        if not _INT.match(rest[0]):
            raise _row_error(lineno, line, f"root {rest[0]!r} is not a whole number")
        root, rest = int(rest[0]), rest[1:]
    width = len(rest) // 2
    if width < 3:
        raise _row_error(lineno, line, f"{len(rest)} result fields")
    if header_width is not None and width != header_width:
        raise _row_error(lineno, line, f"{width} result fields per half where the column header names {header_width}")
    for k, tok in enumerate(rest):
        column = k % width
        if tok == "N/A" and column == 3:
            continue
        if not _NUMBER.match(tok):
            raise _row_error(lineno, line, f"{tok!r} is not a number")
        if column < 4 and float(tok) < 0:  # a shifted column shows up as a negative time
            expected = None if header_lead is None or header_width is None else header_lead + 2 * header_width
            if k == 0 and expected is not None and len(tokens) < expected:  # the root taken for the time
                raise _row_error(lineno, line, f"{len(tokens)} fields where the column header names {expected}: "
                                               "the row is cut short")
            raise _row_error(lineno, line, f"negative {('time', 'algbw', 'busbw', '#wrong')[column]} {tok!r}")
    oop = _parse_half(rest[:width], half_names, "oop")
    ip = _parse_half(rest[width:], half_names, "ip")
    row = Row(size_bytes, count, dtype, redop, root, *oop[:4], *ip[:4], timestamp=timestamp,
              extra=tuple(oop[4] + ip[4]))
    return row, width


def _parse_config(match: re.Match) -> RunConfig:
    n_threads, n_gpus, min_bytes, max_bytes, step = (int(match[i]) for i in range(1, 6))
    fields = {name.strip(): int(value) for name, value in _CONFIG_FIELD.findall(match[7])}
    known = {"warmup iters", "iters", "agg iters", "validation", "graph", "unalign"}
    return RunConfig(
        n_threads=n_threads, n_gpus=n_gpus, min_bytes=min_bytes, max_bytes=max_bytes,
        step_factor=step if match[6] == "factor" else 1,
        step_bytes=step if match[6] == "bytes" else None,
        warmup_iters=fields.get("warmup iters", 0), iters=fields.get("iters", 0),
        agg_iters=fields.get("agg iters"), validation=fields.get("validation", 1),
        graph=fields.get("graph"), unalign=fields.get("unalign"),
        extra=tuple((k, v) for k, v in fields.items() if k not in known),
    )


@dataclass
class _LogState:
    """What the lines of a log read so far said; filled line by line by :func:`parse_nccl_tests_log`."""

    rows: list[Row] = field(default_factory=list)
    devices: dict[int, Device] = field(default_factory=dict)
    build: BuildInfo | None = None
    config: RunConfig | None = None
    program: str | None = None
    avg: float | None = None
    oob: int | None = None
    blocking: int = 0  # 0 = not stated, 1 = blocking, 2 = blocking without barrier
    time_column: str = "time"
    wrong_column: str | None = "#wrong"
    half_names: list[str] = field(default_factory=lambda: ["time", "algbw", "busbw", "#wrong"])
    lead_columns: int | None = None  # columns before the results, as the column header names them
    saw_header: bool = False
    widest: int = 0
    runs: int = 0  # '# nThread' lines: one per run


def _read_footer(state: _LogState, stripped: str, lineno: int) -> bool:
    """Read a footer line (out-of-bounds count, average bus bandwidth); False if ``stripped`` is none."""
    if (m := _OUT_OF_BOUNDS.match(stripped)) is not None:
        state.oob = int(m[1])
        return True
    if (m := _AVG_BUSBW.match(stripped)) is not None:
        try:
            state.avg = float(m[1])
        except ValueError:
            raise SpecError(f"nccl-tests log line {lineno}: cannot read the average bus bandwidth {m[1]!r}; "
                            "expected a number") from None
        return True
    return False


def _read_comment(state: _LogState, stripped: str, lineno: int) -> None:
    """Read a ``#`` line: the version, the program, the run configuration, the blocking mode, a device or
    a table's column header (each table has its own); other comments say nothing we keep. The header of
    nccl-tests before 2019 is refused: its rows read like today's, but their times are in ms."""
    if stripped.lstrip("#").split()[:2] == ["bytes", "N"]:
        raise SpecError(f"nccl-tests log line {lineno}: the column header {stripped.lstrip('#').strip()[:60]!r} "
                        "is the layout of nccl-tests before 2019, whose times are in ms; expected the layout of "
                        "2019 and later ('size count type redop root time ...', times in us)",
                        hint="rerun with a current nccl-tests (github.com/NVIDIA/nccl-tests)")
    if (m := _VERSION.match(stripped)) is not None:
        state.build = BuildInfo(m[1], int(m[2]) if m[2] else None, int(m[3]) if m[3] else None)
    elif (m := _PROGRAM.match(stripped)) is not None:
        state.program = state.program or m[1]
    elif (m := _CONFIG.match(stripped)) is not None:
        state.config = _parse_config(m)
        state.runs += 1
    elif stripped.startswith("# Blocking Enabled"):
        state.blocking = 2 if "no barrier" in stripped else 1
    elif (m := _DEVICE.match(stripped)) is not None:
        rank = int(m[1])
        state.devices.setdefault(rank, Device(rank=rank, host=m[4], device=int(m[5]), name=m[7],
                                              group=int(m[2]) if m[2] is not None else None,
                                              pid=int(m[3]), pci=m[6]))
    elif (names := _column_names(stripped.lstrip("#").split())) is not None:
        state.saw_header = True
        state.time_column, state.half_names, state.lead_columns = names
        state.wrong_column = state.half_names[3] if len(state.half_names) > 3 else None


def parse_nccl_tests_log(text: str, *, n_ranks: int | None = None, collective: str | None = None,
                         source: str = "nccl-tests log", skipped: list[str] | None = None) -> NcclTestsLog:
    """Read the stdout of an nccl-tests program (``all_reduce_perf``...), any version.

    Lines that are neither nccl-tests comments nor result rows (NCCL INFO, warnings, ``...``)
    are skipped; a line that starts like a result row (two whole numbers) but cannot be read
    raises, or with ``skipped`` (a list) is left out and reported there once for the whole log
    (how many, and the first: a row cut short by a killed job, two ranks' output interleaved).
    Several tables in one text (``-d all``, ``-N``) give one list of rows.

    Parameters
    ----------
    text : str
        The log.
    n_ranks : int, optional
        The number of ranks, when the log has no ``# Using devices`` lines (or to override them).
    collective : str, optional
        ``all_reduce``... (or a program name) when the log does not say it.

    Returns
    -------
    NcclTestsLog

    Raises
    ------
    SpecError
        When no result row is found or a row cannot be read; the message names the line.

    Examples
    --------
    >>> log = parse_nccl_tests_log('''[1,0]<stdout>:# Collective test starting: all_gather_perf_mpi
    ... [1,0]<stdout>:     1048576         32768     float    none      -1    20.00   52.43   45.88       0    19.00   55.19   48.29       0''')
    >>> log.collective, log.n_ranks, log.n_ranks_from
    ('all_gather', 8, 'size/count')
    """
    state = _LogState()
    bad: list[tuple[int, str, SpecError]] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = _PREFIXES.sub("", raw, count=1).rstrip()
        stripped = line.strip()
        if not stripped or _read_footer(state, stripped, lineno):
            continue
        if stripped.startswith("#"):
            _read_comment(state, stripped, lineno)
            continue
        if _DATA_ROW.match(line) or (state.saw_header and _CUT_ROW.match(line)):
            try:
                row, width = _parse_row(line, lineno, state.half_names, len(state.half_names) if state.saw_header else None,
                                        state.lead_columns)
            except SpecError as err:
                if skipped is None:
                    raise
                bad.append((lineno, line, err))
                continue
            state.rows.append(row)
            state.widest = max(state.widest, width)
    if bad and not state.rows:
        raise bad[0][2]  # nothing readable: the first bad row says why
    if bad:
        assert skipped is not None  # a bad row without a list to report it in raised where it was read
        lineno, line, first_err = bad[0]
        why = str(first_err).split(": ", 2)[-1].split("; expected")[0]
        skipped.append(f"{source}: {len(bad)} unreadable result row(s) skipped, the first line {lineno}: "
                       f"{line.strip()[:100]!r} ({why})")
    if not state.rows:
        raise SpecError("nccl-tests log: no result rows found; expected lines like "
                        "'     1048576        262144     float     sum      -1    85.58   12.25   22.97      0 ...'",
                        hint="pass the stdout of all_reduce_perf (or another nccl-tests program), "
                             "not its stderr or the NCCL_DEBUG output alone")
    if state.time_column != "cputime":  # -C 1: the time is the host's, algbw the collective's (refused by callers)
        _check_time_unit(state.rows)
    wrong_column = state.wrong_column
    if not state.saw_header and state.widest < 4:
        wrong_column = None  # summary tables that dropped #wrong
    config = state.config
    if config is not None and state.blocking:
        config = replace(config, blocking=state.blocking)
    devices = state.devices
    log = _finish(tuple(state.rows), devices=tuple(devices[r] for r in sorted(devices)), program=state.program,
                  build=state.build, config=config, avg=state.avg, oob=state.oob, time_column=state.time_column,
                  wrong_column=wrong_column, n_ranks=n_ranks, collective=collective)
    return replace(log, runs=max(state.runs, 1))


#: a row's algbw (GB/s) x time (us) x 1e3 / size is 1 when the time is in microseconds (nccl-tests prints
#: algbw = size / time: src/common.cu and every *_perf's getBw); rows from 1 GB/s, where two decimals of
#: algbw are within 0.5 %, and a median below this fraction: times in ms, 1000x the us the row implies
MS_TIME_RATIO = 0.01


def _check_time_unit(rows: Sequence[Row]) -> None:
    """Refuse rows whose times are in milliseconds (nccl-tests before 2019) when no header said so (a log
    trimmed to its rows): their algbw, size and time disagree by 1000x."""
    timed = [r for r in rows if r.size_bytes > 0 and r.oop_time_us > 0 and r.oop_algbw_GBps >= 1.0]
    if timed and median(r.oop_algbw_GBps * r.oop_time_us * 1e3 / r.size_bytes for r in timed) < MS_TIME_RATIO:
        row = timed[0]
        raise SpecError(f"nccl-tests log: the times are 1000x what size / algbw gives (size {row.size_bytes}, time "
                        f"{row.oop_time_us:g}, algbw {row.oop_algbw_GBps:g} GB/s): the milliseconds of nccl-tests "
                        "before 2019; expected times in us",
                        hint="rerun with a current nccl-tests (github.com/NVIDIA/nccl-tests)")


# --------------------------------------------------------------------------------------------
# Collective and rank count
# --------------------------------------------------------------------------------------------

def _collective_for_program(program: str | None) -> NcclTestsCollective | None:
    if program is None:
        return None
    try:
        return get_collective(program)
    except UnknownNameError:
        return None  # gather_perf, hypercube_perf...: known program, not in the registry


def guess_collective(rows: Sequence[Row]) -> str | None:
    """Tell the collective from the columns when the log does not name it.

    Rules, on the first row with a known datatype and a count above 0, with
    ``k = size / (count * typesize)``:

    * ``root`` 0 or more: ``reduce`` with a reduction ``redop``, else ``broadcast``;
    * ``k == 1`` and a reduction: ``all_reduce`` (root ``-1``; with no root column only when
      busbw differs from algbw), but ``sendrecv`` if some row validates out-of-place and prints ``N/A``
      in-place (NVIDIA/nccl-tests ``src/sendrecv.cu`` @29f4114f passes its ``-o`` reduction, ``sum`` by
      default, to the row, and never checks in-place: ``reportErrors = in_place ? 0 : 1``; all_reduce checks
      both); ``k == 1`` without: ``sendrecv`` (root ``-1`` only);
    * ``k > 1`` (size counts every rank) and a reduction: ``reduce_scatter``; without:
      ``alltoall`` if some row validates out-of-place but prints ``N/A`` in-place (alltoall never
      checks in-place), ``all_gather`` if in-place is validated; with validation off, None.

    >>> from gpuwait.collectives.nccltests import make_row
    >>> guess_collective([make_row("reduce_scatter", 2**20, "float", 8, oop_time_s=1e-5, ip_time_s=1e-5)])
    'reduce_scatter'
    """
    for row in rows:
        typesize = DTYPES.get(row.dtype)
        if typesize is None or row.count <= 0:
            continue
        k = row.size_bytes / (row.count * typesize)
        reduction = row.redop not in (None, "", "none")
        if row.root is not None and row.root >= 0:
            return "reduce" if reduction else "broadcast"
        if k == 1:
            if reduction and row.root == -1 and _checks_out_of_place_only(rows):
                return "sendrecv"
            if reduction:
                busbw_differs = abs(row.oop_busbw_GBps - row.oop_algbw_GBps) > 0.011 * max(1.0, row.oop_algbw_GBps)
                return "all_reduce" if row.root == -1 or busbw_differs else None
            return "sendrecv" if row.root == -1 else None
        if k > 1 and k.is_integer():
            if reduction:
                return "reduce_scatter"
            if _checks_out_of_place_only(rows):
                return "alltoall"
            if any(r.ip_wrong is not None for r in rows):
                return "all_gather"
        return None
    return None


def _checks_out_of_place_only(rows: Sequence[Row]) -> bool:
    """Some row validated out-of-place and printed ``N/A`` in-place (alltoall, sendrecv: nccl-tests checks their
    in-place results never; with ``-c 0`` both columns are ``N/A``)."""
    return any(r.oop_wrong is not None and r.ip_wrong is None for r in rows)


def _print_step(value: float) -> float:
    # precision of a bandwidth printed in a 6-wide field: %.2f, then %.1f, then %.0f
    return 0.01 if value < 1000 else 0.1 if value < 10000 else 1.0


def _ranks_from_busbw(rows: Sequence[Row], coll: NcclTestsCollective) -> int | None:
    """Invert busbw = algbw x factor(n); None unless exactly one n fits every row."""
    if coll.busbw_factor(2) == coll.busbw_factor(3):
        return None  # factor 1: busbw says nothing about n
    pairs = [(a, b) for r in rows for a, b in ((r.oop_algbw_GBps, r.oop_busbw_GBps), (r.ip_algbw_GBps, r.ip_busbw_GBps))
             if a > 0 and math.isfinite(a) and math.isfinite(b)]
    if not pairs:
        return None
    a, b = max(pairs)
    ratio, top = b / a, coll.busbw_factor(10**9)  # the factor's limit for many ranks
    if not 0 <= ratio < top:
        return None
    estimate = round(top / (top - ratio))  # factor(n) = top * (n-1)/n for every registered collective
    fits = [n for n in range(max(1, estimate - 5), estimate + 6)
            if all(abs(x * coll.busbw_factor(n) - y) <= 0.5 * (_print_step(y) + coll.busbw_factor(n) * _print_step(x))
                   + 1e-9 for x, y in pairs)]
    return fits[0] if len(fits) == 1 else None


def _finish(rows: tuple[Row, ...], *, devices: tuple[Device, ...], program: str | None, build: BuildInfo | None,
            config: RunConfig | None, avg: float | None, oob: int | None, time_column: str,
            wrong_column: str | None, n_ranks: int | None, collective: str | None) -> NcclTestsLog:
    coll, coll_from = None, None
    if collective is not None:
        coll, coll_from = get_collective(collective), "parameter"
    elif (from_program := _collective_for_program(program)) is not None:
        coll, coll_from = from_program, "program"
    elif (guessed := guess_collective(rows)) is not None:
        coll, coll_from = COLLECTIVES[guessed], "rows"

    ranks_from = None
    if n_ranks is not None:
        if n_ranks < 1:
            raise SpecError(f"n_ranks: got {n_ranks}; expected 1 or more")
        ranks_from = "parameter"
    elif devices:
        # ranks are 0..n-1; the highest one survives logs trimmed to a few device lines
        n_ranks, ranks_from = max(d.rank for d in devices) + 1, "devices"
    elif coll is not None and coll.size_is_total:
        for r in rows:
            typesize = DTYPES.get(r.dtype)
            if typesize and r.count > 0 and r.size_bytes % (r.count * typesize) == 0:
                n_ranks, ranks_from = r.size_bytes // (r.count * typesize), "size/count"
                break
    if n_ranks is None and coll is not None and (inferred := _ranks_from_busbw(rows, coll)) is not None:
        n_ranks, ranks_from = inferred, "busbw/algbw"

    return NcclTestsLog(rows=rows, collective=coll.name if coll else None, collective_from=coll_from,
                        program=program, build=build, config=config, devices=devices, n_ranks=n_ranks,
                        n_ranks_from=ranks_from, avg_busbw_GBps=avg, out_of_bounds=oob,
                        time_column=time_column, wrong_column=wrong_column)


# --------------------------------------------------------------------------------------------
# JSON (-J, builds from late 2025)
# --------------------------------------------------------------------------------------------

def _num(value, where: str) -> float:
    # nccl-tests writes NaN as the string "nan"
    try:
        return float(value)
    except (TypeError, ValueError):
        raise SpecError(f"nccl-tests JSON: {where}: got {value!r}; expected a number") from None


def _int(value, where: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise SpecError(f"nccl-tests JSON: {where}: got {value!r}; expected a whole number") from None


def _object(value, where: str) -> Mapping:
    if not isinstance(value, Mapping):
        raise SpecError(f"nccl-tests JSON: {where}: got {value!r}; expected an object")
    return value


#: NCCL_VERSION(2,0,0) and the code of a major release 100 (src/nccl.h.in): what ncclGetVersion can return
_NCCL_CODES = range(2000, 1000000)


def _library_build(code) -> BuildInfo | None:
    """The NCCL library the file names (util.cu: "nccl_version", ncclGetVersion's code), not nccl-tests'."""
    if code is None:
        return None
    if _int(code, "nccl_version") not in _NCCL_CODES:
        raise SpecError(f"nccl-tests JSON: nccl_version: got {code!r}; expected NCCL's version code "
                        "(NCCL_VERSION(X,Y,Z), e.g. 22907 for 2.29.7)")
    return BuildInfo("", None, int(code))


def _json_half(half, where: str) -> tuple[float, float, float, float | None, str]:
    if half is None:  # trace replay prints no out-of-place result
        nan = float("nan")
        return nan, nan, nan, None, "time"
    if not isinstance(half, Mapping):
        raise SpecError(f"nccl-tests JSON: {where}: got {half!r}; expected an object with time, alg_bw, bus_bw, nwrong")
    time_key = "cpu_time" if "cpu_time" in half else "time"
    wrong = half.get("nwrong")
    return (_num(half.get(time_key), f"{where}.{time_key}"), _num(half.get("alg_bw"), f"{where}.alg_bw"),
            _num(half.get("bus_bw"), f"{where}.bus_bw"), None if wrong is None else _num(wrong, f"{where}.nwrong"),
            time_key)


def _json_device(d: Mapping, i: int) -> Device:
    where = f"devices[{i}]"
    return Device(rank=_int(d.get("rank", i), f"{where}.rank"), host=str(d.get("hostname", "")),
                  device=_int(d.get("device", 0), f"{where}.device"), name=str(d.get("device_info", "")),
                  group=d.get("group"), pid=_int(d.get("pid", 0), f"{where}.pid"), pci=str(d.get("device_hex", "")))


def from_json(data: str | bytes | Mapping, *, n_ranks: int | None = None,
              collective: str | None = None) -> NcclTestsLog:
    """Read the JSON file nccl-tests writes with ``-J file.json`` (util.cu, builds from late 2025).

    The file holds ``args`` (``argv``, whose first entry names the program), ``config`` (with the
    ``devices`` list nested inside it in util.cu; a top-level ``devices`` is accepted too),
    ``results`` (``size, count, type, redop, root`` and ``out_of_place``/``in_place`` objects with
    ``time`` or ``cpu_time``, ``alg_bw``, ``bus_bw``, ``nwrong``), ``out_of_bounds`` and
    ``average_bus_bandwidth``. Numbers keep full precision; ``root`` is the printed text
    (``"    -1"``); booleans are the strings ``"true"``/``"false"``.

    Examples
    --------
    >>> log = from_json('{"args": ["./build/all_reduce_perf", "-g", "8"], "results": [{"size": 8, "count": 2,'
    ...     ' "type": "float", "redop": "sum", "root": "    -1", "out_of_place": {"time": 13.67, "alg_bw": 0.000585,'
    ...     ' "bus_bw": 0.001024, "nwrong": 0.0}, "in_place": {"time": 13.03, "alg_bw": 0.000614,'
    ...     ' "bus_bw": 0.001074, "nwrong": 0.0}}]}', n_ranks=8)
    >>> log.collective, log.rows[0].root, log.rows[0].oop_time_us
    ('all_reduce', -1, 13.67)
    """
    if isinstance(data, (str, bytes)):
        try:
            doc = loads_json(data)
        except json.JSONDecodeError as err:
            raise SpecError(f"nccl-tests JSON: not valid JSON at line {err.lineno} column {err.colno}: {err.msg}",
                            hint="pass the file written by nccl-tests -J, not its stdout") from None
    else:
        doc = data
    if not isinstance(doc, Mapping) or not isinstance(doc.get("results"), list):
        raise SpecError("nccl-tests JSON: no 'results' list; expected the file written by nccl-tests -J",
                        hint="for the stdout table use parse_nccl_tests_log")
    cfg = _object(doc.get("config") or {}, "config")
    config = None
    if cfg:
        config = RunConfig(
            n_threads=_int(cfg.get("nthreads", 1), "config.nthreads"), n_gpus=_int(cfg.get("ngpus", 1), "config.ngpus"),
            min_bytes=_int(cfg.get("minimum_bytes", 0), "config.minimum_bytes"),
            max_bytes=_int(cfg.get("maximum_bytes", 0), "config.maximum_bytes"),
            step_factor=_int(cfg.get("step_factor", 1), "config.step_factor"),
            step_bytes=_int(cfg["step_bytes"], "config.step_bytes") if "step_bytes" in cfg else None,
            warmup_iters=_int(cfg.get("warmup_iters", 0), "config.warmup_iters"),
            iters=_int(cfg.get("iterations", 0), "config.iterations"),
            agg_iters=cfg.get("aggregated_iterations"), validation=_int(cfg.get("validation", 1), "config.validation"),
            graph=cfg.get("graph"), unalign=None,
            blocking=1 if str(cfg.get("blocking_collectives", "false")).lower() == "true" else 0,
        )
    listed = cfg.get("devices") or doc.get("devices") or []
    if not isinstance(listed, list):
        raise SpecError(f"nccl-tests JSON: devices: got {listed!r}; expected a list of objects")
    devices = tuple(_json_device(_object(d, f"devices[{i}]"), i) for i, d in enumerate(listed))
    rows, time_column = [], "time"
    for i, res in enumerate(doc["results"]):
        where = f"results[{i}]"
        if not isinstance(res, Mapping) or "size" not in res or "count" not in res:
            raise SpecError(f"nccl-tests JSON: {where}: got {res!r}; expected an object with size, count, type, "
                            "redop, root, out_of_place, in_place")
        root_text = str(res.get("root", "")).strip()
        if root_text and not _INT.match(root_text):
            raise SpecError(f"nccl-tests JSON: {where}.root: got {res.get('root')!r}; expected a rank like '    -1'")
        oop = _json_half(res.get("out_of_place"), f"{where}.out_of_place")
        ip = _json_half(res.get("in_place"), f"{where}.in_place")
        if "cpu_time" in (oop[4], ip[4]):
            time_column = "cputime"
        rows.append(Row(_int(res["size"], f"{where}.size"), _int(res["count"], f"{where}.count"),
                        str(res.get("type", "")), res.get("redop"),
                        int(root_text) if root_text else None, *oop[:4], *ip[:4]))
    if not rows:
        raise SpecError("nccl-tests JSON: 'results' is empty; expected at least one result")
    args = doc.get("args") or []
    if not isinstance(args, list):
        raise SpecError(f"nccl-tests JSON: args is {type(args).__name__}; expected the command line as a list of "
                        "strings, as nccl-tests -J writes it")
    program = str(args[0]).rsplit("/", 1)[-1] if args else None
    avg = _object(doc.get("average_bus_bandwidth") or {}, "average_bus_bandwidth").get("bandwidth")
    oob = _object(doc.get("out_of_bounds") or {}, "out_of_bounds").get("count")
    return _finish(tuple(rows), devices=devices, program=program, build=_library_build(doc.get("nccl_version")),
                   config=config, avg=None if avg is None else _num(avg, "average_bus_bandwidth.bandwidth"),
                   oob=None if oob is None else _int(oob, "out_of_bounds.count"), time_column=time_column,
                   wrong_column="#wrong",
                   n_ranks=n_ranks, collective=collective)
