"""Terrain core: exact mass conservation, load kept in a swing, bucket geometry, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from excavator_kinematics.geometry import default_geometry
from excavator_sim.soil.bucket_prism import BucketPose, BucketPrism
from excavator_sim.soil.config import load_soil_config
from excavator_sim.soil.errors import OutsideGridError, SoilConfigError, SoilInputError
from excavator_sim.soil.scenarios import (
    REFERENCE_BUCKET,
    REFERENCE_GRID,
    dig_swing_dump,
    pose_for_tip,
    reference_scoop_poses,
)
from excavator_sim.soil.terrain import Terrain, bucket_capacity_m2
from excavator_sim.soil.terrain_config import TerrainConfig

BUCKET = BucketPrism.from_geometry(default_geometry())
SMALL = TerrainConfig(size_x_m=8.0, size_y_m=8.0, cell_xy_m=0.05, cell_z_m=0.01)

scoop = st.tuples(
    st.floats(-1.0, 1.0),  # start x [m]
    st.floats(-1.0, 1.0),  # start y [m]
    st.floats(-math.pi, math.pi),  # yaw [rad]
    st.floats(-1.2, 1.2),  # pitch [rad] (includes dumping orientations)
    st.floats(0.0, 0.4),  # depth of the tip [m]
    st.floats(-0.6, 0.6),  # pitch change along the scoop [rad]
)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(scoop, min_size=20, max_size=20))
def test_random_scoops_conserve_mass_exactly_over_10000_steps(scoops: list) -> None:
    terrain = Terrain(SMALL, BUCKET)
    total = terrain.total_units
    steps = 0
    moved = 0
    for x, y, yaw, pitch, depth, dpitch in scoops:
        heading = np.array([math.cos(yaw), math.sin(yaw), 0.0])
        start = np.array([x, y, 0.3])
        for k in range(500):  # down, along, up: 500 steps per scoop
            s = k / 499
            tip = start - heading * 0.8 * s + np.array([0.0, 0.0, -(depth + 0.3) * math.sin(
                math.pi * s)])
            r = terrain.update(pose_for_tip(BUCKET, tip, pitch + dpitch * s, yaw))
            moved += r.taken + r.pushed + r.spilled
            steps += 1
        assert terrain.total_units == total  # integer units: zero drift, not "small" drift
    assert steps == 10_000
    if max(sc[4] for sc in scoops) > 0.05:
        assert moved > 0  # the scoops really moved soil
    assert terrain.h.max() < 1000 and terrain.h.min() > -1000  # soil stays a sane surface


def test_dig_swing_dump_cycle_conserves_mass_and_moves_the_soil() -> None:
    config = load_soil_config().terrain
    terrain = Terrain(config, BUCKET)
    total = terrain.total_units
    loads: dict[str, list[int]] = {}
    for phase, pose in dig_swing_dump(terrain, BUCKET, dt=0.01):
        terrain.update(pose)
        assert terrain.total_units == total
        loads.setdefault(phase, []).append(terrain.load_units)
    assert max(loads["dig"]) > 0.05 / config.unit_volume_m3  # the bucket took soil (> 0.05 m^3)
    assert loads["dump"][-1] == 0  # ... and dumped all of it
    # the trench is in front of the machine (+x), the dump pile to its left (+y)
    xs, ys = terrain.cell_centres()
    trench = terrain.h[(xs > 4.5) & (xs < 5.5)][:, np.abs(ys) < 0.2]
    pile = terrain.h[np.abs(xs) < 1.5][:, ys > 3.0]
    assert trench.min() * config.cell_z_m < -0.2
    assert pile.sum() * config.unit_volume_m3 > 0.05


def test_swing_90_deg_at_half_rad_per_s_keeps_99_percent_of_a_full_bucket() -> None:
    config = load_soil_config().terrain
    terrain = Terrain(config, BUCKET)
    swing_loads = []
    for phase, pose in dig_swing_dump(terrain, BUCKET, dt=0.001, swing_rate_rad_s=0.5):
        if phase == "dump":
            break
        terrain.update(pose)
        if phase == "swing":
            swing_loads.append(terrain.load_units)
    assert len(swing_loads) == round((math.pi / 2) / 0.5 / 0.001)  # 1 ms steps, 3.14 s
    full = swing_loads[0]
    assert full * config.unit_volume_m3 > 0.05
    assert min(swing_loads) >= 0.99 * full


def test_vertical_back_wall_holds_its_soil_at_rest() -> None:
    """The reference bucket's back J-B is vertical: held still in the ground, neither the load
    nor the terrain pressing on the wall from outside may creep into or out of the bucket."""
    from excavator_sim.soil import terrain_kernels as kern

    terrain = Terrain(REFERENCE_GRID, REFERENCE_BUCKET)
    poses = reference_scoop_poses(2000)
    for pose in poses[:1000]:  # dig down to the vertex
        terrain.update(pose)
    total = terrain.total_units
    load = terrain.load_units
    assert load > 0
    for _ in range(2000):
        result = terrain.update(poses[999])
        assert terrain.load_units == load
        assert result.taken == 0 and result.spilled == 0
    assert terrain.total_units == total
    # no soil above the bucket's bottom in any column it covers
    corners = REFERENCE_BUCKET.corners(poses[999])
    c = REFERENCE_GRID
    zlo = np.empty((c.nx, c.ny))
    zhi = np.empty_like(zlo)
    from excavator_sim.soil.terrain import _EDGES, _FACE_SIZES, _FACES

    kern.column_extents(corners, _FACES, _FACE_SIZES, _EDGES, c.x0, c.y0, c.cell_xy_m, 0, 0,
                        zlo, zhi)
    covered = zlo <= zhi
    assert covered.sum() > 50
    assert np.all(terrain.h[covered] * c.cell_z_m <= zlo[covered] + c.cell_z_m)


def test_bucket_tilted_past_repose_drops_its_load_at_the_lip() -> None:
    terrain = Terrain(REFERENCE_GRID, REFERENCE_BUCKET)
    for pose in reference_scoop_poses(2000)[:1100]:
        terrain.update(pose)
    total = terrain.total_units
    pose = BucketPose(0.3, 0.0, 1.0, 0.0, 0.0)
    terrain.update(pose)
    full = terrain.load_units
    for k in range(1, 101):  # teeth down to 80 deg: the base is steeper than the repose angle
        terrain.update(BucketPose(0.3, 0.0, 1.0, math.radians(0.8 * k), 0.0))
    assert terrain.load_units == 0 < full
    assert terrain.total_units == total
    xs, _ = terrain.cell_centres()
    fallen = terrain.h[xs > 0.3].sum() - REFERENCE_GRID.initial_height_m
    assert fallen > 0  # it landed in front of the bucket, below the teeth


def _rotated(side_view: np.ndarray, pitch: float) -> list[tuple[float, float]]:
    cp, sp = math.cos(pitch), math.sin(pitch)
    return [(x * cp + z * sp, -x * sp + z * cp) for x, z in side_view]


def test_capacity_struck_heaped_and_zero_upside_down() -> None:
    area = REFERENCE_BUCKET.cross_section_area_m2
    j, b, t = [tuple(p) for p in REFERENCE_BUCKET.side_view]
    assert bucket_capacity_m2(j, b, t, 0.85, heap=False)[0] == pytest.approx(area)
    assert bucket_capacity_m2(j, b, t, 0.85)[0] >= area  # plus a heap over the sloping rim
    flipped = [(x, -z) for x, z in (j, b, t)]
    assert bucket_capacity_m2(*flipped, 0.85)[0] == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("bucket", [REFERENCE_BUCKET, BUCKET], ids=["reference", "machine"])
def test_level_opening_holds_the_sae_j296_heaped_capacity(bucket: BucketPrism) -> None:
    """Issue 14.7: with the strike line J-T level and the opening up, the bucket holds SAE
    J296's heaped capacity V_struck + W L^2/4 - L^3/12 (1:1 heap, hipped at the side plates);
    before, the load was capped at the struck volume."""
    (jx, jz), _, (tx, tz) = bucket.side_view
    pitch = math.atan2(tz - jz, tx - jx)  # the opening's chord level
    uz = _rotated(bucket.side_view, pitch)
    if uz[1][1] > uz[0][1]:  # B must hang below the opening
        uz = _rotated(bucket.side_view, pitch + math.pi)
    assert uz[0][1] == pytest.approx(uz[2][1], abs=1e-12)
    length = math.hypot(tx - jx, tz - jz)
    w = bucket.width_m
    heaped = bucket.cross_section_area_m2 * w + w * length ** 2 / 4 - length ** 3 / 12
    area = bucket_capacity_m2(*uz, 0.85, w)[0]
    assert area * w == pytest.approx(heaped, rel=1e-9)
    assert area * w > 1.3 * bucket.cross_section_area_m2 * w


def test_a_heaped_bucket_keeps_its_heap_level_and_spills_it_when_tilted() -> None:
    """Scoop deep with the opening level: the load exceeds the struck volume (a heap) and the
    terrain's total is exact; tilt the bucket past the repose angle: the heap falls out."""
    terrain = Terrain(SMALL, REFERENCE_BUCKET)
    total = terrain.total_units
    (jx, jz), _, (tx, tz) = REFERENCE_BUCKET.side_view
    level = math.atan2(tz - jz, tx - jx)
    struck = REFERENCE_BUCKET.cross_section_area_m2 * REFERENCE_BUCKET.width_m
    # drag the open bucket through a 1.2 m high pile of soil, then lift it out level
    terrain.h[:, :] = round(1.2 / SMALL.cell_z_m)
    total = terrain.total_units
    for k in range(200):
        terrain.update(BucketPose(1.5 - k * 0.01, 0.0, 1.0, level, 0.0))
    for k in range(120):
        terrain.update(BucketPose(-0.5, 0.0, 1.0 + k * 0.01, level, 0.0))
    assert terrain.total_units == total
    heaped = terrain.load_volume_m3
    assert heaped > 1.2 * struck, f"load {heaped:.3f} m^3, struck {struck:.3f} m^3"
    for k in range(60):
        terrain.update(BucketPose(-0.5, 0.0, 2.2, level + k * 0.02, 0.0))
    assert terrain.load_volume_m3 < struck
    assert terrain.total_units == total


@settings(max_examples=40, deadline=None)
@given(st.floats(-0.5, 0.5), st.floats(-0.5, 0.5), st.floats(-0.3, 0.3),
       st.floats(-math.pi, math.pi), st.floats(-math.pi, math.pi))
def test_column_extents_contain_every_point_of_the_prism(x: float, y: float, z: float,
                                                         pitch: float, yaw: float) -> None:
    from excavator_sim.soil import terrain_kernels as kern
    from excavator_sim.soil.terrain import _EDGES, _FACE_SIZES, _FACES

    c = SMALL
    corners = BUCKET.corners(BucketPose(x, y, z, pitch, yaw))
    zlo = np.empty((c.nx, c.ny))
    zhi = np.empty_like(zlo)
    kern.column_extents(corners, _FACES, _FACE_SIZES, _EDGES, c.x0, c.y0, c.cell_xy_m, 0, 0,
                        zlo, zhi)
    rng = np.random.default_rng(0)
    w = rng.dirichlet(np.ones(3), size=4000)  # points of the side triangle J, B, T
    s = rng.uniform(0.0, 1.0, size=4000)  # across the width
    left = w[:, :1] * corners[0] + w[:, 1:2] * corners[2] + w[:, 2:] * corners[4]
    right = w[:, :1] * corners[1] + w[:, 1:2] * corners[3] + w[:, 2:] * corners[5]
    pts = left + s[:, None] * (right - left)
    i = np.floor((pts[:, 0] - c.x0) / c.cell_xy_m).astype(int)
    j = np.floor((pts[:, 1] - c.y0) / c.cell_xy_m).astype(int)
    assert np.all(zlo[i, j] <= pts[:, 2] + 1e-9)
    assert np.all(zhi[i, j] >= pts[:, 2] - 1e-9)
    covered = zlo <= zhi
    assert zlo[covered].min() >= corners[:, 2].min() - 1e-9
    assert zhi[covered].max() <= corners[:, 2].max() + 1e-9


def test_update_cost_does_not_touch_cells_far_from_the_bucket() -> None:
    big = TerrainConfig(size_x_m=16.0, size_y_m=16.0, cell_xy_m=0.05, cell_z_m=0.01)
    terrain = Terrain(big, BUCKET)
    far = terrain.h.copy()
    result = terrain.update(pose_for_tip(BUCKET, np.array([1.0, 0.0, -0.3]), 0.0, 0.0))
    i0, i1, j0, j1 = result.box
    assert (i1 - i0) * (j1 - j0) < 40 * 40  # only the bucket's neighbourhood
    mask = np.ones_like(far, dtype=bool)
    mask[i0:i1, j0:j1] = False
    assert np.array_equal(terrain.h[mask], far[mask])
    assert result.changed is not None and terrain.take_dirty() == result.changed
    assert terrain.heights_m(result.changed).shape == (result.changed[1] - result.changed[0],
                                                       result.changed[3] - result.changed[2])


def test_nan_pose_is_rejected_with_the_value_named() -> None:
    with pytest.raises(SoilInputError, match="pitch=nan"):
        BucketPose(0.0, 0.0, 0.0, float("nan"), 0.0)


def test_bucket_outside_the_grid_is_rejected_and_nothing_changes() -> None:
    terrain = Terrain(SMALL, BUCKET)
    before = terrain.h.copy()
    with pytest.raises(OutsideGridError, match="leaves the terrain grid"):
        terrain.update(BucketPose(10.0, 0.0, 0.0, 0.0, 0.0))
    assert np.array_equal(terrain.h, before)


def test_an_update_whose_spill_would_leave_the_grid_changes_nothing() -> None:
    """Issue 14.6: the dig succeeds, the spill would land off the grid: the update raises and
    the terrain, the load and the motion history stay as they were (the old code kept the dug
    soil in the bucket, up to 4.9x its volume). The same pose again fails the same way."""
    cfg = TerrainConfig(size_x_m=6.0, size_y_m=6.0, initial_height_m=1.0)
    terrain = Terrain(cfg, BUCKET)
    total = terrain.total_units
    before = terrain.h.copy()
    pose = BucketPose(-2.85, 0.0, 0.2, 0.0, 0.0)
    for _ in range(3):
        with pytest.raises(OutsideGridError, match="outside the terrain grid"):
            terrain.update(pose)
        assert terrain.load_units == 0
        assert np.array_equal(terrain.h, before)
        assert terrain.total_units == total
        assert terrain.take_dirty() is None
    # a pose over the grid still digs normally afterwards
    terrain.update(BucketPose(0.0, 0.0, 0.9, 0.0, 0.0))
    assert terrain.total_units == total


def test_bad_config_value_names_the_parameter_and_its_range(tmp_path) -> None:
    text = (
        "/**:\n  ros__parameters:\n" + "".join(
            f"    {line}\n" for line in
            _config_lines().replace("repose_angle_rad: 0.85", "repose_angle_rad: 2.0")
            .splitlines()
        )
    )
    path = tmp_path / "soil.yaml"
    path.write_text(text)
    with pytest.raises(SoilConfigError,
                       match=r"terrain.repose_angle_rad = 2 rad is outside 0.05 \.\. 1.5 rad"):
        load_soil_config(path)
    with pytest.raises(SoilConfigError, match="preset='granite' is not one of"):
        load_soil_config(preset="granite")


def _config_lines() -> str:
    from excavator_common.paths import config_file

    lines = config_file("soil.yaml").read_text().splitlines()
    start = next(k for k, line in enumerate(lines) if "ros__parameters" in line)
    return "\n".join(line[4:] for line in lines[start + 1:])


@settings(max_examples=200, deadline=None)
@given(st.floats(-math.pi + 1e-6, math.pi - 1e-6), st.floats(-math.pi + 1e-6, math.pi - 1e-6))
def test_pose_quaternion_round_trip_matches_the_rotation(pitch: float, yaw: float) -> None:
    pose = BucketPose(1.0, -2.0, 0.5, pitch, yaw)
    qx, qy, qz, qw = pose.quaternion()
    back = BucketPose.from_quaternion((1.0, -2.0, 0.5), (qx, qy, qz, qw))
    assert back.rotation() == pytest.approx(pose.rotation(), abs=1e-9)
    # the quaternion's own rotation matrix is the pose's
    rot = np.array([
        [1 - 2 * (qy * qy + qz * qz), 2 * (qx * qy - qz * qw), 2 * (qx * qz + qy * qw)],
        [2 * (qx * qy + qz * qw), 1 - 2 * (qx * qx + qz * qz), 2 * (qy * qz - qx * qw)],
        [2 * (qx * qz - qy * qw), 2 * (qy * qz + qx * qw), 1 - 2 * (qx * qx + qy * qy)],
    ])
    assert rot == pytest.approx(pose.rotation(), abs=1e-12)


def test_surface_outside_the_grid_is_no_ground_not_an_error() -> None:
    terrain = Terrain(SMALL, BUCKET)
    inside = terrain.surface_m(np.array([0.0, 3.9]), np.array([0.0, -3.9]))
    outside = terrain.surface_m(np.array([4.1, 0.0]), np.array([0.0, -4.2]))
    assert np.all(inside == 0.0) and np.all(outside == -np.inf)
    with pytest.raises(OutsideGridError, match="outside the terrain grid"):
        terrain.height_at(4.1, 0.0)


def test_dumped_soil_settles_to_the_repose_angle_after_the_bucket_left() -> None:
    config = load_soil_config().terrain
    terrain = Terrain(config, BUCKET)
    for _phase, pose in dig_swing_dump(terrain, BUCKET, dt=0.01):
        terrain.update(pose)
    away = BucketPose(6.0, -4.0, 2.0, 0.0, 0.0)  # the bucket elsewhere, in the air
    for _ in range(300):
        terrain.update(away)
    xs, ys = terrain.cell_centres()
    pile = terrain.h[np.abs(xs) < 2.0][:, (ys > 2.0) & (ys < 6.5)]
    dmax = math.floor(config.cell_xy_m * math.tan(config.repose_angle_rad) / config.cell_z_m)
    assert pile.max() > 0
    assert np.abs(np.diff(pile, axis=0)).max() <= dmax
    assert np.abs(np.diff(pile, axis=1)).max() <= dmax
