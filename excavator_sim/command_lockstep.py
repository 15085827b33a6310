"""Lockstep with a scheduled command stream: step the period starting at simulated time T only
once a command stamped at or after T has arrived (pure Python: no ROS, no MuJoCo).

sim_node applies a command stamped ahead at its stamp (:mod:`excavator_sim.command_schedule`),
so a session replays to the same motion as long as every command arrives before its stamp. A
sender that falls behind by more than its lead (teleop_node's ``command_delay_s``: a busy host)
makes a command late, applied on arrival: that instant is not reproducible. With this lockstep
the simulation waits for it instead. A scheduled sender (teleop_node with ``command_delay_s``)
publishes its commands in stamp order on a reliable topic, so once a command stamped at or
after T is here, every command due by T is here too.

It engages with the first command held for its stamp, or with the first time marker of a
scheduled sender even if it came already past (before that nothing is known to come; commands
stamped when sent, as ik_node's, never engage it) and waits at most ``timeout_s`` of
wall time: a sender that stops (the session is over, the node died) costs one timeout, then
the simulation runs on without waiting until a command is held again.
"""

from __future__ import annotations

from dataclasses import dataclass

from excavator_sim.lockstep import Lockstep


@dataclass
class CommandLockstep(Lockstep):
    """Waits for the scheduled command stream to reach the period's start (module docstring)."""

    name: str = "command_lockstep"

    def held(self, stamp_s: float) -> None:
        """A command stamped ``stamp_s`` [s of sim time] arrived ahead and is held for it."""
        self.answered(stamp_s)

    def sender_behind(self, stamp_s: float) -> None:
        """A time marker stamped ``stamp_s`` [s of sim time] arrived already past: a scheduled
        sender is there but behind (starved from its start). Waited for from here on: the next
        period steps once it sends a stamp at or after that period's start."""
        self.answered(stamp_s)

    def may_step(self, sim_time_s: float, wall_s: float) -> bool:
        """Whether the period starting at ``sim_time_s`` may be stepped at ``wall_s`` [s,
        monotonic]. False: call again later (on the next command or timer tick)."""
        return self.ready(sim_time_s if self.answered_s is not None else None, wall_s)
