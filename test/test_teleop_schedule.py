"""teleop_node's command_delay_s core without ROS (``excavator_kinematics.teleop.schedule``):
each input is answered from the state of its stamp, extrapolated by the delay, whatever the
order in which inputs and states arrive."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from excavator_kinematics.teleop.controller import MachineState
from excavator_kinematics.teleop.schedule import (
    ORDER_TICK_S,
    Answer,
    InputWait,
    Refused,
    StampedAnswers,
)

PERIOD = 0.01  # joint_states every 10 ms
DELAY = 0.2


def state(t: float) -> MachineState:
    """A machine whose boom angle is its time stamp (easy to check which state was used)."""
    return MachineState(np.array([0.0, t, 0.0, 0.0]), np.array([0.0, 1.0, 0.0, 0.0]))


@given(st.lists(st.integers(0, 99), min_size=1, max_size=20, unique=True), st.data())
def test_every_input_gets_the_state_of_its_stamp_whenever_it_arrives(
        ticks: list[int], data: st.DataObject) -> None:
    """Inputs stamped on (or between) state stamps, arriving before their states or up to
    half the delay after: each is answered once, in arrival order, from the latest state at or
    before its stamp, extrapolated by the delay; the command is stamped stamp + delay."""
    answers: StampedAnswers[int] = StampedAnswers(DELAY)
    stamps = sorted(k * PERIOD + data.draw(st.sampled_from([0.0, 0.004])) for k in ticks)
    # the arrival of each input: after the state of this index has arrived (not too late)
    arrive_after = [data.draw(st.integers(max(0, int(t / PERIOD) - 20 + 1) - 1,
                                          int(t / PERIOD) + 5)) for t in stamps]
    arrive_after = np.maximum.accumulate(arrive_after)  # inputs keep their order
    out: list[Answer[int] | Refused[int]] = []
    j = 0
    for n in range(-1, 110):
        if n >= 0:
            out += answers.add_state(n * PERIOD, state(n * PERIOD))
        while j < len(stamps) and arrive_after[j] <= n:
            out += answers.add_input(stamps[j], j)
            j += 1
    assert [a.payload for a in out] == list(range(len(stamps)))
    for a in out:
        assert isinstance(a, Answer) and not a.restamped
        t = stamps[a.payload]
        used = round(np.floor(t / PERIOD + 1e-6) * PERIOD, 6)
        assert a.state.q[1] == pytest.approx(used + DELAY)  # q + q_dot x delay
        assert a.command_stamp_s == pytest.approx(t + DELAY)
    assert answers.pending == 0 and answers.restamped == 0


def test_an_input_too_late_acts_from_the_newest_state_and_says_so() -> None:
    answers: StampedAnswers[str] = StampedAnswers(DELAY)
    for n in range(50):
        answers.add_state(n * PERIOD, state(n * PERIOD))
    (a,) = answers.add_input(0.1, "late")  # newest 0.49: 0.39 s behind > DELAY / 2
    assert isinstance(a, Answer) and a.restamped and answers.restamped == 1
    assert a.acted_at_s == pytest.approx(0.49)
    assert a.command_stamp_s == pytest.approx(0.49 + DELAY)
    assert a.state.q[1] == pytest.approx(0.49 + DELAY)


def test_a_wall_clock_stamp_is_refused_with_the_fix() -> None:
    answers: StampedAnswers[str] = StampedAnswers(DELAY)
    answers.add_state(12.0, state(12.0))
    (r,) = answers.add_input(1.79e9, "wall")
    assert isinstance(r, Refused) and "use_sim_time:=true" in r.reason
    assert "command_delay_s 0" in r.reason and answers.pending == 0


def test_a_new_simulation_starts_a_new_history() -> None:
    answers: StampedAnswers[str] = StampedAnswers(DELAY)
    for n in range(10):
        answers.add_state(5.0 + n * PERIOD, state(5.0 + n * PERIOD))
    answers.add_state(0.0, state(0.0))  # the clock went back
    (a,) = answers.add_input(0.0, "x")  # from the new history, not re-stamped to 5.09 s
    assert isinstance(a, Answer) and not a.restamped
    assert a.state.q[1] == pytest.approx(0.0 + DELAY)


def test_the_delay_must_be_positive() -> None:
    with pytest.raises(ValueError, match="delay_s 0 must be > 0"):
        StampedAnswers(0.0)


# --- input_lockstep (teleop_node's input_lockstep): the simulation waits for the inputs too ---


class LockstepLoop:
    """A model of sim_node's command lockstep over ``answers``: the simulation steps a period
    only while a command or marker stamped at or after the period's start was sent (or before
    anything was); every answer's command and every marker counts as sent."""

    def __init__(self, answers: StampedAnswers[int]) -> None:
        self.answers = answers
        self.sent_until = -np.inf
        self.out: list[Answer[int] | Refused[int]] = []
        self.n = 0   # the simulation's next period

    def _take(self, got: list[Answer[int] | Refused[int]]) -> None:
        for a in got:
            assert isinstance(a, Answer)
            self.sent_until = max(self.sent_until, a.command_stamp_s)
        self.out += got

    def step(self, input_live: bool) -> None:
        """One period if the lockstep lets it, then teleop_node's marker after its state."""
        t = self.n * PERIOD
        if self.sent_until == -np.inf or self.sent_until >= t - 1e-9:
            self._take(self.answers.add_state(t, state(t), self.sent_until))
            self.sent_until = max(self.sent_until, self.answers.marker_stamp(t, input_live))
            self.n += 1

    def give(self, stamp: float, payload: int, marker: bool = False) -> None:
        """An input arrives; with ``marker`` teleop_node's marker on its arrival too."""
        self._take(self.answers.add_input(stamp, payload, self.sent_until))
        if marker:
            self.sent_until = max(self.sent_until, self.answers.marker_stamp(
                (self.n - 1) * PERIOD, True))


def test_late_inputs_re_stamped_together_act_one_after_the_other() -> None:
    """Three inputs late by more than half the delay arrive while the newest state stays the
    same (a starved operator's burst), then one only a little late, stamped behind them: each
    acts just after the one before, never at the same stamp (the record of a live session must
    replay in the order it acted)."""
    answers: StampedAnswers[str] = StampedAnswers(DELAY)
    for n in range(50):
        answers.add_state(n * PERIOD, state(n * PERIOD))
    got = [answers.add_input(t, name)[0] for t, name in
           ((0.10, "a"), (0.15, "b"), (0.20, "c"), (0.45, "d"))]
    acted = [a.acted_at_s for a in got if isinstance(a, Answer)]
    assert acted == pytest.approx([0.49, 0.49 + ORDER_TICK_S, 0.49 + 2 * ORDER_TICK_S,
                                   0.49 + 3 * ORDER_TICK_S], abs=1e-12)
    assert all(isinstance(a, Answer) and a.restamped for a in got) and answers.restamped == 4
    assert [a.command_stamp_s - a.acted_at_s for a in got
            if isinstance(a, Answer)] == pytest.approx([DELAY] * 4)
    # an input after them, stamped after them, is answered at its own stamp
    answers.add_state(0.5, state(0.5))
    (e,) = answers.add_input(0.5, "e")
    assert isinstance(e, Answer) and not e.restamped and e.acted_at_s == 0.5


@given(st.lists(st.integers(0, 40), min_size=2, max_size=40), st.data())
def test_a_live_session_as_it_acted_replays_in_input_lockstep_unchanged(
        lateness: list[int], data: st.DataObject) -> None:
    """A live session (no input lockstep) whose inputs, every 5 periods, reach the node a drawn
    number of periods late, several at once where the draw says so: what it acted at (the
    recorded ``teleop/joy_applied``) increases strictly, and played into a fresh simulation in
    input lockstep (sim_node's command lockstep; the player a lead ahead) every input acts at
    its recorded stamp from the same state, none re-stamped."""
    live: StampedAnswers[int] = StampedAnswers(DELAY)
    stamps = [1.0 + k * 5 * PERIOD for k in range(len(lateness))]
    arrival = np.maximum.accumulate([round(t / PERIOD) + late for t, late in
                                     zip(stamps, lateness, strict=True)])
    recorded: list[Answer[int]] = []
    j = 0
    for n in range(int(arrival[-1]) + 2):
        for a in live.add_state(n * PERIOD, state(n * PERIOD)):
            assert isinstance(a, Answer)
            recorded.append(a)
        while j < len(stamps) and arrival[j] <= n:
            for a in live.add_input(stamps[j], j):
                assert isinstance(a, Answer)
                recorded.append(a)
            j += 1
    assert [a.payload for a in recorded] == list(range(len(stamps)))
    acted = [a.acted_at_s for a in recorded]
    assert all(b > a for a, b in itertools.pairwise(acted)), acted

    # the player's lead covers the largest gap between two inputs less the delay (in input
    # lockstep the simulation waits at the newest input's command for the next one; the
    # shortest lead that still brings it: --lead, 2 s in test_teleop_replay.py)
    gap = max(b - a for a, b in itertools.pairwise(acted))
    lead_periods = data.draw(st.integers(max(0, int(np.ceil((gap - DELAY) / PERIOD))), 200))
    loop = LockstepLoop(StampedAnswers(DELAY, input_lockstep=True))
    j = 0
    for _ in range(20000):
        loop.step(j < len(acted))
        # the player: each input once the simulation is within the lead of its bag time
        while j < len(acted) and (loop.n - 1) * PERIOD >= acted[j] - lead_periods * PERIOD - 1e-9:
            loop.give(acted[j], j, marker=True)
            j += 1
        if j == len(acted) and loop.answers.pending == 0:
            break
    out = loop.out
    assert [a.payload for a in out] == list(range(len(acted)))
    for a in out:
        assert isinstance(a, Answer) and not a.restamped, a
        r = recorded[a.payload]
        assert a.acted_at_s == r.acted_at_s and a.command_stamp_s == r.command_stamp_s
        assert a.state.q[1] == pytest.approx(r.state.q[1], abs=1e-12)
    assert loop.answers.restamped == 0


@given(st.lists(st.integers(0, 30), min_size=40, max_size=40), st.data())
def test_in_input_lockstep_a_session_acts_at_its_stamps_however_late_it_arrives(
        stalls: list[int], data: st.DataObject) -> None:
    """A model of the loop: a simulation that steps a period only while a command or marker
    stamped at or after the period's start was sent (sim_node's command lockstep), and a
    sender of inputs every 5 periods that stalls a drawn number of periods before each (a
    starved operator, as much as 30 periods: six times the input period). Every input is
    answered at its own stamp, from the state of its stamp, none re-stamped; the simulation
    never steps past the newest input's command while inputs come."""
    loop = LockstepLoop(StampedAnswers(DELAY, input_lockstep=True))
    inputs: list[float] = []  # stamped from the simulated time of the first one sent
    j = 0
    wait = stalls[0]
    for _ in range(2000):
        loop.step(0 < j < len(stalls))   # live: the sender has begun and not ended
        # the sender: after its stall, the next input (in order)
        if j < len(stalls):
            if wait > 0:
                wait -= 1
            else:
                if not inputs:  # the session starts at the newest state's time
                    inputs = [(loop.n - 1) * PERIOD + k * 5 * PERIOD for k in range(len(stalls))]
                loop.give(inputs[j], j)
                j += 1
                if j < len(stalls):
                    wait = stalls[j]
        if j == len(stalls) and loop.answers.pending == 0:
            break
    out, answers = loop.out, loop.answers
    assert [a.payload for a in out] == list(range(len(stalls)))
    for a in out:
        assert isinstance(a, Answer) and not a.restamped, a
        assert a.acted_at_s == pytest.approx(inputs[a.payload])
        assert a.command_stamp_s == pytest.approx(inputs[a.payload] + DELAY)
        assert a.state.q[1] == pytest.approx(inputs[a.payload] + DELAY)
    assert answers.restamped == 0


def test_in_input_lockstep_the_markers_wait_for_the_input_while_it_is_live() -> None:
    answers: StampedAnswers[str] = StampedAnswers(DELAY, input_lockstep=True)
    assert answers.marker_stamp(1.0, input_live=True) == pytest.approx(1.0 + 0.25 * DELAY)
    answers.add_state(1.0, state(1.0))
    answers.add_input(1.0, "x")
    # far past the newest input: held at its command while the input is live ...
    assert answers.marker_stamp(3.0, input_live=True) == pytest.approx(1.0 + DELAY)
    # ... and a quarter delay ahead of the state again once it went silent
    assert answers.marker_stamp(3.0, input_live=False) == pytest.approx(3.0 + 0.25 * DELAY)
    # not in input lockstep: always the state's
    free: StampedAnswers[str] = StampedAnswers(DELAY)
    free.add_input(1.0, "x")
    assert free.marker_stamp(3.0, input_live=True) == pytest.approx(3.0 + 0.25 * DELAY)


def test_in_input_lockstep_an_input_behind_a_command_sent_is_restamped() -> None:
    """Late by more than half the delay, but its command still ahead of all that was sent:
    answered at its stamp; once a command at or past its own was sent: re-stamped."""
    answers: StampedAnswers[str] = StampedAnswers(DELAY, input_lockstep=True)
    for n in range(50):
        answers.add_state(n * PERIOD, state(n * PERIOD))
    (a,) = answers.add_input(0.35, "late but in time", sent_until_s=0.5)  # 0.14 s behind
    assert isinstance(a, Answer) and not a.restamped
    assert a.command_stamp_s == pytest.approx(0.35 + DELAY)
    assert a.state.q[1] == pytest.approx(0.35 + DELAY)
    (b,) = answers.add_input(0.36, "behind", sent_until_s=0.6)  # 0.56 <= 0.6: too late
    assert isinstance(b, Answer) and b.restamped and answers.restamped == 1
    assert b.acted_at_s == pytest.approx(0.49)
    assert b.command_stamp_s == pytest.approx(0.49 + DELAY)


def test_the_wait_for_input_ends_after_its_timeout_with_nothing_arriving_not_before() -> None:
    """InputWait (teleop_node's input_lockstep_timeout_s, wall time): the timeout counts from
    when the simulation began to wait or the last input came, whichever is later, so an input
    that came long before the wait (a player's lead) does not shorten it; once released, the
    simulation runs on until the next input, and the release is counted once."""
    wait = InputWait(3.0)
    assert wait.live(0.0)  # nothing held yet
    wait.input_came(0.0)
    wait.waiting(False, 5.0)
    assert wait.live(100.0)  # not held: however long since the input, nothing to release
    wait.waiting(True, 100.0)  # held from 100 s (the input came at 0 s: the player's lead)
    assert wait.live(102.9) and wait.releases == 0
    wait.input_came(102.0)  # an input while held: the count starts again from it
    assert wait.live(104.9)
    assert not wait.live(105.1) and wait.releases == 1
    wait.waiting(True, 106.0)
    assert not wait.live(106.0) and not wait.live(200.0) and wait.releases == 1  # released
    wait.input_came(201.0)  # the next session: waits again
    assert wait.live(201.0)
    wait.waiting(False, 202.0)
    wait.waiting(True, 210.0)
    assert wait.live(212.9) and not wait.live(213.1) and wait.releases == 2


def test_a_marker_held_for_the_input_is_said_so() -> None:
    answers: StampedAnswers[int] = StampedAnswers(DELAY, input_lockstep=True)
    assert not answers.holds_for_input(1.0)  # no input yet: nothing to wait for
    answers.add_input(1.0, 0)
    assert not answers.holds_for_input(1.0)  # the marker (1 + a quarter delay) within reach
    assert answers.holds_for_input(1.0 + DELAY)  # past the newest input's command
    assert not StampedAnswers(DELAY).holds_for_input(5.0)  # no lockstep
