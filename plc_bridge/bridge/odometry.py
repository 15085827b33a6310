"""Dead-reckoning odometry from the measured body twist (pure, for the ``odom`` topic).

The planar pose ``(x, y, yaw)`` [m, m, rad] in the ``odom`` frame is advanced by the REP-103
body twist ``(vx, vy, wz)`` held constant over ``dt``: exact integration along the arc (the
constant-twist solution), so driving a circle closes it instead of spiralling outwards as a
forward-Euler update would.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from excavator_kinematics.vehicle import BodyTwist


@dataclass(frozen=True)
class Pose2D:
    x: float = 0.0      # [m]
    y: float = 0.0      # [m]
    yaw: float = 0.0    # [rad], wrapped to (-pi, pi]


def integrate(pose: Pose2D, twist: BodyTwist, dt: float) -> Pose2D:
    """Pose after ``dt`` [s] >= 0 at the constant body twist ``twist``."""
    if not dt >= 0.0 or not math.isfinite(dt):
        raise ValueError(f"dt = {dt!r} s must be finite and >= 0")
    dtheta = twist.wz * dt
    if abs(dtheta) < 1e-9:   # straight: the series limits of the arc terms
        s, c = dt * (1.0 - dtheta * dtheta / 6.0), dt * dtheta / 2.0
    else:
        s = math.sin(dtheta) / twist.wz
        c = (1.0 - math.cos(dtheta)) / twist.wz
    # displacement in the body frame at the start of the step, then rotated into odom
    dx = twist.vx * s - twist.vy * c
    dy = twist.vx * c + twist.vy * s
    cy, sy = math.cos(pose.yaw), math.sin(pose.yaw)
    yaw = math.atan2(math.sin(pose.yaw + dtheta), math.cos(pose.yaw + dtheta))
    return Pose2D(pose.x + cy * dx - sy * dy, pose.y + sy * dx + cy * dy, yaw)
