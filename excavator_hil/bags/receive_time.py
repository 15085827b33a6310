"""A recorded message's bag timestamp: its receive time, taken from DDS, not from the recorder.

Each message carries the time DDS received it (rmw's ``received_timestamp``, wall clock [ns]),
which rosbag2's recorder also stores. Stamping with the recorder's own clock at the moment it
takes the message (what a callback's ``now()`` gives) would move every stamp by however late a
niced recorder on a busy host gets to it. With ``--use-sim-time`` the receive time is put in
simulated time: the ``/clock`` value latest received at or before it (the value a ``use_sim_time``
node clock would have shown at that moment). Messages received before any ``/clock`` get the
first one, so the bag never mixes a wall-clock stamp into simulation time.
"""

from __future__ import annotations

import bisect


class SimTimeAtReceipt:
    """The ``/clock`` samples (DDS receive time [ns wall], simulated time [ns]) seen, and the
    simulated time at a receive time."""

    def __init__(self) -> None:
        self._received_ns: list[int] = []
        self._sim_ns: list[int] = []

    def add(self, received_ns: int, sim_ns: int) -> None:
        """One ``/clock`` message. Samples may come out of receive order (a batch of takes):
        they are kept sorted by receive time."""
        if not self._received_ns or received_ns >= self._received_ns[-1]:
            self._received_ns.append(received_ns)
            self._sim_ns.append(sim_ns)
            return
        i = bisect.bisect_right(self._received_ns, received_ns)
        self._received_ns.insert(i, received_ns)
        self._sim_ns.insert(i, sim_ns)

    @property
    def started(self) -> bool:
        """A ``/clock`` has been received."""
        return bool(self._received_ns)

    def at(self, received_ns: int) -> int:
        """Simulated time [ns] of the latest ``/clock`` received at or before ``received_ns``
        (the first one for a message received before any). Call only once :attr:`started`."""
        if not self._received_ns:
            raise LookupError("no /clock received yet")
        i = bisect.bisect_right(self._received_ns, received_ns)
        return self._sim_ns[max(i - 1, 0)]

    def forget_before(self, received_ns: int) -> None:
        """Drop the samples no message received at or after ``received_ns`` needs (all but the
        latest one at or before it): the map stays a few periods long over a long recording."""
        i = bisect.bisect_right(self._received_ns, received_ns) - 1
        if i > 0:
            del self._received_ns[:i]
            del self._sim_ns[:i]

    def __len__(self) -> int:
        return len(self._received_ns)
