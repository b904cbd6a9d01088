"""Cluster presets: named ClusterSpecs that take the number of servers.

Where the numbers come from:

* ``dgx-a100`` / ``dgx-h100``: one DGX server by default (NVLink3 300 GB/s / NVLink4 450 GB/s per GPU
  per direction, NVIDIA A100 / H100 datasheets); with ``--servers N`` the servers join an
  InfiniBand leaf-spine (HDR 40-port QM8700 / NDR 64-port QM9700 switches), rail-optimized.
* ``dgx-h100-superpod``: NVIDIA DGX SuperPOD H100 reference architecture — NDR 400 Gb/s
  InfiniBand, rail-optimized, 32 servers per scalable unit (one leaf per rail per SU), QM9700
  radix 64, non-blocking; 2 tiers up to 8 SUs (256 servers), 3 tiers beyond.

Every Clos preset takes 2 tiers while a leaf-spine of its radix holds the servers and 3 beyond.
* ``rocev2-400g-2tier``: 8 x 400 Gb/s RoCEv2 NICs per server, top-of-rack leaves of 64 x 400G
  ports (32 down / 32 up, non-blocking) under spines; ECMP with CRC32.
* ``dual-plane-2x200g``: each NIC has two 200 Gb/s ports, port p in fabric plane p (two
  independent RoCEv2 leaf-spine planes).
* ``gb200-nvl72``: GB200 NVL72 racks — 18 compute trays of 4 GPUs per rack joined in one NVLink domain
  through 9 NVLink Switch trays (NVIDIA GB200 NVL72 product page), one rack (18 trays) by default,
  fewer trays one partly filled rack, more a multiple of 18;
  racks join over a rail-optimized NDR InfiniBand leaf-spine (4 x 400 Gb/s ConnectX-7 per tray).
* ``gb300-nvl72``: the same racks of GB300 NVL72 trays (Blackwell Ultra GPUs, NVLink5 900 GB/s per GPU per
  direction; NVIDIA GB300 NVL72 product page) with 4 x 800 Gb/s ConnectX-8 per tray (the ``gb300-nvl72``
  server template); the racks' InfiniBand leaf-spine is gb200-nvl72's (64-port switches assumed: NVIDIA
  publishes no GB300 reference fabric the model reads).
* ``oci-a100-roce``: OCI BM.GPU4.8 — 8 x A100-SXM4-40GB with 16 x 100 Gb/s RoCE ports, run with
  NCCL_IB_QPS_PER_CONNECTION=4 (github oracle-quickstart/oci-hpc-oke README.md);
  a non-blocking RoCE Clos.
"""

from __future__ import annotations

from collections.abc import Callable

from gpuwait.errors import TopologyError, UnknownNameError
from gpuwait.spec.cluster import ClusterSpec
from gpuwait.topology.build import build_topology, clos_shape
from gpuwait.topology.model import Topology
from gpuwait.topology.servers import resolve_server

PRESETS: dict[str, Callable[[int], dict]] = {}
# servers a preset builds when no count is given (shown by `gpuwait topo --list`)
DEFAULT_SERVERS: dict[str, int] = {"dgx-a100": 1, "dgx-h100": 1, "gb200-nvl72": 18, "gb300-nvl72": 18}
PRESET_DOCS: dict[str, str] = {}


def register_preset(name: str, doc: str):
    """Decorator: register ``fn(servers) -> dict of ClusterSpec fields`` under ``name``."""

    def wrap(fn: Callable[[int], dict]) -> Callable[[int], dict]:
        PRESETS[name] = fn
        PRESET_DOCS[name] = doc
        return fn

    return wrap


@register_preset("dgx-a100", "DGX A100 (8x A100, NVLink3, 8x 200G HDR InfiniBand); 1 server unless --servers")
def _dgx_a100(servers: int) -> dict:
    return dict(name="dgx-a100", server={"template": "dgx-a100"},
                fabric=dict(kind="clos" if servers > 1 else "none", switch_radix=40, rail_optimized=True, servers_per_unit=20),
                transport={"name": "infiniband"}, routing={"kind": "static"})


@register_preset("dgx-h100", "DGX H100 (8x H100, NVLink4, 8x 400G NDR InfiniBand); 1 server unless --servers")
def _dgx_h100(servers: int) -> dict:
    return dict(name="dgx-h100", server={"template": "dgx-h100"},
                fabric=dict(kind="clos" if servers > 1 else "none", switch_radix=64, rail_optimized=True),
                transport={"name": "infiniband"}, routing={"kind": "static"})


@register_preset("dgx-h100-superpod", "DGX SuperPOD H100: NDR InfiniBand, rail-optimized, 32 servers per SU, adaptive routing")
def _superpod(servers: int) -> dict:
    return dict(name="dgx-h100-superpod", server={"template": "dgx-h100"},
                fabric=dict(kind="clos", switch_radix=64, rail_optimized=True, servers_per_unit=32,
                            switch_latency=300e-9),
                storage=dict(mode="separate", storage_servers=max(2, servers // 16), switch_radix=128),
                management=dict(enabled=True),
                transport={"name": "infiniband"}, routing={"kind": "adaptive"})


@register_preset("rocev2-400g-2tier", "8x 400G RoCEv2 per server, top-of-rack leaf-spine 1:1, ECMP (CRC32)")
def _rocev2(servers: int) -> dict:
    return dict(name="rocev2-400g-2tier", server={"template": "dgx-h100"},
                fabric=dict(kind="clos", switch_radix=64, switch_latency=600e-9),
                transport={"name": "rocev2"}, routing={"kind": "ecmp", "hash": "crc32"})


@register_preset("dual-plane-2x200g", "8 NICs x 2 ports x 200G, port p in plane p: two RoCEv2 leaf-spine planes")
def _dual_plane(servers: int) -> dict:
    return dict(name="dual-plane-2x200g", server={"template": "dual-plane-2x200g"},
                fabric=dict(kind="clos", switch_radix=64, planes=2, switch_latency=600e-9),
                # at least one QP per plane, or a connection would use one port of its NIC
                transport={"name": "rocev2"}, routing={"kind": "ecmp", "qps_per_connection": 2})


@register_preset("oci-a100-roce", "OCI BM.GPU4.8: 8x A100-40GB, 16x 100G RoCE, 4 QPs per connection")
def _oci(servers: int) -> dict:
    return dict(name="oci-a100-roce", server={"template": "oci-bm-gpu4.8"},
                fabric=dict(kind="clos", switch_radix=64, rail_optimized=True, servers_per_unit=32,
                            switch_speed=12.5e9, switch_latency=600e-9),
                transport={"name": "rocev2"}, routing={"kind": "ecmp", "qps_per_connection": 4})


@register_preset("gb200-nvl72", "GB200 NVL72 racks: 18 trays of 4 GPUs in one NVLink domain per rack, 4x 400G InfiniBand per tray")
def _gb200_nvl72(servers: int) -> dict:
    # 18 compute trays per rack share the rack's NVSwitch trays (NVIDIA GB200 NVL72 product page);
    # racks join over a rail-optimized NDR InfiniBand fabric of 64-port switches, as the DGX SuperPOD
    # fewer than 18 trays are a partly filled rack: one domain of them all
    return dict(name="gb200-nvl72", server={"template": "gb200-nvl72"}, nvlink_domain={"servers": min(servers, 18)},
                fabric=dict(kind="clos", switch_radix=64, rail_optimized=True),
                transport={"name": "infiniband"}, routing={"kind": "static"})


@register_preset("gb300-nvl72", "GB300 NVL72 racks: 18 trays of 4 GPUs in one NVLink domain per rack, 4x 800G InfiniBand per tray")
def _gb300_nvl72(servers: int) -> dict:
    # gb200-nvl72's racks with the GB300 tray (Blackwell Ultra, ConnectX-8 at 800 Gb/s)
    return dict(_gb200_nvl72(servers), name="gb300-nvl72", server={"template": "gb300-nvl72"})


def preset_spec(name: str, servers: int | None = None) -> ClusterSpec:
    """The ClusterSpec of a preset for ``servers`` servers (default: the preset's own, 1 or 32)."""
    try:
        fn = PRESETS[name]
    except KeyError:
        raise UnknownNameError(f"preset: unknown preset {name!r}; expected one of {', '.join(sorted(PRESETS))}",
                               hint="`gpuwait topo --list` shows presets and server templates") from None
    if servers is None:
        servers = DEFAULT_SERVERS.get(name, 32)
    if servers < 1:
        raise UnknownNameError(f"servers: got {servers}; expected 1 or more")
    fields = fn(servers) | {"servers": servers, "preset": name}
    spec = ClusterSpec.model_validate(fields)
    return _with_tiers(spec) if "tiers" not in fields.get("fabric", {}) else spec


def _with_tiers(spec: ClusterSpec) -> ClusterSpec:
    if spec.fabric.kind != "clos":
        return spec
    return spec.model_copy(update={"fabric": spec.fabric.model_copy(update={"tiers": _tiers_needed(spec)})})


def _tiers_needed(spec: ClusterSpec) -> int:
    """2 tiers while a leaf-spine of the preset's radix holds the servers, 3 beyond."""
    try:
        clos_shape(spec.fabric.model_copy(update={"tiers": 2}), resolve_server(spec.server), spec.servers)
        return 2
    except TopologyError:
        return 3


def _merge(base: dict, override: dict) -> dict:
    out = dict(base)
    for key, value in override.items():
        out[key] = _merge(base[key], value) if isinstance(value, dict) and isinstance(base.get(key), dict) else value
    return out


def resolve_cluster(spec: ClusterSpec) -> ClusterSpec:
    """Apply ``spec.preset``: the preset's fields, overridden by every field set in ``spec``."""
    if spec.preset is None:
        return spec
    servers = spec.servers if "servers" in spec.model_fields_set else None
    base = preset_spec(spec.preset, servers).model_dump(exclude_unset=True)
    merged = ClusterSpec.model_validate(_merge(base, spec.model_dump(exclude_unset=True)))
    # the preset chose its tiers for its own switches and servers: choose again for an override
    # (a radix-128 fabric holds in 2 tiers what radix 64 needs 3 for), unless tiers are given
    tiers_given = "tiers" in PRESETS[spec.preset](merged.servers).get("fabric", {}) or (
        "fabric" in spec.model_fields_set and "tiers" in spec.fabric.model_fields_set)
    return merged if tiers_given else _with_tiers(merged)


def build_preset(name: str, servers: int | None = None) -> Topology:
    """Build a preset's topology.

    >>> build_preset("dgx-h100-superpod", servers=64).n_gpus
    512
    """
    return build_topology(preset_spec(name, servers))


def build_cluster(spec: ClusterSpec) -> Topology:
    """Resolve a preset (if any) and build the topology."""
    return build_topology(resolve_cluster(spec))
