"""The error telemetry readers raise for input they cannot read."""

from __future__ import annotations

from gpuwait.errors import SpecError


class TelemetryFormatError(SpecError):
    """A telemetry file or text that is not in the format it claims (or that no reader recognizes).

    The message names the file or line and what was expected; it is a :class:`SpecError`, so code
    that catches bad user input catches it too.
    """
