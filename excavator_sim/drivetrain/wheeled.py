"""A wheeled machine on the ground plane: four wheels with hydrostatic drives and holding
brakes, rate-limited steering, brush-model tyres, grade and an external load, integrated
implicitly (pure: numpy, no MuJoCo, no ROS). The wheeled twin of
:mod:`excavator_sim.drivetrain.vehicle`.

Frame: the body frame's origin is the centre of the wheel rectangle (x forward, y left, z up,
REP-103), wheels ``fl, fr, rl, rr`` at ``(+-l/2, +-b/2)``; the mass centre is taken at that
origin in the plane (the static axle loads follow ``front_load_share``; no load transfer).

Unknowns of a step: the body's speed along x (``u``) and y (``w``), its yaw rate ``r_z`` and
the four wheel speeds ``omega_i`` [rad/s]. With wheel i at ``(x_i, y_i)`` steered by
``delta_i`` (fixed over the step: the steering actuators move first,
:mod:`excavator_sim.drivetrain.steering`), its centre's velocity in the wheel's frame is

    V_cx =  cos(delta) (u - r_z y_i) + sin(delta) (w + r_z x_i)
    V_cy = -sin(delta) (u - r_z y_i) + cos(delta) (w + r_z x_i)

and the tread slides over the ground at ``d = (r omega_i - V_cx, -V_cy)``, both linear in the
unknowns (``d = A_i v``). The tyre's force ``F_i(d)`` (:mod:`excavator_sim.drivetrain.tyre`,
brush model: along ``d``, magnitude growing with ``|d|`` to the friction circle) acts on the
machine along the wheel's axes and against the wheel's rotation:

    m (du/dt - r_z w) = sum (cos(delta_i) F_ix - sin(delta_i) F_iy) + m g_x + F_ext,x
    m (dw/dt + r_z u) = sum (sin(delta_i) F_ix + cos(delta_i) F_iy) + m g_y + F_ext,y
    I dr_z/dt         = sum (x_i F_iy,body - y_i F_ix,body) + M_ext,z
    J_i domega_i/dt   = T_i phi(omega_i) - r F_ix - f_r F_zi r sign(omega_i) + T_brake,i

with ``T_i phi`` the hydrostatic drive's torque (driven wheels only;
:mod:`excavator_sim.drivetrain.hydrostatic`), the rolling resistance's moment, and the holding
brake's stick/slip as for the tracks. In matrix form the tyre forces are ``-A_i^T F_i(A_i v)``:
the negative gradient of a convex potential of ``v`` (``F_i`` is the gradient of a convex
function of ``d``), like every other velocity-dependent force of the step.

Integration: as :class:`~excavator_sim.drivetrain.vehicle.TrackedVehicle`: one backward-Euler
step of the dissipative forces, with the slip's scale, the steering angles and the gyroscopic
terms taken at the start of the step; the step is the unique minimiser of a strictly convex
incremental potential, found by Newton's method with an exact line search on its slope
(:func:`~excavator_sim.drivetrain.implicit_step.minimise_step`, shared with the tracked
machine, as is the brakes' stick/slip): stable at any step for the stiff low-speed tyre law
(the slip velocity gain ``C / floor`` is ~1e7-1e8 N s/m). Positions follow with the new velocities
(semi-implicit Euler); on a slope the horizontal motion is the ground-plane velocity projected
by the attitude.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from excavator_sim.drivetrain.hydrostatic import HydrostaticDrive, HydrostaticDriveParams
from excavator_sim.drivetrain.implicit_step import (
    ExternalLoad,
    PlanarBody,
    settle_brakes,
)
from excavator_sim.drivetrain.steering import SteeringActuator, SteeringParams
from excavator_sim.drivetrain.tyre import (
    TyreParams,
    rolling_resistance_torque,
    slip_scale,
    tyre_force,
)
from excavator_sim.errors import CommandError, SimConfigError

WHEELS = ("fl", "fr", "rl", "rr")
_NO_JACOBIAN = np.zeros((7, 7))


@dataclass(frozen=True)
class WheelGeometry:
    """Wheel layout [m] and the static share of the weight on the front axle [-]."""

    wheelbase_m: float
    track_m: float              # wheel centre to centre across an axle
    wheel_radius_m: float       # rolling radius
    front_load_share: float = 0.5

    def __post_init__(self) -> None:
        for name, value, low, high in (("wheelbase_m", self.wheelbase_m, 0.5, 10.0),
                                       ("track_m", self.track_m, 0.5, 5.0),
                                       ("wheel_radius_m", self.wheel_radius_m, 0.1, 2.0),
                                       ("front_load_share", self.front_load_share, 0.1, 0.9)):
            if not (isinstance(value, int | float) and math.isfinite(value)
                    and low <= value <= high):
                raise SimConfigError(f"wheel geometry: {name} = {value!r} is outside "
                                     f"[{low:g}, {high:g}]; set it in that range")

    def position(self, wheel: str) -> tuple[float, float]:
        """``(x, y)`` [m] of a wheel's contact point in the body frame."""
        i = WHEELS.index(wheel)
        return ((0.5 if i < 2 else -0.5) * self.wheelbase_m,
                (0.5 if i % 2 == 0 else -0.5) * self.track_m)


@dataclass(frozen=True)
class WheeledParams:
    """Everything of a wheeled drive train but the mass and yaw inertia (the machine's model
    gives those). ``driven``/``steered``: wheel names in ``WHEELS`` order; ``drive``: each
    driven wheel's hydrostatic drive (torques at the wheel); ``wheel_inertia_kg_m2``: an
    undriven wheel's rotating inertia; ``brake_torque_nm``: every wheel's holding brake."""

    geometry: WheelGeometry
    driven: tuple[str, ...]
    steered: tuple[str, ...]
    drive: HydrostaticDriveParams
    steering: SteeringParams
    tyre: TyreParams
    wheel_inertia_kg_m2: float = 20.0
    slip_speed_floor_m_s: float = 0.002
    gravity_m_s2: float = 9.81

    def __post_init__(self) -> None:
        for what, names in (("driven", self.driven), ("steered", self.steered)):
            if (not names or len(set(names)) != len(names)
                    or any(n not in WHEELS for n in names)
                    or list(names) != [w for w in WHEELS if w in names]):
                raise SimConfigError(f"wheeled drive train: {what} wheels {list(names)} must "
                                     f"be distinct names of {list(WHEELS)}, in that order")
        if not (math.isfinite(self.wheel_inertia_kg_m2) and self.wheel_inertia_kg_m2 > 0.0):
            raise SimConfigError(f"wheeled drive train: wheel_inertia_kg_m2 = "
                                 f"{self.wheel_inertia_kg_m2} must be a finite number > 0")
        if not (math.isfinite(self.slip_speed_floor_m_s)
                and 1e-4 <= self.slip_speed_floor_m_s <= 0.1):
            raise SimConfigError(f"wheeled drive train: slip_speed_floor_m_s = "
                                 f"{self.slip_speed_floor_m_s} is outside [0.0001, 0.1] m/s")
        if abs(self.tyre.radius_m - self.geometry.wheel_radius_m) > 1e-9:
            raise SimConfigError(f"wheeled drive train: the tyre's radius {self.tyre.radius_m} m "
                                 f"differs from the geometry's wheel_radius_m "
                                 f"{self.geometry.wheel_radius_m} m; give one value")


@dataclass(frozen=True)
class WheeledCommand:
    """What the PLC commands: torque set-points of the driven wheels [N m at the wheel] in
    ``WheeledParams.driven`` order, steering rate commands [rad/s] in ``steered`` order,
    drive enable, brake. Missing entries (a shorter tuple) are 0."""

    torques_nm: tuple[float, ...] = ()
    steer_rates_rad_s: tuple[float, ...] = ()
    enable: bool = False
    brake: bool = True

    @property
    def active(self) -> bool:
        """The drives may produce torque and the steering valves may open."""
        return self.enable and not self.brake


SAFE_WHEELED_COMMAND = WheeledCommand()   # torque 0, steering valves closed, brakes applied


@dataclass(frozen=True)
class WheeledGround:
    """The ground under the machine for one step: base attitude in world (3 x 3, columns the
    body axes; z = the terrain normal) and the tyre-ground friction coefficient (``None``: the
    tyre's own)."""

    attitude: np.ndarray = field(default_factory=lambda: np.eye(3))
    friction: float | None = None


@dataclass
class WheelReading:
    """One wheel after a step."""

    speed_m_s: float = 0.0          # r omega: what the wheel's speed sensor gives
    travel_m: float = 0.0           # integral of r omega
    torque_nm: float = 0.0          # the drive's output torque (0 on an undriven wheel)
    angle_rad: float = 0.0          # steering angle (angle sensor; 0 on an unsteered wheel)
    slip: float = 0.0               # longitudinal theoretical slip d_x / scale [-]
    slip_angle_rad: float = 0.0     # atan2(V_cy, |V_cx|): + when the wheel slides left
    force_n: tuple[float, float] = (0.0, 0.0)   # tyre force on the machine, wheel axes
    load_n: float = 0.0
    braked: bool = True
    held: bool = True


@dataclass
class _Step:
    dt: float
    loads: tuple[float, ...]
    coef: list[tuple[float, ...]]   # per wheel: A_i's body columns (a0, a1, a2, b0, b1, b2)
    den: tuple[float, ...]
    torque: tuple[float, ...]       # drive torque state per wheel (0 undriven)
    const: np.ndarray
    tyre: TyreParams
    brake_slip: list[float] = field(default_factory=lambda: [0.0] * 4)


class WheeledVehicle(PlanarBody):
    """The wheeled drive train's state and its implicit step (``velocity``: u, w, r_z,
    omega_fl, omega_fr, omega_rl, omega_rr)."""

    def __init__(self, params: WheeledParams, mass_kg: float, yaw_inertia_kg_m2: float,
                 x: float = 0.0, y: float = 0.0, yaw: float = 0.0):
        self.params = params
        super().__init__("wheeled vehicle", mass_kg, yaw_inertia_kg_m2, x, y, yaw, 7,
                         params.gravity_m_s2)
        self.drives = {w: HydrostaticDrive(params.drive) for w in params.driven}
        self.steering = {w: SteeringActuator(params.steering) for w in params.steered}
        self.wheels = {w: WheelReading() for w in WHEELS}
        self._pos = tuple(params.geometry.position(w) for w in WHEELS)
        self._radius = params.geometry.wheel_radius_m
        self._drive_at = tuple(self.drives.get(w) for w in WHEELS)
        self._inertia = np.array([params.drive.rotating_inertia_kg_m2 if w in self.drives
                                  else params.wheel_inertia_kg_m2 for w in WHEELS])

    # --- read-outs -----------------------------------------------------------------------
    def twist_at(self, x_ref_m: float = 0.0, y_ref_m: float = 0.0) -> tuple[float, float, float]:
        """``(vx, vy, wz)`` of the body at the body-frame point ``(x_ref, y_ref)`` [m]:
        ``vx = u - r_z y_ref``, ``vy = w + r_z x_ref`` (the kinematic models' reference
        points: Ackermann the rear-axle centre ``(-l/2, 0)``, 4WD4WS the origin)."""
        u, w, rz = (float(v) for v in self.velocity[:3])
        return u - rz * y_ref_m, w + rz * x_ref_m, rz

    def wheel_speeds(self, names: Sequence[str]) -> list[float]:
        """Measured ``r omega`` [m/s] of the named wheels (the wheel speed sensors)."""
        r = self.params.geometry.wheel_radius_m
        return [r * float(self.velocity[3 + WHEELS.index(n)]) for n in names]

    def steer_angles(self, names: Sequence[str]) -> list[float]:
        """Measured steering angles [rad] of the named wheels (the angle sensors)."""
        return [self.angle(n) for n in names]

    def angle(self, wheel: str) -> float:
        """A wheel's steering angle [rad] (0 for an unsteered wheel)."""
        act = self.steering.get(wheel)
        return act.angle_rad if act is not None else 0.0

    def slip_velocities(self) -> np.ndarray:
        """(4, 2): each wheel's tread-over-ground velocity ``(r omega - V_cx, -V_cy)`` [m/s] in
        the wheel's axes, at the present state and steering angles (0 when every wheel rolls
        along its contact velocity: the twist is kinematically consistent)."""
        return np.array([self._slip(c, self.velocity, i)
                         for i, c in enumerate(self._coefficients())])

    def _coefficients(self) -> list[tuple[float, ...]]:
        """Per wheel the body columns of ``A_i`` (the slip velocity of wheel i is ``A_i v``):
        ``d_x = a0 u + a1 w + a2 r_z + r omega_i``, ``d_y = b0 u + b1 w + b2 r_z``."""
        out: list[tuple[float, ...]] = []
        for i, w in enumerate(WHEELS):
            a = self.angle(w)
            c, s = math.cos(a), math.sin(a)
            xi, yi = self._pos[i]
            out.append((-c, -s, c * yi - s * xi, s, -c, -s * yi - c * xi))
        return out

    def _slip(self, coef: tuple[float, ...], v: np.ndarray, i: int) -> tuple[float, float]:
        """``(d_x, d_y)`` [m/s] of wheel i at velocities ``v``."""
        a0, a1, a2, b0, b1, b2 = coef
        u, w, rz = float(v[0]), float(v[1]), float(v[2])
        return (a0 * u + a1 * w + a2 * rz + self._radius * float(v[3 + i]),
                b0 * u + b1 * w + b2 * rz)

    # --- the step ------------------------------------------------------------------------
    def step(self, dt: float, command: WheeledCommand, ground: WheeledGround | None = None,
             load: ExternalLoad | None = None) -> None:
        """Advance ``dt`` [s] under ``command`` on ``ground`` with the external ``load``."""
        p = self.params
        if (len(command.torques_nm) > len(p.driven)
                or len(command.steer_rates_rad_s) > len(p.steered)):
            raise CommandError(
                f"wheeled command with {len(command.torques_nm)} torques and "
                f"{len(command.steer_rates_rad_s)} steering rates for a machine that drives "
                f"{list(p.driven)} and steers {list(p.steered)}: send one per wheel, in that "
                "order (parse_wheeled_actuation builds it from plant/actuation)")
        active = command.active
        torques = tuple(command.torques_nm) + (0.0,) * (len(p.driven) - len(command.torques_nm))
        rates = (tuple(command.steer_rates_rad_s)
                 + (0.0,) * (len(p.steered) - len(command.steer_rates_rad_s)))
        for name, sp in zip(p.driven, torques, strict=False):
            drive = self.drives[name]
            drive.respond(drive.command(sp, active), dt)
        for name, rate in zip(p.steered, rates, strict=False):
            self.steering[name].step(rate, active, dt)
        braked = not active
        ground = ground if ground is not None else WheeledGround()
        attitude = np.asarray(ground.attitude, dtype=float)
        gb = attitude.T @ np.array([0.0, 0.0, -p.gravity_m_s2])
        ext = load if load is not None else ExternalLoad()
        weight = max(0.0, -self.mass_kg * float(gb[2]) - ext.force_body_n[2])
        share = p.geometry.front_load_share
        loads = (0.5 * share * weight,) * 2 + (0.5 * (1.0 - share) * weight,) * 2
        tyre = p.tyre
        if ground.friction is not None:
            tyre = TyreParams(ground.friction, tyre.cornering_coefficient_1_rad,
                              tyre.rolling_resistance, tyre.radius_m)
        r = p.geometry.wheel_radius_m
        coef = self._coefficients()
        v0 = self.velocity.copy()
        den = []
        for i, c in enumerate(coef):
            vcx = -(c[0] * float(v0[0]) + c[1] * float(v0[1]) + c[2] * float(v0[2]))
            den.append(slip_scale(r * float(v0[3 + i]), vcx, p.slip_speed_floor_m_s))
        k = _Step(dt=dt, loads=loads, coef=coef, den=tuple(den),
                  torque=tuple(self.drives[w].torque_nm if w in self.drives else 0.0
                               for w in WHEELS),
                  const=self._constant_forces(gb, ext, v0), tyre=tyre)
        v, held = settle_brakes(lambda h: self._solve(k, v0, h),
                                lambda x, i: self._brake_torque_to_hold(k, v0, x, i),
                                v0, braked, p.drive.brake_torque_nm, k.brake_slip, rounds=3)
        self._finish(k, v0, v, attitude, gb, braked, held)

    def _finish(self, k: _Step, v0: np.ndarray, v: np.ndarray, attitude: np.ndarray,
                gb: np.ndarray, braked: bool, held: list[bool]) -> None:
        dt = k.dt
        r = self.params.geometry.wheel_radius_m
        self._move(dt, v0, v, attitude, gb)
        for i, name in enumerate(WHEELS):
            reading = self.wheels[name]
            omega = float(v[3 + i])
            d = self._slip(k.coef[i], v, i)
            fx, fy, _ = tyre_force(d[0], d[1], k.den[i], k.loads[i], k.tyre)
            vcx = r * omega - float(d[0])
            reading.speed_m_s = r * omega
            reading.travel_m += dt * r * omega
            drive = self.drives.get(name)
            reading.torque_nm = drive.output_nm(omega) if drive is not None else 0.0
            reading.angle_rad = self.angle(name)
            reading.slip = float(d[0]) / k.den[i]
            reading.slip_angle_rad = math.atan2(-float(d[1]), abs(vcx)) if (
                abs(vcx) + abs(float(d[1])) > 1e-9) else 0.0
            reading.force_n = (fx, fy)
            reading.load_n = k.loads[i]
            reading.braked = braked
            reading.held = held[i]

    def _brake_torque_to_hold(self, k: _Step, v0: np.ndarray, v: np.ndarray, i: int) -> float:
        """The brake torque that holds wheel i at rest over the step [N m]."""
        f, _ = self._forces(k, v, jacobian=False)
        return float(self._inertia[i]) * (0.0 - float(v0[3 + i])) / k.dt - float(f[3 + i])

    def _mass(self, dt: float) -> np.ndarray:
        return np.concatenate(([self.mass_kg, self.mass_kg, self.yaw_inertia_kg_m2],
                               self._inertia)) / dt

    def _solve(self, k: _Step, v0: np.ndarray, held: list[bool]) -> np.ndarray:
        mass = self._mass(k.dt)
        half = 0.5 * math.hypot(self.params.geometry.wheelbase_m, self.params.geometry.track_m)
        r = self.params.geometry.wheel_radius_m
        scale = np.array([1.0, 1.0, half, r, r, r, r]) / mass
        return self._solve_held(lambda x, jac: self._forces(k, x, jac), mass, v0, held, scale)

    def _forces(self, k: _Step, v: np.ndarray, jacobian: bool
                ) -> tuple[np.ndarray, np.ndarray]:
        """Generalised forces f(v) (N, N, N m, 4 x N m) and, with ``jacobian``, df/dv
        (symmetric negative semi-definite). Plain floats: 4 wheels of 2 x 4 non-zeros are
        cheaper in Python than in numpy's small-array calls."""
        r = self._radius
        floor = self.params.slip_speed_floor_m_s
        u, w, rz = float(v[0]), float(v[1]), float(v[2])
        f = [float(x) for x in k.const]
        jac = [[0.0] * 7 for _ in range(7)] if jacobian else []
        for i in range(4):
            a0, a1, a2, b0, b1, b2 = k.coef[i]
            n = 3 + i
            omega = float(v[n])
            dx = a0 * u + a1 * w + a2 * rz + r * omega
            dy = b0 * u + b1 * w + b2 * rz
            fx, fy, (hxx, hxy, hyy) = tyre_force(dx, dy, k.den[i], k.loads[i], k.tyre)
            f[0] -= a0 * fx + b0 * fy
            f[1] -= a1 * fx + b1 * fy
            f[2] -= a2 * fx + b2 * fy
            m_rr, dm_rr = rolling_resistance_torque(r * omega, k.loads[i], k.tyre, floor)
            drive = self._drive_at[i]
            factor, dfactor = drive.flow_factor(omega) if drive is not None else (1.0, 0.0)
            f[n] += -r * fx + m_rr + k.brake_slip[i] + k.torque[i] * factor
            if jacobian:
                # -A_i^T H A_i over the columns (0, 1, 2, n): A_i's rows ax = (a0, a1, a2, r),
                # by = (b0, b1, b2, 0)
                idx = (0, 1, 2, n)
                ax = (a0, a1, a2, r)
                by = (b0, b1, b2, 0.0)
                for p_ in range(4):
                    hx = hxx * ax[p_] + hxy * by[p_]   # (H A)'s column entries
                    hy = hxy * ax[p_] + hyy * by[p_]
                    row = jac[idx[p_]]
                    for q in range(4):
                        row[idx[q]] -= hx * ax[q] + hy * by[q]
                jac[n][n] += dm_rr * r + k.torque[i] * dfactor
        return np.array(f), (np.array(jac) if jacobian else _NO_JACOBIAN)
