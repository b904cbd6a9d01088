"""Option aliases shared by the commands. Nothing heavy here: `gpuwait --help` imports it.

A flag letter means one thing across all commands; `gpuwait perf` keeps nccl-tests' letters
(`-n` iterations, `-f` step factor, `-o` reduction op), so no other command uses those
(tests/cli/test_help.py walks every command's options).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

import typer

from gpuwait.errors import GpuwaitError

JSON_OPTION = typer.Option(False, "--json", help="Print machine-readable JSON instead of tables.")
SERVERS_OPTION = typer.Option(None, "--servers", min=1, max=100_000, help="Number of servers (overrides the preset or file).")
MAX_MEMORY_OPTION = typer.Option(
    None, "--max-memory", metavar="SIZE",
    help="Refuse a run estimated to allocate more than this (e.g. 16GiB, or 16GB for 16e9 bytes; a bare 16G is "
         "refused, as in every gpuwait size but nccl-tests' own, perf's -b/-e/-i), and an all-to-all too large to "
         "list flow by flow as the run reaches it; default half the machine's memory.")

#: The Python API's arguments that are the same option on every command that has them: the library's errors
#: name the argument (``env: got 'X'``, ``inject slow-gpu:s1``, hint ``max_memory='64GiB'``), as a caller of
#: :mod:`gpuwait.api` wrote it; :func:`gpuwait.cli.main.main` renames them all here, the one place.
API_OPTIONS = {"env": "--env", "nccl_version": "--nccl-version", "gpus_per_thread": "--gpus-per-thread",
               "max_memory": "--max-memory", "inject": "--inject", "engine": "--engine", "steps": "--steps"}


def as_option(name: str) -> str:
    """The option of the Python API's argument ``name`` (:data:`API_OPTIONS`), or ``name`` itself: for a
    result that says where a value came from (``from: nccl_version``), as errors name it.

    >>> as_option("nccl_version"), as_option("cluster file")
    ('--nccl-version', 'cluster file')
    """
    return API_OPTIONS.get(name, name)


#: characters of one quoted value shown in an error line
MAX_QUOTED_CHARS = 80
#: the longest error line printed (ten problems of a scenario file fit)
MAX_ERROR_CHARS = 2000


@contextmanager
def options_named(**option_of_field: str) -> Iterator[None]:
    """Inside this block an error that starts with one of these fields names the option instead.

    The Python API's errors name its fields (``preset: unknown preset 'x'``), as they must for a caller
    that passed a field; on the command line the user typed an option, so ``preset="--cluster"`` turns
    that error into ``--cluster: unknown preset 'x'``. An argument of :data:`API_OPTIONS` may also lead
    with its value (``inject slow-gpu:x: ...``), a keyword argument in the message or hint
    (``engine='flow'``) becomes the option and its value (``--engine flow``), and an argument named in
    backquotes (``change `servers```) the option. An error of a file keeps its file and YAML path
    (``f.yaml: cluster.preset: ...``): there the field is what the user wrote.

    >>> from gpuwait.errors import SpecError, UnknownNameError
    >>> try:
    ...     with options_named(preset="--cluster"):
    ...         raise UnknownNameError("preset: unknown preset 'x'")
    ... except UnknownNameError as err:
    ...     print(err)
    --cluster: unknown preset 'x'
    >>> try:
    ...     with options_named(max_memory="--max-memory"):
    ...         raise SpecError("max_memory: got '1Q'", hint="e.g. max_memory='16GiB'")
    ... except SpecError as err:
    ...     print(err, "/", err.hint)
    --max-memory: got '1Q' / e.g. --max-memory 16GiB
    >>> try:
    ...     with options_named(servers="--servers"):
    ...         raise SpecError("too big; expected less (change `servers`)")
    ... except SpecError as err:
    ...     print(err)
    too big; expected less (change --servers)
    """
    try:
        yield
    except GpuwaitError as err:
        # the same error object (its type, hint and problems kept), its message and hint renamed
        err.args = (renamed(str(err), option_of_field, lead=True), *err.args[1:])
        if err.hint:
            err.hint = renamed(err.hint, option_of_field)
        raise


def renamed(text: str, option_of_field: dict[str, str], lead: bool = False) -> str:
    """``text`` with each ``field='value'`` as ``option value``, each `` `field` `` as the option and, with
    ``lead``, a leading ``field:`` (or for an API argument ``field VALUE``) as the option."""
    for field, option in option_of_field.items():
        text = text.replace(f"`{field}`", option)
        text = re.sub(rf"(?<![\w.-]){re.escape(field)}='([^']*)'", partial(_as_option, option), text)
        leads = text.startswith(f"{field}: ") or (field in API_OPTIONS and text.startswith(f"{field} "))
        if lead and leads:
            text = option + text[len(field):]
    return text


def _as_option(option: str, match: re.Match[str]) -> str:
    """``field='value'`` matched as ``option value``."""
    return f"{option} {match[1]}"


def terminal_safe(text: str) -> str:
    """``text`` with control characters (terminal escape sequences, newlines, NUL...) shown escaped, so a
    name in a shared file cannot clear or recolour the terminal.

    >>> terminal_safe("a\\x1b[2Jb\\nc")
    'a\\\\x1b[2Jb\\\\nc'
    """
    return _CONTROL.sub(lambda m: m[0].encode("unicode_escape").decode("ascii"), text)


def error_line(message: str) -> str:
    """One readable line for an error: control characters escaped, each quoted value over
    :data:`MAX_QUOTED_CHARS` cut with its size, and the line cut at :data:`MAX_ERROR_CHARS`.

    >>> error_line("got '" + "x" * 600 + "'; expected a preset")
    "got 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...' (600 characters); expected a preset"
    """
    text = terminal_safe(message)
    if len(text) > MAX_ERROR_CHARS // 4:  # values cut at their source keep a normal error untouched
        text = _LONG_QUOTED.sub(lambda m: f"{m[1]}{m[2]}{m[3][:MAX_QUOTED_CHARS]}...{m[2]} ({len(m[3]):,} characters)",
                                text)
    return text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS] + f"... ({len(text):,} characters)"


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")
# a quoted value: a quote after a space or bracket, more than MAX_QUOTED_CHARS other characters, the same quote
# before a space or punctuation (linear: the run holds no quote, so a failed match never rescans it twice)
_LONG_QUOTED = re.compile(r"(^|[\s(\[=:])(['\"])([^'\"]{%d,})\2(?=$|[\s;,):.])" % (MAX_QUOTED_CHARS + 1))
