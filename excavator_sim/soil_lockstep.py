"""Lockstep with a soil node over DDS: step the next publish period only once the soil answered
the latest bucket pose (pure Python: no ROS, no MuJoCo).

Without it (the default) sim_node steps on its own schedule and applies the latest soil wrench
while fresh (:class:`excavator_sim.pacing.WrenchGate`): which period a wrench acts in depends on
when it arrives, so two runs of the same session differ by a period of soil force here and there
(docs/teleoperation.md, "Replay"). With it, the wrench answering the pose at the end of period k
always acts during period k + 1, whatever the machine's speed: the coupling becomes a function of
the simulated time alone, as with the in-process soil, while soil_node stays its own process.

The wait is bounded by ``timeout_s`` of wall time (:class:`excavator_sim.lockstep.Lockstep`): a
soil node that does not answer (dead, not started, or rejecting the pose) costs one timeout,
after which the simulation runs on without waiting (the wrench gate leaves the stale soil force
out) until a wrench arrives again. The soil node must answer every pose: its
``update_rate_hz`` at least sim_node's ``publish_rate_hz``.
"""

from __future__ import annotations

from dataclasses import dataclass

from excavator_sim.lockstep import Lockstep


@dataclass
class SoilLockstep(Lockstep):
    """Waits for the wrench answering the latest bucket pose (see the module docstring)."""

    name: str = "soil_lockstep"
    pose_stamp_s: float | None = None  # the latest bucket pose published [s of sim time]

    def published(self, pose_stamp_s: float) -> None:
        """sim_node published the bucket pose stamped ``pose_stamp_s``."""
        self.pose_stamp_s = pose_stamp_s

    def may_step(self, wall_s: float) -> bool:
        """Whether the next period may be stepped at ``wall_s`` [s, monotonic]. False: call
        again later (on the next wrench or timer tick)."""
        return self.ready(self.pose_stamp_s, wall_s)
