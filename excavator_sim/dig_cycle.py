"""A dig cycle as bucket-tip waypoints: approach, dig, drag, curl, lift, swing, dump, return.

Pure: no ROS, no MuJoCo. Waypoints are tip targets in ``base_link`` with a bucket pitch (the
IK's inputs); between two waypoints the tip moves linearly in cylindrical coordinates
(radius, azimuth, height) and the pitch linearly, so a swing is an arc about the swing axis and a
drag is a straight cut. The whole path is checked against the IK at construction (dense samples):
a plan that any part of the machine cannot follow fails before anything moves, naming the
waypoint and the limit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from excavator_kinematics.errors import KinematicsError
from excavator_kinematics.inverse_kinematics import IKStatus, InverseKinematics


@dataclass(frozen=True)
class Waypoint:
    """Reach ``tip`` [m, base_link] with ``pitch`` [rad] ``duration_s`` after the previous one."""

    name: str
    tip: tuple[float, float, float]
    pitch: float
    duration_s: float


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
            raise ValueError("a dig cycle needs at least a start and one more waypoint")
        for wp in waypoints[1:]:
            if not (wp.duration_s > 0 and math.isfinite(wp.duration_s)):
                raise ValueError(f"waypoint {wp.name}: duration {wp.duration_s} s must be > 0")
        self.waypoints = list(waypoints)
        self.ik = ik
        self._times = np.cumsum([0.0] + [w.duration_s for w in waypoints[1:]])
        cyl = np.array([_cylindrical(w.tip) for w in waypoints])
        # Shortest way round for the azimuth.
        cyl[1:, 1] = cyl[0, 1] + np.cumsum(np.angle(np.exp(1j * np.diff(cyl[:, 1]))))
        self._cyl = cyl
        self._pitch = np.array([w.pitch for w in waypoints])
        self._check(check_step_s)

    @property
    def duration_s(self) -> float:
        return float(self._times[-1])

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
            raise KinematicsError(f"dig cycle leg to '{name}' at t = {t[i]:.2f} s cannot be "
                                  f"followed: {batch.message(i)}")


def default_dig_cycle(ik: InverseKinematics, start_q: Sequence[float],
                      dig_radius_m: float = 5.45, depth_m: float = 0.35,
                      drag_length_m: float = 1.15, dump_azimuth_rad: float = math.pi / 2,
                      time_scale: float = 1.0) -> DigCyclePlan:
    """Approach, dig, drag, curl, lift, swing, dump, return, starting from joint angles
    ``start_q`` [rad].

    The teeth enter the ground ``dig_radius_m`` from the swing axis, drag ``drag_length_m``
    towards the machine ``depth_m`` below the ground plane (z = 0 in base_link), curl, lift,
    swing to ``dump_azimuth_rad`` and dump. ``time_scale`` stretches every leg (2.0 = half
    speed). The key poses were chosen inside the joint limits with margin (docs/demo.md).
    """
    start_q = np.asarray(start_q, dtype=float)
    start_tip = tuple(float(v) for v in ik.fk.tip(start_q))
    start_pitch = float(ik.fk.bucket_pitch(start_q))
    r, z_dig, a = dig_radius_m, -depth_m, dump_azimuth_rad
    r_drag = r - drag_length_m
    r_lift = r_drag + 0.5
    s = time_scale
    legs = [
        Waypoint("start", start_tip, start_pitch, 1.0),
        Waypoint("approach", (r + 0.25, 0.0, 0.7), 0.44, 3.0 * s),
        Waypoint("dig", (r, 0.0, z_dig), 0.25, 2.5 * s),
        Waypoint("drag", (r_drag, 0.0, z_dig), 0.10, 3.0 * s),
        Waypoint("curl", (r_drag + 0.3, 0.0, z_dig + 0.15), 0.87, 2.0 * s),
        Waypoint("lift", (r_lift, 0.0, 2.2), 1.4, 3.0 * s),
        Waypoint("swing", (r_lift * math.cos(a), r_lift * math.sin(a), 2.2), 1.4, 4.0 * s),
        Waypoint("dump", ((r_lift + 0.7) * math.cos(a), (r_lift + 0.7) * math.sin(a), 2.6), 0.7,
                 2.5 * s),
        Waypoint("return", (r + 0.25, 0.0, 0.7), 0.44, 4.0 * s),
    ]
    return DigCyclePlan(legs, ik)
