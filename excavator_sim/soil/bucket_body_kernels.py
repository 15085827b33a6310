# ruff: noqa: RUF046  (explicit int() keeps numba from typing floor() results as floats)
"""numba kernels of the bucket's soil body (:mod:`excavator_sim.soil.bucket_body`: the grid, the
held and heaped shapes, pouring and settling); hot loops, compiled once, cached on disk, or
ahead of time (:mod:`excavator_sim.soil.kernels`, which the rest of the package imports them
from).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


@njit(cache=True)
def _excess(ds_: float, dw_: float, dn_: float, us: float, uw: float, un: float,
            tan_r: float) -> float:
    """How far [m] point a stands above the repose cone of point b (difference a - b)."""
    dz = us * ds_ + uw * dw_ + un * dn_
    if dz <= 0.0:
        return 0.0
    horiz2 = ds_ * ds_ + dw_ * dw_ + dn_ * dn_ - dz * dz
    horiz = math.sqrt(horiz2) if horiz2 > 0.0 else 0.0
    return dz - tan_r * horiz


@njit(cache=True)
def held_caps(floor_n: np.ndarray, ds: float, dn: float, length: float, up: np.ndarray,
              tan_r: float, cap: np.ndarray) -> None:
    """Per column the units it holds with the opening steeper than repose (``settle``): the
    slots inside the bucket (n <= 0) under the repose plane rising inwards from the lip, or
    below the lip's level when the opening faces down and runs under that plane."""
    ns, nw = cap.shape
    us, uw, un = up[0], up[1], up[2]
    s_lip = 0.0 if us >= 0.0 else length
    along = math.sqrt(max(0.0, 1.0 - us * us))
    pocket_only = un <= 0.0 and abs(us) <= tan_r * along
    for i in range(ns):
        s = (i + 0.5) * ds
        slots = int(math.floor(-floor_n[i] / dn + 1e-9))
        held = 0
        for q in range(slots):
            n = floor_n[i] + (q + 0.5) * dn
            if pocket_only:
                ok = us * (s - s_lip) + un * n < 0.0
            else:
                ok = _excess(s - s_lip, 0.0, n, us, uw, un, tan_r) <= 0.0
            if ok:
                held += 1
        for j in range(nw):
            cap[i, j] = held


@njit(cache=True)
def heap_caps(floor_n: np.ndarray, ds: float, dw: float, dn: float, length: float,
              width: float, up: np.ndarray, tan_r: float, cap: np.ndarray) -> None:
    """Per column the units it holds with the opening flatter than repose: everything up to
    the strike plane, and above it while the column's top stays within the repose angle of
    every edge of the rim (the heap; over the side plates only above the rim)."""
    ns, nw = cap.shape
    us, uw, un = up[0], up[1], up[2]
    for i in range(ns):
        s = (i + 0.5) * ds
        q = int(math.floor(-floor_n[i] / dn + 1e-9))
        for j in range(nw):
            w = -0.5 * width + (j + 0.5) * dw
            k = q
            while k < q + 10_000:
                n = floor_n[i] + (k + 1) * dn
                if (_excess(s, 0.0, n, us, uw, un, tan_r) > 0.0
                        or _excess(s - length, 0.0, n, us, uw, un, tan_r) > 0.0
                        or (n > 0.0 and (_excess(0.0, w + 0.5 * width, n, us, uw, un, tan_r)
                                         > 0.0
                                         or _excess(0.0, w - 0.5 * width, n, us, uw, un,
                                                    tan_r) > 0.0))):
                    break
                k += 1
            cap[i, j] = k


@njit(cache=True)
def pour(units: np.ndarray, floor_n: np.ndarray, ds: float, dw: float, dn: float,
         width: float, up: np.ndarray, cap: np.ndarray, count: int) -> int:
    """Pour ``count`` units into the columns where the next unit sits lowest against the
    effective "up" (a level fill from the bottom, each column up to ``cap``): soil pushed
    into the bucket settles in its lowest free room. Returns the units placed: fewer than
    ``count`` when the caps are reached. With the opening facing sideways or down a column
    grows away from its floor downwards, so there is no level to fill to: the units go one
    by one into the lowest next slot within the caps (the held pocket at the bucket's back;
    the caller's caps say what the walls hold)."""
    ns, nw = units.shape
    us, uw, un = up[0], up[1], up[2]
    if count <= 0:
        return 0
    if un <= 1e-9:
        return int(_pour_slots(units, floor_n, ds, dw, dn, width, up, cap, count))
    step = un * dn
    # bisection on the level Z [m, along up]: units that fit with their slot centre <= Z
    lo, hi = np.inf, -np.inf
    for i in range(ns):
        for j in range(nw):
            base = us * (i + 0.5) * ds + uw * (-0.5 * width + (j + 0.5) * dw) + un * floor_n[i]
            lo = min(lo, base)
            hi = max(hi, base + step * (units[i, j] + count + 1))
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        added = 0
        for i in range(ns):
            for j in range(nw):
                base = (us * (i + 0.5) * ds + uw * (-0.5 * width + (j + 0.5) * dw)
                        + un * floor_n[i])
                q = int(math.floor((mid - base) / step - 0.5)) + 1
                q = min(max(q, units[i, j]), cap[i, j])
                added += max(0, q - units[i, j])
        if added <= count:
            lo = mid
        else:
            hi = mid
    placed = 0
    for i in range(ns):
        for j in range(nw):
            base = us * (i + 0.5) * ds + uw * (-0.5 * width + (j + 0.5) * dw) + un * floor_n[i]
            q = int(math.floor((lo - base) / step - 0.5)) + 1
            q = min(max(q, units[i, j]), cap[i, j])
            if q > units[i, j]:
                placed += q - units[i, j]
                units[i, j] = q
    # the few left at the level: one each into the lowest next slots
    return placed + int(_pour_slots(units, floor_n, ds, dw, dn, width, up, cap,
                                    count - placed))


@njit(cache=True)
def _pour_slots(units: np.ndarray, floor_n: np.ndarray, ds: float, dw: float, dn: float,
                width: float, up: np.ndarray, cap: np.ndarray, count: int) -> int:
    """One unit at a time into the lowest next slot (against ``up``) of a column below its
    cap; returns the units placed."""
    ns, nw = units.shape
    us, uw, un = up[0], up[1], up[2]
    placed = 0
    while placed < count:
        best_i, best_j, best_z = -1, -1, np.inf
        for i in range(ns):
            for j in range(nw):
                if units[i, j] >= cap[i, j]:
                    continue
                z = (us * (i + 0.5) * ds + uw * (-0.5 * width + (j + 0.5) * dw)
                     + un * (floor_n[i] + (units[i, j] + 0.5) * dn))
                if z < best_z:
                    best_i, best_j, best_z = i, j, z
        if best_i < 0:
            break
        units[best_i, best_j] += 1
        placed += 1
    return placed


@njit(cache=True)
def settle(units: np.ndarray, floor_n: np.ndarray, ds: float, dw: float, dn: float,
           length: float, width: float, up: np.ndarray, tan_r: float, cos_r: float,
           sweeps: int, spill: np.ndarray, fraction: float, owed: np.ndarray) -> int:
    """Relax the columns ``units`` (ns, nw) under the effective "up" ``up`` = (u_s, u_w, u_n)
    (a unit vector in the opening's frame: along the chord, across, along the inward normal
    of the opening, i.e. out of the bucket) and add the units that leave the bucket to
    ``spill`` (ns + 2, nw + 2): ring cells for the edges (row 0: over J, row ns + 1: over T,
    column 0 / nw + 1: over the side plates), inner cells (i + 1, j + 1) for soil falling
    out of the opening below column (i, j). Returns the units moved or spilled.

    Opening steeper than repose: of the units beyond the held shape, only ``fraction`` (0..1,
    the share the sliding block has carried out since the last update) leaves, nearest the
    lip first, with ``owed[0]`` carrying the fraction of a unit between updates; the others
    stay on their columns, above the held shape, for the next update (``owed[1]`` is set to
    their count)."""
    ns, nw = units.shape
    us, uw, un = up[0], up[1], up[2]
    moved = 0
    if un < cos_r:
        # The opening is steeper than repose: no heap stands on it, and what the bucket holds
        # is what lies inside it (n <= 0) under the repose plane rising inwards from the lip
        # (the opening's lower edge), as the closed form's held_soil_shape; when the opening
        # faces down and runs under that plane, only the pocket below the lip's level. Soil
        # beyond a column's share first slumps into the held room lowest down (pour), the
        # rest leaves over the lip (opening up) or falls through the opening under its column
        # (opening down). Units kept restack from the floor.
        ring_i = 0 if us >= 0.0 else ns + 1
        cap = np.empty_like(units)
        held_caps(floor_n, ds, dn, length, up, tan_r, cap)
        over = np.zeros_like(units)
        pool = 0
        for i in range(ns):
            for j in range(nw):
                if units[i, j] > cap[i, j]:
                    over[i, j] = units[i, j] - cap[i, j]
                    pool += over[i, j]
                    units[i, j] = cap[i, j]
        owed[1] = 0.0
        if pool == 0:
            return 0
        left = pool - pour(units, floor_n, ds, dw, dn, width, up, cap, pool)
        due = left * min(max(fraction, 0.0), 1.0) + owed[0]
        go = min(left, int(math.floor(due)))
        owed[0] = min(max(due - go, 0.0), 1.0) if go < left else 0.0
        owed[1] = float(left - go)
        for k in range(ns):
            i = k if ring_i == 0 else ns - 1 - k   # the lip's row first
            for j in range(nw):
                if left == 0:
                    break
                m = min(over[i, j], left)
                if m > 0:
                    out = min(m, go)
                    if out > 0:
                        if un > 0.0:
                            spill[ring_i, j + 1] += out
                        else:
                            spill[i + 1, j + 1] += out
                    units[i, j] += m - out   # still sliding: on its column, past the cap
                    go -= out
                    left -= m
                    moved += m
        return moved
    for _ in range(sweeps):
        moved_now = 0
        for i in range(ns):
            s = (i + 0.5) * ds
            for j in range(nw):
                w = -0.5 * width + (j + 0.5) * dw
                for k in range(4):
                    if units[i, j] == 0:
                        break
                    top = floor_n[i] + units[i, j] * dn
                    ii = i + (1 if k == 0 else (-1 if k == 1 else 0))
                    jj = j + (1 if k == 2 else (-1 if k == 3 else 0))
                    if 0 <= ii < ns and 0 <= jj < nw:
                        other = floor_n[ii] + units[ii, jj] * dn
                        e = _excess((i - ii) * ds, (j - jj) * dw, top - other, us, uw, un,
                                    tan_r)
                        if e <= 0.0:
                            continue
                        m = min(units[i, j], int(math.ceil(e / (2.0 * un * dn))))
                        units[i, j] -= m
                        units[ii, jj] += m
                        moved_now += m
                        continue
                    # an edge of the opening: the rim's edge point at n = 0
                    if ii < 0 or ii >= ns:
                        es = 0.0 if ii < 0 else length
                        e = _excess(s - es, 0.0, top, us, uw, un, tan_r)
                        free = units[i, j]  # the walls end at the vertex: nothing holds it
                    else:
                        ew = -0.5 * width if jj < 0 else 0.5 * width
                        e = _excess(0.0, w - ew, top, us, uw, un, tan_r)
                        below = int(math.ceil(-floor_n[i] / dn - 1e-9))  # held by the plate
                        free = units[i, j] - below
                    if e <= 0.0 or free <= 0:
                        continue
                    m = min(free, int(math.ceil(e / (un * dn))))
                    units[i, j] -= m
                    spill[ii + 1, jj + 1] += m
                    moved_now += m
        moved += moved_now
        if moved_now == 0:
            break
    return moved
