"""The one checked reader for every input file: scenario and cluster YAML, telemetry files, logs.

Every file a user names is read here, so what real files (and hostile ones) contain becomes one
:class:`~gpuwait.errors.SpecError` line naming the file and what was expected, never a traceback,
a hang or a machine out of memory:

==========================  =====================================================================
what                        refused with
==========================  =====================================================================
a missing path, directory   ``cannot read`` / ``is a directory``
``/dev/zero``, a FIFO       ``not a regular file`` (reading a character device never ends)
a file over the size limit  its size and the limit (:data:`MAX_TEXT_BYTES`)
bytes that are not UTF-8    the line and column of the first bad byte
an empty YAML document      ``empty`` (``validate`` and ``run`` refuse it alike)
YAML nested too deep        the line, and the depth limit (:data:`MAX_YAML_DEPTH`)
an alias bomb               the expanded size and its limit (:data:`MAX_YAML_NODES`)
a duplicate key             both line numbers (YAML would silently keep the last)
an integer of many digits   the line and the digit limit (:data:`MAX_INT_DIGITS`)
JSON: any unreadable text   a :class:`json.JSONDecodeError` each JSON reader names (:func:`loads_json`)
==========================  =====================================================================

>>> load_yaml_text("a: 1\\na: 2\\n", "s.yaml")
Traceback (most recent call last):
...
gpuwait.errors.SpecError: s.yaml: line 2: duplicate key 'a' (first at line 1); expected each key once
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from pathlib import Path
from typing import Any

import yaml

from gpuwait.errors import SpecError

#: the largest text file read (scenario, log, scrape); far above any real scenario or nccl-tests log
MAX_TEXT_BYTES = 256 * 2**20
#: the largest scenario or cluster YAML file
MAX_YAML_BYTES = 16 * 2**20
#: deeper YAML than this is refused (gpuwait's deepest field sits at depth 5)
MAX_YAML_DEPTH = 64
#: nodes after expanding every alias; a few aliases in a real file add a few hundred
MAX_YAML_NODES = 1_000_000
#: digits in one YAML integer (2**64 has 20; more is a mistake, and Python refuses past 4,300)
MAX_INT_DIGITS = 40
#: characters of a value shown in an error message
MAX_SHOWN_CHARS = 80


def short_value(value: Any, limit: int = MAX_SHOWN_CHARS) -> str:
    """``repr(value)`` cut to ``limit`` characters, with its type and size when cut.

    >>> short_value("x" * 1000)
    "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx... (str of 1,000 characters)"
    >>> short_value([1, 2])
    '[1, 2]'
    """
    try:
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**MAX_INT_DIGITS:
            return f"an integer of {len(str(abs(value))) if abs(value) < 10**4000 else 'over 4,000'} digits"
        text = _bounded_repr(value, limit + 1)
    except (ValueError, RecursionError):
        return f"a {type(value).__name__}"
    if len(text) <= limit:
        return text
    size = f"{len(value):,} {'characters' if isinstance(value, str) else 'items'}" if hasattr(value, "__len__") else ""
    return f"{text[:limit]}... ({type(value).__name__}{' of ' + size if size else ''})"


def whole_number(name: str, value: Any, least: int) -> int:
    """``value`` when it is a whole number of at least ``least``, else one :class:`SpecError` naming ``name``.

    For the counts the Python API takes untyped (``servers``, ``steps``, ``iters``...): the command line's
    options are typed already, and a float or string would otherwise fail deep inside as a TypeError, and
    ``True`` would pass as 1.

    >>> whole_number("servers", 2, 1)
    2
    >>> whole_number("servers", 2.5, 1)
    Traceback (most recent call last):
    ...
    gpuwait.errors.SpecError: servers: got 2.5; expected a whole number, 1 or more
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise SpecError(f"{name}: got {short_value(value)}; expected a whole number, {least} or more")
    return value


def not_one_string(name: str, value: Any, example: str) -> None:
    """Refuse a bare string where a list of strings belongs: iterated, ``"slow-gpu:s1.gpu3"`` would be read
    character by character and the error would name ``'s'``.

    >>> not_one_string("inject", "slow-gpu:s1.gpu3", "['slow-gpu:s1.gpu3']")
    Traceback (most recent call last):
    ...
    gpuwait.errors.SpecError: inject: got the string 'slow-gpu:s1.gpu3'; expected a list, e.g. ['slow-gpu:s1.gpu3']
    """
    if isinstance(value, (str, bytes)):
        raise SpecError(f"{name}: got the string {short_value(value)}; expected a list, e.g. {example}")


def _bounded_repr(value: Any, limit: int) -> str:
    """repr of containers built only until ``limit`` characters, so a huge value costs nothing."""
    if isinstance(value, (list, tuple, dict)):
        parts, length = [], 0
        items = value.items() if isinstance(value, dict) else value
        for item in items:
            part = (f"{_bounded_repr(item[0], limit)}: {_bounded_repr(item[1], limit)}" if isinstance(value, dict)
                    else _bounded_repr(item, limit))
            parts.append(part)
            length += len(part) + 2
            if length > limit:
                break
        brackets = "{}" if isinstance(value, dict) else "()" if isinstance(value, tuple) else "[]"
        one = "," if isinstance(value, tuple) and len(value) == 1 else ""  # ('1M',), as repr() shows it
        return brackets[0] + ", ".join(parts) + one + brackets[1]
    if isinstance(value, str) and len(value) > limit:
        return repr(value[:limit])
    return repr(value)


def _file_error(path: Path, what: str, message: str, hint: str | None = None) -> SpecError:
    return SpecError(f"{path}: {message}; expected {what}", hint=hint)


def read_bytes_checked(path: str | Path, what: str = "a text file", max_bytes: int = MAX_TEXT_BYTES) -> bytes:
    """The bytes of the regular file ``path``, at most ``max_bytes``; a :class:`SpecError` otherwise."""
    if not str(path).strip():  # Path("") is the working directory: "'.' is a directory" would mislead
        raise SpecError(f"got an empty path; expected {what}", hint="name the file")
    path = Path(path)
    try:
        info = os.stat(path)
    except (OSError, ValueError) as err:
        why = getattr(err, "strerror", None) or str(err)
        raise _file_error(path, what, f"cannot read the file ({why})", "check the path") from None
    if stat.S_ISDIR(info.st_mode):
        raise _file_error(path, what, "is a directory")
    if not stat.S_ISREG(info.st_mode):
        raise _file_error(path, what, "not a regular file (a device, FIFO or socket never ends)")
    if info.st_size > max_bytes:
        raise _file_error(path, what, f"{info.st_size:,} bytes, over the limit of {max_bytes:,}",
                          "split the file, or keep only the part to read")
    try:
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)  # a file growing while read stops here
    except OSError as err:
        raise _file_error(path, what, f"cannot read ({err.strerror})", "check its permissions") from None
    if len(data) > max_bytes:
        raise _file_error(path, what, f"over the limit of {max_bytes:,} bytes")
    return data


def decode_text(data: bytes, source: str, what: str = "UTF-8 text") -> str:
    """``data`` decoded as UTF-8 (a byte-order mark dropped), or as UTF-16 when it opens with UTF-16's mark (what
    Windows PowerShell 5.1's ``>`` and Out-File write by default, its "Unicode" encoding); the first bad byte
    named by line and column.

    >>> decode_text("# nThread 1\\r\\n".encode("utf-16"), "log")
    '# nThread 1\\r\\n'
    """
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError:
            pass  # not UTF-16 after all: named below as the UTF-8 it is not
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise SpecError(f"{source}: line {line}, column {column}: byte 0x{data[err.start]:02x} is not UTF-8; "
                        f"expected {what}", hint="save the file as UTF-8") from None


def loads_json(text: str | bytes) -> Any:
    """``json.loads`` whose every failure is a :class:`json.JSONDecodeError`, which each JSON reader turns into
    its one line. ``json.loads`` itself raises a bare ValueError for a number past Python's digit limit
    (``sys.get_int_max_str_digits``, 4300) and a RecursionError for arrays nested thousands deep: tracebacks
    to a reader that catches only decode errors.

    >>> loads_json('{"a": [1, 2]}')
    {'a': [1, 2]}
    >>> loads_json("[" + "9" * 5000 + "]")
    Traceback (most recent call last):
    ...
    json.decoder.JSONDecodeError: a number of more than 4300 digits: line 1 column 1 (char 0)
    >>> loads_json("[" * 100000)
    Traceback (most recent call last):
    ...
    json.decoder.JSONDecodeError: nested too deep to read: line 1 column 1 (char 0)
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except UnicodeDecodeError:  # bytes that are not UTF-8 (a ValueError too)
        reason = "not UTF-8 text"
    except ValueError:
        reason = f"a number of more than {sys.get_int_max_str_digits()} digits"
    except RecursionError:
        reason = "nested too deep to read"
    doc = text if isinstance(text, str) else text.decode("utf-8", "replace")
    raise json.JSONDecodeError(reason, doc, 0) from None


def read_text_checked(path: str | Path, what: str = "a UTF-8 text file", max_bytes: int = MAX_TEXT_BYTES) -> str:
    """The text of ``path``: a regular file of at most ``max_bytes``, in UTF-8."""
    return decode_text(read_bytes_checked(path, what, max_bytes), str(path), what)


class _CheckedLoader(yaml.SafeLoader):
    """PyYAML's safe loader with limits on depth, alias expansion, key repeats and integer size."""

    def __init__(self, stream: str, source: str) -> None:
        super().__init__(stream)
        self.source = source
        self.depth = 0

    def compose_node(self, parent, index):  # noqa: ANN001 - PyYAML's signature
        self.depth += 1
        if self.depth > MAX_YAML_DEPTH:
            mark = self.peek_event().start_mark
            raise SpecError(f"{self.source}: line {mark.line + 1}: nested deeper than {MAX_YAML_DEPTH} levels; "
                            "expected a scenario or cluster file", hint="gpuwait's deepest field sits 5 levels down")
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_mapping(self, node, deep=False):  # noqa: ANN001
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:
                continue  # an unhashable key: PyYAML names it below
            line = key_node.start_mark.line + 1
            if first is not None:
                raise SpecError(f"{self.source}: line {line}: duplicate key {short_value(key)} (first at line {first}); "
                                "expected each key once", hint="YAML would silently keep the last value; remove one")
            seen[key] = line
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node):  # noqa: ANN001
        digits = sum(ch.isdigit() for ch in str(node.value))
        if digits > MAX_INT_DIGITS:
            raise SpecError(f"{self.source}: line {node.start_mark.line + 1}: an integer of {digits:,} digits; "
                            f"expected at most {MAX_INT_DIGITS} digits")
        return super().construct_yaml_int(node)


_CheckedLoader.add_constructor("tag:yaml.org,2002:int", _CheckedLoader.construct_yaml_int)


def _expanded_nodes(node: yaml.Node, limit: int) -> int:
    """Nodes of ``node`` with every alias expanded, counted without expanding (memoized per node);
    stops counting past ``limit``."""
    sizes: dict[int, int] = {}
    order, stack = [], [node]
    while stack:  # post-order without recursion: the depth is checked already, but stay flat
        current = stack.pop()
        if id(current) in sizes:
            continue
        sizes[id(current)] = 0
        order.append(current)
        if isinstance(current, yaml.SequenceNode):
            stack.extend(current.value)
        elif isinstance(current, yaml.MappingNode):
            stack.extend(n for pair in current.value for n in pair)
    for current in reversed(order):
        total = 1
        if isinstance(current, yaml.SequenceNode):
            total += sum(sizes[id(n)] for n in current.value)
        elif isinstance(current, yaml.MappingNode):
            total += sum(sizes[id(n)] for pair in current.value for n in pair)
        sizes[id(current)] = min(total, limit + 1)
    return sizes[id(node)]


# a quoted scalar (where a quote can open one), a comment, or a flow bracket
_FLOW_TOKENS = re.compile(r"""(?<![^\s\[{,:])(?:'(?:[^']|'')*'|"(?:[^"\\]|\\.)*")|(?<!\S)#[^\n]*|[\[\]{}]""")


def _flow_depth(text: str) -> tuple[int, int]:
    """The deepest nesting of flow brackets (``[`` ``{``) outside quotes and comments, and its offset.

    PyYAML's scanner keeps a list per open bracket and rescans it per token: 1,000 nested brackets
    take seconds before the loader sees its first node, so the depth is checked here, in one pass.
    """
    depth = deepest = at = 0
    for m in _FLOW_TOKENS.finditer(text):
        ch = m[0]
        if ch in "[{":
            depth += 1
            if depth > deepest:
                deepest, at = depth, m.start()
        elif ch in "]}":
            depth = max(depth - 1, 0)
    return deepest, at


def load_yaml_text(text: str, source: str) -> Any:
    """One YAML document from ``text``, through the checked loader; errors name ``source`` and the line."""
    deepest, at = _flow_depth(text)
    if deepest > MAX_YAML_DEPTH:
        raise SpecError(f"{source}: line {text.count(chr(10), 0, at) + 1}: nested deeper than {MAX_YAML_DEPTH} levels; "
                        "expected a scenario or cluster file", hint="gpuwait's deepest field sits 5 levels down")
    loader = _CheckedLoader(text, source)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        nodes = _expanded_nodes(node, MAX_YAML_NODES)
        if nodes > MAX_YAML_NODES:
            raise SpecError(f"{source}: aliases expand to more than {MAX_YAML_NODES:,} values; expected a scenario "
                            "or cluster file", hint="an alias bomb? use fewer nested aliases (*name)")
        return loader.construct_document(node)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise SpecError(f"{source}: not valid YAML{where}: {short_value(getattr(err, 'problem', None) or str(err))}",
                        hint="check indentation and quoting") from None
    except RecursionError:
        raise SpecError(f"{source}: nested too deep; expected a scenario or cluster file") from None
    finally:
        loader.dispose()


def read_yaml_checked(path: str | Path, what: str = "a YAML mapping") -> Any:
    """The YAML document in ``path`` (checked as :func:`read_text_checked`, then :func:`load_yaml_text`);
    an empty document is refused."""
    text = read_text_checked(path, "a YAML file", MAX_YAML_BYTES)
    data = load_yaml_text(text, str(path))
    if data is None:
        raise SpecError(f"{path}: empty; expected {what}", hint="`gpuwait schema` prints every field")
    return data
