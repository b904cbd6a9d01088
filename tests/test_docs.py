"""The examples of docs/python.md run as doctests, from the repository's root (where `examples/` is)."""

from __future__ import annotations

import doctest
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_python_guide_examples_run(monkeypatch):
    monkeypatch.chdir(ROOT)
    for name in list(os.environ):
        if name.startswith("NCCL_"):  # the guide's perf numbers assume NCCL's defaults
            monkeypatch.delenv(name)
    failed, attempted = doctest.testfile(str(ROOT / "docs" / "python.md"), module_relative=False,
                                         optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert attempted > 20 and failed == 0
