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
