"""A scripted joystick session: timed segments of stick and pedal deflections, sampled as the
arrays of ``sensor_msgs/Joy`` (for tests, demos and reproducible operator input).

Axes follow the default layout of config/teleop.yaml (left_x 0, left_y 1, right_x 3, right_y 4;
forward and left positive); with the ISO pattern, for example, ``right_y = -0.6`` raises the
boom and ``left_y = -0.6`` pulls the arm in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from excavator_kinematics.errors import InvalidInputError

DEFAULT_AXES = {"left_x": 0, "left_y": 1, "right_x": 3, "right_y": 4}
N_AXES = 6
N_BUTTONS = 8


@dataclass(frozen=True)
class Segment:
    """Hold these deflections (stick axis name -> -1..1) and buttons for ``seconds``."""

    seconds: float
    sticks: dict[str, float] = field(default_factory=dict)
    buttons: tuple[int, ...] = ()
    label: str = ""


@dataclass(frozen=True)
class JoyScript:
    segments: Sequence[Segment]
    axes_index: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_AXES))

    def __post_init__(self) -> None:
        for s in self.segments:
            if not s.seconds > 0.0:
                raise InvalidInputError(f"segment {s.label!r}: seconds {s.seconds:.6g} must be > 0")
            for name, v in s.sticks.items():
                if name not in self.axes_index:
                    raise InvalidInputError(f"segment {s.label!r}: unknown stick axis {name!r}; "
                                            f"expected one of {sorted(self.axes_index)}")
                if not -1.0 <= v <= 1.0:
                    raise InvalidInputError(f"segment {s.label!r}: {name} = {v:.6g} outside "
                                            "-1..1")

    @property
    def duration(self) -> float:
        return float(sum(s.seconds for s in self.segments))

    @property
    def segment_starts_s(self) -> list[float]:
        """When each segment begins [s from the start]."""
        starts, t = [], 0.0
        for s in self.segments:
            starts.append(t)
            t += s.seconds
        return starts

    def segment_at(self, t: float) -> Segment | None:
        """The segment active at ``t`` [s] from the start; None after the end."""
        end = 0.0
        for s in self.segments:
            end += s.seconds
            if t < end:
                return s
        return None

    def sample(self, t: float) -> tuple[list[float], list[int]]:
        """(axes, buttons) of the Joy message at ``t`` [s]; all neutral after the end."""
        axes = [0.0] * N_AXES
        buttons = [0] * N_BUTTONS
        s = self.segment_at(t)
        if s is not None:
            for name, v in s.sticks.items():
                axes[self.axes_index[name]] = float(v)
            for b in s.buttons:
                buttons[b] = 1
        return axes, buttons


def dig_script(pattern: str = "iso", dump: bool = False) -> JoyScript:
    """One dig pass from the simulator's initial pose, as an operator does it with two sticks:
    boom down into the ground, drag the arm in (boom up a little to keep the depth), curl the
    bucket full, lift; with ``dump``, also swing left 90 deg, dump and swing back. ``pattern``
    names which hand holds boom and arm. Segment labels are the phases (approach, dig, drag,
    curl, lift, swing, dump, return)."""
    boom, arm = ("right_y", "left_y") if pattern == "iso" else ("left_y", "right_y")
    segments = [
        Segment(0.5, {}, label="approach"),
        # timed for the default 8.2 t machine's rod speeds at full flow (docs/simulation.md):
        # boom 0.18 up / 0.19 m/s down, arm 0.23 in / 0.30 m/s out, bucket 0.19 curl / 0.30
        # m/s dump
        Segment(1.45, {boom: 0.7, "right_x": -0.25}, label="dig"),
        Segment(4.6, {arm: -0.6, boom: -0.3}, label="drag"),
        Segment(2.3, {"right_x": 0.9}, label="curl"),
        Segment(2.9, {boom: -0.8}, label="lift"),
    ]
    if dump:
        segments += [
            Segment(2.4, {"left_x": 0.8}, label="swing"),
            Segment(0.3, {}, label="swing"),
            Segment(2.0, {"right_x": -1.0, arm: 1.0}, label="dump"),
            Segment(2.4, {"left_x": -0.8}, label="return"),
        ]
    segments.append(Segment(0.5, {}, label="release"))
    return JoyScript(segments)
