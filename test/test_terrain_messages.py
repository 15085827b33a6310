"""Wire-efficient terrain messages (excavator_sim.soil.terrain_messages), without ROS."""

from __future__ import annotations

import array

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from excavator_sim.soil.terrain_messages import (
    XYZ_FIELDS,
    XYZ_POINT_STEP,
    cloud_layout,
    cloud_points,
    heightmap_points,
    patch_array,
    stride_for,
)
from excavator_sim.terrain_patch import flat_to_patch


@given(nx=st.integers(2, 40), ny=st.integers(2, 40), stride=st.integers(1, 5))
@settings(max_examples=50, deadline=None)
def test_heightmap_points_are_the_strided_cell_centres_and_heights(nx: int, ny: int,
                                                                   stride: int) -> None:
    xs = -1.0 + 0.05 * (np.arange(nx) + 0.5)
    ys = 2.0 + 0.05 * (np.arange(ny) + 0.5)
    h = np.random.default_rng(nx * ny).normal(0.0, 0.3, (nx, ny))
    pts = heightmap_points(xs, ys, h, stride)
    ni, nj = len(range(0, nx, stride)), len(range(0, ny, stride))
    assert pts.shape == (ni * nj, 3) and pts.dtype == np.float32
    for k in (0, ni * nj // 2, ni * nj - 1):
        i, j = divmod(k, nj)
        expected = (xs[i * stride], ys[j * stride], h[i * stride, j * stride])
        assert np.allclose(pts[k], expected, atol=1e-6)


def test_cloud_bytes_round_trip_with_the_declared_fields() -> None:
    pts = np.array([[0.0, 1.0, -0.25], [4.5, -3.0, 1.5]], dtype=np.float32)
    layout = cloud_layout(pts)
    assert (layout.height, layout.width, layout.point_step) == (1, 2, XYZ_POINT_STEP)
    assert layout.row_step == 24 and len(layout.data) == 24 and layout.is_dense
    assert [(f.name, f.offset, f.datatype) for f in XYZ_FIELDS] == [
        ("x", 0, 7), ("y", 4, 7), ("z", 8, 7)]
    assert np.array_equal(cloud_points(layout.data, layout.width), pts)
    assert not cloud_layout(np.array([[0.0, 0.0, np.nan]])).is_dense
    with pytest.raises(ValueError, match=r"\(N, 3\)"):
        cloud_layout(np.zeros((4, 2)))


@given(heights=arrays(np.float64, st.tuples(st.integers(1, 12), st.integers(1, 12)),
                      elements=st.floats(-3.0, 3.0)),
       i0=st.integers(0, 300), j0=st.integers(0, 300))
@settings(max_examples=50, deadline=None)
def test_patch_array_is_read_back_by_the_simulators_reader(heights: np.ndarray, i0: int,
                                                           j0: int) -> None:
    data = patch_array(i0, j0, heights)
    assert isinstance(data, array.array) and data.typecode == "d"
    i, j, back = flat_to_patch(heights.shape[0], heights.shape[1], data)
    assert (i, j) == (i0, j0) and np.array_equal(back, heights)


def test_stride_keeps_the_cloud_within_the_node_budget() -> None:
    assert stride_for(320, 320, 160) == 2 and stride_for(100, 50, 160) == 1
    assert stride_for(321, 10, 160) == 3
    with pytest.raises(ValueError, match="max_nodes"):
        stride_for(10, 10, 0)
