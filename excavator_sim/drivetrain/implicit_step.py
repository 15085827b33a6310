"""The implicit step both ground machines share (:class:`~excavator_sim.drivetrain.vehicle.
TrackedVehicle`, :class:`~excavator_sim.drivetrain.wheeled.WheeledVehicle`): the backward-Euler
step of the dissipative forces as the minimiser of a strictly convex incremental potential
(:func:`minimise_step`), the holding brakes' stick/slip around it (:func:`settle_brakes`), and
the rigid body in the ground plane they both are (:class:`PlanarBody`: mass, pose, the step's
constant forces, the semi-implicit position update and the IMU's specific force). Pure (numpy
only). The machines supply their forces ``f(v)`` (with a symmetric negative
semi-definite Jacobian: every velocity-dependent force is the negative gradient of a convex
potential), their diagonal mass and their unknowns: the body's ``u, w, r_z`` followed by one
speed per braked wheel or sprocket [rad/s].
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from excavator_sim.errors import SimConfigError

MAX_ITERATIONS = 60
TOLERANCE_M_S = 1e-9    # converged when the residual (in track/wheel-speed units) is below this


@dataclass(frozen=True)
class ExternalLoad:
    """A load on the machine from outside (the bucket's soil force): force [N] in base_link's
    axes and the yaw moment about the base origin [N m]."""

    force_body_n: tuple[float, float, float] = (0.0, 0.0, 0.0)
    moment_z_nm: float = 0.0


Forces = Callable[[np.ndarray, bool], tuple[np.ndarray, np.ndarray]]


def minimise_step(forces: Forces, mass: np.ndarray, v0: np.ndarray, start: np.ndarray,
                  free: np.ndarray, scale: np.ndarray) -> tuple[np.ndarray, bool, int]:
    """The backward-Euler step as the minimiser of the incremental potential: the ``free``
    unknowns where ``mass (v - v0) - f(v)`` vanishes (``mass`` = the diagonal mass over dt;
    the others stay at ``start``). Newton's method with an exact line search on the slope of
    the potential along the Newton direction (``f``'s Jacobian must be symmetric negative
    semi-definite). Converged when ``max |scale * gradient|`` over the free unknowns is below
    ``TOLERANCE_M_S`` (``scale`` turns the gradient into speeds).

    Returns:
        (v, converged, iterations).
    """
    n = v0.size
    all_free = free.size == n
    v = start.copy()

    def gradient(x: np.ndarray, jacobian: bool) -> tuple[np.ndarray, np.ndarray]:
        f, df = forces(x, jacobian)
        return mass * (x - v0) - f, df

    g, df = gradient(v, True)
    iterations = 0
    for it in range(MAX_ITERATIONS):
        if float(np.max(np.abs((scale * g)[free]))) < TOLERANCE_M_S:
            return v, True, iterations
        iterations = it + 1
        hessian = np.diag(mass) - df
        delta = np.zeros(n)
        try:
            if all_free:
                delta = np.linalg.solve(hessian, -g)
            else:
                delta[free] = np.linalg.solve(hessian[np.ix_(free, free)], -g[free])
        except np.linalg.LinAlgError:
            break
        slope0 = float(g @ delta)   # < 0: a descent direction of the convex potential
        if slope0 >= 0.0:
            break
        step = 1.0
        # the full step with its Jacobian: taken as it is in most iterations (no second call)
        g_t, df_t = gradient(v + delta, True)
        slope = float(g_t @ delta)
        if slope > 0.1 * abs(slope0):   # the minimum lies well before the full step
            lo, hi = 0.0, 1.0
            for _ in range(40):
                step = 0.5 * (lo + hi)
                g_t, _ = gradient(v + step * delta, False)
                slope = float(g_t @ delta)
                if abs(slope) <= 0.1 * abs(slope0):
                    break
                if slope > 0.0:
                    hi = step
                else:
                    lo = step
            v = v + step * delta
            g, df = gradient(v, True)
        else:
            v, g, df = v + delta, g_t, df_t
    converged = float(np.max(np.abs((scale * g)[free]))) < TOLERANCE_M_S
    return v, converged, iterations


def settle_brakes(solve: Callable[[list[bool]], np.ndarray],
                  torque_to_hold: Callable[[np.ndarray, int], float], v0: np.ndarray,
                  braked: bool, capacity_nm: float, brake_slip: list[float],
                  rounds: int) -> tuple[np.ndarray, list[bool]]:
    """The step with the holding brakes' stick/slip: a braked wheel (sprocket) is first held at
    rest; where holding it needs more than ``capacity_nm`` the brake slips at its capacity
    (``brake_slip[i]`` set, the torque ``solve``'s forces add) and the step is solved again, at
    most ``rounds`` times. A slipping brake stops the wheel, never turns it back: one whose
    speed changed sign is held from there on.

    Args:
        solve: the step's velocities with the wheels ``held`` (True) at rest.
        torque_to_hold: the brake torque [N m] that holds wheel ``i`` at rest, given the
            step's velocities.
        v0: the velocities at the start of the step; the wheels' speeds are its last
            ``len(brake_slip)`` entries [rad/s].
        braked: the brakes apply (the drives may not produce torque).
        capacity_nm: the brake's holding torque [N m].
        brake_slip: per wheel, the slipping brake's torque [N m] (updated in place).
        rounds: how many times the step is solved again at most.

    Returns:
        (v, held): the step's velocities and, per wheel, whether its brake holds it.
    """
    wheels = len(brake_slip)
    first = v0.size - wheels
    held = [braked] * wheels   # try holding a braked wheel first
    v = solve(held)
    for _ in range(rounds):
        over = False
        for i in range(wheels):
            if held[i]:
                need = torque_to_hold(v, i)
                if abs(need) > capacity_nm:   # the brake slips at its capacity
                    held[i] = False
                    brake_slip[i] = math.copysign(capacity_nm, need)
                    over = True
        if not over:
            break
        v = solve(held)
    for i in range(wheels):
        if braked and not held[i] and v0[first + i] * v[first + i] < 0.0:
            v[first + i] = 0.0
            held[i] = True
    return v, held


class PlanarBody:
    """The machine's rigid body in the ground plane, as both machines integrate it: mass and
    yaw inertia, pose in world (``x``, ``y`` [m], ``yaw`` [rad]), the step's unknowns
    ``velocity`` (``u``, ``w`` [m/s] along the body's x and y, ``r_z`` [rad/s], then one speed
    per wheel or sprocket [rad/s]), the IMU's specific force and the Newton counters.

    Args:
        kind: the machine's name for messages ("tracked vehicle", "wheeled vehicle").
        mass_kg: the machine's mass [kg], > 0.
        yaw_inertia_kg_m2: its yaw inertia [kg m^2], > 0.
        x, y, yaw: the initial pose [m, m, rad].
        unknowns: the size of ``velocity`` (3 + the wheels or sprockets).
        gravity_m_s2: gravity [m/s^2] (the specific force at rest).
    """

    def __init__(self, kind: str, mass_kg: float, yaw_inertia_kg_m2: float, x: float,
                 y: float, yaw: float, unknowns: int, gravity_m_s2: float) -> None:
        self.mass_kg = float(mass_kg)
        self.yaw_inertia_kg_m2 = float(yaw_inertia_kg_m2)
        if not (self.mass_kg > 0.0 and self.yaw_inertia_kg_m2 > 0.0):
            raise SimConfigError(f"{kind}: mass {mass_kg} kg and yaw inertia "
                                 f"{yaw_inertia_kg_m2} kg m^2 must be > 0")
        self.x, self.y, self.yaw = float(x), float(y), float(yaw)
        self.velocity = np.zeros(unknowns)
        self.specific_force = np.array([0.0, 0.0, gravity_m_s2])   # body axes [m/s^2]
        self.unconverged = 0   # steps whose Newton iteration did not converge
        self.iterations = 0    # Newton iterations of the last step

    @property
    def ground_speed_m_s(self) -> float:
        """Speed over ground along the body's x at its origin [m/s] (a radar sensor)."""
        return float(self.velocity[0])

    @property
    def yaw_rate_rad_s(self) -> float:
        return float(self.velocity[2])

    def world_velocity(self, attitude: np.ndarray) -> tuple[float, float, float]:
        """(dx/dt, dy/dt, dyaw/dt) of the base in world [m/s, m/s, rad/s]."""
        u, w, rz = (float(v) for v in self.velocity[:3])
        return (float(attitude[0, 0]) * u + float(attitude[0, 1]) * w,
                float(attitude[1, 0]) * u + float(attitude[1, 1]) * w, rz)

    def _constant_forces(self, gb: np.ndarray, ext: ExternalLoad, v: np.ndarray) -> np.ndarray:
        """Gravity (``gb``: gravity in body axes [m/s^2]), the external load and the
        gyroscopic terms at ``v`` [N, N, N m, then 0 per wheel]."""
        m = self.mass_kg
        u, w, rz = float(v[0]), float(v[1]), float(v[2])
        f = np.zeros(v.size)
        f[0] = m * float(gb[0]) + ext.force_body_n[0] + m * rz * w
        f[1] = m * float(gb[1]) + ext.force_body_n[1] - m * rz * u
        f[2] = ext.moment_z_nm
        return f

    def _solve_held(self, forces: Forces, mass: np.ndarray, v0: np.ndarray, held: list[bool],
                    scale: np.ndarray) -> np.ndarray:
        """The step's velocities (:func:`minimise_step` from ``v0``) with the ``held`` wheels
        (the last ``len(held)`` unknowns) at rest; counts the iterations and a step that did
        not converge."""
        first = v0.size - len(held)
        free = np.array([n for n in range(v0.size) if not (n >= first and held[n - first])])
        start = v0.copy()
        for i, hold in enumerate(held):
            if hold:
                start[first + i] = 0.0
        v, converged, self.iterations = minimise_step(forces, mass, v0, start, free, scale)
        if not converged:
            self.unconverged += 1
        return v

    def _move(self, dt: float, v0: np.ndarray, v: np.ndarray, attitude: np.ndarray,
              gb: np.ndarray | tuple[float, float, float]) -> None:
        """Takes the step's velocities ``v`` (from ``v0``): positions follow with them
        (semi-implicit Euler, the ground-plane velocity projected by the ``attitude``), and the
        specific force is the body's acceleration less gravity ``gb`` (body axes)."""
        u, w, rz = (float(x) for x in v[:3])
        self.velocity = v
        self.x += dt * (float(attitude[0, 0]) * u + float(attitude[0, 1]) * w)
        self.y += dt * (float(attitude[1, 0]) * u + float(attitude[1, 1]) * w)
        self.yaw += dt * rz
        ax = (u - float(v0[0])) / dt - rz * w
        ay = (w - float(v0[1])) / dt + rz * u
        self.specific_force = np.array([ax - float(gb[0]), ay - float(gb[1]), -float(gb[2])])
