"""gpuwait: why the GPUs wait, and what makes them stop.

The Python API (see docs/python.md)::

    import gpuwait as g
    s = g.load_scenario("examples/dp-only.yaml")
    g.simulate(s).to_dict()                      # what `gpuwait run --json` prints
    g.perf("all_reduce", cluster="dgx-h100", servers=2, sizes=("1M", "64M"))
    g.diagnose(s, inject=["slow-gpu:s1.gpu3"])
    g.build_cluster("rocev2-400g-2tier", servers=8)

The names load on first use (module ``__getattr__``), so ``import gpuwait`` imports neither
numpy, pydantic nor the engines.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuwait.version import __version__

if TYPE_CHECKING:
    from gpuwait.api import build_cluster, diagnose, load_scenario, perf, simulate
    from gpuwait.errors import GpuwaitError, SpecError

__all__ = ["GpuwaitError", "SpecError", "__version__", "build_cluster", "diagnose", "load_scenario", "perf",
           "simulate"]

_API = {"build_cluster", "diagnose", "load_scenario", "perf", "simulate"}
_ERRORS = {"GpuwaitError", "SpecError"}


def __getattr__(name: str) -> Any:
    if name in _API:
        from gpuwait import api

        return getattr(api, name)
    if name in _ERRORS:
        from gpuwait import errors

        return getattr(errors, name)
    raise AttributeError(f"module 'gpuwait' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _API | _ERRORS)
