"""Reproducible runs: the demo's dig cycle in one process, a function of its inputs alone.

``dig_cycle_in_process()`` runs what ``excavator-hil demo --soil-in-process`` runs (the demo's
dig-swing-dump plan, the MuJoCo machine, the soil model coupled at the start of every publish
period, its wrench acting during the period that follows, as sim_node's in-process soil does),
with no ROS, no threads and no wall clock: every step is a function of the simulated time, the
configuration and the plan. Two runs with the same inputs give bit-identical records (joint
trajectories, cylinder extensions, soil wrenches, bucket load, the final terrain): the record's
``digest()`` names a run, so a researcher can rerun an experiment and check that it is the same
one (test: ``test/test_reproducible_runs.py``). What breaks this in the real-time stack, and how
to avoid it: docs/simulation.md, "Reproducible runs".

    from excavator_hil.reproducible import dig_cycle_in_process
    record = dig_cycle_in_process(soil_preset="loose_sand")
    print(record.digest(), record.q.shape, record.load_m3.max())
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from excavator_hil.demo.dig_cycle import default_dig_cycle
from excavator_kinematics.inverse_kinematics import InverseKinematics
from excavator_sim.model_builder import ACTIVE_JOINTS
from excavator_sim.sim_config import load_sim_config
from excavator_sim.simulation import ExcavatorSimulation
from excavator_sim.soil.bucket_prism import BucketPrism
from excavator_sim.soil.config import load_soil_config
from excavator_sim.soil.coupling import SoilCoupling


@dataclass(frozen=True)
class RunRecord:
    """One run, sampled at the end of every publish period."""

    t_s: np.ndarray          # simulated time [s], shape (n,)
    q: np.ndarray            # swing, boom, arm, bucket [rad], shape (n, 4)
    extensions: np.ndarray   # boom, arm, bucket cylinder extensions [m], shape (n, 3)
    wrench: np.ndarray       # soil force [N] and torque [N m] on the bucket, shape (n, 6)
    load_m3: np.ndarray      # soil carried in the bucket [m^3], shape (n,)
    terrain_m: np.ndarray    # the soil grid's heights at the end [m], shape (nx, ny)

    def digest(self) -> str:
        """SHA-256 over every array's bytes: equal digests, bit-identical runs."""
        h = hashlib.sha256()
        for f in fields(self):
            a = np.ascontiguousarray(getattr(self, f.name))
            h.update(f.name.encode())
            h.update(str(a.shape).encode())
            h.update(a.tobytes())
        return h.hexdigest()


def dig_cycle_in_process(sim_overrides: Mapping[str, Any] | None = None,
                         soil_preset: str | None = None, time_scale: float = 1.0,
                         settle_s: float = 1.0) -> RunRecord:
    """The demo's dig cycle (``excavator_hil.demo.dig_cycle.default_dig_cycle``) from the
    configured initial pose, streamed as joint targets every publish period, the soil coupled
    in process; then ``settle_s`` [s] of holding. ``sim_overrides``: dotted sim_node parameters
    over config/sim.yaml; ``soil_preset``: a config/soil.yaml preset (None: its default)."""
    # the soil carries the bucket, as in sim.launch.py / the demo with a soil model: a rigid
    # height-field contact would hold it on the surface
    config = load_sim_config(overrides={"terrain.contact": False, **dict(sim_overrides or {})})
    sim = ExcavatorSimulation(config)
    soil = load_soil_config(preset=soil_preset)
    coupling = SoilCoupling(soil, BucketPrism.from_geometry(sim.geometry))
    sim.terrain.set_region(0, 0, coupling.terrain.heights_m())
    ik = InverseKinematics(sim.geometry)
    q0 = [sim.joint_positions()[n] for n in ACTIVE_JOINTS]
    plan = default_dig_cycle(ik, q0, time_scale=time_scale)
    steps = max(1, round(1.0 / (config.publish_rate * config.timestep)))
    period = steps * config.timestep
    n = int(np.ceil((plan.duration_s + settle_s) / period))
    t0 = sim.time
    t = np.empty(n)
    q = np.empty((n, 4))
    ext = np.empty((n, 3))
    wrench = np.empty((n, 6))
    load = np.empty(n)
    for k in range(n):
        elapsed = sim.time - t0
        if elapsed <= plan.duration_s:
            sample = plan.sample(elapsed)
            sim.set_joint_targets(dict(zip(ACTIVE_JOINTS, map(float, sample.q), strict=True)))
        pos, quat = sim.bucket_pose()
        lin, ang = sim.bucket_twist()
        update = coupling.update(pos, quat, lin, ang, outside_ok=True)
        sim.apply_bucket_wrench(update.forces.force, update.forces.torque)
        if update.changed is not None and update.heights is not None:
            sim.terrain.set_region(update.changed[0], update.changed[2], update.heights)
        sim.step(steps)
        joints = sim.joint_positions()
        t[k] = sim.time
        q[k] = [joints[j] for j in ACTIVE_JOINTS]
        ext[k] = [joints[c] for c in ("boom_cylinder", "arm_cylinder", "bucket_cylinder")]
        wrench[k, :3], wrench[k, 3:] = update.forces.force, update.forces.torque
        load[k] = update.load_m3
    return RunRecord(t, q, ext, wrench, load, coupling.terrain.heights_m())
