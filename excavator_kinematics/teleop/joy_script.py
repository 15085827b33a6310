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


# Depth [m] of the teeth below the ground at the end of the dig segment: where the seed linkage's
# 1.45 s of boom-down (the script's timing before issue 30) put them.
DIG_DEPTH_M = 0.34
DRAG_S = 4.6  # the drag: the arm pulled in, the boom raised just enough to keep the depth


class _Kinematic:
    """The default machine moved by the teleop core's joint rates (the valves' flow limits,
    config/sim.yaml) on its kinematics, from the simulator's initial pose: what a stick held for
    a while does, without a simulation, so the script follows the machine's geometry."""

    def __init__(self, pattern: str) -> None:
        import numpy as np

        from excavator_common.parameter_files import read_parameter_file
        from excavator_common.paths import config_file
        from excavator_kinematics.errors import ConfigError
        from excavator_kinematics.forward_kinematics import ForwardKinematics
        from excavator_kinematics.geometry import default_geometry
        from excavator_kinematics.linkage import Linkage
        from excavator_kinematics.teleop.controller import TeleopCore, TeleopSettings
        from excavator_kinematics.teleop.valves import FlowLimits

        flat = read_parameter_file(config_file("sim.yaml"), "sim_node", error=ConfigError)
        self.q = np.array([float(flat[f"initial.{n}_rad"])
                           for n in ("swing", "boom", "arm", "bucket")])
        geometry = default_geometry()
        linkage = Linkage(geometry)
        self.fk = ForwardKinematics(geometry, linkage)
        self.core = TeleopCore(geometry, FlowLimits.from_file(), TeleopSettings(pattern=pattern),
                               linkage)

    def tip_z(self) -> float:
        return float(self.fk.tip(self.q)[2])

    def hold(self, sticks: dict[str, float], seconds: float = 10.0,
             until_z: float | None = None) -> float:
        """Hold ``sticks`` for ``seconds`` (or until the tip is down at ``until_z`` [m]);
        returns the time held [s]."""
        import numpy as np

        from excavator_kinematics.teleop.controller import MachineState

        axes = [0.0] * N_AXES
        for name, value in sticks.items():
            axes[DEFAULT_AXES[name]] = value
        dt, t = 0.01, 0.0
        while t < seconds - 1e-9 and (until_z is None or self.tip_z() > until_z):
            rate = self.core.stick_command(axes, MachineState(self.q, np.zeros(4))).valve
            self.q[1:] += dt * np.array([rate.joint_rate[n] for n in ("boom", "arm", "bucket")])
            t += dt
        return t


def dig_seconds(sticks: dict[str, float], pattern: str = "iso",
                depth_m: float = DIG_DEPTH_M) -> float:
    """Seconds of holding ``sticks`` from the simulator's initial pose until the teeth are
    ``depth_m`` [m] below the ground (:class:`_Kinematic`), rounded up to 0.05 s."""
    import math

    t = _Kinematic(pattern).hold(sticks, until_z=-depth_m)
    return math.ceil(t / 0.05 - 1e-9) * 0.05


def drag_boom(dig: dict[str, float], arm_stick: str, boom_stick: str, pattern: str = "iso",
              arm: float = -0.6, seconds: float = DRAG_S, depth_m: float = DIG_DEPTH_M) -> float:
    """The boom deflection (0..-0.8, raising) that, held with the arm pulled in for ``seconds``
    after the dig, keeps the teeth at ``depth_m`` at the end of the drag (bisection on the
    kinematics of :class:`_Kinematic`), rounded to 0.01."""
    dig_s = dig_seconds(dig, pattern, depth_m)
    lo, hi = -0.8, 0.0  # more raising (lo) ends higher
    for _ in range(12):
        mid = 0.5 * (lo + hi)
        k = _Kinematic(pattern)
        k.hold(dig, dig_s)
        k.hold({arm_stick: arm, boom_stick: mid}, seconds)
        if k.tip_z() > -depth_m:
            lo = mid
        else:
            hi = mid
    return round(0.5 * (lo + hi), 2)


def dig_script(pattern: str = "iso", dump: bool = False) -> JoyScript:
    """One dig pass from the simulator's initial pose, as an operator does it with two sticks:
    boom down into the ground, drag the arm in (boom up a little to keep the depth), curl the
    bucket full, lift; with ``dump``, also swing left 90 deg, dump and swing back. ``pattern``
    names which hand holds boom and arm. Segment labels are the phases (approach, dig, drag,
    curl, lift, swing, dump, return)."""
    boom, arm = ("right_y", "left_y") if pattern == "iso" else ("left_y", "right_y")
    dig = {boom: 0.7, "right_x": -0.25}
    segments = [
        Segment(0.5, {}, label="approach"),
        # the boom goes down until the teeth are DIG_DEPTH_M in the ground: timed from the
        # default machine's geometry and flows (dig_seconds); the rest was timed for the 8.2 t
        # machine's rod speeds on the seed linkage (docs/simulation.md)
        Segment(dig_seconds(dig, pattern), dig, label="dig"),
        Segment(DRAG_S, {arm: -0.6, boom: drag_boom(dig, arm, boom, pattern)}, label="drag"),
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
