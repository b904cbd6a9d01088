"""The one error hierarchy of gpuwait.

Every error a user can cause (a bad file, a bad flag, an impossible topology) is a
:class:`GpuwaitError`. The CLI prints ``str(err)`` on one line and ``err.hint`` below it;
the traceback only appears with ``GPUWAIT_DEBUG=1``.
"""

from __future__ import annotations


class GpuwaitError(Exception):
    """Base class: a message naming the field or value, what was expected, and a hint."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


class UnitError(GpuwaitError, ValueError):
    """A quantity string that cannot be parsed, or a value of the wrong kind of unit."""


class SpecError(GpuwaitError, ValueError):
    """A scenario file or option that does not validate.

    ``problems`` holds one line per failing field: ``path: got <value>; expected <what>``.
    """

    def __init__(self, message: str, *, problems: list[str] | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.problems = list(problems or [])


class UnknownNameError(GpuwaitError, KeyError):
    """A preset, template, node, link, hash or router name that does not exist."""

    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0]


class TopologyError(GpuwaitError, ValueError):
    """A topology that cannot be built (more servers than the fabric holds, a bad ratio...)."""


class RoutingError(GpuwaitError, ValueError):
    """No path between two endpoints, or an unusable routing configuration."""


class SimulationError(GpuwaitError, RuntimeError):
    """An engine input that is inconsistent (a dependency cycle, a flow with no path...)."""
