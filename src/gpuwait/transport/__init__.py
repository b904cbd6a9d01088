"""Transport profiles: InfiniBand, RoCEv2 and kernel TCP between servers; the NCCL settings platforms apply."""

from gpuwait.transport.platforms import PLATFORMS, Platform, cluster_platform, platform_for
from gpuwait.transport.profiles import (
    TRANSPORTS,
    DcqcnParams,
    EcnParams,
    TransportProfile,
    pfc_xoff_bytes,
    register_transport,
    resolve_transport,
)

__all__ = ["PLATFORMS", "TRANSPORTS", "DcqcnParams", "EcnParams", "Platform", "TransportProfile", "cluster_platform",
           "pfc_xoff_bytes", "platform_for", "register_transport", "resolve_transport"]
