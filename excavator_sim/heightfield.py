"""The MuJoCo height field under the excavator: its grid in ``world`` and in-place height updates.

This is the API the soil model uses to keep MuJoCo's terrain (contact and rendering) in sync with
its own height grid. Convention:

- Heights are given at grid **nodes** ``x_i = x0 + i * cell_size`` (``i = 0 .. nx-1``) and
  ``y_j = y0 + j * cell_size`` (``j = 0 .. ny-1``) in ``world`` [m]. A soil model with cell-centred
  columns uses its first column centre as ``x0, y0``: the defaults match ``config/soil.yaml``
  (cell (i, j) of the soil grid is node (i, j) here).
- Height arrays are indexed ``[i, j]`` (x first, then y), in metres above ``world``'s z = 0.
- Heights must lie within ``[z_min, z_max]`` (MuJoCo stores a height field normalised to a fixed
  elevation range). Values outside raise :class:`HeightFieldError` naming the value and range.

MuJoCo keeps the field as ``hfield_data[row * ncol + col]`` with rows along y and columns along x,
normalised to ``[0, 1]`` of ``size[2]`` above the geom's z; :meth:`HeightField.set_region`
converts and writes only the changed rectangle, so collision sees it on the next step. A renderer
must re-upload the field (``mujoco.mjr_uploadHField``) before drawing; ``excavator_hil/render.py``
does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mujoco
import numpy as np

from excavator_sim.errors import HeightFieldError


@dataclass(frozen=True)
class TerrainGrid:
    """Height-field grid in ``world``: nodes at ``(x0 + i*cell_size, y0 + j*cell_size)`` [m]."""

    x0: float = -3.975
    y0: float = -7.975
    cell_size: float = 0.05
    nx: int = 320
    ny: int = 320
    z_min: float = -3.0
    z_max: float = 3.0
    initial_height: float = 0.0

    def __post_init__(self) -> None:
        # Messages use the parameter names of config/sim.yaml (terrain.<name>_m).
        for key in ("x0", "y0", "cell_size", "z_min", "z_max", "initial_height"):
            value = getattr(self, key)
            if not math.isfinite(value):
                raise HeightFieldError(f"terrain.{key}_m = {value} must be finite [m]")
        if self.cell_size <= 0.0:
            raise HeightFieldError(f"terrain.cell_size_m = {self.cell_size} m must be > 0")
        for key in ("nx", "ny"):
            n = getattr(self, key)
            if not isinstance(n, int) or n < 2:
                raise HeightFieldError(f"terrain.{key} = {n!r} must be an integer >= 2 nodes")
        if not self.z_min < self.z_max:
            raise HeightFieldError(f"terrain.z_min_m = {self.z_min} m must be below "
                                   f"terrain.z_max_m = {self.z_max} m")
        if not self.z_min <= self.initial_height <= self.z_max:
            raise HeightFieldError(f"terrain.initial_height_m = {self.initial_height} m outside "
                                   f"terrain.z_min_m..z_max_m = {self.z_min}..{self.z_max} m")

    @property
    def half_extent(self) -> tuple[float, float]:
        """Half sizes [m] of the field in x and y (MuJoCo ``size[0:2]``)."""
        return (0.5 * (self.nx - 1) * self.cell_size, 0.5 * (self.ny - 1) * self.cell_size)

    @property
    def centre(self) -> tuple[float, float]:
        """Centre [m] of the field in ``world`` x, y (the geom's position)."""
        hx, hy = self.half_extent
        return (self.x0 + hx, self.y0 + hy)


class HeightField:
    """A view of one MuJoCo height field that reads and writes heights in metres in place."""

    def __init__(self, model: mujoco.MjModel, grid: TerrainGrid, name: str = "terrain"):
        self.model = model
        self.grid = grid
        self.hfield_id = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_HFIELD, name)
        if self.hfield_id < 0:
            raise HeightFieldError(f"the model has no height field named {name!r}")
        nrow = int(model.hfield_nrow[self.hfield_id])
        ncol = int(model.hfield_ncol[self.hfield_id])
        if (nrow, ncol) != (grid.ny, grid.nx):
            raise HeightFieldError(f"height field {name!r} is {ncol} x {nrow} nodes but the grid "
                                   f"says nx={grid.nx}, ny={grid.ny}")
        adr = int(model.hfield_adr[self.hfield_id])
        # (row = y, col = x) view of MuJoCo's own buffer: writes reach the collision code directly.
        self._data = model.hfield_data[adr:adr + nrow * ncol].reshape(nrow, ncol)
        self._range = grid.z_max - grid.z_min

    def heights(self) -> np.ndarray:
        """A copy of all heights [m], shape ``(nx, ny)``, indexed ``[i, j]``."""
        heights: np.ndarray = (self._data.T * self._range + self.grid.z_min).astype(float)
        return heights

    def height_at(self, i: int, j: int) -> float:
        """Height [m] at node ``(i, j)``."""
        return float(self._data[j, i] * self._range + self.grid.z_min)

    def height_at_point(self, x: float, y: float) -> float:
        """Height [m] at the world point ``(x, y)`` [m], bilinear between the nodes; a point
        off the grid takes the height at the nearest edge (plain floats: the drive train
        samples nine points a control period)."""
        g = self.grid
        fi = min(max((x - g.x0) / g.cell_size, 0.0), g.nx - 1.0)
        fj = min(max((y - g.y0) / g.cell_size, 0.0), g.ny - 1.0)
        i0, j0 = min(int(fi), g.nx - 2), min(int(fj), g.ny - 2)
        ti, tj = fi - i0, fj - j0
        d = self._data
        h = ((1.0 - ti) * ((1.0 - tj) * float(d[j0, i0]) + tj * float(d[j0 + 1, i0]))
             + ti * ((1.0 - tj) * float(d[j0, i0 + 1]) + tj * float(d[j0 + 1, i0 + 1])))
        return h * self._range + g.z_min

    def set_region(self, i0: int, j0: int, heights: np.ndarray) -> None:
        """Overwrite the heights [m] of nodes ``i0 .. i0+ni-1`` x ``j0 .. j0+nj-1`` in place.

        ``heights`` has shape ``(ni, nj)``, indexed ``[i, j]`` (x first). Call it with the changed
        rectangle only: the cost is proportional to its size. Nothing is written when any value is
        invalid.
        """
        h = np.asarray(heights, dtype=float)
        if h.ndim != 2:
            raise HeightFieldError(f"heights must be a 2-D array [i, j], got shape {h.shape}")
        ni, nj = h.shape
        g = self.grid
        if i0 < 0 or j0 < 0 or i0 + ni > g.nx or j0 + nj > g.ny:
            raise HeightFieldError(
                f"region i {i0}..{i0 + ni - 1}, j {j0}..{j0 + nj - 1} outside the grid "
                f"0..{g.nx - 1} x 0..{g.ny - 1}: clip the region to the grid")
        if not np.all(np.isfinite(h)):
            raise HeightFieldError("heights contain NaN or inf: pass finite heights [m]")
        lo, hi = float(h.min()), float(h.max())
        if lo < g.z_min or hi > g.z_max:
            raise HeightFieldError(
                f"height {lo if lo < g.z_min else hi:.3f} m outside terrain z_min..z_max = "
                f"{g.z_min}..{g.z_max} m: widen terrain.z_min / terrain.z_max in config/sim.yaml")
        self._data[j0:j0 + nj, i0:i0 + ni] = ((h - g.z_min) / self._range).T

    def set_all(self, heights: np.ndarray) -> None:
        """Overwrite every height [m], shape ``(nx, ny)``."""
        self.set_region(0, 0, heights)


def add_height_field(spec: mujoco.MjSpec, grid: TerrainGrid, contact: bool,
                     name: str = "terrain") -> mujoco.MjsGeom:
    """Add the flat height field and its geom to ``spec``; the geom's bottom is at ``z_min``.

    ``contact`` sets its contype bit 1 (machine geoms with conaffinity 1 touch it).
    """
    hx, hy = grid.half_extent
    cx, cy = grid.centre
    hf = spec.add_hfield()
    hf.name = name
    hf.nrow = grid.ny
    hf.ncol = grid.nx
    # size: x, y half extents; elevation range; base thickness below z_min.
    hf.size = [hx, hy, grid.z_max - grid.z_min, 0.5]
    # Elevation data normalised to [0, 1] of size[2] (MuJoCo's convention), flat to start.
    level = (grid.initial_height - grid.z_min) / (grid.z_max - grid.z_min)
    hf.userdata = [level] * (grid.nx * grid.ny)
    geom = spec.worldbody.add_geom()
    geom.name = name
    geom.type = mujoco.mjtGeom.mjGEOM_HFIELD
    geom.hfieldname = name
    geom.pos = [cx, cy, grid.z_min]
    geom.rgba = [0.55, 0.42, 0.28, 1.0]
    geom.contype = 1 if contact else 0
    geom.conaffinity = 0
    geom.condim = 3
    geom.friction = [0.8, 0.005, 0.0001]
    return geom


def fill_flat(model: mujoco.MjModel, grid: TerrainGrid, name: str = "terrain") -> HeightField:
    """Set the whole field to ``grid.initial_height`` and return its view."""
    field = HeightField(model, grid, name)
    field.set_all(np.full((grid.nx, grid.ny), grid.initial_height))
    return field


