"""Teleoperation cores without ROS or MuJoCo: stick shaping, the ISO 10968 / SAE patterns, the
flow limits, the task Jacobian, coordinated control at its edges, DiMaio's impedance model and
the force feedback."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import signal

from excavator_kinematics.errors import ConfigError, InvalidInputError
from excavator_kinematics.forward_kinematics import ForwardKinematics
from excavator_kinematics.geometry import default_geometry
from excavator_kinematics.linkage import Linkage
from excavator_kinematics.teleop.config import (
    PARAMETERS,
    load_teleop_parameters,
    settings_from_parameters,
)
from excavator_kinematics.teleop.control_patterns import pattern
from excavator_kinematics.teleop.controller import MachineState, TeleopCore, TeleopSettings
from excavator_kinematics.teleop.coordinated import CoordinatedController, CoordinatedSettings
from excavator_kinematics.teleop.impedance import (
    FeedbackScaling,
    ImpedanceModel,
    ImpedanceParams,
    hand_coordinates,
    soil_force_in_task,
)
from excavator_kinematics.teleop.jacobian import TaskJacobian
from excavator_kinematics.teleop.joystick import JoyLayout, Shaping, TravelLayout
from excavator_kinematics.teleop.valves import FlowLimits, Hydraulics

GEOMETRY = default_geometry()
LINKAGE = Linkage(GEOMETRY)
# the default machine's pump flow (a Cat 309 CR's 235 L/min: the default teleop total_flow_lpm)
TOTAL_FLOW_LPM = 235.0
LIMITS = FlowLimits.from_file(total_flow_lpm=TOTAL_FLOW_LPM)
HYDRAULICS = Hydraulics(LINKAGE, LIMITS)
JAC = TaskJacobian(GEOMETRY)
MID = np.array([0.0, 0.45, -1.5, 1.6])  # swing, boom, arm, bucket [rad], away from limits
# Joy axes (default layout 0, 1, 3, 4): index of each stick axis.
AXIS = {"left_x": 0, "left_y": 1, "right_x": 3, "right_y": 4}


def _axes(**deflection: float) -> list[float]:
    a = [0.0] * 6
    for name, v in deflection.items():
        a[AXIS[name]] = v
    return a


# --- shaping -------------------------------------------------------------------------------
@given(x=st.floats(-1.5, 1.5), db=st.floats(0.0, 0.5), expo=st.floats(0.0, 1.0))
def test_shaping_is_odd_bounded_and_zero_in_the_dead_band(x: float, db: float,
                                                          expo: float) -> None:
    s = Shaping(db, expo)
    y = s(x)
    assert -1.0 <= y <= 1.0
    assert s(-x) == pytest.approx(-y)
    if abs(x) <= db:
        assert y == 0.0
    elif abs(x) > db + 1e-6:
        assert abs(y) > 0.0


@given(a=st.floats(0.0, 1.0), b=st.floats(0.0, 1.0))
def test_shaping_is_monotonic_and_reaches_full_scale(a: float, b: float) -> None:
    s = Shaping(0.1, 0.3)
    lo, hi = sorted((a, b))
    assert s(lo) <= s(hi) + 1e-12
    assert s(1.0) == pytest.approx(1.0)
    assert s(0.1 + 1e-9) == pytest.approx(0.0, abs=1e-8)  # continuous at the dead band's edge


def test_expo_softens_the_centre() -> None:
    assert Shaping(0.0, 1.0)(0.5) == pytest.approx(0.125)
    assert Shaping(0.0, 0.0)(0.5) == pytest.approx(0.5)


def test_bad_shaping_and_indices_are_named() -> None:
    with pytest.raises(ConfigError, match="dead_band"):
        Shaping(1.0, 0.2)
    with pytest.raises(ConfigError, match="expo"):
        Shaping(0.1, 2.0)
    with pytest.raises(InvalidInputError,
                       match=r"axes\.right_x is axis 3 but the Joy message has 2"):
        JoyLayout().sticks([0.0, 0.0], Shaping())
    with pytest.raises(InvalidInputError, match="finite"):
        Shaping()(math.nan)


# --- patterns ------------------------------------------------------------------------------
# ISO 10968 Annex B / SAE J1177 (ISO) and SAE J1814 (backhoe), as published (docs/teleoperation.md):
# (stick axis, deflection) -> (function, direction in the joint convention).
# Joy: forward and left are positive. Joints: swing + = left, boom + = up, arm + = out (away),
# bucket + = curl out (dump).
EXPECTED = {
    "iso": {("left_x", +1): ("swing", +1),    # left hand left = swing left
            ("left_y", +1): ("arm", +1),      # left hand forward = arm (stick) away
            ("left_y", -1): ("arm", -1),      # left hand back = arm in
            ("right_y", +1): ("boom", -1),    # right hand forward = boom down
            ("right_y", -1): ("boom", +1),    # right hand back = boom up
            ("right_x", +1): ("bucket", -1),  # right hand left = bucket curl in (close)
            ("right_x", -1): ("bucket", +1)},  # right hand right = dump
    "sae": {("left_x", -1): ("swing", -1),    # left hand right = swing right
            ("left_y", +1): ("boom", -1),     # left hand forward = boom down
            ("left_y", -1): ("boom", +1),
            ("right_y", +1): ("arm", +1),     # right hand forward = arm away
            ("right_y", -1): ("arm", -1),
            ("right_x", +1): ("bucket", -1),
            ("right_x", -1): ("bucket", +1)},
}


@pytest.mark.parametrize("name", ["iso", "sae", "backhoe"])
def test_each_stick_axis_moves_exactly_the_named_joint_the_right_way(name: str) -> None:
    key = "sae" if name == "backhoe" else name
    core = TeleopCore(GEOMETRY, LIMITS, TeleopSettings(pattern=name), LINKAGE)
    state = MachineState(MID, np.zeros(4))
    for (stick, sign), (joint, direction) in EXPECTED[key].items():
        cmd = core.stick_command(_axes(**{stick: 0.8 * sign}), state)
        rates = cmd.valve.joint_rate
        moving = {j for j, r in rates.items() if abs(r) > 1e-9}
        assert moving == {joint}, (stick, sign, rates)
        assert math.copysign(1.0, rates[joint]) == direction, (stick, sign, rates)
        # The target leads in the same direction, capped at that speed.
        assert (cmd.positions[joint] - MID[["swing", "boom", "arm", "bucket"].index(joint)]) \
            * direction > 0
        assert cmd.velocities[joint] == pytest.approx(abs(rates[joint]))


def test_unknown_pattern_is_named() -> None:
    with pytest.raises(ConfigError, match=r"'jcb'.*backhoe"):
        pattern("jcb")


def test_valve_spools_follow_the_cylinders() -> None:
    """Boom up extends the boom cylinder; arm out retracts the arm cylinder; a full stick opens
    the spool fully and gives the flow-limited rod speed."""
    d = HYDRAULICS.extension_rates(MID[1:])
    v = HYDRAULICS.from_demands({"boom": 1.0}, MID[1:])
    assert v.spool["boom_cylinder"] == pytest.approx(math.copysign(1.0, d[0]))
    assert d[0] > 0 and v.spool["boom_cylinder"] == pytest.approx(1.0)
    assert v.speed["boom_cylinder"] == pytest.approx(LIMITS.cylinders["boom_cylinder"]
                                                     .extend_speed_m_s)
    v = HYDRAULICS.from_demands({"arm": 1.0}, MID[1:])
    assert v.spool["arm_cylinder"] < 0  # arm out = arm cylinder retracts
    assert v.speed["arm_cylinder"] == pytest.approx(-LIMITS.cylinders["arm_cylinder"]
                                                    .retract_speed_m_s)
    assert v.joint_rate["arm"] > 0


def test_flow_limits_match_the_simulation() -> None:
    from excavator_sim.simulation import ExcavatorSimulation

    sim_limits = ExcavatorSimulation().speed_limits()
    for name, c in LIMITS.cylinders.items():
        assert (c.retract_speed_m_s, c.extend_speed_m_s) == pytest.approx(sim_limits[name])
    assert LIMITS.swing_speed_rad_s == pytest.approx(sim_limits["swing"][1])


def test_flow_sharing_slows_every_function_by_the_same_factor() -> None:
    demands = {"boom": 1.0, "arm": 1.0, "bucket": 1.0}
    free = Hydraulics(LINKAGE, FlowLimits(LIMITS.cylinders, 1.0, 1.0))
    shared = HYDRAULICS.from_demands(demands, MID[1:])
    alone = free.from_demands(demands, MID[1:])
    assert shared.flow_scale < 1.0
    total = sum(LIMITS.cylinders[c].flow_lpm_at(shared.speed[c]) for c in LIMITS.cylinders)
    assert total == pytest.approx(TOTAL_FLOW_LPM)
    for j in ("boom", "arm", "bucket"):
        assert shared.joint_rate[j] == pytest.approx(alone.joint_rate[j] * shared.flow_scale)


def test_flow_limits_file_errors_name_the_key(tmp_path) -> None:
    bad = tmp_path / "sim.yaml"
    bad.write_text("/**:\n  ros__parameters:\n    hydraulics: {pressure_pa: 1.0}\n")
    with pytest.raises(ConfigError, match=r"hydraulics\.boom_cylinder\.bore_m"):
        FlowLimits.from_file(bad)


def test_travel_from_pedals_and_buttons() -> None:
    core = TeleopCore(GEOMETRY, LIMITS, TeleopSettings(shaping=Shaping(0.0, 0.0)), LINKAGE)
    left, right = core.travel_command([1.0, -0.5], [])
    assert (left, right) == pytest.approx((LIMITS.track_speed_m_s, -0.5 * LIMITS.track_speed_m_s))
    buttons = TeleopSettings(travel=TravelLayout(-1, -1, 0, 1, 2, 3, 0.4),
                             shaping=Shaping(0.0, 0.0))
    core = TeleopCore(GEOMETRY, LIMITS, buttons, LINKAGE)
    assert core.travel_command([], [1, 0, 0, 1]) == pytest.approx(
        (0.4 * LIMITS.track_speed_m_s, -0.4 * LIMITS.track_speed_m_s))


def test_a_released_stick_holds_where_the_joint_stops() -> None:
    core = TeleopCore(GEOMETRY, LIMITS, TeleopSettings(stop_time_s=0.1), LINKAGE)
    qd = np.array([0.0, 0.2, 0.0, 0.0])
    first = core.stick_command(_axes(), MachineState(MID, qd))
    assert first.positions["boom"] == pytest.approx(MID[1] + 0.02)
    later = core.stick_command(_axes(), MachineState(MID + 0.01, np.zeros(4)))
    assert later.positions == first.positions  # latched, not dragged along
    assert all(v == 0.0 for v in later.velocities.values())


def test_targets_stay_inside_the_joint_limits() -> None:
    lo, hi = LINKAGE.joint_limits["boom"]
    core = TeleopCore(GEOMETRY, LIMITS, TeleopSettings(command_lead_s=5.0), LINKAGE)
    q = MID.copy()
    q[1] = hi - 0.01
    cmd = core.stick_command(_axes(right_y=-1.0), MachineState(q, np.zeros(4)))  # boom up
    assert lo < cmd.positions["boom"] < hi


# --- Jacobian ------------------------------------------------------------------------------
JOINTS = st.tuples(*(st.floats(*LINKAGE.joint_limits[n]) for n in ("boom", "arm", "bucket")))


@settings(max_examples=60, deadline=None)  # no timing: the machine is shared and loaded
@given(q=JOINTS)
def test_jacobian_matches_the_forward_kinematics(q: tuple[float, float, float]) -> None:
    fk = ForwardKinematics(GEOMETRY, LINKAGE)
    qa = np.array(q)
    tip = fk.tip(np.r_[0.0, qa])
    assert JAC.task(qa) == pytest.approx([tip[0], tip[2], fk.bucket_pitch(np.r_[0.0, qa])])
    h = 1e-6
    numeric = np.array([(fk.tip(np.r_[0.0, qa + h * e]) - fk.tip(np.r_[0.0, qa - h * e]))[[0, 2]]
                        / (2 * h) for e in np.eye(3)]).T
    assert JAC.jacobian(qa)[:2] == pytest.approx(numeric, abs=1e-6)
    assert JAC.jacobian(qa)[2] == pytest.approx([1.0, 1.0, 1.0])


# --- coordinated: edges ----------------------------------------------------------------------
def test_coordinated_solves_exactly_away_from_limits() -> None:
    ctl = CoordinatedController(JAC, LINKAGE, HYDRAULICS)
    for xd in ([0.2, 0.0, 0.0], [0.0, -0.2, 0.0], [0.1, 0.1, 0.3]):
        r = ctl.solve(MID[1:], np.array(xd))
        assert not r.damped and r.locked == () and r.scale == 1.0
        assert JAC.jacobian(MID[1:]) @ r.rates == pytest.approx(xd, abs=1e-9)


def test_coordinated_is_damped_and_bounded_at_the_singularity() -> None:
    """Arm in line with the boom (outside the stroke range, to reach the singularity itself):
    damped least squares gives finite rates within the flow limits, not an explosion."""
    g = GEOMETRY
    q_sing = np.array([0.4, -math.atan2(g.H[1], g.H[0]) + math.atan2(g.M[1], g.M[0]) * 0, 1.5])
    assert abs(np.linalg.det(JAC.jacobian(q_sing))) < 1e-9
    ctl = CoordinatedController(JAC, LINKAGE, HYDRAULICS,
                                CoordinatedSettings(horizon_s=1e-3))
    r = ctl.solve(q_sing, np.array([0.3, 0.0, 0.0]))  # further out along the stretched arm
    assert r.damped and r.sigma_min < 1e-9
    assert np.all(np.isfinite(r.rates))
    lo, hi = HYDRAULICS.joint_rate_bounds(q_sing)
    assert np.all(r.rates >= lo - 1e-9) and np.all(r.rates <= hi + 1e-9)
    # Near (not at) the singularity the damping bends the rates smoothly: no jump.
    r2 = ctl.solve(q_sing + np.array([0.0, -1e-3, 0.0]), np.array([0.3, 0.0, 0.0]))
    assert np.abs(r2.rates - r.rates).max() < 0.05


def test_coordinated_stops_the_bucket_at_the_four_bar_toggle() -> None:
    """At the bucket's upper limit (the four-bar's toggle less the margin) a command to curl out
    further stops the bucket exactly at the limit; the tip path is still served by boom/arm."""
    hi = LINKAGE.joint_limits["bucket"][1]
    q = np.array([0.45, -1.5, hi - 1e-3])
    ctl = CoordinatedController(JAC, LINKAGE, HYDRAULICS)
    r = ctl.solve(q, np.array([0.1, 0.0, 0.5]))
    assert "bucket" in r.locked
    assert q[2] + r.rates[2] * ctl.settings.horizon_s <= hi + 1e-12
    assert r.expected_task_rate[0] == pytest.approx(0.1, rel=0.05)


def test_coordinated_scales_to_the_rate_limits_keeping_the_direction() -> None:
    ctl = CoordinatedController(JAC, LINKAGE, HYDRAULICS)
    xd = np.array([3.0, -2.0, 0.0])  # far beyond what the pumps deliver
    r = ctl.solve(MID[1:], xd)
    assert r.scale < 1.0
    lo, hi = HYDRAULICS.joint_rate_bounds(MID[1:])
    assert np.all(r.rates >= lo - 1e-9) and np.all(r.rates <= hi + 1e-9)
    got = r.expected_task_rate
    assert got / np.linalg.norm(got) == pytest.approx(xd / np.linalg.norm(xd), abs=1e-6)


# --- impedance -----------------------------------------------------------------------------
def _analytic_step(p: ImpedanceParams, axis: int, t: np.ndarray) -> np.ndarray:
    m, b, k = p.m[axis], p.b[axis], p.k[axis]
    _, y = signal.step(signal.lti([b, k], [m, b, k]), T=np.r_[0.0, t])  # from t = 0
    return y[1:]


@pytest.mark.parametrize("dt", [0.05, 0.02, 0.002])
def test_free_space_step_response_is_the_second_order_of_eq1(dt: float) -> None:
    """X_0 steps by (0.5 m, -0.3 m, 0.2 rad): X follows (B s + K) / (M s^2 + B s + K)."""
    p = ImpedanceParams()
    model = ImpedanceModel(p, np.zeros(3))
    step = np.array([0.5, -0.3, 0.2])
    n = int(6.0 / dt)
    xs = np.empty((n, 3))
    for i in range(n):
        xs[i] = model.step(step, np.zeros(3), dt)
    t = dt * np.arange(1, n + 1)
    for axis in range(3):
        y = step[axis] * _analytic_step(p, axis, t)
        err = np.abs(xs[:, axis] - y).max() / abs(step[axis])
        assert err <= 0.05, (axis, err)


def test_contact_steady_offset_is_force_over_stiffness() -> None:
    p = ImpedanceParams()
    model = ImpedanceModel(p, np.zeros(3))
    soil = np.array([-20e3, 8e3, -3e3])  # soil pushes back, up, curls the bucket in
    x0 = np.array([6.0, -0.5, 0.7])
    model.reset(x0)
    for _ in range(3000):
        x = model.step(x0, soil, 0.01)
    offset = x - x0
    assert offset == pytest.approx(soil / p.k, rel=0.05)
    assert model.steady_state(x0, soil) == pytest.approx(x, rel=1e-3)


def test_soil_wrench_in_task_coordinates() -> None:
    heading = 0.7
    c, s = math.cos(heading), math.sin(heading)
    e_r = np.array([c, s, 0.0])
    tip = np.array([5.0 * c, 5.0 * s, -0.5])
    m_pt = tip + 0.8 * e_r + np.array([0.0, 0.0, 0.6])
    # A radial pull at M: F_r = |f|, no vertical part, moment about the tip from M's height.
    f = -12e3 * e_r
    got = soil_force_in_task(f, np.zeros(3), m_pt, tip, heading)
    assert got[0] == pytest.approx(-12e3) and got[1] == pytest.approx(0.0, abs=1e-9)
    # moment of f about the tip: (0.8 e_r + 0.6 z) x (-12e3 e_r) = -0.6*12e3 (z x e_r)
    # z x e_r = e_theta = (-s, c, 0); e_alpha = (s, -c, 0) = -e_theta -> +7200 N m
    assert got[2] == pytest.approx(0.6 * 12e3)
    # A pure torque about -y of the boom plane is F_alpha.
    tau = 500.0 * np.array([s, -c, 0.0])
    assert soil_force_in_task(np.zeros(3), tau, tip, tip, heading) == pytest.approx(
        [0.0, 0.0, 500.0], abs=1e-9)


def test_force_feedback_scales_and_saturates() -> None:
    fb = FeedbackScaling(force_scale=1e-3, torque_scale=2e-3, max_force_n=10.0,
                         max_torque_nm=1.0)
    force, torque, sat = fb.device_wrench(np.array([-3000.0, 4000.0, 200.0]))
    assert force == pytest.approx([-3.0, 0.0, 4.0]) and torque == pytest.approx([0, -0.4, 0])
    assert not sat
    force, torque, sat = fb.device_wrench(np.array([-30e3, 40e3, 2000.0]))
    assert sat and np.hypot(force[0], force[2]) == pytest.approx(10.0)
    assert force[0] / force[2] == pytest.approx(-0.75)  # direction kept
    assert torque[1] == pytest.approx(-1.0)


def test_hand_pitch_is_rotation_about_minus_y() -> None:
    a = 0.3  # rotation of a about -y: quaternion (x, y, z, w) = (0, -sin(a/2), 0, cos(a/2))
    p = hand_coordinates((0.1, 0.2, -0.05), (0.0, -math.sin(a / 2), 0.0, math.cos(a / 2)))
    assert p == pytest.approx([0.1, -0.05, a])
    with pytest.raises(InvalidInputError, match="quaternion"):
        hand_coordinates((0, 0, 0), (0, 0, 0, 0))


def test_impedance_command_follows_the_hand_and_gives_way_to_the_soil() -> None:
    core = TeleopCore(GEOMETRY, LIMITS, TeleopSettings(mode="impedance"), LINKAGE)
    state = MachineState(MID, np.zeros(4))
    x_start = core.task(state)
    hand = np.array([0.0, 0.0, 0.0])
    core.impedance_command(hand, np.zeros(3), state, 0.0)
    for k in range(1, 501):  # 10 s of 50 Hz control callbacks
        moved = hand + np.array([0.02, -0.01, 0.0])
        cmd, ws = core.impedance_command(moved, np.zeros(3), state, 0.02 * k)
    assert core.impedance.x == pytest.approx(x_start + np.array([0.2, -0.1, 0.0]), abs=1e-3)
    assert not ws.any()
    q = np.array([cmd.positions[n] for n in ("swing", "boom", "arm", "bucket")])
    assert JAC.task(q[1:]) == pytest.approx(core.impedance.x, abs=1e-6)


# --- parameters ----------------------------------------------------------------------------
def test_parameter_file_holds_every_parameter_with_its_default() -> None:
    values = load_teleop_parameters()
    assert {p.name: p.default for p in PARAMETERS} == values
    TeleopSettings(**settings_from_parameters(values))


def test_bad_parameters_are_named() -> None:
    with pytest.raises(ConfigError, match=r"coordinated\.max_tip_speed_m_s = 50"):
        settings_from_parameters({"coordinated.max_tip_speed_m_s": 50.0})
    with pytest.raises(ConfigError, match=r"axes\.invert"):
        settings_from_parameters({"axes.invert": [True]})
    with pytest.raises(ConfigError, match="mode = 'fly' is not one of joystick, coordinated"):
        TeleopSettings(**settings_from_parameters({"mode": "fly"}))


def test_holds_are_released_when_the_operator_stops() -> None:
    """After the operator lets go, someone else (ik_node) may move the machine: the next
    command must hold the joints where they are then, not where they were."""
    core = TeleopCore(GEOMETRY, LIMITS, TeleopSettings(stop_time_s=0.0), LINKAGE)
    core.hold_command(MachineState(MID, np.zeros(4)), "deadman released")
    core.release_holds()
    moved = MID + np.array([0.0, 0.0, 0.0, 0.3])
    cmd = core.stick_command(_axes(right_y=-0.5), MachineState(moved, np.zeros(4)))
    assert cmd.positions["bucket"] == pytest.approx(moved[3])
