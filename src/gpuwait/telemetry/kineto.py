"""Read a PyTorch profiler trace (Kineto's Chrome-trace JSON): step times and, per step, how long
the GPU computed and how long NCCL kernels ran with no compute beside them.

The trace (``torch.profiler`` ``export_chrome_trace`` / ``tensorboard_trace_handler``, ``*.pt.trace.json``)
is ``{"traceEvents": [...], "distributedInfo": {"rank": R, ...}}``; complete events (``"ph": "X"``) have
``ts`` and ``dur`` in microseconds. Read here:

* ``ProfilerStep#N`` (``user_annotation``, or ``cpu_op`` in older traces): one training step each (its
  ``gpu_user_annotation`` copy on the GPU timeline only when the trace has no host-side one);
* GPU kernels (``"cat": "kernel"``): a kernel whose name contains ``nccl`` (``ncclKernel_AllReduce_...``,
  ``ncclDevKernel_...``) is communication, any other kernel compute. A kernel belongs to the step
  during which the CPU launched it (``cudaLaunchKernel`` with the same ``correlation``), else the
  step its start falls in.

Per step: ``compute_s`` is the union of compute kernel intervals, ``comm_s`` that of NCCL kernels,
``exposed_comm_s`` the NCCL time with no compute kernel running (the communication the step waits
for). Memory copies are neither.

Examples
--------
>>> t = parse_kineto_trace('{"traceEvents": ['
...   '{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "ts": 0, "dur": 1000},'
...   '{"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm", "ts": 100, "dur": 500},'
...   '{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "ts": 400, "dur": 400}],'
...   '"distributedInfo": {"rank": 5}}')
>>> t.rank, t.step_time_s, t.compute_s, t.exposed_comm_s
(5, 0.001, 0.0005, 0.0002)
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import numpy as np

from gpuwait.spec.reader import loads_json
from gpuwait.telemetry.errors import TelemetryFormatError

_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_US = 1e-6


@dataclass(frozen=True)
class KinetoStep:
    number: int
    start_us: float
    dur_us: float
    compute_us: float
    comm_us: float
    exposed_comm_us: float


@dataclass(frozen=True)
class KinetoTrace:
    """Steps of one rank's trace; the ``*_s`` properties are means over its steps."""

    rank: int | None
    steps: tuple[KinetoStep, ...]

    def _mean(self, attr: str) -> float:
        return float(np.mean([getattr(s, attr) for s in self.steps])) * _US if self.steps else 0.0

    @property
    def step_time_s(self) -> float:
        return round(self._mean("dur_us"), 12)

    @property
    def compute_s(self) -> float:
        return round(self._mean("compute_us"), 12)

    @property
    def comm_s(self) -> float:
        return round(self._mean("comm_us"), 12)

    @property
    def exposed_comm_s(self) -> float:
        return round(self._mean("exposed_comm_us"), 12)


def union_length(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by ``(start, end)`` intervals (overlaps counted once)."""
    total, end = 0.0, -np.inf
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def _events(text: str, source: str) -> tuple[list[dict], int | None]:
    try:
        doc = loads_json(text)
    except json.JSONDecodeError as err:
        raise TelemetryFormatError(f"{source}: not JSON ({err.msg} at line {err.lineno}); expected a PyTorch profiler "
                                   'trace {"traceEvents": [...]}') from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc if isinstance(doc, list) else None
    if not isinstance(events, list):
        raise TelemetryFormatError(f"{source}: no traceEvents list; expected a PyTorch profiler trace "
                                   '{"traceEvents": [...]} (torch.profiler export_chrome_trace)')
    info = doc.get("distributedInfo") if isinstance(doc, dict) else None
    rank = info.get("rank") if isinstance(info, dict) else None
    return [e for e in events if isinstance(e, dict) and e.get("ph") == "X"], int(rank) if rank is not None else None


def parse_kineto_trace(text: str, *, source: str = "Kineto trace") -> KinetoTrace:
    """Steps and their compute / NCCL time (see the module doc).

    Raises
    ------
    TelemetryFormatError
        When the text is not a trace, or it has no ``ProfilerStep#N`` event.
    """
    events, rank = _events(text, source)
    marks = [(e, m) for e in events if (m := _STEP.match(str(e.get("name", "")))) is not None]
    # PyTorch copies each step onto the GPU timeline too (gpu_user_annotation), spanning only the kernels it
    # attributes to the step, sometimes just the first (pytorch/kineto#1022): the host's step is the step
    host = [(e, m) for e, m in marks if e.get("cat") != "gpu_user_annotation"]
    steps = sorted((float(e["ts"]), float(e.get("dur", 0)), int(m[1])) for e, m in (host or marks))
    if not steps:
        raise TelemetryFormatError(f"{source}: no ProfilerStep#N events; expected a trace of training steps",
                                   hint="profile with torch.profiler.schedule(...) and call prof.step() every step")
    launches = {e["args"]["correlation"]: float(e["ts"]) for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and isinstance(e.get("args"), dict)
                and "correlation" in e["args"]}
    starts = np.array([s[0] for s in steps])
    per_step: list[dict[str, list[tuple[float, float]]]] = [{"compute": [], "comm": []} for _ in steps]
    for e in events:
        if str(e.get("cat", "")).lower() != "kernel":
            continue
        ts, dur = float(e["ts"]), float(e.get("dur", 0))
        when = launches.get((e.get("args") or {}).get("correlation"), ts)
        i = int(np.searchsorted(starts, when, side="right")) - 1
        if i < 0 or when > steps[i][0] + steps[i][1]:
            continue  # launched outside every profiled step
        kind = "comm" if "nccl" in str(e.get("name", "")).lower() else "compute"
        per_step[i][kind].append((ts, ts + dur))
    out = []
    for (start, dur, number), kernels in zip(steps, per_step):
        compute, comm = union_length(kernels["compute"]), union_length(kernels["comm"])
        both = union_length(kernels["compute"] + kernels["comm"])
        out.append(KinetoStep(number, start, dur, compute, comm, both - compute))
    return KinetoTrace(rank, tuple(out))
