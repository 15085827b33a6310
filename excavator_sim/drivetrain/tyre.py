"""Tyre-ground force: the brush model with combined slip (Fiala 1954; Pacejka 2012, ch. 3).

The law. A tyre's tread is a row of elastic bristles over a contact length ``2a``; each
bristle sticks to the ground until its shear reaches the friction ``mu p(x)`` under the
(parabolic) pressure ``p(x)``, then slides. Integrating over the contact (Pacejka, *Tire and
Vehicle Dynamics*, 3rd ed. 2012, section 3.2, "The brush model", combined slip in 3.2.3;
the pure lateral case is Fiala's, E. Fiala, "Seitenkraefte am rollenden Luftreifen",
VDI-Zeitschrift 96, 1954) gives, for the *theoretical slip* vector ``sigma``,

    F = mu F_z (1 - lambda^3) sigma / |sigma|,   lambda = 1 - theta |sigma|,
    theta = C / (3 mu F_z),                       (|sigma| < 1 / theta; beyond: F = mu F_z)

``C`` is the slip stiffness, ``dF/d sigma`` at 0: with one bristle stiffness in both
directions (the model's own assumption) the longitudinal slip stiffness equals the cornering
stiffness, ``C = c F_z`` with the *cornering coefficient* ``c`` [1/rad]. The force grows
linearly (``C sigma``) at small slip and saturates at the friction circle ``mu F_z`` in any
direction: longitudinal and lateral slip share one friction budget (a wheel spinning under
torque loses its side grip).

Slip. ``sigma = d / V_r``: the contact's slip *velocity* ``d`` (the tread's speed over the
ground, ``d_x = r omega - V_cx`` along the wheel, ``d_y = -V_cy`` across it, ``V_c`` the wheel
centre's velocity in the wheel's frame) over the rolling speed. As for the tracks
(:mod:`excavator_sim.drivetrain.traction`), the denominator is ``hypot(max(|r omega|, |V_cx|),
floor)``: Pacejka's ``V_r = r omega`` when driving, the travel speed when braking (a locked
wheel has ``|sigma_x| = 1``), a floor [m/s] at rest. Below the floor the force is a stiff
linear damper on the slip velocity (``C / floor``), which the drive train integrates
implicitly (:mod:`excavator_sim.drivetrain.wheeled`).

Why this law: it is the simplest published law with both slips, a friction circle and a
cornering stiffness, and its force is the gradient of a convex potential of the slip velocity
(``|F|`` grows monotonically with ``|d|`` along ``d``), which keeps the vehicle's implicit step
a convex minimisation (unique, stable at any step). Its parameters are the two a site can
estimate: the friction coefficient ``mu`` of the ground and the cornering coefficient ``c``.

Rolling resistance is a moment on the wheel against its rotation, ``f_r F_z r``
(:func:`rolling_resistance_torque`): the contact pressure's forward shift on a deforming tyre.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from excavator_sim.errors import SimConfigError


@dataclass(frozen=True)
class TyreParams:
    """One tyre on its ground. ``friction`` ``mu`` [-], ``cornering_coefficient`` ``c``
    [1/rad] (slip stiffness / wheel load), ``rolling_resistance`` ``f_r`` [-] (resistance /
    wheel load), ``radius_m`` the rolling radius [m]."""

    friction: float
    cornering_coefficient_1_rad: float
    rolling_resistance: float
    radius_m: float

    def __post_init__(self) -> None:
        checks = (("friction", self.friction, 0.05, 2.0, "a friction coefficient"),
                  ("cornering_coefficient_1_rad", self.cornering_coefficient_1_rad, 0.5, 50.0,
                   "a slip stiffness per wheel load"),
                  ("rolling_resistance", self.rolling_resistance, 0.0, 0.5,
                   "a rolling resistance per wheel load"),
                  ("radius_m", self.radius_m, 0.1, 2.0, "a rolling radius"))
        for name, value, low, high, what in checks:
            if not (isinstance(value, int | float) and math.isfinite(value)
                    and low <= value <= high):
                raise SimConfigError(f"tyre: {name} = {value!r} is outside [{low:g}, {high:g}] "
                                     f"({what}); set it in that range")


def brush_force(slip_norm: float, load_n: float, friction: float,
                cornering_coefficient: float) -> tuple[float, float]:
    """``(|F|, d|F| / d|sigma|)`` [N, N] of the brush model at theoretical slip
    ``|sigma|`` = ``slip_norm`` >= 0 under the wheel load ``load_n`` [N]."""
    if load_n <= 0.0:
        return 0.0, 0.0
    cap = friction * load_n
    theta = cornering_coefficient / (3.0 * friction)
    lam = 1.0 - theta * slip_norm
    if lam <= 0.0:
        return cap, 0.0
    return cap * (1.0 - lam * lam * lam), cornering_coefficient * load_n * lam * lam


def slip_scale(rolling_m_s: float, travel_m_s: float, floor_m_s: float) -> float:
    """The slip's denominator ``hypot(max(|r omega|, |V_cx|), floor)`` [m/s]."""
    return math.hypot(max(abs(rolling_m_s), abs(travel_m_s)), floor_m_s)


def tyre_force(dx: float, dy: float, scale_m_s: float, load_n: float, tyre: TyreParams
               ) -> tuple[float, float, tuple[float, float, float]]:
    """Force on the machine ``(F_x, F_y)`` [N] in the wheel's frame (x along the wheel, y to
    its left) from the slip velocity ``(dx, dy)`` [m/s] (tread over ground) at slip scale
    ``scale_m_s`` [m/s], and the force's Jacobian ``dF/dd`` as ``(h_xx, h_xy, h_yy)`` [N s/m]
    (symmetric, positive semi-definite)."""
    speed = math.hypot(dx, dy)
    norm = speed / scale_m_s
    mag, slope = brush_force(norm, load_n, tyre.friction, tyre.cornering_coefficient_1_rad)
    if speed < 1e-12 * scale_m_s:
        k = tyre.cornering_coefficient_1_rad * max(load_n, 0.0) / scale_m_s
        return k * dx, k * dy, (k, 0.0, k)
    ex, ey = dx / speed, dy / speed
    radial = slope / scale_m_s          # along the slip direction
    tangent = mag / speed               # across it (the force turns with the slip)
    return (mag * ex, mag * ey,
            (radial * ex * ex + tangent * ey * ey, (radial - tangent) * ex * ey,
             radial * ey * ey + tangent * ex * ex))


def rolling_resistance_torque(rolling_m_s: float, load_n: float, tyre: TyreParams,
                              floor_m_s: float) -> tuple[float, float]:
    """``(M, dM / d(r omega))`` [N m, N s]: the rolling resistance's moment on the wheel,
    ``-f_r F_z r sign(r omega)`` with the sign made smooth below ``floor_m_s`` (like the
    tracks' running-gear resistance)."""
    z = rolling_m_s / floor_m_s
    root = math.sqrt(1.0 + z * z)
    m = tyre.rolling_resistance * max(load_n, 0.0) * tyre.radius_m
    return -m * z / root, -m / (root * root * root) / floor_m_s
