"""The demo's drive with the loop closed: a straight path over firm ground, a patch of soft soil
and a ridge, to where the machine digs.

With hardware in the loop the PLC's speed loops drive the simulated machine, so the path is
chosen to show what such a loop meets: on the firm heavy clay the measured speed settles on the
set-point; on the ridge (``terrain.ridge_*`` of the soil model, whose terrain sim_node's
height field follows: planar flanks of 10 deg) the grade asks for more torque uphill and a
braking one downhill, and the PI loop holds the speed once its integral has caught up; on the
patch of dry sand on the uphill flank (``traction.patch.*`` of sim_node) both tracks slip
markedly more than on the clay (the ground speed falls behind the track speed:
Janosi-Hanamoto shear on a weaker soil under the thrust the slope asks for). The machine is
then where the dig cycle expects it (x = 0 in world, heading +x), the ground ahead flat: the
dig, the soil moved and the other results are those of the standalone demo.

The soil grid is stretched backwards (``x0`` of the shipped grid, 16 m x 16 m centred at x = 4,
goes from -4 m to -23 m) so the path lies on it; sim_node's height field is put on the same
cells (``excavator_hil.fleet.sim_grid_parameters``).

The MuJoCo base stays planar (docs/simulation.md, "Grade and soil under the machine"): the
ridge acts on the drive train's traction and the IMU, the machine is drawn at z = 0 over it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from excavator_sim.soil.terrain_config import TerrainConfig


@dataclass(frozen=True)
class DrivePath:
    """Where the machine starts and stops [m, world x] and its speed set-point [m/s], the
    soft patch (a rectangle of
    ``patch_soil``, across both tracks so the machine keeps its heading) and the ridge
    (crest x, length foot to foot, height) on the way; the soil grid's new lower x edge."""

    start_x_m: float = -21.0
    stop_x_m: float = 0.0
    speed_m_s: float = 0.8
    patch_soil: str = "dry_sand"
    patch_x_m: tuple[float, float] = (-11.0, -8.5)   # on the ridge's uphill flank
    patch_y_m: tuple[float, float] = (-3.0, 3.0)
    ridge_x_m: float = -6.5
    ridge_length_m: float = 10.0
    ridge_top_m: float = 1.0
    ridge_height_m: float = 0.8
    grid_x_min_m: float = -23.0

    @property
    def steepest_grade_rad(self) -> float:
        """The grade of the ridge's flanks [rad]."""
        return math.atan(self.ridge_height_m / (0.5 * (self.ridge_length_m - self.ridge_top_m)))

    @property
    def distance_m(self) -> float:
        return self.stop_x_m - self.start_x_m

    def soil_grid(self, shipped: TerrainConfig) -> TerrainConfig:
        """The shipped soil grid stretched back to ``grid_x_min_m`` (its far edge, the dig's
        side, unchanged), with the ridge."""
        x_max = shipped.x0 + shipped.nx * shipped.cell_xy_m
        size = x_max - self.grid_x_min_m
        return dataclasses.replace(shipped, size_x_m=size, centre_x_m=self.grid_x_min_m
                                   + 0.5 * size, ridge_x_m=self.ridge_x_m,
                                   ridge_length_m=self.ridge_length_m,
                                   ridge_top_m=self.ridge_top_m,
                                   ridge_height_m=self.ridge_height_m)

    def soil_node_parameters(self, grid: TerrainConfig) -> dict[str, float]:
        """soil_node's (and the in-process soil's) ``terrain.*`` for ``grid``."""
        return {"terrain.size_x_m": grid.size_x_m, "terrain.centre_x_m": grid.centre_x_m,
                "terrain.ridge_x_m": grid.ridge_x_m,
                "terrain.ridge_length_m": grid.ridge_length_m,
                "terrain.ridge_top_m": grid.ridge_top_m,
                "terrain.ridge_height_m": grid.ridge_height_m}

    def sim_parameters(self) -> dict[str, float | str]:
        """sim_node's start and soft patch (its height field: ``sim_grid_parameters``)."""
        return {"initial.base_x_m": self.start_x_m,
                "traction.patch.soil": self.patch_soil,
                "traction.patch.x_min_m": self.patch_x_m[0],
                "traction.patch.x_max_m": self.patch_x_m[1],
                "traction.patch.y_min_m": self.patch_y_m[0],
                "traction.patch.y_max_m": self.patch_y_m[1]}

    def zone(self, x_m: float, half_length_m: float) -> str:
        """What the tracks (contact ``2 half_length_m`` long, centred at ``x_m``) are on:
        ``patch`` (their centre on the soft patch: the soil the traction takes; it lies on the
        ridge's uphill flank), ``ridge`` (any of the footprint on the ridge: the grade), else
        ``firm`` (flat heavy clay)."""
        if self.patch_x_m[0] <= x_m <= self.patch_x_m[1]:
            return "patch"
        half = 0.5 * self.ridge_length_m
        if abs(x_m - self.ridge_x_m) < half + half_length_m:
            return "ridge"
        return "firm"
