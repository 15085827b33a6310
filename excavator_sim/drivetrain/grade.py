"""The ground under the machine: the terrain's plane under the tracks and base_link's attitude.

The MuJoCo base is planar (x, y, yaw: docs/simulation.md), so the grade is computed for the
drive train and the IMU only: a least-squares plane through the terrain heights at a 3 x 3 grid
of points over the tracks' footprint (the contact length by the gauge, turned by the heading)
gives the ground normal; base_link's z axis is that normal, its x axis the heading projected on
the plane (REP-103: x forward, y left, z up; roll, pitch, yaw as ``R = Rz(yaw) Ry(pitch)
Rx(roll)``, so a nose-up slope is a negative pitch).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

# heights [m] at world points (x [m], y [m]) as arrays of one shape
HeightFunction = Callable[[np.ndarray, np.ndarray], np.ndarray]

_GRID = np.array([-0.5, 0.0, 0.5])


def footprint_points(x: float, y: float, yaw: float, length_m: float, gauge_m: float
                     ) -> tuple[np.ndarray, np.ndarray]:
    """World x, y [m] of the 3 x 3 sample points over the footprint centred at (x, y)."""
    ax, ay = np.meshgrid(_GRID * length_m, _GRID * gauge_m, indexing="ij")
    c, s = math.cos(yaw), math.sin(yaw)
    return x + c * ax - s * ay, y + s * ax + c * ay


def ground_normal(height: HeightFunction, x: float, y: float, yaw: float, length_m: float,
                  gauge_m: float) -> np.ndarray:
    """Unit normal (z > 0) of the least-squares plane through the terrain under the footprint."""
    px, py = footprint_points(x, y, yaw, length_m, gauge_m)
    z = np.asarray(height(px, py), dtype=float).ravel()
    a = np.column_stack([np.ones(z.size), (px - x).ravel(), (py - y).ravel()])
    coef, *_ = np.linalg.lstsq(a, z, rcond=None)
    n = np.array([-coef[1], -coef[2], 1.0])
    normal: np.ndarray = n / np.linalg.norm(n)
    return normal


def attitude(yaw: float, normal: np.ndarray) -> np.ndarray:
    """base_link's rotation in world (columns: its x, y, z axes) for heading ``yaw`` [rad] on
    ground of unit ``normal``."""
    n = np.asarray(normal, dtype=float)
    heading = np.array([math.cos(yaw), math.sin(yaw), 0.0])
    bx = heading - float(heading @ n) * n
    bx /= np.linalg.norm(bx)
    by = np.cross(n, bx)
    return np.column_stack([bx, by, n])


def roll_pitch_yaw(rotation: np.ndarray) -> tuple[float, float, float]:
    """(roll, pitch, yaw) [rad] of a rotation matrix, ``R = Rz(yaw) Ry(pitch) Rx(roll)``."""
    r = np.asarray(rotation, dtype=float)
    pitch = -math.asin(max(-1.0, min(1.0, float(r[2, 0]))))
    roll = math.atan2(float(r[2, 1]), float(r[2, 2]))
    yaw = math.atan2(float(r[1, 0]), float(r[0, 0]))
    return roll, pitch, yaw


def quaternion(rotation: np.ndarray) -> tuple[float, float, float, float]:
    """Unit quaternion (w, x, y, z) of a rotation matrix (Shepperd's method)."""
    r = np.asarray(rotation, dtype=float)
    trace = float(r[0, 0] + r[1, 1] + r[2, 2])
    if trace > 0.0:
        s = 2.0 * math.sqrt(trace + 1.0)
        q = (0.25 * s, (r[2, 1] - r[1, 2]) / s, (r[0, 2] - r[2, 0]) / s, (r[1, 0] - r[0, 1]) / s)
    elif r[0, 0] > r[1, 1] and r[0, 0] > r[2, 2]:
        s = 2.0 * math.sqrt(1.0 + r[0, 0] - r[1, 1] - r[2, 2])
        q = ((r[2, 1] - r[1, 2]) / s, 0.25 * s, (r[0, 1] + r[1, 0]) / s, (r[0, 2] + r[2, 0]) / s)
    elif r[1, 1] > r[2, 2]:
        s = 2.0 * math.sqrt(1.0 + r[1, 1] - r[0, 0] - r[2, 2])
        q = ((r[0, 2] - r[2, 0]) / s, (r[0, 1] + r[1, 0]) / s, 0.25 * s, (r[1, 2] + r[2, 1]) / s)
    else:
        s = 2.0 * math.sqrt(1.0 + r[2, 2] - r[0, 0] - r[1, 1])
        q = ((r[1, 0] - r[0, 1]) / s, (r[0, 2] + r[2, 0]) / s, (r[1, 2] + r[2, 1]) / s, 0.25 * s)
    w, x, y, z = (float(v) for v in q)
    norm = math.sqrt(w * w + x * x + y * y + z * z)
    sign = 1.0 if w >= 0.0 else -1.0
    return sign * w / norm, sign * x / norm, sign * y / norm, sign * z / norm


def angular_velocity(before: np.ndarray, after: np.ndarray, dt: float) -> np.ndarray:
    """Body-frame angular velocity [rad/s] that turns ``before`` into ``after`` in ``dt`` [s]
    (the rotation vector of ``before^T after`` over dt)."""
    delta = np.asarray(before, dtype=float).T @ np.asarray(after, dtype=float)
    cos_angle = max(-1.0, min(1.0, 0.5 * (float(np.trace(delta)) - 1.0)))
    angle = math.acos(cos_angle)
    axis = np.array([delta[2, 1] - delta[1, 2], delta[0, 2] - delta[2, 0],
                     delta[1, 0] - delta[0, 1]])
    if angle < 1e-9:
        return 0.5 * axis / dt
    rate: np.ndarray = axis * (angle / (2.0 * math.sin(angle))) / dt
    return rate


def slope_attitude(yaw: float, pitch_up_rad: float = 0.0, roll_rad: float = 0.0
                   ) -> np.ndarray:
    """Attitude on a plane sloping ``pitch_up_rad`` nose up along the heading and ``roll_rad``
    (REP-103 roll) across it: for tests and scripted slopes."""
    c, s = math.cos, math.sin
    rz = np.array([[c(yaw), -s(yaw), 0.0], [s(yaw), c(yaw), 0.0], [0.0, 0.0, 1.0]])
    p = -pitch_up_rad
    ry = np.array([[c(p), 0.0, s(p)], [0.0, 1.0, 0.0], [-s(p), 0.0, c(p)]])
    rx = np.array([[1.0, 0.0, 0.0], [0.0, c(roll_rad), -s(roll_rad)],
                   [0.0, s(roll_rad), c(roll_rad)]])
    out: np.ndarray = rz @ ry @ rx
    return out
