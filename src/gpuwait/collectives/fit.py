"""Fit the collective model's physical parameters to measured times.

The model's time is a cheap function of per-size :class:`~gpuwait.collectives.physical.PipelineCosts`
and :class:`~gpuwait.collectives.physical.PhysicalParams` (NCCL's choice and the fabric simulation do
not depend on the parameters), so a fit evaluates it many times without re-simulating. The fit moves
a few named parameters from each observation's own defaults:

* ``launch_latency_s``, ``net_step_latency_s``, ``intra_step_latency_s``: added seconds;
* ``net_message_overhead_s``: a factor on the transport's per-message overhead (an InfiniBand and a
  TCP cluster keep their ratio when fitted together);
* ``nic_efficiency``, ``nvlink_efficiency``: the share of the rate reached;
* ``net_step_cycle_s``: added seconds (the shortest time between two steps of one network connection whose
  GPU proxy serves one channel's send and receive; more connections on the proxy lengthen it in proportion).

The loss is the mean absolute log ratio of predicted to measured time, each table (group) weighted
equally, so one long sweep does not outvote a short one; Powell's method within physical bounds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize

from gpuwait.collectives.physical import (
    PhysicalParams,
    PipelineCosts,
    adjust,
    pipelined_time_s,
    stack_costs,
    stack_params,
)

#: fitted name -> (lower, upper, start); bounds from physics: extra step latencies below the
#: 10-20 us a network round trip through a proxy costs, efficiencies above half the line rate
BOUNDS: dict[str, tuple[float, float, float]] = {
    "launch_latency_s": (0.0, 30e-6, 0.0),
    "net_step_latency_s": (0.0, 20e-6, 0.0),
    "intra_step_latency_s": (0.0, 3e-6, 0.0),
    "net_message_overhead_s": (0.1, 10.0, 1.0),
    "nic_efficiency": (0.5, 1.0, 1.0),
    "nvlink_efficiency": (0.5, 1.0, 1.0),
    "net_step_cycle_s": (0.0, 10e-6, 0.0),
}
FIT_NAMES: tuple[str, ...] = tuple(BOUNDS)
#: what is fitted across clusters: the per-step and per-message costs of NCCL's software. The
#: efficiencies stay at their physical 1.0 there (the transport's headers and NCCL's NVLink figure already
#: count what every cluster loses); how far one cluster falls short of its rates is its own, for
#: `gpuwait calibrate`. A global efficiency fitted over the public tables contradicted the maintainers'
#: single-NIC figure (46-49 GB/s on NDR, NVIDIA/nccl-tests#267).
PUBLIC_FIT_NAMES: tuple[str, ...] = ("launch_latency_s", "net_step_latency_s", "intra_step_latency_s",
                                     "net_message_overhead_s", "net_step_cycle_s")


@dataclass(frozen=True)
class Observation:
    """One measured size: the model's costs for it, the defaults it starts from, the measured time."""

    costs: PipelineCosts
    defaults: PhysicalParams
    measured_time_s: float
    group: str = ""


@dataclass(frozen=True)
class Adjustment:
    """Fitted moves from each observation's defaults (see the module docstring for their kinds)."""

    values: dict[str, float]

    def apply(self, defaults: PhysicalParams) -> PhysicalParams:
        return adjust(defaults, self.values)


NO_ADJUSTMENT = Adjustment({})


@dataclass(frozen=True)
class _Stacked:
    costs: PipelineCosts
    defaults: PhysicalParams
    measured_s: np.ndarray


def _stack(observations: Sequence[Observation]) -> _Stacked:
    return _Stacked(stack_costs([o.costs for o in observations]), stack_params([o.defaults for o in observations]),
                    np.array([o.measured_time_s for o in observations]))


def log_errors(observations: Sequence[Observation], adjustment: Adjustment = NO_ADJUSTMENT) -> np.ndarray:
    """log(predicted / measured) time per observation."""
    return _log_errors(_stack(observations), adjustment)


def _log_errors(stacked: _Stacked, adjustment: Adjustment) -> np.ndarray:
    return np.log(pipelined_time_s(stacked.costs, adjustment.apply(stacked.defaults)) / stacked.measured_s)


def fit(observations: Sequence[Observation], names: Sequence[str] = FIT_NAMES) -> Adjustment:
    """The adjustment of ``names`` that minimizes the group-weighted mean |log(pred / meas)|.

    Raises ValueError for an empty set or an unknown name.
    """
    if not observations:
        raise ValueError("observations: got none; expected at least one measured size")
    unknown = [n for n in names if n not in BOUNDS]
    if unknown:
        raise ValueError(f"names: unknown parameter {unknown[0]!r}; expected some of {', '.join(BOUNDS)}")
    groups = [o.group for o in observations]
    counts = {g: groups.count(g) for g in set(groups)}
    weights = np.array([1.0 / (counts[g] * len(counts)) for g in groups])
    # search in scaled units so every parameter moves on a comparable step
    scale = np.array([BOUNDS[n][1] - BOUNDS[n][0] for n in names])
    lo = np.array([BOUNDS[n][0] for n in names]) / scale
    hi = np.array([BOUNDS[n][1] for n in names]) / scale
    start = np.array([BOUNDS[n][2] for n in names]) / scale

    stacked = _stack(observations)

    def loss(x: np.ndarray) -> float:
        adjustment = Adjustment(dict(zip(names, np.clip(x, lo, hi) * scale, strict=True)))
        return float(np.sum(weights * np.abs(_log_errors(stacked, adjustment))))

    result = minimize(loss, start, method="Powell", bounds=list(zip(lo, hi, strict=True)),
                      options={"xtol": 1e-4, "ftol": 1e-6, "maxfev": 4000})
    x = np.clip(result.x, lo, hi) * scale
    return Adjustment({n: float(v) for n, v in zip(names, x, strict=True)})
