"""Bucket orientation <-> (swing, pitch): quaternions for ``target_pose`` and ``bucket_pose``.

The bucket frame is the chassis yaw (swing about z) followed by the pitch about -y, the joint
axis of boom/arm/bucket (positive pitch = counter-clockwise seen with x to the right, z up).
``pitch`` is the seed's absolute bucket angle: M->L against the horizontal.
"""

from __future__ import annotations

import math

import numpy as np


def bucket_quaternion(swing: float, pitch: float) -> tuple[float, float, float, float]:
    """Quaternion (x, y, z, w) of ``Rz(swing) * R_{-y}(pitch)``."""
    cy, sy = math.cos(swing / 2), math.sin(swing / 2)
    cp, sp = math.cos(-pitch / 2), math.sin(-pitch / 2)
    # q_z(swing) * q_y(-pitch)
    return (-sy * sp, cy * sp, sy * cp, cy * cp)


def bucket_pitch_from_quaternion(
    quaternion: tuple[float, float, float, float], swing: float
) -> tuple[float, float]:
    """The pitch [rad] of an orientation seen in the boom plane at ``swing`` [rad], and the
    orientation's misalignment [rad] with that plane (the bucket cannot roll or yaw out of it).

    Raises ValueError for a non-finite or zero quaternion.
    """
    q = np.asarray(quaternion, dtype=float)
    n = float(np.linalg.norm(q))
    if not (np.all(np.isfinite(q)) and math.isfinite(n)) or n < 1e-9:  # n: 1e308 overflows
        raise ValueError(f"orientation {tuple(q.tolist())} is not a valid quaternion "
                         "(finite, non-zero (x, y, z, w))")
    x, y, z, w = q / n
    # First and second columns of the rotation matrix: the bucket frame's x and y axes.
    x_axis = np.array([1 - 2 * (y * y + z * z), 2 * (x * y + w * z), 2 * (x * z - w * y)])
    y_axis = np.array([2 * (x * y - w * z), 1 - 2 * (x * x + z * z), 2 * (y * z + w * x)])
    forward = np.array([math.cos(swing), math.sin(swing), 0.0])
    normal = np.array([-math.sin(swing), math.cos(swing), 0.0])
    pitch = math.atan2(float(x_axis[2]), float(x_axis @ forward))
    # Angle between the bucket's y axis and the boom plane normal (atan2: exact near 0).
    misalignment = math.atan2(float(np.linalg.norm(np.cross(y_axis, normal))),
                              abs(float(y_axis @ normal)))
    return pitch, misalignment
