"""What an IMU on base_link reads (REP-145: orientation of base_link in world, angular velocity
and linear acceleration in base_link's axes; the accelerometer measures the specific force, so
a machine at rest on flat ground reads +g along z)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from excavator_sim.drivetrain.grade import angular_velocity, quaternion


@dataclass(frozen=True)
class ImuReading:
    """One sample: orientation (w, x, y, z), angular velocity [rad/s] and specific force
    [m/s^2], both in base_link's axes."""

    orientation: tuple[float, float, float, float]
    angular_velocity: tuple[float, float, float]
    linear_acceleration: tuple[float, float, float]


def imu_reading(before: np.ndarray, after: np.ndarray, dt: float,
                specific_force: np.ndarray) -> ImuReading:
    """The reading at attitude ``after`` (3 x 3, base_link in world) after ``dt`` [s] from
    ``before``, with the specific force ``specific_force`` (base_link axes)."""
    rate = angular_velocity(before, after, dt) if dt > 0.0 else np.zeros(3)
    wx, wy, wz = (float(v) for v in rate)
    ax, ay, az = (float(v) for v in specific_force)
    return ImuReading(quaternion(after), (wx, wy, wz), (ax, ay, az))


def specific_force(attitude: np.ndarray, acceleration_world: np.ndarray,
                   gravity_m_s2: float) -> np.ndarray:
    """What an accelerometer on base_link reads for its acceleration in world [m/s^2]."""
    out: np.ndarray = np.asarray(attitude, dtype=float).T @ (
        np.asarray(acceleration_world, dtype=float) + np.array([0.0, 0.0, gravity_m_s2]))
    return out
