"""Coordinated (task-space) control: bucket tip velocity and bucket angle rate -> joint rates.

``qdot = J^+ Xdot`` with the closed-form Jacobian (:mod:`.jacobian`), solved as weighted damped
least squares (Nakamura & Hanafusa 1986; damping switched on only near a singularity, the
variable-damping rule of Chiaverini 1997)::

    W = diag(1, 1, angle_weight)          # metres vs radians
    lambda^2 = 0                          if sigma_min >= threshold
             = (1 - (sigma_min / threshold)^2) * damping^2   otherwise
    qdot = (W J)^T ((W J)(W J)^T + lambda^2 I)^-1 W Xdot

Clear behaviour at the edges, in this order:
1. Joint limits (the stroke ends; for the bucket the upper limit is the four-bar's toggle less a
   margin, :class:`~excavator_kinematics.linkage.Linkage`): a joint that would pass its limit
   within ``horizon_s`` gets the rate that stops it exactly there (0 once it is there) and the
   tip's path (r, z) is solved again with the other joints, the bucket angle given up (the
   operator sees the bucket stop, the tip keeps its line while the boom and arm can hold it).
2. Rate limits: the joint rates are scaled by one common factor so none exceeds what its
   cylinder's flow allows and the pumps' total flow suffices (:mod:`.valves`); the tip keeps its
   direction and slows down.
The result reports which of these acted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from excavator_kinematics.errors import ConfigError, InvalidInputError
from excavator_kinematics.linkage import JOINT_NAMES, Linkage
from excavator_kinematics.teleop.jacobian import TaskJacobian
from excavator_kinematics.teleop.valves import Hydraulics


@dataclass(frozen=True)
class CoordinatedSettings:
    """Damped least squares and limit handling (units in the names)."""

    damping: float = 0.05            # lambda_max [m]
    singular_threshold: float = 0.15  # sigma_min below which damping starts [m]
    angle_weight_m_per_rad: float = 0.5
    horizon_s: float = 0.1           # look-ahead for the joint limits [s]

    def __post_init__(self) -> None:
        for name in ("damping", "singular_threshold", "angle_weight_m_per_rad", "horizon_s"):
            v = getattr(self, name)
            if not np.isfinite(v) or v <= 0.0:
                raise ConfigError(f"coordinated.{name} = {v:.6g} must be a positive number")


@dataclass(frozen=True)
class CoordinatedResult:
    """Joint rates [rad/s] of boom, arm, bucket and what shaped them."""

    rates: np.ndarray
    sigma_min: float           # smallest singular value of W J [m]
    damped: bool               # damped least squares active (near a singularity)
    locked: tuple[str, ...]    # joints stopped at (or slowed to reach exactly) a limit
    scale: float               # common rate scaling (1 = none)
    expected_task_rate: np.ndarray = field(default_factory=lambda: np.zeros(3))


class CoordinatedController:
    """Task rates (r_dot [m/s], z_dot [m/s], alpha_dot [rad/s]) -> joint rates."""

    def __init__(self, jacobian: TaskJacobian, linkage: Linkage, hydraulics: Hydraulics,
                 settings: CoordinatedSettings | None = None):
        self.jacobian = jacobian
        self.linkage = linkage
        self.hydraulics = hydraulics
        self.settings = settings or CoordinatedSettings()

    def solve(self, q: np.ndarray, task_rate: np.ndarray) -> CoordinatedResult:
        q = np.asarray(q, dtype=float)[:3]
        xd = np.asarray(task_rate, dtype=float).reshape(3)
        if not (np.all(np.isfinite(q)) and np.all(np.isfinite(xd))):
            raise InvalidInputError(f"coordinated input q={q.tolist()} rate={xd.tolist()} has "
                                    "NaN/inf: pass finite joint angles [rad] and rates")
        s = self.settings
        w = np.array([1.0, 1.0, s.angle_weight_m_per_rad])
        j = self.jacobian.jacobian(q)
        wj, wx = w[:, None] * j, w * xd
        sigma_min = float(np.linalg.svd(wj, compute_uv=False)[-1])
        lam2 = 0.0
        if sigma_min < s.singular_threshold:
            lam2 = (1.0 - (sigma_min / s.singular_threshold) ** 2) * s.damping ** 2
        free = np.ones(3, dtype=bool)
        fixed = np.zeros(3)  # rates of locked joints: exactly what reaches the limit
        rates = np.zeros(3)
        for _ in range(4):
            # With a joint stopped at a limit the bucket angle is given up: the remaining
            # joints serve the tip's path (rows r, z) alone.
            rows = slice(None) if free.all() else slice(0, 2)
            a = wj[rows][:, free]
            rates = fixed.copy()
            if a.shape[1]:
                rhs = (wx - wj @ fixed)[rows]
                n = a.shape[0]
                rates[free] = a.T @ np.linalg.solve(a @ a.T + (lam2 + 1e-12) * np.eye(n), rhs)
            blocked, reach = self._blocked(q, rates)
            blocked &= free
            if not blocked.any():
                break
            free &= ~blocked
            fixed[blocked] = reach[blocked]
        lo, hi = self.hydraulics.joint_rate_bounds(q)
        scale = 1.0
        for k in range(3):
            if rates[k] > hi[k]:
                scale = min(scale, hi[k] / rates[k])
            elif rates[k] < lo[k]:
                scale = min(scale, lo[k] / rates[k])
        rates = rates * scale
        flow = self.hydraulics.flow_scale(rates, q)
        rates *= flow
        return CoordinatedResult(rates, sigma_min, lam2 > 0.0,
                                 tuple(n for n, f in zip(JOINT_NAMES, free, strict=True) if not f),
                                 scale * flow, j @ rates)

    def _blocked(self, q: np.ndarray, rates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Which joints would pass a limit within the horizon, and the rate that stops each
        exactly at it (0 when already there)."""
        out = np.zeros(3, dtype=bool)
        reach = np.zeros(3)
        h = self.settings.horizon_s
        for k, name in enumerate(JOINT_NAMES):
            lo, hi = self.linkage.joint_limits[name]
            nxt = q[k] + rates[k] * h
            if rates[k] > 0.0 and nxt > hi:
                out[k], reach[k] = True, max(hi - q[k], 0.0) / h
            elif rates[k] < 0.0 and nxt < lo:
                out[k], reach[k] = True, min(lo - q[k], 0.0) / h
        return out, reach
