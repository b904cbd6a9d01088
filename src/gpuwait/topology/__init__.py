"""Servers, fabrics and presets as node and link tables."""

from gpuwait.topology.build import build_topology, clos_shape, gpu_nic_affinity
from gpuwait.topology.model import (
    LINK_KINDS,
    NETWORKS,
    NODE_KINDS,
    TIER_NAMES,
    LinkKind,
    Network,
    NodeKind,
    Tier,
    Topology,
)
from gpuwait.topology.presets import PRESET_DOCS, PRESETS, build_cluster, build_preset, preset_spec, resolve_cluster
from gpuwait.topology.servers import SERVER_TEMPLATES, register_server_template, resolve_server

__all__ = [
    "LINK_KINDS", "NETWORKS", "NODE_KINDS", "PRESETS", "PRESET_DOCS", "SERVER_TEMPLATES", "TIER_NAMES", "LinkKind", "Network", "NodeKind", "Tier",
    "Topology",
    "build_cluster", "build_preset", "build_topology", "clos_shape", "gpu_nic_affinity", "preset_spec",
    "register_server_template", "resolve_cluster", "resolve_server",
]
