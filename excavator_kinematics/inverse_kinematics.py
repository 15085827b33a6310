"""Closed-form inverse kinematics: bucket tip target + bucket pitch -> q0..q3 and the extensions.

Steps (the seed ``ik_q0_q3.md`` teaches the same sequence on another machine):
1. ``q0 = atan2(y, x)``: the boom plane contains the swing axis. The tip's radial distance from
   the swing axis is ``rho = hypot(x, y)``; targets on the swing axis itself (rho = 0) take q0 = 0.
2. With the bucket pitch fixed, the wrist point M is the tip minus the rotated tip offset.
3. The planar two-link C-H-M by the law of cosines. Branch: the arm joint is negative (elbow
   up: H above the line C-M), the only branch the arm cylinder can reach on this machine.
4. ``q3 = pitch - q1 - q2``; then each cylinder's extension from its own joint.

``bucket_pitch`` is the seed's absolute bucket angle: the angle of M->L against the horizontal.
The bottom plate (teeth -> base corner) then makes ``pitch + 0.510 rad`` with the horizontal
(``ForwardKinematics.bottom_plate_offset``).

Every limit is checked; nothing is clamped. ``solve`` raises a ``KinematicsError`` naming the
limit; ``solve_batch`` returns per-target status codes and messages, so one bad target loses none
of the good ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from excavator_kinematics.errors import (
    InvalidInputError,
    KinematicsError,
    StrokeLimitError,
    UnreachableError,
    fmt_number,
)
from excavator_kinematics.forward_kinematics import ForwardKinematics
from excavator_kinematics.geometry import CYLINDER_NAMES, ExcavatorGeometry
from excavator_kinematics.linkage import JOINT_NAMES, Linkage

ACTIVE_JOINTS: tuple[str, str, str, str] = ("swing", *JOINT_NAMES)


class IKStatus(IntEnum):
    """Per-target outcome of ``solve_batch``."""

    OK = 0
    NOT_FINITE = 1
    OUT_OF_REACH = 2
    SWING_LIMIT = 3
    BOOM_LIMIT = 4
    ARM_LIMIT = 5
    BUCKET_LIMIT = 6


_ERROR_TYPES: dict[IKStatus, type[KinematicsError]] = {
    IKStatus.NOT_FINITE: InvalidInputError,
    IKStatus.OUT_OF_REACH: UnreachableError,
    IKStatus.SWING_LIMIT: StrokeLimitError,
    IKStatus.BOOM_LIMIT: StrokeLimitError,
    IKStatus.ARM_LIMIT: StrokeLimitError,
    IKStatus.BUCKET_LIMIT: StrokeLimitError,
}


@dataclass(frozen=True)
class IKSolution:
    """One solution: joint angles [rad] in the order swing, boom, arm, bucket, and the boom, arm
    and bucket cylinder extensions [m]."""

    q: np.ndarray
    extensions: np.ndarray

    def as_dict(self) -> dict[str, float]:
        names = ACTIVE_JOINTS + CYLINDER_NAMES
        return dict(zip(names, (*self.q.tolist(), *self.extensions.tolist()), strict=True))


@dataclass(frozen=True)
class IKBatch:
    """Solutions for N targets. Rows whose ``status`` is not OK hold NaN."""

    q: np.ndarray  # (N, 4) [rad]
    extensions: np.ndarray  # (N, 3) [m]
    status: np.ndarray  # (N,) IKStatus codes
    _solver: InverseKinematics
    _targets: np.ndarray
    _pitch: np.ndarray

    @property
    def ok(self) -> np.ndarray:
        return self.status == IKStatus.OK

    def message(self, i: int) -> str | None:
        """Why target ``i`` failed (None if it was solved)."""
        code = IKStatus(int(self.status[i]))
        if code is IKStatus.OK:
            return None
        return self._solver.explain(code, self._targets[i], float(self._pitch[i]))


class InverseKinematics:
    """Closed-form IK of one excavator geometry."""

    def __init__(self, geometry: ExcavatorGeometry, linkage: Linkage | None = None):
        self.geometry = g = geometry
        self.linkage = linkage if linkage is not None else Linkage(geometry)
        self.fk = ForwardKinematics(geometry, self.linkage)
        self._a1 = g.CH
        self._a2 = g.HM
        # Angle offsets of H in the boom frame and M in the arm frame (zero for the seed's
        # points, kept for generality).
        self._off1 = math.atan2(g.H[1], g.H[0])
        self._off2 = math.atan2(g.M[1], g.M[0])
        lo, hi = self.linkage.joint_limits["arm"]
        # The reach C->M as a function of the arm joint is monotonic on (-pi, 0).
        reach = [self._reach(q) for q in (lo, hi)]
        self.reach_range_m: tuple[float, float] = (min(reach), max(reach))

    def _reach(self, arm: float) -> float:
        t = arm + self._off2 - self._off1
        return math.sqrt(self._a1**2 + self._a2**2 + 2 * self._a1 * self._a2 * math.cos(t))

    # --- scalar --------------------------------------------------------------------------
    def solve(self, target: np.ndarray | tuple[float, float, float], bucket_pitch: float
              ) -> IKSolution:
        """IK for one tip target (x, y, z) [m] in ``base_link`` and bucket pitch [rad].

        Raises ``InvalidInputError``, ``UnreachableError`` or ``StrokeLimitError`` with a message
        naming the value and the limit.
        """
        batch = self.solve_batch(np.asarray(target, dtype=float).reshape(1, 3),
                                 np.asarray([bucket_pitch], dtype=float))
        code = IKStatus(int(batch.status[0]))
        if code is not IKStatus.OK:
            raise _ERROR_TYPES[code](batch.message(0))
        return IKSolution(q=batch.q[0], extensions=batch.extensions[0])

    # --- vectorized ----------------------------------------------------------------------
    def solve_batch(self, targets: np.ndarray, bucket_pitch: np.ndarray | float) -> IKBatch:
        """IK for ``targets`` of shape (N, 3) [m] in ``base_link`` and pitches (N,) [rad]."""
        g = self.geometry
        targets = np.asarray(targets, dtype=float)
        if targets.ndim != 2 or targets.shape[1] != 3:
            raise InvalidInputError(f"targets must have shape (N, 3), got {targets.shape}")
        pitch = np.broadcast_to(np.asarray(bucket_pitch, dtype=float), targets.shape[:1])
        x, y, z = targets[:, 0], targets[:, 1], targets[:, 2]
        status = np.zeros(len(targets), dtype=np.int8)
        finite = np.isfinite(x) & np.isfinite(y) & np.isfinite(z) & np.isfinite(pitch)
        status[~finite] = IKStatus.NOT_FINITE

        q, d, cos_t = self._closed_form(targets, pitch)
        reach_lo, reach_hi = self.reach_range_m
        with np.errstate(invalid="ignore"):
            far = finite & ((d < reach_lo - 1e-12) | (d > reach_hi + 1e-12) | (np.abs(cos_t) > 1))
        status[far] = IKStatus.OUT_OF_REACH
        pending = status == IKStatus.OK
        for col, (code, lim) in enumerate(
            ((IKStatus.SWING_LIMIT, g.swing_limits_rad),
             (IKStatus.BOOM_LIMIT, self.linkage.joint_limits["boom"]),
             (IKStatus.ARM_LIMIT, self.linkage.joint_limits["arm"]),
             (IKStatus.BUCKET_LIMIT, self.linkage.joint_limits["bucket"]))
        ):
            with np.errstate(invalid="ignore"):
                out = pending & ((q[:, col] < lim[0] - 1e-12) | (q[:, col] > lim[1] + 1e-12))
            status[out] = code
            pending &= ~out

        ok = status == IKStatus.OK
        q[~ok] = np.nan
        ext = np.full((len(targets), 3), np.nan)
        if np.any(ok):
            qo = q[ok]
            ext[ok] = np.stack(self.linkage.extensions(qo[:, 1], qo[:, 2], qo[:, 3], check=False),
                               axis=1)
        return IKBatch(q=q, extensions=ext, status=status, _solver=self, _targets=targets,
                       _pitch=np.array(pitch))

    # --- messages ------------------------------------------------------------------------
    def explain(self, code: IKStatus, target: np.ndarray, pitch: float) -> str:
        """The reason a target failed, with the value and the limit."""
        tgt = f"target ({', '.join(fmt_number(v) for v in target[:3])}) m"
        pitch_s = (f"bucket pitch {fmt_number(math.degrees(pitch), '.1f')} deg"
                   if math.isfinite(pitch) else f"bucket pitch {pitch}")
        if code is IKStatus.NOT_FINITE:
            return (f"{tgt} with {pitch_s}: every coordinate and the pitch must be finite "
                    "numbers (got NaN or inf)")
        g = self.geometry
        q_all, d_all, _ = self._closed_form(np.asarray(target, dtype=float).reshape(1, 3),
                                            np.array([pitch]))
        d = float(d_all[0])
        lo, hi = self.reach_range_m
        if code is IKStatus.OUT_OF_REACH:
            side = "beyond the longest" if d > hi else "inside the shortest"
            return (f"{tgt} with {pitch_s} is out of reach: its wrist point M is "
                    f"{fmt_number(d)} m from the boom foot C, {side} reach; the arm cylinder "
                    f"stroke allows {lo:.3f}..{hi:.3f} m. Move the target or change the pitch.")
        col = {IKStatus.SWING_LIMIT: 0, IKStatus.BOOM_LIMIT: 1, IKStatus.ARM_LIMIT: 2,
               IKStatus.BUCKET_LIMIT: 3}[code]
        value = float(q_all[0, col])
        name = ACTIVE_JOINTS[col]
        if col == 0:
            lim = g.swing_limits_rad
            swing = fmt_number(math.degrees(value), ".1f")
            return (f"{tgt}: swing {swing} deg outside the configured swing "
                    f"limits {math.degrees(lim[0]):.1f}..{math.degrees(lim[1]):.1f} deg")
        lim = self.linkage.joint_limits[name]
        cyl = CYLINDER_NAMES[col - 1]
        joint = fmt_number(math.degrees(value), ".1f")
        msg = (f"{tgt} with {pitch_s} needs the {name} joint at {joint} deg, "
               f"outside {math.degrees(lim[0]):.1f}..{math.degrees(lim[1]):.1f} deg that the "
               f"{cyl} stroke allows ({g.cylinders[cyl].stroke_range})")
        if name == "bucket":
            msg += (f"; the bucket four-bar toggles at "
                    f"{math.degrees(self.linkage.bucket_toggle_angle):.1f} deg")
        return msg + ". Change the target or the bucket pitch."

    def _closed_form(self, targets: np.ndarray, pitch: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Joint angles (N, 4) [rad] with no limit checks, the wrist distance |CM| (N,) [m] and
        the cosine of the two-link triangle (outside [-1, 1]: no triangle)."""
        g = self.geometry
        x, y, z = targets[:, 0], targets[:, 1], targets[:, 2]
        with np.errstate(invalid="ignore", over="ignore"):  # huge targets: out of reach
            rho = np.hypot(x, y) - g.B[0]
            # Wrist M in the boom plane, relative to the boom foot C.
            cp, sp = np.cos(pitch), np.sin(pitch)
            mx = rho - (cp * g.tip[0] - sp * g.tip[1]) - g.C[0]
            mz = z - g.B[1] - (sp * g.tip[0] + cp * g.tip[1]) - g.C[1]
            d2 = mx * mx + mz * mz
            a1, a2 = self._a1, self._a2
            cos_t = (d2 - a1 * a1 - a2 * a2) / (2.0 * a1 * a2)
            t = -np.arccos(np.clip(cos_t, -1.0, 1.0))  # elbow-up branch: arm joint < 0
            q2 = t - self._off2 + self._off1
            q1 = np.arctan2(mz, mx) - np.arctan2(a2 * np.sin(t), a1 + a2 * np.cos(t)) - self._off1
            q3 = pitch - q1 - q2
            q3 = np.arctan2(np.sin(q3), np.cos(q3))  # pitch is an angle: wrap to (-pi, pi]
            q = np.stack([np.arctan2(y, x), q1, q2, q3], axis=1)
        return q, np.sqrt(d2), cos_t
