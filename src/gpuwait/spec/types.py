"""Quantity field types for scenario files: a YAML string with a unit in, SI floats out.

A field typed :data:`RateBps` accepts ``"400Gbps"``, ``"50GB/s"`` or a bare number of bytes/s and
stores bytes per second; :data:`SizeBytes` stores bytes; :data:`TimeS` stores seconds.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BeforeValidator, PlainSerializer, ValidationInfo, WithJsonSchema

import gpuwait.units as units
from gpuwait.errors import UnitError


def _wrap(parse, unit_example: str | None):
    def validate(value: Any, info: ValidationInfo) -> float:
        bare = isinstance(value, (int, float)) and not isinstance(value, bool)
        if bare and value != 0 and unit_example and (info.context or {}).get("require_units"):
            # a file saying `nic_speed: 400` almost never means 400 bytes/s
            raise ValueError(f"a bare number has no unit; expected a quantity like {unit_example!r}")
        try:
            return parse(value)
        except UnitError as err:
            # the loader adds "got <value>"; keep only what was expected
            message = str(err).split(": ", 1)[-1]
            raise ValueError(re.sub(r"^got .*?; ", "", message)) from None

    return validate


def _quantity(parse, fmt, unit_text: str, example: str, *, unit_required: bool = True):
    """An annotated float field: parsed by ``parse``, printed by ``fmt`` in JSON, documented in the schema.

    In files (validation context ``require_units``) a non-zero bare number is refused when
    ``unit_required``: rates and times must carry their unit. Sizes may be bare bytes.
    """
    return Annotated[
        float,
        BeforeValidator(_wrap(parse, example if unit_required else None)),
        PlainSerializer(fmt, return_type=str, when_used="json"),
        WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "number"}], "description_unit": unit_text,
                        "examples": [example]}),
    ]


if TYPE_CHECKING:
    # What a validated field holds. The annotated types below are built by a function call, which
    # a type checker cannot read as an alias; pydantic needs their validators, mypy only the float.
    RateBps = float
    RateOrZeroBps = float
    SizeBytes = float
    PositiveSizeBytes = float
    TimeS = float
else:
    RateBps = _quantity(units.parse_rate_Bps, units.format_rate,
                        "rate (bits/s like 400Gbps, or bytes/s like 50GB/s)", "400Gbps")
    RateOrZeroBps = _quantity(lambda v: units.parse_rate_Bps(v, allow_zero=True), units.format_rate, "rate (0 = absent)", "0")
    SizeBytes = _quantity(units.parse_size_bytes, units.format_size,
                          "size (2MB = 2e6 bytes, 8GiB = 8*2^30 bytes, a bare number = bytes)", "64MiB", unit_required=False)
    PositiveSizeBytes = _quantity(lambda v: units.parse_size_bytes(v, allow_zero=False), units.format_size,
                                  "size, more than zero (a bare number = bytes)", "64MiB", unit_required=False)
    TimeS = _quantity(units.parse_time_s, units.format_time, "duration (1.5us, 2ms)", "1.5us")
