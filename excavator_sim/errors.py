"""Errors of the simulation package (``excavator_sim`` and ``excavator_sim.soil``): one root,
:class:`SimulationError`; every message names the value, the limit and the fix.

Errors of ``excavator_kinematics`` met inside the simulation are re-raised as one of these (with
the original as ``__cause__``): a caller of this package catches ``SimulationError`` only.
"""

from __future__ import annotations

from excavator_common.errors import ConfigurationError


class SimulationError(ValueError):
    """Root of the simulation's errors."""


class SimConfigError(SimulationError, ConfigurationError):
    """A missing, malformed or out-of-range simulation parameter or file."""


class CommandError(SimulationError):
    """A rejected command (joint targets, velocities, drive speeds, bucket wrench)."""


class HeightFieldError(SimulationError):
    """A height-field request outside the grid or the elevation range."""
