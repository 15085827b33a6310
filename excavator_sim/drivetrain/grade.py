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

# height [m] of the terrain at a world point (x [m], y [m])
HeightFunction = Callable[[float, float], float]

_GRID = (-0.5, 0.0, 0.5)


def footprint_points(x: float, y: float, yaw: float, length_m: float, gauge_m: float
                     ) -> list[tuple[float, float]]:
    """World (x, y) [m] of the 3 x 3 sample points over the footprint centred at (x, y), along
    the heading first: point ``3 i + j`` is ``_GRID[i]`` of the length, ``_GRID[j]`` of the
    gauge."""
    c, s = math.cos(yaw), math.sin(yaw)
    return [(x + c * a * length_m - s * b * gauge_m, y + s * a * length_m + c * b * gauge_m)
            for a in _GRID for b in _GRID]


def ground_normal(height: HeightFunction, x: float, y: float, yaw: float, length_m: float,
                  gauge_m: float) -> np.ndarray:
    """Unit normal (z > 0) of the least-squares plane through the terrain under the footprint.

    The 3 x 3 sample grid is symmetric about the centre along and across the heading, so the
    least-squares slopes decouple: along the heading ``sum(z a) / sum(a^2)`` over the points'
    offsets ``a``, across it the same with theirs."""
    z = [float(height(px, py)) for px, py in footprint_points(x, y, yaw, length_m, gauge_m)]
    # rows along the heading (z[0:3] at -length/2, z[6:9] at +length/2), columns across
    along = (z[6] + z[7] + z[8] - z[0] - z[1] - z[2]) / (3.0 * length_m)
    across = (z[2] + z[5] + z[8] - z[0] - z[3] - z[6]) / (3.0 * gauge_m)
    c, s = math.cos(yaw), math.sin(yaw)
    gx, gy = c * along - s * across, s * along + c * across   # dz/dx, dz/dy in world
    norm = math.sqrt(1.0 + gx * gx + gy * gy)
    return np.array([-gx / norm, -gy / norm, 1.0 / norm])


def attitude(yaw: float, normal: np.ndarray) -> np.ndarray:
    """base_link's rotation in world (columns: its x, y, z axes) for heading ``yaw`` [rad] on
    ground of unit ``normal``."""
    nx, ny, nz = (float(v) for v in normal)
    hx, hy = math.cos(yaw), math.sin(yaw)
    dot = hx * nx + hy * ny
    bx, by, bz = hx - dot * nx, hy - dot * ny, -dot * nz
    norm = math.sqrt(bx * bx + by * by + bz * bz)
    bx, by, bz = bx / norm, by / norm, bz / norm
    # y = n x b
    cx, cy, cz = ny * bz - nz * by, nz * bx - nx * bz, nx * by - ny * bx
    return np.array([[bx, cx, nx], [by, cy, ny], [bz, cz, nz]])


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
