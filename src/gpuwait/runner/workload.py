"""Run a scenario's workload on its cluster, once per case (the base and each variant)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from gpuwait.collectives.ncclenv import cluster_env
from gpuwait.collectives.physical import calibration_note
from gpuwait.errors import SpecError
from gpuwait.fabric.groups import FabricModel
from gpuwait.faults.apply import FaultEffects, Perturbation, apply_faults
from gpuwait.routing.routers import get_router
from gpuwait.runner.traffic import refuse_unused_sections, scenario_cases
from gpuwait.spec.faults import FaultSpec
from gpuwait.spec.scenario import Scenario
from gpuwait.spec.workload import INFERENCE_STEPS
from gpuwait.steps.result import RunResult
from gpuwait.steps.serving import run_serving
from gpuwait.steps.training import run_training
from gpuwait.topology.model import Topology
from gpuwait.topology.presets import build_cluster, resolve_cluster
from gpuwait.workload.program import ServingStep, TrainingStep
from gpuwait.workload.steps import serving_step, training_step


def refuse_steps_without_workload(scenario: Scenario, steps: int | None) -> None:
    """Refuse ``steps`` for a scenario with nothing to step: they count training steps or inference batches of
    a `workload:` (or of each job of `jobs:`), and a traffic scenario has neither.

    The error names the argument ``steps``; the command line names its option (``--steps``: the one rename of
    :data:`gpuwait.cli.common.API_OPTIONS`), so `simulate`, `run` and `diagnose` refuse it in one sentence.
    """
    if steps is not None and scenario.workload is None and not scenario.jobs:
        raise SpecError("steps: the scenario has no workload; expected a `workload:` section",
                        hint="`steps` applies to training and inference scenarios")


def case_label(name: str | None, routing, transport) -> str:
    """The variant's own name, or for the base case "RoCEv2, ECMP" / "InfiniBand, adaptive routing"."""
    fabric = {"rocev2": "RoCEv2", "infiniband": "InfiniBand", "tcp": "TCP"}.get(transport.name, transport.name)
    label = f"{fabric}, {get_router(routing.kind).label or routing.kind}"
    return name or label


def cluster_label(name: str, topo: Topology, transport, base_transport) -> str:
    """"rocev2-400g-2tier: 64 servers x 8 GPUs"; a variant on another transport is named by it, so an
    InfiniBand case is not labelled with a RoCEv2 preset's name."""
    size = f"{topo.n_servers} servers x {topo.gpus_per_server} GPUs"
    if (calibrated := calibration_note(topo.spec)) is not None:  # else the output looks as if it were not used
        size += f", calibrated ({calibrated})"
    if transport.name == base_transport.name:
        return f"{name}: {size}"
    fabric = {"rocev2": "RoCEv2", "infiniband": "InfiniBand", "tcp": "TCP"}.get(transport.name, transport.name)
    return f"{fabric} on the {name} topology: {size}"


@dataclass(frozen=True, eq=False)
class WorkloadRun:
    """A workload simulated with its faults: what it ran on and what came out."""

    scenario: Scenario       # with the scenario-level faults applied
    topo: Topology           # with the topology-level faults applied
    effects: FaultEffects
    results: list[RunResult]


def run_workload(scenario: Scenario, steps: int | None = None, progress=None,
                 faults: Sequence[FaultSpec] = (), max_memory_bytes: float | None = None) -> list[RunResult]:
    """Simulate ``scenario.workload`` for the cluster's routing and transport and each variant's.

    ``progress(case_index, n_cases, step, n_steps)`` is called as steps finish (for a progress bar);
    ``max_memory_bytes`` is the caller's memory limit (``max_memory``; None: half the machine's memory),
    which the collectives' fabric runs are held to.
    """
    return simulate_workload(scenario, steps, progress, faults, max_memory_bytes=max_memory_bytes).results


def simulate_workload(scenario: Scenario, steps: int | None = None, progress=None,
                      faults: Sequence[FaultSpec] = (), build=build_cluster,
                      max_memory_bytes: float | None = None) -> WorkloadRun:
    """:func:`run_workload` with the scenario's faults (and ``faults``) applied, keeping the topology
    and the faults' effects for telemetry and diagnosis. ``build(cluster_spec)`` builds the topology
    (a sweep passes one that reuses topologies across its cases); ``max_memory_bytes`` as :func:`run_workload`."""
    if scenario.workload is None:
        raise SpecError("workload: the scenario has none; expected a `workload:` section",
                        hint="see `gpuwait schema` for its fields")
    refuse_unused_sections(scenario)
    cluster = resolve_cluster(scenario.cluster)
    topo = build(cluster)
    all_faults = [*scenario.faults, *faults]
    perturbation = Perturbation()
    if all_faults:
        scenario, perturbation = apply_faults(scenario, all_faults, topo)
        cluster = resolve_cluster(scenario.cluster)
        topo = build(cluster)
    spec = scenario.workload
    assert spec is not None  # checked above; a fault's on_scenario changes the workload, never removes it
    n_steps = steps if steps is not None else spec.steps
    if n_steps < 1:
        raise SpecError(f"steps: got {n_steps}; expected at least 1")
    if spec.mode == "inference" and n_steps != 1:  # the file's own steps are checked with the spec
        raise SpecError(f"steps: got {n_steps}; {INFERENCE_STEPS}")
    step: TrainingStep | ServingStep = training_step(spec, topo) if spec.mode == "training" else serving_step(spec, topo)
    cluster_name = scenario.cluster.preset or cluster.name
    cases = scenario_cases(scenario, cluster)
    faulty, effects = perturbation.apply(topo, float(cases[0][2].mtu_bytes))
    results = []
    for index, (name, routing, transport) in enumerate(cases):
        # no NCCL environment: the cluster file's QPs per connection and NCCL's defaults under the platform's
        # settings, resolved as perf resolves them (gpuwait.collectives.ncclenv.qps_setting, cluster_env)
        env = cluster_env(cluster, transport=transport.name)
        background = effects.foreign_Bps
        fabric = FabricModel(faulty, routing, transport, env, background_Bps=background, max_memory_bytes=max_memory_bytes)
        label = case_label(name, routing, transport)
        cluster_text = cluster_label(cluster_name, topo, transport, cases[0][2])
        if isinstance(step, TrainingStep):
            if step.storage_read_Bps_per_reader > 0:  # only the GPUs that read the dataset read it
                read = fabric.storage(step.layout.rank_gpu[step.layout.reader_ranks()], step.storage_read_Bps_per_reader)
                fabric = fabric.with_background(read.link_load_Bps)
            report = None if progress is None else (lambda k, n, i=index: progress(i, len(cases), k, n))
            result = run_training(step, fabric, steps=n_steps, case=label, cluster=cluster_text, progress=report)
        else:
            result = run_serving(step, fabric, case=label, cluster=cluster_text)
            if progress is not None:
                progress(index, len(cases), 1, 1)
        # said as perf says them: an nccl.version newer than gpuwait checked (predicted as the newest it models),
        # a calibration fitted under NCCL variables this run does not set
        results.append(result if not env.notes else replace(result, notes=(*result.notes, *env.notes)))
    return WorkloadRun(scenario, faulty, effects, results)
