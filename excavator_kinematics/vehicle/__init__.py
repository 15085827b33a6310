"""Vehicle kinematic models (skid-steer, Ackermann, 4WD4WS): inverse and direct, REP-103.

``make_vehicle_model(name, params)`` builds one from its parameter mapping (the model's section
of ``config/plc.yaml``); see ``docs/vehicle_models.md`` for equations, conventions and units.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from excavator_kinematics.errors import ConfigError
from excavator_kinematics.vehicle.ackermann import AckermannModel
from excavator_kinematics.vehicle.artof import (
    LATERAL_CONVENTIONS,
    artof_from_twist,
    lateral_sign,
    twist_from_artof,
)
from excavator_kinematics.vehicle.base import (
    LATERAL_DROPPED,
    STEER_LIMIT,
    YAW_WITHOUT_SPEED,
    BodyTwist,
    VehicleModel,
    WheelCommand,
    WheelCommands,
)
from excavator_kinematics.vehicle.four_wheel_steer import FourWheelSteerModel
from excavator_kinematics.vehicle.saturation import (
    common_scale,
    common_scales,
    scale_twist,
    turning_centre,
)
from excavator_kinematics.vehicle.skid_steer import SkidSteerModel

MODELS: dict[str, type[SkidSteerModel] | type[AckermannModel] | type[FourWheelSteerModel]] = {
    "skid_steer": SkidSteerModel,
    "ackermann": AckermannModel,
    "4wd4ws": FourWheelSteerModel,
}


def make_vehicle_model(name: str, params: Mapping[str, Any] | None = None) -> VehicleModel:
    """The model ``name`` (``skid_steer | ackermann | 4wd4ws``) from its parameters; missing
    parameters take their documented defaults, unknown or out-of-range ones raise
    ``ConfigError`` naming the parameter and its range."""
    if name not in MODELS:
        raise ConfigError(f"vehicle model {name!r} is unknown; use one of {sorted(MODELS)}")
    if params is None:
        params = {}
    if not isinstance(params, Mapping):
        raise ConfigError(f"vehicle model {name!r}: parameters must be a mapping, got "
                          f"{type(params).__name__}")
    return MODELS[name].from_params(params)


__all__ = [
    "LATERAL_CONVENTIONS",
    "LATERAL_DROPPED",
    "MODELS",
    "STEER_LIMIT",
    "YAW_WITHOUT_SPEED",
    "AckermannModel",
    "BodyTwist",
    "FourWheelSteerModel",
    "SkidSteerModel",
    "VehicleModel",
    "WheelCommand",
    "WheelCommands",
    "artof_from_twist",
    "common_scale",
    "common_scales",
    "lateral_sign",
    "make_vehicle_model",
    "scale_twist",
    "turning_centre",
    "twist_from_artof",
]
