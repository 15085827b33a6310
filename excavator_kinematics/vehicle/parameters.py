"""Validation shared by the vehicle models: parameters at start-up, twists and measurements at
run time. Every error names the value, the allowed range and the fix."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from numbers import Real
from typing import Any

import numpy as np

from excavator_kinematics.errors import ConfigError, InvalidInputError
from excavator_kinematics.vehicle.base import BodyTwist

# Upper bounds that only catch unit mistakes (mm for m, deg for rad), not real machines.
MAX_LENGTH_M = 50.0
MAX_SPEED_M_S = 50.0


def check_keys(params: Mapping[str, Any], allowed: Iterable[str], model: str) -> None:
    """Reject unknown parameter names: a typo must not silently fall back to a default."""
    allowed = tuple(allowed)
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ConfigError(
            f"vehicle model '{model}': unknown parameter(s) {unknown}; "
            f"accepted: {sorted(allowed)}")


def read_float(params: Mapping[str, Any], name: str, default: float, low: float, high: float,
               *, model: str, unit: str, low_open: bool = True) -> float:
    """``params[name]`` (or ``default``) as a finite float in ``(low, high]`` (``[low, high]``
    when ``low_open`` is False)."""
    value = params.get(name, default)
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ConfigError(
            f"vehicle model '{model}': parameter {name} = {value!r} is not a number; "
            f"give a value in {_range(low, high, low_open)} {unit}")
    value = float(value)
    below = value <= low if low_open else value < low
    if not math.isfinite(value) or below or value > high:
        raise ConfigError(
            f"vehicle model '{model}': parameter {name} = {value} {unit} is outside "
            f"{_range(low, high, low_open)} {unit}; set it in that range")
    return value


def read_choice(params: Mapping[str, Any], name: str, default: str, choices: tuple[str, ...],
                *, model: str) -> str:
    value = params.get(name, default)
    if value not in choices:
        raise ConfigError(
            f"vehicle model '{model}': parameter {name} = {value!r} is not one of {choices}")
    return str(value)


def _range(low: float, high: float, low_open: bool) -> str:
    return f"{'(' if low_open else '['}{low:g}, {high:g}]"


def check_twist(twist: BodyTwist) -> None:
    """NaN or inf in a commanded twist is a bad input, never something to drive with."""
    for field, unit in (("vx", "m/s"), ("vy", "m/s"), ("wz", "rad/s")):
        value = getattr(twist, field)
        if not isinstance(value, Real) or not math.isfinite(value):
            raise InvalidInputError(
                f"twist.{field} = {value!r} {unit} is not a finite number; "
                "send finite velocities (stop = all zeros)")


def measured(values: Any, count: int, what: str, unit: str) -> np.ndarray:
    """``values`` as a finite float array of length ``count``."""
    arr = np.asarray(values, dtype=float)
    if arr.shape != (count,):
        raise InvalidInputError(
            f"{what}: expected {count} values [{unit}], got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise InvalidInputError(
            f"{what} = {arr.tolist()} [{unit}] contains NaN/inf; check the PLC feedback")
    return arr


def held(held_angles: np.ndarray | None, count: int) -> np.ndarray:
    """The steering angles [rad] to keep when a command leaves them undefined (zeros when the
    caller has none yet)."""
    if held_angles is None:
        return np.zeros(count)
    return measured(held_angles, count, "held steering angles", "rad").copy()
