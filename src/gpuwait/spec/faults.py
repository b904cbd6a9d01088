"""Faults in a scenario file or on the command line (``--inject KIND:TARGET[:PARAM=VALUE,...]``).

A fault is one of the models below, chosen by its ``kind``; each kind's ``params`` is its own model,
so `gpuwait schema` lists every kind with its parameters, their units, ranges and defaults::

    faults:
      - {kind: link-degrade, target: leaf0->spine3, params: {factor: 0.25}}
      - {kind: tcp-fallback}

What a kind does to the scenario or the fabric is registered beside it in :mod:`gpuwait.faults.kinds`
(this module only describes the configuration). A new kind is a model here, a member of
:data:`FaultSpec`, and its effect there.
"""

from __future__ import annotations

import difflib
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Discriminator, Field

from gpuwait.spec.cluster import SpecModel


def _param(default: float, lo: float, hi: float, text: str) -> Any:
    """A parameter field; ``text`` says what it is with its unit and range, and is what an error
    at ``--inject`` says was expected."""
    return Field(default, ge=lo, le=hi, description=text[0].upper() + text[1:] + ".")


def _kind() -> Any:
    """The ``kind`` field: every fault model narrows it to its own name (a ``Literal``)."""
    return Field(description="Fault kind (picks the parameters below).")


def _target(text: str) -> Any:
    """The ``target`` field; ``text`` says what it names (default ``all``)."""
    return Field("all", description=text)


def _params(model: type[SpecModel], text: str) -> Any:
    """The ``params`` field of a kind: ``model``, all its defaults when the fault gives none."""
    return Field(default_factory=model, description=text)


_LINK = "Link name SRC->DST (e.g. leaf0->spine3); both directions of the cable are affected."
_GPU = "GPU name (e.g. s3.gpu2)."


class NoParams(SpecModel):
    """This kind takes no parameters."""


class LinkDegradeParams(SpecModel):
    factor: float = _param(0.25, 1e-3, 1.0, "fraction of the link's speed left, 0 < factor <= 1")


class LinkFlapParams(SpecModel):
    down_fraction: float = _param(0.2, 0.0, 0.99, "share of the time the link is down")
    period_s: float = _param(10.0, 1e-3, 1e6, "seconds of one down/up cycle")


class LinkLossParams(SpecModel):
    # at 1 no packet ever arrives: go-back-N never completes, which a finite step time cannot show
    loss_rate: float = Field(1e-3, ge=0.0, lt=1.0,
                             description="Probability a packet is lost, 0 <= loss_rate < 1 (at 1 nothing arrives).")


class SlowGpuParams(SpecModel):
    factor: float = _param(1.3, 1.0, 100.0, "multiplier of its compute time, >= 1")


class GpuThrottleParams(SpecModel):
    clock_fraction: float = _param(0.75, 0.05, 1.0, "share of its clocks the thermal or power limit leaves, 0.05..1")
    reasons: int = Field(0x40, ge=1, le=0xFF, description="NVML clock throttle reason bits DCGM reports "
                         "(0x4 SW power cap, 0x8 HW slowdown, 0x20 SW thermal, 0x40 HW thermal, 0x80 HW power brake).")


class PcieDowntrainedParams(SpecModel):
    lanes: int = Field(8, ge=1, le=16, description="Lanes the GPU's PCIe link trained at, 1..16.")
    generation: int = Field(0, ge=0, le=6, description="PCIe generation it trained at, 1..6 (0: the server's own).")


class StorageContentionParams(SpecModel):
    read_rate_per_gpu_Bps: float = _param(4e9, 0.0, 1e12, "bytes/s the job reads from storage per GPU of it (as workload.data.dataset_read_per_gpu)")


class DataloaderStarvationParams(SpecModel):
    samples_per_s_per_server: float = _param(20.0, 1e-3, 1e9, "samples/s one server's loader delivers")


class StorageSlowParams(SpecModel):
    throughput_fraction: float = _param(0.25, 1e-3, 1.0, "share of their ports' rate the storage servers' backend delivers")


class NoisyNeighborParams(SpecModel):
    load_fraction: float = _param(0.6, 0.0, 0.99, "share of each target link the other job keeps busy")


class LinkDegradeFault(SpecModel):
    """A link running at a fraction of its speed (lanes down, bad optics)."""

    kind: Literal["link-degrade"] = _kind()
    target: str = _target(_LINK)
    params: LinkDegradeParams = _params(LinkDegradeParams, "How much speed is left.")


class LinkFlapFault(SpecModel):
    """A link going down and up; traffic stalls while it is down."""

    kind: Literal["link-flap"] = _kind()
    target: str = _target(_LINK)
    params: LinkFlapParams = _params(LinkFlapParams, "How long it is down, how often.")


class LinkLossFault(SpecModel):
    """A link dropping packets (a dirty fibre); lossy transports retransmit."""

    kind: Literal["link-loss"] = _kind()
    target: str = _target(_LINK)
    params: LinkLossParams = _params(LinkLossParams, "How many packets it loses.")


class SlowGpuFault(SpecModel):
    """A GPU computing slower (thermal or power throttling, a bad HBM stack)."""

    kind: Literal["slow-gpu"] = _kind()
    target: str = _target(_GPU)
    params: SlowGpuParams = _params(SlowGpuParams, "How much slower it computes.")


class GpuThrottleFault(SpecModel):
    """A GPU whose clocks a thermal or power limit holds down; DCGM reports why."""

    kind: Literal["gpu-throttle"] = _kind()
    target: str = _target(_GPU)
    params: GpuThrottleParams = _params(GpuThrottleParams, "How far its clocks drop, and why.")


class PcieDowntrainedFault(SpecModel):
    """A GPU's PCIe link trained at fewer lanes or a lower generation (a loose riser, a failing retimer)."""

    kind: Literal["pcie-downtrained"] = _kind()
    target: str = _target(_GPU)
    params: PcieDowntrainedParams = _params(PcieDowntrainedParams, "The width and speed it trained at.")


class NicDownFault(SpecModel):
    """A NIC (or its cable) down: its GPU's traffic moves to the neighbour NIC."""

    kind: Literal["nic-down"] = _kind()
    target: str = _target("NIC name (e.g. s1.nic2).")
    params: NoParams = _params(NoParams, "None.")


class TcpFallbackFault(SpecModel):
    """RDMA unavailable: NCCL falls back to its socket (TCP) transport."""

    kind: Literal["tcp-fallback"] = _kind()
    target: str = _target("`all`: the whole job.")
    params: NoParams = _params(NoParams, "None.")


class NoGdrFault(SpecModel):
    """GPUDirect RDMA off: network data bounces through host memory."""

    kind: Literal["no-gdr"] = _kind()
    target: str = _target("Server name (e.g. s3) or `all`.")
    params: NoParams = _params(NoParams, "None.")


class NicAffinityFault(SpecModel):
    """A GPU using a NIC behind the other CPU socket, across the CPU interconnect."""

    kind: Literal["nic-affinity"] = _kind()
    target: str = _target(_GPU)
    params: NoParams = _params(NoParams, "None.")


class EcmpPolarizationFault(SpecModel):
    """The same ECMP hash seed on every switch: the tiers pick alike and links idle."""

    kind: Literal["ecmp-polarization"] = _kind()
    target: str = _target("`all`: the whole fabric.")
    params: NoParams = _params(NoParams, "None.")


class StorageContentionFault(SpecModel):
    """Dataset reads or checkpoint writes on the compute fabric (converged storage)."""

    kind: Literal["storage-contention"] = _kind()
    target: str = _target("`all`: the whole job.")
    params: StorageContentionParams = _params(StorageContentionParams, "How fast the GPUs read.")


class StorageSlowFault(SpecModel):
    """The storage servers' backend (disks, file system) slower than their network ports."""

    kind: Literal["storage-slow"] = _kind()
    target: str = _target("`all`: every storage server, or one storage server's name (e.g. stor1).")
    params: StorageSlowParams = _params(StorageSlowParams, "How much the backend delivers.")


class DataloaderStarvationFault(SpecModel):
    """CPU data preprocessing slower than the GPUs."""

    kind: Literal["dataloader-starvation"] = _kind()
    target: str = _target("Server name (e.g. s3): its loaders fall behind, or `all`: every server's.")
    params: DataloaderStarvationParams = _params(DataloaderStarvationParams, "How fast the loaders deliver.")


class NoisyNeighborFault(SpecModel):
    """Another job's traffic on shared links."""

    kind: Literal["noisy-neighbor"] = _kind()
    target: str = _target("Link name SRC->DST (both directions of the cable), or `all`: every switch-to-switch link "
                          "of the compute fabric.")
    params: NoisyNeighborParams = _params(NoisyNeighborParams, "How busy the other job keeps the links.")


#: every fault model, in the order kinds are listed to users
FAULT_MODELS: tuple[type[SpecModel], ...] = (
    LinkDegradeFault, LinkFlapFault, LinkLossFault, SlowGpuFault, GpuThrottleFault, PcieDowntrainedFault, NicDownFault,
    TcpFallbackFault, NoGdrFault,
    NicAffinityFault, EcmpPolarizationFault, StorageContentionFault, DataloaderStarvationFault, NoisyNeighborFault,
    StorageSlowFault,
)


def kind_of(model: type[SpecModel]) -> str:
    """The ``kind`` a fault model is chosen by.

    >>> kind_of(LinkDegradeFault)
    'link-degrade'
    """
    return model.model_fields["kind"].annotation.__args__[0]  # type: ignore[union-attr]  # a Literal


FAULT_MODEL_BY_KIND: dict[str, type[SpecModel]] = {kind_of(m): m for m in FAULT_MODELS}


def close_names(name: str, choices, n: int = 3) -> str:
    """`` (close: a, b)`` for the choices that look like ``name``, or nothing."""
    near = difflib.get_close_matches(name, list(choices), n=n, cutoff=0.5)
    return f" (close: {', '.join(near)})" if near else ""


def _known_kind(value: Any) -> Any:
    # the union alone would only say the tag does not match: name the close kinds as well
    if isinstance(value, dict) and value.get("kind") not in FAULT_MODEL_BY_KIND:
        kind = value.get("kind")
        if kind is None:
            raise ValueError(f"a fault needs a `kind`; expected one of {', '.join(FAULT_MODEL_BY_KIND)}")
        raise ValueError(f"kind {kind!r} is not a fault kind{close_names(str(kind), FAULT_MODEL_BY_KIND)}; "
                         f"expected one of {', '.join(FAULT_MODEL_BY_KIND)}")
    return value


#: one fault, chosen by ``kind``
FaultSpec = Annotated[
    LinkDegradeFault | LinkFlapFault | LinkLossFault | SlowGpuFault | NicDownFault | TcpFallbackFault | NoGdrFault
    | NicAffinityFault | EcmpPolarizationFault | StorageContentionFault | DataloaderStarvationFault | NoisyNeighborFault
    | StorageSlowFault | GpuThrottleFault | PcieDowntrainedFault,
    Discriminator("kind"),
    BeforeValidator(_known_kind),
]
