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
