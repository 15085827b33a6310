"""Plausibility of the soil model's inputs and output: the one place soil_node (and
``SoilCoupling``) decide whether a bucket pose, twist or computed wrench can come from the
machine at all.

The limits are the machine's (``excavator_sim.plausibility.MachineEnvelope``: hydraulic flow
and pressure limits through the linkage) and the terrain's extent; this module only compares,
so it needs neither MuJoCo nor ROS. A value beyond a limit raises
:class:`ImplausibleInputError` naming the value, the limit and where the limit comes from; the
caller rejects the input and keeps its last good state (the terrain is not touched).

- **Pose**: the bucket origin within the terrain grid's extent plus ``margin_xy_m`` (the
  machine's reach: a bucket further out has no machine under it on this terrain), no bucket
  corner deeper below the local terrain surface than ``max_depth_m`` (the machine's digging
  depth plus its dump height plus the bucket) and the origin no higher above it than
  ``max_height_m``.
  A deeper pose would get a force computed as if the bucket had just touched the ground (the
  force model's stiffness starts at first contact): a fault upstream, not soil.
- **Twist**: linear speed of the bucket origin under ``linear_speed_m_s``, angular speed under
  ``angular_speed_rad_s`` (a multiple of the machine's top speeds).
- **Wrench** (the model's output): under ``force_n`` / ``torque_nm`` (a multiple of the
  machine's maximum digging force): beyond it the simulator would reject it anyway.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from excavator_sim.soil.bucket_prism import BucketPose, BucketPrism
from excavator_sim.soil.errors import SoilInputError

if TYPE_CHECKING:
    # for the annotation only: terrain.py loads the numba kernels, which every importer of
    # the simulation (excavator_sim.plausibility) would pay for, ~35-60 MiB a process
    from excavator_sim.soil.terrain_config import TerrainConfig

SurfaceFn = Callable[[np.ndarray, np.ndarray], np.ndarray]


class ImplausibleInputError(SoilInputError):
    """A finite value the machine cannot produce (pose, twist) or act against (wrench)."""


@dataclass(frozen=True)
class SoilLimits:
    """Plausibility limits (SI), from the machine (``excavator_sim.plausibility``)."""

    linear_speed_m_s: float
    angular_speed_rad_s: float
    force_n: float
    torque_nm: float
    margin_xy_m: float
    max_depth_m: float
    max_height_m: float
    source: str = "the machine's hydraulics and geometry"

    def __post_init__(self) -> None:
        for name in ("linear_speed_m_s", "angular_speed_rad_s", "force_n", "torque_nm",
                     "margin_xy_m", "max_depth_m", "max_height_m"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0.0):
                raise ValueError(f"soil plausibility limit {name} = {value!r} must be > 0")


def _norm(values: np.ndarray) -> float:
    """Euclidean norm without overflow for finite input (scaled by the largest element)."""
    a = np.abs(np.asarray(values, dtype=float).ravel())
    m = float(a.max()) if a.size else 0.0
    if m == 0.0 or not math.isfinite(m):
        return m
    return m * float(np.sqrt(np.sum((a / m) ** 2)))


def _fmt(values: np.ndarray | tuple[float, ...]) -> str:
    return "[" + ", ".join(f"{float(v):.6g}" for v in np.ravel(values)) + "]"


class SoilPlausibility:
    """Checks against the terrain ``config``'s extent and the machine's ``limits``."""

    def __init__(self, config: TerrainConfig, bucket: BucketPrism, limits: SoilLimits) -> None:
        self.config = config
        self.bucket = bucket
        self.limits = limits
        m = limits.margin_xy_m
        self.x_range = (config.x0 - m, config.x0 + config.nx * config.cell_xy_m + m)
        self.y_range = (config.y0 - m, config.y0 + config.ny * config.cell_xy_m + m)

    def check_twist(self, linear_m_s: np.ndarray, angular_rad_s: np.ndarray) -> None:
        lin = np.asarray(linear_m_s, dtype=float).reshape(3)
        ang = np.asarray(angular_rad_s, dtype=float).reshape(3)
        if not (np.all(np.isfinite(lin)) and np.all(np.isfinite(ang))):
            raise SoilInputError(f"bucket twist linear={_fmt(lin)} m/s angular={_fmt(ang)} "
                                 "rad/s is not finite; the last valid twist is kept")
        v, w = _norm(lin), _norm(ang)
        lim = self.limits
        if v > lim.linear_speed_m_s:
            raise ImplausibleInputError(
                f"bucket speed {v:.6g} m/s (linear={_fmt(lin)}) exceeds the plausible "
                f"{lim.linear_speed_m_s:.6g} m/s ({lim.source}); the last valid twist is kept")
        if w > lim.angular_speed_rad_s:
            raise ImplausibleInputError(
                f"bucket angular speed {w:.6g} rad/s (angular={_fmt(ang)}) exceeds the "
                f"plausible {lim.angular_speed_rad_s:.6g} rad/s ({lim.source}); the last valid "
                "twist is kept")

    def check_pose(self, pose: BucketPose, surface: SurfaceFn) -> None:
        """``surface(x, y)``: terrain height [m], -inf outside the grid (``Terrain.surface_m``).
        Checked before the terrain moves any soil."""
        (x_lo, x_hi), (y_lo, y_hi) = self.x_range, self.y_range
        if not (x_lo <= pose.x <= x_hi and y_lo <= pose.y <= y_hi):
            raise ImplausibleInputError(
                f"bucket pose x={pose.x:.6g}, y={pose.y:.6g} m lies beyond the terrain grid plus "
                f"the machine's reach: x in [{x_lo:.6g}, {x_hi:.6g}], y in [{y_lo:.6g}, "
                f"{y_hi:.6g}] m; pose rejected (send the bucket frame in world, as sim_node "
                "does)")
        corners = self.bucket.corners(pose)
        ground = np.asarray(surface(corners[:, 0], corners[:, 1]), dtype=float)
        inside = np.isfinite(ground)
        c = self.config
        base = max(float(ground[inside].max()), c.initial_height_m) if inside.any() \
            else c.initial_height_m
        depth = float((ground[inside] - corners[inside, 2]).max()) if inside.any() else -math.inf
        lim = self.limits
        if depth > lim.max_depth_m:
            raise ImplausibleInputError(
                f"bucket pose z={pose.z:.6g} m puts the bucket {depth:.6g} m below the terrain "
                f"surface, deeper than the machine can put it ({lim.max_depth_m:.6g} m: its "
                "digging depth + dump height + bucket); pose rejected, terrain unchanged")
        if pose.z - base > lim.max_height_m:
            raise ImplausibleInputError(
                f"bucket pose z={pose.z:.6g} m is {pose.z - base:.6g} m above the terrain, "
                f"higher than the machine reaches ({lim.max_height_m:.6g} m); pose rejected")

    def check_wrench(self, force_n: np.ndarray, torque_nm: np.ndarray) -> None:
        f, t = _norm(force_n), _norm(torque_nm)
        lim = self.limits
        if not (math.isfinite(f) and math.isfinite(t)):
            raise SoilInputError(f"soil wrench force={_fmt(force_n)} N torque={_fmt(torque_nm)} "
                                 "N m is not finite; not published")
        if f > lim.force_n or t > lim.torque_nm:
            raise ImplausibleInputError(
                f"soil wrench |f| = {f:.6g} N, |tau| = {t:.6g} N m exceeds the plausible "
                f"{lim.force_n:.6g} N / {lim.torque_nm:.6g} N m (a multiple of the machine's "
                "maximum digging force); not published: check the soil preset's constants")
