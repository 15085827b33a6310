"""Deformable terrain: a 2.5D height grid in ``world`` plus the soil carried in the bucket.

Mass is counted in integer units of one cell volume (dx * dx * dz): terrain heights are int64
multiples of dz and the bucket load is an int64 count of the same units, so every transfer is
an integer move and the total never drifts (``total_units`` is constant over any sequence of
updates).

Each ``update(pose)``:
1. finds the bucket's lowest/highest z over each column of its bounding box (corner tally and
   Amanatides-Woo edge walk, ``terrain_kernels.column_extents``);
2. removes the soil above the bucket's bottom in those columns: into the bucket when the bucket
   scoops (its opening moves into the soil), pushed aside along the motion otherwise;
3. relaxes the slopes in the box to the angle of repose (walls hold soil back);
4. keeps in the bucket what its shape holds at the current tilt (``bucket_capacity_m2``: the
   soil surface may rise at the repose angle from the lower lip of the opening) and drops the
   rest just outside the lip, where the next relaxation spreads it. With
   ``bucket_soil_model: cells`` the bucket's soil is instead a body of its own
   (``bucket_body.BucketBody``): the dug units settle in it, it relaxes under the effective
   gravity (``acceleration_m_s2``) and what leaves it lands under the edge it leaves by.
Only the box around the bucket (bounding box plus ``margin_cells``) is read or written.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from excavator_sim.soil import kernels as kern
from excavator_sim.soil.bucket_body import BucketBody
from excavator_sim.soil.bucket_prism import EDGES, FACES, BucketPose, BucketPrism
from excavator_sim.soil.errors import OutsideGridError, SoilInputError
from excavator_sim.soil.payload import BucketPayload
from excavator_sim.soil.terrain_config import TerrainConfig

_FACES = np.array([f + (-1,) * (4 - len(f)) for f in FACES], dtype=np.int64)
_FACE_SIZES = np.array([len(f) for f in FACES], dtype=np.int64)
_EDGES = np.array(EDGES, dtype=np.int64)

Box = tuple[int, int, int, int]  # (i0, i1, j0, j1), half-open cell index ranges
_Z_LIMIT_UNITS = 1e12  # |bucket z| / cell_z_m beyond this would overflow the int64 heights


@dataclass(frozen=True)
class TerrainUpdate:
    """What one update did. Counts in soil units (``TerrainConfig.unit_volume_m3``)."""

    box: Box  # cells read and possibly written
    changed: Box | None  # cells whose height changed (None: none)
    scooping: bool
    taken: int  # terrain -> bucket
    pushed: int  # moved aside by the bucket
    relaxed: int  # moved by repose relaxation
    spilled: int  # bucket -> terrain
    covered_columns: int


def _clip_halfplane(poly: list[tuple[float, float]], a: float, b: float, c: float
                    ) -> list[tuple[float, float]]:
    """Part of a convex polygon where a*u + b*z <= c (Sutherland-Hodgman, one plane)."""
    out: list[tuple[float, float]] = []
    n = len(poly)
    for k in range(n):
        p = poly[k]
        q = poly[(k + 1) % n]
        fp = a * p[0] + b * p[1] - c
        fq = a * q[0] + b * q[1] - c
        if fp <= 0.0:
            out.append(p)
        if (fp < 0.0 < fq) or (fq < 0.0 < fp):
            s = fp / (fp - fq)
            out.append((p[0] + s * (q[0] - p[0]), p[1] + s * (q[1] - p[1])))
    return out


def _area(poly: list[tuple[float, float]]) -> float:
    s = 0.0
    for k in range(len(poly)):
        p = poly[k]
        q = poly[(k + 1) % len(poly)]
        s += p[0] * q[1] - q[0] * p[1]
    return 0.5 * abs(s)


# SAE J296 rates a bucket's heaped capacity with the soil heaped above the strike plane at a
# 1:1 slope (45 deg); the heap above the rim uses that slope, or the soil's repose if flatter.
J296_HEAP_SLOPE_RAD = math.pi / 4


def bucket_capacity_m2(
    j: tuple[float, float], b: tuple[float, float], t: tuple[float, float], repose_rad: float,
    width_m: float | None = None, heap: bool = True,
) -> tuple[float, int, int]:
    """Side-view area [m^2] of soil the bucket triangle J-B-T holds, in the vertical plane
    (u horizontal, z up), heap included: the held volume is this area times the bucket width.
    Returns (area, lip index (0 = J, 2 = T), outward sign along u).

    The soil leaves through the open side J-T, over its lower end (the lip). Its free surface
    falls towards the lip from the inside, at most at the repose angle: the soil kept inside is
    the part of the triangle under the line through the lip rising towards the base B with slope
    tan(repose). That soil rests on walls, except when the opening faces down and runs under
    that line: then only the pocket below the lip's level stays.

    Heap (``heap=True``): when the opening faces up and is flatter than the heap slope
    (``min(repose, J296_HEAP_SLOPE_RAD)``), soil also stands above the strike line J-T, as the
    triangle under the two lines rising from J and T at that slope (SAE J296's heap, 1:1 for
    the rating). With ``width_m`` the heap's sloped ends (the hip at each side plate, the same
    slope) are taken off: for a level opening of length L the held volume is then exactly
    J296's ``V_struck + W L^2 / 4 - L^3 / 12`` (the heaped capacity).
    """
    kept, heap_tri, hips, lip, outward = held_soil_shape(j, b, t, repose_rad, width_m, heap)
    area = _area(kept) if len(kept) >= 3 else 0.0
    if heap_tri is not None:
        (lu, lz), (ou, oz), (au, az) = heap_tri
        du, dz = ou - lu, oz - lz
        area += 0.5 * abs(du * (az - lz) - dz * (au - lu)) * hips
    return area, lip, outward


def held_soil_shape(
    j: tuple[float, float], b: tuple[float, float], t: tuple[float, float], repose_rad: float,
    width_m: float | None = None, heap: bool = True,
) -> tuple[list[tuple[float, float]], tuple[tuple[float, float], ...] | None, float, int, int]:
    """The shape :func:`bucket_capacity_m2` measures (one source for the capacity and the
    pictures of the bucket's soil): (the kept polygon inside the triangle, the heap triangle
    (lip, other end, apex) or None, the heap's share left by the hips at the side plates
    (1 without ``width_m``), lip index, outward sign along u)."""
    pts = (j, b, t)
    lip, other = (0, 2) if j[1] <= t[1] else (2, 0)
    lu, lz = pts[lip]
    ou, oz = pts[other]
    towards = b[0] - lu if abs(b[0] - lu) > 1e-12 else ou - lu  # B, else the opening's top
    rise = 1.0 if towards > 0.0 else -1.0
    tan_r = math.tan(repose_rad)
    tri = [j, b, t]
    slope = tan_r * rise
    kept = _clip_halfplane(tri, -slope, 1.0, lz - slope * lu)
    # outward normal of the opening (away from B): does the opening face down?
    du, dz = ou - lu, oz - lz
    nu, nz = dz, -du
    if nu * (b[0] - lu) + nz * (b[1] - lz) > 0.0:
        nu, nz = -nu, -nz
    opening_under_line = du * rise > 0.0 and dz < tan_r * abs(du)
    if nz < 0.0 and opening_under_line:
        kept = _clip_halfplane(tri, 0.0, 1.0, lz)
    heap_tri = None
    hips = 1.0
    if heap and nz > 0.0 and abs(du) > 1e-12:
        tan_h = math.tan(min(repose_rad, J296_HEAP_SLOPE_RAD))
        if dz < tan_h * abs(du):  # flatter than the heap slope: a heap stands on the rim
            s = 1.0 if du > 0.0 else -1.0
            # apex: the line rising from the lip towards the other end meets the one rising
            # from the other end towards the lip
            au = 0.5 * (lu + ou) + s * dz / (2.0 * tan_h)
            az = lz + tan_h * s * (au - lu)
            heap_tri = ((lu, lz), (ou, oz), (au, az))
            if width_m is not None and width_m > 0.0:
                heap_area = 0.5 * abs(du * (az - lz) - dz * (au - lu))
                # apex height above the strike line, perpendicular to it
                h = heap_area * 2.0 / math.hypot(du, dz)
                hips = max(0.0, 1.0 - 2.0 * h / (3.0 * tan_h * width_m))
    return kept, heap_tri, hips, lip, -int(rise)


class Terrain:
    """The height grid (int64 units of ``cell_z_m``) and the bucket load (same units)."""

    def __init__(
        self, config: TerrainConfig, bucket: BucketPrism, heights_m: np.ndarray | None = None
    ) -> None:
        self.config = config
        self.bucket = bucket
        nx, ny = config.nx, config.ny
        if heights_m is None and config.ridge_height_m == 0.0:
            units = round(config.initial_height_m / config.cell_z_m)
            self.h = np.full((nx, ny), units, dtype=np.int64)
        else:
            if heights_m is None:
                heights_m = config.initial_heights_m()
            heights_m = np.asarray(heights_m, dtype=float)
            if heights_m.shape != (nx, ny) or not np.all(np.isfinite(heights_m)):
                raise SoilInputError(
                    f"initial heights have shape {heights_m.shape} (finite: "
                    f"{bool(np.all(np.isfinite(heights_m)))}); expected finite ({nx}, {ny}) in m"
                )
            self.h = np.round(heights_m / config.cell_z_m).astype(np.int64)
        self.load_units = 0
        # the per-cell bucket soil (bucket_soil_model "cells"); load_units is its total
        self.body = (BucketBody(bucket, config.cell_xy_m, config.cell_z_m,
                                config.repose_angle_rad)
                     if config.bucket_soil_model == "cells" else None)
        self._payload: tuple[np.ndarray, BucketPayload] | None = None  # load_payload's last
        self._dmax = math.floor(config.cell_xy_m * math.tan(config.repose_angle_rad)
                                    / config.cell_z_m)
        self._prev_mouth: np.ndarray | None = None
        self._dirty: Box | None = None
        self._unsettled: Box | None = None  # where spilled soil may still be steeper than repose
        self.last: TerrainUpdate | None = None
        self.capacity_units = 0

    # --- queries ------------------------------------------------------------------------
    @property
    def total_units(self) -> int:
        """Soil in terrain plus bucket [units]: constant for ever (the conservation check)."""
        return int(self.h.sum()) + int(self.load_units)

    @property
    def load_volume_m3(self) -> float:
        return self.load_units * self.config.unit_volume_m3

    @property
    def load_mass_kg(self) -> float:
        return self.load_volume_m3 * self.config.density_kg_m3

    def load_centre_bucket_m(self) -> np.ndarray | None:
        """Centre of mass of the load in the bucket frame [m] with the per-cell bucket soil
        (None: empty, or the closed form, which keeps no shape): with ``load_mass_kg`` the
        hook for a payload on the simulator's bucket body (docs/soil.md, "The load's mass")."""
        return self.body.centre_of_mass_bucket_m() if self.body is not None else None

    @property
    def load_on_body(self) -> bool:
        """True with the per-cell bucket soil: the load is a rigid body on the bucket
        (:meth:`load_payload`, its mass on the simulator's bucket body), so the soil wrench
        leaves its weight out (``DiMaioForceModel.step(weight_on_body=True)``). False with the
        closed form (no shape, so no centre): the weight acts through the wrench."""
        return self.body is not None

    def load_payload(self) -> BucketPayload | None:
        """The load as a rigid body in the bucket frame (mass at the preset's density, centre
        and inertia from the cells; empty: zero mass), None with the closed form."""
        if self.body is None:
            return None
        # the body changes only when soil moves: most updates (the carry) reuse the last
        cached = self._payload
        if cached is not None and np.array_equal(cached[0], self.body.units):
            return cached[1]
        payload = self.body.payload(self.config.density_kg_m3)
        self._payload = (self.body.units.copy(), payload)
        return payload

    def heights_m(self, box: Box | None = None) -> np.ndarray:
        """Heights [m] of the cells in ``box`` (i0, i1, j0, j1), or of the whole grid."""
        if box is None:
            return self.h * self.config.cell_z_m
        i0, i1, j0, j1 = box
        return self.h[i0:i1, j0:j1] * self.config.cell_z_m

    def cell_centres(self) -> tuple[np.ndarray, np.ndarray]:
        """World x [m] of the cell rows and y [m] of the cell columns."""
        c = self.config
        return (c.x0 + (np.arange(c.nx) + 0.5) * c.cell_xy_m,
                c.y0 + (np.arange(c.ny) + 0.5) * c.cell_xy_m)

    def height_at(self, x: np.ndarray | float, y: np.ndarray | float) -> np.ndarray:
        """Terrain height [m] of the cells containing the world points (x, y) [m]."""
        c = self.config
        i = np.floor((np.asarray(x) - c.x0) / c.cell_xy_m).astype(np.int64)
        j = np.floor((np.asarray(y) - c.y0) / c.cell_xy_m).astype(np.int64)
        if np.any((i < 0) | (i >= c.nx) | (j < 0) | (j >= c.ny)):
            raise OutsideGridError(
                f"point(s) x={np.asarray(x)!r}, y={np.asarray(y)!r} m lie outside the terrain "
                f"grid x in [{c.x0:.3f}, {c.x0 + c.nx * c.cell_xy_m:.3f}], y in "
                f"[{c.y0:.3f}, {c.y0 + c.ny * c.cell_xy_m:.3f}] m; enlarge size_x_m/size_y_m "
                "or keep the bucket over the terrain"
            )
        return self.h[i, j] * c.cell_z_m

    def surface_m(self, x: np.ndarray | float, y: np.ndarray | float) -> np.ndarray:
        """Like ``height_at`` but -inf (no ground) outside the grid: the force model's view,
        so a look-ahead past the grid's edge finds no soil instead of failing."""
        c = self.config
        i = np.floor((np.asarray(x) - c.x0) / c.cell_xy_m).astype(np.int64)
        j = np.floor((np.asarray(y) - c.y0) / c.cell_xy_m).astype(np.int64)
        inside = (i >= 0) & (i < c.nx) & (j >= 0) & (j < c.ny)
        out = np.full(np.shape(i), -np.inf)
        out[inside] = self.h[i[inside], j[inside]] * c.cell_z_m
        return out

    def take_dirty(self) -> Box | None:
        """Union of the changed boxes since the last call (for refreshing a MuJoCo height
        field region by region); resets it."""
        box, self._dirty = self._dirty, None
        return box

    # --- the update ---------------------------------------------------------------------
    def _box_around(self, corners: np.ndarray, margin: int) -> Box:
        c = self.config
        # Python floats: a huge coordinate divides to inf without numpy's overflow warning (and
        # without np.errstate's cost on this per-pose path)
        xmin, ymin = float(corners[:, 0].min()), float(corners[:, 1].min())
        xmax, ymax = float(corners[:, 0].max()), float(corners[:, 1].max())
        # Compared as floats before any int conversion: a huge (finite) coordinate would
        # overflow math.floor, and NaN and inf fail every comparison.
        fi0, fi1 = (xmin - c.x0) / c.cell_xy_m, (xmax - c.x0) / c.cell_xy_m
        fj0, fj1 = (ymin - c.y0) / c.cell_xy_m, (ymax - c.y0) / c.cell_xy_m
        if not (fi0 >= 0.0 and fi1 < c.nx and fj0 >= 0.0 and fj1 < c.ny):
            raise OutsideGridError(
                f"bucket footprint x in [{xmin:.6g}, {xmax:.6g}] m, y in [{ymin:.6g}, "
                f"{ymax:.6g}] m leaves the terrain grid x in [{c.x0:.3f}, "
                f"{c.x0 + c.nx * c.cell_xy_m:.3f}], y in [{c.y0:.3f}, "
                f"{c.y0 + c.ny * c.cell_xy_m:.3f}] m; enlarge size_x_m/size_y_m in "
                "config/soil.yaml or keep the bucket over the terrain"
            )
        zmin, zmax = corners[:, 2].min(), corners[:, 2].max()
        z_limit = _Z_LIMIT_UNITS * c.cell_z_m
        if not (abs(zmin) < z_limit and abs(zmax) < z_limit):
            raise SoilInputError(  # its height in int64 soil units would overflow
                f"bucket z in [{zmin:.6g}, {zmax:.6g}] m is beyond the terrain's height range "
                f"+-{z_limit:.6g} m; send the bucket pose in metres")
        i0, i1 = math.floor(fi0), math.floor(fi1) + 1
        j0, j1 = math.floor(fj0), math.floor(fj1) + 1
        return (max(i0 - margin, 0), min(i1 + margin, c.nx),
                max(j0 - margin, 0), min(j1 + margin, c.ny))

    def update(self, pose: BucketPose, full_grid: bool = False,
               acceleration_m_s2: np.ndarray | None = None,
               elapsed_s: float | None = None) -> TerrainUpdate:
        """Move soil for the bucket at ``pose``. ``full_grid`` processes every cell (the naive
        baseline of the benchmark; same result up to relaxation reach). Atomic: when it raises
        (``OutsideGridError``: footprint or spilled soil off the grid) the terrain, the load and
        the motion history are as before the call. ``acceleration_m_s2``: the bucket's
        acceleration in ``world`` (None: at rest); with the per-cell bucket soil it tilts the
        soil's effective gravity (a hard swing spills), the closed form ignores it.
        ``elapsed_s``: the time [s] since the last update; with the per-cell bucket soil it
        bounds how fast what the bucket cannot hold slides out (``BucketBody.settle``; None:
        at once)."""
        c = self.config
        corners = self.bucket.corners(pose)
        box = self._box_around(corners, c.margin_cells)
        if full_grid:
            box = (0, c.nx, 0, c.ny)
        i0, i1, j0, j1 = box
        zlo = np.empty((i1 - i0, j1 - j0))
        zhi = np.empty_like(zlo)
        kern.column_extents(corners, _FACES, _FACE_SIZES, _EDGES, c.x0, c.y0, c.cell_xy_m,
                            i0, j0, zlo, zhi)
        cap = np.empty(zlo.shape, dtype=np.int64)
        covered = kern.wall_caps(zlo, zhi, c.cell_z_m, cap)

        # Scooping: the opening's centre moves into the bucket's outward opening normal.
        mouth = 0.25 * (corners[0] + corners[1] + corners[4] + corners[5])
        base_mid = 0.5 * (corners[2] + corners[3])
        jt = 0.5 * (corners[4] + corners[5]) - 0.5 * (corners[0] + corners[1])
        out = mouth - base_mid
        out = out - jt * (out @ jt) / max(jt @ jt, 1e-18)  # normal of the opening, outwards
        prev_mouth = self._prev_mouth
        motion = np.zeros(3) if prev_mouth is None else mouth - prev_mouth
        self._prev_mouth = mouth
        scooping = bool(motion @ out >= 0.0)
        mh = math.hypot(motion[0], motion[1])
        dir_a, dir_b = (motion[0] / mh, motion[1] / mh) if mh > 1e-6 else (0.0, 0.0)
        centre_a = (0.5 * (corners[:, 0].min() + corners[:, 0].max()) - c.x0) / c.cell_xy_m - i0
        centre_b = (0.5 * (corners[:, 1].min() + corners[:, 1].max()) - c.y0) / c.cell_xy_m - j0

        # All or nothing: the dig writes only inside ``box`` and the spill checks where its
        # soil lands before writing, so restoring the box and the load undoes a failed update.
        saved_h = self.h[i0:i1, j0:j1].copy()
        saved_load, saved_cap = self.load_units, self.capacity_units
        saved_body = self.body.units.copy() if self.body is not None else None
        saved_slide = self.body.slide if self.body is not None else None
        taken, pushed = (0, 0)
        try:
            if covered:
                taken, pushed = kern.dig(self.h, i0, j0, cap, scooping, dir_a, dir_b,
                                         centre_a, centre_b)
            self.load_units += taken
            if self.body is None:
                spilled, spill_box = self._spill(pose)
            else:
                spilled, spill_box = self._carry(pose, box, saved_h, taken,
                                                 acceleration_m_s2, elapsed_s)
        except BaseException:
            self.h[i0:i1, j0:j1] = saved_h
            self.load_units, self.capacity_units = saved_load, saved_cap
            if self.body is not None and saved_body is not None:
                self.body.units[:, :] = saved_body
                if saved_slide is not None:
                    self.body.slide = saved_slide
            self._prev_mouth = prev_mouth
            raise
        relaxed = kern.relax(self.h, i0, j0, cap, self._dmax, c.relax_iterations)
        settle_box = self._settle(box)
        if spill_box is not None:
            grow = 3 * c.margin_cells  # a dropped load spreads wider than the bucket's box
            pile = (max(spill_box[0] - grow, 0), min(spill_box[1] + grow, c.nx),
                    max(spill_box[2] - grow, 0), min(spill_box[3] + grow, c.ny))
            self._unsettled = pile if self._unsettled is None else _union(self._unsettled, pile)

        changed: Box | None = None
        if taken or pushed or relaxed:
            changed = box
        for extra in (spill_box, settle_box):
            if extra is not None:
                changed = extra if changed is None else _union(changed, extra)
        if changed is not None:
            self._dirty = changed if self._dirty is None else _union(self._dirty, changed)
        self.last = TerrainUpdate(box, changed, scooping, int(taken), int(pushed), int(relaxed),
                                  spilled, int(covered))
        return self.last

    def _settle(self, box: Box) -> Box | None:
        """Keep relaxing where spilled soil landed, also after the bucket has moved on, until
        it rests at the repose angle; skipped while the bucket's own box overlaps it (the
        caps there belong to the bucket). Returns the box if anything moved."""
        if self._unsettled is None:
            return None
        u = self._unsettled
        if u[0] < box[1] and box[0] < u[1] and u[2] < box[3] and box[2] < u[3]:
            return None
        free = np.full((u[1] - u[0], u[3] - u[2]), kern.NO_CAP, dtype=np.int64)
        moved = kern.relax(self.h, u[0], u[2], free, self._dmax, self.config.relax_iterations)
        if moved == 0:
            self._unsettled = None
            return None
        return u

    def _carry(self, pose: BucketPose, box: Box, before: np.ndarray, taken: int,
               acceleration_m_s2: np.ndarray | None,
               elapsed_s: float | None = None) -> tuple[int, Box | None]:
        """The per-cell bucket soil: the units just dug settle in the bucket's lowest free room
        (a level fill: the cutting pushes them in; any without room stay in the columns over
        the cells they came from), the body relaxes under the effective gravity and what leaves it
        lands on the terrain cells under the edge it leaves by (one cell beyond an edge, in
        the direction it falls over it; straight below through an opening facing down).
        Writes the terrain only after every landing cell is known to be on the grid."""
        body = self.body
        assert body is not None
        c = self.config
        placed = body.pour(taken, pose, acceleration_m_s2) if taken else 0
        if taken > placed:  # no room below the rim (or the opening faces down): where it came
            i0, i1, j0, j1 = box
            dug = before - self.h[i0:i1, j0:j1]
            a, b = np.nonzero(dug > 0)
            xs, ys = self.cell_centres()
            z = (self.h[i0 + a, j0 + b] + 0.5 * dug[a, b]) * c.cell_z_m
            world = np.stack([xs[i0 + a], ys[j0 + b], z], axis=1)
            share = _shares(dug[a, b], taken - placed, taken)
            body.add_at((world - pose.position) @ pose.rotation(), share)
        points, out, counts = body.settle(pose, acceleration_m_s2, elapsed_s)
        self.load_units = body.total_units
        if len(counts) == 0:
            return 0, None
        xs_, ys_ = points[:, 0] + out[:, 0] * c.cell_xy_m, points[:, 1] + out[:, 1] * c.cell_xy_m
        ii, jj = self._landing_cells(
            xs_, ys_, f"from the bucket at x in [{xs_.min():.3f}, {xs_.max():.3f}], "
                      f"y in [{ys_.min():.3f}, {ys_.max():.3f}] m")
        np.add.at(self.h, (ii, jj), counts)
        return int(counts.sum()), (int(ii.min()), int(ii.max()) + 1, int(jj.min()),
                                   int(jj.max()) + 1)

    def _landing_cells(self, xs: np.ndarray, ys: np.ndarray, where: str
                       ) -> tuple[np.ndarray, np.ndarray]:
        """The cells (i, j) under points (xs, ys) [m] where falling soil lands;
        OutsideGridError naming ``where`` and the fix when one is off the grid."""
        c = self.config
        ii = np.floor((xs - c.x0) / c.cell_xy_m).astype(np.int64)
        jj = np.floor((ys - c.y0) / c.cell_xy_m).astype(np.int64)
        if np.any((ii < 0) | (ii >= c.nx) | (jj < 0) | (jj >= c.ny)):
            raise OutsideGridError(
                f"soil falling {where} would land outside the terrain grid; enlarge "
                "size_x_m/size_y_m in config/soil.yaml or dump over the terrain")
        return ii, jj

    def _spill(self, pose: BucketPose) -> tuple[int, Box | None]:
        """Drop the load the bucket cannot hold at this tilt just outside its lip."""
        c = self.config
        rot = pose.rotation()
        # side view in the vertical plane of the bucket: u along the yaw heading
        side = self.bucket.side_view
        cp, sp = math.cos(pose.pitch), math.sin(pose.pitch)
        uz = [(x * cp + z * sp, -x * sp + z * cp) for x, z in side]
        area, lip, outward = bucket_capacity_m2(uz[0], uz[1], uz[2], c.repose_angle_rad,
                                                self.bucket.width_m)
        self.capacity_units = math.floor(area * self.bucket.width_m / c.unit_volume_m3)
        excess = self.load_units - self.capacity_units
        if excess <= 0:
            return 0, None
        lip_x, lip_z = side[lip]
        heading = np.array([math.cos(pose.yaw), math.sin(pose.yaw), 0.0])
        left = rot @ np.array([0.0, 0.5 * self.bucket.width_m, 0.0])
        lip_centre = rot @ np.array([lip_x, 0.0, lip_z]) + pose.position
        lip_centre = lip_centre + outward * heading * c.cell_xy_m
        n = max(1, math.ceil(self.bucket.width_m / c.cell_xy_m))
        fractions = (np.arange(n) + 0.5) / n * 2.0 - 1.0
        xs = lip_centre[0] + fractions * left[0]
        ys = lip_centre[1] + fractions * left[1]
        ii, jj = self._landing_cells(xs, ys, f"from the bucket lip at x={lip_centre[0]:.3f}, "
                                             f"y={lip_centre[1]:.3f} m")
        share, rest = divmod(excess, n)
        amounts = np.full(n, share, dtype=np.int64)
        amounts[:rest] += 1
        np.add.at(self.h, (ii, jj), amounts)
        self.load_units -= excess
        return int(excess), (int(ii.min()), int(ii.max()) + 1, int(jj.min()), int(jj.max()) + 1)


def _shares(dug: np.ndarray, left: int, taken: int) -> np.ndarray:
    """``left`` units shared out over the cells in proportion to what each gave (``dug``,
    summing to ``taken``): ``dug * left // taken`` each, the units those floors leave one each
    to the first cells, so the shares sum to ``left`` exactly. Integer arithmetic throughout
    (float64's rounding had made units out of nothing for a bucket kilometres into the
    ground): int64 while ``taken * left`` fits it, Python's integers beyond."""
    if taken * left < 2**63:
        share = dug.astype(np.int64) * left // taken
    else:
        share = np.array([int(d) * left // taken for d in dug.tolist()], dtype=np.int64)
    share[: left - int(share.sum())] += 1
    return share


def _union(a: Box, b: Box) -> Box:
    return (min(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), max(a[3], b[3]))
