"""Errors of the system package ``excavator_hil`` (CLI, demo, bags, local services, harness):
one root, :class:`HilError`; every message names the value, the limit and the fix.

Errors of the packages below (kinematics, simulation, bridge) are re-raised at this package's
boundary as one of these where this package adds context (with the original as ``__cause__``).
"""

from __future__ import annotations

from excavator_common.errors import ConfigurationError


class HilError(Exception):
    """Root of the system package's errors."""


class HilConfigError(HilError, ConfigurationError):
    """A bad setting of the system layer (a CLI option, a scenario, a dashboard setting)."""


class DemoError(HilError, ValueError):
    """A demo that cannot run as asked (a waypoint or a leg of the dig cycle out of reach)."""


class BagError(HilError, RuntimeError):
    """A rosbag2 directory that cannot be written or read as asked."""
