"""The chaos soak's pure pieces (excavator_hil.soak): the seeded schedule, the bounds from the
configuration, each invariant check over hand-made records (one that holds and one that breaks
it), the report; the fault tools it uses (the link proxy's cut, salvaging a killed recorder's
bag). No stack runs here: test_soak.py runs the soak itself."""

from __future__ import annotations

import dataclasses
import math
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import EVENT_WAIT_S, wait_for
from hypothesis import given
from hypothesis import strategies as st

from excavator_hil.bags.io import BagWriter, read_bag, salvage_bag
from excavator_hil.faults.tcp_proxy import TcpProxy
from excavator_hil.soak import checks
from excavator_hil.soak.bounds import SoakBounds, load_bounds, plant_decay_s
from excavator_hil.soak.records import (
    DDS_NODES,
    PROCESSES,
    Command,
    FaultRecord,
    JointCommand,
    PlcSample,
    PlcWrite,
    ResourceSample,
    SoakRecords,
    StreamSample,
    Target,
)
from excavator_hil.soak.report import build_report
from excavator_hil.soak.schedule import (
    KINDS,
    PLC_LINK_CUT,
    REDIS_RESTART,
    SIGKILL,
    SIGSTOP,
    Fault,
    make_schedule,
)
from plc_bridge.config import load_config

BOUNDS = SoakBounds(stale_command_s=0.25, clock_margin_s=0.001, drive_stop_s=0.715,
                    drive_rearm_s=10.0, dig_rearm_s=3.2, startup_s=90.0, respawn_delay_s=2.0,
                    bag_gap_s=0.2, bag_unwritten_s=0.52, stopped_m_s=0.005,
                    drive_stop_scans=143,
                    memory_growth=0.05)


# --- the schedule ------------------------------------------------------------------------------

@given(seed=st.integers(0, 2**31), minutes=st.floats(0.5, 600.0))
def test_the_schedule_is_replayable_and_brings_every_kind_first(seed: int, minutes: float
                                                                ) -> None:
    a = make_schedule(seed, 60.0 * minutes, PROCESSES, DDS_NODES)
    assert a == make_schedule(seed, 60.0 * minutes, PROCESSES, DDS_NODES)
    assert sorted(f.kind for f in a[:len(KINDS)]) == sorted(KINDS)
    assert [f.at_s for f in a] == sorted(f.at_s for f in a)
    assert all(5.0 <= f.at_s < 60.0 * minutes for f in a)
    for f in a:
        if f.kind in (SIGKILL, SIGSTOP):
            assert f.target in PROCESSES
        if f.kind == "dds_peer_frozen":
            assert f.target in DDS_NODES
        assert (f.hold_s == 0) == (f.kind == SIGKILL)


def test_seeds_differ_and_a_long_soak_hits_every_process() -> None:
    assert make_schedule(1, 1200, PROCESSES, DDS_NODES) != make_schedule(2, 1200, PROCESSES,
                                                                          DDS_NODES)
    for seed in range(5):   # 20 min: every process killed, and stopped, once at least
        faults = make_schedule(seed, 1200, PROCESSES, DDS_NODES)
        for kind in (SIGKILL, SIGSTOP):
            assert {f.target for f in faults if f.kind == kind} == set(PROCESSES), (seed, kind)


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"duration_s": 3.0}, "too short"),
    ({"processes": ()}, "processes is empty"),
    ({"dds_nodes": ("nobody",)}, "not among the processes"),
    ({"kinds": ("meteor",)}, "not among"),
    ({"mean_gap_s": 0.0}, "must be > 0"),
])
def test_a_bad_schedule_request_names_the_value(kwargs: dict, words: str) -> None:
    args = {"seed": 0, "duration_s": 120.0, "processes": PROCESSES, "dds_nodes": DDS_NODES,
            **kwargs}
    with pytest.raises(ValueError, match=words):
        make_schedule(**args)


# --- the bounds ----------------------------------------------------------------------------------

def test_bounds_come_from_the_configured_timeouts() -> None:
    cfg = load_config()
    b = load_bounds(respawn_delay_s=2.0, startup_timeout_s=90.0, max_drive_m_s=0.3,
                    target_period_s=0.05)
    assert b.stale_command_s == cfg.virtual_plc.watchdog_timeout_s
    assert b.drive_stop_s == pytest.approx(
        cfg.redis_timeout_s + cfg.virtual_plc.watchdog_timeout_s
        + plant_decay_s(cfg.virtual_plc.speed_time_constant_s, 0.3, b.stopped_m_s)
        + 2.0 / cfg.virtual_plc.plant_hz)
    assert b.drive_rearm_s > cfg.heartbeat_timeout_s + cfg.redis_connect_timeout_s
    assert b.startup_s == 90.0 and b.respawn_delay_s == 2.0
    assert plant_decay_s(0.05, 0.3, 0.005) == pytest.approx(0.05 * math.log(60.0))


# --- drive commands at the PLC -----------------------------------------------------------------

def _drive(t: float, v: float, refused: str | None = None) -> PlcWrite:
    return PlcWrite(t, True, False, int(t * 1000), (v, v), refused)


COMMANDS = [Command(k, 0.2 + 1e-4 * k, 10.0 + 0.05 * k) for k in range(100)]


def test_a_command_taken_while_redis_holds_it_or_just_after_is_fine() -> None:
    writes = [_drive(c.t + 0.003, c.value_m_s) for c in COMMANDS]
    writes.append(_drive(COMMANDS[10].t + 0.05 + 0.24, COMMANDS[10].value_m_s))  # 0.24 s late
    writes.append(_drive(20.0, 0.25, refused="stale_seq"))      # refused: did not act
    writes.append(PlcWrite(21.0, False, True, 1, (0.0, 0.0), None))   # a stop
    assert checks.stale_drive_commands(COMMANDS, [], writes, BOUNDS) == []


def test_a_superseded_command_taken_after_the_watchdog_time_is_a_violation() -> None:
    late = _drive(COMMANDS[10].t + 0.05 + 0.30, COMMANDS[10].value_m_s)
    found = checks.stale_drive_commands(COMMANDS, [], [late], BOUNDS)
    assert len(found) == 1 and "command #10" in found[0].detail and "0.300 s" in found[0].detail


def test_a_command_lost_with_redis_must_not_act_later() -> None:
    last = COMMANDS[-1]
    after_loss = _drive(last.t + 1.0, last.value_m_s)
    assert checks.stale_drive_commands(COMMANDS, [], [after_loss], BOUNDS) == []  # still held
    found = checks.stale_drive_commands(COMMANDS, [last.t + 0.5], [after_loss], BOUNDS)
    assert len(found) == 1


def test_a_setpoint_no_command_carried_is_a_violation() -> None:
    found = checks.stale_drive_commands(COMMANDS, [], [_drive(12.0, 0.7)], BOUNDS)
    assert len(found) == 1 and "no command" in found[0].detail


def _fault(kind: str, target: str, started: float, lifted: float, restarted: bool = False
           ) -> FaultRecord:
    return FaultRecord(Fault(0, 0.0, kind, target, lifted - started), started, lifted,
                       ready=lifted, restarted=restarted)


def test_the_tracks_must_rest_while_the_bridge_is_cut_off() -> None:
    cut = _fault(PLC_LINK_CUT, "plc link", 100.0, 104.0)

    def read(t: float, v: float, alive: int) -> PlcSample:
        return PlcSample(t, t + 0.002, (v, v), v == 0.0, alive)
    # 200 scans/s: 143 scans (0.715 s) after the first scan surely after the fault's start
    early = [read(100.05, 0.25, 10), read(100.5, 0.1, 100)]     # still ramping: fine
    at_rest = [read(100.9, 0.0, 190), read(103.9, 0.0, 790)]
    assert checks.drive_at_rest([cut], early + at_rest, BOUNDS) == []
    moving = [read(102.5, 0.2, 490)]
    found = checks.drive_at_rest([cut], early + at_rest + moving, BOUNDS)
    assert len(found) == 1 and "still moved" in found[0].detail and "479 PLC scans" in \
        found[0].detail
    # a PLC starved of CPU: 2 s passed but it scanned 40 times: not judged yet
    starved = [read(102.5, 0.2, 50)]
    assert checks.drive_at_rest([cut], early[:1] + starved, BOUNDS) == []
    # the counter wraps at 2^16
    wrapped = [read(100.05, 0.25, 65530), read(102.5, 0.2, 600)]
    assert len(checks.drive_at_rest([cut], wrapped, BOUNDS)) == 1
    other = _fault(SIGSTOP, "sim_node", 100.0, 104.0)            # not on the drive path
    assert checks.drive_at_rest([other], early + moving, BOUNDS) == []


# --- joint commands at the simulation ----------------------------------------------------------

TARGETS = [Target(k, 1.0 + 0.05 * k, (0.01 * k, 0.5, -1.0, 0.2)) for k in range(20)]


def test_joint_commands_in_target_order_and_their_lateness() -> None:
    cmds = [JointCommand(x.t + 0.002, x.t + 0.004, x.q) for x in TARGETS]
    found, late = checks.joint_command_order(TARGETS, cmds, [], 0.001)
    assert found == [] and late == 0.0
    stale = [*cmds[:10], JointCommand(TARGETS[3].t + 0.002, 2.0, TARGETS[3].q)]
    found, _ = checks.joint_command_order(TARGETS, stale, [], 0.001)
    assert len(found) == 1 and "target #3" in found[0].detail and "#9" in found[0].detail


def test_a_target_superseded_before_a_fault_must_not_act_after_it() -> None:
    freeze = _fault("dds_peer_frozen", "ik_node", 1.27, 1.6)     # targets 6..11 meanwhile
    # thawed: the queue of the last targets sent during the freeze, in order: fine
    thawed = [JointCommand(1.605 + 0.001 * i, 1.61, x.q) for i, x in enumerate(TARGETS[9:12])]
    cmds = [JointCommand(x.t + 0.002, x.t + 0.004, x.q) for x in TARGETS[:6]]
    found, late = checks.joint_command_order(TARGETS, cmds + thawed, [freeze], 0.001)
    assert found == [] and late == pytest.approx(1.605 - TARGETS[10].t)
    # one from before the freeze delivered after it: written before, acting after
    old = [JointCommand(1.605, 1.61, TARGETS[4].q)]
    found, _ = checks.joint_command_order(TARGETS, cmds[:5] + old, [freeze], 0.001)
    assert [v.check for v in found] == ["stale_joint"] and "#4" in found[0].detail


# --- recovery ------------------------------------------------------------------------------------

def _stream(t0: float, t1: float, period: float = 0.01, stamp0: float = 50.0
            ) -> list[StreamSample]:
    n = int((t1 - t0) / period)
    return [StreamSample(stamp0 + i * period, t0 + i * period) for i in range(n)]


def test_recovery_is_counted_from_the_first_sign_of_life() -> None:
    f = _fault(SIGKILL, "plc_bridge", 100.0, 102.0, restarted=True)
    f.ready = 107.0                                 # the new bridge's first write: 5 s start-up
    cmds = [Command(k, 0.2 + 1e-4 * k, 95.0 + 0.05 * k) for k in range(400)]
    writes = [_drive(c.t + 0.002, c.value_m_s) for c in cmds if not 100.0 <= c.t < 108.0]
    jcs = [JointCommand(t, t + 0.001, (0.0,) * 4) for t in (99.0, 107.3)]
    wrench = _stream(95.0, 115.0)
    recs, found = checks.recoveries([f], cmds, writes, jcs, wrench, wrench, BOUNDS, end=115.0)
    assert found == []
    r = recs[0]
    assert r.startup_s == pytest.approx(5.0)
    assert r.drive_s == pytest.approx(1.002, abs=0.06)
    assert r.dig_s == pytest.approx(0.3)
    # the same without any drive write after the restart: did not resume
    recs, found = checks.recoveries([f], cmds, [w for w in writes if w.t < 100], jcs, wrench,
                                    wrench, BOUNDS, end=115.0)
    assert recs[0].drive_s is None and any("driving did not resume" in v.detail for v in found)


def test_a_slow_return_and_a_process_that_never_came_back_are_violations() -> None:
    f = _fault(SIGSTOP, "ik_node", 100.0, 102.0)
    cmds = [Command(k, 0.2 + 1e-4 * k, 95.0 + 0.05 * k) for k in range(400)]
    writes = [_drive(c.t + 0.002, c.value_m_s) for c in cmds]
    jcs = [JointCommand(106.0, 106.001, (0.0,) * 4)]          # 4 s after: over dig_rearm_s
    wrench = _stream(95.0, 115.0)
    _, found = checks.recoveries([f], cmds, writes, jcs, wrench, wrench, BOUNDS, end=115.0)
    assert [v.check for v in found] == ["recovery"] and "digging resumed 4.00 s" in found[0].detail
    gone = _fault(SIGKILL, "soil_node", 100.0, 102.0, restarted=True)
    gone.ready = None
    _, found = checks.recoveries([gone], cmds, writes, jcs, wrench, wrench, BOUNDS, end=115.0)
    assert "no sign of life" in found[0].detail


# --- the bag -------------------------------------------------------------------------------------

def test_the_bag_must_hold_what_was_published_outside_fault_windows() -> None:
    observed = _stream(100.0, 120.0)                 # sim time 50 + (t - 100)
    stamps = [s.stamp_s for s in observed if not 55.0 < s.stamp_s < 57.0]
    streams = {"joint_states": observed}
    freeze = _fault(SIGSTOP, "bag_record", 104.5, 107.5)
    found, excused, losses = checks.bag_gaps({"joint_states": stamps}, streams, [freeze],
                                             BOUNDS, 100.0, 120.0)
    assert found == [] and len(excused) == 1 and "bag_record" in excused[0]
    assert losses[0].lost == 199 and losses[0].longest_s == pytest.approx(2.0, abs=0.02)
    elsewhere = _fault(SIGSTOP, "bag_record", 110.0, 112.0)
    found, _, _ = checks.bag_gaps({"joint_states": stamps}, streams, [elsewhere], BOUNDS,
                                  100.0, 120.0)
    assert len(found) == 1 and "2.00 s" in found[0].detail
    # a recorder that never recorded again after its fault: the window (up to the next
    # fault) excuses the part it covers, not the rest
    gone = [x for x in stamps if x < 55.0]
    later = _fault(SIGSTOP, "ik_node", 109.0, 110.0)
    found, excused, _ = checks.bag_gaps({"joint_states": gone}, streams, [freeze, later],
                                        BOUNDS, 100.0, 120.0)
    assert len(found) == 1 and "outside the window of #0 sigstop bag_record" in found[0].detail
    assert "10.99 s of it" in found[0].detail and excused == [], found
    not_a_source = _fault(REDIS_RESTART, "redis-server", 104.5, 107.5)
    found, _, _ = checks.bag_gaps({"joint_states": stamps}, streams, [not_a_source], BOUNDS,
                                  100.0, 120.0)
    assert len(found) == 1
    # a killed recorder loses what it had taken but not yet written: bag_unwritten_s before
    # its kill is excused, more is not
    kill = _fault(SIGKILL, "bag_record", 105.0, 107.0, restarted=True)
    for lost_from, violations in ((54.6, 0), (54.0, 1)):
        lacking = [s.stamp_s for s in observed if not lost_from < s.stamp_s < 57.0]
        found, excused, _ = checks.bag_gaps({"joint_states": lacking}, streams, [kill], BOUNDS,
                                            100.0, 120.0)
        assert len(found) == violations, (lost_from, found)
        assert len(excused) == 1 - violations, (lost_from, excused)
    # a few messages lost here and there: counted, not a gap
    sparse = [x for i, x in enumerate(s.stamp_s for s in observed) if i % 50]
    found, _, losses = checks.bag_gaps({"joint_states": sparse}, streams, [], BOUNDS, 100.0,
                                       120.0)
    assert found == [] and losses[0].lost == 40


def test_a_silent_stream_is_not_the_bags_gap_and_a_restart_is_not_either() -> None:
    observed = [s for s in _stream(100.0, 120.0) if not 55.0 < s.stamp_s < 57.0]
    found, _, losses = checks.bag_gaps({"joint_states": [s.stamp_s for s in observed]},
                                       {"joint_states": observed}, [], BOUNDS, 100.0, 120.0)
    assert found == [] and losses[0].lost == 0       # nobody received them: not the bag's
    first, second = _stream(100.0, 105.0, stamp0=50.0), _stream(108.0, 112.0, stamp0=0.0)
    kill = _fault(SIGKILL, "sim_node", 105.0, 107.0, restarted=True)
    stamps = [s.stamp_s for s in first + second]
    found, _, losses = checks.bag_gaps({"joint_states": stamps},
                                       {"joint_states": first + second}, [kill], BOUNDS,
                                       100.0, 112.0)
    assert found == [] and losses[0].lost == 0
    # the second life's stamps repeat the first's: matched within their own life
    found, _, losses = checks.bag_gaps({"joint_states": [s.stamp_s for s in first] + [0.0]},
                                       {"joint_states": first + second}, [], BOUNDS,
                                       100.0, 112.0)
    assert len(found) == 1 and losses[0].lost == len(second) - 1
    found, _, _ = checks.bag_gaps({"joint_states": []}, {}, [], BOUNDS, 100.0, 112.0)
    assert "nothing recorded" in found[0].detail


# --- soil and footprint --------------------------------------------------------------------------

def test_soil_mass_must_not_drift() -> None:
    assert checks.soil_mass([(1.0, 0), (2.0, 0)]) == []
    assert len(checks.soil_mass([(1.0, 0), (2.0, -3)])) == 1


def _footprints(anon: list[int], fds: list[int], threads: list[int]) -> list[ResourceSample]:
    # the whole PSS moves with the host's other processes (shared library pages): not judged
    return [ResourceSample("sim_node", 0, 2.0 * i, 150_000 + 9000 * (i % 7), f, n, a)
            for i, (a, f, n) in enumerate(zip(anon, fds, threads, strict=True))]


def test_growth_after_warm_up_and_a_rising_floor_are_leaks() -> None:
    n = 60   # 120 s at 2 s: warm-up 20 s, windows 20 s
    flat = _footprints([100_000 + (5000 if i < 5 else 0) + (i % 3) * 100 for i in range(n)],
                       [30 + (i % 4 == 0) for i in range(n)], [12] * n)
    found, prints, skipped = checks.resource_growth(flat, 20.0, 20.0, BOUNDS)
    assert found == [] and skipped == [] and prints[0].growth == pytest.approx(0.0, abs=0.01)
    growing = _footprints([100_000 + 300 * i for i in range(n)], [30 + i // 20 for i in range(n)],
                          [12 + i // 30 for i in range(n)])
    found, _, _ = checks.resource_growth(growing, 20.0, 20.0, BOUNDS)
    assert {v.check for v in found} == {"memory", "fd_leak", "thread_leak"}
    tiny = _footprints([1500 + 4 * i for i in range(n)], [13] * n, [4] * n)   # redis: +15 %
    assert checks.resource_growth(tiny, 20.0, 20.0, BOUNDS)[0] == []          # but 0.2 MiB
    steps = _footprints([80_000 + 1600 * (i // 20) for i in range(n)], [18] * n, [19] * n)
    assert checks.resource_growth(steps, 20.0, 20.0, BOUNDS)[0] == []         # 3.2 MiB, +4 %
    _, _, skipped = checks.resource_growth(growing[:20], 20.0, 20.0, BOUNDS)
    assert skipped and "not" not in skipped[0] and "less than" in skipped[0]


def test_a_recorders_move_to_a_new_participant_starts_a_footprint_of_its_own() -> None:
    """The recorder's move after a stop (docs/bags.md) replaces its DDS participant: the
    heap's step at the move is no leak, and each side is judged on its own (a leak after the
    move still is one)."""
    n = 60
    stepped = [ResourceSample("bag_record", 0, 2.0 * i, 150_000, 20, 19,
                              50_000 + (12_000 if i >= 30 else 0) + (i % 3) * 100,
                              phase=int(i >= 30)) for i in range(n)]
    found, prints, skipped = checks.resource_growth(stepped, 10.0, 10.0, BOUNDS)
    assert found == [] and skipped == [] and [p.phase for p in prints] == [0, 1]
    assert "after its move 1 to a new participant" in prints[1].tag
    unmarked = [dataclasses.replace(r, phase=0) for r in stepped]
    assert [v.check for v in checks.resource_growth(unmarked, 10.0, 10.0, BOUNDS)[0]] == [
        "memory"]
    leaking = [dataclasses.replace(r, anon_kib=r.anon_kib + (800 * i if r.phase else 0))
               for i, r in enumerate(stepped)]
    found, _, _ = checks.resource_growth(leaking, 10.0, 10.0, BOUNDS)
    assert [v.check for v in found] == ["memory"] and "after its move 1" in found[0].detail


# --- the report --------------------------------------------------------------------------------

def test_the_report_lists_faults_recoveries_and_violations() -> None:
    schedule = make_schedule(3, 120.0, PROCESSES, DDS_NODES)
    cmds = [Command(k, 0.2 + 1e-4 * (k % 1000), 95.0 + 0.05 * k) for k in range(700)]
    f = _fault(SIGSTOP, "ik_node", 100.0, 102.0)
    f.fault = schedule[0]
    records = SoakRecords(
        commands=cmds, plc_writes=[_drive(c.t + 0.002, c.value_m_s) for c in cmds],
        targets=TARGETS, joint_commands=[JointCommand(102.2, 102.21, (0.0,) * 4)],
        joint_states=_stream(95.0, 130.0), wrenches=_stream(95.0, 130.0),
        soil_mass=[(100.0, 0)], faults=[f],
        bag_stamps={"joint_states": [s.stamp_s for s in _stream(95.0, 130.0)],
                    "soil/wrench": [s.stamp_s for s in _stream(95.0, 130.0)]},
        start=95.0, end=130.0)
    report = build_report(3, 2.0, schedule, records, BOUNDS, 20.0, 10.0, cycles=4,
                          cycle_loads=[0.2, 0.3])
    assert report.summary["violations"] == 0, report.text
    assert report.summary["faults_injected"] == 1
    assert report.summary["by_kind"][schedule[0].kind]["recovered"] == 1
    assert "not injected" in report.text and "--seed 3" in report.text
    records.soil_mass.append((120.0, 7))
    report = build_report(3, 2.0, schedule, records, BOUNDS, 20.0, 10.0)
    assert report.summary["violations_by_check"] == {"soil_mass": 1}


# --- the fault tools -----------------------------------------------------------------------------

def test_a_cut_link_keeps_what_was_sent_and_refuses_new_connections() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    proxy = TcpProxy(server.getsockname()[1])
    try:
        client = socket.create_connection(("127.0.0.1", proxy.port), timeout=5.0)
        upstream, _ = server.accept()
        upstream.settimeout(5.0)
        proxy.cut()
        client.sendall(b"written before the cut")
        wait_for(lambda: proxy.held() == b"written before the cut", EVENT_WAIT_S, "the held bytes")
        refused = socket.create_connection(("127.0.0.1", proxy.port), timeout=5.0)
        assert refused.recv(10) == b""              # accepted, then closed: no route
        refused.close()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        client.close()                              # the sender gone meanwhile (an RST)
        proxy.restore()
        assert upstream.recv(100) == b"written before the cut"   # delivered late
        upstream.close()
        wait_for(lambda: proxy.open_connections == 0,
                 EVENT_WAIT_S, "the finished connection closed")
    finally:
        proxy.close()
        server.close()


def test_the_proxy_process_cuts_on_sigusr1_and_restores_on_sigusr2(tmp_path: Path) -> None:
    server = socket.create_server(("127.0.0.1", 0))
    proc = subprocess.Popen([sys.executable, "-m", "excavator_hil.faults.tcp_proxy",
                             "--target-port", str(server.getsockname()[1])],
                            stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        assert line.startswith("TCP_PROXY READY ")
        port = int(line.split()[-1])
        proc.send_signal(signal.SIGUSR1)

        def refused() -> bool:   # accepted and closed at once (not forwarded, left open)
            with socket.create_connection(("127.0.0.1", port), timeout=5.0) as s:
                s.settimeout(0.5)
                try:
                    return s.recv(1) == b""
                except TimeoutError:
                    return False   # forwarded: the signal not handled yet
        wait_for(refused, EVENT_WAIT_S, "the cut")
        proc.send_signal(signal.SIGUSR2)
        c = wait_for(lambda: _connect_through(port, server), EVENT_WAIT_S, "the link back")
        c.close()
    finally:
        proc.terminate()
        assert proc.wait(EVENT_WAIT_S) == 0
        server.close()


def _connect_through(port: int, server: socket.socket) -> socket.socket | None:
    c = socket.create_connection(("127.0.0.1", port), timeout=5.0)
    server.settimeout(0.5)
    try:
        upstream, _ = server.accept()
    except TimeoutError:
        c.close()
        return None
    c.sendall(b"x")
    upstream.settimeout(5.0)
    ok = upstream.recv(1) == b"x"
    upstream.close()
    return c if ok else None


KILLED_RECORDER = """
import os, signal, sys
from excavator_hil.bags.io import BagWriter
w = BagWriter(sys.argv[1])
w.add_topic("/joint_states", "sensor_msgs/msg/JointState")
data = bytes([0, 1, 0, 0]) + bytes(2000)
for i in range(2000):   # ~4 MB: three complete chunks of 1 MiB, the fourth cut short
    w.write("/joint_states", i * 10_000_000, data)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_killed_recorders_bag_is_salvaged_up_to_its_last_complete_chunk(tmp_path: Path
                                                                          ) -> None:
    bag = tmp_path / "killed"
    run = subprocess.run([sys.executable, "-c", KILLED_RECORDER, str(bag)], check=False,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert run.returncode == -signal.SIGKILL
    assert not (bag / "metadata.yaml").exists()
    contents = salvage_bag(bag)
    stamps = [m.timestamp_ns for m in contents.messages]
    assert 1000 <= len(stamps) < 2000
    assert stamps == [i * 10_000_000 for i in range(len(stamps))]   # nothing out of order
    assert contents.topics["/joint_states"][0] == "sensor_msgs/msg/JointState"
    # a bag closed properly reads the same through both
    whole = tmp_path / "closed"
    with BagWriter(whole) as w:
        w.add_topic("/joint_states", "sensor_msgs/msg/JointState")
        for i in range(50):
            w.write("/joint_states", i, bytes([0, 1, 0, 0]) + bytes(20))
    assert [m.data for m in salvage_bag(whole).messages] == \
        [m.data for m in read_bag(whole).messages]
    time.sleep(0)
