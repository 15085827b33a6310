"""The PLC's actuation of the drive train: checked, held while fresh, fail-safe otherwise.

``plant/actuation`` (sensor_msgs/JointState; the contract of issue 27, docs/simulation.md)
carries per drive joint the torque set-point in ``effort`` [N m at the sprocket] and two
pseudo-joints in ``position`` (1.0 on, 0.0 off): ``drive_enable`` and ``brake``; optionally
a third, ``plant_out_seq``: the seq of the PLC's ``plant_out`` block it carries, NaN when the
plant link brakes on its own (the link lost, a block refused), not the PLC. This module works
on the message's arrays (no ROS):

- :func:`parse_actuation` checks one message: every required name present once, no unknown
  name, arrays of the names' length, finite torques within :data:`TORQUE_RANGE_FACTOR` x the
  drive's torque limit (beyond: a scaling or offset error, not a set-point; up to it the relief
  valve clips as on the machine), flags exactly 0.0 or 1.0. A bad message raises
  :class:`ActuationError` naming the value, the limit and the fix.
- :func:`check_names` and :func:`read_flags` are the checks every machine's actuation takes
  (the arrays' lengths, the names, the two flags), parameterised by the machine's joint names;
  :func:`~excavator_sim.drivetrain.wheeled_io.parse_wheeled_actuation` uses them too.
- :func:`read_seq` says whom an actuation comes from: the PLC (its seq, or no
  ``plant_out_seq`` at all: another publisher) or the plant link's own brake.
- :class:`ActuationFreshness` keeps the latest *valid* actuation of either machine
  (:class:`PlantActuation` for the tracks' :class:`DriveCommand`,
  :class:`~excavator_sim.drivetrain.wheeled_io.WheeledPlantActuation` for the wheels') and
  answers, for a simulated time, the command that acts: the safe command (torque 0, drives
  disabled, brakes applied) before the first one, after ``timeout_s`` of simulated time
  without a new one, and after a bad one (a **drive fault**, latched until a valid actuation
  from the PLC arrives: the last valid actuation is not reused, and the plant link's own brake
  on a lost link does not clear the fault the PLC caused).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from excavator_sim.drivetrain.vehicle import SAFE_COMMAND, DriveCommand
from excavator_sim.errors import CommandError

DRIVE_JOINTS = ("track_left", "track_right")
FLAG_JOINTS = ("drive_enable", "brake")
SEQ_JOINT = "plant_out_seq"   # optional pseudo-joint: the plant_out seq, NaN = the link's brake
DINT_SPAN = 2**31
# Set-points up to this many torque limits are clipped at the limit (relief valve); beyond, the
# actuation is refused (a wrong unit or scale in the PLC program).
TORQUE_RANGE_FACTOR = 2.0


Command = TypeVar("Command")


class ActuationError(CommandError):
    """A plant actuation that cannot act: the drives are braked (drive fault)."""


def check_names(names: Sequence[str], position: Sequence[float], velocity: Sequence[float],
                effort: Sequence[float], required: Sequence[str], machine: str
                ) -> dict[str, int]:
    """Checks a ``plant/actuation`` message's arrays against the machine's ``required`` joint
    names (each once, nothing else but the optional :data:`SEQ_JOINT`, every array one entry per
    name); returns each name's index.

    Args:
        names, position, velocity, effort: the message's arrays.
        required: the joint names the machine takes, flags included.
        machine: who takes them, in the unknown-name error ("a tracked machine", "it").

    Raises:
        ActuationError: naming what is wrong and the fix.
    """
    names = list(names)
    n = len(names)
    for label, arr in (("position", position), ("velocity", velocity), ("effort", effort)):
        if len(arr) != n:
            raise ActuationError(f"plant/actuation has {n} names but {len(arr)} {label} values: "
                                 f"send {label} with one entry per name (NaN where it does not "
                                 "apply)")
    unknown = sorted(set(names) - set(required) - {SEQ_JOINT})
    if unknown:
        raise ActuationError(f"plant/actuation names {unknown} this machine does not have: "
                             f"{machine} takes {list(required)} (is the PLC's plant "
                             "configured for another vehicle model?)")
    missing = [name for name in required if name not in names]
    twice = sorted({name for name in names if names.count(name) > 1})
    if missing or twice:
        raise ActuationError(f"plant/actuation must name each of {list(required)} once "
                             f"({SEQ_JOINT} at most once): missing {missing}, repeated {twice}")
    return {name: k for k, name in enumerate(names)}


def read_seq(names: Sequence[str], position: Sequence[float]) -> tuple[bool, int | None]:
    """Whom an actuation comes from, by its ``plant_out_seq``: ``(from_plc, seq)``. The PLC's
    block: ``(True, seq)`` (a DINT, as the PLC program counts it); NaN, the plant link braking
    on its own (the link lost, a block refused): ``(False, None)``; no ``plant_out_seq`` (another
    publisher, taken as the PLC's) or no position for it (:func:`check_names` names that):
    ``(True, None)``. Anything else raises :class:`ActuationError`."""
    names = list(names)
    k = names.index(SEQ_JOINT) if SEQ_JOINT in names else len(position)
    if k >= len(position):
        return True, None
    value = float(position[k])
    if math.isnan(value):
        return False, None
    if not (math.isfinite(value) and value == int(value) and -DINT_SPAN <= value < DINT_SPAN):
        raise ActuationError(f"plant/actuation {SEQ_JOINT} position is {value}: send the "
                             f"plant_out block's seq (a DINT, {-DINT_SPAN} .. {DINT_SPAN - 1}) "
                             "or NaN for a brake that does not come from the PLC")
    return True, int(value)


def read_flags(position: Sequence[float], index: dict[str, int]) -> tuple[bool, bool]:
    """``(drive_enable, brake)`` from the pseudo-joints' positions (exactly 1.0 on, 0.0 off),
    or :class:`ActuationError`."""
    flags = []
    for name in FLAG_JOINTS:
        value = float(position[index[name]])
        if value not in (0.0, 1.0):
            raise ActuationError(f"plant/actuation {name} position is {value}: send 1.0 (on) "
                                 "or 0.0 (off)")
        flags.append(value == 1.0)
    return flags[0], flags[1]


def parse_actuation(names: Sequence[str], position: Sequence[float],
                    velocity: Sequence[float], effort: Sequence[float],
                    torque_limit_nm: float) -> DriveCommand:
    """The drive command of one ``plant/actuation`` message (its name/position/velocity/effort
    arrays), or :class:`ActuationError`."""
    required = (*DRIVE_JOINTS, *FLAG_JOINTS)
    index = check_names(names, position, velocity, effort, required, "a tracked machine")
    limit = TORQUE_RANGE_FACTOR * torque_limit_nm
    torques = []
    for name in DRIVE_JOINTS:
        value = float(effort[index[name]])
        if not math.isfinite(value):
            raise ActuationError(f"plant/actuation {name} effort (torque set-point) is {value}: "
                                 "send a finite torque [N m at the sprocket]")
        if abs(value) > limit:
            raise ActuationError(f"plant/actuation {name} torque set-point {value:.6g} N m is "
                                 f"beyond {limit:.6g} N m ({TORQUE_RANGE_FACTOR:g} x the drive's "
                                 f"torque limit {torque_limit_nm:.6g} N m): check the PLC's "
                                 "scaling (N m at the sprocket) and clamp at the limit")
        torques.append(value)
    enable, brake = read_flags(position, index)
    return DriveCommand(torques[0], torques[1], enable=enable, brake=brake)


@dataclass
class ActuationFreshness(Generic[Command]):
    """Freshness and faults of the PLC's actuation, in simulated time [s], for a machine whose
    commands are ``Command`` and whose safe command (torque 0, drives disabled, brakes
    applied) is ``safe``."""

    timeout_s: float            # older than this -> safe command; 0 = hold until replaced
    safe: Command
    latest: Command | None = None
    last_s: float = math.nan    # simulated time the latest valid actuation arrived
    fault: str = ""             # the drive fault (a bad actuation), "" when none
    received: int = 0           # valid actuations
    rejected: int = 0           # bad actuations (drive faults)
    timeouts: int = 0           # times the latest actuation went stale
    timed_out: bool = False
    age_at_timeout_s: float = math.nan   # the latest actuation's age when it went stale [s]

    def accept(self, command: Command, now_s: float, from_plc: bool = True) -> None:
        """A valid actuation arrived at simulated time ``now_s``: it acts, and a fault clears
        when it comes ``from_plc`` (not the plant link's own brake on a lost link: the PLC has
        not answered its fault yet)."""
        self.latest = command
        self.last_s = now_s
        if from_plc:
            self.fault = ""
        self.timed_out = False
        self.received += 1

    def reject(self, reason: str) -> None:
        """A bad actuation arrived: drive fault; the last valid one is dropped, not reused."""
        self.latest = None
        self.fault = reason
        self.rejected += 1

    def age_s(self, now_s: float) -> float:
        """Simulated time since the latest valid actuation [s]; NaN before the first."""
        return now_s - self.last_s

    def check(self, now_s: float) -> bool:
        """Mark the actuation stale when older than the timeout; True exactly once per
        silence (the caller reports it)."""
        if (self.latest is None or self.timed_out or self.timeout_s <= 0.0
                or not now_s - self.last_s > self.timeout_s):
            return False
        self.timed_out = True
        self.timeouts += 1
        self.age_at_timeout_s = now_s - self.last_s
        return True

    def command(self) -> Command:
        """The command that acts now (after :meth:`check`)."""
        if self.latest is None or self.timed_out:
            return self.safe
        return self.latest


@dataclass
class PlantActuation(ActuationFreshness[DriveCommand]):
    """The tracked machine's :class:`ActuationFreshness` (safe command: ``SAFE_COMMAND``)."""

    safe: DriveCommand = SAFE_COMMAND
