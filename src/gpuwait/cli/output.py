"""The one output sink: rich for people, ``--json`` for machines."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
from rich.console import Console
from rich.errors import MarkupError
from rich.text import Text

from gpuwait.cli.common import terminal_safe


class SafeConsole(Console):
    """A rich console for text that carries names from user files: control characters (terminal
    escape sequences) are shown escaped, and a name that reads as broken markup (``[/]``) is printed
    as plain text instead of raising. Views still escape the names they place inside markup."""

    def render_str(self, text: str, **kwargs: Any) -> Text:
        text = terminal_safe(text)  # markup never uses control characters, so this cannot break it
        try:
            return super().render_str(text, **kwargs)
        except MarkupError:
            return super().render_str(text, **(kwargs | {"markup": False}))


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return _plain(value.tolist())
    if isinstance(value, np.generic):
        return _plain(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


class Output:
    """Write results either as rich renderables or as one JSON document on stdout."""

    def __init__(self, json_mode: bool = False) -> None:
        self.json_mode = json_mode
        self.console = SafeConsole(highlight=False, soft_wrap=False, width=None if sys.stdout.isatty() else 140)

    def emit(self, data: dict, render: Callable[[Console], None]) -> None:
        if self.json_mode:
            sys.stdout.write(json.dumps(_plain(data), indent=2) + "\n")
        else:
            render(self.console)

    def text(self, text: str) -> None:
        """Raw text that is its own machine format (DOT, topology.conf, JSON Schema); control characters
        are shown escaped when it goes to a terminal."""
        if sys.stdout.isatty():
            text = "\n".join(terminal_safe(line) for line in text.split("\n"))
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
