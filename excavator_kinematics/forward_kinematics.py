"""Forward kinematics: q0..q3 (swing, boom, arm, bucket) to every linkage point in ``base_link``.

``base_link`` follows REP-103 (x forward, y left, z up), origin A on the ground under the swing
axis. The chassis swings about z at B; the boom plane contains the swing axis, so a side-view
point (x, z) of the chassis frame maps to ``(x cos q0, x sin q0, B_z + z)``.
"""

from __future__ import annotations

import numpy as np

from excavator_kinematics.geometry import ExcavatorGeometry
from excavator_kinematics.linkage import ArrayLike, Linkage

# The bottom plate of the bucket (teeth T -> base corner B) against the bucket frame's x axis
# is a fixed angle; see ForwardKinematics.bottom_plate_offset.


class ForwardKinematics:
    """q = (swing, boom, arm, bucket) [rad] -> points [m] in ``base_link``."""

    def __init__(self, geometry: ExcavatorGeometry, linkage: Linkage | None = None):
        self.geometry = geometry
        self.linkage = linkage if linkage is not None else Linkage(geometry)

    @property
    def bottom_plate_offset(self) -> float:
        """Angle [rad] of the bucket's bottom plate (teeth -> base corner) in the bucket frame.

        The bottom plate's angle against the horizontal is ``bucket_pitch + bottom_plate_offset``
        (0.510 rad = 29.2 deg for the default bucket), where ``bucket_pitch`` is the seed's
        absolute bucket angle (ML against the horizontal).
        """
        g = self.geometry
        return float(np.arctan2(g.bucket_base[1] - g.tip[1], g.bucket_base[0] - g.tip[0]))

    def to_base_link(self, side: np.ndarray, swing: ArrayLike) -> np.ndarray:
        """Side-view chassis points ``[..., 2]`` -> ``base_link`` points ``[..., 3]`` [m]."""
        g = self.geometry
        x = side[..., 0] + g.B[0]
        c, s = np.cos(swing), np.sin(swing)
        return np.stack(np.broadcast_arrays(c * x, s * x, side[..., 1] + g.B[1]), axis=-1)

    def points(self, q: ArrayLike) -> dict[str, np.ndarray]:
        """All linkage points in ``base_link`` for ``q`` of shape ``(4,)`` or ``(N, 4)``."""
        q = np.asarray(q, dtype=float)
        side = self.linkage.points(q[..., 1], q[..., 2], q[..., 3])
        return {name: self.to_base_link(p, q[..., 0]) for name, p in side.items()}

    def tip(self, q: ArrayLike) -> np.ndarray:
        """Bucket tip (teeth edge centre) in ``base_link`` [m], shape ``(3,)`` or ``(N, 3)``."""
        q = np.asarray(q, dtype=float)
        g = self.geometry
        boom, arm, bucket = q[..., 1], q[..., 2], q[..., 3]
        a1, a2, a3 = boom, boom + arm, boom + arm + bucket
        rho = (g.C[0] + np.cos(a1) * g.H[0] - np.sin(a1) * g.H[1]
               + np.cos(a2) * g.M[0] - np.sin(a2) * g.M[1]
               + np.cos(a3) * g.tip[0] - np.sin(a3) * g.tip[1])
        z = (g.C[1] + np.sin(a1) * g.H[0] + np.cos(a1) * g.H[1]
             + np.sin(a2) * g.M[0] + np.cos(a2) * g.M[1]
             + np.sin(a3) * g.tip[0] + np.cos(a3) * g.tip[1])
        side = np.stack(np.broadcast_arrays(rho, z), axis=-1)
        return self.to_base_link(side, q[..., 0])

    def bucket_pitch(self, q: ArrayLike) -> np.ndarray:
        """The seed's absolute bucket angle (ML against the horizontal) [rad]."""
        q = np.asarray(q, dtype=float)
        return q[..., 1] + q[..., 2] + q[..., 3]
