"""A machine preset's wheeled undercarriage (issue 28): the ``undercarriage:`` section of a
``config/machines/<name>.yaml`` preset, checked and turned into the drive train's parameters
(:class:`~excavator_sim.drivetrain.wheeled.WheeledParams`) and into the kinematic model the
bridge must speak to drive it (``excavator_kinematics.vehicle``).

A preset without the section is a tracked machine (config/sim.yaml's ``tracks.*``). The
section's layout (units in the keys; every key is required, so a preset says where each figure
comes from)::

    undercarriage:
      type: wheeled
      vehicle_model: ackermann | 4wd4ws      # the bridge's `model` this machine needs
      wheelbase_m: ..., track_m: ..., wheel_radius_m: ..., front_load_share: ...
      driven: [rl, rr]                       # wheels with a drive, in fl, fr, rl, rr order
      steered: [fl, fr]                      # wheels with a steering actuator
      steering: {max_angle_rad, max_rate_rad_s, time_constant_s}
      drive: {relief_pressure_pa, motor_displacement_m3, gear_ratio, torque_time_constant_s,
              rotating_inertia_kg_m2, brake_torque_nm, speed_limit_m_s}
      wheel_inertia_kg_m2: ...               # an undriven wheel's rotating inertia
      tyre: {friction, cornering_coefficient_1_rad, rolling_resistance}
      slip_speed_floor_m_s: ...

What each vehicle model needs of the wheels is what config/plc.yaml's ``actuators`` give it:
Ackermann drives ``rl, rr`` and steers ``fl, fr``; 4WD4WS drives and steers all four. A preset
that does not match its model is refused at load, naming the key and the fix.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from excavator_kinematics.errors import ConfigError
from excavator_kinematics.vehicle import VehicleModel, make_vehicle_model
from excavator_sim.drivetrain.hydrostatic import HydrostaticDriveParams
from excavator_sim.drivetrain.steering import SteeringParams
from excavator_sim.drivetrain.tyre import TyreParams
from excavator_sim.drivetrain.wheeled import WHEELS, WheeledParams, WheelGeometry
from excavator_sim.errors import SimConfigError

# The wheels each wheeled model drives and steers (config/plc.yaml `actuators`).
MODEL_WHEELS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "ackermann": (("rl", "rr"), ("fl", "fr")),
    "4wd4ws": (WHEELS, WHEELS),
}
# key: (low, high, unit, what it is) - ranges that catch unit slips (mm for m, deg for rad,
# bar for Pa) and impossible machines, not a class's spread.
_TOP: dict[str, tuple[float, float, str, str]] = {
    "wheelbase_m": (0.5, 10.0, "m", "axle to axle"),
    "track_m": (0.5, 5.0, "m", "wheel centre to wheel centre across an axle"),
    "wheel_radius_m": (0.1, 2.0, "m", "the tyre's rolling radius"),
    "front_load_share": (0.1, 0.9, "-", "the share of the weight on the front axle"),
    "wheel_inertia_kg_m2": (0.1, 1.0e3, "kg m^2", "an undriven wheel's rotating inertia"),
    "slip_speed_floor_m_s": (1e-4, 0.1, "m/s", "the tyre slip's regularisation"),
}
_STEERING: dict[str, tuple[float, float, str, str]] = {
    "max_angle_rad": (0.05, math.pi, "rad", "the steering end stop"),
    "max_rate_rad_s": (0.01, 10.0, "rad/s", "the steering rate with the valve open"),
    "time_constant_s": (1e-4, 2.0, "s", "the steering valve's response"),
}
_DRIVE: dict[str, tuple[float, float, str, str]] = {
    "relief_pressure_pa": (1e6, 60e6, "Pa", "the drive's crossover relief setting"),
    "motor_displacement_m3": (1e-6, 1e-2, "m^3", "the wheel motor's displacement per rev"),
    "gear_ratio": (1.0, 500.0, "-", "the hub reduction"),
    "torque_time_constant_s": (1e-3, 5.0, "s", "the drive's torque response"),
    "rotating_inertia_kg_m2": (0.1, 1e4, "kg m^2", "wheel + hub + motor, at the wheel"),
    "brake_torque_nm": (1.0, 1e6, "N m", "the holding brake at the wheel"),
    "speed_limit_m_s": (0.1, 20.0, "m/s", "the wheel speed the pump's flow allows"),
}
_TYRE: dict[str, tuple[float, float, str, str]] = {
    "friction": (0.05, 2.0, "-", "the tyre-ground friction coefficient"),
    "cornering_coefficient_1_rad": (0.5, 50.0, "1/rad", "slip stiffness per wheel load"),
    "rolling_resistance": (0.0, 0.5, "-", "rolling resistance per wheel load"),
}
_KEYS = {"type", "vehicle_model", "driven", "steered", "steering", "drive", "tyre", *_TOP}


@dataclass(frozen=True)
class WheeledUndercarriage:
    """A checked wheeled undercarriage: its vehicle model's name and the drive train's
    parameters."""

    vehicle_model: str
    params: WheeledParams
    source: str

    def model_parameters(self) -> dict[str, float | str]:
        """The bridge's vehicle-model parameters for this machine (``vehicle.<model>.*`` of
        config/plc.yaml): its geometry, the steering end stop and the wheel speed its drives
        reach (the flow limit's fade starts at 90 % of it)."""
        g = self.params.geometry
        top = 0.9 * self.params.drive.speed_limit_rad_s * g.wheel_radius_m
        if self.vehicle_model == "ackermann":
            return {"wheelbase_m": g.wheelbase_m, "front_track_m": g.track_m,
                    "rear_track_m": g.track_m,
                    "max_steer_angle_rad": self.params.steering.max_angle_rad,
                    "max_wheel_speed_m_s": top}
        return {"wheelbase_m": g.wheelbase_m, "track_m": g.track_m,
                "max_steer_angle_rad": self.params.steering.max_angle_rad,
                "max_wheel_speed_m_s": top}

    def kinematic_model(self) -> VehicleModel:
        """The kinematic model (``excavator_kinematics.vehicle``) of this machine."""
        return make_vehicle_model(self.vehicle_model, self.model_parameters())

    def reference_point(self) -> tuple[float, float]:
        """Where the kinematic model's twist is taken, in the drive train's body frame [m]:
        Ackermann the rear-axle centre, 4WD4WS the centre of the wheels."""
        if self.vehicle_model == "ackermann":
            return (-0.5 * self.params.geometry.wheelbase_m, 0.0)
        return (0.0, 0.0)

    def check_bridge_model(self, model: str, params: Mapping[str, Any]) -> None:
        """Refuse a bridge configuration (its ``model`` and ``vehicle.<model>`` mapping) that
        would drive this machine wrongly: another model, a geometry that differs by more than
        1 cm, a steering limit past the machine's end stops, or wheel speeds its drives cannot
        reach. The error names each mismatch and the fix."""
        if model != self.vehicle_model:
            raise SimConfigError(
                f"machine preset {self.source} is a {self.vehicle_model} machine but the "
                f"bridge's model is {model!r}; set the bridge's model: {self.vehicle_model} "
                f"(config/plc.yaml) or choose a preset of the {model} model")
        try:
            theirs = vars(make_vehicle_model(model, params))   # the parameters as it read them
        except ConfigError as exc:
            raise SimConfigError(f"the bridge's vehicle.{model} parameters: {exc}") from None
        ours = self.model_parameters()
        problems = []
        for key in ("wheelbase_m", "front_track_m", "rear_track_m", "track_m"):
            if key in ours:
                value = float(theirs[key])
                if abs(value - float(ours[key])) > 0.01:
                    problems.append(f"{key} = {value:g} m, the machine's is {ours[key]:g} m")
        steer = float(theirs["max_steer_angle_rad"])
        if steer > float(ours["max_steer_angle_rad"]) + 1e-9:
            problems.append(f"max_steer_angle_rad = {steer:g} rad is past the machine's end "
                            f"stop {ours['max_steer_angle_rad']:g} rad")
        speed = float(theirs["max_wheel_speed_m_s"])
        if speed > float(ours["max_wheel_speed_m_s"]) + 1e-9:
            problems.append(f"max_wheel_speed_m_s = {speed:g} m/s is more than the machine's "
                            f"drives give at full flow ({ours['max_wheel_speed_m_s']:.3g} m/s)")
        if problems:
            fix = ", ".join(f"{k}: {ours[k]:.6g}" if isinstance(ours[k], float) else k
                            for k in ours)
            raise SimConfigError(
                f"the bridge's vehicle.{model} does not match machine preset {self.source}: "
                + "; ".join(problems) + f"; set vehicle.{model} to {{{fix}}} (config/plc.yaml)")


def _number(section: Mapping[str, Any], key: str, spec: tuple[float, float, str, str],
            where: str) -> float:
    low, high, unit, what = spec
    if key not in section:
        raise SimConfigError(f"{where}.{key} is missing ({what} [{unit}], in [{low:g}, "
                             f"{high:g}]); every key of the undercarriage is required")
    value = section[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SimConfigError(f"{where}.{key} = {value!r} is not a number; give {what} in "
                             f"[{low:g}, {high:g}] {unit}")
    v = float(value)
    if not (math.isfinite(v) and low <= v <= high):
        raise SimConfigError(f"{where}.{key} = {value!r} {unit} is outside [{low:g}, {high:g}] "
                             f"{unit} ({what}); set it in that range")
    return v


def _section(data: Mapping[str, Any], key: str, specs: Mapping[str, Any], where: str
             ) -> dict[str, float]:
    section = data.get(key)
    if not isinstance(section, Mapping):
        raise SimConfigError(f"{where}.{key} must be a mapping with {sorted(specs)}")
    unknown = sorted(set(section) - set(specs))
    if unknown:
        raise SimConfigError(f"{where}.{key}: unknown key(s) {unknown}; known: {sorted(specs)}")
    return {k: _number(section, k, spec, f"{where}.{key}") for k, spec in specs.items()}


def _wheels(data: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = data.get(key)
    if not isinstance(value, list | tuple) or not all(isinstance(w, str) for w in value):
        raise SimConfigError(f"{where}.{key} = {value!r} must be a list of wheel names of "
                             f"{list(WHEELS)}")
    return tuple(value)


def parse_undercarriage(data: Any, source: str) -> WheeledUndercarriage:
    """The ``undercarriage`` section of preset ``source``, checked: every error names the key,
    the value, the allowed range and the fix."""
    where = f"machine preset {source}: undercarriage"
    if not isinstance(data, Mapping):
        raise SimConfigError(f"{where} must be a mapping (type: wheeled, vehicle_model, ...)")
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise SimConfigError(f"{where}: unknown key(s) {unknown}; known: {sorted(_KEYS)}")
    if data.get("type") != "wheeled":
        raise SimConfigError(f"{where}.type = {data.get('type')!r}: only 'wheeled' is an "
                             "undercarriage section (a tracked machine has none: its tracks are "
                             "config/sim.yaml's tracks.*)")
    model = data.get("vehicle_model")
    if model not in MODEL_WHEELS:
        raise SimConfigError(f"{where}.vehicle_model = {model!r} is not a wheeled model; use "
                             f"one of {sorted(MODEL_WHEELS)} (skid_steer is the tracked "
                             "machine)")
    driven, steered = _wheels(data, "driven", where), _wheels(data, "steered", where)
    want_driven, want_steered = MODEL_WHEELS[model]
    for key, got, want in (("driven", driven, want_driven), ("steered", steered, want_steered)):
        if got != want:
            raise SimConfigError(
                f"{where}.{key} = {list(got)} does not match the {model} model, which "
                f"{'drives' if key == 'driven' else 'steers'} {list(want)} (config/plc.yaml "
                f"actuators.{model}); set {key}: {list(want)}")
    top = {k: _number(data, k, spec, where) for k, spec in _TOP.items()}
    steering = _section(data, "steering", _STEERING, where)
    drive = _section(data, "drive", _DRIVE, where)
    tyre = _section(data, "tyre", _TYRE, where)
    radius = top["wheel_radius_m"]
    if model == "ackermann" and steering["max_angle_rad"] >= 1.5:
        raise SimConfigError(f"{where}.steering.max_angle_rad = {steering['max_angle_rad']:g} "
                             "rad: an Ackermann wheel at or past 1.5 rad cannot roll along its "
                             "circle (the model's limit); set it below 1.5")
    try:
        params = WheeledParams(
            geometry=WheelGeometry(top["wheelbase_m"], top["track_m"], radius,
                                   top["front_load_share"]),
            driven=driven, steered=steered,
            drive=HydrostaticDriveParams.from_config(drive, radius),
            steering=SteeringParams(**steering),
            tyre=TyreParams(tyre["friction"], tyre["cornering_coefficient_1_rad"],
                            tyre["rolling_resistance"], radius),
            wheel_inertia_kg_m2=top["wheel_inertia_kg_m2"],
            slip_speed_floor_m_s=top["slip_speed_floor_m_s"])
    except SimConfigError as exc:
        raise SimConfigError(f"{where}: {exc}") from None
    under = WheeledUndercarriage(str(model), params, source)
    try:
        under.kinematic_model()
    except ConfigError as exc:
        raise SimConfigError(f"{where}: its {model} model refuses it: {exc}") from None
    return under
