"""Units at the edges: bits vs bytes, SI vs binary, times; clear errors for bad strings."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuwait.errors import UnitError
from gpuwait.units import format_rate, format_size, format_time, parse_rate_Bps, parse_size_bytes, parse_time_s


@pytest.mark.parametrize("text, expected", [
    ("400Gbps", 50e9), ("400Gb/s", 50e9), ("400Gbit/s", 50e9), ("50GB/s", 50e9), ("50GBps", 50e9),
    ("25GiB/s", 25 * 2**30), ("100Mbps", 12.5e6), (1e9, 1e9), ("12.5e9", 12.5e9),
])
def test_rates(text, expected):
    assert parse_rate_Bps(text) == pytest.approx(expected)


@pytest.mark.parametrize("text, expected", [
    ("2MB", 2e6), ("8GiB", 8 * 2**30), ("4096", 4096.0), ("1KiB", 1024.0), ("8Kb", 1000.0), ("0", 0.0), ("1.5TB", 1.5e12),
])
def test_sizes(text, expected):
    assert parse_size_bytes(text) == expected


@pytest.mark.parametrize("text, expected", [("1.5us", 1.5e-6), ("250ns", 250e-9), ("2ms", 2e-3), ("0.3s", 0.3),
                                            ("1µs", 1e-6), ("1min", 60.0)])
def test_times(text, expected):
    assert parse_time_s(text) == pytest.approx(expected)


@pytest.mark.parametrize("parse, text, message", [
    (parse_rate_Bps, "400Gpbs", "unknown unit"), (parse_rate_Bps, "0Gbps", "more than zero"),
    (parse_rate_Bps, "-1GB/s", "more than zero"), (parse_size_bytes, "-2MB", "zero or more"),
    (parse_size_bytes, "2XB", "unknown prefix"), (parse_size_bytes, "lots", "cannot read"),
    (parse_time_s, "3 parsecs", "unknown unit .parsecs."), (parse_time_s, "3h2", "cannot read"), (parse_size_bytes, True, "expected a number"),
])
def test_bad_strings_name_what_was_expected(parse, text, message):
    with pytest.raises(UnitError, match=message):
        parse(text)


def test_formatting():
    assert format_rate(50e9) == "400Gbps"
    assert format_rate(50e9, bits=False) == "50GB/s"
    assert format_size(2e6) == "2MB" and format_size(8 * 2**30, binary=True) == "8GiB"
    assert format_size(999_999_999.9999) == "1GB"
    assert format_time(1.5e-6) == "1.5us" and format_time(0) == "0s" and format_time(0.25) == "250ms"


@given(st.floats(min_value=1.0, max_value=1e15, allow_nan=False))
def test_round_trip_of_printed_quantities(value):
    assert parse_rate_Bps(format_rate(value, digits=12)) == pytest.approx(value, rel=1e-9)
    assert parse_size_bytes(format_size(value, digits=12)) == pytest.approx(value, rel=1e-9)
    assert parse_time_s(format_time(value * 1e-9, digits=12)) == pytest.approx(value * 1e-9, rel=1e-9)


def test_an_integer_past_floats_range_is_refused_as_not_finite():
    # bench/fuzz.py --seed 3034: a node/link file's speed of 1 followed by 400 zeros (a YAML int) was an
    # OverflowError traceback from float(); its string form was already "expected a finite rate"
    for parse in (parse_rate_Bps, parse_size_bytes, parse_time_s):
        with pytest.raises(UnitError, match="expected a finite"):
            parse(10**400)


@pytest.mark.parametrize("text, message", [
    ("1G", r"unit 'G' in '1G' has no B \(bytes\) or b \(bits\), and tools read a bare G as 10\^9 or 2\^30; "
           r"write '1GB' \(SI, 10\^9\) or '1GiB' \(binary, 2\^30\)"),
    ("64k", r"write '64KB' \(SI, 10\^3\) or '64KiB' \(binary, 2\^10\)"),
    ("8Gi", r"unit 'Gi' in '8Gi' has no B \(bytes\) or b \(bits\); write '8GiB'$"),
    ("3 bytes", r"unknown unit 'bytes' in '3 bytes'; expected B, KB MB GB TB PB \(SI, powers of 1000\), "
                r"KiB MiB GiB TiB PiB \(binary, powers of 1024\), or the same with b or bit for bits"),
])
def test_a_size_without_a_byte_unit_names_the_accepted_spellings(text, message):
    """A bare prefix has two readings (Kubernetes' 1G is 10^9 bytes, nccl-tests' parsesize 2^30): it was refused as
    "unknown unit 'G'; expected B (bytes) or b (bits)", which named neither GB nor GiB; another unit was refused
    without the list of spellings."""
    with pytest.raises(UnitError, match=message):
        parse_size_bytes(text)


@pytest.mark.parametrize("text", ["-1G", "-1GiB", "-3 bytes", "-2"])
def test_a_negative_size_is_one_error_about_its_sign(text):
    """Whatever its unit: '-1G' was refused for its unit, and '-1GiB' then for its sign."""
    with pytest.raises(UnitError, match=r"^size: got .*; expected a size of zero or more$"):
        parse_size_bytes(text)
