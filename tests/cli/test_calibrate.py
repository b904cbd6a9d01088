"""`gpuwait calibrate` on the command line: output, the overlay it writes, and its one-line errors.

Reference: the published 2-node H100 InfiniBand all_reduce table of NVIDIA/nccl-tests issue #309
(https://github.com/NVIDIA/nccl-tests/issues/309), kept in tests/nccltests/data/reference/.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from tests.cli.test_cli import run_cli

LOG = Path(__file__).resolve().parents[1] / "nccltests" / "data" / "reference" / "h100-ib-2node-16gpu-all_reduce.log"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_calibrate_writes_an_overlay_perf_accepts(capsys, tmp_path):
    out = tmp_path / "cal.yaml"
    code, text, _ = run_cli(capsys, "calibrate", str(LOG), "--cluster", "dgx-h100", "--servers", "2", "--out", str(out),
                            "--params", "launch_latency_s,nic_efficiency,nvlink_efficiency")
    assert code == 0
    assert "cross-validated: alternate sizes" in text and "nic_efficiency" in text and f"wrote {out}" in text
    assert "forward selection" in text and "(none: as shipped)" in text
    assert "calibration:" in out.read_text()
    code, text, _ = run_cli(capsys, "perf", "all_reduce", "--cluster", str(out), "-b", "1M", "-e", "1G", "-f", "32",
                            "--json")
    assert code == 0 and len(json.loads(text)["rows"]) == 3


def test_calibrate_json(capsys):
    # the release the log prints, asked for by name: the same predictions, its source named as the option
    code, text, _ = run_cli(capsys, "calibrate", str(LOG), "--cluster", "dgx-h100", "--servers", "2", "--json",
                            "--params", "nic_efficiency", "--nccl-version", "2.26.2")
    doc = json.loads(text)
    assert doc["logs"][0]["nccl_version_source"] == "--nccl-version"
    assert code == 0 and doc["validation"] == "alternate sizes" and doc["considered"] == ["nic_efficiency"]
    candidates = doc["selection"]["candidates"]
    assert candidates[0]["freed"] == [] and candidates[1]["freed"] == ["nic_efficiency"]
    assert doc["fitted"] == doc["selection"]["freed"] and len(doc["selection"]["per_fold_freed"]) == 2
    before, after = doc["errors"]["shipped"][str(LOG)], doc["errors"]["calibrated"][str(LOG)]
    assert before["busbw_sizes"] == after["busbw_sizes"] == 15
    assert doc["out"] is None and doc["overlay"]["calibration"]["fitted_on"] == [str(LOG)]


def test_calibrate_json_states_the_starting_values_in_their_units(capsys):
    """Was 'prior': {'net_message_overhead_s': 1.284, ...}: the fit's starting moves, the message overhead
    a factor on the transport's 0.18 us, printed under a name that says seconds. Started from the shipped
    model, the starting values are the shipped ones."""
    code, text, _ = run_cli(capsys, "calibrate", str(LOG), "--cluster", "dgx-h100", "--servers", "2", "--json",
                            "--params", "nic_efficiency")
    doc = json.loads(text)
    assert code == 0 and doc["prior"] == doc["params"]["shipped"]
    assert doc["prior"]["net_message_overhead_s"] == pytest.approx(0.18e-6 * 1.284)


def _no_rows(tmp_path: Path) -> Path:
    path = tmp_path / "empty.log"
    path.write_text("# nThread 1 nGpus 1 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 20\n#\n")
    return path


@pytest.mark.parametrize(("args", "message"), [
    (lambda tmp: [str(tmp / "missing.log")], "missing.log: cannot read the log"),
    (lambda tmp: [str(_no_rows(tmp))], "empty.log: "),
    (lambda tmp: [str(LOG), "--params", "nic,launch_latency_s"], "--params: unknown parameter 'nic'"),
    (lambda tmp: [str(LOG), "--out", str(tmp)], "is a directory"),
    (lambda tmp: [str(LOG), "--out", str(tmp / "no" / "such" / "dir.yaml")], "is not a directory"),
    (lambda tmp: [str(LOG), "-g", "4"], "the log has 16 ranks but the cluster gives 8"),
    # the same log twice was scored leave-one-log-out against a fit on itself, and printed as cross-validated
    (lambda tmp: [str(LOG), str(LOG)], f"LOG: {LOG} is given twice (as {LOG}); expected each log once"),
])
def test_bad_input_is_one_error(capsys, tmp_path, args, message):
    code, _, err = run_cli(capsys, "calibrate", *args(tmp_path), "--cluster", "dgx-h100", "--servers", "2")
    lines = err.strip().splitlines()
    assert code == 2 and message in lines[0] and lines[0].startswith("error: ") and len(lines) <= 2


def test_a_calibrated_scenario_runs_and_a_cluster_file_is_not_a_preset(capsys, tmp_path):
    """A scenario calibrated stays a scenario that `run` and `diagnose` take as they took the original, and the
    closing line says so; a calibrated cluster file named as a scenario's `cluster:` (which holds a preset
    name or fields) is one error whose hint says to put its fields there."""
    scenario = tmp_path / "scenario.yaml"
    code, text, _ = run_cli(capsys, "calibrate", str(LOG), "--cluster", str(EXAMPLES / "dp-only.yaml"), "--servers", "2",
                            "--params", "nic_efficiency", "--out", str(scenario))
    assert code == 0 and f"`gpuwait run {scenario}`" in " ".join(text.split())  # rich wraps long lines
    code, _, _ = run_cli(capsys, "run", str(scenario), "--steps", "1", "--json")
    assert code == 0
    cluster = tmp_path / "cal.yaml"
    code, text, _ = run_cli(capsys, "calibrate", str(LOG), "--cluster", "dgx-h100", "--servers", "2",
                            "--params", "nic_efficiency", "--out", str(cluster))
    assert code == 0 and "put its fields under a scenario's `cluster:`" in " ".join(text.split())
    naming = tmp_path / "naming.yaml"
    naming.write_text(f"cluster: {cluster}\nworkload:\n  model: {{preset: llama-8b}}\n  parallel: {{tp: 8}}\n")
    code, _, err = run_cli(capsys, "run", str(naming))
    lines = err.splitlines()
    assert code == 2 and f"cluster.preset: unknown preset '{cluster}'" in lines[0]
    assert lines[1].startswith(f"hint: a preset is a built-in name, not a file: put {cluster}'s fields in its place")


def test_the_logs_rank_lines_place_the_run(capsys):
    """The L40S socket log's '# Rank' lines name two hosts with one GPU each: unasked, calibrate predicts that run
    (the cluster file holds 2 servers of 2 GPUs: 4 ranks, which was an error); a layout given with the same rank
    count but another placement (one server of two GPUs) is a warning, as in perf --compare."""
    reference = LOG.parent
    args = ["calibrate", str(reference / "l40s-tcp-2node-2gpu-all_reduce-ring.log"), "--cluster",
            str(reference / "clusters" / "r760xa-l40s-2x400g.yaml"), "--env", "NCCL_IB_DISABLE=1", "--env",
            "NCCL_ALGO=Ring", "--env", "NCCL_NET_GDR_READ=1", "--params", "nic_efficiency", "--json"]  # its mpirun -x
    code, text, _ = run_cli(capsys, *args)
    doc = json.loads(text)
    assert code == 0 and doc["n_ranks"] == 2 and doc["overlay"]["servers"] == 2 and doc["warnings"] == []
    code, text, _ = run_cli(capsys, *args, "--servers", "1")
    assert code == 0 and json.loads(text)["warnings"] == [
        f"{reference / 'l40s-tcp-2node-2gpu-all_reduce-ring.log'}: the log ran 1 rank(s) on each of 2 host(s) "
        "(its '# Rank' lines); the cluster gives 2 GPU(s) on each of 1 server(s)"]


def test_rank_lines_that_name_one_host_for_more_ranks_than_a_server_holds_do_not_place_the_run(capsys, tmp_path):
    """16 '# Rank' lines of two 8-GPU A100 servers that print one host name (containers given one hostname) are not
    one 16-GPU server (not a -g never given): unasked, calibrate places the 16 ranks on the servers they fill, 2 of 8,
    as perf --compare does, and so does --servers 2; both warn how the lines differ."""
    text = (LOG.parents[1] / "oci-a100-2node-16gpu-all_reduce.log").read_text()
    path = tmp_path / "one-name.log"
    path.write_text(re.sub(r"( on +)\S+( +device)", r"\1worker\2", text))
    args = ["calibrate", str(path), "--cluster", "dgx-a100", "--params", "nic_efficiency", "--json"]
    for extra in ([], ["--servers", "2"]):
        code, text, err = run_cli(capsys, *args, *extra)
        assert code == 0, err
        assert json.loads(text)["warnings"] == [
            f"{path}: the log ran 16 rank(s) on each of 1 host(s) (its '# Rank' lines); the cluster gives 8 GPU(s) on "
            "each of 2 server(s)"]


def test_calibrate_places_a_run_as_perf_compare_does_when_only_servers_is_given(capsys):
    """A 2-host x 4-rank log (CSCS's GH200 table with the CXI hook disabled, its '# Rank' lines) with --servers 2 and
    no -g, on servers of 8 GPUs: both commands read it as 2 x 4 (before, calibrate took 2 x 8 and refused 8 ranks)."""
    log = "tests/nccltests/data/reference/gh200-nooptnet-2node-8gpu-all_reduce.log"
    for args in (["perf", "all_reduce", "--compare", log], ["calibrate", log, "--params", "launch_latency_s"]):
        code, _, err = run_cli(capsys, *args, "--cluster", "dgx-h100", "--servers", "2")
        assert code == 0, (args, err)


def test_calibrate_reads_the_cluster_file_once(capsys, tmp_path, monkeypatch):
    """The file is fitted (its cluster) and overlaid (its own content) from one read, and the overlay is as
    before: the scenario's fields as written, its cluster's servers and calibration added."""
    import gpuwait.spec.reader as reader

    read = []
    checked = reader.read_bytes_checked

    def counting(path, *args, **kwargs):
        read.append(str(path))
        return checked(path, *args, **kwargs)

    monkeypatch.setattr(reader, "read_bytes_checked", counting)
    out = tmp_path / "scenario.yaml"
    source = str(EXAMPLES / "dp-only.yaml")
    code, _, err = run_cli(capsys, "calibrate", str(LOG), "--cluster", source, "--servers", "2",
                           "--params", "nic_efficiency", "--out", str(out))
    assert code == 0, err
    assert read.count(source) == 1
    import yaml

    written, original = yaml.safe_load(out.read_text()), yaml.safe_load(Path(source).read_text())
    assert written["workload"] == original["workload"] and written["cluster"]["servers"] == 2
    assert "calibration" in written["cluster"]


def test_logs_at_two_node_counts_are_each_predicted_on_their_own_run(capsys):
    """The 2- and 4-node H100 tables of NVIDIA/nccl-tests#309 (16 and 32 ranks, '# Rank' lines elided): calibrate's
    own advice for a launch latency it cannot tell from a per-step one is 'logs at another node count would separate
    them', yet two node counts were one error ('the log has 32 ranks but the cluster gives 16'). Without --servers each
    log is now predicted on the cluster sized to its run, as perf --compare predicts it; --servers still names one
    size for every log."""
    four = LOG.parent / "h100-ib-4node-32gpu-all_reduce.log"
    code, text, err = run_cli(capsys, "calibrate", str(LOG), str(four), "--cluster", "dgx-h100", "--params",
                              "launch_latency_s,net_step_latency_s", "--json")
    assert code == 0, err
    doc = json.loads(text)
    assert doc["rank_counts"] == [16, 32] and doc["validation"] == "leave-one-log-out" and "servers" not in doc["overlay"]
    assert doc["not_separable"] == []  # two node counts tell the two latencies apart
    for log, logged in zip((LOG, four), doc["logs"], strict=True):
        code, text, _ = run_cli(capsys, "perf", "all_reduce", "--compare", str(log), "--cluster", "dgx-h100", "--json")
        compared = json.loads(text)["rows"]
        assert code == 0 and [r["predicted_time_us"] for r in logged["shipped"]] == pytest.approx(
            [r["predicted_time_us"] for r in compared], rel=1e-9)
    code, _, err = run_cli(capsys, "calibrate", str(LOG), str(four), "--cluster", "dgx-h100", "--servers", "2")
    assert code == 2 and err.splitlines()[0] == f"error: {four}: the log has 32 ranks but the cluster gives 16"


def test_a_release_newer_than_the_last_checked_is_a_warning(capsys):
    """As perf says it (a note, a --compare warning): --nccl-version 3.0 is predicted as 2.30.7's choices."""
    code, text, _ = run_cli(capsys, "calibrate", str(LOG), "--cluster", "dgx-h100", "--servers", "2", "--params",
                            "nic_efficiency", "--nccl-version", "3.0", "--json")
    assert code == 0 and (
        "NCCL 3.0 is newer than the last release gpuwait checked (2.30.7): predicted as 2.30.3 to 2.30.7's algorithm "
        "and protocol choices, which a later release may have changed") in json.loads(text)["warnings"]


def test_a_logs_nccl_variables_the_calibration_did_not_use_are_a_warning(capsys):
    """Calibrated without --env NCCL_ALGO=Ring, the forced-Ring table (mpirun -x NCCL_ALGO=Ring -x NCCL_MIN_CTAS=24
    -x NCCL_IB_QPS_PER_CONNECTION=2) was fitted as NVLSTree and drove the NVLink efficiency to its bound, 0.5, with
    nothing said; the variables its command line set are now named."""
    log = LOG.parent / "h100-ib-2node-16gpu-all_reduce-ring-forced.log"
    code, text, _ = run_cli(capsys, "calibrate", str(log), "--cluster", "dgx-h100", "--servers", "2", "--params",
                            "nic_efficiency", "--json")
    assert code == 0 and json.loads(text)["warnings"] == [
        f"{log}: the log's run set NCCL_ALGO=Ring, NCCL_MIN_CTAS=24, NCCL_IB_QPS_PER_CONNECTION=2, which this calibration "
        "did not: pass them with --env (it applies to every log)"]
    code, text, _ = run_cli(capsys, "calibrate", str(log), "--cluster", "dgx-h100", "--servers", "2", "--params",
                            "nic_efficiency", "--env", "NCCL_ALGO=Ring", "--env", "NCCL_MIN_CTAS=24", "--env",
                            "NCCL_IB_QPS_PER_CONNECTION=2", "--json")
    assert code == 0 and json.loads(text)["warnings"] == []


def test_one_log_of_another_rank_count_is_predicted_on_its_own_run(capsys):
    """perf --compare predicts the 2-node H100 table (16 ranks, '# Rank' lines elided) on dgx-h100 sized to 2
    servers; calibrate on the same log and preset was one error ('the log has 16 ranks but the cluster gives 8')
    unless --servers 2 was given. Now it sizes the cluster to the log as perf --compare does, and the shipped
    prediction it starts from is perf --compare's, size for size."""
    code, text, err = run_cli(capsys, "calibrate", str(LOG), "--cluster", "dgx-h100", "--params", "nic_efficiency",
                              "--json")
    assert code == 0, err
    doc = json.loads(text)
    assert doc["rank_counts"] == [16] and "servers" not in doc["overlay"]
    code, text, _ = run_cli(capsys, "perf", "all_reduce", "--compare", str(LOG), "--cluster", "dgx-h100", "--json")
    assert code == 0 and [r["predicted_time_us"] for r in doc["logs"][0]["shipped"]] == pytest.approx(
        [r["predicted_time_us"] for r in json.loads(text)["rows"]], rel=1e-9)


def test_a_log_of_other_gpus_than_the_clusters_is_a_warning(capsys):
    """The OCI log ran on A100s ('# Rank ... NVIDIA A100-SXM4-40GB'); calibrated against dgx-h100 by a slip of
    --cluster, it fitted the H100 model's parameters to A100 times with nothing said, where perf --compare on the
    same log and cluster warns. calibrate now warns as perf --compare does."""
    log = LOG.parents[1] / "oci-a100-2node-16gpu-all_reduce.log"
    code, text, _ = run_cli(capsys, "calibrate", str(log), "--cluster", "dgx-h100", "--params", "nic_efficiency",
                            "--json")
    assert code == 0
    assert f"{log}: the log ran on A100 GPUs; the cluster has H100 (H100-SXM5-80GB)" in json.loads(text)["warnings"]
    code, text, _ = run_cli(capsys, "calibrate", str(log), "--cluster", "oci-a100-roce", "--params", "nic_efficiency",
                            "--json")
    assert code == 0 and json.loads(text)["warnings"] == []


def test_perf_on_a_calibrated_cluster_says_so(capsys, tmp_path):
    """perf on the overlay printed the same settings as on the preset: nothing showed the calibration was used.
    Its settings (--json, --report-algo) now name it; an uncalibrated cluster's are unchanged."""
    out = tmp_path / "cal.yaml"
    code, _, _ = run_cli(capsys, "calibrate", str(LOG), "--cluster", "dgx-h100", "--servers", "2", "--out", str(out),
                         "--params", "nic_efficiency")
    assert code == 0
    code, text, _ = run_cli(capsys, "perf", "all_reduce", "--cluster", str(out), "-b", "1M", "-e", "1M", "--json")
    assert code == 0 and json.loads(text)["settings"]["calibration"] == f"fitted to {LOG} (from: cluster file: calibration)"
    code, text, _ = run_cli(capsys, "perf", "all_reduce", "--cluster", str(out), "-b", "1M", "-e", "1M", "--report-algo")
    assert code == 0 and f"# calibration: fitted to {LOG} (from: cluster file: calibration)" in text
    code, text, _ = run_cli(capsys, "perf", "all_reduce", "--cluster", "dgx-h100", "-b", "1M", "-e", "1M", "--json")
    assert code == 0 and "calibration" not in json.loads(text)["settings"]


def test_a_log_without_rank_lines_is_placed_by_servers_and_g(capsys, tmp_path):
    """A broadcast log without '# Rank' lines does not say how many ranks ran (broadcast's size and busbw do not
    tell): with --servers (and -g) both commands predict it on the run those flags place, and say the count was
    not checked; without --servers it stays one error naming what to pass. The log is gpuwait's own 2 x 8
    prediction, so the comparison must come out exact."""
    code, table, _ = run_cli(capsys, "perf", "broadcast", "--cluster", "dgx-h100", "--servers", "2", "-b", "8",
                             "-e", "64M", "-f", "4")
    assert code == 0
    log = tmp_path / "broadcast.log"
    log.write_text("".join(line for line in table.splitlines(keepends=True) if not line.startswith("#  Rank")))
    for args in (["perf", "broadcast", "--compare", str(log)], ["calibrate", str(log), "--params", "nic_efficiency"]):
        code, _, err = run_cli(capsys, *args, "--cluster", "dgx-h100", "-g", "8")
        assert code == 2 and "does not say how many ranks ran" in err and "pass --servers (and -g)" in err, (args, err)
        for flags in (["--servers", "2"], ["--servers", "2", "-g", "8"]):
            code, out, err = run_cli(capsys, *args, "--cluster", "dgx-h100", *flags, "--json")
            assert code == 0, (args, flags, err)
            doc = json.loads(out)
            assert any("predicted as --servers 2 x 8 GPU(s) = 16 ranks" in w for w in doc["warnings"]), doc["warnings"]
            if args[0] == "perf":
                assert doc["summary"]["busbw_median_error_pct"] == pytest.approx(0, abs=0.5), doc["summary"]


def test_the_overlay_records_the_nccl_env_and_perf_run_diagnose_say_when_theirs_differs(capsys, tmp_path,
                                                                                        monkeypatch):
    """A calibration fitted to a forced-Ring log (--env NCCL_ALGO=Ring) wrote no trace of it: perf, run and
    diagnose on the overlay could not know the fit assumed Ring. The overlay records the variables
    (calibration.nccl_env) and does not apply them (a training step would be forced onto Ring with no --env to
    undo it); a prediction under other values says so in a note, one under the same values does not."""
    for name in [n for n in __import__("os").environ if n.startswith("NCCL_")]:
        monkeypatch.delenv(name)  # the process environment counts as --env does
    log = LOG.with_name("h100-ib-2node-16gpu-all_reduce-ring-forced.log")
    cluster = tmp_path / "ring.yaml"
    code, _, err = run_cli(capsys, "calibrate", str(log), "--cluster", "dgx-h100", "--servers", "2", "--env",
                           "NCCL_ALGO=Ring", "--params", "nic_efficiency", "--out", str(cluster))
    assert code == 0, err
    overlay = yaml.safe_load(cluster.read_text())
    assert overlay["calibration"]["nccl_env"] == {"NCCL_ALGO": "Ring"}
    perf = ["perf", "all_reduce", "--cluster", str(cluster), "-b", "1G", "-e", "1G", "--json"]
    code, text, _ = run_cli(capsys, *perf)
    notes = json.loads(text)["notes"]
    assert code == 0 and len(notes) == 1 and "fitted to logs run with NCCL_ALGO=Ring" in notes[0], notes
    assert "this prediction runs with NCCL_ALGO unset" in notes[0]
    code, text, _ = run_cli(capsys, *perf, "--env", "NCCL_ALGO=ring")  # NCCL reads it case-insensitively
    assert code == 0 and json.loads(text)["notes"] == []
    # run and diagnose: the scenario's collectives run under NCCL's defaults, so both say it
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump({"cluster": overlay, "workload": {
        "model": {"preset": "llama-8b", "seq_len": 2048}, "parallel": {"tp": 8, "global_batch": 16}, "steps": 1}}))
    code, text, err = run_cli(capsys, "run", str(scenario), "--json")
    assert code == 0, err
    assert any("NCCL_ALGO=Ring" in n for n in json.loads(text)["cases"][0]["notes"]), text[:400]
    code, text, err = run_cli(capsys, "diagnose", str(scenario), "--no-gain", "--json")
    assert code == 0 and any("NCCL_ALGO=Ring" in n for n in json.loads(text)["notes"]), err
    # fitted under NCCL's defaults: recorded as such ({}), and a prediction under them has nothing to say
    code, _, _ = run_cli(capsys, "calibrate", str(LOG), "--cluster", "dgx-h100", "--servers", "2",
                         "--params", "nic_efficiency", "--out", str(cluster))
    assert code == 0 and yaml.safe_load(cluster.read_text())["calibration"]["nccl_env"] == {}
    code, text, _ = run_cli(capsys, *perf)
    assert code == 0 and json.loads(text)["notes"] == []


def test_a_log_without_rank_lines_driving_several_gpus_per_process_is_calibrated_as_perf_compares_it(capsys, tmp_path):
    """A broadcast log without '# Rank' lines whose one process per server drove 4 GPUs (nGpus 4): with
    --servers 2 and no -g, perf --compare and calibrate both place it on 2 x 4 = 8 ranks (ranks_run); calibrate
    then predicted it on 2 whole servers (16 ranks) and refused its own count ('the log has 8 ranks but the
    cluster gives 16')."""
    code, table, _ = run_cli(capsys, "perf", "broadcast", "--cluster", "dgx-h100", "--servers", "2", "-g", "4",
                             "-b", "8", "-e", "64M", "-f", "4")
    assert code == 0
    log = tmp_path / "broadcast-g4.log"
    log.write_text("".join(line.replace("nGpus 1 ", "nGpus 4 ") for line in table.splitlines(keepends=True)
                           if not line.startswith("#  Rank")))
    for args in (["perf", "broadcast", "--compare", str(log)], ["calibrate", str(log), "--params", "nic_efficiency"]):
        code, out, err = run_cli(capsys, *args, "--cluster", "dgx-h100", "--servers", "2", "--json")
        assert code == 0, (args, err)
        assert any("predicted as --servers 2 x 4 GPU(s) = 8 ranks" in w for w in json.loads(out)["warnings"]), out


def test_perf_compare_on_the_overlay_says_when_its_nccl_env_differs(capsys, tmp_path, monkeypatch):
    """perf --compare is where a calibrated overlay meets a log, and it predicted under other NCCL variables than
    the fit's without the note perf, run and diagnose print (docs/calibrate.md: 'perf ... add a note')."""
    for name in [n for n in __import__("os").environ if n.startswith("NCCL_")]:
        monkeypatch.delenv(name)
    cluster = tmp_path / "ring.yaml"
    code, _, err = run_cli(capsys, "calibrate", str(LOG.with_name("h100-ib-2node-16gpu-all_reduce-ring-forced.log")),
                           "--cluster", "dgx-h100", "--servers", "2", "--env", "NCCL_ALGO=Ring", "--params",
                           "nic_efficiency", "--out", str(cluster))
    assert code == 0, err
    compare = ["perf", "all_reduce", "--compare", str(LOG), "--cluster", str(cluster), "--json"]
    code, text, err = run_cli(capsys, *compare)
    assert code == 0, err
    assert any("fitted to logs run with NCCL_ALGO=Ring" in w for w in json.loads(text)["warnings"]), text[-600:]
    code, text, err = run_cli(capsys, *compare, "--env", "NCCL_ALGO=Ring")
    assert code == 0 and not any("calibration.nccl_env" in w for w in json.loads(text)["warnings"]), err


def test_a_log_without_rank_lines_counts_every_thread_of_its_process(capsys, tmp_path):
    """nccl-tests runs processes x threads (-t) x GPUs (-g) ranks: a process of 'nThread 2 nGpus 4' drives 8
    GPUs, so with --servers 2 its log without '# Rank' lines ran 16 ranks, not the 8 that nGpus alone gives."""
    code, table, _ = run_cli(capsys, "perf", "broadcast", "--cluster", "dgx-h100", "--servers", "2",
                             "-b", "8", "-e", "64M", "-f", "4")
    assert code == 0
    log = tmp_path / "broadcast-t2g4.log"
    log.write_text("".join(line.replace("nThread 1 nGpus 1 ", "nThread 2 nGpus 4 ")
                           for line in table.splitlines(keepends=True) if not line.startswith("#  Rank")))
    for args in (["perf", "broadcast", "--compare", str(log)], ["calibrate", str(log), "--params", "nic_efficiency"]):
        code, out, err = run_cli(capsys, *args, "--cluster", "dgx-h100", "--servers", "2", "--json")
        assert code == 0, (args, err)
        assert any("predicted as --servers 2 x 8 GPU(s) = 16 ranks" in w for w in json.loads(out)["warnings"]), out
