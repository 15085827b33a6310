"""How much model time a control callback stands for (no ROS; the impedance controller's clock).

A periodic control loop that advances its model by one nominal period per callback loses model
time whenever a callback is late or skipped (a loaded host, a stalled executor): the dynamics
stretch and the operator's force feedback slows down. :class:`ControlTicks` turns the time of
each callback into the time to integrate instead: the number of control periods since the
previous callback, so the model keeps pace with the clock, and counts the periods no callback
came for (missed ticks).

The time is counted in whole periods on the grid of the first callback: a callback up to half
a period early or late still stands for its own tick (timer jitter does not stretch a step),
and the model time never drifts from the clock by more than half a period. Fed the grid times
of an rcl timer (teleop_node passes each callback's tick: rcl fires at or after each grid point
and skips those already passed), the missed count is exact.

Bounded: one callback integrates at most ``max_step_s``; after a longer stall (the process was
stopped, the host froze) the rest is given up and counted, so a stall does not become one huge
step of the model. The impedance model (:class:`~.impedance.ImpedanceModel`) is discretised
exactly for inputs held over a step (matrix exponential), so any step is stable and needs no
substeps; only the inputs' sampling is coarser over a long one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from excavator_kinematics.errors import ConfigError


@dataclass
class ControlTicks:
    """Callback times [s, any monotonic clock: wall or simulated] -> time to integrate [s].

    ``period_s``: the control period; ``max_step_s``: the most one callback integrates (at
    least one period)."""

    period_s: float
    max_step_s: float
    callbacks: int = 0     # callbacks seen
    missed: int = 0        # control periods no callback came for
    capped: int = 0        # callbacks whose gap exceeded max_step_s
    dropped_s: float = 0.0  # model time given up to the cap [s]
    _first_s: float | None = None  # the grid's origin: the first callback [s]
    _tick: int = 0                 # the latest tick integrated (periods since the origin)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.period_s) and self.period_s > 0.0):
            raise ConfigError(f"control period {self.period_s:.6g} s must be > 0: set "
                              "control_rate_hz")
        if not (math.isfinite(self.max_step_s) and self.max_step_s >= self.period_s):
            raise ConfigError(f"impedance.max_step_s = {self.max_step_s:.6g} s must be at least "
                              f"one control period ({self.period_s:.6g} s = 1 / control_rate_hz)")

    @property
    def max_ticks(self) -> int:
        """Periods one callback integrates at most."""
        return max(1, math.floor(self.max_step_s / self.period_s + 1e-9))

    def restart(self) -> None:
        """Forget the previous callback (the model was reset): the next one starts a grid."""
        self._first_s = None

    def advance(self, now_s: float) -> float:
        """The time [s] to integrate for a callback at ``now_s`` [s]: whole periods since the
        previous callback, at most ``max_step_s``; one period for the first (or after
        :meth:`restart`, or when the clock went back: a new simulation); 0 for a second
        callback within the same tick."""
        self.callbacks += 1
        if (self._first_s is None or not math.isfinite(now_s)
                or now_s < self._first_s + (self._tick - 0.5) * self.period_s):
            self._first_s, self._tick = now_s, 0
            return self.period_s
        tick = round((now_s - self._first_s) / self.period_s)
        n = tick - self._tick
        if n <= 0:
            return 0.0
        self._tick = tick
        self.missed += n - 1
        if n > self.max_ticks:
            self.capped += 1
            self.dropped_s += (n - self.max_ticks) * self.period_s
            n = self.max_ticks
        return n * self.period_s

    def counters(self) -> dict[str, str | int]:
        """For /diagnostics."""
        return {"impedance_callbacks": self.callbacks, "impedance_missed_ticks": self.missed,
                "impedance_steps_capped": self.capped,
                "impedance_time_dropped_s": f"{self.dropped_s:.3f}"}
