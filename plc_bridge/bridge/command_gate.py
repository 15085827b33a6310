"""The bridge's fail-safe decision: forward the command or send a stop, and why.

Pure state machine (time passed in, no I/O), evaluated once per cycle:

- A stop condition (Redis lost, invalid input, heartbeat stale, PLC link lost / fault / e-stop /
  not ready / not automatic / alive counter stale, deactivated) disarms the gate: stop now.
- A disarmed gate re-arms only on a heartbeat *edge* (a toggle seen by this bridge) while no
  stop condition holds. Persisted keys from before a restart therefore never move the machine:
  a value that merely exists is not an edge.
- The heartbeat is stale when its last edge is older than ``heartbeat_timeout_s`` (or no edge
  was ever seen).
- The bridge's alive counter to the PLC may run only while commands are fresh (Redis up and
  heartbeat fresh): ``alive_may_run``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Decision:
    forward: bool          # True: send the model's setpoints with enable; False: stop
    reason: str            # "running" or the stop reason (a short identifier)
    alive_may_run: bool    # increment the alive counter sent to the PLC this cycle


class CommandGate:
    """Heartbeat edge tracking and the forward/stop decision."""

    def __init__(self, heartbeat_timeout_s: float):
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.armed = False
        self._last_level: bool | None = None
        self._last_edge_s: float | None = None
        self.reason = "starting"

    def heartbeat_fresh(self, now_s: float) -> bool:
        return (self._last_edge_s is not None
                and now_s - self._last_edge_s <= self.heartbeat_timeout_s)

    def observe_heartbeat(self, level: bool | None, now_s: float) -> bool:
        """Feed this cycle's heartbeat value; True when it toggled since the last one."""
        edge = level is not None and self._last_level is not None and level != self._last_level
        if level is not None:
            self._last_level = level
        if edge:
            self._last_edge_s = now_s
        return edge

    def forget_heartbeat(self) -> None:
        """After a Redis outage the old level proves nothing: a new edge is needed."""
        self._last_level = None
        self._last_edge_s = None

    def decide(self, now_s: float, edge: bool, blocker: str | None, redis_ok: bool
               ) -> Decision:
        """``blocker``: the first stop condition other than the heartbeat, or None."""
        fresh = self.heartbeat_fresh(now_s)
        alive = redis_ok and fresh
        if blocker is None and not fresh:
            blocker = "heartbeat_stale" if self._last_edge_s is not None else "waiting_heartbeat"
        if blocker is not None:
            self.armed = False
            self.reason = blocker
            return Decision(False, blocker, alive)
        if not self.armed:
            if not edge:
                self.reason = "waiting_heartbeat_edge"
                return Decision(False, self.reason, alive)
            self.armed = True
        self.reason = "running"
        return Decision(True, "running", alive)

    def disarm(self, reason: str) -> None:
        self.armed = False
        self.reason = reason
