"""The one interface both simulators answer to, and the registry that picks one by name.

An engine takes a topology, a flow table, a routing and a transport and returns an
:class:`EngineRun`: per-flow start, finish, mean rate and bottleneck, per-link bytes,
utilization and the flows crossing each link. The flow engine (fluid, max-min) and the packet
engine (queues, PFC, ECN, DCQCN, credits) return the same schema, so everything above this layer
(reports, diagnosis, the scenario runner) is written once for both.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from gpuwait.arrays import unique_sorted
from gpuwait.collectives.physical import physical_params
from gpuwait.errors import UnknownNameError
from gpuwait.topology.model import LinkKind, Network, Topology

if TYPE_CHECKING:
    from gpuwait.routing.paths import Routes
    from gpuwait.spec.cluster import RoutingSpec
    from gpuwait.spec.scenario import Scenario
    from gpuwait.transport.profiles import TransportProfile
    from gpuwait.workload.traffic import FlowTable

_HOST = LinkKind.HOST
_SERVER = Network.SERVER


def effective_capacity_Bps(topo: Topology, transport: TransportProfile) -> np.ndarray:
    """Payload capacity of every link: network links lose the transport's header bytes, and host
    ports on a kernel-TCP path are held to the stack's ceiling."""
    capacity = topo.link_capacity_Bps.copy()
    network = topo.link_network != _SERVER
    capacity[network] *= transport.wire_efficiency
    capacity[topo.link_kind == _HOST] *= transport.link_fraction
    if transport.host_ceiling_Bps is not None:
        # e.g. NCCL's socket proxy thread copying every byte: a ceiling per compute NIC port, whatever its speed
        ports = (topo.link_kind == _HOST) & (topo.link_network == Network.COMPUTE)
        capacity[ports] = np.minimum(capacity[ports], transport.host_ceiling_Bps)
    return capacity


def message_overhead_s(topo: Topology, transport: TransportProfile) -> float:
    """The per-message cost a network flow pays at its start: the cluster's resolved
    ``net_message_overhead_s`` (:func:`gpuwait.collectives.physical.physical_params`: the transport's LogGP
    *o* moved by the public table fit, or the cluster's ``calibration`` section), the figure ``gpuwait perf``
    charges per network message, so the engines and the collective model read one parameter.

    >>> from gpuwait.topology import build_preset
    >>> from gpuwait.transport import TRANSPORTS
    >>> from gpuwait.collectives.physical import PUBLIC_TABLE_FIT
    >>> o_s = message_overhead_s(build_preset("rocev2-400g-2tier", servers=2), TRANSPORTS["rocev2"])
    >>> round(o_s / TRANSPORTS["rocev2"].message_overhead_s, 3) == PUBLIC_TABLE_FIT["net_message_overhead_s"]
    True
    """
    return float(physical_params(topo.spec, transport).net_message_overhead_s)


@runtime_checkable
class EngineRun(Protocol):
    """What every engine returns for one routed flow table (rows of ``routes`` are QPs).

    Times are seconds, sizes bytes, rates bytes/s; per-link arrays are indexed by link id.
    """

    topo: Topology
    flows: FlowTable
    routes: Routes
    capacity_Bps: np.ndarray
    routing: RoutingSpec
    transport: TransportProfile
    labels: dict

    @property
    def qp_finish_s(self) -> np.ndarray: ...
    @property
    def flow_start_s(self) -> np.ndarray: ...
    @property
    def flow_finish_s(self) -> np.ndarray: ...
    @property
    def flow_time_s(self) -> np.ndarray: ...
    @property
    def flow_mean_rate_Bps(self) -> np.ndarray: ...
    @property
    def flow_bottleneck_link(self) -> np.ndarray: ...
    @property
    def makespan_s(self) -> float: ...
    @property
    def link_bytes(self) -> np.ndarray: ...
    def link_flow_count(self) -> np.ndarray: ...
    def link_peak_utilization(self) -> np.ndarray: ...
    def link_mean_utilization(self) -> np.ndarray: ...
    def flows_on_link(self, link: int) -> np.ndarray: ...


@dataclass(frozen=True, eq=False)
class PerFlowResults:
    """The shape both engines' results share: what the run was given (declared once here, for
    :class:`~gpuwait.engine.flow_run.FlowRun` and :class:`~gpuwait.engine.packet.run.PacketRun`), and
    what both derive alike from per-QP finish times and the routes.

    A flow is done when its last QP is. A subclass adds its own fields after these and provides
    ``flow_start_s`` and ``qp_finish_s`` (a field or a property).
    """

    topo: Topology
    flows: FlowTable
    routes: Routes
    capacity_Bps: np.ndarray  # payload capacity of every link (:func:`effective_capacity_Bps`)
    routing: RoutingSpec
    transport: TransportProfile
    labels: dict = field(default_factory=dict, kw_only=True)

    if TYPE_CHECKING:  # provided by each subclass (a field or a property); read-only here, so not fields
        @property
        def flow_start_s(self) -> np.ndarray: ...

        @property
        def qp_finish_s(self) -> np.ndarray: ...

    @cached_property
    def flow_finish_s(self) -> np.ndarray:
        out = np.zeros(len(self.flows))
        np.maximum.at(out, self.routes.flow_index, self.qp_finish_s)
        return out

    @property
    def flow_time_s(self) -> np.ndarray:
        return self.flow_finish_s - self.flow_start_s

    @property
    def flow_mean_rate_Bps(self) -> np.ndarray:
        return self.flows.size_bytes / np.maximum(self.flow_time_s, 1e-300)

    @property
    def makespan_s(self) -> float:
        return float(self.flow_finish_s.max()) if len(self.flows) else 0.0

    def link_flow_count(self) -> np.ndarray:
        """Number of distinct flows (not QPs) crossing each link."""
        return self.routes.flows_per_link(self.topo.n_links)

    def flows_on_link(self, link: int) -> np.ndarray:
        """Indices of the flows with at least one QP on ``link``."""
        rows = self.routes.link_weights[:, link].nonzero()[0]
        return unique_sorted(self.routes.flow_index[rows])


def per_flow_top(n_flows: int, flow_of_row: np.ndarray, score: np.ndarray, value: np.ndarray) -> np.ndarray:
    """For each flow, ``value`` of its row with the highest ``score`` (the first such row on a tie);
    -2 for a flow with no row.

    >>> per_flow_top(3, np.array([0, 0, 2]), np.array([1.0, 5.0, 2.0]), np.array([10, 11, 12])).tolist()
    [11, -2, 12]
    """
    order = np.lexsort((-score, flow_of_row))
    first = np.r_[True, np.diff(flow_of_row[order]) != 0]
    out = np.full(n_flows, -2, np.int64)
    out[flow_of_row[order][first]] = value[order][first]
    return out


@dataclass(frozen=True)
class Engine:
    """A registered simulator: its name, what it models, and where its entry point lives.

    The entry point is imported on first use, so choosing the flow engine never loads numba.
    ``simulate(topo, flows, routing, transport, **options)`` returns an :class:`EngineRun`.
    """

    name: str
    description: str
    entry_point: str  # "module:function"
    #: "module:function" taking a Scenario and returning the keyword options of ``simulate`` it sets
    scenario_options: str | None = None
    #: ``simulate`` takes ``progress=`` (a callback hearing how far a long run is, between chunks)
    reports_progress: bool = False

    @property
    def simulate(self) -> Callable[..., EngineRun]:
        return _load(self.entry_point)

    def options_for(self, scenario: Scenario) -> dict[str, Any]:
        """The keyword options of :attr:`simulate` that ``scenario`` sets (its ``packet:`` section...)."""
        return _load(self.scenario_options)(scenario) if self.scenario_options else {}


def _load(entry_point: str) -> Callable[..., Any]:
    module, function = entry_point.split(":")
    return getattr(importlib.import_module(module), function)


ENGINES: dict[str, Engine] = {}


def register_engine(engine: Engine) -> Engine:
    """Add an engine to :data:`ENGINES` (a new engine registers here; nothing else changes)."""
    ENGINES[engine.name] = engine
    return engine


def get_engine(name: str) -> Engine:
    """The engine called ``name``, or one error naming the ones that exist.

    >>> get_engine("flow").name
    'flow'
    >>> get_engine("fluid")
    Traceback (most recent call last):
    ...
    gpuwait.errors.UnknownNameError: engine: unknown 'fluid'; expected one of flow, packet
    """
    try:
        return ENGINES[name]
    except KeyError:
        raise UnknownNameError(f"engine: unknown {name!r}; expected one of {', '.join(ENGINES)}") from None


register_engine(Engine("flow", "fluid max-min fair sharing, event-driven and vectorized: 100,000s of GPUs",
                       "gpuwait.engine.flow_run:simulate_flows"))
register_engine(Engine("packet", "packet by packet (numba): queues, PFC, ECN/DCQCN, credits, loss",
                       "gpuwait.engine.packet.run:simulate_packets", "gpuwait.engine.packet.params:scenario_options",
                       reports_progress=True))

