"""The bucket as a triangular prism (seed ``soil_bucket.rst``) and its pose in ``world``.

The prism is spanned by three points of the bucket's side view, given in the bucket frame
(x forward, y left, z up; metres): the joint J, the base B and the teeth T, extruded over the
bucket width along y (centred). Its faces: base T-B, back J-B, the two triangular sides, and the
open front J-T (not a wall). The pose is the position of the bucket origin in ``world`` plus
pitch (about the bucket's y axis, REP-103 sign: positive pitch turns +x towards -z) and yaw
(about world z). The soil model assumes no roll, which an excavator bucket never has.

A bucket angle measured counter-clockwise in the side view (seed convention, e.g.
``excavator.md``) is ``pitch = -bucket_angle``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from excavator_sim.soil.errors import SoilInputError


@dataclass(frozen=True)
class BucketPose:
    """Bucket origin position [m] in ``world``, pitch [rad] about the bucket y axis, yaw [rad]."""

    x: float
    y: float
    z: float
    pitch: float
    yaw: float

    def __post_init__(self) -> None:
        for name in ("x", "y", "z", "pitch", "yaw"):
            value = getattr(self, name)
            if not math.isfinite(value):
                raise SoilInputError(
                    f"bucket pose {name}={value!r} is not finite; pass a finite value "
                    f"(position in m, angles in rad) from the simulator's bucket frame"
                )

    @property
    def position(self) -> np.ndarray:
        return np.array([self.x, self.y, self.z])

    def rotation(self) -> np.ndarray:
        """3x3 rotation bucket -> world: ``Rz(yaw) @ Ry(pitch)``."""
        cp, sp = math.cos(self.pitch), math.sin(self.pitch)
        cy, sy = math.cos(self.yaw), math.sin(self.yaw)
        rz = np.array([[cy, -sy, 0.0], [sy, cy, 0.0], [0.0, 0.0, 1.0]])
        ry = np.array([[cp, 0.0, sp], [0.0, 1.0, 0.0], [-sp, 0.0, cp]])
        rotation: np.ndarray = rz @ ry
        return rotation

    def quaternion(self) -> tuple[float, float, float, float]:
        """Orientation as a unit quaternion (x, y, z, w): yaw about z after pitch about y."""
        cy, sy = math.cos(0.5 * self.yaw), math.sin(0.5 * self.yaw)
        cp, sp = math.cos(0.5 * self.pitch), math.sin(0.5 * self.pitch)
        return (-sy * sp, cy * sp, sy * cp, cy * cp)

    @classmethod
    def from_quaternion(
        cls, position: tuple[float, float, float], quat_xyzw: tuple[float, float, float, float]
    ) -> BucketPose:
        """Pose from a position [m] and a unit quaternion (x, y, z, w), as in
        geometry_msgs/Pose. Roll is dropped (a bucket has none): pitch and yaw are taken from
        the direction of the bucket's x axis and its y axis."""
        qx, qy, qz, qw = quat_xyzw
        norm = math.sqrt(qx * qx + qy * qy + qz * qz + qw * qw)
        if not math.isfinite(norm) or norm < 1e-9:
            raise SoilInputError(
                f"bucket orientation quaternion {quat_xyzw!r} has norm {norm!r}; "
                "send a unit quaternion (x, y, z, w)"
            )
        qx, qy, qz, qw = qx / norm, qy / norm, qz / norm, qw / norm
        # first column (x axis) and second column (y axis) of the rotation matrix
        xx = 1 - 2 * (qy * qy + qz * qz)
        xy = 2 * (qx * qy + qz * qw)
        xz = 2 * (qx * qz - qy * qw)
        yx = 2 * (qx * qy - qz * qw)
        yy = 1 - 2 * (qx * qx + qz * qz)
        # yaw from the y axis (stays horizontal without roll, defined even when x is vertical)
        yaw = math.atan2(-yx, yy)
        pitch = math.atan2(-xz, xx * math.cos(yaw) + xy * math.sin(yaw))  # full circle
        return cls(float(position[0]), float(position[1]), float(position[2]), pitch, yaw)


@dataclass(frozen=True)
class BucketPrism:
    """Prism points J, B, T in the bucket frame [m] (y ignored: the side view) and width [m]."""

    j: tuple[float, float, float]
    b: tuple[float, float, float]
    t: tuple[float, float, float]
    width_m: float

    def __post_init__(self) -> None:
        pts = np.array([self.j, self.b, self.t], dtype=float)
        if not np.all(np.isfinite(pts)) or not math.isfinite(self.width_m):
            raise SoilInputError(f"bucket prism points {pts.tolist()} / width {self.width_m} "
                                 "must be finite numbers in metres")
        if self.width_m <= 0.0:
            raise SoilInputError(f"bucket width_m={self.width_m} must be > 0 m")
        if self.cross_section_area_m2 < 1e-6:
            raise SoilInputError(
                f"bucket points J={self.j}, B={self.b}, T={self.t} are collinear (side-view "
                "area < 1e-6 m^2); give a real triangle"
            )

    @classmethod
    def from_geometry(cls, geometry: object) -> BucketPrism:
        """The excavator's bucket (``excavator_kinematics.geometry.ExcavatorGeometry``): origin
        and joint at M, base and teeth from the geometry file."""
        tip = geometry.tip  # type: ignore[attr-defined]
        base = geometry.bucket_base  # type: ignore[attr-defined]
        return cls(
            j=(0.0, 0.0, 0.0),
            b=(float(base[0]), 0.0, float(base[1])),
            t=(float(tip[0]), 0.0, float(tip[1])),
            width_m=float(geometry.bucket_width_m),  # type: ignore[attr-defined]
        )

    @property
    def side_view(self) -> np.ndarray:
        """(3, 2) array of J, B, T as (x, z) in the bucket frame [m]."""
        return np.array([[self.j[0], self.j[2]], [self.b[0], self.b[2]], [self.t[0], self.t[2]]])

    @property
    def cross_section_area_m2(self) -> float:
        (jx, jz), (bx, bz), (tx, tz) = self.side_view
        return 0.5 * abs(float((bx - jx) * (tz - jz) - (tx - jx) * (bz - jz)))

    @property
    def volume_m3(self) -> float:
        return self.cross_section_area_m2 * self.width_m

    @property
    def cutting_length_m(self) -> float:
        """Length of the base plate T-B, the paper's cutting surface s_bucket [m]."""
        (bx, bz), (tx, tz) = self.side_view[1], self.side_view[2]
        return math.hypot(tx - bx, tz - bz)

    def corners(self, pose: BucketPose) -> np.ndarray:
        """(6, 3) world corners [m]: J_l, J_r, B_l, B_r, T_l, T_r (l = +y side)."""
        rot = pose.rotation()
        half = 0.5 * self.width_m
        local = np.array(
            [
                [self.j[0], half, self.j[2]],
                [self.j[0], -half, self.j[2]],
                [self.b[0], half, self.b[2]],
                [self.b[0], -half, self.b[2]],
                [self.t[0], half, self.t[2]],
                [self.t[0], -half, self.t[2]],
            ]
        )
        corners: np.ndarray = local @ rot.T + pose.position
        return corners


# Face polygons (indices into ``BucketPrism.corners``), each convex and ordered around its rim.
# The front J-T is open, but it bounds the prism's volume, so it takes part in the column extents.
FACES: tuple[tuple[int, ...], ...] = (
    (4, 5, 3, 2),  # base T-B
    (0, 1, 3, 2),  # back J-B
    (0, 1, 5, 4),  # front J-T (opening)
    (0, 2, 4),  # left side
    (1, 3, 5),  # right side
)
EDGES: tuple[tuple[int, int], ...] = (
    (0, 1), (2, 3), (4, 5),  # across the width
    (0, 2), (2, 4), (4, 0),  # left triangle
    (1, 3), (3, 5), (5, 1),  # right triangle
)
