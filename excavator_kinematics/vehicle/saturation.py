"""One common scale factor on the whole body twist when a wheel would exceed its speed limit.

All three models' wheel speeds are positively homogeneous of degree 1 in the twist
(``speeds(s*t) = s*speeds(t)`` for ``s >= 0``), and the steering angles are unchanged by a
positive scale. Scaling ``(vx, vy, wz)`` by one factor therefore keeps the instantaneous centre
of rotation, i.e. the path curvature, and only slows the motion along that path; clamping wheels
one by one would bend the path instead.
"""

from __future__ import annotations

import math

import numpy as np

from excavator_kinematics.vehicle.base import BodyTwist


def common_scale(speeds: np.ndarray, limit_m_s: float | np.ndarray) -> float:
    """The largest factor in ``(0, 1]`` that brings every ``|speeds[i]|`` [m/s] within its
    limit [m/s] (a scalar or one per wheel)."""
    return float(common_scales(np.asarray(speeds, dtype=float)[None, :], limit_m_s)[0])


def scale_for(speeds: list[float], limit_m_s: float) -> float:
    """``common_scale`` for a short list of speeds and one limit, in plain Python (the
    per-cycle path)."""
    worst = max((abs(v) for v in speeds), default=0.0) / limit_m_s
    return 1.0 if worst <= 1.0 else 1.0 / worst


def common_scales(speeds: np.ndarray, limit_m_s: float | np.ndarray) -> np.ndarray:
    """``common_scale`` per row of an (N, wheels) array: shape (N,)."""
    ratios = np.abs(speeds) / np.asarray(limit_m_s, dtype=float)
    worst = row_max(ratios)
    return np.where(worst <= 1.0, 1.0, 1.0 / np.maximum(worst, 1.0))


def row_max(a: np.ndarray) -> np.ndarray:
    """Max over the short last axis of an (N, k) array (0 for k = 0): a loop over the k
    columns, several times faster than numpy's reduction along a 2-4 wide axis."""
    worst = np.zeros(a.shape[0])
    if a.shape[1]:
        worst[:] = a[:, 0]
        for j in range(1, a.shape[1]):
            np.maximum(worst, a[:, j], out=worst)
    return worst


def scale_twist(twist: BodyTwist, scale: float) -> BodyTwist:
    """``scale * twist``; the turning centre ``(-vy/wz, vx/wz)`` is unchanged for ``scale > 0``."""
    return BodyTwist(twist.vx * scale, twist.vy * scale, twist.wz * scale)


def turning_centre(twist: BodyTwist) -> tuple[float, float]:
    """Instantaneous centre of rotation ``(x, y)`` [m] in the body frame; ``(inf, inf)`` with the
    direction's sign when driving straight (``wz == 0``)."""
    if twist.wz == 0.0:
        return (math.copysign(math.inf, -twist.vy), math.copysign(math.inf, twist.vx))
    return (-twist.vy / twist.wz, twist.vx / twist.wz)
