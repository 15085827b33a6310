"""Parsing and checking of the Redis control values: anything doubtful is rejected, never guessed.

Floats are decimal strings (ARTOF writes 10 significant digits): an optional sign, digits, an
optional fraction and exponent. ``nan``, ``inf``, hex, empty strings, whitespace padding and
anything else are invalid. Bools are ``true``/``false`` (``1``/``0`` accepted, case-insensitive).
A velocity key that was there and is gone (deleted or expired while this bridge reads it) is
doubtful input and rejected like garbage: the other keys may still hold a motion that is only
half of the command (DEL of ``longitudinal`` while turning would spin the machine). A key never
written since the bridge connected reads 0 (nothing commanded: the machine stands; an
operational layer on a non-holonomic vehicle need not write ``lateral``). A missing heartbeat
is no heartbeat (stale, not a rejection). Numbers in messages use ``:.6g``; a value just past a
limit is shown with all its digits, so "3.0000001 m/s exceeds +-3 m/s" never reads "3 is
outside +-3".
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from excavator_kinematics.vehicle import BodyTwist, twist_from_artof
from plc_bridge.errors import InputRejectedError

_DECIMAL = re.compile(rb"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_TRUE = (b"true", b"1")
_FALSE = (b"false", b"0")


def fmt_value(value: float, limit: float | None = None) -> str:
    """``:.6g``, or the shortest exact form when ``:.6g`` would hide the difference from
    ``limit`` (3.0000001 against 3)."""
    text = f"{value:.6g}"
    if limit is not None and value != limit and text in (f"{limit:.6g}", f"{-limit:.6g}"):
        return repr(float(value))
    return text


def parse_float(key: str, raw: bytes | None, required: bool = True) -> float:
    """A decimal string as a finite float; ``None`` (a missing key) is rejected when
    ``required``, else 0.0."""
    if raw is None:
        if not required:
            return 0.0
        raise InputRejectedError(f"{key} is missing (deleted or expired after it was written); "
                                 f"the operational layer must keep all velocity keys written")
    if not _DECIMAL.fullmatch(raw):
        raise InputRejectedError(f"{key} = {raw[:40]!r} is not a decimal number; write e.g. "
                            f"'0.5' (10 significant digits, no nan/inf)")
    value = float(raw)
    if not math.isfinite(value):
        raise InputRejectedError(f"{key} = {raw[:40]!r} overflows a double; write a finite value")
    return value


def parse_bool(key: str, raw: bytes | None) -> bool | None:
    """``true``/``false``/``1``/``0`` (any case); ``None`` when the key is missing."""
    if raw is None:
        return None
    low = raw.lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise InputRejectedError(f"{key} = {raw[:40]!r} is not a bool; write 'true' or 'false'")


@dataclass(frozen=True)
class Envelope:
    """Largest accepted command magnitudes; beyond them a command is rejected, not clamped."""

    max_longitudinal_m_s: float
    max_lateral_m_s: float
    max_angular_rad_s: float


@dataclass(frozen=True)
class ControlInput:
    """One validated read of the control keys: the REP-103 twist and the heartbeat level."""

    twist: BodyTwist
    heartbeat: bool | None


def parse_control(keys: tuple[str, str, str, str], raw: list[bytes | None],
                  envelope: Envelope, lateral_positive: str = "left",
                  required: tuple[bool, bool, bool] = (True, True, True)) -> ControlInput:
    """Validate an MGET of (longitudinal, lateral, angular, heartbeat). ``required``: per
    velocity key, whether a missing value is rejected (the key was seen before: it vanished)
    or reads 0 (never written)."""
    lon_k, lat_k, ang_k, hb_k = keys
    lon = parse_float(lon_k, raw[0], required[0])
    lat = parse_float(lat_k, raw[1], required[1])
    ang = parse_float(ang_k, raw[2], required[2])
    heartbeat = parse_bool(hb_k, raw[3])
    for key, value, limit, unit, param in (
            (lon_k, lon, envelope.max_longitudinal_m_s, "m/s", "max_longitudinal_m_s"),
            (lat_k, lat, envelope.max_lateral_m_s, "m/s", "max_lateral_m_s"),
            (ang_k, ang, envelope.max_angular_rad_s, "rad/s", "max_angular_rad_s")):
        if abs(value) > limit:
            raise InputRejectedError(
                f"{key} = {fmt_value(value, limit)} {unit} exceeds the envelope "
                f"+-{limit:.6g} {unit} (parameter {param}); command less or raise the limit")
    return ControlInput(twist_from_artof(lon, lat, ang, lateral_positive), heartbeat)
