"""The NCCL settings a cloud platform's net plugin or guest image applies: defaults under the user's own.

A cluster on AWS EFA, Google GPUDirect-TCPX/TCPXO or CSCS's Slingshot runs NCCL with variables its net plugin
sets at load time or its image (container hook, env profile) exports. A user describing such a cluster gets them
without naming them (``transport.platform`` in a cluster file, or the platform its transport and server template
imply: :func:`platform_for`); a variable the user sets (``perf --env``, a scenario's ``env``, the process
environment) wins, as it does on the platform (the plugin sets a variable only when it is unset).

Sources (public; each platform's ``source`` names the file and tag):

* AWS, aws-ofi-nccl ``src/platform-aws.c`` (tags v1.7.4-aws to v1.15.0; ``src/platform-aws.cpp`` from v1.16.0).
  When NCCL_PROTO is unset and the endpoint cannot deliver 128-byte aligned writes in order (the EFA devices of
  p4d/p4de, SENDRECV protocol) the plugin sets ``NCCL_PROTO=simple`` (``configure_nccl_proto`` /
  ``nccl_net_ofi_configure_nccl_proto_simple``): LL and LL128 would read torn lines. On p5/p5e (RDMA protocol) it
  does not: v1.7.4-aws to v1.10.0-aws skip the check on p5.48xlarge ("Skipping NCCL_PROTO checks on P5 + RDMA"),
  later tags on p5en only, the p5 devices reporting in-order writes. Only-if-unset (``setenv(..., 0)``): ``NCCL_NVLSTREE_MAX_CHUNKSIZE=524288`` (from v1.8.1-aws; NVIDIA/nccl#1112), ``NCCL_NVLS_CHUNKSIZE
  =524288`` (from v1.9; both only for NVLS, Hopper: listed for p5), and in the v1.16.0 per-instance table
  (``platform_data_map[].env``) ``NCCL_BUFFSIZE=8388608`` and ``NCCL_P2P_NET_CHUNKSIZE=524288`` on p4d/p4de/p5/p5e,
  ``NCCL_NET_FORCE_FLUSH=0`` on p5/p5e (Hopper), and ``NCCL_TUNER_PLUGIN`` (its own tuner) everywhere.
* Google A3 High (a3-highgpu-8g, GPUDirect-TCPX): GoogleCloudPlatform/container-engine-accelerators
  ``gpudirect-tcpx/nccl-config-latest.yaml`` (the run script Google's GKE guide "Maximize GPU network bandwidth"
  deploys): NCCL_ALGO=Ring, NCCL_PROTO=Simple, NCCL_MIN_NCHANNELS=NCCL_MAX_NCHANNELS=8, NCCL_SOCKET_NTHREADS=1,
  NCCL_NSOCKS_PERTHREAD=4, NCCL_NET_GDR_LEVEL=PIX, NCCL_BUFFSIZE=4194304, NCCL_DYNAMIC_CHUNK_SIZE=524288,
  NCCL_P2P_NET_CHUNKSIZE=524288, NCCL_CROSS_NIC=0, NCCL_P2P_PXN_LEVEL=0.
* Google A3 Mega (a3-megagpu-8g, GPUDirect-TCPXO): the same repository's ``gpudirect-tcpxo/README.md``, release of
  Jan 9, 2026 (plugin v1.0.15, NCCL 2.28.7; the ``nccl-env-profile.sh`` the image ships, whose values the guest
  config checker ``a3plus_guest_config.textproto`` enforces): NCCL_PROTO=Simple,LL128, NCCL_MIN_NCHANNELS=4,
  NCCL_NET_GDR_LEVEL=PIX, NCCL_NVLS_ENABLE=1, NCCL_BUFFSIZE=8388608, NCCL_P2P_NET_CHUNKSIZE=524288,
  NCCL_NVLSTREE_MAX_CHUNKSIZE=131072, NCCL_CROSS_NIC=0, NCCL_TUNER_PLUGIN=libnccl-tuner.so and the plugin's
  NCCL_FASTRAK_* settings (NUM_FLOWS=2, USE_SNAP=1, USE_LLCM=1).
* CSCS Alps (HPE Slingshot-11, aws-ofi-nccl on libfabric's CXI provider): eth-cscs/cscs-docs
  ``docs/software/communication/nccl_env_vars`` (what the container hook exports): NCCL_NET="AWS Libfabric",
  NCCL_NET_GDR_LEVEL=PHB, NCCL_CROSS_NIC=1, NCCL_PROTO=^LL128 ("LL128 ... typically performs worse on
  Slingshot", NCCL >= 2.27), FI_CXI_DEFAULT_CQ_SIZE=131072, FI_CXI_DEFAULT_TX_SIZE=32768,
  FI_CXI_DISABLE_HOST_REGISTER=1, FI_CXI_RX_MATCH_MODE=software, FI_MR_CACHE_MONITOR=userfaultfd. These are
  the hook's settings when CSCS's published Alps table was run (cscs-docs commit a186743, 2025-12-17). The
  2026-06-17 maintenance changed them (``docs/clusters/daint.md`` change log): NCCL_CROSS_NIC=0,
  NCCL_PXN_DISABLE=1, NCCL_P2P_LEVEL=NVL, NCCL_NET_GDR_C2C=1, NCCL_NET_GDR_READ=1,
  NCCL_NCHANNELS_PER_NET_PEER=4, FI_CXI_RDZV_PROTO=alt_read and FI_CXI_RDZV_THRESHOLD = FI_CXI_RDZV_GET_MIN =
  FI_CXI_RDZV_EAGER_SIZE = 0 (every message by rendezvous: ``transport.rendezvous_threshold: 0`` in a cluster
  file); the ``cscs-alps`` platform keeps the earlier set.

The variables gpuwait models (:data:`gpuwait.collectives.ncclenv.VARIABLES`) go in ``env`` and change the
prediction; the others go in ``not_modelled`` and are only listed (``perf`` header): gpuwait's pipeline uses NCCL's
default buffer and chunk sizes, and has no model of a tuner plugin, of FASTRAK flows or of libfabric queue sizes.
Per-message cost of TCPX/TCPXO: no public figure was found (Google publishes bandwidth, not per-message costs);
the profile's figure stays a modelling choice (:mod:`gpuwait.transport.profiles`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from gpuwait.errors import SpecError, UnknownNameError
from gpuwait.spec.cluster import ClusterSpec

_AWS_SRC = "aws-ofi-nccl src/platform-aws.c"
_AWS_LATER = {"NCCL_BUFFSIZE": "8388608", "NCCL_P2P_NET_CHUNKSIZE": "524288",
              "NCCL_TUNER_PLUGIN": "aws-ofi-nccl's tuner"}
_AWS_NVLS = {"NCCL_NVLSTREE_MAX_CHUNKSIZE": "524288", "NCCL_NVLS_CHUNKSIZE": "524288", "NCCL_NET_FORCE_FLUSH": "0"}


@dataclass(frozen=True)
class Platform:
    """What one platform's plugin or image sets. ``env``: modelled NCCL variables; ``provider``: modelled
    variables of the network provider (libfabric), which set the transport's profile
    (:func:`gpuwait.transport.profiles.resolve_transport`); ``not_modelled``: the others, listed but not applied; ``label``: the source printed beside each value (``NCCL_PROTO=Simple (aws-ofi-nccl on
    p4de)``); ``source``: the public file and tag."""

    name: str
    transport: str
    label: str
    source: str
    env: Mapping[str, str] = field(default_factory=dict)
    not_modelled: Mapping[str, str] = field(default_factory=dict)
    provider: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "env", MappingProxyType(dict(self.env)))
        object.__setattr__(self, "provider", MappingProxyType(dict(self.provider)))
        object.__setattr__(self, "not_modelled", MappingProxyType(dict(self.not_modelled)))


PLATFORMS: dict[str, Platform] = {}


def register_platform(platform: Platform) -> Platform:
    """Add a platform (its name must also be in ``TransportSpec.platform``'s choices)."""
    PLATFORMS[platform.name] = platform
    return platform


for _name in ("p4d.24xlarge", "p4de.24xlarge"):
    register_platform(Platform(
        _name, "efa", f"aws-ofi-nccl on {_name.split('.')[0]}",
        f"{_AWS_SRC}, v1.7.4-aws to v1.16.0",
        env={"NCCL_PROTO": "Simple"}, not_modelled=_AWS_LATER))
for _name in ("p5.48xlarge", "p5e.48xlarge"):
    register_platform(Platform(
        _name, "efa", f"aws-ofi-nccl on {_name.split('.')[0]}",
        f"{_AWS_SRC}, v1.7.4-aws to v1.16.0",
        not_modelled=_AWS_LATER | _AWS_NVLS))
register_platform(Platform(
    "a3-highgpu-8g", "tcpx", "GPUDirect-TCPX config on a3-highgpu-8g",
    "GoogleCloudPlatform/container-engine-accelerators gpudirect-tcpx/nccl-config-latest.yaml",
    env={"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple", "NCCL_MIN_NCHANNELS": "8", "NCCL_MAX_NCHANNELS": "8",
         "NCCL_SOCKET_NTHREADS": "1", "NCCL_NSOCKS_PERTHREAD": "4", "NCCL_NET_GDR_LEVEL": "PIX"},
    not_modelled={"NCCL_BUFFSIZE": "4194304", "NCCL_DYNAMIC_CHUNK_SIZE": "524288",
                  "NCCL_P2P_NET_CHUNKSIZE": "524288", "NCCL_CROSS_NIC": "0", "NCCL_P2P_PXN_LEVEL": "0"}))
register_platform(Platform(
    "a3-megagpu-8g", "tcpxo", "GPUDirect-TCPXO profile on a3-megagpu-8g",
    "GoogleCloudPlatform/container-engine-accelerators gpudirect-tcpxo/README.md, release of Jan 9, 2026",
    env={"NCCL_PROTO": "Simple,LL128", "NCCL_MIN_NCHANNELS": "4", "NCCL_NET_GDR_LEVEL": "PIX",
         "NCCL_NVLS_ENABLE": "1"},
    not_modelled={"NCCL_BUFFSIZE": "8388608", "NCCL_P2P_NET_CHUNKSIZE": "524288",
                  "NCCL_NVLSTREE_MAX_CHUNKSIZE": "131072", "NCCL_CROSS_NIC": "0",
                  "NCCL_TUNER_PLUGIN": "libnccl-tuner.so", "NCCL_FASTRAK_NUM_FLOWS": "2",
                  "NCCL_FASTRAK_USE_SNAP": "1", "NCCL_FASTRAK_USE_LLCM": "1"}))
register_platform(Platform(
    "cscs-alps", "slingshot", "CSCS container hook on Alps",
    "eth-cscs/cscs-docs docs/software/communication/nccl_env_vars",
    env={"NCCL_PROTO": "^LL128", "NCCL_NET_GDR_LEVEL": "PHB", "NCCL_NET": "AWS Libfabric"},
    not_modelled={"NCCL_CROSS_NIC": "1", "FI_CXI_DEFAULT_CQ_SIZE": "131072",
                  "FI_CXI_DEFAULT_TX_SIZE": "32768", "FI_CXI_DISABLE_HOST_REGISTER": "1",
                  "FI_MR_CACHE_MONITOR": "userfaultfd"},
    provider={"FI_CXI_RX_MATCH_MODE": "software"}))

#: ``transport.platform: none``: the transport's plugin without any platform's settings
NO_PLATFORM = "none"
#: the platform a transport implies when the cluster does not say (EFA: from the server template's instance type)
TRANSPORT_PLATFORM = {"tcpx": "a3-highgpu-8g", "tcpxo": "a3-megagpu-8g", "slingshot": "cscs-alps"}
#: AWS server templates (gpuwait.topology.servers) -> EC2 instance type
TEMPLATE_INSTANCE = {"p4d-24xlarge": "p4d.24xlarge", "p4de-24xlarge": "p4de.24xlarge", "p5-48xlarge": "p5.48xlarge"}


def platform_for(transport: str, platform: str | None = None, server_template: str | None = None) -> Platform | None:
    """The platform whose settings apply: ``platform`` (``transport.platform``) when given, else the one
    ``transport`` implies (for EFA, the instance type of the AWS server template); None when there is none.

    >>> platform_for("efa", server_template="p4de-24xlarge").env["NCCL_PROTO"]
    'Simple'
    >>> platform_for("efa") is None, platform_for("tcpxo").name, platform_for("slingshot", "none")
    (True, 'a3-megagpu-8g', None)
    >>> platform_for("tcpx", "p4d.24xlarge")
    Traceback (most recent call last):
    ...
    gpuwait.errors.SpecError: transport.platform: got 'p4d.24xlarge', a platform of transport efa; expected one of \
a3-highgpu-8g, none for transport tcpx
    """
    if platform == NO_PLATFORM:
        return None
    if platform is None:
        implied = TRANSPORT_PLATFORM.get(transport) or TEMPLATE_INSTANCE.get(server_template or "")
        return PLATFORMS[implied] if implied and PLATFORMS[implied].transport == transport else None
    if platform not in PLATFORMS:
        raise UnknownNameError(f"transport.platform: unknown platform {platform!r}; expected one of "
                               f"{', '.join([*PLATFORMS, NO_PLATFORM])}")
    found = PLATFORMS[platform]
    if found.transport != transport:
        fits = [name for name, p in PLATFORMS.items() if p.transport == transport] + [NO_PLATFORM]
        raise SpecError(f"transport.platform: got {platform!r}, a platform of transport {found.transport}; "
                        f"expected one of {', '.join(fits)} for transport {transport}")
    return found


def cluster_platform(spec: ClusterSpec, transport: str | None = None) -> Platform | None:
    """The platform of a cluster: its ``transport.platform``, else what its transport and server template imply.
    ``transport``: the transport a scenario case runs on instead of the cluster's (a variant); the cluster's
    ``transport.platform`` applies only to the cluster's own transport."""
    name = transport or spec.transport.name
    chosen = spec.transport.platform if name == spec.transport.name else None
    return platform_for(name, chosen, spec.server.template)
