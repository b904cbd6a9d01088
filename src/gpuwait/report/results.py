"""What a simulation returns to its caller: the runs with the document ``--json`` prints and tables.

``gpuwait run --json`` and :func:`gpuwait.simulate` build their documents here, so the CLI and the
Python API cannot drift apart: ``result.to_dict()`` is the CLI's document. ``to_arrow()`` gives
the same numbers as ``pyarrow`` tables (for pandas, polars or DuckDB) and ``to_parquet(dir)``
writes them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from gpuwait.diagnosis.report import diagnosis_dict
from gpuwait.diagnosis.run import Diagnosis
from gpuwait.report.conclusion import diagnosis_conclusion, workload_conclusion
from gpuwait.report.flows import flow_rows, packet_run_entry, routing_label, run_entry
from gpuwait.report.parquet import link_table, task_table, write_link_parquet, write_task_parquet
from gpuwait.report.step import step_summary_dict
from gpuwait.report.traffic import traffic_conclusion
from gpuwait.steps.result import RunResult


@dataclass(frozen=True, eq=False)
class WorkloadResult:
    """Training or inference steps of a scenario, one :class:`~gpuwait.steps.result.RunResult` per case
    (the cluster's routing and transport, then each variant)."""

    scenario: str
    results: list[RunResult]
    report: list[Path] = field(default_factory=list)  # report files written for this run, if any

    def to_dict(self) -> dict:
        """Per case: the step time and its breakdown, MFU, the ideal-network step, collectives, hottest links."""
        return {"scenario": self.scenario, "conclusion": workload_conclusion(self.results).text,
                "cases": [step_summary_dict(r) for r in self.results], "report": [str(p) for p in self.report]}

    def to_arrow(self) -> dict:
        """``{"tasks": ..., "links": ...}``: every task of every rank and step, and every link's load."""
        return {"tasks": task_table(self.results), "links": link_table(self.results)}

    def to_parquet(self, directory: str | Path) -> list[Path]:
        """Write ``tasks.parquet`` and ``links.parquet`` (as the CLI's ``--report`` does) into ``directory``."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        return [write_task_parquet(self.results, out / "tasks.parquet"), write_link_parquet(self.results, out / "links.parquet")]


@dataclass(frozen=True, eq=False)
class TrafficResult:
    """A traffic scenario's flows on one engine, one run per case (flow runs or packet runs)."""

    scenario: str
    engine: str
    runs: Sequence  # EngineRun: FlowRun for "flow", PacketRun for "packet"
    report: list[Path] = field(default_factory=list)  # report files written for this run, if any

    def to_dict(self) -> dict:
        """Per run: summary, hottest links and flows; the flow engine adds the hottest links' timeline,
        the packet engine FCT percentiles and port counters."""
        head = {"scenario": self.scenario, "conclusion": traffic_conclusion(self.runs).text,
                "cluster": self.runs[0].topo.name}
        written = {"report": [str(p) for p in self.report]} if self.report else {}
        if self.engine == "packet":
            return head | {"engine": "packet", "runs": [packet_run_entry(r) for r in self.runs]} | written
        return head | {"runs": [run_entry(r) for r in self.runs]} | written

    def to_arrow(self) -> dict:
        """``{"flows": ...}``: one row per flow of every run, with a ``case`` column (the run's label)."""
        rows = [{"case": r.labels.get("name", routing_label(r))} | row for r in self.runs for row in flow_rows(r)]
        return {"flows": pa.Table.from_pylist(rows)}

    def to_parquet(self, directory: str | Path) -> list[Path]:
        """Write ``flows.parquet`` into ``directory``."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        path = out / "flows.parquet"
        pq.write_table(self.to_arrow()["flows"], path, compression="zstd")
        return [path]


@dataclass(frozen=True, eq=False)
class DiagnosisResult:
    """A :class:`~gpuwait.diagnosis.run.Diagnosis` (findings ranked by the measured gain of their fix),
    with the report files written for it; ``report`` is None where a diagnosis writes none
    (traffic on the packet engine, imported telemetry)."""

    diagnosis: Diagnosis
    report: list[Path] | None = None

    def to_dict(self) -> dict:
        doc = diagnosis_dict(self.diagnosis) | {"conclusion": diagnosis_conclusion(self.diagnosis).text}
        return doc if self.report is None else doc | {"report": [str(p) for p in self.report]}

    def to_arrow(self) -> dict:
        """``{"findings": ...}``: one row per finding (kind, component, severity, gain, fix...; evidence as JSON text)."""
        rows = [f | {"evidence": json.dumps(f["evidence"], default=str)} for f in self.to_dict()["findings"]]
        return {"findings": pa.Table.from_pylist(rows)}
