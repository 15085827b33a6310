"""The terrain grid's configuration: its extent, cells, ridge and soil-motion parameters.

Apart from ``terrain`` (the grid and its numba kernels) so that what only reads or stretches the
grid (the soil's config file, the demo and the fleet laying out their ground, sim_node's height
field) does not load numba (~35-60 MiB a process: test_demo_memory).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from excavator_sim.soil.errors import SoilConfigError

BUCKET_SOIL_MODELS = ("closed_form", "cells")
# A column's cap (the highest its soil may stand, in z cells) where the bucket does not cover
# it: no wall caps its soil.
NO_CAP = np.int64(2**62)


@dataclass(frozen=True)
class TerrainConfig:
    """Grid and soil-motion parameters (all SI)."""

    size_x_m: float = 16.0
    size_y_m: float = 16.0
    centre_x_m: float = 0.0
    centre_y_m: float = 0.0
    cell_xy_m: float = 0.05
    cell_z_m: float = 0.01
    initial_height_m: float = 0.0
    # a ridge across the grid (all y) on the flat ground, a trapezoid along x: centred at
    # ridge_x_m, ridge_length_m from foot to foot, a flat top ridge_top_m long, ridge_height_m
    # high (0: none); its flanks are planes of grade height / ((length - top) / 2)
    ridge_height_m: float = 0.0
    ridge_x_m: float = 0.0
    ridge_length_m: float = 4.0
    ridge_top_m: float = 0.0
    repose_angle_rad: float = 0.85
    relax_iterations: int = 3
    margin_cells: int = 4
    density_kg_m3: float = 1700.0
    # the soil in the bucket: "cells" (a body of its own: bucket_body.BucketBody, its mass on
    # the bucket) or "closed_form" (one count, the shape held at the pose in closed form,
    # held_soil_shape, its weight in the wrench)
    bucket_soil_model: str = "cells"

    def __post_init__(self) -> None:
        if self.bucket_soil_model not in BUCKET_SOIL_MODELS:
            raise SoilConfigError(
                f"terrain parameter bucket_soil_model={self.bucket_soil_model!r} is not one of "
                f"{', '.join(BUCKET_SOIL_MODELS)}; set it in config/soil.yaml")
        checks = (
            ("size_x_m", self.size_x_m, 0.1, 1000.0),
            ("size_y_m", self.size_y_m, 0.1, 1000.0),
            ("cell_xy_m", self.cell_xy_m, 0.001, 1.0),
            ("cell_z_m", self.cell_z_m, 1e-5, 0.5),
            ("initial_height_m", self.initial_height_m, -1e4, 1e4),
            ("ridge_height_m", self.ridge_height_m, -100.0, 100.0),
            ("ridge_x_m", self.ridge_x_m, -1e6, 1e6),
            ("ridge_length_m", self.ridge_length_m, 0.1, 1000.0),
            ("ridge_top_m", self.ridge_top_m, 0.0, 1000.0),
            ("centre_x_m", self.centre_x_m, -1e6, 1e6),
            ("centre_y_m", self.centre_y_m, -1e6, 1e6),
            ("repose_angle_rad", self.repose_angle_rad, 0.05, 1.5),
            ("relax_iterations", self.relax_iterations, 0, 100),
            ("margin_cells", self.margin_cells, 1, 100),
            ("density_kg_m3", self.density_kg_m3, 100.0, 5000.0),
        )
        for name, value, lo, hi in checks:
            if not (isinstance(value, int | float) and math.isfinite(value) and lo <= value <= hi):
                raise SoilConfigError(
                    f"terrain parameter {name}={value!r} is outside [{lo}, {hi}]; "
                    f"set it in config/soil.yaml within that range"
                )
        if self.ridge_top_m >= self.ridge_length_m:
            raise SoilConfigError(
                f"terrain parameter ridge_top_m={self.ridge_top_m!r} is not shorter than "
                f"ridge_length_m={self.ridge_length_m!r}: the ridge's flanks would have no "
                "length; make the top shorter than the ridge (config/soil.yaml)")

    @property
    def nx(self) -> int:
        return round(self.size_x_m / self.cell_xy_m)

    @property
    def ny(self) -> int:
        return round(self.size_y_m / self.cell_xy_m)

    @property
    def x0(self) -> float:
        """World x [m] of the grid's lower edge."""
        return self.centre_x_m - 0.5 * self.nx * self.cell_xy_m

    @property
    def y0(self) -> float:
        return self.centre_y_m - 0.5 * self.ny * self.cell_xy_m

    @property
    def ridge_flank_m(self) -> float:
        """Length of each of the ridge's flanks along x [m]."""
        return 0.5 * (self.ridge_length_m - self.ridge_top_m)

    def initial_heights_m(self) -> np.ndarray:
        """The ground at start [m], (nx, ny) cell centres: ``initial_height_m`` plus the
        ridge, ``h clip((L / 2 - |x - x_c|) / flank, 0, 1)``."""
        x = self.x0 + (np.arange(self.nx) + 0.5) * self.cell_xy_m
        rise = (0.5 * self.ridge_length_m - np.abs(x - self.ridge_x_m)) / self.ridge_flank_m
        bump = self.ridge_height_m * np.clip(rise, 0.0, 1.0)
        return np.repeat((self.initial_height_m + bump)[:, None], self.ny, axis=1)

    @property
    def unit_volume_m3(self) -> float:
        """Volume of one soil unit: a cell column of height dz [m^3]."""
        return self.cell_xy_m * self.cell_xy_m * self.cell_z_m


