"""The drive trains: the tracked machine's (hydrostatic drives, track-soil traction, planar
vehicle dynamics, the ground's grade and the PLC's actuation) and the wheeled machines'
(brush-model tyres, steering actuators, the wheeled vehicle, their plant I/O). Pure: numpy, no
MuJoCo, no ROS. docs/simulation.md, "Drive train and traction", "Wheeled drive train"."""

from excavator_sim.drivetrain.actuation import (
    ActuationError,
    PlantActuation,
    parse_actuation,
)
from excavator_sim.drivetrain.hydrostatic import HydrostaticDrive, HydrostaticDriveParams
from excavator_sim.drivetrain.implicit_step import ExternalLoad
from excavator_sim.drivetrain.soil import SHIPPED_SOILS, SoilMap, SoilPatch, TractionSoil
from excavator_sim.drivetrain.steering import SteeringActuator, SteeringParams
from excavator_sim.drivetrain.tyre import TyreParams
from excavator_sim.drivetrain.vehicle import (
    SAFE_COMMAND,
    DriveCommand,
    Ground,
    TrackedVehicle,
    TrackGeometry,
    TrackReading,
    VehicleParams,
)
from excavator_sim.drivetrain.wheeled import (
    SAFE_WHEELED_COMMAND,
    WHEELS,
    WheeledCommand,
    WheeledGround,
    WheeledParams,
    WheeledVehicle,
    WheelGeometry,
)
from excavator_sim.drivetrain.wheeled_io import (
    WheeledPlantActuation,
    parse_wheeled_actuation,
    wheeled_sensor_arrays,
)

__all__ = ["SAFE_COMMAND", "SAFE_WHEELED_COMMAND", "SHIPPED_SOILS", "WHEELS", "ActuationError",
           "DriveCommand", "ExternalLoad", "Ground", "HydrostaticDrive",
           "HydrostaticDriveParams", "PlantActuation", "SoilMap", "SoilPatch",
           "SteeringActuator", "SteeringParams", "TrackGeometry", "TrackReading",
           "TrackedVehicle", "TractionSoil", "TyreParams", "VehicleParams", "WheelGeometry",
           "WheeledCommand", "WheeledGround", "WheeledParams", "WheeledPlantActuation",
           "WheeledVehicle",
           "parse_actuation", "parse_wheeled_actuation", "wheeled_sensor_arrays"]
