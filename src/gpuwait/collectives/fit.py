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

**Calibrating one cluster: start from the shipped fit, free a parameter only if held-out sizes ask
for it** (:func:`select`). A user's logs are one or two size sweeps of one cluster: 15-30 sizes, of which
the bandwidth plateau and the latency floor each pin down one or two combinations of the seven
parameters, and the parameters are correlated (a launch latency and a per-step latency both lift the
floor; an efficiency and a step cycle both lower the mid sizes). A free fit of all seven from bare
physics therefore fits the table's noise with whichever parameter is at hand, and what it fitted does
not transfer: fitted on the 2-node H100 table of NVIDIA/nccl-tests#309 it lowered that table's own
held-out floor error yet doubled the busbw error of an 8-node H100 table (6.1 -> 14.0 %) and worsened
the 4-node table's over the model as shipped (docs/validation-calibrate.md before this change). So:

* the starting point and the prior is :data:`~gpuwait.collectives.physical.PUBLIC_TABLE_FIT` (the values
  fitted across every published table, :data:`SHIPPED`): a parameter not freed keeps its shipped value;
* parameters are freed by **forward selection scored by cross-validation within the user's own logs**:
  from the shipped model, each not-yet-freed parameter is tried, the one whose fit lowers the held-out
  error most is freed, and the search stops when the best drop is below :data:`MIN_GAIN` or below its
  own standard error over the sizes (the one-standard-error rule of Hastie, Tibshirani and Friedman,
  *The Elements of Statistical Learning*, 2nd ed., section 7.10: a noisier log needs a clearer gain). A
  parameter is thus freed only when sizes the fit did not see are predicted better with it free, which
  is the evidence that it is signal, not noise; real moves (a slower NIC, a costlier launch) lower the
  held-out error by far more than the threshold and are freed and fitted back
  (tests/runner/test_calibrate.py: known moves recovered).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize

from gpuwait.collectives.physical import (
    PUBLIC_TABLE_FIT,
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
#: every fitted name's move as shipped: the public-table fit, the rest at their physical start (no move).
#: What a cluster calibration starts from and keeps for every parameter it does not free.
SHIPPED: dict[str, float] = {**{n: BOUNDS[n][2] for n in FIT_NAMES}, **PUBLIC_TABLE_FIT}
#: the least drop of the held-out mean |log(pred / meas)| that frees one more parameter, whatever its
#: standard error: 0.1 % of the time, above the resolution of the times nccl-tests prints (two decimals
#: of a microsecond: 0.04 % of a 25 us floor, as in the logs of NVIDIA/nccl-tests#309); a smaller gain is
#: within what a log can show
MIN_GAIN = 1e-3


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


def fit(observations: Sequence[Observation], names: Sequence[str] = FIT_NAMES,
        base: Mapping[str, float] | None = None) -> Adjustment:
    """The adjustment of ``names`` that minimizes the group-weighted mean |log(pred / meas)|.

    Every fitted name starts from ``base`` (default: no move), every other name in ``base`` keeps its
    value there (the returned adjustment carries both). Raises ValueError for an empty set or an unknown name.
    """
    if not observations:
        raise ValueError("observations: got none; expected at least one measured size")
    unknown = [n for n in names if n not in BOUNDS]
    if unknown:
        raise ValueError(f"names: unknown parameter {unknown[0]!r}; expected some of {', '.join(BOUNDS)}")
    held = dict(base or {})
    if not names:
        return Adjustment(held)
    weights = _weights(observations)
    # search in scaled units so every parameter moves on a comparable step
    scale = np.array([BOUNDS[n][1] - BOUNDS[n][0] for n in names])
    lo = np.array([BOUNDS[n][0] for n in names]) / scale
    hi = np.array([BOUNDS[n][1] for n in names]) / scale
    start = np.clip(np.array([held.get(n, BOUNDS[n][2]) for n in names]) / scale, lo, hi)

    stacked = _stack(observations)

    def loss(x: np.ndarray) -> float:
        adjustment = Adjustment({**held, **dict(zip(names, np.clip(x, lo, hi) * scale, strict=True))})
        return float(np.sum(weights * np.abs(_log_errors(stacked, adjustment))))

    result = minimize(loss, start, method="Powell", bounds=list(zip(lo, hi, strict=True)),
                      options={"xtol": 1e-4, "ftol": 1e-6, "maxfev": 4000})
    x = np.clip(result.x, lo, hi) * scale
    return Adjustment({**held, **{n: float(v) for n, v in zip(names, x, strict=True)}})


def _weights(observations: Sequence[Observation]) -> np.ndarray:
    """Each group weighted equally, its sizes sharing its weight."""
    groups = [o.group for o in observations]
    counts = {g: groups.count(g) for g in set(groups)}
    return np.array([1.0 / (counts[g] * len(counts)) for g in groups])


#: cross-validation folds over a list of observations: (train mask, test mask) each; every
#: observation is in the test mask of exactly one fold
Folds = Sequence[tuple[np.ndarray, np.ndarray]]


def held_out_error(observations: Sequence[Observation], folds: Folds, names: Sequence[str],
                   base: Mapping[str, float] = SHIPPED) -> float:
    """The group-weighted mean |log(pred / meas)| of every observation, each predicted by the fit of
    ``names`` (from ``base``) on its fold's training observations only."""
    return float(np.sum(_weights(observations) * _held_out_abs(observations, folds, names, base)))


def _held_out_abs(observations: Sequence[Observation], folds: Folds, names: Sequence[str],
                  base: Mapping[str, float]) -> np.ndarray:
    errors = np.zeros(len(observations))
    for train, test in folds:
        adjustment = fit([o for o, keep in zip(observations, train, strict=True) if keep], names, base)
        picked = [o for o, keep in zip(observations, test, strict=True) if keep]
        errors[np.flatnonzero(test)] = log_errors(picked, adjustment)
    return np.abs(errors)


@dataclass(frozen=True)
class Candidate:
    """One set of freed parameters tried: its held-out error (mean |log(pred / meas)|) and how far it
    lowers that of the set it extends (``gain``) beside the standard error of that gain over the sizes."""

    freed: tuple[str, ...]
    held_out_error: float
    gain: float = 0.0
    gain_se: float = 0.0

    @property
    def significant(self) -> bool:
        """Whether the gain clears both :data:`MIN_GAIN` and its own standard error."""
        return self.gain >= max(MIN_GAIN, self.gain_se)


@dataclass(frozen=True)
class Selection:
    """What forward selection freed, and every candidate it scored in order (the shipped model first)."""

    freed: tuple[str, ...]
    candidates: tuple[Candidate, ...]

    @property
    def error(self) -> float:
        """The held-out error of the freed set."""
        return next(c.held_out_error for c in self.candidates if c.freed == self.freed)


def select(observations: Sequence[Observation], folds: Folds, names: Sequence[str] = FIT_NAMES,
           base: Mapping[str, float] = SHIPPED) -> Selection:
    """Forward selection among ``names`` from ``base`` (see the module docstring): free, one at a time,
    the parameter that lowers the held-out error most, while the drop is at least :data:`MIN_GAIN` and at
    least its standard error over the sizes (the paired per-size differences, weighted as the loss)."""
    weights = _weights(observations)
    freed: tuple[str, ...] = ()
    current = _held_out_abs(observations, folds, freed, base)
    candidates = [Candidate(freed, float(np.sum(weights * current)))]
    while len(freed) < len(names):
        tries = []
        for name in (n for n in names if n not in freed):
            errors = _held_out_abs(observations, folds, (*freed, name), base)
            diff = current - errors
            gain = float(np.sum(weights * diff))
            tries.append((Candidate((*freed, name), float(np.sum(weights * errors)), gain,
                                    float(np.sqrt(np.sum(weights ** 2 * (diff - gain) ** 2)))), errors))
        candidates += [c for c, _ in tries]
        winner, errors = max(tries, key=lambda t: t[0].gain)
        if not winner.significant:
            break
        freed, current = winner.freed, errors
    return Selection(freed, tuple(candidates))
