"""Scenario models of the cluster: servers, fabrics, side networks, routing and transport.

Configuration holds no logic: these are frozen, documented values. Building a topology from
them is :mod:`gpuwait.topology`'s job; resolving a ``template`` name is too.
"""

from __future__ import annotations

import functools
import re
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

import gpuwait.units as units
from gpuwait.errors import SpecError, UnitError
from gpuwait.spec.types import PositiveSizeBytes, RateBps, RateOrZeroBps, SizeBytes, TimeS

#: The oldest NCCL release gpuwait models (gpuwait.collectives.nccl_versions holds the releases).
OLDEST_NCCL_VERSION = (2, 18)
_NCCL_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?(?:-\d+)?(?:\+\S*)?$")


def parse_nccl_version(text: object, what: str = "NCCL version") -> tuple[int, int, int]:
    """``"2.21.5"``, ``"2.21"``, ``"v2.21.5-1"`` or NCCL's own ``"2.21.5+cuda12.4"`` as (2, 21, 5).

    Raises
    ------
    SpecError
        Not a version, or older than 2.18 (:data:`OLDEST_NCCL_VERSION`); the message names ``what``.

    Examples
    --------
    >>> parse_nccl_version("2.26.2+cuda12.8"), parse_nccl_version("v2.19.3-1"), parse_nccl_version("2.27")
    ((2, 26, 2), (2, 19, 3), (2, 27, 0))
    >>> parse_nccl_version("2.17.1")
    Traceback (most recent call last):
    ...
    gpuwait.errors.SpecError: NCCL version: got '2.17.1'; expected NCCL 2.18 or later (gpuwait models 2.18 onwards)
    """
    match = _NCCL_VERSION.match(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise SpecError(f"{what}: got {text!r}; expected a release such as 2.21.5 (major.minor[.patch])")
    version = int(match[1]), int(match[2]), int(match[3] or 0)
    if version[:2] < OLDEST_NCCL_VERSION:
        oldest = ".".join(map(str, OLDEST_NCCL_VERSION))
        raise SpecError(f"{what}: got {text!r}; expected NCCL {oldest} or later (gpuwait models {oldest} onwards)")
    return version


class SpecModel(BaseModel):
    """Base of every scenario model: frozen, unknown fields rejected, and a field's type taken as the file spells
    it: ``true``/``false`` refused where a number belongs, alone or in a list of numbers (pydantic reads them as
    1 and 0, so ``pp: true`` ran one stage and ``placement: [true, 0]`` put ranks on server 1), and anything
    but ``true``/``false`` refused in a yes/no field (pydantic reads 1, 0, 'yes' and 'off' as one, so
    ``sequence_parallel: 1``, a degree of 1 to a reader of other tools, turned sequence parallelism on)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _booleans_only_in_flags(cls, data: Any) -> Any:
        # the offending value is handed on so the field's own check refuses it under its path: a bool in a number
        # field as the text the file spells ("workload.parallel.pp: got 'true'; input should be a valid
        # integer"), a non-bool in a yes/no field wrapped so no lax reading accepts it ("got 1; input should be a
        # valid boolean"); a before-validator per field cannot run on the discriminator fields (`kind`)
        if not isinstance(data, dict):
            return data
        kinds = _field_kinds(cls)
        changed: dict[str, Any] = {}
        for key, value in data.items():
            kind = kinds.get(key)
            if kind in ("number", "number or name") and isinstance(value, bool):
                changed[key] = str(value).lower()
            elif kind == "numbers" and isinstance(value, list) and any(isinstance(v, bool) for v in value):
                changed[key] = [str(v).lower() if isinstance(v, bool) else v for v in value]
            elif kind == "number map" and isinstance(value, dict) and any(isinstance(v, bool) for v in value.values()):
                changed[key] = {k: str(v).lower() if isinstance(v, bool) else v for k, v in value.items()}
            elif kind == "flag" and value is not None and not isinstance(value, bool):
                changed[key] = _NotAFlag(value)
        return data | changed if changed else data


class _NotAFlag:
    """A value other than true or false given to a yes/no field: pydantic's boolean check refuses it (it would
    read 1, 0, 'yes' or 'off' as a boolean), and its repr is the value's, so the error shows what was given."""

    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value

    def __repr__(self) -> str:
        return repr(self.value)


def _bare(annotation: Any) -> Any:
    """``float`` for ``Annotated[float, Field(gt=0)]``: a bound does not change what the value is."""
    return get_args(annotation)[0] if get_origin(annotation) is Annotated else annotation


@functools.cache
def _field_kinds(model: type[BaseModel]) -> dict[str, str]:
    """The fields of ``model`` whose values :meth:`SpecModel._booleans_only_in_flags` checks: ``number`` (plain
    ints or floats, or None), ``numbers`` (a list of them, possibly beside other arms such as a name),
    ``number map`` (a mapping of names to them), ``number or name`` (an int or a str: a bool is taken as the text
    the file spells, which the field's reader then refuses or keeps as a name, never as 1 or 0) and ``flag`` (a
    bool, or None). A unit type (its own parser in the field's metadata) refuses a bool itself,
    naming its unit; a union of a number and another arm but a name (a list, a model) is left to pydantic."""
    kinds = {}
    for name, field in model.model_fields.items():
        if any(isinstance(m, BeforeValidator) for m in field.metadata):
            continue
        annotation = field.annotation
        arms = [a for a in get_args(annotation) if a is not type(None)] if get_origin(annotation) in (
            Union, UnionType) else [annotation]
        if arms and all(a in (int, float) for a in arms):
            kinds[name] = "number"
        elif any(a in (int, float) for a in arms) and all(a in (int, float, str) for a in arms):
            kinds[name] = "number or name"  # a sweep's perf min_bytes, a cable's port: true is its text
        elif any(get_origin(a) is list and all(_bare(x) in (int, float) for x in get_args(a)) for a in arms):
            kinds[name] = "numbers"
        elif any(get_origin(a) is dict and _bare(get_args(a)[1]) in (int, float) for a in arms):
            kinds[name] = "number map"
        elif arms == [bool]:
            kinds[name] = "flag"
    return kinds


class ServerSpec(SpecModel):
    """One server: GPUs in an NVLink domain, PCIe switches, CPUs, NICs.

    Any field left out takes the value of ``template`` (when given) or the default below.
    """

    template: str | None = Field(None, description="Start from this server template (see `gpuwait topo --list`) and override the fields given here.")
    gpu_model: str = Field("H100-SXM", description="GPU model name (e.g. H100-SXM5-80GB, NVIDIA B200): sets the compute capability and NVLink generation NCCL's model uses; must name a GPU `gpuwait.topology.gpus` knows.")
    gpus: int = Field(8, ge=1, le=72, description="GPUs in the server (count).")
    nvlink_bandwidth: RateOrZeroBps = Field(450e9, description="NVLink bandwidth per GPU per direction (e.g. 450GB/s for NVLink4); 0 = no NVLink, GPUs talk over PCIe.")
    nvlink_topology: Literal["nvswitch", "mesh", "pairs"] = Field("nvswitch", description="'nvswitch': every GPU links to one NVSwitch domain (the server's, or the cluster's nvlink_domain when it spans servers); 'mesh': direct GPU-GPU links splitting the per-GPU bandwidth evenly; 'pairs': NVLink bridges joining GPU 2k and 2k+1 (A100 PCIe NV12, RTX A6000 / A40 NV4), each bridge carrying the whole per-GPU bandwidth, PCIe between pairs.")
    nvlink_latency: TimeS = Field(0.6e-6, description="Latency of one NVLink traversal GPU->NVSwitch (seconds).")
    pcie_switches: int = Field(4, ge=1, le=1024, description="PCIe switches; GPUs and NICs are spread evenly over them unless mapped explicitly.")
    pcie_bandwidth: RateBps = Field(63e9, description="Bandwidth of one PCIe x16 link per direction (Gen5 x16 = 63GB/s after 128b/130b coding, Gen4 x16 = 31.5GB/s).")
    pcie_latency: TimeS = Field(0.25e-6, description="Latency of one PCIe hop (seconds).")
    gpu_host_bandwidth: RateBps | None = Field(None, description="Bandwidth per direction of each GPU's own link to its host (GPU to PCIe switch, switch to CPU); default pcie_bandwidth. Grace-Hopper / Grace-Blackwell superchips: NVLink-C2C, 450GB/s (900 GB/s both directions).")
    gpu_p2p: bool = Field(True, description="CUDA peer-to-peer between the server's GPUs (true/false). false when the platform or driver does not allow it (`nvidia-smi topo -p2p p` shows NS): NCCL then stages every transfer between the server's GPUs through host memory (SHM transport), as NCCL_P2P_DISABLE=1 does.")
    gpu_pcie_switch: list[int] | None = Field(None, description="PCIe switch index of each GPU (list of length `gpus`); default spreads GPUs evenly.")
    nic_pcie_switch: list[int] | None = Field(None, description="PCIe switch index of each compute NIC (list of length `nics`); default spreads NICs evenly.")
    cpus: int = Field(2, ge=1, le=1024, description="CPU sockets / NUMA nodes; PCIe switches are spread over them.")
    cpu_interconnect_bandwidth: RateBps = Field(64e9, description="Socket-to-socket bandwidth per direction (UPI/xGMI).")
    cpu_vendor: Literal["intel", "amd", "arm", "other"] = Field("intel", description="Host CPU vendor; NCCL's tuning model uses it (network overhead per step, LL bandwidth cap).")
    cpu_generation: Literal["broadwell", "skylake", "sapphire-rapids", "emerald-rapids"] | None = Field(None, description="Intel CPU generation as NCCL tells them apart (CPUID model: skylake also covers Cascade Lake and Ice Lake, sapphire-rapids also Granite Rapids): sets NCCL's socket-link bandwidth (6, 10, 22, 40 GB/s) for rings through host memory that cross sockets; unset = that link is not charged. AMD and Arm hosts use NCCL's one figure (16, 6 GB/s).")
    nics: int = Field(8, ge=0, le=1024, description="Compute-fabric NICs (count); 0 for a server with no scale-out network.")
    nic_speed: RateBps = Field(50e9, description="Line rate of one NIC port, e.g. 400Gbps.")
    nic_ports: int = Field(1, ge=1, le=4, description="Ports per compute NIC; each port is one link (in its own plane on a multi-plane fabric).")
    storage_nics: int = Field(0, ge=0, le=1024, description="NICs for the storage network (count).")
    storage_nic_speed: RateBps = Field(25e9, description="Line rate of one storage NIC.")
    mgmt_nic_speed: RateBps = Field(1.25e9, description="Line rate of the management NIC (10Gbps default).")


class FabricSpec(SpecModel):
    """The compute fabric between servers: a folded Clos of 2 or 3 tiers.

    Leaves take the NIC ports: top-of-rack style (all NICs of a server on one leaf) or
    rail-optimized (NIC i of every server of a scalable unit on leaf i of that unit).
    """

    kind: Literal["clos", "inventory", "none"] = Field("clos", description="'clos' = leaf-spine (tiers=2) or fat tree with pods (tiers=3); 'inventory' = the switches and cables listed in cluster.inventory (`gpuwait inventory import`); 'none' = servers not connected (single-server presets).")
    tiers: Literal[2, 3] = Field(2, description="2 = leaf-spine, 3 = leaves and spines grouped in pods under a core tier.")
    switch_radix: int = Field(64, ge=2, le=100_000, description="Ports per switch (count).")
    switch_speed: RateBps | None = Field(None, description="Switch-to-switch link speed; default = the NIC port speed.")
    leaf_downlinks: int | None = Field(None, ge=1, le=100_000, description="Leaf ports facing servers; default half the radix.")
    oversubscription: float = Field(1.0, ge=1.0, description="Leaf downlink : uplink capacity ratio (1 = non-blocking, 2 = 2:1).")
    spine_oversubscription: float = Field(1.0, ge=1.0, description="Spine downlink : uplink ratio (3-tier only).")
    rail_optimized: bool = Field(False, description="NIC i of every server in a scalable unit goes to leaf i of that unit.")
    servers_per_unit: int | None = Field(None, ge=1, le=100_000, description="Servers per scalable unit (rail-optimized) — default leaf_downlinks / ports per NIC.")
    planes: int = Field(1, ge=1, le=8, description="Independent fabric planes; port p of every NIC joins plane p (needs nic_ports a multiple of planes).")
    dual_tor: bool = Field(False, description="Each NIC's two ports go to two different leaves of the same plane (needs 2 ports per NIC per plane).")
    cable_latency: TimeS = Field(25e-9, description="Propagation delay of one cable (about 5 ns per metre).")
    switch_latency: TimeS = Field(300e-9, description="Port-to-port latency of one switch hop.")


class StorageNetworkSpec(SpecModel):
    """Storage servers and how GPU servers reach them."""

    mode: Literal["none", "separate", "converged"] = Field("none", description="'separate': own leaf-spine via storage NICs; 'converged': storage servers hang off the compute fabric.")
    storage_servers: int = Field(4, ge=1, le=100_000, description="Storage servers (count).")
    storage_server_speed: RateBps = Field(50e9, description="Network bandwidth of one storage server.")
    switch_radix: int = Field(64, ge=2, le=100_000, description="Ports per storage-network switch.")
    oversubscription: float = Field(1.0, ge=1.0, description="Leaf downlink : uplink ratio of a separate storage network.")


class ManagementNetworkSpec(SpecModel):
    """Out-of-band / in-band management network (one NIC per server to management switches)."""

    enabled: bool = Field(False, description="Build the management network.")
    switch_radix: int = Field(48, ge=2, le=100_000, description="Server ports per management switch.")
    uplink_speed: RateBps = Field(12.5e9, description="Management switch uplink speed (100Gbps default).")


class RoutingSpec(SpecModel):
    """How flows pick among equal-cost paths."""

    kind: Literal["ecmp", "static", "adaptive", "spray"] = Field("ecmp", description="'ecmp': per-flow hash; 'static': InfiniBand subnet-manager D-mod-k routes; 'adaptive': load-aware split per packet; 'spray': even split over all equal-cost paths.")
    hash: str = Field("crc32", description="ECMP hash function: crc32, crc32c, crc16-ccitt, crc16-arc, xor-fold.")
    seed: int = Field(0, ge=0, le=2**32 - 1, description="Base hash seed (32-bit).")
    per_switch_seed: bool = Field(True, description="Derive a different seed per switch; false = the same seed everywhere (reproduces hash polarization).")
    qps_per_connection: int = Field(1, ge=1, le=128, description="QPs per connection the cluster's jobs run with (NCCL_IB_QPS_PER_CONNECTION): each QP is its own flow with its own UDP source port. perf, run and diagnose read it alike; an NCCL_IB_QPS_PER_CONNECTION in perf's environment (--env) overrides it; unset = NCCL's default, 1.")


def _curve_point(size: Any, cost: Any) -> tuple[float, float]:
    """One ``size: time`` or ``size: rate`` entry of a message curve as (bytes, seconds)."""
    size_bytes = units.parse_size_bytes(size, allow_zero=False)
    text = str(cost).strip()
    if isinstance(cost, bool) or not isinstance(cost, str) or not re.search(r"[A-Za-zµμ]", text):
        raise UnitError(f"got {cost!r} at {size}; expected a time like '6.25us' or a rate like '0.16MB/s'")
    try:
        return size_bytes, units.parse_time_s(text, allow_zero=False)
    except UnitError:
        return size_bytes, size_bytes / units.parse_rate_Bps(text)  # not a time: a rate (osu_bw's MB/s)


def _parse_message_curve(value: Any) -> Any:
    """``{size: time or rate}`` (as osu_bw prints it) -> [(bytes, seconds)] by size; lists pass as they are."""
    if value is None:
        return value
    if isinstance(value, list):  # already (bytes, seconds) pairs, e.g. a dumped spec
        points = sorted(tuple(point) for point in value)
        if not points or any(len(p) != 2 or min(p) <= 0 for p in points):
            raise ValueError(f"got {value!r}; expected (bytes, seconds) pairs, both more than zero")
        return points
    if not isinstance(value, dict) or not value:
        raise ValueError(f"got {value!r}; expected a mapping of message size to time or rate, e.g. "
                         "{1B: 6.25us, 16KiB: 505.89MB/s}")
    try:
        points = sorted(_curve_point(size, cost) for size, cost in value.items())
    except UnitError as err:
        raise ValueError(re.sub(r"^\w+: ", "", str(err))) from None
    if len({size for size, _ in points}) < len(points):
        raise ValueError("got one message size twice; expected each size once")
    return points


class TransportSpec(SpecModel):
    """A transport profile by name with optional overrides; defaults in :mod:`gpuwait.transport`."""

    name: Literal["infiniband", "rocev2", "tcp", "efa", "tcpx", "tcpxo", "slingshot"] = Field(
        "infiniband", description="Transport profile.")
    mtu: PositiveSizeBytes | None = Field(None, description="Payload MTU override (bytes).")
    message_overhead: TimeS | None = Field(None, description="Per-message software + NIC overhead override (seconds).")
    rate_cap: RateBps | None = Field(None, description="Per-flow rate cap override (e.g. a TCP stream's ceiling).")
    host_ceiling: RateBps | None = Field(None, description="What the host's software path moves through one compute NIC port per direction, whatever the port's speed (e.g. a kernel-TCP path measured with osu_bw); with NCCL's socket transport the lower of this and its proxy thread's copy budget. Default: none (tcp: the proxy thread's budget).")
    message_curve: Annotated[list[tuple[float, float]] | None, BeforeValidator(_parse_message_curve)] = Field(None, description="tcp only: what one message costs on the host's socket path, measured at several sizes: a mapping of message size to the time of one message ('16KiB: 32.4us') or to the rate a stream of such messages reaches ('16KiB: 505.89MB/s', osu_bw's column: time = size / rate). Every NCCL socket message pays the curve at its bytes on the wire (read as message_curve_stack says) instead of the flat message_overhead; the smallest size's time is the per-message overhead. Default: none (the flat overhead).")
    message_curve_stack: Literal["socket", "mpi"] | None = Field(None, description="What message_curve was measured through (required with it): 'socket' = the socket calls themselves (e.g. sockperf), read as measured; 'mpi' = an MPI benchmark (e.g. osu_bw), read only at its ends as LogGP's o (the smallest size's time) and G (the largest size's time per byte), since an MPI library's protocol switch (eager below a limit, rendezvous above) shapes its middle sizes.")
    rendezvous_threshold: SizeBytes | None = Field(None, description="Bytes on the wire above which a message goes by the provider's rendezvous protocol and pays its round trip (slingshot only: libfabric CXI's FI_CXI_RDZV_THRESHOLD + FI_CXI_RDZV_GET_MIN, default 2048 + 2049 B); 0 = rendezvous at every size.")
    net_plugin: Literal["none", "ibext"] | None = Field(None, description="An external NCCL net plugin the cluster's image installs; NCCL loads it before its own IB and socket transports (src/plugin/net.cc). 'ibext' = Mellanox/nccl-rdma-sharp-plugins (HPC-X, NGC containers), whose IB/RoCE transport reads NCCL_IBEXT_DISABLE, not NCCL_IB_DISABLE: NCCL_IB_DISABLE=1 alone leaves the job on RDMA (infiniband or rocev2 only). Default: none.")
    platform: Literal["p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge", "p5e.48xlarge", "a3-highgpu-8g", "a3-megagpu-8g",
                      "cscs-alps", "none"] | None = Field(None, description="The platform whose net plugin or image sets NCCL variables (AWS instance type for efa, Google machine type for tcpx/tcpxo, cscs-alps for slingshot; none = no platform settings); they apply under the job's own NCCL environment. Default: the platform the transport implies (efa: the AWS server template's instance type; tcpx: a3-highgpu-8g; tcpxo: a3-megagpu-8g; slingshot: cscs-alps). Values and sources: gpuwait.transport.platforms.")


class CalibrationSpec(SpecModel):
    """Named physical parameters of the collective model that a measurement can refine.

    Every field left out keeps the value the model derives from datasheets and NCCL's source; `gpuwait
    calibrate` fits them to nccl-tests logs and writes this section. See docs/model.md (Collectives).
    """

    launch_latency: TimeS = Field(0.0, description="Extra fixed cost of one collective call (seconds): kernel launch and host overhead beyond NCCL's base latency.")
    net_step_latency: TimeS = Field(0.0, description="Extra latency of one pipeline step across the network (seconds), added to NCCL's hardware latency for a network hop.")
    intra_step_latency: TimeS = Field(0.0, description="Extra latency of one pipeline step inside a server (seconds), added to NCCL's NVLink/PCIe hop latency.")
    net_message_overhead: TimeS | None = Field(None, description="Cost of one network message (one NCCL step of one channel) on the sending/receiving proxy (seconds); default: the transport's per-message overhead.")
    nic_efficiency: float = Field(1.0, gt=0.0, le=1.0, description="Share of a NIC's payload rate a collective reaches (0-1].")
    nvlink_efficiency: float = Field(1.0, gt=0.0, le=1.0, description="Share of NCCL's NVLink bandwidth figure a collective reaches (0-1].")
    net_step_cycle: TimeS = Field(0.0, description="Shortest time between two steps of one network connection (seconds): NCCL's proxy moves a step one state per pass over its connections.")
    sm80_step_latency: TimeS = Field(0.0, description="Extra latency of every step of NCCL's latency chain (seconds) on an A100-generation GPU (compute capability 8.0), inside servers and across the network; other GPUs ignore it. Fitted across the published tables (`PUBLIC_TABLE_FIT`), not by `gpuwait calibrate` (on one cluster it is the step latencies above).")
    fitted_on: list[str] = Field(default_factory=list, description="Where the values came from (log files), for the record; not used by the model.")
    nccl_env: dict[str, str] | None = Field(None, description="The NCCL variables the fitted logs ran with, those gpuwait models (`calibrate --env` and the process environment; {} = NCCL's defaults); None = not recorded. Not applied: perf, run and diagnose say so in a note when they predict under other values, since the fit was checked only under these.")


class NvlinkDomainSpec(SpecModel):
    """An NVLink domain joining the GPUs of several servers through NVSwitch trays (GB200/GB300 NVL72,
    NVL36x2): every GPU of the domain reaches every other over NVLink at its full per-GPU bandwidth."""

    servers: int = Field(1, ge=1, le=72, description="Servers (compute trays) per NVLink domain (count); 1 = each server is its own domain. GB200 NVL72: 18 trays of 4 GPUs. Must divide cluster.servers, and the domain needs server.nvlink_topology: nvswitch.")
    switch_latency: TimeS = Field(0.0, description="Extra latency of the NVSwitch tray hop between servers (seconds), added to server.nvlink_latency on every link into the domain's switch.")


def _domain_shorthand(value: Any) -> Any:
    # `nvlink_domain: 18` is short for `nvlink_domain: {servers: 18}`
    return {"servers": value} if isinstance(value, int) and not isinstance(value, bool) else value


def _template_shorthand(value: Any) -> Any:
    # `server: dgx-h100` is short for `server: {template: dgx-h100}`
    return {"template": value} if isinstance(value, str) else value


class NcclSpec(SpecModel):
    """The NCCL library the cluster runs: its tuning model (algorithm and protocol choices) differs by release."""

    version: str | None = Field(None, description="NCCL release, e.g. '2.21.5' (2.18 or later; a version between two modelled releases takes the older one). Default: 2.30.7. Used by perf, run and diagnose; `perf --nccl-version` overrides it.")

    @field_validator("version", mode="before")
    @classmethod
    def _known_form(cls, value: Any) -> Any:
        if value is None:
            return value
        try:
            parse_nccl_version(value)
        except SpecError as err:
            raise ValueError(str(err).split("; ", 1)[-1]) from None
        return value


class ClusterSpec(SpecModel):
    """A whole cluster: servers on a fabric, with side networks, routing and transport.

    With ``preset`` set, every field left out takes the preset's value (see `gpuwait topo --list`).
    """

    preset: str | None = Field(None, description="Start from this cluster preset and override the fields given here.")
    name: str = Field("cluster", description="Cluster name, for reports.")
    servers: int = Field(1, ge=1, le=100_000, description="Number of GPU servers (count).")
    server: Annotated[ServerSpec, BeforeValidator(_template_shorthand)] = Field(default_factory=ServerSpec, description="The server model (a template name or fields).")
    nvlink_domain: Annotated[NvlinkDomainSpec, BeforeValidator(_domain_shorthand)] = Field(default_factory=NvlinkDomainSpec, description="NVLink domains spanning servers (a number = servers per domain); default one server per domain.")
    fabric: FabricSpec = Field(default_factory=FabricSpec, description="Compute fabric.")
    storage: StorageNetworkSpec = Field(default_factory=StorageNetworkSpec, description="Storage network.")
    management: ManagementNetworkSpec = Field(default_factory=ManagementNetworkSpec, description="Management network.")
    routing: RoutingSpec = Field(default_factory=RoutingSpec, description="Path selection.")
    transport: TransportSpec = Field(default_factory=TransportSpec, description="Transport between servers.")
    calibration: CalibrationSpec = Field(default_factory=CalibrationSpec, description="Physical parameters of the collective model (defaults from datasheets and NCCL's source; `gpuwait calibrate` fits them).")
    nccl: NcclSpec = Field(default_factory=NcclSpec, description="The NCCL release whose tuning model to use.")
    inventory: InventorySpec | None = Field(None, description="Real host, NIC and switch names and the cables (`gpuwait inventory import` writes it); with fabric.kind: inventory the fabric is built from its cables. See docs/inventory.md.")


from gpuwait.spec.inventory import InventorySpec  # noqa: E402 — defined on SpecModel above

ClusterSpec.model_rebuild()
