"""Lockstep with a soil node over DDS: step the next publish period only once the soil answered
the latest bucket pose (pure Python: no ROS, no MuJoCo).

Without it (the default) sim_node steps on its own schedule and applies the latest soil wrench
while fresh (:class:`excavator_sim.pacing.WrenchGate`): which period a wrench acts in depends on
when it arrives, so two runs of the same session differ by a period of soil force here and there
(docs/teleoperation.md, "Replay"). With it, the wrench answering the pose at the end of period k
always acts during period k + 1, whatever the machine's speed: the coupling becomes a function of
the simulated time alone, as with the in-process soil, while soil_node stays its own process.

The wait is bounded by ``timeout_s`` of wall time: a soil node that does not answer (dead, not
started, or rejecting the pose) costs one timeout, after which the simulation runs on without
waiting (the wrench gate leaves the stale soil force out) until a wrench arrives again. The
soil node must answer every pose: its ``update_rate_hz`` at least sim_node's
``publish_rate_hz``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from excavator_sim.pacing import Window

# Pose and wrench stamps are the same header stamp, converted the same way; this only absorbs
# a conversion done elsewhere [s].
_SAME_STAMP_S = 1e-9


@dataclass
class SoilLockstep:
    """Whether the next period may start (see the module docstring)."""

    timeout_s: float  # wall time to wait for an answer [s]; <= 0: never wait
    pose_stamp_s: float | None = None  # the latest bucket pose published [s of sim time]
    answered_s: float | None = None  # stamp of the latest wrench received [s of sim time]
    detached: bool = False  # timed out: not waiting until the soil answers again
    waits: int = 0  # periods that had to wait for their wrench
    timeouts: int = 0  # waits given up after timeout_s
    wait_s: Window = field(default_factory=Window)  # wall time waited per wait [s]
    _since: float | None = None  # wall time the current wait began [s]

    @property
    def enabled(self) -> bool:
        return self.timeout_s > 0.0

    @property
    def waiting(self) -> bool:
        """A period is held back for the soil's answer right now."""
        return self._since is not None

    def published(self, pose_stamp_s: float) -> None:
        """sim_node published the bucket pose stamped ``pose_stamp_s``."""
        self.pose_stamp_s = pose_stamp_s

    def answered(self, wrench_stamp_s: float) -> None:
        """A soil wrench for the pose stamped ``wrench_stamp_s`` arrived (valid or not: the
        soil answered)."""
        if self.answered_s is None or wrench_stamp_s > self.answered_s:
            self.answered_s = wrench_stamp_s
        self.detached = False

    def may_step(self, wall_s: float) -> bool:
        """Whether the next period may be stepped at ``wall_s`` [s, monotonic]. False: call
        again later (on the next wrench or timer tick)."""
        if not self.enabled or self.detached or self.pose_stamp_s is None:
            return True
        if self.answered_s is not None and self.answered_s >= self.pose_stamp_s - _SAME_STAMP_S:
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
            return {"soil_lockstep": "off"}
        _, p99, worst = (1e3 * v for v in self.wait_s.percentiles())
        return {"soil_lockstep": "detached" if self.detached else "on",
                "soil_lockstep_waits": self.waits, "soil_lockstep_timeouts": self.timeouts,
                "soil_lockstep_wait_ms_p99": f"{p99:.2f}",
                "soil_lockstep_wait_ms_max": f"{worst:.2f}"}
