"""The simulation's parameters: ``config/sim.yaml`` (ROS 2 parameter-file form) -> dataclasses.

Pure Python (no rclpy): the sim node declares :data:`PARAMETERS` as ROS parameters and passes
their values to :func:`config_from_flat`; tools and tests call :func:`load_sim_config`.
Every parameter has a unit (in its name), a range and a description; an invalid value raises
:class:`~excavator_sim.errors.SimConfigError` naming the parameter, the range and the fix.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from excavator_common.parameter_files import flatten
from excavator_common.paths import config_file
from excavator_sim.errors import SimConfigError
from excavator_sim.heightfield import TerrainGrid
from excavator_sim.hydraulics import CylinderHydraulics, Hydraulics, SwingDrive, TrackDrive
from excavator_sim.machines import MachinePreset, load_machine
from excavator_sim.model_builder import InitialPose


@dataclass(frozen=True)
class Param:
    """One parameter: dotted name, default, inclusive range (None = unbounded), description."""

    name: str
    default: float | int | bool
    low: float | None
    high: float | None
    description: str


def _p(name: str, default: float | int | bool, low: float | None, high: float | None,
       description: str) -> Param:
    return Param(name, default, low, high, description)


_CYL_DEFAULTS = {
    "boom_cylinder": (0.110, 0.065, 1, 150.0, 2.0e6, 250.0),
    "arm_cylinder": (0.095, 0.060, 1, 150.0, 1.5e6, 250.0),
    "bucket_cylinder": (0.085, 0.055, 1, 75.0, 1.0e6, 120.0),
}

PARAMETERS: tuple[Param, ...] = (
    _p("timestep", 0.001, 1e-4, 0.01, "physics step [s]"),
    _p("real_time_factor", 1.0, 0.0, 1000.0,
       "simulated / wall time [-]; 1.0 paces to the wall clock, 0.0 runs as fast as it can"),
    _p("publish_rate", 100.0, 1.0, 1000.0, "joint_states, poses and markers rate [Hz]"),
    _p("control_period", 0.01, 1e-4, 0.1, "outer position loop period [s], >= timestep"),
    _p("initial.swing_rad", 0.0, -math.pi, math.pi, "initial swing angle [rad]"),
    _p("initial.boom_rad", math.radians(30.0), None, None,
       "initial boom joint angle [rad] (linkage limits apply)"),
    _p("initial.arm_rad", math.radians(-60.0), None, None,
       "initial arm joint angle [rad] (linkage limits apply)"),
    _p("initial.bucket_rad", math.radians(70.0), None, None,
       "initial bucket joint angle [rad] (linkage limits apply)"),
    _p("initial.base_x_m", 0.0, -1e4, 1e4, "initial base_link x in world [m]"),
    _p("initial.base_y_m", 0.0, -1e4, 1e4, "initial base_link y in world [m]"),
    _p("initial.base_yaw_rad", 0.0, -math.pi, math.pi, "initial base_link yaw [rad]"),
    _p("hydraulics.pressure_pa", 27.4e6, 1e6, 50e6, "relief pressure [Pa]"),
    _p("hydraulics.bulk_modulus_pa", 1.2e9, 1e8, 2.5e9, "effective oil bulk modulus [Pa]"),
    _p("hydraulics.dead_volume_m3", 0.001, 1e-4, 0.1, "hose + end volume per chamber [m^3]"),
    _p("hydraulics.position_gain_1_s", 12.0, 0.1, 50.0,
       "outer loop gain: valve speed per position error [1/s]"),
    *(p for name, (bore, rod, count, flow, damp, armature) in _CYL_DEFAULTS.items() for p in (
        _p(f"hydraulics.{name}.bore_m", bore, 0.02, 0.5, f"{name} bore diameter [m]"),
        _p(f"hydraulics.{name}.rod_diameter_m", rod, 0.01, 0.45,
           f"{name} rod diameter [m], < bore"),
        _p(f"hydraulics.{name}.count", count, 1, 4, f"{name}: cylinders in parallel [-]"),
        _p(f"hydraulics.{name}.flow_lpm", flow, 1.0, 2000.0, f"{name} pump flow [L/min]"),
        _p(f"hydraulics.{name}.damping_n_s_per_m", damp, 1e2, 1e9,
           f"{name} valve damping on the rod speed relative to the commanded one [N s/m]"),
        _p(f"hydraulics.{name}.armature_kg", armature, 0.0, 1e5,
           f"{name} mass added to the rod's slide joint for a stable 1 ms step [kg]"),
    )),
    _p("hydraulics.swing.torque_limit_nm", 2.3e4, 1e3, 1e7, "swing motor torque limit [N m]"),
    _p("hydraulics.swing.speed_limit_rad_s", 1.05, 0.01, 5.0, "swing speed limit [rad/s]"),
    _p("hydraulics.swing.stiffness_nm_per_rad", 4.5e6, 1e3, 1e10,
       "swing holding stiffness [N m/rad]"),
    _p("hydraulics.swing.damping_nm_s_per_rad", 4.5e5, 1e2, 1e9, "swing damping [N m s/rad]"),
    _p("tracks.track_width_m", 2.6, 0.5, 6.0, "track gauge, centre to centre [m]"),
    _p("tracks.speed_limit_m_s", 1.5, 0.01, 10.0, "track speed limit [m/s]"),
    _p("tracks.traction_force_n", 5.6e4, 1e3, 1e7, "traction (drawbar pull) limit [N]"),
    _p("tracks.damping_n_s_per_m", 2.3e5, 1e2, 1e9, "track grip damping [N s/m]"),
    _p("tracks.stiffness_n_per_m", 2.3e6, 1e3, 1e10, "track grip stiffness [N/m]"),
    _p("terrain.x0_m", -3.975, -1e4, 1e4, "height-field first node x in world [m]"),
    _p("terrain.y0_m", -7.975, -1e4, 1e4, "height-field first node y in world [m]"),
    _p("terrain.cell_size_m", 0.05, 0.005, 1.0, "height-field node spacing [m]"),
    _p("terrain.nx", 320, 2, 4000, "height-field nodes along x [-]"),
    _p("terrain.ny", 320, 2, 4000, "height-field nodes along y [-]"),
    _p("terrain.z_min_m", -3.0, -100.0, 100.0, "lowest height the field can hold [m]"),
    _p("terrain.z_max_m", 3.0, -100.0, 100.0, "highest height the field can hold [m]"),
    _p("terrain.initial_height_m", 0.0, -100.0, 100.0, "flat initial terrain height [m]"),
    _p("terrain.contact", True, None, None, "the bucket collides with the terrain [bool]"),
)
PARAMETER_BY_NAME: dict[str, Param] = {p.name: p for p in PARAMETERS}
# Parameters of the ROS node only (declared by sim_node, skipped by the core's loader).
NODE_ONLY_PARAMETERS = frozenset({"geometry_file", "machine", "marker_rate",
                                  "publish_robot_description", "use_sim_time"})


@dataclass(frozen=True)
class SimConfig:
    """Validated simulation parameters."""

    timestep: float
    real_time_factor: float
    publish_rate: float
    control_period: float
    initial: InitialPose
    hydraulics: Hydraulics
    terrain: TerrainGrid
    terrain_contact: bool


def _check(param: Param, value: object, source: str) -> float | int | bool:
    where = f"{source}: parameter {param.name}"
    if isinstance(param.default, bool):
        if not isinstance(value, bool):
            raise SimConfigError(f"{where} = {value!r} must be true or false "
                                 f"({param.description})")
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SimConfigError(f"{where} = {value!r} is not a number ({param.description})")
    if isinstance(param.default, int) and not isinstance(value, int):
        if float(value).is_integer():
            value = int(value)
        else:
            raise SimConfigError(f"{where} = {value!r} must be an integer ({param.description})")
    if not math.isfinite(value):
        raise SimConfigError(f"{where} = {value!r} must be finite ({param.description})")
    lo = -math.inf if param.low is None else param.low
    hi = math.inf if param.high is None else param.high
    if not lo <= value <= hi:
        raise SimConfigError(f"{where} = {value} outside {param.low}..{param.high} "
                             f"({param.description}): set it within the range")
    return value


def config_from_flat(values: Mapping[str, Any], source: str = "parameters") -> SimConfig:
    """Validate dotted-name values (missing ones take their defaults) into a :class:`SimConfig`."""
    unknown = sorted(set(values) - set(PARAMETER_BY_NAME))
    if unknown:
        raise SimConfigError(f"{source}: unknown parameter(s) {unknown}; known: "
                             f"{sorted(PARAMETER_BY_NAME)}")
    v = {p.name: _check(p, values.get(p.name, p.default), source) for p in PARAMETERS}
    if v["control_period"] < v["timestep"]:
        raise SimConfigError(f"{source}: parameter control_period = {v['control_period']} s must "
                             f"be >= timestep = {v['timestep']} s")
    cylinders = {}
    for name in _CYL_DEFAULTS:
        k = f"hydraulics.{name}."
        if v[k + "rod_diameter_m"] >= v[k + "bore_m"]:
            raise SimConfigError(f"{source}: parameter {k}rod_diameter_m = "
                                 f"{v[k + 'rod_diameter_m']} m must be smaller than "
                                 f"{k}bore_m = {v[k + 'bore_m']} m")
        cylinders[name] = CylinderHydraulics(
            name=name, bore_m=v[k + "bore_m"], rod_diameter_m=v[k + "rod_diameter_m"],
            count=int(v[k + "count"]), flow_lpm=v[k + "flow_lpm"],
            damping_n_s_per_m=v[k + "damping_n_s_per_m"], armature_kg=v[k + "armature_kg"])
    hyd = Hydraulics(
        pressure_pa=v["hydraulics.pressure_pa"], bulk_modulus_pa=v["hydraulics.bulk_modulus_pa"],
        dead_volume_m3=v["hydraulics.dead_volume_m3"],
        position_gain_1_s=v["hydraulics.position_gain_1_s"], cylinders=cylinders,
        swing=SwingDrive(v["hydraulics.swing.torque_limit_nm"],
                         v["hydraulics.swing.speed_limit_rad_s"],
                         v["hydraulics.swing.stiffness_nm_per_rad"],
                         v["hydraulics.swing.damping_nm_s_per_rad"]),
        tracks=TrackDrive(v["tracks.track_width_m"], v["tracks.speed_limit_m_s"],
                          v["tracks.traction_force_n"], v["tracks.damping_n_s_per_m"],
                          v["tracks.stiffness_n_per_m"]),
    )
    try:
        terrain = TerrainGrid(x0=v["terrain.x0_m"], y0=v["terrain.y0_m"],
                              cell_size=v["terrain.cell_size_m"], nx=int(v["terrain.nx"]),
                              ny=int(v["terrain.ny"]), z_min=v["terrain.z_min_m"],
                              z_max=v["terrain.z_max_m"],
                              initial_height=v["terrain.initial_height_m"])
    except ValueError as exc:
        raise SimConfigError(f"{source}: {exc}") from None
    initial = InitialPose(
        swing=v["initial.swing_rad"], boom=v["initial.boom_rad"], arm=v["initial.arm_rad"],
        bucket=v["initial.bucket_rad"], base_x=v["initial.base_x_m"],
        base_y=v["initial.base_y_m"], base_yaw=v["initial.base_yaw_rad"])
    return SimConfig(timestep=v["timestep"], real_time_factor=v["real_time_factor"],
                     publish_rate=v["publish_rate"], control_period=v["control_period"],
                     initial=initial, hydraulics=hyd, terrain=terrain,
                     terrain_contact=bool(v["terrain.contact"]))


def read_parameter_file(path: str | Path | None = None) -> dict[str, Any]:
    """The dotted ``ros__parameters`` of the ``/**`` section (or the only node section)."""
    path = Path(path) if path is not None else config_file("sim.yaml")
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise SimConfigError(f"cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise SimConfigError(f"{path} is not valid YAML: {exc}") from None
    if not isinstance(data, Mapping) or not data:
        raise SimConfigError(f"{path} must hold '/**: ros__parameters: ...'")
    section = data.get("/**", next(iter(data.values())))
    if not isinstance(section, Mapping) or "ros__parameters" not in section:
        raise SimConfigError(f"{path}: expected '/**: ros__parameters: ...' at the top")
    return flatten(section["ros__parameters"] or {})


def load_sim_config(path: str | Path | None = None,
                    overrides: Mapping[str, Any] | None = None,
                    machine: str | Path | MachinePreset | None = None) -> SimConfig:
    """Load ``config/sim.yaml`` (or ``path``), apply a ``machine`` preset's parameters (a name
    in config/machines/, a preset file's path or a loaded :class:`MachinePreset`; its masses go
    to the geometry: :meth:`MachinePreset.geometry`), then dotted-name ``overrides``,
    validate."""
    values = {k: v for k, v in read_parameter_file(path).items()
              if k not in NODE_ONLY_PARAMETERS}
    source = str(path or config_file("sim.yaml"))
    if machine is not None and machine != "":
        preset = machine if isinstance(machine, MachinePreset) else load_machine(machine)
        values.update(preset.parameters)
        source = f"{source} + machine preset {preset.source}"
    values.update(overrides or {})
    return config_from_flat(values, source=source)
