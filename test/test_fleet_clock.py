"""One clock for a fleet: machine 2's sim_node (``follow_clock``) steps to machine 1's ``/clock``,
so both machines' joint_states carry the times on ``/clock``; when the owner dies the follower
stops and says it waits for the clock. Two sim_node processes over real DDS; plus the pure
:class:`excavator_sim.clock_follower.ClockFollower`."""

from __future__ import annotations

import math
import signal
from pathlib import Path

from diagnostic_msgs.msg import DiagnosticArray
from helpers import (
    EVENT_WAIT_S,
    REPO,
    STARTUP_TIMEOUT_S,
    NodeProcess,
    RosTestNode,
    not_shown,
    wait_for,
)
from hypothesis import given
from hypothesis import strategies as st
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState

from excavator_sim.clock_follower import ClockFollower

LIMIT_S = STARTUP_TIMEOUT_S  # event waits, start-up included: a bound, not a measurement
PERIOD = 0.01


def test_follower_aligns_then_steps_whole_periods() -> None:
    f = ClockFollower(PERIOD, 0.5)
    first = f.plan(0.0, 12.34)
    assert first.set_time_s == 12.34 and first.periods == 0
    assert f.plan(12.34, 12.35).periods == 1
    assert f.plan(12.35, 12.35).periods == 0             # nothing due
    assert f.plan(12.35, 12.40).periods == 5             # a burst of due periods
    assert f.plan(12.40, 12.395).periods == 0            # a clock a bit behind: wait


def test_follower_slips_beyond_max_catch_up_and_realigns_on_a_jump_back() -> None:
    f = ClockFollower(PERIOD, 0.5)
    f.plan(0.0, 10.0)
    step = f.plan(10.0, 12.0)                             # 2 s behind: 0.5 s stepped
    assert step.periods == 50 and math.isclose(step.set_time_s, 11.5)
    assert math.isclose(f.slipped_s, 1.5)
    back = f.plan(12.0, 1.0)                              # the owner restarted
    assert back.set_time_s == 1.0 and back.periods == 0 and f.jumps_back == 1


@given(st.floats(0.0, 1e5), st.lists(st.floats(0.0, 0.2), min_size=1, max_size=50))
def test_following_ends_on_the_clock_within_a_period(start: float, steps: list[float]) -> None:
    f = ClockFollower(PERIOD, 0.5)
    sim = 0.0
    plan = f.plan(sim, start)
    sim = plan.set_time_s if plan.set_time_s is not None else sim
    clock = start
    for dt in steps:
        clock += dt
        plan = f.plan(sim, clock)
        if plan.set_time_s is not None:
            sim = plan.set_time_s
        sim += plan.periods * PERIOD
        # never ahead of the clock, never a whole period behind it
        assert -1e-6 <= clock - sim < PERIOD + 1e-6


def _seconds(stamp: object) -> float:
    return stamp.sec + stamp.nanosec * 1e-9  # type: ignore[attr-defined]


def _ns(stamp: object) -> int:
    return stamp.sec * 1_000_000_000 + stamp.nanosec  # type: ignore[attr-defined]


def _sim(ns: str, extra: list[str], tmp_path: Path) -> NodeProcess:
    return NodeProcess("excavator_sim.sim_node", [
        "--ros-args", "--params-file", str(REPO / "config" / "sim.yaml"), "-r", f"__ns:=/{ns}",
        "-p", f"frame_prefix:={ns}/", "-p", "real_time_factor:=1.0", "-p", "marker_rate_hz:=0.0",
        "-p", "terrain.nx:=41", "-p", "terrain.ny:=41", "-p", "terrain.cell_size_m:=0.4",
        *extra], log_dir=tmp_path / ns)


def test_two_machines_stamp_with_the_one_clock(tmp_path: Path) -> None:
    probe = RosTestNode("fleet_clock_probe")
    clocks: list[Clock] = probe.collect(Clock, "/clock", 500)
    states = {ns: probe.collect(JointState, f"/{ns}/joint_states", 500) for ns in ("m1", "m2")}
    diagnostics: list[DiagnosticArray] = probe.collect(DiagnosticArray, "/diagnostics", 50)
    owner = _sim("m1", ["-p", "use_sim_time:=true"], tmp_path)
    follower: NodeProcess | None = None
    try:
        # the owner runs a while first: a follower started later has its own start-up time,
        # which must not become its stamps
        wait_for(lambda: clocks and _seconds(clocks[-1].clock) > 2.0, LIMIT_S,
                 lambda: f"2 s on the owner's /clock\n{owner.log()}")
        follower = _sim("m2", ["-p", "use_sim_time:=true", "-p", "follow_clock:=true"], tmp_path)
        wait_for(lambda: len(states["m2"]) > 300, LIMIT_S,
                 lambda: f"300 joint_states of machine 2\n{follower.log()}")
        probe.wait_endpoints("publishers", "/clock", [("/m1", "sim_node")])
        clock_ns = {_ns(m.clock) for m in list(clocks)}
        for ns in ("m1", "m2"):
            stamps = [_ns(m.header.stamp) for m in list(states[ns])[-200:]]
            # every stamp is a time the clock showed (where this probe missed a /clock, a
            # loaded host's dropped sample, or has not got it yet, nothing is judged)
            foreign = not_shown(stamps, clock_ns, round(PERIOD * 1e9))
            assert not foreign, (ns, foreign[:5], sorted(clock_ns)[-5:])
            assert stamps == sorted(stamps)
        t2 = _seconds(states["m2"][-1].header.stamp)
        assert t2 > 2.0                        # on the owner's time, not its own from 0
        assert abs(_seconds(clocks[-1].clock) - t2) < 0.5
        assert "following /clock from t=" in follower.log()
        assert "/clock followed (follow_clock)" in follower.log()

        # the owner dies: the follower stops stepping (no time of its own) and says why
        owner.proc.send_signal(signal.SIGKILL)
        owner.proc.wait(EVENT_WAIT_S)
        diagnostics.clear()

        def waiting() -> bool:
            return any(s.name.startswith("m2/sim_node") and "waiting for /clock" in s.message
                       for d in list(diagnostics) for s in d.status)
        wait_for(waiting, LIMIT_S, lambda: f"'waiting for /clock' from machine 2\n"
                 f"{follower.log()}")
        # judged by the stamps, not by how many arrived in a while: none is later than the
        # owner's last /clock (this probe may have missed its last one or two)
        last_clock = max(_ns(m.clock) for m in list(clocks))
        beyond = [s for s in (_ns(m.header.stamp) for m in list(states["m2"]))
                  if s > last_clock + round(2 * PERIOD * 1e9)]
        assert not beyond, ("machine 2 kept stepping without the clock", beyond[:5], last_clock)
    finally:
        probe.close()
        owner.stop()
        if follower is not None:
            code = follower.stop()
            assert code == 0, follower.log()
