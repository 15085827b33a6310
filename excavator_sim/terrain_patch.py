"""The terrain patch wire format of ``soil/terrain_patch`` (std_msgs/Float64MultiArray), on its
own (numpy only, no MuJoCo): sim_node, soil_node and the viewers (dashboard, Foxglove view)
read and write it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from excavator_sim.errors import HeightFieldError

# layout.dim = [("i", ni, ni * nj), ("j", nj, nj)], layout.data_offset = 2,
# data = [i0, j0, h(i0, j0), h(i0, j0 + 1), ...]: the region's first node and its heights [m]
# row-major [i, j]. The two leading values are the array's declared front padding.
PATCH_HEADER = 2


def patch_to_flat(i0: int, j0: int, heights: np.ndarray) -> tuple[tuple[int, int], list[float]]:
    """``((ni, nj), data)`` for a patch message: the region origin then the heights [m]."""
    h = np.asarray(heights, dtype=float)
    if h.ndim != 2:
        raise HeightFieldError(f"heights must be a 2-D array [i, j], got shape {h.shape}")
    return (int(h.shape[0]), int(h.shape[1])), [float(i0), float(j0), *h.ravel().tolist()]


def flat_to_patch(ni: int, nj: int, data: Sequence[float] | np.ndarray
                  ) -> tuple[int, int, np.ndarray]:
    """Inverse of :func:`patch_to_flat`: ``(i0, j0, heights[ni, nj])``; checks the sizes."""
    values = np.asarray(data, dtype=float)
    if ni < 1 or nj < 1 or values.size != PATCH_HEADER + ni * nj:
        raise HeightFieldError(f"terrain patch of {ni} x {nj} nodes needs {PATCH_HEADER} + "
                               f"{ni * nj} values, got {values.size}: send [i0, j0, heights...]")
    i0, j0 = values[0], values[1]
    if not (float(i0).is_integer() and float(j0).is_integer()):
        raise HeightFieldError(f"terrain patch origin ({i0}, {j0}) must be integer node indices")
    return int(i0), int(j0), values[PATCH_HEADER:].reshape(ni, nj)
