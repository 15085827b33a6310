"""Wire-efficient terrain messages, built from numpy without a Python object per value.

What soil_node sends for people and recorders, as plain arrays and bytes, so that building a
message costs a few array copies, not ~10^5 Python objects (the old ``Marker`` with one ``Point``
per vertex took 0.2-0.8 s on a 2-core host):

- :func:`heightmap_points`: the terrain surface as an ``(N, 3)`` float32 point set [m] in
  ``world``, every ``stride``-th cell centre, for a ``sensor_msgs/PointCloud2``;
- :data:`XYZ_FIELDS` / :func:`cloud_layout`: that cloud's field layout (x, y, z as FLOAT32, the
  layout RViz's PointCloud2 display and every PCL tool read) and its byte data;
- :func:`patch_array`: a ``soil/terrain_patch`` data vector (``[i0, j0, heights...]``, the format
  of :mod:`excavator_sim.heightfield`) as an ``array.array('d')``, which rclpy takes as a
  ``float64[]`` field without converting element by element.

No ROS import here: the node copies these into its messages (``soil_node.py``).
"""

from __future__ import annotations

import array
import math
from dataclasses import dataclass

import numpy as np

# sensor_msgs/PointField datatype constant for FLOAT32 (sensor_msgs/msg/PointField.msg).
POINTFIELD_FLOAT32 = 7


@dataclass(frozen=True)
class FieldSpec:
    """One ``sensor_msgs/PointField``: name, byte offset in the point, datatype, count."""

    name: str
    offset: int
    datatype: int = POINTFIELD_FLOAT32
    count: int = 1


XYZ_FIELDS = (FieldSpec("x", 0), FieldSpec("y", 4), FieldSpec("z", 8))
XYZ_POINT_STEP = 12  # bytes per point: three little-endian float32


def stride_for(nx: int, ny: int, max_nodes: int) -> int:
    """The smallest cell stride that keeps at most ``max_nodes`` points per side."""
    if max_nodes < 1:
        raise ValueError(f"max_nodes = {max_nodes} must be >= 1")
    return max(1, math.ceil(max(nx, ny) / max_nodes))


def heightmap_points(xs: np.ndarray, ys: np.ndarray, heights: np.ndarray,
                     stride: int = 1) -> np.ndarray:
    """Every ``stride``-th cell centre of the grid as ``(N, 3)`` float32 [m], x-major.

    ``xs`` [m] are the cell rows' x, ``ys`` [m] the columns' y, ``heights[i, j]`` [m] the
    surface over cell (i, j). Point ``k`` is cell ``(i, j) = divmod(k, ny_strided)`` scaled by
    ``stride``.
    """
    h = np.asarray(heights)
    if h.shape != (len(xs), len(ys)):
        raise ValueError(f"heights of shape {h.shape} do not match {len(xs)} x {len(ys)} cells")
    hs = h[::stride, ::stride]
    gx, gy = np.meshgrid(np.asarray(xs)[::stride], np.asarray(ys)[::stride], indexing="ij")
    out = np.empty((*hs.shape, 3), dtype=np.float32)
    out[..., 0], out[..., 1], out[..., 2] = gx, gy, hs
    return out.reshape(-1, 3)


@dataclass(frozen=True)
class CloudLayout:
    """What a ``sensor_msgs/PointCloud2`` of unordered xyz points needs besides the header."""

    height: int
    width: int
    point_step: int
    row_step: int
    is_bigendian: bool
    is_dense: bool
    data: bytes


def cloud_layout(points: np.ndarray) -> CloudLayout:
    """Layout and little-endian bytes of an ``(N, 3)`` point set for :data:`XYZ_FIELDS`."""
    p = np.ascontiguousarray(points, dtype="<f4")
    if p.ndim != 2 or p.shape[1] != 3:
        raise ValueError(f"points of shape {p.shape}: expected (N, 3)")
    n = int(p.shape[0])
    return CloudLayout(height=1, width=n, point_step=XYZ_POINT_STEP,
                       row_step=XYZ_POINT_STEP * n, is_bigendian=False,
                       is_dense=bool(np.all(np.isfinite(p))), data=p.tobytes())


def cloud_points(data: bytes | bytearray | memoryview, width: int, height: int = 1,
                 point_step: int = XYZ_POINT_STEP) -> np.ndarray:
    """Inverse of :func:`cloud_layout` for readers (tests, tools): ``(N, 3)`` float32."""
    n = width * height
    raw = np.frombuffer(bytes(data), dtype=np.uint8)
    if raw.size != n * point_step:
        raise ValueError(f"cloud data of {raw.size} bytes does not hold {n} points of "
                         f"{point_step} bytes")
    rows = raw.reshape(n, point_step)[:, :XYZ_POINT_STEP]
    return np.ascontiguousarray(rows).view("<f4").reshape(n, 3)


def patch_array(i0: int, j0: int, heights: np.ndarray) -> array.array[float]:
    """``[i0, j0, h(i0, j0), h(i0, j0+1), ...]`` [m] as ``array('d')`` (row-major, x first)."""
    h = np.asarray(heights, dtype=np.float64)
    if h.ndim != 2:
        raise ValueError(f"heights must be a 2-D array [i, j], got shape {h.shape}")
    out = array.array("d", (float(i0), float(j0)))
    out.frombytes(np.ascontiguousarray(h).tobytes())
    return out
