"""Transport profiles: InfiniBand, RoCEv2 and kernel TCP between servers."""

from gpuwait.transport.profiles import (
    TRANSPORTS,
    DcqcnParams,
    EcnParams,
    TransportProfile,
    pfc_xoff_bytes,
    register_transport,
    resolve_transport,
)

__all__ = ["TRANSPORTS", "DcqcnParams", "EcnParams", "TransportProfile", "pfc_xoff_bytes", "register_transport",
           "resolve_transport"]
