"""Issue 14.7's visuals: the soil in the bucket as a body (heaped, per soil cell) for RViz and
the renders, from the shape the terrain model's capacity uses. Pure (no ROS)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from excavator_kinematics.geometry import default_geometry
from excavator_sim.iso6015 import heaped_capacity_m3
from excavator_sim.soil.bucket_prism import BucketPose, BucketPrism
from excavator_sim.soil.bucket_soil import columns_to_triangles, held_polygons, soil_columns
from excavator_sim.soil.terrain import _area, bucket_capacity_m2

BUCKET = BucketPrism.from_geometry(default_geometry())
REPOSE = 0.85


def capacity_m3(pitch: float) -> float:
    cp, sp = math.cos(pitch), math.sin(pitch)
    uz = [(x * cp + z * sp, -x * sp + z * cp) for x, z in BUCKET.side_view]
    return bucket_capacity_m2(uz[0], uz[1], uz[2], REPOSE, BUCKET.width_m)[0] * BUCKET.width_m


def columns_volume(columns: np.ndarray) -> float:
    return float(np.sum(8.0 * columns[:, 3] * columns[:, 4] * columns[:, 5]))


def mesh_volume(triangles: np.ndarray) -> float:
    """Volume enclosed by closed boxes of 12 triangles each (divergence theorem per box)."""
    tri = triangles.reshape(-1, 12, 3, 3)
    signed = np.einsum("bti,bti->bt", tri[:, :, 0], np.cross(tri[:, :, 1], tri[:, :, 2])) / 6
    return float(np.abs(signed.sum(axis=1)).sum())


@settings(max_examples=60, deadline=None)
@given(pitch=st.floats(-1.5, 1.6), fraction=st.floats(0.0, 1.5), yaw=st.floats(-3.1, 3.1))
def test_the_drawn_soil_is_the_load_in_the_shape_the_capacity_uses(pitch: float, fraction: float,
                                                                  yaw: float) -> None:
    cap = capacity_m3(pitch)
    # the full shape is the capacity's (one source: terrain.held_soil_shape)
    assert sum(_area(p) for p in held_polygons(BUCKET, pitch, REPOSE)) * BUCKET.width_m == (
        pytest.approx(cap, abs=1e-9))
    load = fraction * 0.35
    pose = BucketPose(3.0, -1.0, 0.4, pitch, yaw)
    cols = soil_columns(BUCKET, pose, load, REPOSE, column_m=0.002)
    shown = min(load, cap)
    assert columns_volume(cols) == pytest.approx(shown, abs=2e-3 + 0.02 * shown)
    if len(cols):
        # in the bucket's vertical plane, along its heading, within its reach (heap included)
        heading = np.array([math.cos(yaw), math.sin(yaw)])
        rel = cols[:, :2] - [pose.x, pose.y]
        assert np.abs(rel @ [-heading[1], heading[0]]).max() < 1e-9
        assert np.abs(rel @ heading).max() <= 1.2
        assert np.all(cols[:, 6] == yaw) and np.all(cols[:, 4] == BUCKET.width_m / 2)


def test_a_level_full_bucket_shows_the_heap_above_the_rim() -> None:
    """The opening level (pitch at which J and T are at the same height): the drawn soil is the
    SAE J296 heaped capacity and stands above the rim."""
    tx, tz = BUCKET.side_view[2]
    pitch = math.atan2(tz, tx) + math.pi  # T at the height of J (the origin)
    assert -tx * math.sin(pitch) + tz * math.cos(pitch) == pytest.approx(0.0, abs=1e-12)
    cap = capacity_m3(pitch)
    # SAE J296 heaped capacity of the default bucket (docs/soil.md; the seed's was 0.340 m^3)
    assert cap == pytest.approx(heaped_capacity_m3(default_geometry()), rel=0.015)
    cols = soil_columns(BUCKET, BucketPose(0.0, 0.0, 0.0, pitch, 0.0), 1.0, REPOSE, 0.01)
    rim = 0.0  # J, the bucket origin, is on the rim at this pitch
    assert (cols[:, 2] + cols[:, 5]).max() > rim + 0.1  # the heap's apex above the rim


def test_an_empty_or_tipped_bucket_shows_nothing() -> None:
    assert soil_columns(BUCKET, BucketPose(0, 0, 0, 0.9, 0), 0.0, REPOSE).shape == (0, 7)
    assert soil_columns(BUCKET, BucketPose(0, 0, 0, -1.4, 0), 0.3, REPOSE).shape == (0, 7)
    assert columns_to_triangles(np.zeros((0, 7))).shape == (0, 3)


def test_the_marker_triangles_enclose_the_columns() -> None:
    cols = soil_columns(BUCKET, BucketPose(1.0, 2.0, 0.5, 0.9, 0.7), 0.2, REPOSE, 0.05)
    tris = columns_to_triangles(cols)
    assert tris.shape == (36 * len(cols), 3)
    assert mesh_volume(tris) == pytest.approx(columns_volume(cols), rel=1e-9)


def test_the_render_draws_the_bucket_soil() -> None:
    import dataclasses

    from excavator_hil.render import SOIL_RGBA, render_rgb
    from excavator_sim.sim_config import load_sim_config
    from excavator_sim.simulation import ExcavatorSimulation
    from excavator_sim.soil.bucket_prism import BucketPose as Pose

    sim = ExcavatorSimulation(dataclasses.replace(
        load_sim_config(overrides={"terrain.nx": 11, "terrain.ny": 11, "initial.boom_rad": 0.6,
                                   "initial.arm_rad": -2.28, "initial.bucket_rad": 0.72}),
        terrain_contact=False))  # a carry pose: the opening faces up
    pos, quat = sim.bucket_pose()
    w, x, y, z = (float(v) for v in quat)
    pose = Pose.from_quaternion(tuple(map(float, pos)), (x, y, z, w))
    cols = soil_columns(BUCKET, pose, 0.3, REPOSE, 0.05)
    assert len(cols) > 5
    camera = {"lookat": tuple(sim.bucket_tip()), "distance": 4.0, "azimuth": -60.0,
              "elevation": -35.0}
    empty = render_rgb(sim.model, sim.data, 200, 150, **camera)
    full = render_rgb(sim.model, sim.data, 200, 150, bucket_soil=cols, **camera)
    soil = np.array(SOIL_RGBA[:3]) * 255

    def soil_pixels(img: np.ndarray) -> int:
        # lit: the shade varies with the light, the hue stays (r > g > b, brown)
        r, g, b = (img[..., k].astype(float) for k in range(3))
        return int(np.sum((r > g + 15) & (g > b + 10) & (r < soil[0] * 1.6)))

    assert soil_pixels(full) > soil_pixels(empty) + 200
