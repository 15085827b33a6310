"""Terramechanics constants of the ground under the tracks (Bekker + Mohr-Coulomb + Janosi).

One :class:`TractionSoil` per terrain: the constants of the pressure-sinkage law
``p = (k_c / b + k_phi) z^n`` (Bekker 1956), of the Mohr-Coulomb shear strength
``tau_max = c + p tan(phi)`` and of the Janosi-Hanamoto shear law
``tau = tau_max (1 - exp(-j / K))`` (Janosi & Hanamoto 1961). SI units throughout: Wong's
table gives k_c in kN/m^(n+1) and k_phi in kN/m^(n+2); here they are N/m^(n+1), N/m^(n+2).

The shipped soils (:data:`SHIPPED_SOILS`) are rows of the terrain-values table of J. Y. Wong,
*Theory of Ground Vehicles*, 4th ed., Wiley 2008, ch. 2 (Land Locomotion Lab / WES / Wong data),
read from a machine-readable transcription that cites it (research note
``drives_traction_wheeled.md`` section 1.2); the shear deformation modulus K of each is cited
beside it (Wong's table has no K column).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from excavator_sim.errors import SimConfigError


@dataclass(frozen=True)
class TractionSoil:
    """Constants of one terrain for traction, sinkage and turning."""

    cohesion_pa: float           # c [Pa]
    friction_angle_rad: float    # phi [rad]
    shear_modulus_m: float       # K, Janosi-Hanamoto shear deformation modulus [m]
    sinkage_exponent: float      # n [-]
    sinkage_kc: float            # k_c [N/m^(n+1)]
    sinkage_kphi: float          # k_phi [N/m^(n+2)]
    name: str = ""

    def __post_init__(self) -> None:
        where = f"traction soil {self.name!r}" if self.name else "traction soil"
        for key in ("cohesion_pa", "sinkage_kc"):
            if not (math.isfinite(getattr(self, key)) and getattr(self, key) >= 0.0):
                raise SimConfigError(f"{where}: {key} = {getattr(self, key)} must be a finite "
                                     "number >= 0")
        for key in ("shear_modulus_m", "sinkage_exponent", "sinkage_kphi"):
            if not (math.isfinite(getattr(self, key)) and getattr(self, key) > 0.0):
                raise SimConfigError(f"{where}: {key} = {getattr(self, key)} must be a finite "
                                     "number > 0")
        if not 0.0 <= self.friction_angle_rad < 0.5 * math.pi:
            raise SimConfigError(f"{where}: friction_angle_rad = {self.friction_angle_rad} must "
                                 "lie in [0, pi/2)")

    def max_thrust_n(self, contact_area_m2: float, load_n: float) -> float:
        """Largest thrust of a track, ``A c + W tan(phi)`` [N] (Janosi-Hanamoto at large slip)."""
        return contact_area_m2 * self.cohesion_pa + max(load_n, 0.0) * math.tan(
            self.friction_angle_rad)

    def compaction_resistance_n(self, load_n: float, width_m: float, length_m: float) -> float:
        """Bekker's compaction (motion) resistance of one track [N] under ``load_n`` on a
        ``width_m`` x ``length_m`` contact of uniform pressure: the work of pressing a rut of
        the static sinkage z0, ``R_c = (W / l)^((n+1)/n) / ((n+1) (k_c + b k_phi)^(1/n))``
        (Wong 2008 ch. 2; closed form re-derived in the research note, section 1.1)."""
        if load_n <= 0.0:
            return 0.0
        n = self.sinkage_exponent
        stiffness = self.sinkage_kc + width_m * self.sinkage_kphi
        # in logarithms: n = 0.13 (heavy clay) raises to the power 8.7
        log_r = ((n + 1.0) / n) * math.log(load_n / length_m) - math.log(stiffness) / n
        return math.exp(log_r) / (n + 1.0)

    def sinkage_m(self, load_n: float, width_m: float, length_m: float) -> float:
        """Static sinkage z0 [m] of a track under ``load_n`` (uniform pressure)."""
        if load_n <= 0.0:
            return 0.0
        k = self.sinkage_kc / width_m + self.sinkage_kphi
        return float((load_n / (width_m * length_m) / k) ** (1.0 / self.sinkage_exponent))


def _deg(value: float) -> float:
    return round(math.radians(value), 5)


# name -> (c [Pa], phi [rad], K [m], n, k_c [N/m^(n+1)], k_phi [N/m^(n+2)]); sources above and:
# - heavy_clay: Wong 2008 "Heavy clay (25 % moisture, WES)"; K 0.006 m as the transcription
#   uses for heavy/lean clay at low moisture (Wong: about 0.6 cm for clay at maximum compaction).
#   Firm: A c + W tan(phi) is 2.6 W, the travel drive's torque limit acts first (research
#   note 1.4). The default ground.
# - lete_sand: Wong 2008 "LETE sand"; K 0.012 m (projectchrono/chrono
#   SynSCMTerrainAgent.h InitializeParametersAsHard, Wong's LETE values).
# - dry_sand: Wong 2008 "Dry sand (LLL)"; K 0.025 m (Chrono test_WVP_softsoil_traction's loose
#   sand; Wong: 1 cm firm to 2.5 cm loose sand). Soft: thrust at most ~0.56 W, slips first.
SHIPPED_SOILS: dict[str, dict[str, float]] = {
    name: dict(zip(("cohesion_pa", "friction_angle_rad", "shear_modulus_m", "sinkage_exponent",
                    "sinkage_kc", "sinkage_kphi"), values, strict=True))
    for name, values in {
        "heavy_clay": (68950.0, _deg(34.0), 0.006, 0.13, 12700.0, 1555950.0),
        "lete_sand": (1300.0, _deg(31.1), 0.012, 0.79, 102000.0, 5301000.0),
        "dry_sand": (1040.0, _deg(28.0), 0.025, 1.1, 990.0, 1528430.0),
    }.items()}


@dataclass(frozen=True)
class SoilPatch:
    """A rectangle of other soil in world x, y [m] (a patch of soft ground on the path)."""

    soil: TractionSoil
    x_min: float
    x_max: float
    y_min: float
    y_max: float

    def contains(self, x: float, y: float) -> bool:
        return self.x_min <= x <= self.x_max and self.y_min <= y <= self.y_max


@dataclass(frozen=True)
class SoilMap:
    """Which soil lies where: ``default`` everywhere but the patches (the first that contains
    a point wins)."""

    default: TractionSoil
    patches: tuple[SoilPatch, ...] = ()

    def soil_at(self, x: float, y: float) -> TractionSoil:
        for patch in self.patches:
            if patch.contains(x, y):
                return patch.soil
        return self.default
