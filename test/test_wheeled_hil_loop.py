"""Issue 28's loop end to end for each wheeled machine, every part real and in its own process
but the bridge:

    Redis velocity command -> bridge (model ackermann / 4wd4ws, BridgeCore in this process)
    -> control DB -> virtual PLC (plant_mode external: the machine's speed and steering loops)
    -> plant_out -> plant link -> plant/actuation (wheel torques, steering rates) -> sim_node
    (machine wheeled_ackermann_11t / wheeled_4ws_11t) -> plant/sensors + imu -> plant link ->
    plant_in -> PLC -> monitor DB -> bridge (the model's direct) -> Redis monitor keys.

On firm flat ground, the Ackermann machine turning (v_x 1 m/s at the rear axle, 0.15 rad/s),
the 4WD4WS machine crabbing (0.5 m/s to the left, wheels at 90 deg): the machine's speed
within 3 % (along base_link x; and y for the crab, from joint_states), its yaw rate within
0.02 rad/s, its steering angles within 0.5 deg of the model's inverse, and the Redis monitor
keys (the direct model on the measured wheels) within 3 % of the command and of the machine's
true twist (the simulation's ground truth from joint_states and its IMU). Judged on stamped
records (plant/sensors, imu, joint_states in simulated time), never on this process's clock;
waits are generous for a loaded host."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from helpers import EVENT_WAIT_S, PATIENT_S, REPO, SIM_LOOP_ARGS, ros_parameters_file, wait_for
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import Imu, JointState

from excavator_hil.machine_match import check_machine_and_bridge
from excavator_kinematics.vehicle import BodyTwist
from excavator_sim.machines import load_machine
from plc_bridge import redis_keys as keys

CASES = [pytest.param("wheeled_ackermann_11t", BodyTwist(1.0, 0.0, 0.15), id="ackermann-turn"),
         pytest.param("wheeled_4ws_11t", BodyTwist(0.0, 0.5, 0.0), id="4ws-crab-left"),
         pytest.param("wheeled_4ws_11t", BodyTwist(0.0, 0.0, 0.2), id="4ws-spin"),
         # backwards and to the left: atan2(0.4, -0.3) = 127 deg is past the 92 deg end stops,
         # so the model flips each wheel by pi (-53 deg) and drives it backwards
         pytest.param("wheeled_4ws_11t", BodyTwist(-0.3, 0.4, 0.0), id="4ws-flip-back-left")]
WINDOW_S = 3.0     # the steady-state window [s of simulated time]


class WheeledRecord:
    """plant/sensors, imu and joint_states as received: per stamp [s of simulated time] the
    brake flag, the steering angles [rad] (``steers``), the IMU's yaw rate [rad/s], and the
    body's velocity (u, w) along base_link x, y [m/s] from the base joints."""

    def __init__(self, probe: Any, steers: tuple[str, ...]) -> None:
        self.steers = steers
        self.rows: list[tuple[float, float, list[float]]] = []
        self.yaw_rate: dict[float, float] = {}
        self.body: dict[float, tuple[float, float]] = {}
        probe.node.create_subscription(JointState, "plant/sensors", self._on_sensors,
                                       qos_profile_sensor_data)
        probe.node.create_subscription(Imu, "imu", self._on_imu, qos_profile_sensor_data)
        probe.node.create_subscription(JointState, "joint_states", self._on_joints,
                                       qos_profile_sensor_data)

    @staticmethod
    def _t(msg: Any) -> float:
        return float(msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec)

    def _on_sensors(self, msg: JointState) -> None:
        i = {n: k for k, n in enumerate(msg.name)}
        self.rows.append((self._t(msg), msg.position[i["brake"]],
                          [msg.position[i[s]] for s in self.steers]))

    def _on_imu(self, msg: Imu) -> None:
        self.yaw_rate[self._t(msg)] = msg.angular_velocity.z

    def _on_joints(self, msg: JointState) -> None:
        i = {n: k for k, n in enumerate(msg.name)}
        yaw = msg.position[i["base_yaw"]]
        vx, vy = msg.velocity[i["base_x"]], msg.velocity[i["base_y"]]
        self.body[self._t(msg)] = (math.cos(yaw) * vx + math.sin(yaw) * vy,
                                   -math.sin(yaw) * vx + math.cos(yaw) * vy)


def bridge_file(tmp_path: Path, machine: str) -> Path:
    """The bridge's parameter file for the machine: its model with its geometry, end stops and
    wheel speeds (WheeledUndercarriage.model_parameters)."""
    under = load_machine(machine).undercarriage
    assert under is not None
    return ros_parameters_file(tmp_path / f"plc_{under.vehicle_model}.yaml", {
        "model": under.vehicle_model,
        "vehicle": {under.vehicle_model: dict(under.model_parameters())}})


class WheeledLoop:
    """The loop of one wheeled machine: the bridge (HilRig, its virtual PLC with the machine's
    loops), sim_node with the machine, the plant link, and the record of what sim_node
    published."""

    def __init__(self, machine: str, redis_url: str, spawn: Any, tmp_path: Path,
                 ros_node: Any) -> None:
        from excavator_hil.hil_harness import HilRig

        under = load_machine(machine).undercarriage
        assert under is not None
        self.under = under
        params = bridge_file(tmp_path, machine)
        plant = ros_parameters_file(tmp_path / "virtual_plc_external.yaml", {
            "plant_mode": "external", "plant_watchdog_timeout_s": PATIENT_S,
            "watchdog_timeout_s": PATIENT_S})
        self.rig = HilRig(under.vehicle_model, redis_url, spawn, config_path=str(params),
                          plc_args=["--plant-config", str(plant)])
        try:
            check_machine_and_bridge(machine, self.rig.config)   # the start-up match: passes
            self.record = WheeledRecord(ros_node,
                                        tuple(f"steer_{w}" for w in under.params.steered))
            self.sim = spawn("excavator_sim.sim_node",
                             ["--ros-args", "--params-file", str(REPO / "config" / "sim.yaml"),
                              *SIM_LOOP_ARGS, "-p", f"machine:={machine}",
                              "-p", "plant_actuation_timeout_s:=0.5"])
            self.link = spawn("plc_bridge.plant_link.node",
                              ["--ros-args", "-p", f"plc_port:={self.rig.plc_port}",
                               "-p", f"plc_config_file:={params}"])
            wait_for(lambda: len(self.record.rows) > 10, EVENT_WAIT_S,
                     lambda: f"plant/sensors\n{self.logs()}")
            self.rig.start()
        except BaseException:
            self.rig.close()
            raise

    def logs(self) -> str:
        rig = self.rig
        return (f"sim_node:\n{self.sim.log()[-2000:]}\nplant_link:\n{self.link.log()[-2000:]}"
                f"\nbridge {rig.get(keys.BRIDGE_STATUS)}: {rig.get(keys.BRIDGE_DETAIL)}")

    def drive(self, twist: BodyTwist) -> tuple[list[tuple[float, float, list[float]]], float]:
        """Command ``twist`` and wait for WINDOW_S of simulated time on it: the speed within 3 %,
        the yaw rate within 0.02 rad/s, the steering angles within 0.5 deg of the model's
        inverse. Returns that window's plant/sensors rows and the twist's speed scale [m/s]."""
        rig, record = self.rig, self.record
        rig.command(twist.vx, twist.vy, twist.wz)
        wait_for(lambda: rig.get(keys.BRIDGE_STATUS) == "running", EVENT_WAIT_S,
                 lambda: f"bridge running\n{self.logs()}")
        model = self.under.kinematic_model()
        want = model.inverse(twist)
        assert want.feasible
        target = [float(a) for a in want.angles]      # per steered wheel [rad]
        # u along base_link x is the same at every point of the body: the reference point's
        # v_x; w too where the machine does not turn (the crab); the yaw rate is the body's.
        # The speed scale: the translation's, or for a spin the wheels' (wz times the half
        # diagonal of the wheel rectangle) - base_link is the spin's centre on 4WD4WS
        g = self.under.params.geometry
        scale = max(math.hypot(twist.vx, twist.vy),
                    abs(twist.wz) * 0.5 * math.hypot(g.wheelbase_m, g.track_m))
        tol_angle = math.radians(0.5)

        def on_twist(t: float) -> bool:
            if t not in record.yaw_rate or t not in record.body:
                return False
            u, w = record.body[t]
            return (abs(u - twist.vx) <= 0.03 * scale and abs(record.yaw_rate[t] - twist.wz)
                    <= 0.02 and (twist.wz != 0.0 or abs(w - twist.vy) <= 0.03 * scale)
                    and (twist.vx != 0.0 or twist.vy != 0.0 or abs(w) <= 0.03 * scale))

        def steady() -> list[tuple[float, float, list[float]]]:
            run: list[tuple[float, float, list[float]]] = []
            for row in list(record.rows):
                t, brake, angles = row
                ok = (brake == 0.0 and on_twist(t) and all(
                    abs(a - b) <= tol_angle for a, b in zip(angles, target, strict=True)))
                run = [*run, row] if ok else []
                if run and run[-1][0] - run[0][0] >= WINDOW_S:
                    return run
            return []

        window = wait_for(steady, 150.0, lambda: f"{WINDOW_S} s of simulated time on the "
                          f"commanded twist {twist} (angles {target}); last "
                          f"{record.rows[-3:]}, body {list(record.body.values())[-3:]}\n"
                          f"{self.logs()}")
        assert len(window) > 100
        return window, scale


@pytest.mark.parametrize(("machine", "twist"), CASES)
def test_a_redis_command_drives_the_simulated_wheeled_machine_with_the_commanded_twist(
        redis_server: Any, spawn: Any, tmp_path: Path, ros_node: Any, machine: str,
        twist: BodyTwist) -> None:
    loop = WheeledLoop(machine, redis_server.url, spawn, tmp_path, ros_node)
    rig = loop.rig
    try:
        _, scale = loop.drive(twist)
        logs = loop.logs
        # the Redis monitor keys: the model's direct on the measured wheels, the true twist
        def monitored() -> tuple[float, float, float] | None:
            got = [rig.get(k) for k in (keys.MON_LONGITUDINAL, keys.MON_LATERAL,
                                        keys.MON_ANGULAR)]
            if any(v is None for v in got):
                return None
            return float(got[0] or 0), float(got[1] or 0), float(got[2] or 0)

        record = loop.record

        def true_twist() -> tuple[float, float, float] | None:
            """The simulation's ground truth now: u, w along base_link [m/s], yaw rate."""
            ts = [t for t in list(record.body) if t in record.yaw_rate]
            if not ts:
                return None
            u, w = record.body[max(ts)]
            return u, w, record.yaw_rate[max(ts)]

        def agree(m: tuple[float, float, float] | None,
                  true: tuple[float, float, float] | None) -> bool:
            """The direct model on the measured wheels against the true twist, within 3 %
            (w only where the machine does not turn: base_link is not the model's reference
            point)."""
            return m is not None and true is not None \
                and abs(m[0] - true[0]) <= 0.03 * scale \
                and (twist.wz != 0.0 or abs(m[1] - true[1]) <= 0.03 * scale) \
                and abs(m[2] - true[2]) <= max(0.03 * abs(true[2]), 0.002)

        wait_for(lambda: (m := monitored()) is not None
                 and math.hypot(m[0] - twist.vx, m[1] - twist.vy) <= 0.03 * scale
                 and abs(m[2] - twist.wz) <= max(0.03 * abs(twist.wz), 0.002)
                 and agree(m, true_twist()), EVENT_WAIT_S,
                 lambda: f"the monitor keys at the twist and at the machine's true twist "
                 f"(now {monitored()}, true {true_twist()})\n{logs()}")
    finally:
        rig.close()


def test_ackermann_refuses_a_turn_on_the_spot_stops_the_machine_and_holds_its_steering(
        redis_server: Any, spawn: Any, tmp_path: Path, ros_node: Any) -> None:
    """v_x = 0 with a yaw rate is a command the Ackermann model must refuse: the bridge stops
    (``infeasible_command``, the model's note), the machine comes to a standstill, and its front
    wheels stay at the angles of the turn it was driving (within 0.5 deg) all the way."""
    loop = WheeledLoop("wheeled_ackermann_11t", redis_server.url, spawn, tmp_path, ros_node)
    rig, record = loop.rig, loop.record
    try:
        turn = BodyTwist(1.0, 0.0, 0.15)
        window, _ = loop.drive(turn)
        held = window[-1][2]
        t_refused = window[-1][0]
        rig.command(0.0, 0.0, 0.15)
        wait_for(lambda: rig.get(keys.BRIDGE_STATUS) == "stopped:infeasible_command", EVENT_WAIT_S,
                 lambda: f"the bridge refusing the turn on the spot\n{loop.logs()}")
        assert "cannot turn on the spot" in (rig.get(keys.BRIDGE_DETAIL) or "")

        def standstill() -> float | None:
            """The simulated time [s] from which the machine stood for 1 s, or None."""
            since = None
            for t, (u, w) in sorted(record.body.items()):
                if t <= t_refused:
                    continue
                still = math.hypot(u, w) <= 0.01 and abs(record.yaw_rate.get(t, 0.0)) <= 0.005
                since = (since if since is not None else t) if still else None
                if since is not None and t - since >= 1.0:
                    return since
            return None

        wait_for(lambda: standstill() is not None, EVENT_WAIT_S,
                 lambda: f"the machine standing still (body {list(record.body.values())[-3:]})"
                         f"\n{loop.logs()}")
        after = [angles for t, _, angles in list(record.rows) if t > t_refused]
        assert after, "no plant/sensors after the refusal"
        worst = max(abs(a - h) for angles in after for a, h in zip(angles, held, strict=True))
        assert worst <= math.radians(0.5), (
            f"the steering moved {math.degrees(worst):.2f} deg from the turn's {held} after "
            f"the refusal")
    finally:
        rig.close()
