"""sim_node takes every waiting command before it steps, over real DDS.

rclpy's executor takes one message per subscription per round, after the ready timer: a
simulation behind the wall clock steps a burst of periods in each call, so it took its commands
slower than they came and they aged in its own queue. On a loaded host that dropped the
joystick demo's live commands as older than ``max_command_age_s`` (the link had delivered them
at once) and let stamped ones miss their stamp. The test keeps sim_node busy from outside (it
follows the probe's /clock, and one clock jump is thousands of periods in one call), sends the
commands meanwhile, and reads the outcome from sim_node's own counters, not from any timing."""

from __future__ import annotations

from pathlib import Path

from diagnostic_msgs.msg import DiagnosticArray
from helpers import EVENT_WAIT_S, REPO, SMALL_SIM_ARGS, NodeProcess, RosTestNode, wait_for
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState

COMMANDS = 60
PERIOD_S = 0.01  # config/sim.yaml publish_rate_hz 100
JUMP_S = 40.0  # one /clock step [s of sim time]: 4000 periods in one callback


def _seconds(stamp: object) -> float:
    return stamp.sec + stamp.nanosec * 1e-9  # type: ignore[attr-defined]


def _sim_values(diagnostics: list[DiagnosticArray]) -> dict[str, str]:
    for array in reversed(diagnostics):
        for s in array.status:
            kv = {kv.key: kv.value for kv in s.values}
            if s.name.startswith("sim_node") and "commands_past_stamp" in kv:
                return kv
    return {}


def test_commands_queued_while_the_simulation_is_busy_are_all_taken_before_it_steps(
        tmp_path: Path) -> None:
    """sim_node follows the probe's /clock. A jump of JUMP_S keeps it stepping in one callback;
    meanwhile the probe sends COMMANDS commands stamped 0.1..0.4 s after the jump, then the
    next clock, 1 s further. Taken one per executor round, only the first would be taken before
    sim_node steps to that clock, the rest after their stamps (commands_past_stamp); taken all
    before stepping, every one waits for its stamp."""
    probe = RosTestNode("backlog_probe")
    states: list[JointState] = probe.collect(JointState, "joint_states", 1000)
    diagnostics: list[DiagnosticArray] = probe.collect(DiagnosticArray, "/diagnostics", 100)
    sim = NodeProcess("excavator_sim.sim_node",
                      ["--ros-args", "--params-file", str(REPO / "config" / "sim.yaml"),
                       "-p", "use_sim_time:=true", "-p", "follow_clock:=true", *SMALL_SIM_ARGS,
                       "-p", f"max_catch_up_s:={JUMP_S + 5.0}",
                       # the busy callback ages them on the wall clock: not this test's subject
                       "-p", "max_command_age_s:=60.0"], log_dir=tmp_path)
    clock = probe.node.create_publisher(Clock, "/clock", 10)

    def tick(t: float) -> None:
        msg = Clock()
        msg.clock.sec, msg.clock.nanosec = divmod(round(t * 1e9), 10**9)
        clock.publish(msg)

    def sim_time() -> float:
        return _seconds(states[-1].header.stamp) if states else -1.0

    try:
        cmd = probe.node.create_publisher(JointState, "joint_command", 100)
        t0 = 100.0
        wait_for(lambda: tick(t0) or (cmd.get_subscription_count() > 0
                                      and "following /clock" in sim.log()),
                 EVENT_WAIT_S, lambda: f"sim_node following /clock; its log:\n{sim.log()}",
                 period=0.1)
        tick(t0 + 1.0)
        wait_for(lambda: sim_time() >= t0 + 1.0, EVENT_WAIT_S, "sim_node at the second clock")
        jump = t0 + 1.0 + JUMP_S
        tick(jump)  # thousands of periods in one on_clock call
        wait_for(lambda: sim_time() > t0 + 1.0, EVENT_WAIT_S, "sim_node stepping the jump")
        for k in range(COMMANDS):
            msg = JointState()
            due = round(jump + 0.1 + k * PERIOD_S / 2, 3)
            msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(round(due * 1e9), 10**9)
            msg.name, msg.position = ["swing"], [0.001 * k]
            cmd.publish(msg)
        tick(jump + 1.0)
        busy = sim_time() < jump  # still in the jump's callback after all was sent
        wait_for(lambda: sim_time() >= jump + 1.0
                 and int(_sim_values(diagnostics).get("periods", 0)) > 0
                 and _sim_values(diagnostics).get("sim_time_s", "") == f"{jump + 1.0:.3f}",
                 EVENT_WAIT_S, lambda: f"sim_node at {jump + 1.0} s and its status then: "
                 f"{_sim_values(diagnostics)}; log:\n{sim.log()}", period=0.1)
        values = _sim_values(diagnostics)
    finally:
        probe.close()
        code = sim.stop()
    assert code == 0, sim.log()
    assert busy, f"sim_node stepped {JUMP_S} s before the commands were sent: raise JUMP_S"
    assert values["commands_past_stamp"] == "0", values  # none taken after its stamp
    assert values["commands_held"] == str(COMMANDS), values
    assert values["commands_expired"] == "0", values
