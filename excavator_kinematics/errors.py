"""Errors of the kinematics core: every message names the value, the limit and the fix.

Each package has one root error (``KinematicsError`` here, ``excavator_sim.errors.SimulationError``,
``plc_bridge.errors.BridgeError``, ``excavator_hil.errors.HilError``) and wraps the errors of the
packages it calls at its boundary (``raise OwnError(...) from exc``), so a caller catches one
package's root. A bad setting of any package also derives from
:class:`excavator_common.errors.ConfigurationError`, the marker on which a node's start-up ends
with one message and exit code 2 (``excavator_common.ros_runtime.run_node``).
"""

from __future__ import annotations

from excavator_common.errors import ConfigurationError


class KinematicsError(ValueError):
    """Root of this package's errors: a request the kinematics cannot satisfy."""


class ConfigError(KinematicsError, ConfigurationError):
    """A malformed or inconsistent kinematics configuration file or parameter."""


class InvalidInputError(KinematicsError):
    """NaN, inf or otherwise malformed numeric input."""


class StrokeLimitError(KinematicsError):
    """A cylinder extension outside its stroke range, or a joint angle outside the range the
    strokes allow."""


class LinkageClosureError(KinematicsError):
    """A closed loop of the linkage cannot close for the requested value."""


class UnreachableError(KinematicsError):
    """An IK target outside the workspace."""


def fmt_number(value: float, spec: str = ".3f") -> str:
    """``value`` with ``spec`` while that stays short, else ``:.6g``: an error message shows
    1e+308 as ``1e+308``, not as its 309 digits."""
    v = float(value)
    return format(v, spec) if abs(v) < 1e6 else format(v, ".6g")
