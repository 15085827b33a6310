"""Simulated time at a wall-clock moment, from the ``/clock`` samples seen: the value of the
latest ``/clock`` at or before it (what a ``use_sim_time`` node clock showed then).

The wall times are DDS's: a sample's ``received_timestamp`` or ``source_timestamp`` [ns], so that
what a busy process takes late is still placed when it came (or was sent), not when it was
taken. Two users: the bag recorder stamps each message at its receipt (``--use-sim-time``;
messages received before any ``/clock`` get the first one, so a bag never mixes a wall-clock
stamp into simulation time), and the demo's operator places each ``soil/bucket_load`` (a
Float64, no header) at the simulated time it was sent.
"""

from __future__ import annotations

import bisect


class SimClockMap:
    """The ``/clock`` samples (wall time [ns], simulated time [ns]) seen, and the simulated
    time at a wall time."""

    def __init__(self) -> None:
        self._wall_ns: list[int] = []
        self._sim_ns: list[int] = []

    def add(self, wall_ns: int, sim_ns: int) -> None:
        """One ``/clock`` message. Samples may come out of order (a batch of takes): they are
        kept sorted by wall time."""
        if not self._wall_ns or wall_ns >= self._wall_ns[-1]:
            self._wall_ns.append(wall_ns)
            self._sim_ns.append(sim_ns)
            return
        i = bisect.bisect_right(self._wall_ns, wall_ns)
        self._wall_ns.insert(i, wall_ns)
        self._sim_ns.insert(i, sim_ns)

    @property
    def started(self) -> bool:
        """A ``/clock`` has been seen."""
        return bool(self._wall_ns)

    def at(self, wall_ns: int) -> int:
        """Simulated time [ns] of the latest ``/clock`` at or before ``wall_ns`` (the first
        one for a moment before any). Call only once :attr:`started`."""
        if not self._wall_ns:
            raise LookupError("no /clock received yet")
        i = bisect.bisect_right(self._wall_ns, wall_ns)
        return self._sim_ns[max(i - 1, 0)]

    def forget_before(self, wall_ns: int) -> None:
        """Drop the samples no moment at or after ``wall_ns`` needs (all but the latest one at
        or before it): the map stays short over a long run."""
        i = bisect.bisect_right(self._wall_ns, wall_ns) - 1
        if i > 0:
            del self._wall_ns[:i]
            del self._sim_ns[:i]

    def __len__(self) -> int:
        return len(self._wall_ns)
