"""The demo's operator for a wheeled machine (issue 28): drives its :class:`WheeledPath`
through Redis (the bridge's ``ackermann`` or ``4wd4ws`` model, the virtual PLC's speed and
steering loops, the plant link, the simulated wheels), then digs as on the tracked machine.

Only the drive differs from :class:`~excavator_hil.demo.operator.DemoOperator`: the commands
are each leg's twist (longitudinal, lateral, angular), what it records are the wheel speeds and
steering angles (``plant/sensors``) and the PLC's set-points (its control-DB log), judged per
leg by :mod:`excavator_hil.demo.wheeled_record`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
from sensor_msgs.msg import Imu, JointState

from excavator_hil.demo.operator import (
    DRIVE_COMMAND_PERIOD_S,
    SPEED_STEP_M_S,
    DemoOperator,
    commands_not_carried,
    pair_commands_with_writes,
)
from excavator_hil.demo.options import DemoOptions
from excavator_hil.demo.progress import Progress
from excavator_hil.demo.summary import DemoSummary
from excavator_hil.demo.wheeled_path import WheeledPath
from excavator_hil.demo.wheeled_record import WheeledRecord, figures, plot, setpoint_row
from excavator_hil.hil_harness import timed_mset
from excavator_sim.machines import load_machine
from plc_bridge import redis_keys as keys
from plc_bridge.virtual_plc.control import ControlClient

STILL_M_S = 0.01   # every wheel slower than this: the machine stopped after the drive [m/s]


class WheeledDemoOperator(DemoOperator):
    def __init__(self, redis_url: str, plc_control_port: int, options: DemoOptions,
                 machine: str, path: WheeledPath,
                 sim_overrides: dict[str, Any] | None = None) -> None:
        under = load_machine(machine).undercarriage
        assert under is not None, f"{machine} is not a wheeled machine"
        self.model = under.kinematic_model()
        self.wheeled_path = path
        self.record = WheeledRecord(tuple(self.model.wheel_names),
                                    tuple(self.model.steer_names))
        self.ground_distance = 0.0
        self.drive_poses: list[tuple[float, float, float]] = []   # base at start, at end
        self._base_t = math.nan
        super().__init__(redis_url, plc_control_port, options, sim_overrides=sim_overrides)
        self.preset = machine
        # a wheeled machine's simulation runs its drive train (the rendering builds one)
        self.render_overrides = {"drive_mode": "plant"}
        assert self.hil is not None, "the wheeled demo runs with the loop closed"
        self.record.clock = self.hil.clock    # wall -> simulated time, taken while driving

    # --- subscriptions -------------------------------------------------------------------
    def _on_sensors(self, msg: JointState) -> None:
        if self._phase != "drive":
            return
        t = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        v = dict(zip(msg.name, msg.velocity, strict=False))
        p = dict(zip(msg.name, msg.position, strict=False))
        self.record.sensors.append((t, *(v[f"wheel_{w}"] for w in self.record.wheels),
                                    *(p[f"steer_{s}"] for s in self.record.steers)))

    def _on_imu(self, msg: Imu) -> None:
        if self._phase != "drive":
            return
        t = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        self.record.imu.append((t, float(msg.angular_velocity.z)))

    def _on_joints(self, msg: JointState) -> None:
        """As the tracked operator's, and the distance over ground [m] from the base's
        velocity in ``world`` (``base_x``, ``base_y`` [m/s])."""
        super()._on_joints(msg)
        t = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        v = dict(zip(msg.name, msg.velocity, strict=False))
        with self._lock:
            if math.isfinite(self._base_t) and t > self._base_t:
                self.ground_distance += (math.hypot(v.get("base_x", 0.0), v.get("base_y", 0.0))
                                         * (t - self._base_t))
            self._base_t = t

    # --- the drive -----------------------------------------------------------------------
    def _command_twist(self, vx: float, vy: float, wz: float) -> float:
        """The three ARTOF keys in one MSET; when Redis set them (``timed_mset``)."""
        return timed_mset(self.redis, {keys.LONGITUDINAL: f"{vx:.10g}",
                                       keys.LATERAL: f"{vy:.10g}", keys.ANGULAR: f"{wz:.10g}"})

    def _drive(self, check_alive: Callable[[], None]) -> None:
        """Each leg's twist every ``DRIVE_COMMAND_PERIOD_S`` for its duration in simulated
        time while the bridge drives (the longitudinal speed stepped by 0.1 mm/s, so each
        command's arrival in the control DB is recognised and timed: the bridge's latency),
        then a stop.

        The legs' clock stands while the bridge does not report ``running``: a host starved
        past the heartbeat's timeout stops the drive (fail-safe), and a leg timed through that
        stop was cut short while the next ran whole (the S's left turn shortened, its right
        turn not: the machine ended to the right of its start, a fresh-clone run with one
        core busy). So the path keeps its shape on any host; only the stops' own ramps differ."""
        path = self.wheeled_path
        self._phase = "drive"
        self.phase_marks.append((self.sim_time, "drive"))
        plc = ControlClient(self._plc_control_port)
        step = SPEED_STEP_M_S["closed"]
        progress = Progress(path.duration_s, label=self.machine)
        sent: list[tuple[float, tuple[float, ...]]] = []   # (monotonic, the model's speeds)
        t0 = self.sim_time
        self.drive_poses.append(self._base_pose())
        # the loop runs in wall time at real time (the PLC's), plus a loaded host's slack
        deadline = time.monotonic() + 4.0 * path.duration_s + 60.0
        leg_now = -1
        k = 0
        t = 0.0                  # [s of simulated time] driven: while the bridge ran
        last_sim = t0
        while t < path.duration_s:
            check_alive()
            now_sim = self.sim_time
            if self._bridge_running():
                t += max(0.0, now_sim - last_sim)
            last_sim = now_sim
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the wheeled drive reached {t:.1f} s of {path.duration_s:.1f} s of "
                    f"simulated time in time: is sim_node running? bridge status: "
                    f"{self.redis.get(keys.BRIDGE_STATUS)!r}: "
                    f"{self.redis.get(keys.BRIDGE_DETAIL)!r}")
            index, leg = path.at(t)
            if index != leg_now:
                leg_now = index
                self.record.legs.append((self.sim_time, index))
            tw = leg.twist
            vx = tw.vx + step * (k % 10) if tw.vx != 0.0 else tw.vx
            speeds = tuple(float(v) for v in self.model.inverse(
                type(tw)(vx, tw.vy, tw.wz)).speeds)
            sent.append((self._command_twist(vx, tw.vy, tw.wz), speeds))
            k += 1
            progress.update(t, f"drive: {leg.name}", f"{self.ground_distance:.2f} m")
            time.sleep(DRIVE_COMMAND_PERIOD_S)
        self._command_twist(0.0, 0.0, 0.0)
        until = time.monotonic() + 15.0
        while time.monotonic() < until:
            rows = self.record.sensors
            if rows and max(abs(v) for v in rows[-1][1:1 + len(self.record.wheels)]) < STILL_M_S:
                break
            time.sleep(0.05)
        progress.done()
        self.drive_poses.append(self._base_pose())
        since = sent[0][0] if sent else 0.0   # the drive's first command [s, monotonic]
        writes = plc.writes(since)
        self.latency_samples = _latency_samples(sent, writes, self.record.wheels)
        self.not_carried = commands_not_carried(sent, writes,
                                                _wheel_speeds_carried(self.record.wheels))
        self.record.setpoints = [setpoint_row(w, self.record.wheels, self.record.steers)
                                 for w in writes if w.get("refused") is None]
        self.record.modes = plc.modes(since)
        plc.close()

    def _bridge_running(self) -> bool:
        """Whether the bridge reports that it forwards commands (its status key; an
        unreachable Redis or a key gone with a starved bridge's TTL count as not)."""
        try:
            return self.redis.get(keys.BRIDGE_STATUS) == "running"
        except redis.RedisError:
            return False

    def _base_pose(self) -> tuple[float, float, float]:
        """(x [m], y [m], yaw [rad]) of base_link in ``world`` as of the latest joint_states."""
        with self._lock:
            return (self.joints.get("base_x", math.nan), self.joints.get("base_y", math.nan),
                    self.joints.get("base_yaw", math.nan))

    # --- results -------------------------------------------------------------------------
    def summary(self) -> DemoSummary:
        s = super().summary()
        s.machine = self.preset
        s.vehicle_model = self.wheeled_path.model
        s.track_distance_m = self.ground_distance
        s.drive_poses = [list(p) for p in self.drive_poses]
        s.wheel_legs = [vars(f) for f in figures(self.record, self.wheeled_path, self.model)]
        return s

    def plot_drive(self, path: Path) -> bool:
        plot(self.record, self.wheeled_path, self.model, path,
             title=f"{self.preset}: wheel speeds and steering through the PLC's loops "
                   f"({self.wheeled_path.model} model)")
        return True


def _latency_samples(sent: list[tuple[float, tuple[float, ...]]], writes: list[dict[str, Any]],
                     wheels: tuple[str, ...]) -> list[tuple[float, float]]:
    """(command time [s], time until a control-DB write carried its wheel speeds [ms]) per
    command that a write carried (``operator.pair_commands_with_writes``)."""
    return pair_commands_with_writes(sent, writes, _wheel_speeds_carried(wheels))


def _wheel_speeds_carried(wheels: tuple[str, ...]
                          ) -> Callable[[dict[str, Any], tuple[float, ...]], bool]:
    """Whether a control-DB write carries these speeds [m/s] of ``wheels``."""
    def carries(w: dict[str, Any], speeds: tuple[float, ...]) -> bool:
        return all(abs(float(w.get(f"speed_sp_{n}", math.nan)) - v) < 1e-5
                   for n, v in zip(wheels, speeds, strict=True))
    return carries
