"""Errors of the soil model: every message names the value, the limit and the fix."""

from __future__ import annotations

from excavator_common.errors import ConfigurationError
from excavator_sim.errors import SimulationError


class SoilError(SimulationError):
    """Base class of the soil model's errors (under the package's root, SimulationError)."""


class SoilConfigError(SoilError, ConfigurationError):
    """A missing, malformed or out-of-range soil parameter."""


class SoilInputError(SoilError):
    """NaN, inf or otherwise malformed input (pose, twist, heights)."""


class OutsideGridError(SoilError):
    """The bucket (or soil falling from it) lies outside the terrain grid."""
