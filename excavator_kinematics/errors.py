"""Errors of the kinematics core: every message names the value, the limit and the fix."""

from __future__ import annotations


class KinematicsError(ValueError):
    """Base class: a request the kinematics cannot satisfy."""


class ConfigError(KinematicsError):
    """A malformed or inconsistent configuration file or parameter."""


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
