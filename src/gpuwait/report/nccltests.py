"""Write results exactly as nccl-tests prints them (``all_reduce_perf`` and friends).

Engineers compare every new cluster against nccl-tests tables and keep regexes and dashboards
that read them, so gpuwait prints simulated runs in the same text, byte for byte. This module
holds number formatting and the table lines; the programs, bus-bandwidth factors, size sweeps and
records they print are :mod:`gpuwait.collectives.nccltests`. No model logic lives here; callers
pass rows and get text.

Two print styles exist in real logs, and both are reproduced:

``"current"``
    ``src/util.cu`` of nccl-tests (2.18 and later at least; upstream HEAD 2.19.6): numbers go
    through ``getFloatStr`` (``%.2f``, else ``%.1f``, ``%.0f``, ``%.1e`` to fit the width),
    ``#wrong`` is ``%6g``.
``"legacy"``
    the older ``src/common.cu`` printer that produced most published tables (the DGX H100 and
    OCI A100 tables of docs/sources.md): time is ``%7.2f`` below 100 us, ``%7.1f``
    below 10000 us, else ``%7.0f``; bandwidths ``%6.2f``; ``#wrong`` is ``%5g``.

Sources: NVIDIA/nccl-tests ``src/util.cu`` (``getFloatStr``, ``writeDeviceReport``,
``writeResultHeader``, ``writeBenchmarkLinePreamble/Body``, ``writeResultFooter``),
``src/common.cu`` (``parsesize``, the size loop in ``TimeTest``, ``setupArgs``), the per-collective
``*GetCollByteCount`` / ``*GetBw`` functions, and ``doc/PERFORMANCE.md``.

Examples
--------
>>> get_float_str(18289.0, 7)
'18289.0'
>>> from gpuwait.collectives.nccltests import make_row
>>> row = make_row("all_reduce", 2**20, "float", 8, oop_time_s=27.37e-6, ip_time_s=26.93e-6)
>>> format_row(row)
'     1048576        262144     float     sum      -1    27.37   38.31   67.04       0    26.93   38.94   68.14       0'
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from gpuwait.collectives.nccltests import (
    DEFAULT_STEP_BYTES,
    BuildInfo,
    Device,
    Row,
    RunConfig,
    average_busbw_GBps,
)
from gpuwait.errors import SpecError

Style = Literal["current", "legacy"]
STYLES: tuple[str, ...] = ("current", "legacy")

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
    >>> from gpuwait.collectives.nccltests import make_row
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
