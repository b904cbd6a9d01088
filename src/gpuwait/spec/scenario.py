"""The scenario file: a cluster and the traffic sent through it."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator

from gpuwait.spec.cluster import ClusterSpec, RoutingSpec, SpecModel, TransportSpec
from gpuwait.spec.faults import FaultSpec
from gpuwait.spec.jobs import JobSpec
from gpuwait.spec.packet import PacketParams
from gpuwait.spec.types import PositiveSizeBytes, RateBps, TimeS
from gpuwait.spec.workload import WorkloadSpec


class FlowSpec(SpecModel):
    """One transfer between two endpoints (GPU or NIC names such as ``s0.gpu3`` or ``s2.nic1``)."""

    name: str | None = Field(None, description="Flow name, used by `after` and in output; default f<index>.")
    src: str = Field(..., description="Source node name (a GPU, NIC or storage server).")
    dst: str = Field(..., description="Destination node name.")
    size: PositiveSizeBytes = Field(..., description="Bytes to send (more than zero).")
    start: TimeS = Field(0.0, description="Earliest start time (seconds).")
    after: list[str] = Field(default_factory=list, description="Names of flows that must finish before this one starts.")
    rate_cap: RateBps | None = Field(None, description="Rate ceiling for this flow (e.g. a TCP stream).")


class PatternSpec(SpecModel):
    """A generated traffic pattern; every random choice uses ``seed``."""

    kind: Literal["permutation", "all-to-all", "leaf-to-leaf", "incast", "rail-ring"] = Field(..., description="'permutation': servers in a random cycle, each GPU sends to a random GPU of the next server (every GPU sends once and receives once, never inside its server); 'all-to-all': every GPU to every GPU of other servers; 'leaf-to-leaf': `count` flows from NICs on one leaf to NICs on another; 'incast': `count` GPUs to one; 'rail-ring': each GPU sends to the same GPU of the next server.")
    size: PositiveSizeBytes = Field(..., description="Bytes per flow.")
    count: int | None = Field(None, ge=1, description="Number of flows (leaf-to-leaf, incast); default: as many as fit.")
    src_leaf: int = Field(0, ge=0, description="leaf-to-leaf: index of the sending leaf.")
    dst_leaf: int = Field(1, ge=0, description="leaf-to-leaf: index of the receiving leaf.")
    seed: int = Field(0, ge=0, le=2**32 - 1, description="Seed of the pattern's random choices.")
    start: TimeS = Field(0.0, description="Start time of every flow of the pattern.")


def _list_or_one(value: Any) -> Any:
    return [value] if isinstance(value, dict) else value


class TrafficSpec(SpecModel):
    """Explicit flows and generated patterns, all released into one simulation."""

    flows: list[FlowSpec] = Field(default_factory=list, description="Explicit flows.")
    patterns: Annotated[list[PatternSpec], BeforeValidator(_list_or_one)] = Field(default_factory=list, description="Generated patterns.")


class VariantSpec(SpecModel):
    """The same scenario with another routing or transport, run side by side with the base."""

    name: str = Field(..., description="Label of the variant in the comparison table.")
    routing: RoutingSpec | None = Field(None, description="Routing to use instead of the cluster's.")
    transport: TransportSpec | None = Field(None, description="Transport to use instead of the cluster's.")


class Scenario(SpecModel):
    """A scenario file: what the cluster is and what runs on it."""

    name: str = Field("scenario", description="Scenario name, for reports.")
    cluster: Annotated[ClusterSpec, BeforeValidator(lambda v: {"preset": v} if isinstance(v, str) else v)] = Field(
        default_factory=ClusterSpec, description="The cluster: a preset name or a full description.")
    traffic: TrafficSpec = Field(default_factory=TrafficSpec, description="Flows to send.")
    workload: WorkloadSpec | None = Field(None, description="A training or inference job to run on the cluster (none = only the traffic).")
    jobs: list[JobSpec] = Field(default_factory=list, description="Several training jobs sharing the cluster's fabric, each placed by its policy (instead of `workload:`); `gpuwait run` times every job alone and together.")
    variants: list[VariantSpec] = Field(default_factory=list, description="Variants run beside the base scenario (e.g. ECMP vs adaptive routing).")
    faults: list[FaultSpec] = Field(default_factory=list, description="Faults injected into every case (see `gpuwait diagnose --help`).")
    packet: PacketParams | None = Field(None, description="Packet-engine knobs for `--engine packet` (buffers, PFC, ECN, DCQCN, credits, loss, limits; every field with its unit below); none = the defaults, which follow the transport.")

    @field_validator("variants")
    @classmethod
    def _variant_names_once(cls, variants: list[VariantSpec]) -> list[VariantSpec]:
        # the comparison table, the conclusion and the report key each case by its name: a second variant of
        # one name took the first's place (its p99 paired with another run's)
        names = [v.name for v in variants]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"variant name {twice[0]!r} appears twice; expected each variant named once")
        return variants
