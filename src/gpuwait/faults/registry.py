"""The fault-kind registry: each kind's parameters model, what it targets and what it does.

A kind registers itself with :func:`register_fault` beside its effect (:mod:`gpuwait.faults.kinds`);
nothing else lists kinds or switches on their names. Its parameters are the pydantic model of
:mod:`gpuwait.spec.faults` (defaults, ranges, units), so a scenario file and ``--inject`` are
checked by the same model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from pydantic import ValidationError

from gpuwait.errors import SpecError, UnknownNameError
from gpuwait.faults.targets import TARGET_SORTS
from gpuwait.spec.cluster import SpecModel
from gpuwait.spec.faults import FAULT_MODEL_BY_KIND, FaultSpec, close_names, kind_of
from gpuwait.spec.scenario import Scenario
from gpuwait.topology.model import Topology

if TYPE_CHECKING:
    from gpuwait.faults.apply import FabricDamage

#: what a kind does to the scenario: (scenario, fault, topology it targets) -> the changed scenario
ScenarioEffect = Callable[[Scenario, Any, Topology], Scenario]
#: what a kind does to a built fabric: it changes the capacities, counters and routes gathered in ``damage``
FabricEffect = Callable[["FabricDamage", Any], None]


@dataclass(frozen=True)
class FaultKind:
    """A registered kind. ``target``: "link", "gpu", "nic", "server-or-all" or "all" (the whole job or
    fabric); ``target_all``: a link kind that also takes ``all``. At least one effect is set."""

    name: str
    model: type[SpecModel]
    target: str
    on_scenario: ScenarioEffect | None = None
    on_fabric: FabricEffect | None = None
    target_all: bool = False

    @property
    def description(self) -> str:
        return (self.model.__doc__ or "").strip()

    @property
    def params(self) -> tuple[str, ...]:
        """The names of its parameters (units in their names)."""
        return tuple(self.model.model_fields["params"].annotation.model_fields)  # type: ignore[union-attr]


FAULT_KINDS: dict[str, FaultKind] = {}


def register_fault(model: type[SpecModel], target: str, *, on_scenario: ScenarioEffect | None = None,
                   on_fabric: FabricEffect | None = None, target_all: bool = False) -> FaultKind:
    """Register the kind that ``model`` (a member of :data:`~gpuwait.spec.faults.FaultSpec`) describes,
    with its effect on the scenario, on the built fabric, or both."""
    name = kind_of(model)
    if FAULT_MODEL_BY_KIND.get(name) is not model:
        raise ValueError(f"fault kind {name!r}: its model is not a member of gpuwait.spec.faults.FaultSpec")
    if target not in TARGET_SORTS:
        raise ValueError(f"fault kind {name!r}: target {target!r}; expected one of {', '.join(TARGET_SORTS)}")
    if on_scenario is None and on_fabric is None:
        raise ValueError(f"fault kind {name!r}: expected an effect on the scenario, on the fabric or both")
    kind = FaultKind(name, model, target, on_scenario, on_fabric, target_all)
    FAULT_KINDS[name] = kind
    return kind


def _unknown_kind(kind: str) -> UnknownNameError:
    return UnknownNameError(f"fault kind: unknown {kind!r}{close_names(kind, FAULT_KINDS)}; expected one of "
                            f"{', '.join(FAULT_KINDS)}")


def fault_kind(fault: FaultSpec) -> FaultKind:
    """The registered kind of ``fault``."""
    kind = FAULT_KINDS.get(fault.kind)
    if kind is None:
        raise _unknown_kind(fault.kind)
    return kind


def _parse_params(text: str, items: str) -> dict[str, float]:
    params: dict[str, float] = {}
    for item in items.split(","):
        if not item.strip():
            continue
        if "=" not in item:
            raise SpecError(f"inject {text}: parameter {item!r} is not NAME=VALUE")
        name, value = item.split("=", 1)
        try:
            params[name.strip()] = float(value)
        except ValueError:
            raise SpecError(f"inject {text}: {name.strip()} = {value!r}; expected a number") from None
    return params


def _bad_param(kind: FaultKind, params: dict[str, float], err: ValidationError) -> SpecError:
    """The first bad parameter, in the order the kind declares them, then the first unknown name."""
    fields = kind.model.model_fields["params"].annotation.model_fields  # type: ignore[union-attr]
    out_of_range = {str(e["loc"][-1]) for e in err.errors() if e["type"] != "extra_forbidden"}
    for name, info in fields.items():
        if name in out_of_range:
            expected = (info.description or "")[:1].lower() + (info.description or "")[1:].rstrip(".")
            return SpecError(f"fault {kind.name}: {name} = {params[name]:g}; expected {expected}")
    unknown = sorted(set(params) - set(fields))
    if unknown:
        bad = unknown[0]
        expected = ", ".join(fields) or "no parameters"
        return SpecError(f"fault {kind.name}: unknown parameter {bad!r}{close_names(bad, fields)}; expected {expected}")
    return SpecError(f"fault {kind.name}: " + "; ".join(e["msg"] for e in err.errors()))


def parse_inject(text: str) -> FaultSpec:
    """``KIND:TARGET[:PARAM=VALUE,...]`` (TARGET may be omitted for kinds of the whole job).

    >>> parse_inject("link-degrade:leaf0->spine3:factor=0.25")
    LinkDegradeFault(kind='link-degrade', target='leaf0->spine3', params=LinkDegradeParams(factor=0.25))
    >>> parse_inject("tcp-fallback").target
    'all'
    """
    parts = text.split(":")
    name = parts[0].strip()
    target = parts[1].strip() if len(parts) > 1 and parts[1].strip() else "all"
    params = _parse_params(text, ":".join(parts[2:])) if len(parts) > 2 else {}
    if len(parts) > 3 and "=" not in parts[2]:
        raise SpecError(f"inject {text}: expected KIND:TARGET[:PARAM=VALUE,...]")
    kind = FAULT_KINDS.get(name)
    if kind is None:
        raise _unknown_kind(name)
    try:
        # a kind's model is a member of FaultSpec (register_fault checks it); its type says only SpecModel
        return cast(FaultSpec, kind.model.model_validate({"kind": name, "target": target, "params": params}))
    except ValidationError as err:
        raise _bad_param(kind, params, err) from None
