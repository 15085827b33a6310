"""How long sim_node holds a track command (pure Python: no ROS, no MuJoCo).

The tracks follow ``track_command`` (in a HIL set-up the PLC's measured track speeds,
``plc/wheel_states``, which the bridge publishes at 50 Hz). When the commands stop (link cut,
bridge or PLC dead, teleop gone) the real machine stops: its PLC's drives stop. The simulation
must not keep driving on the last speed it heard, so a command older than ``timeout_s`` of
**simulated** time stops the tracks.

Simulated, not wall, time: a stalled or late simulation (SIGSTOP, a loaded host catching up a
burst of periods) has not lived through the silence, and a command waiting in its queue must not
be declared dead because the simulation itself was late. At ``real_time_factor`` 1 the two are the
same; a simulation running faster than real time sees the commands further apart in its time, so
raise ``track_command_timeout_s`` with it (it must exceed the command period times the factor).
sim_node checks the age once per burst of periods (the periods stepped in one timer or /clock
callback, during which no command can be delivered), at the burst's start.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class CommandTimeout:
    """Freshness of the latest command, in simulated time [s]."""

    timeout_s: float  # a command older than this stops the tracks; 0 = hold until replaced
    last_s: float = math.nan  # simulated time the latest command arrived [s]; NaN = none yet
    expired: bool = False  # the latest command timed out and nothing has arrived since
    expiries: int = 0  # how often a command timed out

    def received(self, now_s: float) -> None:
        """A valid command arrived at simulated time ``now_s`` [s]."""
        self.last_s = now_s
        self.expired = False

    def age_s(self, now_s: float) -> float:
        """Simulated time since the latest command [s]; NaN before the first one."""
        return now_s - self.last_s

    def expires(self, now_s: float) -> bool:
        """True exactly once per silence: at the first check where the latest command is older
        than ``timeout_s`` (the caller stops the tracks then)."""
        if self.timeout_s <= 0.0 or self.expired or math.isnan(self.last_s):
            return False
        if now_s - self.last_s > self.timeout_s:
            self.expired = True
            self.expiries += 1
            return True
        return False
