"""A sweep's cases: the axes expanded over the base scenario, each case keyed by its content, and
one case run into one results row.

A case is plain data (a JSON-able dict), so it travels to a worker process or a Ray node as it is,
and its id is a hash of what decides its result: the resolved scenario (preset applied, name and
variants left out), the nccl-tests arguments, the steps, the engine and gpuwait's version. Two
sweeps that reach the same case by different axes share its id, so a rerun finds it done.

Pitfall: the id hashes the *validated* scenario, so ``servers: 8`` and ``servers: 8.0`` are one
case, while a case the validator refuses is keyed by its raw document (it has no resolved form).
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpuwait.errors import GpuwaitError, SpecError
from gpuwait.spec import Scenario, read_yaml, validate_data
from gpuwait.spec.sweep import AxisSpec, PerfCaseSpec, SweepSpec
from gpuwait.version import __version__

#: Status of a row: ran, refused by the same checks as ``gpuwait validate``, or raised/died.
STATUSES = ("ok", "invalid", "failed")
#: Keys of a case document that are not scenario fields.
_CASE_KEYS = ("perf", "steps")
#: Fields of a cluster that decide its built topology; routing, transport, calibration and NCCL do not.
_NOT_TOPOLOGY = {"routing", "transport", "calibration", "nccl", "name"}


@dataclass(frozen=True)
class Case:
    """One case: its axis values (column -> value), its document, and its id (or the one-line error)."""

    axes: dict[str, Any]
    doc: dict[str, Any]        # {"kind", "scenario", "perf", "steps", "engine"}: what the worker runs
    case_id: str
    error: str | None = None   # set when the scenario itself is refused (pydantic, preset)


@dataclass(frozen=True)
class SweepPlan:
    """A sweep file expanded: every case, and the axis columns in order."""

    name: str
    kind: str
    axes: list[str]
    cases: list[Case] = field(default_factory=list)
    notes: tuple[str, ...] = ()  # what the sweep file changes about its base without an axis saying so

    def spec_dict(self) -> dict:
        # the distinct ids let a report tell a finished sweep from one stopped part-way (two axis
        # combinations may resolve to one case, so n_cases can exceed them)
        return {"name": self.name, "kind": self.kind, "axes": self.axes, "n_cases": len(self.cases),
                "case_ids": sorted({c.case_id for c in self.cases})}


def load_sweep(path: str | Path) -> tuple[SweepSpec, dict]:
    """The sweep file validated, and its base scenario as plain data (a file relative to the sweep's)."""
    path = Path(path)
    spec = validate_data(SweepSpec, read_yaml(path), source=str(path))
    if isinstance(spec.base, dict):
        return spec, copy.deepcopy(spec.base)
    base_path = (path.parent / spec.base) if not Path(spec.base).is_absolute() else Path(spec.base)
    base = read_yaml(base_path)
    if not isinstance(base, dict):
        raise SpecError(f"{path}: base: {spec.base} holds no mapping; expected a scenario file")
    return spec, base


def set_path(doc: dict, path: str, value: Any) -> None:
    """Set ``value`` at dotted ``path`` in ``doc``, making mappings on the way.

    ``cluster: dgx-h100`` (a preset name) becomes ``{preset: dgx-h100}`` and ``server: dgx-h100``
    ``{template: dgx-h100}`` when a field under them is set; a number indexes a list.

    >>> d = {"cluster": "dgx-h100"}; set_path(d, "cluster.routing.kind", "adaptive"); d
    {'cluster': {'preset': 'dgx-h100', 'routing': {'kind': 'adaptive'}}}
    """
    parts = path.split(".")
    node: Any = doc
    for i, key in enumerate(parts[:-1]):
        child = node[int(key)] if isinstance(node, list) else node.get(key)
        if isinstance(child, str) and key in ("cluster", "server"):
            child = {"preset" if key == "cluster" else "template": child}
        elif child is None:
            child = {}
        elif not isinstance(child, (dict, list)):
            raise SpecError(f"axis {path}: {'.'.join(parts[:i + 1])} is {child!r}, not a mapping; expected a path into the scenario")
        if isinstance(node, list):
            node[int(key)] = child
        else:
            node[key] = child
        node = child
    if isinstance(node, list):
        node[int(parts[-1])] = value
    else:
        node[parts[-1]] = value


def get_path(doc: Any, path: str) -> Any:
    """The value at dotted ``path`` in ``doc`` (None where it is missing)."""
    for key in path.split("."):
        if isinstance(doc, list) and key.isdigit() and int(key) < len(doc):
            doc = doc[int(key)]
        elif isinstance(doc, dict):
            doc = doc.get(key)
        else:
            return None
    return doc


def _uniform(axis: AxisSpec) -> list[Any]:
    # ints and floats on one axis become floats, so the column has one type in every case's file
    values = list(axis.values)
    numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if len(numbers) == len(values) and any(isinstance(v, float) for v in values):
        return [float(v) for v in values]
    return values


def _combinations(spec: SweepSpec) -> Iterable[tuple[Any, ...]]:
    columns = [_uniform(a) for a in spec.axes]
    if spec.combine == "zip":
        lengths = {len(c) for c in columns}
        if len(lengths) > 1:
            got = ", ".join(f"{a.path}: {len(a.values)}" for a in spec.axes)
            raise SpecError(f"axes: combine: zip needs axes of one length; got {got}")
        return zip(*columns)
    return itertools.product(*columns)


def _excluded(values: dict[str, Any], exclude: list[dict[str, Any]]) -> bool:
    for entry in exclude:
        if all((values.get(p) in v) if isinstance(v, list) else values.get(p) == v for p, v in entry.items()):
            return True
    return False


def _kind(spec: SweepSpec, base: dict) -> str:
    if spec.kind != "auto":
        return spec.kind
    return "workload" if base.get("workload") else ("perf" if spec.perf is not None else "traffic")


def _replaced_steps_note(spec: SweepSpec, base: dict, kind: str) -> str | None:
    """Every workload case runs the sweep's `steps` (or its `steps` axis), not the base's `workload.steps`:
    said when they differ, since the base file alone would make a reader expect its own count."""
    given = get_path(base, "workload.steps")
    if kind != "workload" or given is None:
        return None
    if any(a.path == "steps" for a in spec.axes):
        by = "the sweep's steps axis"
    elif given == spec.steps:
        return None
    else:
        by = f"the sweep's steps ({spec.steps}{'' if 'steps' in spec.model_fields_set else ', its default'})"
    return (f"workload.steps: the base's {given} is replaced in every case by {by}; "
            "the sweep file's steps field sets the steps of a sweep")


def plan_sweep(spec: SweepSpec, base: dict) -> SweepPlan:
    """Every case of ``spec`` over ``base``, the excluded ones left out, each validated and keyed."""
    kind = _kind(spec, base)
    if kind != "perf" and spec.perf is not None:
        # its arguments would only enter the case ids: every workload or traffic case run once per value
        why = " (the base has a workload:)" if kind == "workload" and spec.kind == "auto" else ""
        raise SpecError(f"perf: the sweep is of kind {kind}{why}; expected kind: perf, or no perf: section",
                        hint="perf: holds the nccl-tests arguments of a perf sweep; set kind: perf to predict them")
    if kind == "perf" and spec.perf is None:
        spec = spec.model_copy(update={"perf": PerfCaseSpec()})
    base = {k: v for k, v in base.items() if k != "variants"}  # a case is one run; vary with an axis instead
    cases = []
    for combo in _combinations(spec):
        by_path = {a.path: v for a, v in zip(spec.axes, combo)}
        if _excluded(by_path, spec.exclude):
            continue
        scenario = copy.deepcopy(base)
        doc = {"kind": kind, "scenario": scenario, "perf": spec.perf.model_dump() if spec.perf else None,
               "steps": spec.steps, "engine": spec.engine if kind == "traffic" else "flow"}
        for path, value in by_path.items():
            if path == "steps":
                doc["steps"] = value
            elif path.startswith("perf."):
                if doc["perf"] is None:
                    raise SpecError(f"axis {path}: the sweep is of kind {kind}; expected a perf sweep (`perf:`)")
                set_path(doc, path, value)
            else:
                set_path(scenario, path, value)
        cases.append(_keyed(doc, {a.column: v for a, v in zip(spec.axes, combo)}))
    note = _replaced_steps_note(spec, base, kind)
    return SweepPlan(spec.name, kind, [a.column for a in spec.axes], cases, notes=(note,) if note else ())


def _digest(payload: dict) -> str:
    text = json.dumps(payload, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _keyed(doc: dict, axes: dict[str, Any]) -> Case:
    """The case with its id: a hash of the resolved case, or of the raw one when it is refused."""
    from gpuwait.topology.presets import resolve_cluster

    key = {"version": __version__, "kind": doc["kind"], "engine": doc["engine"], "steps": doc["steps"]}
    try:
        scenario = validate_data(Scenario, doc["scenario"], source="case")
        if doc["perf"] is not None:
            doc = doc | {"perf": validate_data(PerfCaseSpec, doc["perf"], source="case perf").model_dump()}
        resolved = scenario.model_copy(update={"cluster": resolve_cluster(scenario.cluster), "name": "", "variants": []})
    except GpuwaitError as err:
        return Case(axes, doc, _digest(key | {"raw": doc}), error=one_line(err))
    key |= {"scenario": resolved.model_dump(mode="json"), "perf": doc["perf"]}
    return Case(axes, doc, _digest(key))


def one_line(err: BaseException) -> str:
    """An error as one line (a SpecError's message already is; others get their type)."""
    text = str(err) if isinstance(err, GpuwaitError) else f"{type(err).__name__}: {err}"
    return " ".join(text.split())


# ---- running one case (in a worker) ------------------------------------------------------------

class TopologyCache:
    """Built topologies by the cluster fields that decide them, so cases that differ only in
    routing, transport, NCCL or the workload share one build (arrays are never mutated). It holds
    at most ``max_entries`` topologies, dropping the one built first when full."""

    def __init__(self, max_entries: int = 8) -> None:
        self.max_entries = max_entries
        self._built: dict[str, Any] = {}
        self.hits = self.misses = 0

    def build(self, cluster) -> Any:
        from gpuwait.topology.build import build_topology
        from gpuwait.topology.presets import resolve_cluster

        resolved = resolve_cluster(cluster)
        key = json.dumps(resolved.model_dump(mode="json", exclude=_NOT_TOPOLOGY), sort_keys=True, default=str)
        topo = self._built.get(key)
        if topo is None:
            self.misses += 1
            topo = build_topology(resolved)
            if len(self._built) >= self.max_entries:
                self._built.pop(next(iter(self._built)))
            self._built[key] = topo
            return topo
        self.hits += 1
        # the same arrays under this case's spec: code reads routing/transport/calibration from topo.spec
        return replace(topo, spec=resolved)


_CACHE = TopologyCache()


def _peak_rss_bytes() -> int:
    import resource
    import sys

    # ru_maxrss: kilobytes on Linux, bytes on macOS; the worker's high-water mark so far
    scale = 1 if sys.platform == "darwin" else 1024
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * scale


def run_case(case_id: str, doc: dict, axes: dict[str, Any], cache: TopologyCache | None = None,
             max_memory_bytes: float | None = None) -> dict:
    """Run one case and return its row: the axes, status, error, headline results, wall time, memory.

    Never raises for a bad case: a refused one is ``status="invalid"`` with the one-line error
    ``gpuwait validate`` would print, anything else that raises ``status="failed"``. A case whose
    estimated allocation exceeds ``max_memory_bytes`` (default half the worker machine's memory) is
    refused before it is built, as ``gpuwait run`` and ``perf`` refuse it (:mod:`gpuwait.runner.cost`).
    """
    cache = cache or _CACHE
    start = time.perf_counter()
    row: dict[str, Any] = {"case_id": case_id, **axes, "kind": doc["kind"], "engine": doc["engine"],
                           "gpuwait_version": __version__}
    try:
        scenario = validate_data(Scenario, doc["scenario"], source="case")
        results = _RUNNERS[doc["kind"]](scenario, doc, cache, max_memory_bytes)
        row |= {"status": "ok", "error": None} | results
    except GpuwaitError as err:
        row |= {"status": "invalid", "error": one_line(err)}
    except Exception as err:  # noqa: BLE001 — a sweep records a crashing case as a row and goes on
        row |= {"status": "failed", "error": one_line(err)}
    row |= {"wall_s": time.perf_counter() - start, "peak_rss_bytes": _peak_rss_bytes(),
            "finished_at": time.time(), "case_json": json.dumps(doc, sort_keys=True, default=str)}
    return row


def _topology_columns(topo) -> dict[str, Any]:
    # switches of every network the cluster has (compute fabric, plus storage/management when built)
    return {"n_gpus": int(topo.n_gpus), "n_servers": int(topo.n_servers), "n_switches": int(topo.switch_nodes.sum()),
            "n_links": int(topo.n_links)}


def _checked(scenario: Scenario, cache: TopologyCache, doc: dict, max_memory_bytes: float | None = None):
    """The same checks as ``gpuwait validate`` and ``run`` (they raise SpecError: the scenario, then what a
    workload's steps or a traffic run would allocate), and the case's topology."""
    from gpuwait.runner.cost import check_scenario_cost
    from gpuwait.runner.traffic import check_scenario

    check_scenario(scenario)
    if doc["kind"] != "perf":  # a perf case is estimated from its predictor (_run_perf_case)
        check_scenario_cost(scenario, max_memory_bytes, steps=doc["steps"], engine=doc["engine"])
    return cache.build(scenario.cluster)


def _run_workload_case(scenario: Scenario, doc: dict, cache: TopologyCache, max_memory_bytes: float | None) -> dict:
    from gpuwait.runner.workload import simulate_workload
    from gpuwait.steps.result import BREAKDOWN_CATEGORIES

    topo = _checked(scenario, cache, doc, max_memory_bytes)
    result = simulate_workload(scenario, doc["steps"], build=cache.build).results[0]
    bd = result.breakdown
    means = bd.job_mean_s()
    row = {"step_time_s": bd.step_time_s, "ideal_step_time_s": bd.ideal_step_time_s,
           "network_cost_s": bd.network_cost_s, "wait_fraction": bd.wait_fraction, "mfu": bd.mfu,
           "tokens_per_s": bd.tokens_per_step / bd.step_time_s if bd.step_time_s > 0 else math.nan}
    row |= {f"{c}_s": means[c] for c in BREAKDOWN_CATEGORIES}
    if result.serving is not None:  # a serving case's step is its batch: its latencies are what `run` leads with
        row |= {k: math.nan if result.serving.get(k) is None else result.serving[k]
                for k in ("ttft_s", "ideal_ttft_s", "tpot_s", "ideal_tpot_s")}
    for stat in result.collectives:  # the slowest call of each kind of collective
        column = f"busbw_{_slug(stat.label)}_GBps"
        row[column] = min(row.get(column, math.inf), stat.busbw_GBps)
    return row | _topology_columns(topo)


def _run_perf_case(scenario: Scenario, doc: dict, cache: TopologyCache, max_memory_bytes: float | None) -> dict:
    from gpuwait.collectives.communicator import Communicator
    from gpuwait.collectives.ncclenv import cluster_env
    from gpuwait.collectives.nccltests import average_busbw_GBps
    from gpuwait.fabric.perf import CollectivePredictor
    from gpuwait.runner.perf import SweepArgs, checked_sweep
    from gpuwait.transport import resolve_transport

    perf = PerfCaseSpec.model_validate(doc["perf"])
    topo = _checked(scenario, cache, doc)
    spec = topo.spec
    nccl = cluster_env(spec, dict(perf.env)).with_version(perf.nccl_version, "perf.nccl_version")
    comm = Communicator.world(topo, gpus_per_server=perf.gpus)
    predictor = CollectivePredictor.create(comm, nccl, spec.routing, resolve_transport(spec.transport))
    args = SweepArgs(perf.min_bytes, perf.max_bytes, perf.step_factor, dtype=perf.dtype)
    sweep = checked_sweep(perf.op, args, predictor, max_memory_bytes)
    last, choice = sweep.rows[-1], sweep.choices[-1]
    return {"op": perf.op, "n_ranks": sweep.n_ranks, "avg_busbw_GBps": average_busbw_GBps(sweep.rows),
            "busbw_GBps": last.oop_busbw_GBps, "time_us": last.oop_time_us, "size_bytes": last.size_bytes,
            "algorithm": choice["algorithm"], "protocol": choice["protocol"],
            "sizes": [r.size_bytes for r in sweep.rows], "busbw_by_size_GBps": [r.oop_busbw_GBps for r in sweep.rows]
            } | _topology_columns(topo)


def _run_traffic_case(scenario: Scenario, doc: dict, cache: TopologyCache, max_memory_bytes: float | None) -> dict:
    from gpuwait.runner.traffic import run_traffic

    topo = _checked(scenario, cache, doc, max_memory_bytes)
    run = run_traffic(scenario, doc["engine"])[0]
    times = run.flow_time_s
    return {"makespan_s": float(run.makespan_s), "fct_mean_s": float(times.mean()) if len(times) else math.nan,
            "fct_max_s": float(times.max()) if len(times) else math.nan, "n_flows": len(run.flows)
            } | _topology_columns(topo)


def _slug(text: str) -> str:
    return re.sub(r"[^0-9A-Za-z]+", "_", text).strip("_").lower()


_RUNNERS: dict[str, Callable[[Scenario, dict, TopologyCache, float | None], dict]] = {
    "workload": _run_workload_case, "perf": _run_perf_case, "traffic": _run_traffic_case}
