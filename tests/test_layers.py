"""The layers of docs/design.md, checked on the source: no module imports from a layer above it.

Every ``import``/``from ... import`` in ``src/gpuwait`` is read with :mod:`ast`, including the
ones inside functions (a lazy import is still a dependency). A module may import from its own
layer and from layers listed before it in :data:`LAYERS`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "gpuwait"

#: lowest first; a package (or top-level module) belongs to the first layer that names it
LAYERS: tuple[tuple[str, ...], ...] = (
    ("version", "units", "errors", "rng", "arrays"),
    ("spec",),
    ("topology",),
    ("inventory",),
    ("transport",),
    ("routing",),
    ("collectives",),
    ("workload",),
    ("placement",),
    ("faults",),
    ("engine",),
    ("fabric",),
    ("steps",),
    ("runner",),
    ("telemetry",),
    ("diagnosis",),
    ("report",),
    ("cli",),
    ("__init__", "__main__", "api"),
)
LEVEL = {name: i for i, names in enumerate(LAYERS) for name in names}


def _top(module: str) -> str:
    """``gpuwait.engine.flow`` -> ``engine``; ``gpuwait`` itself -> the package face."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(source: str, package: str) -> list[tuple[int, str]]:
    """(line, imported gpuwait module) of every import in ``source``, a module of ``package``."""
    tree = ast.parse(source)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "gpuwait"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            if module.split(".")[0] != "gpuwait":
                continue
            if module == "gpuwait":  # ``from gpuwait import units`` imports the module gpuwait.units
                out += [(node.lineno, f"gpuwait.{a.name}" if a.name in LEVEL else "gpuwait") for a in node.names]
            else:
                out.append((node.lineno, module))
    return out


MODULES = sorted(p for p in SRC.rglob("*.py"))


def test_every_package_has_a_layer():
    tops = {p.relative_to(SRC).parts[0].removesuffix(".py") for p in MODULES}
    assert tops - set(LEVEL) == set(), "add the new package to LAYERS (and to docs/design.md)"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_no_import_from_a_layer_above(path: Path):
    here = _top("gpuwait." + ".".join(path.relative_to(SRC).with_suffix("").parts))
    package = ".".join(("gpuwait", *path.relative_to(SRC).parts[:-1]))
    upward = [f"line {line}: {module} ({_top(module)} is above {here})"
              for line, module in _imports(path.read_text(), package) if LEVEL[_top(module)] > LEVEL[here]]
    assert upward == []


def test_the_check_sees_upward_imports_in_functions_and_relative_ones():
    source = "def f():\n    from gpuwait.engine.flow import FlowEngine\nfrom ..report import html\nfrom gpuwait import units\n"
    found = sorted(_imports(source, "gpuwait.spec"))
    assert found == [(2, "gpuwait.engine.flow"), (3, "gpuwait.report"), (4, "gpuwait.units")]
    assert [LEVEL[_top(m)] > LEVEL["spec"] for _, m in found] == [True, True, False]
