"""Working ranges as a spec sheet states them (ISO 7135 / SAE J1193 conventions), from the geometry.

All figures are taken on a firm, level ground reference plane (GRP, ``z = 0`` of ``base_link``),
front equipment in the plane of the swing axis, horizontal distances from the swing axis, the
bucket tooth tip (``points.bucket.tip``) as the reference point, every joint within the range
its cylinder's stroke allows (``Linkage.joint_limits``):

- **maximum reach at ground level**: the largest horizontal distance of the tip with the tip
  on the GRP;
- **maximum digging depth**: the GRP to the lowest point the tip reaches;
- **maximum cutting height**: the GRP to the highest point the tip reaches;
- **maximum dumping height** (Caterpillar's "maximum dump clearance"): the boom raised to its
  upper limit, the bucket opened to its dump limit; the height of the dumped bucket's lowest
  point (tip, back corner, pivots), the largest over the arm's range;
- **minimum front swing radius** (Caterpillar's "boom-in reach"): the smallest, over every pose
  with the whole front above the GRP, of the largest horizontal distance of a front point
  (boom nose, arm, bucket pivots, tip, back corner) from the swing axis.

The ISO 7135 text is paywalled; these are the conventional meanings OEM sheets use
(docs/simulation.md, "Working ranges"). Computed by sampling the boom and arm ranges and solving
the bucket's circle about its pivot in closed form (depth, height, reach at ground level), then
refining the best sample on a finer local grid: the figures converge to well under 1 mm.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from excavator_kinematics.geometry import ExcavatorGeometry
from excavator_kinematics.linkage import Linkage

FRONT_POINTS = ("H", "G", "I", "K", "M", "L", "J", "tip", "base")


@dataclass(frozen=True)
class WorkingRanges:
    """A machine's ISO 7135 working ranges [m]."""

    reach_at_ground_m: float
    max_reach_m: float
    dig_depth_m: float
    cutting_height_m: float
    dump_height_m: float
    min_front_swing_radius_m: float

    def as_dict(self) -> dict[str, float]:
        return {"reach_at_ground_m": self.reach_at_ground_m, "max_reach_m": self.max_reach_m,
                "dig_depth_m": self.dig_depth_m, "cutting_height_m": self.cutting_height_m,
                "dump_height_m": self.dump_height_m,
                "min_front_swing_radius_m": self.min_front_swing_radius_m}


def _wrist(geometry: ExcavatorGeometry, boom: np.ndarray, arm: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray]:
    """Bucket pivot M in the ground frame (x from the swing axis, z above the GRP) [m]."""
    g = geometry
    a1, a2 = boom, boom + arm
    x = (g.B[0] + g.C[0] + np.cos(a1) * g.H[0] - np.sin(a1) * g.H[1]
         + np.cos(a2) * g.M[0] - np.sin(a2) * g.M[1])
    z = (g.B[1] + g.C[1] + np.sin(a1) * g.H[0] + np.cos(a1) * g.H[1]
         + np.sin(a2) * g.M[0] + np.cos(a2) * g.M[1])
    return x, z


def _in_interval(phi: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Whether angle ``phi`` lies in ``[lo, hi]`` (mod 2 pi; ``hi - lo < 2 pi``)."""
    return np.asarray(np.mod(phi - lo, 2.0 * math.pi) <= (hi - lo) + 1e-12)


class _Envelope:
    """The tip's circle about M per (boom, arm) sample: radius r, angle interval [lo, hi]."""

    def __init__(self, geometry: ExcavatorGeometry, linkage: Linkage):
        self.g = geometry
        self.lim = linkage.joint_limits
        self.r = math.hypot(*geometry.tip)
        self.tip_angle = math.atan2(geometry.tip[1], geometry.tip[0])

    def circle(self, boom: np.ndarray, arm: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        mx, mz = _wrist(self.g, boom, arm)
        blo, bhi = self.lim["bucket"]
        lo = boom + arm + blo + self.tip_angle
        return mx, mz, lo, lo + (bhi - blo)

    def extreme_sin(self, boom: np.ndarray, arm: np.ndarray, sign: float) -> np.ndarray:
        """Tip height [m] at the bucket angle that makes it highest (sign +1) or lowest (-1)."""
        _mx, mz, lo, hi = self.circle(boom, arm)
        target = sign * math.pi / 2.0
        s = np.maximum(sign * np.sin(lo), sign * np.sin(hi))
        s = np.where(_in_interval(np.full_like(lo, target), lo, hi), 1.0, s)
        return np.asarray(mz + sign * self.r * s)

    def ground_reach(self, boom: np.ndarray, arm: np.ndarray) -> np.ndarray:
        """Largest tip x [m] with the tip on the GRP (-inf where the circle misses it)."""
        mx, mz, lo, hi = self.circle(boom, arm)
        ratio = -mz / self.r
        ok = np.abs(ratio) <= 1.0
        base = np.arcsin(np.clip(ratio, -1.0, 1.0))
        best = np.full_like(mx, -np.inf)
        for phi in (base, math.pi - base):
            x = np.where(ok & _in_interval(phi, lo, hi), mx + self.r * np.cos(phi), -np.inf)
            best = np.maximum(best, x)
        return best

    def max_reach(self, boom: np.ndarray, arm: np.ndarray) -> np.ndarray:
        mx, _mz, lo, hi = self.circle(boom, arm)
        c = np.maximum(np.cos(lo), np.cos(hi))
        c = np.where(_in_interval(np.zeros_like(lo), lo, hi), 1.0, c)
        return np.asarray(mx + self.r * c)


def _refine(f: Callable[[np.ndarray, np.ndarray], np.ndarray],
            lim: dict[str, tuple[float, float]], maximise: bool, n: int = 241,
            rounds: int = 3) -> float:
    """Best of ``f(boom, arm)`` on a grid over the joint ranges, refined around the best."""
    boom_r, arm_r = lim["boom"], lim["arm"]
    best = -math.inf if maximise else math.inf
    for _ in range(rounds):
        b, a = np.meshgrid(np.linspace(*boom_r, n), np.linspace(*arm_r, n), indexing="ij")
        vals = f(b.ravel(), a.ravel())
        vals = np.where(np.isfinite(vals), vals, -np.inf if maximise else np.inf)
        i = int(np.argmax(vals) if maximise else np.argmin(vals))
        best = float(vals[i])
        db = 3.0 * (boom_r[1] - boom_r[0]) / (n - 1)
        da = 3.0 * (arm_r[1] - arm_r[0]) / (n - 1)
        bi, ai = float(b.ravel()[i]), float(a.ravel()[i])
        boom_r = (max(lim["boom"][0], bi - db), min(lim["boom"][1], bi + db))
        arm_r = (max(lim["arm"][0], ai - da), min(lim["arm"][1], ai + da))
    return best


def front_points(geometry: ExcavatorGeometry, linkage: Linkage, boom: np.ndarray,
                 arm: np.ndarray, bucket: np.ndarray) -> np.ndarray:
    """The front's outline points in the ground frame, shape ``[..., len(FRONT_POINTS), 2]``."""
    pts = linkage.points(boom, arm, bucket)
    stacked = np.stack([pts[k] for k in FRONT_POINTS], axis=-2)
    return np.asarray(stacked + np.array(geometry.B))


def working_ranges(geometry: ExcavatorGeometry, linkage: Linkage | None = None,
                   samples: int = 241) -> WorkingRanges:
    """The ISO 7135 working ranges of ``geometry`` (module docstring for the definitions)."""
    linkage = linkage if linkage is not None else Linkage(geometry)
    env = _Envelope(geometry, linkage)
    lim = linkage.joint_limits
    reach_gl = _refine(env.ground_reach, lim, True, samples)
    reach = _refine(env.max_reach, lim, True, samples)
    depth = -_refine(lambda b, a: env.extreme_sin(b, a, -1.0), lim, False, samples)
    height = _refine(lambda b, a: env.extreme_sin(b, a, +1.0), lim, True, samples)
    # Dump: boom at its upper limit, bucket at its dump (lower) limit, over the arm's range.
    arm = np.linspace(*lim["arm"], 4 * samples + 1)
    boom = np.full_like(arm, lim["boom"][1])
    pts = front_points(geometry, linkage, boom, arm, np.full_like(arm, lim["bucket"][0]))
    bucket_pts = pts[:, [FRONT_POINTS.index(k) for k in ("M", "L", "tip", "base")], 1]
    dump = float(bucket_pts.min(axis=1).max())
    # Minimum front swing radius: min over poses (front above the GRP) of the farthest point.
    n = max(33, samples // 4)
    grids = np.meshgrid(*(np.linspace(*lim[j], n) for j in ("boom", "arm", "bucket")),
                        indexing="ij")
    pts = front_points(geometry, linkage, *(g.ravel() for g in grids))
    above = pts[..., 1].min(axis=-1) >= 0.0
    radius = np.where(above, pts[..., 0].max(axis=-1), np.inf)
    return WorkingRanges(reach_at_ground_m=reach_gl, max_reach_m=reach, dig_depth_m=depth,
                         cutting_height_m=height, dump_height_m=dump,
                         min_front_swing_radius_m=float(radius.min()))
