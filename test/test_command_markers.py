"""Time markers of a scheduled command stream (an empty ``joint_command``): teleop_node with
``command_delay_s`` sends one while it has nothing to command, so sim_node's command lockstep
waits for the stream from teleop_node's start, not from the first real command of a session
(which a starved host could send late: the live run of a replay test then had 61 commands past
their stamp, none awaited). Each side over real DDS, the other played by this test."""

from __future__ import annotations

import itertools
import time

import pytest
from diagnostic_msgs.msg import DiagnosticArray
from helpers import EVENT_WAIT_S, REPO, STARTUP_TIMEOUT_S, NodeProcess, RosTestNode, wait_for
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState
from test_soil_lockstep import clock_now, lockstep_sim_node, running_status, time_stands

POSE = {"swing": 0.0, "boom": 0.5236, "arm": -1.0472, "bucket": 1.2217}  # the initial pose
DELAY_S = 0.5  # teleop_node's command_delay_s [s of sim time]
# sim_node's command lockstep timeout [s of wall time], its range's top: the tests see the
# simulation stand where the markers stop, inside it; a host loaded past both cores took over
# 3 s to bring the simulation 0.3 s on to a marker ahead (it stands there until this timeout)
LOCKSTEP_S = 10.0


def _stamp_s(msg: JointState) -> float:
    return msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec


@pytest.mark.parametrize(("mode", "grid_s", "lead_s"), [
    ("impedance", 0.02, DELAY_S),      # a tick every control period, its command tick + delay
    ("joystick", 0.01, DELAY_S / 4)])  # per joint_states: no Joy answered later is earlier
def test_teleop_sends_markers_while_it_has_nothing_to_command(tmp_path, mode: str,
                                                               grid_s: float,
                                                               lead_s: float) -> None:
    teleop = NodeProcess("excavator_kinematics.teleop_node",
                         ["--ros-args", "--params-file", str(REPO / "config" / "teleop.yaml"),
                          "-p", "use_sim_time:=true", "-p", f"mode:={mode}",
                          "-p", f"command_delay_s:={DELAY_S}"], log_dir=tmp_path)
    probe = RosTestNode("marker_probe")
    commands: list[JointState] = probe.collect(JointState, "joint_command", 1000)
    states = probe.node.create_publisher(JointState, "joint_states", 1000)
    clock = probe.node.create_publisher(Clock, "/clock", 10)
    try:
        wait_for(lambda: states.get_subscription_count() > 0, STARTUP_TIMEOUT_S, teleop.log)
        time.sleep(0.5)
        n = 120
        for k in range(1, n + 1):   # 1.2 s of simulated time, no operator input, no soil
            ns = k * 10_000_000
            c = Clock()
            c.clock.sec, c.clock.nanosec = divmod(ns, 1_000_000_000)
            clock.publish(c)
            msg = JointState()
            msg.header.stamp = c.clock
            msg.name, msg.position = list(POSE), list(POSE.values())
            msg.velocity = [0.0] * 4
            states.publish(msg)
            time.sleep(0.01)
        newest = n * 0.01
        # impedance: a tick waits for its soil wrench until the states are delay - a period
        # past it (none comes here); joystick: every state has its marker
        last_s = (newest - (DELAY_S - grid_s) if mode == "impedance" else newest)
        last_s = round(last_s / grid_s) * grid_s + lead_s
        wait_for(lambda: commands and _stamp_s(commands[-1]) >= last_s - 1e-6, EVENT_WAIT_S,
                 lambda: f"the marker stamped {last_s:.3f} s (last {commands[-1:]})\n"
                 f"{teleop.log()}")
    finally:
        probe.close()
        code = teleop.stop()
    assert code == 0, teleop.log()
    stamps = [_stamp_s(m) for m in commands]
    assert all(not m.name and not m.position and not m.velocity for m in commands), commands[:3]
    assert all(b > a for a, b in itertools.pairwise(stamps))    # in stamp order
    assert all(abs((s - lead_s) / grid_s - round((s - lead_s) / grid_s)) < 1e-6
               for s in stamps), stamps[:5]                                # on its grid
    assert len(stamps) >= 0.5 * (last_s - lead_s) / grid_s, len(stamps)


def test_sim_node_waits_for_markers_and_moves_nothing(tmp_path) -> None:
    """Markers hold sim_node's command lockstep as commands do (the simulated time stops where
    they stop), apply nothing (the machine stays in its pose) and count as no late command."""
    proc = lockstep_sim_node(tmp_path, f"command_lockstep_timeout_s:={LOCKSTEP_S}")
    probe = RosTestNode("marker_sim_probe")
    diagnostics: list[DiagnosticArray] = probe.collect(DiagnosticArray, "/diagnostics")
    joints: list[JointState] = probe.collect(JointState, "joint_states", 10)
    command = probe.node.create_publisher(JointState, "joint_command", 100)
    sent: list[float] = []
    sending = [False]
    clock: list[Clock] = []

    def on_clock(msg: Clock) -> None:   # a marker every 20 ms, 0.2 s ahead
        clock.append(msg)
        t = round(clock_now(clock) / 0.01) * 0.01
        if sending[0] and (not sent or t + 0.2 >= sent[-1] + 0.02 - 1e-9):
            marker = JointState()
            ns = round((t + 0.2) * 1e9)
            marker.header.stamp.sec, marker.header.stamp.nanosec = divmod(ns, 1_000_000_000)
            command.publish(marker)
            sent.append(t + 0.2)

    probe.node.create_subscription(Clock, "/clock", on_clock, 100)
    try:
        wait_for(lambda: clock and clock_now(clock) > 1.0 and joints, STARTUP_TIMEOUT_S, proc.log)
        q0 = dict(zip(joints[-1].name, joints[-1].position, strict=False))
        sending[0] = True
        wait_for(lambda: len(sent) > 50, EVENT_WAIT_S, "the markers")
        sending[0] = False
        held = time_stands(clock, lambda: sent[-1] + 0.01, LOCKSTEP_S - 2.0)
        time.sleep(1.0)
        assert clock_now(clock) == held, "the simulation stepped past the last marker"
        _, values = wait_for(lambda: (s := running_status(diagnostics)) and int(
            s[1]["command_markers"]) >= 50 and s, EVENT_WAIT_S, proc.log)
        assert values["commands_past_stamp"] == "0" and values["command_lockstep"] == "on"
        q = dict(zip(joints[-1].name, joints[-1].position, strict=False))
        assert all(abs(q[n] - q0[n]) < 1e-3 for n in POSE), (q, q0)   # nothing moved
    finally:
        probe.close()
        code = proc.stop()
    assert code == 0, proc.log()


def test_a_late_marker_makes_sim_node_wait_for_its_sender(tmp_path) -> None:
    """A scheduled sender starved from its start sends only markers already past (ci87: the
    session's first command then came past its stamp, nothing awaited). The first late marker
    engages the lockstep: the simulated time stops until the sender sends a stamp ahead, then
    moves on to it; the late markers are counted and are no late command."""
    proc = lockstep_sim_node(tmp_path, f"command_lockstep_timeout_s:={LOCKSTEP_S}")
    probe = RosTestNode("late_marker_probe")
    diagnostics: list[DiagnosticArray] = probe.collect(DiagnosticArray, "/diagnostics")
    command = probe.node.create_publisher(JointState, "joint_command", 100)
    clock: list[Clock] = probe.collect(Clock, "/clock", 100)

    def marker(stamp_s: float) -> None:
        m = JointState()
        m.header.stamp.sec, m.header.stamp.nanosec = divmod(round(stamp_s * 1e9), 1_000_000_000)
        command.publish(m)

    def status(**at_least: int) -> dict[str, str]:
        _, values = wait_for(lambda: (s := running_status(diagnostics)) and all(
            int(s[1][k]) >= n for k, n in at_least.items()) and s, EVENT_WAIT_S, proc.log)
        return values

    def stands() -> float:
        """Where /clock stands: unchanged for 1 s of wall time, then for 1 s more (a held
        simulation publishes no /clock at all; a loaded host only pauses it)."""
        seen = [clock_now(clock), time.monotonic()]

        def still() -> bool:
            if clock_now(clock) != seen[0]:
                seen[:] = [clock_now(clock), time.monotonic()]
            return time.monotonic() - seen[1] >= 1.0

        wait_for(still, EVENT_WAIT_S, lambda: f"/clock to stand (at {clock_now(clock)} s)")
        time.sleep(1.0)
        assert clock_now(clock) == seen[0], "the simulation stepped on without a stamp ahead"
        return seen[0]

    try:
        wait_for(lambda: clock and clock_now(clock) > 1.0
                 and command.get_subscription_count() > 0, STARTUP_TIMEOUT_S, proc.log)
        # the simulation ran freely until now: the sender's first marker is a second behind it
        marker(clock_now(clock) - 1.0)
        status(command_markers_late=1, command_lockstep_waits=1)
        held = stands()  # (within the 10 s the lockstep waits)
        ahead = round(held / 0.01) * 0.01 + 0.3  # caught up: steps to it, then waits again
        marker(ahead)
        time_stands(clock, lambda: ahead + 0.01, LOCKSTEP_S - 2.0)
        values = status(command_markers=2)
        assert values["commands_past_stamp"] == "0" and values["command_lockstep"] == "on"
        assert values["command_lockstep_timeouts"] == "0"
    finally:
        probe.close()
        code = proc.stop()
    assert code == 0, proc.log()
