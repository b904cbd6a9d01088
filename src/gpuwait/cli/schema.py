"""``gpuwait schema``: every knob of a scenario file."""

from __future__ import annotations


def with_units(node):
    """The schema with every sized, rated or timed default written as a scenario file would write it
    (``400Gbps``, ``2MB``, ``1.5us``) instead of a bare SI float (``50000000000.0``); each text parses
    back to the same value, so it can be copied into a file."""
    from gpuwait.units import format_rate, format_size, format_time

    if isinstance(node, list):
        return [with_units(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: with_units(v) for k, v in node.items()}
    unit, default = str(node.get("description_unit", "")), node.get("default")
    if isinstance(default, (int, float)) and not isinstance(default, bool):
        if unit.startswith("rate"):
            # NVLink and other in-server rates read in bytes/s (450GB/s), network line rates in bits/s
            out["default"] = format_rate(default, bits="bits/s" in unit, digits=6)
        elif unit.startswith("size"):
            # NCCL-style sizes (25MiB buckets) are powers of two: written so they read as round numbers
            binary = default > 0 and default % 2**20 == 0 and default % 1e6 != 0
            out["default"] = format_size(default, binary=binary, digits=6)
        elif unit.startswith("duration"):
            out["default"] = format_time(default, digits=6)
    return out


def schema() -> None:
    """Print the JSON Schema of scenario files: every field, its unit, default and description.

    Defaults with a unit print with it (`400Gbps`, `2MB`, `1.5us`), as a scenario file writes them.
    """
    import json

    from gpuwait.cli.output import Output
    from gpuwait.spec import Scenario

    Output().text(json.dumps(with_units(Scenario.model_json_schema()), indent=2))
