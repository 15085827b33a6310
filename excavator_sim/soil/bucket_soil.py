"""The soil in the bucket as a body to draw: columns over the bucket's floor, heaped.

The terrain model keeps the bucket's load as one exact count of soil units
(:class:`~excavator_sim.soil.terrain.Terrain`); its shape follows from the bucket's pose in
closed form: :func:`~excavator_sim.soil.terrain.held_soil_shape` (the same shape that sets the
capacity: the part of the side-view triangle J-B-T under the repose line through the lip, plus
the SAE J296 heap on the strike line when the opening faces up). Here a load smaller than the
capacity fills that shape from the bottom up to a level surface, and the filled shape is cut
into vertical columns (``column_m`` wide along the bucket's heading, the bucket's width across):
what RViz (soil_node's ``soil/bucket_soil`` marker) and the renders (``excavator_hil.render``)
show. Pure numpy; the volume of the columns equals the load to the column sampling's accuracy.
"""

from __future__ import annotations

import math

import numpy as np

from excavator_sim.soil.boxes import BOX_CORNERS as _BOX_CORNERS
from excavator_sim.soil.boxes import boxes_to_triangles
from excavator_sim.soil.bucket_prism import BucketPose, BucketPrism
from excavator_sim.soil.terrain import _area, _clip_halfplane, held_soil_shape

Polygon = list[tuple[float, float]]


def held_polygons(prism: BucketPrism, pitch: float, repose_rad: float,
                  load_m3: float | None = None) -> list[Polygon]:
    """Side-view polygons (u along the heading, z up, [m] from the bucket origin) of the soil
    the bucket holds at ``pitch`` [rad]: the full shape (``load_m3`` None or >= capacity) or
    the part of it below the level that holds ``load_m3``. The heap's hips at the side plates
    are spread over the width: its apex is lowered by the hips' share."""
    cp, sp = math.cos(pitch), math.sin(pitch)
    uz = [(x * cp + z * sp, -x * sp + z * cp) for x, z in prism.side_view]
    kept, heap_tri, hips, _, _ = held_soil_shape(uz[0], uz[1], uz[2], repose_rad,
                                                 prism.width_m)
    pieces: list[Polygon] = [kept] if len(kept) >= 3 else []
    if heap_tri is not None and hips > 0.0:
        (lu, lz), (ou, oz), (au, az) = heap_tri
        # the apex's foot on the strike line; lower the apex towards it by the hips' share
        du, dz = ou - lu, oz - lz
        k = ((au - lu) * du + (az - lz) * dz) / (du * du + dz * dz)
        fu, fz = lu + k * du, lz + k * dz
        pieces.append([(lu, lz), (ou, oz), (fu + hips * (au - fu), fz + hips * (az - fz))])
    if load_m3 is None:
        return pieces
    area = max(0.0, load_m3) / prism.width_m
    full = sum(_area(p) for p in pieces)
    if area <= 0.0 or not pieces:
        return []
    if area >= full:
        return pieces
    zs = [z for p in pieces for _, z in p]
    lo, hi = min(zs), max(zs)
    for _ in range(50):  # bisection on the level: the filled area grows with it
        mid = 0.5 * (lo + hi)
        filled = sum(_area(c) for p in pieces
                     if len(c := _clip_halfplane(p, 0.0, 1.0, mid)) >= 3)
        lo, hi = (mid, hi) if filled < area else (lo, mid)
    return [c for p in pieces if len(c := _clip_halfplane(p, 0.0, 1.0, hi)) >= 3]


def _vertical_extent(poly: Polygon, u: float) -> tuple[float, float] | None:
    """Lowest and highest z of a convex polygon on the vertical line at ``u`` (None: misses)."""
    zs = []
    n = len(poly)
    for k in range(n):
        (u0, z0), (u1, z1) = poly[k], poly[(k + 1) % n]
        if (u0 - u) * (u1 - u) <= 0.0 and u0 != u1:
            zs.append(z0 + (u - u0) / (u1 - u0) * (z1 - z0))
        elif u0 == u1 == u:
            zs.extend((z0, z1))
    return (min(zs), max(zs)) if zs else None


def soil_columns(prism: BucketPrism, pose: BucketPose, load_m3: float, repose_rad: float,
                 column_m: float = 0.04) -> np.ndarray:
    """The bucket's soil as vertical columns in ``world``: array ``(n, 7)`` of centre x, y, z
    [m], half sizes along the heading, across and up [m], and yaw [rad] (the bucket's). Empty
    ``(0, 7)`` for an empty bucket."""
    polys = held_polygons(prism, pose.pitch, repose_rad, load_m3)
    if not polys:
        return np.zeros((0, 7))
    us = [u for p in polys for u, _ in p]
    u0, u1 = min(us), max(us)
    n = max(1, math.ceil((u1 - u0) / column_m))
    du = (u1 - u0) / n
    heading = np.array([math.cos(pose.yaw), math.sin(pose.yaw)])
    rows = []
    for k in range(n):
        u = u0 + (k + 0.5) * du
        spans = [e for p in polys if (e := _vertical_extent(p, u)) is not None]
        if not spans:
            continue
        zlo, zhi = min(s[0] for s in spans), max(s[1] for s in spans)
        if zhi - zlo <= 1e-6:
            continue
        x, y = pose.x + u * heading[0], pose.y + u * heading[1]
        rows.append((x, y, pose.z + 0.5 * (zlo + zhi), 0.5 * du, 0.5 * prism.width_m,
                     0.5 * (zhi - zlo), pose.yaw))
    return np.array(rows, dtype=float).reshape(-1, 7)


# The 12 triangles of a unit box's surface, corners indexed by (sx, sy, sz) bits.
def columns_to_triangles(columns: np.ndarray) -> np.ndarray:
    """Surface triangles of the columns: ``(n * 36, 3)`` vertices [m] in ``world``, every three
    one triangle (a visualization_msgs TRIANGLE_LIST)."""
    if len(columns) == 0:
        return np.zeros((0, 3))
    c, s = np.cos(columns[:, 6]), np.sin(columns[:, 6])
    local = _BOX_CORNERS[None, :, :] * columns[:, None, 3:6]          # (n, 8, 3)
    x = c[:, None] * local[..., 0] - s[:, None] * local[..., 1] + columns[:, None, 0]
    y = s[:, None] * local[..., 0] + c[:, None] * local[..., 1] + columns[:, None, 1]
    z = local[..., 2] + columns[:, None, 2]
    corners = np.stack([x, y, z], axis=-1)                             # (n, 8, 3)
    return boxes_to_triangles(corners)
