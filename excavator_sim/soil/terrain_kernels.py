# ruff: noqa: RUF046  (explicit int() keeps numba from typing floor() results as floats)
"""numba kernels of the terrain model (hot loops; compiled once, cached on disk, or ahead of time:
:mod:`excavator_sim.soil.kernels`, which the rest of the package imports them from).

Grid convention: cell (i, j) covers x in [x0 + i*dx, x0 + (i+1)*dx) and y likewise; its corner
(i, j) is the point (x0 + i*dx, y0 + j*dx). Heights are int64 counts of the z cell size dz.
Every kernel works on a box of cells (i0.., j0..) and never touches a cell outside it, so the
cost follows the bucket, not the grid.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from excavator_sim.soil.terrain_config import NO_CAP


@njit(cache=True)
def _tally(zlo: np.ndarray, zhi: np.ndarray, a: int, b: int, z: float) -> None:
    if 0 <= a < zlo.shape[0] and 0 <= b < zlo.shape[1]:
        zlo[a, b] = min(zlo[a, b], z)
        zhi[a, b] = max(zhi[a, b], z)


@njit(cache=True)
def _axis_walk(p: float, d: float, origin: float, cell: float, index: int
               ) -> tuple[int, float, float]:
    """Amanatides-Woo set-up along one axis for a segment starting at ``p`` with extent ``d``:
    (step, t of the first cell boundary, t per cell), t in segment fractions."""
    if d > 0.0:
        return 1, (origin + (index + 1) * cell - p) / d, cell / d
    if d < 0.0:
        return -1, (origin + index * cell - p) / d, -cell / d
    return 0, np.inf, np.inf


@njit(cache=True)
def column_extents(
    corners: np.ndarray,
    faces: np.ndarray,
    face_sizes: np.ndarray,
    edges: np.ndarray,
    x0: float,
    y0: float,
    dx: float,
    i0: int,
    j0: int,
    zlo: np.ndarray,
    zhi: np.ndarray,
) -> None:
    """Lowest and highest z [m] of the prism over each cell of the box (zlo > zhi: not covered).

    The extreme heights of a plane over a square cell lie at the cell's corners, so each
    non-vertical face adds its height at every grid corner inside its xy projection to the four
    cells sharing that corner (the seed's corner tally). Where a face only partly covers a cell,
    or stands vertical, the extremes lie on the face's edges: each edge is walked cell by cell
    with the Amanatides-Woo traversal (2D, in xy) and adds its z where it enters and leaves
    each cell.
    """
    zlo[:, :] = np.inf
    zhi[:, :] = -np.inf
    ni, nj = zlo.shape
    for f in range(faces.shape[0]):
        n = face_sizes[f]
        p0 = corners[faces[f, 0]]
        p1 = corners[faces[f, 1]]
        p2 = corners[faces[f, n - 1]]
        ux, uy, uz = p1[0] - p0[0], p1[1] - p0[1], p1[2] - p0[2]
        vx, vy, vz = p2[0] - p0[0], p2[1] - p0[1], p2[2] - p0[2]
        nx = uy * vz - uz * vy
        ny = uz * vx - ux * vz
        nz = ux * vy - uy * vx
        nn = math.sqrt(nx * nx + ny * ny + nz * nz)
        if abs(nz) <= 1e-9 * nn:
            continue  # vertical face: its edges carry it
        # orientation of the projected polygon, and its corner-index bounding box
        area2 = 0.0
        xmin, xmax, ymin, ymax = np.inf, -np.inf, np.inf, -np.inf
        for k in range(n):
            a = corners[faces[f, k]]
            b = corners[faces[f, (k + 1) % n]]
            area2 += a[0] * b[1] - b[0] * a[1]
            xmin = min(xmin, a[0])
            xmax = max(xmax, a[0])
            ymin = min(ymin, a[1])
            ymax = max(ymax, a[1])
        sign = 1.0 if area2 > 0.0 else -1.0
        tol = 1e-12 * (xmax - xmin + ymax - ymin + dx)
        ci_lo = max(int(math.ceil((xmin - x0) / dx)), i0)
        ci_hi = min(int(math.floor((xmax - x0) / dx)), i0 + ni)
        cj_lo = max(int(math.ceil((ymin - y0) / dx)), j0)
        cj_hi = min(int(math.floor((ymax - y0) / dx)), j0 + nj)
        for ci in range(ci_lo, ci_hi + 1):
            x = x0 + ci * dx
            for cj in range(cj_lo, cj_hi + 1):
                y = y0 + cj * dx
                inside = True
                for k in range(n):
                    a = corners[faces[f, k]]
                    b = corners[faces[f, (k + 1) % n]]
                    cross = (b[0] - a[0]) * (y - a[1]) - (b[1] - a[1]) * (x - a[0])
                    if cross * sign < -tol:
                        inside = False
                        break
                if not inside:
                    continue
                z = p0[2] - (nx * (x - p0[0]) + ny * (y - p0[1])) / nz
                a_ = ci - i0
                b_ = cj - j0
                _tally(zlo, zhi, a_ - 1, b_ - 1, z)
                _tally(zlo, zhi, a_ - 1, b_, z)
                _tally(zlo, zhi, a_, b_ - 1, z)
                _tally(zlo, zhi, a_, b_, z)
    for e in range(edges.shape[0]):
        pa = corners[edges[e, 0]]
        pb = corners[edges[e, 1]]
        ddx, ddy, ddz = pb[0] - pa[0], pb[1] - pa[1], pb[2] - pa[2]
        i = int(math.floor((pa[0] - x0) / dx))
        j = int(math.floor((pa[1] - y0) / dx))
        i_end = int(math.floor((pb[0] - x0) / dx))
        j_end = int(math.floor((pb[1] - y0) / dx))
        step_i, t_max_x, t_dx = _axis_walk(pa[0], ddx, x0, dx, i)
        step_j, t_max_y, t_dy = _axis_walk(pa[1], ddy, y0, dx, j)
        t = 0.0
        n_steps = abs(i_end - i) + abs(j_end - j) + 2
        for _ in range(n_steps):
            t_next = min(t_max_x, t_max_y, 1.0)
            _tally(zlo, zhi, i - i0, j - j0, pa[2] + t * ddz)
            _tally(zlo, zhi, i - i0, j - j0, pa[2] + t_next * ddz)
            if t_next >= 1.0:
                break
            if t_max_x < t_max_y:
                i += step_i
                t = t_max_x
                t_max_x += t_dx
            else:
                j += step_j
                t = t_max_y
                t_max_y += t_dy


@njit(cache=True)
def wall_caps(zlo: np.ndarray, zhi: np.ndarray, dz: float, cap: np.ndarray) -> int:
    """Per cell of the box the highest soil level [dz units] the bucket leaves in place (the
    bucket's bottom rounded up), or NO_CAP where the bucket does not cover the column.
    Returns the number of covered columns."""
    covered = 0
    for a in range(zlo.shape[0]):
        for b in range(zlo.shape[1]):
            if zlo[a, b] <= zhi[a, b]:
                cap[a, b] = np.int64(math.ceil(zlo[a, b] / dz - 1e-9))
                covered += 1
            else:
                cap[a, b] = NO_CAP
    return covered


@njit(cache=True)
def dig(
    h: np.ndarray,
    i0: int,
    j0: int,
    cap: np.ndarray,
    scoop: bool,
    dir_a: float,
    dir_b: float,
    centre_a: float,
    centre_b: float,
) -> tuple[int, int]:
    """Remove the soil above the bucket's bottom in every covered column of the box.

    Scooping: the soil goes into the bucket (returned count, dz units). Otherwise it is pushed
    aside: walked along the horizontal motion direction (dir_a, dir_b) in cells (or away from
    the footprint's centre when the bucket moves vertically) to the first column with room and
    dropped there. Returns (taken into the bucket, pushed aside); nothing is lost: soil that
    finds no room stays where it was.
    """
    ni, nj = cap.shape
    taken = 0
    pushed = 0
    for a in range(ni):
        for b in range(nj):
            c = cap[a, b]
            if c == NO_CAP:
                continue
            excess = h[i0 + a, j0 + b] - c
            if excess <= 0:
                continue
            if scoop:
                h[i0 + a, j0 + b] = c
                taken += excess
                continue
            da, db = dir_a, dir_b
            if da == 0.0 and db == 0.0:
                da = a + 0.5 - centre_a
                db = b + 0.5 - centre_b
                norm = math.sqrt(da * da + db * db)
                if norm < 1e-9:
                    da, db = 1.0, 0.0
                else:
                    da, db = da / norm, db / norm
            fa = a + 0.5
            fb = b + 0.5
            for s in range(1, ni + nj + 2):
                ta = int(math.floor(fa + s * da))
                tb = int(math.floor(fb + s * db))
                if ta < 0 or ta >= ni or tb < 0 or tb >= nj:
                    break
                if cap[ta, tb] == NO_CAP or h[i0 + ta, j0 + tb] + excess <= cap[ta, tb]:
                    h[i0 + a, j0 + b] = c
                    h[i0 + ta, j0 + tb] += excess
                    pushed += excess
                    break
    return taken, pushed


@njit(cache=True)
def relax(
    h: np.ndarray, i0: int, j0: int, cap: np.ndarray, dmax: int, iterations: int
) -> int:
    """Angle-of-repose relaxation inside the box: where a column stands more than ``dmax``
    [dz units] above a 4-neighbour, half the excess slides over (integer units: exact). Soil
    never slides into the bucket (a covered neighbour takes at most up to its cap), so walls
    hold soil back. Returns the number of units moved."""
    ni, nj = cap.shape
    moved = 0
    for _ in range(iterations):
        moved_now = 0
        for a in range(ni):
            for b in range(nj):
                i = i0 + a
                j = j0 + b
                for k in range(4):
                    na = a + (1 if k == 0 else (-1 if k == 1 else 0))
                    nb = b + (1 if k == 2 else (-1 if k == 3 else 0))
                    if na < 0 or na >= ni or nb < 0 or nb >= nj:
                        continue
                    diff = h[i, j] - h[i0 + na, j0 + nb]
                    if diff <= dmax:
                        continue
                    m = (diff - dmax + 1) // 2
                    room = cap[na, nb] - h[i0 + na, j0 + nb]
                    m = min(m, room)
                    if m <= 0:
                        continue
                    h[i, j] -= m
                    h[i0 + na, j0 + nb] += m
                    moved_now += m
        moved += moved_now
        if moved_now == 0:
            break
    return moved
