"""Vehicle kinematic models: round trips, saturation, infeasible commands, bad input, and one
test per error of the seed ``mechatronic_layer_kinematics.rst`` (design note plc_bridge.md)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from excavator_kinematics.errors import ConfigError, InvalidInputError
from excavator_kinematics.vehicle import (
    AckermannModel,
    BodyTwist,
    FourWheelSteerModel,
    SkidSteerModel,
    VehicleModel,
    artof_from_twist,
    lateral_sign,
    make_vehicle_model,
    turning_centre,
    twist_from_artof,
)

# The design note's test geometry: wheelbase l, track b, centre of mass a ahead of the rear axle.
L, B, A = 2.0, 1.5, 0.8
TOL = 1e-9
FAST = 50.0  # a speed limit [m/s] no round-trip case reaches, so nothing saturates there

speed = st.floats(-5.0, 5.0, allow_nan=False, allow_infinity=False, allow_subnormal=False)
yaw = st.floats(-3.0, 3.0, allow_nan=False, allow_infinity=False, allow_subnormal=False)
nonzero_speed = speed.filter(lambda v: abs(v) > 1e-3)
nonzero_yaw = yaw.filter(lambda w: abs(w) > 1e-3)
ROUND_TRIP = settings(max_examples=150, deadline=None)


def four_ws(limit: float = math.pi / 2, vmax: float = FAST) -> FourWheelSteerModel:
    return make_vehicle_model("4wd4ws", {"wheelbase_m": L, "track_m": B,
                                         "max_steer_angle_rad": limit,
                                         "max_wheel_speed_m_s": vmax})


def ackermann(limit: float = 1.2, vmax: float = FAST, feedback: str = "mean") -> AckermannModel:
    return make_vehicle_model("ackermann", {"wheelbase_m": L, "front_track_m": B,
                                            "rear_track_m": B, "max_steer_angle_rad": limit,
                                            "max_wheel_speed_m_s": vmax,
                                            "steer_feedback": feedback})


def skid(slip: float = 1.0, vmax: float = FAST) -> SkidSteerModel:
    return make_vehicle_model("skid_steer", {"track_width_m": B, "slip_factor": slip,
                                             "max_wheel_speed_m_s": vmax})


def assert_twist(actual: BodyTwist, expected: BodyTwist, tol: float = TOL) -> None:
    assert actual.as_array() == pytest.approx(expected.as_array(), abs=tol), (actual, expected)


def round_trip(model: VehicleModel, twist: BodyTwist, *, exact: bool = True) -> np.ndarray:
    """direct(inverse(twist)) equals the achieved twist; with ``exact`` also the request."""
    cmd = model.inverse(twist)
    assert np.all(np.isfinite(cmd.speeds)) and np.all(np.isfinite(cmd.angles))
    assert_twist(model.direct(cmd.speeds, cmd.angles), cmd.achieved)
    if exact:
        assert cmd.feasible and cmd.scale == 1.0, cmd.note
        assert_twist(cmd.achieved, twist, 0.0)
    return cmd


def test_every_model_satisfies_the_interface() -> None:
    for model in (four_ws(), ackermann(), skid()):
        assert isinstance(model, VehicleModel)
        assert len(model.wheel_names) in (2, 4)


# --- 4WD4WS ---------------------------------------------------------------------------------


@ROUND_TRIP
@given(vx=speed)
def test_4ws_straight_and_reverse(vx: float) -> None:
    cmd = round_trip(four_ws(), BodyTwist(vx, 0.0, 0.0))
    if vx != 0.0:
        # Reverse keeps the wheels straight and rolls them backwards (flip past the limit).
        assert cmd.angles == pytest.approx(np.zeros(4), abs=TOL)
        assert cmd.speeds == pytest.approx(np.full(4, vx), abs=TOL)


@ROUND_TRIP
@given(vx=speed, vy=nonzero_speed)
def test_4ws_crab(vx: float, vy: float) -> None:
    cmd = round_trip(four_ws(), BodyTwist(vx, vy, 0.0))
    assert np.ptp(cmd.angles) == pytest.approx(0.0, abs=TOL)
    assert np.abs(cmd.speeds) == pytest.approx(np.full(4, math.hypot(vx, vy)), rel=TOL)


@ROUND_TRIP
@given(wz=nonzero_yaw)
def test_4ws_spin_in_place(wz: float) -> None:
    cmd = round_trip(four_ws(), BodyTwist(0.0, 0.0, wz))
    assert np.abs(cmd.speeds) == pytest.approx(np.full(4, abs(wz) * math.hypot(L / 2, B / 2)),
                                               rel=TOL)


@ROUND_TRIP
@given(cx=st.floats(-L / 2 + 1e-3, L / 2 - 1e-3), cy=st.floats(-B / 2 + 1e-3, B / 2 - 1e-3),
       wz=nonzero_yaw)
def test_4ws_turning_centre_inside_the_wheelbase(cx: float, cy: float, wz: float) -> None:
    model = four_ws()
    # Rotation about (cx, cy): the body origin moves at wz x (0 - c).
    twist = BodyTwist(wz * cy, -wz * cx, wz)
    cmd = round_trip(model, twist)
    radii = np.hypot(model.x - cx, model.y - cy)
    assert np.abs(cmd.speeds) == pytest.approx(abs(wz) * radii, rel=1e-9, abs=1e-12)


@ROUND_TRIP
@given(vx=speed, vy=speed, wz=yaw, limit=st.sampled_from([math.pi / 2, 1.9, 2.6, math.pi]))
def test_4ws_steering_limit_flips(vx: float, vy: float, wz: float, limit: float) -> None:
    cmd = round_trip(four_ws(limit), BodyTwist(vx, vy, wz))
    assert np.all(np.abs(cmd.angles) <= limit)


def test_4ws_flip_negates_speed_and_keeps_the_contact_velocity() -> None:
    model = four_ws(limit=math.pi / 2)
    cmd = model.inverse(BodyTwist(-1.0, 0.5, 0.0))  # contact velocity at 153.4 deg
    assert cmd.angles == pytest.approx(np.full(4, math.atan2(0.5, -1.0) - math.pi))
    assert cmd.speeds == pytest.approx(np.full(4, -math.hypot(1.0, 0.5)))
    wide = four_ws(limit=3.0).inverse(BodyTwist(-1.0, 0.5, 0.0))  # within 3 rad: no flip
    assert wide.angles == pytest.approx(np.full(4, math.atan2(0.5, -1.0)))
    assert wide.speeds == pytest.approx(np.full(4, math.hypot(1.0, 0.5)))


def test_4ws_zero_command_stops_and_holds_the_steering() -> None:
    hold = np.array([0.3, -0.2, 0.1, 0.0])
    cmd = four_ws().inverse(BodyTwist(), held_angles=hold)
    assert np.array_equal(cmd.speeds, np.zeros(4))
    assert np.array_equal(cmd.angles, hold)
    assert cmd.feasible


def test_4ws_direction_outside_a_narrow_steering_range_is_a_stop() -> None:
    hold = np.array([0.1, 0.1, 0.1, 0.1])
    cmd = four_ws(limit=1.2).inverse(BodyTwist(0.0, 1.0, 0.0), held_angles=hold)  # 90 deg crab
    assert not cmd.feasible and "max_steer_angle_rad" in cmd.note
    assert np.array_equal(cmd.speeds, np.zeros(4)) and np.array_equal(cmd.angles, hold)
    assert_twist(cmd.achieved, BodyTwist(), 0.0)


@ROUND_TRIP
@given(vx=speed, vy=speed, wz=yaw, noise=st.lists(st.floats(-0.01, 0.01), min_size=8,
                                                  max_size=8))
def test_4ws_direct_is_the_least_squares_fit(vx: float, vy: float, wz: float,
                                             noise: list[float]) -> None:
    """With inconsistent measurements the direct model is the least-squares twist of the four
    contact velocities (checked against numpy's lstsq)."""
    model = four_ws()
    cmd = model.inverse(BodyTwist(vx, vy, wz))
    speeds, angles = cmd.speeds + noise[:4], cmd.angles + noise[4:]
    rows = [[1.0, 0.0, -y] for y in model.y] + [[0.0, 1.0, x] for x in model.x]
    rhs = np.concatenate([speeds * np.cos(angles), speeds * np.sin(angles)])
    expected = np.linalg.lstsq(np.array(rows), rhs, rcond=None)[0]
    assert model.direct(speeds, angles).as_array() == pytest.approx(expected, abs=TOL)


# --- Ackermann ------------------------------------------------------------------------------


@ROUND_TRIP
@given(vx=nonzero_speed, delta=st.floats(-0.6, 0.6),
       feedback=st.sampled_from(["mean", "fl", "fr"]))
def test_ackermann_turns_forward_and_reverse(vx: float, delta: float, feedback: str) -> None:
    """Left and right turns, forward and reverse: the sign of every angle follows wz/vx."""
    wz = vx * math.tan(delta) / L
    cmd = round_trip(ackermann(feedback=feedback), BodyTwist(vx, 0.0, wz))
    assert cmd.extra["bicycle_angle_rad"] == pytest.approx(delta, abs=TOL)
    if abs(delta) > 1e-9:
        assert np.all(np.sign(cmd.angles) == math.copysign(1.0, delta))
    assert cmd.speeds == pytest.approx([vx - wz * B / 2, vx + wz * B / 2], abs=TOL)


@ROUND_TRIP
@given(vx=nonzero_speed)
def test_ackermann_straight_has_no_cot_singularity(vx: float) -> None:
    cmd = round_trip(ackermann(), BodyTwist(vx, 0.0, 0.0))
    assert np.array_equal(cmd.angles, np.zeros(2))


@ROUND_TRIP
@given(vx=st.floats(0.05, 5.0), sign=st.sampled_from([-1.0, 1.0]),
       frac=st.floats(0.9, 1.0))
def test_ackermann_tight_turn_at_the_steering_limit(vx: float, sign: float, frac: float
                                                    ) -> None:
    model = ackermann(limit=1.2)
    wz = sign * frac * model.max_curvature_1_m * vx
    cmd = round_trip(model, BodyTwist(vx, 0.0, wz))
    assert max(abs(cmd.angles)) == pytest.approx(1.2 * frac, rel=0.1)
    assert max(abs(cmd.angles)) <= 1.2 + TOL


def test_ackermann_inner_wheel_satisfies_the_cot_relation() -> None:
    cmd = ackermann().inverse(BodyTwist(1.0, 0.0, 0.3))
    cot = 1 / math.tan(cmd.extra["bicycle_angle_rad"])
    assert 1 / math.tan(cmd.angles[0]) == pytest.approx(cot - B / (2 * L))
    assert 1 / math.tan(cmd.angles[1]) == pytest.approx(cot + B / (2 * L))


def test_ackermann_yaw_without_speed_is_infeasible_stop_with_steering_held() -> None:
    hold = np.array([0.25, 0.2])
    cmd = ackermann().inverse(BodyTwist(0.0, 0.0, 0.4), held_angles=hold)
    assert not cmd.feasible and "vx = 0" in cmd.note
    assert np.array_equal(cmd.speeds, np.zeros(2)) and np.array_equal(cmd.angles, hold)
    assert_twist(cmd.achieved, BodyTwist(), 0.0)


def test_ackermann_past_the_steering_limit_is_infeasible_stop() -> None:
    model = ackermann(limit=0.5)
    cmd = model.inverse(BodyTwist(1.0, 0.0, 0.6), held_angles=np.array([0.1, 0.1]))
    assert not cmd.feasible and "max_steer_angle_rad = 0.5" in cmd.note
    assert np.array_equal(cmd.speeds, np.zeros(2))
    assert np.array_equal(cmd.angles, [0.1, 0.1])


def test_ackermann_lateral_is_reported_and_dropped() -> None:
    cmd = ackermann().inverse(BodyTwist(1.0, 0.3, 0.1))
    assert not cmd.feasible and "lateral" in cmd.note
    assert_twist(cmd.achieved, BodyTwist(1.0, 0.0, 0.1), 0.0)


def test_ackermann_zero_command_holds_steering() -> None:
    cmd = ackermann().inverse(BodyTwist(), held_angles=np.array([0.3, 0.25]))
    assert cmd.feasible and np.array_equal(cmd.angles, [0.3, 0.25])
    assert np.array_equal(cmd.speeds, np.zeros(2))


def test_ackermann_direct_rejects_angles_outside_the_geometry() -> None:
    with pytest.raises(InvalidInputError, match="outside the Ackermann geometry"):
        ackermann().direct(np.array([1.0, 1.0]), np.array([-1.45, -1.45]))


# --- skid-steer -----------------------------------------------------------------------------


@ROUND_TRIP
@given(vx=speed, wz=yaw, slip=st.floats(1.0, 2.5))
def test_skid_steer_straight_spin_reverse_and_centre_between_the_tracks(
        vx: float, wz: float, slip: float) -> None:
    model = skid(slip)
    cmd = round_trip(model, BodyTwist(vx, 0.0, wz))
    b_eff = B * slip
    assert cmd.speeds == pytest.approx([vx - wz * b_eff / 2, vx + wz * b_eff / 2], abs=TOL)
    if wz != 0.0 and abs(vx / wz) < b_eff / 2:  # turning centre between the tracks
        assert cmd.speeds[0] * cmd.speeds[1] <= 0.0


def test_skid_steer_lateral_is_reported_and_zeroed() -> None:
    cmd = skid().inverse(BodyTwist(1.0, 0.4, 0.2))
    assert not cmd.feasible and "lateral" in cmd.note
    assert_twist(cmd.achieved, BodyTwist(1.0, 0.0, 0.2), 0.0)
    assert cmd.speeds == pytest.approx([1.0 - 0.2 * B / 2, 1.0 + 0.2 * B / 2])


# --- saturation -----------------------------------------------------------------------------


@ROUND_TRIP
@given(vx=speed, vy=speed, wz=yaw, which=st.sampled_from(["4wd4ws", "ackermann", "skid_steer"]))
def test_saturation_keeps_the_turning_centre_and_reports_the_achieved_twist(
        vx: float, vy: float, wz: float, which: str) -> None:
    vmax = 1.0
    model = {"4wd4ws": four_ws(vmax=vmax), "ackermann": ackermann(vmax=vmax),
             "skid_steer": skid(vmax=vmax)}[which]
    if which != "4wd4ws":
        vy = 0.0
    if which == "ackermann":
        assume(abs(vx) > 1e-3 and abs(wz / vx) < model.max_curvature_1_m)
    twist = BodyTwist(vx, vy, wz)
    cmd = round_trip(model, twist, exact=False)
    assert cmd.feasible
    assert float(np.max(np.abs(cmd.speeds), initial=0.0)) <= vmax * (1 + 1e-12)
    assert_twist(cmd.achieved, BodyTwist(vx * cmd.scale, vy * cmd.scale, wz * cmd.scale), 0.0)
    if cmd.scale < 1.0:
        assert float(np.max(np.abs(cmd.speeds))) == pytest.approx(vmax, rel=1e-12)
        centre, achieved_centre = turning_centre(twist), turning_centre(cmd.achieved)
        assert achieved_centre == pytest.approx(centre, rel=1e-9)
        # Steering angles (the path's geometry) are the unsaturated ones.
        assert cmd.angles == pytest.approx(
            type(model).from_params(_params_without_limit(model)).inverse(twist).angles)


def _params_without_limit(model: VehicleModel) -> dict[str, float | str]:
    if isinstance(model, FourWheelSteerModel):
        return {"wheelbase_m": L, "track_m": B, "max_wheel_speed_m_s": FAST}
    if isinstance(model, AckermannModel):
        return {"wheelbase_m": L, "front_track_m": B, "rear_track_m": B,
                "max_steer_angle_rad": 1.2, "max_wheel_speed_m_s": FAST}
    return {"track_width_m": B, "max_wheel_speed_m_s": FAST}


def test_saturation_example_numbers() -> None:
    """Skid-steer, 2 m/s and 1 rad/s on b = 1.5 m with a 1.5 m/s limit: the right track would
    need 2.75 m/s, so everything scales by 1.5/2.75."""
    cmd = skid(vmax=1.5).inverse(BodyTwist(2.0, 0.0, 1.0))
    assert cmd.scale == pytest.approx(1.5 / 2.75)
    assert cmd.speeds == pytest.approx([1.25 * 1.5 / 2.75, 1.5])
    assert_twist(cmd.achieved, BodyTwist(2.0 * 1.5 / 2.75, 0.0, 1.5 / 2.75))


# --- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("field", ["vx", "vy", "wz"])
def test_non_finite_twist_is_a_clear_error(bad: float, field: str) -> None:
    twist = BodyTwist(**{field: bad})
    for model in (four_ws(), ackermann(), skid()):
        with pytest.raises(InvalidInputError, match=rf"twist\.{field} = "):
            model.inverse(twist)


def test_non_finite_or_misshaped_measurements_are_clear_errors() -> None:
    with pytest.raises(InvalidInputError, match="NaN/inf"):
        four_ws().direct(np.array([1.0, 1.0, math.nan, 1.0]), np.zeros(4))
    with pytest.raises(InvalidInputError, match="expected 2 values"):
        skid().direct(np.zeros(3), np.zeros(0))
    with pytest.raises(InvalidInputError, match="held steering angles"):
        ackermann().inverse(BodyTwist(), held_angles=np.array([math.inf, 0.0]))


@pytest.mark.parametrize(("name", "params", "message"), [
    ("skid_steer", {"track_width_m": -1.0}, r"track_width_m = -1.0 m is outside \(0, 50\]"),
    ("skid_steer", {"slip_factor": 0.5}, r"slip_factor = 0.5 .* outside \[1, 4\]"),
    ("skid_steer", {"track_width_m": math.nan}, r"track_width_m = nan"),
    ("skid_steer", {"track_width_m": "wide"}, r"track_width_m = 'wide' is not a number"),
    ("skid_steer", {"track_width_m": True}, r"track_width_m = True is not a number"),
    ("ackermann", {"wheelbase_m": 0.0}, r"wheelbase_m = 0.0 m is outside"),
    ("ackermann", {"max_steer_angle_rad": 1.6}, r"max_steer_angle_rad = 1.6 rad .*1.5\]"),
    ("ackermann", {"steer_feedback": "both"}, r"steer_feedback = 'both'"),
    ("4wd4ws", {"max_wheel_speed_m_s": math.inf}, r"max_wheel_speed_m_s = inf"),
    ("4wd4ws", {"track_width_m": 1.5}, r"unknown parameter\(s\) \['track_width_m'\]"),
    ("tank", {}, r"vehicle model 'tank' is unknown"),
])
def test_invalid_parameters_name_the_parameter_and_range(name: str, params: dict, message: str
                                                         ) -> None:
    with pytest.raises(ConfigError, match=message):
        make_vehicle_model(name, params)


def test_factory_defaults() -> None:
    model = make_vehicle_model("ackermann", {})
    assert (model.wheelbase_m, model.front_track_m, model.rear_track_m) == (2.0, 1.5, 1.5)
    assert make_vehicle_model("skid_steer", {"slip_factor": 1.4}).b_eff_m == pytest.approx(2.1)


# --- ARTOF lateral sign ---------------------------------------------------------------------


def test_artof_lateral_sign_is_a_parameter() -> None:
    assert lateral_sign() == 1.0 and lateral_sign("right") == -1.0
    assert twist_from_artof(1.0, 0.2, 0.3) == BodyTwist(1.0, 0.2, 0.3)
    right = twist_from_artof(1.0, 0.2, 0.3, lateral_positive="right")
    assert right == BodyTwist(1.0, -0.2, 0.3)
    assert artof_from_twist(right, lateral_positive="right") == (1.0, 0.2, 0.3)
    with pytest.raises(ConfigError, match="lateral_positive = 'up'"):
        lateral_sign("up")


# --- the seed's errors, each pinned at l = 2.0 m, b = 1.5 m, a = 0.8 m -------------------------


def seed_4ws_direct_yaw(speeds: np.ndarray, angles: np.ndarray) -> float:
    """Seed: w = (l/2)([v_rl sin e_rl + v_rr sin e_rr] - [v_fl sin e_fl + v_fr sin e_fr])."""
    lat = speeds * np.sin(angles)
    return L / 2 * ((lat[2] + lat[3]) - (lat[0] + lat[1]))


def seed_4ws_wheel_speeds(v: float, forward: float, w: float, gamma: float = 0.0
                          ) -> np.ndarray:
    """Seed's inverse ground speeds v_fl, v_fr, v_rl, v_rr (its omega_w times D_w/2)."""
    R = v / w
    AE = BF = L / 2 + R * math.sin(gamma)
    EC = FD = L / 2 - R * math.sin(gamma)
    OE, OF = R * math.cos(gamma) - B / 2, R * math.cos(gamma) + B / 2
    R_fl, R_fr = math.hypot(AE, OE), math.hypot(OF, BF)
    R_rl, R_rr = math.hypot(OE, EC), math.hypot(OF, FD)
    dv_f, dv_r = abs((R_fl - R_fr) * w), abs((R_rl - R_rr) * w)
    sy, sw = np.sign(forward), np.sign(w)
    return np.array([sy * (-sw * dv_f / 2 + v), sy * (sw * dv_f / 2 + v),
                     sy * (-sw * dv_r / 2 + v), sy * (sw * dv_r / 2 + v)])


def test_seed_4ws_direct_yaw_rate_has_wrong_unit_factor_and_sign() -> None:
    model = four_ws()
    w = 0.5
    cmd = model.inverse(BodyTwist(1.0, 0.0, w))
    seed = seed_4ws_direct_yaw(cmd.speeds, cmd.angles)
    assert seed == pytest.approx(-(L**2) * w)  # -2.0 rad/s "for" +0.5 rad/s
    assert model.direct(cmd.speeds, cmd.angles).wz == pytest.approx(w, abs=TOL)


def test_seed_4ws_inverse_wheel_speeds_are_16_percent_low_at_r_2m() -> None:
    w, R = 0.5, 2.0
    cmd = four_ws().inverse(BodyTwist(w * R, 0.0, w))
    exact_fl = w * math.hypot(L / 2, R - B / 2)  # w * R_fl = 0.8004 m/s
    seed_fl = seed_4ws_wheel_speeds(w * R, w * R, w)[0]  # 0.6687 m/s
    assert (exact_fl - seed_fl) / exact_fl == pytest.approx(0.165, abs=0.005)
    assert cmd.speeds[0] == pytest.approx(exact_fl, rel=1e-12)
    model = four_ws()
    radii = np.hypot(model.x, model.y - R)
    assert cmd.speeds == pytest.approx(w * radii, rel=1e-12)


def test_seed_4ws_sgn_ydot_kills_crab_and_spin() -> None:
    model = four_ws()
    # Pure crab at 1 m/s: the seed's forward speed ydot = 0, so sgn(ydot) zeroes every wheel.
    seed_crab = seed_4ws_wheel_speeds(1.0, 0.0, 1e-9)
    assert np.all(seed_crab == 0.0)
    crab = model.inverse(BodyTwist(0.0, 1.0, 0.0))
    assert np.abs(crab.speeds) == pytest.approx(np.ones(4))
    assert np.abs(crab.angles) == pytest.approx(np.full(4, math.pi / 2))
    # Spin in place at 0.5 rad/s: v = 0, so sgn(ydot) = 0 (and R = v/w = 0).
    seed_spin = seed_4ws_wheel_speeds(0.0, 0.0, 0.5)
    assert np.all(seed_spin == 0.0)
    spin = model.inverse(BodyTwist(0.0, 0.0, 0.5))
    assert np.abs(spin.speeds) == pytest.approx(np.full(4, 0.5 * math.hypot(L / 2, B / 2)))
    # Driving straight: the seed's R = v/w divides by zero.
    with pytest.raises(ZeroDivisionError):
        seed_4ws_wheel_speeds(1.0, 1.0, 0.0)
    assert model.inverse(BodyTwist(1.0, 0.0, 0.0)).speeds == pytest.approx(np.ones(4))


def seed_ackermann_epsilon(v: float, w: float) -> float:
    """Seed: epsilon = acot(sqrt((v/w)^2 - a^2) / l^2)."""
    return math.atan(L**2 / math.sqrt((v / w) ** 2 - A**2))


def test_seed_ackermann_l_squared_gives_50_2_deg_instead_of_31_0() -> None:
    vx, w = 1.0, 0.3
    v_m = math.hypot(vx, w * A)  # the centre of mass, a ahead of the rear axle
    assert v_m == pytest.approx(1.028, abs=5e-4)
    assert math.degrees(seed_ackermann_epsilon(v_m, w)) == pytest.approx(50.2, abs=0.05)
    cmd = ackermann().inverse(BodyTwist(vx, 0.0, w))
    assert math.degrees(cmd.extra["bicycle_angle_rad"]) == pytest.approx(31.0, abs=0.05)
    assert cmd.extra["bicycle_angle_rad"] == pytest.approx(math.atan(L * w / vx), rel=1e-12)


def test_seed_ackermann_tight_turn_nan_and_lost_signs() -> None:
    # v/w = 0.7 m < a = 0.8 m: the seed's sqrt(R^2 - a^2) is NaN.
    with pytest.raises(ValueError, match="math domain error"):
        seed_ackermann_epsilon(0.35, 0.5)
    cmd = ackermann(limit=1.5).inverse(BodyTwist(0.35, 0.0, 0.5), held_angles=np.zeros(2))
    assert math.degrees(cmd.extra["bicycle_angle_rad"]) == pytest.approx(70.71, abs=0.01)
    # The inner wheel would pass 90 deg: a reported stop, never NaN setpoints.
    assert not cmd.feasible and np.all(np.isfinite(cmd.angles)) and np.all(cmd.speeds == 0.0)
    # Right turns and reverse: the seed's sqrt((v/w)^2 ...) loses both signs.
    model = ackermann()
    assert seed_ackermann_epsilon(1.0, -0.3) == seed_ackermann_epsilon(-1.0, 0.3) > 0.0
    assert model.inverse(BodyTwist(1.0, 0.0, -0.3)).extra["bicycle_angle_rad"] < 0.0
    reverse = model.inverse(BodyTwist(-1.0, 0.0, 0.3))
    assert reverse.extra["bicycle_angle_rad"] < 0.0 and np.all(reverse.speeds < 0.0)
    assert model.direct(reverse.speeds, reverse.angles).wz == pytest.approx(0.3, abs=TOL)


def seed_skid_left(v: float, w: float, a: float) -> float:
    """Seed: v_l = 2v / ((R+a)/(R-a) + 1), R = v/w (a = half the track width)."""
    R = np.float64(v) / np.float64(w)
    return float(2 * v / ((R + a) / (R - a) + 1))


def test_seed_skid_steer_divides_by_zero_straight_and_on_the_spot() -> None:
    a = B / 2
    model = skid()
    with np.errstate(divide="ignore", invalid="ignore"):
        assert math.isnan(seed_skid_left(1.0, 0.0, a))  # straight: R = inf
        assert math.isnan(seed_skid_left(0.0, 0.5, a))  # on the spot: R = 0
        # Elsewhere the seed's form equals v - w*a.
        assert seed_skid_left(1.0, 0.5, a) == pytest.approx(1.0 - 0.5 * a)
    assert model.inverse(BodyTwist(1.0, 0.0, 0.0)).speeds == pytest.approx([1.0, 1.0])
    assert model.inverse(BodyTwist(0.0, 0.0, 0.5)).speeds == pytest.approx([-0.375, 0.375])


# --- batched (vectorized) inverse and direct --------------------------------------------------

twist_rows = st.lists(st.tuples(speed, speed, yaw), min_size=1, max_size=30)


@settings(max_examples=60, deadline=None)
@given(rows=twist_rows, which=st.sampled_from(["4wd4ws", "4wd4ws_narrow", "ackermann",
                                               "skid_steer"]),
       zero_vx=st.booleans())
def test_batched_inverse_and_direct_equal_the_scalar_ones(
        rows: list[tuple[float, float, float]], which: str, zero_vx: bool) -> None:
    """Every row of ``inverse_many``/``direct_many`` equals ``inverse``/``direct`` of that row,
    infeasible rows (lateral, vx = 0 with yaw, steering limit) included."""
    model = {"4wd4ws": four_ws(vmax=3.0), "4wd4ws_narrow": four_ws(limit=1.2, vmax=3.0),
             "ackermann": ackermann(limit=0.7, vmax=3.0), "skid_steer": skid(vmax=3.0)}[which]
    vx, vy, wz = (np.array(c) for c in zip(*rows, strict=True))
    if zero_vx:
        vx[::2] = 0.0
    hold = np.full(len(model.steer_names), 0.05)
    batch = model.inverse_many(vx, vy, wz, hold if hold.size else None)
    back = model.direct_many(batch.speeds, batch.angles)
    for i in range(len(rows)):
        one = model.inverse(BodyTwist(vx[i], vy[i], wz[i]), hold if hold.size else None)
        # Two implementations (numpy vs math, wheel by wheel): equal to rounding.
        assert batch.speeds[i] == pytest.approx(one.speeds, rel=1e-12, abs=1e-12)
        assert batch.angles[i] == pytest.approx(one.angles, rel=1e-12, abs=1e-12)
        assert batch.achieved[i] == pytest.approx(one.achieved.as_array(), rel=1e-12, abs=1e-12)
        assert bool(batch.feasible[i]) == one.feasible
        assert batch.scale[i] == pytest.approx(one.scale, rel=1e-12)
        assert (one.note != "") == (batch.reasons[i] != 0)
        assert back[i] == pytest.approx(model.direct(one.speeds, one.angles).as_array(),
                                        abs=1e-12)
        assert back[i] == pytest.approx(batch.achieved[i], abs=TOL)


def test_batched_input_errors_name_the_row() -> None:
    with pytest.raises(InvalidInputError, match=r"twist\.wz = nan rad/s \(row 2\)"):
        four_ws().inverse_many([0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, math.nan])
    with pytest.raises(InvalidInputError, match="one length"):
        skid().inverse_many([0.0, 1.0], [0.0], [0.0, 0.0])
    with pytest.raises(InvalidInputError, match="per row"):
        ackermann().direct_many(np.zeros((3, 2)), np.zeros((3, 3)))
