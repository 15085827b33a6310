"""The drive train's settings as the simulation passes them (built from config/sim.yaml by
:mod:`excavator_sim.sim_config`)."""

from __future__ import annotations

from dataclasses import dataclass

from excavator_sim.drivetrain.soil import SoilMap
from excavator_sim.drivetrain.vehicle import VehicleParams


@dataclass(frozen=True)
class DrivetrainConfig:
    """The vehicle's drive-train parameters and the soils of the terrain."""

    params: VehicleParams
    soils: SoilMap
