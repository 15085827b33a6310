"""Four-wheel-drive, four-wheel-steer (4WD4WS) vehicle: every wheel driven and steered.

Reference point: the centre of the wheel rectangle; wheels at ``(+-l/2, +-b/2)`` in the order
fl, fr, rl, rr. Wheel i rolls along its contact velocity
``v_ix = vx - wz*y_i``, ``v_iy = vy + wz*x_i``: speed ``hypot(v_ix, v_iy)``, angle
``atan2(v_iy, v_ix)``; an angle past the steering limit is flipped by pi with the speed negated
(same contact velocity, wheel rolling backwards). Any twist - straight, crab, spin in place,
turning centre inside the wheelbase - is covered, unlike the seed's ``sgn(ydot)`` and
``R = v/w`` form.

Direct model: least squares over the four wheels' contact velocities (exact for consistent
measurements, since the wheel positions sum to zero):
``vx = mean(v_i cos d_i)``, ``vy = mean(v_i sin d_i)``,
``wz = sum(x_i v_i sin d_i - y_i v_i cos d_i) / sum(x_i^2 + y_i^2)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from excavator_kinematics.errors import InvalidInputError
from excavator_kinematics.vehicle.base import STEER_LIMIT, BodyTwist, WheelCommand, WheelCommands
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
    read_float,
)
from excavator_kinematics.vehicle.saturation import common_scales, row_max, scale_for

NAME = "4wd4ws"
PARAMETERS: dict[str, tuple[float, float, float, str, bool]] = {
    "wheelbase_m": (2.0, 0.0, MAX_LENGTH_M, "m", True),
    "track_m": (1.5, 0.0, MAX_LENGTH_M, "m", True),
    "max_steer_angle_rad": (math.pi / 2, 0.0, math.pi, "rad", True),
    "max_wheel_speed_m_s": (2.0, 0.0, MAX_SPEED_M_S, "m/s", True),
}
# A wheel slower than this [m/s] is at the turning centre: its angle is undefined, keep it.
STANDSTILL_M_S = 1e-12


class FourWheelSteerModel:
    """Wheels ``("fl", "fr", "rl", "rr")``: speeds [m/s] and steering angles [rad, + left]."""

    name = NAME
    wheel_names: tuple[str, ...] = ("fl", "fr", "rl", "rr")
    steer_names: tuple[str, ...] = ("fl", "fr", "rl", "rr")

    def __init__(self, wheelbase_m: float, track_m: float,
                 max_steer_angle_rad: float = math.pi / 2,
                 max_wheel_speed_m_s: float = 2.0) -> None:
        self.wheelbase_m = wheelbase_m
        self.track_m = track_m
        self.max_steer_angle_rad = max_steer_angle_rad
        self.max_wheel_speed_m_s = max_wheel_speed_m_s
        hl, hb = 0.5 * wheelbase_m, 0.5 * track_m
        self.x = np.array([hl, hl, -hl, -hl])
        self.y = np.array([hb, -hb, hb, -hb])
        self._sum_r2 = float(np.sum(self.x**2 + self.y**2))
        self._positions = tuple(zip(self.x.tolist(), self.y.tolist(), strict=True))

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> FourWheelSteerModel:
        check_keys(params, PARAMETERS, NAME)
        values = {name: read_float(params, name, default, low, high, model=NAME, unit=unit,
                                   low_open=low_open)
                  for name, (default, low, high, unit, low_open) in PARAMETERS.items()}
        return cls(**values)

    def contact_velocities(self, twist: BodyTwist) -> tuple[np.ndarray, np.ndarray]:
        """``(v_ix, v_iy)`` [m/s] of the four wheel contact points."""
        return twist.vx - twist.wz * self.y, twist.vy + twist.wz * self.x

    def inverse_many(self, vx: Any, vy: Any, wz: Any, held_angles: Any = None
                     ) -> WheelCommands:
        """Setpoints for N twists (1-D arrays [m/s], [m/s], [rad/s]); ``held_angles`` (4,) or
        (N, 4) [rad]. Rows no wheel orientation within the limit can follow are stopped with
        the steering held (``STEER_LIMIT``)."""
        vx, vy, wz = check_twists(vx, vy, wz)
        hold = held_rows(held_angles, vx.size, 4)
        vix = vx[:, None] - wz[:, None] * self.y
        viy = vy[:, None] + wz[:, None] * self.x
        speeds = np.hypot(vix, viy)
        moving = speeds > STANDSTILL_M_S
        angles = np.where(moving, np.arctan2(viy, vix), hold)
        lim = self.max_steer_angle_rad
        over, under = moving & (angles > lim), moving & (angles < -lim)
        angles = angles - math.pi * over + math.pi * under
        speeds = np.where(moving, np.where(over | under, -speeds, speeds), 0.0)
        stop = row_max(moving & (np.abs(angles) > lim)) > 0.0
        angles[stop] = hold[stop]
        scale = common_scales(speeds, self.max_wheel_speed_m_s)
        scale[stop] = 0.0
        return WheelCommands(speeds=speeds * scale[:, None], angles=angles,
                             achieved=np.stack([vx, vy, wz], axis=-1) * scale[:, None],
                             scale=scale, feasible=~stop,
                             reasons=np.where(stop, STEER_LIMIT, 0))

    def inverse(self, twist: BodyTwist, held_angles: np.ndarray | None = None) -> WheelCommand:
        """Setpoints for ``twist``. Zero command: speeds 0, steering held at ``held_angles``.
        A direction no wheel orientation within ``max_steer_angle_rad`` can follow (only
        possible with a limit below pi/2) is infeasible: stop with the steering held.
        Plain-Python per-cycle path, wheel by wheel; ``inverse_many`` is the vectorized twin.
        """
        check_twist(twist)
        hold = held_floats(held_angles, 4)
        vx, vy, wz = float(twist.vx), float(twist.vy), float(twist.wz)
        lim = self.max_steer_angle_rad
        speeds, angles, bad = [0.0] * 4, list(hold), []
        for i, (x, y) in enumerate(self._positions):
            vix, viy = vx - wz * y, vy + wz * x
            v = math.hypot(vix, viy)
            if v <= STANDSTILL_M_S:
                continue  # at the turning centre: angle undefined, keep it
            a = math.atan2(viy, vix)
            if a > lim:
                a, v = a - math.pi, -v
            elif a < -lim:
                a, v = a + math.pi, -v
            if abs(a) > lim:
                bad.append(self.steer_names[i])
            speeds[i], angles[i] = v, a
        if bad:
            return WheelCommand(
                speeds=np.zeros(4), angles=np.array(hold), achieved=BodyTwist(), scale=0.0,
                feasible=False,
                note=(f"wheel(s) {bad} cannot point along their contact velocity within "
                      f"max_steer_angle_rad = {lim:g} rad, even reversed; stopping with the "
                      "steering held"))
        scale = scale_for(speeds, self.max_wheel_speed_m_s)
        return WheelCommand(speeds=np.array(speeds) * scale, angles=np.array(angles),
                            achieved=BodyTwist(vx * scale, vy * scale, wz * scale), scale=scale)

    def direct_many(self, speeds: Any, angles: Any) -> np.ndarray:
        """(N, 3) least-squares twists from (N, 4) wheel speeds [m/s] and angles [rad]."""
        v = measured_rows(speeds, 4, "4WD4WS wheel speeds", "m/s")
        a = measured_rows(angles, 4, "4WD4WS wheel angles", "rad")
        if a.shape != v.shape:
            raise InvalidInputError(f"4WD4WS direct: speeds {v.shape} and angles {a.shape} "
                                    "differ in shape")
        vix, viy = v * np.cos(a), v * np.sin(a)
        wz = (viy @ self.x - vix @ self.y) / self._sum_r2
        quarter = np.full(4, 0.25)
        return np.stack([vix @ quarter, viy @ quarter, wz], axis=-1)

    def direct(self, speeds: np.ndarray, angles: np.ndarray) -> BodyTwist:
        """Least-squares twist from the four measured wheel speeds [m/s] and angles [rad]."""
        v = floats(speeds, 4, "4WD4WS wheel speeds", "m/s")
        a = floats(angles, 4, "4WD4WS wheel angles", "rad")
        sum_vix = sum_viy = moment = 0.0
        for (x, y), v_i, a_i in zip(self._positions, v, a, strict=True):
            vix, viy = v_i * math.cos(a_i), v_i * math.sin(a_i)
            sum_vix += vix
            sum_viy += viy
            moment += x * viy - y * vix
        return BodyTwist(sum_vix / 4, sum_viy / 4, moment / self._sum_r2)
