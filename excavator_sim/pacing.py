"""Real-time pacing and soil-wrench freshness for sim_node (pure Python: no ROS, no MuJoCo).

- :class:`Pacer` holds a real-time factor against the wall clock with absolute deadlines: the
  simulation may start the publish period that begins at simulated time ``t`` once the wall
  clock reaches ``W(t) = wall0 + (t - sim0) / rtf``. A late wake-up is caught up by stepping
  several periods at once (never by stretching time); a deficit beyond ``max_behind_s`` is
  given up (the schedule *slips*, counted), because a simulation that races to catch up seconds
  is no more truthful than one that admits it is late. ``lag`` is how far the simulation is
  behind the wall clock [s of wall time]; negative is ahead (by at most one period).
- :class:`WrenchGate` decides whether the latest soil wrench may act during a period: only
  while it is *fresh*, i.e. its age at the end of the period (simulated time minus the stamp of
  the pose it answers) is at most ``max_age_s``. A stale wrench is replaced by **no soil force**
  (not held): a held cutting force would keep pushing a bucket that has since moved, possibly
  out of the ground, with a force no soil produces, for as long as the soil model stays late or
  dead; a missing force for a few periods is a bounded error the hydraulic position loop rides
  through, and the soil model's next answer (for the newest pose) restores it.
- :class:`Window` keeps recent samples for p50 / p99 / max.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np


class Window:
    """The last ``size`` samples, and the largest sample ever seen."""

    def __init__(self, size: int = 2000) -> None:
        self._samples: deque[float] = deque(maxlen=size)
        self.count = 0
        self.max_ever = -math.inf

    def add(self, value: float) -> None:
        self._samples.append(value)
        self.count += 1
        self.max_ever = max(self.max_ever, value)

    def extend(self, values: Iterable[float]) -> None:
        for v in values:
            self.add(v)

    def percentiles(self) -> tuple[float, float, float]:
        """(p50, p99, max) of the window; NaN when empty."""
        if not self._samples:
            return (math.nan, math.nan, math.nan)
        a = np.fromiter(self._samples, dtype=float)
        p50, p99 = np.percentile(a, [50.0, 99.0])
        return (float(p50), float(p99), float(a.max()))


@dataclass
class Pacer:
    """Absolute-deadline schedule of publish periods against a wall clock [s]."""

    period_s: float  # simulated time of one publish period [s]
    real_time_factor: float  # > 0
    max_behind_s: float = 0.5  # wall seconds of deficit caught up at most; beyond: slip
    wall0: float = math.nan
    sim0: float = 0.0
    slipped_s: float = 0.0  # wall time given up in total [s]
    slips: int = 0

    def __post_init__(self) -> None:
        if not self.period_s > 0.0:
            raise ValueError(f"period_s = {self.period_s} must be > 0 s")
        if not self.real_time_factor > 0.0:
            raise ValueError(f"real_time_factor = {self.real_time_factor} must be > 0 "
                             "(0 = free run needs no pacer)")

    @property
    def started(self) -> bool:
        return not math.isnan(self.wall0)

    def start(self, wall: float, sim_time: float) -> None:
        self.wall0, self.sim0 = wall, sim_time

    def target(self, wall: float) -> float:
        """Simulated time the schedule calls for at ``wall`` [s]."""
        return self.sim0 + self.real_time_factor * (wall - self.wall0)

    def lag(self, wall: float, sim_time: float) -> float:
        """How far ``sim_time`` is behind the schedule at ``wall``, in wall seconds (< 0:
        ahead)."""
        return (self.target(wall) - sim_time) / self.real_time_factor

    def due(self, wall: float, sim_time: float) -> int:
        """Periods that may be stepped now: those starting at or before ``target(wall)``.
        Starts the schedule on the first call. Slips (and counts) a deficit beyond
        ``max_behind_s``, so that at most that much is caught up."""
        if not self.started:
            self.start(wall, sim_time)
        behind = self.lag(wall, sim_time)
        if behind > self.max_behind_s:
            give_up = behind - self.max_behind_s
            self.wall0 += give_up
            self.slipped_s += give_up
            self.slips += 1
        ahead = self.target(wall) - sim_time  # [s of sim time]
        if ahead < -1e-9:
            return 0
        return math.floor(ahead / self.period_s + 1e-9) + 1

    def next_deadline(self, sim_time: float) -> float:
        """Wall time at which the period starting at ``sim_time`` is due [s]."""
        return self.wall0 + (sim_time - self.sim0) / self.real_time_factor


@dataclass
class WrenchGate:
    """The latest soil wrench and whether it may act (see the module docstring)."""

    max_age_s: float = 0.02  # <= 0: no check, the latest wrench acts until replaced
    stamp_s: float | None = None
    force: np.ndarray = field(default_factory=lambda: np.zeros(3))
    torque: np.ndarray = field(default_factory=lambda: np.zeros(3))
    arrival_age: Window = field(default_factory=Window)
    received: int = 0
    out_of_order: int = 0  # older than the wrench held: dropped
    stale_on_arrival: int = 0  # already too old when it arrived
    applied_periods: int = 0  # periods in which a fresh wrench acted
    stale_periods: int = 0  # periods with a wrench too old to act: the soil was left out
    _applied: bool = False

    def offer(self, stamp_s: float, force: np.ndarray, torque: np.ndarray,
              sim_time: float) -> float:
        """A wrench for the pose stamped ``stamp_s`` arrived at ``sim_time``; returns its age
        on arrival [s of sim time]."""
        age = sim_time - stamp_s
        self.received += 1
        self.arrival_age.add(age)
        if self.max_age_s > 0.0 and age > self.max_age_s:
            self.stale_on_arrival += 1
        if self.stamp_s is not None and stamp_s < self.stamp_s:
            self.out_of_order += 1
            return age
        self.stamp_s = stamp_s
        self.force = np.asarray(force, dtype=float).reshape(3)
        self.torque = np.asarray(torque, dtype=float).reshape(3)
        return age

    def fresh(self, period_end_s: float) -> bool:
        """Whether the held wrench may act until ``period_end_s`` [s of sim time]."""
        if self.stamp_s is None:
            return False
        if self.max_age_s <= 0.0:
            return True
        age = period_end_s - self.stamp_s
        return 0.0 <= age <= self.max_age_s + 1e-9

    def for_period(self, period_end_s: float) -> tuple[np.ndarray, np.ndarray] | None:
        """The wrench to apply for a period ending at ``period_end_s``: the held one while
        fresh, zeros once it went stale (soil absent), ``None`` when nothing changes (no wrench
        ever, or still absent)."""
        if self.fresh(period_end_s):
            self.applied_periods += 1
            self._applied = True
            return self.force, self.torque
        if self.stamp_s is None:
            return None
        self.stale_periods += 1
        if self._applied:
            self._applied = False
            return np.zeros(3), np.zeros(3)
        return None

    @property
    def acting(self) -> bool:
        """Whether a soil wrench acts in the period last asked about."""
        return self._applied
