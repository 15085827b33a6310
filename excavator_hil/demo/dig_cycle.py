"""A dig cycle as bucket-tip waypoints: approach, dig, drag, curl, lift, swing, dump, return.

Pure: no ROS, no MuJoCo. Waypoints are tip targets in ``base_link`` with a bucket pitch (the
IK's inputs). A leg is interpolated either in Cartesian space (``"cartesian"``: the tip moves
linearly in cylindrical coordinates (radius, azimuth, height), the pitch linearly; a drag is a
straight cut at depth) or in joint space (``"joint"``: the joint angles move linearly between the
IK solutions of the two waypoints, as an operator curls, lifts and swings; the streamed tip
targets are the FK of those angles). The whole path is checked against the IK at construction
(dense samples): a plan that the machine cannot follow fails before anything moves, naming the
leg and the limit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from excavator_hil.errors import DemoError
from excavator_kinematics.inverse_kinematics import IKStatus, InverseKinematics


@dataclass(frozen=True)
class Waypoint:
    """Reach ``tip`` [m, base_link] with ``pitch`` [rad] ``duration_s`` after the previous one."""

    name: str
    tip: tuple[float, float, float]
    pitch: float
    duration_s: float
    mode: str = "cartesian"  # how the leg *to* this waypoint is interpolated: cartesian | joint


@dataclass(frozen=True)
class PathSample:
    phase: str
    tip: np.ndarray  # (3,) [m] in base_link
    pitch: float  # [rad]
    q: np.ndarray  # (4,) [rad] swing, boom, arm, bucket


def _cylindrical(tip: Sequence[float]) -> np.ndarray:
    return np.array([math.hypot(tip[0], tip[1]), math.atan2(tip[1], tip[0]), tip[2]])


class DigCyclePlan:
    """Time-parametrised tip path through the waypoints (the first is the start pose)."""

    def __init__(self, waypoints: Sequence[Waypoint], ik: InverseKinematics,
                 check_step_s: float = 0.05):
        if len(waypoints) < 2:
            raise DemoError("a dig cycle needs at least a start and one more waypoint")
        for wp in waypoints[1:]:
            if not (wp.duration_s > 0 and math.isfinite(wp.duration_s)):
                raise DemoError(f"waypoint {wp.name}: duration {wp.duration_s} s must be > 0")
            if wp.mode not in ("cartesian", "joint"):
                raise DemoError(f"waypoint {wp.name}: mode {wp.mode!r} must be 'cartesian' or "
                                "'joint'")
        self.waypoints = list(waypoints)
        self.ik = ik
        self._times = np.cumsum([0.0] + [w.duration_s for w in waypoints[1:]])
        cyl = np.array([_cylindrical(w.tip) for w in waypoints])
        # Shortest way round for the azimuth.
        cyl[1:, 1] = cyl[0, 1] + np.cumsum(np.angle(np.exp(1j * np.diff(cyl[:, 1]))))
        self._cyl = cyl
        self._pitch = np.array([w.pitch for w in waypoints])
        batch = ik.solve_batch(np.array([w.tip for w in waypoints]), self._pitch)
        for i in np.flatnonzero(~batch.ok).tolist():
            raise DemoError(f"waypoint '{waypoints[i].name}': {batch.message(i)}")
        q = batch.q.copy()
        q[:, 0] = q[0, 0] + np.cumsum(np.r_[0.0, np.angle(np.exp(1j * np.diff(q[:, 0])))])
        self._q = q
        self._joint_leg = np.array([w.mode == "joint" for w in waypoints])
        self._check(check_step_s)

    @property
    def duration_s(self) -> float:
        return float(self._times[-1])

    @property
    def phase_starts_s(self) -> list[float]:
        """When each leg (phase) begins [s from the start]."""
        return [float(t) for t in self._times[:-1]]

    def phase_at(self, t: float) -> int:
        """Index of the waypoint being approached at time ``t`` [s] (0 before the start)."""
        return int(np.clip(np.searchsorted(self._times, t, side="right"), 1,
                           len(self.waypoints) - 1))

    def _interpolate(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        t = np.clip(t, 0.0, self.duration_s)
        r = np.interp(t, self._times, self._cyl[:, 0])
        a = np.interp(t, self._times, self._cyl[:, 1])
        z = np.interp(t, self._times, self._cyl[:, 2])
        pitch = np.interp(t, self._times, self._pitch)
        tips = np.stack([r * np.cos(a), r * np.sin(a), z], axis=-1)
        # Joint-space legs: the FK of linearly interpolated joint angles.
        leg = np.clip(np.searchsorted(self._times, t, side="left"), 1, len(self._times) - 1)
        joint = self._joint_leg[leg]
        if np.any(joint):
            q = np.stack([np.interp(t[joint], self._times, self._q[:, k]) for k in range(4)],
                         axis=-1)
            tips[joint] = self.ik.fk.tip(q)
            pitch[joint] = self.ik.fk.bucket_pitch(q)
        return tips, pitch

    def sample(self, t: float) -> PathSample:
        tips, pitch = self._interpolate(np.array([t]))
        sol = self.ik.solve(tips[0], float(pitch[0]))
        return PathSample(self.waypoints[self.phase_at(t)].name, tips[0], float(pitch[0]), sol.q)

    def _check(self, step_s: float) -> None:
        t = np.union1d(np.arange(0.0, self.duration_s, step_s), self._times)
        tips, pitch = self._interpolate(t)
        batch = self.ik.solve_batch(tips, pitch)
        bad = np.flatnonzero(batch.status != IKStatus.OK)
        if len(bad):
            i = int(bad[0])
            name = self.waypoints[self.phase_at(float(t[i]))].name
            raise DemoError(f"dig cycle leg to '{name}' at t = {t[i]:.2f} s cannot be "
                            f"followed: {batch.message(i)}")


def _point(v: np.ndarray) -> tuple[float, float, float]:
    x, y, z = (float(c) for c in v)
    return x, y, z


def default_dig_cycle(ik: InverseKinematics, start_q: Sequence[float] | np.ndarray,
                      dig_radius_m: float = 5.45, depth_m: float = 0.35,
                      drag_length_m: float = 1.15, dump_azimuth_rad: float = math.pi / 2,
                      time_scale: float = 1.0) -> DigCyclePlan:
    """Approach, dig, drag, curl, lift, swing, dump, return, starting from joint angles
    ``start_q`` [rad].

    The teeth enter the ground ``dig_radius_m`` from the swing axis and drag ``drag_length_m``
    towards the machine ``depth_m`` below the ground plane (z = 0 in base_link) with the bucket
    open (pitch 0.1 rad); the bucket then curls in to pitch -0.84 rad, where it holds its full
    capacity (the opening faces up within the angle of repose), lifts with the arm folded in
    and the bucket curled on towards its stop (bucket 12 deg: the opening 16 deg from level,
    so the swing's start does not tip the load over the edge, as with the opening 46 deg from
    level, 3 deg inside the repose angle, where the per-cell bucket soil lost 40 % in the
    swing), swings to ``dump_azimuth_rad`` and dumps by curling out to 1.66 rad, where it
    holds nothing.
    The carry and dump poses are joint-space key poses inside the limits with margin
    (docs/demo.md). ``time_scale`` stretches every leg (2.0 = half speed).
    """
    q_start = np.asarray(start_q, dtype=float)

    def key_pose(name: str, degrees: tuple[float, float, float, float], duration: float
                 ) -> Waypoint:
        q = np.radians(degrees)
        tip = _point(ik.fk.tip(q))
        return Waypoint(name, tip, float(ik.fk.bucket_pitch(q)), duration * time_scale, "joint")

    r, z_dig, s = dig_radius_m, -depth_m, time_scale
    swing_deg = math.degrees(dump_azimuth_rad)
    start = Waypoint("start", _point(ik.fk.tip(q_start)),
                     float(ik.fk.bucket_pitch(q_start)), 1.0)
    legs = [
        start,
        Waypoint("approach", (r + 0.25, 0.0, 0.7), 0.44, 3.0 * s),
        Waypoint("dig", (r, 0.0, z_dig), 0.25, 2.5 * s),
        Waypoint("drag", (r - drag_length_m, 0.0, z_dig), 0.10, 3.0 * s),
        key_pose("curl", (0.0, 22.0, -112.0, 42.0), 2.0),
        key_pose("lift", (0.0, 50.0, -128.0, 12.0), 3.0),
        key_pose("swing", (swing_deg, 50.0, -128.0, 12.0), 4.0),
        key_pose("dump", (swing_deg, 45.0, -90.0, 140.0), 2.5),
        Waypoint("return", (r + 0.25, 0.0, 0.7), 0.44, 4.0 * s, "joint"),
    ]
    return DigCyclePlan(legs, ik)
