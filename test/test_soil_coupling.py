"""Soil coupled to the MuJoCo simulation in one process: the machine digs, feels the soil, and
MuJoCo's height field follows the soil grid."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from excavator_kinematics.geometry import default_geometry
from excavator_kinematics.inverse_kinematics import InverseKinematics
from excavator_sim.soil.bucket_prism import BucketPose, BucketPrism
from excavator_sim.soil.config import load_soil_config
from excavator_sim.soil.coupling import SoilCoupling

JOINTS = ("swing", "boom", "arm", "bucket")
# tip targets [m] in base_link with the absolute bucket angle [rad] (the IK's pitch): above the
# ground, into it (0.25 m deep), a drag towards the machine, curl in place; then the carry in
# joints (arm in, the bucket's opening level): the per-cell bucket soil (the default) spills
# what a bucket stopped hard with its opening near vertical cannot hold, as a machine does
DIG = [((6.0, 0.0, 0.3), 0.6), ((5.8, 0.0, -0.25), 0.5), ((5.0, 0.0, -0.25), 0.2),
       ((5.0, 0.0, -0.25), -0.4)]
CARRY = (0.0, 0.52, -2.0, 0.1)  # swing, boom, arm, bucket [rad]


@pytest.fixture(scope="module")
def dig_run():
    from excavator_sim.sim_config import load_sim_config
    from excavator_sim.simulation import ExcavatorSimulation

    # the soil carries the bucket, not a rigid height-field contact
    sim = ExcavatorSimulation(dataclasses.replace(load_sim_config(), terrain_contact=False))
    geometry = default_geometry()
    coupling = SoilCoupling(load_soil_config(), BucketPrism.from_geometry(geometry))
    ik = InverseKinematics(geometry)
    total = coupling.terrain.total_units
    log = []
    phases = [ik.solve(np.array(target), pitch).q for target, pitch in DIG] + [CARRY]
    for phase, q in enumerate(phases):
        sim.set_joint_targets(dict(zip(JOINTS, map(float, q), strict=True)))
        for _ in range(2000):
            sim.step(1)
            step = coupling.step(sim)
            log.append((phase, sim.bucket_tip().copy(), step.forces.force.copy(),
                        coupling.terrain.load_volume_m3))
    return sim, coupling, total, log


def test_the_machine_digs_and_the_bucket_fills(dig_run) -> None:
    _sim, coupling, total, log = dig_run
    loads = [entry[3] for entry in log]
    assert loads[0] == 0.0
    assert max(loads) > 0.03  # m^3 scooped during the drag
    assert loads[-1] > 0.03  # and carried out of the ground
    assert coupling.terrain.total_units == total


def test_the_soil_pushes_back_while_cutting(dig_run) -> None:
    _sim, _coupling, _total, log = dig_run
    cutting = [np.linalg.norm(f) for phase, tip, f, _ in log if phase == 2 and tip[2] < -0.15]
    assert len(cutting) > 500
    assert np.mean(cutting) > 1000.0  # N
    before = [f for phase, tip, f, _ in log if phase == 0]
    assert all(np.array_equal(f, np.zeros(3)) for f in before)  # in the air, empty


def test_mujoco_height_field_follows_the_soil_grid(dig_run) -> None:
    sim, coupling, _total, _log = dig_run
    soil = coupling.terrain.heights_m()
    field = sim.terrain.heights()
    assert field.shape == soil.shape
    assert np.max(np.abs(field - soil)) < 1e-6  # float32 storage in MuJoCo
    xs, ys = coupling.terrain.cell_centres()
    trench = soil[(xs > 4.8) & (xs < 6.0)][:, np.abs(ys) < 0.2]  # where the bucket passed
    # The bucket dragged at 0.25 m; soil it spills over its lip refills part of the trench
    # (mean -0.098 m on the 8.2 t default, -0.102 m on the 36 t preset: the same cut, both
    # machines hold the tip on its path within 12 mm).
    assert trench.mean() < -0.08 and trench.min() < -0.2
    assert np.all(soil[xs < 4.0] == 0.0)  # untouched behind the cut


def test_bucket_pose_from_the_simulator_puts_the_prism_teeth_on_its_tip_site(dig_run) -> None:
    sim, _coupling, _total, _log = dig_run
    bucket = BucketPrism.from_geometry(default_geometry())
    pos, (w, x, y, z) = sim.bucket_pose()
    pose = BucketPose.from_quaternion(tuple(pos), (x, y, z, w))
    teeth = pose.rotation() @ np.array(bucket.t) + pose.position
    assert teeth == pytest.approx(sim.bucket_tip(), abs=1e-9)
