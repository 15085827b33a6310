"""Commands applied at their stamp in simulated time (no ROS; the core of sim_node's schedule).

A command stamped ahead of the simulated time is held in a small time-ordered buffer and
handed out when the simulation reaches its stamp, at the first publish-period boundary at or
after it (the resolution is one period, 10 ms with config/sim.yaml: the outer control loop
runs on that grid, so applying there keeps its phase). What the machine does then depends only
on the stamps, not on when the messages arrived: a recorded session replays to the same motion
(docs/teleoperation.md, "Replay").

A command whose stamp is already past on arrival (late, or simply stamped when it was sent, as
ik_node does) is handed out at once: the behaviour without a schedule. Such commands are
counted, with how late they were, so a run can tell whether any command missed its stamp.
A stamp further ahead than ``max_lead_s`` is not held (:class:`StampTooFarAheadError`): it is almost
always a wall-clock stamp sent into a node that runs in simulated time, and holding it would
freeze the machine; sim_node applies such a command on arrival and says so.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from excavator_sim.errors import CommandError

T = TypeVar("T")

# A stamp within this much of a period boundary counts as on it [s] (float stamps of the grid).
_EPS_S = 1e-9


class StampTooFarAheadError(CommandError):
    """A command stamped beyond the schedule's reach (``max_lead_s``)."""


@dataclass
class CommandSchedule(Generic[T]):
    """Time-ordered buffer of commands (any payload), released when the simulated time reaches
    their stamp [s]. Commands with equal stamps come out in arrival order."""

    max_lead_s: float = 1.0
    _heap: list[tuple[float, int, T]] = field(default_factory=list)
    _seq: itertools.count[int] = field(default_factory=itertools.count)
    held: int = 0           # commands that waited for their stamp
    past_stamp: int = 0     # commands whose stamp was already past on arrival (applied at once)
    max_late_s: float = 0.0  # largest (sim time - stamp) on arrival among those [s]

    def offer(self, stamp_s: float, payload: T, now_s: float) -> bool:
        """Take a command stamped ``stamp_s`` arriving at simulated time ``now_s`` [s]. True: it
        is held for its stamp; False: apply it now (stamp reached or past). Raises
        :class:`StampTooFarAheadError` for a stamp more than ``max_lead_s`` ahead."""
        ahead = stamp_s - now_s
        if ahead > self.max_lead_s:
            raise StampTooFarAheadError(
                f"command stamped {stamp_s:.6g} s is {ahead:.6g} s ahead of the simulated time "
                f"{now_s:.6g} s, beyond max_command_lead_s = {self.max_lead_s:g} s: stamp "
                "commands with the simulation's clock (use_sim_time:=true), or 0 to apply them "
                "on arrival")
        if ahead <= _EPS_S:
            self.past_stamp += 1
            self.max_late_s = max(self.max_late_s, -ahead)
            return False
        heapq.heappush(self._heap, (stamp_s, next(self._seq), payload))
        self.held += 1
        return True

    def due(self, now_s: float) -> list[T]:
        """The held commands whose stamp is at or before ``now_s`` [s], in stamp order."""
        out = []
        while self._heap and self._heap[0][0] <= now_s + _EPS_S:
            out.append(heapq.heappop(self._heap)[2])
        return out

    @property
    def pending(self) -> int:
        return len(self._heap)

    def clear(self) -> None:
        self._heap.clear()
