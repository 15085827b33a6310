"""Hold the next publish period until a stamp sim_node waits for has arrived, for at most a
wall-clock timeout (pure Python: no ROS, no MuJoCo).

The rule common to both of sim_node's locksteps: the soil's answer to the latest bucket pose
(:mod:`excavator_sim.soil_lockstep`) and the scheduled commands of a teleoperation session
(:mod:`excavator_sim.command_lockstep`). With it, what happens in a period depends on the
simulated time alone, not on how fast the other process is: the simulation waits for it. A peer
that does not send (dead, stopped, finished) costs one ``timeout_s`` of wall time, after which the
simulation runs on without waiting ("detached") until the peer sends again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from excavator_sim.pacing import Window

# Stamps are header stamps converted the same way on both sides; this only absorbs a conversion
# done elsewhere [s].
SAME_STAMP_S = 1e-9


@dataclass
class Lockstep:
    """Whether the next period may start: once a stamp at or after the one needed arrived."""

    timeout_s: float  # wall time to wait [s]; <= 0: never wait
    name: str = "lockstep"  # prefix of the /diagnostics keys
    answered_s: float | None = None  # the latest stamp arrived [s of sim time]
    detached: bool = False  # timed out: not waiting until the peer sends again
    waits: int = 0  # periods that had to wait
    timeouts: int = 0  # waits given up after timeout_s
    wait_s: Window = field(default_factory=Window)  # wall time waited per wait [s]
    _since: float | None = None  # wall time the current wait began [s]

    @property
    def enabled(self) -> bool:
        return self.timeout_s > 0.0

    @property
    def waiting(self) -> bool:
        """A period is held back right now."""
        return self._since is not None

    def answered(self, stamp_s: float) -> None:
        """The peer sent a message stamped ``stamp_s`` [s of sim time]: it is there again."""
        if self.answered_s is None or stamp_s > self.answered_s:
            self.answered_s = stamp_s
        self.detached = False

    def ready(self, need_s: float | None, wall_s: float) -> bool:
        """Whether a period that needs a stamp at or after ``need_s`` (None: nothing) may step
        at ``wall_s`` [s, monotonic]. False: ask again later (on the next message or tick)."""
        if not self.enabled or self.detached or need_s is None:
            return True
        if self.answered_s is not None and self.answered_s >= need_s - SAME_STAMP_S:
            self._end_wait(wall_s)
            return True
        if self._since is None:
            self._since = wall_s
            self.waits += 1
            return False
        if wall_s - self._since >= self.timeout_s:
            self._end_wait(wall_s)
            self.timeouts += 1
            self.detached = True
            return True
        return False

    def _end_wait(self, wall_s: float) -> None:
        if self._since is not None:
            self.wait_s.add(wall_s - self._since)
            self._since = None

    def values(self) -> dict[str, str | int]:
        """Figures for /diagnostics (wait times in ms of wall time over the last waits)."""
        if not self.enabled:
            return {self.name: "off"}
        _, p99, worst = (1e3 * v for v in self.wait_s.percentiles())
        return {self.name: "detached" if self.detached else "on",
                f"{self.name}_waits": self.waits, f"{self.name}_timeouts": self.timeouts,
                f"{self.name}_wait_ms_p99": f"{p99:.2f}",
                f"{self.name}_wait_ms_max": f"{worst:.2f}"}
