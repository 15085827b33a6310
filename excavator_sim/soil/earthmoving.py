"""The Fundamental Earthmoving Equation (FEE) for a flat blade: the validation model.

Reece (1964) and McKyes (1985, "Soil Cutting and Tillage", ch. 4): a wide flat blade at rake
angle alpha (blade against the horizontal) cutting at depth d moves a soil wedge that fails
along a plane at angle beta. The force on the blade per unit width is

    F / w = gamma d^2 N_gamma + c d N_c + c_a d N_a + q d N_q

with gamma = rho g the soil's unit weight, c its cohesion, c_a the soil-blade adhesion, q a
surcharge on the surface, and, with X = cos(alpha + delta) + sin(alpha + delta) cot(beta + phi),

    N_gamma = (cot alpha + cot beta) / (2 X)
    N_c     = (1 + cot beta cot(beta + phi)) / X
    N_a     = (1 - cot alpha cot(beta + phi)) / X
    N_q     = (cot alpha + cot beta) / X

(phi internal friction angle, delta soil-blade friction angle). The failure plane is the one
that minimises F (passive failure). F acts at delta from the blade normal; besides it the
soil-blade adhesion C_a = c_a d w / sin(alpha) acts along the blade face (length d / sin alpha),
on the blade in the same sense as the friction part of F (McKyes 1985, ch. 4; Reece 1964:
the wedge's force balance carries both). On the blade, against the travel and downwards:

    H = F sin(alpha + delta) + C_a cos(alpha) = F sin(alpha + delta) + c_a d w cot(alpha)
    V = F cos(alpha + delta) - C_a sin(alpha) = F cos(alpha + delta) - c_a d w

(the N_a term inside F is the adhesion's share of the wedge balance; the C_a components above are
the adhesion acting on the blade itself; leaving them out underestimates H in sticky soil at low
rake by up to 15x).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from excavator_sim.soil.errors import SoilInputError

GRAVITY_M_S2 = 9.81


@dataclass(frozen=True)
class FeeSoil:
    """Soil constants of the FEE (SI: kg/m^3, Pa, rad)."""

    density_kg_m3: float
    cohesion_pa: float
    adhesion_pa: float
    internal_friction_rad: float
    interface_friction_rad: float
    surcharge_pa: float = 0.0


@dataclass(frozen=True)
class FeeResult:
    """Blade force [N] (``force_n`` the resultant F at delta from the blade normal, horizontal
    against travel and vertical downwards on the blade, both with the adhesion C_a
    [``adhesion_n``] along the blade), failure plane angle beta [rad] and the N factors."""

    force_n: float
    horizontal_n: float
    vertical_n: float
    beta_rad: float
    n_gamma: float
    n_c: float
    n_a: float
    n_q: float
    adhesion_n: float = 0.0


def fee_factors(
    alpha: float, beta: np.ndarray | float, phi: float, delta: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """N_gamma, N_c, N_a, N_q for rake ``alpha``, failure angle(s) ``beta`` [rad]."""
    beta = np.asarray(beta, dtype=float)
    cot_a = 1.0 / math.tan(alpha)
    cot_b = 1.0 / np.tan(beta)
    cot_bp = 1.0 / np.tan(beta + phi)
    x = math.cos(alpha + delta) + math.sin(alpha + delta) * cot_bp
    return ((cot_a + cot_b) / (2.0 * x), (1.0 + cot_b * cot_bp) / x,
            (1.0 - cot_a * cot_bp) / x, (cot_a + cot_b) / x)


def fee_blade_force(soil: FeeSoil, width_m: float, depth_m: float, rake_rad: float,
                    gravity_m_s2: float = GRAVITY_M_S2) -> FeeResult:
    """FEE force on a flat blade of ``width_m`` at ``depth_m`` (tip below the surface, m) and
    rake angle ``rake_rad`` (0 < rake < pi/2 + ... the blade's angle to the horizontal)."""
    for name, value, lo, hi in (("width_m", width_m, 1e-3, 100.0),
                                ("depth_m", depth_m, 0.0, 50.0),
                                ("rake_rad", rake_rad, 0.01, math.pi - 0.01)):
        if not (math.isfinite(value) and lo <= value <= hi):
            raise SoilInputError(f"FEE {name}={value!r} is outside [{lo}, {hi}]; pass a value "
                                 "in that range (SI units)")
    if depth_m == 0.0:
        return FeeResult(0.0, 0.0, 0.0, float("nan"), 0.0, 0.0, 0.0, 0.0)
    phi, delta = soil.internal_friction_rad, soil.interface_friction_rad
    gamma = soil.density_kg_m3 * gravity_m_s2
    # failure planes where the wedge can form (X > 0), searched densely: F(beta) is smooth
    beta = np.linspace(0.005, 0.5 * math.pi - 0.005, 4000)
    ng, nc, na, nq = fee_factors(rake_rad, beta, phi, delta)
    x_ok = (math.cos(rake_rad + delta) + math.sin(rake_rad + delta) / np.tan(beta + phi)) > 1e-9
    d = depth_m
    f = width_m * (gamma * d * d * ng + soil.cohesion_pa * d * nc
                   + soil.adhesion_pa * d * na + soil.surcharge_pa * d * nq)
    f = np.where(x_ok, f, np.inf)
    k = int(np.argmin(f))
    total = float(f[k])
    adhesion = soil.adhesion_pa * d * width_m / math.sin(rake_rad)  # C_a along the blade [N]
    horizontal = total * math.sin(rake_rad + delta) + adhesion * math.cos(rake_rad)
    vertical = total * math.cos(rake_rad + delta) - adhesion * math.sin(rake_rad)
    return FeeResult(total, horizontal, vertical, float(beta[k]), float(ng[k]), float(nc[k]),
                     float(na[k]), float(nq[k]), adhesion)
