"""The wheeled drive train's pure core (excavator_sim.drivetrain: tyre, steering, wheeled; no
ROS, no MuJoCo): the brush model's law and its Jacobian, the steering actuator's rate limit,
end stops and hold, and the vehicle: rolling resistance, straight running, the kinematic turn,
the friction circle in a slide, the holding brake on a slope, the drive's torque limit, a
stable step at any size. Simulated time only."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from excavator_sim.drivetrain.grade import slope_attitude
from excavator_sim.drivetrain.hydrostatic import HydrostaticDriveParams
from excavator_sim.drivetrain.implicit_step import ExternalLoad
from excavator_sim.drivetrain.steering import SteeringActuator, SteeringParams
from excavator_sim.drivetrain.tyre import (
    TyreParams,
    brush_force,
    rolling_resistance_torque,
    tyre_force,
)
from excavator_sim.drivetrain.wheeled import (
    SAFE_WHEELED_COMMAND,
    WHEELS,
    WheeledCommand,
    WheeledGround,
    WheeledParams,
    WheeledVehicle,
    WheelGeometry,
)
from excavator_sim.errors import CommandError, SimConfigError

G = 9.81
MASS = 11124.0
INERTIA = MASS * 1.4**2
TYRE = TyreParams(friction=0.8, cornering_coefficient_1_rad=5.0, rolling_resistance=0.02,
                  radius_m=0.48)
DRIVE = HydrostaticDriveParams(relief_pressure_pa=35e6, motor_displacement_m3=40e-6,
                               gear_ratio=35.0, time_constant_s=0.1,
                               rotating_inertia_kg_m2=30.0, brake_torque_nm=9400.0,
                               speed_limit_rad_s=3.5 / 0.48)
STEER = SteeringParams(max_angle_rad=0.63, max_rate_rad_s=0.35, time_constant_s=0.05)
GEOMETRY = WheelGeometry(wheelbase_m=2.6, track_m=1.95, wheel_radius_m=0.48)
ACKERMANN = WheeledParams(GEOMETRY, ("rl", "rr"), ("fl", "fr"), DRIVE, STEER, TYRE,
                          wheel_inertia_kg_m2=24.0)
ALL4 = WheeledParams(GEOMETRY, WHEELS, WHEELS, DRIVE,
                     SteeringParams(1.6, 0.35, 0.05), TYRE)
LIMIT = DRIVE.torque_limit_nm


def vehicle(params: WheeledParams = ALL4) -> WheeledVehicle:
    return WheeledVehicle(params, MASS, INERTIA)


def drive(v: WheeledVehicle, torque: float | tuple[float, ...], seconds: float,
          dt: float = 0.01, rates: tuple[float, ...] = (), ground: WheeledGround | None = None
          ) -> None:
    torques = torque if isinstance(torque, tuple) else (torque,) * len(v.params.driven)
    for _ in range(round(seconds / dt)):
        v.step(dt, WheeledCommand(torques, rates, True, False), ground)


# --- tyre ----------------------------------------------------------------------------------
def test_brush_force_is_linear_at_small_slip_and_saturates_at_the_friction_circle() -> None:
    load = 27.0e3
    mag, slope = brush_force(1e-4, load, 0.8, 5.0)
    assert mag == pytest.approx(5.0 * load * 1e-4, rel=1e-3)      # C sigma, C = c F_z
    assert slope == pytest.approx(5.0 * load, rel=1e-3)
    # full sliding from |sigma| = 3 mu / c on: mu F_z
    assert brush_force(3 * 0.8 / 5.0, load, 0.8, 5.0) == (pytest.approx(0.8 * load), 0.0)
    assert brush_force(1.0, load, 0.8, 5.0)[0] == pytest.approx(0.8 * load)
    # Pacejka's brush curve in between: mu F_z (1 - lambda^3), lambda = 1 - theta sigma
    theta = 5.0 / (3 * 0.8)
    assert brush_force(0.2, load, 0.8, 5.0)[0] == pytest.approx(
        0.8 * load * (1 - (1 - theta * 0.2) ** 3))
    assert brush_force(0.3, 0.0, 0.8, 5.0) == (0.0, 0.0)   # a wheel off the ground


@settings(max_examples=200, deadline=None)
@given(dx=st.floats(-2.0, 2.0), dy=st.floats(-2.0, 2.0), scale=st.floats(0.002, 3.0),
       load=st.floats(1e3, 5e4))
def test_tyre_force_follows_the_slip_within_the_friction_circle(dx: float, dy: float,
                                                                 scale: float,
                                                                 load: float) -> None:
    """The force points along the slip velocity (it resists the sliding, never drives it),
    never leaves the friction circle, and its Jacobian is the derivative (finite differences)
    and positive semi-definite: what keeps the implicit step a convex minimisation."""
    fx, fy, (hxx, hxy, hyy) = tyre_force(dx, dy, scale, load, TYRE)
    assert math.hypot(fx, fy) <= 0.8 * load * (1 + 1e-12)
    assert fx * dx + fy * dy >= 0.0
    assert abs(fx * dy - fy * dx) <= 1e-9 * max(1.0, math.hypot(fx, fy))   # parallel
    assert hxx >= -1e-9 and hyy >= -1e-9 and hxx * hyy - hxy * hxy >= -1e-6 * (hxx + hyy) ** 2
    h = 1e-7 * max(scale, math.hypot(dx, dy))
    for (ddx, ddy), col in (((h, 0.0), (hxx, hxy)), ((0.0, h), (hxy, hyy))):
        f1 = tyre_force(dx + ddx, dy + ddy, scale, load, TYRE)
        f0 = tyre_force(dx - ddx, dy - ddy, scale, load, TYRE)
        num = ((f1[0] - f0[0]) / (2 * h), (f1[1] - f0[1]) / (2 * h))
        tol = 1e-4 * (TYRE.cornering_coefficient_1_rad * load / scale) + 1e-6
        assert num[0] == pytest.approx(col[0], abs=tol)
        assert num[1] == pytest.approx(col[1], abs=tol)


def test_rolling_resistance_opposes_the_rotation() -> None:
    m, dm = rolling_resistance_torque(1.0, 27.0e3, TYRE, 0.002)
    assert m == pytest.approx(-0.02 * 27.0e3 * 0.48, rel=1e-5)
    assert rolling_resistance_torque(-1.0, 27.0e3, TYRE, 0.002)[0] == pytest.approx(-m)
    assert rolling_resistance_torque(0.0, 27.0e3, TYRE, 0.002)[0] == 0.0
    assert dm < 0.0


@pytest.mark.parametrize(("field", "value"), [("friction", 0.0), ("friction", math.nan),
                                              ("cornering_coefficient_1_rad", 500.0),
                                              ("rolling_resistance", -0.1), ("radius_m", 480.0)])
def test_bad_tyre_parameters_are_named(field: str, value: float) -> None:
    kwargs = {"friction": 0.8, "cornering_coefficient_1_rad": 5.0, "rolling_resistance": 0.02,
              "radius_m": 0.48, field: value}
    with pytest.raises(SimConfigError, match=rf"tyre: {field} = .* is outside .*set it"):
        TyreParams(**kwargs)


# --- steering actuator -----------------------------------------------------------------------
def test_steering_is_rate_limited_reaches_its_end_stop_and_holds_when_inactive() -> None:
    act = SteeringActuator(STEER)
    for _ in range(100):                       # 1 s at 10 rad/s commanded: the rate limit
        act.step(10.0, True, 0.01)
    assert act.rate_rad_s == pytest.approx(0.35, rel=1e-6)
    # exact first-order start: 0.35 (1 s - T (1 - e^(-1/T)))
    assert act.angle_rad == pytest.approx(0.35 * (1.0 - 0.05 * (1 - math.exp(-20.0))), rel=1e-9)
    for _ in range(300):
        act.step(10.0, True, 0.01)
    assert act.angle_rad == 0.63 and act.rate_rad_s == 0.0      # at the end stop
    held = act.angle_rad
    for _ in range(100):
        act.step(-10.0, False, 0.01)           # valve closed: the command does nothing
    assert act.angle_rad == held
    act.step(-10.0, True, 0.01)                 # active again: off the end stop
    assert act.angle_rad < held


@settings(max_examples=100, deadline=None)
@given(commands=st.lists(st.tuples(st.floats(-20.0, 20.0), st.booleans()), min_size=1,
                         max_size=60),
       dt=st.sampled_from([0.001, 0.01, 0.05]))
def test_steering_never_passes_its_end_stops_nor_its_rate(
        commands: list[tuple[float, bool]], dt: float) -> None:
    act = SteeringActuator(STEER)
    for rate, active in commands:
        before = act.angle_rad
        act.step(rate, active, dt)
        assert abs(act.angle_rad) <= STEER.max_angle_rad
        assert abs(act.angle_rad - before) <= STEER.max_rate_rad_s * dt * (1 + 1e-9)


# --- vehicle ---------------------------------------------------------------------------------
def test_a_machine_rolling_free_slows_with_the_rolling_resistance() -> None:
    """Drives enabled at zero torque: the 2 % rolling resistance is the only force; the machine
    decelerates at f_r g (the wheels' inertia adds a little mass)."""
    v = vehicle()
    v.velocity[0] = 2.0
    v.velocity[3:] = 2.0 / 0.48
    drive(v, 0.0, 2.0)
    m_eff = MASS + 4 * DRIVE.rotating_inertia_kg_m2 / 0.48**2
    decel = 0.02 * MASS * G / m_eff
    assert v.velocity[0] == pytest.approx(2.0 - decel * 2.0, rel=2e-3)
    assert abs(v.velocity[1]) < 1e-9 and abs(v.velocity[2]) < 1e-9


def test_equal_torques_drive_straight_and_the_slip_carries_the_resistance() -> None:
    v = vehicle()
    drive(v, 1500.0, 2.0)
    assert abs(v.velocity[1]) < 1e-9 and abs(v.velocity[2]) < 1e-9
    assert v.velocity[0] > 1.0
    for w in WHEELS:
        reading = v.wheels[w]
        assert reading.speed_m_s > v.velocity[0]           # driving: the tread is faster
        assert 0.0 < reading.slip < 0.05
        assert reading.torque_nm == pytest.approx(1500.0, rel=1e-3)


def test_steered_front_wheels_turn_the_machine_on_the_kinematic_circle() -> None:
    """Front wheels on Ackermann's condition at walking speed: no lateral slip to speak of, so
    the rear axle's centre runs on the circle of radius l / tan(delta) (yaw rate
    v tan(delta) / l within 2 %), the front wheels roll freely and the rear axle has no side
    speed."""
    v = vehicle(ACKERMANN)
    delta = 0.2
    radius = 2.6 / math.tan(delta)            # of the rear axle's centre
    v.steering["fl"].angle_rad = math.atan(2.6 / (radius - 0.975))   # Ackermann's condition
    v.steering["fr"].angle_rad = math.atan(2.6 / (radius + 0.975))
    torque = 2000.0
    drive(v, torque, 3.0)
    # hold the speed near 1 m/s with the torque the resistance needs
    for _ in range(1000):
        rear = v.twist_at(-1.3, 0.0)[0]
        t = 0.02 * MASS * G * 0.48 / 2 + 5000.0 * (1.0 - rear)
        v.step(0.01, WheeledCommand((t, t), (), True, False))
    vx, vy, wz = v.twist_at(-1.3, 0.0)
    assert vx == pytest.approx(1.0, abs=0.02)
    assert wz == pytest.approx(vx * math.tan(delta) / 2.6, rel=0.02)
    assert abs(vy) < 0.01 * abs(vx)
    assert v.wheels["fl"].torque_nm == 0.0 and v.wheels["fl"].speed_m_s > 0.9


def test_a_turn_too_fast_for_the_ground_slides_at_the_friction_limit() -> None:
    """Full lock at speed on a slippery ground (mu 0.3): the tyres saturate; the lateral
    acceleration never exceeds mu g and the machine turns wider than the kinematic circle."""
    v = vehicle(ACKERMANN)
    ground = WheeledGround(friction=0.3)
    v.velocity[0] = 5.0                        # kinematic: v^2 tan(0.6) / l = 0.67 g
    v.velocity[3:] = 5.0 / 0.48
    for name in ("fl", "fr"):
        v.steering[name].angle_rad = 0.6
    worst = 0.0
    for _ in range(100):
        v.step(0.01, WheeledCommand((0.0, 0.0), (), True, False), ground)
        worst = max(worst, abs(float(v.specific_force[1])))
    assert 0.2 * G < worst <= 0.3 * G * 1.01
    kinematic = float(v.velocity[0]) * math.tan(0.6) / 2.6
    assert 0.0 < v.velocity[2] < 0.8 * kinematic


def test_the_holding_brakes_hold_on_a_12_degree_slope() -> None:
    """Cat's drift check (research 2.2): braked, engine off, 12 deg, 3 minutes: the brakes hold
    the wheels, and the tyres creep no more than the slip regularisation allows: a stuck tread
    carries the slope's pull at a slip velocity ``floor * tan(12 deg) / c`` (the brush law's
    linear part; 0.085 mm/s, ~15 mm in 3 min), not zero (docs/simulation.md)."""
    v = vehicle()
    ground = WheeledGround(slope_attitude(0.0, math.radians(12.0), 0.0))
    for _ in range(3600):                     # 3 min at a 50 ms step (implicit: stable)
        v.step(0.05, SAFE_WHEELED_COMMAND, ground)
    creep = 0.002 * math.tan(math.radians(12.0)) / 5.0 * 180.0
    assert math.hypot(v.x, v.y) < 1.15 * creep
    assert v.x < 0.0                          # downhill, and only that way
    assert all(v.wheels[w].held for w in WHEELS)


def test_up_a_slope_beyond_the_torque_limit_the_machine_rolls_back() -> None:
    """Full torque on all four wheels gives 4 x 7.8 kN m / 0.48 m = 65 kN (0.6 W): it climbs
    20 deg (0.34 W + 2 % rolling) and cannot hold 40 deg on mu 0.9 (0.64 W + 2 %)."""
    v = vehicle()
    drive(v, LIMIT, 5.0, ground=WheeledGround(slope_attitude(0.0, math.radians(20.0), 0.0)))
    assert v.velocity[0] > 0.5
    w = vehicle()
    steep = WheeledGround(slope_attitude(0.0, math.radians(40.0), 0.0), friction=0.9)
    drive(w, LIMIT, 5.0, ground=steep)
    assert w.velocity[0] < -0.1
    assert all(abs(w.wheels[n].torque_nm - LIMIT) < 1.0 for n in WHEELS)


def test_a_sideways_push_is_carried_by_the_tyres() -> None:
    """The bucket pushing sideways (10 kN): the standing, braked machine does not move; an
    external yaw moment neither."""
    v = vehicle()
    for _ in range(500):
        v.step(0.01, SAFE_WHEELED_COMMAND, None, ExternalLoad((0.0, 1.0e4, 0.0), 5.0e3))
    assert math.hypot(v.x, v.y) < 0.005 and abs(v.yaw) < 0.005


RATES = (0.3, 0.3, -0.3, -0.3)


@functools.cache
def reference_run() -> WheeledVehicle:
    """3 s from rest at 3 kN m a wheel, steering swinging, at a 2 ms step."""
    ref = vehicle()
    drive(ref, 3000.0, 3.0, dt=0.002, rates=RATES)
    return ref


@pytest.mark.parametrize("dt", [0.002, 0.01, 0.05])
def test_the_step_is_stable_and_converges_at_any_step(dt: float) -> None:
    """From rest, torque on every wheel, steering swinging: Newton converges every step; the
    state after 3 s agrees between step sizes (the implicit step is consistent)."""
    v = vehicle()
    drive(v, 3000.0, 3.0, dt=dt, rates=RATES)
    assert v.unconverged == 0
    ref = reference_run()
    assert ref.unconverged == 0
    assert v.velocity[0] == pytest.approx(ref.velocity[0], rel=0.05)
    assert v.velocity[2] == pytest.approx(ref.velocity[2], abs=0.02)


def test_bad_wheeled_parameters_are_named() -> None:
    with pytest.raises(SimConfigError, match=r"driven wheels \['rr', 'rl'\] must be distinct "
                                             r"names of .*in that order"):
        WheeledParams(GEOMETRY, ("rr", "rl"), ("fl", "fr"), DRIVE, STEER, TYRE)
    with pytest.raises(SimConfigError, match=r"wheelbase_m = 2600.0 is outside \[0.5, 10\]"):
        WheelGeometry(2600.0, 1.95, 0.48)
    with pytest.raises(SimConfigError, match=r"tyre's radius 0.5 m differs"):
        WheeledParams(GEOMETRY, WHEELS, WHEELS, DRIVE, STEER,
                      TyreParams(0.8, 5.0, 0.02, 0.5))
    with pytest.raises(SimConfigError, match=r"max_rate_rad_s = 20.0 rad/s is outside"):
        SteeringParams(0.63, 20.0, 0.05)
    with pytest.raises(SimConfigError, match=r"mass 0.0 kg"):
        WheeledVehicle(ALL4, 0.0, 1.0)
    assert np.all(vehicle().slip_velocities() == 0.0)
    with pytest.raises(CommandError, match=r"3 torques and 0 steering rates for a machine that "
                                           r"drives \['rl', 'rr'\]"):
        vehicle(ACKERMANN).step(0.01, WheeledCommand((1.0, 2.0, 3.0), (), True, False))


def test_braking_from_speed_the_brakes_slip_at_their_capacity_and_never_turn_back() -> None:
    """Brakes applied at 3 m/s: each brake slips at its 9.4 kN m (19.6 kN at the tyre, below the
    tyre's 21.8 kN), so the machine stops at about 4 x 19.6 kN / m; no wheel ever turns
    backwards, and the machine stays at rest."""
    v = vehicle()
    v.velocity[0] = 3.0
    v.velocity[3:] = 3.0 / 0.48
    t, stopped_at = 0.0, None
    while t < 2.0:
        v.step(0.01, SAFE_WHEELED_COMMAND)
        t += 0.01
        assert all(v.wheels[w].speed_m_s >= 0.0 for w in WHEELS)
        assert v.velocity[0] >= -1e-6
        if stopped_at is None and all(v.wheels[w].held for w in WHEELS):
            stopped_at = t
    m_eff = MASS + 4 * DRIVE.rotating_inertia_kg_m2 / 0.48**2
    decel = (4 * 9400.0 / 0.48 + 0.02 * MASS * G) / m_eff
    assert stopped_at == pytest.approx(3.0 / decel, abs=0.03)
    assert abs(v.velocity[0]) < 1e-3
