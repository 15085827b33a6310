"""The teleoperation core the node wraps: operator inputs + measured joints -> joint command.

The simulator (and a position-controlled machine) takes joint *positions* with optional speed
caps (``joint_command``). Rate control is put on that interface the way a valve behaves:
- a moving joint gets the target ``q_measured + rate * command_lead_s`` (clipped to the joint's
  limits) and the speed cap ``|rate|``: the machine moves at the commanded rate, and a joint
  stalled by the soil is never asked for more than ``lead`` ahead (no wind-up);
- a joint whose rate returns to zero is held where it stops: ``q + q_dot * stop_time_s``
  (latched once, like a closing spool), until it is moved again.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from excavator_kinematics.errors import ConfigError, KinematicsError
from excavator_kinematics.geometry import ExcavatorGeometry
from excavator_kinematics.inverse_kinematics import InverseKinematics
from excavator_kinematics.linkage import JOINT_NAMES, Linkage
from excavator_kinematics.teleop.control_patterns import (
    FUNCTIONS,
    function_demands,
    pattern,
    task_demands,
)
from excavator_kinematics.teleop.coordinated import (
    CoordinatedController,
    CoordinatedResult,
    CoordinatedSettings,
)
from excavator_kinematics.teleop.impedance import (
    FeedbackScaling,
    HandMapping,
    ImpedanceModel,
    ImpedanceParams,
)
from excavator_kinematics.teleop.jacobian import TaskJacobian
from excavator_kinematics.teleop.joystick import JoyLayout, Shaping, TravelLayout
from excavator_kinematics.teleop.ticks import ControlTicks
from excavator_kinematics.teleop.valves import FlowLimits, Hydraulics, ValveCommand

MODES = ("joystick", "coordinated", "impedance")
LIMIT_INSET_RAD = 1e-4  # targets stay this far inside the joint limits


@dataclass(frozen=True)
class TeleopSettings:
    """Everything the core needs besides the geometry and the flow limits (units in names)."""

    mode: str = "joystick"
    pattern: str = "iso"
    shaping: Shaping = field(default_factory=Shaping)
    layout: JoyLayout = field(default_factory=JoyLayout)
    travel: TravelLayout = field(default_factory=TravelLayout)
    travel_speed_fraction: float = 1.0
    command_lead_s: float = 0.3
    stop_time_s: float = 0.05
    max_tip_speed_m_s: float = 0.5
    max_bucket_rate_rad_s: float = 0.6
    coordinated: CoordinatedSettings = field(default_factory=CoordinatedSettings)
    impedance: ImpedanceParams = field(default_factory=ImpedanceParams)
    feedback: FeedbackScaling = field(default_factory=FeedbackScaling)
    position_scale: float = 10.0   # impedance: machine metres per hand metre
    angle_scale: float = 1.0       # impedance: bucket radians per hand radian
    control_period_s: float = 0.02  # 1 / control_rate_hz: the impedance model's tick
    impedance_max_step_s: float = 0.1  # the most model time one control callback integrates

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"mode {self.mode!r} is unknown: set mode to one of {list(MODES)}")
        pattern(self.pattern)  # raises on an unknown name
        for name in ("command_lead_s", "max_tip_speed_m_s", "max_bucket_rate_rad_s"):
            v = getattr(self, name)
            if not math.isfinite(v) or v <= 0.0:
                raise ConfigError(f"{name} = {v:.6g} must be a positive number")
        if not 0.0 <= self.stop_time_s <= 1.0:
            raise ConfigError(f"stop_time_s = {self.stop_time_s:.6g} outside 0..1 s")
        if not 0.0 < self.travel_speed_fraction <= 1.0:
            raise ConfigError(f"travel.speed_fraction = {self.travel_speed_fraction:.6g} "
                              "outside 0 < f <= 1 (of tracks.speed_limit_m_s)")


@dataclass(frozen=True)
class MachineState:
    """Measured joints: q, q_dot = (swing, boom, arm, bucket) [rad, rad/s]; base yaw in world
    [rad]."""

    q: np.ndarray
    qd: np.ndarray
    base_yaw: float = 0.0


@dataclass(frozen=True)
class JointCommand:
    """Joint targets [rad] and speed caps [rad/s] (0 = none: hold) for swing/boom/arm/bucket."""

    positions: dict[str, float]
    velocities: dict[str, float]
    valve: ValveCommand
    info: dict[str, object]


class TeleopCore:
    """Joysticks (rate), coordinated and impedance control of one machine."""

    def __init__(self, geometry: ExcavatorGeometry, limits: FlowLimits,
                 settings: TeleopSettings | None = None, linkage: Linkage | None = None):
        self.geometry = geometry
        self.linkage = linkage or Linkage(geometry)
        self.settings = settings or TeleopSettings()
        self.limits = limits
        self.hydraulics = Hydraulics(self.linkage, limits)
        self.jacobian = TaskJacobian(geometry)
        self.coordinated = CoordinatedController(self.jacobian, self.linkage, self.hydraulics,
                                                 self.settings.coordinated)
        self.ik = InverseKinematics(geometry, self.linkage)
        self.assignments = pattern(self.settings.pattern)
        self.mode = self.settings.mode
        self._hold: dict[str, float | None] = dict.fromkeys(FUNCTIONS)
        self.impedance = ImpedanceModel(self.settings.impedance)
        self.hand = HandMapping(self.settings.position_scale, self.settings.angle_scale)
        self._last_x0: np.ndarray | None = None
        self._last_q: np.ndarray | None = None
        # the impedance model advances by the control periods that actually passed
        self.impedance_ticks = ControlTicks(self.settings.control_period_s,
                                            self.settings.impedance_max_step_s)

    # --- limits --------------------------------------------------------------------------
    def joint_limits(self, name: str) -> tuple[float, float]:
        lo, hi = (self.geometry.swing_limits_rad if name == "swing"
                  else self.linkage.joint_limits[name])
        return lo + LIMIT_INSET_RAD, hi - LIMIT_INSET_RAD

    def clip(self, name: str, value: float) -> float:
        lo, hi = self.joint_limits(name)
        return min(max(value, lo), hi)

    def release_holds(self) -> None:
        """Forget the latched hold positions: the next command latches from the pose it sees
        (call it when the operator stops commanding; someone else may move the machine)."""
        self._hold = dict.fromkeys(FUNCTIONS)

    def set_mode(self, mode: str) -> None:
        if mode not in MODES:
            raise ConfigError(f"mode {mode!r} is unknown: expected one of {list(MODES)}")
        if mode != self.mode:
            self.mode = mode
            self._hold = dict.fromkeys(FUNCTIONS)
            self.hand.release()

    # --- rate modes ----------------------------------------------------------------------
    def stick_command(self, axes: Sequence[float], state: MachineState) -> JointCommand:
        """Joy axes -> joint command in the current rate mode (``joystick`` or
        ``coordinated``)."""
        sticks = self.settings.layout.sticks(axes, self.settings.shaping)
        q = np.asarray(state.q, dtype=float)
        info: dict[str, object] = {"mode": self.mode}
        if self.mode == "coordinated":
            d = task_demands(self.assignments, sticks)
            s = self.settings
            task_rate = np.array([d["r"] * s.max_tip_speed_m_s, d["z"] * s.max_tip_speed_m_s,
                                  d["alpha"] * s.max_bucket_rate_rad_s])
            result = self.coordinated.solve(q[1:], task_rate)
            rates = dict(zip(JOINT_NAMES, result.rates.tolist(), strict=True))
            rates["swing"] = d["swing"] * self.limits.swing_speed_rad_s
            valve = self.hydraulics.from_joint_rates(rates, q[1:])
            info.update(self._coordinated_info(result, task_rate))
        else:
            valve = self.hydraulics.from_demands(function_demands(self.assignments, sticks),
                                                 q[1:])
            info["flow_scale"] = valve.flow_scale
        return self._rate_command(valve, state, info)

    def hold_command(self, state: MachineState, reason: str) -> JointCommand:
        """Every joint held where it stops (deadman released, joystick silent)."""
        valve = self.hydraulics.from_demands({}, np.asarray(state.q, float)[1:])
        return self._rate_command(valve, state, {"mode": self.mode, "hold": reason})

    @staticmethod
    def _coordinated_info(result: CoordinatedResult, task_rate: np.ndarray) -> dict[str, object]:
        return {"sigma_min_m": round(result.sigma_min, 4), "damped": result.damped,
                "locked": ",".join(result.locked), "rate_scale": round(result.scale, 4),
                "task_rate": task_rate.round(4).tolist(),
                "expected_task_rate": result.expected_task_rate.round(4).tolist()}

    def _rate_command(self, valve: ValveCommand, state: MachineState,
                      info: dict[str, object]) -> JointCommand:
        s = self.settings
        positions, caps = {}, {}
        for k, name in enumerate(FUNCTIONS):
            rate = float(valve.joint_rate[name])
            q, qd = float(state.q[k]), float(state.qd[k])
            if rate != 0.0:
                self._hold[name] = None
                positions[name] = self.clip(name, q + rate * s.command_lead_s)
                caps[name] = abs(rate)
            else:
                hold = self._hold[name]
                if hold is None:
                    hold = self._hold[name] = self.clip(name, q + qd * s.stop_time_s)
                positions[name] = float(hold)
                caps[name] = 0.0
        return JointCommand(positions, caps, valve, info)

    # --- travel --------------------------------------------------------------------------
    def travel_command(self, axes: Sequence[float], buttons: Sequence[int]) -> tuple[float, float]:
        """Pedals / buttons -> (track_left, track_right) speeds [m/s], forward positive."""
        left, right = self.settings.travel.demands(axes, buttons, self.settings.shaping)
        v = self.limits.track_speed_m_s * self.settings.travel_speed_fraction
        return left * v, right * v

    # --- impedance -----------------------------------------------------------------------
    def task(self, state: MachineState) -> np.ndarray:
        return self.jacobian.task(np.asarray(state.q, float)[1:])

    def impedance_command(self, hand: np.ndarray | None, soil_force: np.ndarray,
                          state: MachineState, now_s: float) -> tuple[JointCommand, np.ndarray]:
        """One control callback of impedance teleoperation at ``now_s`` [s, the control clock:
        the timer's tick, wall or simulated time]: the model advances by the control periods
        since the previous callback (:class:`.ControlTicks`: late and missed ticks keep the
        model's time, at most ``impedance_max_step_s`` per callback).

        ``hand`` = the device's (x, z, pitch) or None (no fresh pose: the set-point is held);
        ``soil_force`` = the soil's generalised force on X (:func:`.soil_force_in_task`).
        Returns the joint command and the workspace force [N, N, N m] (the impedance spring's
        pull when the model's X had to be stopped at the machine's reach or joint limits)."""
        x_meas = self.task(state)
        if not self.hand.engaged:
            if hand is None:
                return self.hold_command(state, "no hand pose"), np.zeros(3)
            self.hand.engage(hand, x_meas)
            self.impedance.reset(x_meas)
            self.impedance_ticks.restart()
            self._last_x0 = x_meas.copy()
            self._last_q = np.asarray(state.q, float).copy()
        x0 = self.hand.setpoint(hand) if hand is not None else self._last_x0
        assert x0 is not None and self._last_q is not None
        self._last_x0 = x0
        x_prev = self.impedance.x.copy()
        dt = self.impedance_ticks.advance(now_s)
        x = self.impedance.step(x0, soil_force, dt) if dt > 0.0 else x_prev.copy()
        swing = float(state.q[0])
        workspace = np.zeros(3)
        try:
            sol = self.ik.solve((x[0] * math.cos(swing), x[0] * math.sin(swing), x[1]), x[2])
            q_cmd = sol.q
            self._last_q = q_cmd
        except KinematicsError as exc:
            # The model stops at the boundary; the operator feels the spring to the set-point.
            self.impedance.reset(x_prev)
            workspace = self.settings.impedance.k * (x_prev - x0)
            q_cmd = self._last_q
            info_err = str(exc)
        else:
            info_err = ""
        positions = {"swing": self.clip("swing", swing if self._hold["swing"] is None
                                        else float(self._hold["swing"]))}
        if self._hold["swing"] is None:
            self._hold["swing"] = positions["swing"]
        for k, name in enumerate(JOINT_NAMES, start=1):
            positions[name] = self.clip(name, float(q_cmd[k]))
        rates = {n: (positions[n] - float(state.q[k]))
                 / max(self.settings.command_lead_s, dt)
                 for k, n in enumerate(FUNCTIONS)}
        valve = self.hydraulics.from_joint_rates(rates, np.asarray(state.q, float)[1:])
        info = {"mode": "impedance", "x": x.round(4).tolist(), "x0": np.round(x0, 4).tolist(),
                "workspace_limit": info_err}
        return JointCommand(positions, dict.fromkeys(FUNCTIONS, 0.0), valve, info), workspace
