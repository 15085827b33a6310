"""The Foxglove live view's pure core: what the 3D panel and the plots are given (no ROS, no
Foxglove SDK: arrays and dataclasses in, arrays and dataclasses out).

- :class:`UrdfTree` (:mod:`excavator_hil.urdf_tf`): the frame transforms of a URDF at given
  joint positions (what robot_state_publisher computes for /tf), so the view draws the machine
  from ``joint_states`` with the URDF it serves, without a /tf of the stack.
- :class:`TerrainTiles`: the soil grid in square tiles; a ``soil/terrain_patch`` marks the tiles
  it touched, and only those are sent again (a dig changes a few tiles, the grid has hundreds).
- :func:`wrench_arrow`: the soil force as an arrow at the bucket, its length proportional to it.
- :func:`plc_channels`: the Redis keys of the PLC bridge as plottable values (command vs
  measured velocities, the PLC's acknowledgement lag).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from excavator_hil.urdf_tf import Quat, Vec3, rpy_quaternion
from excavator_sim.terrain_patch import flat_to_patch


# --- terrain ---------------------------------------------------------------------------------
@dataclass
class TerrainTiles:
    """The soil grid (cell centres ``xs`` x ``ys`` [m] in ``world``, heights ``z`` [m]) in square
    tiles of ``tile`` cells. Each tile's mesh reaches one cell into its +i/+j neighbours, so the
    tiles join without a gap. A tile is *dirty* until taken: after a patch touched it, or after
    :meth:`mark_all` (a new viewer needs every tile once)."""

    xs: np.ndarray
    ys: np.ndarray
    z: np.ndarray
    tile: int = 32
    dirty: set[tuple[int, int]] = field(default_factory=set)
    known: np.ndarray = field(init=False)   # tiles whose heights arrived at least once

    def __post_init__(self) -> None:
        if self.tile < 1:
            raise ValueError(f"terrain tile = {self.tile} cells: at least 1")
        if self.z.shape != (len(self.xs), len(self.ys)):
            raise ValueError(f"terrain heights {self.z.shape} do not match the axes "
                             f"({len(self.xs)}, {len(self.ys)})")
        self.known = np.zeros(self.tiles_shape, dtype=bool)

    @classmethod
    def from_cells(cls, x0: float, y0: float, cell_m: float, nx: int, ny: int,
                   tile: int = 32) -> TerrainTiles:
        """The grid of config/soil.yaml's ``terrain.*``: cell (i, j) centred at
        ``(x0 + (i + 0.5) cell, y0 + (j + 0.5) cell)``; heights unknown (NaN) until sent."""
        return cls(x0 + (np.arange(nx) + 0.5) * cell_m, y0 + (np.arange(ny) + 0.5) * cell_m,
                   np.full((nx, ny), math.nan), tile)

    @property
    def tiles_shape(self) -> tuple[int, int]:
        nx, ny = self.z.shape
        return -(-nx // self.tile), -(-ny // self.tile)

    def apply_patch(self, ni: int, nj: int, data: Sequence[float] | np.ndarray) -> None:
        """Write a ``soil/terrain_patch`` (dims ni, nj; ``[i0, j0, heights row-major...]`` [m],
        excavator_sim.terrain_patch's wire format) and mark the tiles whose mesh it changes
        (a tile's mesh also holds the first row/column of its neighbours). ValueError names a
        patch that does not fit this grid."""
        i0, j0, new = flat_to_patch(ni, nj, data)   # HeightFieldError (a ValueError): sizes
        nx, ny = self.z.shape
        if i0 < 0 or j0 < 0 or i0 + ni > nx or j0 + nj > ny:
            raise ValueError(f"terrain patch [{i0}:{i0 + ni}, {j0}:{j0 + nj}] outside the "
                             f"{nx} x {ny} grid: give the view soil_node's parameter file "
                             "(parameter soil_params)")
        box = self.z[i0:i0 + ni, j0:j0 + nj]
        # only cells whose height changed count: soil_node re-sends the whole grid at its
        # heightmap_rate_hz while anything changed, and most of it is as it was
        ci, cj = np.nonzero(~(box == new))
        box[...] = new
        self._mark_cells(ci + i0, cj + j0)

    def _mark_cells(self, ci: np.ndarray, cj: np.ndarray) -> None:
        """Mark the tiles whose mesh holds the cells (ci, cj): tile i // t, and the tile before
        it for a cell on a tile's first row or column (each mesh reaches one cell further)."""
        if len(ci) == 0:
            return
        t = self.tile
        ti, tj = ci // t, cj // t
        keys = [np.stack([ti, tj], axis=1)]
        edge_i, edge_j = (ci % t == 0) & (ti > 0), (cj % t == 0) & (tj > 0)
        keys.append(np.stack([ti[edge_i] - 1, tj[edge_i]], axis=1))
        keys.append(np.stack([ti[edge_j], tj[edge_j] - 1], axis=1))
        both = edge_i & edge_j
        keys.append(np.stack([ti[both] - 1, tj[both] - 1], axis=1))
        for a, b in np.unique(np.concatenate(keys), axis=0):
            self.dirty.add((int(a), int(b)))

    @property
    def complete(self) -> bool:
        """Every cell's height known (a whole grid or the cloud arrived)."""
        return bool(np.isfinite(self.z).all())

    def seed_from_cloud(self, points: np.ndarray) -> int:
        """Fill the cells still unknown from ``soil/heightmap`` (soil_node's latched cloud: the
        heights at every k-th cell centre, (N, 3) [m]), each from its nearest sample: a view
        that joins after soil_node's whole grid shows the terrain at once, at the cloud's
        resolution, until the next whole grid or patch gives the cells exactly. Returns the
        cells filled; their tiles are marked."""
        pts = np.asarray(points, dtype=float).reshape(-1, 3)
        pts = pts[np.isfinite(pts).all(axis=1)]
        unknown = ~np.isfinite(self.z)
        if len(pts) == 0 or not unknown.any():
            return 0
        cell = self.xs[1] - self.xs[0] if len(self.xs) > 1 else 1.0
        nx, ny = self.z.shape
        si = np.clip(np.rint((pts[:, 0] - self.xs[0]) / cell).astype(int), 0, nx - 1)
        sj = np.clip(np.rint((pts[:, 1] - self.ys[0]) / cell).astype(int), 0, ny - 1)
        ui, uj = np.unique(si), np.unique(sj)
        coarse = np.full((len(ui), len(uj)), np.nan)
        coarse[np.searchsorted(ui, si), np.searchsorted(uj, sj)] = pts[:, 2]

        def nearest(axis: np.ndarray, n: int) -> np.ndarray:
            k = np.clip(np.searchsorted(axis, np.arange(n)), 1, max(1, len(axis) - 1))
            if len(axis) == 1:
                return np.zeros(n, dtype=int)
            left = axis[k - 1]
            right = axis[np.minimum(k, len(axis) - 1)]
            return np.where(np.arange(n) - left <= right - np.arange(n), k - 1,
                            np.minimum(k, len(axis) - 1))

        fill = coarse[np.ix_(nearest(ui, nx), nearest(uj, ny))]
        take = unknown & np.isfinite(fill)
        self.z[take] = fill[take]
        self._mark_cells(*np.nonzero(take))
        return int(take.sum())

    def mark_all(self) -> None:
        """Every tile whose heights are known is sent again (a viewer subscribed)."""
        nti, ntj = self.tiles_shape
        self.dirty.update((ti, tj) for ti in range(nti) for tj in range(ntj))

    def take_dirty(self) -> list[tuple[int, int]]:
        """The dirty tiles with known heights, in order; they are clean afterwards."""
        out = []
        for key in sorted(self.dirty):
            if np.isfinite(self._tile_heights(*key)).all():
                out.append(key)
        self.dirty.difference_update(out)
        return out

    def _bounds(self, ti: int, tj: int) -> tuple[int, int, int, int]:
        nx, ny = self.z.shape
        t = self.tile
        return ti * t, min(nx, ti * t + t + 1), tj * t, min(ny, tj * t + t + 1)

    def _tile_heights(self, ti: int, tj: int) -> np.ndarray:
        i0, i1, j0, j1 = self._bounds(ti, tj)
        return self.z[i0:i1, j0:j1]

    def mesh(self, ti: int, tj: int) -> tuple[np.ndarray, np.ndarray]:
        """Tile (ti, tj) as a triangle list: ``points`` (N, 3) [m] in ``world`` (the cell centres
        and heights) and ``indices`` (M,) into them, three per triangle, counter-clockwise seen
        from above (+z)."""
        i0, i1, j0, j1 = self._bounds(ti, tj)
        h = self.z[i0:i1, j0:j1]
        ni, nj = h.shape
        gx, gy = np.meshgrid(self.xs[i0:i1], self.ys[j0:j1], indexing="ij")
        points = np.stack([gx.ravel(), gy.ravel(), h.ravel()], axis=1)
        if ni < 2 or nj < 2:
            return points, np.zeros(0, dtype=np.int64)
        k = (np.arange(ni - 1)[:, None] * nj + np.arange(nj - 1)[None, :]).ravel()
        # quad (i, j), (i+1, j), (i+1, j+1), (i, j+1): x is i, y is j -> counter-clockwise
        a, b, c, d = k, k + nj, k + nj + 1, k + 1
        indices = np.stack([a, b, c, a, c, d], axis=1).ravel()
        return points, indices


def height_colors(z: np.ndarray, reference_m: float, span_m: float = 1.0) -> np.ndarray:
    """RGBA [0, 1] per height: soil brown at ``reference_m``, darker where dug below it, lighter
    where piled above (full change at +-``span_m``), so a trench shows in an unlit mesh."""
    s = np.clip((np.asarray(z, dtype=float) - reference_m) / span_m, -1.0, 1.0)
    base = np.array([0.55, 0.40, 0.25])
    dark = np.array([0.25, 0.16, 0.08])
    light = np.array([0.85, 0.72, 0.50])
    rgb = np.where(s[:, None] < 0, base + (-s)[:, None] * (dark - base),
                   base + s[:, None] * (light - base))
    return np.concatenate([rgb, np.ones((len(s), 1))], axis=1)


# --- soil wrench -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Arrow:
    """An arrow from ``origin`` [m] along the unit ``direction`` (as the rotation taking +x
    onto it), ``length`` [m]."""

    origin: Vec3
    rotation: Quat
    length: float


def wrench_arrow(force_n: Vec3, origin: Vec3, metres_per_newton: float) -> Arrow | None:
    """The soil force [N] (in ``world``) as an arrow at the bucket ``origin``: length
    |F| x ``metres_per_newton``; None for a zero or non-finite force."""
    fx, fy, fz = force_n
    mag = math.sqrt(fx * fx + fy * fy + fz * fz)
    if not math.isfinite(mag) or mag == 0.0:
        return None
    ux, uy, uz = fx / mag, fy / mag, fz / mag
    # +x turned onto u: pitched to u's elevation, then yawed to its heading (well defined for
    # every direction, also (anti)parallel to x and straight up or down)
    rot = rpy_quaternion(0.0, -math.asin(max(-1.0, min(1.0, uz))), math.atan2(uy, ux))
    return Arrow(origin, rot, mag * metres_per_newton)


# --- PLC bridge (Redis keys) --------------------------------------------------------------------
VELOCITY_FIELDS = ("longitudinal", "lateral", "angular")


def _number(value: bytes | str | None) -> float | None:
    if value is None:
        return None
    try:
        x = float(value.decode() if isinstance(value, bytes) else value)
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def plc_channels(command: Sequence[bytes | str | None], measured: Sequence[bytes | str | None],
                 seq: bytes | str | None, seq_accepted: bytes | str | None,
                 redis_rtt_ms: float | None) -> dict[str, dict[str, float | None]]:
    """The plottable values of one read of the bridge's keys: ``command`` = the control keys
    (longitudinal [m/s], lateral [m/s], angular [rad/s]), ``measured`` = the monitor keys (the
    PLC's measured velocities; None while the bridge marks them invalid), and the latency:
    the Redis round trip of the read [ms] and how many of the bridge's writes the PLC has not
    acknowledged yet (``plc.bridge.seq`` - ``plc.monitor.state.seq_accepted``, mod 2^32)."""
    cmd = {k: _number(v) for k, v in zip(VELOCITY_FIELDS, command, strict=True)}
    mon = {k: _number(v) for k, v in zip(VELOCITY_FIELDS, measured, strict=True)}
    s, a = _number(seq), _number(seq_accepted)
    lag = float((int(s) - int(a)) % 2**32) if s is not None and a is not None else None
    return {"command": cmd, "measured": mon,
            "latency": {"redis_rtt_ms": redis_rtt_ms, "plc_unacknowledged_writes": lag}}
