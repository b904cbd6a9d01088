"""Load scenario files: YAML in, a validated frozen model out, or one error listing every problem."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from gpuwait.errors import SpecError
from gpuwait.spec.reader import read_yaml_checked, short_value

#: problems listed in one error; the rest are counted
MAX_PROBLEMS_SHOWN = 10

M = TypeVar("M", bound=BaseModel)


def _path_text(loc: tuple) -> str:
    text = ""
    for index, part in enumerate(loc):
        if part == "[key]":
            continue  # pydantic's marker after a mapping's key that is itself wrong: said with the key below
        if index + 1 < len(loc) and loc[index + 1] == "[key]":
            text += " (a key)"  # `{3: 10}` where names belong: the key is what is wrong, not an item `[3]`
        elif isinstance(part, int):
            text += f"[{part}]"
        elif str(part).startswith(("function-", "lambda")):
            continue  # pydantic's name for a validator step, not a YAML key
        else:
            text += ("." if text else "") + str(part)
    return text or "(top level)"


def _expected(err: Mapping[str, Any]) -> str:
    kind, msg = err["type"], err["msg"]
    if kind == "extra_forbidden":
        return "no such field (check the spelling; `gpuwait schema` lists every field)"
    if kind == "missing":
        return "this field is required"
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    else:
        msg = msg[0].lower() + msg[1:]
    return msg if len(msg) <= 200 else msg[:200] + "..."


#: pydantic's name for one choice of a union in an error's location (``literal['packed','spread']``,
#: ``list[int]``, ``int``): a type, never a scenario field's name
_UNION_CHOICE = re.compile(r"^(literal\[|list\[|tuple\[|set\[|dict\[|int$|float$|str$|bool$|none$)", re.IGNORECASE)
_SEQUENCE_CHOICE = ("list[", "tuple[", "set[")


def _shape(value: Any) -> str:
    return "sequence" if isinstance(value, list | tuple) else "mapping" if isinstance(value, dict) else "scalar"


def _choice_shape(choice: str) -> str:
    lowered = choice.lower()
    return "sequence" if lowered.startswith(_SEQUENCE_CHOICE) else "mapping" if lowered.startswith("dict[") else "scalar"


def _choice_at(loc: tuple) -> int | None:
    """The index of the first union choice in ``loc``, if any."""
    return next((i for i, part in enumerate(loc) if isinstance(part, str) and _UNION_CHOICE.match(part)), None)


def _fitting_choices(errors: list[dict]) -> list[dict]:
    """A union's errors reduced to the choices of the value's own shape: a list given where a name or a list
    belongs (``placement: [a, 0]``) is wrong as a list, not as the name it was never meant to be; a
    scalar is wrong as a scalar. Choices are judged by the whole value pydantic tried on each; where
    no choice of a union has the value's shape, every error stays."""
    whole: dict[tuple, Any] = {}  # union's path -> the value tried on its choices
    for item in errors:
        i = _choice_at(item["loc"])
        if i is not None and len(item["loc"]) == i + 1:
            whole.setdefault(item["loc"][:i], item.get("input"))
    kept, kept_unions = [], set()
    for item in errors:
        i = _choice_at(item["loc"])
        if i is None or item["loc"][:i] not in whole:
            kept.append(item)
            continue
        union = item["loc"][:i]
        if _shape(whole[union]) == _choice_shape(str(item["loc"][i])):
            kept.append({**item, "loc": union + item["loc"][i + 1:]})
            kept_unions.add(union)
    return kept if kept_unions == set(whole) else errors


def describe_validation_error(err: ValidationError, prefix: str = "") -> list[str]:
    """One line per problem: ``path: got <value>; expected <what>``."""
    lines = []
    for item in _fitting_choices([dict(e) for e in err.errors()]):
        path = _path_text(tuple(prefix.split(".")) + item["loc"] if prefix else item["loc"])
        got = "" if item["type"] == "missing" else f"got {short_value(item.get('input'))}; "
        lines.append(f"{path}: {got}{_expected(item)}")
    return lines


def validate_data(model: type[M], data: Any, *, source: str = "input", require_units: bool = True) -> M:
    """Validate plain data into ``model``; raise :class:`SpecError` listing every problem.

    ``require_units`` (on for files and user input) refuses bare numbers for rates and times.
    """
    try:
        return model.model_validate(data, context={"require_units": require_units})
    except ValidationError as err:
        problems = describe_validation_error(err)
        count = len(problems)
        shown = problems[:MAX_PROBLEMS_SHOWN]
        more = f"; and {count - len(shown)} more" if count > len(shown) else ""
        raise SpecError(
            f"{source}: {count} problem{'s' if count > 1 else ''}: " + "; ".join(shown) + more,
            problems=problems,
            hint="`gpuwait schema` prints every field with its unit and default",
        ) from None


def read_yaml(path: str | Path) -> Any:
    """Read a YAML file through the checked reader (:mod:`gpuwait.spec.reader`): I/O, encoding, size,
    depth, alias, duplicate-key and syntax problems become one :class:`SpecError` line."""
    return read_yaml_checked(path, "a scenario or cluster mapping")


def load_model(model: type[M], path: str | Path) -> M:
    """Read and validate a YAML file into ``model``."""
    return validate_data(model, read_yaml(path), source=str(path))
