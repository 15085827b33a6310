"""Whether the joystick still speaks, for scheduled teleoperation (``command_delay_s`` > 0,
Joys stamped in simulated time): judged in simulated time, never by how long the host took.

A Joy is answered when the machine's state of its stamp has arrived. When the simulation
stood meanwhile (its lockstep waiting, a loaded host), the answer came more than
``joy_timeout_s`` of wall time after the Joy arrived, and teleop_node answered it with a hold
("joystick silent") where a replay of the same session, on a faster host, moved the machine.
Now the Joy answered at its stamp is the input of that moment, and silence is the newest Joy's
stamp more than ``joy_timeout_s`` of simulated time behind the clock. teleop_node over real
DDS; the simulation (``/clock``, ``joint_states``) and the joystick are this test's."""

from __future__ import annotations

import time

from helpers import EVENT_WAIT_S, REPO, NodeProcess, RosTestNode, wait_for
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState, Joy

POSE = {"swing": 0.0, "boom": 0.5236, "arm": -1.0472, "bucket": 1.2217}
DELAY_S = 0.5         # command_delay_s [s of simulated time]
JOY_TIMEOUT_S = 0.5   # config/teleop.yaml
PERIOD_S = 0.01       # the simulation's publish period here [s]


def _stamp_s(msg: JointState) -> float:
    return msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec


class Simulation:
    """``/clock`` and ``joint_states`` at a standing pose, stepped by the test."""

    def __init__(self, probe: RosTestNode) -> None:
        self.clock = probe.node.create_publisher(Clock, "/clock", 10)
        self.states = probe.node.create_publisher(JointState, "joint_states", 1000)
        self.k = 0

    def step_to(self, t_s: float) -> None:
        while (self.k + 1) * PERIOD_S <= t_s + 1e-9:
            self.k += 1
            c = Clock()
            c.clock.sec, c.clock.nanosec = divmod(self.k * 10_000_000, 1_000_000_000)
            self.clock.publish(c)
            msg = JointState()
            msg.header.stamp = c.clock
            msg.name, msg.position = list(POSE), list(POSE.values())
            msg.velocity = [0.0] * len(POSE)
            self.states.publish(msg)
            time.sleep(0.002)


def test_a_scheduled_joy_answered_late_moves_and_silence_is_judged_in_simulated_time(
        tmp_path) -> None:
    teleop = NodeProcess("excavator_kinematics.teleop_node",
                         ["--ros-args", "--params-file", str(REPO / "config" / "teleop.yaml"),
                          "-p", "use_sim_time:=true", "-p", "mode:=joystick",
                          "-p", f"command_delay_s:={DELAY_S}",
                          "-p", f"joy_timeout_s:={JOY_TIMEOUT_S}"], log_dir=tmp_path)
    probe = RosTestNode("liveness_probe")
    commands: list[JointState] = probe.collect(JointState, "joint_command", 2000)
    joy = probe.node.create_publisher(Joy, "joy", 10)
    sim = Simulation(probe)
    try:
        wait_for(lambda: sim.states.get_subscription_count() > 0
                 and joy.get_subscription_count() > 0, EVENT_WAIT_S, teleop.log)
        sim.step_to(1.0)
        wait_for(lambda: commands and _stamp_s(commands[-1]) >= 1.0, EVENT_WAIT_S,
                 lambda: f"teleop_node's markers up to 1 s\n{teleop.log()}")
        # the arm stick out, stamped 1.2 s: answered once the state of 1.2 s is there
        msg = Joy()
        msg.axes, msg.buttons = [0.0, 0.6, 0.0, 0.0, 0.0, 0.0], [0] * 8
        msg.header.stamp.sec, msg.header.stamp.nanosec = 1, 200_000_000
        joy.publish(msg)
        time.sleep(3 * JOY_TIMEOUT_S)   # the simulation stands: wall time only passes
        sim.step_to(1.3)
        wait_for(lambda: any(m.name for m in commands), EVENT_WAIT_S,
                 lambda: f"the Joy's command\n{teleop.log()}")
        first = next(m for m in commands if m.name)
        assert abs(_stamp_s(first) - (1.2 + DELAY_S)) < 1e-6, _stamp_s(first)
        arm = dict(zip(first.name, first.velocity, strict=True))["arm"]
        assert arm != 0.0, f"the Joy answered with a hold: {first}\n{teleop.log()}"
        assert "hold: joystick silent" not in teleop.log()
        # no Joy since: silent once the clock is joy_timeout_s of simulated time past its stamp
        sim.step_to(1.2 + JOY_TIMEOUT_S - 0.05)
        time.sleep(0.5)
        assert "hold: joystick silent" not in teleop.log()
        sim.step_to(1.2 + JOY_TIMEOUT_S + 0.1)
        wait_for(lambda: "hold: joystick silent" in teleop.log(), EVENT_WAIT_S,
                 lambda: f"the hold once silent\n{teleop.log()}")
    finally:
        probe.close()
        code = teleop.stop()
    assert code == 0, teleop.log()
    held = [m for m in commands if m.name and _stamp_s(m) > _stamp_s(first)]
    assert held and all(v == 0.0 for v in held[-1].velocity), held[-1:]
