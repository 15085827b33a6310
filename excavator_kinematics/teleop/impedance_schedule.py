"""Impedance teleoperation stepped on simulated time (no ROS; the core of teleop_node's
``command_delay_s`` in impedance mode, docs/teleoperation.md "Replay").

The impedance controller has a state (DiMaio's model) fed by the hand pose, the soil wrench
and the measured joints. Run by a wall-clock timer it depends on when messages arrive; here it
depends on their stamps alone, so a recorded session replays to the same commands:

- the control ticks are the points of a grid of simulated time (``period_ns``, the control
  period); tick ``t`` is computed once ``joint_states`` of stamp >= ``t`` have arrived, from the
  state of its stamp (the latest at or before it);
- the soil wrench of tick ``t`` is the latest one stamped at or before it (soil_node stamps each
  wrench with the pose it answers); the tick waits for a wrench stamped >= ``t`` (in lockstep
  sim_node does not step past a pose before it is answered), at most until the states are
  ``wrench_wait_ns`` past it (then the latest one acts and the tick is counted as
  ``wrenches_late``: reproducible only when no soil_node runs at all, where every tick waits).
  By default that is the delay less one period: as long as the tick's command can still reach
  sim_node before its stamp (with the command lockstep sim_node cannot step past it anyway), so
  a soil answer held up on a loaded host (a DDS repair, a starved soil_node) still acts;
  a wrench older than ``wrench_timeout_ns`` counts as zero;
- the hand pose of tick ``t`` is the latest one taken in at or before it, and none when that is
  older than ``hand_timeout_ns``. A pose is taken in at its stamp (simulated time; the caller
  passes the arrival time for a device that stamps in wall time), but never at or before a
  tick already computed: one that comes too late for its stamp is re-stamped just after the
  last tick (``hands_restamped``). The stamp it was taken in at is what to record (teleop_node
  publishes it on ``teleop/hand_applied``): played back onto ``hand_pose`` early (a player's
  lead), every pose is then taken in at that same stamp and acts at the same ticks;
- with ``hand_lockstep`` (teleop_node's ``input_lockstep``: a scripted device, a bag replay) a
  tick also waits, while the hand poses are live (``hands_live``: the caller's judgement, a
  pose within a timeout of wall time), for a pose taken in at or after it: the tick's command
  is then not sent, so sim_node's command lockstep waits for the poses too, and a player held
  up on a loaded host makes no pose late (re-stamped) and no tick without it. When the poses
  stop, the caller says so (``hands_live`` false, :meth:`due`) and the ticks run on;
- the command of tick ``t`` is stamped ``t + delay_ns``: sim_node applies it at that simulated
  time. A tick whose command would already be due when the states reach it (teleop_node was
  stalled for longer than the delay) is skipped (``ticks_skipped``).
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass

import numpy as np

from excavator_kinematics.teleop.controller import MachineState

HISTORY = 512  # states, hand poses and wrenches kept (5 s of 100 Hz states)


@dataclass(frozen=True)
class ImpedanceTick:
    """One control tick to compute: at ``t_ns`` [ns of simulated time], from ``state``, the
    hand pose ``hand`` (device (x [m], z [m], pitch [rad]); None: no live pose), the soil
    wrench ``force`` [N] / ``torque`` [N m] (world, at the bucket origin); the command is
    stamped ``command_ns``."""

    t_ns: int
    state: MachineState
    hand: np.ndarray | None
    force: np.ndarray
    torque: np.ndarray
    command_ns: int
    wrench_late: bool


class ImpedanceSchedule:
    """Ticks of the impedance controller on simulated time [ns], from stamped inputs."""

    def __init__(self, period_ns: int, delay_ns: int, hand_timeout_ns: int,
                 wrench_timeout_ns: int, wrench_wait_ns: int | None = None,
                 hand_lockstep: bool = False) -> None:
        if period_ns <= 0 or delay_ns <= 0:
            raise ValueError(f"period {period_ns} ns and delay {delay_ns} ns must be > 0")
        self.period_ns = period_ns
        self.delay_ns = delay_ns
        self.hand_timeout_ns = hand_timeout_ns
        self.wrench_timeout_ns = wrench_timeout_ns
        # the latest a tick can be computed with its command still ahead of its stamp (one
        # period of margin); half the delay where the delay is shorter than two periods
        self.wrench_wait_ns = max(delay_ns // 2, delay_ns - period_ns) \
            if wrench_wait_ns is None else wrench_wait_ns
        self.hand_lockstep = hand_lockstep
        self.waiting_for_hand = False  # the next tick waits for its pose (hand_lockstep)
        self.ticks = 0
        self.ticks_skipped = 0
        self.hands_restamped = 0
        self.wrenches_late = 0
        self._reset()

    def _reset(self) -> None:
        self._state_ns: deque[int] = deque(maxlen=HISTORY)
        self._states: deque[MachineState] = deque(maxlen=HISTORY)
        self._hand_ns: list[int] = []
        self._hands: list[np.ndarray] = []
        self._wrench_ns: deque[int] = deque(maxlen=HISTORY)
        self._wrenches: deque[tuple[np.ndarray, np.ndarray]] = deque(maxlen=HISTORY)
        self._next_ns: int | None = None   # the next tick to compute
        self._last_tick_ns: int | None = None
        self._newest_hand_ns: int | None = None  # the newest stamp a pose was taken in at

    def take_hand(self, stamp_ns: int, hand: np.ndarray) -> int:
        """A hand pose stamped ``stamp_ns`` (simulated time, or its arrival there); returns the
        stamp it is taken in at (record this). With ``hand_lockstep``, :meth:`due` then returns
        the ticks it let through."""
        at = stamp_ns
        if self._last_tick_ns is not None and at <= self._last_tick_ns:
            at = self._last_tick_ns + 1
            self.hands_restamped += 1
        k = bisect.bisect_right(self._hand_ns, at)
        self._hand_ns.insert(k, at)
        self._hands.insert(k, np.asarray(hand, float).copy())
        self._newest_hand_ns = at if self._newest_hand_ns is None \
            else max(self._newest_hand_ns, at)
        if len(self._hand_ns) > HISTORY:
            del self._hand_ns[0], self._hands[0]
        return at

    def add_wrench(self, stamp_ns: int, force: np.ndarray, torque: np.ndarray,
                   hands_live: bool = False) -> list[ImpedanceTick]:
        """A soil wrench answering the pose of ``stamp_ns``; returns the ticks now due."""
        if self._wrench_ns and stamp_ns < self._wrench_ns[-1]:
            return []  # an answer to an older pose (latest-wins soil): the newer one stands
        self._wrench_ns.append(stamp_ns)
        self._wrenches.append((np.asarray(force, float).copy(),
                               np.asarray(torque, float).copy()))
        return self._due(hands_live)

    def add_state(self, stamp_ns: int, state: MachineState,
                  hands_live: bool = False) -> list[ImpedanceTick]:
        """Measured joints of ``stamp_ns``; returns the ticks now due, in order.
        ``hands_live``: whether hand poses still come (``hand_lockstep``; module docstring)."""
        if self._state_ns and stamp_ns < self._state_ns[-1]:
            self._reset()  # the clock went back: a new simulation
        self._state_ns.append(stamp_ns)
        self._states.append(state)
        if self._next_ns is None:
            self._next_ns = -(-stamp_ns // self.period_ns) * self.period_ns  # first grid point
        return self._due(hands_live)

    def due(self, hands_live: bool) -> list[ImpedanceTick]:
        """The ticks due now (after a hand pose, or when the poses stopped: ``hand_lockstep``
        holds a tick back only while ``hands_live``)."""
        return self._due(hands_live)

    def _due(self, hands_live: bool) -> list[ImpedanceTick]:
        out: list[ImpedanceTick] = []
        self.waiting_for_hand = False
        while self._next_ns is not None and self._state_ns:
            t = self._next_ns
            newest = self._state_ns[-1]
            if newest < t:
                break
            if t + self.delay_ns <= newest:  # its command would act in the past
                self.ticks_skipped += 1
                self._next_ns = t + self.period_ns
                self._last_tick_ns = t
                continue
            if (self.hand_lockstep and hands_live and self._newest_hand_ns is not None
                    and self._newest_hand_ns < t):
                self.waiting_for_hand = True
                break  # the pose of this tick is still coming (the device is live)
            late = False
            if not self._wrench_ns or self._wrench_ns[-1] < t:
                if newest < t + self.wrench_wait_ns:
                    break  # the wrench answering this tick's pose is still coming
                late = True
                self.wrenches_late += 1
            out.append(self._tick(t, late))
            self._next_ns = t + self.period_ns
            self._last_tick_ns = t
        return out

    def _tick(self, t: int, wrench_late: bool) -> ImpedanceTick:
        self.ticks += 1
        k = max(bisect.bisect_right(self._state_ns, t) - 1, 0)
        state = self._states[k]
        hand = None
        h = bisect.bisect_right(self._hand_ns, t) - 1
        if h >= 0:
            if t - self._hand_ns[h] <= self.hand_timeout_ns:
                hand = self._hands[h]
            del self._hand_ns[:h], self._hands[:h]  # older poses can no longer act
        force, torque = np.zeros(3), np.zeros(3)
        w = bisect.bisect_right(self._wrench_ns, t) - 1
        if w >= 0 and t - self._wrench_ns[w] <= self.wrench_timeout_ns:
            force, torque = self._wrenches[w]
        return ImpedanceTick(t, state, hand, force, torque, t + self.delay_ns, wrench_late)

    def counters(self) -> dict[str, int]:
        return {"impedance_ticks": self.ticks, "impedance_ticks_skipped": self.ticks_skipped,
                "hands_restamped": self.hands_restamped,
                "wrenches_late": self.wrenches_late}
