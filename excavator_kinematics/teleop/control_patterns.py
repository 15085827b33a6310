"""Excavator control patterns: which stick axis moves which function, in which direction.

ISO 10968 (Earth-moving machinery - Operator's controls, Annex B: equipment movements; the same
pattern as SAE J1177), the "ISO" pattern:
left stick  left/right = swing left/right,   forward/back = arm (stick) out / in;
right stick left/right = bucket curl in / dump, forward/back = boom down / up.
The "SAE" (backhoe, SAE J1814) pattern swaps the hands of boom and arm:
left stick forward/back = boom down / up, right stick forward/back = arm out / in.

Directions here are in the project's joint convention (docs/kinematics.md): swing positive =
counter-clockwise seen from above (to the left, REP-103), boom positive = up, arm positive =
out (away from the cab), bucket positive = curl out (dump). Stick axes follow the ``joy``
driver: forward and left are positive. Hence e.g. ISO right stick forward (+) -> boom down (-).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from excavator_kinematics.errors import ConfigError

FUNCTIONS: tuple[str, str, str, str] = ("swing", "boom", "arm", "bucket")


@dataclass(frozen=True)
class Assignment:
    """One stick axis drives ``function``; ``sign`` maps positive deflection to the joint's
    positive (+1) or negative (-1) direction."""

    function: str
    sign: float


PATTERNS: dict[str, dict[str, Assignment]] = {
    "iso": {"left_x": Assignment("swing", +1.0), "left_y": Assignment("arm", +1.0),
            "right_x": Assignment("bucket", -1.0), "right_y": Assignment("boom", -1.0)},
    "sae": {"left_x": Assignment("swing", +1.0), "left_y": Assignment("boom", -1.0),
            "right_x": Assignment("bucket", -1.0), "right_y": Assignment("arm", +1.0)},
}
ALIASES = {"iso": "iso", "sae": "sae", "backhoe": "sae"}


def pattern(name: str) -> dict[str, Assignment]:
    """The assignment table of a pattern by name (``iso``, ``sae`` or its alias ``backhoe``)."""
    key = ALIASES.get(name.strip().lower())
    if key is None:
        raise ConfigError(f"control pattern {name!r} is unknown: set pattern to one of "
                          f"{sorted(ALIASES)}")
    return PATTERNS[key]


def function_demands(assignments: Mapping[str, Assignment],
                     sticks: Mapping[str, float]) -> dict[str, float]:
    """Shaped stick deflections -> demand per function in -1..1 (joint-positive direction)."""
    out = dict.fromkeys(FUNCTIONS, 0.0)
    for stick, a in assignments.items():
        out[a.function] = a.sign * float(sticks.get(stick, 0.0))
    return out


# Coordinated mode keeps the pattern's hands: the stick that raises the boom raises the tip,
# the arm's stick moves the tip out, the bucket's stick turns the bucket.
TASK_OF_FUNCTION = {"swing": "swing", "boom": "z", "arm": "r", "bucket": "alpha"}


def task_demands(assignments: Mapping[str, Assignment],
                 sticks: Mapping[str, float]) -> dict[str, float]:
    """Stick deflections -> {swing, r, z, alpha} demands in -1..1 (positive = swing left, tip
    out, tip up, bucket curl out)."""
    return {TASK_OF_FUNCTION[f]: d for f, d in function_demands(assignments, sticks).items()}
