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
equally, so one long sweep does not outvote a short one.

**Minimizing it: Powell, then Nelder-Mead from several starts** (:func:`minimize_bounded`). The loss is
piecewise smooth with kinks everywhere it matters: an absolute value per size (the minimum of a mean
absolute error sits where some sizes are fitted exactly, on a kink, as a median does), and inside the
model a ``max`` between the wire time, the NIC's per-message work and the proxy's step cycle, each the
bottleneck over a range of sizes, plus the host's issue floor. At such a kink the descent runs along an
edge that no coordinate axis follows: every move along one parameter raises the loss while a joint move
of two (a shorter per-message cost and a longer per-step latency, which trade off on the mid sizes)
lowers it. Powell's method searches along one direction at a time, starting with the coordinate axes,
and replaces a direction only after a sweep that made progress, so it stops at the first such kink (a
closed form in tests/collectives/test_fit.py: from (0.2, 0.2) on |x - y| + 0.1 |x + y - 1.2| it does
not move). It also ends in whichever basin its start drains into: over the published tables the
per-message factor had two basins (~0.14 and ~0.36-0.44 x the transport's overhead, then IB's 1.0 us). Powell from the
physical start ended above the best loss a global search finds on 12 of the 17 fits
bench/reference_tables.py makes (16 leave-one-table-out, one on every table), by up to 1.8e-3 (with
every table in: factor 0.36 at loss 0.14479, where factor 0.14 reaches 0.14318); on times the model
computes with known moves (loss 0 at the truth) it stopped with sizes 1.5x off. So:

* **Powell from the start, then Nelder-Mead from where it stopped**: the simplex moves all parameters at
  once (reflection through the centroid of the others), so it slides along an edge Powell stalls on;
* **Nelder-Mead from the best** :data:`SCREEN_STARTS` **points of a** :data:`SCREEN_POINTS`**-point Sobol
  design** over the bounds (unscrambled: deterministic, no seed): the design's evaluations are cheap (one
  evaluation of the model's closed form each, no re-simulation) and reach basins a local search from one
  start does not;
* the best end is **polished by Nelder-Mead restarted** from it with a fresh simplex until a restart
  gains next to nothing, at most :data:`POLISH_RESTARTS` times (a simplex that has shrunk across a kink
  stalls too; restarting where it claims a minimum is the standard remedy: Press et al., *Numerical
  Recipes*, 3rd ed., section 10.5);
* the start competes too: the fit never ends above the loss it started from.

Bounded: each local search stops after :data:`MAX_EVALS_PER_PARAM` evaluations per fitted parameter.
Checked against a global search (scipy's differential evolution, about 9,000 evaluations per fit) on the
17 fits of bench/reference_tables.py and 8 seven-parameter single-table fits from the shipped values:
within 2.1e-5 of its loss on all 25, where Powell alone was above it by more than 1e-5 on 18 (up to
1.8e-3); 4.6x Powell's evaluations (bench/reference_tables.py: 1.65x its runtime, measured back to back).

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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize
from scipy.stats import qmc

from gpuwait.collectives.physical import (
    PUBLIC_TABLE_FIT,
    PhysicalParams,
    PipelineCosts,
    adjust,
    pipelined_times_s,
    stack_costs,
    stack_params,
)

#: fitted name -> (lower, upper, start); bounds from physics: extra step latencies below the
#: 10-20 us a network round trip through a proxy costs, efficiencies above half the line rate, the
#: per-message factor within 4x either way of the transports' measured post-and-complete costs
#: (gpuwait.transport.profiles: one core's message rate on one QP spans 0.13-0.27 us per message, and a
#: slower host core or a provider's software layer costs more)
BOUNDS: dict[str, tuple[float, float, float]] = {
    "launch_latency_s": (0.0, 30e-6, 0.0),
    "net_step_latency_s": (0.0, 20e-6, 0.0),
    "intra_step_latency_s": (0.0, 3e-6, 0.0),
    "net_message_overhead_s": (0.25, 4.0, 1.0),
    "nic_efficiency": (0.5, 1.0, 1.0),
    "nvlink_efficiency": (0.5, 1.0, 1.0),
    "net_step_cycle_s": (0.0, 10e-6, 0.0),
    "sm80_step_latency_s": (0.0, 3e-6, 0.0),
}
#: what `gpuwait calibrate` may free on one cluster: every parameter but the GPU generation's step latency,
#: which on one cluster's logs is the step latencies above over again (every step of an A100 cluster pays
#: it) and is fitted across clusters only
FIT_NAMES: tuple[str, ...] = tuple(n for n in BOUNDS if n != "sm80_step_latency_s")
#: what is fitted across clusters: the per-step and per-message costs of NCCL's software. The
#: efficiencies stay at their physical 1.0 there (the transport's headers and NCCL's NVLink figure already
#: count what every cluster loses); how far one cluster falls short of its rates is its own, for
#: `gpuwait calibrate`. A global efficiency fitted over the public tables contradicted the maintainers'
#: single-NIC figure (46-49 GB/s on NDR, NVIDIA/nccl-tests#267).
PUBLIC_FIT_NAMES: tuple[str, ...] = ("launch_latency_s", "net_step_latency_s", "intra_step_latency_s",
                                     "net_message_overhead_s", "net_step_cycle_s", "sm80_step_latency_s")
#: every fitted name's move as shipped: the public-table fit, the rest at their physical start (no move).
#: What a cluster calibration starts from and keeps for every parameter it does not free.
SHIPPED: dict[str, float] = {**{n: BOUNDS[n][2] for n in BOUNDS}, **PUBLIC_TABLE_FIT}
#: the least drop of the held-out mean |log(pred / meas)| that frees one more parameter, whatever its
#: standard error: 0.1 % of the time, above the resolution of the times nccl-tests prints (two decimals
#: of a microsecond: 0.04 % of a 25 us floor, as in the logs of NVIDIA/nccl-tests#309); a smaller gain is
#: within what a log can show
MIN_GAIN = 1e-3
#: the fitter's multi-start (module docstring): Sobol points screened over the bounds, how many of the
#: best start a Nelder-Mead search, how often the best end is polished by a fresh simplex, and each local
#: search's budget per fitted parameter. 64 points and 3 starts reach a global search's optimum on every
#: fit checked (module docstring); 2 starts missed it on 2 of the 17 fits of bench/reference_tables.py (by 2e-3).
SCREEN_POINTS = 64
SCREEN_STARTS = 3
POLISH_RESTARTS = 3
MAX_EVALS_PER_PARAM = 400
#: two parameters whose effects on the logged times are this alike (the cosine of the angle between
#: their derivative vectors, :func:`not_separable`) cannot be told apart by the logs: within 1 %, a move
#: of one is a move of the other, and the times pin down only their sum (a launch latency and a per-step
#: latency on 2 nodes, where every call crosses the network the same number of times)
SEPARABLE_COSINE = 0.99
#: the local searches' tolerances in the scaled units (each parameter's bound range is 1) and in the loss
X_TOL, F_TOL = 1e-4, 1e-6


@dataclass(frozen=True)
class Observation:
    """One measured size: the model's costs for it, the defaults it starts from, the measured time, the
    table (``group``) and the size itself where known (``gpuwait calibrate`` splits its folds by it: a log
    may hold one size several times, a table per datatype or reduction)."""

    costs: PipelineCosts
    defaults: PhysicalParams
    measured_time_s: float
    group: str = ""
    size_bytes: int | None = None


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
    return np.log(pipelined_times_s(stacked.costs, adjustment.apply(stacked.defaults)) / stacked.measured_s)


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

    x = minimize_bounded(loss, start, lo, hi)
    if x is start:  # nothing found below the start: its values exactly, not a round trip through the scaling
        return Adjustment({**held, **{n: float(np.clip(held.get(n, BOUNDS[n][2]), *BOUNDS[n][:2])) for n in names}})
    return Adjustment({**held, **{n: float(v) for n, v in zip(names, x * scale, strict=True)}})


def minimize_bounded(loss: Callable[[np.ndarray], float], start: np.ndarray, lo: np.ndarray,
                     hi: np.ndarray) -> np.ndarray:
    """The lowest point of ``loss`` found within ``[lo, hi]`` (see the module docstring): Powell from
    ``start`` then Nelder-Mead from its end, Nelder-Mead from the best Sobol points, the best end polished
    by restarted Nelder-Mead. Deterministic; never returns a point whose loss is above ``start``'s.

    >>> x = minimize_bounded(lambda x: abs(x[0] - 0.3) + abs(x[1] - 0.6), np.zeros(2), np.zeros(2), np.ones(2))
    >>> [round(float(v), 3) for v in x]
    [0.3, 0.6]
    """
    bounds = list(zip(lo, hi, strict=True))
    budget = MAX_EVALS_PER_PARAM * len(start)

    def powell(x: np.ndarray) -> np.ndarray:
        return np.clip(minimize(loss, x, method="Powell", bounds=bounds,
                                options={"xtol": X_TOL, "ftol": F_TOL, "maxfev": budget}).x, lo, hi)

    def simplex(x: np.ndarray) -> np.ndarray:
        return np.clip(minimize(loss, x, method="Nelder-Mead", bounds=bounds,
                                options={"xatol": X_TOL, "fatol": F_TOL, "maxfev": budget, "adaptive": True}).x, lo, hi)

    design = lo + qmc.Sobol(len(start), scramble=False).random(SCREEN_POINTS) * (hi - lo)
    screened = sorted(design, key=loss)[:SCREEN_STARTS]
    # the start first: on a tie it wins (min keeps the first), so a fit never ends above its start
    ends = [start, simplex(powell(start)), *(simplex(x) for x in screened)]
    losses = [loss(x) for x in ends]
    best, best_loss = ends[int(np.argmin(losses))], min(losses)
    for _ in range(POLISH_RESTARTS):
        polished = simplex(best)
        gain = best_loss - loss(polished)
        if gain > 0:
            best, best_loss = polished, best_loss - gain
        if gain < F_TOL * 1e-3:  # a fresh simplex found next to nothing more
            break
    return best


def not_separable(observations: Sequence[Observation], names: Sequence[str],
                  at: Mapping[str, float] | None = None) -> list[tuple[str, str, float]]:
    """Pairs of ``names`` the observations cannot tell apart, with the cosine between their effects:
    the derivatives of log(time) per size with respect to each (a step of 0.1 % of its bound range from
    ``at``, default no move, towards the inside of the bounds; each size weighted as the loss weights
    it), whose cosine exceeds :data:`SEPARABLE_COSINE` in magnitude. A parameter that moves no time is
    in no pair. Which of such a pair carries a time is not identifiable from these observations.
    """
    stacked, weights = _stack(observations), np.sqrt(_weights(observations))
    point = dict(at or {})
    base = _log_errors(stacked, Adjustment(point))
    effects = {}
    for name in names:
        lo, hi, start = BOUNDS[name]
        value, step = point.get(name, start), 1e-3 * (hi - lo)
        step = step if value + step <= hi else -step
        effect = weights * (_log_errors(stacked, Adjustment({**point, name: value + step})) - base) / step
        norm = float(np.linalg.norm(effect))
        if norm > 0:
            effects[name] = effect / norm
    pairs = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            if a in effects and b in effects:
                cosine = float(effects[a] @ effects[b])
                if abs(cosine) > SEPARABLE_COSINE:
                    pairs.append((a, b, cosine))
    return pairs


def separable_groups(names: Sequence[str], pairs: Sequence[tuple[str, str, float]]) -> list[tuple[str, ...]]:
    """The names joined by :func:`not_separable` pairs, as groups (connected through any pair), each in
    the order of ``names``; names in no pair are left out.

    >>> separable_groups(["a", "b", "c", "d"], [("a", "b", 1.0), ("b", "d", 0.995)])
    [('a', 'b', 'd')]
    """
    group_of = {n: {n} for n in names}
    for a, b, _ in pairs:
        joined = group_of[a] | group_of[b]
        for n in joined:
            group_of[n] = joined
    groups = {frozenset(g) for g in group_of.values() if len(g) > 1}
    return sorted((tuple(n for n in names if n in g) for g in groups), key=lambda g: list(names).index(g[0]))


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


def _size_units(observations: Sequence[Observation]) -> np.ndarray:
    """Each observation's unit for a standard error: one per size of a group, numbered in order of first
    appearance (an observation of unknown size is its own unit). A log that times a size in several tables
    (nccl-tests ``-d all``, ``-o all``) shares the model's error at that size across them: counted as
    independent draws, the repeats would shrink the standard error by the square root of their number.
    """
    units: dict[tuple[str, int] | int, int] = {}
    keys = [(o.group, o.size_bytes) if o.size_bytes is not None else -1 - i for i, o in enumerate(observations)]
    return np.array([units.setdefault(key, len(units)) for key in keys], dtype=np.intp)


def _gain_se(weights: np.ndarray, diff: np.ndarray, gain: float, units: np.ndarray) -> float:
    """The standard error of ``gain`` (the weighted sum of the per-observation drops ``diff``) over the units:
    each unit's weight times its mean drop (a group's observations weigh alike), its deviation from the gain.
    With one observation per unit the sums are of the same numbers in the same order as over observations."""
    unit_weight = np.bincount(units, weights)
    unit_diff = np.bincount(units, diff) / np.bincount(units)
    return float(np.sqrt(np.sum(unit_weight ** 2 * (unit_diff - gain) ** 2)))


def select(observations: Sequence[Observation], folds: Folds, names: Sequence[str] = FIT_NAMES,
           base: Mapping[str, float] = SHIPPED) -> Selection:
    """Forward selection among ``names`` from ``base`` (see the module docstring): free, one at a time,
    the parameter that lowers the held-out error most, while the drop is at least :data:`MIN_GAIN` and at
    least its standard error over the sizes (the paired per-size differences, weighted as the loss; the
    rows of one size in several tables of a log count as that one size, :func:`_size_units`)."""
    weights = _weights(observations)
    units = _size_units(observations)
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
                                    _gain_se(weights, diff, gain, units)), errors))
        candidates += [c for c, _ in tries]
        winner, errors = max(tries, key=lambda t: t[0].gain)
        if not winner.significant:
            break
        freed, current = winner.freed, errors
    return Selection(freed, tuple(candidates))
