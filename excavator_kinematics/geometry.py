"""The excavator's geometry: points, links, cylinders and masses, loaded from one YAML file.

This is the single source of truth for the linkage, the IK, the MuJoCo model and the URDF.
Points are side-view coordinates ``(x forward, z up)`` in metres, each in the frame of the part
that carries it, with that part in its reference pose (seed ``excavator_model.md``).
Derived constants (``CH``, ``CE``, ``angle_HCE``...) are properties computed from the points,
never typed in.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from excavator_common.paths import config_file
from excavator_kinematics.errors import ConfigError

Vec2 = tuple[float, float]

CYLINDER_NAMES: tuple[str, str, str] = ("boom_cylinder", "arm_cylinder", "bucket_cylinder")

LPM_TO_M3S = 1.0 / 60000.0  # 1 L/min in m^3/s

# (part, point) pairs the geometry file must declare.
_REQUIRED_POINTS: dict[str, tuple[str, ...]] = {
    "caterpillar": ("B",),
    "chassis": ("C", "D"),
    "boom": ("E", "F", "H"),
    "arm": ("G", "I", "K", "M"),
    "bucket": ("L", "tip", "base"),
}


@dataclass(frozen=True)
class Cylinder:
    """A hydraulic cylinder: pin-to-pin length = ``rod_length_m + extension``.

    ``extension`` [m] is the piston rod position in the cylinder, within ``stroke_min_m`` to
    ``stroke_max_m``.
    """

    name: str
    rod_length_m: float
    stroke_min_m: float
    stroke_max_m: float

    def length(self, extension_m: float | np.ndarray) -> float | np.ndarray:
        """Pin-to-pin length [m] for a piston extension [m]."""
        return self.rod_length_m + extension_m

    def extension(self, length_m: float | np.ndarray) -> float | np.ndarray:
        """Piston extension [m] for a pin-to-pin length [m]."""
        return length_m - self.rod_length_m

    @property
    def stroke_range(self) -> str:
        return f"{self.stroke_min_m:.2f}..{self.stroke_max_m:.2f} m"


@dataclass(frozen=True)
class CylinderFlow:
    """One hydraulic function's piston areas and flow: ``count`` identical cylinders of
    ``bore_m`` / ``rod_diameter_m`` [m] in parallel on one valve, fed with ``flow_lpm`` [L/min]
    when extending (bore side) and ``retract_flow_lpm`` [L/min] when retracting (rod side;
    None: ``flow_lpm``). Two flows because a machine's valve meters each direction on its own
    (spool lands, pump summation for boom up and arm in only): published full-stroke test
    times of a direction are set by its own flow, and the rod side's smaller area would
    otherwise make every retraction much faster than the machine's (docs/simulation.md).

    The one place the hydraulic areas and the flow-limited rod speeds are computed: the
    simulation's actuators (``excavator_sim.hydraulics.CylinderHydraulics``) and the teleop
    valves (``excavator_kinematics.teleop.valves``) both use it.
    """

    bore_m: float
    rod_diameter_m: float
    count: int
    flow_lpm: float
    retract_flow_lpm: float | None = None

    @property
    def bore_area_m2(self) -> float:
        """Piston area on the bore (extend) side, all cylinders [m^2]."""
        return self.count * math.pi / 4.0 * self.bore_m ** 2

    @property
    def annulus_area_m2(self) -> float:
        """Piston area on the rod (retract) side, all cylinders [m^2]."""
        return self.count * math.pi / 4.0 * (self.bore_m ** 2 - self.rod_diameter_m ** 2)

    @property
    def flow_m3_s(self) -> float:
        """Flow when extending [m^3/s]."""
        return self.flow_lpm * LPM_TO_M3S

    @property
    def retract_flow_m3_s(self) -> float:
        """Flow when retracting [m^3/s]."""
        flow = self.flow_lpm if self.retract_flow_lpm is None else self.retract_flow_lpm
        return flow * LPM_TO_M3S

    @property
    def extend_speed_m_s(self) -> float:
        """Fastest extension [m/s]: the extending flow filling the bore side."""
        return self.flow_m3_s / self.bore_area_m2

    @property
    def retract_speed_m_s(self) -> float:
        """Fastest retraction [m/s]: the retracting flow filling the rod side."""
        return self.retract_flow_m3_s / self.annulus_area_m2

    def speed(self, spool: float) -> float:
        """Rod speed [m/s] (+ = extend) for a spool opening in -1..1."""
        return spool * (self.extend_speed_m_s if spool > 0.0 else self.retract_speed_m_s)

    def flow_lpm_at(self, speed_m_s: float) -> float:
        """Pump flow [L/min] a rod speed [m/s] takes."""
        area = self.bore_area_m2 if speed_m_s > 0.0 else self.annulus_area_m2
        return abs(speed_m_s) * area / LPM_TO_M3S


def _norm(p: Vec2) -> float:
    return math.hypot(p[0], p[1])


def _angle(p: Vec2) -> float:
    return math.atan2(p[1], p[0])


def _sub(a: Vec2, b: Vec2) -> Vec2:
    return (a[0] - b[0], a[1] - b[1])


@dataclass(frozen=True)
class ExcavatorGeometry:
    """Points [m] per part in its reference pose, link lengths [m], cylinders, masses [kg]."""

    # caterpillar (origin A on the ground)
    B: Vec2
    # chassis (origin B)
    C: Vec2
    D: Vec2
    # boom (origin C, CH horizontal in the reference pose)
    E: Vec2
    F: Vec2
    H: Vec2
    # arm (origin H, HM horizontal in the reference pose)
    G: Vec2
    I: Vec2  # noqa: E741 - the seed's point name
    K: Vec2
    M: Vec2
    # bucket (origin M, x along M->L)
    L: Vec2
    tip: Vec2
    bucket_base: Vec2
    # links
    JL: float
    JK: float
    cylinders: Mapping[str, Cylinder]
    bucket_width_m: float
    swing_limits_rad: Vec2
    masses_kg: Mapping[str, float] = field(default_factory=dict)

    # --- derived constants (seed tables; computed, never typed in) -----------------------
    @property
    def CH(self) -> float:
        return _norm(self.H)

    @property
    def CE(self) -> float:
        return _norm(self.E)

    @property
    def CF(self) -> float:
        return _norm(self.F)

    @property
    def CD(self) -> float:
        """Distance boom pivot C to boom-cylinder pivot D [m] (both on the chassis)."""
        return _norm(_sub(self.D, self.C))

    @property
    def angle_HCE(self) -> float:
        return _angle(self.E) - _angle(self.H)

    @property
    def angle_HCF(self) -> float:
        return _angle(self.F) - _angle(self.H)

    @property
    def HF(self) -> float:
        """Distance arm pivot H to arm-cylinder pivot F [m] (both on the boom)."""
        return _norm(_sub(self.F, self.H))

    @property
    def HM(self) -> float:
        return _norm(self.M)

    @property
    def HG(self) -> float:
        return _norm(self.G)

    @property
    def HI(self) -> float:
        return _norm(self.I)

    @property
    def HK(self) -> float:
        return _norm(self.K)

    @property
    def angle_GHM(self) -> float:
        return _angle(self.G) - _angle(self.M)

    @property
    def angle_GHI(self) -> float:
        return _angle(self.G) - _angle(self.I)

    @property
    def angle_GHK(self) -> float:
        return _angle(self.G) - _angle(self.K)

    @property
    def LM(self) -> float:
        return _norm(self.L)

    @property
    def IK(self) -> float:
        """Distance bucket-cylinder pivot I to H-link pivot K [m] (both on the arm)."""
        return _norm(_sub(self.K, self.I))

    @property
    def MK(self) -> float:
        """Distance bucket pivot M to H-link pivot K [m] (the four-bar's ground link)."""
        return _norm(_sub(self.K, self.M))

    @property
    def swing_height_m(self) -> float:
        """Height of the chassis origin B above the ground origin A [m]."""
        return self.B[1]

    def cylinder(self, name: str) -> Cylinder:
        return self.cylinders[name]

    # --- loading -------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "<dict>") -> ExcavatorGeometry:
        """Build from the parsed YAML; every missing or malformed key raises ConfigError."""
        try:
            points = data["points"]
            p: dict[str, Vec2] = {}
            for part, names in _REQUIRED_POINTS.items():
                for name in names:
                    p[name] = _vec2(points[part][name], f"points.{part}.{name}", source)
            links = data["links"]
            cylinders = {
                name: _cylinder(name, data["cylinders"][name], source) for name in CYLINDER_NAMES
            }
            width = _positive(data["bucket"]["width_m"], "bucket.width_m", source)
            swing = _vec2(data["swing"]["limits_rad"], "swing.limits_rad", source)
            masses = {str(k): _positive(v, f"masses_kg.{k}", source)
                      for k, v in (data.get("masses_kg") or {}).items()}
            geometry = cls(
                B=p["B"], C=p["C"], D=p["D"], E=p["E"], F=p["F"], H=p["H"], G=p["G"], I=p["I"],
                K=p["K"], M=p["M"], L=p["L"], tip=p["tip"], bucket_base=p["base"],
                JL=_positive(links["side_link_m"], "links.side_link_m", source),
                JK=_positive(links["h_link_m"], "links.h_link_m", source),
                cylinders=cylinders, bucket_width_m=width, swing_limits_rad=swing,
                masses_kg=masses,
            )
        except KeyError as exc:
            raise ConfigError(
                f"{source}: missing key {exc.args[0]!r}; see config/excavator.yaml for the layout"
            ) from None
        except TypeError as exc:
            raise ConfigError(f"{source}: malformed geometry ({exc})") from None
        if swing[0] >= swing[1]:
            raise ConfigError(f"{source}: swing.limits_rad {list(swing)} must be [low, high] "
                              "with low < high")
        return geometry

    @classmethod
    def from_yaml(cls, path: str | Path | None = None) -> ExcavatorGeometry:
        """Load a geometry file; ``None`` loads the package's ``config/excavator.yaml``.

        A machine preset with a ``geometry`` section (``config/machines/<name>.yaml``) is a
        geometry file too: its geometry, the preset's masses over the package's."""
        path = Path(path) if path is not None else config_file("excavator.yaml")
        try:
            data = yaml.safe_load(path.read_text())
        except OSError as exc:
            raise ConfigError(f"cannot read geometry file {path}: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"geometry file {path} is not valid YAML: {exc}") from None
        if not isinstance(data, Mapping):
            raise ConfigError(f"geometry file {path} must hold a mapping at the top level")
        other = data.get("geometry") if "points" not in data else None
        if isinstance(other, str):  # a preset naming another preset's linkage
            other_path = (config_file("machines") / f"{other}.yaml"
                          if "/" not in other and not other.endswith((".yaml", ".yml"))
                          else Path(other))
            if other_path.resolve() == path.resolve():
                raise ConfigError(f"geometry file {path}: geometry names the file itself")
            base = cls.from_yaml(other_path)
            masses = {**dict(base.masses_kg), **dict(data.get("masses_kg") or {})}
            return dataclasses.replace(base, masses_kg=masses)
        if "points" not in data and isinstance(data.get("geometry"), Mapping):
            # A machine preset (config/machines/<name>.yaml) with a geometry of its own: its
            # ``geometry`` section, with the preset's masses over the package's.
            masses = {**dict(default_geometry().masses_kg),
                      **dict(data["geometry"].get("masses_kg") or {}),
                      **dict(data.get("masses_kg") or {})}
            data = {**data["geometry"], "masses_kg": masses}
        return cls.from_dict(data, source=str(path))


_DEFAULT: ExcavatorGeometry | None = None


def default_geometry() -> ExcavatorGeometry:
    """The package's ``config/excavator.yaml``, loaded once."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = ExcavatorGeometry.from_yaml()
    return _DEFAULT


def _finite(value: Any, key: str, source: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{source}: {key} = {value!r} is not a number")
    if not math.isfinite(value):
        raise ConfigError(f"{source}: {key} = {value!r} must be finite")
    return float(value)


def _positive(value: Any, key: str, source: str) -> float:
    v = _finite(value, key, source)
    if v <= 0.0:
        raise ConfigError(f"{source}: {key} = {v} must be > 0")
    return v


def _vec2(value: Any, key: str, source: str) -> Vec2:
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise ConfigError(f"{source}: {key} = {value!r} must be a list of two numbers [x, z]")
    return (_finite(value[0], key, source), _finite(value[1], key, source))


def _cylinder(name: str, data: Mapping[str, Any], source: str) -> Cylinder:
    rod = _positive(data["rod_length_m"], f"cylinders.{name}.rod_length_m", source)
    lo, hi = _vec2(data["stroke_m"], f"cylinders.{name}.stroke_m", source)
    if not 0.0 <= lo < hi:
        raise ConfigError(f"{source}: cylinders.{name}.stroke_m = [{lo}, {hi}] must satisfy "
                          "0 <= min < max")
    return Cylinder(name=name, rod_length_m=rod, stroke_min_m=lo, stroke_max_m=hi)
