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
from excavator_kinematics.vehicle.base import (
    LATERAL_DROPPED,
    STEER_LIMIT,
    YAW_WITHOUT_SPEED,
    BodyTwist,
    WheelCommand,
    WheelCommands,
)
from excavator_kinematics.vehicle.parameters import (
    MAX_LENGTH_M,
    MAX_SPEED_M_S,
    check_keys,
    check_twist,
    check_twists,
    floats,
    held_floats,
    held_rows,
    measured_rows,
    read_choice,
    read_float,
)
from excavator_kinematics.vehicle.saturation import common_scales, scale_for

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

    def _rear_speeds(self, vx: np.ndarray, wz: np.ndarray) -> np.ndarray:
        half = 0.5 * wz * self.rear_track_m
        return np.stack([vx - half, vx + half], axis=-1)

    def inverse_many(self, vx: Any, vy: Any, wz: Any, held_angles: Any = None
                     ) -> WheelCommands:
        """Setpoints for N twists (1-D arrays [m/s], [m/s], [rad/s]) at the rear-axle centre;
        ``held_angles`` (2,) or (N, 2) [rad]. Rows that cannot be driven are stopped with the
        steering held (``YAW_WITHOUT_SPEED``, ``STEER_LIMIT``); a lateral velocity is dropped
        (``LATERAL_DROPPED``)."""
        vx, vy, wz = check_twists(vx, vy, wz)
        hold = held_rows(held_angles, vx.size, 2)
        wb, bf = self.wheelbase_m, self.front_track_m
        s = np.where(vx < 0.0, -1.0, 1.0)
        angles = np.stack([np.arctan2(s * wb * wz, s * (vx - 0.5 * wz * bf)),
                           np.arctan2(s * wb * wz, s * (vx + 0.5 * wz * bf))], axis=-1)
        standstill = vx == 0.0
        no_speed = standstill & (wz != 0.0)
        too_tight = ~standstill & (np.maximum(np.abs(angles[:, 0]), np.abs(angles[:, 1]))
                                   > self.max_steer_angle_rad)
        stop = no_speed | too_tight
        hold_rows = stop | standstill
        angles[hold_rows] = hold[hold_rows]
        planar_wz = np.where(stop, 0.0, wz)
        planar_vx = np.where(stop, 0.0, vx)
        scale = common_scales(self._rear_speeds(planar_vx, planar_wz), self.max_wheel_speed_m_s)
        scale[stop] = 0.0
        achieved = np.stack([planar_vx * scale, np.zeros_like(vx), planar_wz * scale], axis=-1)
        reasons = (np.where(vy != 0.0, LATERAL_DROPPED, 0) | np.where(no_speed,
                   YAW_WITHOUT_SPEED, 0) | np.where(too_tight, STEER_LIMIT, 0))
        return WheelCommands(speeds=self._rear_speeds(achieved[:, 0], achieved[:, 2]),
                             angles=angles, achieved=achieved, scale=scale,
                             feasible=reasons == 0, reasons=reasons)

    def bicycle_angle(self, twist: BodyTwist) -> float:
        """``delta = atan(l*wz/vx)`` [rad] of the equivalent single front wheel, signed for
        right turns and reverse (+-pi/2 for a turn on the spot)."""
        s = -1.0 if twist.vx < 0.0 else 1.0
        return math.atan2(s * self.wheelbase_m * twist.wz, abs(twist.vx))

    def _wheel_angles(self, vx: float, wz: float) -> tuple[float, float]:
        s = -1.0 if vx < 0.0 else 1.0
        wb, half_bf = self.wheelbase_m, 0.5 * self.front_track_m
        return (math.atan2(s * wb * wz, s * (vx - wz * half_bf)),
                math.atan2(s * wb * wz, s * (vx + wz * half_bf)))

    def inverse(self, twist: BodyTwist, held_angles: np.ndarray | None = None) -> WheelCommand:
        """Setpoints for ``twist`` (at the rear-axle centre).

        - ``vy`` != 0: infeasible (no lateral motion at the rear axle), reported, driven with
          ``vy = 0``.
        - ``vx = 0, wz != 0`` or a front wheel past ``max_steer_angle_rad``: infeasible, stop
          (speeds 0) with the steering held at ``held_angles``.
        - ``vx = wz = 0``: speeds 0, steering held.

        Plain-Python per-cycle path; ``inverse_many`` is the vectorized twin.
        """
        check_twist(twist)
        hold = held_floats(held_angles, 2)
        vx, wz = float(twist.vx), float(twist.wz)
        extra = {"bicycle_angle_rad": self.bicycle_angle(twist)}
        notes = []
        if twist.vy != 0.0:
            notes.append(f"lateral velocity {twist.vy:g} m/s is infeasible on Ackermann; "
                         "driving with vy = 0")
        angles: tuple[float, ...] | list[float] = hold
        stop = False
        if vx == 0.0 and wz != 0.0:
            stop = True
            notes.append(f"yaw rate {wz:g} rad/s with vx = 0 is infeasible on Ackermann (it "
                         "cannot turn on the spot); stopping with the steering held")
        elif vx != 0.0:
            extra["curvature_1_m"] = wz / vx
            angles = self._wheel_angles(vx, wz)
            worst = max(abs(angles[0]), abs(angles[1]))
            if worst > self.max_steer_angle_rad:
                stop, angles = True, hold
                notes.append(
                    f"turn wz/vx = {wz / vx:.6g} 1/m needs a front wheel at {worst:.4f} rad, "
                    f"past max_steer_angle_rad = {self.max_steer_angle_rad:g} rad (|wz/vx| <= "
                    f"{self.max_curvature_1_m:.6g} 1/m); stopping with the steering held")
        half_br = 0.5 * self.rear_track_m
        if stop:
            scale, vx, wz = 0.0, 0.0, 0.0
        else:
            scale = scale_for([vx - wz * half_br, vx + wz * half_br], self.max_wheel_speed_m_s)
            vx, wz = vx * scale, wz * scale
        return WheelCommand(speeds=np.array([vx - wz * half_br, vx + wz * half_br]),
                            angles=np.array(angles, dtype=float),
                            achieved=BodyTwist(vx, 0.0, wz), scale=scale,
                            feasible=not notes, note="; ".join(notes), extra=extra)

    def curvatures(self, angles: Any) -> np.ndarray:
        """Path curvature ``tan(delta)/l`` [1/m] of the rear-axle centre from measured front
        wheel angles, (N, 2) or (2,) ``[fl, fr]`` [rad], per ``steer_feedback``: shape (N,)."""
        a = measured_rows(angles, 2, "Ackermann front wheel angles", "rad")
        wb, half_bf = self.wheelbase_m, 0.5 * self.front_track_m
        # cot(delta) = cot(delta_fl) + b_f/(2l) = cot(delta_fr) - b_f/(2l), as tan(delta)/l.
        sin, cos = np.sin(a), np.cos(a)
        den = np.stack([wb * cos[:, 0] + half_bf * sin[:, 0],
                        wb * cos[:, 1] - half_bf * sin[:, 1]], axis=-1)
        use = {"mean": [0, 1], "fl": [0], "fr": [1]}[self.steer_feedback]
        if np.any(den[:, use] <= 0.0):
            row = int(np.flatnonzero(np.any(den[:, use] <= 0.0, axis=1))[0])
            raise InvalidInputError(
                f"measured front wheel angles {a[row].tolist()} rad put the turning centre on or "
                "in front of the rear axle's lateral line, outside the Ackermann geometry "
                f"(wheelbase {wb:g} m, front track {self.front_track_m:g} m); check the angle "
                "sensors' zero and sign (+ left)")
        kappa = sin[:, use] / den[:, use]
        curvature: np.ndarray = (0.5 * (kappa[:, 0] + kappa[:, 1]) if len(use) == 2
                                 else kappa[:, 0])
        return curvature

    def curvature_from_angles(self, angles: np.ndarray) -> float:
        """``curvatures`` of one measurement ``[fl, fr]`` [rad]: [1/m] (plain Python)."""
        a_fl, a_fr = floats(angles, 2, "Ackermann front wheel angles", "rad")
        wb, half_bf = self.wheelbase_m, 0.5 * self.front_track_m
        sides = {"fl": (a_fl, wb * math.cos(a_fl) + half_bf * math.sin(a_fl)),
                 "fr": (a_fr, wb * math.cos(a_fr) - half_bf * math.sin(a_fr))}
        use = ("fl", "fr") if self.steer_feedback == "mean" else (self.steer_feedback,)
        if any(sides[k][1] <= 0.0 for k in use):
            self.curvatures(np.array([a_fl, a_fr]))  # raises the documented error
        return sum(math.sin(sides[k][0]) / sides[k][1] for k in use) / len(use)

    def direct_many(self, speeds: Any, angles: Any) -> np.ndarray:
        """(N, 3) twists at the rear-axle centre from (N, 2) rear wheel speeds ``[rl, rr]``
        [m/s] and (N, 2) front wheel angles ``[fl, fr]`` [rad]."""
        v = measured_rows(speeds, 2, "Ackermann rear wheel speeds", "m/s")
        kappa = self.curvatures(angles)
        if kappa.shape != (len(v),):
            raise InvalidInputError(f"Ackermann direct: {len(v)} speed rows but {kappa.size} "
                                    "angle rows")
        vx = 0.5 * (v[:, 0] + v[:, 1])
        return np.stack([vx, np.zeros_like(vx), vx * kappa], axis=-1)

    def direct(self, speeds: np.ndarray, angles: np.ndarray) -> BodyTwist:
        """Twist at the rear-axle centre from the rear wheel speeds ``[rl, rr]`` [m/s] and the
        front wheel angles ``[fl, fr]`` [rad]."""
        v_rl, v_rr = floats(speeds, 2, "Ackermann rear wheel speeds", "m/s")
        vx = 0.5 * (v_rl + v_rr)
        return BodyTwist(vx, 0.0, vx * self.curvature_from_angles(angles))
