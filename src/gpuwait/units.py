"""Parse and print physical quantities at the edges of gpuwait.

Inside gpuwait every quantity is a float in SI base units: bytes, seconds, bytes per second.
Human strings are turned into those numbers here, and back, and nowhere else.

Conventions (explicit, because the field mixes them freely):

* ``b`` is a bit, ``B`` is a byte. ``400Gbps`` / ``400Gb/s`` is 400e9 bits/s = 50e9 bytes/s.
* ``K M G T P`` are SI (10^3 ...); ``Ki Mi Gi Ti Pi`` are binary (2^10 ...). ``2MB`` is 2e6 bytes,
  ``8GiB`` is 8·2^30 bytes. nccl-tests' ``GB/s`` is 1e9 bytes/s.
* A size names its unit, ``B`` or ``b``, after the prefix; a bare prefix (``1G``) is refused with both
  readings, because tools disagree on it: Kubernetes reads ``1G`` as 10^9 bytes and ``1Gi`` as 2^30
  (kubernetes.io/docs/concepts/configuration/manage-resources-containers/#meaning-of-memory), nccl-tests'
  ``parsesize`` reads ``1G`` as 2^30 (src/common.cu). The one exception is nccl-tests' own ``-b``/``-e``/``-i``
  (``gpuwait perf``, the API's ``perf(sizes=...)``, a sweep's ``perf:`` sizes), read exactly as ``parsesize``
  does (:func:`gpuwait.collectives.nccltests.parse_size_arg`).
* Times: ``s ms us µs ns ps`` (and ``min``, ``h``).

Examples
--------
>>> parse_rate_Bps("400Gbps")
50000000000.0
>>> parse_size_bytes("8GiB")
8589934592.0
>>> parse_time_s("1.5us")
1.5e-06
>>> format_rate(50e9)
'400Gbps'
"""

from __future__ import annotations

import math
import re

from gpuwait.errors import UnitError

_SI = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_BIN = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}
# Sub-second units are divisors so that "250ns" parses to exactly 250/1e9.
_TIME_DIVISOR = {"": 1.0, "s": 1.0, "ms": 1e3, "us": 1e6, "µs": 1e6, "μs": 1e6, "ns": 1e9, "ps": 1e12, "min": 1 / 60.0, "h": 1 / 3600.0}

_NUMBER = r"(?P<num>[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)"
_QUANTITY = re.compile(_NUMBER + r"\s*(?P<unit>[A-Za-zµμ/]*)\s*$")


def _split(text: str | float | int, what: str) -> tuple[float, str]:
    if isinstance(text, bool):
        raise UnitError(f"{what}: got {text!r}; expected a number with a unit")
    if isinstance(text, (int, float)):
        try:
            return float(text), ""
        except OverflowError:  # an integer past float's range (YAML reads 1 followed by 400 zeros as one)
            return math.inf, ""
    match = _QUANTITY.match(str(text).strip())
    if not match:
        raise UnitError(f"{what}: cannot read {text!r}; expected a number and a unit like {_EXAMPLES[what]}")
    return float(match["num"]), match["unit"]


def _prefix(prefix: str, text: str, what: str) -> float:
    if prefix in _BIN:
        return _BIN[prefix]
    if prefix in _SI:
        return _SI[prefix]
    raise UnitError(f"{what}: unknown prefix {prefix!r} in {text!r}; expected one of K M G T P (SI, powers of 1000) "
                    "or Ki Mi Gi Ti Pi (binary, powers of 1024)")


#: Every spelling a size accepts, for the error that refuses another.
SIZE_SPELLINGS = ("B, KB MB GB TB PB (SI, powers of 1000), KiB MiB GiB TiB PiB (binary, powers of 1024), "
                  "or the same with b or bit for bits (Kb, Gibit); a bare number is bytes")


def _unknown_size_unit(unit: str, text: object) -> UnitError:
    """The one error for a size whose unit is not a byte or bit unit; a bare SI prefix gets both its readings."""
    stem = str(text).strip()[: -len(unit)].strip()
    if unit in _BIN:  # 8Gi: binary already, only the B is missing
        return UnitError(f"size: unit {unit!r} in {text!r} has no B (bytes) or b (bits); write '{stem}{unit}B'")
    if unit in _SI and unit:
        power = "KMGTP".index(unit.upper()) + 1
        return UnitError(f"size: unit {unit!r} in {text!r} has no B (bytes) or b (bits), and tools read a bare "
                         f"{unit} as 10^{3 * power} or 2^{10 * power}; write '{stem}{unit.upper()}B' (SI, 10^{3 * power}) "
                         f"or '{stem}{unit.upper()}iB' (binary, 2^{10 * power})")
    return UnitError(f"size: unknown unit {unit!r} in {text!r}; expected {SIZE_SPELLINGS}")


_EXAMPLES = {
    "size": "'2MB', '8GiB' or '4096B'",
    "rate": "'400Gbps', '50GB/s' or '25GiB/s'",
    "time": "'1.5us', '2ms' or '0.3s'",
}


def _check_sign(value: float, text: object, what: str, allow_zero: bool) -> float:
    if math.isinf(value):
        raise UnitError(f"{what}: got {text!r}; expected a finite {what}")
    if math.isnan(value) or (value < 0) or (value == 0 and not allow_zero):
        bound = "zero or more" if allow_zero else "more than zero"
        raise UnitError(f"{what}: got {text!r}; expected a {what} of {bound}")
    return value


def parse_size_bytes(text: str | float | int, *, allow_zero: bool = True) -> float:
    """Parse a data size to bytes. A bare number is bytes; ``b`` (bits) is divided by 8.

    >>> parse_size_bytes("2MB"), parse_size_bytes("1KiB"), parse_size_bytes("8Kb")
    (2000000.0, 1024.0, 1000.0)
    """
    value, unit = _split(text, "size")
    if value < 0:  # no unit makes it a size: one error, about the sign
        return _check_sign(value, text, "size", allow_zero)
    if unit in ("", "B"):
        scale = 1.0
    elif unit.endswith("B"):
        scale = _prefix(unit[:-1], str(text), "size")
    elif unit.endswith("b") or unit.endswith("bit"):
        stem = unit[:-3] if unit.endswith("bit") else unit[:-1]
        scale = _prefix(stem, str(text), "size") / 8.0
    else:
        raise _unknown_size_unit(unit, text)
    return _check_sign(value * scale, text, "size", allow_zero)


def parse_rate_Bps(text: str | float | int, *, allow_zero: bool = False) -> float:
    """Parse a data rate to bytes per second. A bare number is bytes/s.

    ``Gbps``, ``Gb/s`` and ``Gbit/s`` are bits; ``GB/s`` and ``GBps`` are bytes.

    >>> parse_rate_Bps("100Gb/s"), parse_rate_Bps("50GB/s")
    (12500000000.0, 50000000000.0)
    """
    value, unit = _split(text, "rate")
    if unit == "":
        return _check_sign(value, text, "rate", allow_zero)
    for suffix, bits in (("bps", True), ("b/s", True), ("bit/s", True), ("Bps", False), ("B/s", False)):
        if unit.endswith(suffix):
            stem = unit[: -len(suffix)]
            scale = _prefix(stem, str(text), "rate") / (8.0 if bits else 1.0)
            return _check_sign(value * scale, text, "rate", allow_zero)
    raise UnitError(f"rate: unknown unit {unit!r} in {text!r}; expected e.g. {_EXAMPLES['rate']}")


def parse_time_s(text: str | float | int, *, allow_zero: bool = True) -> float:
    """Parse a duration to seconds. A bare number is seconds.

    >>> parse_time_s("250ns"), parse_time_s("2ms")
    (2.5e-07, 0.002)
    """
    value, unit = _split(text, "time")
    if unit not in _TIME_DIVISOR:
        raise UnitError(f"time: unknown unit {unit!r} in {text!r}; expected one of s, ms, us, ns, ps")
    return _check_sign(value / _TIME_DIVISOR[unit], text, "time", allow_zero)


# 999999999.9999 bytes is "1GB", not "1000MB"
_ROUNDING = 1 - 1e-9


def _fmt_number(value: float, digits: int) -> str:
    text = f"{value:.{digits}g}"
    return text if "e" not in text else f"{value:.{digits}e}"


def format_rate(rate_Bps: float, *, bits: bool = True, digits: int = 4) -> str:
    """Print a rate: in bits/s (``400Gbps``) by default, or bytes/s (``50GB/s``).

    >>> format_rate(50e9), format_rate(50e9, bits=False)
    ('400Gbps', '50GB/s')
    """
    value = rate_Bps * 8.0 if bits else rate_Bps
    unit = "bps" if bits else "B/s"
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(value) >= scale * _ROUNDING:
            return f"{_fmt_number(value / scale, digits)}{prefix}{unit}"
    return f"{_fmt_number(value, digits)}{unit}"


def format_size(size_bytes: float, *, binary: bool = False, digits: int = 4) -> str:
    """Print a size in SI (``2MB``) or binary (``8GiB``) bytes.

    >>> format_size(2e6), format_size(8 * 2**30, binary=True)
    ('2MB', '8GiB')
    """
    steps = (("Ti", 2.0**40), ("Gi", 2.0**30), ("Mi", 2.0**20), ("Ki", 2.0**10)) if binary else (
        ("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3))
    for prefix, scale in steps:
        if abs(size_bytes) >= scale * _ROUNDING:
            return f"{_fmt_number(size_bytes / scale, digits)}{prefix}B"
    return f"{_fmt_number(size_bytes, digits)}B"


def format_time(time_s: float, *, digits: int = 4) -> str:
    """Print a duration with the largest unit that keeps it at or above 1.

    >>> format_time(1.5e-6), format_time(0.25)
    ('1.5us', '250ms')
    """
    if math.isinf(time_s):
        return "inf"
    if time_s == 0:
        return "0s"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)):
        if abs(time_s) >= scale * _ROUNDING:
            return f"{_fmt_number(time_s / scale, digits)}{unit}"
    return f"{_fmt_number(time_s / 1e-12, digits)}ps"
