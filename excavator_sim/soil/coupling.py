"""Soil and simulator in one process (no ROS): what soil_node and sim_node do over DDS, as a
direct call per physics step, for tests, benchmarks and a fast offline mode.

Works with any object offering the simulator's methods (``ExcavatorSimulation``): ``time``
[s], ``bucket_pose() -> (position [m], quaternion (w, x, y, z))``, ``bucket_twist() ->
(linear [m/s], angular [rad/s])`` in ``world``, ``apply_bucket_wrench(force [N], torque
[N m])``, ``set_bucket_payload(mass [kg], centre [m], inertia [kg m^2])`` (bucket frame; the
per-cell bucket soil's load as mass on the bucket body) and a ``terrain`` height field with
``set_region(i0, j0, heights [m])`` whose nodes
are the soil grid's cell centres (``config/sim.yaml`` terrain = ``config/soil.yaml``
terrain). This module imports neither MuJoCo nor rclpy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from excavator_sim.soil.bucket_body import AccelerationEstimate, UpdateInterval
from excavator_sim.soil.bucket_prism import BucketPose, BucketPrism
from excavator_sim.soil.bucket_soil import soil_columns
from excavator_sim.soil.config import SoilConfig
from excavator_sim.soil.errors import OutsideGridError
from excavator_sim.soil.forces import DiMaioForceModel, ForceResult, SurfaceFn
from excavator_sim.soil.payload import BucketPayload
from excavator_sim.soil.plausibility import SoilLimits, SoilPlausibility
from excavator_sim.soil.terrain import Box, Terrain, TerrainUpdate


@dataclass
class CoupledStep:
    """What one coupled step did."""

    pose: BucketPose
    update: TerrainUpdate
    forces: ForceResult
    refreshed_cells: int  # height-field nodes rewritten


@dataclass
class SoilUpdate:
    """One update of the soil for a bucket pose and twist (:meth:`SoilCoupling.update`)."""

    pose: BucketPose
    forces: ForceResult
    load_m3: float  # soil in the bucket after the update
    changed: Box | None  # terrain cells changed since the last update (i0, i1, j0, j1)
    heights: np.ndarray | None  # their heights [m], [i, j]
    outside: str = ""  # the bucket left the grid: terrain untouched, force over no ground
    # the load as a rigid body on the bucket (per-cell bucket soil; None: the closed form,
    # whose weight is in ``forces``): the simulator puts it on its bucket body
    payload: BucketPayload | None = None


class SoilCoupling:
    """Terrain + force model driving a simulator's bucket wrench and height field."""

    def __init__(self, config: SoilConfig, bucket: BucketPrism,
                 limits: SoilLimits | None = None) -> None:
        """``limits`` (``MachineEnvelope.soil_limits()``): check the simulator's pose and twist
        as soil_node does, raising ``ImplausibleInputError`` before any soil moves."""
        self.terrain = Terrain(config.terrain, bucket)
        self.forces = DiMaioForceModel(config.dimaio, bucket)
        self.plausibility = (SoilPlausibility(config.terrain, bucket, limits)
                             if limits is not None else None)
        self.last_pose: BucketPose | None = None
        # the bucket's acceleration (per-cell bucket soil: it tilts the soil's gravity)
        self.acceleration = AccelerationEstimate()
        self.interval = UpdateInterval()   # the time the soil in the bucket slides

    def bucket_soil(self, column_m: float | None = None) -> np.ndarray:
        """The soil in the bucket at the last step's pose as columns in ``world``
        (``soil_columns``; ``column_m`` default: the soil cell), e.g. for
        ``excavator_hil.render.render_png(..., bucket_soil=...)``; with the per-cell bucket
        soil its columns (``BucketBody.columns``)."""
        if self.last_pose is None:
            return np.zeros((0, 7))
        if self.terrain.body is not None:  # the per-cell bucket soil: its own columns
            return self.terrain.body.columns(self.last_pose)
        c = self.terrain.config
        return soil_columns(self.terrain.bucket, self.last_pose, self.terrain.load_volume_m3,
                            c.repose_angle_rad, column_m or c.cell_xy_m)

    def update(self, position: Any, quat_wxyz: Any, linear: Any, angular: Any,
               outside_ok: bool = False, time_s: float | None = None) -> SoilUpdate:
        """The soil's answer to the bucket at origin ``position`` [m], orientation
        ``quat_wxyz``, velocity ``linear`` [m/s] and ``angular`` [rad/s] (``world``): soil
        moved, wrench, load and the changed terrain box. With ``outside_ok`` a bucket outside
        the grid leaves the terrain alone and the force is computed over no ground (only the
        load weighs), as soil_node does; else ``OutsideGridError``. Implausible input raises
        ``ImplausibleInputError`` before any soil moves. ``time_s``: the instant of the pose
        and twist [s] (simulated), from which the bucket's acceleration is estimated (None:
        the soil in the bucket feels gravity only)."""
        w, x, y, z = (float(v) for v in quat_wxyz)
        pose = BucketPose.from_quaternion((float(position[0]), float(position[1]),
                                           float(position[2])), (x, y, z, w))
        lin, ang = np.asarray(linear, dtype=float), np.asarray(angular, dtype=float)
        if self.plausibility is not None:
            self.plausibility.check_twist(lin, ang)
            self.plausibility.check_pose(pose, self.terrain.surface_m)
        outside = ""
        surface: SurfaceFn = self.terrain.surface_m
        acc = self.acceleration.update(time_s, lin) if time_s is not None else None
        elapsed = self.interval.elapsed(time_s)
        try:
            self.terrain.update(pose, acceleration_m_s2=acc, elapsed_s=elapsed)
        except OutsideGridError as exc:
            if not outside_ok:
                raise
            outside, surface = str(exc), _no_ground
        result = self.forces.step(pose, lin, ang, surface, self.terrain.load_volume_m3,
                                  weight_on_body=self.terrain.load_on_body)
        if self.plausibility is not None:
            self.plausibility.check_wrench(result.force, result.torque)
        box = self.terrain.take_dirty()
        heights = self.terrain.heights_m(box) if box is not None else None
        return SoilUpdate(pose, result, float(self.terrain.load_volume_m3), box, heights,
                          outside, self.terrain.load_payload())

    def step(self, sim: Any) -> CoupledStep:
        """Read the bucket from ``sim``, move soil, apply the wrench, refresh the changed
        region of its height field. Call once per physics step (or every few)."""
        pos, quat_wxyz = sim.bucket_pose()
        lin, ang = sim.bucket_twist()
        w, x, y, z = (float(v) for v in quat_wxyz)
        pose = BucketPose.from_quaternion((float(pos[0]), float(pos[1]), float(pos[2])),
                                          (x, y, z, w))
        if self.plausibility is not None:
            self.plausibility.check_twist(np.asarray(lin), np.asarray(ang))
            self.plausibility.check_pose(pose, self.terrain.surface_m)
        acc = self.acceleration.update(float(sim.time), np.asarray(lin, dtype=float))
        # the soil slides out at Newmark's rate over the time since the last step, as in
        # update() (the product's path): without it a spill would leave at once
        update = self.terrain.update(pose, acceleration_m_s2=acc,
                                     elapsed_s=self.interval.elapsed(float(sim.time)))
        self.last_pose = pose
        result = self.forces.step(pose, np.asarray(lin), np.asarray(ang),
                                  self.terrain.surface_m, self.terrain.load_volume_m3,
                                  weight_on_body=self.terrain.load_on_body)
        payload = self.terrain.load_payload()
        if payload is not None:  # the load's mass on the bucket body (its weight not in result)
            sim.set_bucket_payload(payload.mass_kg, payload.centre_m, payload.inertia_kg_m2)
        sim.apply_bucket_wrench(result.force, result.torque)
        box = self.terrain.take_dirty()
        cells = 0
        if box is not None:
            heights = self.terrain.heights_m(box)
            sim.terrain.set_region(box[0], box[2], heights)
            cells = heights.size
        return CoupledStep(pose, update, result, cells)


def _no_ground(x: np.ndarray | float, _y: np.ndarray | float) -> np.ndarray:
    return np.full(np.shape(x), -np.inf)
