"""Skid-steer (tracked) vehicle: two tracks, no steering actuators.

Reference point: midway between the tracks. Inverse: ``v_l = vx - wz*b_eff/2``,
``v_r = vx + wz*b_eff/2``; direct: ``vx = (v_l + v_r)/2``, ``wz = (v_r - v_l)/b_eff``, with
``b_eff = track_width_m * slip_factor``: skidding tracks turn the body as if they were further
apart than they are (Mandow et al., "Experimental kinematics for wheeled skid-steer mobile
robots", IROS 2007). Unlike the seed's ``2v/((R+a)/(R-a)+1)`` this has no ``R = v/w``, so it is
defined for driving straight (w = 0) and turning on the spot (v = 0).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from excavator_kinematics.errors import InvalidInputError
from excavator_kinematics.vehicle.base import (
    LATERAL_DROPPED,
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
    measured_rows,
    read_float,
)
from excavator_kinematics.vehicle.saturation import common_scales, scale_for

NAME = "skid_steer"
# name: (default, low, high, unit, low_open)
PARAMETERS: dict[str, tuple[float, float, float, str, bool]] = {
    "track_width_m": (1.5, 0.0, MAX_LENGTH_M, "m", True),
    "slip_factor": (1.0, 1.0, 4.0, "(b_eff / track width)", False),
    "max_wheel_speed_m_s": (2.0, 0.0, MAX_SPEED_M_S, "m/s", True),
}


class SkidSteerModel:
    """Tracks ``("left", "right")`` at ``y = +-track_width/2``; speeds [m/s] + forward."""

    name = NAME
    wheel_names: tuple[str, ...] = ("left", "right")
    steer_names: tuple[str, ...] = ()

    def __init__(self, track_width_m: float, slip_factor: float = 1.0,
                 max_wheel_speed_m_s: float = 2.0) -> None:
        self.track_width_m = track_width_m
        self.slip_factor = slip_factor
        self.max_wheel_speed_m_s = max_wheel_speed_m_s
        self.b_eff_m = track_width_m * slip_factor

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> SkidSteerModel:
        check_keys(params, PARAMETERS, NAME)
        values = {name: read_float(params, name, default, low, high, model=NAME, unit=unit,
                                   low_open=low_open)
                  for name, (default, low, high, unit, low_open) in PARAMETERS.items()}
        return cls(**values)

    def _speeds(self, vx: np.ndarray, wz: np.ndarray) -> np.ndarray:
        half = 0.5 * wz * self.b_eff_m
        return np.stack([vx - half, vx + half], axis=-1)

    def inverse_many(self, vx: Any, vy: Any, wz: Any, held_angles: Any = None
                     ) -> WheelCommands:
        """Track speeds for N twists (1-D arrays [m/s], [m/s], [rad/s]). A non-zero ``vy`` is
        dropped (``LATERAL_DROPPED``, infeasible) and ``vx``, ``wz`` are still driven."""
        vx, vy, wz = check_twists(vx, vy, wz)
        lateral = vy != 0.0
        scale = common_scales(self._speeds(vx, wz), self.max_wheel_speed_m_s)
        achieved = np.stack([vx * scale, np.zeros_like(vx), wz * scale], axis=-1)
        return WheelCommands(speeds=self._speeds(achieved[:, 0], achieved[:, 2]),
                             angles=np.zeros((vx.size, 0)), achieved=achieved, scale=scale,
                             feasible=~lateral, reasons=np.where(lateral, LATERAL_DROPPED, 0))

    def inverse(self, twist: BodyTwist, held_angles: np.ndarray | None = None) -> WheelCommand:
        """Track speeds for ``twist``. Tracks cannot move sideways: a non-zero ``vy`` is
        reported infeasible and dropped (``achieved.vy = 0``); ``vx`` and ``wz`` are still
        driven. Plain-Python per-cycle path; ``inverse_many`` is the vectorized twin."""
        check_twist(twist)
        vx, wz, half_b = float(twist.vx), float(twist.wz), 0.5 * self.b_eff_m
        scale = scale_for([vx - wz * half_b, vx + wz * half_b], self.max_wheel_speed_m_s)
        vx, wz = vx * scale, wz * scale
        note = ""
        if twist.vy != 0.0:
            note = (f"lateral velocity {twist.vy:g} m/s is infeasible on skid-steer (tracks "
                    "cannot crab); driving with vy = 0")
        return WheelCommand(speeds=np.array([vx - wz * half_b, vx + wz * half_b]),
                            angles=np.zeros(0), achieved=BodyTwist(vx, 0.0, wz), scale=scale,
                            feasible=not note, note=note)

    def direct_many(self, speeds: Any, angles: Any = None) -> np.ndarray:
        """(N, 3) twists ``[vx, vy, wz]`` from (N, 2) track speeds ``[left, right]`` [m/s]."""
        v = measured_rows(speeds, 2, "skid-steer track speeds", "m/s")
        if angles is not None and np.size(angles) != 0:
            raise InvalidInputError(f"skid-steer has no steering: got angles {angles!r}")
        return np.stack([0.5 * (v[:, 0] + v[:, 1]), np.zeros(len(v)),
                         (v[:, 1] - v[:, 0]) / self.b_eff_m], axis=-1)

    def direct(self, speeds: np.ndarray, angles: np.ndarray) -> BodyTwist:
        """Twist from measured track speeds ``[v_left, v_right]`` [m/s]; ``angles`` must be
        empty."""
        v_l, v_r = floats(speeds, 2, "skid-steer track speeds", "m/s")
        floats(angles, 0, "skid-steer steering angles", "rad")
        return BodyTwist(0.5 * (v_l + v_r), 0.0, (v_r - v_l) / self.b_eff_m)
