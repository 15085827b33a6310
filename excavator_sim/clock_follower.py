"""One simulated clock for a fleet: a sim_node that follows another's ``/clock`` (pure Python).

In a fleet (``launch/fleet.launch.py``) machine 0's sim_node owns ``/clock`` and paces itself by
the wall clock; every other machine's sim_node runs with ``follow_clock`` and steps its own
MuJoCo model *to the owner's time*: on each ``/clock`` message it steps the whole publish periods
that are due, so its joint_states, bucket poses, twists and markers carry the owner's time
stamps. Why one owner and followers rather than one process stepping every machine: each machine
costs about a third of a core (docs/benchmarks.md), one Python process is one core, and the
followers can run on other hosts; the price is that machines do not touch each other physically
(they stand ``spacing`` apart).

:meth:`ClockFollower.plan` decides, for the simulation's time and the clock just received:
- the first clock aligns the simulation's time to it (the follower started later than the
  owner; its own start-up time is not the fleet's);
- then the whole periods due are stepped, at most ``max_catch_up_s`` worth; a larger deficit
  (the follower was starved of CPU) is given up by jumping forward (counted in ``slipped_s``),
  so the stamps stay on the owner's time instead of racing behind it;
- a clock that went back by more than ``max_catch_up_s`` (the owner restarted) re-aligns
  (counted in ``jumps_back``); a smaller step back waits for the clock to catch up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

_EPS = 1e-6  # fraction of a period: rounding of the two simulations' accumulated time


@dataclass(frozen=True)
class FollowStep:
    set_time_s: float | None  # set the simulation's time to this first [s]; None = leave it
    periods: int  # then step this many publish periods


@dataclass
class ClockFollower:
    period_s: float  # one publish period of the follower [s of simulated time]
    max_catch_up_s: float  # stepped at most per clock message; beyond: slip [s]
    aligned: bool = False
    slipped_s: float = 0.0  # simulated time jumped over instead of stepped [s]
    jumps_back: int = 0  # times the clock went back and the follower re-aligned
    last_clock_s: float = math.nan  # the latest clock received [s]

    def plan(self, sim_s: float, clock_s: float) -> FollowStep:
        """What to do with the simulation at ``sim_s`` [s] on receiving ``clock_s`` [s]."""
        self.last_clock_s = clock_s
        if not self.aligned:
            self.aligned = True
            return FollowStep(clock_s, 0)
        behind = clock_s - sim_s
        if behind < -self.max_catch_up_s:
            self.jumps_back += 1
            return FollowStep(clock_s, 0)
        due = math.floor(behind / self.period_s + _EPS)
        if due <= 0:
            return FollowStep(None, 0)
        most = max(1, math.floor(self.max_catch_up_s / self.period_s + _EPS))
        if due <= most:
            return FollowStep(None, due)
        skipped = (due - most) * self.period_s
        self.slipped_s += skipped
        return FollowStep(sim_s + skipped, most)
