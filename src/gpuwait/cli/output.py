"""The one output sink: rich for people, ``--json`` for machines."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
from rich.console import Console


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
        self.console = Console(highlight=False, soft_wrap=False, width=None if sys.stdout.isatty() else 140)

    def emit(self, data: dict, render: Callable[[Console], None]) -> None:
        if self.json_mode:
            sys.stdout.write(json.dumps(_plain(data), indent=2) + "\n")
        else:
            render(self.console)

    def text(self, text: str) -> None:
        """Raw text that is its own machine format (DOT, topology.conf, JSON Schema)."""
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
