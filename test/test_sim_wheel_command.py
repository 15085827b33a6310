"""sim_node's ``wheel_command`` (issue 28): a wheeled machine in ``drive_mode`` kinematic moves
and steers as its wheel speeds [m/s] and steering angles [rad] say, with the project's
stale-command rule (``track_command_timeout_s``: the wheels stop, the steering held) and its
rejections. Over real DDS, sim_node in its own process; the kinematics core without ROS.

What the machine did is judged on sim_node's own stamped ``joint_states`` (simulated time),
never on this process's clock."""

from __future__ import annotations

import math
import threading
from pathlib import Path
from typing import Any

import pytest
from helpers import REPO, SMALL_SIM_ARGS, STARTUP_TIMEOUT_S, NodeProcess, RosTestNode, wait_for
from hypothesis import given, settings
from hypothesis import strategies as st
from sensor_msgs.msg import JointState

from excavator_kinematics.vehicle import BodyTwist
from excavator_sim.drivetrain.wheeled_kinematic import KinematicWheels
from excavator_sim.errors import CommandError
from excavator_sim.machines import load_machine

LIMIT_S = STARTUP_TIMEOUT_S  # event waits, start-up included: a bound, not a measurement
ANGLE_TOLERANCE_RAD = math.radians(0.5)


def _wheels(machine: str) -> KinematicWheels:
    under = load_machine(machine).undercarriage
    assert under is not None
    return KinematicWheels(under)


# --- the core --------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["wheeled_ackermann_11t", "wheeled_4ws_11t"]),
       st.floats(-1.5, 1.5), st.floats(-0.6, 0.6), st.floats(-0.3, 0.3))
def test_core_the_steered_wheels_drive_the_models_twist(machine: str, vx: float, vy: float,
                                                        wz: float) -> None:
    """The model's inverse, commanded and held until the steering is there, moves the body
    with the twist the model's direct gives back (the commanded one where feasible); every
    wheel rolls along its heading."""
    w = _wheels(machine)
    inv = w.model.inverse(BodyTwist(vx, 0.0 if w.model.name == "ackermann" else vy, wz))
    w.command(dict(zip(w.drive_names, inv.speeds.tolist(), strict=True)),
              dict(zip(w.steer_names, inv.angles.tolist(), strict=True)))
    for _ in range(600):     # 6 s at 10 ms: from 0 to the end stop (1.6 rad at 0.35 rad/s)
        twist = w.step(0.01)
    for name, a in zip(w.steer_names, inv.angles, strict=True):
        assert w.angles[name] == pytest.approx(float(a), abs=1e-9)
    back = w.model.direct(inv.speeds, inv.angles)
    xr, yr = w.reference
    assert twist == pytest.approx((back.vx + back.wz * yr, back.vy - back.wz * xr, back.wz),
                                  abs=1e-9)
    for name, v in zip(w.drive_names, inv.speeds, strict=True):   # the driven ones as told
        assert w.speeds_m_s[name] == pytest.approx(float(v), abs=1e-6 + 1e-3 * abs(float(v)))


def test_core_refuses_what_the_machine_cannot_do_and_keeps_the_last_command() -> None:
    w = _wheels("wheeled_ackermann_11t")
    w.command({"rl": 0.5, "rr": 0.5}, {"fl": 0.1, "fr": 0.1})
    for bad, words in (({"rl": math.nan}, {}), "finite"), (({"rl": 50.0}, {}), "speed limit"), \
            (({}, {"fl": 1.0}), "end stops"), (({"fl": 0.5}, {}), r"drives \['rl', 'rr'\]"):
        with pytest.raises(CommandError, match=words):
            w.command(*bad)
    w.step(1.0)
    assert w.speeds_m_s["rl"] == pytest.approx(0.5) and w.angles["fl"] == pytest.approx(0.1)
    w.stop()     # stale: wheels stop, the steering stays where it is
    w.step(1.0)
    assert w.twist == (0.0, 0.0, 0.0) and w.angles["fl"] == pytest.approx(0.1)


# --- over DDS --------------------------------------------------------------------------------
def _joints(msg: JointState) -> tuple[dict[str, float], dict[str, float]]:
    return (dict(zip(msg.name, msg.position, strict=True)),
            dict(zip(msg.name, msg.velocity, strict=True)))


def _body(msg: JointState) -> tuple[float, float, float]:
    """base_link's velocity (u, w along its x, y [m/s]) and yaw rate [rad/s]."""
    p, v = _joints(msg)
    c, s = math.cos(p["base_yaw"]), math.sin(p["base_yaw"])
    return (c * v["base_x"] + s * v["base_y"], -s * v["base_x"] + c * v["base_y"],
            v["base_yaw"])


def _t(msg: Any) -> float:
    return float(msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec)


class Sender:
    """A bridge's ``plc/wheel_states`` layout at 50 Hz while ``sending`` is set."""

    def __init__(self, probe: RosTestNode) -> None:
        self.pub = probe.node.create_publisher(JointState, "wheel_command", 10)
        self.msg = JointState()
        self.sending = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def set(self, speeds: dict[str, float], angles: dict[str, float]) -> None:
        self.msg = JointState(name=[*(f"wheel_{w}" for w in speeds),
                                    *(f"steer_{w}" for w in angles)],
                              velocity=[*speeds.values(), *([math.nan] * len(angles))],
                              position=[*([math.nan] * len(speeds)), *angles.values()])
        self.sending.set()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            if self.sending.is_set():
                self.pub.publish(self.msg)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2.0)


def _sim(machine: str, tmp_path: Path) -> NodeProcess:
    return NodeProcess("excavator_sim.sim_node",
                       ["--ros-args", "--params-file", str(REPO / "config" / "sim.yaml"),
                        "-p", f"machine:={machine}", "-p", "use_sim_time:=false",
                        "-p", "track_command_timeout_s:=0.3", *SMALL_SIM_ARGS],
                       log_dir=tmp_path)


@pytest.mark.parametrize(("machine", "twist"), [
    pytest.param("wheeled_4ws_11t", BodyTwist(0.3, 0.4, 0.0), id="4ws-crab"),
    pytest.param("wheeled_ackermann_11t", BodyTwist(0.8, 0.0, 0.15), id="ackermann-turn")])
def test_a_wheeled_machine_moves_and_steers_as_commanded_and_stops_when_commands_stop(
        tmp_path: Path, machine: str, twist: BodyTwist) -> None:
    w = _wheels(machine)
    inv = w.model.inverse(twist)
    speeds = dict(zip(w.drive_names, inv.speeds.tolist(), strict=True))
    angles = dict(zip(w.steer_names, inv.angles.tolist(), strict=True))
    # the body's twist at base_link's origin (the model's is at its reference point)
    xr, yr = w.reference
    u, v, r = twist.vx + twist.wz * yr, twist.vy - twist.wz * xr, twist.wz
    probe = RosTestNode("wheel_command_probe")
    states: list[JointState] = probe.collect(JointState, "joint_states", 50)
    sender = Sender(probe)
    sim = _sim(machine, tmp_path)

    def steered() -> bool:
        p, _ = _joints(states[-1])
        return all(abs(p[f"steer_{n}"] - a) <= ANGLE_TOLERANCE_RAD for n, a in angles.items())

    try:
        wait_for(lambda: states, LIMIT_S, lambda: f"joint_states from sim_node\n{sim.log()}")
        names = set(states[-1].name)
        assert {"wheel_fl", "wheel_fr", "wheel_rl", "wheel_rr"} <= names
        assert {f"steer_{n}" for n in w.params.steered} <= names
        sender.set(speeds, angles)
        wait_for(steered, LIMIT_S,
                 lambda: f"the steering at {angles} (now {_joints(states[-1])[0]})\n{sim.log()}")
        t_steered = _t(states[-1])
        # 2 s of simulated time on the reached angles, judged on sim_node's stamps
        wait_for(lambda: _t(states[-1]) > t_steered + 2.5, LIMIT_S, "2.5 s of simulated time")
        window = [m for m in list(states) if _t(m) > t_steered + 0.5]
        body = [_body(m) for m in window]
        mean = [sum(b[k] for b in body) / len(body) for k in range(3)]
        speed = math.hypot(u, v)
        assert math.hypot(mean[0] - u, mean[1] - v) <= 0.08 * speed, (mean, (u, v, r))
        assert abs(mean[2] - r) <= 0.02, (mean, r)
        for m in window:
            p, vel = _joints(m)
            for n, a in angles.items():
                assert abs(p[f"steer_{n}"] - a) <= ANGLE_TOLERANCE_RAD, (n, p[f"steer_{n}"], a)
            for n, s in speeds.items():   # the driven wheels turn at r omega = the command
                assert vel[f"wheel_{n}"] * w.params.geometry.wheel_radius_m == \
                    pytest.approx(s, abs=0.02), (n, vel[f"wheel_{n}"])
        # --- the commands stop (a cut link): the wheels stop, the steering held ---------------
        sender.sending.clear()
        wait_for(lambda: math.hypot(*_body(states[-1])[:2]) < 1e-3, LIMIT_S,
                 lambda: f"the machine to stop without commands ({_body(states[-1])})")
        n = len(states)
        wait_for(lambda: len(states) > n + 30, LIMIT_S, "30 more joint_states")
        for m in list(states)[n:]:
            p, _ = _joints(m)
            assert all(abs(p[f"steer_{k}"] - a) <= ANGLE_TOLERANCE_RAD
                       for k, a in angles.items()), p
        wait_for(lambda: "wheels stopped: no wheel_command" in sim.log(), LIMIT_S,
                 lambda: f"the stop said in the log\n{sim.log()}")
        # --- a bad command is rejected and named; a track command too -------------------------
        sender.set({**speeds, next(iter(speeds)): math.nan}, angles)
        wait_for(lambda: "wheel_command: wheel_" in sim.log() and "must be finite" in sim.log(),
                 LIMIT_S, lambda: f"the NaN speed rejected\n{sim.log()}")
        assert math.hypot(*_body(states[-1])[:2]) < 1e-3   # it did not move on it
    finally:
        sender.close()
        probe.close()
        code = sim.stop()
    assert code == 0, sim.log()


def test_a_tracked_machine_refuses_wheel_command(tmp_path: Path) -> None:
    probe = RosTestNode("wheel_command_tracked_probe")
    states: list[JointState] = probe.collect(JointState, "joint_states", 10)
    sender = Sender(probe)
    sim = NodeProcess("excavator_sim.sim_node",
                      ["--ros-args", "-p", "use_sim_time:=false", *SMALL_SIM_ARGS],
                      log_dir=tmp_path)
    try:
        wait_for(lambda: states, LIMIT_S, lambda: f"joint_states from sim_node\n{sim.log()}")
        sender.set({"rl": 0.5, "rr": 0.5}, {"fl": 0.1, "fr": 0.1})
        wait_for(lambda: "wheel_command refused: this machine runs on tracks" in sim.log(),
                 LIMIT_S, lambda: f"the refusal\n{sim.log()}")
    finally:
        sender.close()
        probe.close()
        code = sim.stop()
    assert code == 0, sim.log()
