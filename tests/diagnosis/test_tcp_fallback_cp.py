"""tcp-fallback on a context-parallel job (cp > 1): what the rule reads of the cp groups' traffic.

The rule decides from NCCL's transport lines (NET/Socket) or the kernel's netdev counters, never from
a group's collectives, so a cp > 1 job is judged as any other: blamed when it runs on sockets, not when
it runs on RDMA. Its evidence, the slowest busbw of the collectives that cross servers, must count the
cp ring's K/V exchange: with TP 8 filling a DGX H100, the CP pair sits on two servers, and on sockets
that sendrecv is the job's slowest network collective (it was left out, and the evidence named the
gradient all-reduce's twice higher busbw).
"""

from __future__ import annotations

import pytest

from gpuwait.api import load_scenario
from gpuwait.diagnosis.run import diagnose_scenario
from gpuwait.faults import parse_inject

CP_JOB = {"name": "cp2-two-servers", "cluster": {"preset": "dgx-h100", "servers": 2},
          "workload": {"model": {"preset": "llama-8b", "seq_len": 8192},
                       "parallel": {"tp": 8, "cp": 2, "global_batch": 8, "micro_batch": 1}, "steps": 1}}


@pytest.fixture(scope="module")
def cp_job(tmp_path_factory):
    import yaml

    path = tmp_path_factory.mktemp("cp") / "cp.yaml"
    path.write_text(yaml.safe_dump(CP_JOB))
    return load_scenario(path)


def test_a_cp_job_on_sockets_is_blamed_with_its_cp_exchange_as_evidence(cp_job):
    diagnosis = diagnose_scenario(cp_job, [parse_inject("tcp-fallback")], measure_gain=False)
    found = [f for f in diagnosis.findings if f.kind == "tcp-fallback"]
    assert len(found) == 1 and found[0].component == "all"
    crossing = {c.group: c.busbw_GBps for c in diagnosis.observation.collectives if c.group in ("cp", "dp")}
    assert set(crossing) == {"cp", "dp"} and crossing["cp"] < crossing["dp"]  # the case this test is about
    assert found[0].evidence["busbw_GBps"] == round(crossing["cp"], 2)


def test_a_healthy_cp_job_is_not_blamed(cp_job):
    diagnosis = diagnose_scenario(cp_job, [], measure_gain=False)
    assert diagnosis.observation.socket_transport is False
    assert not [f for f in diagnosis.findings if f.kind == "tcp-fallback"]
