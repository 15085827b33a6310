"""Ackermann-steered vehicle: steered front wheels, driven rear axle.

Reference point: the rear-axle centre (its velocity has no lateral component), wheelbase ``l``,
front kingpin track ``b_f``, rear track ``b_r``. With ``vx`` != 0 the bicycle angle is
``delta = atan(l*wz/vx)`` and the front wheels satisfy the Ackermann condition
``cot(delta_fl) = cot(delta) - b_f/(2l)``, ``cot(delta_fr) = cot(delta) + b_f/(2l)``
(Jazar, Vehicle Dynamics, 2008, ch. 7). Written with atan2 of the wheels' contact velocities,
which has no cot singularity at ``delta = 0`` and keeps the sign for right turns and reverse:

    delta_fl = atan2(s*l*wz, s*(vx - wz*b_f/2)),   delta_fr = atan2(s*l*wz, s*(vx + wz*b_f/2))

with ``s = sign(vx)`` (reversing turns the wheels the same way, they just roll backwards).
Rear wheels: ``v_rl = vx - wz*b_r/2``, ``v_rr = vx + wz*b_r/2``.
Direct: ``vx = (v_rl + v_rr)/2``, ``tan(delta)`` from the measured front wheel angle(s),
``wz = vx*tan(delta)/l``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from excavator_kinematics.errors import InvalidInputError
from excavator_kinematics.vehicle.base import BodyTwist, WheelCommand
from excavator_kinematics.vehicle.parameters import (
    MAX_LENGTH_M,
    MAX_SPEED_M_S,
    check_keys,
    check_twist,
    held,
    measured,
    read_choice,
    read_float,
)
from excavator_kinematics.vehicle.saturation import common_scale, scale_twist

NAME = "ackermann"
# Below 90 deg: an Ackermann wheel at or past 90 deg cannot roll along its circle.
MAX_STEER_LIMIT_RAD = 1.5
PARAMETERS: dict[str, tuple[float, float, float, str, bool]] = {
    "wheelbase_m": (2.0, 0.0, MAX_LENGTH_M, "m", True),
    "front_track_m": (1.5, 0.0, MAX_LENGTH_M, "m", True),
    "rear_track_m": (1.5, 0.0, MAX_LENGTH_M, "m", True),
    "max_steer_angle_rad": (0.7, 0.0, MAX_STEER_LIMIT_RAD, "rad", True),
    "max_wheel_speed_m_s": (2.0, 0.0, MAX_SPEED_M_S, "m/s", True),
}
STEER_FEEDBACK = ("mean", "fl", "fr")


class AckermannModel:
    """Driven rear wheels ``("rl", "rr")`` [m/s], steered front wheels ``("fl", "fr")`` [rad,
    + left]."""

    name = NAME
    wheel_names: tuple[str, ...] = ("rl", "rr")
    steer_names: tuple[str, ...] = ("fl", "fr")

    def __init__(self, wheelbase_m: float, front_track_m: float, rear_track_m: float,
                 max_steer_angle_rad: float = 0.7, max_wheel_speed_m_s: float = 2.0,
                 steer_feedback: str = "mean") -> None:
        self.wheelbase_m = wheelbase_m
        self.front_track_m = front_track_m
        self.rear_track_m = rear_track_m
        self.max_steer_angle_rad = max_steer_angle_rad
        self.max_wheel_speed_m_s = max_wheel_speed_m_s
        self.steer_feedback = steer_feedback
        # Largest |wz/vx| [1/m]: the inner wheel at the steering limit.
        t = math.tan(max_steer_angle_rad)
        self.max_curvature_1_m = t / (wheelbase_m + 0.5 * front_track_m * t)

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> AckermannModel:
        check_keys(params, (*PARAMETERS, "steer_feedback"), NAME)
        values: dict[str, Any] = {
            name: read_float(params, name, default, low, high, model=NAME, unit=unit,
                             low_open=low_open)
            for name, (default, low, high, unit, low_open) in PARAMETERS.items()}
        values["steer_feedback"] = read_choice(params, "steer_feedback", "mean", STEER_FEEDBACK,
                                               model=NAME)
        return cls(**values)

    def _rear_speeds(self, vx: float, wz: float) -> np.ndarray:
        half = 0.5 * wz * self.rear_track_m
        return np.array([vx - half, vx + half])

    def _stop(self, hold: np.ndarray, note: str, feasible: bool, extra: dict[str, float]
              ) -> WheelCommand:
        return WheelCommand(speeds=np.zeros(2), angles=hold, achieved=BodyTwist(), scale=0.0,
                            feasible=feasible, note=note, extra=extra)

    def inverse(self, twist: BodyTwist, held_angles: np.ndarray | None = None) -> WheelCommand:
        """Setpoints for ``twist`` (at the rear-axle centre).

        - ``vy`` != 0: infeasible (no lateral motion at the rear axle), reported, driven with
          ``vy = 0``.
        - ``vx = 0, wz != 0`` or a front wheel past ``max_steer_angle_rad``: infeasible, stop
          (speeds 0) with the steering held at ``held_angles``.
        - ``vx = wz = 0``: speeds 0, steering held.
        """
        check_twist(twist)
        hold = held(held_angles, 2)
        vx, wz, wb, bf = twist.vx, twist.wz, self.wheelbase_m, self.front_track_m
        notes = []
        if twist.vy != 0.0:
            notes.append(f"lateral velocity {twist.vy:g} m/s is infeasible on Ackermann; "
                         "driving with vy = 0")
        lateral_ok = not notes
        if vx == 0.0:
            if wz == 0.0:
                return self._stop(hold, "; ".join(notes), lateral_ok, {})
            notes.append(f"yaw rate {wz:g} rad/s with vx = 0 is infeasible on Ackermann (it "
                         "cannot turn on the spot); stopping with the steering held")
            return self._stop(hold, "; ".join(notes), False,
                              {"bicycle_angle_rad": math.copysign(math.pi / 2, wz)})
        s = math.copysign(1.0, vx)
        delta = math.atan2(s * wb * wz, abs(vx))
        angles = np.array([math.atan2(s * wb * wz, s * (vx - 0.5 * wz * bf)),
                           math.atan2(s * wb * wz, s * (vx + 0.5 * wz * bf))])
        extra = {"bicycle_angle_rad": delta, "curvature_1_m": wz / vx}
        worst = float(np.max(np.abs(angles)))
        if worst > self.max_steer_angle_rad:
            notes.append(
                f"turn wz/vx = {wz / vx:.6g} 1/m needs a front wheel at {worst:.4f} rad, past "
                f"max_steer_angle_rad = {self.max_steer_angle_rad:g} rad (|wz/vx| <= "
                f"{self.max_curvature_1_m:.6g} 1/m); stopping with the steering held")
            return self._stop(hold, "; ".join(notes), False, extra)
        planar = BodyTwist(vx, 0.0, wz)
        scale = common_scale(self._rear_speeds(vx, wz), self.max_wheel_speed_m_s)
        achieved = scale_twist(planar, scale)
        return WheelCommand(speeds=self._rear_speeds(achieved.vx, achieved.wz), angles=angles,
                            achieved=achieved, scale=scale, feasible=lateral_ok,
                            note="; ".join(notes), extra=extra)

    def curvature_from_angles(self, angles: np.ndarray) -> float:
        """Path curvature ``tan(delta)/l`` [1/m] of the rear-axle centre from the measured front
        wheel angles ``[fl, fr]`` [rad], per ``steer_feedback``."""
        a = measured(angles, 2, "Ackermann front wheel angles", "rad")
        wb, half_bf = self.wheelbase_m, 0.5 * self.front_track_m
        # cot(delta) = cot(delta_fl) + b_f/(2l) = cot(delta_fr) - b_f/(2l), as tan(delta)/l.
        sin, cos = np.sin(a), np.cos(a)
        den = np.array([wb * cos[0] + half_bf * sin[0], wb * cos[1] - half_bf * sin[1]])
        use = {"mean": [0, 1], "fl": [0], "fr": [1]}[self.steer_feedback]
        if np.any(den[use] <= 0.0):
            raise InvalidInputError(
                f"measured front wheel angles {a.tolist()} rad put the turning centre on or "
                "in front of the rear axle's lateral line, outside the Ackermann geometry "
                f"(wheelbase {wb:g} m, front track {self.front_track_m:g} m); check the angle "
                "sensors' zero and sign (+ left)")
        return float(np.mean(sin[use] / den[use]))

    def direct(self, speeds: np.ndarray, angles: np.ndarray) -> BodyTwist:
        """Twist at the rear-axle centre from the rear wheel speeds ``[rl, rr]`` [m/s] and the
        front wheel angles ``[fl, fr]`` [rad]."""
        v = measured(speeds, 2, "Ackermann rear wheel speeds", "m/s")
        vx = float(0.5 * (v[0] + v[1]))
        return BodyTwist(vx, 0.0, vx * self.curvature_from_angles(angles))
