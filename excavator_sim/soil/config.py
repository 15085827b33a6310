"""Load ``config/soil.yaml`` (ROS 2 parameter-file form) into the soil cores' dataclasses.

No ROS needed. Every key has a unit in its name, a range and a description (``PARAMETERS``,
``PRESET_PARAMETERS``); a missing, unknown or out-of-range key raises ``SoilConfigError`` naming
the key, the value, the range and the fix. The node declares the same names as ROS parameters.
A preset is any name ``<p>`` with keys ``presets.<p>.*`` (the shipped file's or a user's own); every
preset present must be complete and in range, not only the one selected by ``preset``.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from excavator_common.parameter_files import flatten
from excavator_common.paths import config_file
from excavator_sim.soil.earthmoving import FeeSoil
from excavator_sim.soil.errors import SoilConfigError
from excavator_sim.soil.forces import DiMaioParams
from excavator_sim.soil.terrain import TerrainConfig


@dataclass(frozen=True)
class ParamSpec:
    """One parameter: dotted name, kind (float/int/str), range, description with unit."""

    name: str
    kind: type
    lo: float
    hi: float
    description: str


PARAMETERS: tuple[ParamSpec, ...] = (
    ParamSpec("update_rate_hz", float, 1.0, 2000.0, "terrain + force update rate [Hz]"),
    ParamSpec("heightmap_rate_hz", float, 0.1, 50.0, "heightmap publish rate [Hz]"),
    ParamSpec("terrain.size_x_m", float, 0.1, 1000.0, "grid extent along x [m]"),
    ParamSpec("terrain.size_y_m", float, 0.1, 1000.0, "grid extent along y [m]"),
    ParamSpec("terrain.centre_x_m", float, -1e6, 1e6, "grid centre x in world [m]"),
    ParamSpec("terrain.centre_y_m", float, -1e6, 1e6, "grid centre y in world [m]"),
    ParamSpec("terrain.cell_xy_m", float, 0.001, 1.0, "cell size in x and y [m]"),
    ParamSpec("terrain.cell_z_m", float, 1e-5, 0.5, "height quantum [m]"),
    ParamSpec("terrain.initial_height_m", float, -1e4, 1e4, "initial ground level [m]"),
    ParamSpec("terrain.repose_angle_rad", float, 0.05, 1.5, "angle of repose [rad]"),
    ParamSpec("terrain.relax_iterations", int, 0, 100, "relaxation sweeps per update [count]"),
    ParamSpec("terrain.margin_cells", int, 1, 100, "cells updated around the bucket [count]"),
    ParamSpec("forces.slices", int, 1, 256, "strips across the cutting edge [count]"),
    ParamSpec("forces.lookahead_m", float, 0.0, 2.0, "surface look-ahead of the teeth [m]"),
    ParamSpec("forces.velocity_epsilon_m_s", float, 1e-6, 1.0, "sign smoothing speed [m/s]"),
)

PRESET_PARAMETERS: tuple[ParamSpec, ...] = (
    ParamSpec("density_kg_m3", float, 100.0, 5000.0, "soil density rho [kg/m^3]"),
    ParamSpec("damping_tangential_n_s_m2", float, 0.0, 1e7, "b_t0 [N s/m per m penetration]"),
    ParamSpec("damping_normal_n_s_m2", float, 0.0, 1e7, "b_n0 [N s/m per m penetration]"),
    ParamSpec("damping_rotational_n_m_s_rad_m", float, 0.0, 1e7, "b_a0 [N m s/rad per m]"),
    ParamSpec("stiffness_tangential_n_m", float, 0.0, 1e9, "k_t [N/m]"),
    ParamSpec("stiffness_normal_n_m", float, 1.0, 1e9, "k_n [N/m]"),
    ParamSpec("stiffness_rotational_n_m_rad", float, 0.0, 1e9, "k_a [N m/rad]"),
    ParamSpec("shear_strength_pa", float, 1.0, 1e8, "S of the shear failure S w d_p [Pa]"),
    ParamSpec("accumulation_n_m3", float, 0.0, 1e7, "eps, churning force per volume [N/m^3]"),
    ParamSpec("bucket_friction", float, 0.0, 2.0, "mu soil-bucket [-]"),
    ParamSpec("cohesion_pa", float, 0.0, 1e7, "FEE cohesion c [Pa]"),
    ParamSpec("adhesion_pa", float, 0.0, 1e7, "FEE adhesion c_a [Pa]"),
    ParamSpec("internal_friction_rad", float, 0.0, 1.4, "FEE internal friction phi [rad]"),
    ParamSpec("interface_friction_rad", float, 0.0, 1.4, "FEE soil-blade friction delta [rad]"),
    ParamSpec("surcharge_pa", float, 0.0, 1e7, "FEE surcharge q [Pa]"),
)


@dataclass(frozen=True)
class SoilConfig:
    """Everything the soil cores and node need, validated."""

    preset: str
    update_rate_hz: float
    heightmap_rate_hz: float
    terrain: TerrainConfig
    dimaio: DiMaioParams
    fee: FeeSoil
    presets: tuple[str, ...]


def spec_for(name: str) -> ParamSpec | None:
    """The spec of a dotted soil parameter name (``presets.<any preset>.<key>`` included), or
    None for ``preset`` (a string) and for a name that is not a soil parameter."""
    parts = name.split(".")
    if len(parts) == 3 and parts[0] == "presets" and parts[1]:
        return next((s for s in PRESET_PARAMETERS if s.name == parts[2]), None)
    return next((s for s in PARAMETERS if s.name == name), None)


def is_parameter(name: str) -> bool:
    """True for every name the soil config knows: ``preset``, ``PARAMETERS`` and
    ``presets.<name>.<key>`` of ``PRESET_PARAMETERS`` for any preset name."""
    return name == "preset" or spec_for(name) is not None


def preset_names(params: Mapping[str, Any]) -> list[str]:
    """The presets a flat parameter dict defines (``presets.<name>.<key>``), sorted."""
    return sorted({k.split(".")[1] for k in params
                   if k.startswith("presets.") and k.count(".") >= 2})


def check_parameter(name: str, value: Any, source: str = "<parameters>") -> float | int | str:
    """One value against its range (``SoilConfigError`` naming name, value, range and fix)."""
    spec = spec_for(name)
    if spec is None:
        if name == "preset":
            return str(value)
        raise SoilConfigError(f"{source}: unknown soil parameter {name!r}; check the spelling "
                              "against config/soil.yaml")
    return _check(spec, value, name, source)


def _check(spec: ParamSpec, value: Any, name: str, source: str) -> float | int:
    is_num = isinstance(value, int | float) and not isinstance(value, bool)
    if spec.kind is int and not (is_num and float(value).is_integer()):
        raise SoilConfigError(f"{source}: parameter {name}={value!r} must be an integer in "
                              f"[{spec.lo:g}, {spec.hi:g}] ({spec.description})")
    if not is_num or not math.isfinite(float(value)) or not spec.lo <= value <= spec.hi:
        raise SoilConfigError(
            f"{source}: parameter {name}={value!r} is outside [{spec.lo:g}, {spec.hi:g}] "
            f"({spec.description}); set it within that range"
        )
    return int(value) if spec.kind is int else float(value)


def parameters_from_yaml(path: str | Path | None = None) -> dict[str, Any]:
    """The flat ``name -> value`` dict of the ``ros__parameters`` section of the file."""
    path = Path(path) if path is not None else config_file("soil.yaml")
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise SoilConfigError(f"cannot read soil config {path}: {exc}; pass an existing "
                              "ROS 2 parameter file (see config/soil.yaml)") from exc
    if not isinstance(data, Mapping) or len(data) != 1:
        raise SoilConfigError(f"{path}: expected one node section such as '/**:' with "
                              "'ros__parameters:' (see config/soil.yaml)")
    section = next(iter(data.values()))
    if not isinstance(section, Mapping) or "ros__parameters" not in section:
        raise SoilConfigError(f"{path}: the node section has no 'ros__parameters:' key")
    return flatten(section["ros__parameters"])


def soil_config_from_parameters(params: Mapping[str, Any], source: str = "<parameters>",
                                preset: str | None = None) -> SoilConfig:
    """Validate a flat parameter dict (as from ``parameters_from_yaml`` or a node)."""
    presets = preset_names(params)
    unknown = sorted(k for k in params if not is_parameter(k))
    if unknown:
        raise SoilConfigError(f"{source}: unknown soil parameter(s) {unknown}; check the "
                              "spelling against config/soil.yaml")
    values: dict[str, Any] = {}
    for spec in PARAMETERS:
        if spec.name not in params:
            raise SoilConfigError(f"{source}: parameter {spec.name} is missing; add it "
                                  f"({spec.description}, range [{spec.lo:g}, {spec.hi:g}])")
        values[spec.name] = _check(spec, params[spec.name], spec.name, source)
    chosen = preset if preset is not None else params.get("preset")
    if chosen not in presets:
        raise SoilConfigError(f"{source}: preset={chosen!r} is not one of {presets}; set "
                              "'preset' to one of them or add presets.<name>.* keys")
    # the selected preset first (its error is the one that matters), then every other one:
    # a broken preset fails at start-up, not on the day somebody selects it
    sp = _preset_values(params, str(chosen), presets, source)
    for other in presets:
        if other != chosen:
            _preset_values(params, other, presets, source)
    t = {k.split(".", 1)[1]: v for k, v in values.items() if k.startswith("terrain.")}
    f = {k.split(".", 1)[1]: v for k, v in values.items() if k.startswith("forces.")}
    terrain = TerrainConfig(density_kg_m3=sp["density_kg_m3"], **t)
    dimaio = DiMaioParams(
        damping_tangential_n_s_m2=sp["damping_tangential_n_s_m2"],
        damping_normal_n_s_m2=sp["damping_normal_n_s_m2"],
        damping_rotational_n_m_s_rad_m=sp["damping_rotational_n_m_s_rad_m"],
        stiffness_tangential_n_m=sp["stiffness_tangential_n_m"],
        stiffness_normal_n_m=sp["stiffness_normal_n_m"],
        stiffness_rotational_n_m_rad=sp["stiffness_rotational_n_m_rad"],
        shear_strength_pa=sp["shear_strength_pa"],
        accumulation_n_m3=sp["accumulation_n_m3"],
        density_kg_m3=sp["density_kg_m3"],
        bucket_friction=sp["bucket_friction"],
        slices=f["slices"],
        lookahead_m=f["lookahead_m"],
        velocity_epsilon_m_s=f["velocity_epsilon_m_s"],
    )
    fee = FeeSoil(
        density_kg_m3=sp["density_kg_m3"],
        cohesion_pa=sp["cohesion_pa"],
        adhesion_pa=sp["adhesion_pa"],
        internal_friction_rad=sp["internal_friction_rad"],
        interface_friction_rad=sp["interface_friction_rad"],
        surcharge_pa=sp["surcharge_pa"],
    )
    return SoilConfig(str(chosen), values["update_rate_hz"], values["heightmap_rate_hz"],
                      terrain, dimaio, fee, tuple(presets))


def _preset_values(params: Mapping[str, Any], preset: str, presets: list[str],
                   source: str) -> dict[str, float | int]:
    """The checked keys of one preset; a missing key names the key, its range and the fix."""
    sp: dict[str, float | int] = {}
    for spec in PRESET_PARAMETERS:
        name = f"presets.{preset}.{spec.name}"
        if name not in params:
            others = [p for p in presets if p != preset]
            close = difflib.get_close_matches(preset, others, n=1)
            hint = (f"; or, if you meant the preset {close[0]!r}, correct the name"
                    if close else "")
            raise SoilConfigError(
                f"{source}: parameter {name} is missing; add it ({spec.description}, range "
                f"[{spec.lo:g}, {spec.hi:g}]): a preset needs all {len(PRESET_PARAMETERS)} keys "
                f"presets.<name>.* of config/soil.yaml{hint}")
        sp[spec.name] = _check(spec, params[name], name, source)
    return sp


def load_soil_config(path: str | Path | None = None, preset: str | None = None) -> SoilConfig:
    """Read and validate ``config/soil.yaml`` (or ``path``); ``preset`` overrides the file's."""
    source = str(path) if path is not None else str(config_file("soil.yaml"))
    return soil_config_from_parameters(parameters_from_yaml(path), source, preset)
