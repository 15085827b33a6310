"""sim_node as the PLC's plant (issue 27, drive_mode plant), in its own process over real DDS:
``plant/actuation`` torques drive the tracks through the drive train and ``plant/sensors``
reports measured speeds and torques; an actuation that stops brakes the machine to a
standstill (on the simulated clock, from stamped messages); a NaN is a drive fault on
/diagnostics that brakes while the simulation keeps publishing; ``imu`` is a valid
sensor_msgs/Imu. The pure rules (parse, timeout, fault latch) are tested without ROS, the
simulation core in plant mode (the MuJoCo base follows the drive train, the bucket's wrench
slows it, the grade comes from the height field) without ROS too."""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray
from helpers import REPO, STARTUP_TIMEOUT_S, NodeProcess, RosTestNode, wait_for
from sensor_msgs.msg import Imu, JointState

from excavator_sim.drivetrain.actuation import (
    ActuationError,
    PlantActuation,
    parse_actuation,
    read_seq,
)
from excavator_sim.drivetrain.vehicle import SAFE_COMMAND, DriveCommand
from excavator_sim.errors import CommandError
from excavator_sim.sim_config import load_sim_config
from excavator_sim.simulation import ExcavatorSimulation

LIMIT_S = STARTUP_TIMEOUT_S  # event waits, start-up included: a bound, not a measurement
TIMEOUT_S = 1.0            # plant_actuation_timeout_s of the node under test
NAN = math.nan
NAMES = ["track_left", "track_right", "drive_enable", "brake"]
SENSOR_NAMES = ["track_left", "track_right", "ground_speed", "drive_ready", "drive_fault",
                "brake"]


# --- the pure rules ------------------------------------------------------------------------
def _parse(effort: list[float], flags: tuple[float, float] = (1.0, 0.0),
           names: list[str] | None = None) -> DriveCommand:
    names = names or NAMES
    position = [NAN, NAN, *flags][:len(names)]
    return parse_actuation(names, position, [NAN] * len(names),
                           [*effort, NAN, NAN][:len(names)], 8000.0)


def test_a_valid_actuation_is_the_drive_command() -> None:
    assert _parse([1000.0, -2000.0]) == DriveCommand(1000.0, -2000.0, enable=True, brake=False)
    assert _parse([0.0, 0.0], (0.0, 1.0)) == DriveCommand(0.0, 0.0, enable=False, brake=True)
    reordered = parse_actuation(["brake", "track_right", "drive_enable", "track_left"],
                                [0.0, NAN, 1.0, NAN], [NAN] * 4, [NAN, 5.0, NAN, 7.0], 8000.0)
    assert reordered == DriveCommand(7.0, 5.0, enable=True, brake=False)


@pytest.mark.parametrize(("effort", "flags", "names", "match"), [
    ([NAN, 0.0], (1.0, 0.0), None, r"track_left effort \(torque set-point\) is nan"),
    ([0.0, math.inf], (1.0, 0.0), None, r"track_right effort .* is inf"),
    ([16001.0, 0.0], (1.0, 0.0), None, r"16001 N m is beyond 16000 N m \(2 x the drive's "
                                       r"torque limit 8000 N m\)"),
    ([0.0, 0.0], (0.5, 0.0), None, r"drive_enable position is 0.5: send 1.0 \(on\) or 0.0"),
    ([0.0, 0.0], (1.0, NAN), None, r"brake position is nan"),
    ([0.0], (1.0, 0.0), ["track_left", "drive_enable", "brake"], r"missing \['track_right'\]"),
    ([0.0, 0.0], (1.0, 0.0), ["track_left", "wheel_fl", "drive_enable", "brake"],
     r"names \['wheel_fl'\] this machine does not have"),
])
def test_a_bad_actuation_names_the_value_the_limit_and_the_fix(
        effort: list[float], flags: tuple[float, float], names: list[str] | None,
        match: str) -> None:
    with pytest.raises(ActuationError, match=match):
        _parse(effort, flags, names)
    with pytest.raises(ActuationError, match=r"4 names but 3 effort values"):
        parse_actuation(NAMES, [NAN] * 4, [NAN] * 4, [0.0] * 3, 8000.0)


def test_the_plant_out_seq_says_whose_actuation_it_is() -> None:
    """The plant link names the PLC's block by its seq (a DINT) and marks a brake of its own
    with NaN; a message without the pseudo-joint (another publisher) is taken as the PLC's."""
    with_seq = [*NAMES, "plant_out_seq"]
    assert read_seq(with_seq, [NAN, NAN, 1.0, 0.0, -7.0]) == (True, -7)
    assert read_seq(with_seq, [NAN, NAN, 0.0, 1.0, NAN]) == (False, None)
    assert read_seq(NAMES, [NAN, NAN, 1.0, 0.0]) == (True, None)
    assert read_seq(with_seq, [NAN, NAN, 1.0, 0.0]) == (True, None)   # lengths: check_names
    # the pseudo-joint is no unknown name; twice is refused as any repeated name
    assert parse_actuation(with_seq, [NAN, NAN, 1.0, 0.0, 3.0], [NAN] * 5,
                           [1.0, 2.0, NAN, NAN, NAN], 8000.0).torque_left_nm == 1.0
    with pytest.raises(ActuationError, match=r"repeated \['plant_out_seq'\]"):
        parse_actuation([*with_seq, "plant_out_seq"], [NAN, NAN, 1.0, 0.0, 3.0, 3.0],
                        [NAN] * 6, [1.0, 2.0, NAN, NAN, NAN, NAN], 8000.0)
    for bad in (0.5, math.inf, 2.0**31, -(2.0**31) - 1):
        with pytest.raises(ActuationError, match=r"plant_out_seq position is .*: send the "
                                                 r"plant_out block's seq \(a DINT"):
            read_seq(with_seq, [NAN, NAN, 1.0, 0.0, bad])


def test_only_the_plcs_actuation_clears_a_drive_fault() -> None:
    """The plant link's own brake (the link lost while the PLC's block was refused) acts but
    leaves the fault latched: the PLC has not answered it yet."""
    plant = PlantActuation(timeout_s=0.2)
    plant.reject("beyond")
    brake = DriveCommand(0.0, 0.0, enable=False, brake=True)
    plant.accept(brake, 1.0, from_plc=False)
    assert plant.fault == "beyond" and plant.command() == brake
    plant.accept(brake, 1.01)
    assert plant.fault == ""


def test_the_actuation_times_out_on_simulated_time_and_a_fault_drops_the_last_one() -> None:
    plant = PlantActuation(timeout_s=0.2)
    assert plant.command() == SAFE_COMMAND          # nothing yet: braked
    go = DriveCommand(100.0, 100.0, enable=True, brake=False)
    plant.accept(go, 1.0)
    assert not plant.check(1.2) and plant.command() == go   # exactly the timeout: fresh
    assert plant.check(1.2001) and plant.command() == SAFE_COMMAND
    assert plant.age_at_timeout_s == pytest.approx(0.2001)
    assert not plant.check(5.0) and plant.timeouts == 1     # once per silence
    plant.accept(go, 5.0)
    assert plant.command() == go
    plant.reject("nan")
    assert plant.fault == "nan" and plant.command() == SAFE_COMMAND
    assert not plant.check(100.0) and plant.command() == SAFE_COMMAND   # not reused, ever
    plant.accept(go, 100.0)
    assert plant.fault == "" and plant.command() == go


# --- the simulation core in plant mode (MuJoCo, no ROS) --------------------------------------
def _plant_sim(**overrides: object) -> ExcavatorSimulation:
    config = load_sim_config(overrides={"drive_mode": "plant", "terrain.contact": False,
                                        "terrain.nx": 81, "terrain.ny": 81,
                                        "terrain.cell_size_m": 0.4, "terrain.x0_m": -16.0,
                                        "terrain.y0_m": -16.0, **overrides})
    return ExcavatorSimulation(config)


def test_the_drive_train_moves_the_mujoco_base_and_feels_the_bucket() -> None:
    """Fixed torques drive the base; the MuJoCo base (joint_states) follows the drive train;
    a soil wrench on the bucket against the travel slows it (the drive train feels the
    bucket); the mass is the model's."""
    sim = _plant_sim()
    mass, inertia = sim.base_inertia()
    assert mass == pytest.approx(8199.9, abs=0.5)      # config/excavator.yaml masses_kg
    assert 1e4 < inertia < 1e5
    drive = DriveCommand(2500.0, 2500.0, enable=True, brake=False)
    sim.set_drive_command(drive)
    sim.step(3000)
    assert sim.drivetrain is not None
    js = sim.joint_state().as_dict()
    assert js["base_x"][0] == pytest.approx(sim.drivetrain.x, abs=0.01) and sim.drivetrain.x > 1
    assert js["track_left"][1] == pytest.approx(sim.drivetrain.tracks[0].speed_m_s)
    free = sim.drivetrain.ground_speed_m_s
    sim.apply_bucket_wrench([-16000.0, 0.0, 0.0], [0.0, 0.0, 0.0])   # > the drive's 15 kN
    sim.step(3000)
    assert sim.drivetrain.ground_speed_m_s < free - 0.3   # decelerating at ~0.1 m/s^2
    assert sim.drivetrain.unconverged == 0
    with pytest.raises(CommandError, match="drive_mode is plant"):
        sim.set_track_speeds(0.5, 0.5)


def test_the_height_under_a_point_is_bilinear_between_the_nodes() -> None:
    sim = _plant_sim()
    g = sim.terrain.grid
    heights = np.zeros((g.nx, g.ny))
    heights[40, 40], heights[41, 40] = 1.0, 2.0
    sim.terrain.set_all(heights)
    x40, y40 = g.x0 + 40 * g.cell_size, g.y0 + 40 * g.cell_size
    assert sim.terrain.height_at_point(x40, y40) == pytest.approx(1.0, abs=1e-4)
    assert sim.terrain.height_at_point(x40 + 0.25 * g.cell_size, y40) == pytest.approx(
        1.25, abs=1e-4)
    assert sim.terrain.height_at_point(x40, y40 + 0.5 * g.cell_size) == pytest.approx(
        0.5, abs=1e-4)
    assert sim.terrain.height_at_point(-1e4, -1e4) == pytest.approx(0.0, abs=1e-4)  # edge


def test_the_grade_comes_from_the_terrain_under_the_machine() -> None:
    """A 10 deg ramp along x in the height field: the attitude (IMU) pitches nose up by 10
    deg, a braked machine holds, and the torque to climb it is m g sin(10 deg) r / 2."""
    sim = _plant_sim(**{"terrain.z_min_m": -10.0, "terrain.z_max_m": 10.0})
    g = sim.terrain.grid
    x = g.x0 + np.arange(g.nx) * g.cell_size
    sim.terrain.set_all(np.tile((math.tan(math.radians(10.0)) * x)[:, None], (1, g.ny)))
    sim.step(20)   # the ground is sampled once a period, after the drive train's step
    reading = sim.imu()
    w, qx, qy, qz = reading.orientation
    pitch = math.asin(2.0 * (w * qy - qz * qx))
    assert pitch == pytest.approx(-math.radians(10.0), abs=1e-6)   # REP-103: nose up < 0
    f = reading.linear_acceleration
    assert (f[0], f[2]) == pytest.approx((9.81 * math.sin(math.radians(10.0)),
                                          9.81 * math.cos(math.radians(10.0))), abs=1e-3)
    sim.step(1000)                     # braked (no actuation): holds
    assert sim.drivetrain is not None and abs(sim.drivetrain.x) < 1e-3
    slope = math.radians(10.0)
    grade = 0.5 * 8200 * 9.81 * math.sin(slope) * 0.30    # at each sprocket
    losses = 0.5 * 8200 * 9.81 * 0.02 * math.cos(slope) * 0.30   # the running gear's 2 %
    back = 0.8 * (grade - losses)
    sim.set_drive_command(DriveCommand(back, back, enable=True, brake=False))
    sim.step(2000)
    assert sim.drivetrain.x < -0.1     # less than the grade takes: rolls back
    up = 1.2 * (grade + losses)
    sim.set_drive_command(DriveCommand(up, up, enable=True, brake=False))
    sim.step(4000)
    assert sim.drivetrain.ground_speed_m_s > 0.1   # a little more: climbs


# --- sim_node over DDS -----------------------------------------------------------------------
def _stamp(msg: JointState | Imu) -> float:
    return msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec


def _value(msg: JointState, name: str, field: str) -> float:
    return float(getattr(msg, field)[list(msg.name).index(name)])


class Plant:
    """The test's plant link: sends actuations at 100 Hz (wall time) from a thread, collects
    what sim_node publishes."""

    def __init__(self, probe: RosTestNode):
        self.sensors: list[JointState] = probe.collect(JointState, "plant/sensors", 200)
        self.imu: list[Imu] = probe.collect(Imu, "imu", 200)
        self.diagnostics: list[DiagnosticArray] = probe.collect(DiagnosticArray,
                                                                "/diagnostics", 50)
        self.pub = probe.node.create_publisher(JointState, "plant/actuation", 10)
        self.tracks = probe.node.create_publisher(JointState, "track_command", 10)
        self.message: JointState | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._send, daemon=True)
        self._thread.start()

    def _send(self) -> None:
        while not self._stop.wait(0.01):
            msg = self.message
            if msg is not None:
                self.pub.publish(msg)

    def send(self, torque_left: float, torque_right: float, enable: float = 1.0,
             brake: float = 0.0, seq: float | None = None) -> None:
        """An actuation, as the plant link's with ``seq`` (``plant_out_seq``; NaN: its own
        brake), as another publisher's without."""
        extra = [] if seq is None else [seq]
        names = NAMES + ["plant_out_seq"] * len(extra)
        self.message = JointState(name=names, position=[NAN, NAN, enable, brake, *extra],
                                  velocity=[NAN] * len(names),
                                  effort=[torque_left, torque_right, NAN, NAN, *[NAN] * len(extra)])

    def silence(self) -> None:
        self.message = None

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2.0)

    def latest(self) -> JointState:
        return self.sensors[-1]

    def status(self) -> tuple[int, str, dict[str, str]] | None:
        for d in reversed(self.diagnostics):
            for s in d.status:
                if s.name.startswith("sim_node") and "sim_time_s" in {kv.key for kv in s.values}:
                    return s.level[0], s.message, {kv.key: kv.value for kv in s.values}
        return None

    def messages(self) -> list[tuple[int, str]]:
        return [(s.level[0], s.message) for d in self.diagnostics for s in d.status
                if s.name.startswith("sim_node")]


@pytest.fixture(scope="module")
def plant(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Plant, NodeProcess]]:
    probe = RosTestNode("plant_probe")
    link = Plant(probe)
    sim = NodeProcess("excavator_sim.sim_node",
                      ["--ros-args", "--params-file", str(REPO / "config" / "sim.yaml"),
                       "-p", "drive_mode:=plant", "-p", "real_time_factor:=1.0",
                       "-p", "use_sim_time:=false", "-p", "marker_rate_hz:=0.0",
                       "-p", f"plant_actuation_timeout_s:={TIMEOUT_S}",
                       "-p", "terrain.nx:=81", "-p", "terrain.ny:=81",
                       "-p", "terrain.cell_size_m:=0.4", "-p", "terrain.x0_m:=-16.0",
                       "-p", "terrain.y0_m:=-16.0"],
                      log_dir=tmp_path_factory.mktemp("sim_plant"))
    try:
        wait_for(lambda: link.sensors and link.imu, LIMIT_S,
                 lambda: f"plant/sensors and imu from sim_node\n{sim.log()}")
        yield link, sim
    finally:
        link.close()
        probe.close()
        code = sim.stop()
    assert code == 0, sim.log()


def test_sensors_and_imu_at_rest_before_any_actuation(plant: tuple[Plant, NodeProcess]) -> None:
    link, _ = plant
    wait_for(lambda: len(link.sensors) > 20 and len(link.imu) > 20, LIMIT_S, "20 samples")
    msg = link.latest()
    assert list(msg.name) == SENSOR_NAMES
    assert len(msg.position) == len(msg.velocity) == len(msg.effort) == 6
    assert math.isnan(_value(msg, "ground_speed", "position"))
    assert all(math.isnan(_value(msg, n, "velocity")) for n in SENSOR_NAMES[3:])
    assert all(math.isnan(_value(msg, n, "effort")) for n in SENSOR_NAMES[2:])
    assert _value(msg, "drive_ready", "position") == 1.0
    assert _value(msg, "drive_fault", "position") == 0.0
    assert _value(msg, "brake", "position") == 1.0      # no actuation yet: braked
    # stamps are simulated time, one publish period apart, the same on both topics
    stamps = [_stamp(m) for m in link.sensors[-10:]]
    assert all(b - a == pytest.approx(0.01, abs=1e-6) for a, b in itertools.pairwise(stamps))
    imu_stamps = {_stamp(m) for m in link.imu}
    assert set(stamps) <= imu_stamps
    imu = link.imu[-1]
    assert imu.header.frame_id == "base_link"
    q = imu.orientation
    assert math.isclose(q.w ** 2 + q.x ** 2 + q.y ** 2 + q.z ** 2, 1.0, rel_tol=1e-9)
    f = imu.linear_acceleration
    assert (f.x, f.y, f.z) == pytest.approx((0.0, 0.0, 9.81), abs=1e-3)   # gravity, at rest
    w = imu.angular_velocity
    assert (w.x, w.y, w.z) == pytest.approx((0.0, 0.0, 0.0), abs=1e-6)


def test_torque_drives_the_tracks_and_a_stopped_actuation_brakes_to_a_standstill(
        plant: tuple[Plant, NodeProcess]) -> None:
    link, sim = plant
    link.send(3000.0, 3000.0)
    # 3 kN m a track on flat firm ground: about 2.3 m/s^2 up to the flow limit (1.35-1.5 m/s);
    # the torque follows its set-point in 0.1 s (first order)
    wait_for(lambda: _value(link.latest(), "track_left", "velocity") > 1.3, LIMIT_S,
             lambda: f"the tracks to accelerate (now {link.latest().velocity})\n{sim.log()}")
    # the record (stamped samples), not the moment the test looked
    window = [m for m in list(link.sensors)
              if 1.0 < _value(m, "track_left", "velocity") < 1.3]
    assert len(window) >= 5, [m.velocity for m in link.sensors[-50:]]
    for m in window:
        for track in ("track_left", "track_right"):
            assert _value(m, track, "effort") == pytest.approx(3000.0, rel=0.01)  # measured
            assert _value(m, track, "position") > 0.0
        assert _value(m, "ground_speed", "velocity") > 0.9
        assert _value(m, "brake", "position") == 0.0
    stamps = {_stamp(m) for m in window}
    accelerating = [i.linear_acceleration.x for i in list(link.imu) if _stamp(i) in stamps]
    assert accelerating and all(1.5 < a < 3.0 for a in accelerating), accelerating
    # --- the actuation stops (the link is cut) ------------------------------------------
    link.silence()
    wait_for(lambda: _value(link.latest(), "brake", "position") == 1.0, LIMIT_S,
             "the brakes to apply without actuation")
    braked = next(m for m in reversed(link.sensors) if _value(m, "brake", "position") == 0.0)
    t_brake = _stamp(braked) + 0.01     # the first period with the brakes applied
    wait_for(lambda: abs(_value(link.latest(), "ground_speed", "velocity")) < 1e-3
             and _stamp(link.latest()) > t_brake + 1.0, LIMIT_S, "a standstill")
    after = [m for m in link.sensors if _stamp(m) >= t_brake]
    stopped = next(m for m in after if abs(_value(m, "ground_speed", "velocity")) < 1e-3)
    assert _stamp(stopped) - t_brake < 1.0                     # stops within 1 s (sim time)
    resting = [m for m in after if _stamp(m) >= _stamp(stopped)]
    assert all(_value(m, "track_left", "velocity") == 0.0 for m in resting)
    travel = [_value(m, "track_left", "position") for m in resting]
    assert max(travel) - min(travel) == 0.0                    # held sprockets
    assert all(_value(m, "brake", "position") == 1.0 for m in resting)
    # the node's own record: braked after the timeout of simulated time without actuation
    wait_for(lambda: any("drives braked: no plant/actuation" in m for _, m in link.messages()),
             LIMIT_S, lambda: f"the timeout on /diagnostics (seen {link.messages()[-3:]})")
    level, message = next((lv, m) for lv, m in link.messages() if "drives braked" in m)
    assert level == 1, message                                  # WARN
    _, _, values = link.status()  # type: ignore[misc]
    age = float(values["plant_actuation_age_at_timeout_s"])
    # (reported to the ms: an age a fraction of a ms past the timeout prints as exactly it)
    assert TIMEOUT_S <= age <= TIMEOUT_S + 0.06, values        # within the check's burst
    assert int(values["plant_actuation_timeouts"]) >= 1
    assert "drives braked" in sim.log()


def test_a_nan_actuation_is_a_drive_fault_that_brakes_while_the_simulation_runs(
        plant: tuple[Plant, NodeProcess]) -> None:
    link, _ = plant
    link.send(2000.0, 2000.0)
    wait_for(lambda: _value(link.latest(), "track_left", "velocity") > 0.3, LIMIT_S,
             "the tracks to move")
    link.send(NAN, 2000.0)
    wait_for(lambda: _value(link.latest(), "drive_fault", "position") == 1.0, LIMIT_S,
             "drive_fault in plant/sensors")
    wait_for(lambda: any(lv == 2 and "drive fault" in m for lv, m in link.messages()), LIMIT_S,
             lambda: f"the drive fault on /diagnostics (seen {link.messages()[-3:]})")
    message = next(m for lv, m in link.messages() if lv == 2 and "drive fault" in m)
    assert "track_left effort (torque set-point) is nan" in message
    msg = link.latest()
    assert _value(msg, "drive_ready", "position") == 0.0
    assert _value(msg, "brake", "position") == 1.0
    # the simulation keeps running and stops the machine; the last valid torque is not used
    wait_for(lambda: _value(link.latest(), "track_left", "velocity") == 0.0, LIMIT_S,
             "the braked tracks at rest")
    n = len(link.sensors)
    wait_for(lambda: len(link.sensors) > n + 50, LIMIT_S, "50 more plant/sensors")
    assert all(_value(m, "track_left", "velocity") == 0.0 for m in link.sensors[n:])
    assert all(_value(m, "drive_fault", "position") == 1.0 for m in link.sensors[n:])
    link.diagnostics.clear()
    wait_for(lambda: link.status() is not None, LIMIT_S, "a status")
    level, text, values = link.status()  # type: ignore[misc]
    assert level == 2 and text.startswith("running: drive fault:"), text
    assert int(values["plant_actuation_faults"]) >= 1 and values["drive_fault"]
    # the plant link's own brake (the link to the PLC lost) acts but is not the PLC's answer:
    # the fault stays latched
    link.send(0.0, 0.0, enable=0.0, brake=1.0, seq=NAN)
    n = len(link.sensors)
    wait_for(lambda: len(link.sensors) > n + 50, LIMIT_S, "50 more plant/sensors")
    assert all(_value(m, "drive_fault", "position") == 1.0 for m in link.sensors[n:])
    # a bad block of the PLC's is named by its seq, as the PLC program counts it
    link.send(1e6, 0.0, seq=-42.0)
    wait_for(lambda: any("plant_out seq -42: plant/actuation track_left torque set-point 1e+06"
                         in m for _, m in link.messages()) or None, LIMIT_S,
             lambda: f"the fault named by its seq (seen {link.messages()[-3:]})")
    # a valid actuation of the PLC's clears the fault and drives again
    link.send(2000.0, 2000.0, seq=-41.0)
    wait_for(lambda: _value(link.latest(), "track_left", "velocity") > 0.3, LIMIT_S,
             "the tracks to move again")
    assert _value(link.latest(), "drive_fault", "position") == 0.0
    link.diagnostics.clear()
    wait_for(lambda: (st := link.status()) is not None and st[0] == 0 and st, LIMIT_S, "OK")
    assert link.status()[2]["plant_actuation_seq"] == "-41"  # type: ignore[index]
    link.silence()


def test_track_command_is_refused_in_plant_mode(plant: tuple[Plant, NodeProcess]) -> None:
    link, _ = plant
    link.tracks.publish(JointState(name=["track_left", "track_right"], velocity=[0.5, 0.5]))
    wait_for(lambda: any("track_command refused: drive_mode is plant" in m
                         for _, m in link.messages()), LIMIT_S,
             lambda: f"the refusal on /diagnostics (seen {link.messages()[-3:]})")


def test_imu_in_kinematic_mode_reads_gravity_at_rest(tmp_path: Path) -> None:
    probe = RosTestNode("imu_probe")
    # in a namespace of its own: the plant-mode node of this module runs too
    imu: list[Imu] = probe.collect(Imu, "/exc1/imu", 50)
    sensors: list[JointState] = probe.collect(JointState, "/exc1/plant/sensors", 10)
    sim = NodeProcess("excavator_sim.sim_node",
                      ["--ros-args", "-r", "__ns:=/exc1",
                       "--params-file", str(REPO / "config" / "sim.yaml"),
                       "-p", "real_time_factor:=0.0", "-p", "use_sim_time:=false",
                       "-p", "marker_rate_hz:=0.0", "-p", "frame_prefix:=exc1/",
                       "-p", "terrain.nx:=41", "-p", "terrain.ny:=41",
                       "-p", "terrain.cell_size_m:=0.4"], log_dir=tmp_path)
    try:
        wait_for(lambda: len(imu) > 20, LIMIT_S, lambda: f"imu from sim_node\n{sim.log()}")
        msg = imu[-1]
        assert msg.header.frame_id == "exc1/base_link"
        f = msg.linear_acceleration
        assert (f.x, f.y, f.z) == pytest.approx((0.0, 0.0, 9.81), abs=1e-3)
        q = msg.orientation
        assert (q.w, q.x, q.y, q.z) == pytest.approx((1.0, 0.0, 0.0, 0.0), abs=1e-6)
        assert not sensors                      # no plant/sensors in kinematic mode
    finally:
        probe.close()
        code = sim.stop()
    assert code == 0, sim.log()
