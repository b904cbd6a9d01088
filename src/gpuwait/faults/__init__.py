"""Faults: what breaks in a cluster, as changes to a scenario and to the fabric it runs on.

Each kind registers its effect in :mod:`gpuwait.faults.kinds` (imported here, so every kind is
registered once the package is imported); its parameters are a model in :mod:`gpuwait.spec.faults`.
"""

from gpuwait.faults import kinds as _kinds  # noqa: F401  (registers every kind)
from gpuwait.faults.apply import FabricDamage, FaultEffects, Perturbation, apply_faults
from gpuwait.faults.registry import FAULT_KINDS, FaultKind, fault_kind, parse_inject, register_fault

__all__ = ["FAULT_KINDS", "FabricDamage", "FaultEffects", "FaultKind", "Perturbation", "apply_faults", "fault_kind",
           "parse_inject", "register_fault"]
