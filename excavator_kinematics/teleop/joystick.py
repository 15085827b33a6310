"""Stick deflection shaping (dead band, expo) and reading sticks, pedals and buttons from the
arrays of a ``sensor_msgs/Joy`` message.

Convention of the ``joy`` driver (and of teleop_twist_joy): a stick pushed forward or to the left
gives a positive axis value in -1..1. A device that reports the other way is fixed with
``JoyLayout.invert``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from excavator_kinematics.errors import ConfigError, InvalidInputError

STICK_AXES: tuple[str, str, str, str] = ("left_x", "left_y", "right_x", "right_y")


@dataclass(frozen=True)
class Shaping:
    """Dead band [-] (fraction of full deflection ignored around the centre) and expo [-] (0 =
    linear, 1 = cubic): ``y = (1 - expo) u + expo u^3`` of the deflection ``u`` past the dead
    band, rescaled to 0..1 so the output is continuous and reaches 1 at full deflection."""

    dead_band: float = 0.1
    expo: float = 0.3

    def __post_init__(self) -> None:
        if not 0.0 <= self.dead_band < 1.0 or not math.isfinite(self.dead_band):
            raise ConfigError(f"dead band {self.dead_band:.6g} outside 0 <= dead_band < 1: "
                              "set shaping.dead_band to a fraction of full deflection")
        if not 0.0 <= self.expo <= 1.0:
            raise ConfigError(f"expo {self.expo:.6g} outside 0..1 (0 linear, 1 cubic): set "
                              "shaping.expo")

    def __call__(self, x: float) -> float:
        """Shaped command in -1..1 for a raw deflection ``x`` (clipped to -1..1)."""
        x = float(x)
        if not math.isfinite(x):
            raise InvalidInputError(f"joystick axis value {x}: axes must be finite numbers")
        a = min(abs(x), 1.0)
        if a <= self.dead_band:
            return 0.0
        u = (a - self.dead_band) / (1.0 - self.dead_band)
        return math.copysign((1.0 - self.expo) * u + self.expo * u ** 3, x)


@dataclass(frozen=True)
class JoyLayout:
    """Where the two sticks are in ``Joy.axes`` (index per stick axis) and which are inverted."""

    left_x: int = 0
    left_y: int = 1
    right_x: int = 3
    right_y: int = 4
    invert: tuple[bool, bool, bool, bool] = (False, False, False, False)

    def __post_init__(self) -> None:
        for name in STICK_AXES:
            if getattr(self, name) < 0:
                raise ConfigError(f"axes.{name} = {getattr(self, name)}: a stick axis index must"
                                  " be >= 0 (the index in sensor_msgs/Joy.axes)")
        if len(self.invert) != 4:
            raise ConfigError(f"axes.invert has {len(self.invert)} entries: give 4 booleans "
                              f"for {list(STICK_AXES)}")

    def sticks(self, axes: Sequence[float], shaping: Shaping) -> dict[str, float]:
        """Shaped deflections {left_x, left_y, right_x, right_y} in -1..1."""
        out = {}
        for k, name in enumerate(STICK_AXES):
            index = getattr(self, name)
            value = shaping(axis(axes, index, f"axes.{name}"))
            out[name] = -value if self.invert[k] else value
        return out


def axis(axes: Sequence[float], index: int, what: str) -> float:
    """``axes[index]``, with a clear error when the device has fewer axes."""
    if index >= len(axes):
        raise InvalidInputError(f"{what} is axis {index} but the Joy message has {len(axes)} "
                                "axes: set the axis index of your controller in "
                                "config/teleop.yaml")
    return float(axes[index])


def button(buttons: Sequence[int], index: int, what: str) -> bool:
    """Whether button ``index`` is pressed; index -1 means 'not used' (False)."""
    if index < 0:
        return False
    if index >= len(buttons):
        raise InvalidInputError(f"{what} is button {index} but the Joy message has "
                                f"{len(buttons)} buttons: set the button index of your "
                                "controller in config/teleop.yaml")
    return bool(buttons[index])


@dataclass(frozen=True)
class TravelLayout:
    """Travel input: one axis per track (pedals or levers; forward positive, -1..1) and/or
    buttons (each drives its track at ``button_fraction`` of full speed). Index -1 = unused."""

    left_axis: int = 0
    right_axis: int = 1
    left_forward_button: int = -1
    left_reverse_button: int = -1
    right_forward_button: int = -1
    right_reverse_button: int = -1
    button_fraction: float = 0.5

    def demands(self, axes: Sequence[float], buttons: Sequence[int],
                shaping: Shaping) -> tuple[float, float]:
        """(left, right) track demand in -1..1, forward positive."""
        out = []
        for side in ("left", "right"):
            index = getattr(self, f"{side}_axis")
            d = shaping(axis(axes, index, f"travel.{side}_axis")) if index >= 0 else 0.0
            fwd = button(buttons, getattr(self, f"{side}_forward_button"),
                         f"travel.{side}_forward_button")
            rev = button(buttons, getattr(self, f"{side}_reverse_button"),
                         f"travel.{side}_reverse_button")
            d += self.button_fraction * (float(fwd) - float(rev))
            out.append(min(max(d, -1.0), 1.0))
        return out[0], out[1]
