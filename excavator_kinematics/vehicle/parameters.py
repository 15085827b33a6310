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
            shown = float(value) if isinstance(value, Real) else value
            raise InvalidInputError(
                f"twist.{field} = {shown!r} {unit} is not a finite number; "
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


def check_twists(vx: Any, vy: Any, wz: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Batch form of ``check_twist``: three equal-length 1-D float arrays, all finite."""
    arrays = tuple(np.atleast_1d(np.asarray(v, dtype=float)) for v in (vx, vy, wz))
    shapes = {a.shape for a in arrays}
    if len(shapes) != 1 or arrays[0].ndim != 1:
        raise InvalidInputError(f"twists: vx, vy, wz must be 1-D arrays of one length, got "
                                f"shapes {[a.shape for a in arrays]}")
    for name, unit, arr in zip(("vx", "vy", "wz"), ("m/s", "m/s", "rad/s"), arrays,
                               strict=True):
        bad = np.flatnonzero(~np.isfinite(arr))
        if bad.size:
            raise InvalidInputError(
                f"twist.{name} = {float(arr[bad[0]])!r} {unit} (row {bad[0]}) is not a finite "
                "number; send finite velocities (stop = all zeros)")
    return arrays  # type: ignore[return-value]


def measured_rows(values: Any, count: int, what: str, unit: str) -> np.ndarray:
    """``values`` as a finite (N, count) float array (a single row of ``count`` is accepted)."""
    arr = np.asarray(values, dtype=float)
    if arr.ndim == 1 and arr.shape == (count,):
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[1] != count:
        raise InvalidInputError(
            f"{what}: expected {count} values [{unit}] per row, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise InvalidInputError(
            f"{what} = {arr.tolist() if arr.size <= 16 else '...'} [{unit}] contains NaN/inf; "
            "check the PLC feedback")
    return arr


def held_rows(held_angles: Any, rows: int, count: int) -> np.ndarray:
    """Steering angles [rad] to keep, broadcast to (rows, count); zeros when None."""
    if held_angles is None:
        return np.zeros((rows, count))
    arr = measured_rows(held_angles, count, "held steering angles", "rad")
    if arr.shape[0] not in (1, rows):
        raise InvalidInputError(f"held steering angles: {arr.shape[0]} rows for {rows} twists")
    return np.broadcast_to(arr, (rows, count)).copy()


def floats(values: Any, count: int, what: str, unit: str) -> list[float]:
    """``measured`` for the per-cycle scalar path: a list of ``count`` finite floats, without
    numpy's per-call overhead on 2-8 values."""
    try:
        out = [float(v) for v in values]
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"{what}: expected {count} numbers [{unit}], got {values!r}"
                                ) from exc
    if len(out) != count:
        raise InvalidInputError(f"{what}: expected {count} values [{unit}], got {len(out)}")
    if not all(math.isfinite(v) for v in out):
        raise InvalidInputError(f"{what} = {out} [{unit}] contains NaN/inf; check the PLC "
                                "feedback")
    return out


def held_floats(held_angles: Any, count: int) -> list[float]:
    """``held`` for the scalar path."""
    if held_angles is None:
        return [0.0] * count
    return floats(held_angles, count, "held steering angles", "rad")
