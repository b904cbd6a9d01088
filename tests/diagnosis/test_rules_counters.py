"""The congestion-counter rules (diagnosis/rules_counters.py) on hand-built observations, checked
against closed forms: a port stalled a share X of the time it had data delivers (1 - X) of its rate,
so a step's B bytes at rate R take B / R x X / (1 - X) longer (capped by the exposed communication);
the sink of a back-pressure tree is the stalled link whose receiver is stalled on no link its
traffic leaves by (Guo et al., SIGCOMM 2016, on PFC pause propagation); PortXmitWait ticks are at
least one symbol time, the time a byte takes on one of a 4X port's lanes (IBTA Vol. 1; NVIDIA
ibdiagnet User Manual v2.13, "Congestion Assessment on InfiniBand Links": 4 ns at SDR).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from gpuwait.diagnosis import rules_counters
from gpuwait.diagnosis.observe import Observation
from gpuwait.diagnosis.rules import MATTERS, RULES, RuleOutput
from gpuwait.diagnosis.rules_counters import IB_LANES, PMA32_MAX, stalled_share
from tests.diagnosis.test_rules import N_GPUS, TOPO

STEP_S = 1.0
EXPOSED_S = 0.3
STEP_BYTES = 5e9
RATE_Bps = float(TOPO.link_capacity_Bps[int(TOPO.nic_uplink[0, 0, 0])])  # 100 Gb/s


def _phases() -> dict[str, np.ndarray]:
    zeros = np.zeros(N_GPUS)
    return {"compute": zeros + 0.7, "straggler_wait": zeros, "data_wait": zeros, "exposed_comm": zeros + EXPOSED_S}


def _obs(counters: dict[str, np.ndarray], step_bytes: float = STEP_BYTES, window_bytes: float = 90 * RATE_Bps) -> Observation:
    n = TOPO.n_links
    return Observation(TOPO, step_time_s=STEP_S, per_gpu_s=_phases(),
                       link_bytes=np.full(n, step_bytes), link_rate_Bps=TOPO.link_capacity_Bps.astype(float),
                       link_nominal_Bps=TOPO.link_capacity_Bps.astype(float), counters=counters,
                       link_window_bytes=np.full(n, window_bytes))


def _check(kind: str, obs: Observation) -> RuleOutput:
    out = RuleOutput()
    RULES[kind].check(obs, out)
    return out


def _on(links: dict[int, float]) -> np.ndarray:
    values = np.zeros(TOPO.n_links)
    for link, value in links.items():
        values[link] = value
    return values


UP = {nic: int(TOPO.nic_uplink[0, nic, 0]) for nic in range(4)}          # s0.nicK -> leaf0
DOWN = {nic: TOPO.link_id(f"leaf0->s0.nic{nic}") for nic in range(4)}    # leaf0 -> s0.nicK


def test_stalled_share_and_its_cost_are_the_closed_form():
    # 10 s paused beside 90 s of sending (90 R bytes at R): 10 % of the busy time
    assert stalled_share(10.0, 90 * RATE_Bps, RATE_Bps) == pytest.approx(0.1)
    out = _check("pfc-pause", _obs({"pause_received_s": _on({UP[1]: 10.0})}))
    [cand] = out.candidates
    assert cand.component == "leaf0"  # nothing past the leaf was collected: the pauses start in it
    # the port's bytes take 1 / 0.9 of their sending time; of that only the exposed share holds the
    # job up (rules._held_up_s): min(extra, exposed x 0.1)
    assert cand.lost_s == pytest.approx(min(STEP_BYTES / RATE_Bps * 0.1 / 0.9, EXPOSED_S * 0.1))
    assert cand.evidence["delivers_at_most"] == "90 Gb/s" and cand.evidence["stalled_share"] == 0.1


def test_pause_storm_is_traced_to_the_nic_that_starts_it():
    """s0.nic2 pauses leaf0 (it sends pauses: tx_prio3_pause_duration); leaf0, its egress to nic2
    blocked, pauses the NICs sending to it. The sink is nic2, the uplinks its victims."""
    obs = _obs({"pause_sent_s": _on({DOWN[2]: 20.0}),
                "pause_received_s": _on({UP[0]: 5.0, UP[1]: 5.0, UP[3]: 5.0}),
                "ecn_marked": _on({})})
    [cand] = _check("pfc-pause", obs).candidates
    assert cand.component == "s0.nic2" and cand.evidence["sink_link"] == "leaf0->s0.nic2"
    assert cand.evidence["stalled_links"] == 4
    assert "no ECN marks" in cand.evidence["ecn"]  # PFC without DCQCN: the fix names ECN
    assert cand.lost_s == pytest.approx(min(STEP_BYTES / RATE_Bps * (20 / 110) / (90 / 110), EXPOSED_S * 20 / 110))


def test_pauses_costing_less_than_matters_are_not_named():
    # lost = min(B/R * X/(1-X), exposed * X); with B/R = 0.4 s above the exposed 0.3 s the second
    # binds: 1 % of the step exactly at X = MATTERS * STEP / exposed, X/(1-X) pause seconds per second sent
    share = MATTERS * STEP_S / EXPOSED_S
    ratio = share / (1 - share)
    just_under = 0.99 * ratio * 90.0  # pause seconds beside 90 s of sending
    assert not _check("pfc-pause", _obs({"pause_received_s": _on({UP[0]: just_under})})).candidates
    assert _check("pfc-pause", _obs({"pause_received_s": _on({UP[0]: 1.02 * ratio * 90.0})})).candidates


def test_pause_counts_without_durations_are_named_missing():
    out = _check("pfc-pause", _obs({"pause_received": _on({UP[0]: 1523})}))
    assert not out.candidates and "pause durations" in out.missing[0]


def test_storm_prevention_events_name_the_nic_directly():
    [cand] = _check("pfc-pause", _obs({"pause_storm_events": _on({DOWN[3]: 2})})).candidates
    assert cand.component == "s0.nic3" and cand.evidence["pause_storm_events"] == 2


def test_xmit_wait_ticks_are_symbol_times():
    symbol_s = IB_LANES / RATE_Bps  # 0.32 ns at 100 Gb/s (4 ns at SDR's 1 GB/s)
    assert IB_LANES / 1e9 == pytest.approx(4e-9)
    ticks = 10.0 / symbol_s  # 10 s waiting beside 90 s of sending
    [cand] = _check("ib-xmit-wait", _obs({"xmit_wait": _on({TOPO.link_id("leaf0->spine1"): ticks})})).candidates
    assert cand.component == "spine1" and cand.evidence["stalled_share"] == pytest.approx(0.1)


def test_saturated_xmit_wait_is_not_read_as_a_share():
    out = _check("ib-xmit-wait", _obs({"xmit_wait": _on({UP[0]: PMA32_MAX})}))
    assert not out.candidates and "saturated" in out.missing[0]


def test_ecn_marks_name_the_receiver_at_info_level():
    packets = 90 * RATE_Bps / rules_counters.ROCE_PACKET_BYTES
    marks = _on({DOWN[1]: 0.05 * packets, DOWN[0]: 0.001 * packets})
    [cand] = _check("ecn-marks", _obs({"ecn_marked": marks})).candidates
    assert cand.component == "s0.nic1" and cand.lost_s == 0.0 and cand.evidence["ecn_marked_share"] == 0.05
    low = _on({DOWN[1]: 0.5 * rules_counters.ECN_SUSTAINED_SHARE * packets})
    assert not _check("ecn-marks", _obs({"ecn_marked": low})).candidates


def test_simulated_runs_carry_no_congestion_counters():
    """The flow engine has no queues: the counter rules stay silent and ask for nothing."""
    obs = Observation(TOPO, step_time_s=1.0, per_gpu_s=_phases())
    for kind in ("pfc-pause", "ib-xmit-wait", "ecn-marks"):
        out = _check(kind, obs)
        assert not out.candidates and not out.missing


def test_mlx5_pause_duration_reaches_the_rule_through_the_mapping(tmp_path):
    """The constructed ethtool dump (tests/telemetry/data, format of the kernel's mlx5 counters.rst):
    48736 us of rx_prio3_pause_duration beside tx_bytes_phy land on s1.nic2's uplink."""
    from gpuwait.diagnosis.telemetry import observe_telemetry
    from gpuwait.telemetry.bundle import load_telemetry_dir
    from gpuwait.topology.presets import build_preset

    roce_topo = build_preset("rocev2-400g-2tier", servers=2)

    (tmp_path / "s1").mkdir()
    shutil.copy(Path(__file__).parents[1] / "telemetry" / "data" / "ethtool-mlx5-constructed.txt",
                tmp_path / "s1" / "ethtool-mlx5_2.txt")
    obs = observe_telemetry(load_telemetry_dir(tmp_path), roce_topo)
    up = int(roce_topo.nic_uplink[1, 2, 0])
    assert obs.counters["pause_received_s"][up] == pytest.approx(0.048736)
    assert obs.link_window_bytes[up] == 1843968431808
    rate = float(roce_topo.link_capacity_Bps[up])
    share = stalled_share(0.048736, 1843968431808, rate)
    assert share == pytest.approx(0.048736 / (0.048736 + 1843968431808 / rate))


def test_example_bundle_xmit_wait_is_weighed_against_its_own_dump():
    """examples/telemetry: perfquery -x of hoibp0013 port 25 counts 3,912,874,410 PortXmitWait ticks beside
    7,412,286,451 PortXmitData words (4 bytes, IBTA); node_exporter's range query counts the same port's
    bytes over another window, which must not be mixed in. At QDR one symbol is 1 ns (4 lanes of
    1 GB/s of data), and the port trained at 2X: 2 GB/s."""
    from gpuwait.diagnosis.telemetry import observe_telemetry
    from gpuwait.runner.inputs import load_cluster
    from gpuwait.telemetry.bundle import load_telemetry_dir
    from gpuwait.topology.build import build_topology

    x5 = build_topology(load_cluster("examples/inventory/x5-cluster.yaml"))
    obs = observe_telemetry(load_telemetry_dir("examples/telemetry"), x5)
    link = x5.link_id("hoibp0013->sl390lin105.hca")
    assert obs.link_window_bytes[link] == 7412286451 * 4
    wait_s = 3912874410 * 1e-9
    assert obs.counters["xmit_wait"][link] * IB_LANES / x5.link_capacity_Bps[link] == pytest.approx(wait_s)
    share = stalled_share(wait_s, 7412286451 * 4, 2e9)
    assert share == pytest.approx(wait_s / (wait_s + 7412286451 * 4 / 2e9)) and 0.20 < share < 0.22
