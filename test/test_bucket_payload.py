"""The soil in the bucket moves the machine (issue 30 item 2): with the per-cell bucket soil
the load is a rigid body on the MuJoCo bucket (mass, centre and inertia from the cells) and the
soil wrench leaves its weight out, so the weight acts once, at the load's own centre."""

from __future__ import annotations

import dataclasses
import math

import mujoco
import numpy as np
import pytest

from excavator_sim.errors import CommandError
from excavator_sim.sim_config import InitialPose, load_sim_config
from excavator_sim.simulation import ExcavatorSimulation
from excavator_sim.soil.bucket_body import BucketBody
from excavator_sim.soil.bucket_prism import BucketPose, BucketPrism
from excavator_sim.soil.config import load_soil_config
from excavator_sim.soil.coupling import SoilCoupling
from excavator_sim.soil.forces import DiMaioForceModel, DiMaioParams

DENSITY = 1800.0
G = 9.81
HOLD_STEPS = 2000  # 2 s at 1 ms: the hold has settled (test_sim_hydraulics uses the same)
# the carry: arm in, bucket curled until its opening is level (its normal 3 deg off vertical)
CARRY = InitialPose(boom=0.52, arm=-2.0, bucket=0.1)


def struck_full(prism: BucketPrism) -> BucketBody:
    body = BucketBody(prism, 0.05, 0.01, 0.85)
    g = body.grid
    body.units[:, :] = np.floor(-g.floor_n / g.dn + 1e-9).astype(np.int64)[:, None]
    return body


def make_sim() -> ExcavatorSimulation:
    return ExcavatorSimulation(dataclasses.replace(load_sim_config(), terrain_contact=False,
                                                   initial=CARRY))


def boom_torque_per_force(sim: ExcavatorSimulation) -> float:
    """d(boom cylinder extension) / d(boom angle) [m/rad] at the held pose: the cylinder's
    force times it is the boom joint's torque (virtual work)."""
    q = sim.joint_positions()["boom"]
    e = sim.linkage.extensions_from_joint("boom", [q - 1e-6, q + 1e-6])
    return float(np.diff(e)[0]) / 2e-6


def world_centre(sim: ExcavatorSimulation, centre_bucket: np.ndarray) -> np.ndarray:
    pos, quat = sim.bucket_pose()
    rot = np.empty(9)
    mujoco.mju_quat2Mat(rot, quat)
    return rot.reshape(3, 3) @ centre_bucket + pos


def boom_pivot(sim: ExcavatorSimulation) -> np.ndarray:
    return sim.data.xpos[mujoco.mj_name2id(sim.model, mujoco.mjtObj.mjOBJ_BODY, "boom")].copy()


def test_payload_mass_centre_and_inertia_from_the_cells() -> None:
    prism = BucketPrism.from_geometry(make_sim().geometry)
    body = struck_full(prism)
    p = body.payload(DENSITY)
    # mass exact to the unit; centre the body's centre of mass
    assert p.mass_kg == pytest.approx(body.total_units * body.unit_volume_m3 * DENSITY,
                                      rel=1e-12)
    np.testing.assert_allclose(p.centre_m, body.centre_of_mass_bucket_m(), atol=1e-12)
    # one column alone: the box of its cell and its soil height, about its own centre
    one = BucketBody(prism, 0.05, 0.01, 0.85)
    one.units[3, 2] = 7
    q = one.payload(DENSITY)
    g = one.grid
    m, h = q.mass_kg, 7 * g.dn
    box = np.diag([m / 12 * (g.dw ** 2 + h ** 2), m / 12 * (g.ds ** 2 + h ** 2),
                   m / 12 * (g.ds ** 2 + g.dw ** 2)])
    f = g.frame()
    np.testing.assert_allclose(q.inertia_kg_m2, f.T @ box @ f, atol=1e-12)
    # the full load: symmetric, positive, its width axis (bucket y) a principal axis; about y
    # at least the spread along the chord of a bucket this long (a rod of the mean depth)
    i = p.inertia_kg_m2
    np.testing.assert_allclose(i, i.T, atol=1e-9)
    assert np.linalg.eigvalsh(i).min() > 0.0
    assert abs(i[0, 1]) < 1e-6 * i[1, 1] and abs(i[1, 2]) < 1e-6 * i[1, 1]
    assert i[1, 1] > p.mass_kg * (0.5 * g.length_m) ** 2 / 3.0 * 0.5
    assert BucketBody(prism, 0.05, 0.01, 0.85).payload(DENSITY).mass_kg == 0.0


@pytest.fixture(scope="module")
def held() -> tuple[ExcavatorSimulation, float]:
    """The default machine holding its initial pose, empty: (sim, boom cylinder force [N])."""
    sim = make_sim()
    sim.step(HOLD_STEPS)
    return sim, float(sim.data.actuator_force[sim.built.actuator_id["boom_cylinder"]])


def test_the_load_on_the_body_grows_the_boom_hold_by_its_weight_times_its_lever(held) -> None:
    """Statics: the boom cylinder's extra force times its lever d e / d q equals the load's
    weight times its horizontal distance from the boom pivot. 1 %: measured 0.2 %; the rest is
    the soft loop-closure constraints and the boom's 1e-5 rad sag under the load."""
    _, f_empty = held
    sim = make_sim()
    body = struck_full(BucketPrism.from_geometry(sim.geometry))
    p = body.payload(DENSITY)
    sim.set_bucket_payload(p.mass_kg, p.centre_m, p.inertia_kg_m2)
    sim.step(HOLD_STEPS)
    act = sim.built.actuator_id["boom_cylinder"]
    torque = (float(sim.data.actuator_force[act]) - f_empty) * boom_torque_per_force(sim)
    lever = float(world_centre(sim, p.centre_m)[0] - boom_pivot(sim)[0])
    assert lever > 1.0
    assert torque == pytest.approx(p.mass_kg * G * lever, rel=0.01)
    # the same weight as a force at the same point (the old way, through the wrench) holds
    # the same: the mass acts where it should
    wrench = make_sim()
    c = world_centre(wrench, p.centre_m)
    f = np.array([0.0, 0.0, -p.mass_kg * G])
    wrench.apply_bucket_wrench(f, np.cross(c - wrench.bucket_pose()[0], f))
    wrench.step(HOLD_STEPS)
    assert float(sim.data.actuator_force[act]) == pytest.approx(
        float(wrench.data.actuator_force[act]), rel=0.003)
    # emptied: back to the empty bucket exactly (model) and its hold
    sim.set_bucket_payload(0.0, np.zeros(3), np.zeros((3, 3)))
    fresh = make_sim()
    for name in ("body_mass", "body_ipos", "body_inertia", "body_iquat", "body_subtreemass"):
        np.testing.assert_array_equal(getattr(sim.model, name), getattr(fresh.model, name))


def test_the_load_inertia_slows_the_swing() -> None:
    """The swing's diagonal of the mass matrix grows by the load's m r^2 + I_zz (r its
    distance from the swing axis): the inertia is on the body, not only the weight."""
    sim = make_sim()
    body = struck_full(BucketPrism.from_geometry(sim.geometry))
    p = body.payload(DENSITY)

    def swing_inertia() -> float:
        mujoco.mj_forward(sim.model, sim.data)
        full = np.zeros((sim.model.nv, sim.model.nv))
        mujoco.mj_fullM(sim.model, sim.data, full)
        v = sim.built.dof_adr["swing"]
        return float(full[v, v])

    before = swing_inertia()
    sim.set_bucket_payload(p.mass_kg, p.centre_m, p.inertia_kg_m2)
    after = swing_inertia()
    swing_body = sim.model.jnt_bodyid[sim.model.joint("swing").id]
    axis_point = sim.data.xpos[swing_body]
    c = world_centre(sim, p.centre_m)
    _, quat = sim.bucket_pose()
    rot = np.empty(9)
    mujoco.mju_quat2Mat(rot, quat)
    rot = rot.reshape(3, 3)
    izz = float((rot @ p.inertia_kg_m2 @ rot.T)[2, 2])
    r2 = float((c[0] - axis_point[0]) ** 2 + (c[1] - axis_point[1]) ** 2)
    assert after - before == pytest.approx(p.mass_kg * r2 + izz, rel=1e-6)


def test_coupled_cells_weigh_once() -> None:
    """SoilCoupling with the per-cell soil: the wrench carries no weight while the bucket is
    out of the soil (the mass is on the body) and the boom holds one load's weight, not two;
    the closed form keeps the weight in the wrench (no shape to put on the body)."""
    sim = make_sim()
    base = load_soil_config()
    cfg = dataclasses.replace(base, terrain=dataclasses.replace(base.terrain,
                                                                bucket_soil_model="cells"))
    coupling = SoilCoupling(cfg, BucketPrism.from_geometry(sim.geometry))
    assert coupling.terrain.body is not None
    coupling.terrain.body.units[:, :] = struck_full(coupling.terrain.bucket).units
    coupling.terrain.load_units = coupling.terrain.body.total_units
    total = coupling.terrain.total_units
    tip = sim.bucket_tip()
    assert tip[2] > 0.3  # held in the air: no cutting, only the load
    for _ in range(HOLD_STEPS):
        sim.step(1)
        step = coupling.step(sim)
    assert coupling.terrain.total_units == total
    p = coupling.terrain.load_payload()
    assert p is not None and p.mass_kg > 300.0
    assert sim.payload_kg == p.mass_kg
    assert np.abs(step.forces.force).max() == 0.0  # no weight in the wrench
    empty = make_sim()
    empty.step(HOLD_STEPS)
    act = sim.built.actuator_id["boom_cylinder"]
    torque = (float(sim.data.actuator_force[act] - empty.data.actuator_force[act])
              * boom_torque_per_force(sim))
    lever = float(world_centre(sim, p.centre_m)[0] - boom_pivot(sim)[0])
    assert torque == pytest.approx(p.mass_kg * G * lever, rel=0.01)
    # the closed form: no payload, the weight in the wrench
    closed_cfg = dataclasses.replace(cfg, terrain=dataclasses.replace(
        cfg.terrain, bucket_soil_model="closed_form"))
    closed = SoilCoupling(closed_cfg, BucketPrism.from_geometry(sim.geometry))
    assert closed.terrain.load_payload() is None and not closed.terrain.load_on_body


def test_the_wrench_leaves_the_weight_out_only_when_asked() -> None:
    prism = BucketPrism.from_geometry(make_sim().geometry)
    pose = BucketPose(5.0, 0.0, 1.0, 0.3, 0.0)
    zero = np.zeros(3)

    def no_ground(x: np.ndarray, _y: np.ndarray) -> np.ndarray:
        return np.full(np.shape(x), -math.inf)

    params = DiMaioParams(density_kg_m3=DENSITY)
    weighed = DiMaioForceModel(params, prism).step(pose, zero, zero, no_ground, 0.2)
    assert weighed.force[2] == pytest.approx(-DENSITY * G * 0.2)
    on_body = DiMaioForceModel(params, prism).step(pose, zero, zero, no_ground, 0.2,
                                                   weight_on_body=True)
    assert np.abs(on_body.force).max() == 0.0 and np.abs(on_body.torque).max() == 0.0


@pytest.mark.parametrize(("mass", "centre", "inertia", "match"), [
    (math.nan, np.zeros(3), np.zeros((3, 3)), "not finite"),
    (-1.0, np.zeros(3), np.zeros((3, 3)), "mass -1 kg is outside"),
    (1e7, np.zeros(3), np.zeros((3, 3)), "outside"),
    (100.0, np.array([0.0, 0.0, 9.0]), np.zeros((3, 3)), "from the bucket origin"),
    (100.0, np.zeros(3), -np.eye(3), "not symmetric positive"),
])
def test_bad_payload_is_named_and_the_last_kept(mass, centre, inertia, match) -> None:
    sim = make_sim()
    sim.set_bucket_payload(100.0, np.array([0.2, 0.0, -0.3]), np.eye(3))
    before = sim.model.body_mass.copy()
    with pytest.raises(CommandError, match=match):
        sim.set_bucket_payload(mass, centre, inertia)
    np.testing.assert_array_equal(sim.model.body_mass, before)
    assert sim.payload_kg == 100.0
