"""The simulation's parameters: ``config/sim.yaml`` (ROS 2 parameter-file form) -> dataclasses.

Pure Python (no rclpy). :data:`SIM_PARAMETERS` is sim_node's one parameter spec (the core's
:data:`CORE_PARAMETERS` and the node's own :data:`NODE_PARAMETERS`): the node declares it
(``excavator_common.parameter_node``) and passes the values to :func:`config_from_flat`; tools
and tests call :func:`load_sim_config`. Every parameter has its unit in its name (or is a
count, ratio or flag), a range and a description; an invalid value raises
:class:`~excavator_sim.errors.SimConfigError` naming the parameter, the range and the fix.
Renamed parameters (``timestep`` -> ``timestep_s``, ``publish_rate`` -> ``publish_rate_hz``,
``control_period`` -> ``control_period_s``, ``marker_rate`` -> ``marker_rate_hz``) are accepted
under their old names for one release, with a warning.
"""

from __future__ import annotations

import math
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
from excavator_sim.drivetrain.config import DrivetrainConfig
from excavator_sim.drivetrain.hydrostatic import HydrostaticDriveParams
from excavator_sim.drivetrain.soil import SHIPPED_SOILS, SoilMap, SoilPatch, TractionSoil
from excavator_sim.drivetrain.vehicle import TrackGeometry, VehicleParams
from excavator_sim.errors import SimConfigError
from excavator_sim.heightfield import TerrainGrid
from excavator_sim.hydraulics import CylinderHydraulics, Hydraulics, SwingDrive, TrackDrive
from excavator_sim.machines import MachinePreset, load_machine
from excavator_sim.model_builder import InitialPose
from excavator_sim.undercarriage import WheeledUndercarriage

_CYL_DEFAULTS = {   # bore, rod [m], count, flow out / in [L/min], damping [N s/m], armature [kg]
    "boom_cylinder": (0.110, 0.065, 1, 178.0, 122.0, 2.0e6, 250.0),
    "arm_cylinder": (0.095, 0.060, 1, 116.0, 90.0, 1.5e6, 250.0),
    "bucket_cylinder": (0.085, 0.055, 1, 76.5, 68.5, 1.0e6, 120.0),
}


def _p(name: str, default: float | int | bool | str, low: float | None, high: float | None,
       unit: str, description: str, **kw: Any) -> ParameterSpec:
    return ParameterSpec(name, default, description, unit, low, high, **kw)


# The simulation core's parameters (config/sim.yaml), in the order of the docs.
CORE_PARAMETERS: tuple[ParameterSpec, ...] = (
    _p("timestep_s", 0.001, 1e-4, 0.01, "s", "physics step (implicitfast integrator)",
       deprecated_names=("timestep",)),
    _p("real_time_factor", 1.0, 0.0, 1000.0, "-",
       "simulated / wall time; 1.0 paces to the wall clock, 0.0 runs as fast as it can",
       dynamic=True),
    _p("publish_rate_hz", 100.0, 1.0, 1000.0, "Hz",
       "rate of joint_states, bucket_pose, bucket_twist, and of /clock when use_sim_time is "
       "true (in simulated time)", dynamic=True, deprecated_names=("publish_rate",)),
    _p("control_period_s", 0.01, 1e-4, 0.1, "s", "period of the outer position loop",
       constraint=">= timestep_s", deprecated_names=("control_period",)),
    _p("initial.swing_rad", 0.0, -math.pi, math.pi, "rad", "initial swing angle"),
    _p("initial.boom_rad", 0.5236, None, None, "rad",
       "initial boom joint angle (30 deg; the cylinder strokes limit it: -0.9 .. 55.5 deg)"),
    _p("initial.arm_rad", -1.0472, None, None, "rad",
       "initial arm joint angle, relative (-60 deg; -131.8 .. -38.7 deg)"),
    _p("initial.bucket_rad", 1.2217, None, None, "rad",
       "initial bucket joint angle, relative (70 deg; the strokes and the four-bar toggle "
       "limit it: 40.0 .. 144.6 deg)"),
    _p("initial.base_x_m", 0.0, -1e4, 1e4, "m", "initial base_link x in world"),
    _p("initial.base_y_m", 0.0, -1e4, 1e4, "m", "initial base_link y in world"),
    _p("initial.base_yaw_rad", 0.0, -math.pi, math.pi, "rad", "initial base_link yaw in world"),
    _p("hydraulics.pressure_pa", 27.4e6, 1e6, 50e6, "Pa",
       "main relief pressure (27.4 MPa = 280 kgf/cm^2, the 7-9 t class figure)"),
    _p("hydraulics.bulk_modulus_pa", 1.2e9, 1e8, 2.5e9, "Pa",
       "effective oil bulk modulus (oil with some air and hose compliance)"),
    _p("hydraulics.dead_volume_m3", 0.001, 1e-4, 0.1, "m^3",
       "hose + end volume per cylinder chamber"),
    _p("hydraulics.position_gain_1_s", 12.0, 0.1, 50.0, "1/s",
       "outer loop: valve speed = gain x position error"),
    *(p for name, (bore, rod, count, flow, flow_in, damp, armature) in _CYL_DEFAULTS.items()
      for p in (
        _p(f"hydraulics.{name}.bore_m", bore, 0.02, 0.5, "m", f"{name} bore diameter"),
        _p(f"hydraulics.{name}.rod_diameter_m", rod, 0.01, 0.45, "m",
           f"{name} rod diameter", constraint="< bore_m"),
        _p(f"hydraulics.{name}.count", count, 1, 4, "count", f"{name}s in parallel"),
        _p(f"hydraulics.{name}.flow_lpm", flow, 1.0, 2000.0, "L/min",
           f"flow to the {name} when extending (bore side)"),
        _p(f"hydraulics.{name}.retract_flow_lpm", flow_in, 1.0, 2000.0, "L/min",
           f"flow to the {name} when retracting (rod side)"),
        _p(f"hydraulics.{name}.damping_n_s_per_m", damp, 1e2, 1e9, "N s/m",
           f"{name} valve damping on the rod speed relative to the commanded one"),
        _p(f"hydraulics.{name}.armature_kg", armature, 0.0, 1e5, "kg",
           f"mass added to the {name} rod's slide joint so the stiff oil column is resolvable "
           "at a 1 ms step"),
    )),
    _p("hydraulics.swing.torque_limit_nm", 2.3e4, 1e3, 1e7, "N m", "swing motor torque limit"),
    _p("hydraulics.swing.speed_limit_rad_s", 1.05, 0.01, 5.0, "rad/s",
       "swing speed limit (10 rpm)"),
    _p("hydraulics.swing.stiffness_nm_per_rad", 4.5e6, 1e3, 1e10, "N m/rad",
       "holding brake / motor stiffness"),
    _p("hydraulics.swing.damping_nm_s_per_rad", 4.5e5, 1e2, 1e9, "N m s/rad", "swing damping"),
    _p("tracks.track_width_m", 2.6, 0.5, 6.0, "m", "track gauge, centre to centre"),
    _p("tracks.speed_limit_m_s", 1.5, 0.01, 10.0, "m/s", "track speed limit (5.4 km/h)"),
    _p("tracks.traction_force_n", 5.6e4, 1e3, 1e7, "N", "traction (drawbar pull) limit"),
    _p("tracks.damping_n_s_per_m", 2.3e5, 1e2, 1e9, "N s/m",
       "track grip damping (the tracks hold their position against the ground, "
       "traction-limited)"),
    _p("tracks.stiffness_n_per_m", 2.3e6, 1e3, 1e10, "N/m",
       "track grip stiffness (holds the undercarriage against swing reactions)"),
    _p("drive_mode", "kinematic", None, None, "",
       "how the base moves: kinematic = at the track speeds of track_command (a wheeled "
       "machine: the wheel speeds and steering angles of wheel_command; no drive model); "
       "plant = the drive train (hydrostatic drives, Janosi-Hanamoto traction, grade) under the "
       "PLC's plant/actuation (hardware in the loop)", choices=("kinematic", "plant")),
    _p("tracks.contact_length_m", 2.43, 0.3, 10.0, "m",
       "drive_mode plant: track length on the ground (Komatsu PC78US-8: 7365 kg at 33.0 kPa "
       "on 450 mm shoes)"),
    _p("tracks.shoe_width_m", 0.45, 0.1, 2.0, "m",
       "drive_mode plant: track shoe width (PC78US-8, Cat 309 CR: 450 mm)"),
    _p("tracks.sprocket_radius_m", 0.30, 0.05, 2.0, "m",
       "drive_mode plant: drive sprocket pitch radius (assumed: no figure of the class found)"),
    _p("tracks.relief_pressure_pa", 27.4e6, 1e6, 50e6, "Pa",
       "drive_mode plant: travel motor crossover relief (the main relief's figure: no travel "
       "figure of the class found)"),
    _p("tracks.motor_displacement_m3", 4.0e-5, 1e-6, 1e-2, "m^3",
       "drive_mode plant: travel motor displacement per revolution, low speed (assumed)"),
    _p("tracks.gear_ratio", 49.0, 1.0, 500.0, "-",
       "drive_mode plant: final drive reduction (assumed: with the relief, the displacement "
       "and the sprocket, p D i / (2 pi r) x 2 = 57 kN, the Cat 308C CR's drawbar pull)"),
    _p("tracks.torque_time_constant_s", 0.1, 0.001, 5.0, "s",
       "drive_mode plant: first-order response of the drive's torque to its set-point "
       "(assumed: swash plate and pressure build-up)"),
    _p("tracks.rotating_inertia_kg_m2", 15.0, 0.01, 1e4, "kg m^2",
       "drive_mode plant: sprocket, final drive and motor (J_m i^2) at the sprocket (assumed)"),
    _p("tracks.brake_torque_nm", 1.0e4, 1.0, 1e7, "N m",
       "drive_mode plant: spring-applied holding brake capacity at the sprocket (assumed: "
       "1.2 x the drive's torque limit; 2.5 kN m holds the machine on Cat's 12 deg check)"),
    _p("tracks.internal_resistance_ratio", 0.02, 0.0, 0.5, "-",
       "drive_mode plant: running gear losses over the normal load (2-3 %, research note "
       "5.1, assumed)"),
    _p("traction.soil", "heavy_clay", None, None, "",
       "drive_mode plant: the soil under the machine, a name under traction_soils (shipped: "
       "heavy_clay, lete_sand, dry_sand; Wong 2008)"),
    _p("traction.slip_speed_floor_m_s", 0.002, 1e-4, 0.1, "m/s",
       "drive_mode plant: slip regularisation: below this speed the traction is a stiff linear "
       "function of the slip velocity; a braked machine creeps at this x its hold slip"),
    _p("traction.patch.soil", "", None, None, "",
       "drive_mode plant: the soil of a rectangular patch (a name under traction_soils); "
       "empty = no patch"),
    _p("traction.patch.x_min_m", 0.0, -1e4, 1e4, "m", "patch's lowest x in world"),
    _p("traction.patch.x_max_m", 0.0, -1e4, 1e4, "m", "patch's highest x in world"),
    _p("traction.patch.y_min_m", 0.0, -1e4, 1e4, "m", "patch's lowest y in world"),
    _p("traction.patch.y_max_m", 0.0, -1e4, 1e4, "m", "patch's highest y in world"),
    _p("terrain.x0_m", -3.975, -1e4, 1e4, "m",
       "x of the MuJoCo height field's first node in world (the soil grid's first cell "
       "centre)"),
    _p("terrain.y0_m", -7.975, -1e4, 1e4, "m", "y of the first node"),
    _p("terrain.cell_size_m", 0.05, 0.005, 1.0, "m", "node spacing"),
    _p("terrain.nx", 320, 2, 4000, "count",
       "nodes along x (the field spans x0 .. x0 + (nx-1) cell_size)"),
    _p("terrain.ny", 320, 2, 4000, "count", "nodes along y"),
    _p("terrain.z_min_m", -3.0, -100.0, 100.0, "m", "lowest height the field can hold",
       constraint="< z_max_m"),
    _p("terrain.z_max_m", 3.0, -100.0, 100.0, "m", "highest height the field can hold"),
    _p("terrain.initial_height_m", 0.0, -100.0, 100.0, "m", "flat initial terrain height",
       constraint="within z_min_m .. z_max_m"),
    _p("terrain.contact", True, None, None, "",
       "the bucket collides with the terrain (rigid ground); false when the soil model "
       "supplies the digging forces and the bucket must enter the soil (sim.launch.py sets "
       "it to the opposite of its soil argument)"),
)

# The soils for traction: traction_soils.<soil>.<key>, the shipped ones from Wong 2008
# (excavator_sim.drivetrain.soil says which row and where K comes from).
TRACTION_SOIL_PARAMETERS: tuple[ParameterSpec, ...] = (
    ParameterSpec("cohesion_pa", None, "Mohr-Coulomb cohesion c", "Pa", 0.0, 1e6,
                  type=ParamType.DOUBLE),
    ParameterSpec("friction_angle_rad", None, "internal friction angle phi (also the lateral "
                  "resistance mu_t = tan phi)", "rad", 0.0, 1.4, type=ParamType.DOUBLE),
    ParameterSpec("shear_modulus_m", None, "Janosi-Hanamoto shear deformation modulus K", "m",
                  1e-4, 1.0, type=ParamType.DOUBLE),
    ParameterSpec("sinkage_exponent", None, "Bekker sinkage exponent n", "-", 0.01, 3.0,
                  type=ParamType.DOUBLE),
    ParameterSpec("sinkage_kc", None, "Bekker cohesive modulus k_c", "N/m^(n+1)", 0.0, 1e9,
                  type=ParamType.DOUBLE),
    ParameterSpec("sinkage_kphi", None, "Bekker frictional modulus k_phi", "N/m^(n+2)", 1.0,
                  1e10, type=ParamType.DOUBLE),
)
TRACTION_SOILS = ParameterTemplate("traction_soils", "soil", TRACTION_SOIL_PARAMETERS)
# template prefix -> soil -> defaults: the shipped soils' keys may be left out of a file
INSTANCES = {"traction_soils": SHIPPED_SOILS}

# Parameters of the ROS node only (sim_node; the core ignores them).
NODE_PARAMETERS: tuple[ParameterSpec, ...] = (
    ParameterSpec("geometry_file", "", "excavator geometry YAML; empty = the package's "
                  "config/excavator.yaml", "path"),
    ParameterSpec("machine", "", "machine class preset: a name in config/machines/ (e.g. "
                  "heavy_36t, seed_midi) or a preset file's path; its linkage (if it has one), "
                  "masses and parameters replace the files' values (give ik_node and "
                  "teleop_node the same file as geometry_file); empty = the default machine "
                  "(config/excavator.yaml, config/sim.yaml)"),
    ParameterSpec("marker_rate_hz", 20.0, "rate of the markers MarkerArray, in wall time; "
                  "0 = off", "Hz", 0.0, 1000.0, dynamic=True, deprecated_names=("marker_rate",)),
    ParameterSpec("publish_robot_description", True, "publish the generated URDF on "
                  "robot_description (sim.launch.py sets false: robot_state_publisher "
                  "publishes it)"),
    ParameterSpec("frame_prefix", "", "prefix of every URDF link name but world, e.g. 'exc1/' "
                  "in a fleet (letters, digits, _, /; ends in /)"),
    ParameterSpec("max_wrench_age_s", 0.02, "a soil/wrench acts only while at most this old "
                  "(sim time since the pose it answers); 0 = no check", "s", 0.0, 10.0,
                  dynamic=True),
    ParameterSpec("lag_warn_s", 0.05, "WARN on /diagnostics ('cannot keep up') when the "
                  "simulation is further behind the wall clock", "s", 0.001, 10.0,
                  dynamic=True),
    ParameterSpec("max_catch_up_s", 0.5, "wall time of deficit caught up by stepping faster; "
                  "beyond it the schedule slips (slipped_s on /diagnostics)", "s", 0.01, 60.0,
                  dynamic=True),
    ParameterSpec("track_command_timeout_s", 0.2, "the tracks stop when no track_command "
                  "arrived for this long (a wheeled machine's wheels, steering held, when no "
                  "wheel_command did; simulated time: 10 periods of the bridge's 50 Hz "
                  "plc/wheel_states); 0 = hold the last one", "s", 0.0, 60.0, dynamic=True),
    ParameterSpec("max_command_lead_s", 1.0, "joint_command / track_command / wheel_command "
                  "stamped ahead of "
                  "the simulated time are applied at their stamp (teleop replay); further ahead "
                  "than this: applied on arrival, counted; 0 = apply every command on arrival",
                  "s", 0.0, 60.0),
    ParameterSpec("max_command_age_s", 1.0, "joint_command / track_command / wheel_command "
                  "sent longer ago "
                  "than this when taken (their DDS source timestamp on the wall clock, not the "
                  "header stamp) are dropped, counted and reported (docs/teleoperation.md, "
                  "Late commands)", "s", 0.01, 3600.0, dynamic=True),
    ParameterSpec("follow_clock", False, "step to the time on /clock (the fleet's clock owner) "
                  "instead of pacing by the wall clock; publishes no /clock"),
    ParameterSpec("soil_in_process", False, "run the soil model (soil_node's core: terrain, "
                  "forces) inside the simulation step: wrench age 0, the terrain written "
                  "straight into the height field, the load's mass on the bucket body; "
                  "publishes soil/wrench, soil/bucket_load, soil/bucket_payload, "
                  "soil/bucket_soil, soil/terrain_patch, soil/heightmap as soil_node would "
                  "(run one or the other)"),
    ParameterSpec("soil_params_file", "", "with soil_in_process: the soil parameter file; "
                  "empty = the package's config/soil.yaml", "path"),
    ParameterSpec("plant_actuation_timeout_s", 0.2, "drive_mode plant: the drives brake (torque "
                  "0, brakes applied) when no plant/actuation arrived for this long (simulated "
                  "time: 20 of the plant link's 100 Hz exchanges); 0 = hold the last one", "s",
                  0.0, 60.0, dynamic=True),
    ParameterSpec("soil_lockstep_timeout_s", 0.0, "lockstep with soil_node: step a period only "
                  "once the soil/wrench answering the latest bucket_pose arrived, waiting at "
                  "most this long (wall time; then on without waiting until it answers again); "
                  "reproducible soil coupling over DDS; 0 = never wait", "s", 0.0, 10.0),
    ParameterSpec("command_lockstep_timeout_s", 0.0, "lockstep with a scheduled command "
                  "stream (teleop_node's command_delay_s): once a command was held for its "
                  "stamp, step the period starting at T only once a command stamped at or after "
                  "T arrived, waiting at most this long (wall time; then on without waiting "
                  "until a command is held again); reproducible replays on a busy host; 0 = "
                  "never wait", "s", 0.0, 10.0),
)


def traction_soil_names(v: Mapping[str, Any]) -> list[str]:
    """The soils defined: the shipped ones and every ``traction_soils.<soil>.*`` given."""
    return sorted(set(SHIPPED_SOILS) | {k.split(".")[1] for k in v
                                         if k.startswith("traction_soils.")
                                         and k.count(".") == 2})


def _check(v: Mapping[str, Any]) -> None:
    """The rules between parameters (one value alone cannot break them)."""
    soils = traction_soil_names(v)
    for key in ("traction.soil", "traction.patch.soil"):
        name = v[key]
        if name not in soils and not (key == "traction.patch.soil" and name == ""):
            raise SimConfigError(f"parameter {key} = {name!r} is not a soil: one of {soils}, "
                                 "or add traction_soils." + f"{name}.* keys (all six)")
    if v["traction.patch.soil"]:
        for axis in ("x", "y"):
            lo, hi = v[f"traction.patch.{axis}_min_m"], v[f"traction.patch.{axis}_max_m"]
            if not lo < hi:
                raise SimConfigError(f"parameter traction.patch.{axis}_min_m = {lo:.6g} m must "
                                     f"be below traction.patch.{axis}_max_m = {hi:.6g} m "
                                     f"(the patch of {v['traction.patch.soil']!r})")
    if v["control_period_s"] < v["timestep_s"]:
        raise SimConfigError(f"parameter control_period_s = {v['control_period_s']:.6g} s must "
                             f"be >= timestep_s = {v['timestep_s']:.6g} s")
    if v["soil_lockstep_timeout_s"] > 0.0 and (v["follow_clock"] or v["soil_in_process"]):
        other = "follow_clock" if v["follow_clock"] else "soil_in_process"
        why = ("a follower steps to the owner's /clock and cannot hold it for its soil"
               if v["follow_clock"] else "the in-process soil answers every pose already")
        raise SimConfigError(f"parameter soil_lockstep_timeout_s = "
                             f"{v['soil_lockstep_timeout_s']:.6g} s needs {other} false: {why}; "
                             "set soil_lockstep_timeout_s to 0")
    if v["command_lockstep_timeout_s"] > 0.0 and (v["follow_clock"]
                                                  or v["max_command_lead_s"] <= 0.0):
        other, why = (("follow_clock false", "a follower steps to the owner's /clock and cannot "
                       "hold it for a command") if v["follow_clock"] else
                      ("max_command_lead_s > 0", "with 0 no command is held for its stamp, so "
                       "there is no scheduled stream to wait for"))
        raise SimConfigError(f"parameter command_lockstep_timeout_s = "
                             f"{v['command_lockstep_timeout_s']:.6g} s needs {other}: {why}; "
                             "set command_lockstep_timeout_s to 0")
    for name in _CYL_DEFAULTS:
        k = f"hydraulics.{name}."
        if v[k + "rod_diameter_m"] >= v[k + "bore_m"]:
            raise SimConfigError(f"parameter {k}rod_diameter_m = "
                                 f"{v[k + 'rod_diameter_m']:.6g} m must be smaller than "
                                 f"{k}bore_m = {v[k + 'bore_m']:.6g} m")


SIM_PARAMETERS = ParameterTable("sim_node", CORE_PARAMETERS + NODE_PARAMETERS,
                                error=SimConfigError, templates=(TRACTION_SOILS,),
                                check=_check)
# kept for callers of the former table (dotted name -> spec)
PARAMETERS = CORE_PARAMETERS


@dataclass(frozen=True)
class SimConfig:
    """Validated simulation parameters (parameter ``timestep_s`` -> ``timestep`` and so on)."""

    timestep: float  # physics step [s]
    real_time_factor: float  # simulated / wall time [-]; 0 = as fast as possible
    publish_rate: float  # [Hz] of simulated time
    control_period: float  # outer position loop period [s]
    initial: InitialPose
    hydraulics: Hydraulics
    terrain: TerrainGrid
    terrain_contact: bool
    drive_mode: str = "kinematic"   # kinematic | plant
    drivetrain: DrivetrainConfig | None = None   # the drive train (drive_mode plant)
    # a wheeled machine (a machine preset's undercarriage:, issue 28); None: on tracks. Plant:
    # its drive train under the PLC's actuation; kinematic: its wheels follow wheel speed and
    # steering angle commands (excavator_sim.drivetrain.wheeled_kinematic)
    undercarriage: WheeledUndercarriage | None = None



def config_from_flat(values: Mapping[str, Any], source: str = "parameters",
                     undercarriage: WheeledUndercarriage | None = None) -> SimConfig:
    """Validate dotted-name values (missing ones take their defaults, deprecated names are
    renamed with a warning, node-only ones are checked and ignored) into a
    :class:`SimConfig`; ``undercarriage``: a wheeled machine preset's (it needs drive_mode
    plant)."""
    v = SIM_PARAMETERS.validate(values, source, instances=INSTANCES)
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
            retract_flow_lpm=v[k + "retract_flow_lpm"],
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
    return SimConfig(timestep=v["timestep_s"], real_time_factor=v["real_time_factor"],
                     publish_rate=v["publish_rate_hz"], control_period=v["control_period_s"],
                     initial=initial, hydraulics=hyd, terrain=terrain,
                     terrain_contact=bool(v["terrain.contact"]),
                     drive_mode=str(v["drive_mode"]), drivetrain=drivetrain_config(v),
                     undercarriage=undercarriage)


def traction_soil(v: Mapping[str, Any], name: str) -> TractionSoil:
    """The soil ``name`` of validated values (a shipped one's defaults fill in)."""
    keys = [s.name for s in TRACTION_SOIL_PARAMETERS]
    shipped = SHIPPED_SOILS.get(name, {})
    values = {k: v.get(f"traction_soils.{name}.{k}", shipped.get(k)) for k in keys}
    return TractionSoil(**values, name=name)


def drivetrain_config(v: Mapping[str, Any]) -> DrivetrainConfig:
    """The drive train's settings from validated values (``tracks.*``, ``traction.*``,
    ``traction_soils.*``, ``hydraulics`` not involved)."""
    radius = float(v["tracks.sprocket_radius_m"])
    geometry = TrackGeometry(gauge_m=v["tracks.track_width_m"],
                             contact_length_m=v["tracks.contact_length_m"],
                             shoe_width_m=v["tracks.shoe_width_m"], sprocket_radius_m=radius)
    drive = HydrostaticDriveParams.from_config(
        {k.removeprefix("tracks."): x for k, x in v.items() if k.startswith("tracks.")}, radius)
    params = VehicleParams(geometry, drive,
                           internal_resistance_ratio=v["tracks.internal_resistance_ratio"],
                           slip_speed_floor_m_s=v["traction.slip_speed_floor_m_s"])
    patches: tuple[SoilPatch, ...] = ()
    if v["traction.patch.soil"]:
        patches = (SoilPatch(traction_soil(v, v["traction.patch.soil"]),
                             v["traction.patch.x_min_m"], v["traction.patch.x_max_m"],
                             v["traction.patch.y_min_m"], v["traction.patch.y_max_m"]),)
    return DrivetrainConfig(params, SoilMap(traction_soil(v, v["traction.soil"]), patches))


def load_sim_machine(machine: str | Path) -> MachinePreset:
    """A machine class preset (a name in config/machines/ or a preset file's path) whose
    parameters are all sim_node parameters: an unknown one is an error naming the preset, the
    key and the closest known name."""
    preset = load_machine(machine)
    unknown = SIM_PARAMETERS.unknown(preset.parameters)
    if unknown:
        raise SimConfigError(SIM_PARAMETERS.unknown_message(unknown,
                                                            f"machine preset {preset.source}"))
    return preset


def load_sim_config(path: str | Path | None = None,
                    overrides: Mapping[str, Any] | None = None,
                    machine: str | Path | MachinePreset | None = None) -> SimConfig:
    """Load ``config/sim.yaml`` (or ``path``: its ``/**`` and ``sim_node`` sections), apply a
    ``machine`` preset's parameters (a name in config/machines/, a preset file's path or a
    loaded :class:`MachinePreset`; its masses go to the geometry:
    :meth:`MachinePreset.geometry`), then dotted-name ``overrides``, validate."""
    path = Path(path) if path is not None else config_file("sim.yaml")
    source = str(path)
    merged: dict[str, Any] = {}
    under = None
    if machine is not None and machine != "":
        preset = machine if isinstance(machine, MachinePreset) else load_sim_machine(machine)
        merged.update(preset.parameters)
        under = preset.undercarriage
        source = f"{source} + machine preset {preset.source}"
    merged.update(overrides or {})
    return config_from_flat(load_parameters(SIM_PARAMETERS, path, merged, instances=INSTANCES),
                            source=source, undercarriage=under)
