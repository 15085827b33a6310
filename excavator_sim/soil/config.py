"""Load ``config/soil.yaml`` (ROS 2 parameter-file form) into the soil cores' dataclasses.

No ROS needed. :data:`SOIL_PARAMETERS` is soil_node's one parameter spec: every key has a
unit in its name (or is a count, ratio or name), a range, a default and a description
(``PARAMETERS``, ``PRESET_PARAMETERS``); an unknown or out-of-range key raises
``SoilConfigError`` naming the key, the value, the range and the fix, a missing one takes its
default. The node declares the same names as ROS parameters. A preset is any name ``<p>`` with
keys ``presets.<p>.*``: the shipped ones (:data:`SHIPPED_PRESETS`, defaults for their keys) or
a user's own, which must be complete; every preset present must be in range, not only the one
selected by ``preset``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from excavator_common.parameters import (
    ParameterSpec,
    ParameterTable,
    ParameterTemplate,
    ParamType,
    load_parameters,
)
from excavator_common.paths import config_file
from excavator_sim.soil.earthmoving import FeeSoil
from excavator_sim.soil.errors import SoilConfigError
from excavator_sim.soil.forces import DiMaioParams
from excavator_sim.soil.terrain_config import BUCKET_SOIL_MODELS, TerrainConfig


def _f(name: str, default: float | int | None, lo: float, hi: float, unit: str,
       description: str, **kw: Any) -> ParameterSpec:
    kind = ParamType.INTEGER if unit == "count" else ParamType.DOUBLE
    return ParameterSpec(name, default, description, unit, lo, hi, type=kind, **kw)


PARAMETERS: tuple[ParameterSpec, ...] = (
    ParameterSpec("preset", "hard_dry_earth", "the soil's constants: a name under presets "
                  "(hard_dry_earth, loose_sand, wet_clay, or one of your own)"),
    _f("update_rate_hz", 100.0, 1.0, 2000.0, "Hz", "terrain + force update rate, in the "
       "poses' own (simulated) time", dynamic=True),
    _f("heightmap_rate_hz", 2.0, 0.1, 50.0, "Hz", "soil/heightmap cloud and full-grid "
       "soil/terrain_patch rate (wall time, when the terrain changed)", dynamic=True),
    _f("twist_wait_s", 0.5, 0.0, 60.0, "s", "the longest a bucket_pose waits (wall time) "
       "for the bucket_twist of its stamp, on its own topic, before it is answered with the "
       "latest twist (0: never waits)", dynamic=True),
    ParameterSpec("machines", "", "comma-separated namespaces of the machines digging in this "
                  "node's one terrain (topics <ns>/bucket_pose, <ns>/soil/wrench...); empty: one "
                  "machine, topics relative to the node"),
    _f("terrain.size_x_m", 16.0, 0.1, 1000.0, "m", "grid extent along x"),
    _f("terrain.size_y_m", 16.0, 0.1, 1000.0, "m", "grid extent along y"),
    _f("terrain.centre_x_m", 4.0, -1e6, 1e6, "m", "grid centre x in world"),
    _f("terrain.centre_y_m", 0.0, -1e6, 1e6, "m", "grid centre y in world"),
    _f("terrain.cell_xy_m", 0.05, 0.001, 1.0, "m", "cell size in x and y"),
    _f("terrain.cell_z_m", 0.01, 1e-5, 0.5, "m", "height quantum: soil is counted in whole "
       "cell_xy x cell_xy x cell_z units (exact mass conservation)"),
    _f("terrain.initial_height_m", 0.0, -1e4, 1e4, "m", "flat ground level at start"),
    _f("terrain.ridge_height_m", 0.0, -100.0, 100.0, "m", "a ridge across the grid (all y) "
       "on the flat ground, a trapezoid along x: its height (0 = none; < 0 a trench); its "
       "flanks' grade is height / ((length - top) / 2)"),
    _f("terrain.ridge_x_m", 0.0, -1e6, 1e6, "m", "world x of the ridge's centre"),
    _f("terrain.ridge_length_m", 4.0, 0.1, 1000.0, "m", "the ridge's length along x, foot to "
       "foot"),
    _f("terrain.ridge_top_m", 0.0, 0.0, 1000.0, "m", "length of the ridge's flat top along "
       "x, shorter than ridge_length_m (0: a crest)"),
    _f("terrain.repose_angle_rad", 0.85, 0.05, 1.5, "rad", "angle of repose of the terrain "
       "and of the soil in the bucket"),
    _f("terrain.relax_iterations", 3, 0, 100, "count", "relaxation sweeps per update"),
    _f("terrain.margin_cells", 4, 1, 100, "count", "cells updated around the bucket's "
       "bounding box"),
    ParameterSpec("terrain.bucket_soil_model", "cells", "the soil in the bucket: cells (a "
                  "body of its own, a bucket-frame height grid relaxed under the effective "
                  "gravity: spills when tilted or swung hard; its mass, centre and inertia on "
                  "the simulator's bucket body, docs/soil.md) or closed_form (one count, its "
                  "shape at the pose in closed form, its weight in the soil wrench)",
                  choices=BUCKET_SOIL_MODELS),
    _f("forces.slices", 8, 1, 256, "count", "strips across the cutting edge the force model "
       "is integrated over"),
    _f("forces.lookahead_m", 0.1, 0.0, 2.0, "m", "surface sampled up to this far ahead of "
       "the teeth"),
    _f("forces.velocity_epsilon_m_s", 0.001, 1e-6, 1.0, "m/s", "sign smoothing: sgn(v) = v / "
       "max(abs(v), eps)"),
)

PRESET_PARAMETERS: tuple[ParameterSpec, ...] = (
    _f("density_kg_m3", None, 100.0, 5000.0, "kg/m^3", "soil density rho"),
    _f("damping_tangential_n_s_m2", None, 0.0, 1e7, "N s/m per m of penetration",
       "viscous friction b_t0 along the cut"),
    _f("damping_normal_n_s_m2", None, 0.0, 1e7, "N s/m per m",
       "viscous friction b_n0 normal to the cut"),
    _f("damping_rotational_n_m_s_rad_m", None, 0.0, 1e7, "N m s/rad per m",
       "rotational damping b_a0"),
    _f("stiffness_tangential_n_m", None, 0.0, 1e9, "N/m",
       "stiffness k_t about the stiffness centre"),
    _f("stiffness_normal_n_m", None, 1.0, 1e9, "N/m", "normal stiffness k_n"),
    _f("stiffness_rotational_n_m_rad", None, 0.0, 1e9, "N m/rad", "rotational stiffness k_a"),
    _f("shear_strength_pa", None, 1.0, 1e8, "Pa", "S: the soil fails when the normal "
       "stiffness force reaches S w d_p"),
    _f("accumulation_n_m3", None, 0.0, 1e7, "N/m^3", "eps: churning force per volume of load"),
    _f("bucket_friction", None, 0.0, 2.0, "-", "Coulomb friction mu soil-steel"),
    _f("cohesion_pa", None, 0.0, 1e7, "Pa", "FEE cohesion c"),
    _f("adhesion_pa", None, 0.0, 1e7, "Pa", "FEE adhesion c_a"),
    _f("internal_friction_rad", None, 0.0, 1.4, "rad", "FEE internal friction angle phi"),
    _f("interface_friction_rad", None, 0.0, 1.4, "rad", "FEE soil-blade friction angle delta"),
    _f("surcharge_pa", None, 0.0, 1e7, "Pa", "FEE surcharge q"),
)
PRESETS = ParameterTemplate("presets", "preset", PRESET_PARAMETERS)

# The shipped presets. DiMaio constants: Table 1 of the paper (its model "is most suited to
# hard, dry earth", 4.5); FEE (Fundamental Earthmoving Equation) constants: McKyes (1985).
_PRESET_KEYS = tuple(s.name for s in PRESET_PARAMETERS)
SHIPPED_PRESETS: dict[str, dict[str, float]] = {
    name: dict(zip(_PRESET_KEYS, values, strict=True)) for name, values in {
        "hard_dry_earth": (1800.0, 2000.0, 1000.0, 2000.0, 5000.0, 200000.0, 20000.0, 85000.0,
                           2000.0, 0.3, 20000.0, 5000.0, 0.5236, 0.3491, 0.0),
        "loose_sand": (1600.0, 1000.0, 500.0, 1000.0, 2000.0, 100000.0, 10000.0, 15000.0,
                       2000.0, 0.4, 0.0, 0.0, 0.6109, 0.4363, 0.0),
        "wet_clay": (1900.0, 6000.0, 3000.0, 4000.0, 5000.0, 100000.0, 10000.0, 85000.0,
                     3000.0, 0.2, 25000.0, 12000.0, 0.2618, 0.1745, 0.0),
    }.items()}
INSTANCES = {"presets": SHIPPED_PRESETS}


def _check_preset(values: Mapping[str, Any]) -> None:
    presets = preset_names(values)
    if values["preset"] not in presets:
        raise SoilConfigError(f"preset={values['preset']!r} is not one of {presets}; set "
                              "'preset' to one of them or add presets.<name>.* keys")


SOIL_PARAMETERS = ParameterTable("soil_node", PARAMETERS, error=SoilConfigError,
                                 templates=(PRESETS,), check=_check_preset)


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
    twist_wait_s: float = 0.5


def preset_names(params: Mapping[str, Any]) -> list[str]:
    """The presets a flat parameter dict defines (``presets.<name>.<key>``), sorted."""
    return sorted({k.split(".")[1] for k in params
                   if k.startswith("presets.") and k.count(".") >= 2})


def soil_config_from_parameters(params: Mapping[str, Any], source: str = "<parameters>",
                                preset: str | None = None) -> SoilConfig:
    """Validate a flat parameter dict (missing keys: the spec's defaults; the shipped presets
    are always there, a preset of your own must be complete) into a :class:`SoilConfig`."""
    params = dict(params)
    if preset is not None:
        params["preset"] = preset
    values = SOIL_PARAMETERS.validate(params, source, instances=INSTANCES)
    chosen = str(values["preset"])
    sp = {k: values[f"presets.{chosen}.{k}"] for k in _PRESET_KEYS}
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
    return SoilConfig(chosen, values["update_rate_hz"], values["heightmap_rate_hz"],
                      terrain, dimaio, fee, tuple(preset_names(values)),
                      values["twist_wait_s"])


def load_soil_config(path: str | Path | None = None, preset: str | None = None) -> SoilConfig:
    """Read and validate ``config/soil.yaml`` (or ``path``); ``preset`` overrides the file's."""
    path = Path(path) if path is not None else config_file("soil.yaml")
    overrides = {"preset": preset} if preset is not None else None
    values = load_parameters(SOIL_PARAMETERS, path, overrides, instances=INSTANCES)
    return soil_config_from_parameters(values, str(path))
