"""The fault kinds: name, what they target, their parameters with ranges and defaults.

A kind registers itself with :func:`register_fault`; nothing else lists them. Targets are checked
against the topology when the fault is applied (:mod:`gpuwait.faults.apply`), with close matches
offered for a misspelt name.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from types import MappingProxyType

from gpuwait.errors import SpecError, UnknownNameError
from gpuwait.spec.faults import FaultSpec


@dataclass(frozen=True)
class FaultKind:
    """``target``: "link", "gpu", "nic", "server-or-all", "all" (the whole job or fabric)."""

    name: str
    target: str
    description: str
    params: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))  # name -> (default, lo, hi, text)


FAULT_KINDS: dict[str, FaultKind] = {}


def register_fault(name: str, target: str, description: str, **params: tuple[float, float, float, str]) -> FaultKind:
    kind = FaultKind(name, target, description, MappingProxyType(params))
    FAULT_KINDS[name] = kind
    return kind


register_fault("link-degrade", "link", "a link running at a fraction of its speed (lanes down, bad optics)",
               factor=(0.25, 1e-3, 1.0, "fraction of the link's speed left, 0 < factor <= 1"))
register_fault("link-flap", "link", "a link going down and up; traffic stalls while it is down",
               down_fraction=(0.2, 0.0, 0.99, "share of the time the link is down"),
               period_s=(10.0, 1e-3, 1e6, "seconds of one down/up cycle"))
register_fault("link-loss", "link", "a link dropping packets (a dirty fibre); lossy transports retransmit",
               loss_rate=(1e-3, 0.0, 1.0, "probability a packet is lost, 0..1"))
register_fault("slow-gpu", "gpu", "a GPU computing slower (thermal or power throttling, a bad HBM stack)",
               factor=(1.3, 1.0, 100.0, "multiplier of its compute time, >= 1"))
register_fault("nic-down", "nic", "a NIC (or its cable) down: its GPU's traffic moves to the neighbour NIC")
register_fault("tcp-fallback", "all", "RDMA unavailable: NCCL falls back to its socket (TCP) transport")
register_fault("no-gdr", "server-or-all", "GPUDirect RDMA off: network data bounces through host memory")
register_fault("nic-affinity", "gpu", "a GPU using a NIC behind the other CPU socket, across the CPU interconnect")
register_fault("ecmp-polarization", "all", "the same ECMP hash seed on every switch: the tiers pick alike and links idle")
register_fault("storage-contention", "all", "dataset reads or checkpoint writes on the compute fabric (converged storage)",
               read_rate_per_gpu_Bps=(4e9, 0.0, 1e12, "bytes/s each GPU reads from storage"))
register_fault("dataloader-starvation", "all", "CPU data preprocessing slower than the GPUs",
               samples_per_s_per_server=(20.0, 1e-3, 1e9, "samples/s one server's loader delivers"))
register_fault("noisy-neighbor", "link", "another job's traffic on shared links",
               load_fraction=(0.6, 0.0, 0.99, "share of each target link the other job keeps busy"))


def _close(name: str, choices, n: int = 3) -> str:
    near = difflib.get_close_matches(name, list(choices), n=n, cutoff=0.5)
    return f" (close: {', '.join(near)})" if near else ""


def resolve_fault(spec: FaultSpec) -> tuple[FaultKind, dict[str, float]]:
    """The kind and its parameters with defaults filled and ranges checked."""
    kind = FAULT_KINDS.get(spec.kind)
    if kind is None:
        raise UnknownNameError(f"fault kind: unknown {spec.kind!r}{_close(spec.kind, FAULT_KINDS)}; expected one of "
                               f"{', '.join(FAULT_KINDS)}")
    values = {}
    for name, (default, lo, hi, text) in kind.params.items():
        value = float(spec.params.get(name, default))
        if not lo <= value <= hi or (name == "factor" and kind.name == "link-degrade" and value <= 0):
            raise SpecError(f"fault {kind.name}: {name} = {value:g}; expected {text}")
        values[name] = value
    unknown = set(spec.params) - set(kind.params)
    if unknown:
        bad = sorted(unknown)[0]
        expected = ", ".join(kind.params) or "no parameters"
        raise SpecError(f"fault {kind.name}: unknown parameter {bad!r}{_close(bad, kind.params)}; expected {expected}")
    return kind, values


def parse_inject(text: str) -> FaultSpec:
    """``KIND:TARGET[:PARAM=VALUE,...]`` (TARGET may be omitted for kinds of the whole job).

    >>> parse_inject("link-degrade:leaf0->spine3:factor=0.25")
    FaultSpec(kind='link-degrade', target='leaf0->spine3', params={'factor': 0.25})
    >>> parse_inject("tcp-fallback").target
    'all'
    """
    parts = text.split(":")
    kind = parts[0].strip()
    target = parts[1].strip() if len(parts) > 1 and parts[1].strip() else "all"
    params: dict[str, float] = {}
    if len(parts) > 2:
        for item in ":".join(parts[2:]).split(","):
            if not item.strip():
                continue
            if "=" not in item:
                raise SpecError(f"--inject {text}: parameter {item!r} is not NAME=VALUE")
            name, value = item.split("=", 1)
            try:
                params[name.strip()] = float(value)
            except ValueError:
                raise SpecError(f"--inject {text}: {name.strip()} = {value!r}; expected a number") from None
    if len(parts) > 3 and "=" not in parts[2]:
        raise SpecError(f"--inject {text}: expected KIND:TARGET[:PARAM=VALUE,...]")
    spec = FaultSpec(kind=kind, target=target, params=params)
    resolve_fault(spec)
    return spec
