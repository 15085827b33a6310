"""Commands applied at their stamp in simulated time: the pure schedule
(``excavator_sim.command_schedule``) and sim_node over real DDS."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from helpers import EVENT_WAIT_S, REPO, SMALL_SIM_ARGS, NodeProcess, RosTestNode, wait_for
from hypothesis import given
from hypothesis import strategies as st
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState

from excavator_sim.command_schedule import CommandSchedule, StampTooFarAheadError

PERIOD = 0.01


@given(st.lists(st.floats(0.0, 0.9, allow_nan=False), min_size=1, max_size=30),
       st.floats(0.0, 5.0, allow_nan=False))
def test_commands_come_out_in_stamp_order_at_the_first_boundary_at_or_after_their_stamp(
        offsets: list[float], now: float) -> None:
    schedule: CommandSchedule[int] = CommandSchedule(max_lead_s=1.0)
    held = [k for k, dt in enumerate(offsets) if schedule.offer(now + dt, k, now)]
    assert schedule.pending == len(held) == schedule.held
    released: list[tuple[float, int]] = []
    t = now
    while schedule.pending:
        released += [(t, k) for k in schedule.due(t)]
        t += PERIOD
    order = [k for _, k in released]
    assert order == sorted(held, key=lambda k: (now + offsets[k], k))  # stamp, then arrival
    for at, k in released:
        stamp = now + offsets[k]
        assert stamp - 1e-9 <= at < stamp + PERIOD  # never early, at most one period late


def test_a_stamp_already_past_applies_at_once_and_is_counted_with_its_lateness() -> None:
    schedule: CommandSchedule[str] = CommandSchedule(max_lead_s=1.0)
    assert not schedule.offer(9.97, "late", now_s=10.0)
    assert not schedule.offer(10.0, "on time", now_s=10.0)
    assert schedule.past_stamp == 2 and schedule.held == 0 and schedule.pending == 0
    assert schedule.max_late_s == pytest.approx(0.03)


def test_a_stamp_beyond_the_lead_is_refused_with_the_parameter_to_change() -> None:
    schedule: CommandSchedule[str] = CommandSchedule(max_lead_s=1.0)
    with pytest.raises(StampTooFarAheadError, match=r"max_command_lead_s = 1 s.*use_sim_time"):
        schedule.offer(1.7e9, "wall clock", now_s=12.0)
    assert schedule.pending == 0


def _seconds(stamp: object) -> float:
    return stamp.sec + stamp.nanosec * 1e-9  # type: ignore[attr-defined]


def test_sim_node_applies_a_command_stamped_ahead_at_its_stamp(tmp_path: Path) -> None:
    probe = RosTestNode("schedule_probe")
    states: list[JointState] = probe.collect(JointState, "joint_states", 1000)
    clocks: list[Clock] = probe.collect(Clock, "/clock", 100)
    sim = NodeProcess("excavator_sim.sim_node",
                      ["--ros-args", "--params-file", str(REPO / "config" / "sim.yaml"),
                       "-p", "use_sim_time:=true", *SMALL_SIM_ARGS], log_dir=tmp_path)
    try:
        cmd = probe.node.create_publisher(JointState, "joint_command", 10)
        wait_for(lambda: clocks and states and cmd.get_subscription_count() > 0, EVENT_WAIT_S,
                 lambda: f"sim_node; its log:\n{sim.log()}")
        now = _seconds(clocks[-1].clock)
        due = round(now + 0.6, 2)  # on the period grid
        msg = JointState()
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(round(due * 1e9), 10**9)
        msg.name, msg.position = ["swing"], [0.5]
        cmd.publish(msg)
        wait_for(lambda: _seconds(clocks[-1].clock) > due + 1.0, EVENT_WAIT_S, "sim time")
        # a wall-clock stamp (a node without use_sim_time) applies on arrival, as before
        wall = JointState()
        wall.header.stamp.sec = int(time.time())
        wall.name, wall.position = ["swing"], [-0.5]
        cmd.publish(wall)
        t_wall = _seconds(clocks[-1].clock)
        wait_for(lambda: _seconds(clocks[-1].clock) > t_wall + 1.0, EVENT_WAIT_S, "sim time")
        seen = [(_seconds(m.header.stamp), dict(zip(m.name, m.velocity, strict=False))["swing"],
                 dict(zip(m.name, m.position, strict=False))["swing"]) for m in list(states)]
    finally:
        probe.close()
        code = sim.stop()
    assert code == 0, sim.log()
    before = [abs(v) for t, v, _ in seen if now - 0.1 < t <= due]
    after = [abs(v) for t, v, _ in seen if due + 0.05 < t < due + 0.3]
    assert before and max(before) < 1e-3  # held: not applied on arrival
    assert after and max(after) > 0.05  # swinging once its stamp came
    assert min(v for t, v, _ in seen if t > t_wall + 0.1) < -0.05  # the wall-stamped one acts
    assert "applying such commands on arrival" in sim.log()
