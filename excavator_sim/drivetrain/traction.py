"""Track-soil traction: slip and the Janosi-Hanamoto thrust in Wong's uniform-pressure form.

Shear stress under a track element (Janosi & Hanamoto 1961) is
``tau = (c + p tan(phi)) (1 - exp(-j / K))``, j the shear displacement. Under a track running
with slip ``i`` the displacement grows linearly from the front, ``j = i x``; integrated over the
contact length ``l`` with uniform pressure (Wong, *Theory of Ground Vehicles*, 2008, ch. 2):

    F = (A c + W tan(phi)) [1 - K / (i l) (1 - exp(-i l / K))]

Slip for driving and braking (Wong's two definitions, one formula): the shear displacement
grows with the faster of the track speed ``v_t = r omega`` and the ground speed ``V``,

    i = (v_t - V) / max(|v_t|, |V|)

so ``i = 1 - V / v_t`` when driving (track faster: thrust forward) and ``i = v_t / V - 1`` (the
negative of Wong's skid ``1 - v_t / V``) when braking (thrust backward); a locked track sliding
on the ground has ``|i| = 1``.

Low speed. At ``v_t, V -> 0`` the slip is 0/0 and the thrust-speed curve is infinitely stiff.
The denominator is regularised, ``hypot(max(|v_t|, |V|), floor)`` with ``floor`` [m/s]
(``traction.slip_speed_floor_m_s``): below the floor the thrust is a stiff, linear function of
the slip *velocity*, ``F ~ F_max l / (2 K floor) (v_t - V)``, which the drive train integrates
implicitly (:mod:`excavator_sim.drivetrain.vehicle`). A braked machine on a slope then holds
with a creep speed of ``floor * i_hold``, ``i_hold`` the slip at which the thrust carries the
slope (about 0.01 on dry sand at 12 deg: 4 mm in 3 minutes at the default 2 mm/s): bounded and
documented, not zero.
"""

from __future__ import annotations

import math


def janosi_ratio(x: float) -> float:
    """``h(x) = 1 - (1 - exp(-x)) / x`` for ``x = |i| l / K >= 0``: the share of the largest
    thrust a track develops at slip ``i`` (0 at rest, -> 1 at large slip)."""
    if x < 1e-4:
        return x * (0.5 - x * (1.0 / 6.0 - x / 24.0))
    return 1.0 - (1.0 - math.exp(-x)) / x


def janosi_ratio_slope(x: float) -> float:
    """``h'(x) = (1 - exp(-x) (1 + x)) / x^2`` (1/2 at 0)."""
    if x < 1e-4:
        return 0.5 - x * (1.0 / 3.0 - x / 8.0)
    return (1.0 - math.exp(-x) * (1.0 + x)) / (x * x)


def slip(track_speed: float, ground_speed: float, floor: float) -> float:
    """Slip ``(v_t - V) / hypot(max(|v_t|, |V|), floor)`` [-]: positive driving, negative
    braking; the floor makes it smooth (and stiff) at rest and changes it by a relative
    ``(floor / speed)^2 / 2`` at speed (2e-6 at 1 m/s with the 2 mm/s default)."""
    return (track_speed - ground_speed) / math.hypot(max(abs(track_speed), abs(ground_speed)),
                                                     floor)


def smooth_sign(z: float) -> tuple[float, float]:
    """``(z / sqrt(1 + z^2), its derivative)``: a sign function that is linear (slope 1) near
    0, for Coulomb-type resistances regularised below a floor speed (``z = v / floor``)."""
    root = math.sqrt(1.0 + z * z)
    return z / root, 1.0 / (root * root * root)


def thrust(max_thrust: float, slip_ratio: float, contact_length: float,
           shear_modulus: float) -> float:
    """Janosi-Hanamoto thrust of one track [N] at ``slip_ratio``, in Wong's uniform-pressure
    closed form, with the sign of the slip."""
    x = abs(slip_ratio) * contact_length / shear_modulus
    return math.copysign(max_thrust * janosi_ratio(x), slip_ratio)


def thrust_slope(max_thrust: float, slip_ratio: float, contact_length: float,
                 shear_modulus: float) -> float:
    """``dF / di`` [N] of :func:`thrust`."""
    scale = contact_length / shear_modulus
    return max_thrust * scale * janosi_ratio_slope(abs(slip_ratio) * scale)


def steady_slip(force: float, max_thrust: float, contact_length: float,
                shear_modulus: float) -> float:
    """The slip at which a track develops ``force`` [N] (inverse of :func:`thrust`, by
    bisection); ``inf`` with the force's sign when ``|force| >= max_thrust``."""
    if abs(force) >= max_thrust:
        return math.copysign(math.inf, force)
    lo, hi = 0.0, 1.0
    while thrust(max_thrust, hi, contact_length, shear_modulus) < abs(force):
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if thrust(max_thrust, mid, contact_length, shear_modulus) < abs(force):
            lo = mid
        else:
            hi = mid
    return math.copysign(0.5 * (lo + hi), force)


# Lateral stations per track: midpoints of equal segments of the contact length (a midi's track
# has 5-6 road wheels a side). With uniform pressure their pivot-turn moment is exactly
# Wong's mu_t W l / 4 for any even count.
LATERAL_STATIONS = 8


def station_offsets(contact_length: float) -> tuple[float, ...]:
    """x [m] of the lateral stations along a track centred on the base origin."""
    n = LATERAL_STATIONS
    return tuple(contact_length * ((k + 0.5) / n - 0.5) for k in range(n))
