"""The implicit step both ground machines share (:class:`~excavator_sim.drivetrain.vehicle.
TrackedVehicle`, :class:`~excavator_sim.drivetrain.wheeled.WheeledVehicle`): the backward-Euler
step of the dissipative forces as the minimiser of a strictly convex incremental potential
(:func:`minimise_step`), and the holding brakes' stick/slip around it (:func:`settle_brakes`).
Pure (numpy only). The machines supply their forces ``f(v)`` (with a symmetric negative
semi-definite Jacobian: every velocity-dependent force is the negative gradient of a convex
potential), their diagonal mass and their unknowns: the body's ``u, w, r_z`` followed by one
speed per braked wheel or sprocket [rad/s].
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

MAX_ITERATIONS = 60
TOLERANCE_M_S = 1e-9    # converged when the residual (in track/wheel-speed units) is below this

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
