"""Does ``gpuwait calibrate`` transfer? Fit on one cluster size, predict another.

Issue 12 asks that calibrating on the published 2-node H100 table and then predicting the 4-node
table of the same poster's cluster (NVIDIA/nccl-tests issue #309; sources in the tables' headers)
improves the 4-node error over the model as shipped. This script runs exactly what a user would::

    gpuwait calibrate h100-ib-2node-16gpu-all_reduce.log --cluster dgx-h100 --servers 2 --out cal.yaml
    gpuwait perf all_reduce --cluster cal.yaml --servers 4 --compare h100-ib-4node-32gpu-all_reduce.log

and scores three models on the larger tables (the 4-node table, and the 8-node table of another
H100 InfiniBand cluster as a second, harder transfer):

* **as shipped**: ``dgx-h100`` with the parameters fitted across the public tables (``PUBLIC_TABLE_FIT``);
* **physical defaults**: nothing fitted (datasheets and NCCL's source alone);
* **calibrated**: the overlay ``gpuwait calibrate`` wrote from the 2-node table (from the shipped values,
  the parameters that forward selection freed by cross-validation within the 2-node table, fitted).

The shipped values are fitted across every published table, these three among them, so "as shipped" has
seen the tables it is scored on: that reading of issue 12's criterion is in-sample. A second experiment
removes that: the public fit is redone without any H100 InfiniBand table (``bench/reference_tables.py``'s
references and fit), as if the user's cluster were absent from the public tables; that prior is "the
uncalibrated model" a user of a cluster we never saw would get, and ``gpuwait calibrate`` starts from it.

Why every ``h100-ib-*`` table, not only the 2- and 4-node ones (the tables' headers): all five come from the
one thread (nccl-tests#309) about HGX H100 servers with 8 x 400 Gb/s InfiniBand, from two posters' clusters,
qoofyk's (2 and 4 nodes, NCCL 2.26.2) and gj-aion's (8 nodes default and tuned, and 2 of its nodes with Ring
forced). The 8-node target is gj-aion's, so leaving out only qoofyk's tables would keep its own cluster's
tuned run in the prior; and both clusters are the same hardware, software generation and fabric family, so
either one's tables would tell the prior what the other's NICs and NVLSTree do. The other H100 tables stay
in: single-node NVSwitch runs (no network) and AWS EFA (another transport), which a user of a new H100
InfiniBand cluster would also find published.

A second cluster asks the same question on data no fit has seen: one B200 InfiniBand cluster's sendrecv tables at 2,
4 and 8 nodes, one NCCL build (2.29.7, printed) and one job script (togethercomputer/together-nccl-tests; sources in the
tables' headers). No table of that cluster is in the public fit, so "as shipped" is already the uncalibrated model a
user of an unseen cluster gets; the calibration on its 2-node table then predicts its 4- and 8-node tables.

Nothing here is tuned: the calibration is the command's own selection and fit over every parameter. Run::

    python bench/calibrate_transfer.py      # prints the report and writes docs/validation-calibrate.md
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpuwait.collectives.fit import BOUNDS, MIN_GAIN, PUBLIC_FIT_NAMES, SHIPPED, fit
from gpuwait.collectives.physical import adjust
from gpuwait.report.calibrate import CalibrateReport, run_calibrate
from gpuwait.report.perf import compare_log
from gpuwait.runner.calibrate import calibration_file_section, write_overlay
from gpuwait.runner.calibrate import params_dict as _params

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "nccltests" / "data" / "reference"
FIT_LOG = DATA / "h100-ib-2node-16gpu-all_reduce.log"
FIT_SERVERS = 2
#: (log, servers, what it tests); the first is the transfer the issue asks for
TARGETS = (("h100-ib-4node-32gpu-all_reduce.log", 4, "the same poster's cluster on 4 nodes (issue #309)"),
           ("h100-ib-8node-64gpu-all_reduce.log", 8, "another H100 InfiniBand cluster on 8 nodes"))
MODELS = ("as shipped", "physical defaults", "calibrated")
#: the tables left out of the public fit in the second experiment: every H100 InfiniBand table
HELD_OUT_CLASS = "h100-ib"
HELD_OUT_MODELS = ("public fit without H100 IB", "calibrated from it")
#: the second cluster: its 2-node table calibrated, its larger tables predicted (as shipped and calibrated)
B200_FIT_LOG = DATA / "b200-ib-2node-16gpu-sendrecv-together.log"
B200_CLUSTER = DATA / "clusters" / "together-dgxc-b200-ib.yaml"
B200_ENV = {"NCCL_NVLS_ENABLE": "0"}  # the job script's (benchmarks/nccl_sendrecv_Nnode.sh)
B200_TARGETS = (("b200-ib-4node-32gpu-sendrecv-together.log", 4, "the same cluster on 4 nodes"),
                ("b200-ib-8node-64gpu-sendrecv-together.log", 8, "the same cluster on 8 nodes, its fabric contending"))
B200_MODELS = ("as shipped", "calibrated")
#: the tables whose NVLSTree rows ``nvls_tree_shape`` decomposes: every H100 table between servers
SHAPE_TABLES = ("h100-ib", "h100-efa")
#: from the size where every channel's loop holds a whole chunk per head (smaller calls cut the chunk)
SHAPE_MIN_BYTES = 8 * 2**20


@dataclass(frozen=True)
class NvlsTreeShape:
    """One table's NVLSTree rows of one chunk size, as time = offset + rounds x round time (least squares on
    relative residuals), measured and as shipped. A round is one loop of every channel: channels x heads (GPUs
    per server) x chunk bytes (NCCL's NVLS_TREE loop, ``loopSize = nChannels * nHeads * chunkSize``, src/enqueue.cc
    v2.26.2-1); the offset is the time at zero rounds (NCCL's latency and the pipeline's fill)."""

    table: str
    chunk_bytes: int
    rounds: tuple[float, float]  # fewest and most rounds among the rows
    measured_us: tuple[float, float]  # (offset, round)
    model_us: tuple[float, float]


@dataclass(frozen=True)
class FreedAlone:
    """One parameter fitted alone on the 2-node table (from the shipped values, every size), whatever the
    selection decided, and each target's summary with it: what freeing it would have carried to 4 and 8 nodes."""

    name: str
    value: float     # the physical value fitted
    at_bound: bool   # the fit stopped at one of the parameter's bounds (gpuwait.collectives.fit.BOUNDS)
    gain: float      # the drop of the 2-node held-out error the selection measured for it
    gain_se: float   # and that drop's standard error over the sizes
    scores: dict[str, dict]  # target log -> compare_log summary


@dataclass(frozen=True)
class SecondCluster:
    """The B200 cluster's 2-node calibration and its larger tables' scores per model (``comparison_summary`` dicts)."""

    calibration: CalibrateReport
    scores: dict[str, dict[str, dict]]  # target log -> B200_MODELS -> summary


@dataclass(frozen=True)
class Transfer:
    """The 2-node calibration and each larger table's scores per model (``comparison_summary`` dicts)."""

    calibration: CalibrateReport
    scores: dict[str, dict[str, dict]]   # target log -> model -> summary
    rows: dict[str, dict[str, list[dict]]]  # target log -> model -> compare_log rows
    held_out_calibration: CalibrateReport   # from the public fit without the H100 InfiniBand tables
    held_out_scores: dict[str, dict[str, dict]]  # target log -> HELD_OUT_MODELS -> summary
    shape: list[NvlsTreeShape]  # the H100 tables' NVLSTree rows: offset and round time, measured and modelled
    alone: list[FreedAlone]     # each parameter the selection weighed, fitted alone and carried to the targets
    second: SecondCluster       # the same question on the B200 cluster no fit has seen


def run() -> Transfer:
    tables = _reference_tables()
    prior = _prior_without(tables, HELD_OUT_CLASS)
    # each target as the NCCL release bench/reference_tables.py predicts it (the 8-node log prints none)
    release = {r.path.name: r.version() for r in tables.REFERENCES}
    with tempfile.TemporaryDirectory() as tmp:
        overlay = Path(tmp) / "calibrated.yaml"
        cal = run_calibrate([FIT_LOG], "dgx-h100", FIT_SERVERS, out=overlay)
        # the physical defaults as a cluster file: a calibration section that sets every parameter
        defaults = _cluster_file(Path(tmp) / "defaults.yaml", cal.calibration.defaults)
        clusters = {"as shipped": "dgx-h100", "physical defaults": str(defaults), "calibrated": str(overlay)}
        compared = {log: {m: compare_log("all_reduce", DATA / log, clusters[m], servers, nccl_version=release[log])
                          for m in MODELS} for log, servers, _ in TARGETS}
        held_overlay = Path(tmp) / "held-out-calibrated.yaml"
        held_cal = run_calibrate([FIT_LOG], "dgx-h100", FIT_SERVERS, out=held_overlay, prior=prior)
        held_prior = _cluster_file(Path(tmp) / "held-out-prior.yaml", adjust(cal.calibration.defaults, prior))
        held = dict(zip(HELD_OUT_MODELS, (str(held_prior), str(held_overlay)), strict=True))
        held_scores = {log: {m: compare_log("all_reduce", DATA / log, held[m], servers,
                                            nccl_version=release[log]).summary
                             for m in HELD_OUT_MODELS} for log, servers, _ in TARGETS}
    return Transfer(cal, {log: {m: c.summary for m, c in by.items()} for log, by in compared.items()},
                    {log: {m: c.rows for m, c in by.items()} for log, by in compared.items()}, held_cal, held_scores,
                    nvls_tree_shape(tables), freed_alone(tables, cal, release), second_cluster())


def second_cluster() -> SecondCluster:
    """``gpuwait calibrate`` on the B200 cluster's 2-node table, and its 4- and 8-node tables predicted as shipped
    and with the overlay (each as the NCCL release it prints)."""
    with tempfile.TemporaryDirectory() as tmp:
        overlay = Path(tmp) / "b200-calibrated.yaml"
        cal = run_calibrate([B200_FIT_LOG], str(B200_CLUSTER), 2, env=B200_ENV, out=overlay)
        clusters = dict(zip(B200_MODELS, (str(B200_CLUSTER), str(overlay)), strict=True))
        scores = {log: {m: compare_log("sendrecv", DATA / log, clusters[m], servers, env=B200_ENV).summary
                        for m in B200_MODELS} for log, servers, _ in B200_TARGETS}
    return SecondCluster(cal, scores)


def nvls_tree_shape(tables) -> list[NvlsTreeShape]:
    """Per H100 table between servers and NVLSTree chunk size with at least two rows >= 8 MiB: the offset and
    round time of the measured times and of the model as shipped (``tables``: bench/reference_tables.py)."""
    out = []
    for ref in tables.REFERENCES:
        if ref.not_describable or not ref.stem.startswith(SHAPE_TABLES):
            continue
        meas = tables.measured(ref)
        pred, _ = tables.predicted(ref, meas)
        sweep = tables.sweep_of(ref, meas)
        by_size = {r.size_bytes: i for i, r in enumerate(sweep.rows)}
        groups: dict[int, list[tuple[float, float, float]]] = {}
        for k, size in enumerate(meas.sizes):
            est = sweep.estimates[by_size[int(size)]]
            if est.algorithm == "nvls_tree" and size >= SHAPE_MIN_BYTES and np.isfinite(meas.time_us[k]):
                rounds = size / (est.n_channels * ref.gpus * est.chunk_bytes)
                groups.setdefault(est.chunk_bytes, []).append((rounds, meas.time_us[k], pred.time_us[k]))
        for chunk, points in groups.items():
            if len(points) < 2:
                continue
            rounds, measured, model = (np.array(v) for v in zip(*points, strict=True))
            # relative residuals: the largest rows' noise alone would swamp the offset
            design = np.vstack([np.ones_like(rounds), rounds]).T / measured[:, None]
            fitted = [tuple(float(x) for x in np.linalg.lstsq(design, y / measured, rcond=None)[0])
                      for y in (measured, model)]
            out.append(NvlsTreeShape(ref.stem, chunk, (float(rounds.min()), float(rounds.max())), *fitted))
    return out


def freed_alone(tables, cal: CalibrateReport, release: dict[str, str | None]) -> list[FreedAlone]:
    """Each parameter of the selection's first round fitted alone on the 2-node table, from the shipped values,
    and the targets predicted with it (``tables``: bench/reference_tables.py; ``release``: each log's NCCL)."""
    fit_ref = next(r for r in tables.REFERENCES if r.path.name == FIT_LOG.name)
    observations = tables.observations(fit_ref)
    c = cal.calibration
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in c.selection.candidates:
            if len(k.freed) != 1:
                continue
            name = k.freed[0]
            moved = fit(observations, (name,), SHIPPED).values
            cluster = str(_cluster_file(Path(tmp) / f"{name}.yaml", adjust(c.defaults, moved)))
            scores = {log: compare_log("all_reduce", DATA / log, cluster, servers, nccl_version=release[log]).summary
                      for log, servers, _ in TARGETS}
            out.append(FreedAlone(name, _params(adjust(c.defaults, moved))[name], moved[name] in BOUNDS[name][:2],
                                  k.gain, k.gain_se, scores))
    return out


def _cluster_file(path: Path, params) -> Path:
    """dgx-h100 with every physical parameter set to ``params`` (a calibration section)."""
    write_overlay(path, {"preset": "dgx-h100", "calibration": calibration_file_section(params)})
    return path


def _reference_tables():
    """bench/reference_tables.py as a module (its tables, their releases and its fit's observations)."""
    spec = importlib.util.spec_from_file_location("reference_tables", ROOT / "bench" / "reference_tables.py")
    tables = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, tables)  # dataclasses look their module up while they are built
    spec.loader.exec_module(tables)
    return tables


def _prior_without(tables, pattern: str) -> dict[str, float]:
    """The public fit (``tables``' references and fitted names) over every fitted table whose name does
    not contain ``pattern``."""
    observations = [o for r in tables.REFERENCES if not r.not_fitted and not r.not_describable
                    and pattern not in r.stem for o in tables.observations(r)]
    return fit(observations, PUBLIC_FIT_NAMES).values


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} %"


def report(t: Transfer) -> list[str]:
    c = t.calibration.calibration
    own = t.calibration.summaries("shipped")[str(FIT_LOG)], t.calibration.summaries("calibrated")[str(FIT_LOG)]
    lines = ["# Calibration transfer: fitted on 2 nodes, predicting 4 and 8", "",
             "Generated by `python bench/calibrate_transfer.py`; do not edit by hand. `gpuwait calibrate` calibrates "
             f"the physical parameters to `{FIT_LOG.name}` (dgx-h100, {FIT_SERVERS} servers): from the shipped "
             "values, forward selection frees a parameter only if it lowers the error on sizes its fit did not see "
             "(docs/calibrate.md); the overlay it writes then "
             "predicts larger tables it never saw. Tables and their public sources: `tests/nccltests/data/reference/`. "
             "Errors: busbw |pred - meas| / meas over sizes >= 1 MiB (median, worst); time floor: median "
             "|pred - meas| / meas of the time over sizes <= 64 KiB (the summary of `gpuwait perf --compare`).", "",
             "## The fit (2 nodes)", "",
             f"Cross-validated on the 2-node table itself ({c.validation}: each size predicted by a fit that did not "
             "see it):", "",
             "| model | busbw median | busbw worst | time floor |", "|---|---|---|---|"]
    for name, s in zip(("as shipped", "calibrated (cross-validated)"), own, strict=True):
        lines.append(f"| {name} | {_pct(s['busbw_median_error_pct'])} | {_pct(s['busbw_worst_error_pct'])} | "
                     f"{_pct(s['floor_median_error_pct'])} |")
    lines += ["", "Forward selection on the 2-node table (held-out error: mean |ln(predicted / measured)| of the "
              f"time, {c.validation}; a parameter is freed only if the drop it brings is at least {MIN_GAIN * 100:.1f} % "
              "and at least its standard error over the sizes):",
              "", "| freed parameters | held-out error | drop | standard error | chosen |", "|---|---|---|---|---|"]
    for k in c.selection.candidates:
        drop = f"{k.gain * 100:+.2f} % | {k.gain_se * 100:.2f} %" if k.freed else " | "
        lines.append(f"| {', '.join(k.freed) or '(none: as shipped)'} | {k.held_out_error * 100:.2f} % | {drop} | "
                     f"{'yes' if k.freed == c.freed else ''} |")
    lines += ["", "| parameter | physical default | as shipped | calibrated |", "|---|---|---|---|"]
    for name, fitted in _params(c.params).items():
        shown = _fmt(fitted, name) + ("" if name in c.freed else " (not freed)")
        lines.append(f"| {name} | {_fmt(_params(c.defaults)[name], name)} | {_fmt(_params(c.shipped)[name], name)} | "
                     f"{shown} |")
    lines += ["", "## The transfer", ""]
    for log, servers, what in TARGETS:
        lines += [f"### {log} ({servers} servers: {what})", "",
                  "| model | busbw median | busbw worst | time floor |", "|---|---|---|---|"]
        for model in MODELS:
            s = t.scores[log][model]
            lines.append(f"| {model} | {_pct(s['busbw_median_error_pct'])} | {_pct(s['busbw_worst_error_pct'])} | "
                         f"{_pct(s['floor_median_error_pct'])} |")
        lines.append("")
    lines += _held_out_lines(t)
    lines += _criterion_lines(t)
    lines += _second_cluster_lines(t.second)
    lines += _alone_lines(t)
    lines += _shape_lines(t)
    lines += _size_lines(t, TARGETS[0][0])
    return lines


def _held_out_lines(t: Transfer) -> list[str]:
    """The second experiment: the prior fitted without any H100 InfiniBand table."""
    c = t.held_out_calibration.calibration
    own = t.held_out_calibration.summaries("calibrated")[str(FIT_LOG)]
    lines = ["## Without the H100 InfiniBand tables in the public fit", "",
             "The public fit redone without any table whose name contains `h100-ib` (as if the cluster were absent "
             "from the published tables: all five come from the two posters' HGX H100 8 x 400 Gb/s InfiniBand "
             "clusters of nccl-tests#309, the 8-node target's among them; the single-node and EFA H100 tables stay "
             "in), and the same calibration on the 2-node table started from it. Freed: "
             f"{', '.join(c.freed) or 'nothing'}. On the 2-node table, "
             f"cross-validated: busbw median {_pct(own['busbw_median_error_pct'])}, time floor "
             f"{_pct(own['floor_median_error_pct'])}.", "",
             "| freed parameters | held-out error | drop | standard error | chosen |", "|---|---|---|---|---|"]
    for k in c.selection.candidates:
        drop = f"{k.gain * 100:+.2f} % | {k.gain_se * 100:.2f} %" if k.freed else " | "
        lines.append(f"| {', '.join(k.freed) or '(none: the prior)'} | {k.held_out_error * 100:.2f} % | {drop} | "
                     f"{'yes' if k.freed == c.freed else ''} |")
    lines += ["", "| parameter | as shipped | public fit without H100 IB | calibrated from it |", "|---|---|---|---|"]
    for name, value in _params(c.params).items():
        lines.append(f"| {name} | {_fmt(_params(t.calibration.calibration.shipped)[name], name)} | "
                     f"{_fmt(_params(adjust(c.defaults, c.prior))[name], name)} | "
                     f"{_fmt(value, name)} |")
    lines.append("")
    for log, servers, _ in TARGETS:
        lines += [f"### {log} ({servers} servers)", "", "| model | busbw median | busbw worst | time floor |",
                  "|---|---|---|---|"]
        for model in HELD_OUT_MODELS:
            s = t.held_out_scores[log][model]
            lines.append(f"| {model} | {_pct(s['busbw_median_error_pct'])} | {_pct(s['busbw_worst_error_pct'])} | "
                         f"{_pct(s['floor_median_error_pct'])} |")
        lines.append("")
    return lines


#: issue 12's criterion read two ways: (reading, uncalibrated model, calibrated model) as (scores key, model)
READINGS = (("in-sample, against the physical defaults", ("scores", "physical defaults"), ("scores", "calibrated")),
            ("in-sample, against the shipped model", ("scores", "as shipped"), ("scores", "calibrated")),
            ("cluster held out (no h100-ib table in the fit)", ("held_out_scores", HELD_OUT_MODELS[0]),
             ("held_out_scores", HELD_OUT_MODELS[1])))


def criterion(t: Transfer, log: str) -> list[tuple[str, dict, dict, bool]]:
    """Issue 12's done-when on one target, per reading: (reading, uncalibrated summary, calibrated summary,
    met): met when the calibrated busbw median (sizes >= 1 MiB) is below the uncalibrated one and the
    calibrated time floor (<= 64 KiB, where the table has one) within issue 12's 25 %."""
    out = []
    for reading, (src_u, model_u), (src_c, model_c) in READINGS:
        u, c = getattr(t, src_u)[log][model_u], getattr(t, src_c)[log][model_c]
        floor = c["floor_median_error_pct"]
        out.append((reading, u, c, c["busbw_median_error_pct"] < u["busbw_median_error_pct"]
                    and (floor is None or floor < 25)))
    return out


def _criterion_lines(t: Transfer) -> list[str]:
    """Issue 12's done-when in both readings, per target: what is compared and whether it is met."""
    lines = ["## The criterion in both readings", "",
             "Issue 12: calibrated on the 2-node table, `perf` on the 4-node cluster beats the uncalibrated model. "
             "In-sample, the uncalibrated model is the physical defaults (nothing fitted) or the model as shipped, "
             "whose public fit saw these tables; with the cluster held out, it is the public fit without any "
             "`h100-ib` table, the model a user of an unseen H100 InfiniBand cluster gets. busbw median (sizes >= "
             "1 MiB), uncalibrated -> calibrated; met: lower, with the time floor within 25 %. The last row asks the same "
             "of a second cluster no fit has seen (B200 sendrecv, 2 -> 4 nodes: \"A second cluster\" in "
             "docs/validation-calibrate.md).", "",
             "| target | reading | uncalibrated | calibrated | met |", "|---|---|---|---|---|"]
    for log, servers, _ in TARGETS:
        for reading, u, c, met in criterion(t, log):
            lines.append(f"| {servers} nodes | {reading} | {_pct(u['busbw_median_error_pct'])} | "
                         f"{_pct(c['busbw_median_error_pct'])} | {'yes' if met else 'no'} |")
    for log, servers, _ in B200_TARGETS[:1]:
        u, c = (t.second.scores[log][m] for m in B200_MODELS)
        met = c["busbw_median_error_pct"] < u["busbw_median_error_pct"] and c["floor_median_error_pct"] < 25
        lines.append(f"| {servers} nodes, B200 sendrecv (a second cluster) | cluster held out (no table of it in any fit) | "
                     f"{_pct(u['busbw_median_error_pct'])} | {_pct(c['busbw_median_error_pct'])} | "
                     f"{'yes' if met else 'no'} |")
    if not t.calibration.calibration.freed:
        lines += ["", "The H100 calibration freed nothing, so its calibrated model is the shipped one: a 'yes' against the "
                  "physical defaults credits the public fit, which saw the target table, not the calibration."]
    return lines + [""]


def _second_cluster_lines(second: SecondCluster) -> list[str]:
    """The B200 cluster: its 2-node calibration (freed parameters, cross-validated error) and the transfer."""
    c = second.calibration.calibration
    own = (second.calibration.summaries(v)[str(B200_FIT_LOG)] for v in ("shipped", "calibrated"))
    lines = ["## A second cluster: B200 over InfiniBand, sendrecv on 2, 4 and 8 nodes", "",
             f"`gpuwait calibrate {B200_FIT_LOG.name} --cluster {B200_CLUSTER.name} --env NCCL_NVLS_ENABLE=0` (2 servers), "
             "then `gpuwait perf sendrecv --compare` on the same cluster's larger tables, as shipped and with the overlay. "
             "One cluster, one NCCL build (2.29.7, printed), one job script; each node count ran on its own node set. "
             f"Freed: {', '.join(c.freed) or 'nothing'} ({c.validation}).", "",
             "| table | model | busbw median | busbw worst | time floor |", "|---|---|---|---|---|"]
    for name, s in zip(("as shipped", "calibrated (cross-validated)"), own, strict=True):
        lines.append(f"| 2 nodes (the fit) | {name} | {_pct(s['busbw_median_error_pct'])} | "
                     f"{_pct(s['busbw_worst_error_pct'])} | {_pct(s['floor_median_error_pct'])} |")
    for log, servers, what in B200_TARGETS:
        for model in B200_MODELS:
            s = second.scores[log][model]
            lines.append(f"| {servers} nodes ({what}) | {model} | {_pct(s['busbw_median_error_pct'])} | "
                         f"{_pct(s['busbw_worst_error_pct'])} | {_pct(s['floor_median_error_pct'])} |")
    lines += ["", "On 8 nodes the cluster's own report measures 26 GB/s on every node set it tried (43-44 on 2 and 4 nodes, "
              "14.5 from 16): contention in a fabric that is not published, which the description (a non-blocking "
              "leaf-spine) does not have, so no parameter fitted on 2 nodes can carry it; the floor carries.", "",
              "| parameter | as shipped | calibrated |", "|---|---|---|"]
    for name, fitted in _params(c.params).items():
        shown = _fmt(fitted, name) + ("" if name in c.freed else " (not freed)")
        lines.append(f"| {name} | {_fmt(_params(c.shipped)[name], name)} | {shown} |")
    return lines + [""]


def _alone_lines(t: Transfer) -> list[str]:
    """What each parameter would carry to the targets had the selection freed it alone."""
    shipped = {log: t.scores[log]["as shipped"]["busbw_median_error_pct"] for log, _, _ in TARGETS}
    lines = ["## Each parameter freed alone", "",
             "What the selection gave up: each parameter of its first round fitted alone on every size of the 2-node "
             "table (from the shipped values), and the targets' busbw median (sizes >= 1 MiB) with it, beside the "
             "2-node evidence for it (the drop of the held-out error and its standard error, as above). Freeing a "
             "parameter whose drop is inside its standard error would be choosing it by the target's score.", "",
             "| parameter | fitted | 2-node drop | standard error | " +
             " | ".join(f"{servers} nodes (as shipped {_pct(shipped[log])})" for log, servers, _ in TARGETS) + " |",
             "|---|---|---|---|" + "---|" * len(TARGETS)]
    for a in t.alone:
        bound = " (its bound)" if a.at_bound else ""
        lines.append(f"| {a.name} | {_fmt(a.value, a.name)}{bound} | {a.gain * 100:+.2f} % | {a.gain_se * 100:.2f} % | " +
                     " | ".join(_pct(a.scores[log]["busbw_median_error_pct"]) for log, _, _ in TARGETS) + " |")
    return lines + [""]


def _shape_lines(t: Transfer) -> list[str]:
    """The H100 tables' NVLSTree rows as offset + rounds x round time, measured and as shipped."""
    lines = ["## NVLSTree's offset and round time", "",
             "Why a parameter fitted on 2 nodes does not carry to 4: each H100 table's NVLSTree rows >= 8 MiB of one "
             "chunk size, fitted as time = offset + rounds x round time (least squares on relative residuals; a round is one loop of every "
             "channel: channels x heads x chunk, NCCL's NVLS_TREE loop), measured and as shipped (us).", "",
             "| table | chunk | rounds | measured offset | model offset | measured round | model round |",
             "|---|---|---|---|---|---|---|"]
    for k in t.shape:
        lines.append(f"| {k.table} | {k.chunk_bytes // 1024} KiB | {k.rounds[0]:.0f}-{k.rounds[1]:.0f} | "
                     f"{k.measured_us[0]:.1f} | {k.model_us[0]:.1f} | {k.measured_us[1]:.1f} | {k.model_us[1]:.1f} |")
    return lines + [""]


def _size_lines(t: Transfer, log: str) -> list[str]:
    """busbw per size >= 1 MiB of one target, measured and per model: where the errors come from."""
    lines = [f"### {log}: busbw per size (GB/s)", "", "| size | measured | " + " | ".join(MODELS) + " |",
             "|---|---|" + "---|" * len(MODELS)]
    by_model = t.rows[log]
    for i, row in enumerate(by_model[MODELS[0]]):
        if row["size_bytes"] >= 2**20:
            preds = " | ".join(f"{by_model[m][i]['predicted_busbw_GBps']:.1f}" for m in MODELS)
            lines.append(f"| {row['size_bytes'] // 2**20} MiB | {row['measured_busbw_GBps']:.1f} | {preds} |")
    return lines + [""]


def _fmt(value: float, name: str) -> str:
    return f"{value * 1e6:.3f} us" if name.endswith("_s") else f"{value:.3f}"


def main() -> None:
    text = "\n".join(report(run())) + "\n"
    (ROOT / "docs" / "validation-calibrate.md").write_text(text)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
