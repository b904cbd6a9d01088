"""Shared fixtures: small clusters built once per session."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from gpuwait.spec import ClusterSpec


def leaf_spine(uplinks: int = 8, servers: int = 2, oversubscription: float = 1.0, transport: str = "rocev2",
               **routing) -> ClusterSpec:
    """Two-tier leaf-spine with one 8-NIC server per leaf and `uplinks` uplinks per leaf at 1:1."""
    return ClusterSpec(
        name="test-leaf-spine", servers=servers, server={"template": "dgx-h100"},
        fabric={"kind": "clos", "tiers": 2, "switch_radix": 64, "leaf_downlinks": 8, "oversubscription": oversubscription},
        transport={"name": transport}, routing={"kind": "ecmp", **routing},
    )


@pytest.fixture(scope="session")
def two_leaf_cluster():
    from gpuwait.topology import build_topology

    return build_topology(leaf_spine())


def load_bench(name: str) -> ModuleType:
    """``bench/<name>.py`` imported as a module (bench/ is not a package); registered while it runs,
    since dataclasses look their module up."""
    path = Path(__file__).resolve().parents[1] / "bench" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module
