"""A tracked machine on the ground plane: two hydrostatic drives, track-soil traction, skid
steering, grade and an external load, integrated implicitly (pure: numpy, no MuJoCo, no ROS).

Unknowns of a step: the body's speed along its x (``u``) and y (``w``) axes in the ground plane,
its yaw rate ``r_z``, and the sprocket speeds ``omega_l``, ``omega_r`` [rad/s]. Equations
(body frame, rotating with the machine; ``m`` mass, ``I`` yaw inertia about the base origin,
``J`` the drive's rotating inertia at the sprocket, ``r`` the sprocket radius, ``B`` the gauge,
track i at ``y_i = +-B/2``, its ground speed ``V_i = u - r_z y_i``, track speed ``r omega_i``):

    m (du/dt - r_z w) = F_l + F_r + R_l + R_r + m g_x + F_ext,x
    m (dw/dt + r_z u) = L_l + L_r + m g_y + F_ext,y
    I dr_z/dt         = -sum y_i (F_i + R_i) + sum N_i + M_ext,z
    J domega_i/dt     = T_i phi(omega_i) - r F_i - r R_int,i + T_brake,i

- ``F_i``: Janosi-Hanamoto thrust at the slip ``(r omega_i - V_i) / hypot(max(|r omega_i|,
  |V_i|), floor)`` (:mod:`excavator_sim.drivetrain.traction`), of the largest thrust ``A c +
  W_i tan(phi)``;
- ``R_i``: Bekker compaction resistance against the track's ground speed;
- ``R_int,i``: the running gear's internal resistance, ``internal_resistance_ratio * W_i``,
  against the track's motion (it is what slows a machine rolling with zero torque);
- ``L_i``, ``N_i``: skid steering. Lateral shear on the track, uniform along the contact length
  ``l``, ``-mu_t (W_i / l) sign(w + r_z x)`` at ``x`` along the track, with ``mu_t =
  tan(phi)``: the friction part of the soil's Mohr-Coulomb strength (grousers slide along
  their length laterally, so cohesion is left out). For a pivot turn this is Wong's
  uniform-pressure resisting moment ``M_r = mu_t W l / 4`` (*Theory of Ground Vehicles*, ch. 7).
  ``sign`` is regularised like the slip (``smooth_sign(v / floor)``: linear below the floor)
  and summed over 8 stations at the midpoints of equal segments (a midi's 5-6 road wheels a
  side; the pivot moment is Wong's exactly);
- ``W_i``: half the normal load ``m g cos(slope) - F_ext,z`` (uniform pressure, equal tracks:
  no load transfer between front and rear or onto the downhill track);
- ``g_x, g_y``: gravity in the body frame of the ground plane (grade from the terrain normal);
- ``T_i phi(omega_i)``: the hydrostatic drive's torque
  (:mod:`excavator_sim.drivetrain.hydrostatic`);
- ``T_brake,i``: the holding brake, stick/slip: a braked sprocket is held at rest while the
  torque that takes is within the brake's capacity, else it slips at the capacity.

Integration: one backward-Euler step of the dissipative forces, with the slip's scale
``hypot(max(|v_t|, |V|), floor)`` and the gyroscopic terms (``m r_z w``, ``m r_z u``) taken at
the start of the step (exact at steady state). Every force left in the step is then the
negative gradient of a convex potential of one linear "sliding velocity" (thrust: of ``r omega_i
- V_i``; compaction: of ``V_i``; internal resistance: of ``r omega_i``; lateral shear: of ``w +
r_z x``; the motor's flow limit: of ``omega_i``), so the step is the unique minimiser of a
strictly convex incremental potential ``1/2 (v - v*)^T M (v - v*) + dt sum D_k(a_k v)``. It is
found by Newton's method (the Hessian is symmetric positive definite) with an exact line search
on the potential's slope along the Newton direction: globally convergent, and stable at any step
for the stiff low-speed laws (a slip-velocity gain of ~1e8-1e10 N s/m at the default floor).
A step that does not converge is counted (:attr:`TrackedVehicle.unconverged`). Positions follow
with the new velocities (semi-implicit Euler); on a slope the horizontal motion is the
ground-plane velocity projected by the attitude.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from excavator_sim.drivetrain.hydrostatic import HydrostaticDrive, HydrostaticDriveParams
from excavator_sim.drivetrain.implicit_step import (
    ExternalLoad,
    PlanarBody,
    settle_brakes,
)
from excavator_sim.drivetrain.soil import TractionSoil
from excavator_sim.drivetrain.traction import (
    slip,
    smooth_sign,
    station_offsets,
    thrust,
    thrust_slope,
)
from excavator_sim.errors import SimConfigError

TRACKS = ("track_left", "track_right")


@dataclass(frozen=True)
class TrackGeometry:
    """Undercarriage dimensions [m]."""

    gauge_m: float            # track centre to centre
    contact_length_m: float   # track length on the ground
    shoe_width_m: float       # b
    sprocket_radius_m: float  # pitch radius of the drive sprocket

    def __post_init__(self) -> None:
        for key, value in vars(self).items():
            if not (math.isfinite(value) and value > 0.0):
                raise SimConfigError(f"track geometry: {key} = {value} must be a finite "
                                     "number > 0")

    @property
    def contact_area_m2(self) -> float:
        """One track's contact area ``b l`` [m^2]."""
        return self.shoe_width_m * self.contact_length_m


@dataclass(frozen=True)
class VehicleParams:
    """Everything of the drive train but the mass, which comes from the machine's model."""

    tracks: TrackGeometry
    drive: HydrostaticDriveParams
    internal_resistance_ratio: float = 0.02   # running gear losses / normal load [-]
    slip_speed_floor_m_s: float = 0.005        # slip regularisation (traction module) [m/s]
    gravity_m_s2: float = 9.81


@dataclass(frozen=True)
class DriveCommand:
    """What the PLC commands: torque set-points at the sprockets [N m], drive enable, brake."""

    torque_left_nm: float = 0.0
    torque_right_nm: float = 0.0
    enable: bool = False
    brake: bool = True

    @property
    def active(self) -> bool:
        """The drives may produce torque (enabled and not braked)."""
        return self.enable and not self.brake


SAFE_COMMAND = DriveCommand()   # torque 0, disabled, brakes applied


@dataclass(frozen=True)
class Ground:
    """The ground under the machine for one step: base_link's attitude in world (3 x 3, its
    columns the body axes; z = the terrain normal) and the soil under each track."""

    attitude: np.ndarray
    soils: tuple[TractionSoil, TractionSoil]


@dataclass
class TrackReading:
    """One track after a step."""

    speed_m_s: float = 0.0       # sprocket (track) speed r omega
    travel_m: float = 0.0        # integral of the track speed
    torque_nm: float = 0.0       # the drive's output torque (pressure sensors)
    slip: float = 0.0            # Janosi-Hanamoto slip [-]
    thrust_n: float = 0.0        # soil thrust on the machine [N]
    ground_speed_m_s: float = 0.0
    braked: bool = True           # the holding brake is applied
    held: bool = True             # ... and holds the sprocket at rest


@dataclass
class _Step:
    """Per-step constants of the residual."""

    dt: float
    m: float
    inertia: float
    g: tuple[float, float, float]
    ext: ExternalLoad
    max_thrust: tuple[float, float]
    shear_modulus: tuple[float, float]
    compaction: tuple[float, float]
    lateral: tuple[float, float]      # mu_t W_i / l [N/m]
    internal: tuple[float, float]     # R_int,i [N]
    torque: tuple[float, float]
    den: tuple[float, float]          # slip scale of each track at the step's start [m/s]
    const: np.ndarray                 # forces constant over the step (gravity, load, gyro.)
    brake_slip: list[float] = field(default_factory=lambda: [0.0, 0.0])


class TrackedVehicle(PlanarBody):
    """The drive train's state and its implicit step (``velocity``: u, w, r_z, omega_l,
    omega_r)."""

    def __init__(self, params: VehicleParams, mass_kg: float, yaw_inertia_kg_m2: float,
                 x: float = 0.0, y: float = 0.0, yaw: float = 0.0):
        self.params = params
        super().__init__("tracked vehicle", mass_kg, yaw_inertia_kg_m2, x, y, yaw, 5,
                         params.gravity_m_s2)
        self.drives = (HydrostaticDrive(params.drive), HydrostaticDrive(params.drive))
        self.tracks = (TrackReading(), TrackReading())
        g = params.tracks
        self._half = 0.5 * g.gauge_m
        self._y = (self._half, -self._half)
        self._stations = station_offsets(g.contact_length_m)

    # --- the step ------------------------------------------------------------------------
    def step(self, dt: float, command: DriveCommand, ground: Ground,
             load: ExternalLoad | None = None) -> None:
        """Advance ``dt`` [s] under ``command`` on ``ground`` with the external ``load``."""
        p = self.params
        geo = p.tracks
        active = command.active
        for drive, sp in zip(self.drives, (command.torque_left_nm, command.torque_right_nm),
                             strict=True):
            drive.respond(drive.command(sp, active), dt)
        braked = not active   # the brake applies whenever the drives may not produce torque
        attitude = np.asarray(ground.attitude, dtype=float)
        gb = attitude.T @ np.array([0.0, 0.0, -p.gravity_m_s2])
        ext = load if load is not None else ExternalLoad()
        weight = max(0.0, -self.mass_kg * float(gb[2]) - ext.force_body_n[2])
        wi = 0.5 * weight
        soils = ground.soils
        k = _Step(
            dt=dt, m=self.mass_kg, inertia=self.yaw_inertia_kg_m2,
            g=(float(gb[0]), float(gb[1]), float(gb[2])), ext=ext,
            max_thrust=(soils[0].max_thrust_n(geo.contact_area_m2, wi),
                        soils[1].max_thrust_n(geo.contact_area_m2, wi)),
            shear_modulus=(soils[0].shear_modulus_m, soils[1].shear_modulus_m),
            compaction=(soils[0].compaction_resistance_n(wi, geo.shoe_width_m,
                                                         geo.contact_length_m),
                        soils[1].compaction_resistance_n(wi, geo.shoe_width_m,
                                                         geo.contact_length_m)),
            lateral=(math.tan(soils[0].friction_angle_rad) * wi / geo.contact_length_m,
                     math.tan(soils[1].friction_angle_rad) * wi / geo.contact_length_m),
            internal=(p.internal_resistance_ratio * wi, p.internal_resistance_ratio * wi),
            torque=(self.drives[0].torque_nm, self.drives[1].torque_nm),
            den=self._slip_scales(self.velocity),
            const=self._constant_forces(gb, ext, self.velocity))
        v0 = self.velocity.copy()
        v, held = settle_brakes(lambda h: self._solve(k, v0, h),
                                lambda x, i: self._brake_torque_to_hold(k, v0, x, i),
                                v0, braked, p.drive.brake_torque_nm, k.brake_slip, rounds=2)
        self._finish(k, v0, v, attitude, braked, held)

    def _finish(self, k: _Step, v0: np.ndarray, v: np.ndarray, attitude: np.ndarray,
                braked: bool, held: list[bool]) -> None:
        dt = k.dt
        r = self.params.tracks.sprocket_radius_m
        floor = self.params.slip_speed_floor_m_s
        u, rz = float(v[0]), float(v[2])
        self._move(dt, v0, v, attitude, k.g)
        for i, track in enumerate(self.tracks):
            omega = float(v[3 + i])
            vt = r * omega
            vg = u - rz * self._y[i]
            s = slip(vt, vg, floor)
            track.speed_m_s = vt
            track.travel_m += dt * vt
            track.torque_nm = self.drives[i].output_nm(omega)
            track.slip = s
            track.thrust_n = thrust(k.max_thrust[i], s, self.params.tracks.contact_length_m,
                                    k.shear_modulus[i])
            track.ground_speed_m_s = vg
            track.braked = braked
            track.held = held[i]

    def _slip_scales(self, v: np.ndarray) -> tuple[float, float]:
        """``hypot(max(|r omega_i|, |V_i|), floor)`` of each track at velocities ``v``."""
        r = self.params.tracks.sprocket_radius_m
        eps = self.params.slip_speed_floor_m_s
        u, rz = float(v[0]), float(v[2])
        return (math.hypot(max(abs(r * float(v[3])), abs(u - rz * self._y[0])), eps),
                math.hypot(max(abs(r * float(v[4])), abs(u - rz * self._y[1])), eps))

    def _brake_torque_to_hold(self, k: _Step, v0: np.ndarray, v: np.ndarray, i: int) -> float:
        """The brake torque that holds sprocket i at rest over the step [N m]."""
        j = self.params.drive.rotating_inertia_kg_m2
        f, _ = self._forces(k, v, jacobian=False)
        return j * (0.0 - float(v0[3 + i])) / k.dt - float(f[3 + i])

    # --- Newton ----------------------------------------------------------------------------
    def _solve(self, k: _Step, v0: np.ndarray, held: list[bool]) -> np.ndarray:
        """The minimiser of the step's incremental potential over the free unknowns (held
        sprockets stay at rest): its gradient ``M (v - v0) / dt - f(v)`` vanishes
        (:func:`~excavator_sim.drivetrain.implicit_step.minimise_step`)."""
        p = self.params
        r = p.tracks.sprocket_radius_m
        j = p.drive.rotating_inertia_kg_m2
        mass = np.array([k.m, k.m, k.inertia, j, j]) / k.dt
        # convergence: the gradient's change of velocity, in track-speed units [m/s]
        scale = np.array([1.0, 1.0, self._half, r, r]) / mass
        return self._solve_held(lambda x, jac: self._forces(k, x, jac), mass, v0, held, scale)

    def _forces(self, k: _Step, v: np.ndarray, jacobian: bool
                ) -> tuple[np.ndarray, np.ndarray]:
        """Generalised forces f(v) (N, N, N m, N m, N m) of the step and, with ``jacobian``,
        df/dv (symmetric negative semi-definite: the dissipative forces are gradients of
        convex potentials)."""
        p = self.params
        geo = p.tracks
        r, length = geo.sprocket_radius_m, geo.contact_length_m
        eps = p.slip_speed_floor_m_s
        u, w, rz, om_l, om_r = (float(x) for x in v)
        f = k.const.copy()
        f[3] += k.brake_slip[0]
        f[4] += k.brake_slip[1]
        df = np.zeros((5, 5))
        # lateral shear at the stations (the same sliding velocity w + rz x under both
        # tracks): sums of smooth_sign((w + rz x) / eps) and of its derivative's moments
        s_c = s_cx = s_d = s_dx = s_dxx = 0.0
        for x in self._stations:
            z = (w + rz * x) / eps
            root = math.sqrt(1.0 + z * z)
            c = z / root
            s_c += c
            s_cx += c * x
            if jacobian:
                dc = 1.0 / (root * root * root)
                s_d += dc
                s_dx += dc * x
                s_dxx += dc * x * x
        q = (k.lateral[0] + k.lateral[1]) * length / len(self._stations)   # both tracks
        f[1] -= q * s_c
        f[2] -= q * s_cx
        if jacobian:
            ge = q / eps
            df[1, 1] -= ge * s_d
            df[1, 2] -= ge * s_dx
            df[2, 1] -= ge * s_dx
            df[2, 2] -= ge * s_dxx
        for i, omega in enumerate((om_l, om_r)):
            yi = self._y[i]
            vt = r * omega
            vg = u - rz * yi
            den = k.den[i]
            s = (vt - vg) / den
            fmax, kmod = k.max_thrust[i], k.shear_modulus[i]
            thrust_i = thrust(fmax, s, length, kmod)
            sat_g, dsat_g = smooth_sign(vg / eps)
            long_i = thrust_i - k.compaction[i] * sat_g
            sat_t, dsat_t = smooth_sign(vt / eps)
            factor, dfactor = self.drives[i].flow_factor(omega)
            f[0] += long_i
            f[2] -= yi * long_i
            f[3 + i] += k.torque[i] * factor - r * thrust_i - r * k.internal[i] * sat_t
            if not jacobian:
                continue
            # thrust: a function of the slip velocity d = r omega_i - u + rz y_i alone
            kd = thrust_slope(fmax, s, length, kmod) / den
            kg = k.compaction[i] * dsat_g / eps
            # -kd a a^T with d = a . v, a = (-1, 0, y_i, r e_i); -kg b b^T, V_i = b . v,
            # b = (1, 0, -y_i)
            n = 3 + i
            kk = kd + kg
            df[0, 0] -= kk
            df[0, 2] += kk * yi
            df[2, 0] += kk * yi
            df[2, 2] -= kk * yi * yi
            df[0, n] += kd * r
            df[n, 0] += kd * r
            df[2, n] -= kd * yi * r
            df[n, 2] -= kd * yi * r
            df[n, n] += (-kd * r * r + k.torque[i] * dfactor
                         - r * r * k.internal[i] * dsat_t / eps)
        return f, df
