"""The drive train's pure core (excavator_sim.drivetrain: no ROS, no MuJoCo): Janosi-Hanamoto
slip against Wong's closed form, slopes within and beyond the torque limit, the holding brake
on a slope, the bucket's push, and properties (no thrust without slip, the soil never drives
the machine, symmetric tracks drive straight, the grade's frames)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from excavator_sim.drivetrain import (
    SHIPPED_SOILS,
    DriveCommand,
    ExternalLoad,
    Ground,
    HydrostaticDriveParams,
    TrackedVehicle,
    TrackGeometry,
    TractionSoil,
    VehicleParams,
)
from excavator_sim.drivetrain.grade import (
    angular_velocity,
    attitude,
    ground_normal,
    quaternion,
    roll_pitch_yaw,
    slope_attitude,
)
from excavator_sim.drivetrain.traction import slip, steady_slip, thrust

G = 9.81
MASS = 8200.0          # the default machine (config/excavator.yaml masses_kg)
YAW_INERTIA = 2.0e4    # [kg m^2] of the order of the MuJoCo model's
GEOMETRY = TrackGeometry(gauge_m=2.6, contact_length_m=2.43, shoe_width_m=0.45,
                         sprocket_radius_m=0.30)
DRIVE = HydrostaticDriveParams(relief_pressure_pa=27.4e6, motor_displacement_m3=40e-6,
                               gear_ratio=49.0, time_constant_s=0.1,
                               rotating_inertia_kg_m2=15.0, brake_torque_nm=1.0e4,
                               speed_limit_rad_s=1.5 / 0.30)
PARAMS = VehicleParams(GEOMETRY, DRIVE, internal_resistance_ratio=0.02,
                       slip_speed_floor_m_s=0.002)
LIMIT = DRIVE.torque_limit_nm


def soil(name: str) -> TractionSoil:
    return TractionSoil(**SHIPPED_SOILS[name], name=name)


def ground(name: str, pitch_up_deg: float = 0.0, roll_deg: float = 0.0,
           yaw: float = 0.0) -> Ground:
    return Ground(slope_attitude(yaw, math.radians(pitch_up_deg), math.radians(roll_deg)),
                  (soil(name), soil(name)))


class SpeedLoop:
    """The test's own PI speed loop on the measured track speeds (what the PLC does)."""

    def __init__(self, target_m_s: float, kp: float = 2.0e4, ki: float = 4.0e4):
        self.target, self.kp, self.ki = target_m_s, kp, ki
        self.integral = [0.0, 0.0]

    def command(self, vehicle: TrackedVehicle, dt: float) -> DriveCommand:
        out = []
        for i, track in enumerate(vehicle.tracks):
            err = self.target - track.speed_m_s
            torque = self.kp * err + self.ki * self.integral[i]
            if abs(torque) < LIMIT:   # anti-windup: integrate only while not saturated
                self.integral[i] += err * dt
            out.append(min(max(torque, -LIMIT), LIMIT))
        return DriveCommand(out[0], out[1], enable=True, brake=False)


def run(vehicle: TrackedVehicle, seconds: float, dt: float, on: Ground,
        command: DriveCommand | SpeedLoop, load: ExternalLoad | None = None) -> None:
    for _ in range(round(seconds / dt)):
        cmd = command.command(vehicle, dt) if isinstance(command, SpeedLoop) else command
        vehicle.step(dt, cmd, on, load)


# --- Janosi-Hanamoto ---------------------------------------------------------------------
def _closed_form_slip(force_n: float, s: TractionSoil, load_n: float) -> float:
    """The test's own inverse of Wong's closed form F = (A c + W tan phi)[1 - K/(i l)(1 -
    exp(-i l / K))] (bisection), written here independently of the product."""
    area, length, k = GEOMETRY.contact_area_m2, GEOMETRY.contact_length_m, s.shear_modulus_m
    fmax = area * s.cohesion_pa + load_n * math.tan(s.friction_angle_rad)

    def f(i: float) -> float:
        return fmax * (1.0 - k / (i * length) * (1.0 - math.exp(-i * length / k)))

    lo, hi = 1e-9, 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if f(mid) < force_n else (lo, mid)
    return 0.5 * (lo + hi)


def _bekker_resistance(s: TractionSoil, load_n: float) -> float:
    """Compaction resistance of one track from the sinkage z0 (the test's own)."""
    b, length, n = GEOMETRY.shoe_width_m, GEOMETRY.contact_length_m, s.sinkage_exponent
    k = s.sinkage_kc / b + s.sinkage_kphi
    z0 = (load_n / (b * length) / k) ** (1.0 / n)
    return b * k * z0 ** (n + 1.0) / (n + 1.0)


@pytest.mark.parametrize(("soil_name", "drawbar_n"), [("dry_sand", 10e3), ("dry_sand", 25e3),
                                                      ("dry_sand", 38e3), ("lete_sand", 20e3)])
def test_steady_slip_under_a_drawbar_load_is_the_janosi_hanamoto_closed_form(
        soil_name: str, drawbar_n: float) -> None:
    """A drawbar load on soft soil; the tracks held at 1 m/s by a speed loop; at steady state
    each track's slip is the one at which Wong's closed form carries half the load plus its
    compaction resistance (within 5 %)."""
    vehicle = TrackedVehicle(PARAMS, MASS, YAW_INERTIA)
    on = ground(soil_name)
    run(vehicle, 30.0, 0.01, on, SpeedLoop(1.0), ExternalLoad((-drawbar_n, 0.0, 0.0)))
    s = soil(soil_name)
    load = 0.5 * MASS * G
    expected = _closed_form_slip(0.5 * drawbar_n + _bekker_resistance(s, load), s, load)
    for track in vehicle.tracks:
        measured = 1.0 - track.ground_speed_m_s / track.speed_m_s
        assert track.speed_m_s == pytest.approx(1.0, rel=1e-3)
        assert measured == pytest.approx(expected, rel=0.05), (measured, expected)
        assert track.slip == pytest.approx(measured, rel=1e-3)
    assert vehicle.unconverged == 0
    # more load, more slip: a drawbar load near the soil's limit slips far more
    assert expected > 0.003


def test_thrust_is_the_integral_of_the_janosi_hanamoto_shear_along_the_track() -> None:
    """The closed form against a quadrature of tau(j = i x) over the contact length."""
    s = soil("dry_sand")
    load = 0.5 * MASS * G
    area, length, k = GEOMETRY.contact_area_m2, GEOMETRY.contact_length_m, s.shear_modulus_m
    tau_max = s.cohesion_pa + load / area * math.tan(s.friction_angle_rad)
    x = (np.arange(20000) + 0.5) * length / 20000
    for i in (0.001, 0.01, 0.1, 0.5, 1.0):
        integral = float(np.sum(tau_max * (1.0 - np.exp(-i * x / k)))) * GEOMETRY.shoe_width_m \
            * length / x.size
        assert thrust(s.max_thrust_n(area, load), i, length, k) == pytest.approx(integral,
                                                                                rel=1e-6)


# --- slopes and the torque limit ------------------------------------------------------------
def test_a_slope_within_the_torque_limit_is_climbed_at_the_set_speed() -> None:
    vehicle = TrackedVehicle(PARAMS, MASS, YAW_INERTIA)
    run(vehicle, 15.0, 0.01, ground("heavy_clay", pitch_up_deg=25.0), SpeedLoop(1.0))
    for track in vehicle.tracks:
        assert track.speed_m_s == pytest.approx(1.0, rel=0.02)
        assert track.ground_speed_m_s == pytest.approx(1.0, rel=0.02)
        # the torque carries the grade: m g sin(25 deg) / 2 at the sprocket, plus losses
        carry = 0.5 * MASS * G * math.sin(math.radians(25.0)) * GEOMETRY.sprocket_radius_m
        assert carry < track.torque_nm < 0.95 * LIMIT
    assert vehicle.x > 10.0


def test_a_slope_beyond_the_torque_limit_saturates_and_the_machine_slides_back() -> None:
    vehicle = TrackedVehicle(PARAMS, MASS, YAW_INERTIA)
    on = ground("heavy_clay", pitch_up_deg=50.0)
    loop = SpeedLoop(1.0)
    run(vehicle, 2.0, 0.01, on, loop)
    speed_before = vehicle.tracks[0].speed_m_s
    run(vehicle, 3.0, 0.01, on, loop)
    for track in vehicle.tracks:
        assert track.torque_nm == pytest.approx(LIMIT, rel=1e-3)   # at the relief limit
        assert track.speed_m_s < speed_before < 0.0                # falling, backwards
    assert vehicle.x < 0.0


# --- the holding brake ----------------------------------------------------------------------
@pytest.mark.parametrize("soil_name", ["dry_sand", "heavy_clay"])
def test_a_braked_machine_holds_on_a_slope_within_the_stated_creep(soil_name: str) -> None:
    """12 deg, brakes applied (torque 0), 3 minutes (Cat's drift check): the sprockets stay at
    rest and the machine creeps at most floor x i_hold x t (the slip floor's documented creep:
    ``traction.slip_speed_floor_m_s``), about 4 mm on dry sand."""
    vehicle = TrackedVehicle(PARAMS, MASS, YAW_INERTIA)
    on = ground(soil_name, pitch_up_deg=12.0)
    run(vehicle, 1.0, 0.01, on, DriveCommand(0.0, 0.0, enable=False, brake=True))
    x0 = vehicle.x
    run(vehicle, 180.0, 0.01, on, DriveCommand(0.0, 0.0, enable=False, brake=True))
    s = soil(soil_name)
    slope = math.radians(12.0)
    load = 0.5 * MASS * G * math.cos(slope)
    i_hold = _closed_form_slip(0.5 * MASS * G * math.sin(slope), s, load)
    bound = PARAMS.slip_speed_floor_m_s * i_hold * 180.0
    assert all(t.held and t.speed_m_s == 0.0 for t in vehicle.tracks)
    creep = x0 - vehicle.x
    assert 0.0 <= creep <= 1.1 * bound, (creep, bound)
    assert bound < (5e-3 if soil_name == "dry_sand" else 1e-3)


def test_the_brake_slips_when_the_load_exceeds_its_capacity() -> None:
    weak = VehicleParams(GEOMETRY, HydrostaticDriveParams(
        27.4e6, 40e-6, 49.0, 0.1, 15.0, 500.0, 5.0), 0.02, 0.002)
    vehicle = TrackedVehicle(weak, MASS, YAW_INERTIA)
    run(vehicle, 5.0, 0.01, ground("heavy_clay", pitch_up_deg=12.0),
        DriveCommand(enable=False, brake=True))
    assert not any(t.held for t in vehicle.tracks)
    assert vehicle.x < -1.0


# --- the bucket's push ---------------------------------------------------------------------
def test_a_push_on_the_bucket_slows_the_machine_at_fixed_torque() -> None:
    """Fixed torque set-points on dry sand: a push against the travel (the soil on the bucket)
    slows the ground speed, raises the slip and the drive's torque stays; gone, the machine
    runs as before."""
    vehicle = TrackedVehicle(PARAMS, MASS, YAW_INERTIA)
    on = ground("dry_sand")
    cmd = DriveCommand(6000.0, 6000.0, enable=True, brake=False)
    run(vehicle, 10.0, 0.01, on, cmd)
    free_speed, free_slip = vehicle.ground_speed_m_s, vehicle.tracks[0].slip
    run(vehicle, 10.0, 0.01, on, cmd, ExternalLoad((-25e3, 0.0, 0.0)))
    assert vehicle.ground_speed_m_s < free_speed - 0.03
    assert vehicle.tracks[0].slip > free_slip + 0.02
    run(vehicle, 10.0, 0.01, on, cmd)
    assert vehicle.ground_speed_m_s == pytest.approx(free_speed, rel=0.01)
    # a push beyond the soil's thrust (A c + W tan(phi), 44 kN on dry sand) at full torque
    # (28.5 kN a track, more than the soil gives): the tracks spin forward, the machine is
    # pushed back
    full = DriveCommand(LIMIT, LIMIT, enable=True, brake=False)
    run(vehicle, 2.0, 0.01, on, full, ExternalLoad((-60e3, 0.0, 0.0)))
    assert vehicle.ground_speed_m_s < 0.0
    assert vehicle.tracks[0].speed_m_s > 1.3
    assert vehicle.tracks[0].slip > 1.0


def test_a_yaw_moment_on_the_bucket_turns_a_machine_only_past_its_turning_resistance() -> None:
    vehicle = TrackedVehicle(PARAMS, MASS, YAW_INERTIA)
    on = ground("dry_sand")
    s = soil("dry_sand")
    length, k = GEOMETRY.contact_length_m, s.shear_modulus_m
    # braked tracks turning about the centre: the lateral shear's moment, Wong's
    # mu_t W l / 4, plus both tracks sliding lengthwise at full slip (|i| = 1) on the gauge
    lateral = math.tan(s.friction_angle_rad) * MASS * G * length / 4.0
    sliding = s.max_thrust_n(GEOMETRY.contact_area_m2, 0.5 * MASS * G) \
        * (1.0 - k / length * (1.0 - math.exp(-length / k)))
    resisting = lateral + 2.0 * sliding * 0.5 * GEOMETRY.gauge_m
    run(vehicle, 3.0, 0.01, on, DriveCommand(), ExternalLoad(moment_z_nm=0.5 * resisting))
    assert abs(vehicle.yaw) < 1e-3
    run(vehicle, 3.0, 0.01, on, DriveCommand(), ExternalLoad(moment_z_nm=1.3 * resisting))
    assert vehicle.yaw > 0.05


# --- integration ---------------------------------------------------------------------------
def test_the_step_size_does_not_change_the_motion() -> None:
    """1 ms (the physics step) and 10 ms (the control period) give the same run: stable and
    converged at both."""
    out = []
    for dt in (0.001, 0.01):
        vehicle = TrackedVehicle(PARAMS, MASS, YAW_INERTIA)
        on = ground("dry_sand", pitch_up_deg=5.0, roll_deg=3.0)
        run(vehicle, 4.0, dt, on, DriveCommand(7000.0, 4000.0, enable=True, brake=False),
            ExternalLoad((-5e3, 1e3, 0.0), 2e3))
        run(vehicle, 2.0, dt, on, DriveCommand(enable=False, brake=True))
        assert vehicle.unconverged == 0
        out.append((vehicle.x, vehicle.y, vehicle.yaw))
    assert np.allclose(out[0], out[1], atol=0.02), out


@pytest.mark.parametrize("soil_name", sorted(SHIPPED_SOILS))
def test_random_driving_converges_at_every_step(soil_name: str) -> None:
    """60 s of random actuations (torques, enable, brake), slopes, side slopes and loads at
    the control period: every step converges and the state stays finite."""
    rng = np.random.default_rng(7)
    vehicle = TrackedVehicle(PARAMS, MASS, YAW_INERTIA)
    worst = 0
    for k in range(6000):
        if k % 50 == 0:
            cmd = DriveCommand(*rng.uniform(-LIMIT, LIMIT, 2), enable=bool(rng.random() < 0.8),
                               brake=bool(rng.random() < 0.2))
            on = ground(soil_name, *rng.uniform(-15.0, 15.0, 2), yaw=vehicle.yaw)
            load = ExternalLoad(tuple(rng.uniform(-3e4, 3e4, 3)), float(rng.uniform(-2e4, 2e4)))
        vehicle.step(0.01, cmd, on, load)
        worst = max(worst, vehicle.iterations)
        assert np.all(np.isfinite(vehicle.velocity))
    assert vehicle.unconverged == 0
    assert worst <= 20


# --- properties ----------------------------------------------------------------------------
soils = st.sampled_from(sorted(SHIPPED_SOILS))


@given(soils, st.floats(-3.0, 3.0), st.floats(-3.0, 3.0), st.floats(1e3, 1e5))
def test_no_thrust_without_slip_and_the_soil_never_drives_the_machine(
        name: str, track_speed: float, ground_speed: float, load: float) -> None:
    s = soil(name)
    fmax = s.max_thrust_n(GEOMETRY.contact_area_m2, load)
    i = slip(track_speed, ground_speed, PARAMS.slip_speed_floor_m_s)
    f = thrust(fmax, i, GEOMETRY.contact_length_m, s.shear_modulus_m)
    assert abs(f) <= fmax
    assert f * (track_speed - ground_speed) >= 0.0   # power into the soil is never negative
    if track_speed == ground_speed:
        assert f == 0.0
    assert thrust(fmax, 0.0, GEOMETRY.contact_length_m, s.shear_modulus_m) == 0.0
    if abs(f) < 0.99 * fmax:
        back = steady_slip(f, fmax, GEOMETRY.contact_length_m, s.shear_modulus_m)
        assert back == pytest.approx(i, rel=1e-6, abs=1e-12)


@settings(max_examples=30, deadline=None)
@given(soils, st.floats(-LIMIT, LIMIT), st.floats(-10.0, 10.0), st.floats(-3.0, 3.0))
def test_symmetric_tracks_drive_straight(name: str, torque: float, slope_deg: float,
                                         yaw: float) -> None:
    vehicle = TrackedVehicle(PARAMS, MASS, YAW_INERTIA, yaw=yaw)
    run(vehicle, 2.0, 0.01, ground(name, pitch_up_deg=slope_deg, yaw=yaw),
        DriveCommand(torque, torque, enable=True, brake=False))
    assert abs(vehicle.yaw_rate_rad_s) < 1e-9 and abs(vehicle.yaw - yaw) < 1e-9
    assert abs(float(vehicle.velocity[1])) < 1e-9
    heading = math.atan2(vehicle.y, vehicle.x)
    if math.hypot(vehicle.x, vehicle.y) > 0.01:
        assert abs(math.sin(heading - yaw)) < 1e-6


@settings(max_examples=30, deadline=None)
@given(soils, st.floats(-1.5, 1.5), st.floats(-0.5, 0.5), st.floats(-0.5, 0.5))
def test_rolling_without_torque_on_flat_ground_never_gains_energy(
        name: str, speed: float, lateral: float, yaw_rate: float) -> None:
    vehicle = TrackedVehicle(PARAMS, MASS, YAW_INERTIA)
    r = GEOMETRY.sprocket_radius_m
    half = 0.5 * GEOMETRY.gauge_m
    vehicle.velocity = np.array([speed, lateral, yaw_rate, (speed - yaw_rate * half) / r,
                                 (speed + yaw_rate * half) / r])
    on = ground(name)

    def energy() -> float:
        u, w, rz, om_l, om_r = vehicle.velocity
        return 0.5 * (MASS * (u * u + w * w) + YAW_INERTIA * rz * rz
                      + DRIVE.rotating_inertia_kg_m2 * (om_l * om_l + om_r * om_r))

    before = energy()
    for _ in range(100):
        vehicle.step(0.01, DriveCommand(0.0, 0.0, enable=True, brake=False), on)
        now = energy()
        assert now <= before * (1.0 + 1e-9) + 1e-9
        before = now


@given(st.floats(-math.pi, math.pi), st.floats(-0.5, 0.5), st.floats(-0.5, 0.5))
def test_attitude_round_trips_through_roll_pitch_yaw_and_the_quaternion(
        yaw: float, pitch_up: float, roll: float) -> None:
    r = slope_attitude(yaw, pitch_up, roll)
    got = roll_pitch_yaw(r)
    assert got == pytest.approx((roll, -pitch_up, yaw), abs=1e-9)
    w, x, y, z = quaternion(r)
    assert math.isclose(w * w + x * x + y * y + z * z, 1.0, rel_tol=1e-12)
    # the same rotation from the quaternion
    back = np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
                     [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
                     [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]])
    assert np.allclose(back, r, atol=1e-12)
    # attitude() from the heading and the normal gives the same frame
    assert np.allclose(attitude(yaw, r[:, 2]) @ np.array([0.0, 0.0, 1.0]), r[:, 2])


@given(st.floats(-0.4, 0.4), st.floats(-0.4, 0.4), st.floats(-math.pi, math.pi),
       st.floats(-5.0, 5.0), st.floats(-5.0, 5.0))
def test_the_ground_normal_of_a_plane_is_its_normal(gx: float, gy: float, yaw: float,
                                                    x: float, y: float) -> None:
    def plane(px: float, py: float) -> float:
        return 0.3 + gx * px + gy * py

    n = ground_normal(plane, x, y, yaw, GEOMETRY.contact_length_m, GEOMETRY.gauge_m)
    want = np.array([-gx, -gy, 1.0]) / math.sqrt(1.0 + gx * gx + gy * gy)
    assert np.allclose(n, want, atol=1e-12)


def test_angular_velocity_of_a_turning_frame() -> None:
    a, b = slope_attitude(0.2, 0.1, 0.05), slope_attitude(0.21, 0.1, 0.05)
    rate = angular_velocity(a, b, 0.01)
    # a pure heading change on a tilted base: the body rate is world z in body axes
    assert np.allclose(rate, a.T @ np.array([0.0, 0.0, 1.0]), atol=1e-3)
