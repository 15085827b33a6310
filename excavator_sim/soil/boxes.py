"""Boxes as triangles (visualization_msgs TRIANGLE_LIST): the bucket's soil drawn for RViz.

Corner k of a box is at bits (k >> 2, k >> 1, k) & 1 of its three edge directions; the 12
triangles wind the same way round every face (outwards for a right-handed box), so the
divergence theorem gives each box's volume from its triangles."""

from __future__ import annotations

import numpy as np

BOX_TRIANGLES = np.array([
    (0, 2, 6), (0, 6, 4), (1, 5, 7), (1, 7, 3), (0, 4, 5), (0, 5, 1),
    (2, 3, 7), (2, 7, 6), (0, 1, 3), (0, 3, 2), (4, 6, 7), (4, 7, 5)])
BOX_CORNERS = np.array([[(i >> 2) & 1, (i >> 1) & 1, i & 1] for i in range(8)],
                        dtype=float) * 2.0 - 1.0


def boxes_to_triangles(corners: np.ndarray) -> np.ndarray:
    """Surface triangles ``(n * 36, 3)`` [m] of boxes given by their corners ``(n, 8, 3)``
    in the order above; every three vertices one triangle."""
    if len(corners) == 0:
        return np.zeros((0, 3))
    tris: np.ndarray = corners[:, BOX_TRIANGLES.ravel(), :].reshape(-1, 3)
    return tris
