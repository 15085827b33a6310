"""sim_node in lockstep with a scheduled command stream (``command_lockstep_timeout_s``): the
pure rule, then sim_node in its own process with this test as the scheduled sender (commands
stamped ahead, as teleop_node's with ``command_delay_s``): the simulated time stops where the
stream stops, moves on as far as each new command allows, runs on alone after the timeout (WARN)
and locks again when commands come back. Holds on any host: the judgement is on the stamps."""

from __future__ import annotations

import time

import pytest
from diagnostic_msgs.msg import DiagnosticArray
from helpers import EVENT_WAIT_S, STARTUP_TIMEOUT_S, RosTestNode, wait_for
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState
from test_soil_lockstep import (
    clock_now,
    lockstep_sim_node,
    running_status,
    runs_alone_then_locks_again,
    time_stands,
)

from excavator_sim.command_lockstep import CommandLockstep
from excavator_sim.errors import SimConfigError
from excavator_sim.sim_config import SIM_PARAMETERS

PERIOD_S = 0.01  # config/sim.yaml publish_rate_hz 100
LEAD_S = 0.2  # the sender's lead (teleop_node's command_delay_s) [s of sim time]
TIMEOUT_S = 5.0  # [s] long enough for the checks of a held period on a loaded host
POSE = {"swing": 0.0, "boom": 0.5236, "arm": -1.0472, "bucket": 1.2217}  # the initial pose


# --- the rule ------------------------------------------------------------------------------
def test_nothing_is_awaited_before_the_first_held_command() -> None:
    lock = CommandLockstep(timeout_s=0.5)
    for k in range(100):  # ik_node's commands (stamped when sent) never engage it
        assert lock.may_step(0.01 * k, 10.0)
    assert lock.waits == 0 and lock.values()["command_lockstep"] == "on"


def test_a_period_waits_for_a_command_stamped_at_or_after_its_start() -> None:
    lock = CommandLockstep(timeout_s=0.5)
    lock.held(1.20)
    assert lock.may_step(1.19, 100.0) and lock.may_step(1.20, 100.0)  # the command of T is in
    assert not lock.may_step(1.21, 100.0) and lock.waiting and lock.waits == 1
    assert not lock.may_step(1.21, 100.4)
    lock.held(1.22)
    assert lock.may_step(1.21, 100.45) and not lock.waiting
    assert lock.timeouts == 0 and lock.wait_s.percentiles()[2] == pytest.approx(0.45)


def test_a_silent_sender_costs_one_timeout_then_a_held_command_locks_it_again() -> None:
    lock = CommandLockstep(timeout_s=0.5)
    lock.held(1.0)
    assert not lock.may_step(1.01, 10.0)
    assert lock.may_step(1.01, 10.5) and lock.detached and lock.timeouts == 1
    for k in range(2, 50):  # the session is over: the simulation runs on without waiting
        assert lock.may_step(1.0 + 0.01 * k, 10.5)
    assert lock.values()["command_lockstep"] == "detached"
    lock.held(2.0)  # a new session's first command, held for its stamp
    assert not lock.detached and lock.may_step(1.5, 11.0)
    assert not lock.may_step(2.01, 11.0)
    assert lock.values()["command_lockstep_timeouts"] == 1


def test_a_marker_already_past_engages_it_and_the_sender_is_awaited() -> None:
    """A scheduled sender starved from its start: its time markers reach the simulation past
    their stamps. The first one engages the lockstep all the same, so the session's first
    command is awaited instead of coming past its stamp (ci87)."""
    lock = CommandLockstep(timeout_s=0.5)
    assert lock.may_step(3.00, 10.0)      # nothing known to come yet
    lock.sender_behind(2.80)               # a marker 0.2 s behind the simulated time
    assert not lock.may_step(3.01, 10.0) and lock.waiting
    lock.sender_behind(2.90)               # still behind: still waiting
    assert not lock.may_step(3.01, 10.2)
    lock.held(3.05)                         # caught up: ahead of the period
    assert lock.may_step(3.01, 10.3) and lock.timeouts == 0


def test_off_never_waits() -> None:
    lock = CommandLockstep(timeout_s=0.0)
    lock.held(1.0)
    assert lock.may_step(5.0, 0.0) and lock.waits == 0
    assert lock.values() == {"command_lockstep": "off"}


@pytest.mark.parametrize(("other", "value", "needs"), [
    ("follow_clock", True, "follow_clock false"),
    ("max_command_lead_s", 0.0, "max_command_lead_s > 0")])
def test_lockstep_without_a_schedule_or_with_a_follower_is_refused(other: str, value: object,
                                                                    needs: str) -> None:
    with pytest.raises(SimConfigError) as err:
        SIM_PARAMETERS.validate({"command_lockstep_timeout_s": 2.0, other: value})
    text = str(err.value)
    assert "command_lockstep_timeout_s = 2 s" in text and needs in text
    assert "set command_lockstep_timeout_s to 0" in text


# --- sim_node over DDS -------------------------------------------------------------------
def test_sim_node_waits_for_the_scheduled_commands(tmp_path) -> None:
    proc = lockstep_sim_node(tmp_path, f"command_lockstep_timeout_s:={TIMEOUT_S}")
    probe = RosTestNode("command_lockstep_probe")
    diagnostics: list[DiagnosticArray] = probe.collect(DiagnosticArray, "/diagnostics")
    command = probe.node.create_publisher(JointState, "joint_command", 100)
    sent: list[float] = []
    sending = [False]

    def send(stamp_s: float) -> None:
        msg = JointState()
        ns = round(stamp_s * 1e9)
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(ns, 1_000_000_000)
        msg.name = list(POSE)
        msg.position = list(POSE.values())
        command.publish(msg)
        sent.append(stamp_s)

    clock: list[Clock] = []

    def on_clock(msg: Clock) -> None:  # the scheduled sender: every 20 ms, LEAD_S ahead
        clock.append(msg)
        t = round(clock_now(clock) / PERIOD_S) * PERIOD_S
        if sending[0] and (not sent or t + LEAD_S >= sent[-1] + 0.02 - 1e-9):
            send(t + LEAD_S)

    probe.node.create_subscription(Clock, "/clock", on_clock, 100)
    try:
        wait_for(lambda: clock and clock_now(clock) > 1.0, STARTUP_TIMEOUT_S, proc.log)
        # before any command it runs on its own: no wait, no timeout at start-up
        _, before = wait_for(lambda: (s := running_status(diagnostics)) and s,
                             EVENT_WAIT_S, proc.log)
        assert before["command_lockstep"] == "on" and before["command_lockstep_waits"] == "0"
        sending[0] = True
        wait_for(lambda: len(sent) > 50, EVENT_WAIT_S, "the sender's commands")
        sending[0] = False  # the sender falls silent: time stops at its last stamp

        # the period starting at the last stamp steps (its command is in), the next waits
        held = time_stands(clock, lambda: sent[-1] + PERIOD_S)
        time.sleep(1.0)  # well inside the timeout
        assert clock_now(clock) == held, "the simulation stepped past the scheduled commands"
        for _ in (1, 2):  # each command releases the periods up to its stamp
            send(sent[-1] + 0.05)
            wait_for(lambda: clock_now(clock) >= sent[-1] + PERIOD_S - 1e-9, EVENT_WAIT_S,
                     f"the periods up to the command stamped {sent[-1]:.3f} s")
            time.sleep(0.3)
            assert clock_now(clock) == pytest.approx(sent[-1] + PERIOD_S, abs=1e-9)
        _, waiting = wait_for(lambda: (s := running_status(diagnostics)) and s,
                              EVENT_WAIT_S, proc.log)
        assert int(waiting["commands_past_stamp"]) == 0, waiting   # none late: it waited
        assert int(waiting["commands_held"]) >= 50

        # no command for the timeout: it runs on alone, and says so; the sender back: locked
        runs_alone_then_locks_again(clock, diagnostics, "command_lockstep", 1,
                                    lambda: sending.__setitem__(0, True))
    finally:
        probe.close()
        code = proc.stop()
    assert code == 0, proc.log()
