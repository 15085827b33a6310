"""sim_node's wheeled branch (issue 28): a wheeled machine preset in the simulation. In-process
(MuJoCo, no ROS): the simulation steps the wheeled drive train core under a WheeledCommand, the
MuJoCo base follows it, its wheel and steering joints are the URDF's and the joint states',
a 4WS machine crabs. Over real DDS, sim_node in its own process with
``machine:=wheeled_ackermann_11t``: ``plant/actuation`` wheel torques and steering rates move
and steer the machine to the steady state the core predicts, ``plant/sensors`` carries the
wheels and the steering angles, ``robot_description`` the steered wheels; a stopped actuation,
a NaN torque and a steering rate beyond the limit brake and hold the steering, as on the
tracked machine (test_sim_plant.py). Judged on stamped records, simulated time only."""

from __future__ import annotations

import itertools
import math
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from helpers import REPO, NodeProcess, RosTestNode, ros_param_args, wait_for
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Imu, JointState
from std_msgs.msg import String
from test_sim_plant import Plant

from excavator_sim.drivetrain.grade import attitude
from excavator_sim.drivetrain.wheeled import (
    WHEELS,
    WheeledCommand,
    WheeledGround,
    WheeledVehicle,
)
from excavator_sim.errors import CommandError
from excavator_sim.machines import load_machine
from excavator_sim.sim_config import load_sim_config
from excavator_sim.simulation import ExcavatorSimulation
from excavator_sim.urdf import generate_urdf, main, urdf_from_model

ACK = "wheeled_ackermann_11t"
WS4 = "wheeled_4ws_11t"
LIMIT_S = 90.0
TIMEOUT_S = 1.0            # plant_actuation_timeout_s of the node under test
NAN = math.nan
SMALL_TERRAIN = {"terrain.nx": 81, "terrain.ny": 81, "terrain.cell_size_m": 0.4,
                 "terrain.x0_m": -16.0, "terrain.y0_m": -16.0}
# The drive of the DDS test: rear wheels at 4 kN m, front wheels steered left at 0.3 rad/s up
# to the end stop (0.63 rad): the machine ends on a circle at the drives' flow limit
DRIVE_NM = 4000.0
UP = np.array([0.0, 0.0, 1.0])
STEER_RAD_S = 0.3


def wheeled_sim(preset: str, **overrides: object) -> ExcavatorSimulation:
    machine = load_machine(preset)
    config = load_sim_config(machine=machine, overrides={"drive_mode": "plant",
                                                         "terrain.contact": False,
                                                         **SMALL_TERRAIN, **overrides})
    return ExcavatorSimulation(config, machine.geometry())


def command(sim: ExcavatorSimulation, torque: float, rate: float) -> WheeledCommand:
    assert sim.wheeled is not None
    p = sim.wheeled.params
    return WheeledCommand((torque,) * len(p.driven), (rate,) * len(p.steered), enable=True,
                          brake=False)


# --- in-process: the simulation core ---------------------------------------------------------
def test_the_simulation_steps_the_wheeled_core_and_the_mujoco_base_follows() -> None:
    """The simulation's machine moves as the wheeled drive train core alone (same mass and
    yaw inertia, same commands, same periods) and the MuJoCo base follows it within
    millimetres; the wheel and steering joints are the drive train's."""
    sim = wheeled_sim(ACK)
    assert sim.wheeled is not None and sim.vehicle is sim.wheeled and sim.drivetrain is None
    mass, inertia = sim.base_inertia()
    assert mass == pytest.approx(11124.0 + 6 * 1.0, abs=1.0)   # the preset + 6 light bodies
    core = WheeledVehicle(sim.wheeled.params, mass, inertia)
    go = command(sim, 3000.0, 0.25)
    sim.set_wheeled_command(go)
    for _ in range(300):                 # 3 s, one control period at a time
        sim.step(10)
        core.step(0.01, go, WheeledGround(attitude(core.yaw, UP)))
    v = sim.wheeled
    assert v.x > 1.0 and v.yaw > 0.05    # forward, turning left
    assert (v.x, v.y, v.yaw) == pytest.approx((core.x, core.y, core.yaw), abs=2e-3)
    js = sim.joint_state().as_dict()
    assert js["base_x"][0] == pytest.approx(v.x, abs=0.01)
    assert js["base_y"][0] == pytest.approx(v.y, abs=0.01)
    assert js["base_yaw"][0] == pytest.approx(v.yaw, abs=1e-3)
    r = v.params.geometry.wheel_radius_m
    for w in WHEELS:
        assert js[f"wheel_{w}"][0] == pytest.approx(v.wheels[w].travel_m / r)
        assert js[f"wheel_{w}"][1] * r == pytest.approx(v.wheels[w].speed_m_s)
    for w in ("fl", "fr"):
        assert js[f"steer_{w}"][0] == pytest.approx(v.angle(w)) and 0.5 < v.angle(w) <= 0.63
        assert js[f"steer_{w}"][1] == pytest.approx(v.steering[w].rate_rad_s)
    assert "steer_rl" not in js and "track_left" not in js
    assert v.unconverged == 0 and sim.divergence_count == 0
    # the MuJoCo model's own wheel joints show the same (RViz, renders)
    for w in ("fl", "rr"):
        adr = sim.built.qpos_adr[f"wheel_{w}"]
        assert float(sim.data.qpos[adr]) == pytest.approx(v.wheels[w].travel_m / r, abs=0.2)


def test_a_wheeled_machine_refuses_track_speeds_and_track_commands() -> None:
    sim = wheeled_sim(ACK)
    with pytest.raises(CommandError, match="track speeds refused: this is a wheeled machine"):
        sim.set_track_speeds(0.5, 0.5)
    from excavator_sim.drivetrain.vehicle import DriveCommand

    with pytest.raises(CommandError, match="send a WheeledCommand"):
        sim.set_drive_command(DriveCommand(0.0, 0.0))
    with pytest.raises(CommandError, match="torque of wheel rl is nan"):
        sim.set_wheeled_command(WheeledCommand((NAN, 0.0), (0.0, 0.0)))
    with pytest.raises(CommandError, match=r"3 steering rates for the 2 wheels \['fl', 'fr'\]"):
        sim.set_wheeled_command(WheeledCommand((0.0, 0.0), (0.0, 0.0, 0.0)))
    with pytest.raises(CommandError, match="wheel command refused: drive_mode is plant"):
        sim.set_wheel_command({"rl": 0.5, "rr": 0.5}, {"fl": 0.0, "fr": 0.0})
    tracked = ExcavatorSimulation(load_sim_config(overrides={"drive_mode": "plant",
                                                             **SMALL_TERRAIN}))
    with pytest.raises(CommandError, match="this machine runs on tracks"):
        tracked.set_wheeled_command(WheeledCommand())


def test_a_4ws_machine_crabs_along_its_wheels_at_the_end_stops() -> None:
    """All four wheels steered to their modules' end stop (1.6 rad, 92 deg) and driven: the
    machine moves along the wheels' heading, left and a little back (u / w = cot 1.6), without
    turning, the wheels rolling at its speed."""
    sim = wheeled_sim(WS4)
    assert sim.wheeled is not None
    sim.set_wheeled_command(command(sim, 0.0, 0.35))
    sim.step(5000)                       # 1.6 rad at 0.35 rad/s: 4.6 s
    end_stop = sim.wheeled.params.steering.max_angle_rad
    assert sim.wheeled.steer_angles(WHEELS) == pytest.approx([end_stop] * 4, abs=1e-9)
    sim.set_wheeled_command(command(sim, 1500.0, 0.0))
    sim.step(4000)
    v = sim.wheeled
    u, w, rz = (float(x) for x in v.velocity[:3])
    assert w > 0.5 and abs(rz) < 1e-3 and abs(v.yaw) < 1e-3
    assert u / w == pytest.approx(1.0 / math.tan(end_stop), abs=0.005)
    assert v.y > 1.0
    speeds = v.wheel_speeds(WHEELS)
    assert speeds == pytest.approx([math.hypot(u, w)] * 4, rel=0.03)   # rolling, little slip


def test_the_urdf_carries_the_steered_wheels_and_every_joint_is_in_the_joint_state(
        tmp_path: Path) -> None:
    """The URDF generated from the one geometry source (the preset's undercarriage) has the
    steering joints within the end stops and the wheels as continuous joints, posed where the
    drive train has its wheels; every movable joint is in the joint states."""
    machine = load_machine(ACK)
    assert machine.undercarriage is not None
    params = machine.undercarriage.params
    sim = wheeled_sim(ACK)
    names = set(sim.joint_state().names)
    for text in (generate_urdf(machine.geometry(), wheels=params), urdf_from_model(sim.model)):
        root = ET.fromstring(text)
        joints = {e.get("name"): e for e in root.findall("joint")}
        for w in ("fl", "fr"):
            steer = joints[f"steer_{w}"]
            assert steer.get("type") == "revolute"
            assert steer.find("parent").get("link") == "base_link"       # type: ignore[union-attr]
            limit = steer.find("limit")
            assert limit is not None
            assert float(limit.get("upper", "nan")) == pytest.approx(0.63)
            assert float(limit.get("lower", "nan")) == pytest.approx(-0.63)
            xyz = [float(x) for x in steer.find("origin").get("xyz", "").split()]  # type: ignore[union-attr]
            assert xyz == pytest.approx([*params.geometry.position(w), 0.48])
        for w in WHEELS:
            wheel = joints[f"wheel_{w}"]
            assert wheel.get("type") == "continuous"
            assert [float(x) for x in wheel.find("axis").get("xyz", "").split()] == [0, 1, 0]  # type: ignore[union-attr]
        assert joints["wheel_rl"].find("parent").get("link") == "base_link"  # type: ignore[union-attr]
        assert joints["wheel_fl"].find("parent").get("link") == "knuckle_fl"  # type: ignore[union-attr]
        movable = {n for n, e in joints.items() if e.get("type") != "fixed"}
        assert movable <= names, sorted(movable - names)
        assert not any(e.get("name", "").startswith("track_")
                       for e in root.iter("visual"))
    out = tmp_path / "wheeled.urdf"
    assert main(["--machine", WS4, "-o", str(out)]) == 0
    joints = {e.get("name") for e in ET.parse(out).getroot().findall("joint")}
    assert {f"steer_{w}" for w in WHEELS} | {f"wheel_{w}" for w in WHEELS} <= joints


def predicted_steady_circle() -> tuple[float, float, list[float]]:
    """The core's steady state under the DDS test's drive: (ground speed [m/s], yaw rate
    [rad/s], wheel speeds [m/s])."""
    sim = wheeled_sim(ACK)
    sim.set_wheeled_command(command(sim, DRIVE_NM, STEER_RAD_S))
    sim.step(12000)
    v = sim.wheeled
    assert v is not None
    before = v.ground_speed_m_s
    sim.step(1000)
    assert v.ground_speed_m_s == pytest.approx(before, rel=1e-4)   # steady
    return v.ground_speed_m_s, v.yaw_rate_rad_s, v.wheel_speeds(WHEELS)


# --- sim_node over DDS -----------------------------------------------------------------------
SENSOR_NAMES = ["wheel_fl", "wheel_fr", "wheel_rl", "wheel_rr", "steer_fl", "steer_fr",
                "ground_speed", "drive_ready", "drive_fault", "brake"]
ACTUATION_NAMES = ["wheel_rl", "wheel_rr", "steer_fl", "steer_fr", "drive_enable", "brake"]


def _stamp(msg: JointState | Imu) -> float:
    return msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec


def _value(msg: JointState, name: str, field: str) -> float:
    return float(getattr(msg, field)[list(msg.name).index(name)])


class WheeledPlant(Plant):
    """test_sim_plant's plant link stand-in (actuations at 100 Hz from a thread, what sim_node
    publishes collected), with a wheeled machine's actuation and its joint states and
    robot description."""

    def __init__(self, probe: RosTestNode):
        super().__init__(probe)
        self.joints: list[JointState] = probe.collect(JointState, "joint_states", 200)
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL,
                             reliability=ReliabilityPolicy.RELIABLE)
        self.description: list[String] = probe.collect(String, "robot_description", latched)

    def send(self, torque: float, rate: float,  # type: ignore[override]
             enable: float = 1.0, brake: float = 0.0, torque_rr: float | None = None,
             rate_fr: float | None = None) -> None:
        self.message = JointState(
            name=ACTUATION_NAMES, position=[NAN] * 4 + [enable, brake],
            velocity=[NAN, NAN, rate, rate if rate_fr is None else rate_fr, NAN, NAN],
            effort=[torque, torque if torque_rr is None else torque_rr] + [NAN] * 4)


@pytest.fixture(scope="module")
def plant(tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[tuple[WheeledPlant, NodeProcess]]:
    probe = RosTestNode("wheeled_probe")
    link = WheeledPlant(probe)
    sim = NodeProcess("excavator_sim.sim_node",
                      ["--ros-args", "--params-file", str(REPO / "config" / "sim.yaml"),
                       "-p", f"machine:={ACK}", "-p", "drive_mode:=plant",
                       "-p", "real_time_factor:=1.0", "-p", "use_sim_time:=false",
                       "-p", "marker_rate_hz:=0.0",
                       "-p", f"plant_actuation_timeout_s:={TIMEOUT_S}",
                       *ros_param_args(SMALL_TERRAIN)],
                      log_dir=tmp_path_factory.mktemp("sim_wheeled"))
    try:
        wait_for(lambda: link.sensors and link.imu and link.joints, LIMIT_S,
                 lambda: f"plant/sensors, imu and joint_states from sim_node\n{sim.log()}")
        yield link, sim
    finally:
        link.close()
        probe.close()
        code = sim.stop()
    assert code == 0, sim.log()


def test_at_rest_the_wheels_are_braked_and_the_urdf_has_them(
        plant: tuple[WheeledPlant, NodeProcess]) -> None:
    link, sim = plant
    wait_for(lambda: len(link.sensors) > 20 and link.description, LIMIT_S,
             "20 samples and robot_description")
    msg = link.latest()
    assert list(msg.name) == SENSOR_NAMES
    assert len(msg.position) == len(msg.velocity) == len(msg.effort) == len(SENSOR_NAMES)
    assert _value(msg, "brake", "position") == 1.0      # no actuation yet: braked
    assert _value(msg, "drive_ready", "position") == 1.0
    assert _value(msg, "drive_fault", "position") == 0.0
    assert all(_value(msg, f"wheel_{w}", "velocity") == 0.0 for w in WHEELS)
    assert all(_value(msg, f"steer_{w}", "position") == 0.0 for w in ("fl", "fr"))
    assert math.isnan(_value(msg, "steer_fl", "velocity"))
    stamps = [_stamp(m) for m in link.sensors[-10:]]
    assert all(b - a == pytest.approx(0.01, abs=1e-6) for a, b in itertools.pairwise(stamps))
    names = set(link.joints[-1].name)
    root = ET.fromstring(link.description[-1].data)
    movable = {e.get("name") for e in root.findall("joint") if e.get("type") != "fixed"}
    assert {"steer_fl", "steer_fr", "wheel_fl", "wheel_rr"} <= movable <= names
    assert "on wheels (ackermann)" in sim.log()


def test_torque_and_steering_rates_drive_the_machine_to_the_core_steady_circle(
        plant: tuple[WheeledPlant, NodeProcess]) -> None:
    """Rear wheels at 4 kN m, the front wheels steered left at 0.3 rad/s: the angles rise at
    that rate to the end stop, and the machine settles on the circle the core predicts (speed,
    yaw rate, each wheel's speed within 0.5 % once the speed is within 0.1 %), whenever the
    messages arrived."""
    link, sim = plant
    speed, yaw_rate, wheel_speeds = predicted_steady_circle()
    link.diagnostics.clear()
    start = _stamp(link.latest())
    link.send(DRIVE_NM, STEER_RAD_S)

    def steady() -> list[JointState]:
        rows = [m for m in list(link.sensors) if _stamp(m) > start]
        run: list[JointState] = []
        for m in rows:
            if abs(_value(m, "ground_speed", "velocity") - speed) <= 0.001 * speed:
                run.append(m)
                if _stamp(run[-1]) - _stamp(run[0]) >= 1.0:
                    return run
            else:
                run = []
        return []

    wait_for(steady, LIMIT_S, lambda: f"1 s on the predicted circle ({speed:.4f} m/s); now "
             f"{link.latest().velocity}\n{sim.log()}")
    window = steady()
    for m in window:
        assert _value(m, "steer_fl", "position") == pytest.approx(0.63)   # at the end stop
        assert _value(m, "steer_fr", "position") == pytest.approx(0.63)
        for w, predicted in zip(WHEELS, wheel_speeds, strict=True):
            assert _value(m, f"wheel_{w}", "velocity") == pytest.approx(predicted, rel=0.005)
        assert _value(m, "wheel_rl", "effort") == pytest.approx(DRIVE_NM, rel=0.01)
        assert _value(m, "wheel_fl", "effort") == 0.0        # undriven
        assert _value(m, "brake", "position") == 0.0
    stamps = {_stamp(m) for m in window}
    rates = [i.angular_velocity.z for i in list(link.imu) if _stamp(i) in stamps]
    assert rates and all(r == pytest.approx(yaw_rate, rel=0.005) for r in rates), rates
    # the steering rose at the commanded rate (the valve's 0.05 s lag once past)
    rising = [m for m in list(link.sensors)
              if _stamp(m) > start and 0.1 < _value(m, "steer_fl", "position") < 0.55]
    assert len(rising) > 50
    for a, b in itertools.pairwise(rising):
        dt = _stamp(b) - _stamp(a)
        if dt == pytest.approx(0.01, abs=1e-6):
            rate = (_value(b, "steer_fl", "position") - _value(a, "steer_fl", "position")) / dt
            assert rate == pytest.approx(STEER_RAD_S, rel=0.01)
    # joint_states show the same wheels and steering (robot_state_publisher, RViz)
    js = next(j for j in reversed(link.joints) if _stamp(j) in stamps)
    assert _value(js, "steer_fl", "position") == pytest.approx(0.63)
    sample = next(m for m in window if _stamp(m) == _stamp(js))
    for w in WHEELS:
        assert _value(js, f"wheel_{w}", "velocity") * 0.48 == pytest.approx(
            _value(sample, f"wheel_{w}", "velocity"))
    _, _, values = link.status() or (0, "", {})
    assert values.get("vehicle_model") == "ackermann", values
    # --- the actuation stops: braked to a standstill, the steering held ------------------
    link.silence()
    wait_for(lambda: _value(link.latest(), "brake", "position") == 1.0, LIMIT_S,
             "the brakes to apply without actuation")
    wait_for(lambda: all(_value(link.latest(), f"wheel_{w}", "velocity") == 0.0
                         for w in WHEELS), LIMIT_S, "the braked wheels at rest")
    released = max(_stamp(m) for m in list(link.sensors)
                   if _value(m, "brake", "position") == 0.0)
    braked = [m for m in list(link.sensors) if _stamp(m) > released]
    assert braked and all(_value(m, "steer_fl", "position") == pytest.approx(0.63) for m in braked)
    wait_for(lambda: any("drives braked: no plant/actuation" in m for _, m in link.messages()),
             LIMIT_S, lambda: f"the timeout on /diagnostics (seen {link.messages()[-3:]})")


@pytest.mark.parametrize(("bad", "match"), [
    ({"torque": NAN}, "wheel_rl effort (torque set-point) is nan"),
    ({"rate_fr": 1.0}, "steer_fr velocity (steering rate) 1 is beyond 0.7 rad/s"),
])
def test_a_bad_actuation_is_a_drive_fault_that_brakes_and_holds_the_steering(
        plant: tuple[WheeledPlant, NodeProcess], bad: dict[str, float], match: str) -> None:
    link, _ = plant
    link.send(2000.0, -0.2)             # roll and steer right
    wait_for(lambda: _value(link.latest(), "wheel_rl", "velocity") > 0.3
             and _value(link.latest(), "steer_fl", "position") < 0.3, LIMIT_S,
             "the wheels to roll and steer")
    link.diagnostics.clear()
    kwargs = {"torque": 2000.0, "rate": -0.2, **bad}
    link.send(kwargs.pop("torque"), kwargs.pop("rate"), **kwargs)
    wait_for(lambda: _value(link.latest(), "drive_fault", "position") == 1.0, LIMIT_S,
             "drive_fault in plant/sensors")
    wait_for(lambda: any(lv == 2 and "drive fault" in m for lv, m in link.messages()), LIMIT_S,
             lambda: f"the drive fault on /diagnostics (seen {link.messages()[-3:]})")
    message = next(m for lv, m in link.messages() if lv == 2 and "drive fault" in m)
    assert match in message, message
    wait_for(lambda: all(_value(link.latest(), f"wheel_{w}", "velocity") == 0.0
                         for w in WHEELS), LIMIT_S, "the braked wheels at rest")
    n = len(link.sensors)
    wait_for(lambda: len(link.sensors) > n + 80, LIMIT_S, "80 more plant/sensors")
    faulted = link.sensors[n:]
    for m in faulted:   # the last valid actuation is not reused: no torque, no steering
        assert _value(m, "drive_fault", "position") == 1.0
        assert _value(m, "brake", "position") == 1.0
        assert _value(m, "drive_ready", "position") == 0.0
        assert _value(m, "wheel_rl", "velocity") == 0.0
    # the steering valves closed (their 0.05 s lag: 10 mrad more at 0.2 rad/s), then held
    angles = [_value(m, "steer_fl", "position") for m in faulted[30:]]
    assert max(angles) - min(angles) < 1e-4, angles
    # a valid actuation clears the fault and steers again
    link.send(0.0, 0.3)
    wait_for(lambda: _value(link.latest(), "steer_fl", "position") > max(angles) + 0.05,
             LIMIT_S, "the steering to move again")
    assert _value(link.latest(), "drive_fault", "position") == 0.0
    link.silence()


def test_track_command_is_refused_by_a_wheeled_machine(
        plant: tuple[WheeledPlant, NodeProcess]) -> None:
    link, _ = plant
    link.tracks.publish(JointState(name=["track_left", "track_right"], velocity=[0.5, 0.5]))
    wait_for(lambda: any("track_command refused: this is a wheeled machine" in m
                         for _, m in link.messages()), LIMIT_S,
             lambda: f"the refusal on /diagnostics (seen {link.messages()[-3:]})")

