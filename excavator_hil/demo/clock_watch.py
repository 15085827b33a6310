"""The demo's guard against a simulation that stopped: its operators pace themselves by the
simulated time (``/clock``), so without it a sim_node that no longer steps would hold the demo
forever, silently."""

from __future__ import annotations

import math
from dataclasses import dataclass

from excavator_common.hang_watchdog import SUPERVISED_TIMEOUT_S
from excavator_hil.errors import HilError

# [s of wall time] the simulated time may stand still before the demo gives up: a loaded
# 2-core host holds a simulation period back by a second at worst; a lockstep waits
# soil_lockstep_timeout_s (0.5 s by default) for the soil's answer before it steps alone.
# Longer than the hang watchdog of the demo's nodes (SUPERVISED_TIMEOUT_S) by a margin: a
# sim_node that hangs ends first, and the demo names it, with the stacks in its log.
SIM_STALL_S = SUPERVISED_TIMEOUT_S + 30.0


class SimulationStalledError(HilError, RuntimeError):
    """The simulated time stood still for longer than the watch allows."""


@dataclass
class SimClockWatch:
    """Raises :class:`SimulationStalledError` once the simulated time has not advanced for
    ``stall_s`` of wall time. ``what``: the clock's source, for the message."""

    stall_s: float = SIM_STALL_S
    what: str = "sim_node"
    _last_sim_s: float = math.nan
    _since_wall_s: float = math.nan

    def update(self, sim_time_s: float, wall_s: float) -> None:
        """One look at the clocks: the simulated time [s] and a monotonic wall time [s]."""
        if sim_time_s != self._last_sim_s or math.isnan(self._since_wall_s):
            self._last_sim_s, self._since_wall_s = sim_time_s, wall_s
            return
        stood = wall_s - self._since_wall_s
        if stood > self.stall_s:
            raise SimulationStalledError(
                f"the simulated time stood at {sim_time_s:.3f} s for {stood:.0f} s of wall time "
                f"(the limit is {self.stall_s:g} s): {self.what} stopped stepping or stopped "
                "publishing /clock; see its log and /diagnostics (a lockstep waiting for a "
                "peer that is gone, a process stopped with SIGSTOP)")
