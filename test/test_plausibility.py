"""Plausibility bounds and the simulation's state guard, on the pure cores (no ROS): extreme
finite values never crash a core, never move soil when rejected, never stop simulated time."""

from __future__ import annotations

import contextlib
import math
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from excavator_kinematics.geometry import default_geometry
from excavator_sim.plausibility import WRENCH_FACTOR, MachineEnvelope, shipped_machine_envelope
from excavator_sim.simulation import CommandError, ExcavatorSimulation
from excavator_sim.soil.bucket_prism import BucketPose, BucketPrism
from excavator_sim.soil.config import load_soil_config
from excavator_sim.soil.errors import OutsideGridError, SoilError, SoilInputError
from excavator_sim.soil.forces import DiMaioForceModel
from excavator_sim.soil.plausibility import ImplausibleInputError, SoilPlausibility
from excavator_sim.soil.terrain import Terrain

BUCKET = BucketPrism.from_geometry(default_geometry())
CONFIG = load_soil_config()
ENVELOPE = shipped_machine_envelope()
LIMITS = ENVELOPE.soil_limits()
# Extreme finite values and their neighbours: what a faulty upstream node can send.
EXTREME = st.sampled_from([1e307, -1e307, 1.7976931348623157e308, -1e308, 1e30, -1e30, 1e9,
                           -2e9, 1e6, 5e-324, -5e-324, -0.0, 0.0, 1e-300])
FINITE = st.one_of(EXTREME, st.floats(-1e6, 1e6, allow_nan=False))
FAST = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


# --- the machine's envelope ---------------------------------------------------------------
def test_envelope_is_the_machines_order_of_magnitude() -> None:
    """The derived limits of the shipped machine (the 7-9 t class of its geometry): forces of
    the class (ISO 6015: excavator_sim.iso6015.MIDI_CLASS), a tip speed and reach of metres, a
    wrench limit of WRENCH_FACTOR x the digging force. 2.1e9 N (issue 20) and 1e6 m/s are far
    outside."""
    from excavator_sim.iso6015 import MIDI_CLASS

    ranges = {r.figure: (r.low * 1e3, r.high * 1e3) for r in MIDI_CLASS if r.unit == "kN"}
    e = ENVELOPE
    lo, hi = ranges["bucket digging force (ISO 6015)"]
    assert lo < e.bucket_digging_force_n < hi
    lo, hi = ranges["arm crowd force (ISO 6015)"]
    assert lo < e.arm_crowd_force_n < min(hi, e.bucket_digging_force_n)
    assert e.wrench_force_limit_n == pytest.approx(WRENCH_FACTOR * e.max_digging_force_n)
    assert 5.0 < e.reach_m < 12.0
    assert 1.0 < e.max_tip_speed_m_s < 100.0
    assert e.wrench_force_limit_n < 2.1e9 and LIMITS.linear_speed_m_s < 1e6
    assert e.dig_depth_m > 1.0 and e.tip_height_m > 3.0


def test_envelope_follows_the_hydraulics() -> None:
    """Derived, not typed in: double the pressure, double the digging force; double the flow,
    a faster tip."""
    from dataclasses import replace

    from excavator_sim.sim_config import load_sim_config

    hyd = load_sim_config().hydraulics
    strong = replace(hyd, pressure_pa=2 * hyd.pressure_pa)
    fast = replace(hyd, cylinders={n: replace(c, flow_lpm=2 * c.flow_lpm)
                                   for n, c in hyd.cylinders.items()})
    g = default_geometry()
    base = MachineEnvelope.from_machine(g, hyd)
    assert MachineEnvelope.from_machine(g, strong).max_digging_force_n == pytest.approx(
        2 * base.max_digging_force_n)
    assert MachineEnvelope.from_machine(g, fast).max_tip_speed_m_s > base.max_tip_speed_m_s


@given(f=st.lists(FINITE, min_size=3, max_size=3), t=st.lists(FINITE, min_size=3, max_size=3))
@FAST
def test_wrench_check_names_the_limit_and_never_raises(f: list[float], t: list[float]) -> None:
    reason = ENVELOPE.check_wrench(np.array(f), np.array(t))
    fn, tn = (max(abs(x) for x in v) * math.sqrt(sum((x / max(abs(x) for x in v)) ** 2
                                                     for x in v)) if any(v) else 0.0
              for v in (f, t))
    inside = fn <= ENVELOPE.wrench_force_limit_n and tn <= ENVELOPE.wrench_torque_limit_nm
    assert (reason is None) == inside
    if reason is not None:
        assert "limit" in reason and len(reason) < 400  # :.6g, never 309 digits


# --- soil: terrain update and force model -------------------------------------------------
def _fresh() -> tuple[Terrain, DiMaioForceModel, SoilPlausibility]:
    return (Terrain(CONFIG.terrain, BUCKET), DiMaioForceModel(CONFIG.dimaio, BUCKET),
            SoilPlausibility(CONFIG.terrain, BUCKET, LIMITS))


@given(x=FINITE, y=FINITE, z=FINITE, pitch=st.floats(-4, 4), yaw=st.floats(-4, 4))
# found by a CI run: the bucket 2,000 km down filled beyond its room, and the share-out of what
# it could not hold (units ~1e11) rounded in float64 into 5e13 units made of nothing
@example(x=5e-324, y=5e-324, z=-2e9, pitch=0.0, yaw=0.0)
@example(x=0.0, y=0.0, z=-2e6, pitch=0.0, yaw=0.0)
@FAST
def test_terrain_update_with_any_finite_pose_raises_a_soil_error_or_conserves(
        x: float, y: float, z: float, pitch: float, yaw: float) -> None:
    """The 1e307 case of issue 20 (OverflowError in the box) and every other finite pose: the
    terrain core either updates (mass conserved) or raises its own error, terrain unchanged."""
    terrain = Terrain(CONFIG.terrain, BUCKET)
    before = terrain.h.copy()
    pose = BucketPose(x, y, z, pitch, yaw)
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            terrain.update(pose)
    except SoilError as exc:  # OutsideGridError, SoilInputError
        assert np.array_equal(terrain.h, before) and terrain.load_units == 0
        assert len(str(exc)) < 600
        return
    assert terrain.total_units == int(before.sum())


def test_the_issue_pose_is_outside_the_grid_not_an_overflow() -> None:
    terrain = Terrain(CONFIG.terrain, BUCKET)
    with pytest.raises(OutsideGridError, match=r"1e\+307"):
        terrain.update(BucketPose(1e307, 0.0, 0.0, 0.3, 0.0))


@given(x=FINITE, y=FINITE, z=FINITE, pitch=st.floats(-4, 4), yaw=st.floats(-4, 4),
       v=st.lists(FINITE, min_size=3, max_size=3), w=st.lists(FINITE, min_size=3, max_size=3))
@FAST
def test_checked_soil_step_is_finite_and_rejected_input_moves_no_soil(
        x: float, y: float, z: float, pitch: float, yaw: float, v: list[float],
        w: list[float]) -> None:
    """What soil_node does per message: check twist and pose, update, force, check the wrench.
    Whatever passes the checks gives a finite wrench under the limit; whatever fails leaves the
    terrain (and the bucket load) exactly as it was."""
    terrain, forces, check = _fresh()
    before = terrain.h.copy()
    pose = BucketPose(x, y, z, pitch, yaw)
    try:
        check.check_twist(np.array(v), np.array(w))
        check.check_pose(pose, terrain.surface_m)
    except ImplausibleInputError as exc:
        assert np.array_equal(terrain.h, before) and terrain.load_units == 0
        assert "plausible" in str(exc) or "beyond" in str(exc) or "deeper" in str(exc) \
            or "higher" in str(exc)
        return
    try:
        terrain.update(pose)
        surface = terrain.surface_m
    except OutsideGridError:
        surface = lambda a, _b: np.full(np.shape(a), -np.inf)  # noqa: E731 - as soil_node
    result = forces.step(pose, np.array(v), np.array(w), surface, terrain.load_volume_m3)
    assert np.all(np.isfinite(result.force)) and np.all(np.isfinite(result.torque))
    with contextlib.suppress(ImplausibleInputError):  # then not published by soil_node
        check.check_wrench(result.force, result.torque)
    assert terrain.total_units == int(before.sum())


def test_the_issue_twist_is_rejected_and_a_nan_twist_does_not_poison_later_poses() -> None:
    _, _, check = _fresh()
    with pytest.raises(ImplausibleInputError,
                       match=r"bucket speed 1e\+06 m/s .* exceeds the plausible "
                             + re.escape(f"{LIMITS.linear_speed_m_s:.6g} m/s")):
        check.check_twist(np.array([1e6, 0.0, 0.0]), np.zeros(3))
    with pytest.raises(SoilInputError, match="not finite"):
        check.check_twist(np.array([math.nan, 0.0, 0.0]), np.zeros(3))
    check.check_twist(np.array([1.0, 0.0, -0.5]), np.array([0.0, 0.3, 0.0]))  # a real one


def test_a_pose_deep_under_the_terrain_is_rejected_with_the_depth() -> None:
    """Issue 20: 50 m under the surface gave the force of a first touch, without a word."""
    terrain, _, check = _fresh()
    with pytest.raises(ImplausibleInputError, match="below the terrain surface, deeper than"):
        check.check_pose(BucketPose(5.0, 0.0, -50.0, -0.3, 0.0), terrain.surface_m)
    check.check_pose(BucketPose(5.0, 0.0, -0.3, -0.3, 0.0), terrain.surface_m)  # digging


# --- simulation: wrench plausibility and the state guard ----------------------------------
@pytest.fixture(scope="module")
def sim() -> ExcavatorSimulation:
    s = ExcavatorSimulation()
    s.step(50)
    return s


@pytest.mark.parametrize("force", [2e9, 1e8, 1e307])
def test_implausible_wrench_is_rejected_naming_the_limit(sim: ExcavatorSimulation,
                                                          force: float) -> None:
    with pytest.raises(CommandError,
                       match=re.escape(f"exceeds the plausible limit "
                                       f"{sim.envelope.wrench_force_limit_n:.6g} N (3 x the "
                                       "machine")) as exc:
        sim.apply_bucket_wrench(np.array([force, 0.0, 0.0]), np.zeros(3))
    assert "last valid wrench is kept" in str(exc.value) and len(str(exc.value)) < 400


@given(f=st.lists(FINITE, min_size=3, max_size=3), t=st.lists(FINITE, min_size=3, max_size=3))
@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_sim_step_after_any_finite_wrench_keeps_time_and_state_sound(
        sim: ExcavatorSimulation, f: list[float], t: list[float]) -> None:
    t0 = sim.time
    with contextlib.suppress(CommandError):
        sim.apply_bucket_wrench(np.array(f), np.array(t))
    sim.step(20)
    assert sim.time == pytest.approx(t0 + 20 * sim.timestep)
    js = sim.joint_state()
    assert np.all(np.isfinite(js.positions)) and np.all(np.isfinite(js.velocities))
    assert all(abs(v) < 1e3 for v in js.velocities)
    sim.apply_bucket_wrench(np.zeros(3), np.zeros(3))


def test_a_diverging_step_is_undone_and_time_goes_on() -> None:
    """A force MuJoCo cannot integrate (2e9 N put on the bucket behind the plausibility check,
    as any other cause would): the core restores the last good state, drops the force, records
    the cause, and the clock advances as if nothing happened; later commands are served."""
    import mujoco

    sim = ExcavatorSimulation()
    sim.step(100)
    good = sim.joint_positions()
    body = mujoco.mj_name2id(sim.model, mujoco.mjtObj.mjOBJ_BODY, "bucket")
    sim.data.xfrc_applied[body] = (2e9, 0.0, 2e9, 0.0, 0.0, 0.0)
    times = []
    for _ in range(20):
        sim.step(10)
        times.append(sim.time)
        js = sim.joint_state()
        assert np.all(np.isfinite(js.positions)) and np.all(np.isfinite(js.velocities))
    assert np.all(np.diff(times) > 0) and times[-1] == pytest.approx(0.3, abs=1e-9)
    assert sim.divergence_count >= 1, "the divergence was not detected"
    assert "unstable" in sim.divergences[0].cause or "exploded" in sim.divergences[0].cause
    assert not sim.data.xfrc_applied.any()
    now = sim.joint_positions()
    assert all(abs(now[n] - good[n]) < 0.05 for n in ("boom", "arm", "bucket"))
    # a valid command afterwards is tracked
    target = good["boom"] + 0.1
    sim.set_joint_targets({"boom": target})
    sim.step(2000)
    assert sim.joint_positions()["boom"] == pytest.approx(target, abs=0.01)


def test_exploding_velocity_is_caught_by_the_speed_bound() -> None:
    sim = ExcavatorSimulation()
    sim.step(50)
    sim.data.qvel[:] = 1e4  # the state of a step that went wrong without a MuJoCo warning
    t0 = sim.time
    sim.step(10)
    assert sim.divergences and sim.time == pytest.approx(t0 + 10 * sim.timestep)
    assert np.all(np.abs(sim.data.qvel) < 1e3)


@given(q=st.lists(FINITE, min_size=4, max_size=4))
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_extreme_joint_targets_are_rejected_or_in_range(sim: ExcavatorSimulation,
                                                        q: list[float]) -> None:
    before = sim.targets
    try:
        sim.set_joint_targets(dict(zip(("swing", "boom", "arm", "bucket"), q, strict=True)))
    except CommandError as exc:
        assert sim.targets == before and len(str(exc)) < 600
        return
    assume(True)
    sim.set_joint_targets(before)


def test_coupling_checks_the_simulators_bucket_like_soil_node() -> None:
    """SoilCoupling with limits: a simulator whose bucket moves faster than the machine can (a
    state written behind the guard's back) gets no terrain update and no wrench."""
    import mujoco

    from excavator_sim.soil.coupling import SoilCoupling

    sim = ExcavatorSimulation()
    sim.step(10)
    sim.data.qvel[sim.model.joint("base_x").dofadr[0]] = 500.0  # [m/s]
    mujoco.mj_forward(sim.model, sim.data)
    coupling = SoilCoupling(CONFIG, BUCKET, LIMITS)
    before = coupling.terrain.h.copy()
    with pytest.raises(ImplausibleInputError, match="exceeds the plausible"):
        coupling.step(sim)
    assert np.array_equal(coupling.terrain.h, before)
    assert not sim.data.xfrc_applied.any()
