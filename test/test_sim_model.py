"""The MuJoCo model built from the geometry: closure, agreement with the FK, contacts, terrain
API, URDF and rendering. Pure (no ROS)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import mujoco
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from excavator_kinematics.forward_kinematics import ForwardKinematics
from excavator_kinematics.geometry import default_geometry
from excavator_kinematics.linkage import Linkage
from excavator_sim.errors import SimConfigError
from excavator_sim.heightfield import HeightField, HeightFieldError, TerrainGrid
from excavator_sim.model_builder import (
    ACTIVE_JOINTS,
    InitialPose,
    ModelOptions,
    build_model,
    loop_residuals,
    passive_joint_values,
)
from excavator_sim.sim_config import config_from_flat, load_sim_config
from excavator_sim.simulation import ExcavatorSimulation
from excavator_sim.urdf import generate_urdf, urdf_from_model

REPO = Path(__file__).resolve().parents[1]
GEOMETRY = default_geometry()
LINKAGE = Linkage(GEOMETRY)
FK = ForwardKinematics(GEOMETRY, LINKAGE)
SMALL_GRID = TerrainGrid(x0=-2.0, y0=-4.0, cell_size=0.1, nx=101, ny=81)
# The simulation core without terrain contact on a coarse grid (the arm may reach below ground).
SIM_CONFIG = load_sim_config(overrides={"terrain.contact": False, "terrain.nx": 41,
                                        "terrain.ny": 41, "terrain.cell_size_m": 0.4})


@pytest.fixture(scope="module")
def built():
    return build_model(GEOMETRY, LINKAGE, ModelOptions(terrain=SMALL_GRID))


def random_poses(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    lim = LINKAGE.joint_limits
    q = np.empty((n, 4))
    q[:, 0] = rng.uniform(-math.pi, math.pi, n)
    for k, name in enumerate(("boom", "arm", "bucket"), start=1):
        lo, hi = lim[name]
        q[:, k] = rng.uniform(lo, hi, n)
    return q


def set_pose(built, data: mujoco.MjData, q: np.ndarray) -> None:
    values = passive_joint_values(LINKAGE, q[1], q[2], q[3])
    values.update(zip(ACTIVE_JOINTS, q, strict=True))
    for name, value in values.items():
        data.qpos[built.qpos_adr[name]] = value
    mujoco.mj_kinematics(built.model, data)


@pytest.mark.parametrize("pose", [
    InitialPose(),
    InitialPose(swing=1.0, boom=0.9, arm=-2.2, bucket=2.4),
    InitialPose(swing=-2.0, boom=0.0, arm=-0.75, bucket=0.71),
])
def test_initial_pose_closes_the_loops(pose: InitialPose) -> None:
    b = build_model(GEOMETRY, LINKAGE, ModelOptions(terrain=SMALL_GRID, initial=pose))
    data = mujoco.MjData(b.model)
    mujoco.mj_resetDataKeyframe(b.model, data, 0)
    mujoco.mj_forward(b.model, data)
    assert loop_residuals(b.model, data).max() < 1e-6
    for name in ACTIVE_JOINTS:
        assert data.qpos[b.qpos_adr[name]] == pytest.approx(getattr(pose, name), abs=1e-12)


def test_initial_pose_outside_limits_is_rejected() -> None:
    with pytest.raises(ValueError, match="boom joint"):
        build_model(GEOMETRY, LINKAGE, ModelOptions(terrain=SMALL_GRID,
                                                    initial=InitialPose(boom=1.5)))


def test_mujoco_tip_matches_fk_at_100_random_poses(built) -> None:
    data = mujoco.MjData(built.model)
    site = built.site_id["bucket_tip"]
    worst_tip = worst_loop = 0.0
    for q in random_poses(100, seed=3):
        set_pose(built, data, q)
        worst_tip = max(worst_tip, float(np.linalg.norm(data.site_xpos[site] - FK.tip(q))))
        worst_loop = max(worst_loop, float(loop_residuals(built.model, data).max()))
    assert worst_tip <= 1e-3
    assert worst_loop <= 1e-6  # the linkage's passive angles close every loop exactly


def test_cylinder_joints_are_the_linkage_extensions(built) -> None:
    data = mujoco.MjData(built.model)
    for q in random_poses(10, seed=5):
        set_pose(built, data, q)
        ext = LINKAGE.extensions(q[1], q[2], q[3])
        for name, e in zip(("boom_cylinder", "arm_cylinder", "bucket_cylinder"), ext,
                           strict=True):
            assert data.qpos[built.qpos_adr[name]] == pytest.approx(float(e), abs=1e-12)


def test_no_self_contacts_in_the_initial_pose_or_anywhere(built) -> None:
    data = mujoco.MjData(built.model)
    mujoco.mj_resetDataKeyframe(built.model, data, 0)
    mujoco.mj_forward(built.model, data)
    assert data.ncon == 0
    terrain = mujoco.mj_name2id(built.model, mujoco.mjtObj.mjOBJ_GEOM, "terrain")
    # Across random poses, any contact involves the terrain (machine parts never collide).
    for q in random_poses(30, seed=11):
        set_pose(built, data, q)
        mujoco.mj_collision(built.model, data)
        for i in range(data.ncon):
            assert terrain in (data.contact[i].geom1, data.contact[i].geom2)


def test_masses_and_inertias_follow_the_config(built) -> None:
    m = built.model
    for part, mass in GEOMETRY.masses_kg.items():
        name = {"boom_rod": "boom_rod"}.get(part, part)
        assert m.body(name).mass[0] == pytest.approx(mass)
    assert np.all(m.body_inertia[1:] > 0.0)
    total = float(m.body_mass.sum())
    assert total == pytest.approx(sum(GEOMETRY.masses_kg.values()))


def test_height_field_region_is_written_in_place_and_touches_the_bucket() -> None:
    grid = SMALL_GRID
    b = build_model(GEOMETRY, LINKAGE, ModelOptions(terrain=grid))
    data = mujoco.MjData(b.model)
    mujoco.mj_resetDataKeyframe(b.model, data, 0)
    field = HeightField(b.model, grid)
    mujoco.mj_forward(b.model, data)
    assert data.ncon == 0
    tip = data.site("bucket_tip").xpos
    i = round((tip[0] - grid.x0) / grid.cell_size)
    j = round((tip[1] - grid.y0) / grid.cell_size)
    patch = np.full((5, 5), tip[2] + 0.2)
    field.set_region(i - 2, j - 2, patch)
    assert field.height_at(i, j) == pytest.approx(tip[2] + 0.2, abs=grid.z_max * 1e-6 + 1e-9)
    assert field.heights()[0, 0] == pytest.approx(0.0, abs=1e-9)  # outside the patch: untouched
    mujoco.mj_forward(b.model, data)
    assert data.ncon > 0  # MuJoCo's collision sees the raised terrain without a rebuild


_FIELD_MODEL = build_model(GEOMETRY, LINKAGE, ModelOptions(terrain=SMALL_GRID)).model


@settings(max_examples=60, deadline=None)
@given(i0=st.integers(0, 95), j0=st.integers(0, 75), ni=st.integers(1, 5), nj=st.integers(1, 5),
       seed=st.integers(0, 2**32 - 1))
def test_height_field_round_trip(i0: int, j0: int, ni: int, nj: int, seed: int) -> None:
    field = HeightField(_FIELD_MODEL, SMALL_GRID)
    heights = np.random.default_rng(seed).uniform(SMALL_GRID.z_min, SMALL_GRID.z_max, (ni, nj))
    before = field.heights()
    field.set_region(i0, j0, heights)
    after = field.heights()
    # MuJoCo stores float32 normalised to the elevation range: ~1e-6 m here.
    assert np.allclose(after[i0:i0 + ni, j0:j0 + nj], heights, atol=2e-6)
    after[i0:i0 + ni, j0:j0 + nj] = before[i0:i0 + ni, j0:j0 + nj]
    assert np.array_equal(after, before)  # nothing outside the region changed
    field.set_region(i0, j0, before[i0:i0 + ni, j0:j0 + nj])


@pytest.mark.parametrize(("i0", "heights", "match"), [
    (99, np.zeros((5, 1)), "outside the grid"),
    (0, np.full((2, 2), 4.0), "outside terrain z_min..z_max"),
    (0, np.full((2, 2), np.nan), "NaN"),
])
def test_height_field_rejects_bad_regions(built, i0, heights, match) -> None:
    field = HeightField(built.model, SMALL_GRID)
    before = field.heights()
    with pytest.raises(HeightFieldError, match=match):
        field.set_region(i0, 0, heights)
    assert np.array_equal(field.heights(), before)


def test_sim_config_loads_and_names_bad_parameters() -> None:
    cfg = load_sim_config()
    assert cfg.timestep == 0.001
    from excavator_common.parameter_files import read_parameter_file
    from excavator_common.paths import config_file
    flat = read_parameter_file(config_file("sim.yaml"), "sim_node")
    boom = cfg.hydraulics.cylinders["boom_cylinder"]
    assert (boom.bore_m, boom.count) == (flat["hydraulics.boom_cylinder.bore_m"],
                                         flat["hydraulics.boom_cylinder.count"])
    with pytest.raises(SimConfigError,
                       match=r"hydraulics\.pressure_pa = 1e\+09 Pa is outside "
                             r"1e\+06 \.\. 5e\+07 Pa"):
        config_from_flat({"hydraulics.pressure_pa": 1e9})
    with pytest.raises(SimConfigError, match="unknown parameter 'hydraulics.presure_pa' "
                       r"\(did you mean 'hydraulics.pressure_pa'\?\)"):
        config_from_flat({"hydraulics.presure_pa": 3e7})
    with pytest.raises(SimConfigError, match=r"rod_diameter_m .* must be smaller"):
        config_from_flat({"hydraulics.arm_cylinder.rod_diameter_m": 0.2})
    with pytest.raises(SimConfigError, match=r"control_period_s = 0.0005 s must be >= "
                       r"timestep_s = 0.001 s"):  # the former names, for one release
        config_from_flat({"control_period": 0.0005, "timestep": 0.001})


def _rot(axis: np.ndarray, angle: float) -> np.ndarray:
    axis = axis / np.linalg.norm(axis)
    x, y, z = axis
    c, s = math.cos(angle), math.sin(angle)
    k = np.array([[0, -z, y], [z, 0, -x], [-y, x, 0]])
    return np.eye(3) + s * k + (1 - c) * k @ k


def _rpy_matrix(rpy: list[float]) -> np.ndarray:
    r, p, y = rpy
    return (_rot(np.array([0, 0, 1.0]), y) @ _rot(np.array([0, 1.0, 0]), p)
            @ _rot(np.array([1.0, 0, 0]), r))


def _urdf_chain(root: ET.Element, values: dict[str, float], link: str = "bucket_tip",
                base: str = "world") -> np.ndarray:
    """Homogeneous transform of ``link`` in ``base`` from the URDF's joint origins and axes,
    evaluated at the joint values (as robot_state_publisher does)."""
    by_child = {e.find("child").get("link"): e for e in root.findall("joint")}
    transform = np.eye(4)
    while link != base:
        joint = by_child[link]
        origin = joint.find("origin")
        t = np.eye(4)
        t[:3, :3] = _rpy_matrix([float(v) for v in origin.get("rpy").split()])
        t[:3, 3] = [float(v) for v in origin.get("xyz").split()]
        kind = joint.get("type")
        if kind != "fixed":
            axis = np.array([float(v) for v in joint.find("axis").get("xyz").split()])
            motion = np.eye(4)
            if kind == "prismatic":
                motion[:3, 3] = axis * values[joint.get("name")]
            else:
                motion[:3, :3] = _rot(axis, values[joint.get("name")])
            t = t @ motion
        transform = t @ transform
        link = joint.find("parent").get("link")
    return transform


def test_urdf_parses_and_its_chain_reproduces_the_fk_tip() -> None:
    root = ET.fromstring(generate_urdf())
    links = {e.get("name"): e for e in root.findall("link")}
    assert {"world", "base_x_slider", "base_xy_slider", "base_link", "chassis", "boom", "arm",
            "bucket", "bucket_tip", "boom_cylinder", "boom_rod", "h_link",
            "side_link"} <= set(links)
    # world is the only root; the two planar-base links carry no mass.
    children = {e.find("child").get("link") for e in root.findall("joint")}
    assert set(links) - children == {"world"}
    assert links["base_x_slider"].find("inertial") is None
    assert links["base_xy_slider"].find("inertial") is None
    joints = {e.get("name"): e for e in root.findall("joint")}
    for name in ("boom", "arm", "bucket"):
        assert [float(v) for v in joints[name].find("axis").get("xyz").split()] == [0, -1, 0]
    for name, kind, axis in (("base_x", "prismatic", [1, 0, 0]), ("base_y", "prismatic", [0, 1, 0]),
                             ("base_yaw", "continuous", [0, 0, 1])):
        assert joints[name].get("type") == kind
        assert [float(v) for v in joints[name].find("axis").get("xyz").split()] == axis
    for q in random_poses(5, seed=21):
        values = dict(zip(ACTIVE_JOINTS, q, strict=True))
        transform = _urdf_chain(root, values, base="base_link")
        assert np.linalg.norm(transform[:3, 3] - FK.tip(q)) <= 1e-3


def test_every_movable_urdf_joint_is_in_the_joint_state() -> None:
    # robot_state_publisher poses only the joints it finds in joint_states: a movable URDF
    # joint missing from them leaves its subtree without TF.
    sim = ExcavatorSimulation(SIM_CONFIG)
    names = set(sim.joint_state().names)
    for urdf in (generate_urdf(), urdf_from_model(sim.model)):
        movable = {e.get("name") for e in ET.fromstring(urdf).findall("joint")
                   if e.get("type") != "fixed"}
        assert {"base_x", "base_y", "base_yaw", "swing", "h_link"} <= movable
        assert movable <= names, f"not in joint_state: {sorted(movable - names)}"


def test_urdf_chain_in_world_reproduces_the_mujoco_tip_after_driving_and_swinging() -> None:
    sim = ExcavatorSimulation(SIM_CONFIG)
    sim.set_track_speeds(1.2, 0.6)  # drive on an arc: x, y and yaw all change
    sim.set_joint_targets({"swing": 1.2, "boom": 0.6, "arm": -1.4, "bucket": 1.5})
    sim.step(4000)
    sim.set_track_speeds(0.0, 0.0)
    sim.step(500)
    js = sim.joint_state().as_dict()
    values = {name: position for name, (position, _) in js.items()}
    assert math.hypot(values["base_x"], values["base_y"]) > 2.0
    assert values["base_yaw"] < -0.5 and values["swing"] > 1.0  # left faster: turns right
    pos, quat = sim.base_pose()
    assert np.allclose(pos[:2], [values["base_x"], values["base_y"]], atol=1e-9)
    assert quat[3] == pytest.approx(math.sin(0.5 * values["base_yaw"]), abs=1e-6)
    root = ET.fromstring(urdf_from_model(sim.model))
    tip = _urdf_chain(root, values)[:3, 3]
    assert np.linalg.norm(tip - sim.bucket_tip()) <= 1e-3
    base = _urdf_chain(root, values, link="base_link")
    assert np.allclose(base[:3, 3], pos, atol=1e-9)


def test_render_writes_a_non_uniform_png(tmp_path: Path) -> None:
    out = tmp_path / "excavator.png"
    env = {**os.environ, "MUJOCO_GL": "egl", "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-m", "excavator_hil.render", str(out), "--width", "320",
                    "--height", "240"], check=True, env=env, cwd=REPO, timeout=120)
    assert out.stat().st_size > 1000
    import matplotlib.image

    img = matplotlib.image.imread(out)
    assert img.shape[:2] == (240, 320)
    assert float(img[..., :3].std()) > 0.05


def test_render_shows_terrain_edits(tmp_path: Path) -> None:
    from excavator_hil.render import render_rgb

    b = build_model(GEOMETRY, LINKAGE, ModelOptions(terrain=SMALL_GRID))
    data = mujoco.MjData(b.model)
    mujoco.mj_resetDataKeyframe(b.model, data, 0)
    mujoco.mj_forward(b.model, data)
    camera = {"lookat": (2.0, 0.0, 0.0), "distance": 9.0, "azimuth": -90.0, "elevation": -45.0}
    before = render_rgb(b.model, data, 160, 120, **camera)
    HeightField(b.model, SMALL_GRID).set_region(30, 30, np.full((20, 20), 1.0))  # a 2 m block
    after = render_rgb(b.model, data, 160, 120, **camera)
    changed = np.any(before != after, axis=-1).mean()
    assert changed > 0.02, f"only {changed:.1%} of the pixels changed"


def test_urdf_cli_writes_a_file(tmp_path: Path) -> None:
    from excavator_sim.urdf import main

    out = tmp_path / "urdf" / "excavator.urdf"
    assert main(["-o", str(out)]) == 0
    assert ET.parse(out).getroot().get("name") == "excavator"


def test_default_height_field_nodes_are_the_soil_grid_cell_centres() -> None:
    from excavator_sim.soil.config import load_soil_config

    soil = load_soil_config().terrain  # cell-centred grid: centres at x0 + (i + 0.5) * cell
    xs = soil.x0 + (np.arange(soil.nx) + 0.5) * soil.cell_xy_m
    ys = soil.y0 + (np.arange(soil.ny) + 0.5) * soil.cell_xy_m
    grid = load_sim_config().terrain
    assert (grid.nx, grid.ny) == (len(xs), len(ys))
    assert np.allclose(grid.x0 + np.arange(grid.nx) * grid.cell_size, xs, atol=1e-9)
    assert np.allclose(grid.y0 + np.arange(grid.ny) * grid.cell_size, ys, atol=1e-9)


@settings(max_examples=50, deadline=None)
@given(i0=st.integers(0, 500), j0=st.integers(0, 500), ni=st.integers(1, 6),
       nj=st.integers(1, 6), seed=st.integers(0, 2**32 - 1))
def test_terrain_patch_wire_format_round_trip(i0: int, j0: int, ni: int, nj: int,
                                              seed: int) -> None:
    from excavator_sim.terrain_patch import flat_to_patch, patch_to_flat

    heights = np.random.default_rng(seed).normal(0.0, 1.0, (ni, nj))
    (si, sj), data = patch_to_flat(i0, j0, heights)
    assert (si, sj) == (ni, nj) and data[:2] == [i0, j0]
    back_i, back_j, back = flat_to_patch(si, sj, data)
    assert (back_i, back_j) == (i0, j0)
    assert np.array_equal(back, heights)
    with pytest.raises(HeightFieldError, match="needs 2"):
        flat_to_patch(ni, nj, data[:-1])


@pytest.mark.parametrize("joint", ["bucket", "arm"])
def test_iso6015_digging_forces_match_the_simulated_machine(joint: str) -> None:
    """Issue 14.1: the ISO 6015 bucket digging / arm crowd force computed from the linkage's
    lever arms is what the MuJoCo machine's cylinder delivers: half that force applied at the
    tip against the digging motion raises the cylinder's force by half its relief-pressure
    force (within 3 %), at the pose where the sheet's figure is taken."""
    import dataclasses

    import mujoco

    from excavator_sim.iso6015 import _tip_in_arm, machine_figures
    from excavator_sim.model_builder import InitialPose
    from excavator_sim.sim_config import load_sim_config
    from excavator_sim.simulation import ExcavatorSimulation

    config = load_sim_config(overrides={"terrain.contact": False, "terrain.nx": 41,
                                        "terrain.ny": 41, "terrain.cell_size_m": 0.4})
    probe = ExcavatorSimulation(config)
    fig = machine_figures(probe.geometry, config.hydraulics, probe.linkage)
    lim = probe.linkage.joint_limits
    if joint == "bucket":
        pose = InitialPose(boom=0.6, arm=-1.3, bucket=fig.bucket_digging_at_rad)
        force, pivot_body = fig.bucket_digging_force_n, "bucket"
    else:
        qb = np.linspace(lim["bucket"][0], lim["bucket"][1], 2001)
        far = float(qb[np.argmax(np.linalg.norm(_tip_in_arm(probe.geometry, qb), axis=-1))])
        pose = InitialPose(boom=0.6, arm=fig.arm_crowd_at_rad, bucket=far)
        force, pivot_body = fig.arm_crowd_force_n, "arm"
    sim = ExcavatorSimulation(dataclasses.replace(config, initial=pose))
    cyl = f"{joint}_cylinder"
    act = sim.built.actuator_id[cyl]
    sim.step(1000)
    f0 = float(sim.data.actuator_force[act])
    q = getattr(pose, joint)
    de_dq = float(np.diff(sim.linkage.extensions_from_joint(joint, [q - 1e-6, q + 1e-6]))[0])
    tip = sim.bucket_tip()
    pivot = sim.data.xpos[mujoco.mj_name2id(sim.model, mujoco.mjtObj.mjOBJ_BODY,
                                            pivot_body)].copy()
    r = tip - pivot
    ccw = np.array([-r[2], 0.0, r[0]]) / np.linalg.norm(r)  # d tip / d q, unit (side view)
    extend_dir = ccw * math.copysign(1.0, de_dq)  # the tip's motion when the cylinder extends
    f = -0.5 * force * extend_dir  # the ground resisting the digging motion
    m = sim.bucket_pose()[0]
    sim.apply_bucket_wrench(f, np.cross(tip - m, f))
    sim.step(2000)
    delta = float(sim.data.actuator_force[act]) - f0
    push = sim.config.hydraulics.cylinders[cyl].push_force_n(sim.config.hydraulics.pressure_pa)
    assert delta == pytest.approx(0.5 * push, rel=0.03)
    assert abs(sim.joint_positions()[joint] - q) < 2e-3  # held there
