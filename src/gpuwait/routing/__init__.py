"""Paths through the topology: ECMP hashing, InfiniBand static routes, adaptive routing, spraying."""

from gpuwait.routing.paths import Routes, route_flows

__all__ = ["Routes", "route_flows"]
