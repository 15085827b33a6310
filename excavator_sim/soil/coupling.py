"""Soil and simulator in one process (no ROS): what soil_node and sim_node do over DDS, as a
direct call per physics step, for tests, benchmarks and a fast offline mode.

Works with any object offering the simulator's methods (``ExcavatorSimulation``):
``bucket_pose() -> (position [m], quaternion (w, x, y, z))``, ``bucket_twist() -> (linear
[m/s], angular [rad/s])`` in ``world``, ``apply_bucket_wrench(force [N], torque [N m])`` and a
``terrain`` height field with ``set_region(i0, j0, heights [m])`` whose nodes are the soil
grid's cell centres (``config/sim.yaml`` terrain = ``config/soil.yaml`` terrain). This module
imports neither MuJoCo nor rclpy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from excavator_sim.soil.bucket_prism import BucketPose, BucketPrism
from excavator_sim.soil.bucket_soil import soil_columns
from excavator_sim.soil.config import SoilConfig
from excavator_sim.soil.forces import DiMaioForceModel, ForceResult
from excavator_sim.soil.plausibility import SoilLimits, SoilPlausibility
from excavator_sim.soil.terrain import Terrain, TerrainUpdate


@dataclass
class CoupledStep:
    """What one coupled step did."""

    pose: BucketPose
    update: TerrainUpdate
    forces: ForceResult
    refreshed_cells: int  # height-field nodes rewritten


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

    def bucket_soil(self, column_m: float | None = None) -> np.ndarray:
        """The soil in the bucket at the last step's pose as columns in ``world``
        (``soil_columns``; ``column_m`` default: the soil cell), e.g. for
        ``excavator_hil.render.render_png(..., bucket_soil=...)``."""
        if self.last_pose is None:
            return np.zeros((0, 7))
        c = self.terrain.config
        return soil_columns(self.terrain.bucket, self.last_pose, self.terrain.load_volume_m3,
                            c.repose_angle_rad, column_m or c.cell_xy_m)

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
        update = self.terrain.update(pose)
        self.last_pose = pose
        result = self.forces.step(pose, np.asarray(lin), np.asarray(ang),
                                  self.terrain.surface_m, self.terrain.load_volume_m3)
        sim.apply_bucket_wrench(result.force, result.torque)
        box = self.terrain.take_dirty()
        cells = 0
        if box is not None:
            heights = self.terrain.heights_m(box)
            sim.terrain.set_region(box[0], box[2], heights)
            cells = heights.size
        return CoupledStep(pose, update, result, cells)
