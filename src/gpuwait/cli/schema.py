"""``gpuwait schema``: every knob of a scenario file."""

from __future__ import annotations


def schema() -> None:
    """Print the JSON Schema of scenario files: every field, its unit, default and description."""
    import json

    from gpuwait.cli.output import Output
    from gpuwait.spec import Scenario

    Output().text(json.dumps(Scenario.model_json_schema(), indent=2))
