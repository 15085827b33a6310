"""Impedance teleoperation on simulated time without ROS
(``excavator_kinematics.teleop.impedance_schedule``): the control ticks, and what each tick
takes from the stamped inputs, do not depend on when the messages arrive; the hand poses as
they were taken in (what teleop_node records on teleop/hand_applied) replay to the same
ticks."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from excavator_kinematics.teleop.controller import MachineState
from excavator_kinematics.teleop.impedance_schedule import ImpedanceSchedule, ImpedanceTick

MS = 1_000_000  # ns
STATE_NS = 10 * MS  # joint_states every 10 ms of simulated time
TICK_NS = 20 * MS   # 50 Hz control
DELAY_NS = 500 * MS
HAND_TIMEOUT_NS = 250 * MS
WRENCH_TIMEOUT_NS = 500 * MS


def schedule() -> ImpedanceSchedule:
    return ImpedanceSchedule(TICK_NS, DELAY_NS, HAND_TIMEOUT_NS, WRENCH_TIMEOUT_NS)


def state(t_ns: int) -> MachineState:
    """A machine whose boom angle is its stamp [s] (to see which state a tick used)."""
    return MachineState(np.array([0.0, t_ns * 1e-9, 0.0, 0.0]), np.zeros(4))


def wrench(t_ns: int) -> tuple[np.ndarray, np.ndarray]:
    return np.array([-1e3 * t_ns * 1e-9, 0.0, 0.0]), np.zeros(3)


def test_ticks_come_on_the_grid_with_the_state_of_their_stamp() -> None:
    s = schedule()
    ticks = []
    for n in range(3, 12):  # states from 30 ms, each answered by soil_node
        ticks += s.add_state(n * STATE_NS, state(n * STATE_NS))
        ticks += s.add_wrench(n * STATE_NS, np.zeros(3), np.zeros(3))
    assert [t.t_ns for t in ticks] == [40 * MS, 60 * MS, 80 * MS, 100 * MS]
    assert [t.state.q[1] for t in ticks] == pytest.approx([0.04, 0.06, 0.08, 0.1])
    assert [t.command_ns for t in ticks] == [t.t_ns + DELAY_NS for t in ticks]
    assert all(t.hand is None and not t.force.any() and not t.wrench_late for t in ticks)


def test_a_tick_waits_for_the_wrench_of_its_stamp_then_goes_on_late() -> None:
    s = schedule()
    assert s.add_state(0, state(0)) == []  # tick 0 waits for the wrench of its stamp
    assert [t.t_ns for t in s.add_wrench(0, *wrench(0))] == [0]
    assert s.add_state(10 * MS, state(10 * MS)) == []
    assert s.add_state(20 * MS, state(20 * MS)) == []  # tick 20 ms: its wrench is coming
    (tick,) = s.add_wrench(20 * MS, *wrench(20 * MS))
    assert tick.t_ns == 20 * MS and tick.force[0] == -20.0 and not tick.wrench_late
    # soil_node stops answering: a tick waits for it until the states are the delay less one
    # period on (its command still ahead of its stamp), then goes on with the latest wrench
    ticks: list[ImpedanceTick] = []
    n = 3
    while not ticks:
        ticks = s.add_state(n * STATE_NS, state(n * STATE_NS))
        n += 1
    assert (n - 1) * STATE_NS == 40 * MS + DELAY_NS - TICK_NS
    assert ticks[0].t_ns == 40 * MS and ticks[0].wrench_late and ticks[0].force[0] == -20.0
    assert s.wrenches_late == len(ticks)
    # a wrench older than wrench_timeout_s acts no more
    more = [t for k in range(n, n + 100) for t in s.add_state(k * STATE_NS, state(k * STATE_NS))]
    old = [t for t in more if t.t_ns - 20 * MS > WRENCH_TIMEOUT_NS]
    assert old and all(not t.force.any() for t in old)


def _answered(s: ImpedanceSchedule, first: int, end: int) -> list[ImpedanceTick]:
    """States first..end-1 (x 10 ms), each answered by soil_node at once."""
    ticks = []
    for n in range(first, end):
        ticks += s.add_state(n * STATE_NS, state(n * STATE_NS))
        ticks += s.add_wrench(n * STATE_NS, *wrench(n * STATE_NS))
    return ticks


def test_a_hand_pose_acts_from_its_stamp_until_the_timeout() -> None:
    s = schedule()
    assert s.take_hand(45 * MS, np.array([0.1, 0.0, 0.0])) == 45 * MS
    ticks = _answered(s, 0, 40)
    by_t = {t.t_ns: t.hand for t in ticks}
    assert by_t[40 * MS] is None and by_t[60 * MS] is not None
    assert by_t[280 * MS] is not None and by_t[300 * MS] is None  # 255 ms > 250 ms old


def test_a_hand_pose_too_late_for_its_stamp_is_taken_in_after_the_last_tick() -> None:
    s = schedule()
    _answered(s, 0, 11)  # ticks up to 100 ms computed
    at = s.take_hand(30 * MS, np.array([0.2, 0.0, 0.0]))
    assert at == 100 * MS + 1 and s.hands_restamped == 1
    s.add_state(120 * MS, state(120 * MS))
    (tick,) = s.add_wrench(120 * MS, *wrench(120 * MS))
    assert tick.hand is not None and tick.hand[0] == 0.2


def test_the_clock_going_back_starts_a_new_grid_and_late_ticks_are_skipped() -> None:
    s = schedule()
    _answered(s, 0, 11)
    assert s.add_state(5 * STATE_NS, state(5 * STATE_NS)) == []  # a new simulation
    s.add_state(60 * MS, state(60 * MS))
    assert [t.t_ns for t in s.add_wrench(60 * MS, *wrench(60 * MS))] == [60 * MS]
    # the states jump 2 s ahead (teleop_node stalled longer than the delay): the ticks whose
    # commands would already be due are skipped, not sent late
    ticks = s.add_state(2060 * MS, state(2060 * MS)) + s.add_wrench(2060 * MS,
                                                                      *wrench(2060 * MS))
    assert ticks[0].t_ns == 2060 * MS - DELAY_NS + TICK_NS and s.ticks_skipped > 0


def _session(arrival: list[tuple[int, str, int]],
             hands: dict[int, np.ndarray]) -> tuple[list[ImpedanceTick], list[tuple[int, int]]]:
    """Feed (arrival order, kind, stamp) events; returns the ticks and the hand poses as taken
    in (taken-in stamp, hand id)."""
    s = schedule()
    ticks: list[ImpedanceTick] = []
    taken = []
    for _, kind, stamp in sorted(arrival):
        if kind == "state":
            ticks += s.add_state(stamp, state(stamp))
        elif kind == "wrench":
            ticks += s.add_wrench(stamp, *wrench(stamp))
        else:
            taken.append((s.take_hand(stamp, hands[stamp]), stamp))
    return ticks, taken


def _device_poses(data: st.DataObject,
                  events: list[tuple[int, str, int]]) -> dict[int, np.ndarray]:
    """A device's poses about every 20 ms, each arriving 0-120 ms after its stamp (added to
    ``events``); returns them by stamp."""
    hands = {}
    for k in range(1, 25):
        stamp = k * TICK_NS + data.draw(st.integers(0, 19)) * MS
        hands[stamp] = np.array([stamp * 1e-9, 0.0, 0.0])
        events.append(((stamp + data.draw(st.integers(0, 120)) * MS) * 10 + 3, "hand", stamp))
    return hands


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_hand_poses_as_taken_in_replay_to_the_same_ticks(data: st.DataObject) -> None:
    """Property: a live session (states every 10 ms; soil answers each one 0-30 ms later, in
    order;
    hand poses every 20 ms arriving 0-120 ms after their stamps, some after their tick) and its
    replay (the recorded poses at their taken-in stamps, published up to 0.5 s early, the
    states and wrenches arriving in another order) compute the same ticks from the same
    inputs."""
    n_states = 60
    live: list[tuple[int, str, int]] = []
    answered = 0  # soil_node answers in order (one publisher, in-order delivery)
    for n in range(n_states):
        t = n * STATE_NS
        live.append((t * 10 + 1, "state", t))
        answered = max(answered, t + data.draw(st.integers(0, 3)) * STATE_NS)
        live.append((answered * 10 + 2, "wrench", t))
    hands = _device_poses(data, live)
    ticks, taken = _session(live, hands)
    assert len(ticks) > 20 and any(t.hand is not None for t in ticks)

    replay: list[tuple[int, str, int]] = []
    answered = 0
    for n in range(n_states):
        t = n * STATE_NS
        replay.append((t * 10 + 3, "state", t))
        answered = max(answered, t + data.draw(st.integers(0, 3)) * STATE_NS)
        replay.append((answered * 10 + 1, "wrench", t))
    replayed_hands = {}
    for at, stamp in taken:
        replayed_hands[at] = hands[stamp]
        lead = data.draw(st.integers(0, 500)) * MS
        replay.append(((at - lead) * 10 + 2, "hand", at))
    again, _ = _session(replay, replayed_hands)

    def key(ts: list[ImpedanceTick]) -> list[tuple[object, ...]]:
        return [(t.t_ns, t.state.q[1], None if t.hand is None else t.hand[0], t.force[0],
                 t.command_ns) for t in ts]
    assert key(again) == key(ticks)


# --- hand_lockstep (teleop_node's input_lockstep): the ticks wait for the hand poses ---------

def test_with_hand_lockstep_a_tick_waits_for_the_pose_of_its_stamp_while_poses_come() -> None:
    s = ImpedanceSchedule(TICK_NS, DELAY_NS, HAND_TIMEOUT_NS, WRENCH_TIMEOUT_NS,
                          hand_lockstep=True)
    assert s.take_hand(15 * MS, np.array([0.1, 0.0, 0.0])) == 15 * MS
    ticks = [t for n in range(0, 6) for t in (s.add_state(n * STATE_NS, state(n * STATE_NS),
                                                          True)
                                             + s.add_wrench(n * STATE_NS,
                                                            *wrench(n * STATE_NS), True))]
    assert [t.t_ns for t in ticks] == [0]  # tick 20 ms: its pose is still coming
    assert s.due(hands_live=True) == []
    assert s.take_hand(25 * MS, np.array([0.2, 0.0, 0.0])) == 25 * MS
    (t20,) = s.due(hands_live=True)  # the pose of 25 ms lets tick 20 ms go, not tick 40 ms
    assert t20.t_ns == 20 * MS and t20.hand is not None and t20.hand[0] == 0.1
    assert s.add_state(60 * MS, state(60 * MS), True) + s.add_wrench(
        60 * MS, *wrench(60 * MS), True) == []
    # the poses stopped (the caller's judgement, on the wall clock): the ticks run on
    (t40, t60) = s.due(hands_live=False)
    assert (t40.t_ns, t60.t_ns) == (40 * MS, 60 * MS)
    assert t60.hand is not None and t60.hand[0] == 0.2
    assert s.hands_restamped == 0 and s.ticks_skipped == 0
    # without the lockstep nothing waits for a pose
    free = schedule()
    free.take_hand(15 * MS, np.array([0.1, 0.0, 0.0]))
    assert [t.t_ns for t in _answered(free, 0, 6)] == [0, 20 * MS, 40 * MS]


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_with_hand_lockstep_a_player_late_by_any_amount_replays_the_same_ticks(
        data: st.DataObject) -> None:
    """Property: a live session (as above), replayed with ``hand_lockstep`` into a simulation
    in lockstep with the commands (a period starting at T steps only once a command or time
    marker stamped >= T was sent): the player publishes each recorded pose --lead early but,
    after the first, falls behind by up to 2 s of simulated time (a starved process). Every
    pose is still taken in at its recorded stamp (none re-stamped) and the ticks are those of
    the live session."""
    n_states = 60
    live: list[tuple[int, str, int]] = []
    for n in range(n_states):
        live.append((n * STATE_NS * 10 + 1, "state", n * STATE_NS))
        live.append((n * STATE_NS * 10 + 2, "wrench", n * STATE_NS))
    hands = _device_poses(data, live)
    expected, taken = _session(live, hands)
    # the bag: (taken-in stamp, original stamp) in stamp order, ties in the order taken in
    poses = sorted(taken, key=lambda p: p[0])
    # [ns of sim time] when the player gets to each pose, in order: the first in time (the
    # lockstep holds from the first pose on), the others up to 2 s past their stamp
    ready, latest = [], 0
    for k, (at, _) in enumerate(poses):
        lag = data.draw(st.integers(0, 2000)) * MS if k else 0
        latest = max(latest, at - 500 * MS + lag)
        ready.append(latest)

    s = ImpedanceSchedule(TICK_NS, DELAY_NS, HAND_TIMEOUT_NS, WRENCH_TIMEOUT_NS,
                          hand_lockstep=True)
    ticks: list[ImpedanceTick] = []
    sent_until: int | None = None  # the newest command (or marker) stamp sent
    played = 0
    sim_ns = 0

    def play_one() -> None:
        nonlocal played
        at, stamp = poses[played]
        assert s.take_hand(at, hands[stamp]) == at  # taken in at its recorded stamp
        played += 1
        ticks.extend(s.due(hands_live=True))

    while sim_ns < n_states * STATE_NS:
        while played < len(poses) and ready[played] <= sim_ns:
            play_one()
        if sent_until is None or sent_until >= sim_ns:  # sim_node's command lockstep
            live_hands = played < len(poses)
            ticks.extend(s.add_state(sim_ns, state(sim_ns), live_hands))
            ticks.extend(s.add_wrench(sim_ns, *wrench(sim_ns), live_hands))
            sim_ns += STATE_NS
        elif played < len(poses):
            play_one()  # the simulation waits; on the wall clock the player catches up
        else:  # the poses stopped: the ticks run on
            more = s.due(hands_live=False)
            assert more, (sim_ns, sent_until, s.counters())  # else the simulation waits forever
            ticks.extend(more)
        if ticks:
            sent_until = ticks[-1].command_ns
    while played < len(poses):
        play_one()
    ticks.extend(s.due(hands_live=False))

    def key(ts: list[ImpedanceTick]) -> list[tuple[object, ...]]:
        return [(t.t_ns, t.state.q[1], None if t.hand is None else t.hand[0], t.force[0],
                 t.command_ns) for t in ts]
    assert s.hands_restamped == 0 and s.ticks_skipped == 0
    got, want = key(ticks), key(expected)
    assert len(ticks) > 20 and got == want, (
        len(got), len(want), [(x, y) for x, y in zip(got, want, strict=False) if x != y][:3])
