"""teleop_node over real DDS: a scripted joystick (sensor_msgs/Joy from a probe node) drives the
simulated machine in sim_node's process; deadman, a silent joystick (a fault, as it happens),
travel pedals, coordinated mode and the impedance mode's force feedback."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped, WrenchStamped
from helpers import EVENT_WAIT_S, REPO, NodeProcess, RosTestNode, set_parameters, wait_for
from sensor_msgs.msg import JointState, Joy

ENABLE = 5  # deadman button index of the teleop_node under test


@pytest.fixture(scope="module")
def sim_process(tmp_path_factory: pytest.TempPathFactory):
    proc = NodeProcess("excavator_sim.sim_node",
                       ["--ros-args", "--params-file", str(REPO / "config" / "sim.yaml"),
                        "-p", "terrain.nx:=41", "-p", "terrain.ny:=41",
                        "-p", "terrain.cell_size_m:=0.4", "-p", "initial.boom_rad:=0.75",
                        "-p", "initial.arm_rad:=-1.4", "-p", "initial.bucket_rad:=1.5"],
                       log_dir=tmp_path_factory.mktemp("sim_node"))
    yield proc
    assert proc.stop() == 0, proc.log()


def _teleop(tmp_path_factory: pytest.TempPathFactory, name: str, *params: str) -> NodeProcess:
    args = ["--ros-args", "--params-file", str(REPO / "config" / "teleop.yaml")]
    for p in params:
        args += ["-p", p]
    return NodeProcess("excavator_kinematics.teleop_node", args,
                       log_dir=tmp_path_factory.mktemp(name))


@pytest.fixture(scope="module")
def teleop_process(tmp_path_factory: pytest.TempPathFactory, sim_process: NodeProcess):
    proc = _teleop(tmp_path_factory, "teleop", f"buttons.enable:={ENABLE}",
                   "buttons.mode_toggle:=4", "joy_timeout_s:=0.3")
    yield proc
    assert proc.stop() == 0, proc.log()


class Operator:
    """The probe: publishes Joy / joy_travel / hand_pose, records the machine."""

    def __init__(self, probe: RosTestNode):
        self.probe = probe
        self.states: list[JointState] = probe.collect(JointState, "joint_states")
        self.valves: list[JointState] = probe.collect(JointState, "teleop/valve_command")
        self.tracks: list[JointState] = probe.collect(JointState, "track_command")
        self.feedback: list[WrenchStamped] = probe.collect(WrenchStamped,
                                                           "teleop/force_feedback")
        self.diagnostics: list[DiagnosticArray] = probe.collect(DiagnosticArray,
                                                                "/diagnostics")
        self.joy = probe.node.create_publisher(Joy, "joy", 10)
        self.travel = probe.node.create_publisher(Joy, "joy_travel", 10)
        self.hand = probe.node.create_publisher(PoseStamped, "hand_pose", 10)
        self.wrench = probe.node.create_publisher(WrenchStamped, "soil/wrench", 10)

    def q(self, name: str) -> float:
        msg = self.states[-1]
        return msg.position[list(msg.name).index(name)]

    def joints(self) -> np.ndarray:
        return np.array([self.q(n) for n in ("swing", "boom", "arm", "bucket")])

    def send(self, axes: dict[int, float], deadman: bool = True, toggle: bool = False) -> None:
        msg = Joy()
        msg.header.stamp = self.probe.node.get_clock().now().to_msg()
        a = [0.0] * 6
        for k, v in axes.items():
            a[k] = v
        msg.axes = a
        b = [0] * 8
        b[ENABLE] = int(deadman)
        b[4] = int(toggle)
        msg.buttons = b
        self.joy.publish(msg)

    def hold_sticks(self, axes: dict[int, float], seconds: float, **kw: bool) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.send(axes, **kw)
            time.sleep(0.05)  # the joy driver's 20 Hz autorepeat

    def hold_sticks_until(self, axes: dict[int, float], done: Callable[[], bool],
                          what: str, timeout_s: float = EVENT_WAIT_S, **kw: bool) -> None:
        """Hold the sticks (20 Hz autorepeat) until ``done()``: the motion is judged by where
        the machine got, not by how far it got in a wall-clock time (a loaded host runs the
        simulation slower than real time, or holds the joystick back past joy_timeout)."""
        def step() -> bool:
            self.send(axes, **kw)
            time.sleep(0.05)
            return done()
        wait_for(step, timeout_s, what, period=0.0)


@pytest.fixture(scope="module")
def operator(teleop_process: NodeProcess, sim_process: NodeProcess):
    node = RosTestNode("teleop_probe")
    op = Operator(node)
    wait_for(lambda: op.states and op.joy.get_subscription_count() > 0, EVENT_WAIT_S,
             lambda: f"sim_node and teleop_node; logs:\n{sim_process.log()}\n"
                     f"{teleop_process.log()}")
    yield op
    node.close()


START = [0.0, 0.75, -1.4, 1.5]  # swing, boom, arm, bucket [rad]: mid workspace


def _home(op: Operator, q: list[float] = START) -> None:
    """Another commander (as ik_node would) moves the machine while teleop_node is silent."""
    pub = op.probe.node.create_publisher(JointState, "joint_command", 10)
    msg = JointState()
    msg.name = ["swing", "boom", "arm", "bucket"]
    msg.position = [float(v) for v in q]

    def there() -> bool:
        pub.publish(msg)
        return bool(np.abs(op.joints() - np.array(q)).max() < 5e-3)
    wait_for(there, EVENT_WAIT_S, f"the machine at {q}", period=0.2)
    op.probe.node.destroy_publisher(pub)


def _still(op: Operator) -> np.ndarray:
    """Wait until no joint moves more than 1 mrad in 0.3 s; returns the pose."""
    def check() -> bool:
        a = op.joints()
        time.sleep(0.3)
        return bool(np.abs(op.joints() - a).max() < 1e-3)
    wait_for(check, EVENT_WAIT_S, "the machine to stand still")
    return op.joints()


def test_iso_sticks_move_the_named_joints(operator: Operator) -> None:
    _home(operator)
    q0 = _still(operator)
    operator.hold_sticks_until({4: -0.6}, lambda: operator.joints()[1] - q0[1] > 0.1,
                               "ISO right stick back: boom up 0.1 rad")
    q1 = operator.joints()
    assert q1[1] - q0[1] > 0.1, (q0, q1)
    assert np.abs(np.delete(q1 - q0, 1)).max() < 0.02, (q0, q1)
    v = operator.valves[-1]
    spools = dict(zip(v.name, v.position, strict=True))
    assert spools["boom_cylinder"] > 0.3 and spools["arm_cylinder"] == 0.0
    operator.hold_sticks_until({0: 0.6}, lambda: operator.joints()[0] - q1[0] > 0.1,
                               "left stick left: swing left (+) 0.1 rad")
    q2 = operator.joints()
    assert q2[0] - q1[0] > 0.1, (q1, q2)
    operator.hold_sticks({}, 0.5)  # released: the machine holds
    q3 = _still(operator)
    assert abs(q3[1] - q1[1]) < 0.05 and abs(q3[0] - q2[0]) < 0.1


def test_the_deadman_released_stops_the_machine(operator: Operator) -> None:
    q0 = _still(operator)
    operator.hold_sticks({1: -0.6}, 1.0, deadman=False)  # arm in, deadman not held
    assert np.abs(operator.joints() - q0).max() < 2e-3


def test_a_silent_joystick_stops_the_machine(operator: Operator) -> None:
    """The joystick driver dies with the stick deflected: after joy_timeout the machine
    stops where it is (one hold command), it does not run on to the stroke end."""
    q0 = _still(operator)
    operator.hold_sticks_until({1: -0.5}, lambda: operator.joints()[2] - q0[2] < -0.05,
                               "arm in 0.05 rad")  # then silence
    moving = operator.joints()
    assert moving[2] - q0[2] < -0.05
    q_stop = _still(operator)
    assert q_stop[2] - moving[2] > -0.25, (moving, q_stop)  # stopped, not at the stroke end
    assert q_stop[2] > -2.2


def test_travel_pedals_drive_the_tracks(operator: Operator) -> None:
    def base_x() -> float:
        return operator.q("base_x")

    x0 = base_x()

    def pedals() -> bool:
        msg = Joy()
        msg.axes = [0.6, 0.6]
        operator.travel.publish(msg)
        time.sleep(0.05)
        return base_x() - x0 > 0.2
    wait_for(pedals, EVENT_WAIT_S, "the base 0.2 m forward on both pedals", period=0.0)
    assert operator.tracks[-1].name == ["track_left", "track_right"]
    wait_for(lambda: operator.tracks[-1].velocity[0] == 0.0, EVENT_WAIT_S, "a zero track command")

    def stopped() -> bool:  # the tracks' model decelerates; then the base stays put
        a = base_x()
        time.sleep(0.3)
        return abs(base_x() - a) < 3e-3
    wait_for(stopped, EVENT_WAIT_S, "the base to stop after the pedals are released")


def test_mode_toggle_gives_coordinated_tip_motion(operator: Operator) -> None:
    from excavator_kinematics.geometry import default_geometry
    from excavator_kinematics.teleop.jacobian import TaskJacobian

    jac = TaskJacobian(default_geometry())
    _home(operator)
    _still(operator)
    operator.send({}, toggle=True)
    operator.hold_sticks({}, 0.3)
    x0 = jac.task(operator.joints()[1:])
    # left stick forward: tip out, height and angle kept
    operator.hold_sticks_until({1: 0.6}, lambda: jac.task(operator.joints()[1:])[0] - x0[0]
                               > 0.15, "the tip 0.15 m out")
    x1 = jac.task(operator.joints()[1:])
    operator.send({}, toggle=True)  # back to joystick mode
    operator.hold_sticks({}, 0.3)
    assert x1[0] - x0[0] > 0.15, (x0, x1)
    assert abs(x1[1] - x0[1]) < 0.05 * (x1[0] - x0[0]) + 0.01, (x0, x1)
    assert abs(x1[2] - x0[2]) < 0.02, (x0, x1)


def test_bad_joy_input_is_reported_and_holds(operator: Operator) -> None:
    q0 = _still(operator)
    msg = Joy()
    msg.axes = [0.0, -0.8]  # the right stick's axes are missing
    msg.buttons = [0] * 8
    msg.buttons[ENABLE] = 1
    operator.joy.publish(msg)

    def reported() -> bool:
        return any("axes.right_x is axis 3 but the Joy message has 2 axes" in s.message
                   for d in list(operator.diagnostics) for s in d.status)
    wait_for(reported, EVENT_WAIT_S, "the bad Joy reported on /diagnostics")
    time.sleep(0.3)
    assert np.abs(operator.joints() - q0).max() < 2e-3


def test_impedance_mode_follows_the_hand_and_feeds_the_soil_back(
        tmp_path_factory: pytest.TempPathFactory, operator: Operator) -> None:
    proc = _teleop(tmp_path_factory, "teleop_impedance", "mode:=impedance",
                   "feedback.force_scale:=0.001", "feedback.max_force_n:=100.0")
    try:
        wait_for(lambda: operator.hand.get_subscription_count() > 0, EVENT_WAIT_S,
                 lambda: f"teleop_node (impedance); log:\n{proc.log()}")
        _still(operator)
        x0 = operator.joints()
        wrench = WrenchStamped()
        wrench.header.frame_id = "world"
        swing = x0[0]
        wrench.wrench.force.x = -20e3 * math.cos(swing)  # soil pushes the bucket back
        wrench.wrench.force.y = -20e3 * math.sin(swing)
        pose = PoseStamped()
        pose.header.frame_id = "hand_controller"
        pose.pose.orientation.w = 1.0
        n0 = len(operator.feedback)
        end = time.monotonic() + EVENT_WAIT_S
        pose.pose.position.z = 0.02  # hand 2 cm up: the tip 0.2 m up
        def felt() -> list[WrenchStamped]:
            # Feedback that carried a wrench: one the teleop judged too old on arrival (this
            # process starved by a loaded host between two publishes) is fed back as zero, the
            # safe answer, and says nothing about the scaling.
            return [f for f in list(operator.feedback)[n0:]
                    if abs(f.wrench.force.x) + abs(f.wrench.force.y) > 1e-9]

        while time.monotonic() < end and not (len(operator.feedback) > n0 + 50
                                              and len(felt()) > 10
                                              and operator.joints()[1] > x0[1] + 0.02):
            operator.hand.publish(pose)
            operator.wrench.publish(wrench)
            time.sleep(0.02)
        assert len(operator.feedback) > n0 + 50
        forces = np.array([[f.wrench.force.x, f.wrench.force.z] for f in felt()]).reshape(-1, 2)
        assert len(forces) > 10, "no feedback carried the soil's wrench"
        # 20 kN x 1e-3 N/N (the median: soil_node's own wrench on the same topic, where the
        # bucket meets the terrain, may come between two of this test's)
        assert np.median(forces[:, 0]) == pytest.approx(-20.0, rel=0.05)
        assert abs(np.median(forces[:, 1])) < 1.0
        assert operator.joints()[1] > x0[1] + 0.02  # boom went up with the hand
    finally:
        assert proc.stop() == 0, proc.log()


def _set_parameter(operator: Operator, name: str, value: object) -> tuple[bool, str]:
    return set_parameters(operator.probe, "/teleop_node", {name: value}, 20.0)[0]


def test_pattern_changes_at_run_time_and_fixed_parameters_refuse(operator: Operator) -> None:
    ok, reason = _set_parameter(operator, "control_rate_hz", 10.0)
    assert not ok and "read-only parameter: control_rate_hz" in reason
    ok, reason = _set_parameter(operator, "pattern", "jcb")
    assert not ok and "'jcb'" in reason
    ok, reason = _set_parameter(operator, "pattern", "sae")
    assert ok, reason
    try:
        _home(operator)
        q0 = _still(operator)
        # SAE left stick forward: boom down (ISO: arm out)
        operator.hold_sticks_until({1: 0.6}, lambda: operator.joints()[1] - q0[1] < -0.05,
                                   "SAE left stick forward: boom down 0.05 rad")
        q1 = operator.joints()
        assert q1[1] - q0[1] < -0.05, (q0, q1)
        assert np.abs(np.delete(q1 - q0, 1)).max() < 0.01, (q0, q1)
    finally:
        assert _set_parameter(operator, "pattern", "iso")[0]


def test_stale_joint_states_stop_the_commands(operator: Operator,
                                              sim_process: NodeProcess) -> None:
    """sim_node freezes (SIGSTOP) while the stick is held: after state_timeout teleop_node
    sends nothing computed from the stale pose; when the simulator is back, commands resume."""
    import os
    import signal

    _home(operator)
    commands: list[JointState] = operator.probe.collect(JointState, "joint_command")
    _still(operator)
    operator.hold_sticks({1: 0.4}, 0.5)  # arm out
    assert commands
    os.kill(sim_process.proc.pid, signal.SIGSTOP)
    try:
        # the stick held: the commands stop once the last joint_states is state_timeout (0.5 s)
        # old at teleop_node, judged as quiet for 1.5 s (when that is depends on the host: a
        # joint_states still in flight at the SIGSTOP, taken in late by a starved teleop_node,
        # is fresh to it; ci78 saw one command 1 s after the stop) ...
        seen = [len(commands), time.monotonic()]

        def quiet() -> bool:
            if len(commands) != seen[0]:
                seen[:] = [len(commands), time.monotonic()]
            return time.monotonic() - seen[1] >= 1.5
        operator.hold_sticks_until({1: 0.4}, quiet, "teleop_node's commands to stop", 30.0)
        # ... and then none at all while the stick is held
        n = len(commands)
        operator.hold_sticks({1: 0.4}, 1.5)
        assert len(commands) == n, "commands computed from a stale pose"
    finally:
        os.kill(sim_process.proc.pid, signal.SIGCONT)
    wait_for(lambda: (operator.send({1: 0.4}), len(commands) > n)[1], EVENT_WAIT_S,
             "commands again once joint_states are fresh")
    operator.hold_sticks({}, 0.3)


def _status(op: Operator, node: str, after: int = 0) -> list[tuple[str, dict[str, str]]]:
    """``node``'s statuses on /diagnostics (message, values), from the ``after``-th array on."""
    return [(s.message, {kv.key: kv.value for kv in s.values})
            for d in list(op.diagnostics)[after:] for s in d.status if s.name.startswith(node)]


def test_joys_stamped_too_long_ago_are_dropped_and_counted(operator: Operator) -> None:
    """Joys delayed on their way (stamped 1 s before they arrive, max_command_age_s 0.25 s):
    nothing moves, no joint_command is sent, /diagnostics counts every one; fresh Joys act."""
    _home(operator)
    q0 = _still(operator)
    mark = len(operator.diagnostics)
    wait_for(lambda: any(m == "idle" for m, _ in _status(operator, "teleop_node", mark)),
             EVENT_WAIT_S,
             "teleop_node idle")
    _, before = [s for s in _status(operator, "teleop_node", mark) if s[0] == "idle"][-1]
    commands: list[JointState] = operator.probe.collect(JointState, "joint_command")
    n = 20
    for _ in range(n):  # arm in at full deflection, deadman held, but 1 s old
        msg = Joy()
        stamp = operator.probe.node.get_clock().now().nanoseconds - 1_000_000_000
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp, 1_000_000_000)
        msg.axes = [0.0, -1.0, 0.0, 0.0, 0.0, 0.0]
        msg.buttons = [0] * 8
        msg.buttons[ENABLE] = 1
        operator.joy.publish(msg)
        time.sleep(0.05)
    expired0 = int(before["commands_expired"])

    def counted() -> list[tuple[str, dict[str, str]]]:
        return [s for s in _status(operator, "teleop_node", mark)
                if int(s[1]["commands_expired"]) >= expired0 + n]
    wait_for(counted,
             EVENT_WAIT_S, lambda: f"{n} expired Joys counted: {_status(operator, 'teleop_')}")
    _, values = counted()[0]
    # every Joy was judged by then (one publisher, in order): none acted
    assert int(values["commands_expired"]) == expired0 + n
    assert values["commands"] == before["commands"] and not commands
    assert np.abs(operator.joints() - q0).max() < 2e-3
    assert float(values["last_dropped_age_s"]) >= 1.0 and values["last_dropped_topic"] == "joy"
    assert values["max_command_age_s"] == "0.25"
    warned = [m for m, v in _status(operator, "teleop_node", mark)
              if "dropped as too old" in m]
    assert warned and "limit max_command_age_s 0.25 s" in warned[0]
    # the same stick, fresh: the arm moves in
    operator.hold_sticks_until({1: -0.6}, lambda: operator.joints()[2] - q0[2] < -0.05,
                               "fresh Joys: the arm 0.05 rad in")
    assert commands
    operator.hold_sticks({}, 0.3)


def test_sim_node_drops_a_joint_command_held_up_longer_than_its_age_limit(
        operator: Operator, sim_process: NodeProcess) -> None:
    """sim_node's own check (max_command_age_s 1 s, on the time since a command was sent): a
    joint_command published while sim_node is stopped (SIGSTOP) for 1.5 s sets no target when
    it resumes, though its header stamp is fresh; the same command sent then acts."""
    import os
    import signal

    _home(operator)
    pub = operator.probe.node.create_publisher(JointState, "joint_command", 10)
    mark = len(operator.diagnostics)
    wait_for(lambda: _status(operator, "sim_node", mark), EVENT_WAIT_S, "a sim_node status")
    expired0 = int(_status(operator, "sim_node", mark)[-1][1]["commands_expired"])
    msg = JointState()
    msg.name, msg.position = ["swing"], [0.4]
    os.kill(sim_process.proc.pid, signal.SIGSTOP)
    try:
        msg.header.stamp = operator.probe.node.get_clock().now().to_msg()
        pub.publish(msg)
        time.sleep(1.5)  # held up: sim_node takes it >= 1.5 s after it was sent
    finally:
        os.kill(sim_process.proc.pid, signal.SIGCONT)

    def counted() -> list[tuple[str, dict[str, str]]]:
        return [s for s in _status(operator, "sim_node", mark)
                if int(s[1]["commands_expired"]) > expired0]
    wait_for(counted, EVENT_WAIT_S, "the held-up joint_command counted")
    message, values = counted()[0]
    assert int(values["commands_expired"]) == expired0 + 1
    assert float(values["target_swing"]) == pytest.approx(START[0], abs=1e-3)
    assert "dropped as older than max_command_age_s 1 s" in message
    assert float(values["last_dropped_age_s"]) >= 1.5
    assert values["last_dropped_topic"] == "joint_command"
    msg.header.stamp = operator.probe.node.get_clock().now().to_msg()
    pub.publish(msg)
    wait_for(lambda: abs(operator.q("swing") - 0.4) < 0.05,
             EVENT_WAIT_S, "the fresh command to act")
    operator.probe.node.destroy_publisher(pub)
    _home(operator)


def test_impedance_ticks_missed_while_stopped_are_counted_and_capped(
        tmp_path_factory: pytest.TempPathFactory, operator: Operator) -> None:
    """teleop_node in impedance mode is stopped (SIGSTOP) for 0.6 s while the hand is held:
    its control timer misses at least 28 of its 50 Hz ticks, which /diagnostics counts, and
    the model integrates the cap (impedance.max_step_s 0.1 s), not the 0.6 s, in one step."""
    import os
    import signal

    proc = _teleop(tmp_path_factory, "teleop_ticks", "mode:=impedance",
                   "hand_timeout_s:=3.0", "state_timeout_s:=3.0")
    try:
        wait_for(lambda: operator.hand.get_subscription_count() > 0, EVENT_WAIT_S,
                 lambda: f"teleop_node (impedance); log:\n{proc.log()}")
        _still(operator)
        pose = PoseStamped()
        pose.header.frame_id = "hand_controller"
        pose.pose.orientation.w = 1.0
        n0 = len(operator.feedback)
        wait_for(lambda: (operator.hand.publish(pose), len(operator.feedback) > n0 + 10)[1],
                 EVENT_WAIT_S, "force feedback: the hand engaged", period=0.02)
        os.kill(proc.proc.pid, signal.SIGSTOP)
        try:
            time.sleep(0.6)
        finally:
            os.kill(proc.proc.pid, signal.SIGCONT)
        mark = len(operator.diagnostics)

        def after() -> list[dict[str, str]]:
            operator.hand.publish(pose)
            return [v for _, v in _status(operator, "teleop_node", mark)
                    if int(v.get("impedance_steps_capped", 0)) >= 1]
        wait_for(after, EVENT_WAIT_S, lambda: f"the stop counted; log:\n{proc.log()}", period=0.02)
        values = after()[-1]
        assert int(values["impedance_missed_ticks"]) >= 28  # 0.6 s / 20 ms - 2
        assert float(values["impedance_time_dropped_s"]) >= 0.6 - 0.1 - 0.04
    finally:
        assert proc.stop() == 0, proc.log()
