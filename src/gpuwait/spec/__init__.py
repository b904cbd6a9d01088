"""Scenario files: pydantic models and their loader."""

from gpuwait.spec.cluster import (
    ClusterSpec,
    FabricSpec,
    ManagementNetworkSpec,
    RoutingSpec,
    ServerSpec,
    StorageNetworkSpec,
    TransportSpec,
)
from gpuwait.spec.load import load_model, read_yaml, validate_data
from gpuwait.spec.scenario import (
    FlowSpec,
    PatternSpec,
    Scenario,
    TrafficSpec,
    VariantSpec,
)
from gpuwait.spec.workload import (
    ComputeSpec,
    DataSpec,
    InferenceSpec,
    ModelSpec,
    ParallelSpec,
    SlowGpuSpec,
    WorkloadSpec,
)

__all__ = [
    "ClusterSpec", "FabricSpec", "FlowSpec", "ManagementNetworkSpec", "PatternSpec", "RoutingSpec", "Scenario",
    "ServerSpec", "StorageNetworkSpec", "TrafficSpec", "TransportSpec", "VariantSpec", "load_model", "read_yaml", "validate_data",
    "ComputeSpec", "DataSpec", "InferenceSpec", "ModelSpec", "ParallelSpec", "SlowGpuSpec", "WorkloadSpec",
]
