"""Diagnoses from what a user names (what ``gpuwait diagnose`` and :func:`gpuwait.diagnose` run):
a scenario with injected faults, or a directory of imported telemetry, with the report files."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, cast

from gpuwait.diagnosis.packet import diagnose_packets
from gpuwait.diagnosis.report import diagnosis_dict
from gpuwait.diagnosis.run import diagnose_observation, diagnose_scenario
from gpuwait.diagnosis.telemetry import observe_telemetry
from gpuwait.errors import SpecError
from gpuwait.faults import parse_inject
from gpuwait.report.conclusion import diagnosis_conclusion
from gpuwait.report.files import report_directory, write_reports
from gpuwait.report.results import DiagnosisResult
from gpuwait.report.traffic import write_traffic_reports
from gpuwait.runner.inputs import load_cluster
from gpuwait.runner.traffic import run_traffic
from gpuwait.spec import Scenario
from gpuwait.spec.faults import FaultSpec
from gpuwait.telemetry.bundle import load_telemetry_dir
from gpuwait.topology import build_topology

if TYPE_CHECKING:
    from gpuwait.engine.packet.run import PacketRun


def diagnosis_engine(scenario: Scenario) -> str:
    """The engine :func:`diagnose_run` runs ``scenario`` on, which its memory estimate must count: a workload's
    steps on the flow engine, a traffic scenario packet by packet (its pauses, marks and queues tell)."""
    return "flow" if scenario.workload is not None else "packet"


def diagnose_run(scenario: Scenario, inject: Sequence[str | FaultSpec] = (), *, steps: int | None = None,
                 measure_gain: bool = True, report: str | Path | None = None, progress=None,
                 max_memory_bytes: float | None = None) -> DiagnosisResult:
    """Diagnose a scenario: a training workload with the faults in ``inject`` (``KIND:TARGET[:P=V,...]``
    texts or fault specs), simulated and re-simulated with each fix; or a traffic scenario on the
    packet engine, from its pauses, marks and queues. ``report`` writes the HTML report with the findings
    (the traffic report for a traffic scenario); ``progress(case, cases, name)`` hears of each packet run;
    a workload's simulations are held to ``max_memory_bytes`` (``max_memory``; None: half the machine's memory)."""
    if scenario.workload is None:
        # a traffic scenario: queues, pauses and marks tell, so it runs packet by packet
        if inject:
            raise SpecError("inject: applies to training workloads; expected a scenario with a `workload:`")
        if report is not None:
            report_directory(report)  # refused before the packet run, not after it
        run = cast("PacketRun", run_traffic(scenario, "packet", progress=progress)[0])
        diagnosis = diagnose_packets(run, measure_gain=measure_gain)
        paths = None
        if report is not None:
            paths = write_traffic_reports([run], report, scenario.name, findings=diagnosis_dict(diagnosis)["findings"],
                                          conclusion=diagnosis_conclusion(diagnosis).sentences)
        return DiagnosisResult(diagnosis, paths)
    if report is not None:
        report_directory(report)  # refused before the diagnosis runs, not after it
    faults = [parse_inject(f) if isinstance(f, str) else f for f in inject]
    diagnosis = diagnose_scenario(scenario, faults, steps=steps, measure_gain=measure_gain,
                                  max_memory_bytes=max_memory_bytes)
    paths = []
    if report is not None and diagnosis.run is not None:  # a scenario's diagnosis keeps its run
        paths = write_reports(diagnosis.run.results, report, scenario.name, diagnoses=[diagnosis])
    return DiagnosisResult(diagnosis, paths)


def diagnose_telemetry(directory: str | Path, cluster: str, servers: int | None = None) -> DiagnosisResult:
    """Diagnose imported telemetry (Prometheus text, Parquet, NCCL logs, ethtool -S, perfquery) from
    ``cluster`` (a preset name or a cluster/scenario file): no re-simulation, so no gains."""
    topo = build_topology(load_cluster(cluster, servers))
    return DiagnosisResult(diagnose_observation(observe_telemetry(load_telemetry_dir(directory), topo),
                                                case=str(directory)))
