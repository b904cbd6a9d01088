"""A fault in a scenario file or on the command line (``--inject KIND:TARGET[:PARAM=VALUE,...]``)."""

from __future__ import annotations

from pydantic import Field

from gpuwait.spec.cluster import SpecModel


class FaultSpec(SpecModel):
    """One injected fault. Kinds and their parameters: `gpuwait diagnose --help` or docs/diagnosis.md."""

    kind: str = Field(..., description="Fault kind: link-degrade, link-flap, link-loss, slow-gpu, nic-down, tcp-fallback, no-gdr, nic-affinity, ecmp-polarization, storage-contention, dataloader-starvation, noisy-neighbor.")
    target: str = Field("all", description="Node or link name (s3.gpu2, s3.nic2, leaf0->spine3) or `all` where the kind allows it.")
    params: dict[str, float] = Field(default_factory=dict, description="Parameters of the kind (e.g. factor: 0.25 for link-degrade); units in their names.")
