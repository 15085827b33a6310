"""When the demo's operator may start digging: soil_node closing the loop (its wrenches answer
the bucket's poses), fresh enough to count as live.

The operator waits for a wrench answering a pose at most ``live_age_s`` old in simulated time:
soil_node's first answers after start-up can be ~0.3 s late on a loaded host, and a dig that
starts then meets the soil without its forces. A host too busy to hold the coupling in real
time at all (a fleet beside other work: one soil_node answers every machine) never gets there;
once soil_node has answered for ``late_start_s`` of wall time the run starts anyway, late,
and says so (:attr:`SoilCoupling.late`), rather than failing a run that can still dig.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# a wrench answering a pose at most this old [s of sim time] counts as live
SOIL_LIVE_AGE_S = 0.05
# soil_node answering for this long [s wall], never that fresh: the run starts late
SOIL_LATE_START_S = 20.0


@dataclass
class SoilCoupling:
    """What the wrenches so far say about the soil loop."""

    live_age_s: float = SOIL_LIVE_AGE_S
    late_start_s: float = SOIL_LATE_START_S
    live: bool = False              # a wrench answered a pose at most live_age_s old
    lag_s: float = math.nan         # /clock minus the latest wrench's stamp [s sim]
    first_answer_s: float = math.nan   # when the first wrench came [s wall, monotonic]

    def on_wrench(self, stamp_s: float, clock_s: float, wall_s: float) -> None:
        """A wrench stamped ``stamp_s`` [s sim] arrived when /clock read ``clock_s`` [s sim]
        (NaN: no /clock yet, not judged), at ``wall_s`` [s monotonic]."""
        if not math.isfinite(clock_s):
            return
        self.lag_s = clock_s - stamp_s
        if math.isnan(self.first_answer_s):
            self.first_answer_s = wall_s
        if self.lag_s <= self.live_age_s:
            self.live = True

    def late(self, wall_s: float) -> bool:
        """Never live, but answering for ``late_start_s`` by ``wall_s``: start late."""
        return not self.live and wall_s - self.first_answer_s >= self.late_start_s

    def ready(self, wall_s: float) -> bool:
        return self.live or self.late(wall_s)
