"""The drive train of the tracked machine: hydrostatic drives, track-soil traction, planar
vehicle dynamics, the ground's grade and the PLC's actuation (pure: numpy, no MuJoCo, no ROS).
docs/simulation.md, "Drive train and traction"."""

from excavator_sim.drivetrain.actuation import (
    ActuationError,
    PlantActuation,
    parse_actuation,
)
from excavator_sim.drivetrain.hydrostatic import HydrostaticDrive, HydrostaticDriveParams
from excavator_sim.drivetrain.soil import SHIPPED_SOILS, SoilMap, SoilPatch, TractionSoil
from excavator_sim.drivetrain.vehicle import (
    SAFE_COMMAND,
    DriveCommand,
    ExternalLoad,
    Ground,
    TrackedVehicle,
    TrackGeometry,
    TrackReading,
    VehicleParams,
)

__all__ = ["SAFE_COMMAND", "SHIPPED_SOILS", "ActuationError", "DriveCommand", "ExternalLoad",
           "Ground", "HydrostaticDrive", "HydrostaticDriveParams", "PlantActuation", "SoilMap",
           "SoilPatch", "TrackGeometry", "TrackReading", "TrackedVehicle", "TractionSoil",
           "VehicleParams", "parse_actuation"]
