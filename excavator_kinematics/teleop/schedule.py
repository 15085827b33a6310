"""Operator input answered in simulated time (no ROS; the core of teleop_node's
``command_delay_s`` mode, docs/teleoperation.md "Replay").

Each input (a Joy) is answered with the machine state of its stamp, extrapolated by the delay to
when its command acts, and the command is stamped stamp + delay: the answer depends on the
stamps alone, not on when the messages arrived, so a recorded session replays to the same
commands. An input ahead of the states waits for them; one that arrives more than half the delay
behind the newest state could not reach the simulation in time and is answered from the newest
state instead (re-stamped: the stamp it acted at is part of the answer, to be recorded).
Either way the answers' stamps increase strictly: an input that would act at or before the one
answered before it (several late inputs re-stamped onto the same newest state, or one not late
enough to be re-stamped behind one that was) acts just after that one. A live session recorded
from ``teleop/joy_applied`` then has strictly increasing stamps, which a replay in
``input_lockstep`` answers unchanged (it re-stamps an input acting at or before a command
already sent: two of the same stamp were 197 re-stamped in one replay, which left the path).

With ``input_lockstep`` the simulation waits for the inputs as well (sim_node's command lockstep
over this node's stream, :meth:`StampedAnswers.marker_stamp` holding the time markers at the
newest input's command while the input is live): the simulation then cannot step past a command
not yet sent, so an input is late only when its command would act before one already sent, and
only then re-stamped. However late the host delivers a scripted session, it acts at its stamps.
How long the simulation waits for an input that does not come (the session ended) is
:class:`InputWait`'s: a timeout on the wall clock counted from when the wait began or the last
input came, whichever is later, so a player's lead does not eat into it.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections import deque
from dataclasses import dataclass
from typing import Generic, TypeVar

from excavator_kinematics.teleop.controller import MachineState

T = TypeVar("T")

HISTORY = 512  # states kept (5 s at 100 Hz) and inputs queued at most
# an input stamped further ahead of the newest state is refused [s]: a wall-clock stamp (1.7e9 s
# ahead of simulated time) is, while a session sent ahead of the simulation (a bag player's
# lead) and states held up in a starved node's queue are not
AHEAD_LIMIT_S = 5.0
MARKER_LEAD = 0.25  # a time marker goes this fraction of the delay ahead of its state
# an input re-stamped onto or behind the input answered before it acts this much after that one
# [s]: every answer's stamp is then later than the one before (a recorded session replays in
# the order it acted; sim_node applies both in the period they fall in, as it did live)
ORDER_TICK_S = 1e-6
_EPS_S = 1e-9


class InputWait:
    """Whether the simulation should still wait for the operator's next input (teleop_node's
    ``input_lockstep``), on the wall clock [s, monotonic]: it waits while the input still
    comes; once it waited ``timeout_s`` with no input arriving, it is released (the session
    ended; counted in ``releases``) until the next input comes."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.releases = 0
        self._last_input_s = -math.inf
        self._waiting_since_s: float | None = None
        self._released = False

    def input_came(self, now_s: float) -> None:
        self._last_input_s = now_s
        self._released = False

    def waiting(self, held: bool, now_s: float) -> None:
        """Whether the simulation is held for the input now (a tick waits for it, the time
        markers are capped at the newest input's command)."""
        if not held:
            self._waiting_since_s = None
        elif self._waiting_since_s is None:
            self._waiting_since_s = now_s

    def live(self, now_s: float) -> bool:
        """False once the simulation waited ``timeout_s`` with no input arriving."""
        if self._released:
            return False
        if (self._waiting_since_s is not None
                and now_s - max(self._last_input_s, self._waiting_since_s) > self.timeout_s):
            self._released = True
            self.releases += 1
            return False
        return True


@dataclass(frozen=True)
class Answer(Generic[T]):
    """What to do for one input: compute the command from ``state`` and stamp it
    ``command_stamp_s``; ``acted_at_s`` is the input's stamp, or when it was re-stamped
    (``restamped``) the newest state's, or ``ORDER_TICK_S`` after the input answered before it
    where that is later."""

    payload: T
    acted_at_s: float
    state: MachineState
    command_stamp_s: float
    restamped: bool


@dataclass(frozen=True)
class Refused(Generic[T]):
    payload: T
    reason: str


class StampedAnswers(Generic[T]):
    """Inputs (any payload) answered at their stamp [s] from a history of machine states."""

    def __init__(self, delay_s: float, input_lockstep: bool = False) -> None:
        if not delay_s > 0.0:
            raise ValueError(f"delay_s {delay_s:.6g} must be > 0 [s]")
        self.delay_s = delay_s
        self.input_lockstep = input_lockstep
        self._stamps: deque[float] = deque(maxlen=HISTORY)
        self._states: deque[MachineState] = deque(maxlen=HISTORY)
        self._pending: deque[tuple[float, T]] = deque(maxlen=HISTORY)
        self.newest_input_s = -math.inf  # [s] the newest input's stamp
        self.answered_s = -math.inf      # [s] the stamp the last answered input acted at
        self.restamped = 0

    def add_state(self, stamp_s: float, state: MachineState,
                  sent_until_s: float = -math.inf) -> list[Answer[T] | Refused[T]]:
        """A measured state at ``stamp_s``; returns the inputs it lets be answered.
        ``sent_until_s`` [s]: the newest stamp of a command (or marker) already sent."""
        if self._stamps and stamp_s < self._stamps[-1]:
            self._stamps.clear()  # the clock went back: a new simulation
            self._states.clear()
            self.newest_input_s = -math.inf
            self.answered_s = -math.inf
        self._stamps.append(stamp_s)
        self._states.append(state)
        return self._answer(sent_until_s)

    def add_input(self, stamp_s: float, payload: T,
                  sent_until_s: float = -math.inf) -> list[Answer[T] | Refused[T]]:
        """An input stamped ``stamp_s``; returns the inputs now answerable (in arrival order).
        ``sent_until_s``: as for :meth:`add_state`."""
        self._pending.append((stamp_s, payload))
        self.newest_input_s = max(self.newest_input_s, stamp_s)
        return self._answer(sent_until_s)

    def marker_stamp(self, state_stamp_s: float, input_live: bool) -> float:
        """The stamp [s] of the time marker that follows a state stamped ``state_stamp_s``: a
        fraction of the delay ahead of it. With ``input_lockstep`` while the input is live
        (``input_live``: the caller's judgement, e.g. a Joy within its timeout of wall time), no
        further than the newest input's command: the simulation waits for the next input."""
        stamp = state_stamp_s + MARKER_LEAD * self.delay_s
        if self.input_lockstep and input_live and math.isfinite(self.newest_input_s):
            stamp = min(stamp, self.newest_input_s + self.delay_s)
        return stamp

    def holds_for_input(self, state_stamp_s: float) -> bool:
        """Whether ``input_lockstep`` holds the marker after this state back (the simulation
        waits for the next input)."""
        return self.marker_stamp(state_stamp_s, True) < self.marker_stamp(state_stamp_s, False)

    @property
    def newest_state_s(self) -> float | None:
        """The newest state's stamp [s] (None before the first)."""
        return self._stamps[-1] if self._stamps else None

    @property
    def pending(self) -> int:
        return len(self._pending)

    def _answer(self, sent_until_s: float) -> list[Answer[T] | Refused[T]]:
        out: list[Answer[T] | Refused[T]] = []
        while self._pending and self._stamps:
            stamp, payload = self._pending[0]
            newest = self._stamps[-1]
            if stamp > newest + AHEAD_LIMIT_S:
                self._pending.popleft()
                out.append(Refused(payload, (
                    f"Joy stamped {stamp:.6g} s, {stamp - newest:.6g} s ahead of joint_states "
                    f"(limit {AHEAD_LIMIT_S:g} s) with command_delay_s {self.delay_s:g} s: stamp "
                    "the Joy in simulated time (joy driver with use_sim_time:=true) or set "
                    "command_delay_s 0")))
                continue
            if stamp > newest + _EPS_S:
                break  # the states of its stamp are still coming
            self._pending.popleft()
            if self.input_lockstep:  # late only if it would act before a command already sent
                restamped = stamp + self.delay_s <= sent_until_s + _EPS_S
            else:  # ... or if its command could not reach a simulation that runs on
                restamped = newest - stamp > 0.5 * self.delay_s
            # ... and never at or before the input answered before it (strictly in order)
            restamped = restamped or stamp <= self.answered_s + _EPS_S
            if restamped:
                stamp = max(newest, self.answered_s + ORDER_TICK_S)
                self.restamped += 1
            self.answered_s = stamp
            k = max(bisect.bisect_right(self._stamps, stamp + _EPS_S) - 1, 0)
            measured = self._states[k]
            # the machine moves on under the commands already sent until this one acts
            ahead = dataclasses.replace(measured, q=measured.q + measured.qd * self.delay_s)
            out.append(Answer(payload, stamp, ahead, stamp + self.delay_s, restamped))
            sent_until_s = max(sent_until_s, stamp + self.delay_s)
        return out
