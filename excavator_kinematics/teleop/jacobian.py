"""Task coordinates of the bucket and their Jacobian, in closed form.

``X = (r, z, alpha)`` as in DiMaio et al. 1998 (eq. 1): ``r`` [m] the bucket tip's distance from
the swing axis in the boom plane, ``z`` [m] its height in ``base_link``, ``alpha`` [rad] the
bucket's absolute angle (M->L against the horizontal, the ``bucket_pitch`` of the IK). With the
absolute angles ``a1 = boom``, ``a2 = boom + arm``, ``a3 = boom + arm + bucket`` and the
rotated link vectors ``P1 = R(a1) H``, ``P2 = R(a2) M``, ``P3 = R(a3) tip`` (each point in its
part's frame, docs/kinematics.md), the tip is ``B + C + P1 + P2 + P3`` and, with
``perp(x, z) = (-z, x)``::

    d(r, z)/d boom   = perp(P1 + P2 + P3)
    d(r, z)/d arm    = perp(P2 + P3)
    d(r, z)/d bucket = perp(P3)
    d alpha / d(boom, arm, bucket) = (1, 1, 1)

Its determinant is ``|CH x HM|`` (the bucket offset moves rigidly with alpha): the Jacobian is
singular only with the arm stretched or folded in line with the boom.
"""

from __future__ import annotations

import numpy as np

from excavator_kinematics.geometry import ExcavatorGeometry


class TaskJacobian:
    """X = (r, z, alpha) and dX/d(boom, arm, bucket) for one geometry."""

    def __init__(self, geometry: ExcavatorGeometry):
        g = geometry
        self._origin = np.array([g.B[0] + g.C[0], g.B[1] + g.C[1]])
        self._links = np.array([g.H, g.M, g.tip], dtype=float)  # (3, 2)

    def _rotated(self, q: np.ndarray) -> np.ndarray:
        """P1, P2, P3 (rows) in the boom plane [m] for q = (boom, arm, bucket)."""
        a = np.cumsum(np.asarray(q, dtype=float)[:3])
        c, s = np.cos(a), np.sin(a)
        x = c * self._links[:, 0] - s * self._links[:, 1]
        z = s * self._links[:, 0] + c * self._links[:, 1]
        return np.stack([x, z], axis=1)

    def task(self, q: np.ndarray) -> np.ndarray:
        """X = (r [m], z [m], alpha [rad]) for q = (boom, arm, bucket) [rad]."""
        p = self._rotated(q)
        rz = self._origin + p.sum(axis=0)
        return np.array([rz[0], rz[1], float(np.sum(q[:3]))])

    def jacobian(self, q: np.ndarray) -> np.ndarray:
        """dX/dq, shape (3, 3): rows r, z, alpha; columns boom, arm, bucket."""
        p = self._rotated(q)
        tails = np.cumsum(p[::-1], axis=0)[::-1]  # P1+P2+P3, P2+P3, P3
        j = np.empty((3, 3))
        j[0] = -tails[:, 1]
        j[1] = tails[:, 0]
        j[2] = 1.0
        return j
