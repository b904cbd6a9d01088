"""Faults: what breaks in a cluster, as changes to a scenario and to the fabric it runs on."""

from gpuwait.faults.apply import Perturbation, apply_faults
from gpuwait.faults.registry import FAULT_KINDS, FaultKind, parse_inject, resolve_fault

__all__ = ["FAULT_KINDS", "FaultKind", "Perturbation", "apply_faults", "parse_inject", "resolve_fault"]
